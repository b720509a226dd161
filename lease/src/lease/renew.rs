//! Keeping the lease: one compare-and-swap on our last version per
//! renewal, reconciled by reading when refused; see the [parent
//! module](super).

use super::requests::{call_deadline, put_retrying, read_record, require_etag};
use super::{Exclusion, Lease, State};
use crate::error::{LeaseError, OwnWrite};
use crate::record::{format_stamp, LeaseRecord};
use crate::stats::RenewalOutcome;
use crate::store::{PutMode, PutOptions, StoreError, StoreErrorKind, Version};
use crate::versioned;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// How many times a refused renewal adopts the version of a record that
/// still names us (a write of ours that landed unseen) and swaps again,
/// before it reports the refusal.
const RECONCILE_SWAPS: usize = 3;

/// The one renewal of a lease in progress: taken at its start, given back
/// when it ends, however it ends.
struct RenewalTurn<'a>(&'a AtomicBool);

impl<'a> RenewalTurn<'a> {
    /// The turn, unless another renewal has it.
    fn take(renewing: &'a AtomicBool) -> Option<RenewalTurn<'a>> {
        renewing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| RenewalTurn(renewing))
    }
}

impl Drop for RenewalTurn<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Lease {
    /// Write `body` to this lease's own key with `mode`, by `deadline`,
    /// retrying conflict answers ([`put_retrying`]).
    pub(super) fn put_own(
        &self,
        body: &[u8],
        mode: PutMode,
        deadline: Option<Instant>,
    ) -> Result<Version, StoreError> {
        put_retrying(&*self.store, &*self.clock, self.key(), body, mode, deadline)
    }

    /// Renew: rewrite the record with a new `renewed_at`, provided it is
    /// still exactly ours. Bounded as a whole by [`DEFAULT_CALL_TIMEOUT`](super::DEFAULT_CALL_TIMEOUT)
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
    /// Renewals of one lease run one at a time: a renewal that starts while
    /// another is in progress (on another thread: a program renewing a
    /// lease its keeper also renews) sends nothing and fails with
    /// [`LeaseError::RenewalInProgress`]. Otherwise the answer to the one
    /// that landed first could arrive last and date the lease's fence after
    /// the record the other wrote.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when the record was replaced or deleted: the
    /// lease is lost for good. [`LeaseError::RenewalInProgress`] when
    /// another renewal of this lease is in progress. [`LeaseError::Fenced`] when the lease can no
    /// longer be renewed. [`LeaseError::Store`] when a request failed or
    /// could not be sent (retry; the fence keeps the holder safe meanwhile),
    /// or when its answer lacked an ETag (the lease is then fenced for good:
    /// its next condition is unknown).
    pub fn renew_before(&self, deadline: Option<Instant>) -> Result<(), LeaseError> {
        // One renewal at a time, or a late answer to one could date the
        // record's confirmation after what another wrote over it.
        let Some(_turn) = RenewalTurn::take(&self.renewing) else {
            return Err(LeaseError::RenewalInProgress {
                key: self.key().to_string(),
            });
        };
        let (exclusion, version) = {
            let h = self.lock();
            if h.state != State::Held {
                return Err(self.state_error(&h.state));
            }
            (h.exclusion, h.version.clone())
        };
        // From here on it is an attempt, counted once in the lease's
        // totals ([`crate::stats`]) with its outcome and duration.
        let started = self.clock.now();
        let fence_before = self.fence_deadline();
        let renewed = self.send_renewal(exclusion, version, deadline);
        let ended = self.clock.now();
        self.recorder().renewal(
            RenewalOutcome::of(&renewed),
            ended.saturating_duration_since(started),
        );
        if fence_before.is_none_or(|fence| ended >= fence) {
            // The write deadline passed before the answer came: the lease
            // was not held for a while, whatever the answer.
            self.recorder().observe(false);
        }
        // Held with writes allowed, as the totals count it (a lease whose
        // writes were stopped to give it up is not).
        self.recorder().observe(self.may_write());
        renewed
    }

