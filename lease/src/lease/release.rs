//! Giving the lease up: our own record rewritten as released by a
//! conditional write, never a delete, and never another lease's record;
//! also on drop. See the [parent module](super).

use super::claim::{self, Claim};
use super::requests::{
    call_deadline, live_holder, put_retrying, read_record, require_etag, Transient,
};
use super::TRANSIENT_WRITE_TRIES;
use super::{Exclusion, Lease, Released, State, DROP_RELEASE_TIMEOUT};
use crate::clock::{transient_backoff, Clock};
use crate::error::{LeaseError, OwnWrite};
use crate::mutant::{self, Mutant};
use crate::record::{format_stamp, LeaseRecord};
use crate::store::{DeleteMode, PutMode, Store, StoreErrorKind};
use std::time::Instant;

/// How many times a release rewrites our record after a refusal found it
/// still ours at another version.
const RELEASE_SWAPS: usize = 3;

impl Lease {
    /// Give the lease up: mark our record released, if it is still ours.
    /// From the first moment of the call, [`may_write`](Self::may_write) is
    /// false. Bounded as a whole by [`DEFAULT_CALL_TIMEOUT`](super::DEFAULT_CALL_TIMEOUT): every request
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
    /// A renewal in progress on another thread writes nothing more once the
    /// release has begun; one whose write is already on its way may land
    /// after it: a conditional lease's release then finds our record moved
    /// and writes it again, but a best-effort lease's renewal (an
    /// unconditional write) can make the released record live again, for
    /// a TTL. Release a best-effort lease from the thread that renews it.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed (a look at the record
    /// included); the record then expires after its TTL, and this handle
    /// stays released.
    pub fn release_before(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let released = self.release_record(deadline);
        self.remove_probe_objects(deadline);
        released
    }

