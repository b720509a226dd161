//! A [`bucket_lease_core::Keeper`] as a program holds one: the program's
//! real `Lease` handed over to it, the core's keeper driver (the loop the
//! real keeper's thread runs: warm-ups, renewals, the end, the loss
//! callback, the release) on a simulated thread ([`crate::driven`]), its
//! events, and `stop` (or drop) releasing the lease on that thread within
//! the keeper's release timeout, the caller waiting until it is done.
//!
//! The real `Keeper` starts an OS thread the simulation cannot schedule,
//! so this module is its thread and its handle: the driver is the real
//! one, with a loss callback that marks the keeper ended (`ended`, as
//! `run_while_held` hears it); the lease's calls and state are the real
//! ones.

use super::super::driven::drive;
use super::super::sched::{current, Shared, SEC};
use super::super::values::ValueId;
use bucket_lease_core::keeper::{Event, KeeperOptions, DEFAULT_RELEASE_TIMEOUT};
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
    /// The lease ended other than by a clean release (the loss callback
    /// was called: fenced or lost).
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

/// The keeper's thread: the core's keeper driver ([`crate::driven`]),
/// as the real keeper's thread runs it, with a loss callback that marks
/// the keeper ended; then the release handed to whoever stopped it.
fn renew(sh: &Arc<Shared>, c: usize, value: ValueId, lease: &Lease, state: &Arc<Mutex<State>>) {
    sh.lock().act_for(current(), value);
    let options = KeeperOptions::new()
        .release_timeout(DEFAULT_RELEASE_TIMEOUT)
        .on_loss({
            let (sh, state) = (Arc::clone(sh), Arc::clone(state));
            move |loss| {
                let text = loss.to_string();
                sh.lock()
                    .log(|| format!("c{c} v{value} keeper's loss callback: {text}"));
                lock(&state).ended = true;
            }
        });
    let (_, released) = drive(
        sh,
        c,
        format!("c{c} v{value} keeper"),
        lease,
        options,
        || lock(state).stop.is_some(),
        |event| lock(state).events.push_back(event),
    );
    let stopper = {
        let mut s = lock(state);
        s.released = Some(released);
        s.stop
    };
    if let Some(tid) = stopper {
        Shared::interrupt(&mut sh.lock(), tid);
    }
}
