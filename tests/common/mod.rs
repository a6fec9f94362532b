//! The test helpers of this crate's tests: the runtime matrix and the probes, from
//! `tollgate-testkit` (shared with tollgate-redis's tests), under the name every test uses.

#![allow(unused_imports, unused_macros)]

/// The testkit's `matrix!`, under this module so `use common::matrix` and
/// `#[macro_use] mod common` both find it.
macro_rules! matrix {
    ($($tests:tt)*) => {
        tollgate_testkit::matrix! { $($tests)* }
    };
}
pub(crate) use matrix;

/// The testkit's `virtual_time!`: the legs on a virtual clock, for time-dependent behaviour.
macro_rules! virtual_time {
    ($($tests:tt)*) => {
        tollgate_testkit::virtual_time! { $($tests)* }
    };
}
pub use tollgate_testkit::{
    CountingWaker, DropFlag, DropGuard, InFlight, InFlightGuard, Rng, TEST_DEADLINE,
    assert_polled_again_panics, counting_waker, drain, panic_message, poll_until_panic, spawn,
    tokio_current, tokio_multi, tokio_paused,
};
pub(crate) use virtual_time;
