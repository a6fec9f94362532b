//! The options every bulkhead takes, and the one definition of their builder methods.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::RuntimeKey;

/// Options shared by [`Bulkhead`](crate::Bulkhead) and
/// [`KeyedBulkhead`](crate::KeyedBulkhead).
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) max_waiting: Option<usize>,
    pub(crate) name: Name,
    pub(crate) global: bool,
}

impl Options {
    /// Options for a limiter of `limit`, which must be 1 to 2^31 - 1 (checked here, `what`
    /// names the caller in the panic message; the limit itself lives in the caps).
    #[track_caller]
    pub(crate) const fn new(limit: usize, what: Kind) -> Self {
        crate::limit::check::at_least_one(
            limit,
            match what {
                Kind::Bulkhead => {
                    "tollgate::Bulkhead::new: a limit of 0 would refuse all work; use at least 1"
                }
                Kind::Keyed => {
                    "tollgate::KeyedBulkhead::new: a limit of 0 would refuse all work; use at least 1"
                }
            },
        );
        assert!(
            limit <= crate::limit::semaphore::Semaphore::MAX_PERMITS,
            "tollgate bulkhead: a limit above Semaphore::MAX_PERMITS (2^31 - 1)"
        );
        Self {
            acquire_timeout: None,
            max_waiting: None,
            name: Name::Unnamed,
            global: false,
        }
    }

    /// Sets a `'static` name in a `const fn`.
    pub(crate) const fn set_static_name(&mut self, name: &'static str) {
        let previous = mem::replace(&mut self.name, Name::Static(name));
        // A `const fn` cannot run destructors. Only a name given to `with_name` owns
        // memory, and replacing it by a static one is rare and small enough to leak.
        mem::forget(previous);
    }

    /// How many may queue: a zero acquire timeout means "a free permit or nothing", so no
    /// queue at all.
    #[inline]
    pub(crate) fn queue_bound(&self) -> usize {
        match self.max_waiting {
            _ if self.acquire_timeout == Some(Duration::ZERO) => 0,
            Some(max) => max,
            None => usize::MAX,
        }
    }

    /// [`runtime`](Self::runtime) for a caller that [`register`](RuntimeKey::register)s
    /// the key before it remembers it.
    #[inline]
    pub(crate) fn runtime_unregistered(&self) -> RuntimeKey {
        if self.global {
            RuntimeKey::process()
        } else {
            RuntimeKey::current_unregistered()
        }
    }

    /// The runtime whose cap the calling code uses.
    #[inline]
    pub(crate) fn runtime(&self) -> RuntimeKey {
        if self.global {
            RuntimeKey::process()
        } else {
            RuntimeKey::current()
        }
    }

    /// The fields of a `Debug` output, with the limit in force.
    pub(crate) fn fmt_fields(&self, limit: usize, f: &mut fmt::DebugStruct<'_, '_>) {
        f.field("name", &self.name.as_str())
            .field("limit", &limit)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("max_waiting", &self.max_waiting)
            .field("global", &self.global);
    }
}

/// Which limiter builds the options, for its panic message.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Bulkhead,
    Keyed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    Unnamed,
    Static(&'static str),
    Shared(Arc<str>),
}

impl Name {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Name::Unnamed => None,
            Name::Static(name) => Some(name),
            Name::Shared(name) => Some(name),
        }
    }
}

