//! `Contender::run_while_held` on the in-memory store with a test clock:
//! the work runs under the lease and is told when it ends, the lease is
//! released however the work ends, and the answer says how the lease fared.

use bucket_lease_core::hold::{HoldError, HoldOutcome};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, Contender, Event, KeeperOptions, LeaseError, LeaseOptions,
    Loss, Released, Store, Wait,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "job/LEASE";
const PATIENCE: Duration = Duration::from_secs(10);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn contender(store: &Arc<MemoryStore>, clock: &TestClock, id: &str) -> Contender {
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    Contender::new(Arc::clone(store) as Arc<dyn Store>, "job", options).with_instance_id(id)
}

fn record(store: &MemoryStore) -> LeaseRecord {
    LeaseRecord::parse(&store.peek(KEY).unwrap()).unwrap()
}

fn wait(clock: &TestClock) -> Wait {
    Wait::until(clock.now() + secs(60))
}

/// Wait, in real time, until `done` holds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_work_runs_under_the_lease_through_renewals_and_it_is_released() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let mut a = contender(&store, &clock, "a");
    let ran = a
        .run_while_held(&wait(&clock), KeeperOptions::new(), |held| {
            assert!(held.may_write() && !held.stop_requested());
            let epoch = held.lease().epoch();
            held.writer().put_new("job/part-1", b"one").unwrap();
            for _ in 0..3 {
                clock.advance(secs(10));
                match held.events().recv_timeout(PATIENCE) {
                    Ok(Event::Renewed { .. }) => {}
                    other => panic!("expected a renewal, got {other:?}"),
                }
            }
            assert!(held.write_deadline() == Some(clock.now() + secs(20)));
            assert_eq!(record(&store).instance_id, "a", "held while the work runs");
            epoch
        })
        .expect("the lease was taken");
    assert_eq!(ran.value, 1);
    assert_eq!(ran.outcome, HoldOutcome::Released(Released::Freed));
    assert!(ran.outcome.held_throughout());
    assert!(record(&store).is_released(), "released after the work");
}

#[test]
fn a_lease_lost_while_the_work_runs_is_told_to_the_work_and_the_caller() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heard);
    let options =
        KeeperOptions::new().on_loss(move |loss: &Loss| seen.lock().unwrap().push(loss.clone()));
    let mut a = contender(&store, &clock, "a");
    let ran = a
        .run_while_held(&wait(&clock), options, |held| {
            let now = format_stamp(clock.wall());
            store.insert(
                KEY,
                &LeaseRecord::new("usurper", now.clone(), now, 30, 2).to_bytes(),
            );
            clock.advance(secs(10));
            eventually("stop requested", || held.stop_requested());
            assert!(!held.may_write());
            assert!(
                held.writer().put_new("job/late", b"x").is_err(),
                "no write after a loss"
            );
            "stopped"
        })
        .unwrap();
    assert_eq!(ran.value, "stopped");
    match &ran.outcome {
        HoldOutcome::Lost { holder, .. } => assert_eq!(holder.as_deref(), Some("usurper")),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(!ran.outcome.held_throughout());
    assert_eq!(
        record(&store).instance_id,
        "usurper",
        "the new holder's record stays"
    );
    let heard = heard.lock().unwrap();
    assert!(matches!(heard.as_slice(), [Loss::Lost { .. }]), "{heard:?}");
}

#[test]
fn a_lease_fenced_while_the_work_runs_says_fenced_and_is_released_after() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let mut a = contender(&store, &clock, "a");
    let ran = a
        .run_while_held(&wait(&clock), KeeperOptions::new(), |held| {
            let deadline = held.write_deadline().unwrap();
            store.fail_next_requests(usize::MAX);
            while clock.now() < deadline {
                clock.advance(Duration::from_millis(500));
                std::thread::sleep(Duration::from_millis(2));
            }
            eventually("stop requested", || held.stop_requested());
            store.fail_next_requests(0);
        })
        .unwrap();
    assert_eq!(
        ran.outcome,
        HoldOutcome::Fenced {
            release: Ok(Released::Freed)
        }
    );
    assert!(record(&store).is_released(), "our record is still freed");
}

