//! How far a keyed map's window grows: while global slots sit idle because every waiting
//! item's key is full or waiting for time, the map pulls further ahead to find other keys.
//!
//! Invariants: the window grows by doubling, never beyond the max window (a window the
//! user set is a bound unless a max window says how far it may grow), stops growing after
//! growths that found no new key, and shrinks back at once when the items held fit in the
//! window again.

/// The default max window, in multiples of the global limit.
const MAX_WINDOW: usize = 1024;
/// Growths of the window that found no new key, after which it stops growing.
const FRUITLESS_GROWTHS: u32 = 2;

/// The window's growth beyond the map's window.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Growth {
    /// Items the window has grown by.
    grown: usize,
    /// How far the window may grow (`None`: the default max window).
    max_window: Option<usize>,
    /// Active keys at the last growth, and growths since that found no new key.
    keys_at_growth: usize,
    fruitless: u32,
}

impl Growth {
    /// Items the window has grown by.
    pub(super) fn grown(&self) -> usize {
        self.grown
    }

    pub(super) fn set_max_window(&mut self, max_window: usize) {
        self.max_window = Some(max_window);
    }

    /// No growth, with the same max window.
    pub(super) fn reset(self) -> Self {
        Self {
            max_window: self.max_window,
            ..Self::default()
        }
    }

    /// The window to pull up to, with `held` items held of a `window` (`window_set`: set
    /// by the user) under a global `limit`: grown when the map is `stuck` (global slots
    /// idle, every waiting item's key full or waiting for time), as long as growing keeps
    /// finding new keys (`keys` active now); shrunk back once the items held fit in the
    /// window again.
    pub(super) fn adjust(
        &mut self,
        (window, window_set): (usize, bool),
        held: usize,
        limit: usize,
        stuck: bool,
        keys: usize,
    ) -> usize {
        if held < window {
            self.grown = 0;
            self.fruitless = 0;
            return window;
        }
        // A window the user set is a bound, unless a max window says how far it may grow.
        let default_max = if window_set {
            window
        } else {
            limit.saturating_mul(MAX_WINDOW)
        };
        let max = self.max_window.unwrap_or(default_max).max(window);
        let current = window + self.grown;
        if stuck && held >= current && current < max && self.fruitless < FRUITLESS_GROWTHS {
            if self.grown > 0 && keys <= self.keys_at_growth {
                self.fruitless += 1;
            } else {
                self.fruitless = 0;
            }
            self.keys_at_growth = keys;
            self.grown = current.saturating_mul(2).min(max) - window;
        }
        window + self.grown
    }
}
