//! The wait behind both breakers' `acquire` futures: ask for a permit; refused while open,
//! sleep until the open period ends; refused while half-open with every probe out, wait for
//! a probe to end. Holding nothing meanwhile.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use event_listener::{Event, EventListener};

use super::core::Refusal;
use crate::runtime::Clock;
use crate::runtime::{RtSleep, instant_at};

pin_project_lite::pin_project! {
    /// Where a waiting `acquire` is: listening for the end of a probe, and sleeping until
    /// the end of an open period.
    pub(crate) struct ProbeWait {
        listener: Option<EventListener>,
        // The time `timer` is set for (`None`: not set).
        timer_for: Option<u64>,
        done: bool,
        #[pin]
        timer: RtSleep,
    }
}

impl ProbeWait {
    /// A wait that has asked for nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            listener: None,
            timer_for: None,
            done: false,
            timer: RtSleep::after(Duration::ZERO),
        }
    }

    /// Polls the wait: `ask(not_before)` asks for a permit at now, read under the breaker's
    /// lock and taken as `not_before` at least; `changed` is notified whenever a probe
    /// ends. `name` is the owning future's, for the panic of a poll after completion.
    ///
    /// # Panics
    ///
    /// When polled again after it completed.
    pub(crate) fn poll<T>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        name: &str,
        changed: &Event,
        mut ask: impl FnMut(u64) -> Result<T, Refusal>,
    ) -> Poll<T> {
        let mut this = self.project();
        assert!(!*this.done, "`{name}` polled after completion");
        let mut timer_fired = false;
        loop {
            let not_before = if timer_fired {
                // Past the timer's deadline on the timer's own clock, so never refused for
                // a time the counter clock has not quite reached.
                Clock::Async.timer_now()
            } else {
                0
            };
            let refusal = match ask(not_before) {
                Ok(granted) => {
                    *this.done = true;
                    *this.listener = None;
                    return Poll::Ready(granted);
                }
                Err(refusal) => refusal,
            };
            if this.listener.is_none() {
                // Listen, then ask again: a probe that ended in between is not missed.
                *this.listener = Some(changed.listen());
                continue;
            }
            if let Refusal::Open { until, .. } = refusal {
                if *this.timer_for != Some(until) {
                    this.timer.as_mut().set(RtSleep::at(instant_at(until)));
                    *this.timer_for = Some(until);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    *this.timer_for = None;
                    timer_fired = true;
                    continue;
                }
            }
            let listener = this.listener.as_mut().expect("listening since above");
            match Pin::new(listener).poll(cx) {
                Poll::Ready(()) => *this.listener = None,
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Whether the wait is refused for now (for `Debug`).
    pub(crate) fn is_waiting(&self) -> bool {
        self.listener.is_some()
    }
}
