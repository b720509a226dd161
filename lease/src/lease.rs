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
//!   ([`StoreErrorKind::NotImplemented`](crate::store::StoreErrorKind::NotImplemented)) or an answer without the ETag the
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
//!   [`Contender::with_holder_name`] chose another) is for people only, and
//!   its `payload` ([`Contender::with_payload`]: written at acquire, kept by
//!   every renewal and the release) for followers only; neither plays any
//!   part in this.
//! - **A lease is one acquire, not one process.** Each acquire call draws
//!   a claim its record carries for the life of the [`Lease`] it returns,
//!   and a lease's renewals, reconciling reads and release touch only a
//!   record with its own claim: one process's old `Lease` (fenced, say,
//!   and not yet dropped) never renews, adopts or frees the record of a
//!   newer one. A process holds a key through one `Lease` at a time: an
//!   acquire that finds a fresh record of another live `Lease` of its own
//!   process is refused ([`LeaseError::Held`] with
//!   [`HolderRelation::ThisProcess`](crate::error::HolderRelation::ThisProcess):
//!   release or drop the older one first), and takes it over at the next
//!   epoch once it is stale, as another process's; a record of this
//!   process that no live `Lease` holds (an acquire that failed after its
//!   write landed, a lease dropped without a successful release) is taken
//!   over at once, at the next epoch, for nobody can write under it. So
//!   each `Lease` value has an epoch of its own, and its `may_write()` is
//!   false before a newer one's is true.
//! - **A lost answer is not a lost lease.** Within one acquire call, a
//!   write that landed although its answer never arrived is recognised by
//!   its claim and taken back at its epoch; after a failed call, the next
//!   one (even of a contender built anew under the same id) takes such a
//!   record over at once, one epoch on. A refused
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
//!   ahead, or with a TTL over [`MAX_SANE_TTL_S`](crate::record::MAX_SANE_TTL_S))
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
//!   rewritten only while it is still this lease's (name, nonce and
//!   claim). Any other record is left alone; a lease marked lost by a
//!   refused fenced write still frees its own record. An acquire abandoned
//!   half way is released by id and nonce when no live lease of the
//!   process claims the record ([`Contender::release_abandoned_before`]).
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
//!   ([`StoreError::delivery`](crate::store::StoreError::delivery)); a renewal is tried again by its keeper,
//!   inside the fence.
//!
//! What no lease can stop: a request the service has already received
//! completes even after its sender lost the lease, and a process frozen
//! between its fence check and its request sends the request when it wakes.
//! Fenced writes (create-only objects, conditional pointers) make such late
//! writes harmless where the service honours conditions.

pub use crate::clock::jittered;
use crate::clock::{system_clock, Clock};
use crate::error::{LeaseError, CONDITIONAL_ENV};
use crate::mutant::{self, Mutant};
use crate::record::{
    check_holder_name, check_payload, default_holder_name, lease_key, new_instance_id,
    process_nonce, InvalidHolderName, InvalidPayload, LeaseRecord,
};
use crate::stats::Recorder;
use crate::store::{Store, Version};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

mod acquire;
mod claim;
mod names;
mod probe;
mod release;
mod renew;
mod requests;
pub mod wait;

use claim::Claim;
pub(crate) use requests::{call_deadline, put_retrying, read_record};
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
    /// [`MAX_SANE_TTL_S`](crate::record::MAX_SANE_TTL_S) is refused at
    /// acquire ([`LeaseError::TtlTooLong`]).
    pub fn new(ttl_s: u64) -> Self {
        LeaseOptions {
            ttl_s: ttl_s.max(1),
            best_effort: false,
            clock: system_clock(),
        }
    }

    /// The same options, best-effort when the environment variable
    /// [`CONDITIONAL_ENV`] (`BUCKET_LEASE_CONDITIONAL`) is `off`, as the
    /// command's users set it for a service without conditional writes.
    /// That is all it reads: the TTL stays the one given to
    /// [`new`](Self::new).
    #[must_use]
    pub fn best_effort_from_env(self) -> Self {
        let off = std::env::var(CONDITIONAL_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("off"));
        self.best_effort(off)
    }

    /// `LeaseOptions::new(ttl_s).best_effort_from_env()`: the name said
    /// "from the environment" of a TTL it never read.
    #[deprecated(note = "use LeaseOptions::new(ttl_s).best_effort_from_env()")]
    pub fn from_env(ttl_s: u64) -> Self {
        Self::new(ttl_s).best_effort_from_env()
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

    /// The clock leases taken with these options run on.
    pub(crate) fn clock_ref(&self) -> &Arc<dyn Clock> {
        &self.clock
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
        /// Who holds the lease now (its instance id), when the record
        /// names anyone.
        holder: Option<String>,
        /// That holder's name for people, when its record carries one
        /// (see [`crate::record`]); informational only.
        holder_name: Option<String>,
    },
}

