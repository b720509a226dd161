//! Identity per acquire (issue 28), as a reviewer tried to break it:
//! schedules that try to make two `Lease` values of one process both
//! writable, an old value touch a newer one's record, a live record taken
//! by other than its holder, or a claim leak. Each test here held (passed)
//! when written; they stay as regression tests. On the in-memory store with
//! a test clock.

mod gate;

use bucket_lease_core::lease::TRANSIENT_WRITE_TRIES;
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    error::HolderRelation, store::DeleteMode, store::Object, store::PutOptions, store::Version,
    Contender, Keeper, KeeperOptions, Lease, LeaseError, Released, Store, StoreError,
};
use gate::{secs, spawn_named, When, World, KEY, NAME, TTL_S};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// A record of this process that no live lease claims: an acquire whose
/// every write landed unseen.
fn orphan(w: &World) {
    w.memory.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    w.ours().try_acquire().expect_err("no answer ever came");
    w.memory.lose_next_answers(0);
    assert!(!w.record().is_released());
}

fn relation(result: &Result<Lease, LeaseError>) -> Option<HolderRelation> {
    match result {
        Err(LeaseError::Held { relation, .. }) => Some(*relation),
        _ => None,
    }
}

/// `release_abandoned` while another thread's acquire is in progress: its
/// write landed but the answer has not come back yet, and later while its
/// probe runs. The record is a live acquire call's: left alone.
#[test]
fn release_abandoned_leaves_an_acquire_in_progress_alone() {
    for (nth, when) in [(1, When::After), (2, When::Before), (5, When::Before)] {
        let w = World::new();
        let gate = w.store.hold("acquire", nth, when);
        let lease = std::thread::scope(|s| {
            let acquire = spawn_named(s, "acquire", || w.ours().try_acquire());
            gate.wait_reached();
            assert_eq!(
                w.ours().release_abandoned().unwrap(),
                Released::LeftAlone {
                    holder: Some(NAME.into()),
                    holder_name: w.ours().holder_name().map(Into::into),
                },
                "put {nth} {when:?}: a live acquire call's record is not abandoned"
            );
            assert_eq!(
                relation(&w.ours().try_acquire()),
                Some(HolderRelation::ThisProcess),
                "put {nth} {when:?}: a second acquire is kept out"
            );
            gate.open();
            acquire.join().unwrap()
        })
        .expect("the acquire completes");
        assert!(lease.may_write());
        assert!(!w.record().is_released());
        lease.renew().expect("still its record");
    }
}

/// `release_abandoned` read an orphan (free to hand back) and is slow to
/// send its write; meanwhile an acquire takes the orphan over. The late
/// release is refused and the new lease's record stays.
#[test]
fn a_slow_release_abandoned_never_frees_the_record_that_took_the_orphan_over() {
    let w = World::new();
    orphan(&w);
    let gate = w.store.hold("abandon", 1, When::Before);
    let (lease, freed) = std::thread::scope(|s| {
        let abandon = spawn_named(s, "abandon", || w.ours().release_abandoned());
        gate.wait_reached();
        let lease = w.ours().try_acquire().expect("the orphan is taken at once");
        gate.open();
        (lease, abandon.join().unwrap())
    });
    assert_eq!(lease.epoch(), 2);
    assert!(matches!(freed, Ok(Released::LeftAlone { .. })), "{freed:?}");
    let rec = w.record();
    assert_eq!((rec.epoch, rec.is_released()), (2, false));
    assert!(lease.may_write());
    lease.renew().unwrap();
}

/// An acquire whose store panics after its write landed: the unwinding
/// drops the claim. The next acquire of the process takes the record over
/// at once (it is nobody's), and the clean-up frees such a record.
#[test]
fn a_panic_mid_acquire_leaks_no_claim() {
    #[derive(Debug)]
    struct PanicsAfterPut(Arc<MemoryStore>, AtomicUsize);
    impl Store for PanicsAfterPut {
        fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
            self.0.get(key, deadline)
        }
        fn put(&self, key: &str, body: &[u8], o: &PutOptions) -> Result<Version, StoreError> {
            let answer = self.0.put(key, body, o);
            if self.1.fetch_sub(1, Ordering::SeqCst) == 1 {
                panic!("the store panicked after its write landed");
            }
            answer
        }
        fn delete(&self, k: &str, m: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
            self.0.delete(k, m, d)
        }
    }
    for nth_put in [1, 3, 5] {
        let w = World::new();
        let store = Arc::new(PanicsAfterPut(w.memory.clone(), AtomicUsize::new(nth_put)));
        let mut panicky = Contender::new(store, "db", w.options()).with_instance_id(NAME);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = panicky.try_acquire();
        }));
        assert!(panicked.is_err());
        assert!(!w.record().is_released(), "left behind: nobody released it");
        assert_eq!(
            relation(&w.other_process().try_acquire()),
            Some(HolderRelation::Other),
            "another process waits it out"
        );
        let again = w.ours().try_acquire().unwrap_or_else(|e| {
            panic!("put {nth_put}: the panicked acquire's claim was kept live: {e}")
        });
        assert_eq!(again.epoch(), 2);
        drop(again);
        let w2 = World::new();
        let store = Arc::new(PanicsAfterPut(w2.memory.clone(), AtomicUsize::new(nth_put)));
        let mut panicky = Contender::new(store, "db", w2.options()).with_instance_id(NAME);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = panicky.try_acquire();
        }));
        assert_eq!(w2.ours().release_abandoned().unwrap(), Released::Freed);
    }
}

