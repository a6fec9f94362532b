//! Shared test helpers: the runtime matrix and in-flight counters.

#![allow(dead_code, unused_macros, unused_imports)]

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Poll, Wake, Waker};

/// Instantiates each async test body once per runtime:
/// `smol` (`smol::block_on`), `run_sync` (tollgate's entry point) and, with the `tokio`
/// feature, `tokio_current` and `tokio_multi` (two workers). A test `foo` becomes
/// `foo::smol`, `foo::run_sync`, `foo::tokio_current`, `foo::tokio_multi`. A body that
/// makes no progress for [`TEST_DEADLINE`] fails instead of hanging the run.
///
/// Without the feature the tokio runtimes would only exercise the process-wide fallback,
/// which smol already covers; the tokio-specific behaviour (runtime keys, tokio's clock)
/// exists only with the feature.
macro_rules! matrix {
    ($( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])*
            async fn body() $body

            /// The body, failing instead of hanging if a wake-up is ever lost.
            async fn guarded() {
                tollgate::timeout($crate::common::TEST_DEADLINE, body())
                    .await
                    .expect("test body hung: no progress before the deadline");
            }

            #[test]
            fn smol() {
                smol::block_on(guarded());
            }

            #[test]
            fn run_sync() {
                tollgate::run_sync(guarded());
            }

            #[cfg(feature = "tokio")]
            #[test]
            fn tokio_current() {
                $crate::common::tokio_current().block_on(guarded());
            }

            #[cfg(feature = "tokio")]
            #[test]
            fn tokio_multi() {
                $crate::common::tokio_multi().block_on(guarded());
            }
        }
    )*};
}
pub(crate) use matrix;

/// How long one matrix test body may run before it counts as hung.
pub const TEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

pub fn tokio_current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current-thread runtime")
}

pub fn tokio_multi() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio multi-thread runtime")
}

/// Spawns on the runtime the caller runs on: tokio's when one is current, smol's global
/// executor otherwise. The returned future yields the task's output and re-raises its panic.
pub fn spawn<F>(future: F) -> impl Future<Output = F::Output> + Send
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    enum Task<T> {
        Tokio(tokio::task::JoinHandle<T>),
        Smol(smol::Task<T>),
    }
    let task = match tokio::runtime::Handle::try_current() {
        Ok(handle) => Task::Tokio(handle.spawn(future)),
        Err(_) => Task::Smol(smol::spawn(future)),
    };
    async move {
        match task {
            Task::Tokio(handle) => match handle.await {
                Ok(output) => output,
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            },
            Task::Smol(task) => task.await,
        }
    }
}

/// Counts how many sections are running at once and remembers the peak.
#[derive(Debug, Default)]
pub struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl InFlight {
    /// Marks one section as running until the guard drops.
    pub fn enter(&self) -> InFlightGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        InFlightGuard(self)
    }

    pub fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

#[must_use]
pub struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The message of a caught panic, whatever its payload type.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}

/// Set when the value holding its guard is dropped: proves a future was cancelled.
#[derive(Clone, Debug, Default)]
pub struct DropFlag(Arc<AtomicBool>);

impl DropFlag {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// A guard that sets the flag when dropped; move it into the future under test.
    pub fn guard(&self) -> DropGuard {
        DropGuard(self.clone())
    }
}

pub struct DropGuard(DropFlag);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.0.store(true, Ordering::SeqCst);
    }
}

/// Pulls every item of `stream`.
pub fn drain<S: futures_lite::Stream>(mut stream: Pin<&mut S>) -> impl Future<Output = ()> + '_ {
    poll_fn(move |cx| {
        loop {
            match stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(_)) => {}
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
}

/// Polls `fut` until it panics, and returns the panic's message.
pub async fn poll_until_panic<F: Future>(fut: F) -> String {
    let mut fut = pin!(fut);
    poll_fn(
        |cx| match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(_)) => panic!("finished without panicking"),
            Err(payload) => Poll::Ready(panic_message(&*payload)),
        },
    )
    .await
}

/// Polls `fut` once more and checks that it panics with a message starting with
/// `expected` (neither hangs nor returns).
pub async fn assert_polled_again_panics<F: Future>(fut: F, expected: &str) {
    let mut fut = pin!(fut);
    let outcome = poll_fn(|cx| {
        Poll::Ready(std::panic::catch_unwind(AssertUnwindSafe(|| {
            fut.as_mut().poll(cx).is_ready()
        })))
    })
    .await;
    match outcome {
        Ok(ready) => panic!("polled again: no panic (ready: {ready}), expected {expected:?}"),
        Err(payload) => {
            let message = panic_message(&*payload);
            assert!(message.starts_with(expected), "{message}");
        }
    }
}

/// A waker that counts its wake-ups.
pub struct CountingWaker(pub AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A counting waker and its count.
pub fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}
