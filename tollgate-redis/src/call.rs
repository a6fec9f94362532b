//! One call to Redis on the store's [`Link`], bounded by the call timeout: admitted by the
//! store's health (failing at once while Redis counts as unreachable, unless the call is the
//! probe), sent, and sent again after a short pause while its failure can pass (a refused
//! connection, a Redis still loading its data), until it succeeds, Redis answers with an
//! error, or its wait is over (then Redis counts as unreachable).

use std::time::{Duration, Instant};

use futures_lite::future;
use redis::{FromRedisValue, RedisError, ScriptInvocation};

use crate::connection::{Failure, Link};
use crate::error::RedisLimitsError;
use crate::health::{Admit, Attempt, PROBE_WAIT};

/// The pause between two tries of a call that failed for a reason that can pass (a refused
/// connection, a Redis still loading its data), within the bounded wait.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

/// One call: a script or a plain command.
pub(crate) enum Call<'a> {
    Script(&'a ScriptInvocation<'a>),
    Cmd(&'a redis::Cmd),
}

impl Link {
    /// Fails at once if a call would be refused now because Redis counts as unreachable
    /// (see [`Health`](crate::health::Health)): a check before preparing a call that would
    /// have to be undone.
    pub(crate) fn fail_fast(&self) -> Result<(), RedisLimitsError> {
        match self.health.refusal(Instant::now()) {
            Some((reason, after)) => Err(self.unreachable(&reason, after)),
            None => Ok(()),
        }
    }

    /// Runs one call, retrying within the bounded wait while the failure can pass; fails
    /// closed with an `unavailable` error naming the address after it.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
    ) -> Result<T, RedisLimitsError> {
        self.query_counted(call).await.map(|(value, _)| value)
    }

    /// As [`query`](Self::query), also saying how many times the call was sent: a call
    /// sent more than once may have run more than once.
    ///
    /// Fails at once while Redis counts as unreachable, unless this call is the probe (then
    /// it makes one attempt). A call that fails after its whole wait makes Redis count as
    /// unreachable.
    pub(crate) async fn query_counted<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
    ) -> Result<(T, u32), RedisLimitsError> {
        let deadline = Instant::now() + self.wait;
        let mut probe = self.admit(deadline).await?;
        let probing = probe.is_some();
        let mut sends = 0u32;
        loop {
            sends += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let attempt = self.send(call, deadline, &mut probe);
            let reason = match tollgate::timeout(remaining, attempt).await {
                Ok(Ok(value)) => {
                    // A probe that found an open connection answering ends the outage too.
                    self.reached(probe.take());
                    return Ok((value, sends));
                }
                Ok(Err((_, Failure::Refused(error)))) => return Err(error),
                Ok(Err((_, Failure::Late))) => format!("no answer within {:?}", self.wait),
                Ok(Err((generation, Failure::Redis(error)))) => {
                    self.settle(generation, error, &mut probe)?
                }
                Err(_) => {
                    // A Redis that stopped answering (paused, partitioned) may never reset
                    // the socket: start over on a new one.
                    self.forget_current();
                    format!("no answer within {:?}", self.wait)
                }
            };
            let now = Instant::now();
            if probing {
                // The probe made its one attempt and Redis is still out of reach.
                drop(probe.take());
                return Err(self.unreachable(&reason, self.health.retry_after(now)));
            }
            if let Some((down, after)) = self.health.down(now) {
                // Another call gave up meanwhile: so does this one.
                return Err(self.unreachable(&down, after));
            }
            let remaining = deadline.saturating_duration_since(now);
            if remaining.is_zero() {
                self.forget_current();
                let after = self.health.declare_down(&reason, now);
                return Err(self.unreachable(&reason, after));
            }
            tollgate::sleep(RETRY_PAUSE.min(remaining)).await;
        }
    }

    /// Whether a call due by `deadline` may go: `None` as usual, `Some` when it is the
    /// probe of an unreachable Redis (its one attempt). While Redis counts as unreachable it
    /// fails at once, after waiting once for the outcome of a probe under way.
    async fn admit(&self, deadline: Instant) -> Result<Option<Attempt<'_>>, RedisLimitsError> {
        let mut waited = false;
        loop {
            let ended = self.health.ended();
            let now = Instant::now();
            match self.health.admit(now, deadline) {
                Admit::Go => return Ok(None),
                Admit::Probe(attempt) => return Ok(Some(attempt)),
                Admit::Busy(..) if !waited => {
                    // A probe is under way: its outcome, or give up soon.
                    waited = true;
                    let wait = PROBE_WAIT.min(deadline.saturating_duration_since(now));
                    future::or(ended, tollgate::sleep(wait)).await;
                }
                Admit::Refuse(reason, after) | Admit::Busy(reason, after) => {
                    return Err(self.unreachable(&reason, after));
                }
            }
        }
    }

    /// Sends the call once, on the current connection or a new one; a failure carries the
    /// generation of the connection it was sent on, if it got that far.
    async fn send<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        deadline: Instant,
        probe: &mut Option<Attempt<'_>>,
    ) -> Result<T, (Option<u64>, Failure)> {
        let (generation, mut conn) = self
            .connection(deadline, probe)
            .await
            .map_err(|e| (None, e))?;
        let reply = match call {
            Call::Script(invocation) => invocation.invoke_async::<T>(&mut conn).await,
            Call::Cmd(cmd) => cmd.query_async::<T>(&mut conn).await,
        };
        reply.map_err(|e| (Some(generation), Failure::Redis(e)))
    }

    /// What a send that failed with `error` leaves: the reason to try again with (a broken
    /// connection, forgotten, or a failure that passes), or the call's end when Redis
    /// answered with an error.
    fn settle(
        &self,
        generation: Option<u64>,
        error: RedisError,
        probe: &mut Option<Attempt<'_>>,
    ) -> Result<String, RedisLimitsError> {
        // READONLY / MASTERDOWN: this server was demoted (a failover behind a fixed
        // address); a new connection may reach the new primary.
        let demoted = matches!(error.code(), Some("READONLY" | "MASTERDOWN"));
        let broken = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || demoted;
        if broken {
            if let Some(generation) = generation {
                self.forget(generation);
            }
        } else if !is_passing(&error) {
            // An answer, if not the one hoped for: Redis is there.
            self.reached(probe.take());
            return Err(RedisLimitsError::unavailable(&self.address, error));
        }
        Ok(error.to_string())
    }

    /// Redis answered: through the probe's turn when this call is the probe.
    fn reached(&self, probe: Option<Attempt<'_>>) {
        match probe {
            Some(attempt) => attempt.reached(),
            None => self.health.reached(),
        }
    }
}

/// Server errors that pass on their own: a Redis loading its data, a replica without its
/// primary, a busy script. (READONLY is handled with the broken connections.)
fn is_passing(error: &RedisError) -> bool {
    matches!(
        error.code(),
        Some("LOADING" | "TRYAGAIN" | "MASTERDOWN" | "BUSY" | "CLUSTERDOWN")
    )
}
