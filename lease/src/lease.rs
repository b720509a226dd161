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
//!   absent key beside the lease must all be refused, and a write of our
//!   record conditional on its own ETag, which is what every renewal is,
//!   must be accepted (all four sent at once on a store that allows it,
//!   [`Store::concurrent_requests`], else one after the other; the answer
//!   is the same). If the service accepts any of the first three it
//!   ignores that condition, and the acquire hands the key back (its record
//!   marked released, the probe key removed) and fails with
//!   [`LeaseError::ConditionsIgnored`]; if it refuses the fourth while our
//!   record still has that ETag, the lease could never be kept, and the
//!   acquire fails with [`LeaseError::OwnEtagRefused`]. Exclusion is never
//!   weakened by an answer: a store that cannot send a condition
//!   ([`StoreErrorKind::NotImplemented`]) or an answer without the ETag the
//!   next compare-and-swap needs fails the acquire, and fails (then
//!   fences) a renewal. A lease is best-effort only when the caller asks
//!   ([`LeaseOptions::best_effort`]); [`Lease::exclusion`] says which kind
//!   a lease has.
//! - **Every request of an acquire is bounded** by the caller's deadline
//!   ([`Contender::try_acquire_before`]), and the probe also by the new
//!   lease's write deadline: an acquire never hands out a lease it may no
//!   longer write under.
//! - **A holder is one process start.** A record is ours only when it
//!   carries our instance id *and* the nonce this process drew when it
//!   started ([`crate::record::process_nonce`]). The instance id is a name
//!   users choose, and two processes may be given the same one; a record
//!   with our name and another nonce, or none (the async reference, older
//!   versions, a restart of this program), is another holder's. An acquire
//!   is kept out by it while it is fresh ([`LeaseError::Held`], saying the
//!   name is in use by another process) and takes it over only once it is
//!   stale, at the next epoch; a renewal that finds it has lost the lease;
//!   a release never touches it.
//!   The record's `holder_name` (`host:pid` unless
//!   [`Contender::with_holder_name`] chose another) is for people only and
//!   plays no part in any of this.
//! - **A lost answer is not a lost lease.** A [`Contender`] keeps one
//!   instance id for all its attempts, and every contender of a process
//!   has the process's nonce, so a write that landed although its answer
//!   never arrived leaves a record the next attempt (even of a contender
//!   built anew under the same id) recognises as its own. A refused
//!   renewal reads the record: if it is still ours at another version, that
//!   version is adopted and the swap is tried again; if it is still ours at
//!   the very version the swap was refused on, nobody else wrote and the
//!   service refused our own ETag ([`LeaseError::OwnWriteRefused`]: still
//!   held, until its write deadline); otherwise the lease is lost for good
//!   ([`LeaseError::Lost`], naming the new holder). A release refused on
//!   our record's own version says so too, rather than naming us as the
//!   holder that kept it.
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
//!   ahead, or with a TTL over [`MAX_SANE_TTL_S`])
//!   is taken over once the same contender has seen it unchanged (same ETag,
//!   version id and stamp) for the longer of its own TTL and the record's
//!   (when that is sane), with a warning: a live holder renews within that
//!   time and so changes the record. No lease is taken with a TTL over that
//!   maximum ([`LeaseError::TtlTooLong`]).
//! - **Epochs only grow.** Each new holder writes one more than the record
//!   it replaces; the count never wraps ([`LeaseError::EpochExhausted`]).
//! - **Release never deletes, and touches only our own record.** The record
//!   is rewritten as released (stale to every reader, holder and epoch
//!   kept) with a write conditional on our last ETag, the condition the
//!   probe checked; if that version is stale the record is read and
//!   rewritten only while it is still ours (name and nonce). Any other
//!   record is left alone; a lease marked lost by a refused fenced write
//!   still frees its own record. An acquire abandoned half way is
//!   released by id and nonce ([`Contender::release_abandoned_before`]).
//! - **A call without a deadline still has one bound.**
//!   [`Contender::try_acquire`], [`Lease::renew`], [`Lease::release`] and
//!   [`Contender::release_abandoned`] each take one deadline,
//!   [`DEFAULT_CALL_TIMEOUT`] after they start, for all their requests; the
//!   `_before` forms take the caller's.
//! - **Conflicts are retried, briefly.** A conflict answer (a concurrent
//!   conditional write on the same key) is retried after a jittered pause, a
//!   bounded number of times, and never past the request's deadline.
//! - **A write with a transient failure is decided again by reading, never
//!   re-sent blindly.** When a write of the record that was sent meets a
//!   transient failure (a 5xx or throttling answer, or no answer: it may
//!   have landed), an acquire reads the record again and decides afresh
//!   (its own record is taken back at its epoch), and a release reads it and
//!   rewrites it only while it still names us; at most
//!   [`TRANSIENT_WRITE_TRIES`] writes in all, after jittered pauses, and
//!   only while the deadline leaves room. The probe's writes, which carry
//!   our own record and exist to be refused, are simply sent again. Requests
//!   that were not sent at all are the store's to retry
//!   ([`StoreError::delivery`]); a renewal is tried again by its keeper,
//!   inside the fence.
//!
//! What no lease can stop: a request the service has already received
//! completes even after its sender lost the lease, and a process frozen
//! between its fence check and its request sends the request when it wakes.
//! Fenced writes (create-only objects, conditional pointers) make such late
//! writes harmless where the service honours conditions.

pub use crate::clock::jittered;
use crate::clock::{system_clock, transient_backoff, Clock};
use crate::error::{HolderRelation, IgnoredCondition, LeaseError, OwnWrite, CONDITIONAL_ENV};
use crate::mutant::{self, Mutant};
use crate::record::{
    check_holder_name, default_holder_name, format_stamp, lease_key, longest_key_bytes,
    new_instance_id, probe_key, process_nonce, InvalidHolderName, LeaseRecord, MAX_SANE_TTL_S,
};
use crate::store::{
    named_by, DeleteMode, Delivery, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

mod claim;
pub mod wait;
use claim::Claim;
pub use wait::{Cancel, Wait, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_MAX_REREAD};

/// How many lost races for the key an acquire attempt absorbs before it
/// reports the winner.
pub const ACQUIRE_RACES: usize = 3;

/// How many times a conflict answer is retried before it is returned.
pub const CONFLICT_RETRIES: u32 = 4;

/// How many writes an acquire, a probe check or a release sends in all when
/// each meets a transient failure (see the [module docs](self)).
pub const TRANSIENT_WRITE_TRIES: u32 = 3;

/// The TTL a lease is taken with unless told otherwise, in seconds.
pub const DEFAULT_TTL_S: u64 = 30;

/// How long a call without a deadline of its own may take in all, every
/// request of it included: [`Contender::try_acquire`], [`Lease::renew`],
/// [`Lease::release`], [`Contender::release_abandoned`], and
/// [`inspect`](crate::inspect::inspect) and
/// [`break_lease`](crate::inspect::break_lease). Each computes one
/// deadline this long after its start, on its clock, and passes it to
/// every request it sends.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The bound on the release a [`Lease`] dropped while held makes.
pub const DROP_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// An ETag no service issues, for the probe's conditional writes.
/// How many times a refused renewal adopts the version of a record that
/// still names us (a write of ours that landed unseen) and swaps again,
/// before it reports the refusal.
const RECONCILE_SWAPS: usize = 3;

const PROBE_ETAG: &str = "\"bucket-lease-probe-etag-never-issued\"";

/// How strongly a lease keeps a second writer out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Exclusion {
    /// Every acquire and renewal is one compare-and-swap on the service, and
    /// the service was seen refusing false conditions.
    Conditional,
    /// Each step reads, then writes unconditionally: two writers that start
    /// together can both believe they hold the lease until the next renewal.
    BestEffort,
}

