//! Limiters: the FIFO semaphore core and the bulkheads built on it (how many run at once),
//! and the rate limiters (how many start per unit of time).

pub(crate) mod adaptive;
pub(crate) mod bulkhead;
pub(crate) mod check;
pub(crate) mod rate;
pub(crate) mod semaphore;
