//! Helpers shared by the store and fleet tests, the `fleet` example and the bench: the
//! loopback target (the core crate's test server, reused as is), a `redis-server` of one's
//! own with a probe to look inside Redis (the bench includes just that file), and the fleet
//! of worker processes with the crawl the proof and the example run.

#![allow(dead_code, unreachable_pub)]

#[path = "../../../tests/support/http_server.rs"]
pub mod http_server;

pub mod fleet;
pub mod redis_server;