impl Exclusion {
    /// Its name in messages and JSON: `conditional` or `best-effort`.
    pub fn name(self) -> &'static str {
        match self {
            Exclusion::Conditional => "conditional",
            Exclusion::BestEffort => "best-effort",
        }
    }
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
    /// the system clock. A TTL over
    /// [`MAX_SANE_TTL_S`] is refused at
    /// acquire ([`LeaseError::TtlTooLong`]).
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
#[non_exhaustive]
pub enum Released {
    /// Our record now says it was released: anyone may take the lease.
    Freed,
    /// There was no record, or it was released already.
    AlreadyFree,
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
    /// Which process this is: [`process_nonce`] unless a test or the
    /// simulation, which run several processes in one, says otherwise.
    nonce: String,
    /// Who holds the lease, for people; never part of identity.
    holder_name: Option<String>,
    /// A suspect record's identity and when, on our monotonic clock, we
    /// first saw it so.
    suspect_seen: Option<(String, Instant)>,
    /// When, on our monotonic clock, the foreign record the last attempt
    /// read can be taken: its expiry by our wall clock, or the end of its
    /// suspect watch. For [`Contender::acquire_with`].
    free_at: Option<Instant>,
}

impl Contender {
    /// A contender for `{prefix}/LEASE` under a new random instance id.
    pub fn new(store: Arc<dyn Store>, prefix: &str, options: LeaseOptions) -> Self {
        Contender {
            store,
            key: lease_key(prefix),
            options,
            instance_id: new_instance_id(),
            nonce: process_nonce().to_string(),
            holder_name: default_holder_name().map(str::to_string),
            suspect_seen: None,
            free_at: None,
        }
    }

