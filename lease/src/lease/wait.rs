//! Waiting for a lease: a blocking acquire bounded by a deadline and
//! cancellable from another thread.
//!
//! What [`Contender::acquire_with`] promises:
//!
//! - **It returns the lease, the holder, or the reason at once.** The lease
//!   when an attempt takes it; [`LeaseError::Held`] naming the holder when
//!   the deadline comes first; the first permanent error
//!   ([`LeaseError::is_permanent`]) without waiting; [`LeaseError::Cancelled`]
//!   once its [`Cancel`] is cancelled.
//! - **It waits for the record, not a fixed poll.** After reading a fresh
//!   record of another holder it sleeps until that record can expire by this
//!   contender's own clocks (`renewed_at` plus its TTL, or the end of a
//!   suspect record's watch), plus a few jittered milliseconds so that
//!   waiters do not arrive together; but never longer than
//!   [`Wait::max_reread`] (jittered), so a release, which frees the lease at
//!   once, is noticed early. After a failed request it retries after a
//!   jittered pause of at most a second.
//! - **Nothing passes the deadline.** Every request of every attempt is
//!   bounded by the deadline (and by [`Wait::attempt_timeout`]), and no
//!   sleep ends after it.
//! - **One instance throughout.** Every attempt is made by the same
//!   contender, so a write of an earlier attempt whose answer was lost is
//!   recognised as ours. A wait that ends in an error other than `Held` may
//!   leave such a record behind: [`Contender::release_abandoned_before`]
//!   hands it back.
//!
//! A cancel is seen between requests: an attempt in flight finishes first
//! (bounded by its deadline), and if it took the lease, the lease is
//! released before `Cancelled` is returned.

use super::{Contender, Lease};
use crate::clock::Clock;
use crate::error::LeaseError;
use crate::watch::Watcher;
use crossbeam_channel::{Receiver, Sender};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest pause between reads of a held record unless told otherwise.
pub const DEFAULT_MAX_REREAD: Duration = Duration::from_secs(1);

/// The longest an attempt's requests may take unless told otherwise: a
/// [`Wait`]'s, and a [`HeldSet`](crate::held_set::HeldSet)'s (the one
/// default of both; `held_set` names it too).
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after a record's expiry a waiter arrives, before jitter (it
/// arrives between one half and three halves of this late).
const ARRIVAL_SPREAD: Duration = Duration::from_millis(10);

/// The longest pause before retrying after a failed request.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Stops a [`Contender::acquire_with`] waiting on another thread. Clones
/// share one flag; cancelling is for good.
#[derive(Clone)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

struct CancelInner {
    /// Dropped on cancel (so `None` once cancelled), which wakes every
    /// waiter's `select!`.
    wake: Mutex<Option<Sender<()>>>,
    woken: Receiver<()>,
}

impl Cancel {
    /// A handle not cancelled yet.
    pub fn new() -> Self {
        let (wake, woken) = crossbeam_channel::bounded(0);
        Cancel {
            inner: Arc::new(CancelInner {
                wake: Mutex::new(Some(wake)),
                woken,
            }),
        }
    }

    /// Stop every wait that uses this handle, now or later.
    pub fn cancel(&self) {
        drop(self.wake().take());
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.wake().is_none()
    }

    fn wake(&self) -> std::sync::MutexGuard<'_, Option<Sender<()>>> {
        self.inner.wake.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// How [`Contender::acquire_with`] waits: until when, how often it
/// re-reads a held record, how long one attempt may take, and what can
/// cancel it.
///
/// ```
/// # extern crate bucket_lease_core as bucket_lease;
/// use bucket_lease::{lease::Cancel, Wait};
/// use std::time::{Duration, Instant};
///
/// let cancel = Cancel::new();
/// let wait = Wait::until(Instant::now() + Duration::from_secs(60))
///     .max_reread(Duration::from_millis(500))
///     .cancel(cancel.clone());
/// assert!(wait.deadline().is_some());
/// ```
#[derive(Debug, Clone)]
pub struct Wait {
    deadline: Option<Instant>,
    max_reread: Duration,
    attempt_timeout: Duration,
    cancel: Option<Cancel>,
}

impl Wait {
    /// Wait until `deadline` on the contender's monotonic clock.
    pub fn until(deadline: Instant) -> Self {
        Wait {
            deadline: Some(deadline),
            ..Self::forever()
        }
    }

    /// Wait until the lease is taken, a permanent error, or a cancel.
    pub fn forever() -> Self {
        Wait {
            deadline: None,
            max_reread: DEFAULT_MAX_REREAD,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            cancel: None,
        }
    }

