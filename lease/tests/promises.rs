//! Every promise of the lease, checked on the strict in-memory store and on
//! each of its misbehaviour switches, with a test clock: no test sleeps.

use bucket_lease_core::lease::TRANSIENT_WRITE_TRIES;
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, error::HolderRelation, error::IgnoredCondition,
    lease::Exclusion, store::DeleteMode, store::Object, store::PutOptions, store::StoreErrorKind,
    store::Version, Contender, Lease, LeaseError, LeaseOptions, Released, Store, StoreError,
};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const KEY: &str = "db/LEASE";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

struct World {
    store: Arc<MemoryStore>,
    clock: TestClock,
}

impl World {
    fn new() -> Self {
        World {
            store: Arc::new(MemoryStore::new()),
            clock: TestClock::new(),
        }
    }

    fn options(&self, ttl_s: u64) -> LeaseOptions {
        LeaseOptions::new(ttl_s).clock(Arc::new(self.clock.clone()))
    }

    fn contender(&self, ttl_s: u64) -> Contender {
        Contender::new(self.store.clone(), "db", self.options(ttl_s))
    }

    fn acquire(&self, ttl_s: u64) -> Result<Lease, LeaseError> {
        self.contender(ttl_s).try_acquire()
    }

    fn record(&self) -> Option<LeaseRecord> {
        self.store.peek(KEY).and_then(|b| LeaseRecord::parse(&b))
    }

    fn holder(&self) -> Option<String> {
        self.record().map(|r| r.instance_id)
    }

    /// Put a record written by someone else, renewed `ahead` from now (or
    /// behind, when negative).
    fn plant(&self, id: &str, renewed_ahead_s: i64, ttl_s: u64) {
        let now = self.clock.wall();
        let renewed = if renewed_ahead_s >= 0 {
            now + secs(renewed_ahead_s as u64)
        } else {
            now - secs(renewed_ahead_s.unsigned_abs())
        };
        let stamp = format_stamp(renewed);
        let record = LeaseRecord::new(id, stamp.clone(), stamp, ttl_s, 4);
        self.store.insert(KEY, &record.to_bytes());
    }
}

fn held_by(result: Result<Lease, LeaseError>) -> String {
    match result {
        Err(LeaseError::Held { holder, key, .. }) => {
            assert_eq!(key, KEY);
            holder
        }
        other => panic!("expected Held, got {other:?}"),
    }
}

#[test]
fn an_absent_lease_is_taken_with_a_create_and_checked_by_the_probe() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    assert_eq!(lease.exclusion(), Exclusion::Conditional);
    assert_eq!(lease.epoch(), 1);
    assert_eq!(w.holder().as_deref(), Some(lease.instance_id()));
    assert_eq!(
        w.store.keys(),
        vec![KEY.to_string()],
        "the probe leaves nothing behind"
    );
    // read, create, the probe's four writes (three refused, one on our
    // own ETag accepted)
    assert_eq!(w.store.requests(), 6);
    assert_eq!(lease.version(), w.store.get(KEY, None).unwrap().version);
}

#[test]
fn a_fresh_foreign_lease_keeps_a_contender_out_and_names_its_holder() {
    let w = World::new();
    let first = w.acquire(30).unwrap();
    assert_eq!(held_by(w.acquire(30)), first.instance_id());
    w.clock.advance(secs(29));
    assert_eq!(held_by(w.acquire(30)), first.instance_id());
}

#[test]
fn sixteen_threads_racing_for_one_prefix_get_exactly_one_holder() {
    let w = World::new();
    let start = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (store, options, start) = (w.store.clone(), w.options(30), start.clone());
            std::thread::spawn(move || {
                let mut contender = Contender::new(store, "db", options);
                start.wait();
                // The winner keeps its lease (a dropped one is released).
                contender.try_acquire()
            })
        })
        .collect();
    let leases: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let results: Vec<_> = leases
        .iter()
        .map(|r| r.as_ref().map(|l| l.instance_id().to_string()))
        .collect();
    let winners: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        match r {
            Ok(_) => {}
            Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, winners[0]),
            Err(e) => panic!("a loser must be told who holds the lease, got {e}"),
        }
    }
    assert_eq!(w.holder().as_ref(), Some(winners[0]));
}

