//! Looking at a lease from outside, and breaking one whose holder is dead.
//!
//! These are the operator's tools, pure functions over a [`Store`] and a
//! [`Clock`]; the `bucket-lease inspect` and `bucket-lease break` commands
//! are thin wrappers around them.
//!
//! - [`inspect`] reads `{prefix}/LEASE` once and judges it by the reader's
//!   wall clock, as a contender would: who holds it (instance id and
//!   name), the holder's payload ([`Inspection::payload`]), its stamps,
//!   its age, whether it is fresh or suspect, its epoch and version. It
//!   writes nothing.
//! - [`break_lease`] takes a lease away from a holder the operator names,
//!   with one write conditional on the version just read. It never deletes,
//!   and never writes blind: if the record names someone else, is absent,
//!   or changes between the read and the write, nothing is written and the
//!   error says what was found. A write whose answer was lost or transient
//!   is followed by a read: our own record there means the break landed;
//!   the old one unchanged, that it did not (the same write is sent again,
//!   at most three in all). The replacement record names
//!   `broken-by-{new id}`, has a TTL of one second and is stamped one TTL
//!   in the past, so it is already stale by the breaker's clock: the next
//!   contender takes it over at once (a contender whose clock runs behind
//!   waits for the difference), and the old holder's next renewal is refused
//!   and reports the lease lost ([`LeaseError::Lost`](crate::LeaseError::Lost)).
//!
//! Breaking a lease whose holder is still alive lets a new holder start
//! while the old one may keep writing until its next renewal fails, at most
//! a third of its TTL later, or until its fence. Break a lease only when its
//! holder is known to be dead or stuck, and let fenced writes
//! ([`crate::fence`]) catch the rest.

use crate::clock::{transient_backoff, Clock};
use crate::lease::{call_deadline, put_retrying, read_record};
use crate::record::{format_stamp, lease_key, new_instance_id, LeaseRecord};
use crate::store::{PutMode, Store, StoreError, StoreErrorKind, Version};
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

/// The TTL, in seconds, of the record a break leaves behind.
pub const BROKEN_TTL_S: u64 = 1;

/// How many writes a break sends at most: after a refusal while the record
/// still names the holder (it renewed between the read and the write), or
/// a write that may have landed (no answer, a throttled one), it reads and
/// writes again on the version read. A holder that renews as often as the
/// store takes writes of its key (R2's one a second at a TTL of 3 s) may
/// take every turn: then the break fails, saying the record changed.
pub const BREAK_TRIES: u32 = 8;

/// The instance id prefix of the record a break leaves behind; the rest is a
/// new random instance id.
pub const BROKEN_BY: &str = "broken-by-";

/// What one read of `{prefix}/LEASE` showed, judged at [`read_at`](Self::read_at).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The lease object's key.
    pub key: String,
    /// The record, or `None` when the object is not a lease record.
    pub record: Option<LeaseRecord>,
    /// The version read (ETag, and version id on a versioned bucket).
    pub version: Version,
    /// The reader's wall clock when the record was judged.
    pub read_at: SystemTime,
    /// How long before `read_at` the record was renewed (negative when it
    /// is stamped in the future); `None` when there is no parsable stamp.
    pub age: Option<time::Duration>,
    /// Whether a contender with this clock would leave the lease alone.
    pub fresh: bool,
    /// Whether the record cannot be trusted to expire on time (stamped more
    /// than its TTL ahead, or an absurd TTL); see [`crate::record`].
    pub suspect: bool,
}

/// When a record read by [`inspect`] stops being fresh, from the moment it
/// was read ([`Inspection::expires_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expiry {
    /// It is fresh for this long yet.
    In(std::time::Duration),
    /// It expired this long ago.
    Ago(std::time::Duration),
}

impl Inspection {
    /// `record` (`None`: not a lease record) at `version`, judged at
    /// `read_at`: what [`inspect_before`] and a
    /// [`Watcher`](crate::watch::Watcher) report.
    pub(crate) fn judged(
        key: &str,
        record: Option<LeaseRecord>,
        version: Version,
        read_at: SystemTime,
    ) -> Inspection {
        let (age, fresh, suspect) = match &record {
            Some(rec) => (
                rec.age(read_at),
                rec.is_fresh(read_at),
                rec.is_suspect(read_at),
            ),
            None => (None, false, false),
        };
        Inspection {
            key: key.to_string(),
            record,
            version,
            read_at,
            age,
            fresh,
            suspect,
        }
    }

