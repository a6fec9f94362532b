//! Rate limits: how many starts per unit of time ([`Rate`]), decided by GCRA on one word.

#[allow(dead_code)] // until the limiters and the scheduler use all of it
pub(crate) mod gcra;

pub use self::gcra::Rate;
