//! The runtime matrix every test runs on: [`matrix!`](crate::matrix), its runtimes, and
//! [`spawn`] on whichever of them is current.

use std::future::Future;

/// Instantiates each async test body once per runtime:
/// `smol` (`smol::block_on`), `run_sync` (tollgate's entry point) and, with the calling
/// crate's `tokio` feature, `tokio_current` and `tokio_multi` (two workers). A test `foo`
/// becomes `foo::smol`, `foo::run_sync`, `foo::tokio_current`, `foo::tokio_multi`. A body
/// that makes no progress for [`TEST_DEADLINE`] (or the `deadline = EXPR;` given first)
/// fails instead of hanging the run.
///
/// The `#[cfg(feature = "tokio")]` on the tokio tests is expanded in the calling crate, so it
/// reads that crate's feature. Without it the tokio runtimes would only exercise the
/// process-wide fallback, which smol already covers; the tokio-specific behaviour (runtime
/// keys, tokio's clock) exists only with the feature.
#[macro_export]
macro_rules! matrix {
    (deadline = $deadline:expr; $( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {$(
        $crate::__test_legs! {
            deadline = $deadline;
            hung = "test body hung: no progress before the deadline";
            legs = [
                smol,
                run_sync,
                #[cfg(feature = "tokio")] tokio_current,
                #[cfg(feature = "tokio")] tokio_multi,
            ];
            $(#[$attr])* async fn $name() $body
        }
    )*};
    ($( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {
        $crate::matrix! {
            deadline = $crate::TEST_DEADLINE;
            $( $(#[$attr])* async fn $name() $body )*
        }
    };
}

/// The shape [`matrix!`](crate::matrix) and [`virtual_time!`](crate::virtual_time) share:
/// a module per test holding its body, the body under its deadline, and a `#[test]` per leg
/// that runs it with the function of the same name in [`legs`]. A leg's attributes (its
/// `#[cfg(feature = "tokio")]`) are expanded in the calling crate.
#[doc(hidden)]
#[macro_export]
macro_rules! __test_legs {
    (
        deadline = $deadline:expr;
        hung = $hung:literal;
        legs = [$( $(#[$leg_attr:meta])* $leg:ident ),* $(,)?];
        $(#[$attr:meta])* async fn $name:ident() $body:block
    ) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])*
            async fn body() $body

            /// The body, failing instead of hanging if a wake-up is ever lost.
            async fn guarded() {
                $crate::__private::tollgate::timeout($deadline, body())
                    .await
                    .expect($hung);
            }

            $(
                $(#[$leg_attr])*
                #[test]
                fn $leg() {
                    $crate::legs::$leg(guarded());
                }
            )*
        }
    };
}

/// How each leg of [`matrix!`](crate::matrix) and [`virtual_time!`](crate::virtual_time)
/// runs a test body to completion on the calling thread.
#[doc(hidden)]
pub mod legs {
    use std::future::Future;

    /// `smol::block_on`.
    pub fn smol<F: Future>(body: F) -> F::Output {
        smol::block_on(body)
    }

    /// tollgate's own entry point.
    pub fn run_sync<F: Future>(body: F) -> F::Output {
        tollgate::run_sync(body)
    }

    /// A tokio current-thread runtime.
    pub fn tokio_current<F: Future>(body: F) -> F::Output {
        super::tokio_current().block_on(body)
    }

    /// A tokio multi-thread runtime with two workers.
    pub fn tokio_multi<F: Future>(body: F) -> F::Output {
        super::tokio_multi().block_on(body)
    }

    /// tollgate's virtual clock.
    pub fn virtual_time<F: Future>(body: F) -> F::Output {
        tollgate::testing::run_virtual(body)
    }

    /// A tokio current-thread runtime whose clock starts paused.
    pub fn tokio_paused<F: Future>(body: F) -> F::Output {
        super::tokio_paused().block_on(body)
    }
}

/// Instantiates each async test body of **time-dependent behaviour** once per clock that is
/// virtual: `virtual_time` (`tollgate::testing::run_virtual`: the world of smol and
/// `run_sync`, whose timers are async-io's, on a virtual clock) and, with the calling crate's
/// `tokio` feature, `tokio_paused` (a current-thread runtime whose clock starts paused and
/// jumps to the next timer whenever the runtime is idle). A test `foo` becomes
/// `foo::virtual_time` and `foo::tokio_paused`.
///
/// On a virtual clock no time passes while a poll runs, so what the body asserts about time
/// (rates, pauses, latencies, adaptation, breakers, retries) holds on a busy machine as on a
/// quiet one. A body that waits for nothing fails at once: with nothing else to do, the
/// clock jumps to the deadline ([`VIRTUAL_DEADLINE`] of virtual time, or `deadline = EXPR;`
/// given first).
#[macro_export]
macro_rules! virtual_time {
    (deadline = $deadline:expr; $( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {$(
        $crate::__test_legs! {
            deadline = $deadline;
            hung = "test body hung: nothing left to wait for before the deadline";
            legs = [virtual_time, #[cfg(feature = "tokio")] tokio_paused];
            $(#[$attr])* async fn $name() $body
        }
    )*};
    ($( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {
        $crate::virtual_time! {
            deadline = $crate::VIRTUAL_DEADLINE;
            $( $(#[$attr])* async fn $name() $body )*
        }
    };
}

/// How much virtual time one [`virtual_time!`](crate::virtual_time) body may take before it
/// counts as hung (it costs no wall time to reach).
pub const VIRTUAL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3_600);

/// A tokio current-thread runtime with every driver enabled and its clock paused: it moves
/// only when the runtime has nothing to do, straight to the next timer.
///
/// # Panics
///
/// If tokio cannot build it.
pub fn tokio_paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio current-thread runtime, paused")
}

/// How long one matrix test body may run before it counts as hung.
pub const TEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// A tokio current-thread runtime with every driver enabled.
///
/// # Panics
///
/// If tokio cannot build it.
pub fn tokio_current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current-thread runtime")
}

/// A tokio multi-thread runtime with two workers and every driver enabled.
///
/// # Panics
///
/// If tokio cannot build it.
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
