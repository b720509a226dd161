//! A [`bucket_lease_core::Keeper`] as a program holds one: the program's
//! real `Lease` handed over to it, the real [`RenewalSchedule`] driven on a
//! simulated thread as the keeper's thread drives it, its events, and
//! `stop` (or drop) releasing the lease on that thread with the real
//! [`Lease::release_before`] within the keeper's release timeout, the
//! caller waiting until it is done.
//!
//! The real `Keeper` starts an OS thread the simulation cannot schedule,
//! so this module is its thread. What differs: a panic in a renewal is
//! not caught (nothing panics here), and there is no loss callback; the
//! lease's calls and state are the real ones.

use super::super::sched::{current, Nanos, Shared, SEC};
use super::super::values::ValueId;
use bucket_lease_core::keeper::{Attempt, Event, RenewalSchedule, Step, DEFAULT_RELEASE_TIMEOUT};
use bucket_lease_core::lease::{Lease, Released};
use bucket_lease_core::LeaseError;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the keeper's thread and its handle share.
#[derive(Debug, Default)]
struct State {
    /// Asked to stop, and by which thread (woken when the release is done).
    stop: Option<usize>,
    /// Events not read yet.
    events: VecDeque<Event>,
    /// The renewal loop ended (fenced or lost).
    ended: bool,
    /// The release at stop, once done.
    released: Option<Result<Released, LeaseError>>,
}

/// A running keeper: its lease, and its thread.
#[derive(Debug)]
pub(crate) struct SimKeeper {
    lease: Arc<Lease>,
    state: Arc<Mutex<State>>,
    thread: usize,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimKeeper {
    /// Start keeping `lease` (value `value` of contender `c`), as
    /// `Keeper::spawn` does with the lease moved into it.
    pub(crate) fn spawn(sh: &Arc<Shared>, c: usize, value: ValueId, lease: Arc<Lease>) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let thread = {
            let (lease, state) = (Arc::clone(&lease), Arc::clone(&state));
            sh.spawn(c, move |sh| renew(&sh, c, value, &lease, &state))
        };
        SimKeeper {
            lease,
            state,
            thread,
        }
    }

    /// The kept lease (`Keeper::lease`).
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// `Keeper::may_write`.
    pub(crate) fn may_write(&self) -> bool {
        self.lease.may_write()
    }

    /// The events reported since the last call (`Keeper::events`).
    pub(crate) fn events(&self) -> Vec<Event> {
        lock(&self.state).events.drain(..).collect()
    }

    /// Whether the renewal loop ended, fenced or lost (what a loss
    /// callback would have heard).
    pub(crate) fn ended(&self) -> bool {
        lock(&self.state).ended
    }

    /// `Keeper::stop` (and `Keeper`'s drop, which ignores the answer): the
    /// thread stops renewing after a renewal in flight, releases the
    /// lease, and this call returns the release once it is done.
    pub(crate) fn stop(self, sh: &Shared) -> Result<Released, LeaseError> {
        lock(&self.state).stop = Some(current());
        Shared::interrupt(&mut sh.lock(), self.thread);
        loop {
            if let Some(released) = lock(&self.state).released.take() {
                return released;
            }
            let t = sh.lock().sched.now;
            sh.wait_until(t + 3600 * SEC);
        }
    }
}

/// The keeper's thread: the schedule's steps until stopped, then the
/// release (the real keeper's `Renewer::run`).
fn renew(sh: &Arc<Shared>, c: usize, value: ValueId, lease: &Lease, state: &Mutex<State>) {
    sh.lock().act_for(current(), value);
    let mut schedule = RenewalSchedule::new(lease);
    let report = |event: Event| {
        let mut w = sh.lock();
        let text = format!("{event:?}");
        w.log(|| format!("c{c} v{value} keeper event: {text}"));
        lock(state).events.push_back(event);
    };
    while lock(state).stop.is_none() {
        if lock(state).ended {
            let t = sh.lock().sched.now;
            sh.wait_until(t + 3600 * SEC);
            continue;
        }
        match schedule.step(lease) {
            Step::Wait { until } => {
                let until: Nanos = sh.lock().nanos_of(until);
                sh.wait_until(until);
            }
            Step::Renew { deadline } => {
                let started = lease.clock().now();
                let renewed = lease.renew_before(Some(deadline));
                {
                    let mut w = sh.lock();
                    let (began, limit) = (w.nanos_of(started), w.nanos_of(deadline));
                    w.returned_by(c, "keeper's renewal", began, limit);
                }
                let attempt = match renewed {
                    Ok(()) => {
                        Attempt::Renewed(lease.clock().now().saturating_duration_since(started))
                    }
                    Err(LeaseError::Lost { holder, .. }) => Attempt::Lost {
                        holder,
                        reason: "the record was replaced or deleted".to_string(),
                    },
                    Err(error) => Attempt::Failed(error),
                };
                if let Some(event) = schedule.record(lease, attempt) {
                    report(event);
                }
            }
            Step::End(event) => {
                report(event);
                lock(state).ended = true;
            }
        }
    }
    let deadline = lease.clock().now() + DEFAULT_RELEASE_TIMEOUT;
    let released = lease.release_before(Some(deadline));
    report(Event::Released(released.clone()));
    let stopper = {
        let mut s = lock(state);
        s.released = Some(released);
        s.stop
    };
    if let Some(tid) = stopper {
        Shared::interrupt(&mut sh.lock(), tid);
    }
}
