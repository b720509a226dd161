//! Taking, renewing and giving up the lease on `{prefix}/LEASE`.
//!
//! # What a held lease promises
//!
//! - **Taking and renewing are single compare-and-swaps.** An absent lease
//!   is taken with a create-only write, a stale one with a write conditional
//!   on the ETag just read, and every renewal is conditional on the ETag of
//!   the holder's previous write. Of any number of contenders that start
//!   together exactly one holds the lease; the others are told who does
//!   ([`LeaseError::Held`]), after at most [`ACQUIRE_RACES`] lost races.
//! - **The service is checked, not trusted.** Each conditional acquire
//!   probes the service: a create over the lease just written, a write
//!   conditional on an ETag no service issues, and the same write against an
//!   absent key beside the lease must all be refused. If the service accepts
//!   any of them it ignores that condition, and the acquire hands the key
//!   back (removing its own record and the probe key) and fails with
//!   [`LeaseError::ConditionsIgnored`]. A store that cannot send a condition
//!   at all ([`StoreErrorKind::NotImplemented`]) makes the lease
//!   best-effort, with a warning; so does a caller that asks for it
//!   ([`LeaseOptions::best_effort`]). Exclusion is never weakened silently:
//!   [`Lease::exclusion`] says which kind a lease has.
//! - **A lost answer is not a lost lease.** A [`Contender`] keeps one
//!   instance id for all its attempts, so a write that landed although its
//!   answer never arrived leaves a record the next attempt recognises as its
//!   own. A refused renewal reads the record: if it still names this holder,
//!   its version is adopted and the swap is tried once more; otherwise the
//!   lease is lost for good ([`LeaseError::Lost`], naming the new holder).
//! - **A holder fences itself.** [`Lease::may_write`] and
//!   [`Lease::write_deadline`] end two thirds of a TTL after the instant
//!   taken just before the last successful write was sent, on the monotonic
//!   and the wall clock both; when the wall clock steps back past that
//!   instant, the monotonic clock alone decides. Nobody may take the lease
//!   over before a full TTL by their own clock, so a holder that cannot renew
//!   stops writing a third of a TTL before anyone else may start, and clocks
//!   that disagree by less than that third cannot make two writers overlap.
//! - **A stale record is taken over; a fresh one is not.** Freshness is
//!   judged by the contender's wall clock against the TTL the holder wrote
//!   (see [`crate::record`]). A suspect record (stamped more than its own TTL
//!   ahead, or with a TTL over [`MAX_SANE_TTL_S`](crate::record::MAX_SANE_TTL_S))
//!   is taken over once the same contender has seen it unchanged (same ETag,
//!   version id and stamp) for one of its own TTLs, with a warning.
//! - **Release removes only our own record.** A lost lease, or a record that
//!   names someone else, is left alone; a store with conditional delete
//!   removes the record in one request conditional on our last ETag. Without
//!   it the check and the delete are two requests, and a takeover landing
//!   between them is deleted (its holder then loses the lease at its next
//!   renewal, and nobody writes unfenced). An acquire abandoned half way
//!   is released by id ([`Contender::release_abandoned`]).
//! - **Conflicts are retried, briefly.** A conflict answer (a concurrent
//!   conditional write on the same key) is retried after a jittered pause, a
//!   bounded number of times, and never past the request's deadline.
//!
//! What no lease can stop: a request the service has already received
//! completes even after its sender lost the lease, and a process frozen
//! between its fence check and its request sends the request when it wakes.
//! Fenced writes (create-only objects, conditional pointers) make such late
//! writes harmless where the service honours conditions.

use crate::clock::{system_clock, Clock};
use crate::error::{IgnoredCondition, LeaseError, CONDITIONAL_ENV};
use crate::record::{format_stamp, lease_key, new_instance_id, LeaseRecord};
use crate::store::{DeleteMode, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// How many lost races for the key an acquire attempt absorbs before it
/// reports the winner.
pub const ACQUIRE_RACES: usize = 3;

/// How many times a conflict answer is retried before it is returned.
pub const CONFLICT_RETRIES: u32 = 4;

/// The TTL a lease is taken with unless told otherwise, in seconds.
pub const DEFAULT_TTL_S: u64 = 30;

/// An ETag no service issues, for the probe's conditional writes.
const PROBE_ETAG: &str = "\"bucket-lease-probe-etag-never-issued\"";

/// How strongly a lease keeps a second writer out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exclusion {
    /// Every acquire and renewal is one compare-and-swap on the service, and
    /// the service was seen refusing false conditions.
    Conditional,
    /// Each step reads, then writes unconditionally: two writers that start
    /// together can both believe they hold the lease until the next renewal.
    BestEffort,
}

