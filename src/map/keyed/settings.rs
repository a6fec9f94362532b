//! The limit and rate each key is held to: the map's default key limit and default key
//! rate, and a key's own setting.
//!
//! Every key's entry carries its own copy of its limit and rate, taken from the map's
//! defaults when the key is first seen, or from the key's own settings ([`OwnSettings`],
//! kept by the scheduler for the keys a control set, until cleared). A change of a
//! default reaches every key that follows it; a key with its own limit (or rate) keeps it.
//!
//! Invariants: a key that follows a default holds exactly that default; a key's rate
//! state (its GCRA TAT, kept by the key's entry) is carried over whenever its rate
//! changes, so the starts it is ahead by stay spaced by the new rate.

use crate::limit::rate::gcra::Gcra;

/// The limit and rate a key is held to, and whether each is the key's own.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeySettings {
    /// The most items of the key that may run at once.
    pub(super) limit: usize,
    /// The rate its starts are spaced by (`None`: no rate, nothing to check).
    pub(super) rate: Option<Gcra>,
    /// Whether `limit` is the key's own (a change of the default does not reach it).
    own_limit: bool,
    /// Whether `rate` is the key's own.
    own_rate: bool,
}

impl KeySettings {
    /// The map's defaults, or the settings of a key that follows them.
    pub(super) const fn defaults(limit: usize, rate: Option<Gcra>) -> Self {
        Self {
            limit,
            rate,
            own_limit: false,
            own_rate: false,
        }
    }

    /// The settings a key first seen gets: the defaults (`self`), but for those `own`
    /// gives it.
    #[inline]
    pub(super) fn for_new_key(&self, own: Option<&OwnSettings>) -> Self {
        let mut settings = Self::defaults(self.limit, self.rate);
        if let Some(own) = own {
            if let Some(limit) = own.limit {
                settings.set_own_limit(limit);
            }
            if let Some(rate) = own.rate {
                settings.rate = Some(rate);
                settings.own_rate = true;
            }
        }
        settings
    }

    /// The key's own settings are cleared: it follows the `defaults` again, carrying its
    /// rate state `tat` over at `now` (a key left without any rate has nothing to carry).
    pub(super) fn follow_defaults(&mut self, defaults: &Self, tat: &mut u64, now: u64) {
        self.limit = defaults.limit;
        self.own_limit = false;
        self.own_rate = false;
        match defaults.rate {
            Some(rate) => self.change_rate(rate, tat, now),
            None => self.rate = None,
        }
    }

    /// The default limit changed to `limit`: the key takes it unless it has its own.
    pub(super) fn follow_limit(&mut self, limit: usize) {
        if !self.own_limit {
            self.limit = limit;
        }
    }

    /// The default rate changed to `rate`: the key takes it unless it has its own,
    /// carrying its rate state `tat` over at `now`.
    pub(super) fn follow_rate(&mut self, rate: Gcra, tat: &mut u64, now: u64) {
        if !self.own_rate {
            self.change_rate(rate, tat, now);
        }
    }

    /// Gives the key a limit of its own.
    pub(super) fn set_own_limit(&mut self, limit: usize) {
        self.limit = limit;
        self.own_limit = true;
    }

    /// Gives the key a rate of its own, carrying its rate state `tat` over at `now`.
    pub(super) fn set_own_rate(&mut self, rate: Gcra, tat: &mut u64, now: u64) {
        self.change_rate(rate, tat, now);
        self.own_rate = true;
    }

    fn change_rate(&mut self, rate: Gcra, tat: &mut u64, now: u64) {
        if let Some(old) = self.rate {
            *tat = rate.carry_over(&old, *tat, now);
        }
        self.rate = Some(rate);
    }
}

/// The limit and rate a control gave one key (`None`: follow the default), kept while the
/// key is forgotten, until cleared.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OwnSettings {
    pub(super) limit: Option<usize>,
    pub(super) rate: Option<Gcra>,
}