/// The builder methods and `limit()` of a bulkhead type with an `options: Options` field,
/// written once for [`Bulkhead`](crate::Bulkhead) and
/// [`KeyedBulkhead`](crate::KeyedBulkhead). `$new` is the path of the type's `new` in the
/// examples, `$key` the arguments of its `acquire` there, `$permit` what a caller waits for.
macro_rules! options_builder {
    (new: $new:literal, key: $key:literal, permit: $permit:literal, per: $per:literal) => {
        #[doc = concat!("Gives up waiting for ", $permit, " after `duration`, with a [`BulkheadError`](crate::BulkheadError) whose [`is_timed_out`](crate::BulkheadError::is_timed_out) is true.")]
        ///
        /// It bounds only the wait for a permit, not the work done with it.
        /// `Duration::ZERO` means "take a free permit or fail at once" (no queueing).
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        ///
        #[doc = concat!("let limiter = ", $new, "(1).acquire_timeout(Duration::from_millis(5));")]
        /// # futures_lite::future::block_on(async {
        #[doc = concat!("let _held = limiter.acquire(", $key, ").await.unwrap();")]
        #[doc = concat!("let error = limiter.acquire(", $key, ").await.unwrap_err();")]
        /// assert!(error.is_timed_out());
        /// assert_eq!(error.acquire_timeout(), Some(Duration::from_millis(5)));
        /// # });
        /// ```
        pub const fn acquire_timeout(mut self, duration: ::std::time::Duration) -> Self {
            self.options.acquire_timeout = Some(duration);
            self
        }

        #[doc = concat!("Refuses at once, with a [`BulkheadError`](crate::BulkheadError) whose [`is_queue_full`](crate::BulkheadError::is_queue_full) is true, when no permit is free and `max_waiting` callers already wait", $per, ".")]
        ///
        /// `max_waiting(0)` means no queue at all: refuse whenever every permit is taken.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, "(1).max_waiting(0);")]
        /// # futures_lite::future::block_on(async {
        #[doc = concat!("let _held = limiter.acquire(", $key, ").await.unwrap();")]
        #[doc = concat!("let error = limiter.acquire(", $key, ").await.unwrap_err();")]
        /// assert!(error.is_queue_full());
        /// assert_eq!(error.max_waiting(), Some(0));
        /// # });
        /// ```
        pub const fn max_waiting(mut self, max_waiting: usize) -> Self {
            self.options.max_waiting = Some(max_waiting);
            self
        }

        /// Names the limiter in [`BulkheadError`](crate::BulkheadError)s and `Debug` output.
        ///
        /// For a name built at run time use [`with_name`](Self::with_name).
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, "(1).name(\"mail\").max_waiting(0);")]
        /// # futures_lite::future::block_on(async {
        #[doc = concat!("let _held = limiter.acquire(", $key, ").await.unwrap();")]
        #[doc = concat!("let refused = limiter.acquire(", $key, ").await.unwrap_err();")]
        /// assert_eq!(refused.name(), Some("mail"));
        /// # });
        /// ```
        pub const fn name(mut self, name: &'static str) -> Self {
            self.options.set_static_name(name);
            self
        }

        /// Like [`name`](Self::name), with a name built at run time.
        ///
        /// # Examples
        ///
        /// ```
        /// let host = "example.com";
        #[doc = concat!("let limiter = ", $new, "(1).with_name(format!(\"host {host}\")).max_waiting(0);")]
        /// # futures_lite::future::block_on(async {
        #[doc = concat!("let _held = limiter.acquire(", $key, ").await.unwrap();")]
        #[doc = concat!("let refused = limiter.acquire(", $key, ").await.unwrap_err();")]
        /// assert_eq!(refused.name(), Some("host example.com"));
        /// # });
        /// ```
        pub fn with_name(mut self, name: impl Into<String>) -> Self {
            self.options.name = $crate::limit::bulkhead::options::Name::Shared(name.into().into());
            self
        }

        #[doc = concat!("Makes the limit one cap", $per, " across all runtimes instead of one per runtime.")]
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::run_sync;
        ///
        #[doc = concat!("let limiter = ", $new, "(1).global();")]
        #[doc = concat!("let held = limiter.try_acquire(", $key, ").unwrap();")]
        /// // Another runtime (each `run_sync` call is one) sees the same cap.
        #[doc = concat!("assert!(run_sync(async { limiter.try_acquire(", $key, ").unwrap_err().is_busy() }));")]
        /// drop(held);
        /// ```
        pub const fn global(mut self) -> Self {
            self.options.global = true;
            self
        }

        #[doc = concat!("The most callers let in at once", $per, " (per runtime unless [`global`](Self::global)): the limit in force, as set by `new` or since by [`set_limit`](Self::set_limit).")]
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, "(8);")]
        /// assert_eq!(limiter.limit(), 8);
        /// limiter.set_limit(3);
        /// assert_eq!(limiter.limit(), 3);
        /// ```
        pub fn limit(&self) -> usize {
            self.live_limit()
        }
    };
}
pub(crate) use options_builder;
