//! A server's hints as a part: a limit or a rate a hint carries (its [`KeySettings`]:
//! [`Hint::get_settings`](crate::Hint::get_settings)) becomes the key's own (on an adaptive
//! map, its ceilings), as if a control had set it, and the key is kept [`HINT_KEPT`] after
//! the hint, so a host whose items come one by one keeps what its server said between
//! them. (A hint's pause is the pause's part, `pause.rs`.)
//!
//! [`KeySettings`]: crate::KeySettings

use super::key::KeyState;
use super::part::{Ended, Part};
use crate::limit::key_settings::KeySettings;
use crate::limit::rate::gcra::Gcra;

/// How long a key whose server hinted a limit or a rate is kept after the hint, idle or not
/// (60 s): forgetting it would forget the hint.
pub(super) const HINT_KEPT: u64 = 60_000_000_000;

/// Gives each key the settings its server hinted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hints;

impl Hints {
    /// What of the settings a hint carries differs from what the key was given (`given`:
    /// its limit and rate, on an adaptive map its ceilings): the change it makes, if any.
    /// (A rate set again would carry its state over for nothing.)
    pub(super) fn change(ended: &Ended<'_>, given: (usize, Option<Gcra>)) -> Option<KeySettings> {
        let hinted = ended.outcome.hint_ref().get_settings();
        let (limit_given, rate_given) = given;
        let mut changed = KeySettings::new();
        if let Some(limit) = hinted.get_limit().filter(|&limit| limit != limit_given) {
            changed = changed.limit(limit);
        }
        if let Some(rate) = hinted
            .get_rate()
            .filter(|&rate| Some(Gcra::new(rate)) != rate_given)
        {
            changed = changed.rate(rate);
        }
        (!changed.is_empty()).then_some(changed)
    }
}

/// The hints as a part: a key whose server hinted a limit or a rate is kept [`HINT_KEPT`]
/// after the hint. The change itself goes through the settings' owner (on an adaptive map,
/// adaptation: `Parts::change_settings`), before this part hears of the end.
impl<K, T> Part<K, T> for Hints {
    fn ended(&mut self, _key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        if ended.hinted && !ended.outcome.hint_ref().get_settings().is_empty() {
            state.keep_until(now.saturating_add(HINT_KEPT));
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        !state.is_kept(now)
    }
}