/// How a lease is taken: its TTL, whether to run best-effort, and the clock.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    ttl_s: u64,
    best_effort: bool,
    clock: Arc<dyn Clock>,
}

impl LeaseOptions {
    /// A conditional lease with a TTL of `ttl_s` seconds (0 counts as 1) on
    /// the system clock.
    pub fn new(ttl_s: u64) -> Self {
        LeaseOptions {
            ttl_s: ttl_s.max(1),
            best_effort: false,
            clock: system_clock(),
        }
    }

    /// As [`new`](Self::new), best-effort when the environment variable
    /// [`CONDITIONAL_ENV`] is `off`.
    pub fn from_env(ttl_s: u64) -> Self {
        let off = std::env::var(CONDITIONAL_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("off"));
        Self::new(ttl_s).best_effort(off)
    }

    /// Read, then write unconditionally, instead of compare-and-swap. For
    /// services without usable conditional writes; logged as a warning at
    /// every acquire.
    pub fn best_effort(mut self, on: bool) -> Self {
        self.best_effort = on;
        self
    }

    /// Read time from `clock` (a [`TestClock`](crate::clock::TestClock) in
    /// tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The TTL, in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }

    /// Whether best-effort mode was asked for.
    pub fn is_best_effort(&self) -> bool {
        self.best_effort
    }
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self::new(DEFAULT_TTL_S)
    }
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// Our record was deleted.
    Deleted,
    /// There was no record left to delete.
    AlreadyGone,
    /// The record was not ours (any more), so it was left in place.
    LeftAlone {
        /// Who holds the lease now, when the record names anyone.
        holder: Option<String>,
    },
}

/// One instance trying to take the lease on a prefix, perhaps many times.
///
/// It keeps the instance id and what it has seen of a suspect record
/// between attempts: pass the same `Contender` to every attempt of one
/// instance.
#[derive(Debug)]
pub struct Contender {
    store: Arc<dyn Store>,
    key: String,
    options: LeaseOptions,
    instance_id: String,
    /// A suspect record's identity and when, on our monotonic clock, we
    /// first saw it so.
    suspect_seen: Option<(String, Instant)>,
}

impl Contender {
    /// A contender for `{prefix}/LEASE` under a new random instance id.
    pub fn new(store: Arc<dyn Store>, prefix: &str, options: LeaseOptions) -> Self {
        Contender {
            store,
            key: lease_key(prefix),
            options,
            instance_id: new_instance_id(),
            suspect_seen: None,
        }
    }

