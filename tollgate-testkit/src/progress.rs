//! A progress display for a map steered by a [`MapControl`], shared by the crawl examples:
//! an `indicatif` bar with the rate and the time left when stdout is a terminal, a plain
//! line every second when it is not (a CI log, a pipe). Every figure comes from
//! `control.progress()`, and the hosts with most left from `control.busiest_keys(..)`, each
//! with what holds it (`KeyProgress::held_by`).

use std::fmt::Display;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tollgate::{HeldBy, KeyProgress, MapControl, PausedBy, Progress, sleep};

/// How many of the hosts with most left the display names.
const SLOWEST: usize = 3;

/// What holds a host, in a few words: who paused it, and how recent a cut of its limit or
/// rate is when that is what holds it.
fn hold<K>(key: &KeyProgress<K>) -> String {
    let cut = |what: &str| match key.last_cut() {
        Some(ago) if ago < Duration::from_secs(60) => format!("{what}, cut {}s ago", ago.as_secs()),
        _ => what.to_owned(),
    };
    match key.held_by() {
        HeldBy::Nothing => "all started".to_owned(),
        HeldBy::Limit => cut("its limit"),
        HeldBy::Pause => match key.paused_by() {
            Some(PausedBy::Server) => "paused by its server".to_owned(),
            Some(PausedBy::RetryPolicy) => "paused by the retry policy".to_owned(),
            _ => "paused".to_owned(),
        },
        HeldBy::Breaker => "breaker open".to_owned(),
        HeldBy::SharedLimits => "shared limits".to_owned(),
        HeldBy::Rate => cut("its rate"),
        HeldBy::Retry => "retry pause".to_owned(),
        HeldBy::MapRate => "the map's rate".to_owned(),
        HeldBy::GlobalLimit => "a global slot".to_owned(),
        _ => "other".to_owned(),
    }
}

/// The hosts with most left, each with what holds it: `h3 12 left (its rate), ...`.
fn slowest<K: Display>(keys: &[KeyProgress<K>]) -> String {
    keys.iter()
        // (Idle hosts stay in a control's view a while, after the busy ones: none left.)
        .filter(|key| key.waiting() + key.in_flight() > 0)
        .map(|key| {
            format!(
                "{} {} left ({})",
                key.key(),
                key.waiting() + key.in_flight(),
                hold(key)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The figures beside the bar: what the map is doing now.
fn describe(progress: &Progress) -> String {
    format!(
        "{} in flight, {} waiting, {} retries, {} failed, {} hosts paused{}",
        progress.in_flight(),
        progress.waiting() + progress.awaiting_retry(),
        progress.retries(),
        progress.failed(),
        progress.paused_keys(),
        if progress.is_draining() {
            ", draining"
        } else {
            ""
        }
    )
}

/// Shows the progress of the map `control` is attached to, `total` items, until the map
/// ends. Run it beside the map (`zip`): it reads the figures while the map waits.
pub async fn show<K: Display + Clone>(control: &MapControl<K>, total: u64, label: &str) {
    let start = Instant::now();
    if std::io::stdout().is_terminal() {
        let bar =
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout_with_hz(10));
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_owned());
        loop {
            let progress = control.progress();
            bar.set_position(progress.finished());
            let rate = progress.finished() as f64 / start.elapsed().as_secs_f64().max(1e-3);
            let eta = bar.eta().as_secs();
            let keys = control.busiest_keys(SLOWEST);
            bar.set_message(format!(
                "{rate:.0}/s, ETA {eta}s | {} | slowest: {}",
                describe(&progress),
                slowest(&keys)
            ));
            if progress.is_ended() {
                break;
            }
            sleep(Duration::from_millis(100)).await;
        }
        // Leave the bar as the last reading drew it (`finish` would fill it up, and a
        // drained run did not finish every item).
        bar.abandon();
    } else {
        let mut next = Duration::from_secs(1);
        loop {
            sleep(Duration::from_millis(50)).await;
            let progress = control.progress();
            if progress.is_ended() {
                break;
            }
            let elapsed = start.elapsed();
            if elapsed >= next {
                next += Duration::from_secs(1);
                println!(
                    "{label}: {}/{total} finished ({:.0}%) after {:.0?}, {:.0}/s; {}; slowest: {}",
                    progress.finished(),
                    100.0 * progress.finished() as f64 / total.max(1) as f64,
                    elapsed,
                    progress.finished() as f64 / elapsed.as_secs_f64(),
                    describe(&progress),
                    slowest(&control.busiest_keys(SLOWEST))
                );
            }
        }
    }
}
