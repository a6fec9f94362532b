//! Unit tests of the key scheduler: turns, rates, pauses, the retry budget, asks to
//! shared limits, and the default and own settings of keys.

use super::super::budget::BUDGET_MEMORY;
use super::*;
use crate::limit::hint::Hint;
use crate::limit::rate::Rate;

pub(super) const MS: u64 = 1_000_000;

pub(super) fn drain<K: Hash + Eq + Clone, T>(scheduler: &mut KeyScheduler<K, T>) -> Vec<(K, T)> {
    drain_at(scheduler, 0)
}

pub(super) fn drain_at<K: Hash + Eq + Clone, T>(
    scheduler: &mut KeyScheduler<K, T>,
    now: u64,
) -> Vec<(K, T)> {
    std::iter::from_fn(|| match scheduler.next(now) {
        Next::Start(key, item) => Some((key, item)),
        _ => None,
    })
    .collect()
}

#[test]
fn a_full_key_waits_while_others_start() {
    let mut scheduler = KeyScheduler::new(2);
    for (key, item) in [("a", 1), ("a", 2), ("a", 3), ("b", 4)] {
        scheduler.push(key, item, 0);
    }
    assert_eq!(drain(&mut scheduler), [("a", 1), ("b", 4), ("a", 2)]);
    assert_eq!(scheduler.waiting(), 1, "a is full");
    scheduler.finish(&"a", 0);
    assert_eq!(drain(&mut scheduler), [("a", 3)]);
    assert_eq!(scheduler.waiting(), 0);
}

#[test]
fn a_running_key_with_room_gets_a_turn_for_its_next_item() {
    let mut scheduler = KeyScheduler::new(2);
    scheduler.push("a", 1, 0);
    assert_eq!(drain(&mut scheduler), [("a", 1)]);
    // "a" runs one of two: its next item may start at once, without a finish first.
    scheduler.push("a", 2, 0);
    assert_eq!(drain(&mut scheduler), [("a", 2)]);
    scheduler.push("a", 3, 0);
    assert!(drain(&mut scheduler).is_empty(), "a is full now");
}

#[test]
fn order_within_a_key_is_kept() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.push("a", 1, 0);
    scheduler.push("a", 2, 0);
    assert_eq!(drain(&mut scheduler), [("a", 1)]);
    scheduler.push("a", 3, 0);
    scheduler.finish(&"a", 0);
    assert_eq!(drain(&mut scheduler), [("a", 2)]);
    scheduler.finish(&"a", 0);
    assert_eq!(drain(&mut scheduler), [("a", 3)]);
}

#[test]
fn keys_take_turns_even_when_sorted() {
    let mut scheduler = KeyScheduler::new(2);
    for key in ["a", "b", "c"] {
        for item in 0..4 {
            scheduler.push(key, item, 0);
        }
    }
    // Take one start at a time, as a global limit of 1 would.
    let mut order = Vec::new();
    while let Next::Start(key, _) = scheduler.next(0) {
        order.push(key);
        scheduler.finish(&key, 0);
    }
    assert_eq!(
        order,
        ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"]
    );
}

#[test]
fn idle_keys_are_forgotten() {
    let mut scheduler = KeyScheduler::new(1);
    for key in 0..1000 {
        scheduler.push(key, (), 0);
        assert!(matches!(scheduler.next(0), Next::Start(..)));
        scheduler.finish(&key, 0);
    }
    assert_eq!(scheduler.active_keys(), 0);
    assert!(scheduler.lines.turns.is_empty());
}

#[test]
fn a_keys_rate_spaces_its_starts_and_others_go_meanwhile() {
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_default_rate(Gcra::new(Rate::per_second(10)));
    for item in 0..3 {
        scheduler.push("a", item, 0);
    }
    scheduler.push("b", 9, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 0), ("b", 9)]);
    assert_eq!(scheduler.next(0), Next::NotBefore(100 * MS));
    assert_eq!(scheduler.next(99 * MS), Next::NotBefore(100 * MS));
    assert_eq!(drain_at(&mut scheduler, 100 * MS), [("a", 1)]);
    assert_eq!(drain_at(&mut scheduler, 250 * MS), [("a", 2)]);
}

