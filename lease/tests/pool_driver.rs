//! The pool driver (`pool::driver::drive`, internal: public only with the
//! feature `internals`, `cargo test --all-features`) on a scripted runtime:
//! removes and the stop while a renewal is out, a renewal back after the
//! fence, a stale wake-up, the order of an event and its loss, a departed
//! lease's loss for a later remove, and an inline pool's own jobs.
#![cfg(feature = "internals")]

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::driver::{drive, Runtime, Wake};
use bucket_lease_core::pool::{work, Done, Job, LeaseId, Left, PoolEvent, PoolLoss, PoolSchedule};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, store::DeleteMode, store::Object, store::PutOptions,
    store::Version, Event, Lease, LeaseError, LeaseOptions, Loss, Released, Store, StoreError,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the runtime saw, in order, and the jobs handed out.
struct Seen {
    clock: TestClock,
    out: Vec<Job>,
    lines: Vec<String>,
}

/// One scripted wake-up.
type Step = Box<dyn FnOnce(&mut Seen) -> Wake<&'static str, &'static str>>;

/// A runtime on a test clock whose waits answer as scripted.
struct Script {
    seen: Seen,
    steps: VecDeque<Step>,
}

impl Runtime for Script {
    type Reply = &'static str;
    type StopReply = &'static str;

    fn now(&self) -> Instant {
        self.seen.clock.now()
    }

    fn wait(
        &mut self,
        _until: Option<Instant>,
        _: &PoolSchedule,
    ) -> Wake<&'static str, &'static str> {
        self.seen.lines.push("wait".into());
        let step = self.steps.pop_front().expect("the script ran out");
        step(&mut self.seen)
    }

    fn hand_out(&mut self, job: Job) -> Result<(), Job> {
        self.seen.lines.push(format!("hand out {}", kind(&job)));
        self.seen.out.push(job);
        Ok(())
    }

    fn warm_up(&mut self, _lease: Arc<Lease>, _due: Instant) {
        self.seen.lines.push("warm-up".into());
    }

    fn run_here(&mut self, job: Job, release_timeout: Duration) -> Done {
        self.seen.lines.push(format!("here {}", kind(&job)));
        work(job, release_timeout)
    }

    fn report(&mut self, event: PoolEvent, machine: &PoolSchedule) {
        if matches!(event.event, Event::Fenced | Event::Lost { .. }) {
            let lease = machine.lease(event.id).expect("still in the machine");
            assert!(!lease.may_write(), "may_write false before the event");
        }
        let name = match &event.event {
            Event::Renewed { .. } => "Renewed".to_string(),
            Event::Released(r) => format!("Released {r:?}"),
            other => format!("{other:?}"),
        };
        self.seen.lines.push(format!("event {} {name}", event.id));
    }

    fn tell(&mut self, loss: PoolLoss) {
        self.seen
            .lines
            .push(format!("tell {} {}", loss.id, loss.loss));
    }

    fn answer(&mut self, reply: &'static str, answer: Option<Result<Released, LeaseError>>) {
        self.seen.lines.push(format!("answer {reply} {answer:?}"));
    }

    fn stopped(
        &mut self,
        reply: Option<&'static str>,
        releases: Vec<(LeaseId, Result<Released, LeaseError>)>,
    ) {
        self.seen
            .lines
            .push(format!("stopped {reply:?} {releases:?}"));
    }

    fn left(&mut self, left: &Left) {
        self.seen.lines.push(format!("left {}", left.id));
    }
}

fn kind(job: &Job) -> String {
    match job {
        Job::Renew(id, ..) => format!("renewal of {id}"),
        Job::Release(id, _) => format!("release of {id}"),
        Job::WarmUp(..) => "warm-up".into(),
    }
}

/// A clock, and a lease on it with a TTL of 3 s (renewed after 1 s,
/// fenced after 2 s) on a store of its own.
fn one_lease() -> (TestClock, Arc<Lease>) {
    let clock = TestClock::new();
    let options = LeaseOptions::new(3).clock(Arc::new(clock.clone()));
    let store = Arc::new(MemoryStore::new());
    let lease = Arc::new(Lease::acquire(store, "a", options).expect("acquired"));
    (clock, lease)
}

