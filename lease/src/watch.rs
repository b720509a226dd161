//! Following a lease from outside: a [`Watcher`] reports each change of
//! holder, epoch or state, as client-go's `OnNewLeader` does for a
//! follower.
//!
//! What [`Watcher::next_change`] promises:
//!
//! - **The first call reports the state as it is** ([`ChangeKind::First`]);
//!   each later call reports the next change: another holder (instance id
//!   or process nonce), another epoch, the record released, the object
//!   appearing, disappearing or becoming unreadable, the record expiring,
//!   or an expired record fresh again. A renewal (a new ETag, the same
//!   holder, epoch and state) is not a change.
//! - **It polls with a conditional read**, every [`Wait::max_reread`] from
//!   the start of one read to the start of the next, not jittered: the
//!   read is [`Store::get_if_changed`] on the version last read, so an
//!   unchanged record costs a `304 Not Modified` and no body on the HTTP
//!   stores. A change written while the watcher sleeps is so reported at
//!   most one interval (plus one read) after it landed.
//! - **It notices a holder that stopped renewing**: a held record is judged
//!   by the reader's wall clock as [`inspect`](crate::inspect) judges it
//!   ([`Inspection::fresh`], [`Inspection::expires_in`]); the watcher wakes
//!   at the instant it expires, reads once more (an unchanged record costs
//!   a `304`), and reports [`ChangeKind::Expired`] once, without waiting
//!   for the record to change. A read in flight is abandoned at that
//!   instant (a store that does not answer never holds the report back),
//!   and a waiting watcher looks at the wall clock at least every second,
//!   so a clock stepped past the expiry is reported within a second.
//! - **It is bounded and cancellable** as
//!   [`Contender::acquire_with`](crate::Contender::acquire_with) is: every
//!   read is bounded by the wait's deadline (and
//!   [`Wait::attempt_timeout`]), no sleep ends after it, and a cancel
//!   ([`Cancel`](crate::lease::Cancel)) is seen at once, also mid-sleep (a read in
//!   flight finishes first, bounded by its deadline). At the deadline it
//!   returns `Ok(None)`, or, when the last read failed, that read's error.
//! - **Failures**: a permanent error ([`StoreError::is_permanent`]) is
//!   returned at once; a transient one is logged (a warning for the first
//!   of a run, then at debug level) and the read tried again after a
//!   jittered pause (the store's backoff, at most one poll interval) until
//!   the deadline (a read cut short by the deadline itself is no failure).
//!   What the last successful read found is still judged
//!   meanwhile: a record that expires while the store does not answer is
//!   reported expired.
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::memory::MemoryStore;
//! use bucket_lease::watch::{ChangeKind, LeaseState, Watcher};
//! use bucket_lease::{Lease, LeaseError, LeaseOptions, clock::SystemClock, Wait};
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//!
//! let store = Arc::new(MemoryStore::new());
//! let mut watcher = Watcher::new(store.clone(), "jobs/nightly", Arc::new(SystemClock));
//! let wait = Wait::until(Instant::now() + Duration::from_secs(5))
//!     .max_reread(Duration::from_millis(20));
//! let first = watcher.next_change(&wait)?.expect("the first call reports");
//! assert_eq!((first.kind, first.state), (ChangeKind::First, LeaseState::Absent));
//!
//! let lease = Lease::acquire(store.clone(), "jobs/nightly", LeaseOptions::new(30))?;
//! let taken = watcher.next_change(&wait)?.expect("seen within one poll");
//! assert_eq!(taken.state, LeaseState::Held);
//! assert_eq!(taken.holder(), Some(lease.instance_id()));
//! # Ok::<(), LeaseError>(())
//! ```

use crate::clock::{transient_backoff, Clock};
use crate::error::LeaseError;
use crate::inspect::{Expiry, Inspection};
use crate::lease::Wait;
use crate::record::{lease_key, LeaseRecord};
use crate::store::{Delivery, Store, StoreError, StoreErrorKind, Version};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The state of a lease as a watcher judges it, by the reader's wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseState {
    /// There is no lease object: the lease is free.
    Absent,
    /// A holder's record, fresh by the reader's clock.
    Held,
    /// The holder released it: free, the record keeps the last holder and
    /// epoch.
    Released,
    /// The record's TTL ran out by the reader's clock without a renewal
    /// (or its stamp does not parse): free for the next contender.
    Expired,
    /// The object is not a lease record: the next contender overwrites it.
    Unreadable,
}