#[test]
fn the_probe_fails_closed_on_each_ignored_condition_and_hands_the_key_back() {
    for (switch, condition, header) in [
        (
            Misbehaviour::IgnoreIfNoneMatch,
            IgnoredCondition::IfNoneMatch,
            "If-None-Match",
        ),
        (
            Misbehaviour::IgnoreIfMatch,
            IgnoredCondition::IfMatch,
            "If-Match",
        ),
        (
            Misbehaviour::CreateOnIfMatchAbsent,
            IgnoredCondition::IfMatchOnAbsentKey,
            "If-Match",
        ),
    ] {
        let w = World::new();
        w.store.set(switch);
        let err = w.acquire(30).unwrap_err();
        assert_eq!(
            err,
            LeaseError::ConditionsIgnored {
                key: KEY.into(),
                condition
            },
            "{switch:?}"
        );
        let shown = err.to_string();
        assert!(shown.contains(header), "{shown}");
        assert!(shown.contains("BUCKET_LEASE_CONDITIONAL=off"), "{shown}");
        assert_eq!(
            w.store.keys(),
            vec![KEY.to_string()],
            "{switch:?}: the probe key is removed, the lease key kept"
        );
        assert!(
            w.record().is_some_and(|r| r.is_released()),
            "{switch:?}: the key is handed back as released"
        );
    }
}

#[test]
fn a_304_refusal_counts_as_a_refused_create() {
    let w = World::new();
    w.store.set(Misbehaviour::NotModifiedOnCreate);
    let first = w.acquire(30).unwrap();
    assert_eq!(first.exclusion(), Exclusion::Conditional);
    assert_eq!(held_by(w.acquire(30)), first.instance_id());
}

#[test]
fn a_store_that_cannot_send_conditions_is_best_effort_only_when_asked() {
    let w = World::new();
    w.store.set(Misbehaviour::NoConditions);
    let refused = w.acquire(30).unwrap_err();
    assert!(
        refused.to_string().contains("BUCKET_LEASE_CONDITIONAL=off"),
        "{refused}"
    );
    assert!(w.store.keys().is_empty(), "nothing was written");
    let asked = w.options(30).best_effort(true);
    let lease = Contender::new(w.store.clone(), "db", asked)
        .try_acquire()
        .unwrap();
    assert_eq!(lease.exclusion(), Exclusion::BestEffort);
    assert_eq!(held_by(w.acquire(30)), lease.instance_id());
    lease.renew().unwrap();
    assert_eq!(lease.release().unwrap(), Released::Freed);
    assert!(w.record().is_some_and(|r| r.is_released()));
}

#[test]
fn best_effort_on_request_works_on_a_store_that_ignores_every_condition() {
    let w = World::new();
    w.store.set(Misbehaviour::IgnoreIfNoneMatch);
    w.store.set(Misbehaviour::IgnoreIfMatch);
    let opts = || w.options(30).best_effort(true);
    let a = Lease::acquire(w.store.clone(), "db", opts()).unwrap();
    assert_eq!(a.exclusion(), Exclusion::BestEffort);
    assert_eq!(
        w.store.requests(),
        2,
        "a read and one unconditional write, no probe"
    );
    assert_eq!(
        held_by(Lease::acquire(w.store.clone(), "db", opts())),
        a.instance_id()
    );
    a.renew().unwrap();
    w.clock.advance(secs(30));
    let b = Lease::acquire(w.store.clone(), "db", opts()).unwrap();
    assert_eq!(b.epoch(), 2);
    assert_eq!(
        a.renew().unwrap_err(),
        LeaseError::Lost {
            key: KEY.into(),
            holder: Some(b.instance_id().into())
        }
    );
}

#[test]
fn best_effort_can_be_asked_for_through_the_environment() {
    // The only test that touches this variable.
    std::env::set_var("BUCKET_LEASE_CONDITIONAL", "off");
    let asked = LeaseOptions::new(30).best_effort_from_env();
    std::env::remove_var("BUCKET_LEASE_CONDITIONAL");
    assert!(asked.is_best_effort());
    assert!(!LeaseOptions::new(30)
        .best_effort_from_env()
        .is_best_effort());
}