    /// The same contender under the instance id `id`, for a process that
    /// keeps its id across restarts.
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = id.into();
        self
    }

    /// The instance id every attempt writes.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Try once to take the lease. See the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] when another instance holds a fresh lease or
    /// won every race; [`LeaseError::ConditionsIgnored`] when the probe
    /// caught the service ignoring a condition; [`LeaseError::Store`] when a
    /// request failed. After a store error the record may name this
    /// instance: try again with this contender, or
    /// [`release_abandoned`](Self::release_abandoned).
    pub fn try_acquire(&mut self) -> Result<Lease, LeaseError> {
        let clock = Arc::clone(&self.options.clock);
        let mut races = 0;
        while races < ACQUIRE_RACES {
            let current = read_record(&*self.store, &self.key, None)?;
            let epoch = match &current {
                None => 1,
                Some((Some(rec), _)) if rec.instance_id == self.instance_id => rec.epoch,
                Some((Some(rec), version)) => {
                    self.check_foreign(rec, version)?;
                    rec.epoch + 1
                }
                Some((None, _)) => 1,
            };
            let (confirmed, confirmed_wall) = (clock.now(), clock.wall());
            let stamp = format_stamp(confirmed_wall);
            let record = LeaseRecord {
                instance_id: self.instance_id.clone(),
                acquired_at: stamp.clone(),
                renewed_at: stamp,
                ttl_s: self.options.ttl_s,
                epoch,
            };
            let (mode, exclusion) = match (&current, self.options.best_effort) {
                (_, true) => (PutMode::Overwrite, Exclusion::BestEffort),
                (None, false) => (PutMode::Create, Exclusion::Conditional),
                (Some((_, v)), false) => (PutMode::Update(v.clone()), Exclusion::Conditional),
            };
            let body = record.to_bytes();
            let written = put_retrying(&*self.store, &*clock, &self.key, &body, mode, None);
            let (version, exclusion) = match written {
                Ok(version) => (version, exclusion),
                Err(e) if e.is_refusal() => {
                    races += 1;
                    continue;
                }
                Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
                    log::warn!(
                        "{}: the store cannot send conditional writes ({e}); taking a \
                         best-effort lease",
                        self.key
                    );
                    let options = PutOptions::new(PutMode::Overwrite);
                    (
                        self.store.put(&self.key, &body, &options)?,
                        Exclusion::BestEffort,
                    )
                }
                Err(e) => return Err(e.into()),
            };
            let lease = Lease {
                store: Arc::clone(&self.store),
                clock: Arc::clone(&clock),
                key: self.key.clone(),
                instance_id: self.instance_id.clone(),
                ttl_s: self.options.ttl_s,
                acquired_at: record.acquired_at.clone(),
                epoch,
                held: Mutex::new(Held {
                    version,
                    confirmed,
                    confirmed_wall,
                    exclusion,
                    state: State::Held,
                }),
            };
            if exclusion == Exclusion::Conditional {
                if let Err(e) = lease.probe(&body) {
                    if matches!(e, LeaseError::ConditionsIgnored { .. }) {
                        // This lease excludes nobody: give the key back.
                        let _ = release_record(&*self.store, &self.key, &self.instance_id, None);
                    }
                    return Err(e);
                }
            }
            if lease.exclusion() == Exclusion::BestEffort {
                log::warn!(
                    "{}: holding a best-effort lease: a second writer that starts at the same \
                     moment is not kept out",
                    self.key
                );
            }
            self.suspect_seen = None;
            return Ok(lease);
        }
        let holder = read_record(&*self.store, &self.key, None)?
            .and_then(|(rec, _)| rec)
            .map_or_else(|| "unknown".to_string(), |rec| rec.instance_id);
        Err(LeaseError::Held {
            key: self.key.clone(),
            holder,
        })
    }

    /// Delete the record if it names this contender's instance id: for an
    /// acquire that failed or was abandoned after its write may have landed.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed; the record then expires
    /// after its TTL.
    pub fn release_abandoned(&self) -> Result<Released, LeaseError> {
        release_record(&*self.store, &self.key, &self.instance_id, None)
    }

    /// Whether a foreign record keeps us out: a fresh one does, unless it is
    /// suspect and we have seen it unchanged for one of our TTLs.
    fn check_foreign(&mut self, rec: &LeaseRecord, version: &Version) -> Result<(), LeaseError> {
        let clock = &self.options.clock;
        let now = clock.wall();
        let held = || LeaseError::Held {
            key: self.key.clone(),
            holder: rec.instance_id.clone(),
        };
        if !rec.is_fresh(now) {
            return Ok(());
        }
        if !rec.is_suspect(now) {
            self.suspect_seen = None;
            return Err(held());
        }
        let identity = format!(
            "{}|{}|{}",
            version.etag.as_deref().unwrap_or(""),
            version.version_id.as_deref().unwrap_or(""),
            rec.renewed_at
        );
        match &self.suspect_seen {
            Some((seen, since)) if *seen == identity => {
                let unchanged_for = clock.now().saturating_duration_since(*since);
                if unchanged_for >= Duration::from_secs(self.options.ttl_s) {
                    log::warn!(
                        "{}: taking over the suspect lease of {} (renewed_at {}, ttl_s {}): it \
                         has not changed for {:?}",
                        self.key,
                        rec.instance_id,
                        rec.renewed_at,
                        rec.ttl_s,
                        unchanged_for
                    );
                    return Ok(());
                }
            }
            _ => {
                log::warn!(
                    "{}: the lease of {} is stamped far in the future or has an absurd TTL \
                     (renewed_at {}, ttl_s {}); it will be taken over if it stays unchanged \
                     for {} s",
                    self.key,
                    rec.instance_id,
                    rec.renewed_at,
                    rec.ttl_s,
                    self.options.ttl_s
                );
                self.suspect_seen = Some((identity, clock.now()));
            }
        }
        Err(held())
    }
}

/// What the holder knows of its own lease between requests.
#[derive(Debug)]
struct Held {
    /// The version our last write produced: the next swap's condition.
    version: Version,
    /// Taken just before the last successful write was sent.
    confirmed: Instant,
    confirmed_wall: SystemTime,
    exclusion: Exclusion,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Held,
    Lost { holder: Option<String> },
    Released,
}