#[test]
fn a_key_with_a_rate_is_remembered_until_the_rate_forgets() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_default_rate(Gcra::new(Rate::per_second(10)));
    scheduler.push("a", 1, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
    scheduler.finish(&"a", MS);
    assert_eq!(scheduler.active_keys(), 1, "its rate is still in force");
    // Coming back within the interval must wait for it.
    scheduler.push("a", 2, 2 * MS);
    assert_eq!(scheduler.next(2 * MS), Next::NotBefore(100 * MS));
    assert_eq!(drain_at(&mut scheduler, 100 * MS), [("a", 2)]);
    scheduler.finish(&"a", 300 * MS);
    assert_eq!(scheduler.active_keys(), 0);
}

#[test]
fn the_maps_rate_holds_every_key() {
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_rate(Gcra::new(Rate::per_second(10).burst(2)));
    for key in ["a", "b", "c"] {
        scheduler.push(key, (), 0);
    }
    assert_eq!(drain_at(&mut scheduler, 0).len(), 2);
    assert_eq!(scheduler.next(0), Next::NotBefore(100 * MS));
    assert_eq!(drain_at(&mut scheduler, 100 * MS), [("c", ())]);
}

#[test]
fn a_retry_waits_for_its_time_without_holding_the_key() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.push("a", 1, 0);
    scheduler.push("a", 2, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
    // Item 1 failed: it comes back at 50 ms; item 2 takes the key meanwhile.
    scheduler.retry(&"a", 1, 0, 50 * MS, 10 * MS);
    assert_eq!(drain_at(&mut scheduler, 10 * MS), [("a", 2)]);
    scheduler.finish(&"a", 20 * MS);
    assert_eq!(scheduler.next(20 * MS), Next::NotBefore(50 * MS));
    assert_eq!(drain_at(&mut scheduler, 50 * MS), [("a", 1)]);
    assert_eq!(scheduler.waiting(), 0);
}

#[test]
fn a_due_retry_goes_before_fresh_items() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.push("a", 1, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
    scheduler.push("a", 2, 0);
    scheduler.retry(&"a", 1, 0, 0, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
}

#[test]
fn a_paused_key_starts_nothing_until_the_pause_ends() {
    let mut scheduler = KeyScheduler::new(4);
    scheduler.push("a", 1, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
    scheduler.push("a", 2, 0);
    scheduler.push("b", 3, 0);
    scheduler.pause(&"a", 1_000 * MS, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("b", 3)]);
    assert_eq!(scheduler.next(500 * MS), Next::NotBefore(1_000 * MS));
    assert_eq!(drain_at(&mut scheduler, 1_000 * MS), [("a", 2)]);
}

#[test]
fn the_retry_budget_allows_a_share_of_first_attempts_plus_a_floor() {
    let mut scheduler = KeyScheduler::new(100);
    scheduler.set_budget(0.2, 3);
    for item in 0..10 {
        scheduler.push("a", item, 0);
    }
    // The floor at once, whatever the first attempts.
    assert!(matches!(scheduler.next(0), Next::Start(..)));
    let granted = (0..100).filter(|_| scheduler.take_retry(&"a")).count();
    assert_eq!(granted, 3);
    // Then one retry per 5 first attempts.
    assert_eq!(drain_at(&mut scheduler, 0).len(), 9);
    let granted = (0..100).filter(|_| scheduler.take_retry(&"a")).count();
    assert_eq!(granted, 1);
}

#[test]
fn raising_the_default_key_limit_gives_full_keys_their_turn() {
    let mut scheduler = KeyScheduler::new(1);
    for item in 0..3 {
        scheduler.push("a", item, 0);
    }
    assert_eq!(drain(&mut scheduler), [("a", 0)]);
    scheduler.set_default_limit(3, 0);
    assert_eq!(drain(&mut scheduler), [("a", 1), ("a", 2)]);
    scheduler.set_default_limit(1, 0);
    scheduler.finish(&"a", 0);
    scheduler.push("a", 3, 0);
    assert!(
        drain(&mut scheduler).is_empty(),
        "two still run, above the new limit of 1"
    );
    scheduler.finish(&"a", 0);
    scheduler.finish(&"a", 0);
    assert_eq!(drain(&mut scheduler), [("a", 3)]);
}

#[test]
fn a_faster_default_key_rate_wakes_a_sleeping_key_earlier() {
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_default_rate(Gcra::new(Rate::per_second(1)));
    scheduler.push("a", 0, 0);
    scheduler.push("a", 1, 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 0)]);
    assert_eq!(scheduler.next(0), Next::NotBefore(1_000 * MS));
    // 999 ms ahead at 1/s is 9.99 ms ahead at 100/s.
    scheduler.change_default_rate(Gcra::new(Rate::per_second(100)), MS);
    assert_eq!(scheduler.next(MS), Next::NotBefore(MS + 9_990_000));
    assert!(matches!(scheduler.next(20 * MS), Next::Start("a", 1)));
}

