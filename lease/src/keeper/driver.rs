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
//!   an end the loop had not woken to see, if any, and releases. A
//!   renewal begins only on a wait's word: one due with no wait since the
//!   last store call (a warm-up that returned at its due instant, a
//!   renewal that landed at the write deadline) asks a wait until now
//!   first, so that a stop asked meanwhile wins.
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
    note_end, panic_message, release_deadline, release_guarded_with, renew_guarded_with,
    warm_up_guarded_with, warm_up_lead, Ended, Event, KeeperOptions, Loss, OnLoss, RenewalSchedule,
    Step,
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
            .filter(|_| self.lease.fence_status() != LeaseStatus::Released);
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
        // Another's record, live or not (taken over and freed since,
        // broken): not held to the end, as `stop` says.
        if let Some(loss) = Loss::of_release(&released) {
            self.tell_loss(&loss);
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
        // Whether the last thing done was a wait that said its instant
        // came (no store call since): a renewal begins only then.
        let mut woke = false;
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
                        woke = true;
                        // Woken past the renewal's instant itself (the
                        // thread stalled): the renewal goes now, unwarmed.
                        if self.runtime.now() < until {
                            self.warm_up(until);
                            woke = false;
                        }
                        warmed = Some(until);
                        continue;
                    }
                    if !self.runtime.wait(Some(until)) {
                        return self.stopped();
                    }
                    woke = true;
                }
                Step::Renew { deadline } => {
                    // Due with no wait since the last store call (a warm-up
                    // that returned at its due instant, a renewal that
                    // landed at the write deadline, a lease handed over
                    // late): ask the runtime first, so that a stop asked
                    // meanwhile wins over the due instant.
                    if !woke {
                        let now = self.runtime.now();
                        if !self.runtime.wait(Some(now)) {
                            return self.stopped();
                        }
                    }
                    woke = false;
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
            if let Some(deadline) = self.lease.fence_deadline() {
                let _ = self.renew(deadline);
            }
        }
        None
    }

    /// Warm the store up for the renewal due at `due`, returning by it.
    fn warm_up(&mut self, due: Instant) {
        let work = Work::WarmUp { due };
        // The mutant lets the warm-up run to the write deadline.
        let bound = match self.lease.fence_deadline() {
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
        let deadline = release_deadline(self.lease, self.release_timeout);
        let work = Work::Release { deadline };
        self.runtime.begins(work);
        let runtime = &*self.runtime;
        let released = release_guarded_with(self.lease, deadline, &|unwind| {
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
        let event = match self.lease.fence_status() {
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
