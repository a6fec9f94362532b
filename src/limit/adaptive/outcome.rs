//! [`Outcome`]: what one attempt's output says about the key it ran for.

/// What one attempt's output says about its key: it succeeded, the server was **overloaded**
/// (a 429, a 503, an attempt timeout), or it failed for another reason (a 404, a stray 500).
///
/// An adaptive key moves its limit and rate from the outcomes of its attempts (see
/// [`Adaptive`](crate::Adaptive)): an overload may lower them, a success is credit for
/// raising them (and its latency is a sample), a plain failure changes nothing: it never
/// lowers a value, never counts as credit, and its latency is not a sample (an error that
/// came back at once says nothing about how busy the server is).
///
/// A struct with private fields rather than an enum, so that what a server says beyond
/// "overloaded" can be added to it later without breaking code that builds one.
///
/// # Examples
///
/// ```
/// use tollgate::Outcome;
///
/// fn classify(status: u16) -> Outcome {
///     match status {
///         200..=399 => Outcome::success(),
///         429 | 503 => Outcome::overload(),
///         _ => Outcome::failure(),
///     }
/// }
///
/// assert!(classify(200).is_success());
/// assert!(classify(429).is_overload());
/// assert!(classify(404).is_failure());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Success,
    Overload,
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
        }
    }

    /// The server had too much: a 429, a 503, an attempt that timed out. It may lower the
    /// key's limit or rate (at most once per round, see [`Adaptive`](crate::Adaptive)).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Outcome::overload().is_overload());
    /// ```
    pub const fn overload() -> Self {
        Self {
            kind: Kind::Overload,
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
}
