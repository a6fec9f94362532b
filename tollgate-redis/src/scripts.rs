//! The Lua scripts, each run by its SHA (`EVALSHA`): redis-rs's `Script::invoke` sends the
//! SHA and, when Redis answers `NOSCRIPT` (a restarted or flushed Redis forgot it), loads the
//! source with `SCRIPT LOAD` and sends it again. The source crosses the network once per
//! Redis lifetime.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

/// Grants one lease, with a rate start when asked (`grant.lua`).
pub(crate) static GRANT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/epoch.lua"),
        include_str!("lua/rate.lua"),
        include_str!("lua/grant.lua")
    ))
});
/// Renews all of one process's leases (`renew.lua`).
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/renew.lua")));
/// Counts a key's live leases (`in_use.lua`).
pub(crate) static IN_USE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_use.lua")));
/// Takes one start of a key's rate (`gcra.lua`).
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/epoch.lua"),
        include_str!("lua/rate.lua"),
        include_str!("lua/gcra.lua")
    ))
});
/// Blocks a key (`pause.lua`).
pub(crate) static PAUSE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/pause.lua")));
/// Reads a key's pause, for limits with neither a cap nor a rate (`pause_check.lua`).
pub(crate) static PAUSE_CHECK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/rate.lua"),
        include_str!("lua/pause_check.lua")
    ))
});

/// The reply codes the grant and rate scripts share.
pub(crate) const GRANTED: i64 = 0;
pub(crate) const FULL: i64 = 1;
pub(crate) const PAUSED: i64 = 2;
pub(crate) const WARMING_UP: i64 = 3;
/// The grant script's answer for a lease id whose grant was cancelled (a tombstone).
pub(crate) const CANCELLED: i64 = 4;
/// The grant script's answer when the key's rate allows no start yet (the rate script says
/// [`FULL`] for that).
pub(crate) const RATE_LIMITED: i64 = 5;

/// The wait a script answered, in microseconds. The scripts cap every wait they answer
/// (`wait_reply` in `rate.lua`: at most 2^53 µs, about 285 years), so a reply is never
/// wrapped by Redis's integer conversion, and a very long pause reads as a very long wait.
/// A negative reply, which the scripts never send, reads as no wait.
pub(crate) fn wait_from_reply(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}
