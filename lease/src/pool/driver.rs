//! The pool driver: the scheduler's loop around a [`PoolSchedule`],
//! written once (issue 41).
//!
//! [`drive`] takes what comes (a lease added, a remove, a stop, a job's
//! outcome, a wake-up), hands it to the machine, reports the machine's
//! events, tells the losses, answers removes and the stop, and hands out
//! the machine's jobs: to a renewal thread, to the warm-ups' thread, or
//! done on the scheduler's own thread when [`runs_on_scheduler`] says so
//! (or no renewal thread can take it). It runs on a [`Runtime`]: the time
//! now, a wait until an instant or a message, where jobs go, where events,
//! losses and answers go. The [`KeeperPool`](super::KeeperPool)'s
//! scheduler thread gives it channels and the pool's clock
//! (`pool/scheduler.rs`); the simulation gives it its scheduler
//! (`sim/src/pooled.rs`, `sim/src/program/pool.rs`), so the loop the
//! simulation searches is the loop that ships.
//!
//! What it promises its runtime, besides the pool's own promises (the
//! [module docs](super)):
//!
//! - **Nothing of a lease is handed out after its remove or the stop but
//!   its release** (and a warm-up already set): a renewal out then is waited
//!   for, never a new one begun.
//! - **Each event goes out as the machine made it, in order**, the lease's
//!   state forbidding writes before its `Fenced` or `Lost` (the machine's
//!   rule), and each loss is told ([`Runtime::tell`]) after its event.
//! - **A job done here is taken back before the next wait**: its outcome is
//!   the next thing the machine hears.
//! - **Stale wake-ups are harmless**: a wake-up that finds nothing due (the
//!   lease renewed, removed or gone since) steps nothing.
//! - **The stop ends it**: every lease removed and released, the stop
//!   answered with each release, then [`drive`] returns.

use super::{
    prefix_of, runs_on_scheduler, Done, Job, LeaseId, Left, PoolEvent, PoolLoss, PoolSchedule,
    Releases,
};
use crate::error::LeaseError;
use crate::keeper::{Event, Loss};
use crate::lease::{Lease, Released};
use crate::mutant::{self, Mutant};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many departed leases' losses a driver keeps for `remove` to return;
/// an older one's `remove` answers `None`, as for an id never held.
pub(super) const DEPARTED_KEPT: usize = 10_000;

internal! {
/// What a [`Runtime`]'s wait brought.
#[derive(Debug)]
pub enum Wake<Reply, StopReply> {
    /// Keep this lease from now on ([`KeeperPool::add`](super::KeeperPool::add)).
    Add(LeaseId, Arc<Lease>),
    /// Stop keeping this lease and release it; the answer goes to the
    /// reply ([`Runtime::answer`]).
    Remove(LeaseId, Reply),
    /// Release every lease, then end; `None` when the pool's handle is gone
    /// with no stop asked.
    Stop(Option<StopReply>),
    /// A job's outcome.
    Done(Done),
    /// The instant waited for came (or something else woke the wait: the
    /// machine steps whatever is due by now, if anything).
    Due,
}
}