/// A held lease on `{prefix}/LEASE`. See the [module docs](self).
///
/// All methods take `&self`: one thread renews while others ask
/// [`may_write`](Self::may_write).
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    key: String,
    instance_id: String,
    ttl_s: u64,
    acquired_at: String,
    epoch: u64,
    held: Mutex<Held>,
}

impl Lease {
    /// Take the lease on `prefix` once, under a new random instance id.
    ///
    /// # Errors
    ///
    /// As [`Contender::try_acquire`].
    pub fn acquire(
        store: Arc<dyn Store>,
        prefix: &str,
        options: LeaseOptions,
    ) -> Result<Lease, LeaseError> {
        Contender::new(store, prefix, options).try_acquire()
    }

    /// The instance id the record names.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The TTL written in the record, in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }

    /// The takeover count written in the record: one more than the record
    /// this lease replaced (1 on an absent key; a renewal keeps it).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// When the lease was taken, as the record says.
    pub fn acquired_at(&self) -> &str {
        &self.acquired_at
    }

    /// The store the lease lives in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock the lease reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How often to renew: a third of the TTL.
    pub fn renew_interval(&self) -> Duration {
        Duration::from_millis(self.ttl_s.saturating_mul(1000) / 3)
    }

    /// How long after a confirmed renewal the holder may write: two thirds
    /// of the TTL.
    pub fn fence_after(&self) -> Duration {
        Duration::from_millis(self.ttl_s.saturating_mul(2000) / 3)
    }

    /// How strongly this lease keeps a second writer out.
    pub fn exclusion(&self) -> Exclusion {
        self.lock().exclusion
    }

    /// Whether the lease was found taken over or deleted, or marked lost.
    /// A lost lease never comes back.
    pub fn is_lost(&self) -> bool {
        matches!(self.lock().state, State::Lost { .. })
    }

    /// Who took the lease over, once it is lost and the record named anyone.
    pub fn lost_to(&self) -> Option<String> {
        match &self.lock().state {
            State::Lost { holder } => holder.clone(),
            _ => None,
        }
    }

    /// The version of our last write: the condition of the next renewal.
    pub fn version(&self) -> Version {
        self.lock().version.clone()
    }

    /// The instant, on the lease's monotonic clock, taken just before the
    /// last successful write of the record was sent.
    pub fn confirmed_at(&self) -> Instant {
        self.lock().confirmed
    }

    /// The instant, on the lease's monotonic clock, after which this holder
    /// must not write: two thirds of a TTL after the last confirmed renewal,
    /// on both clocks. `None` once that has passed, or the lease is lost or
    /// released.
    pub fn write_deadline(&self) -> Option<Instant> {
        let h = self.lock();
        if h.state != State::Held {
            return None;
        }
        let fence = self.fence_after();
        let now = self.clock.now();
        let monotonic_deadline = h.confirmed + fence;
        let deadline = match self.clock.wall().duration_since(h.confirmed_wall) {
            Ok(wall_elapsed) => match fence.checked_sub(wall_elapsed) {
                Some(wall_left) => monotonic_deadline.min(now + wall_left),
                None => return None,
            },
            // The wall clock stepped back past the renewal: it says nothing.
            Err(_) => monotonic_deadline,
        };
        (now < deadline).then_some(deadline)
    }

    /// Whether this holder may start a write now.
    pub fn may_write(&self) -> bool {
        self.write_deadline().is_some()
    }

    /// Give the lease up without a request, because a write elsewhere showed
    /// that another writer is active. `holder` names it when known.
    pub fn mark_lost(&self, holder: Option<String>) {
        let mut h = self.lock();
        if h.state == State::Held {
            h.state = State::Lost { holder };
        }
    }

    /// Renew: rewrite the record with a new `renewed_at`, provided it is
    /// still exactly ours.
    ///
    /// # Errors
    ///
    /// As [`renew_before`](Self::renew_before).
    pub fn renew(&self) -> Result<(), LeaseError> {
        self.renew_before(None)
    }

