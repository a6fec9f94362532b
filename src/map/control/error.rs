//! [`ControlError`]: why a [`MapControl`](crate::MapControl) setting was refused, told
//! apart by what the map lacks.

use std::fmt;

/// What the map lacks for a setting (the control decides it from what the map can change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// No map is attached: none yet, or it ended.
    NotAttached,
    /// A per-key setting on a map without a key function.
    NoKeys,
    /// A rate on a map without a scheduler.
    NoScheduler,
    /// A setting of one key through a control attached before `.per_key`.
    AttachedBeforeKeys,
    /// A key's values in force on a map whose keys do not adapt.
    NotAdaptive,
}

/// A [`MapControl`](crate::MapControl) setting the map cannot take: the control is
/// attached to no map (none yet, or its map ended), or the map was built without what the
/// setting changes (a default key limit on a map without `.per_key`, a rate on a plain
/// map).
///
/// # Examples
///
/// ```
/// use tollgate::{MapControl, Rate};
/// let control: MapControl = MapControl::new();
/// let plain = tollgate::map_async(0..3u32, 2, |n| async move { n }).control(&control);
/// let error = control.set_rate(Rate::per_second(5)).unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "the map cannot change its rate: it was built without `.per_key`, `.rate` or `.retry`"
/// );
/// # drop(plain);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    kind: Kind,
    setting: &'static str,
}

impl ControlError {
    /// The error for `setting`, which the map cannot take for want of `kind`.
    pub(super) fn new(kind: Kind, setting: &'static str) -> Self {
        Self { kind, setting }
    }

    /// Whether the control was attached to no map: none yet, or its map ended.
    #[must_use]
    pub fn is_not_attached(&self) -> bool {
        self.kind == Kind::NotAttached
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::NotAttached => write!(
                f,
                "cannot change the {}: the control is attached to no map",
                self.setting
            ),
            Kind::NoKeys => write!(
                f,
                "the map cannot change its {}: it was built without `.per_key`",
                self.setting
            ),
            Kind::NoScheduler => write!(
                f,
                "the map cannot change its {}: it was built without `.per_key`, `.rate` or `.retry`",
                self.setting
            ),
            Kind::NotAdaptive => write!(
                f,
                "the map cannot change a key's {}: its keys do not adapt (it was built without `.adaptive`); `set_key_settings` sets a key's limit and rate",
                self.setting
            ),
            Kind::AttachedBeforeKeys => write!(
                f,
                "cannot change the {}: the control was attached before `.per_key`, so it names no key of the map (attach it after `.per_key`)",
                self.setting
            ),
        }
    }
}

impl std::error::Error for ControlError {}