internal! {
/// What a pool driver ([`drive`]) runs on.
pub trait Runtime {
    /// Who waits for a remove's answer.
    type Reply;
    /// Who waits for the stop's releases.
    type StopReply;

    /// The monotonic instant now, on the pool's clock.
    fn now(&self) -> Instant;

    /// Wait until `until` (for ever when `None`) or a message, whichever
    /// comes first; `machine` is there to be looked at (a simulation notes
    /// its leases' deadlines).
    fn wait(
        &mut self,
        until: Option<Instant>,
        machine: &PoolSchedule,
    ) -> Wake<Self::Reply, Self::StopReply>;

    /// Hand a renewal or a release to a renewal thread, starting them if
    /// need be; the job back when none can take it (the driver then does
    /// it itself).
    ///
    /// # Errors
    ///
    /// The job, when no renewal thread can take it.
    fn hand_out(&mut self, job: Job) -> Result<(), Job>;

    /// Have `lease`'s store warmed up for its renewal due at `due`, off the
    /// renewal threads (best effort).
    fn warm_up(&mut self, lease: Arc<Lease>, due: Instant);

    /// Do `job` on the driver's own thread.
    fn run_here(&mut self, job: Job, release_timeout: Duration) -> Done {
        super::work(job, release_timeout)
    }

    /// Hand `event` to the pool's owner; `machine` as it is when the event
    /// is reported.
    fn report(&mut self, event: PoolEvent, machine: &PoolSchedule);

    /// Hand a loss to the loss callback. The default does nothing.
    fn tell(&mut self, loss: PoolLoss) {
        let _ = loss;
    }

    /// Answer a remove: `None` for a lease the pool does not hold (and
    /// whose loss it no longer keeps).
    fn answer(&mut self, reply: Self::Reply, answer: Option<Result<Released, LeaseError>>);

    /// Answer the stop with every lease's release; the driver then returns.
    /// The default does nothing.
    fn stopped(&mut self, reply: Option<Self::StopReply>, releases: Releases) {
        let _ = (reply, releases);
    }

    /// A lease left the machine, its release done (before its loss, if any,
    /// is told and its remove answered). The default does nothing.
    fn left(&mut self, left: &Left) {
        let _ = left;
    }
}
}

internal! {
/// Drive a [`PoolSchedule`] on `runtime` until a stop is done: the whole
/// life of a [`KeeperPool`](super::KeeperPool)'s scheduler thread, and of
/// the simulation's pools. `inline`: the pool renews on this thread the
/// jobs [`runs_on_scheduler`] gives it (`renewal_threads(0)`).
pub fn drive<R: Runtime + ?Sized>(runtime: &mut R, inline: bool, release_timeout: Duration) {
    Driver {
        runtime,
        inline,
        release_timeout,
        machine: PoolSchedule::new(),
        removers: HashMap::new(),
        stopping: None,
        departed: BTreeMap::new(),
        here: VecDeque::new(),
        held_back: Vec::new(),
    }
    .run();
}
}

/// A pool's scheduler on its runtime.
struct Driver<'a, R: Runtime + ?Sized> {
    runtime: &'a mut R,
    inline: bool,
    release_timeout: Duration,
    machine: PoolSchedule,
    /// Who waits for each lease being removed (a remove asked twice is
    /// answered twice).
    removers: HashMap<LeaseId, Vec<R::Reply>>,
    /// The stop in progress, and the releases it collected.
    stopping: Option<(Option<R::StopReply>, Releases)>,
    /// The losses of the leases that left by themselves, for a later
    /// `remove` (the newest [`DEPARTED_KEPT`]).
    departed: BTreeMap<LeaseId, LeaseError>,
    /// The outcomes of jobs done here, taken before the next wait.
    here: VecDeque<Done>,
    /// Under the mutant `DriverPoolFencesLate`: `Fenced` events held back
    /// until the next wake-up.
    held_back: Vec<PoolEvent>,
}

