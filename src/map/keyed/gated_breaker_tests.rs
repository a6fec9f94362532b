//! The scheduler of a map with shared limits and a breaker per key: a key asks for a permit
//! only for a start its breaker would let happen, and gives back the permits it holds when
//! its breaker opens (the two phases of a start).

use super::tests::{MS, drain, drain_at};
use super::*;

/// A map with shared limits and a breaker per key (items of an open key fail, or wait with
/// `fails` false), whose breakers open at their first failure for a second.
fn gated_with_breaker(fails: bool) -> KeyScheduler<&'static str, i32> {
    use crate::limit::breaker::config::Breaker;
    let mut scheduler = KeyScheduler::new(2);
    scheduler.set_gated();
    let breaker = Breaker::new()
        .min_attempts(1)
        .open_for(std::time::Duration::from_secs(1));
    scheduler.set_breaker(super::super::MapBreaker::new(breaker, fails));
    scheduler
}

/// Starts `key`'s next item with a permit and asks for another while it runs: the ticket
/// of the started attempt.
fn start_and_hold_a_permit(
    scheduler: &mut KeyScheduler<&'static str, i32>,
    key: &'static str,
) -> crate::limit::breaker::core::Ticket {
    assert_eq!(scheduler.next_ask(0), Some(key));
    assert!(scheduler.grant(&key, 0));
    assert_eq!(drain(scheduler).len(), 1);
    let ticket = scheduler.take_granted().expect("a breaker permit");
    assert_eq!(scheduler.next_ask(0), Some(key));
    assert!(scheduler.grant(&key, 0));
    assert_eq!(scheduler.granted(), 1);
    ticket
}

#[test]
fn a_permit_granted_before_the_breaker_opened_goes_back_and_an_open_key_asks_for_none() {
    for fails in [true, false] {
        let mut scheduler = gated_with_breaker(fails);
        for item in 0..3 {
            scheduler.push("a", item, 0);
        }
        let ticket = start_and_hold_a_permit(&mut scheduler, "a");
        // The attempt fails: the breaker opens, with a permit in hand for item 1.
        scheduler.broke(&"a", ticket, false, MS);
        scheduler.finish(&"a", MS);
        let next = scheduler.next(MS);
        if fails {
            assert!(matches!(next, Next::Refused("a", 1, _)), "{next:?}");
            assert!(matches!(scheduler.next(MS), Next::Refused("a", 2, _)));
        } else {
            assert_eq!(
                next,
                Next::NotBefore(MS + 1_000 * MS),
                "waits out the open period"
            );
        }
        assert_eq!(scheduler.take_returned(), ["a"], "fails: {fails}");
        assert_eq!(scheduler.granted(), 0, "the permit is given back, not held");
        assert_eq!(
            scheduler.next_ask(MS),
            None,
            "no ask while the breaker is open"
        );
        assert!(scheduler.take_returned().is_empty());
    }
}

#[test]
fn a_half_open_key_asks_for_its_probe_and_a_closed_one_goes_on() {
    let mut scheduler = gated_with_breaker(false);
    for item in 0..3 {
        scheduler.push("a", item, 0);
    }
    let ticket = start_and_hold_a_permit(&mut scheduler, "a");
    scheduler.broke(&"a", ticket, false, MS);
    scheduler.finish(&"a", MS);
    assert!(matches!(scheduler.next(MS), Next::NotBefore(_)));
    assert_eq!(scheduler.take_returned(), ["a"]);
    // The open period is over: the key asks for one permit, for its probe.
    let half_open = MS + 1_000 * MS;
    assert_eq!(scheduler.next_ask(half_open), Some("a"));
    assert!(scheduler.grant(&"a", half_open));
    assert_eq!(drain_at(&mut scheduler, half_open), [("a", 1)]);
    let probe = scheduler.take_granted().expect("the probe's permit");
    assert_eq!(
        scheduler.next_ask(half_open),
        None,
        "no ask while the probe is out"
    );
    scheduler.broke(&"a", probe, true, half_open + MS);
    scheduler.finish(&"a", half_open + MS);
    assert_eq!(
        scheduler.next_ask(half_open + MS),
        Some("a"),
        "closed: on with item 2"
    );
}
