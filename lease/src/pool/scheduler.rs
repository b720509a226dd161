//! The pool's threads: the scheduler, the pool driver
//! ([`driver::drive`]) on channels and the pool's clock, the renewal threads an inline pool
//! starts when it first needs them, and the thread that calls the loss
//! callback. What the handle sees of the leases (for its stats) is kept
//! here too, as leases come and go.

use super::driver::{self, Wake};
use super::warm_ups::WarmUps;
use super::{
    work, Command, Done, Job, LeaseId, Left, PoolEvent, PoolLoss, PoolSchedule, Releases,
    RemoveReply, StopReply, DEFAULT_RENEWAL_THREADS,
};
use crate::clock::Clock;
use crate::error::LeaseError;
use crate::keeper::panic_message;
use crate::lease::{Lease, Released};
use crate::stats::ByKey;
use crossbeam_channel::{select, Receiver, Sender};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The leases a pool keeps, as its handle sees them, for
/// [`KeeperPool::stats`]: those added and not yet removed, and the totals
/// of those removed, one per key.
#[derive(Debug, Default)]
pub(super) struct Registry {
    pub(super) live: BTreeMap<LeaseId, Arc<Lease>>,
    pub(super) retired: ByKey,
}

impl Registry {
    /// Fold lease `id`'s totals into its key's, as it leaves the pool: one
    /// look-up, however many keys left before it.
    pub(super) fn retire(&mut self, id: LeaseId) {
        if let Some(lease) = self.live.remove(&id) {
            self.retired.add(&lease.stats());
        }
    }
}

/// An inline pool's renewal threads, for the leases of stores that can
/// wait: none until one is needed.
pub(super) struct OnDemand {
    pub(super) jobs: Receiver<Job>,
    pub(super) name: String,
    pub(super) threads: Vec<JoinHandle<()>>,
}

/// The scheduler thread's side of the pool driver ([`driver::drive`]):
/// channels for commands, jobs, outcomes and events, and the pool's clock.
pub(super) struct Scheduler {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) release_timeout: Duration,
    /// Renewing inline (`renewal_threads(0)`): the threads for the jobs
    /// that may not run here.
    pub(super) inline: Option<OnDemand>,
    pub(super) commands: Receiver<Command>,
    pub(super) jobs: Sender<Job>,
    pub(super) done: Receiver<Done>,
    pub(super) done_tx: Sender<Done>,
    pub(super) events: Sender<PoolEvent>,
    /// The pool's count of its leases.
    pub(super) len: Arc<AtomicUsize>,
    /// The warm-ups, off the renewal threads.
    pub(super) warm_ups: WarmUps,
    /// What the handle asks for stats, kept as leases come and go.
    pub(super) registry: Arc<Mutex<Registry>>,
    /// Where the loss callback's thread takes its calls, if there is one.
    pub(super) losses: Option<Sender<PoolLoss>>,
}

impl Scheduler {
    /// The scheduler thread's whole life: the pool driver on this runtime.
    /// Once it returns, dropping `jobs` ends the renewal threads.
    pub(super) fn run(mut self) {
        let (inline, release_timeout) = (self.inline.is_some(), self.release_timeout);
        driver::drive(&mut self, inline, release_timeout);
    }

    /// Close the job queue, and join the threads an inline pool started.
    fn end_on_demand_threads(&mut self) {
        let Some(on_demand) = self.inline.take() else {
            return;
        };
        let (closed, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.jobs, closed));
        for thread in on_demand.threads {
            let _ = thread.join();
        }
    }
}

impl driver::Runtime for Scheduler {
    type Reply = RemoveReply;
    type StopReply = StopReply;

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn wait(&mut self, until: Option<Instant>, _: &PoolSchedule) -> Wake<RemoveReply, StopReply> {
        let timer = match until {
            Some(at) => self.clock.timer(at),
            None => crossbeam_channel::never(),
        };
        select! {
            recv(self.commands) -> command => match command {
                Ok(Command::Add(id, lease)) => Wake::Add(id, lease),
                Ok(Command::Remove(id, reply)) => Wake::Remove(id, reply),
                Ok(Command::Stop(reply)) => Wake::Stop(Some(reply)),
                // The handle is gone without a stop: release everything.
                Err(_) => {
                    self.commands = crossbeam_channel::never();
                    Wake::Stop(None)
                }
            },
            // `done_tx` lives as long as this runtime: never closed.
            recv(self.done) -> done => done.map_or(Wake::Due, Wake::Done),
            recv(timer) -> _ => Wake::Due,
        }
    }

    /// To a renewal thread; an inline pool starts its own the first time.
    fn hand_out(&mut self, job: Job) -> Result<(), Job> {
        if let Some(on_demand) = &mut self.inline {
            if !on_demand.start(self.release_timeout, &self.done_tx) {
                return Err(job);
            }
        }
        self.jobs.send(job).map_err(|e| e.into_inner())
    }

    fn warm_up(&mut self, lease: Arc<Lease>, due: Instant) {
        self.warm_ups.send(lease, due);
    }

    fn report(&mut self, event: PoolEvent, _: &PoolSchedule) {
        let _ = self.events.send(event);
    }

    fn tell(&mut self, loss: PoolLoss) {
        if let Some(losses) = &self.losses {
            let _ = losses.send(loss);
        }
    }

    fn answer(&mut self, reply: RemoveReply, answer: Option<Result<Released, LeaseError>>) {
        let _ = reply.send(answer);
    }

    fn stopped(&mut self, reply: Option<StopReply>, releases: Releases) {
        if let Some(reply) = reply {
            let _ = reply.send(releases);
        }
        self.end_on_demand_threads();
    }

    /// Its totals folded into its key's.
    fn left(&mut self, left: &Left) {
        self.len.fetch_sub(1, Ordering::SeqCst);
        let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        registry.retire(left.id);
    }
}

impl OnDemand {
    /// Start the renewal threads, once; whether there are any.
    pub(super) fn start(&mut self, release_timeout: Duration, done: &Sender<Done>) -> bool {
        if self.threads.is_empty() {
            for i in 0..DEFAULT_RENEWAL_THREADS {
                let (jobs, done) = (self.jobs.clone(), done.clone());
                let started = std::thread::Builder::new()
                    .name(format!("{}-{i}", self.name))
                    .spawn(move || {
                        for job in jobs {
                            let _ = done.send(work(job, release_timeout));
                        }
                    });
                match started {
                    Ok(thread) => self.threads.push(thread),
                    Err(e) => {
                        log::warn!("a pool's renewal thread could not start: {e}");
                        break;
                    }
                }
            }
        }
        !self.threads.is_empty()
    }
}

/// Start the thread that calls `callback` for each loss sent to the
/// returned channel, one at a time, until the channel closes.
pub(super) fn loss_notices(
    name: &str,
    callback: Arc<dyn Fn(&PoolLoss) + Send + Sync>,
) -> std::io::Result<(Sender<PoolLoss>, JoinHandle<()>)> {
    let (notices, received) = crossbeam_channel::unbounded::<PoolLoss>();
    let thread = std::thread::Builder::new()
        .name(format!("{name}-loss"))
        .spawn(move || {
            for notice in received {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| callback(&notice))) {
                    log::error!(
                        "{}: the pool's loss callback panicked: {}",
                        notice.key,
                        panic_message(&*panic)
                    );
                }
            }
        })?;
    Ok((notices, thread))
}
