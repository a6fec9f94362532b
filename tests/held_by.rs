//! What holds a key, as a control reads it (`KeyProgress::held_by`), on virtual time
//! (`virtual_time!`: `run_virtual` and tokio's paused clock), where what holds each key at
//! a given instant is exact.

mod common;

use std::time::Duration;

use common::virtual_time;
use futures_lite::future::{yield_now, zip};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use tollgate::{
    Adaptive, HeldBy, Hint, KeyProgress, KeySettings, MapControl, Outcome, PausedBy, Rate,
    RetryPolicy, map_async, sleep,
};

/// Every key's progress as the map publishes it now: ask, let the map poll, read.
async fn read(control: &MapControl<&'static str>) -> Vec<KeyProgress<&'static str>> {
    let _ = control.busiest_keys(8);
    yield_now().await;
    control.busiest_keys(8)
}

fn held(keys: &[KeyProgress<&'static str>], key: &str) -> Option<HeldBy> {
    keys.iter()
        .find(|progress| *progress.key() == key)
        .map(KeyProgress::held_by)
}

virtual_time! {
    async fn a_key_shows_what_holds_it_its_limit_its_rate_a_global_slot() {
        // Two global slots. `full` runs one at a time and has three items; `rated` may run
        // two at once but starts once a minute; `queued` has room and no rate, and finds
        // both slots taken.
        let control = MapControl::new();
        let items = ["full", "rated", "queued", "full", "rated", "full"];
        let map = map_async(items, 2, |key| async move {
            sleep(Duration::from_secs(10)).await;
            key
        })
        .per_key(|key| *key, 1)
        .key_settings(|key| match *key {
            "rated" => KeySettings::new().limit(2).rate(Rate::per_minute(1)),
            _ => KeySettings::new(),
        })
        .control(&control);
        let watch = async {
            sleep(Duration::from_secs(1)).await;
            let at_one = read(&control).await;
            // At 15 s `full` and `queued` run (each its first), `rated` waits a minute.
            sleep(Duration::from_secs(14)).await;
            let at_fifteen = read(&control).await;
            (at_one, at_fifteen)
        };
        let (outputs, (at_one, at_fifteen)) = zip(map, watch).await;
        assert_eq!(outputs, items);
        assert_eq!(held(&at_one, "full"), Some(HeldBy::Limit), "{at_one:?}");
        assert_eq!(held(&at_one, "rated"), Some(HeldBy::Rate), "{at_one:?}");
        assert_eq!(held(&at_one, "queued"), Some(HeldBy::GlobalLimit), "{at_one:?}");
        assert_eq!(held(&at_fifteen, "rated"), Some(HeldBy::Rate), "{at_fifteen:?}");
        assert_eq!(held(&at_fifteen, "full"), Some(HeldBy::Limit), "{at_fifteen:?}");
        // Everything of `queued` has started: nothing of it waits.
        assert_eq!(held(&at_fifteen, "queued"), Some(HeldBy::Nothing), "{at_fifteen:?}");
    }

    async fn a_key_shows_the_pause_it_was_given_and_the_pause_of_its_retry() {
        // Each key's first attempt fails: `paused`'s pauses the key for 30 s, `retrying`'s
        // only waits 30 s to go again.
        let control = MapControl::new();
        let tries = [AtomicU32::new(0), AtomicU32::new(0)];
        let items = ["paused", "retrying"];
        let map = map_async(items, 4, |key| {
            let tries = &tries[usize::from(key == "retrying")];
            async move {
                if tries.fetch_add(1, SeqCst) == 0 {
                    Err(key)
                } else {
                    Ok(key)
                }
            }
        })
        .per_key(|key| *key, 1)
        .retry(
            RetryPolicy::new()
                .attempts(2)
                .interval(Duration::from_secs(30))
                .jitter(0.0)
                .pause_key(|key: &&str| (*key == "paused").then_some(Duration::from_secs(30))),
        )
        .control(&control);
        let watch = async {
            sleep(Duration::from_secs(1)).await;
            read(&control).await
        };
        let (outputs, at_one) = zip(map, watch).await;
        assert_eq!(outputs, [Ok("paused"), Ok("retrying")]);
        assert_eq!(held(&at_one, "paused"), Some(HeldBy::Pause), "{at_one:?}");
        assert_eq!(held(&at_one, "retrying"), Some(HeldBy::Retry), "{at_one:?}");
        let paused_by = |key: &str| {
            at_one
                .iter()
                .find(|progress| *progress.key() == key)
                .and_then(KeyProgress::paused_by)
        };
        assert_eq!(paused_by("paused"), Some(PausedBy::RetryPolicy), "{at_one:?}");
        assert_eq!(paused_by("retrying"), None, "{at_one:?}");
    }

    async fn a_key_shows_who_paused_it_and_when_its_values_were_cut() {
        // `hinted` answers with a 20 s pause; `cut`'s attempt that ends at 2 s is an
        // overload (its attempts take 1 s, one at a time); `calm`'s never are. Read at 5 s.
        let control = MapControl::new();
        let origin = tollgate::testing::now();
        let items = ["hinted", "hinted", "cut", "cut", "cut", "cut", "calm", "calm"];
        let map = map_async(items, 8, |key| async move {
            sleep(Duration::from_secs(1)).await;
            key
        })
        .per_key(|key| *key, 1)
        .adaptive(Adaptive::new(1, 4), |key: &&str| {
            let at = tollgate::testing::now() - origin;
            match *key {
                "hinted" => Outcome::success().with_hint(Hint::new().pause(Duration::from_secs(20))),
                "cut" if at == Duration::from_secs(2) => Outcome::overload(),
                _ => Outcome::success(),
            }
        })
        .control(&control);
        let watch = async {
            sleep(Duration::from_secs(5)).await;
            read(&control).await
        };
        let (_, at_five) = zip(map, watch).await;
        let find = |key: &str| {
            at_five
                .iter()
                .find(|progress| *progress.key() == key)
                .unwrap_or_else(|| panic!("{key} in view: {at_five:?}"))
                .clone()
        };
        assert_eq!(find("hinted").paused_by(), Some(PausedBy::Server));
        assert_eq!(find("calm").paused_by(), None);
        assert_eq!(find("cut").last_cut(), Some(Duration::from_secs(3)), "cut at 2 s");
        assert_eq!(find("calm").last_cut(), None);
    }
}
