//! The retry budget: how many retries a key may have, and when a key forgets what it spent.
//!
//! A bucket per key: it holds `floor` retries when the key is fresh, each retry takes one
//! out, each first attempt puts `ratio` back, and it never holds more than `floor` (or 1,
//! when the floor is 0). So retries stay within `floor + ratio × first attempts`.
//!
//! Invariants: a fresh key has spent 0; what a key has spent never goes below what a fresh
//! key could hold (a bucket is never fuller than a fresh one). A key whose bucket is full
//! again can be forgotten without changing any decision (one with credit beyond a fresh
//! key's only loses it: the careful side); a key whose bucket is not full is kept until it
//! has had nothing running or waiting for [`BUDGET_MEMORY`] pulled items, when its bucket
//! lapses to full: the bound holds over each stretch in which the key keeps coming back
//! within that.

/// How many items the map pulls, after a key last had anything running or waiting,
/// before the key's spent retry budget lapses and the key may be forgotten. A window of
/// the input rather than of time: the keys it keeps are at most the keys of that many
/// items, whatever the throughput.
pub(super) const BUDGET_MEMORY: u64 = 16_384;

/// How far below a whole retry a budget's balance may be and still pay for one: what
/// adding up ratios in floating point loses (far less than any ratio's share of one).
const ROUNDING: f64 = 1e-9;

/// The retry budget of every key of a map.
#[derive(Debug, Clone, Copy)]
pub(super) struct RetryBudget {
    /// Retries per first attempt.
    ratio: f64,
    /// Retries at once (for a fresh key).
    floor: f64,
}

impl RetryBudget {
    pub(super) fn new(ratio: f64, floor: u32) -> Self {
        Self {
            ratio,
            floor: f64::from(floor),
        }
    }

    /// Takes one retry out of a key's bucket if it holds one; `false` if it does not.
    pub(super) fn take(&self, spent: &mut Spent) -> bool {
        // Within rounding of a whole retry counts as one: five first attempts at 0.2 add
        // up to 0.9999999999999998 in floating point.
        if self.floor - spent.spent >= 1.0 - ROUNDING {
            spent.spent += 1.0;
            true
        } else {
            false
        }
    }

    /// Whether a first attempt puts anything back in a fresh key's bucket: only under a
    /// floor of 0, whose full bucket holds 1 and whose fresh one 0.
    pub(super) fn fills_fresh_keys(&self) -> bool {
        self.floor < 1.0 && self.ratio > 0.0
    }

    /// A first attempt of the key puts `ratio` back (never fuller than a fresh bucket).
    #[inline]
    pub(super) fn refill(&self, spent: &mut Spent) {
        spent.spent = (spent.spent - self.ratio).max((self.floor - 1.0).min(0.0));
    }
}

/// What one key has spent of its retry budget, and since when it is quiet.
#[derive(Debug, Default)]
pub(super) struct Spent {
    /// 0 for a fresh key, up by 1 per retry, down by the budget's ratio per first attempt
    /// (never below what a fresh key could hold).
    spent: f64,
    /// Items the map had pulled when the key last finished an attempt: once it has
    /// nothing running or waiting, its spent budget lapses [`BUDGET_MEMORY`] pulls later.
    quiet_since: u64,
}

impl Spent {
    /// Whether the key's bucket holds less than a fresh key's.
    pub(super) fn is_owed(&self) -> bool {
        self.spent > 0.0
    }

    /// Whether forgetting the key's spending changes nothing, with the map having pulled
    /// `pulled` items so far: its bucket is full, or it lapsed.
    pub(super) fn is_settled(&self, pulled: u64) -> bool {
        self.spent <= 0.0 || self.is_lapsed(pulled)
    }

    /// Whether the key, with nothing running or waiting, has been so for
    /// [`BUDGET_MEMORY`] pulled items: its spent budget no longer counts.
    pub(super) fn is_lapsed(&self, pulled: u64) -> bool {
        pulled.saturating_sub(self.quiet_since) >= BUDGET_MEMORY
    }

    /// The key finished an attempt when the map had pulled `pulled` items.
    pub(super) fn quiet_from(&mut self, pulled: u64) {
        self.quiet_since = pulled;
    }

    /// The key, quiet and not yet swept, comes back: as fresh as a forgotten key if its
    /// spending lapsed.
    pub(super) fn come_back(&mut self, pulled: u64) {
        if self.is_lapsed(pulled) {
            self.spent = self.spent.min(0.0);
        }
    }
}