/// The lease added, then its renewal due, followed by `then`.
fn renewal_due(lease: &Arc<Lease>, then: Vec<Step>) -> Vec<Step> {
    let mut steps = vec![add(lease), after(Duration::from_secs(1))];
    steps.extend(then);
    steps
}

/// A renewal handed out and back, then the lease's release, as the
/// runtime sees them; then `then`.
fn renewed_then_released(then: &[&str]) -> Vec<String> {
    [
        "hand out renewal of #0",
        "event #0 Renewed",
        "hand out release of #0",
        "event #0 Released Ok(Freed)",
        "left #0",
    ]
    .iter()
    .chain(then)
    .map(|line| line.to_string())
    .collect()
}

fn add(lease: &Arc<Lease>) -> Step {
    let lease = Arc::clone(lease);
    Box::new(move |_| Wake::Add(LeaseId::from_index(0), lease))
}

/// The clock moved on by `by`, then a wake-up.
fn after(by: Duration) -> Step {
    Box::new(move |seen| {
        seen.clock.advance(by);
        Wake::Due
    })
}

/// The first job handed out done, its outcome back.
fn first_done() -> Step {
    Box::new(|seen| Wake::Done(work(seen.out.remove(0), Duration::from_secs(5))))
}

fn remove(reply: &'static str) -> Step {
    Box::new(move |_| Wake::Remove(LeaseId::from_index(0), reply))
}

fn stop() -> Step {
    Box::new(|_| Wake::Stop(Some("stop")))
}

/// Every line the driver's runtime saw, running `steps` on `clock`.
fn run_all(clock: &TestClock, inline: bool, steps: Vec<Step>) -> Vec<String> {
    let mut script = Script {
        seen: Seen {
            clock: clock.clone(),
            out: Vec::new(),
            lines: Vec::new(),
        },
        steps: steps.into(),
    };
    drive(&mut script, inline, Duration::from_secs(5));
    assert!(script.steps.is_empty(), "the driver ended early");
    script.seen.lines
}

/// The lines of `run_all` but its waits and warm-ups.
fn run(clock: &TestClock, inline: bool, steps: Vec<Step>) -> Vec<String> {
    let mut lines = run_all(clock, inline, steps);
    lines.retain(|l| l != "wait" && l != "warm-up");
    lines
}

#[test]
fn a_remove_while_a_renewal_is_out_waits_for_it_then_hands_out_only_the_release() {
    let (clock, lease) = one_lease();
    let steps = renewal_due(
        &lease,
        vec![
            remove("remove"),
            // A stale wake-up: nothing is due, nothing steps.
            after(Duration::from_millis(10)),
            first_done(),
            first_done(),
            stop(),
        ],
    );
    assert_eq!(
        run(&clock, false, steps),
        renewed_then_released(&["answer remove Some(Ok(Freed))", "stopped Some(\"stop\") []"])
    );
}

#[test]
fn the_stop_while_a_renewal_is_out_waits_for_it_and_answers_with_each_release() {
    let (clock, lease) = one_lease();
    let steps = renewal_due(&lease, vec![stop(), first_done(), first_done()]);
    assert_eq!(
        run(&clock, false, steps),
        renewed_then_released(&["stopped Some(\"stop\") [(LeaseId(0), Ok(Freed))]"])
    );
}

