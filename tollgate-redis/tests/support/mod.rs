//! Helpers shared by the store and fleet tests, the `fleet` example and the bench: the
//! loopback target (the core crate's test server, reused as is), a `redis-server` of one's
//! own with a probe to look inside Redis (the bench includes just that file), the fleet of
//! worker processes with the crawl the proof and the example run, a listener that takes a
//! dead Redis's port to count who knocks, and a master, replica and sentinel of one's own.

#![allow(dead_code, unreachable_pub)]

#[path = "../../../tests/support/http_server.rs"]
pub mod http_server;

pub mod dead_port;
pub mod fleet;
pub mod redis_server;
pub mod sentinel;