    /// The same contender under the instance id `id`: a name the user
    /// chooses (a host, a pod, a job), shown to whoever finds the lease
    /// held. The record also carries this process's nonce
    /// ([`instance_nonce`](Self::instance_nonce)), and only a record with
    /// both is this process's own. Another process given the same `id`
    /// (a second replica, or this program after a restart) is another
    /// holder: it is told the lease is held ([`LeaseError::Held`], saying
    /// the name is in use) and takes it only once the record is stale.
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = id.into();
        self
    }

    /// The same contender as if in a process started with `nonce`, for
    /// tests and the simulation, which run several processes in one. A
    /// program never needs it: every contender of a process shares the
    /// process's nonce, so one rebuilt under the same id still knows the
    /// records of the one before.
    #[doc(hidden)]
    pub fn with_instance_nonce(mut self, nonce: impl Into<String>) -> Self {
        self.nonce = nonce.into();
        self
    }

    /// The same contender writing `name` in the record's `holder_name`
    /// instead of `host:pid` ([`default_holder_name`]): a name for people
    /// (a job, a team, a host), shown by `inspect` and in "held by"
    /// errors. It is informational only: who holds the lease is the
    /// instance id and the process nonce, whatever the name says.
    ///
    /// # Errors
    ///
    /// When `name` is empty, over
    /// [`MAX_HOLDER_NAME_BYTES`](crate::record::MAX_HOLDER_NAME_BYTES) or
    /// holds a control or invisible character ([`check_holder_name`]).
    pub fn with_holder_name(mut self, name: impl Into<String>) -> Result<Self, InvalidHolderName> {
        let name = name.into();
        check_holder_name(&name)?;
        self.holder_name = Some(name);
        Ok(self)
    }

    /// The same contender writing no `holder_name` at all (not even the
    /// default `host:pid`).
    #[must_use]
    pub fn without_holder_name(mut self) -> Self {
        self.holder_name = None;
        self
    }

    /// The holder name every attempt writes, if any.
    pub fn holder_name(&self) -> Option<&str> {
        self.holder_name.as_deref()
    }

    /// The instance id every attempt writes.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The nonce every attempt writes beside the instance id: this
    /// process's ([`process_nonce`]).
    pub fn instance_nonce(&self) -> &str {
        &self.nonce
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Try once to take the lease, bounded as a whole by
    /// [`DEFAULT_CALL_TIMEOUT`]: one deadline that long after the call
    /// starts, on the lease's clock, for every request (the probe's
    /// included). See [`try_acquire_before`](Self::try_acquire_before).
    ///
    /// # Errors
    ///
    /// As [`try_acquire_before`](Self::try_acquire_before).
    pub fn try_acquire(&mut self) -> Result<Lease, LeaseError> {
        let deadline = call_deadline(&*self.options.clock);
        self.try_acquire_before(deadline)
    }

    /// Try once to take the lease, abandoning every request (the probe's
    /// included) at `deadline`. See the [module docs](self).
    ///
    /// The lease is handed out only while [`Lease::may_write`] is true: an
    /// acquire whose probe outlasts the write deadline gives the record back
    /// and fails with [`LeaseError::Fenced`].
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] when another instance holds a fresh lease or
    /// won every race; [`LeaseError::ConditionsIgnored`] when the probe
    /// caught the service ignoring a condition; [`LeaseError::TtlTooLong`]
    /// for a TTL over [`MAX_SANE_TTL_S`]; [`LeaseError::EpochExhausted`]
    /// when the record's epoch cannot grow; [`LeaseError::Fenced`] when the
    /// acquire outlasted its own fence; [`LeaseError::Store`] when a request
    /// failed, a conditional request could not be sent, or an answer lacked
    /// the ETag the next compare-and-swap needs. After a store error the
    /// record may name this instance: try again with this contender, or
    /// [`release_abandoned_before`](Self::release_abandoned_before).
    pub fn try_acquire_before(&mut self, deadline: Option<Instant>) -> Result<Lease, LeaseError> {
        if self.options.ttl_s > MAX_SANE_TTL_S && !mutant::on(Mutant::TtlAboveMax) {
            return Err(LeaseError::TtlTooLong {
                ttl_s: self.options.ttl_s,
            });
        }
        self.check_key_room()?;
        self.free_at = None;
        let clock = Arc::clone(&self.options.clock);
        let best_effort = self.options.best_effort;
        let (mut races, mut transient) = (0, Transient::default());
        // This call's claim: live from now until the call fails or the
        // lease it returns is dropped.
        let claim = Claim::draw();
        while races < ACQUIRE_RACES {
            let current = read_record(&*self.store, &self.key, deadline)?;
            let epoch = match &current {
                None | Some((None, _)) => 1,
                Some((Some(rec), version)) => {
                    match self.writer_of(rec, &claim) {
                        // A write of this very call that landed unseen.
                        Writer::ThisCall => rec.epoch,
                        // Nobody can write under it any more.
                        Writer::GoneLease => self.next_epoch(rec)?,
                        Writer::LiveLease | Writer::Other => {
                            self.check_foreign(rec, version)?;
                            self.next_epoch(rec)?
                        }
                    }
                }
            };
            let (confirmed, confirmed_wall) = (clock.now(), clock.wall());
            let stamp = format_stamp(confirmed_wall);
            let record = LeaseRecord {
                instance_id: self.instance_id.clone(),
                acquired_at: stamp.clone(),
                renewed_at: stamp,
                ttl_s: self.options.ttl_s,
                epoch,
                released_at: None,
                instance_nonce: Some(self.nonce.clone()),
                holder_name: self.holder_name.clone(),
                claim: Some(claim.id().to_string()),
            };
            let (mode, exclusion) = match &current {
                _ if best_effort => (PutMode::Overwrite, Exclusion::BestEffort),
                Some((_, v)) if v.etag.is_none() && mutant::on(Mutant::MissingEtagDowngrade) => {
                    (PutMode::Overwrite, Exclusion::BestEffort)
                }
                None => (PutMode::Create, Exclusion::Conditional),
                Some((_, v)) => (
                    PutMode::Update(require_etag(&*self.store, v, "GET", &self.key)?),
                    Exclusion::Conditional,
                ),
            };
            let body = record.to_bytes();
            let written = put_retrying(&*self.store, &*clock, &self.key, &body, mode, deadline);
            let (version_written, exclusion) = match written {
                Ok(version)
                    if version.etag.is_none() && mutant::on(Mutant::MissingEtagDowngrade) =>
                {
                    (Ok(version), Exclusion::BestEffort)
                }
                other => (other, exclusion),
            };
            let written = version_written;
            let version = match written {
                Ok(version) if exclusion == Exclusion::Conditional => {
                    require_etag(&*self.store, &version, "PUT", &self.key)?
                }
                Ok(version) => version,
                Err(e) if e.is_refusal() => {
                    races += 1;
                    continue;
                }
                // It may have landed: read again and decide afresh.
                Err(e) if transient.pause_before_another(&e, &*clock, deadline) => {
                    if !mutant::on(Mutant::TransientOverwrites) {
                        continue;
                    }
                    let options = PutOptions::new(PutMode::Overwrite).with_deadline(deadline);
                    require_etag(
                        &*self.store,
                        &self.store.put(&self.key, &body, &options)?,
                        "PUT",
                        &self.key,
                    )?
                }
                Err(e) => return Err(e.into()),
            };
            let lease = Lease {
                store: Arc::clone(&self.store),
                clock: Arc::clone(&clock),
                key: self.key.clone(),
                instance_id: self.instance_id.clone(),
                nonce: self.nonce.clone(),
                holder_name: self.holder_name.clone(),
                ttl_s: self.options.ttl_s,
                acquired_at: record.acquired_at.clone(),
                epoch,
                claim,
                held: Mutex::new(Held {
                    version,
                    confirmed,
                    confirmed_wall,
                    exclusion,
                    state: State::Held,
                }),
            };
            if exclusion == Exclusion::Conditional {
                if let Err(e) = lease.probe(&body, deadline) {
                    // This lease is unproven or excludes nobody: give the
                    // key back (a conditional write of a released record).
                    let _ = lease.release_before(deadline);
                    return Err(e);
                }
            }
            if !lease.may_write() {
                let _ = lease.release_before(deadline);
                return Err(LeaseError::Fenced {
                    key: self.key.clone(),
                });
            }
            if exclusion == Exclusion::BestEffort {
                log::warn!(
                    "{}: holding a best-effort lease: a second writer that starts at the same \
                     moment is not kept out",
                    self.key
                );
            }
            self.suspect_seen = None;
            return Ok(lease);
        }
        let last = read_record(&*self.store, &self.key, deadline)?.and_then(|(rec, _)| rec);
        Err(self.held_by(last.as_ref()))
    }

    /// Mark the record released if it is still this contender's own (its
    /// instance id and its process's nonce): for an acquire that failed or
    /// was abandoned after its write may have landed. Bounded as a whole
    /// by [`DEFAULT_CALL_TIMEOUT`]. See
    /// [`release_abandoned_before`](Self::release_abandoned_before).
    ///
    /// # Errors
    ///
    /// As [`release_abandoned_before`](Self::release_abandoned_before).
    pub fn release_abandoned(&self) -> Result<Released, LeaseError> {
        self.release_abandoned_before(call_deadline(&*self.options.clock))
    }

    /// Mark the record released if it is still this contender's own,
    /// abandoning every request at `deadline`: one read, then one write
    /// conditional on the version read. Any other record is left alone,
    /// one with our instance id written by another process (another
    /// nonce, or none) included; nothing is ever deleted.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed; the record then expires
    /// after its TTL.
    pub fn release_abandoned_before(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Released, LeaseError> {
        let exclusion = if self.options.best_effort {
            Exclusion::BestEffort
        } else {
            Exclusion::Conditional
        };
        let target = ReleaseTarget {
            store: &*self.store,
            clock: &*self.options.clock,
            key: &self.key,
            instance_id: &self.instance_id,
            nonce: &self.nonce,
            claim: None,
            exclusion,
        };
        target.release_if_ours(deadline)
    }

    /// [`LeaseError::KeyTooLong`] when the lease key, or the probe's key
    /// beside it for a conditional lease, is longer than the store takes.
    fn check_key_room(&self) -> Result<(), LeaseError> {
        let Some(limit) = self.store.max_key_bytes() else {
            return Ok(());
        };
        let probe = !self.options.best_effort;
        if longest_key_bytes(&self.key, probe) <= limit {
            return Ok(());
        }
        Err(LeaseError::KeyTooLong {
            key: self.key.clone(),
            limit,
            probe,
        })
    }

    /// [`LeaseError::Held`] by the holder `rec` names (`unknown` without
    /// a readable record), saying whether it is another process under our
    /// own instance id.
    fn held_by(&self, rec: Option<&LeaseRecord>) -> LeaseError {
        LeaseError::Held {
            key: self.key.clone(),
            holder: rec.map_or_else(|| "unknown".to_string(), |r| r.instance_id.clone()),
            holder_name: rec.and_then(|r| r.holder_name.clone()),
            relation: match rec {
                Some(r) if r.is_namesake_of(&self.instance_id, &self.nonce) => {
                    HolderRelation::Namesake
                }
                Some(r) if r.is_written_by(&self.instance_id, &self.nonce) => {
                    HolderRelation::ThisProcess
                }
                _ => HolderRelation::Other,
            },
            epoch: rec.map(|r| r.epoch),
        }
    }

    /// Who wrote `rec`, to the acquire call that drew `claim`. See
    /// [`Writer`].
    fn writer_of(&self, rec: &LeaseRecord, claim: &Claim) -> Writer {
        if rec.is_released() || !rec.is_written_by(&self.instance_id, &self.nonce) {
            return Writer::Other;
        }
        if rec.is_claimed_by(&self.instance_id, &self.nonce, claim.id()) {
            return Writer::ThisCall;
        }
        match rec.claim.as_deref() {
            Some(other) if claim::is_live(other) => Writer::LiveLease,
            _ => Writer::GoneLease,
        }
    }

    /// The epoch of whoever takes `rec` over; [`LeaseError::EpochExhausted`]
    /// when it cannot grow.
    fn next_epoch(&self, rec: &LeaseRecord) -> Result<u64, LeaseError> {
        rec.next_epoch().ok_or_else(|| LeaseError::EpochExhausted {
            key: self.key.clone(),
        })
    }

    /// Whether a foreign record keeps us out: a fresh one does, unless it is
    /// suspect and we have seen it unchanged long enough (see
    /// [`LeaseRecord::suspect_watch_s`]).
    fn check_foreign(&mut self, rec: &LeaseRecord, version: &Version) -> Result<(), LeaseError> {
        let clock = &self.options.clock;
        let now = clock.wall();
        let held = self.held_by(Some(rec));
        if !rec.is_fresh(now) {
            return Ok(());
        }
        if !rec.is_suspect(now) || mutant::on(Mutant::SuspectWatchedForever) {
            self.suspect_seen = None;
            // Fresh: it expires by our wall clock `ttl - age` from now.
            let ttl = time::Duration::seconds(i64::try_from(rec.ttl_s).unwrap_or(i64::MAX));
            let left = rec
                .age(now)
                .and_then(|age| ttl.checked_sub(age))
                .and_then(|left| Duration::try_from(left).ok());
            self.free_at = left.and_then(|left| clock.now().checked_add(left));
            return Err(held);
        }
        let identity = format!(
            "{}|{}|{}",
            version.etag.as_deref().unwrap_or(""),
            version.version_id.as_deref().unwrap_or(""),
            rec.renewed_at
        );
        let watch = Duration::from_secs(rec.suspect_watch_s(self.options.ttl_s));
        match &self.suspect_seen {
            Some((seen, since)) if *seen == identity => {
                let unchanged_for = clock.now().saturating_duration_since(*since);
                if unchanged_for >= watch {
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
                self.free_at = since.checked_add(watch);
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
                    watch.as_secs()
                );
                self.suspect_seen = Some((identity, clock.now()));
                self.free_at = clock.now().checked_add(watch);
            }
        }
        Err(held)
    }
}