#[test]
fn a_fence_goes_out_at_the_deadline_before_its_loss_is_told_and_a_late_renewal_adds_nothing() {
    let (clock, lease) = one_lease();
    let late: Step = Box::new(|seen| {
        // The renewal comes back after the fence, failed.
        let Job::Renew(id, ..) = seen.out.remove(0) else {
            panic!("a renewal out")
        };
        let failed = LeaseError::Fenced {
            key: "a/LEASE".into(),
        };
        Wake::Done(Done::Renewed(
            id,
            bucket_lease_core::keeper::Attempt::Failed(failed),
        ))
    });
    let steps = renewal_due(
        &lease,
        vec![
            after(Duration::from_secs(1)),
            late,
            first_done(),
            // Removed after it left by itself: its loss.
            remove("remove"),
            stop(),
        ],
    );
    let lines = run(&clock, false, steps);
    assert_eq!(
        lines,
        [
            "hand out renewal of #0".to_string(),
            "event #0 Fenced".to_string(),
            format!("tell #0 {}", Loss::Fenced),
            "hand out release of #0".to_string(),
            "left #0".to_string(),
            "answer remove Some(Err(Fenced { key: \"a/LEASE\" }))".to_string(),
            "stopped Some(\"stop\") []".to_string(),
        ]
    );
    assert!(!lease.may_write());
}

#[test]
fn an_inline_pool_does_a_memory_stores_jobs_itself_and_hears_each_outcome_next() {
    let (clock, lease) = one_lease();
    let lines = run(&clock, true, renewal_due(&lease, vec![stop()]));
    assert_eq!(
        lines,
        [
            "here renewal of #0",
            "event #0 Renewed",
            "here release of #0",
            "event #0 Released Ok(Freed)",
            "left #0",
            "stopped Some(\"stop\") [(LeaseId(0), Ok(Freed))]",
        ]
    );
}

#[test]
fn a_remove_of_an_id_never_held_is_answered_none() {
    let clock = TestClock::new();
    let lines = run(&clock, false, vec![remove("remove"), stop()]);
    assert_eq!(lines, ["answer remove None", "stopped Some(\"stop\") []"]);
}

/// A memory store that answers at once (an inline pool renews on its
/// scheduler thread), whose next PUT, once `slow` is set, takes the clock
/// to that PUT's deadline before it lands: a renewal landing at the write
/// deadline.
#[derive(Debug)]
struct LandsAtDeadline {
    inner: MemoryStore,
    clock: TestClock,
    slow: AtomicBool,
}

impl Store for LandsAtDeadline {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if self.slow.swap(false, Ordering::SeqCst) {
            if let Some(d) = options.deadline {
                let now = self.clock.now();
                self.clock.advance(d.saturating_duration_since(now));
            }
        }
        self.inner.put(key, body, options)
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
    fn answers_at_once(&self) -> bool {
        true
    }
}

/// The keeper driver's rule (b34ce99), in the pool driver: a renewal begins
/// only on a wait's word. An inline pool's renewal done on the scheduler
/// thread lands at the write deadline, so the next renewal is due at once;
/// a remove asked meanwhile (it waits in the runtime for the next wait)
/// must win: nothing of the lease but its release after it. The driver
/// takes the outcome back and begins the next renewal with no wait
/// between, so the remove is heard only after a renewal it should have
/// stopped.
#[test]
fn an_inline_renewal_landing_at_the_deadline_lets_a_remove_asked_meanwhile_win() {
    let clock = TestClock::new();
    let store = Arc::new(LandsAtDeadline {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        slow: AtomicBool::new(false),
    });
    let options = LeaseOptions::new(3).clock(Arc::new(clock.clone()));
    let lease = Arc::new(
        Lease::acquire(Arc::clone(&store) as Arc<dyn Store>, "a", options).expect("acquired"),
    );
    let arm: Step = {
        let store = Arc::clone(&store);
        Box::new(move |seen| {
            store.slow.store(true, Ordering::SeqCst);
            seen.clock.advance(Duration::from_secs(1));
            Wake::Due
        })
    };
    let steps = vec![add(&lease), arm, remove("remove"), stop()];
    let lines = run_all(&clock, true, steps);
    let renewals = lines
        .iter()
        .filter(|l| l.as_str() == "here renewal of #0")
        .count();
    assert_eq!(
        renewals, 1,
        "a second renewal began with no wait after the first, before the remove asked meanwhile was heard: {lines:#?}"
    );
}