#[test]
fn a_lost_answer_on_acquire_is_recognised_by_the_next_attempt() {
    let w = World::new();
    let mut me = w.contender(30);
    // Every write of the attempt lands and loses its answer: it reads its
    // own record back each time, and gives up after the last.
    w.store.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    let err = me.try_acquire().unwrap_err();
    assert!(
        err.store_error().is_some_and(StoreError::may_have_landed),
        "{err}"
    );
    assert_eq!(w.holder().as_deref(), Some(me.instance_id()));
    let lease = me.try_acquire().expect("our own record is ours at once");
    assert_eq!(lease.instance_id(), me.instance_id());
    assert_eq!(
        lease.epoch(),
        2,
        "taken over at once (no live lease of ours holds it), as a new holder"
    );
    lease.renew().unwrap();
}

#[test]
fn an_abandoned_acquire_can_be_released_by_its_id() {
    let w = World::new();
    let me = w.contender(30);
    let mut attempt = w.contender(30).with_instance_id(me.instance_id());
    w.store.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    attempt.try_acquire().unwrap_err();
    assert_eq!(me.release_abandoned().unwrap(), Released::Freed);
    assert!(w.record().is_some_and(|r| r.is_released()));
    assert_eq!(me.release_abandoned().unwrap(), Released::AlreadyFree);
    let other = w.acquire(30).unwrap();
    assert_eq!(
        me.release_abandoned().unwrap(),
        Released::LeftAlone {
            holder: Some(other.instance_id().into()),
            holder_name: other.holder_name().map(Into::into),
        }
    );
}

#[test]
fn a_lost_answer_on_renew_is_adopted_not_mistaken_for_a_takeover() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.clock.advance(secs(10));
    w.store.lose_next_answers(1);
    assert!(lease.renew().unwrap_err().store_error().is_some());
    assert!(!lease.is_lost());
    w.clock.advance(secs(10));
    lease.renew().expect("the record still names us");
    assert_eq!(lease.version(), w.store.get(KEY, None).unwrap().version);
    assert!(lease.may_write());
}

#[test]
fn a_failed_renewal_keeps_the_lease_until_the_fence() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.store.fail_next_requests(1);
    let err = lease.renew().unwrap_err();
    assert_eq!(
        err.store_error().map(StoreError::kind),
        Some(StoreErrorKind::Transport)
    );
    assert!(!lease.is_lost() && lease.may_write());
    w.clock.advance(secs(20));
    assert!(
        !lease.may_write(),
        "fenced two thirds of a TTL after the acquire"
    );
    lease
        .renew()
        .expect("a renewal after the fence still works if nobody took over");
    assert!(lease.may_write());
}

#[test]
fn a_stale_lease_is_taken_over_and_its_old_holder_learns_who_took_it() {
    let w = World::new();
    let a = w.acquire(30).unwrap();
    w.clock.advance(Duration::from_millis(29_999));
    held_by(w.acquire(30));
    w.clock.advance(Duration::from_millis(1));
    let b = w.acquire(30).expect("exactly one TTL old is stale");
    assert_eq!(b.epoch(), a.epoch() + 1);
    let lost = a.renew().unwrap_err();
    assert_eq!(
        lost,
        LeaseError::Lost {
            key: KEY.into(),
            holder: Some(b.instance_id().into())
        }
    );
    assert!(lost.to_string().contains(b.instance_id()));
    assert!(a.is_lost() && !a.may_write());
    assert_eq!(a.lost_to().as_deref(), Some(b.instance_id()));
    assert_eq!(
        a.release().unwrap(),
        Released::LeftAlone {
            holder: Some(b.instance_id().into()),
            holder_name: b.holder_name().map(Into::into),
        }
    );
    assert_eq!(
        w.holder().as_deref(),
        Some(b.instance_id()),
        "a lost lease is left alone"
    );
    b.renew().unwrap();
}

#[test]
fn release_of_a_taken_over_lease_that_does_not_know_it_leaves_the_new_holder_alone() {
    for switch in [None, Some(Misbehaviour::NoConditionalDelete)] {
        let w = World::new();
        if let Some(s) = switch {
            w.store.set(s);
        }
        let a = w.acquire(30).unwrap();
        w.clock.advance(secs(31));
        let b = w.acquire(30).unwrap();
        assert_eq!(
            a.release().unwrap(),
            Released::LeftAlone {
                holder: Some(b.instance_id().into()),
                holder_name: b.holder_name().map(Into::into),
            },
            "{switch:?}"
        );
        assert_eq!(w.holder().as_deref(), Some(b.instance_id()));
    }
}