#[test]
fn taking_the_fresh_items_leaves_the_retries() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.push("a", 0, 0);
    scheduler.push("a", 1, 0);
    scheduler.push("b", 2, 0);
    assert_eq!(drain(&mut scheduler), [("a", 0), ("b", 2)]);
    scheduler.retry(&"a", 0, 0, 0, 0);
    let mut taken = scheduler.take_fresh();
    taken.sort_unstable();
    assert_eq!(taken, [1]);
    assert_eq!(scheduler.waiting(), 1);
    assert_eq!(drain(&mut scheduler), [("a", 0)]);
    assert_eq!(scheduler.waiting(), 0);
}

#[test]
fn the_busiest_keys_come_first() {
    let mut scheduler = KeyScheduler::new(1);
    for (key, items) in [("a", 2), ("b", 5), ("c", 1), ("d", 3)] {
        for item in 0..items {
            scheduler.push(key, item, 0);
        }
    }
    scheduler.pause(&"c", 10, 0);
    let (paused, _open, busiest) = scheduler.busiest(0, 2);
    assert_eq!(paused, 1);
    let busiest: Vec<_> = busiest
        .iter()
        .map(|key| {
            (
                *key.key(),
                key.waiting(),
                key.in_flight(),
                key.is_paused(),
                key.limit(),
            )
        })
        .collect();
    assert_eq!(busiest, [("b", 5, 0, false, 1), ("d", 3, 0, false, 1)]);
}

#[test]
fn a_key_with_budget_spent_is_remembered() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_budget(0.5, 1);
    scheduler.push("a", 1, 0);
    assert!(matches!(scheduler.next(0), Next::Start(..)));
    assert!(scheduler.take_retry(&"a"));
    scheduler.finish(&"a", 0);
    assert_eq!(scheduler.active_keys(), 1, "its spent budget is remembered");
    scheduler.push("a", 2, 0);
    assert!(matches!(scheduler.next(0), Next::Start(..)));
    assert!(!scheduler.take_retry(&"a"), "half a retry is not one");
}

#[test]
fn five_first_attempts_at_a_ratio_of_a_fifth_pay_for_one_retry() {
    // Before, 10 − 5 × 0.2 was 9.000000000000004 in floating point: one retry per 6.
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_budget(0.2, 10);
    scheduler.push(0, (), 0);
    assert_eq!(scheduler.next(0), Next::Start(0, ()));
    assert_eq!((0..20).filter(|_| scheduler.take_retry(&0)).count(), 10);
    scheduler.finish(&0, 0);
    for round in 0..100 {
        for _ in 0..4 {
            assert!(!one_item(&mut scheduler, 0, true), "round {round}");
        }
        assert!(one_item(&mut scheduler, 0, true), "round {round}");
    }
}