    /// Re-read a held record at least this often (jittered between one
    /// half and one and a half times), so a release is noticed within
    /// about this long (default [`DEFAULT_MAX_REREAD`]; at least 1 ms).
    pub fn max_reread(mut self, every: Duration) -> Self {
        self.max_reread = every.max(Duration::from_millis(1));
        self
    }

    /// Abandon each attempt's requests after this long (default
    /// [`DEFAULT_ATTEMPT_TIMEOUT`]), even when the deadline is further; on
    /// a store with a write interval
    /// ([`Store::write_interval`](crate::store::Store::write_interval)),
    /// never less than two intervals, as an acquire there writes its
    /// record twice, an interval apart.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Stop when `cancel` is cancelled.
    pub fn cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_cancelled)
    }

    /// The longest pause between reads ([`max_reread`](Self::max_reread)):
    /// also a [`Watcher`]'s poll interval.
    pub(crate) fn reread(&self) -> Duration {
        self.max_reread
    }

    /// Sleep on `clock` until `until` (at once if it has passed), or until
    /// the wait is cancelled: `false` when cancelled.
    pub(crate) fn sleep_until(&self, clock: &dyn Clock, until: Instant) -> bool {
        match &self.cancel {
            _ if self.cancelled() => false,
            Some(cancel) => crossbeam_channel::select! {
                recv(clock.timer(until)) -> _ => !self.cancelled(),
                recv(cancel.inner.woken) -> _ => false,
            },
            None => {
                clock.sleep(until.saturating_duration_since(clock.now()));
                true
            }
        }
    }

    /// The deadline of an attempt starting at `now`: its timeout, at least
    /// `floor`, within the wait's deadline.
    pub(crate) fn attempt_deadline(&self, now: Instant, floor: Duration) -> Option<Instant> {
        match (
            now.checked_add(self.attempt_timeout.max(floor)),
            self.deadline,
        ) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }
}

impl Contender {
    /// A [`Watcher`] of this contender's lease: the same store, key and
    /// clock, reporting each change of holder, epoch or state as a
    /// follower sees it. See [`crate::watch`].
    pub fn watch(&self) -> Watcher {
        Watcher::for_key(
            Arc::clone(&self.store),
            self.key.clone(),
            Arc::clone(&self.options.clock),
        )
    }

    /// Wait for the lease as `wait` says. See the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] naming the holder when the deadline came while
    /// another instance held the lease; [`LeaseError::Cancelled`] when
    /// cancelled; a permanent error at once; otherwise, at the deadline,
    /// the last attempt's error.
    pub fn acquire_with(&mut self, wait: &Wait) -> Result<Lease, LeaseError> {
        let clock = Arc::clone(&self.options.clock);
        let cancelled = |key: &str| LeaseError::Cancelled {
            key: key.to_string(),
        };
        // An acquire on a store with a write interval writes its record
        // twice, an interval apart: no attempt is given less than two.
        let floor = self.store.write_interval().unwrap_or_default() * 2;
        loop {
            if wait.cancelled() {
                return Err(cancelled(&self.key));
            }
            let attempt_deadline = wait.attempt_deadline(clock.now(), floor);
            let error = match self.try_acquire_before(attempt_deadline) {
                Ok(lease) if wait.cancelled() => {
                    if let Err(e) = lease.release_before(attempt_deadline) {
                        log::warn!(
                            "{}: could not hand back a lease taken while cancelled: {e}",
                            self.key
                        );
                    }
                    return Err(cancelled(&self.key));
                }
                Ok(lease) => return Ok(lease),
                Err(e) if e.is_permanent() => return Err(e),
                Err(e @ LeaseError::Held { .. }) => e,
                Err(e) => {
                    log::warn!("taking the lease failed, retrying: {e}");
                    e
                }
            };
            let now = clock.now();
            let pause = match (&error, self.free_at) {
                (LeaseError::Held { .. }, Some(free_at)) => {
                    let expiry =
                        free_at.saturating_duration_since(now) + clock.jitter(ARRIVAL_SPREAD);
                    expiry.min(clock.jitter(wait.max_reread))
                }
                (LeaseError::Held { .. }, None) => clock.jitter(wait.max_reread),
                _ => clock.jitter(wait.max_reread.min(RETRY_PAUSE)),
            };
            let mut until = now.checked_add(pause).unwrap_or(now);
            if let Some(deadline) = wait.deadline {
                if deadline <= now {
                    return Err(error);
                }
                until = until.min(deadline);
            }
            match &wait.cancel {
                Some(cancel) => crossbeam_channel::select! {
                    recv(clock.timer(until)) -> _ => {}
                    recv(cancel.inner.woken) -> _ => return Err(cancelled(&self.key)),
                },
                None => clock.sleep(until.saturating_duration_since(now)),
            }
            if wait.deadline.is_some_and(|d| clock.now() >= d) {
                return Err(error);
            }
        }
    }
}
