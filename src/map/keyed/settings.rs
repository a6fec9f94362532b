//! The limit and rate each key is held to: the map's default key limit and default key
//! rate, and a key's own setting.
//!
//! Every key's entry carries its own copy of its limit and rate ([`InForce`]), taken
//! when the key is first seen from, in order: the settings a control gave the key (kept
//! by the scheduler until cleared), the settings the map's function of the key gives it
//! (asked again each time the key is made), and the map's defaults; a server's hint sets
//! them on a known key. All three are a [`KeySettings`]. A change of a default reaches every key that follows it; a key
//! with its own limit (or rate) keeps it.
//!
//! Invariants: a key that follows a default holds exactly that default; a key's rate
//! state (its GCRA TAT, kept by the key's entry) is carried over whenever its rate
//! changes, so the starts it is ahead by stay spaced by the new rate.

use crate::limit::key_settings::KeySettings;
use crate::limit::rate::gcra::Gcra;

/// The limit and rate a key is held to, and whether each is the key's own: 16 bytes, as
/// every key's entry holds one (a crawl keeps one per host it saw within the last minute).
#[derive(Debug, Clone, Copy)]
pub(super) struct InForce {
    /// The interval of the rate its starts are spaced by, in nanoseconds (0: no rate,
    /// nothing to check); with `burst`, the rate ([`rate`](Self::rate)).
    interval: u64,
    /// The rate's burst.
    burst: u32,
    /// The most items of the key that may run at once (the bits of [`LIMIT`], at most
    /// [`MAX_LIMIT`]: [`limit`](Self::limit)), and whether the limit ([`OWN_LIMIT`]) and the
    /// rate ([`OWN_RATE`]) are the key's own (a change of the default does not reach them).
    limit: u32,
}

/// The bits of [`InForce`]'s `limit` that hold the limit.
const LIMIT: u32 = (1 << 30) - 1;

/// The largest limit a key holds: a larger one (more items than a window holds, so no
/// limit either way) is held as this.
pub(super) const MAX_LIMIT: usize = LIMIT as usize;

/// The limit is the key's own.
const OWN_LIMIT: u32 = 1 << 31;

/// The rate is the key's own.
const OWN_RATE: u32 = 1 << 30;

impl InForce {
    /// The map's defaults, or the settings of a key that follows them.
    pub(super) const fn defaults(limit: usize, rate: Option<Gcra>) -> Self {
        let (interval, burst) = match rate {
            Some(rate) => (rate.interval_nanos(), rate.burst()),
            None => (0, 1),
        };
        Self {
            interval,
            burst,
            limit: held_limit(limit),
        }
    }

    /// The rate its starts are spaced by (`None`: no rate, nothing to check).
    #[inline(always)]
    pub(super) const fn rate(&self) -> Option<Gcra> {
        Gcra::from_parts(self.interval, self.burst)
    }

    /// Sets the rate (the key's state is the caller's to carry over).
    #[inline]
    pub(super) fn set_rate(&mut self, rate: Option<Gcra>) {
        (self.interval, self.burst) = Gcra::parts(rate);
    }

    const fn is_own_limit(&self) -> bool {
        self.limit & OWN_LIMIT != 0
    }

    const fn is_own_rate(&self) -> bool {
        self.limit & OWN_RATE != 0
    }

    /// The settings a key first seen gets: the defaults (`self`), but for those `own`
    /// (a control's) or else `given` (the map's function of the key) gives it.
    #[inline]
    pub(super) fn for_new_key(
        &self,
        own: Option<&KeySettings>,
        given: Option<KeySettings>,
    ) -> Self {
        let mut settings = Self::defaults(self.limit(), self.rate());
        for own in given.iter().chain(own) {
            settings.take_own(own.get_limit(), own.get_rate().map(Gcra::new));
        }
        settings
    }

    /// The settings a control gave the key are cleared: it follows the `defaults` again,
    /// but for what `given` (the map's function of the key) gives it, carrying its rate
    /// state `tat` over at `now` (a key left without any rate has nothing to carry).
    pub(super) fn follow_defaults(
        &mut self,
        defaults: &Self,
        given: Option<KeySettings>,
        tat: &mut u64,
        now: u64,
    ) {
        let mut next = defaults.for_new_key(None, given);
        if let Some(rate) = next.rate() {
            next.set_rate(self.rate());
            next.change_rate(rate, tat, now);
        }
        *self = next;
    }

    /// Takes `limit` and `rate` (when given) as the key's own, on a key just made (no rate
    /// state to carry over): from the map's function of the key or from a control.
    fn take_own(&mut self, limit: Option<usize>, rate: Option<Gcra>) {
        if let Some(limit) = limit {
            self.set_own_limit(limit);
        }
        if let Some(rate) = rate {
            self.set_rate(Some(rate));
            self.limit |= OWN_RATE;
        }
    }

    /// The most items of the key that may run at once.
    #[inline(always)]
    pub(super) const fn limit(&self) -> usize {
        (self.limit & LIMIT) as usize
    }

    /// Sets the limit (one above [`MAX_LIMIT`] is held as `MAX_LIMIT`).
    #[inline]
    pub(super) const fn set_limit(&mut self, limit: usize) {
        self.limit = (self.limit & !LIMIT) | held_limit(limit);
    }

    /// The default limit changed to `limit`: the key takes it unless it has its own.
    pub(super) fn follow_limit(&mut self, limit: usize) {
        if !self.is_own_limit() {
            self.set_limit(limit);
        }
    }

    /// The default rate changed to `rate`: the key takes it unless it has its own,
    /// carrying its rate state `tat` over at `now`.
    pub(super) fn follow_rate(&mut self, rate: Gcra, tat: &mut u64, now: u64) {
        if !self.is_own_rate() {
            self.change_rate(rate, tat, now);
        }
    }

    /// Gives the key a limit of its own.
    fn set_own_limit(&mut self, limit: usize) {
        self.set_limit(limit);
        self.limit |= OWN_LIMIT;
    }

    /// Takes each value `own` sets as the key's own (what it leaves unset stays as it
    /// is), carrying its rate state `tat` over at `now`.
    pub(super) fn set_own(&mut self, own: KeySettings, tat: &mut u64, now: u64) {
        if let Some(limit) = own.get_limit() {
            self.set_own_limit(limit);
        }
        if let Some(rate) = own.get_rate() {
            self.change_rate(Gcra::new(rate), tat, now);
            self.limit |= OWN_RATE;
        }
    }

    fn change_rate(&mut self, rate: Gcra, tat: &mut u64, now: u64) {
        if let Some(old) = self.rate() {
            *tat = rate.carry_over(&old, *tat, now);
        }
        self.set_rate(Some(rate));
    }
}

/// `limit` as a key's entry holds it: at most [`MAX_LIMIT`].
const fn held_limit(limit: usize) -> u32 {
    if limit > MAX_LIMIT {
        LIMIT
    } else {
        limit as u32
    }
}

/// The map's function of the key, giving each key its [`KeySettings`].
pub(crate) struct GivenSettings<K>(Box<dyn FnMut(&K) -> KeySettings + Send>);

impl<K> GivenSettings<K> {
    pub(crate) fn new(given: impl FnMut(&K) -> KeySettings + Send + 'static) -> Self {
        Self(Box::new(given))
    }

    /// What the function gives `key`.
    pub(super) fn of(&mut self, key: &K) -> KeySettings {
        (self.0)(key)
    }
}

impl<K> std::fmt::Debug for GivenSettings<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GivenSettings")
    }
}