/// One item of `key` starts and finishes at `now`; `retry`: its attempt failed and
/// asks the budget for a retry (which is then started and finishes). Returns whether
/// the budget allowed the retry.
fn one_item(scheduler: &mut KeyScheduler<u64, ()>, key: u64, retry: bool) -> bool {
    scheduler.push(key, (), 0);
    assert_eq!(scheduler.next(0), Next::Start(key, ()));
    let retried = retry && scheduler.take_retry(&key);
    if retried {
        scheduler.retry(&key, (), 0, 0, 0);
        assert_eq!(scheduler.next(0), Next::Start(key, ()));
    }
    scheduler.finish(&key, 0);
    retried
}

#[test]
fn keys_that_spent_their_budget_are_forgotten_within_the_budget_memory() {
    // One key per item, each retried once: before, every key stayed for the rest of
    // the run (100,000 keys here).
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_budget(0.5, 1);
    let mut most = 0;
    for key in 0..100_000 {
        assert!(one_item(&mut scheduler, key, true), "its floor");
        most = most.max(scheduler.active_keys());
    }
    // Kept: the keys of the last BUDGET_MEMORY items, and at most as many again
    // between two sweeps.
    assert!(most <= 2 * BUDGET_MEMORY as usize + 64, "{most} keys");
}

#[test]
fn a_spent_budget_holds_while_its_key_comes_back_within_the_budget_memory() {
    // Key 0 may retry once, ever (floor 1, ratio 0), while thousands of other keys
    // come and go between its items and are swept.
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_budget(0.0, 1);
    let mut retries = 0;
    for round in 0..10u64 {
        retries += u64::from(one_item(&mut scheduler, 0, true));
        for other in 1..1_000 {
            one_item(&mut scheduler, round * 1_000 + other, other % 2 == 0);
        }
    }
    assert_eq!(
        retries, 1,
        "the floor, once: its spent budget was remembered"
    );
}

#[test]
fn a_spent_budget_lapses_once_its_key_stays_away_for_the_budget_memory() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_budget(0.0, 1);
    assert!(one_item(&mut scheduler, 0, true));
    assert!(!one_item(&mut scheduler, 0, true), "spent");
    // Away for BUDGET_MEMORY items: it comes back afresh, with its floor.
    for other in 1..=BUDGET_MEMORY {
        one_item(&mut scheduler, other, false);
    }
    assert!(
        scheduler.keys.contains_key(&0),
        "no sweep since: still there"
    );
    assert!(one_item(&mut scheduler, 0, true), "afresh");
    assert!(!one_item(&mut scheduler, 0, true), "spent");
    // Away for longer, among keys that spend their budget too (the map sweeps):
    // forgotten, and afresh again.
    for other in 1..=3 * BUDGET_MEMORY {
        one_item(&mut scheduler, other, true);
    }
    assert!(!scheduler.keys.contains_key(&0), "swept");
    assert!(one_item(&mut scheduler, 0, true), "afresh");
    // Away for fewer: not afresh.
    for other in 0..BUDGET_MEMORY / 2 {
        one_item(&mut scheduler, 1_000_000 + other, true);
    }
    assert!(
        !one_item(&mut scheduler, 0, true),
        "spent again, and remembered"
    );
}

#[test]
fn a_gated_key_asks_once_and_starts_only_with_a_permit() {
    let mut scheduler = KeyScheduler::new(2);
    scheduler.set_gated();
    for item in 0..3 {
        scheduler.push("a", item, 0);
    }
    scheduler.push("b", 9, 0);
    assert!(
        drain(&mut scheduler).is_empty(),
        "nothing starts without a permit"
    );
    assert_eq!(scheduler.next_ask(0), Some("a"));
    assert_eq!(scheduler.next_ask(0), Some("b"));
    assert_eq!(scheduler.next_ask(0), None, "one ask per key at a time");
    assert!(scheduler.grant(&"a", 0));
    assert_eq!(scheduler.granted(), 1);
    assert_eq!(drain(&mut scheduler), [("a", 0)]);
    assert_eq!(scheduler.granted(), 0);
    // "a" runs one of two: it may ask for its next item.
    assert_eq!(scheduler.next_ask(0), Some("a"));
    assert!(scheduler.grant(&"a", 0));
    assert_eq!(drain(&mut scheduler), [("a", 1)]);
    assert_eq!(scheduler.next_ask(0), None, "a is full, b still asks");
}