/// Who wrote a live record of the key, to one acquire call: see
/// [`Contender::writer_of`] and the [`claim`] module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// This very call: a write of its own that landed unseen, taken back
    /// at its epoch.
    ThisCall,
    /// Another live `Lease` (or acquire call) of this process: kept out by
    /// it while it is fresh, as by another process's.
    LiveLease,
    /// A `Lease` of this process that is gone (dropped, or an acquire call
    /// that failed): nobody can write under it, so it is taken over at
    /// once, at the next epoch.
    GoneLease,
    /// Another process, or a released record.
    Other,
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

/// The lease's life cycle as recorded between requests. Time moves a held
/// lease to fenced without a request; see [`Lease::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Held,
    /// The holder can no longer renew (an answer lacked the ETag the next
    /// swap needs), whatever the clocks say.
    Fenced,
    Lost {
        holder: Option<String>,
    },
    Released,
}

/// Where a lease stands now: exactly one of four states, on the lease's
/// clocks at the moment of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// The holder may write until `deadline` on the lease's monotonic clock.
    Held {
        /// The write deadline: see [`Lease::write_deadline`].
        deadline: Instant,
    },
    /// No renewal landed in time (or the holder can no longer renew): the
    /// holder must not write, though its record may still name it.
    Fenced,
    /// The record was replaced or removed, or a write proved another
    /// writer: the lease never comes back.
    Lost {
        /// Who holds it now, when known.
        holder: Option<String>,
    },
    /// The holder gave the lease up.
    Released,
}

/// A held lease on `{prefix}/LEASE`. See the [module docs](self).
///
/// All methods take `&self`: one thread renews while others ask
/// [`may_write`](Self::may_write).
///
/// Dropping a lease that is still held releases it, as
/// [`release`](Self::release) would, within [`DROP_RELEASE_TIMEOUT`]; a
/// failure is logged, and the record then expires after its TTL. (Not
/// while the thread is panicking: the record is left to expire.) Call
/// [`release`](Self::release) to learn how the release went.
#[derive(Debug)]
#[must_use = "a lease dropped at once is released at once"]
pub struct Lease {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    key: String,
    instance_id: String,
    nonce: String,
    holder_name: Option<String>,
    ttl_s: u64,
    acquired_at: String,
    epoch: u64,
    /// The claim of the acquire call that took it: its records carry it,
    /// and only a record with it is this value's. Dropped last, after
    /// [`Drop`]'s release.
    claim: Claim,
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

    /// The nonce of the process that took the lease, written in the
    /// record beside the instance id (see [`crate::record`]).
    pub fn instance_nonce(&self) -> &str {
        &self.nonce
    }

    /// The holder name written in the record, for people only (see
    /// [`Contender::with_holder_name`]).
    pub fn holder_name(&self) -> Option<&str> {
        self.holder_name.as_deref()
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The TTL written in the record, in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }

    /// The holder count written in the record: one more than the record
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
        if mutant::on(Mutant::FenceAtFullTtl) {
            return Duration::from_secs(self.ttl_s);
        }
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

    /// Where the lease stands now. [`LeaseStatus::Held`] carries the write
    /// deadline: two thirds of a TTL after the last confirmed renewal, on
    /// both clocks (when the wall clock has stepped back past the renewal,
    /// the monotonic clock alone decides). At the deadline itself the lease
    /// is already [`LeaseStatus::Fenced`].
    #[must_use]
    pub fn status(&self) -> LeaseStatus {
        let h = self.lock();
        match &h.state {
            State::Held => {}
            State::Fenced => return LeaseStatus::Fenced,
            State::Lost { holder } => {
                return LeaseStatus::Lost {
                    holder: holder.clone(),
                }
            }
            State::Released => return LeaseStatus::Released,
        }
        let fence = self.fence_after();
        let now = self.clock.now();
        let monotonic_deadline = h.confirmed + fence;
        let deadline = match self.clock.wall().duration_since(h.confirmed_wall) {
            Ok(wall_elapsed) => match fence.checked_sub(wall_elapsed) {
                Some(wall_left) => monotonic_deadline.min(now + wall_left),
                None => return LeaseStatus::Fenced,
            },
            // The wall clock stepped back past the renewal: it says nothing.
            Err(_) => monotonic_deadline,
        };
        if now < deadline {
            LeaseStatus::Held { deadline }
        } else {
            LeaseStatus::Fenced
        }
    }

