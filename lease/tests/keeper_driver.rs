//! The keeper driver (`keeper::driver::keep`, internal: public only with
//! the feature `internals`, `cargo test --all-features`) on a scripted
//! runtime: what it begins after a stop, the bound of each store call, a
//! warm-up overslept, and the runtime's own unwind against a panic of the
//! renewal path.
#![cfg(feature = "internals")]

mod common;

use bucket_lease_core::keeper::driver::{keep, Runtime, Work};
use bucket_lease_core::keeper::DEFAULT_RELEASE_TIMEOUT;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, Event, KeeperOptions, Lease, LeaseError, LeaseOptions, Loss,
    Released,
};
use common::Recording;
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A runtime on a test clock whose waits answer as scripted (then `false`,
/// a stop), moving the clock to each instant that comes, and to `oversleep`
/// when set; it takes a store's panic for its own unwind when `own`.
struct Script {
    clock: TestClock,
    answers: VecDeque<bool>,
    oversleep: Option<Instant>,
    own: bool,
    events: Vec<Event>,
    work: Vec<&'static str>,
}

impl Runtime for Script {
    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn wait(&mut self, until: Option<Instant>) -> bool {
        let came = self.answers.pop_front().unwrap_or(false);
        if let (true, Some(at)) = (came, until) {
            let at = self.oversleep.take().unwrap_or(at).max(at);
            self.clock
                .advance(at.saturating_duration_since(self.clock.now()));
        }
        came
    }

    fn report(&mut self, event: Event) {
        self.events.push(event);
    }

    fn begins(&mut self, work: Work) {
        self.work.push(match work {
            Work::WarmUp { .. } => "warm-up",
            Work::Renewal { .. } => "renewal",
            Work::Release { .. } => "release",
        });
    }

    fn returned(&mut self, work: Work, _began: Instant) {
        let by = match work {
            Work::WarmUp { due } => Some(due),
            Work::Renewal { deadline } => Some(deadline),
            Work::Release { deadline } => deadline,
        };
        assert!(by.is_some_and(|by| self.clock.now() <= by), "{work:?}");
    }

    fn passes_through(&self, _unwind: &(dyn Any + Send)) -> bool {
        self.own
    }
}

fn held(answers: &[bool]) -> (Arc<Recording>, Lease, Script) {
    let store = Recording::new();
    let clock = TestClock::new();
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).expect("acquired");
    let script = Script {
        clock,
        answers: answers.iter().copied().collect(),
        oversleep: None,
        own: false,
        events: Vec::new(),
        work: Vec::new(),
    };
    (store, lease, script)
}

#[test]
fn a_stop_begins_nothing_but_the_release() {
    let (store, lease, mut script) = held(&[]);
    let (ended, released) = keep(&lease, KeeperOptions::new(), &mut script);
    assert_eq!(ended, None);
    assert_eq!(released, Ok(Released::Freed));
    assert_eq!(script.work, ["release"]);
    // Within the keeper's release timeout.
    let by = script.clock.now() + DEFAULT_RELEASE_TIMEOUT;
    assert_eq!(store.last_put_deadline(), Some(by));
    assert_eq!(script.events, [Event::Released(Ok(Released::Freed))]);
}

#[test]
fn a_warm_up_by_its_due_then_the_renewal_then_a_stop() {
    let (store, lease, mut script) = held(&[true, true]);
    let due = lease.confirmed_at() + lease.renew_interval();
    let (ended, released) = keep(&lease, KeeperOptions::new(), &mut script);
    assert_eq!((ended, released), (None, Ok(Released::Freed)));
    assert_eq!(script.work, ["warm-up", "renewal", "release"]);
    assert_eq!(*store.warm_ups.lock().unwrap(), [due]);
    assert!(matches!(script.events[0], Event::Renewed { .. }));
    assert_eq!(script.events.len(), 2, "{:?}", script.events);
}

#[test]
fn a_warm_up_whose_renewal_is_due_already_is_not_begun() {
    let (store, lease, mut script) = held(&[true]);
    // The wait for the warm-up's instant oversleeps to the renewal's.
    script.oversleep = Some(lease.confirmed_at() + lease.renew_interval());
    let _ = keep(&lease, KeeperOptions::new(), &mut script);
    assert_eq!(script.work, ["renewal", "release"]);
    assert!(store.warm_ups.lock().unwrap().is_empty());
}

#[test]
fn the_runtimes_own_unwind_passes_through_the_renewals_guard() {
    let (store, lease, mut script) = held(&[true, true]);
    script.own = true;
    store.panic_on_put.store(true, Ordering::SeqCst);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        keep(&lease, KeeperOptions::new(), &mut script)
    }));
    // The lease's drop releases it: with writes that answer.
    store.panic_on_put.store(false, Ordering::SeqCst);
    assert!(unwound.is_err(), "the unwind went on");
    assert_eq!(script.events, [], "no loss, no event: the run is over");
    assert!(lease.may_write(), "the lease not marked lost");
}

#[test]
fn a_panic_in_the_renewal_is_still_a_loss() {
    let (store, lease, mut script) = held(&[true, true]);
    store.panic_on_put.store(true, Ordering::SeqCst);
    let heard = Arc::new(Mutex::new(Vec::new()));
    let options = KeeperOptions::new().on_loss({
        let heard = Arc::clone(&heard);
        move |loss| heard.lock().unwrap().push(loss.clone())
    });
    let (ended, _) = keep(&lease, options, &mut script);
    store.panic_on_put.store(false, Ordering::SeqCst);
    assert!(matches!(ended, Some(LeaseError::Lost { .. })), "{ended:?}");
    assert!(
        matches!(&script.events[0], Event::Lost { reason, .. } if reason.contains("injected panic")),
        "{:?}",
        script.events
    );
    assert!(matches!(heard.lock().unwrap()[..], [Loss::Lost { .. }]));
}