impl Released {
    /// The loss a release that found the record not ours shows, for the
    /// lease on `key`: [`LeaseError::Lost`] for [`Released::LeftAlone`]
    /// (taken over or broken since its last renewal, so not held to the
    /// end), else none. What a keeper's or a pool's stop answers then.
    pub(crate) fn loss_shown(&self, key: &str) -> Option<LeaseError> {
        match self {
            Released::LeftAlone { holder, .. } => Some(LeaseError::Lost {
                key: key.to_string(),
                holder: holder.clone(),
            }),
            _ => None,
        }
    }

    /// [`Released::LeftAlone`] naming the live holder of `rec`, when it
    /// names anyone.
    pub(crate) fn left_alone(rec: Option<LeaseRecord>) -> Released {
        match rec {
            Some(rec) => Released::LeftAlone {
                holder: Some(rec.instance_id),
                holder_name: rec.holder_name,
            },
            None => Released::LeftAlone {
                holder: None,
                holder_name: None,
            },
        }
    }
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
    /// Shared: every lease of a process carries one copy ([`shared_nonce`]).
    nonce: Arc<str>,
    /// Who holds the lease, for people; never part of identity. The
    /// default is shared as the nonce is.
    holder_name: Option<Arc<str>>,
    /// The data every record of the lease carries for followers.
    payload: Option<String>,
    /// A suspect record's identity and when, on our monotonic clock, we
    /// first saw it so.
    suspect_seen: Option<(String, Instant)>,
    /// When, on our monotonic clock, the foreign record the last attempt
    /// read can be taken: its expiry by our wall clock, or the end of its
    /// suspect watch. For [`Contender::acquire_with`].
    free_at: Option<Instant>,
}

/// This process's nonce ([`process_nonce`]), one allocation shared by
/// every contender and lease of the process rather than a copy each (a
/// pool keeps thousands).
fn shared_nonce() -> Arc<str> {
    static NONCE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    Arc::clone(NONCE.get_or_init(|| Arc::from(process_nonce())))
}

/// This process's default holder name ([`default_holder_name`]), shared as
/// [`shared_nonce`] is.
fn shared_holder_name() -> Option<Arc<str>> {
    static NAME: std::sync::OnceLock<Option<Arc<str>>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| default_holder_name().map(Arc::from))
        .clone()
}

