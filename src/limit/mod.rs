//! Limiters: the FIFO semaphore core and the bulkheads built on it.

pub(crate) mod bulkhead;
pub(crate) mod semaphore;
