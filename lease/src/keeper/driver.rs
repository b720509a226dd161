//! The keeper driver: one kept lease's whole life, written once (issue 41).
//!
//! [`keep`] waits, warms the store up, renews, records each outcome in the
//! [`RenewalSchedule`], reports events, and ends the lease by one rule: the
//! end reported ([`Event::Fenced`] or [`Event::Lost`]), then the loss
//! callback, then the wait for the stop, then the release and what it
//! found. It runs on a [`Runtime`]: the time now, a wait until an instant
//! or a stop, and where events go. The [`Keeper`](super::Keeper)'s thread
//! gives it a real clock, a stop channel and the events' channel; the
//! simulation gives it its scheduler (`sim/src/driven.rs`), so the loop
//! the simulation searches is the loop that ships.
//!
//! What it promises its runtime, besides the keeper's own promises (the
//! [module docs](super)):
//!
//! - **Nothing begins after a wait said stop.** Once [`Runtime::wait`]
//!   returns `false`, no warm-up and no renewal begins: the driver reports
//!   an end the loop had not woken to see, if any, and releases.
//! - **Every store call returns by its bound.** A renewal is bounded by the
//!   write deadline its step gave, a warm-up by the instant its renewal is
//!   due (a warm-up whose renewal is due already, the thread having slept
//!   past both, is not begun), the release by the release timeout (plus a store's write
//!   interval); the driver tells the runtime each bound before the call
//!   and when it returned ([`Runtime::begins`], [`Runtime::returned`]), so
//!   a simulation can hold it to them.
//! - **A panic in a store call is guarded, a runtime's own unwind is not.**
//!   A panic in a renewal is a loss, in a warm-up or the loss callback a
//!   log line, in the release an error; an unwind the runtime says is its
//!   own ([`Runtime::passes_through`]: a simulation ending its run) is
//!   passed on untouched, never taken for a panic of the renewal path.

use super::{
    note_end, panic_message, release_guarded_with, renew_guarded_with, warm_up_guarded_with,
    warm_up_lead, Ended, Event, KeeperOptions, Loss, OnLoss, RenewalSchedule, Step,
};
use crate::error::LeaseError;
use crate::lease::{Lease, LeaseStatus, Released};
use crate::mutant::{self, Mutant};
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

internal! {
/// What a keeper driver ([`keep`]) runs on: the time now, waits that a
/// stop ends, and where its events go.
pub trait Runtime {
    /// The monotonic instant now, on the lease's clock.
    fn now(&self) -> Instant;

    /// Wait until `until` (for ever when `None`) or a stop. `true` once the
    /// instant came; `false` when asked to stop (or when the keeper's
    /// handle is gone). After `false` the driver begins no warm-up and no
    /// renewal.
    fn wait(&mut self, until: Option<Instant>) -> bool;

    /// Hand `event` to the keeper's owner.
    fn report(&mut self, event: Event);

    /// The driver is about to begin `work`, which must return by its bound.
    /// The default does nothing.
    fn begins(&mut self, work: Work) {
        let _ = work;
    }

    /// `work`, begun at `began`, returned. The default does nothing.
    fn returned(&mut self, work: Work, began: Instant) {
        let _ = (work, began);
    }

    /// Whether an unwind a guard caught is the runtime's own, to be passed
    /// on rather than taken for a panic of the renewal path: a simulation
    /// ends a run by unwinding every simulated thread. The default: none.
    fn passes_through(&self, unwind: &(dyn Any + Send)) -> bool {
        let _ = unwind;
        false
    }
}
}

internal! {
/// A store call of the driver and the instant it must return by, as it
/// tells its [`Runtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// [`Store::warm_up`](crate::Store::warm_up) for the renewal due at
    /// `due`, which it must return by.
    WarmUp {
        /// When the renewal is due.
        due: Instant,
    },
    /// A renewal, which must return by the write deadline.
    Renewal {
        /// The write deadline its step gave.
        deadline: Instant,
    },
    /// The release at the end, within the release timeout.
    Release {
        /// The release timeout from its beginning (`None`: past what an
        /// instant can hold).
        deadline: Option<Instant>,
    },
}
}

internal! {
/// Keep `lease` on `runtime` until it is stopped, then release it: the
/// whole life of a [`Keeper`](super::Keeper)'s thread, and of the
/// simulation's keepers. Uses `options`' release timeout and loss callback
/// (not its thread name: the runtime's thread is its caller's). Returns the
/// loss reported, if any ([`LeaseError::Fenced`], [`LeaseError::Lost`]),
/// and what the release did.
pub fn keep<R: Runtime + ?Sized>(lease: &Lease, options: KeeperOptions, runtime: &mut R) -> Ended {
    Driver {
        lease,
        runtime,
        on_loss: options.on_loss,
        release_timeout: options.release_timeout,
    }
    .run()
}
}