    /// The writes of one renewal (our turn taken, the lease held when it
    /// began), bounded by `deadline`.
    fn send_renewal(
        &self,
        exclusion: Exclusion,
        version: Version,
        deadline: Option<Instant>,
    ) -> Result<(), LeaseError> {
        // On a store with a write interval, the stamp and the fence are
        // taken after the wait for the key's turn, right before the write.
        self.store.await_write_turn(self.key(), deadline);
        let (confirmed, confirmed_wall) = (self.clock.now(), self.clock.wall());
        let body = self.record(format_stamp(confirmed_wall)).to_bytes();
        let written = match exclusion {
            Exclusion::Conditional => {
                let mode = PutMode::Update(version.clone());
                match self.put_own(&body, mode, deadline) {
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
        versioned::note_put(&*self.store, self.key(), self.ttl_s, &written);
        let mut h = self.lock();
        if h.state != State::Held {
            return Err(self.state_error(&h.state));
        }
        h.version = written;
        h.confirmed = confirmed;
        h.confirmed_wall = confirmed_wall;
        drop(h);
        // A renewal comes a third of a TTL after the acquire, past the probe
        // objects' write interval (the TTL's floor on such a store).
        self.remove_probe_objects(deadline);
        Ok(())
    }

    /// Our record as of now, renewed at `renewed_at`.
    pub(super) fn record(&self, renewed_at: String) -> LeaseRecord {
        LeaseRecord {
            instance_id: self.instance_id().to_string(),
            acquired_at: self.acquired_at().to_string(),
            renewed_at,
            ttl_s: self.ttl_s,
            epoch: self.epoch,
            released_at: None,
            instance_nonce: Some(self.nonce.to_string()),
            holder_name: self.holder_name.as_deref().map(str::to_string),
            claim: Some(self.claim.id().to_string()),
            payload: self.payload.as_deref().map(str::to_string),
        }
    }

    /// `version` when it carries an ETag; otherwise the lease is fenced for
    /// good (the next swap's condition is unknown) and the error says so.
    pub(super) fn known_version(
        &self,
        version: Version,
        method: &'static str,
    ) -> Result<Version, LeaseError> {
        require_etag(&*self.store, &version, method, self.key()).map_err(|e| {
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
            match read_record(&*self.store, self.key(), deadline)? {
                Some((Some(rec), version)) if self.is_ours(&rec) => {
                    if version == refused_on {
                        return Err(self.own_write_refused(OwnWrite::Renewal));
                    }
                    // Released (or lost) meanwhile: the release frees the
                    // record; writing it live again would race it.
                    {
                        let h = self.lock();
                        if h.state != State::Held {
                            return Err(self.state_error(&h.state));
                        }
                    }
                    let mode = PutMode::Update(self.known_version(version.clone(), "GET")?);
                    match self.put_own(body, mode, deadline) {
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
            self.key()
        );
        LeaseError::OwnWriteRefused {
            key: self.key().to_string(),
            write,
        }
    }

    /// Whether `rec` is this value's own live record: our instance id, our
    /// process's nonce and our acquire's claim, not released. See
    /// [`crate::record`].
    pub(super) fn is_ours(&self, rec: &LeaseRecord) -> bool {
        rec.is_claimed_by(self.instance_id(), &self.nonce, &self.claim.id()) && !rec.is_released()
    }

    /// Who holds the lease whose record was read as `read`, other than us:
    /// a live record another process wrote (under our own name too),
    /// `None` for an absent, unreadable, released or own one.
    pub(super) fn other_holder(
        &self,
        read: Option<(Option<LeaseRecord>, Version)>,
    ) -> Option<LeaseRecord> {
        read.and_then(|(rec, _)| rec)
            .filter(|rec| !rec.is_released() && !self.is_ours(rec))
    }

    /// Best-effort renewal: read, and rewrite only a record naming us.
    fn renew_best_effort(
        &self,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Version, LeaseError> {
        match read_record(&*self.store, self.key(), deadline)? {
            Some((Some(rec), _)) if self.is_ours(&rec) => {
                // Released (or lost) meanwhile: an unconditional write
                // would make the freed record live again.
                {
                    let h = self.lock();
                    if h.state != State::Held {
                        return Err(self.state_error(&h.state));
                    }
                }
                let options = PutOptions::new(PutMode::Overwrite).with_deadline(deadline);
                Ok(self.store.put(self.key(), body, &options)?)
            }
            other => Err(self.lose(self.other_holder(other))),
        }
    }

    /// Mark the lease lost to the holder `holder` names (its instance id
    /// and name), or to nobody known, and describe it.
    pub(super) fn lose(&self, holder: Option<LeaseRecord>) -> LeaseError {
        let mut h = self.lock();
        if matches!(h.state, State::Held | State::Fenced) {
            let (holder, holder_name) = match holder {
                Some(rec) => (Some(rec.instance_id), rec.holder_name),
                None => (None, None),
            };
            h.state = State::lost(holder, holder_name);
        }
        self.state_error(&h.state)
    }

    /// Why a lease in `state` cannot be renewed.
    fn state_error(&self, state: &State) -> LeaseError {
        let key = self.key().to_string();
        match state {
            State::Fenced => LeaseError::Fenced { key },
            State::Lost(to) => LeaseError::Lost {
                key,
                holder: to.holder.clone(),
            },
            State::Held | State::Released => LeaseError::Lost { key, holder: None },
        }
    }
}
