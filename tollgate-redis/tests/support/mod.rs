//! Helpers shared by the fleet tests, the `fleet` example and the benches: the loopback
//! target (the core crate's test server, reused as is), a `redis-server` of one's own with a
//! probe to look inside Redis, and the fleet of worker processes.

#![allow(dead_code, unreachable_pub)]

#[path = "../../../tests/support/http_server.rs"]
pub mod http_server;

pub mod fleet;
pub mod redis_server;
