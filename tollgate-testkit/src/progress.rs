//! A progress display for a map steered by a [`MapControl`], shared by the crawl examples:
//! an `indicatif` bar with the rate and the time left when stdout is a terminal, a plain
//! line every second when it is not (a CI log, a pipe). Every figure comes from
//! `control.progress()`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tollgate::{MapControl, Progress, sleep};

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
pub async fn show<K>(control: &MapControl<K>, total: u64, label: &str) {
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
            bar.set_message(format!("{rate:.0}/s, ETA {eta}s | {}", describe(&progress)));
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
                    "{label}: {}/{total} finished ({:.0}%) after {:.0?}, {:.0}/s; {}",
                    progress.finished(),
                    100.0 * progress.finished() as f64 / total.max(1) as f64,
                    elapsed,
                    progress.finished() as f64 / elapsed.as_secs_f64(),
                    describe(&progress)
                );
            }
        }
    }
}