    /// The instant, on the lease's monotonic clock, after which this holder
    /// must not write. `None` once that has passed, or the lease is fenced,
    /// lost or released. See [`status`](Self::status).
    #[must_use]
    pub fn write_deadline(&self) -> Option<Instant> {
        match self.status() {
            LeaseStatus::Held { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// Whether this holder may start a write now.
    #[must_use]
    pub fn may_write(&self) -> bool {
        self.write_deadline().is_some()
    }

    /// Give the lease up without a request, because a write elsewhere showed
    /// that another writer is active. `holder` names it when known.
    pub fn mark_lost(&self, holder: Option<String>) {
        let mut h = self.lock();
        if matches!(h.state, State::Held | State::Fenced) {
            h.state = State::Lost { holder };
        }
    }

    /// Renew: rewrite the record with a new `renewed_at`, provided it is
    /// still exactly ours. Bounded as a whole by [`DEFAULT_CALL_TIMEOUT`]
    /// (one deadline for the write and any reconciling read and write); a
    /// keeper renews with [`renew_before`](Self::renew_before) and the
    /// write deadline instead.
    ///
    /// # Errors
    ///
    /// As [`renew_before`](Self::renew_before).
    pub fn renew(&self) -> Result<(), LeaseError> {
        self.renew_before(call_deadline(&*self.clock))
    }

    /// Renew, abandoning every request at `deadline`.
    ///
    /// A renewal that lands after the write deadline has passed (by time)
    /// holds the lease again: its compare-and-swap proves nobody wrote the
    /// record meanwhile.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when the record was replaced or deleted: the
    /// lease is lost for good. [`LeaseError::Fenced`] when the lease can no
    /// longer be renewed. [`LeaseError::Store`] when a request failed or
    /// could not be sent (retry; the fence keeps the holder safe meanwhile),
    /// or when its answer lacked an ETag (the lease is then fenced for good:
    /// its next condition is unknown).
    pub fn renew_before(&self, deadline: Option<Instant>) -> Result<(), LeaseError> {
        let (exclusion, version) = {
            let h = self.lock();
            if h.state != State::Held {
                return Err(self.state_error(&h.state));
            }
            (h.exclusion, h.version.clone())
        };
        let (confirmed, confirmed_wall) = (self.clock.now(), self.clock.wall());
        let body = self.record(format_stamp(confirmed_wall)).to_bytes();
        let written = match exclusion {
            Exclusion::Conditional => {
                let mode = PutMode::Update(version.clone());
                match put_retrying(&*self.store, &*self.clock, &self.key, &body, mode, deadline) {
                    Ok(version) => Ok(version),
                    Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {
                        self.reconcile(&body, version, deadline)
                    }
                    Err(e) => Err(e.into()),
                }
                .and_then(|version| self.known_version(version, "PUT"))
            }
            Exclusion::BestEffort => self.renew_best_effort(&body, deadline),
        }?;
        let mut h = self.lock();
        if h.state != State::Held {
            return Err(self.state_error(&h.state));
        }
        h.version = written;
        h.confirmed = confirmed;
        h.confirmed_wall = confirmed_wall;
        Ok(())
    }

    /// Our record as of now, renewed at `renewed_at`.
    fn record(&self, renewed_at: String) -> LeaseRecord {
        LeaseRecord {
            instance_id: self.instance_id.clone(),
            acquired_at: self.acquired_at.clone(),
            renewed_at,
            ttl_s: self.ttl_s,
            epoch: self.epoch,
            released_at: None,
            instance_nonce: Some(self.nonce.clone()),
            holder_name: self.holder_name.clone(),
            claim: Some(self.claim.id().to_string()),
        }
    }

    /// `version` when it carries an ETag; otherwise the lease is fenced for
    /// good (the next swap's condition is unknown) and the error says so.
    fn known_version(&self, version: Version, method: &'static str) -> Result<Version, LeaseError> {
        require_etag(&*self.store, &version, method, &self.key).map_err(|e| {
            let mut h = self.lock();
            if h.state == State::Held {
                h.state = State::Fenced;
            }
            LeaseError::Store(e)
        })
    }

    /// A swap on `refused_on` was refused. A record that still names us at
    /// another version means a write of ours landed unseen: adopt its
    /// version and swap once more (at most [`RECONCILE_SWAPS`] times). Our
    /// record still at the version a swap was refused on means the service
    /// refused our own ETag: nobody else wrote, so the lease is not lost
    /// ([`LeaseError::OwnWriteRefused`]). Anything else means the lease is
    /// gone.
    fn reconcile(
        &self,
        body: &[u8],
        mut refused_on: Version,
        deadline: Option<Instant>,
    ) -> Result<Version, LeaseError> {
        for _ in 0..RECONCILE_SWAPS {
            match read_record(&*self.store, &self.key, deadline)? {
                Some((Some(rec), version)) if self.is_ours(&rec) => {
                    if version == refused_on {
                        return Err(self.own_write_refused(OwnWrite::Renewal));
                    }
                    let mode = PutMode::Update(self.known_version(version.clone(), "GET")?);
                    match put_retrying(&*self.store, &*self.clock, &self.key, body, mode, deadline)
                    {
                        Ok(version) => return Ok(version),
                        Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {
                            refused_on = version;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                other => return Err(self.lose(self.other_holder(other))),
            }
        }
        // Each swap was refused on a version our record had when read: the
        // lease is still ours, and the next renewal starts from what it reads.
        Err(self.own_write_refused(OwnWrite::Renewal))
    }

    /// [`LeaseError::OwnWriteRefused`] for this lease's `write`.
    fn own_write_refused(&self, write: OwnWrite) -> LeaseError {
        log::debug!(
            "{}: a {write:?} on our record's own ETag was refused",
            self.key
        );
        LeaseError::OwnWriteRefused {
            key: self.key.clone(),
            write,
        }
    }

    /// Whether `rec` is this value's own live record: our instance id, our
    /// process's nonce and our acquire's claim, not released. See
    /// [`crate::record`].
    fn is_ours(&self, rec: &LeaseRecord) -> bool {
        rec.is_claimed_by(&self.instance_id, &self.nonce, self.claim.id()) && !rec.is_released()
    }

    /// Who holds the lease whose record was read as `read`, other than us:
    /// the name of a live record another process wrote (under our own
    /// name too), `None` for an absent, unreadable, released or own one.
    fn other_holder(&self, read: Option<(Option<LeaseRecord>, Version)>) -> Option<String> {
        read.and_then(|(rec, _)| rec)
            .filter(|rec| !rec.is_released() && !self.is_ours(rec))
            .map(|rec| rec.instance_id)
    }

    /// Best-effort renewal: read, and rewrite only a record naming us.
    fn renew_best_effort(
        &self,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Version, LeaseError> {
        match read_record(&*self.store, &self.key, deadline)? {
            Some((Some(rec), _)) if self.is_ours(&rec) => {
                let options = PutOptions::new(PutMode::Overwrite).with_deadline(deadline);
                Ok(self.store.put(&self.key, body, &options)?)
            }
            other => Err(self.lose(self.other_holder(other))),
        }
    }

    /// Mark the lease lost to `holder` and describe it.
    fn lose(&self, holder: Option<String>) -> LeaseError {
        let mut h = self.lock();
        if matches!(h.state, State::Held | State::Fenced) {
            h.state = State::Lost { holder };
        }
        self.state_error(&h.state)
    }

    /// Why a lease in `state` cannot be renewed.
    fn state_error(&self, state: &State) -> LeaseError {
        let key = self.key.clone();
        match state {
            State::Fenced => LeaseError::Fenced { key },
            State::Lost { holder } => LeaseError::Lost {
                key,
                holder: holder.clone(),
            },
            State::Held | State::Released => LeaseError::Lost { key, holder: None },
        }
    }

    /// Give the lease up: mark our record released, if it is still ours.
    /// From the first moment of the call, [`may_write`](Self::may_write) is
    /// false. Bounded as a whole by [`DEFAULT_CALL_TIMEOUT`]: every request
    /// of it gets one deadline, that long after its start.
    ///
    /// # Errors
    ///
    /// As [`release_before`](Self::release_before).
    pub fn release(&self) -> Result<Released, LeaseError> {
        self.release_before(call_deadline(&*self.clock))
    }

    /// Release, abandoning every request at `deadline`.
    ///
    /// The record is never deleted: it is rewritten as released (stale to
    /// every reader at once, holder and epoch kept) with one write
    /// conditional on our last ETag, a condition the acquire's probe saw
    /// this service honour. If that version is stale (an answer we never
    /// saw), the record is read, and rewritten on the version read only if
    /// it still names us. A successor's record is therefore never touched,
    /// whatever the service does with DELETE conditions. A lease lost to a
    /// known holder is left alone without a request; one marked lost by a
    /// refused write elsewhere ([`mark_lost`](Self::mark_lost)) is released
    /// as above if its record still names us.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed; the record then expires
    /// after its TTL, and this handle stays released.
    pub fn release_before(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let (exclusion, version, lost) = {
            let mut h = self.lock();
            let lost = match &h.state {
                State::Lost {
                    holder: Some(holder),
                } => {
                    return Ok(Released::LeftAlone {
                        holder: Some(holder.clone()),
                    })
                }
                State::Lost { holder: None } => {
                    h.state = State::Released;
                    true
                }
                State::Released => return Ok(Released::AlreadyFree),
                State::Held | State::Fenced => {
                    h.state = State::Released;
                    false
                }
            };
            (h.exclusion, h.version.clone(), lost)
        };
        let target = ReleaseTarget {
            store: &*self.store,
            clock: &*self.clock,
            key: &self.key,
            instance_id: &self.instance_id,
            nonce: &self.nonce,
            claim: Some(self.claim.id()),
            exclusion,
        };
        if lost {
            // Marked lost by a refused write elsewhere: the record may still
            // name us, and nobody else will free it before its TTL.
            return target.release_if_ours(deadline);
        }
        if exclusion == Exclusion::Conditional
            && version.etag.is_some()
            && mutant::on(Mutant::ReleaseByDelete)
        {
            let mode = DeleteMode::IfVersion(version);
            return match self.store.delete(&self.key, &mode, deadline) {
                Ok(()) => Ok(Released::Freed),
                Err(e) if e.is_refusal() => Ok(Released::LeftAlone { holder: None }),
                Err(e) => Err(e.into()),
            };
        }
        if exclusion == Exclusion::Conditional && version.etag.is_some() {
            let released = self.record(String::new()).released(self.clock.wall());
            let mode = PutMode::Update(version);
            let body = released.to_bytes();
            let mut transient = Transient::default();
            match put_retrying(&*self.store, &*self.clock, &self.key, &body, mode, deadline) {
                Ok(_) => return Ok(Released::Freed),
                // Our version is stale (a lost answer?): look first.
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                // It may have landed: look first.
                Err(e) if transient.pause_before_another(&e, &*self.clock, deadline) => {
                    return target.release_if_ours_retrying(transient, deadline);
                }
                Err(e) => return Err(e.into()),
            }
        }
        target.release_if_ours(deadline)
    }

    /// Check the probe writes of a conditional acquire, each bounded by
    /// `deadline` and by the new lease's write deadline. See the [module
    /// docs](self).
    fn probe(&self, body: &[u8], deadline: Option<Instant>) -> Result<(), LeaseError> {
        let spelling = self.store.condition_spelling();
        self.probe_once(body, deadline)?;
        if self.store.condition_spelling() != spelling {
            // The store changed how it spells conditions meanwhile: the
            // refusals seen may have been of the old spelling. Once more.
            log::debug!(
                "{}: the store's spelling of conditions changed; probing again",
                self.key
            );
            return self.probe_once(body, deadline);
        }
        Ok(())
    }

    /// One round of [`probe`](Self::probe)'s four writes.
    fn probe_once(&self, body: &[u8], deadline: Option<Instant>) -> Result<(), LeaseError> {
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
                probe_key(&self.key),
                PutMode::Update(fake),
                IgnoredCondition::IfMatchOnAbsentKey,
            ),
        ];
        if self.store.concurrent_requests() {
            return self.probe_at_once(body, deadline, checks);
        }
        for (key, mode, condition) in checks {
            let bound = self.probe_bound(deadline)?;
            match put_resending(&*self.store, &*self.clock, &key, body, mode, bound) {
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
                Ok(_) => {
                    if key != self.key {
                        if let Err(e) = self.store.delete(&key, &DeleteMode::Unconditional, bound) {
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
        let bound = self.probe_bound(deadline)?;
        let sent = self.lock().version.clone();
        let answer = self.own_update(body, &sent, bound);
        self.judge_own_update(&sent, answer, bound)
    }

    /// The deadline of a probe write sent now: the caller's `deadline` or
    /// the new lease's write deadline, whichever comes first;
    /// [`LeaseError::Fenced`] once the lease may no longer be written.
    fn probe_bound(&self, deadline: Option<Instant>) -> Result<Option<Instant>, LeaseError> {
        let Some(fence) = self.write_deadline() else {
            return Err(LeaseError::Fenced {
                key: self.key.clone(),
            });
        };
        Ok(Some(deadline.map_or(fence, |d| d.min(fence))))
    }

    /// The probe's one write that must be accepted, as every renewal must:
    /// our record again, conditional on the version our acquire's write
    /// gave it (its own ETag).
    fn own_update(
        &self,
        body: &[u8],
        sent: &Version,
        bound: Option<Instant>,
    ) -> Result<Version, StoreError> {
        let mode = PutMode::Update(sent.clone());
        put_resending(&*self.store, &*self.clock, &self.key, body, mode, bound)
    }

    /// What the answer to [`own_update`](Self::own_update), sent on
    /// `sent`, says. Accepted: its version is the lease's from now on. A
    /// refusal is read: our record still at `sent` means the service
    /// refused a write conditional on the object's own ETag, so no renewal
    /// could ever land ([`LeaseError::OwnEtagRefused`]); our record at
    /// another version is our own write that landed unseen (adopted);
    /// anything else is someone else's.
    fn judge_own_update(
        &self,
        sent: &Version,
        answer: Result<Version, StoreError>,
        bound: Option<Instant>,
    ) -> Result<(), LeaseError> {
        let refusal = match answer {
            Ok(version) => {
                let version = self.known_version(version, "PUT")?;
                self.lock().version = version;
                return Ok(());
            }
            Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => e,
            Err(e) => return Err(e.into()),
        };
        match read_record(&*self.store, &self.key, bound)? {
            Some((Some(rec), version)) if self.is_ours(&rec) => {
                if version == *sent && !mutant::on(Mutant::OwnEtagRefusalTrusted) {
                    log::debug!(
                        "{}: probe write on our own ETag refused: {refusal}",
                        self.key
                    );
                    return Err(LeaseError::OwnEtagRefused {
                        key: self.key.clone(),
                    });
                }
                self.lock().version = self.known_version(version, "GET")?;
                Ok(())
            }
            other => Err(self.lose(self.other_holder(other))),
        }
    }

    /// [`probe`](Self::probe) with its four writes sent at once, each on
    /// its own thread (the first on this one), for stores that allow it
    /// ([`Store::concurrent_requests`]). The answer is the sequential
    /// probe's: the first write, in the same order, whose answer was not a
    /// refusal decides (an accepted write is [`LeaseError::ConditionsIgnored`]
    /// naming its condition, another error is returned as it is). The probe
    /// object is removed whenever its write was accepted, whatever decided.
    fn probe_at_once(
        &self,
        body: &[u8],
        deadline: Option<Instant>,
        checks: [(String, PutMode, IgnoredCondition); 3],
    ) -> Result<(), LeaseError> {
        let bound = self.probe_bound(deadline)?;
        let (store, clock) = (&*self.store, &*self.clock);
        let put = |(key, mode, _): &(String, PutMode, IgnoredCondition)| {
            put_resending(store, clock, key, body, mode.clone(), bound)
        };
        let sent = self.lock().version.clone();
        let (answers, own): (Vec<Result<Version, StoreError>>, _) = std::thread::scope(|scope| {
            let own = std::thread::Builder::new()
                .name("bucket-lease-probe".into())
                .spawn_scoped(scope, || self.own_update(body, &sent, bound));
            let others: Vec<_> = checks[1..]
                .iter()
                .map(|check| {
                    // Without a thread, the write is sent from this one.
                    std::thread::Builder::new()
                        .name("bucket-lease-probe".into())
                        .spawn_scoped(scope, move || put(check))
                        .map_err(|_| check)
                })
                .collect();
            let mut answers = vec![put(&checks[0])];
            for other in others {
                answers.push(match other {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(check) => put(check),
                });
            }
            let own = match own {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => self.own_update(body, &sent, bound),
            };
            (answers, own)
        });
        let (probe_key, _, _) = &checks[2];
        if answers[2].is_ok() {
            if let Err(e) = self
                .store
                .delete(probe_key, &DeleteMode::Unconditional, bound)
            {
                log::error!("{probe_key}: could not remove the probe object: {e}");
            }
        }
        for ((_, _, condition), answer) in checks.iter().zip(answers) {
            match answer {
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
                Ok(_) => {
                    return Err(LeaseError::ConditionsIgnored {
                        key: self.key.clone(),
                        condition: *condition,
                    })
                }
            }
        }
        self.judge_own_update(&sent, own, bound)
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A record to release on behalf of the process `instance_id` and `nonce`
/// name, by reading it first: the record of one lease (`claim`), or one
/// that no live lease of the process holds (`None`: an abandoned acquire).
struct ReleaseTarget<'a> {
    store: &'a dyn Store,
    clock: &'a dyn Clock,
    key: &'a str,
    instance_id: &'a str,
    nonce: &'a str,
    claim: Option<&'a str>,
    exclusion: Exclusion,
}

impl ReleaseTarget<'_> {
    /// Whether `rec` is the record this release may rewrite: the lease's
    /// own (its claim), or for an abandoned acquire one of this process
    /// that no live lease or acquire call of it claims.
    fn is_target(&self, rec: &LeaseRecord) -> bool {
        match self.claim {
            Some(claim) => rec.is_claimed_by(self.instance_id, self.nonce, claim),
            None => {
                rec.is_written_by(self.instance_id, self.nonce)
                    && (!rec.claim.as_deref().is_some_and(claim::is_live)
                        || mutant::on(Mutant::IdentityByProcess))
            }
        }
    }

    /// Read the record; if it is ours (`instance_id` and `nonce` both) and
    /// not released yet, rewrite it released, conditional on the version
    /// read (unconditional for a best-effort lease).
    fn release_if_ours(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        self.release_if_ours_retrying(Transient::default(), deadline)
    }

    /// [`release_if_ours`](Self::release_if_ours), reading and deciding
    /// again after a transient failure of its write while `transient`
    /// allows.
    fn release_if_ours_retrying(
        &self,
        mut transient: Transient,
        deadline: Option<Instant>,
    ) -> Result<Released, LeaseError> {
        loop {
            match self.release_once(deadline) {
                Err(LeaseError::Store(e))
                    if e.method() == "PUT"
                        && transient.pause_before_another(&e, self.clock, deadline) => {}
                result => return result,
            }
        }
    }

    /// One read, then at most one conditional write.
    fn release_once(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let (rec, version) = match read_record(self.store, self.key, deadline)? {
            None => return Ok(Released::AlreadyFree),
            Some((Some(rec), version)) if self.is_target(&rec) => (rec, version),
            other => {
                return Ok(Released::LeftAlone {
                    holder: live_holder(other),
                })
            }
        };
        if rec.is_released() {
            return Ok(Released::AlreadyFree);
        }
        let mode = match self.exclusion {
            Exclusion::Conditional => {
                PutMode::Update(require_etag(self.store, &version, "GET", self.key)?)
            }
            Exclusion::BestEffort => PutMode::Overwrite,
        };
        let body = rec.released(self.clock.wall()).to_bytes();
        match put_retrying(self.store, self.clock, self.key, &body, mode, deadline) {
            Ok(_) => Ok(Released::Freed),
            Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {
                match read_record(self.store, self.key, deadline) {
                    // Refused on the version our record still has: the
                    // service refused our own ETag; nobody else holds it.
                    Ok(Some((Some(rec), now))) if now == version && self.is_target(&rec) => {
                        Err(LeaseError::OwnWriteRefused {
                            key: self.key.to_string(),
                            write: OwnWrite::Release,
                        })
                    }
                    read => Ok(Released::LeftAlone {
                        holder: read.ok().and_then(live_holder),
                    }),
                }
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let pending = matches!(
            self.lock().state,
            State::Held | State::Fenced | State::Lost { holder: None }
        );
        if !pending {
            return;
        }
        if std::thread::panicking() {
            log::warn!(
                "{}: a held lease was dropped while its thread panicked: not released, its \
                 record expires after its TTL ({} s)",
                self.key,
                self.ttl_s
            );
            return;
        }
        let deadline = self.clock.now().checked_add(DROP_RELEASE_TIMEOUT);
        match self.release_before(deadline) {
            Ok(released) => log::debug!("{}: released on drop: {released:?}", self.key),
            Err(e) => log::warn!(
                "{}: a held lease was dropped and releasing it failed (its record expires \
                 after its TTL, {} s): {e}",
                self.key,
                self.ttl_s
            ),
        }
    }
}

/// The one deadline of a call made without one: [`DEFAULT_CALL_TIMEOUT`]
/// after now on `clock` (`None` only where the instant cannot be
/// represented).
pub(crate) fn call_deadline(clock: &dyn Clock) -> Option<Instant> {
    clock.now().checked_add(DEFAULT_CALL_TIMEOUT)
}

/// The record at `key`, parsed when it parses, with its version; `None` when
/// the key is absent. An object too large to read counts as a record that
/// does not parse, with the version its answer named.
pub(crate) fn read_record(
    store: &dyn Store,
    key: &str,
    deadline: Option<Instant>,
) -> Result<Option<(Option<LeaseRecord>, Version)>, StoreError> {
    match store.get(key, deadline) {
        Ok(object) => Ok(Some((LeaseRecord::parse(&object.body), object.version))),
        Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == StoreErrorKind::TooLarge => match e.version() {
            Some(version) => Ok(Some((None, version.clone()))),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Who holds a lease whose record was read as `read`: nobody when it is
/// absent, unreadable or released.
fn live_holder(read: Option<(Option<LeaseRecord>, Version)>) -> Option<String> {
    read.and_then(|(rec, _)| rec)
        .filter(|rec| !rec.is_released())
        .map(|rec| rec.instance_id)
}

/// Who the record at `key` names as its live holder, if it can be read.
pub(crate) fn read_holder(
    store: &dyn Store,
    key: &str,
    deadline: Option<Instant>,
) -> Option<String> {
    live_holder(read_record(store, key, deadline).ok().flatten())
}

/// `version` if it carries an ETag, the condition of the next
/// compare-and-swap; otherwise an error naming the answer that lacked one.
fn require_etag(
    store: &dyn Store,
    version: &Version,
    method: &'static str,
    key: &str,
) -> Result<Version, StoreError> {
    if version.etag.is_some() {
        return Ok(version.clone());
    }
    let error = StoreError::new(StoreErrorKind::Rejected, method, key).with_message(
        "the answer carried no ETag, so the next compare-and-swap cannot be sent; a \
         conditional lease needs a service (and any proxy in front of it) that returns the \
         ETag header on GET and PUT",
    );
    Err(named_by(error, store))
}

/// The transient write failures met so far by one acquire, probe check or
/// release; see [`TRANSIENT_WRITE_TRIES`].
#[derive(Debug, Default)]
pub(crate) struct Transient {
    failures: u32,
}

impl Transient {
    /// Whether to try again after `error`: a transient failure of a request
    /// that was sent (one not sent is the store's to retry), with tries
    /// left and room before `deadline` for a jittered pause and a request.
    /// If so, the pause has been slept.
    pub(crate) fn pause_before_another(
        &mut self,
        error: &StoreError,
        clock: &dyn Clock,
        deadline: Option<Instant>,
    ) -> bool {
        if error.kind() != StoreErrorKind::Transport
            || error.delivery() == Delivery::NotSent
            || self.failures + 1 >= TRANSIENT_WRITE_TRIES
        {
            return false;
        }
        self.failures += 1;
        let pause = clock.jitter(transient_backoff(self.failures));
        if deadline.is_some_and(|d| clock.now() + pause * 2 >= d) {
            return false;
        }
        log::debug!(
            "{}: {error}; reading and trying again in {pause:?} ({} of {TRANSIENT_WRITE_TRIES})",
            error.key(),
            self.failures + 1
        );
        clock.sleep(pause);
        true
    }
}

/// [`put_retrying`], sent again after a transient failure: for the probe's
/// writes, which carry our own record and are meant to be refused, so that
/// a second copy can do no harm the first could not.
fn put_resending(
    store: &dyn Store,
    clock: &dyn Clock,
    key: &str,
    body: &[u8],
    mode: PutMode,
    deadline: Option<Instant>,
) -> Result<Version, StoreError> {
    let mut transient = Transient::default();
    loop {
        match put_retrying(store, clock, key, body, mode.clone(), deadline) {
            Err(e) if transient.pause_before_another(&e, clock, deadline) => {}
            answer => return answer,
        }
    }
}

/// A write that retries conflict answers after a jittered, growing pause,
/// at most [`CONFLICT_RETRIES`] times and never past `deadline`.
pub(crate) fn put_retrying(
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
                let pause = clock.jitter(Duration::from_millis(25) * 2u32.pow(retries - 1));
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

#[cfg(test)]
mod probe_tests {
    use super::*;
    use crate::clock::TestClock;
    use crate::memory::{MemoryStore, Misbehaviour};
    use crate::store::Object;

    /// A memory store on which the probe sends its writes at once.
    #[derive(Debug)]
    struct AtOnce(Arc<MemoryStore>);

    impl Store for AtOnce {
        fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
            self.0.get(key, deadline)
        }
        fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
            self.0.head(key, deadline)
        }
        fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
            self.0.put(key, body, options)
        }
        fn delete(
            &self,
            key: &str,
            mode: &DeleteMode,
            deadline: Option<Instant>,
        ) -> Result<(), StoreError> {
            self.0.delete(key, mode, deadline)
        }
        fn concurrent_requests(&self) -> bool {
            true
        }
        fn store_url(&self) -> Option<&str> {
            self.0.store_url()
        }
    }

    /// What an acquire answers with `switches` on, and the keys and the
    /// record it leaves.
    fn acquire(at_once: bool, switches: &[Misbehaviour]) -> (String, Vec<String>, String) {
        let memory = Arc::new(MemoryStore::new());
        for switch in switches {
            memory.set(*switch);
        }
        let store: Arc<dyn Store> = if at_once {
            Arc::new(AtOnce(memory.clone()))
        } else {
            memory.clone()
        };
        let options = LeaseOptions::new(30).clock(Arc::new(TestClock::new()));
        let answer = match Contender::new(store, "db", options).try_acquire() {
            Ok(lease) => format!("held, {:?}", lease.exclusion()),
            Err(e) => format!("{e:?}"),
        };
        let keys = memory
            .keys()
            .into_iter()
            .map(|k| {
                if k.contains(".probe-") {
                    "PROBE".into()
                } else {
                    k
                }
            })
            .collect();
        let record = memory
            .peek(&lease_key("db"))
            .and_then(|b| LeaseRecord::parse(&b))
            .map_or("none".into(), |r| format!("released: {}", r.is_released()));
        (answer, keys, record)
    }

    #[test]
    fn the_probe_sent_at_once_answers_as_the_one_sent_in_order() {
        use Misbehaviour::*;
        let ignored = [IgnoreIfNoneMatch, IgnoreIfMatch, CreateOnIfMatchAbsent];
        let mut cases: Vec<Vec<Misbehaviour>> = (0..8u32)
            .map(|bits| {
                (0..3)
                    .filter(|i| bits & (1 << i) != 0)
                    .map(|i| ignored[i])
                    .collect()
            })
            .collect();
        for other in [
            NotModifiedOnCreate,
            NoConditions,
            NoEtags,
            IgnoreIfMatchOnDelete,
        ] {
            cases.push(vec![other]);
            cases.push(vec![other, IgnoreIfMatch]);
        }
        for switches in cases {
            let in_order = acquire(false, &switches);
            for _ in 0..3 {
                assert_eq!(acquire(true, &switches), in_order, "{switches:?}");
            }
            assert!(
                !in_order.1.iter().any(|k| k == "PROBE"),
                "{switches:?}: the probe object is removed"
            );
        }
    }
}