#[test]
fn the_holders_ttl_governs_not_the_contenders() {
    let w = World::new();
    let a = w.acquire(60).unwrap();
    w.clock.advance(secs(45));
    assert_eq!(held_by(w.acquire(10)), a.instance_id());
    w.clock.advance(secs(15));
    let _taken = w.acquire(10).unwrap();
}

#[test]
fn a_record_stamped_in_the_future_is_fresh_and_a_garbled_one_is_stale() {
    let w = World::new();
    w.plant("ahead", 20, 30);
    assert_eq!(held_by(w.acquire(30)), "ahead");

    let w = World::new();
    let mut garbled =
        LeaseRecord::parse(&w.acquire(30).unwrap().store().get(KEY, None).unwrap().body).unwrap();
    garbled.instance_id = "garbled".into();
    garbled.renewed_at = "yesterday".into();
    w.store.insert(KEY, &garbled.to_bytes());
    let _taken = w.acquire(30).expect("a stamp that does not parse is stale");

    let w = World::new();
    w.store.insert(KEY, b"<html>not a lease</html>");
    let lease = w
        .acquire(30)
        .expect("a body that is no record is taken over");
    assert_eq!(lease.epoch(), 1);
}

#[test]
fn a_suspect_record_is_taken_over_after_sitting_unchanged_for_a_ttl() {
    let w = World::new();
    w.plant("clock-a-day-ahead", 86_400, 30);
    let mut me = w.contender(30);
    for _ in 0..3 {
        assert_eq!(held_by(me.try_acquire()), "clock-a-day-ahead");
        w.clock.advance(secs(10));
    }
    // 30 s since we first saw it unchanged: one of our TTLs.
    let lease = me.try_acquire().expect("unchanged for a TTL");
    assert_eq!(
        lease.epoch(),
        5,
        "a takeover counts one past the record it replaced"
    );
}

#[test]
fn a_suspect_record_that_changes_restarts_the_watch() {
    let w = World::new();
    w.plant("ahead", 86_400, 30);
    let mut me = w.contender(30);
    held_by(me.try_acquire());
    w.clock.advance(secs(20));
    w.plant("ahead", 86_400, 30); // rewritten: a new ETag
    held_by(me.try_acquire());
    w.clock.advance(secs(20));
    assert_eq!(held_by(me.try_acquire()), "ahead", "only 20 s unchanged");
    w.clock.advance(secs(10));
    let _taken = me.try_acquire().unwrap();
}

#[test]
fn an_absurd_ttl_is_suspect_and_judged_by_the_contenders_ttl() {
    let w = World::new();
    w.plant("forever", 0, 86_400);
    let mut me = w.contender(5);
    held_by(me.try_acquire());
    w.clock.advance(secs(4));
    held_by(me.try_acquire());
    w.clock.advance(secs(1));
    let _taken = me.try_acquire().unwrap();
}

#[test]
fn a_sane_fresh_record_resets_the_suspect_watch() {
    let w = World::new();
    w.plant("ahead", 86_400, 30);
    let mut me = w.contender(30);
    held_by(me.try_acquire());
    w.plant("sane", 0, 30);
    w.clock.advance(secs(25));
    held_by(me.try_acquire());
    w.plant("ahead", 86_400, 30);
    w.clock.advance(secs(10));
    held_by(me.try_acquire()); // seen afresh now
    w.clock.advance(secs(29));
    assert_eq!(held_by(me.try_acquire()), "ahead");
}

#[test]
fn the_fence_ends_two_thirds_of_a_ttl_after_the_last_renewal() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    let start = w.clock.now();
    assert_eq!(lease.write_deadline(), Some(start + secs(20)));
    w.clock.advance(Duration::from_millis(19_999));
    assert!(lease.may_write());
    w.clock.advance(Duration::from_millis(1));
    assert!(!lease.may_write());
    assert_eq!(lease.write_deadline(), None);

    lease.renew().unwrap();
    assert_eq!(lease.write_deadline(), Some(w.clock.now() + secs(20)));
}

#[test]
fn a_wall_clock_stepped_forward_fences_early() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.clock.advance(secs(5));
    w.clock.step_wall(secs(10), true);
    assert_eq!(
        lease.write_deadline(),
        Some(w.clock.now() + secs(5)),
        "the wall clock says 15 s have passed"
    );
    w.clock.step_wall(secs(5), true);
    assert!(!lease.may_write());
}