    /// The holder's instance id, when the record parses.
    pub fn holder(&self) -> Option<&str> {
        self.record.as_ref().map(|r| r.instance_id.as_str())
    }

    /// The holder's name for people, when the record carries a valid one
    /// (see [`crate::record`]): informational, never who the holder is.
    pub fn holder_name(&self) -> Option<&str> {
        self.record.as_ref()?.holder_name.as_deref()
    }

    /// The holder's payload, when the record carries a valid one (see
    /// [`crate::record`]): what a follower reads of the holder's data.
    pub fn payload(&self) -> Option<&str> {
        self.record.as_ref()?.payload.as_deref()
    }

    /// When, from `read_at`, the record stops (or stopped) being fresh;
    /// `None` when there is no parsable stamp, for a released record, and
    /// when the difference does not fit (an absurd TTL with a stamp far in
    /// the future).
    pub fn expires_in(&self) -> Option<Expiry> {
        let left = self.expires_in_signed()?;
        let span = std::time::Duration::try_from(left.abs()).ok()?;
        Some(if left.is_negative() {
            Expiry::Ago(span)
        } else {
            Expiry::In(span)
        })
    }

    /// [`expires_in`](Self::expires_in) as a signed span.
    fn expires_in_signed(&self) -> Option<time::Duration> {
        let record = self.record.as_ref().filter(|r| !r.is_released())?;
        let ttl = time::Duration::seconds(i64::try_from(record.ttl_s).unwrap_or(i64::MAX));
        ttl.checked_sub(self.age?)
    }

    /// [`age`](Self::age) in seconds.
    pub fn age_s(&self) -> Option<f64> {
        self.age.map(|age| age.as_seconds_f64())
    }

    /// [`expires_in`](Self::expires_in) in seconds.
    pub fn expires_in_s(&self) -> Option<f64> {
        self.expires_in_signed().map(|left| left.as_seconds_f64())
    }

    /// Whether the holder released the lease: it is free, and the record
    /// keeps the last holder and epoch.
    pub fn is_released(&self) -> bool {
        self.released_at().is_some()
    }

    /// When the last holder released the lease, as its record says.
    pub fn released_at(&self) -> Option<&str> {
        self.record.as_ref()?.released_at.as_deref()
    }

    /// Whether the read's answer says the bucket keeps every version of the
    /// record ([`crate::versioned::is_versioned`]: a version id, not S3's
    /// `null`).
    pub fn is_versioned(&self) -> bool {
        crate::versioned::is_versioned(&self.version)
    }

    /// Whether this record was left behind by [`break_lease`].
    pub fn is_broken(&self) -> bool {
        self.holder().is_some_and(|h| h.starts_with(BROKEN_BY))
    }
}

/// Read the lease on `prefix` and judge it by `clock`'s wall time. The
/// read is bounded by [`DEFAULT_CALL_TIMEOUT`](crate::lease::DEFAULT_CALL_TIMEOUT)
/// on `clock`; see [`inspect_before`] for a deadline of the caller's.
///
/// Returns `None` when there is no lease object: the lease is free.
///
/// # Errors
///
/// As [`inspect_before`].
pub fn inspect(
    store: &dyn Store,
    prefix: &str,
    clock: &dyn Clock,
) -> Result<Option<Inspection>, StoreError> {
    inspect_before(store, prefix, clock, call_deadline(clock))
}

/// [`inspect`], abandoning the read at `deadline` (on `clock`'s monotonic
/// time).
///
/// # Errors
///
/// The read's error when the request failed or met the deadline.
pub fn inspect_before(
    store: &dyn Store,
    prefix: &str,
    clock: &dyn Clock,
    deadline: Option<Instant>,
) -> Result<Option<Inspection>, StoreError> {
    let key = lease_key(prefix);
    let Some((record, version)) = read_record(store, &key, deadline)? else {
        return Ok(None);
    };
    Ok(Some(Inspection::judged(
        &key,
        record,
        version,
        clock.wall(),
    )))
}

/// What [`break_lease`] replaced, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Broken {
    /// The lease object's key.
    pub key: String,
    /// The record that was replaced.
    pub replaced: LeaseRecord,
    /// The version that was replaced.
    pub replaced_version: Version,
    /// Whether the replaced record was still fresh by the breaker's clock.
    pub was_fresh: bool,
    /// The record written in its place.
    pub record: LeaseRecord,
    /// The version of the record written.
    pub version: Version,
}