impl LeaseState {
    /// `absent`, `held`, `released`, `expired` or `unreadable`.
    pub fn name(self) -> &'static str {
        match self {
            LeaseState::Absent => "absent",
            LeaseState::Held => "held",
            LeaseState::Released => "released",
            LeaseState::Expired => "expired",
            LeaseState::Unreadable => "unreadable",
        }
    }

    /// The state of the lease `seen` shows (`None`: no object).
    pub fn of(seen: Option<&Inspection>) -> LeaseState {
        match seen {
            None => LeaseState::Absent,
            Some(s) if s.record.is_none() => LeaseState::Unreadable,
            Some(s) if s.is_released() => LeaseState::Released,
            Some(s) if s.fresh => LeaseState::Held,
            Some(_) => LeaseState::Expired,
        }
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What changed, from the state last reported to the one in a [`Change`].
/// When several things changed at once, the first that applies in this
/// order is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeKind {
    /// The first report of a watcher: the state as it is.
    First,
    /// The object disappeared (deleted by hand: a release never deletes).
    Removed,
    /// The object appeared where there was none.
    Appeared,
    /// The object is no longer a lease record.
    Unreadable,
    /// Another holder: another instance id or another process nonce (a
    /// takeover, a break, or a record that is readable again).
    NewHolder,
    /// The same holder at another epoch (it took the lease again).
    NewEpoch,
    /// The holder released the lease.
    Released,
    /// The record expired by the reader's clock: its holder stopped
    /// renewing.
    Expired,
    /// The same holder's record, at the same epoch, is fresh again after
    /// it was seen expired or released (a renewal that landed late, or the
    /// reader's wall clock stepped back).
    Resumed,
}

impl ChangeKind {
    /// `first`, `removed`, `appeared`, `unreadable`, `holder`, `epoch`,
    /// `released`, `expired` or `resumed`.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::First => "first",
            ChangeKind::Removed => "removed",
            ChangeKind::Appeared => "appeared",
            ChangeKind::Unreadable => "unreadable",
            ChangeKind::NewHolder => "holder",
            ChangeKind::NewEpoch => "epoch",
            ChangeKind::Released => "released",
            ChangeKind::Expired => "expired",
            ChangeKind::Resumed => "resumed",
        }
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One change a [`Watcher`] saw: what changed, the state it changed to,
/// and the [`Inspection`] it was judged from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// What changed.
    pub kind: ChangeKind,
    /// The state now.
    pub state: LeaseState,
    /// The lease object's key.
    pub key: String,
    /// The record as read and judged (`None` when there is no object). Its
    /// `read_at` is when it was judged, which for a record unchanged since
    /// an earlier read is later than that read.
    pub inspection: Option<Inspection>,
    /// The reader's wall clock when the change was seen.
    pub seen_at: SystemTime,
    /// The watcher's monotonic clock when the change was seen.
    pub seen: Instant,
}

impl Change {
    /// The holder's instance id (for a released record: the last holder's),
    /// when there is a readable record.
    pub fn holder(&self) -> Option<&str> {
        self.inspection.as_ref()?.holder()
    }

    /// The holder's name for people, when the record carries a valid one.
    pub fn holder_name(&self) -> Option<&str> {
        self.inspection.as_ref()?.holder_name()
    }

    /// The nonce of the holder's process, when the record carries one.
    pub fn instance_nonce(&self) -> Option<&str> {
        self.record()?.instance_nonce.as_deref()
    }

    /// The record's epoch, when there is a readable record.
    pub fn epoch(&self) -> Option<u64> {
        self.record().map(|r| r.epoch)
    }

    /// The version read, when there is an object.
    pub fn version(&self) -> Option<&Version> {
        self.inspection.as_ref().map(|s| &s.version)
    }

    fn record(&self) -> Option<&LeaseRecord> {
        self.inspection.as_ref()?.record.as_ref()
    }
}

/// What the last successful read found: `None` when there was no
/// object, else the record (`None`: not a lease record) at its version.
type Known = Option<(Option<LeaseRecord>, Version)>;

/// What a report is compared on: a renewal changes none of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    state: LeaseState,
    /// Instance id and nonce.
    holder: Option<(String, Option<String>)>,
    epoch: Option<u64>,
}

impl Summary {
    fn of(seen: Option<&Inspection>) -> Summary {
        let record = seen.and_then(|s| s.record.as_ref());
        Summary {
            state: LeaseState::of(seen),
            holder: record.map(|r| (r.instance_id.clone(), r.instance_nonce.clone())),
            epoch: record.map(|r| r.epoch),
        }
    }