/// A lease leaked with `mem::forget`: its claim stays live, so the process
/// is kept out (ThisProcess) until the record is stale, then takes it at
/// the next epoch; the clean-up never frees it meanwhile.
#[test]
fn a_forgotten_lease_is_waited_out_never_taken_at_once() {
    let w = World::new();
    std::mem::forget(w.ours().try_acquire().unwrap());
    w.clock.advance(secs(TTL_S - 1));
    assert_eq!(
        relation(&w.ours().try_acquire()),
        Some(HolderRelation::ThisProcess)
    );
    assert!(matches!(
        w.ours().release_abandoned(),
        Ok(Released::LeftAlone { .. })
    ));
    w.clock.advance(secs(2));
    let lease = w.ours().try_acquire().expect("stale: taken over");
    assert_eq!(lease.epoch(), 2);
}

/// The probe's failure paths: the record goes back (released) when the
/// service ignores a condition, and a record left live (own ETag refused)
/// is nobody's to this process at once, while other processes wait.
#[test]
fn the_probe_failure_paths_leave_no_live_claim() {
    for switch in [
        Misbehaviour::IgnoreIfNoneMatch,
        Misbehaviour::IgnoreIfMatch,
        Misbehaviour::CreateOnIfMatchAbsent,
    ] {
        let w = World::new();
        w.memory.set(switch);
        let e = w.ours().try_acquire().expect_err("the probe catches it");
        assert!(matches!(e, LeaseError::ConditionsIgnored { .. }), "{e}");
        w.memory.clear(switch);
        assert!(w.record().is_released(), "{switch:?}: handed back");
        let other = w.other_process().try_acquire().expect("free to all");
        assert_eq!(other.epoch(), 2);
    }
    let w = World::new();
    w.memory.set(Misbehaviour::RefuseOwnEtag);
    let e = w.ours().try_acquire().expect_err("own ETag refused");
    assert!(matches!(e, LeaseError::OwnEtagRefused { .. }), "{e}");
    w.memory.clear(Misbehaviour::RefuseOwnEtag);
    assert!(!w.record().is_released());
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    let lease = w.ours().try_acquire().expect("no live lease claims it");
    assert_eq!(lease.epoch(), 2);
}

/// Taking over an orphan (epoch 1) with the write's answer lost: the call
/// takes its own write back at the epoch it wrote (2), not one more.
#[test]
fn a_lost_answer_while_taking_over_an_orphan_is_taken_back_at_its_epoch() {
    let w = World::new();
    orphan(&w);
    w.memory.lose_next_answers(1);
    let lease = w.ours().try_acquire().expect("its own write read back");
    assert_eq!(lease.epoch(), 2);
    assert_eq!(w.record().epoch, 2);
    assert!(lease.may_write());
}

/// One thread drops (releases) the lease while another acquires, on real
/// threads, many times: the acquire either is kept out by the live value
/// or takes a record nobody writes under any more; never both writable,
/// never the new record freed.
#[test]
fn an_acquire_racing_a_drop_on_another_thread() {
    for i in 0..200 {
        let w = World::new();
        let old = w.ours().try_acquire().unwrap();
        let start = Barrier::new(2);
        let (taken, old_was_writable) = std::thread::scope(|s| {
            let dropper = s.spawn(|| {
                start.wait();
                if i % 2 == 0 {
                    let _ = old.release();
                }
                let writable = old.may_write();
                drop(old);
                writable
            });
            start.wait();
            let taken = w.ours().try_acquire();
            (taken, dropper.join().unwrap())
        });
        let _ = old_was_writable;
        match taken {
            Ok(new) => {
                assert!(new.may_write());
                let rec = w.record();
                assert_eq!((rec.epoch, rec.is_released()), (new.epoch(), false), "{i}");
                assert!(matches!(
                    w.other_process().try_acquire(),
                    Err(LeaseError::Held { .. })
                ));
                new.renew().expect("its record stays its own");
            }
            Err(e) => {
                assert_eq!(
                    relation(&Err(e.clone())),
                    Some(HolderRelation::ThisProcess),
                    "{i}: {e}"
                );
                // The old value is gone now: taken at once.
                let new = w.ours().try_acquire().expect("nobody holds it now");
                assert!(new.may_write());
            }
        }
    }
}