/// Why [`break_lease`] wrote nothing (or may have written, for a transport
/// failure).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakError {
    /// There is no lease object, or its holder released it: nothing to
    /// break.
    Free {
        /// The lease object's key.
        key: String,
    },
    /// The record's epoch is `u64::MAX`: a break could not give the next
    /// holder a greater one. Nothing was written.
    EpochExhausted {
        /// The lease object's key.
        key: String,
    },
    /// The object is not a lease record; any contender overwrites it.
    Unreadable {
        /// The lease object's key.
        key: String,
    },
    /// The record names another holder than the one to break.
    OtherHolder {
        /// The lease object's key.
        key: String,
        /// Who the record names.
        holder: String,
        /// Who was to be broken.
        expected: String,
    },
    /// The record changed between the read and the conditional write (a
    /// renewal, a release or a takeover): nothing was written.
    Changed {
        /// The lease object's key.
        key: String,
        /// Who the record names now, when there is one.
        holder: Option<String>,
    },
    /// A request failed. A write that got no answer may have landed:
    /// inspect the lease to find out.
    Store(StoreError),
}

impl BreakError {
    /// The lease object's key.
    pub fn key(&self) -> &str {
        match self {
            BreakError::Free { key }
            | BreakError::EpochExhausted { key }
            | BreakError::Unreadable { key }
            | BreakError::OtherHolder { key, .. }
            | BreakError::Changed { key, .. } => key,
            BreakError::Store(e) => e.key(),
        }
    }
}

impl fmt::Display for BreakError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakError::Free { key } => {
                write!(
                    f,
                    "not breaking lease {key}: it is free (no record, or released)"
                )
            }
            BreakError::EpochExhausted { key } => write!(
                f,
                "not breaking lease {key}: its epoch is at the largest value, so the next \
                 holder could not have a greater one; remove the LEASE object by hand once no \
                 holder is alive"
            ),
            BreakError::Unreadable { key } => write!(
                f,
                "not breaking lease {key}: the object is not a lease record; the next \
                 contender overwrites it"
            ),
            BreakError::OtherHolder {
                key,
                holder,
                expected,
            } => write!(
                f,
                "not breaking lease {key}: it is held by instance {holder}, not {expected}"
            ),
            BreakError::Changed {
                key,
                holder: Some(holder),
            } => write!(
                f,
                "not breaking lease {key}: it changed while being broken (instance {holder} \
                 holds it now); inspect it and try again"
            ),
            BreakError::Changed { key, holder: None } => write!(
                f,
                "not breaking lease {key}: it changed while being broken (it is free now)"
            ),
            BreakError::Store(e) => write!(f, "breaking the lease: {e}"),
        }
    }
}

/// No `source()`: `Display` already says the store error's text (see
/// [`crate::error`]).
impl std::error::Error for BreakError {}

impl From<StoreError> for BreakError {
    fn from(e: StoreError) -> Self {
        BreakError::Store(e)
    }
}

/// Take the lease on `prefix` away from `holder`: replace its record, only
/// if it still has the version just read, with one that is already stale.
/// See the [module docs](self). Bounded as a whole by
/// [`DEFAULT_CALL_TIMEOUT`](crate::lease::DEFAULT_CALL_TIMEOUT) on
/// `clock`: its reads, its write and any write sent again share one
/// deadline ([`break_lease_before`] takes the caller's).
///
/// # Errors
///
/// [`BreakError::Free`] when there is no lease; [`BreakError::Unreadable`]
/// when the object is not a lease record; [`BreakError::OtherHolder`] when
/// the record names someone else; [`BreakError::Changed`] when the record
/// was released or taken over between the read and the write (or read back
/// after a write whose answer was lost or throttled names neither the
/// holder nor this break), or when the holder renewed before each of
/// [`BREAK_TRIES`] writes: a renewal by the holder named is read and
/// written over again; [`BreakError::Store`] when a request
/// failed (a store that cannot send conditional writes answers
/// [`StoreErrorKind::NotImplemented`]: a break is never unconditional).
pub fn break_lease(
    store: &dyn Store,
    prefix: &str,
    holder: &str,
    clock: &dyn Clock,
) -> Result<Broken, BreakError> {
    break_lease_before(store, prefix, holder, clock, call_deadline(clock))
}