/// One kept lease on its runtime.
struct Driver<'a, R: Runtime + ?Sized> {
    lease: &'a Lease,
    runtime: &'a mut R,
    on_loss: Option<OnLoss>,
    release_timeout: Duration,
}

impl<R: Runtime + ?Sized> Driver<'_, R> {
    /// The end-of-life rule: the loop until stopped or ended; an end not
    /// seen yet; for a loss, the callback and the wait for the stop; then
    /// the release, and what it found.
    fn run(mut self) -> Ended {
        let mut ended = None;
        let end = self
            .renew_until_stopped()
            .or_else(|| self.ended_unseen())
            // Released by hand: the program gave it up, no loss.
            .filter(|_| self.lease.status() != LeaseStatus::Released);
        if let Some(end) = end {
            // Lost or fenced, and already reported: the callback cannot
            // delay either. Then nothing more to do until the owner stops us.
            let key = self.lease.key().to_string();
            let loss = match end {
                Event::Lost {
                    holder,
                    holder_name,
                    reason,
                } => {
                    ended = Some(LeaseError::Lost {
                        key,
                        holder: holder.clone(),
                    });
                    Loss::Lost {
                        holder,
                        holder_name,
                        reason,
                    }
                }
                _ => {
                    ended = Some(LeaseError::Fenced { key });
                    Loss::Fenced
                }
            };
            self.tell_loss(&loss);
            while self.runtime.wait(None) {}
        }
        let released = self.release();
        self.runtime.report(Event::Released(released.clone()));
        match &released {
            Err(e) => self.tell_loss(&Loss::NotReleased(e.clone())),
            Ok(Released::LeftAlone {
                holder: holder @ Some(_),
                holder_name,
            }) => self.tell_loss(&Loss::Lost {
                holder: holder.clone(),
                holder_name: holder_name.clone(),
                reason: "the release found the record another holder's".to_string(),
            }),
            Ok(_) => {}
        }
        // A record found not ours by the release itself: taken over (or
        // broken) since the last renewal, so not held to the end.
        if let (None, Ok(freed)) = (&ended, &released) {
            ended = freed.loss_shown(self.lease.key());
        }
        (ended, released)
    }

    /// Drive the [`RenewalSchedule`]. Returns `None` when asked to stop,
    /// and the event that ended it once the lease is lost or fenced, after
    /// reporting it.
    fn renew_until_stopped(&mut self) -> Option<Event> {
        let lease = self.lease;
        let mut schedule = RenewalSchedule::new(lease);
        // The wake-up the store was last warmed up for.
        let mut warmed = None;
        loop {
            match schedule.step(lease) {
                Step::Wait { until } => {
                    let lead = warm_up_lead(lease.renew_interval());
                    let warm_at = until.checked_sub(lead);
                    let now = self.runtime.now();
                    if let Some(at) = warm_at.filter(|at| warmed != Some(until) && *at > now) {
                        if !self.runtime.wait(Some(at)) {
                            return self.stopped();
                        }
                        // Woken past the renewal's instant itself (the
                        // thread stalled): the renewal goes now, unwarmed.
                        if self.runtime.now() < until {
                            self.warm_up(until);
                        }
                        warmed = Some(until);
                        continue;
                    }
                    if !self.runtime.wait(Some(until)) {
                        return self.stopped();
                    }
                }
                Step::Renew { deadline } => {
                    let attempt = self.renew(deadline);
                    if let Some(event) = schedule.record(lease, attempt) {
                        self.runtime.report(event);
                    }
                }
                Step::End(event) => {
                    note_end(lease, &event);
                    if event == Event::Fenced {
                        log::warn!("{}: fenced: no renewal landed in time", lease.key());
                    }
                    self.runtime.report(event.clone());
                    return Some(event);
                }
            }
        }
    }

    /// A wait said stop: nothing more begins (under the mutant
    /// `DriverRenewsAfterStop`, one more renewal does).
    fn stopped(&mut self) -> Option<Event> {
        if mutant::on(Mutant::DriverRenewsAfterStop) {
            if let Some(deadline) = self.lease.write_deadline() {
                let _ = self.renew(deadline);
            }
        }
        None
    }

    /// Warm the store up for the renewal due at `due`, returning by it.
    fn warm_up(&mut self, due: Instant) {
        let work = Work::WarmUp { due };
        // The mutant lets the warm-up run to the write deadline.
        let bound = match self.lease.write_deadline() {
            Some(deadline) if mutant::on(Mutant::DriverWarmsPastDue) => deadline,
            _ => due,
        };
        self.runtime.begins(work);
        let began = self.runtime.now();
        let runtime = &*self.runtime;
        warm_up_guarded_with(self.lease, bound, &|unwind| runtime.passes_through(unwind));
        self.runtime.returned(work, began);
    }

    /// One renewal bounded by `deadline`, a panic in it a loss.
    fn renew(&mut self, deadline: Instant) -> super::Attempt {
        let work = Work::Renewal { deadline };
        // The mutant lets the renewal run a renewal interval past the
        // write deadline.
        let bound = if mutant::on(Mutant::DriverRenewsPastDeadline) {
            deadline + self.lease.renew_interval()
        } else {
            deadline
        };
        self.runtime.begins(work);
        let began = self.runtime.now();
        let runtime = &*self.runtime;
        let attempt =
            renew_guarded_with(self.lease, bound, &|unwind| runtime.passes_through(unwind));
        self.runtime.returned(work, began);
        attempt
    }

    /// The release within the release timeout, a panic in it an error.
    fn release(&mut self) -> Result<Released, LeaseError> {
        let began = self.runtime.now();
        let timeout =
            self.release_timeout + self.lease.store().write_interval().unwrap_or_default();
        let work = Work::Release {
            deadline: began.checked_add(timeout),
        };
        self.runtime.begins(work);
        let runtime = &*self.runtime;
        let released = release_guarded_with(self.lease, self.release_timeout, &|unwind| {
            runtime.passes_through(unwind)
        });
        self.runtime.returned(work, began);
        released
    }

    /// Stopped while the lease's status already says fenced or lost, which
    /// the loop had not woken to see yet (a wall clock stepped, a stop and
    /// the deadline at once): report it now, as the loop would have, so
    /// that the stop says so.
    fn ended_unseen(&mut self) -> Option<Event> {
        let event = match self.lease.status() {
            LeaseStatus::Fenced => {
                self.lease.fence_for_good();
                Event::Fenced
            }
            LeaseStatus::Lost { holder } => Event::Lost {
                holder,
                holder_name: self.lease.lost_to_name(),
                reason: "a refused write marked it lost".to_string(),
            },
            LeaseStatus::Held { .. } | LeaseStatus::Released => return None,
        };
        note_end(self.lease, &event);
        self.runtime.report(event.clone());
        Some(event)
    }

    /// Call the loss callback, if it has not been called yet; a panic in
    /// it is logged, never passed on (but a runtime's own unwind is).
    fn tell_loss(&mut self, loss: &Loss) {
        let Some(callback) = self.on_loss.take() else {
            return;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| callback(loss))) {
            if self.runtime.passes_through(&*panic) {
                resume_unwind(panic);
            }
            log::error!(
                "{}: the loss callback panicked: {}",
                self.lease.key(),
                panic_message(&*panic)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, TestClock};
    use crate::lease::LeaseOptions;
    use crate::memory::MemoryStore;
    use crate::store::{DeleteMode, Object, PutOptions, Store, StoreError, Version};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Arc;

    /// A runtime's own end of a run, as a simulation unwinds with.
    struct OwnEnd;

    /// A memory store whose writes panic once told to: with the runtime's
    /// own payload (1) or a message of their own (2).
    #[derive(Debug, Default)]
    struct Panicky {
        inner: MemoryStore,
        panics: AtomicU8,
    }

    impl Store for Panicky {
        fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
            self.inner.get(key, deadline)
        }

        fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
            match self.panics.load(Ordering::SeqCst) {
                1 => std::panic::panic_any(OwnEnd),
                2 => panic!("boom"),
                _ => self.inner.put(key, body, options),
            }
        }

        fn delete(
            &self,
            key: &str,
            mode: &DeleteMode,
            deadline: Option<Instant>,
        ) -> Result<(), StoreError> {
            self.inner.delete(key, mode, deadline)
        }
    }

    /// A runtime on a test clock whose waits answer as scripted (then
    /// `false`, a stop), moving the clock to each instant that comes.
    struct Script {
        clock: TestClock,
        answers: VecDeque<bool>,
        events: Vec<Event>,
        work: Vec<String>,
    }

    impl Runtime for Script {
        fn now(&self) -> Instant {
            self.clock.now()
        }

        fn wait(&mut self, until: Option<Instant>) -> bool {
            let came = self.answers.pop_front().unwrap_or(false);
            if let (true, Some(at)) = (came, until) {
                self.clock
                    .advance(at.saturating_duration_since(self.clock.now()));
            }
            came
        }

        fn report(&mut self, event: Event) {
            self.events.push(event);
        }

        fn begins(&mut self, work: Work) {
            let name = match work {
                Work::WarmUp { .. } => "warm-up",
                Work::Renewal { .. } => "renewal",
                Work::Release { .. } => "release",
            };
            self.work.push(name.to_string());
        }

        fn returned(&mut self, work: Work, _began: Instant) {
            let by = match work {
                Work::WarmUp { due } => Some(due),
                Work::Renewal { deadline } => Some(deadline),
                Work::Release { deadline } => deadline,
            };
            assert!(by.is_some_and(|by| self.clock.now() <= by), "{work:?}");
        }

        fn passes_through(&self, unwind: &(dyn Any + Send)) -> bool {
            unwind.is::<OwnEnd>()
        }
    }

    fn held(answers: &[bool]) -> (Arc<Panicky>, Lease, Script) {
        let store = Arc::new(Panicky::default());
        let clock = TestClock::new();
        let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
        let lease = Lease::acquire(store.clone(), "db", options).expect("acquired");
        let script = Script {
            clock,
            answers: answers.iter().copied().collect(),
            events: Vec::new(),
            work: Vec::new(),
        };
        (store, lease, script)
    }

    #[test]
    fn a_stop_begins_nothing_but_the_release() {
        let (_, lease, mut script) = held(&[]);
        let (ended, released) = keep(&lease, KeeperOptions::new(), &mut script);
        assert_eq!(ended, None);
        assert_eq!(released, Ok(Released::Freed));
        assert_eq!(script.work, ["release"]);
        assert_eq!(script.events, [Event::Released(Ok(Released::Freed))]);
    }

    #[test]
    fn a_warm_up_by_its_due_then_the_renewal_then_a_stop() {
        let (_, lease, mut script) = held(&[true, true]);
        let (ended, released) = keep(&lease, KeeperOptions::new(), &mut script);
        assert_eq!((ended, released), (None, Ok(Released::Freed)));
        assert_eq!(script.work, ["warm-up", "renewal", "release"]);
        assert!(matches!(script.events[0], Event::Renewed { .. }));
        assert_eq!(script.events.len(), 2, "{:?}", script.events);
    }

    #[test]
    fn a_warm_up_whose_renewal_is_due_already_is_not_begun() {
        let (_, lease, mut script) = held(&[true]);
        let due = lease.confirmed_at() + lease.renew_interval();
        /// The wait for the warm-up's instant oversleeps to the renewal's.
        struct Oversleep<'a>(&'a mut Script, Instant);
        impl Runtime for Oversleep<'_> {
            fn now(&self) -> Instant {
                self.0.now()
            }
            fn wait(&mut self, until: Option<Instant>) -> bool {
                let came = self.0.wait(until);
                if came {
                    self.0.clock.advance(self.1.saturating_duration_since(self.0.now()));
                }
                came
            }
            fn report(&mut self, event: Event) {
                self.0.report(event);
            }
            fn begins(&mut self, work: Work) {
                self.0.begins(work);
            }
        }
        let _ = keep(&lease, KeeperOptions::new(), &mut Oversleep(&mut script, due));
        assert_eq!(script.work, ["renewal", "release"]);
    }

    #[test]
    fn the_runtimes_own_unwind_passes_through_the_renewals_guard() {
        let (store, lease, mut script) = held(&[true, true]);
        store.panics.store(1, Ordering::SeqCst);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            keep(&lease, KeeperOptions::new(), &mut script)
        }));
        // The lease's drop releases it: with writes that answer.
        store.panics.store(0, Ordering::SeqCst);
        assert!(unwound.is_err_and(|payload| payload.is::<OwnEnd>()));
        assert_eq!(script.events, [], "no loss, no event: the run is over");
        assert!(lease.may_write(), "the lease not marked lost");
    }

    #[test]
    fn a_panic_in_the_renewal_is_still_a_loss() {
        let (store, lease, mut script) = held(&[true, true]);
        store.panics.store(2, Ordering::SeqCst);
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let options = KeeperOptions::new().on_loss({
            let heard = Arc::clone(&heard);
            move |loss| heard.lock().unwrap().push(loss.clone())
        });
        let (ended, _) = keep(&lease, options, &mut script);
        assert!(matches!(ended, Some(LeaseError::Lost { .. })), "{ended:?}");
        assert!(
            matches!(&script.events[0], Event::Lost { reason, .. } if reason.contains("boom")),
            "{:?}",
            script.events
        );
        assert!(matches!(heard.lock().unwrap()[..], [Loss::Lost { .. }]));
    }
}