    /// What changed from `self` (reported before) to `now`, if anything.
    fn change_to(&self, now: &Summary) -> Option<ChangeKind> {
        use LeaseState as S;
        if self == now {
            return None;
        }
        Some(match (self.state, now.state) {
            (_, S::Absent) => ChangeKind::Removed,
            (S::Absent, _) => ChangeKind::Appeared,
            (_, S::Unreadable) => ChangeKind::Unreadable,
            _ if self.holder != now.holder => ChangeKind::NewHolder,
            _ if self.epoch != now.epoch => ChangeKind::NewEpoch,
            (_, S::Released) => ChangeKind::Released,
            (_, S::Expired) => ChangeKind::Expired,
            (_, S::Held) => ChangeKind::Resumed,
        })
    }
}

/// Reports each change of one lease's holder, epoch or state. See the
/// [module docs](self). Made by [`Watcher::new`] or
/// [`Contender::watch`](crate::Contender::watch).
#[derive(Debug)]
pub struct Watcher {
    store: Arc<dyn Store>,
    key: String,
    clock: Arc<dyn Clock>,
    /// What the last successful read found; `None` before the first.
    known: Option<Known>,
    /// What was reported last; `None` before the first report.
    reported: Option<Summary>,
    /// When the last read began, on the monotonic clock.
    last_read: Option<Instant>,
    /// When to read again after a failed read.
    retry_at: Option<Instant>,
}

impl Watcher {
    /// A watcher of the lease on `prefix` (`{prefix}/LEASE`) in `store`,
    /// judging records by `clock` (its wall clock for freshness, its
    /// monotonic clock for the wait).
    pub fn new(store: Arc<dyn Store>, prefix: &str, clock: Arc<dyn Clock>) -> Watcher {
        Watcher::for_key(store, lease_key(prefix), clock)
    }