/// [`break_lease`], abandoning every request at `deadline` (on `clock`'s
/// monotonic time).
///
/// # Errors
///
/// As [`break_lease`]; a request that met the deadline is
/// [`BreakError::Store`] (a write may have landed: inspect to find out).
pub fn break_lease_before(
    store: &dyn Store,
    prefix: &str,
    holder: &str,
    clock: &dyn Clock,
    deadline: Option<Instant>,
) -> Result<Broken, BreakError> {
    let key = lease_key(prefix);
    let (mut replaced, mut replaced_version) = match read_record(store, &key, deadline)? {
        None => return Err(BreakError::Free { key }),
        Some((None, _)) => return Err(BreakError::Unreadable { key }),
        Some((Some(rec), _)) if rec.is_released() => return Err(BreakError::Free { key }),
        Some((Some(rec), version)) => (rec, version),
    };
    if replaced.instance_id != holder {
        return Err(BreakError::OtherHolder {
            key,
            holder: replaced.instance_id,
            expected: holder.to_string(),
        });
    }
    let breaker = format!("{BROKEN_BY}{}", new_instance_id());
    let mut tries = 0;
    let (record, version, was_fresh) = loop {
        tries += 1;
        let Some(epoch) = replaced.next_epoch() else {
            return Err(BreakError::EpochExhausted { key });
        };
        let now = clock.wall();
        let was_fresh = replaced.is_fresh(now);
        let record = LeaseRecord::new(
            breaker.clone(),
            format_stamp(now),
            // One TTL in the past: stale the moment it lands.
            format_stamp(now - Duration::from_secs(BROKEN_TTL_S)),
            BROKEN_TTL_S,
            epoch,
        );
        let mode = PutMode::Update(replaced_version.clone());
        let pause = match put_retrying(store, clock, &key, &record.to_bytes(), mode, deadline) {
            Ok(version) => break (record, version, was_fresh),
            // The record changed: look.
            Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => Duration::ZERO,
            // It may have landed: look after a pause (at least what a
            // throttled answer asked for).
            Err(e) if e.may_have_landed() && tries < BREAK_TRIES => {
                let backoff = clock.jitter(transient_backoff(tries));
                let pause = e.retry_after().map_or(backoff, |wait| wait.max(backoff));
                if deadline.is_some_and(|d| clock.now() + pause + backoff >= d) {
                    return Err(e.into());
                }
                pause
            }
            Err(e) => return Err(e.into()),
        };
        clock.sleep(pause);
        match read_record(store, &key, deadline)? {
            // Ours landed unseen.
            Some((Some(rec), version)) if rec.instance_id == breaker => {
                break (record, version, was_fresh)
            }
            // Still the holder named (it renewed meanwhile, or nothing
            // landed): again, on the version read, while tries are left.
            Some((Some(rec), version))
                if rec.instance_id == holder && !rec.is_released() && tries < BREAK_TRIES =>
            {
                replaced = rec;
                replaced_version = version;
            }
            other => {
                let holder = other
                    .and_then(|(rec, _)| rec)
                    .filter(|rec| !rec.is_released())
                    .map(|rec| rec.instance_id);
                return Err(BreakError::Changed { key, holder });
            }
        }
    };
    log::info!(
        "{key}: broke the lease of {} (epoch {}, renewed_at {}, {}); replaced it with {} \
         (epoch {}, already expired)",
        replaced.instance_id,
        replaced.epoch,
        replaced.renewed_at,
        if was_fresh { "still fresh" } else { "stale" },
        record.instance_id,
        record.epoch
    );
    Ok(Broken {
        key,
        replaced,
        replaced_version,
        was_fresh,
        record,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;
    use crate::error::LeaseError;
    use crate::lease::{Contender, LeaseOptions};
    use crate::memory::{MemoryStore, Misbehaviour};
    use crate::store::{DeleteMode, Object, PutOptions};
    use std::sync::Arc;
    use std::time::Instant;

    struct World {
        store: Arc<MemoryStore>,
        clock: TestClock,
    }

    #[test]
    fn a_store_failure_behind_a_break_is_said_once() {
        let store = StoreError::new(StoreErrorKind::Transport, "PUT", "jobs/a/LEASE")
            .with_store_url("memory:///");
        let e = BreakError::Store(store.clone());
        crate::conformance::assert_said_once(&e, &store.to_string());
        assert!(e.to_string().contains("PUT memory:///jobs/a/LEASE"), "{e}");
    }

    impl World {
        fn new() -> Self {
            World {
                store: Arc::new(MemoryStore::new()),
                clock: TestClock::new(),
            }
        }

        fn contender(&self, ttl_s: u64) -> Contender {
            let options = LeaseOptions::new(ttl_s).clock(Arc::new(self.clock.clone()));
            Contender::new(self.store.clone(), "jobs/a", options)
        }

        fn inspect(&self) -> Option<Inspection> {
            inspect(&*self.store, "jobs/a", &self.clock).expect("the read succeeds")
        }

        fn break_lease(&self, holder: &str) -> Result<Broken, BreakError> {
            break_lease(&*self.store, "jobs/a", holder, &self.clock)
        }
    }

    #[test]
    fn a_missing_lease_inspects_as_free() {
        let w = World::new();
        assert_eq!(w.inspect(), None);
    }

    #[test]
    fn inspect_reports_holder_age_freshness_and_version() {
        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        w.clock.advance(Duration::from_secs(10));
        let seen = w.inspect().expect("a lease is there");
        assert_eq!(seen.key, "jobs/a/LEASE");
        assert_eq!(seen.holder(), Some(lease.instance_id()));
        assert_eq!(seen.record.as_ref().unwrap().epoch, 1);
        assert_eq!(seen.version, lease.version());
        assert_eq!(seen.read_at, w.clock.wall());
        assert_eq!(seen.age, Some(time::Duration::seconds(10)));
        assert_eq!(seen.expires_in(), Some(Expiry::In(Duration::from_secs(20))));
        assert_eq!(
            (seen.age_s(), seen.expires_in_s()),
            (Some(10.0), Some(20.0))
        );
        assert!(seen.fresh && !seen.suspect && !seen.is_broken());

        w.clock.advance(Duration::from_secs(25));
        let seen = w.inspect().unwrap();
        assert!(!seen.fresh, "35 s after a renewal with a TTL of 30 s");
        assert_eq!(seen.expires_in(), Some(Expiry::Ago(Duration::from_secs(5))));
    }

    #[test]
    fn inspect_says_whether_the_bucket_keeps_versions() {
        let w = World::new();
        let _held = w.contender(30).try_acquire().unwrap();
        assert!(!w.inspect().unwrap().is_versioned());
        let w = World {
            store: Arc::new(MemoryStore::versioned()),
            clock: TestClock::new(),
        };
        let lease = w.contender(30).try_acquire().unwrap();
        let seen = w.inspect().unwrap();
        assert!(seen.is_versioned(), "{seen:?}");
        assert_eq!(seen.version, lease.version());
    }

    #[test]
    fn inspect_flags_suspect_and_unreadable_records() {
        let w = World::new();
        let ahead = w.clock.wall() + Duration::from_secs(120);
        let record = LeaseRecord {
            instance_id: "future".into(),
            acquired_at: format_stamp(ahead),
            renewed_at: format_stamp(ahead),
            ttl_s: 30,
            epoch: 2,
            released_at: None,
            instance_nonce: None,
            holder_name: None,
            claim: None,
            payload: None,
        };
        w.store.insert("jobs/a/LEASE", &record.to_bytes());
        let seen = w.inspect().unwrap();
        assert!(seen.fresh && seen.suspect);
        assert_eq!(seen.age, Some(time::Duration::seconds(-120)));

        w.store.insert("jobs/a/LEASE", b"not a record");
        let seen = w.inspect().unwrap();
        assert_eq!((seen.holder(), seen.age, seen.fresh), (None, None, false));
        assert_eq!(seen.expires_in(), None);
    }

    #[test]
    fn a_broken_lease_is_lost_to_its_holder_and_taken_at_once() {
        let w = World::new();
        let old = w.contender(30).try_acquire().unwrap();
        let before = old.version();
        let broken = w.break_lease(old.instance_id()).expect("the break lands");
        assert_eq!(broken.key, "jobs/a/LEASE");
        assert_eq!(broken.replaced.instance_id, old.instance_id());
        assert_eq!(broken.replaced_version, before);
        assert!(broken.was_fresh);
        assert!(broken.record.instance_id.starts_with(BROKEN_BY));
        assert_eq!(
            (broken.record.ttl_s, broken.record.epoch),
            (BROKEN_TTL_S, 2)
        );

        let seen = w.inspect().unwrap();
        assert!(seen.is_broken() && !seen.fresh, "already expired");
        assert_eq!(seen.version, broken.version);

        // The old holder's next renewal finds the record replaced.
        match old.renew() {
            Err(LeaseError::Lost { holder, .. }) => {
                assert_eq!(holder.as_deref(), Some(broken.record.instance_id.as_str()));
            }
            other => panic!("expected Lost, got {other:?}"),
        }
        assert!(!old.may_write());

        // A new contender takes it at once, one epoch on.
        let new = w.contender(30).try_acquire().expect("taken at once");
        assert_eq!(new.epoch(), 3);
        assert_eq!(w.inspect().unwrap().holder(), Some(new.instance_id()));
    }

    #[test]
    fn a_stale_holder_is_broken_too() {
        let w = World::new();
        let old = w.contender(5).try_acquire().unwrap();
        w.clock.advance(Duration::from_secs(60));
        let broken = w.break_lease(old.instance_id()).unwrap();
        assert!(!broken.was_fresh);
    }

    /// The break's write lands but its answer is lost: the break reads
    /// the record back, finds its own, and reports success with the
    /// version read; nothing is written twice.
    #[test]
    fn a_break_whose_answer_was_lost_reads_its_own_record_back() {
        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        let puts = w.store.puts();
        w.store.lose_next_answers(1);
        let broken = w
            .break_lease(lease.instance_id())
            .expect("the break landed");
        assert_eq!(w.store.puts(), puts + 1, "one write");
        let seen = w.inspect().unwrap();
        assert_eq!(seen.holder(), Some(broken.record.instance_id.as_str()));
        assert_eq!(seen.version, broken.version);
        assert_eq!(broken.record.epoch, 2);
    }

    /// The break's write lost its answer and a new holder took the key
    /// before the break looked: the break says the record changed, naming
    /// that holder, rather than claiming success.
    #[test]
    fn a_break_whose_answer_was_lost_and_then_taken_over_says_so() {
        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        let store: Arc<dyn Store> = Arc::new(TakenAfterLostAnswer {
            inner: w.store.clone(),
            clock: w.clock.clone(),
            done: std::sync::atomic::AtomicBool::new(false),
        });
        let err = break_lease(&*store, "jobs/a", lease.instance_id(), &w.clock).unwrap_err();
        let BreakError::Changed { holder, .. } = &err else {
            panic!("expected Changed, got {err}");
        };
        assert_eq!(holder.as_deref(), Some("successor"), "{err}");
    }

    /// Loses the answer of the first write, then, before the next read,
    /// writes a fresh record of instance `successor` over it.
    #[derive(Debug)]
    struct TakenAfterLostAnswer {
        inner: Arc<MemoryStore>,
        clock: TestClock,
        done: std::sync::atomic::AtomicBool,
    }

    impl Store for TakenAfterLostAnswer {
        fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
            self.inner.get(key, deadline)
        }

        fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
            use std::sync::atomic::Ordering;
            let version = self.inner.put(key, body, options)?;
            if self.done.swap(true, Ordering::SeqCst) {
                return Ok(version);
            }
            let stamp = format_stamp(self.clock.wall());
            let successor = LeaseRecord {
                instance_id: "successor".into(),
                acquired_at: stamp.clone(),
                renewed_at: stamp,
                ttl_s: 30,
                epoch: 3,
                released_at: None,
                instance_nonce: None,
                holder_name: None,
                claim: None,
                payload: None,
            };
            self.inner.insert(key, &successor.to_bytes());
            Err(StoreError::new(StoreErrorKind::Transport, "PUT", key))
        }

        fn delete(
            &self,
            key: &str,
            mode: &DeleteMode,
            d: Option<Instant>,
        ) -> Result<(), StoreError> {
            self.inner.delete(key, mode, d)
        }
    }

    #[test]
    fn breaking_refuses_another_holder_a_free_lease_and_garbage() {
        let w = World::new();
        assert_eq!(
            w.break_lease("dead"),
            Err(BreakError::Free {
                key: "jobs/a/LEASE".into()
            })
        );
        let lease = w.contender(30).try_acquire().unwrap();
        let puts = w.store.puts();
        match w.break_lease("dead") {
            Err(e @ BreakError::OtherHolder { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(lease.instance_id()) && text.contains("dead"),
                    "{text}"
                );
            }
            other => panic!("expected OtherHolder, got {other:?}"),
        }
        assert_eq!(w.store.puts(), puts, "a refused break writes nothing");
        lease.renew().expect("the holder is untouched");

        w.store.insert("jobs/a/LEASE", b"{}");
        assert!(matches!(
            w.break_lease("dead"),
            Err(BreakError::Unreadable { .. })
        ));
    }

    /// A store that lets the holder renew (or release, `release`) between
    /// the break's read and its first write.
    #[derive(Debug)]
    struct RenewsMeanwhile {
        inner: Arc<MemoryStore>,
        renew: std::sync::Mutex<Option<crate::lease::Lease>>,
        /// The lease once renewed, kept held (a dropped one is released).
        renewed: std::sync::Mutex<Vec<crate::lease::Lease>>,
        release: bool,
    }

    impl Store for RenewsMeanwhile {
        fn get(
            &self,
            key: &str,
            deadline: Option<std::time::Instant>,
        ) -> Result<crate::store::Object, StoreError> {
            self.inner.get(key, deadline)
        }

        fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
            if let Some(lease) = self.renew.lock().unwrap().take() {
                if self.release {
                    lease.release().expect("the holder releases");
                } else {
                    lease.renew().expect("the holder renews");
                }
                self.renewed.lock().unwrap().push(lease);
            }
            self.inner.put(key, body, options)
        }

        fn delete(
            &self,
            key: &str,
            mode: &crate::store::DeleteMode,
            deadline: Option<std::time::Instant>,
        ) -> Result<(), StoreError> {
            self.inner.delete(key, mode, deadline)
        }
    }

    /// The holder named renews between the break's read and its write: the
    /// break reads again and replaces the renewed record (the holder is
    /// still the one named).
    /// A world whose lease's holder renews (or releases) between a break's
    /// read and its write, through the store it hands back; and the
    /// holder's id.
    fn changing_meanwhile(release: bool) -> (World, RenewsMeanwhile, String) {
        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        let id = lease.instance_id().to_string();
        let store = RenewsMeanwhile {
            inner: w.store.clone(),
            renew: std::sync::Mutex::new(Some(lease)),
            renewed: std::sync::Mutex::new(Vec::new()),
            release,
        };
        (w, store, id)
    }

    #[test]
    fn a_holder_that_renews_meanwhile_is_still_broken() {
        let (w, store, id) = changing_meanwhile(false);
        let broken = break_lease(&store, "jobs/a", &id, &w.clock).expect("broken");
        assert_eq!(broken.replaced.instance_id, id);
        let renewed = store.renewed.lock().unwrap();
        assert_eq!(
            broken.replaced_version,
            renewed[0].version(),
            "the renewed one"
        );
        let now = w.inspect().unwrap();
        assert!(now.is_broken() && !now.fresh, "expired at once: {now:?}");
        assert!(
            renewed[0].renew().is_err(),
            "the holder's next renewal fails"
        );
    }

    /// The holder releases between the break's read and its write: nothing
    /// is replaced, and the break says the record changed.
    #[test]
    fn a_record_released_meanwhile_is_not_replaced() {
        let (w, store, id) = changing_meanwhile(true);
        match break_lease(&store, "jobs/a", &id, &w.clock) {
            Err(e @ BreakError::Changed { .. }) => {
                assert_eq!(
                    e,
                    BreakError::Changed {
                        key: "jobs/a/LEASE".into(),
                        holder: None
                    }
                );
                assert!(e.to_string().contains("changed while being broken"));
            }
            other => panic!("expected Changed, got {other:?}"),
        }
        assert!(
            w.inspect().unwrap().is_released(),
            "the holder's release stands"
        );
    }

    #[test]
    fn conflicts_are_retried_and_missing_conditions_refuse() {
        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        w.store.conflict_next_writes(2);
        w.break_lease(lease.instance_id())
            .expect("two conflicts are absorbed");

        let w = World::new();
        let lease = w.contender(30).try_acquire().unwrap();
        w.store.set(Misbehaviour::NoConditions);
        match w.break_lease(lease.instance_id()) {
            Err(BreakError::Store(e)) => assert_eq!(e.kind(), StoreErrorKind::NotImplemented),
            other => panic!("expected a store error, got {other:?}"),
        }
        w.store.clear(Misbehaviour::NoConditions);
        assert_eq!(w.inspect().unwrap().holder(), Some(lease.instance_id()));
    }
}
