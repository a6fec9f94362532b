//! Helpers of the store and fleet tests and the `fleet` example: the fleet of worker
//! processes with the crawl the proof and the example run, a listener that takes a dead
//! Redis's port to count who knocks, and a master, replica and sentinel of one's own. The
//! loopback target and the `redis-server` of one's own are `tollgate-testkit`'s (shared with
//! the core crate's tests and this crate's bench), re-exported here under their old names.

#![allow(dead_code, unreachable_pub)]

pub use tollgate_testkit::{http_server, redis_monitor, redis_server};

pub mod dead_port;
pub mod fleet;
pub mod grants;
pub mod sentinel;
