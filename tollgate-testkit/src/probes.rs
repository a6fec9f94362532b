//! What tests measure with: in-flight counters and their peaks, drop flags, panic
//! catchers, a counting waker.

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Poll, Wake, Waker};

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

    /// Sections running now.
    pub fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    /// The most sections that ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// One running section of an [`InFlight`]: it ends when the guard drops.
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
    /// Whether a guard of this flag was dropped.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// A guard that sets the flag when dropped; move it into the future under test.
    pub fn guard(&self) -> DropGuard {
        DropGuard(self.clone())
    }
}

/// Sets its [`DropFlag`] when dropped.
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