impl<R: Runtime + ?Sized> Driver<'_, R> {
    fn run(mut self) {
        loop {
            if self.stopping.is_some() && self.machine.is_empty() && self.here.is_empty() {
                if let Some((reply, releases)) = self.stopping.take() {
                    self.runtime.stopped(reply, releases);
                }
                return;
            }
            let wake = match self.here.pop_front() {
                Some(done) => Wake::Done(done),
                None => self
                    .runtime
                    .wait(self.machine.next_wake(), &self.machine),
            };
            let (mut jobs, mut events) = (Vec::new(), Vec::new());
            events.append(&mut self.held_back);
            let mut left = None;
            match wake {
                Wake::Add(id, lease) => self.machine.add(id, lease, &mut jobs, &mut events),
                Wake::Remove(id, reply) => {
                    if self.remove(id, &mut jobs, &mut events) {
                        self.removers.entry(id).or_default().push(reply);
                    } else {
                        let answer = self.departed.get(&id).cloned().map(Err);
                        self.runtime.answer(reply, answer);
                    }
                }
                Wake::Stop(reply) => {
                    self.stopping.get_or_insert((None, Vec::new())).0 = reply;
                    for id in self.machine.ids() {
                        self.remove(id, &mut jobs, &mut events);
                    }
                }
                Wake::Done(done) => left = self.machine.finish(done, &mut jobs, &mut events),
                Wake::Due => {
                    let now = self.runtime.now();
                    self.machine.run_due(now, &mut jobs, &mut events);
                }
            }
            self.report(events);
            if let Some(left) = left {
                self.leave(left);
            }
            for job in jobs {
                self.dispatch(job);
            }
        }
    }

    /// Ask the machine to remove lease `id`; whether it held it.
    fn remove(&mut self, id: LeaseId, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) -> bool {
        if !self.machine.remove(id, jobs, events) {
            return false;
        }
        if mutant::on(Mutant::DriverPoolRenewsAfterRemove) {
            // The mutant renews the lease once more as it is removed.
            if let Some(kept) = self.machine.leases.get(&id) {
                if let Some(deadline) = kept.lease.fence_deadline() {
                    jobs.push(Job::Renew(id, Arc::clone(&kept.lease), deadline));
                }
            }
        }
        true
    }

    /// Report each event in order, and after each loss's event, tell it.
    fn report(&mut self, events: Vec<PoolEvent>) {
        for event in events {
            if event.event == Event::Fenced && mutant::on(Mutant::DriverPoolFencesLate) {
                self.held_back.push(event);
                continue;
            }
            let loss = match &event.event {
                Event::Fenced => Some(Loss::Fenced),
                Event::Lost {
                    holder,
                    holder_name,
                    reason,
                } => Some(Loss::Lost {
                    holder: holder.clone(),
                    holder_name: holder_name.clone(),
                    reason: reason.clone(),
                }),
                _ => None,
            };
            let notice = loss.map(|loss| PoolLoss {
                id: event.id,
                prefix: event.prefix.clone(),
                key: event.key.clone(),
                loss,
            });
            self.runtime.report(event, &self.machine);
            if let Some(notice) = notice {
                // After the event, as a keeper calls its callback.
                self.runtime.tell(notice);
            }
        }
    }

    /// Lease `left.id` left the machine, its release done: a release that
    /// failed, or found the record another's, is a loss (unless the lease
    /// had ended already, which was told then); whoever removes it, now or
    /// later, is told its answer.
    fn leave(&mut self, left: Left) {
        self.runtime.left(&left);
        let id = left.id;
        let answer = left.answer();
        match &left.loss {
            Some(loss) => {
                // For any later `remove` of it too.
                self.departed.insert(id, loss.clone());
                while self.departed.len() > DEPARTED_KEPT {
                    self.departed.pop_first();
                }
            }
            None => {
                if let Some(loss) = Loss::of_release(&left.released) {
                    self.runtime.tell(PoolLoss {
                        id,
                        prefix: prefix_of(&left.key).to_string(),
                        key: left.key.clone(),
                        loss,
                    });
                }
            }
        }
        match self.removers.remove(&id) {
            Some(replies) => {
                for reply in replies {
                    self.runtime.answer(reply, Some(answer.clone()));
                }
            }
            None => {
                if let Some((_, all)) = self.stopping.as_mut() {
                    all.push((id, answer));
                }
            }
        }
    }

    /// Hand `job` out, or do it here: a warm-up to the warm-ups' thread
    /// unless its store answers at once; a renewal or a release here when
    /// the pool renews inline and its store answers at once, else to a
    /// renewal thread (here when none can take it).
    fn dispatch(&mut self, mut job: Job) {
        if let Job::WarmUp(lease, due) = &job {
            if !runs_on_scheduler(true, &job) {
                self.runtime.warm_up(Arc::clone(lease), *due);
                return;
            }
        } else if !runs_on_scheduler(self.inline, &job) {
            match self.runtime.hand_out(job) {
                Ok(()) => return,
                Err(back) => job = back,
            }
        }
        let done = self.runtime.run_here(job, self.release_timeout);
        self.here.push_back(done);
    }
}
