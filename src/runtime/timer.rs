//! The clock and the timer every tollgate timeout, pause and wait uses: tokio's inside a
//! tokio runtime with the `tokio` feature (so its paused clock is honoured), async-io's
//! everywhere else (its reactor thread runs beside any executor).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The current time on the clock tollgate's timers use: tokio's (pausable) clock inside a
/// tokio runtime with the `tokio` feature, the system's monotonic clock elsewhere.
pub(crate) fn now() -> Instant {
    #[cfg(feature = "tokio")]
    if super::tokio::is_current() {
        return super::tokio::now();
    }
    Instant::now()
}

// pin-project-lite takes no `cfg` on variants, hence two declarations.
#[cfg(feature = "tokio")]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the current runtime, chosen when it is created.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
        Tokio { #[pin] sleep: tokio::time::Sleep },
    }
}

#[cfg(not(feature = "tokio"))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the current runtime, chosen when it is created.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
    }
}

thread_local! {
    /// Set while [`block_on_real_time`] blocks this thread.
    static BLOCKING: Cell<bool> = const { Cell::new(false) };
}

/// Blocks the thread on `future`, its timers on the real clock even where a tokio runtime
/// is current (a `spawn_blocking` thread): a blocked thread lives outside the runtime's
/// time, and tokio's paused clock stops advancing while a blocking task runs, so a tokio
/// timer there could never fire.
pub(crate) fn block_on_real_time<F: Future>(future: F) -> F::Output {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BLOCKING.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(BLOCKING.with(|cell| cell.replace(true)));
    async_io::block_on(future)
}

impl RtSleep {
    /// A timer that fires `duration` from now on the current runtime's clock;
    /// `Duration::MAX` (or anything overflowing the clock) never fires.
    pub(crate) fn after(duration: Duration) -> Self {
        // Fires on its first poll. Tokio would round zero up to its next 1 ms tick.
        if duration.is_zero() {
            return Self::Expired { none: () };
        }
        #[cfg(feature = "tokio")]
        if !BLOCKING.with(Cell::get) && super::tokio::is_current() {
            return Self::Tokio {
                sleep: tokio::time::sleep(duration),
            };
        }
        Self::AsyncIo {
            timer: async_io::Timer::after(duration),
        }
    }
}

impl RtSleep {
    /// A timer that fires at `deadline` on the current runtime's clock (at once if it
    /// has passed).
    pub(crate) fn at(deadline: Instant) -> Self {
        #[cfg(feature = "tokio")]
        if !BLOCKING.with(Cell::get) && super::tokio::is_current() {
            return Self::Tokio {
                sleep: tokio::time::sleep_until(deadline.into()),
            };
        }
        Self::AsyncIo {
            timer: async_io::Timer::at(deadline),
        }
    }
}

impl Future for RtSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project() {
            RtSleepProj::Expired { .. } => Poll::Ready(()),
            RtSleepProj::AsyncIo { timer } => Pin::new(timer).poll(cx).map(drop),
            #[cfg(feature = "tokio")]
            RtSleepProj::Tokio { sleep } => sleep.poll(cx),
        }
    }
}
