//! The engine's unit tests: a map polled from a destructor while another panic unwinds.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::task::{Context, Waker};

/// Runs `body` from a destructor while another panic unwinds.
fn during_another_panic(body: impl FnOnce() + 'static) {
    struct OnDrop<B: FnOnce()>(Option<B>);
    impl<B: FnOnce()> Drop for OnDrop<B> {
        fn drop(&mut self) {
            assert!(std::thread::panicking());
            (self.0.take().unwrap())();
        }
    }
    let outer = catch_unwind(AssertUnwindSafe(|| {
        let _guard = OnDrop(Some(body));
        panic!("outer");
    }));
    assert!(outer.is_err());
}

/// Before, the unwind guard remembered whether the thread was already panicking when
/// the poll began and then did nothing: a map polled from a destructor during another
/// panic, whose own future panicked (caught there), was not stopped, and a later poll
/// returned `Ready([0])`: partial data as success. Now the guard acts whenever this
/// poll unwinds.
#[test]
fn a_panic_inside_a_map_polled_during_another_panic_still_marks_it() {
    during_another_panic(|| {
        let mut map = pin!(crate::map::map_async(0..4u32, 2, |n| async move {
            assert!(n != 1, "item 1 fails");
            n
        }));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(catch_unwind(AssertUnwindSafe(|| map.as_mut().poll(&mut cx))).is_err());
        let again = catch_unwind(AssertUnwindSafe(|| map.as_mut().poll(&mut cx)))
            .expect_err("polled again after its panic");
        let message = again.downcast_ref::<String>().unwrap();
        assert!(message.contains("after a panic it propagated"), "{message}");
    });
}

/// A map polled to the end from a destructor during another panic works as usual.
#[test]
fn a_map_polled_during_another_panic_runs_to_the_end() {
    during_another_panic(|| {
        let out =
            futures_lite::future::block_on(crate::map::map_async(0..100u32, 4, |n| async move {
                futures_lite::future::yield_now().await;
                n * 2
            }));
        assert_eq!(out, (0..100).map(|n| n * 2).collect::<Vec<_>>());
    });
}