#[test]
fn a_key_told_later_sleeps_until_then_or_until_woken() {
    let mut scheduler = KeyScheduler::new(4);
    scheduler.set_gated();
    scheduler.push("a", 1, 0);
    scheduler.push("b", 2, 0);
    assert_eq!(scheduler.next_ask(0), Some("a"));
    scheduler.later(&"a", 50 * MS, LaterReason::Busy, 0);
    assert_eq!(scheduler.next_ask(0), Some("b"), "other keys ask meanwhile");
    assert_eq!(scheduler.next_ask(10 * MS), None);
    assert_eq!(scheduler.next(10 * MS), Next::NotBefore(50 * MS));
    assert_eq!(scheduler.next_ask(50 * MS), Some("a"));
    scheduler.later(&"a", 90 * MS, LaterReason::Busy, 50 * MS);
    scheduler.wake_asker(&"a", 60 * MS);
    assert_eq!(
        scheduler.next_ask(60 * MS),
        Some("a"),
        "woken before its time"
    );
}

#[test]
fn a_failed_ask_hands_out_the_keys_next_item_as_running() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_gated();
    scheduler.push("a", 1, 0);
    scheduler.push("a", 2, 0);
    assert_eq!(scheduler.next_ask(0), Some("a"));
    assert_eq!(scheduler.ask_failed(&"a", 0), Some(1));
    assert_eq!(scheduler.waiting(), 1);
    assert_eq!(scheduler.next_ask(0), None, "its item counts as running");
    scheduler.finish(&"a", 0);
    assert_eq!(scheduler.next_ask(0), Some("a"));
}

#[test]
fn permits_for_items_a_drain_took_come_back() {
    let mut scheduler = KeyScheduler::new(2);
    scheduler.set_gated();
    scheduler.push("a", 1, 0);
    scheduler.push("a", 2, 0);
    assert_eq!(scheduler.next_ask(0), Some("a"));
    assert!(scheduler.grant(&"a", 0));
    assert_eq!(scheduler.take_fresh().len(), 2);
    assert_eq!(scheduler.take_surplus(), [("a", 1)]);
    assert_eq!(scheduler.granted(), 0);
    // A grant arriving for a key with nothing left is not kept.
    scheduler.push("b", 3, 0);
    assert_eq!(scheduler.next_ask(0), Some("b"));
    assert_eq!(scheduler.take_fresh().len(), 1);
    assert!(!scheduler.grant(&"b", 0));
}

#[test]
fn a_key_forgotten_while_in_line_is_skipped() {
    // Gated: in line to ask, drained, its last item finished.
    let mut scheduler = KeyScheduler::new(2);
    scheduler.set_gated();
    scheduler.push("k", 1, 0);
    assert_eq!(scheduler.next_ask(0), Some("k"));
    assert!(scheduler.grant(&"k", 0));
    assert_eq!(drain(&mut scheduler), [("k", 1)]);
    scheduler.push("k", 2, 0);
    assert_eq!(scheduler.take_fresh().len(), 1);
    assert!(scheduler.take_surplus().is_empty());
    scheduler.finish(&"k", 0);
    assert_eq!(scheduler.next_ask(0), None);
    // Not gated: the same in line for a turn.
    let mut scheduler = KeyScheduler::new(2);
    scheduler.push("k", 1, 0);
    assert_eq!(scheduler.next(0), Next::Start("k", 1));
    scheduler.push("k", 2, 0);
    assert_eq!(scheduler.take_fresh().len(), 1);
    scheduler.finish(&"k", 0);
    assert_eq!(scheduler.next(0), Next::Nothing);
}

