//! The map's side of a [`MapControl`](super::MapControl): what the engine keeps of the
//! control it is attached to ([`Steering`]), and what an admission tells the control and
//! takes from it ([`ControlHooks`]).
//!
//! The engine calls the hooks only for a map with a control attached (and at its end), so
//! a plain map never runs them.

use std::sync::Arc;

use super::control::{Figures, Settings, Shared};

/// What an admission tells a [`MapControl`](super::MapControl) and takes from it: its
/// running totals, the items a drain drops, the live settings, the per-key figures.
/// Implemented by [`Window`](super::Window) (nothing to count, nothing to set) and
/// [`PerKey`](super::PerKey).
pub(crate) trait ControlHooks {
    /// The running totals for a control, with `pulled` items pulled and `in_pool`
    /// futures in flight (the engine fills in `pulled` and `not_started`).
    fn figures(&self, pulled: usize, in_pool: usize) -> Figures;

    /// Removes every pulled item that has not started (a drain) and returns their input
    /// positions. Items waiting for a retry stay: they have started.
    fn take_unstarted(&mut self) -> Vec<usize>;

    /// Removes every item waiting for a retry (a stop cancels them) and returns their
    /// input positions.
    fn take_retrying(&mut self) -> Vec<usize>;

    /// Applies the settings a control asked for (the control let through only those the
    /// admission can take).
    fn apply(&mut self, settings: &Settings);

    /// Publishes the per-key figures if the control asked for them.
    fn publish_keys(&mut self, shared: &Shared);
}

/// The map's side of a [`MapControl`](super::MapControl), if one is attached.
#[derive(Debug, Default)]
pub(crate) struct Steering {
    /// The control, until the map ends: an ended map lets go of it, so nothing it does
    /// afterwards (a stream polled after its end) reaches the control, which another map
    /// may have been attached to since.
    pub(crate) shared: Option<Arc<Shared>>,
    /// The settings' generation last applied.
    pub(crate) seen: u64,
    /// A drain took effect.
    pub(crate) drained: bool,
    /// A stop took effect: the figures then, final (what ran or waited for a retry then
    /// is cancelled; outputs finished before are still handed out).
    pub(crate) stopped: Option<Figures>,
    /// The results stopped the map (`try_map_async`'s first error).
    pub(crate) broke: bool,
    /// Pulled items a drain (or a stop) dropped unstarted.
    pub(crate) not_started: usize,
    /// Items that left the map (handed out, collected, or skipped), as of the last
    /// publication.
    pub(crate) released: usize,
    /// Positions a drain or a stop skipped (left the map without an output).
    pub(crate) skipped: usize,
    /// The figures as of the end of the map's last poll (published, or noted by a stream
    /// before it handed out an output): a map dropped between two polls ends with them.
    pub(crate) last: Figures,
}

impl Steering {
    /// Tells the control the map ended with `figures` (what still ran or waited then is
    /// cancelled) and lets go of it.
    pub(crate) fn end(&mut self, figures: Figures) {
        if let Some(shared) = self.shared.take() {
            shared.end(&figures.at_end());
        }
    }
}

impl Drop for Steering {
    /// A dropped map has ended too, cancelling what it ran: its last figures are exact,
    /// since nothing in a map moves between its polls.
    fn drop(&mut self) {
        let last = self.last;
        self.end(last);
    }
}