#[test]
fn a_wall_clock_stepped_back_leaves_the_monotonic_clock_to_decide() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    let start = w.clock.now();
    w.clock.step_wall(secs(3600), false);
    assert_eq!(lease.write_deadline(), Some(start + secs(20)));
    w.clock.advance(secs(20));
    assert!(!lease.may_write());
}

/// A store that takes `delay` of test-clock time to answer each write.
#[derive(Debug)]
struct SlowStore {
    inner: MemoryStore,
    clock: TestClock,
    delay: Duration,
}

impl Store for SlowStore {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let answer = self.inner.put(key, body, options);
        self.clock.advance(self.delay);
        answer
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

#[test]
fn the_fence_counts_from_before_the_request_was_sent() {
    let clock = TestClock::new();
    let store = Arc::new(SlowStore {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        delay: secs(3),
    });
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let sent = clock.now();
    let lease = Lease::acquire(store, "db", options).unwrap();
    // The create took 3 s to answer, and the probe's four writes 12 s
    // more; the one it accepted rewrote the same stamp, so the fence still
    // counts from before the create.
    assert_eq!(clock.now() - sent, secs(15));
    assert_eq!(lease.write_deadline(), Some(sent + secs(20)));
    let sent = clock.now();
    lease.renew().unwrap();
    assert_eq!(lease.write_deadline(), Some(sent + secs(20)));
}

#[test]
fn intervals_follow_the_ttl_and_a_zero_ttl_counts_as_one_second() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    assert_eq!(lease.renew_interval(), secs(10));
    assert_eq!(lease.fence_after(), secs(20));
    let w = World::new();
    let lease = w.acquire(0).unwrap();
    assert_eq!(lease.ttl_s(), 1);
    assert_eq!(w.record().unwrap().ttl_s, 1);
    assert_eq!(lease.renew_interval(), Duration::from_millis(333));
    assert_eq!(lease.fence_after(), Duration::from_millis(666));
}

#[test]
fn conflicts_are_retried_a_bounded_number_of_times() {
    let w = World::new();
    w.store.conflict_next_writes(2);
    let lease = w.acquire(30).expect("two conflicts are absorbed");
    let puts = w.store.puts();
    w.store.conflict_next_writes(100);
    let err = lease.renew().unwrap_err();
    assert_eq!(
        err.store_error().map(StoreError::kind),
        Some(StoreErrorKind::Conflict)
    );
    assert_eq!(w.store.puts() - puts, 5, "one try and four retries");
    assert!(!lease.is_lost());
    w.store.conflict_next_writes(0);
    lease.renew().unwrap();
}

#[test]
fn conflict_retries_stop_at_the_deadline() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    let puts = w.store.puts();
    w.store.conflict_next_writes(100);
    let deadline = w.clock.now() + Duration::from_millis(10);
    assert!(lease.renew_before(Some(deadline)).is_err());
    assert_eq!(
        w.store.puts() - puts,
        1,
        "no pause fits before the deadline"
    );
}

#[test]
fn release_marks_our_record_released_and_stops_writes_at_once() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    assert_eq!(lease.release().unwrap(), Released::Freed);
    assert!(!lease.may_write());
    let record = w.record().unwrap();
    assert!(record.is_released() && record.instance_id == lease.instance_id());
    assert_eq!(lease.release().unwrap(), Released::AlreadyFree);
    assert!(lease.renew().is_err(), "a released lease does not renew");
}

#[test]
fn release_after_a_lost_renewal_answer_still_frees_our_record() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.store.lose_next_answers(1);
    lease.renew().unwrap_err();
    assert_eq!(lease.release().unwrap(), Released::Freed);
    assert!(w.record().unwrap().is_released());
}

#[test]
fn a_marked_lost_lease_stops_writing_without_a_request() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    let requests = w.store.requests();
    lease.mark_lost(Some("other".into()));
    assert!(!lease.may_write());
    assert_eq!(lease.lost_to().as_deref(), Some("other"));
    assert_eq!(w.store.requests(), requests);
}

#[test]
fn errors_say_what_failed_and_what_to_do() {
    let held = LeaseError::Held {
        key: KEY.into(),
        holder: "abc".into(),
        holder_name: None,
        relation: HolderRelation::Other,
        epoch: Some(1),
    };
    assert_eq!(
        held.to_string(),
        "lease db/LEASE is held by instance abc; wait until it is released or its TTL runs \
         out, or break it if that holder is known to be dead"
    );
    let w = World::new();
    w.store.fail_next_requests(1);
    let shown = w.acquire(30).unwrap_err().to_string();
    assert!(
        shown.starts_with("lease store request failed: GET memory:///db/LEASE: no answer"),
        "{shown}"
    );
}