#[test]
fn keys_ask_only_for_the_starts_the_maps_rate_allows() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.set_gated();
    scheduler.set_rate(Gcra::new(Rate::per_second(10).burst(2)));
    for key in ["a", "b", "c"] {
        scheduler.push(key, (), 0);
    }
    assert_eq!(scheduler.next_ask(0), Some("a"));
    assert_eq!(scheduler.next_ask(0), Some("b"));
    assert_eq!(scheduler.next_ask(0), None, "the burst is asked for");
    assert!(scheduler.grant(&"a", 0));
    scheduler.later(&"b", 0, LaterReason::Busy, 0);
    assert_eq!(drain(&mut scheduler), [("a", ())]);
    // One start of the burst left: one ask.
    let asker = scheduler.next_ask(2 * MS).expect("one more start allowed");
    assert_eq!(scheduler.next_ask(2 * MS), None);
    assert!(scheduler.grant(&asker, 2 * MS));
    assert_eq!(drain_at(&mut scheduler, 2 * MS), [(asker, ())]);
    // The burst is spent and a key waits to ask: the rate's time is the map's timer.
    assert_eq!(scheduler.next(2 * MS), Next::NotBefore(100 * MS));
    assert!(scheduler.next_ask(100 * MS).is_some());
}

#[test]
fn a_default_limit_change_reaches_keys_that_follow_it_only() {
    let mut scheduler = KeyScheduler::new(1);
    for key in ["a", "b"] {
        for item in 0..4 {
            scheduler.push(key, item, 0);
        }
    }
    scheduler.set_own("b", KeySettings::new().limit(1), 0);
    assert_eq!(drain(&mut scheduler), [("a", 0), ("b", 0)]);
    scheduler.set_default_limit(3, 0);
    assert_eq!(
        drain(&mut scheduler),
        [("a", 1), ("a", 2)],
        "b keeps its own limit of 1"
    );
    // A key of its own limit takes that limit, whatever the default.
    scheduler.set_own("b", KeySettings::new().limit(2), 0);
    assert_eq!(drain(&mut scheduler), [("b", 1)]);
    scheduler.set_default_limit(4, 0);
    assert_eq!(drain(&mut scheduler), [("a", 3)]);
    assert!(drain(&mut scheduler).is_empty(), "b runs its own 2");
}

#[test]
fn a_default_rate_change_reaches_keys_that_follow_it_only() {
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_default_rate(Gcra::new(Rate::per_second(1)));
    for key in ["a", "b"] {
        scheduler.push(key, 0, 0);
        scheduler.push(key, 1, 0);
    }
    scheduler.set_own("b", KeySettings::new().rate(Rate::per_second(1)), 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 0), ("b", 0)]);
    assert_eq!(scheduler.next(0), Next::NotBefore(1_000 * MS));
    // 100/s for the keys that follow the default: a is due 10 ms after its start; b
    // keeps its own 1/s.
    scheduler.change_default_rate(Gcra::new(Rate::per_second(100)), 0);
    assert_eq!(scheduler.next(0), Next::NotBefore(10 * MS));
    assert_eq!(drain_at(&mut scheduler, 10 * MS), [("a", 1)]);
    assert_eq!(scheduler.next(10 * MS), Next::NotBefore(1_000 * MS));
    assert_eq!(drain_at(&mut scheduler, 1_000 * MS), [("b", 1)]);
}

#[test]
fn a_key_without_a_rate_of_its_own_gets_one_and_keeps_it() {
    // A map without a default key rate: the one key given a rate of its own is spaced
    // by it, the others are not; a default set later does not reach it.
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_own("b", KeySettings::new().rate(Rate::per_second(10)), 0);
    for key in ["a", "b"] {
        scheduler.push(key, 0, 0);
        scheduler.push(key, 1, 0);
    }
    assert_eq!(drain_at(&mut scheduler, 0), [("a", 0), ("b", 0), ("a", 1)]);
    scheduler.change_default_rate(Gcra::new(Rate::per_second(1)), 0);
    assert_eq!(scheduler.next(0), Next::NotBefore(100 * MS), "its own 10/s");
    assert_eq!(drain_at(&mut scheduler, 100 * MS), [("b", 1)]);
}

