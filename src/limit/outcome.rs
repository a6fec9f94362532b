//! [`Outcome`]: what one attempt's output says about the key it ran for.

use crate::limit::hint::Hint;

/// What one attempt's output says about its key: it succeeded, the server was **overloaded**
/// (a 429, a 503 without `Retry-After`, an attempt timeout), it is **out** for a while (a
/// 503 with `Retry-After`: down for maintenance, restarting), or the attempt failed for
/// another reason (a 404, a stray 500); and, whichever it was, the server's [`Hint`] about
/// the key, if it gave one.
///
/// An adaptive key moves its limit and rate from the outcomes of its attempts (see
/// [`Adaptive`](crate::Adaptive)): an overload may lower them, a success is credit for
/// raising them (and its latency is a sample), a plain failure changes nothing: it never
/// lowers a value, never counts as credit, and its latency is not a sample (an error that
/// came back at once says nothing about how busy the server is). An outage lowers nothing
/// either (a server that is down says nothing about the pace it can take once it is back):
/// the key waits out the pause its hint asks for. But when an attempt that was under way as
/// an outage came back succeeds, the server was refusing some requests while serving
/// others: the outage was an overload after all, and lowers the key's values as one.
/// Circuit breakers count overloads, outages and failures alike as bad.
///
/// The hint is read from every outcome, success or failure alike (servers send rate-limit
/// headers on their 200s too): attach it with [`with_hint`](Self::with_hint). With the
/// `http` feature, `tollgate::http::outcome` builds the whole outcome from a response's
/// status and headers.
///
/// A struct with private fields rather than an enum, so that what a server says beyond
/// "overloaded" fits in it (the hint) without breaking code that builds one. It stays
/// `Copy`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Hint, Outcome};
///
/// fn classify(status: u16, retry_after: Option<Duration>) -> Outcome {
///     let outcome = match status {
///         200..=399 => Outcome::success(),
///         429 | 503 => Outcome::overload(),
///         _ => Outcome::failure(),
///     };
///     match retry_after {
///         Some(pause) => outcome.with_hint(Hint::new().pause(pause)),
///         None => outcome,
///     }
/// }
///
/// assert!(classify(200, None).is_success());
/// assert!(classify(404, None).is_failure());
/// let throttled = classify(429, Some(Duration::from_secs(5)));
/// assert!(throttled.is_overload());
/// assert_eq!(throttled.hint().get_pause(), Some(Duration::from_secs(5)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    kind: Kind,
    hint: Hint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Success,
    Overload,
    Outage,
    Failure,
}

impl Outcome {
    /// The attempt succeeded: credit for raising the key's values, and its latency is a
    /// sample.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Outcome::success().is_success());
    /// ```
    pub const fn success() -> Self {
        Self {
            kind: Kind::Success,
            hint: Hint::new(),
        }
    }

    /// The server had too much: a 429, a 503 without `Retry-After`, an attempt that timed
    /// out. It may lower the key's limit or rate (at most once per round, see
    /// [`Adaptive`](crate::Adaptive)).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Outcome::overload().is_overload());
    /// ```
    pub const fn overload() -> Self {
        Self {
            kind: Kind::Overload,
            hint: Hint::new(),
        }
    }

    /// The server is out for a while (a 503 with `Retry-After`, a maintenance page): the
    /// key waits out the pause its hint asks for (attach it with
    /// [`with_hint`](Self::with_hint)) and its breaker counts the attempt bad, but its limit
    /// and rate are not lowered, unless an attempt that was under way as this one came back
    /// succeeds (the server served some and refused others: an overload).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Hint, Outcome};
    ///
    /// let down = Outcome::outage().with_hint(Hint::new().pause(Duration::from_secs(30)));
    /// assert!(down.is_outage());
    /// assert!(!down.is_overload());
    /// ```
    pub const fn outage() -> Self {
        Self {
            kind: Kind::Outage,
            hint: Hint::new(),
        }
    }

    /// The attempt failed for a reason that is not an overload (a 404, a stray 500, a parse
    /// error): it never lowers the key's values, is no credit for raising them, and its
    /// latency is not a sample.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Outcome::failure().is_failure());
    /// ```
    pub const fn failure() -> Self {
        Self {
            kind: Kind::Failure,
            hint: Hint::new(),
        }
    }

    /// Whether this is [`success`](Self::success).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!tollgate::Outcome::overload().is_success());
    /// ```
    pub const fn is_success(&self) -> bool {
        matches!(self.kind, Kind::Success)
    }

    /// Whether this is [`overload`](Self::overload).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!tollgate::Outcome::failure().is_overload());
    /// ```
    pub const fn is_overload(&self) -> bool {
        matches!(self.kind, Kind::Overload)
    }

    /// Whether this is [`outage`](Self::outage).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!tollgate::Outcome::overload().is_outage());
    /// ```
    pub const fn is_outage(&self) -> bool {
        matches!(self.kind, Kind::Outage)
    }

    /// Whether this is [`failure`](Self::failure).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!tollgate::Outcome::success().is_failure());
    /// ```
    pub const fn is_failure(&self) -> bool {
        matches!(self.kind, Kind::Failure)
    }

    /// This outcome with the server's `hint` about the key (it replaces any hint the outcome
    /// had: [`Hint::merge`] combines two). A map reads the hint of every outcome, success,
    /// overload or failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Hint, Outcome, Rate};
    ///
    /// // A 200 that says "10 a second, please".
    /// let outcome = Outcome::success().with_hint(Hint::new().rate(Rate::per_second(10)));
    /// assert!(outcome.is_success());
    /// assert_eq!(outcome.hint().get_rate(), Some(Rate::per_second(10)));
    /// ```
    #[must_use]
    pub const fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = hint;
        self
    }

    /// The server's hint about the key ([empty](Hint::is_empty) unless one was attached
    /// with [`with_hint`](Self::with_hint)).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Outcome::overload().hint().is_empty());
    /// ```
    pub const fn hint(&self) -> Hint {
        self.hint
    }

    /// The hint the outcome carries, borrowed (the hot paths read it without a copy).
    pub(crate) const fn hint_ref(&self) -> &Hint {
        &self.hint
    }
}