    /// Renew, abandoning every request at `deadline`.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when the record was replaced or deleted: the
    /// lease is lost for good. [`LeaseError::Store`] when a request failed:
    /// retry; the fence keeps the holder safe meanwhile.
    pub fn renew_before(&self, deadline: Option<Instant>) -> Result<(), LeaseError> {
        let (exclusion, version) = {
            let h = self.lock();
            if h.state != State::Held {
                return Err(self.lost_error(&h.state));
            }
            (h.exclusion, h.version.clone())
        };
        let (confirmed, confirmed_wall) = (self.clock.now(), self.clock.wall());
        let record = LeaseRecord {
            instance_id: self.instance_id.clone(),
            acquired_at: self.acquired_at.clone(),
            renewed_at: format_stamp(confirmed_wall),
            ttl_s: self.ttl_s,
            epoch: self.epoch,
        };
        let body = record.to_bytes();
        let written = match exclusion {
            Exclusion::Conditional => {
                let mode = PutMode::Update(version);
                match put_retrying(&*self.store, &*self.clock, &self.key, &body, mode, deadline) {
                    Ok(version) => Ok(version),
                    Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
                        log::warn!(
                            "{}: the store stopped accepting conditional writes ({e}); the \
                             lease is best-effort from now on",
                            self.key
                        );
                        self.lock().exclusion = Exclusion::BestEffort;
                        self.renew_best_effort(&body, deadline)
                    }
                    Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {
                        self.reconcile(&body, deadline)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Exclusion::BestEffort => self.renew_best_effort(&body, deadline),
        }?;
        let mut h = self.lock();
        if h.state != State::Held {
            return Err(self.lost_error(&h.state));
        }
        h.version = written;
        h.confirmed = confirmed;
        h.confirmed_wall = confirmed_wall;
        Ok(())
    }

    /// A swap was refused. A record that still names us means a write of
    /// ours landed unseen: adopt its version and swap once more. Anything
    /// else means the lease is gone.
    fn reconcile(&self, body: &[u8], deadline: Option<Instant>) -> Result<Version, LeaseError> {
        match read_record(&*self.store, &self.key, deadline)? {
            Some((Some(rec), version)) if rec.instance_id == self.instance_id => {
                let mode = PutMode::Update(version);
                match put_retrying(&*self.store, &*self.clock, &self.key, body, mode, deadline) {
                    Ok(version) => Ok(version),
                    Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {
                        let holder = read_holder(&*self.store, &self.key, deadline);
                        Err(self.lose(holder))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            other => Err(self.lose(other.and_then(|(rec, _)| rec).map(|r| r.instance_id))),
        }
    }

    /// Best-effort renewal: read, and rewrite only a record naming us.
    fn renew_best_effort(
        &self,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Version, LeaseError> {
        match read_record(&*self.store, &self.key, deadline)? {
            Some((Some(rec), _)) if rec.instance_id == self.instance_id => {
                let options = PutOptions::new(PutMode::Overwrite).with_deadline(deadline);
                Ok(self.store.put(&self.key, body, &options)?)
            }
            other => Err(self.lose(other.and_then(|(rec, _)| rec).map(|r| r.instance_id))),
        }
    }

    /// Mark the lease lost to `holder` and describe it.
    fn lose(&self, holder: Option<String>) -> LeaseError {
        let holder = holder.filter(|h| *h != self.instance_id);
        let mut h = self.lock();
        if h.state == State::Held {
            h.state = State::Lost { holder };
        }
        self.lost_error(&h.state)
    }

    fn lost_error(&self, state: &State) -> LeaseError {
        LeaseError::Lost {
            key: self.key.clone(),
            holder: match state {
                State::Lost { holder } => holder.clone(),
                _ => None,
            },
        }
    }

    /// Give the lease up: delete the record if it is still ours. From the
    /// first moment of the call, [`may_write`](Self::may_write) is false.
    ///
    /// # Errors
    ///
    /// As [`release_before`](Self::release_before).
    pub fn release(&self) -> Result<Released, LeaseError> {
        self.release_before(None)
    }

    /// Release, abandoning every request at `deadline`.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed; the record then expires
    /// after its TTL, and this handle stays released.
    pub fn release_before(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let (exclusion, version) = {
            let mut h = self.lock();
            match &h.state {
                State::Lost { holder } => {
                    return Ok(Released::LeftAlone {
                        holder: holder.clone(),
                    })
                }
                State::Released => return Ok(Released::AlreadyGone),
                State::Held => h.state = State::Released,
            }
            (h.exclusion, h.version.clone())
        };
        if exclusion == Exclusion::Conditional {
            let mode = DeleteMode::IfVersion(version);
            match self.store.delete(&self.key, &mode, deadline) {
                Ok(()) => return Ok(Released::Deleted),
                // Our version is stale (a lost answer?) or the store cannot
                // delete conditionally: look before deleting.
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotImplemented => {}
                Err(e) => return Err(e.into()),
            }
        }
        release_record(&*self.store, &self.key, &self.instance_id, deadline)
    }

    /// Check the probe writes of a conditional acquire. See the [module
    /// docs](self).
    fn probe(&self, body: &[u8]) -> Result<(), LeaseError> {
        let fake = Version::etag(PROBE_ETAG);
        let checks = [
            (
                self.key.clone(),
                PutMode::Create,
                IgnoredCondition::IfNoneMatch,
            ),
            (
                self.key.clone(),
                PutMode::Update(fake.clone()),
                IgnoredCondition::IfMatch,
            ),
            (
                format!("{}.probe-{}", self.key, new_instance_id()),
                PutMode::Update(fake),
                IgnoredCondition::IfMatchOnAbsentKey,
            ),
        ];
        for (key, mode, condition) in checks {
            match put_retrying(&*self.store, &*self.clock, &key, body, mode, None) {
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
                    log::warn!(
                        "{}: the store cannot send {} ({e}); the lease is best-effort",
                        self.key,
                        condition.header()
                    );
                    self.lock().exclusion = Exclusion::BestEffort;
                }
                Err(e) => return Err(e.into()),
                Ok(_) => {
                    if key != self.key {
                        if let Err(e) = self.store.delete(&key, &DeleteMode::Unconditional, None) {
                            log::error!("{key}: could not remove the probe object: {e}");
                        }
                    }
                    return Err(LeaseError::ConditionsIgnored {
                        key: self.key.clone(),
                        condition,
                    });
                }
            }
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Delete the record at `key` if it names `instance_id`.
fn release_record(
    store: &dyn Store,
    key: &str,
    instance_id: &str,
    deadline: Option<Instant>,
) -> Result<Released, LeaseError> {
    match read_record(store, key, deadline)? {
        None => Ok(Released::AlreadyGone),
        Some((Some(rec), version)) if rec.instance_id == instance_id => {
            match store.delete(key, &DeleteMode::IfVersion(version), deadline) {
                Ok(()) => Ok(Released::Deleted),
                Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
                    store.delete(key, &DeleteMode::Unconditional, deadline)?;
                    Ok(Released::Deleted)
                }
                Err(e) if e.is_refusal() => Ok(Released::LeftAlone {
                    holder: read_holder(store, key, deadline),
                }),
                Err(e) => Err(e.into()),
            }
        }
        Some((rec, _)) => Ok(Released::LeftAlone {
            holder: rec.map(|r| r.instance_id),
        }),
    }
}

/// The record at `key`, parsed when it parses, with its version; `None` when
/// the key is absent.
pub(crate) fn read_record(
    store: &dyn Store,
    key: &str,
    deadline: Option<Instant>,
) -> Result<Option<(Option<LeaseRecord>, Version)>, StoreError> {
    match store.get(key, deadline) {
        Ok(object) => Ok(Some((LeaseRecord::parse(&object.body), object.version))),
        Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Who the record at `key` names, if it can be read at all.
fn read_holder(store: &dyn Store, key: &str, deadline: Option<Instant>) -> Option<String> {
    read_record(store, key, deadline)
        .ok()
        .flatten()
        .and_then(|(rec, _)| rec)
        .map(|rec| rec.instance_id)
}

/// A write that retries conflict answers after a jittered, growing pause,
/// at most [`CONFLICT_RETRIES`] times and never past `deadline`.
fn put_retrying(
    store: &dyn Store,
    clock: &dyn Clock,
    key: &str,
    body: &[u8],
    mode: PutMode,
    deadline: Option<Instant>,
) -> Result<Version, StoreError> {
    let options = PutOptions::new(mode).with_deadline(deadline);
    let mut retries = 0;
    loop {
        match store.put(key, body, &options) {
            Err(e) if e.kind() == StoreErrorKind::Conflict && retries < CONFLICT_RETRIES => {
                retries += 1;
                let pause = jittered(Duration::from_millis(25) * 2u32.pow(retries - 1));
                if deadline.is_some_and(|d| clock.now() + pause >= d) {
                    return Err(e);
                }
                log::debug!("{key}: conflicting write, retry {retries} after {pause:?}");
                clock.sleep(pause);
            }
            answer => return answer,
        }
    }
}

/// `base` scaled by a random factor between one half and three halves.
pub fn jittered(base: Duration) -> Duration {
    let mut bytes = [0u8; 2];
    // Without randomness the pause is merely not jittered.
    let _ = getrandom::fill(&mut bytes);
    let permille = 500 + u32::from(u16::from_le_bytes(bytes)) % 1000;
    base * permille / 1000
}