#[test]
fn a_forgotten_key_keeps_its_own_setting_until_cleared() {
    let mut scheduler = KeyScheduler::new(1);
    scheduler.push("a", 0, 0);
    scheduler.set_own("a", KeySettings::new().limit(2), 0);
    assert_eq!(drain(&mut scheduler), [("a", 0)]);
    scheduler.finish(&"a", 0);
    assert_eq!(
        scheduler.active_keys(),
        0,
        "its setting does not keep the key"
    );
    // Back afresh: its own limit of 2.
    for item in 1..4 {
        scheduler.push("a", item, 0);
    }
    assert_eq!(drain(&mut scheduler), [("a", 1), ("a", 2)]);
    // Cleared: the default limit of 1 again (two running: nothing starts until one ends).
    scheduler.clear_own(&"a", 0);
    assert!(drain(&mut scheduler).is_empty());
    scheduler.finish(&"a", 0);
    assert!(drain(&mut scheduler).is_empty(), "one runs: the default 1");
    scheduler.finish(&"a", 0);
    assert_eq!(drain(&mut scheduler), [("a", 3)]);
}

#[test]
fn a_cleared_rate_follows_the_default_again() {
    // No default key rate: a key whose own rate is cleared runs unspaced again.
    let mut scheduler = KeyScheduler::new(10);
    scheduler.set_own("b", KeySettings::new().rate(Rate::per_second(1)), 0);
    for item in 0..3 {
        scheduler.push("b", item, 0);
    }
    assert_eq!(drain_at(&mut scheduler, 0), [("b", 0)]);
    scheduler.clear_own(&"b", 0);
    assert_eq!(drain_at(&mut scheduler, 0), [("b", 1), ("b", 2)]);
}

/// How long a new adaptive key (of a rate ceiling above its start) waits between its starts:
/// its start of 1.8 a second.
fn start_gap() -> u64 {
    let adaptive =
        crate::limit::adaptive::config::Adaptive::new(2, 4).rate_ceiling(Rate::per_second(1_000));
    crate::limit::adaptive::core::KeyAdapt::new(&adaptive, 0)
        .rate()
        .expect("a rate under a ceiling")
        .interval_nanos()
}

/// An adaptive map (limit 2 to 4, rate ceiling 1000/s) whose key "a" has 3 items: it starts
/// at 1.8/s, so its first item starts and the next waits [`start_gap`] (556 ms).
fn adaptive_key_at_its_start() -> KeyScheduler<&'static str, i32> {
    let mut scheduler = KeyScheduler::new(4);
    let adaptive =
        crate::limit::adaptive::config::Adaptive::new(2, 4).rate_ceiling(Rate::per_second(1_000));
    scheduler.set_default_rate(Gcra::new(Rate::per_second(1_000)));
    scheduler.set_adaptive(adaptive);
    for item in 0..3 {
        scheduler.push("a", item, 0);
    }
    assert_eq!(drain(&mut scheduler), [("a", 0)]);
    assert_eq!(
        scheduler.next(0),
        Next::NotBefore(start_gap()),
        "a start every 556 ms"
    );
    scheduler
}

#[test]
fn an_adaptive_keys_state_carries_over_on_its_adapted_rate_when_a_ceiling_changes() {
    let mut scheduler = adaptive_key_at_its_start();
    // The ceiling drops to 100/s, still above the adapted 1.8/s: the pace stays (the
    // state is not stretched by the ratio of the ceilings, which would make it 5.6 s).
    scheduler.change_default_rate(Gcra::new(Rate::per_second(100)), 0);
    assert_eq!(drain_at(&mut scheduler, start_gap()), [("a", 1)]);
}

