//! Taking the lease: [`Contender::try_acquire_before`] and the clean-up of
//! an abandoned acquire. One read, then one compare-and-swap on what it
//! read (a create on an absent key), a lost race read again, and the probe
//! ([`super::probe`]) before the lease is handed out; see the [parent
//! module](super) for what an acquire promises.

use super::claim::{self, Claim};
use super::names::Names;
use super::release::{ReleaseTarget, Whose};
use super::requests::{call_deadline, put_retrying, read_record, require_etag, Transient};
use super::{Contender, Exclusion, Held, Lease, Released, State, ACQUIRE_RACES};
use crate::error::{HolderRelation, LeaseError};
use crate::mutant::{self, Mutant};
use crate::record::{format_stamp, longest_key_bytes, LeaseRecord, MAX_SANE_TTL_S};
use crate::stats::Recorder;
use crate::store::{named_by, PutMode, PutOptions, StoreError, StoreErrorKind, Version};
use crate::versioned;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

impl Contender {
    /// Try once to take the lease, bounded as a whole by
    /// [`DEFAULT_CALL_TIMEOUT`](super::DEFAULT_CALL_TIMEOUT): one deadline that long after the call
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
    /// included) at `deadline`. See the [module docs](super).
    ///
    /// The lease is handed out only while [`Lease::may_write`] is true: an
    /// acquire whose probe outlasts the write deadline gives the record back
    /// and fails with [`LeaseError::Fenced`].
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] when another instance holds a fresh lease or
    /// won every race, or another live [`Lease`] of this process holds it
    /// ([`HolderRelation::ThisProcess`]: release or drop that one first); [`LeaseError::ConditionsIgnored`] when the probe
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
        self.check_write_interval()?;
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
            // The fence counts from before the write: not from before a wait
            // for the key's turn on a store with a write interval.
            self.store.await_write_turn(&self.key, deadline);
            self.check_room_for_the_probe(deadline)?;
            let (confirmed, confirmed_wall) = (clock.now(), clock.wall());
            let stamp = format_stamp(confirmed_wall);
            let record = LeaseRecord {
                instance_id: self.instance_id.clone(),
                acquired_at: stamp.clone(),
                renewed_at: stamp,
                ttl_s: self.options.ttl_s,
                epoch,
                released_at: None,
                instance_nonce: Some(self.nonce.to_string()),
                holder_name: self.holder_name.as_deref().map(str::to_string),
                claim: Some(claim.id().to_string()),
                payload: self.payload.clone(),
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
            versioned::note_put(&*self.store, &self.key, self.options.ttl_s, &version);
            let lease = Lease {
                store: Arc::clone(&self.store),
                clock: Arc::clone(&clock),
                names: Names::new(&self.key, &self.instance_id, &record.acquired_at),
                nonce: self.nonce.clone(),
                holder_name: self.holder_name.clone(),
                payload: self.payload.as_deref().map(Box::from),
                ttl_s: self.options.ttl_s,
                epoch,
                claim,
                renewing: AtomicBool::new(false),
                held: Mutex::new(Held {
                    version,
                    confirmed,
                    confirmed_wall,
                    exclusion,
                    state: State::Held,
                    writes_stopped: false,
                }),
                probe_objects: Mutex::new(None),
                recorder: Recorder::new(confirmed_wall),
            };
            if exclusion == Exclusion::Conditional {
                if let Err(e) = lease.probe(&body, deadline) {
                    // This lease is unproven or excludes nobody: give the
                    // key back (a conditional write of a released record).
                    return Err(lease.hand_back(e, deadline));
                }
            }
            if !lease.may_write() {
                let fenced = LeaseError::Fenced {
                    key: self.key.clone(),
                };
                return Err(lease.hand_back(fenced, deadline));
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

    /// Mark the record released if it is this process's own (its instance
    /// id and its process's nonce) and no live [`Lease`] or acquire call of
    /// the process claims it: for an acquire that failed or was abandoned
    /// after its write may have landed. Bounded as a whole
    /// by [`DEFAULT_CALL_TIMEOUT`](super::DEFAULT_CALL_TIMEOUT). See
    /// [`release_abandoned_before`](Self::release_abandoned_before).
    ///
    /// # Errors
    ///
    /// As [`release_abandoned_before`](Self::release_abandoned_before).
    pub fn release_abandoned(&self) -> Result<Released, LeaseError> {
        self.release_abandoned_before(call_deadline(&*self.options.clock))
    }

    /// Mark the record released if it is this process's own and no live
    /// lease of it claims it, abandoning every request at `deadline`: one
    /// read, then one write conditional on the version read. Any other
    /// record is left alone: one with our instance id written by another
    /// process (another nonce, or none), and one a live [`Lease`] of this
    /// process holds (its own release frees it); nothing is ever deleted.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] when a request failed; the record then expires
    /// after its TTL.
    pub fn release_abandoned_before(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Released, LeaseError> {
        self.release_as(Whose::Abandoned, deadline)
    }

    internal! {
    /// Mark the record released if it is this process's own, whatever
    /// acquire call or lease of the process claims it: for a process about
    /// to exit, nothing of which will write after it (`bucket-lease run`
    /// interrupted while an acquire call is still in flight). Never for a
    /// process that goes on: a lease it still holds, or an acquire call
    /// still running, would go on writing under a released record.
    ///
    /// # Errors
    ///
    /// As [`release_abandoned_before`](Self::release_abandoned_before).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn release_at_exit_before(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Released, LeaseError> {
        self.release_as(Whose::AtExit, deadline)
    }
    }

    /// Release this process's record as `whose` allows.
    fn release_as(
        &self,
        whose: Whose<'_>,
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
            whose,
            exclusion,
        };
        target.release_if_ours(deadline)
    }

    /// A store error, nothing sent, when the store has a write interval and
    /// `deadline` leaves less than one and a half of them: the acquire's
    /// probe writes the record again an interval after this write, and an
    /// acquire cut short there leaves its record behind.
    fn check_room_for_the_probe(&self, deadline: Option<Instant>) -> Result<(), LeaseError> {
        let (Some(interval), Some(deadline)) = (self.store.write_interval(), deadline) else {
            return Ok(());
        };
        let needed = interval + interval / 2;
        let left = deadline.saturating_duration_since(self.options.clock.now());
        if left >= needed || self.options.best_effort {
            return Ok(());
        }
        let error = StoreError::new(StoreErrorKind::Transport, "PUT", &self.key)
            .not_sent()
            .timed_out()
            .with_message(format!(
                "an acquire on a store that takes one write of a key every {interval:?} needs \
                 at least {needed:?} (its probe writes the record again an interval later), and \
                 the deadline is {left:?} away; give the attempt more time"
            ));
        Err(named_by(error, &*self.store).into())
    }

    /// [`LeaseError::TtlTooShort`] when the store takes one write of a key
    /// per interval ([`Store::write_interval`]) and a third of the TTL, the
    /// renewal interval, is shorter.
    fn check_write_interval(&self) -> Result<(), LeaseError> {
        let Some(interval) = self.store.write_interval() else {
            return Ok(());
        };
        let ttl = Duration::from_secs(self.options.ttl_s);
        if ttl / 3 >= interval {
            return Ok(());
        }
        Err(LeaseError::TtlTooShort {
            ttl_s: self.options.ttl_s,
            min_ttl_s: (interval * 3).as_secs_f64().ceil() as u64,
            write_interval: interval,
        })
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
        if rec.is_claimed_by(&self.instance_id, &self.nonce, &claim.id()) {
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