#[test]
fn work_that_returns_after_its_write_deadline_is_told_it_was_fenced() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let mut a = contender(&store, &clock, "a");
    let ran = a
        .run_while_held(&wait(&clock), KeeperOptions::new(), |held| {
            // Renewals fail, and the work overruns the deadline in one step,
            // returning before the keeper may have noticed.
            store.fail_next_requests(usize::MAX);
            clock.advance(secs(25));
            assert!(
                held.stop_requested(),
                "past the deadline: stop, whatever was reported"
            );
            store.fail_next_requests(0);
        })
        .unwrap();
    assert!(
        matches!(ran.outcome, HoldOutcome::Fenced { .. }),
        "{:?}",
        ran.outcome
    );
    assert!(!ran.outcome.held_throughout());
}

#[test]
fn a_panic_in_the_work_releases_the_lease_and_goes_on() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let mut a = contender(&store, &clock, "a");
    let w = wait(&clock);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = a.run_while_held(&w, KeeperOptions::new(), |_| -> () {
            panic!("the work failed");
        });
    }))
    .expect_err("the panic goes on to the caller");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"the work failed"));
    assert!(
        record(&store).is_released(),
        "released before the panic went on"
    );
}

#[test]
fn a_wait_that_runs_out_runs_nothing_and_names_the_holder() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let holder = contender(&store, &clock, "holder").try_acquire().unwrap();
    let mut b = contender(&store, &clock, "b");
    let start = clock.now();
    let mut called = false;
    let err = b
        .run_while_held(&Wait::until(start + secs(5)), KeeperOptions::new(), |_| {
            called = true
        })
        .expect_err("held for the whole wait");
    assert!(!called, "the work never ran");
    match err {
        HoldError::Lease(LeaseError::Held { holder: h, .. }) => assert_eq!(h, "holder"),
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(clock.now() <= start + secs(5), "the wait kept its deadline");
    assert!(holder.may_write());
    assert_eq!(record(&store).instance_id, "holder");
}

#[test]
fn a_release_that_fails_is_reported_beside_the_value() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heard);
    let options =
        KeeperOptions::new().on_loss(move |loss: &Loss| seen.lock().unwrap().push(loss.clone()));
    let mut a = contender(&store, &clock, "a");
    let ran = a
        .run_while_held(&wait(&clock), options, |_| {
            store.fail_next_requests(usize::MAX);
            42
        })
        .unwrap();
    store.fail_next_requests(0);
    assert_eq!(ran.value, 42);
    match &ran.outcome {
        HoldOutcome::ReleaseFailed(e) => assert!(e.to_string().contains("no answer"), "{e}"),
        other => panic!("expected ReleaseFailed, got {other:?}"),
    }
    assert!(ran.outcome.held_throughout());
    assert!(
        !record(&store).is_released(),
        "the record is left to expire"
    );
    assert!(matches!(
        heard.lock().unwrap().as_slice(),
        [Loss::NotReleased(_)]
    ));
}

/// `stop_requested` is documented "once true, stays true": a renewal that
/// lands after the fence (here one the closure sends itself, while the
/// keeper has not yet looked) must not turn it back to false.
#[test]
fn stop_requested_once_true_stays_true() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let mut c = contender(&store, &clock, "worker");
    let ran = c
        .run_while_held(&wait(&clock), KeeperOptions::new(), |held| {
            // The keeper waits on its timer first: a keeper thread that
            // took its first look only after the step below (a loaded
            // machine) would see the fence and end the lease itself.
            let started = std::time::Instant::now();
            while clock.pending_timers() == 0 {
                assert!(started.elapsed() < secs(30), "the keeper never waited");
                std::thread::yield_now();
            }
            // Past the write deadline by the wall clock alone: fenced, and
            // no monotonic timer of the keeper fires.
            clock.step_wall(secs(21), true);
            let fenced = held.stop_requested();
            // A renewal lands after the fence: the lease may write again.
            held.lease().renew().expect("nobody else wrote the record");
            (fenced, held.may_write(), held.stop_requested())
        })
        .expect("taken");
    assert_eq!(
        ran.value,
        (true, true, true),
        "(stopped at the fence, may write after the late renewal, still stopped)"
    );
}
