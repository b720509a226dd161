//! The acquire's check of the service: three writes that must be refused
//! and one, on our record's own ETag, that must be accepted, each bounded
//! by the caller's deadline and the new lease's fence. See the [parent
//! module](super).

use super::requests::{put_resending, read_record};
use super::{Lease, State};
use crate::error::{IgnoredCondition, LeaseError};
use crate::mutant::{self, Mutant, StoreMutant};
use crate::record::{format_stamp, probe_key};
use crate::store::{DeleteMode, PutMode, StoreError, StoreErrorKind, Version};
use crate::versioned;
use std::time::Instant;

/// An ETag no service issues, for the probe's conditional writes.
const PROBE_ETAG: &str = "\"bucket-lease-probe-etag-never-issued\"";

impl Lease {
    /// Check the probe writes of a conditional acquire, each bounded by
    /// `deadline` and by the new lease's write deadline. See the [module
    /// docs](self).
    pub(super) fn probe(&self, body: &[u8], deadline: Option<Instant>) -> Result<(), LeaseError> {
        let spelling = self.store.condition_spelling();
        self.probe_once(body, deadline)?;
        if self.store.condition_spelling() != spelling {
            // The store changed how it spells conditions meanwhile: the
            // refusals seen may have been of the old spelling. Once more.
            log::debug!(
                "{}: the store's spelling of conditions changed; probing again",
                self.key()
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
                self.key().to_string(),
                PutMode::Create,
                IgnoredCondition::IfNoneMatch,
            ),
            (
                self.key().to_string(),
                PutMode::Update(fake.clone()),
                IgnoredCondition::IfMatch,
            ),
            (
                probe_key(self.key()),
                PutMode::Update(fake),
                IgnoredCondition::IfMatchOnAbsentKey,
            ),
        ];
        if self.store.write_interval().is_some() {
            return self.probe_spaced(body, deadline);
        }
        if self.store.concurrent_requests() {
            return self.probe_at_once(body, deadline, checks);
        }
        for (key, mode, condition) in checks {
            let bound = self.probe_bound(deadline)?;
            match put_resending(&*self.store, &*self.clock, &key, body, mode, bound) {
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
                Ok(_) => {
                    if key != self.key() {
                        if let Err(e) = self.store.delete(&key, &DeleteMode::Unconditional, bound) {
                            log::error!("{key}: could not remove the probe object: {e}");
                        }
                    }
                    return Err(LeaseError::ConditionsIgnored {
                        key: self.key().to_string(),
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

    /// The probe objects of a [spaced probe](Self::probe_spaced) not yet
    /// removed.
    pub(super) fn probe_objects(&self) -> std::sync::MutexGuard<'_, super::ProbeObjects> {
        self.probe_objects
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Remove the objects a [spaced probe](Self::probe_spaced) made, each
    /// in its turn, within `deadline`: after the lease's first renewal,
    /// and at its release. One that cannot be removed is named in a
    /// warning and left (a few bytes, never read again).
    pub(super) fn remove_probe_objects(&self, deadline: Option<Instant>) {
        let keys = self.probe_objects().take().unwrap_or_default();
        for key in *keys {
            if let Err(e) = self
                .store
                .delete(&key, &DeleteMode::Unconditional, deadline)
            {
                log::warn!("{key}: could not remove the acquire's probe object, left: {e}");
            }
        }
    }

    /// The deadline of a probe write sent now: the caller's `deadline` or
    /// the new lease's write deadline, whichever comes first;
    /// [`LeaseError::Fenced`] once the lease may no longer be written.
    fn probe_bound(&self, deadline: Option<Instant>) -> Result<Option<Instant>, LeaseError> {
        let Some(fence) = self.fence_deadline() else {
            return Err(LeaseError::Fenced {
                key: self.key().to_string(),
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
        put_resending(&*self.store, &*self.clock, self.key(), body, mode, bound)
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
                versioned::note_put(&*self.store, self.key(), self.ttl_s, &version);
                let version = self.known_version(version, "PUT")?;
                self.lock().version = version;
                return Ok(());
            }
            Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => e,
            Err(e) => return Err(e.into()),
        };
        match read_record(&*self.store, self.key(), bound)? {
            Some((Some(rec), version)) if self.is_ours(&rec) => {
                if version == *sent && !mutant::on(Mutant::OwnEtagRefusalTrusted) {
                    log::debug!(
                        "{}: probe write on our own ETag refused: {refusal}",
                        self.key()
                    );
                    return Err(LeaseError::OwnEtagRefused {
                        key: self.key().to_string(),
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
        let sent = self.lock().version.clone();
        let mut writes: Vec<(String, PutMode)> = checks
            .iter()
            .map(|(key, mode, _)| (key.clone(), mode.clone()))
            .collect();
        writes.push((self.key().to_string(), PutMode::Update(sent.clone())));
        let mut answers = self.send_together(&writes, body, bound);
        let own = answers.pop().expect("the own write's answer");
        let (probe_key, _, _) = &checks[2];
        if answers[2].is_ok() {
            if let Err(e) = self
                .store
                .delete(probe_key, &DeleteMode::Unconditional, bound)
            {
                log::error!("{probe_key}: could not remove the probe object: {e}");
            }
        }
        let conditions = checks.iter().map(|(_, _, condition)| *condition);
        judge_refusals(self.key(), conditions.zip(answers))?;
        self.judge_own_update(&sent, own, bound)
    }

    /// [`probe`](Self::probe) on a store that takes one write of a key per
    /// interval ([`Store::write_interval`]): no key is written twice in
    /// one interval except our record, once, after it. The refusals are
    /// checked on objects of their own beside the record, made for it:
    ///
    /// 1. at once: two probe objects are created, and a write conditional
    ///    on an ETag goes to a third, absent key (it must be refused);
    /// 2. an interval later, at once: a create-only write over the first
    ///    object and a write on a wrong ETag over the second (both must be
    ///    refused), and our record on its own ETag (it must be accepted).
    ///
    /// The answer is the other probes': the first check, in the same order
    /// (create-only, wrong ETag, absent key, own ETag), that was not
    /// answered as it must be decides. The probe objects are removed by
    /// the lease's first renewal or its release, when their own interval
    /// is over ([`Lease::remove_probe_objects`]).
    fn probe_spaced(&self, body: &[u8], deadline: Option<Instant>) -> Result<(), LeaseError> {
        let bound = self.probe_bound(deadline)?;
        let fake = Version::etag(PROBE_ETAG);
        let (over, wrong_etag, absent) = (
            probe_key(self.key()),
            probe_key(self.key()),
            probe_key(self.key()),
        );
        // Made, or perhaps made by a write whose answer was lost: removed
        // later either way.
        self.probe_objects()
            .get_or_insert_default()
            .extend([over.clone(), wrong_etag.clone()]);
        let mut made = self
            .send_together(
                &[
                    (over.clone(), PutMode::Create),
                    (wrong_etag.clone(), PutMode::Create),
                    (absent.clone(), PutMode::Update(fake.clone())),
                ],
                body,
                bound,
            )
            .into_iter();
        for _ in 0..2 {
            match made.next().expect("three answers") {
                // A refusal of a create on a key nobody else names is our
                // own earlier copy of it, whose answer was lost.
                Err(e) if !e.is_refusal() => return Err(e.into()),
                _ => {}
            }
        }
        let on_absent = made.next().expect("three answers");
        if on_absent
            .as_ref()
            .map_or_else(StoreError::may_have_landed, |_| true)
        {
            self.probe_objects().get_or_insert_default().push(absent);
        }
        // Our record's second write is a renewal: a fresh stamp, the fence
        // dated from just before it goes out (after its turn), so that the
        // next renewal, a third of the TTL on, falls after its own turn.
        self.store
            .await_write_turn(self.key(), self.probe_bound(deadline)?);
        let bound = self.probe_bound(deadline)?;
        let (confirmed, confirmed_wall) = (self.clock.now(), self.clock.wall());
        let keeps_stamp = StoreMutant::SpacedProbeKeepsAcquireStamp.on();
        let renewed = if keeps_stamp {
            body.to_vec()
        } else {
            self.record(format_stamp(confirmed_wall)).to_bytes()
        };
        let sent = self.lock().version.clone();
        let own_write = (self.key().to_string(), PutMode::Update(sent.clone()));
        let checks = [(over, PutMode::Create), (wrong_etag, PutMode::Update(fake))];
        // Our record first: on a store whose writes go one after another,
        // it leaves right after its stamp was taken, not after the others.
        let (own, on_existing, on_wrong_etag) = if mutant::on(Mutant::SpacedProbeRecordLast) {
            let [over, wrong_etag] = checks;
            let mut answers = self
                .send_together(&[over, wrong_etag, own_write], &renewed, bound)
                .into_iter();
            let (on_existing, on_wrong_etag) = (answers.next(), answers.next());
            (
                answers.next().expect("three answers"),
                on_existing.expect("three answers"),
                on_wrong_etag.expect("three answers"),
            )
        } else {
            let [over, wrong_etag] = checks;
            let mut answers = self
                .send_together(&[own_write, over, wrong_etag], &renewed, bound)
                .into_iter();
            (
                answers.next().expect("three answers"),
                answers.next().expect("three answers"),
                answers.next().expect("three answers"),
            )
        };
        judge_refusals(
            self.key(),
            [
                (IgnoredCondition::IfNoneMatch, on_existing),
                (IgnoredCondition::IfMatch, on_wrong_etag),
                (IgnoredCondition::IfMatchOnAbsentKey, on_absent),
            ],
        )?;
        self.judge_own_update(&sent, own, bound)?;
        let mut h = self.lock();
        if h.state == State::Held && !keeps_stamp {
            h.confirmed = confirmed;
            h.confirmed_wall = confirmed_wall;
        }
        Ok(())
    }

    /// Send `writes` of `body`, each bounded by `bound`, and return their
    /// answers in the same order: at once, each on its own thread (the
    /// first on this one), when the store allows it
    /// ([`Store::concurrent_requests`]); else one after another.
    fn send_together(
        &self,
        writes: &[(String, PutMode)],
        body: &[u8],
        bound: Option<Instant>,
    ) -> Vec<Result<Version, StoreError>> {
        let (store, clock) = (&*self.store, &*self.clock);
        let put = |(key, mode): &(String, PutMode)| {
            put_resending(store, clock, key, body, mode.clone(), bound)
        };
        if !self.store.concurrent_requests() || writes.len() < 2 {
            return writes.iter().map(put).collect();
        }
        std::thread::scope(|scope| {
            let others: Vec<_> = writes[1..]
                .iter()
                .map(|write| {
                    // Without a thread, the write is sent from this one.
                    std::thread::Builder::new()
                        .name("bucket-lease-probe".into())
                        .spawn_scoped(scope, move || put(write))
                        .map_err(|_| write)
                })
                .collect();
            let mut answers = vec![put(&writes[0])];
            for other in others {
                answers.push(match other {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(write) => put(write),
                });
            }
            answers
        })
    }
}

/// The first of the probe's `checks` (in order) whose write was not
/// refused: accepted, [`LeaseError::ConditionsIgnored`] naming its
/// condition; failed otherwise, its error.
fn judge_refusals(
    key: &str,
    checks: impl IntoIterator<Item = (IgnoredCondition, Result<Version, StoreError>)>,
) -> Result<(), LeaseError> {
    for (condition, answer) in checks {
        match answer {
            Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
            Ok(_) => {
                return Err(LeaseError::ConditionsIgnored {
                    key: key.to_string(),
                    condition,
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod probe_tests {
    use super::super::{Contender, LeaseOptions};
    use super::*;
    use crate::clock::TestClock;
    use crate::memory::{MemoryStore, Misbehaviour};
    use crate::record::{lease_key, LeaseRecord};
    use crate::store::Object;
    use crate::store::{PutOptions, Store};
    use std::sync::Arc;

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
