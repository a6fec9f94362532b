//! The clock and the timer every tollgate timeout, pause and wait uses: tokio's inside a
//! tokio runtime with the `tokio` feature (so its paused clock is honoured), the virtual
//! clock inside `testing::run_virtual` with the `test-util` feature, async-io's everywhere
//! else (its reactor thread runs beside any executor).
//!
//! A timer is set on the clock of the runtime that makes it, and stays on it only while that
//! runtime polls it: a future is polled by whoever awaits it, so a timer made inside one
//! runtime and polled under another (a map polled once inside a tokio runtime, then finished
//! under `smol::block_on`) is set again, for the same deadline, on the clock of the one that
//! polls it now. A tokio timer polled outside its runtime would panic once that runtime has
//! shut down, and never fire while it sits idle.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

#[cfg(feature = "test-util")]
use super::virtual_clock::{self, VirtualTimer};

/// The current time on the clock tollgate's timers use: the virtual clock inside
/// `run_virtual` (feature `test-util`), tokio's (pausable) clock inside a tokio runtime with
/// the `tokio` feature, the system's monotonic clock elsewhere.
pub(crate) fn now() -> Instant {
    #[cfg(feature = "test-util")]
    if let Some(now) = virtual_now() {
        return now;
    }
    #[cfg(feature = "tokio")]
    if super::tokio::is_current() {
        return super::tokio::now();
    }
    Instant::now()
}

/// Now on this thread's virtual clock, unless the thread is not driven by `run_virtual` or
/// is blocked outside it (see [`block_on_real_time`]).
#[cfg(feature = "test-util")]
#[inline]
pub(crate) fn virtual_now() -> Option<Instant> {
    if BLOCKING.with(Cell::get) {
        return None;
    }
    virtual_clock::now()
}

// pin-project-lite takes no `cfg` on variants, hence one declaration per feature set.
#[cfg(all(feature = "tokio", feature = "test-util"))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the runtime that polls it.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
        Tokio { runtime: tokio::runtime::Id, #[pin] sleep: tokio::time::Sleep },
        Virtual { timer: VirtualTimer },
    }
}

#[cfg(all(feature = "tokio", not(feature = "test-util")))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the runtime that polls it.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
        Tokio { runtime: tokio::runtime::Id, #[pin] sleep: tokio::time::Sleep },
    }
}

#[cfg(all(not(feature = "tokio"), feature = "test-util"))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the runtime that polls it.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
        Virtual { timer: VirtualTimer },
    }
}

#[cfg(all(not(feature = "tokio"), not(feature = "test-util")))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the runtime that polls it.
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
/// is current (a `spawn_blocking` thread) or a virtual clock drives the thread: a blocked
/// thread lives outside the runtime's time, and tokio's paused clock stops advancing while a
/// blocking task runs (as a virtual clock does while its future is polled), so a timer there
/// could never fire.
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

/// Whose clock a timer made here would be on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Site {
    AsyncIo,
    #[cfg(feature = "tokio")]
    Tokio(tokio::runtime::Id),
    #[cfg(feature = "test-util")]
    Virtual(u64),
}

impl Site {
    /// The clock this thread's timers are on now.
    #[inline]
    fn current() -> Self {
        #[cfg(any(feature = "tokio", feature = "test-util"))]
        if !BLOCKING.with(Cell::get) {
            #[cfg(feature = "test-util")]
            if let Some(clock) = virtual_clock::current_clock() {
                return Self::Virtual(clock);
            }
            #[cfg(feature = "tokio")]
            if let Some(runtime) = super::tokio::current_id_unregistered() {
                return Self::Tokio(runtime);
            }
        }
        Self::AsyncIo
    }
}

impl RtSleep {
    /// A timer that fires `duration` from now on the current runtime's clock;
    /// `Duration::MAX` (or anything overflowing the clock) never fires.
    pub(crate) fn after(duration: Duration) -> Self {
        // Fires on its first poll. Tokio would round zero up to its next 1 ms tick.
        if duration.is_zero() {
            return Self::Expired { none: () };
        }
        match Site::current() {
            Site::AsyncIo => Self::AsyncIo {
                timer: async_io::Timer::after(duration),
            },
            #[cfg(feature = "tokio")]
            Site::Tokio(runtime) => Self::Tokio {
                runtime,
                sleep: tokio::time::sleep(duration),
            },
            #[cfg(feature = "test-util")]
            Site::Virtual(clock) => match virtual_now().and_then(|now| now.checked_add(duration)) {
                Some(deadline) => Self::Virtual {
                    timer: VirtualTimer::at(clock, deadline),
                },
                None => Self::AsyncIo {
                    timer: async_io::Timer::never(),
                },
            },
        }
    }

    /// A timer that fires at `deadline` on the current runtime's clock (at once if it
    /// has passed).
    pub(crate) fn at(deadline: Instant) -> Self {
        Self::on(Site::current(), deadline)
    }

    fn on(site: Site, deadline: Instant) -> Self {
        match site {
            Site::AsyncIo => Self::AsyncIo {
                timer: async_io::Timer::at(deadline),
            },
            #[cfg(feature = "tokio")]
            Site::Tokio(runtime) => Self::Tokio {
                runtime,
                sleep: tokio::time::sleep_until(deadline.into()),
            },
            #[cfg(feature = "test-util")]
            Site::Virtual(clock) => Self::Virtual {
                timer: VirtualTimer::at(clock, deadline),
            },
        }
    }
}

impl Future for RtSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.as_mut().project() {
            RtSleepProj::Expired { .. } => Poll::Ready(()),
            // async-io's timers fire wherever they are polled.
            RtSleepProj::AsyncIo { timer } => Pin::new(timer).poll(cx).map(drop),
            #[cfg(feature = "tokio")]
            RtSleepProj::Tokio { runtime, sleep } => {
                let site = Site::current();
                if site == Site::Tokio(*runtime) {
                    return sleep.poll(cx);
                }
                let deadline = sleep.deadline().into_std();
                self.set(Self::on(site, deadline));
                self.poll(cx)
            }
            #[cfg(feature = "test-util")]
            RtSleepProj::Virtual { timer } => {
                let site = Site::current();
                if site == Site::Virtual(timer.clock()) {
                    return timer.poll(cx);
                }
                let deadline = timer.deadline();
                self.set(Self::on(site, deadline));
                self.poll(cx)
            }
        }
    }
}