impl Contender {
    /// A contender for `{prefix}/LEASE` under a new random instance id.
    pub fn new(store: Arc<dyn Store>, prefix: &str, options: LeaseOptions) -> Self {
        Contender {
            store,
            key: lease_key(prefix),
            options,
            instance_id: new_instance_id(),
            nonce: shared_nonce(),
            holder_name: shared_holder_name(),
            payload: None,
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
        self.nonce = Arc::from(nonce.into());
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
        self.holder_name = Some(Arc::from(name));
        Ok(self)
    }

    /// The same contender writing no `holder_name` at all (not even the
    /// default `host:pid`).
    #[must_use]
    pub fn without_holder_name(mut self) -> Self {
        self.holder_name = None;
        self
    }

    /// The same contender writing `payload` in the record: data for
    /// followers (the leader's address, a generation, a short JSON
    /// object), written by the acquire and kept by every renewal and the
    /// release of the lease it takes. Anyone who reads the record sees it
    /// ([`LeaseRecord::payload`](crate::record::LeaseRecord::payload),
    /// [`Inspection::payload`](crate::inspect::Inspection::payload),
    /// `bucket-lease inspect`); it decides nothing. Printable text on one
    /// line, at most
    /// [`MAX_PAYLOAD_BYTES`](crate::record::MAX_PAYLOAD_BYTES) (1 KiB):
    /// give bytes, or text with line breaks, as base64.
    ///
    /// # Errors
    ///
    /// When `payload` is over the limit or holds a control or invisible
    /// character ([`check_payload`]).
    pub fn with_payload(mut self, payload: impl Into<String>) -> Result<Self, InvalidPayload> {
        let payload = payload.into();
        check_payload(&payload)?;
        self.payload = Some(payload);
        Ok(self)
    }

    /// The payload every attempt writes, if any.
    pub fn payload(&self) -> Option<&str> {
        self.payload.as_deref()
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
}

/// The keys of a spaced probe's objects not yet removed: none for almost
/// every lease, so a thin pointer to them (8 bytes in every lease, where a
/// `Vec` takes 24; issue 40: 1 KiB per pooled lease).
#[allow(
    clippy::box_collection,
    reason = "a thin pointer: 8 bytes in every lease, not 24"
)]
type ProbeObjects = Option<Box<Vec<String>>>;

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
    /// No write of the holder's may start any more, though the lease is
    /// kept (renewed) until the writes in flight are done
    /// ([`Lease::stop_writes`]).
    writes_stopped: bool,
}

/// The lease's life cycle as recorded between requests. Time moves a held
/// lease to fenced without a request; see [`Lease::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Held,
    /// The holder can no longer renew (an answer lacked the ETag the next
    /// swap needs), whatever the clocks say.
    Fenced,
    /// Boxed: rare, and twice the size of the rest of the state, which
    /// every lease of a pool holds (issue 40: 1 KiB per lease).
    Lost(Box<LostTo>),
    Released,
}

/// Who took a lost lease over, as far as known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LostTo {
    /// The new holder's instance id, when known.
    holder: Option<String>,
    /// Its name for people, when its record carries one.
    holder_name: Option<String>,
}

impl State {
    /// Lost to `holder` (named `holder_name`), as far as known.
    fn lost(holder: Option<String>, holder_name: Option<String>) -> State {
        State::Lost(Box::new(LostTo {
            holder,
            holder_name,
        }))
    }
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
    /// No renewal landed in time (or the holder can no longer renew, or its
    /// keeper stopped its writes to give it up): the holder must not write,
    /// though its record may still name it.
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
    /// Its key, instance id and acquire stamp, in one allocation.
    names: names::Names,
    nonce: Arc<str>,
    holder_name: Option<Arc<str>>,
    payload: Option<Box<str>>,
    ttl_s: u64,
    epoch: u64,
    /// The claim of the acquire call that took it: its records carry it,
    /// and only a record with it is this value's. Dropped last, after
    /// [`Drop`]'s release.
    claim: Claim,
    /// A renewal is in progress: renewals take turns (see
    /// [`Lease::renew_before`]).
    renewing: std::sync::atomic::AtomicBool,
    held: Mutex<Held>,
    /// Objects the acquire's probe made beside the record on a store with
    /// a write interval, to remove once their interval is over.
    probe_objects: Mutex<ProbeObjects>,
    /// What its keeper did with it, for [`Lease::stats`].
    recorder: Recorder,
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
        self.names.instance_id()
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

    /// The payload written in the record, kept by every renewal and the
    /// release (see [`Contender::with_payload`]).
    pub fn payload(&self) -> Option<&str> {
        self.payload.as_deref()
    }

    /// The lease object's key.
    pub fn key(&self) -> &str {
        self.names.key()
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
        self.names.acquired_at()
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
        matches!(self.lock().state, State::Lost(_))
    }