#[test]
fn a_hint_sets_the_keys_own_values_and_keeps_the_key_a_minute_then_lets_it_go() {
    const SEC: u64 = 1_000 * MS;
    let mut scheduler = KeyScheduler::new(4);
    for item in 0..3 {
        scheduler.push(1, item, 0);
    }
    assert_eq!(drain(&mut scheduler), [(1, 0), (1, 1), (1, 2)]);
    // The server says: one at a time.
    scheduler.hinted(&1, Hint::new().limit(1), 0);
    scheduler.push(1, 3, 0);
    scheduler.finish(&1, 0);
    scheduler.finish(&1, 0);
    assert_eq!(drain(&mut scheduler), [], "one still runs: a limit of 1");
    scheduler.finish(&1, 0);
    assert_eq!(drain(&mut scheduler), [(1, 3)]);
    scheduler.finish(&1, MS);
    // Idle, but kept for its hint (a key without one is forgotten as its last item ends).
    scheduler.push(2, 0, MS);
    assert_eq!(drain_at(&mut scheduler, MS), [(2, 0)]);
    scheduler.finish(&2, MS);
    assert_eq!(scheduler.active_keys(), 1, "1 kept, 2 forgotten");
    // 30 s on, a sweep (the map doubled its keys) keeps it; 61 s on, it goes.
    for (at, kept) in [(30 * SEC, 64 + 1), (61 * SEC, 64 + 64)] {
        for n in 0..64 {
            scheduler.push(if at == 30 * SEC { 10 + n } else { 100 + n }, 0, at);
        }
        assert_eq!(scheduler.active_keys(), kept, "at {} s", at / SEC);
    }
}

#[test]
fn a_hinted_limit_is_a_fixed_keys_own_and_an_adaptive_keys_ceiling() {
    // (A hinted limit of 0 cannot be made: `Hint::limit` and `KeySettings::limit` refuse
    // it, and a hint has no public field to set it through.)
    let one = Hint::new().limit(1);
    let mut fixed = KeyScheduler::new(4);
    fixed.push("a", 0, 0);
    fixed.hinted(&"a", one, 0);
    assert_eq!(
        fixed.parts.given(&fixed.keys[&"a"]).0,
        1,
        "the key's own limit"
    );
    let mut adaptive = adaptive_key_at_its_start();
    adaptive.hinted(&"a", one, 0);
    assert_eq!(
        adaptive.parts.given(&adaptive.keys[&"a"]).0,
        1,
        "the key's ceiling"
    );
    assert_eq!(adaptive.keys[&"a"].limit(), 1);
}

#[test]
fn a_hinted_rate_on_an_adaptive_map_is_a_ceiling_that_takes_the_rate_down_at_once() {
    let mut scheduler = adaptive_key_at_its_start();
    // The server says 1 a second: the ceiling, below the adapted 1.8.
    scheduler.hinted(&"a", Hint::new().rate(Rate::per_second(1)), 0);
    // (The key may wake at 556 ms as planned: it sleeps on then.)
    let Next::NotBefore(at) = scheduler.next(start_gap()) else {
        panic!("the next start waits for the rate");
    };
    assert!(at >= 1_000 * MS, "next start at {} ms: 1 a second", at / MS);
    let progress = scheduler.busiest(0, 1).2;
    assert_eq!(progress[0].rate(), Some(Rate::per_second(1)));
}

#[test]
fn a_key_whose_breaker_saw_only_successes_is_forgotten_once_idle_one_with_a_failure_is_kept() {
    use crate::limit::breaker::config::Breaker;
    let mut scheduler = KeyScheduler::new(2);
    scheduler.set_breaker(super::super::MapBreaker::new(Breaker::new(), true));
    for (key, success) in [("fine", true), ("flaky", false)] {
        scheduler.push(key, 0, 0);
        assert_eq!(drain(&mut scheduler), [(key, 0)]);
        let ticket = scheduler.take_granted().expect("a breaker permit");
        scheduler.broke(&key, ticket, success, MS);
        scheduler.finish(&key, MS);
    }
    // "fine" went with its last item; "flaky" is kept for the failure its breaker counted.
    assert_eq!(scheduler.active_keys(), 1);
}