/// The probe checks what every renewal needs: a write conditional on the
/// record's own ETag is accepted. A store that refuses it (Ceph RGW 16.2
/// with quoted ETags) fails the acquire, saying so and what to set, rather
/// than handing out a lease whose first renewal is taken for a loss.
#[test]
fn a_store_that_refuses_a_right_if_match_fails_the_acquire() {
    let w = World::new();
    w.store.set(Misbehaviour::RefuseOwnEtag);
    match w.acquire(30) {
        Err(e @ LeaseError::OwnEtagRefused { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("own ETag") && text.contains("BUCKET_LEASE_UNQUOTED_ETAGS"),
                "{text}"
            );
            assert!(e.is_permanent());
        }
        other => panic!("expected OwnEtagRefused, got {other:?}"),
    }
    // Once the store accepts it again, the lease is taken and renewed.
    w.store.clear(Misbehaviour::RefuseOwnEtag);
    w.clock.advance(secs(31));
    let lease = w.acquire(30).unwrap();
    lease.renew().unwrap();
}

/// A renewal refused while the record still names us at the version we
/// wrote on is the service refusing our own ETag, not a loss: nobody else
/// wrote. It is reported as such, the lease stays held until its write
/// deadline (the keeper tries again meanwhile), and a renewal that lands
/// later holds it as before.
#[test]
fn a_renewal_refused_on_our_own_etag_is_not_called_a_loss() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.store.set(Misbehaviour::RefuseOwnEtag);
    match lease.renew() {
        Err(e @ LeaseError::OwnWriteRefused { .. }) => {
            let text = e.to_string();
            assert!(!text.contains("replaced or deleted"), "{text}");
            assert!(
                text.contains("If-Match") && text.contains("still names this holder"),
                "{text}"
            );
            assert!(!e.is_permanent(), "a later renewal may land: {text}");
        }
        other => panic!("expected OwnWriteRefused, got {other:?}"),
    }
    assert!(lease.may_write(), "nobody else may have the lease yet");
    assert_eq!(w.holder().as_deref(), Some(lease.instance_id()));
    w.store.clear(Misbehaviour::RefuseOwnEtag);
    lease.renew().unwrap();
    assert_eq!(lease.release().unwrap(), Released::Freed);
}

/// A release refused on our own record at its own version fails, saying
/// the record was left holding the prefix until its TTL runs out, rather
/// than reporting that someone else (our own name) holds it.
#[test]
fn a_release_refused_on_our_own_etag_says_the_record_was_left() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    w.store.set(Misbehaviour::RefuseOwnEtag);
    match lease.release() {
        Err(e @ LeaseError::OwnWriteRefused { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("not released") && text.contains("TTL"),
                "{text}"
            );
        }
        other => panic!("expected OwnWriteRefused, got {other:?}"),
    }
    assert!(!w.record().unwrap().is_released());
    assert_eq!(w.holder().as_deref(), Some(lease.instance_id()));
}

/// A lease dropped while held is released, as a dropped `File` lock is
/// unlocked: the next contender takes it at once, at the next epoch.
#[test]
fn a_dropped_lease_is_released() {
    let w = World::new();
    let first = w.acquire(30).unwrap();
    let epoch = first.epoch();
    drop(first);
    assert!(w.record().unwrap().is_released());
    let next = w.acquire(30).expect("free at once");
    assert_eq!(next.epoch(), epoch + 1);
    // A released lease dropped sends nothing more.
    assert_eq!(next.release().unwrap(), Released::Freed);
    let before = w.store.requests();
    drop(next);
    assert_eq!(w.store.requests(), before);
}

/// A lease dropped while its thread panics is left to expire: its release
/// would be network I/O in the middle of unwinding.
#[test]
fn a_lease_dropped_in_a_panic_is_left_to_expire() {
    let w = World::new();
    let lease = w.acquire(30).unwrap();
    let id = lease.instance_id().to_string();
    let dropped = std::thread::spawn(move || {
        let _lease = lease;
        panic!("the job failed");
    })
    .join();
    assert!(dropped.is_err());
    assert!(!w.record().unwrap().is_released());
    assert_eq!(held_by(w.acquire(30)), id);
}