    /// A watcher of the lease object `key`.
    pub(crate) fn for_key(store: Arc<dyn Store>, key: String, clock: Arc<dyn Clock>) -> Watcher {
        Watcher {
            store,
            key,
            clock,
            known: None,
            reported: None,
            last_read: None,
            retry_at: None,
        }
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Wait as `wait` says for the next change, and return it; the first
    /// call returns the state as it is. The poll interval is
    /// [`Wait::max_reread`]. See the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Cancelled`] once `wait`'s [`Cancel`](crate::lease::Cancel) is
    /// cancelled; [`LeaseError::Store`] with a permanent error at once, or,
    /// when the deadline comes while reads are failing, with the last
    /// read's (transient) error.
    pub fn next_change(&mut self, wait: &Wait) -> Result<Option<Change>, LeaseError> {
        let clock = Arc::clone(&self.clock);
        let cancelled = |key: &str| LeaseError::Cancelled {
            key: key.to_string(),
        };
        let interval = wait.reread();
        // The last read's error, while reads fail.
        let mut failing: Option<StoreError> = None;
        let mut failures = 0u32;
        // When the record known expires, while it is held.
        let mut expiry = None;
        loop {
            if wait.cancelled() {
                return Err(cancelled(&self.key));
            }
            let now = clock.now();
            let passed = wait.deadline().is_some_and(|d| now >= d);
            if !passed && self.read_due(interval, expiry).is_due(now) {
                self.last_read = Some(now);
                // A held record's expiry bounds the read too: a store that
                // does not answer never holds the report back.
                let expiring = expiry.filter(|at| *at > now);
                let read_deadline = match (wait.attempt_deadline(now, Duration::ZERO), expiring) {
                    (Some(d), Some(x)) => Some(d.min(x)),
                    (d, x) => d.or(x),
                };
                match self.read(read_deadline) {
                    Ok(()) => {
                        self.retry_at = None;
                        if failing.take().is_some() {
                            log::info!("watching {}: reading the lease works again", self.key);
                        }
                        failures = 0;
                    }
                    Err(e) if e.is_permanent() => return Err(LeaseError::Store(e)),
                    // Cut short by the wait's own deadline: no failure of
                    // the store's (and no retry: the wait is over).
                    Err(e)
                        if (e.is_timeout() || e.delivery() == Delivery::NotSent)
                            && read_deadline.is_some_and(|d| clock.now() >= d)
                            && (wait.deadline().is_some_and(|d| clock.now() >= d)
                                || expiring.is_some_and(|x| clock.now() >= x)) => {}
                    Err(e) => {
                        failures += 1;
                        if failures == 1 {
                            log::warn!(
                                "watching {}: reading the lease failed, retrying: {e}",
                                self.key
                            );
                        } else {
                            log::debug!(
                                "watching {}: reading the lease failed again: {e}",
                                self.key
                            );
                        }
                        let pause = clock.jitter(transient_backoff(failures)).min(interval);
                        let after = clock.now();
                        self.retry_at = Some(after.checked_add(pause).unwrap_or(after));
                        failing = Some(e);
                    }
                }
                if wait.cancelled() {
                    return Err(cancelled(&self.key));
                }
            }
            // What is known, judged by the wall clock now.
            let change;
            (change, expiry) = self.judge();
            if change.is_some() {
                return Ok(change);
            }
            let now = clock.now();
            // The wall clock is looked at again at least every
            // `WALL_CHECK`: a step past the expiry is reported then, not
            // at the instant computed before it.
            let check = now.checked_add(WALL_CHECK);
            let mut until = match (self.read_due(interval, expiry), check) {
                (Due::Now, _) => now,
                (Due::At(at), Some(check)) => at.min(check),
                (Due::At(at), None) => at,
                (Due::Never, Some(check)) => check,
                (Due::Never, None) => now,
            };
            if let Some(deadline) = wait.deadline() {
                if now >= deadline {
                    return match failing {
                        Some(e) => Err(LeaseError::Store(e)),
                        None => Ok(None),
                    };
                }
                until = until.min(deadline);
            }
            if !wait.sleep_until(&*clock, until) {
                return Err(cancelled(&self.key));
            }
        }
    }

    /// When the next read is due: a retry's pause after a failure, else
    /// `interval` after the last read began (never, when that does not fit
    /// in an `Instant`), or the known record's `expiry` if that comes
    /// first.
    fn read_due(&self, interval: Duration, expiry: Option<Instant>) -> Due {
        let due = match (self.retry_at, self.last_read) {
            (Some(retry), _) => Some(retry),
            (None, Some(last)) => last.checked_add(interval),
            (None, None) => return Due::Now,
        };
        match (due, expiry) {
            (Some(due), Some(expiry)) => Due::At(due.min(expiry)),
            (Some(at), None) | (None, Some(at)) => Due::At(at),
            (None, None) => Due::Never,
        }
    }

    /// Read the record unless it is unchanged, and keep what was found.
    fn read(&mut self, deadline: Option<Instant>) -> Result<(), StoreError> {
        let answer = match &self.known {
            Some(Some((_, version))) if version.etag.is_some() => {
                self.store.get_if_changed(&self.key, version, deadline)
            }
            _ => self.store.get(&self.key, deadline).map(Some),
        };
        self.known = Some(match answer {
            // Unchanged: a 304.
            Ok(None) => return Ok(()),
            Ok(Some(object)) => Some((LeaseRecord::parse(&object.body), object.version)),
            Err(e) if e.kind() == StoreErrorKind::NotFound => None,
            // Over the read cap: not a lease record, known by its version.
            Err(e) if e.kind() == StoreErrorKind::TooLarge && e.version().is_some() => {
                Some((None, e.version().cloned().unwrap_or_default()))
            }
            Err(e) => return Err(e),
        });
        Ok(())
    }

    /// The change, if what is known now differs from what was reported,
    /// and when a held record expires on the monotonic clock.
    fn judge(&mut self) -> (Option<Change>, Option<Instant>) {
        let Some(known) = &self.known else {
            return (None, None);
        };
        let (seen, seen_at) = (self.clock.now(), self.clock.wall());
        let inspection = match known {
            None => None,
            Some((record, version)) => Some(Inspection::judged(
                &self.key,
                record.clone(),
                version.clone(),
                seen_at,
            )),
        };
        let summary = Summary::of(inspection.as_ref());
        let expiry = match inspection.as_ref().map(Inspection::expires_in) {
            Some(Some(Expiry::In(left))) if summary.state == LeaseState::Held => {
                seen.checked_add(left)
            }
            _ => None,
        };
        let kind = match &self.reported {
            None => Some(ChangeKind::First),
            Some(before) => before.change_to(&summary),
        };
        let Some(kind) = kind else {
            return (None, expiry);
        };
        self.reported = Some(summary.clone());
        let change = Change {
            kind,
            state: summary.state,
            key: self.key.clone(),
            inspection,
            seen_at,
            seen,
        };
        (Some(change), expiry)
    }
}

/// How often a waiting watcher looks at the wall clock at the least.
const WALL_CHECK: Duration = Duration::from_secs(1);

/// When [`Watcher::read_due`] says the next read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    Now,
    At(Instant),
    /// Not before the wait's deadline: the interval does not fit.
    Never,
}

impl Due {
    fn is_due(self, now: Instant) -> bool {
        match self {
            Due::Now => true,
            Due::At(at) => now >= at,
            Due::Never => false,
        }
    }
}

#[cfg(test)]
mod tests;