    /// Who took the lease over (its instance id), once it is lost and the
    /// record named anyone.
    pub fn lost_to(&self) -> Option<String> {
        match &self.lock().state {
            State::Lost(to) => to.holder.clone(),
            _ => None,
        }
    }

    /// The name for people of whoever took the lease over, once it is lost
    /// and that holder's record carries one (see [`crate::record`]):
    /// informational, beside [`lost_to`](Self::lost_to).
    pub fn lost_to_name(&self) -> Option<String> {
        match &self.lock().state {
            State::Lost(to) => to.holder_name.clone(),
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
    /// is already [`LeaseStatus::Fenced`]. A lease whose keeper stopped its
    /// writes to give it up (a held set above its share) is
    /// [`LeaseStatus::Fenced`] too, though it is still renewed until it is
    /// released.
    #[must_use]
    pub fn status(&self) -> LeaseStatus {
        match self.fence_status() {
            LeaseStatus::Held { .. } if self.lock().writes_stopped => LeaseStatus::Fenced,
            status => status,
        }
    }

    /// Where the lease stands for its keeping (renewals, fence, release):
    /// [`status`](Self::status) whether or not its writes were stopped.
    pub(crate) fn fence_status(&self) -> LeaseStatus {
        let h = self.lock();
        self.status_of(&h)
    }

    /// [`fence_status`](Self::fence_status) of the state `h`, read under
    /// its lock.
    fn status_of(&self, h: &Held) -> LeaseStatus {
        match &h.state {
            State::Held => {}
            State::Fenced => return LeaseStatus::Fenced,
            State::Lost(to) => {
                return LeaseStatus::Lost {
                    holder: to.holder.clone(),
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
    /// lost or released, or its keeper stopped its writes to give it up (a
    /// held set above its share). See [`status`](Self::status).
    #[must_use]
    pub fn write_deadline(&self) -> Option<Instant> {
        // One look under the lock: a deadline is handed out only while
        // writes are not stopped, never from a state read after the stop.
        let h = self.lock();
        if h.writes_stopped {
            return None;
        }
        match self.status_of(&h) {
            LeaseStatus::Held { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// The fence: the write deadline whether or not writes were stopped,
    /// which bounds the renewals of a lease being given up.
    pub(crate) fn fence_deadline(&self) -> Option<Instant> {
        match self.fence_status() {
            LeaseStatus::Held { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// Stop this holder's writes from now on ([`may_write`](Self::may_write)
    /// false, every fenced write refused before it starts) while the lease
    /// stays held and renewed; the last instant a write already in flight
    /// may still land (the latest write deadline it can have been handed:
    /// the last renewal plus the fence, on the monotonic clock), `None`
    /// when the lease was not held. Releasing it after that instant hands the prefix over
    /// with no two writers.
    pub(crate) fn stop_writes(&self) -> Option<Instant> {
        let mut h = self.lock();
        h.writes_stopped = true;
        // Every deadline handed out came from this state or an older one,
        // and none is later than its renewal plus the fence on the
        // monotonic clock (a step of the wall clock since moves the fence
        // earlier, never a deadline already handed out).
        (h.state == State::Held).then(|| h.confirmed + self.fence_after())
    }

    /// Whether this holder may start a write now.
    #[must_use]
    pub fn may_write(&self) -> bool {
        self.write_deadline().is_some()
    }

    /// Fence the lease for good: what keeps it (a keeper, a pool) reported
    /// it fenced and renews it no more, so a renewal that lands late (one
    /// the program sent itself) must not let it write again.
    pub(crate) fn fence_for_good(&self) {
        let mut h = self.lock();
        if h.state == State::Held {
            h.state = State::Fenced;
        }
    }

    /// Give the lease up without a request, because a write elsewhere showed
    /// that another writer is active. `holder` names it (its instance id)
    /// when known.
    pub fn mark_lost(&self, holder: Option<String>) {
        let mut h = self.lock();
        if matches!(h.state, State::Held | State::Fenced) {
            h.state = State::lost(holder, None);
        }
    }

    /// The lease's running totals ([`crate::stats`]).
    pub(crate) fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}