/// A keeper's stop racing an acquire of the same process.
#[test]
fn a_keeper_stop_racing_an_acquire() {
    for _ in 0..100 {
        let w = World::new();
        let keeper = Keeper::spawn(w.ours().try_acquire().unwrap(), KeeperOptions::new()).unwrap();
        let start = Barrier::new(2);
        let taken = std::thread::scope(|s| {
            let stopper = s.spawn(|| {
                start.wait();
                keeper.stop()
            });
            start.wait();
            let taken = w.ours().try_acquire();
            let _ = stopper.join().unwrap();
            taken
        });
        match taken {
            Ok(new) => {
                let rec = w.record();
                assert_eq!((rec.epoch, rec.is_released()), (new.epoch(), false));
                new.renew().unwrap();
            }
            Err(e) => assert_eq!(
                relation(&Err(e.clone())),
                Some(HolderRelation::ThisProcess),
                "{e}"
            ),
        }
    }
}

/// Two contenders of one process acquiring at once, many times: exactly
/// one holds, the other is told it is this process's.
#[test]
fn two_acquires_of_one_process_at_once() {
    for _ in 0..100 {
        let w = World::new();
        let start = Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                start.wait();
                w.ours().try_acquire()
            });
            start.wait();
            let b = w.ours().try_acquire();
            (a.join().unwrap(), b)
        });
        let held: Vec<_> = [&a, &b].into_iter().filter(|r| r.is_ok()).collect();
        assert_eq!(held.len(), 1, "{a:?} {b:?}");
        let lost = if a.is_ok() { &b } else { &a };
        assert_eq!(
            relation(lost),
            Some(HolderRelation::ThisProcess),
            "{lost:?}"
        );
    }
}

/// An old value that was released (record freed), a newer one taken, then
/// the old one marked lost and released again and dropped: the new record
/// is untouched.
#[test]
fn a_released_old_value_marked_lost_never_touches_the_new_record() {
    let w = World::new();
    let old = w.ours().try_acquire().unwrap();
    assert_eq!(old.release().unwrap(), Released::Freed);
    let new = w.ours().try_acquire().expect("released: free");
    assert_eq!(new.epoch(), 2);
    assert!(old.renew().is_err());
    old.mark_lost(None);
    assert_eq!(old.release().unwrap(), Released::AlreadyFree);
    drop(old);
    let rec = w.record();
    assert_eq!((rec.epoch, rec.is_released()), (2, false));
    new.renew().unwrap();

    // A fenced old value marked lost (holder unknown) after a newer took
    // its stale record over: its release reads, and leaves the new alone.
    let w = World::new();
    let old = w.ours().try_acquire().unwrap();
    w.clock.advance(secs(TTL_S + 1));
    let new = w.ours().try_acquire().unwrap();
    old.mark_lost(None);
    assert!(matches!(old.release(), Ok(Released::LeftAlone { .. })));
    drop(old);
    let rec = w.record();
    assert_eq!((rec.epoch, rec.is_released()), (2, false));
    new.renew().unwrap();
}

/// The record with a claim stays readable by the async reference, and
/// claims of any JSON type never make our record unreadable.
#[test]
fn records_with_claims_stay_readable_both_ways() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct ReferenceRecord {
        instance_id: String,
        acquired_at: String,
        renewed_at: String,
        ttl_s: u64,
    }
    let w = World::new();
    let lease = w.ours().try_acquire().unwrap();
    let body = w.memory.peek(KEY).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(json["claim"].is_string(), "{json}");
    let seen: ReferenceRecord = serde_json::from_slice(&body).expect("reference reads ours");
    assert_eq!(seen.instance_id, NAME);
    lease.release().unwrap();
    let seen: ReferenceRecord =
        serde_json::from_slice(&w.memory.peek(KEY).unwrap()).expect("and the released one");
    assert_eq!(seen.ttl_s, 0);
    for claim in ["null", "7", "[1]", "{\"a\":1}", "true", "\"\""] {
        let text = format!(
            r#"{{"instance_id":"a","acquired_at":"x","renewed_at":"y","ttl_s":5,"claim":{claim}}}"#
        );
        assert!(LeaseRecord::parse(text.as_bytes()).is_some(), "{text}");
    }
}