    /// [`release_before`](Self::release_before)'s rewrite of the record.
    fn release_record(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let (exclusion, version, lost) = {
            let mut h = self.lock();
            let lost = match &h.state {
                State::Lost(to) if to.holder.is_some() => {
                    return Ok(Released::LeftAlone {
                        holder: to.holder.clone(),
                        holder_name: to.holder_name.clone(),
                    })
                }
                State::Lost(_) => {
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
        let target = self.own_record(exclusion);
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
            return match self.store.delete(self.key(), &mode, deadline) {
                Ok(()) => Ok(Released::Freed),
                Err(e) if e.is_refusal() => Ok(Released::left_alone(None)),
                Err(e) => Err(e.into()),
            };
        }
        if exclusion == Exclusion::Conditional && version.etag.is_some() {
            let released = self.record(String::new()).released(self.clock.wall());
            let mode = PutMode::Update(version);
            let body = released.to_bytes();
            let mut transient = Transient::default();
            match self.put_own(&body, mode, deadline) {
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
}

impl Lease {
    /// The release of this lease's own record, by reading it first.
    fn own_record(&self, exclusion: Exclusion) -> ReleaseTarget<'_> {
        ReleaseTarget {
            store: &*self.store,
            clock: &*self.clock,
            key: self.key(),
            instance_id: self.instance_id(),
            nonce: &self.nonce,
            whose: Whose::Lease(&self.claim),
            exclusion,
        }
    }

    /// Give back the record of an acquire that failed with `cause`, and
    /// return the error the acquire fails with. A hand-back the service
    /// throttled is tried again, a write interval (or its `Retry-After`)
    /// apart, until `deadline`; if it still fails, the error says the record is left
    /// and until when it keeps the key ([`LeaseError::RecordLeft`]).
    pub(super) fn hand_back(&self, cause: LeaseError, deadline: Option<Instant>) -> LeaseError {
        let mut answer = self.release_before(deadline);
        let exclusion = self.lock().exclusion;
        let spacing = self
            .store
            .write_interval()
            .unwrap_or(transient_backoff(TRANSIENT_WRITE_TRIES));
        while let (Err(LeaseError::Store(e)), Some(deadline)) = (&answer, deadline) {
            let pause = e.retry_after().map_or(spacing, |wait| wait.max(spacing));
            // Only a throttled answer: a service that does not answer at
            // all is not waited on past the release's own retries.
            if !e.is_throttled() || self.clock.now() + pause * 2 >= deadline {
                break;
            }
            log::debug!(
                "{}: handing the record back failed ({e}); again in {pause:?}",
                self.key()
            );
            self.clock.sleep(pause);
            answer = self.own_record(exclusion).release_if_ours(Some(deadline));
        }
        let hand_back = match answer {
            Ok(_) => return cause,
            // It says so itself: the store refuses our own ETag.
            Err(_) if matches!(cause, LeaseError::OwnEtagRefused { .. }) => return cause,
            Err(e) => e,
        };
        let blocks_until = {
            let h = self.lock();
            h.confirmed_wall + std::time::Duration::from_secs(self.ttl_s)
        };
        LeaseError::RecordLeft {
            key: self.key().to_string(),
            cause: Box::new(cause),
            hand_back: Box::new(hand_back),
            blocks_until: format_stamp(blocks_until),
        }
    }
}

/// Which records of the process a release may rewrite.
#[derive(Debug, Clone, Copy)]
pub(super) enum Whose<'a> {
    /// Only the one this lease's claim names.
    Lease(&'a Claim),
    /// One that no live lease or acquire call of the process claims.
    Abandoned,
    /// Any: the process is about to exit, and nothing of it will write.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    AtExit,
}

/// A record to release on behalf of the process `instance_id` and `nonce`
/// name, by reading it first: the record of one lease (`claim`), or one
/// that no live lease of the process holds (`None`: an abandoned acquire).
pub(super) struct ReleaseTarget<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) clock: &'a dyn Clock,
    pub(super) key: &'a str,
    pub(super) instance_id: &'a str,
    pub(super) nonce: &'a str,
    pub(super) whose: Whose<'a>,
    pub(super) exclusion: Exclusion,
}

impl ReleaseTarget<'_> {
    /// Whether `rec` is the record this release may rewrite: the lease's
    /// own (its claim), or for an abandoned acquire one of this process
    /// that no live lease or acquire call of it claims.
    fn is_target(&self, rec: &LeaseRecord) -> bool {
        match self.whose {
            Whose::Lease(claim) => rec.is_claimed_by(self.instance_id, self.nonce, &claim.id()),
            Whose::AtExit => rec.is_written_by(self.instance_id, self.nonce),
            Whose::Abandoned => {
                rec.is_written_by(self.instance_id, self.nonce)
                    && (!rec.claim.as_deref().is_some_and(claim::is_live)
                        || mutant::on(Mutant::IdentityByProcess))
            }
        }
    }

    /// Read the record; if it is ours (`instance_id` and `nonce` both) and
    /// not released yet, rewrite it released, conditional on the version
    /// read (unconditional for a best-effort lease).
    pub(super) fn release_if_ours(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Released, LeaseError> {
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

    /// One read, then a conditional write of the record read as released;
    /// after a refusal, read again: our record at another version (a write
    /// of our own landed meanwhile, a renewal's) is written again, at most
    /// [`RELEASE_SWAPS`] times in all.
    fn release_once(&self, deadline: Option<Instant>) -> Result<Released, LeaseError> {
        let mut read = read_record(self.store, self.key, deadline)?;
        for _ in 0..RELEASE_SWAPS {
            let (rec, version) = match read {
                None => return Ok(Released::AlreadyFree),
                Some((Some(rec), version)) if self.is_target(&rec) => (rec, version),
                other => return Ok(Released::left_alone(live_holder(other))),
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
                Ok(_) => return Ok(Released::Freed),
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            // A look that fails says nothing of whose the record is: the
            // error, not "left alone".
            read = read_record(self.store, self.key, deadline)?;
            // Refused on the version our record still has: the service
            // refused our own ETag; nobody else holds it.
            if let Some((Some(now_rec), now)) = &read {
                if *now == version && self.is_target(now_rec) {
                    return Err(self.own_write_refused());
                }
            }
        }
        // Our record moved under every write (writes of our own kept
        // landing): it is still ours, not freed.
        Err(self.own_write_refused())
    }

    /// [`LeaseError::OwnWriteRefused`] for a release of our record.
    fn own_write_refused(&self) -> LeaseError {
        LeaseError::OwnWriteRefused {
            key: self.key.to_string(),
            write: OwnWrite::Release,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let pending = match &self.lock().state {
            State::Held | State::Fenced => true,
            State::Lost(to) => to.holder.is_none(),
            State::Released => false,
        };
        if !pending {
            // Lost or released: only the probe's objects may be left.
            if self.probe_objects().is_some() && !std::thread::panicking() {
                self.remove_probe_objects(self.clock.now().checked_add(DROP_RELEASE_TIMEOUT));
            }
            return;
        }
        if std::thread::panicking() {
            log::warn!(
                "{}: a held lease was dropped while its thread panicked: not released, its \
                 record expires after its TTL ({} s)",
                self.key(),
                self.ttl_s
            );
            return;
        }
        let deadline = self.clock.now().checked_add(DROP_RELEASE_TIMEOUT);
        match self.release_before(deadline) {
            Ok(released) => log::debug!("{}: released on drop: {released:?}", self.key()),
            Err(e) => log::warn!(
                "{}: a held lease was dropped and releasing it failed (its record expires \
                 after its TTL, {} s): {e}",
                self.key(),
                self.ttl_s
            ),
        }
    }
}
