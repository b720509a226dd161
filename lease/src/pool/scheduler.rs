//! The pool's threads: the scheduler that drives a [`PoolSchedule`] with
//! channels and the pool's clock, the renewal threads an inline pool
//! starts when it first needs them, and the thread that calls the loss
//! callback. What the handle sees of the leases (for its stats) is kept
//! here too, as leases come and go.

use super::warm_ups::WarmUps;
use super::{
    prefix_of, runs_on_scheduler, work, Command, Done, Job, LeaseId, PoolEvent, PoolLoss,
    PoolSchedule, Releases, RemoveReply, StopReply, DEFAULT_RENEWAL_THREADS,
};
use crate::clock::Clock;
use crate::error::LeaseError;
use crate::keeper::{panic_message, Event, Loss};
use crate::lease::{Lease, Released};
use crate::stats::ByKey;
use crossbeam_channel::{select, Receiver, Sender};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// The scheduler thread: drives a [`PoolSchedule`] with channels and the
/// pool's clock.
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
    pub(super) machine: PoolSchedule,
    /// Who waits for each lease being removed (a remove asked twice is
    /// answered twice).
    pub(super) removers: HashMap<LeaseId, Vec<RemoveReply>>,
    /// The stop in progress, and the releases it collected.
    pub(super) stopping: Option<(Option<StopReply>, Releases)>,
    /// The pool's count of its leases.
    pub(super) len: Arc<AtomicUsize>,
    /// The warm-ups, off the renewal threads.
    pub(super) warm_ups: WarmUps,
    /// What the handle asks for stats, kept as leases come and go.
    pub(super) registry: Arc<Mutex<Registry>>,
    /// The losses of the leases that left by themselves, for a later
    /// `remove` (the newest [`DEPARTED_KEPT`]).
    pub(super) departed: BTreeMap<LeaseId, LeaseError>,
    /// Where the loss callback's thread takes its calls, if there is one.
    pub(super) losses: Option<Sender<PoolLoss>>,
}

/// How many departed leases' losses a pool keeps for `remove` to return;
/// an older one's `remove` answers `None`, as for an id never held.
pub(super) const DEPARTED_KEPT: usize = 10_000;

impl Scheduler {
    pub(super) fn run(mut self) {
        loop {
            if self.stopping.is_some() && self.machine.is_empty() {
                if let Some((Some(reply), released)) = self.stopping.take() {
                    let _ = reply.send(released);
                }
                self.end_on_demand_threads();
                return; // dropping `jobs` ends the renewal threads
            }
            let timer = match self.machine.next_wake() {
                Some(at) => self.clock.timer(at),
                None => crossbeam_channel::never(),
            };
            let (mut jobs, mut events) = (Vec::new(), Vec::new());
            select! {
                recv(self.commands) -> command => match command {
                    Ok(Command::Add(id, lease)) => self.machine.add(id, lease, &mut jobs, &mut events),
                    Ok(Command::Remove(id, reply)) => {
                        if self.machine.remove(id, &mut jobs, &mut events) {
                            self.removers.entry(id).or_default().push(reply);
                        } else {
                            let _ = reply.send(self.departed.get(&id).cloned().map(Err));
                        }
                    }
                    Ok(Command::Stop(reply)) => self.stop(Some(reply), &mut jobs, &mut events),
                    // The handle is gone without a stop: release everything.
                    Err(_) => {
                        self.commands = crossbeam_channel::never();
                        self.stop(None, &mut jobs, &mut events);
                    }
                },
                recv(self.done) -> done => {
                    if let Ok(done) = done {
                        if let Some(left) = self.machine.finish(done, &mut jobs, &mut events) {
                            let (id, released) = (left.id, left.answer());
                            self.len.fetch_sub(1, Ordering::SeqCst);
                            self.left(id, &left.released, left.loss.is_some());
                            if let Some(loss) = &left.loss {
                                // For any later `remove` of it too.
                                self.depart(id, loss.clone());
                            }
                            match self.removers.remove(&id) {
                                Some(replies) => {
                                    for reply in replies {
                                        let _ = reply.send(Some(released.clone()));
                                    }
                                }
                                None => {
                                    if let Some((_, all)) = self.stopping.as_mut() {
                                        all.push((id, released));
                                    }
                                }
                            }
                        }
                    }
                },
                recv(timer) -> _ => self.machine.run_due(self.clock.now(), &mut jobs, &mut events),
            }
            for event in events {
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
                let _ = self.events.send(event);
                if let Some(notice) = notice {
                    // After the event, as a keeper calls its callback.
                    self.tell(notice);
                }
            }
            for job in jobs {
                self.dispatch(job);
            }
        }
    }

    /// Lease `id`'s release is done: its totals are folded into its key's,
    /// and a release that failed, or found the record another's, is a loss
    /// (unless the lease had ended already, which was told then).
    fn left(&mut self, id: LeaseId, released: &Result<Released, LeaseError>, had_loss: bool) {
        let lease = {
            let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            let lease = registry.live.get(&id).cloned();
            registry.retire(id);
            lease
        };
        if had_loss {
            return;
        }
        let loss = match released {
            Err(e) => Loss::NotReleased(e.clone()),
            Ok(Released::LeftAlone {
                holder: holder @ Some(_),
                holder_name,
            }) => Loss::Lost {
                holder: holder.clone(),
                holder_name: holder_name.clone(),
                reason: "the release found the record another holder's".to_string(),
            },
            Ok(_) => return,
        };
        if let Some(lease) = lease {
            self.tell(PoolLoss {
                id,
                prefix: prefix_of(lease.key()).to_string(),
                key: lease.key().to_string(),
                loss,
            });
        }
    }

    /// Keep lease `id`'s `loss` for a later `remove`, forgetting the oldest
    /// past [`DEPARTED_KEPT`].
    fn depart(&mut self, id: LeaseId, loss: LeaseError) {
        self.departed.insert(id, loss);
        while self.departed.len() > DEPARTED_KEPT {
            self.departed.pop_first();
        }
    }

    /// Hand `notice` to the loss callback's thread, if there is one.
    fn tell(&self, notice: PoolLoss) {
        if let Some(losses) = &self.losses {
            let _ = losses.send(notice);
        }
    }

    /// Remove every lease; answer `reply` once all are released.
    fn stop(&mut self, reply: Option<StopReply>, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) {
        self.stopping.get_or_insert((None, Vec::new())).0 = reply;
        for id in self.machine.ids() {
            self.machine.remove(id, jobs, events);
        }
    }

    /// Hand `job` to a renewal thread, or do it here when renewing inline
    /// and its store answers at once; a job that cannot go to a thread
    /// (none could be started) is done here all the same.
    fn dispatch(&mut self, job: Job) {
        // A warm-up never takes a renewal thread (see `pool/warm_ups.rs`);
        // one of a store that answers at once (it cannot wait) is done here.
        if let Job::WarmUp(lease, due) = &job {
            if !runs_on_scheduler(true, &job) {
                self.warm_ups.send(Arc::clone(lease), *due);
                return;
            }
            let _ = self.done_tx.send(work(job, self.release_timeout));
            return;
        }
        let here = match &mut self.inline {
            None => false,
            Some(_) if runs_on_scheduler(true, &job) => true,
            Some(on_demand) => !on_demand.start(self.release_timeout, &self.done_tx),
        };
        let job = if here {
            job
        } else {
            match self.jobs.send(job) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            }
        };
        let _ = self.done_tx.send(work(job, self.release_timeout));
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
