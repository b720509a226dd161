//! A [`bucket_lease_core::KeeperPool`] as a program holds one: the real
//! [`PoolSchedule`] driven on a simulated scheduler thread as the pool's
//! scheduler drives it, and its jobs done by the real [`work`] on
//! simulated renewal threads (or inline, for a pool of 0 renewal threads).
//! `add` hands the program's real `Lease` to the machine; `remove` asks
//! the machine to release it and waits for that release, as the real one
//! does, and says `None` for an id the pool no longer holds.
//!
//! The real pool starts OS threads the simulation cannot schedule, so
//! this module is its threads. What differs: its scheduler takes every
//! command and finished job at once each time it wakes, where the real
//! one takes one of those ready; the machine, the leases and the jobs'
//! calls are the real ones.

use super::super::sched::{current, Shared, SEC};
use super::super::values::ValueId;
use bucket_lease_core::clock::Clock;
use bucket_lease_core::keeper::DEFAULT_RELEASE_TIMEOUT;
use bucket_lease_core::lease::{Lease, Released};
use bucket_lease_core::pool::{work, Done, Job, LeaseId, PoolEvent, PoolSchedule};
use bucket_lease_core::LeaseError;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// A command to the scheduler.
#[derive(Debug)]
enum Command {
    Add(LeaseId, Arc<Lease>),
    Remove(LeaseId),
}

/// What the pool's threads and its handle share.
#[derive(Debug, Default)]
struct Queues {
    commands: VecDeque<Command>,
    jobs: VecDeque<Job>,
    done: VecDeque<Done>,
    events: VecDeque<PoolEvent>,
    /// The renewal threads, and the scheduler's.
    workers: Vec<usize>,
    scheduler: usize,
    /// Which value each lease of the pool is.
    values: HashMap<LeaseId, ValueId>,
    /// Each removal's answer once known, and who waits for it.
    removed: HashMap<LeaseId, Option<Result<Released, LeaseError>>>,
    remover: Option<usize>,
}

fn lock(q: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running pool.
#[derive(Debug)]
pub(crate) struct SimPool {
    queues: Arc<Mutex<Queues>>,
    next: usize,
}

impl SimPool {
    /// Start the scheduler and `threads` renewal threads of contender `c`
    /// (`KeeperPool::spawn`), waiting on `clock`.
    pub(crate) fn spawn(sh: &Arc<Shared>, c: usize, threads: usize, clock: Arc<dyn Clock>) -> Self {
        let queues = Arc::new(Mutex::new(Queues::default()));
        let scheduler = {
            let q = Arc::clone(&queues);
            sh.spawn(c, move |sh| schedule(&sh, c, &q, &*clock, threads == 0))
        };
        lock(&queues).scheduler = scheduler;
        for _ in 0..threads {
            let q = Arc::clone(&queues);
            let tid = sh.spawn(c, move |sh| renewal_thread(&sh, &q));
            lock(&queues).workers.push(tid);
        }
        SimPool { queues, next: 0 }
    }

    /// Keep `lease`, value `value`, from now on (`KeeperPool::add`); its id.
    pub(crate) fn add(&mut self, sh: &Shared, value: ValueId, lease: Arc<Lease>) -> LeaseId {
        let id = LeaseId::from_index(self.next);
        self.next += 1;
        let scheduler = {
            let mut q = lock(&self.queues);
            q.values.insert(id, value);
            q.commands.push_back(Command::Add(id, lease));
            q.scheduler
        };
        Shared::interrupt(&mut sh.lock(), scheduler);
        id
    }

    /// Stop keeping `id` and release it, after a renewal in flight
    /// (`KeeperPool::remove`); `None` when the pool does not hold it.
    pub(crate) fn remove(&self, sh: &Shared, id: LeaseId) -> Option<Result<Released, LeaseError>> {
        let scheduler = {
            let mut q = lock(&self.queues);
            q.commands.push_back(Command::Remove(id));
            q.remover = Some(current());
            q.scheduler
        };
        Shared::interrupt(&mut sh.lock(), scheduler);
        loop {
            if let Some(answer) = lock(&self.queues).removed.remove(&id) {
                return answer;
            }
            let t = sh.lock().sched.now;
            sh.wait_until(t + 3600 * SEC);
        }
    }

    /// The events since the last call (`KeeperPool::events`).
    pub(crate) fn events(&self) -> Vec<PoolEvent> {
        lock(&self.queues).events.drain(..).collect()
    }
}

/// The lease a job is for, when it sends a request (a warm-up sends none
/// in the simulation: its store's warm-up is the default, nothing).
fn job_id(job: &Job) -> Option<LeaseId> {
    match job {
        Job::Renew(id, ..) | Job::Release(id, _) => Some(*id),
        Job::WarmUp(..) => None,
    }
}

/// Do `job` as the value it is for, on the calling thread.
fn do_job(sh: &Shared, q: &Mutex<Queues>, job: Job) -> Done {
    let value = job_id(&job).and_then(|id| lock(q).values.get(&id).copied());
    if let Some(value) = value {
        sh.lock().act_for(current(), value);
    }
    work(job, DEFAULT_RELEASE_TIMEOUT)
}

/// Record a removal's answer and wake whoever waits for it.
fn answer(
    sh: &Shared,
    q: &Mutex<Queues>,
    id: LeaseId,
    released: Option<Result<Released, LeaseError>>,
) {
    let remover = {
        let mut q = lock(q);
        q.removed.insert(id, released);
        q.remover
    };
    if let Some(tid) = remover {
        Shared::interrupt(&mut sh.lock(), tid);
    }
}

/// The scheduler thread: commands, finished jobs, due leases; jobs to the
/// renewal threads (or done here when `inline`).
fn schedule(sh: &Shared, c: usize, q: &Mutex<Queues>, clock: &dyn Clock, inline: bool) {
    let mut machine = PoolSchedule::new();
    loop {
        let (commands, finished) = {
            let mut q = lock(q);
            (
                q.commands.drain(..).collect::<Vec<_>>(),
                q.done.drain(..).collect::<Vec<_>>(),
            )
        };
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        for command in commands {
            match command {
                Command::Add(id, lease) => machine.add(id, lease, &mut jobs, &mut events),
                Command::Remove(id) => {
                    if !machine.remove(id, &mut jobs, &mut events) {
                        answer(sh, q, id, None);
                    }
                }
            }
        }
        for done in finished {
            if let Some(left) = machine.finish(done, &mut jobs, &mut events) {
                answer(sh, q, left.id, Some(left.answer()));
            }
        }
        machine.run_due(clock.now(), &mut jobs, &mut events);
        {
            let mut w = sh.lock();
            for e in &events {
                let (key, text) = (e.key.clone(), format!("{:?}", e.event));
                w.log(|| format!("c{c} pool event: {} {key}: {text}", e.id));
            }
        }
        lock(q).events.extend(events);
        if inline {
            for job in jobs {
                let done = do_job(sh, q, job);
                lock(q).done.push_back(done);
            }
        } else if !jobs.is_empty() {
            let workers = {
                let mut q = lock(q);
                q.jobs.extend(jobs);
                q.workers.clone()
            };
            let mut w = sh.lock();
            for tid in workers {
                Shared::interrupt(&mut w, tid);
            }
        }
        let pending = {
            let q = lock(q);
            !q.commands.is_empty() || !q.done.is_empty()
        };
        if pending {
            continue;
        }
        let wake = {
            let w = sh.lock();
            let later = w.sched.now + 3600 * SEC;
            machine
                .next_wake()
                .map_or(later, |at| w.nanos_of(at).min(later))
        };
        sh.wait_until(wake);
    }
}

/// A renewal thread: take jobs, do them, hand back what happened.
fn renewal_thread(sh: &Shared, q: &Mutex<Queues>) {
    loop {
        let job = lock(q).jobs.pop_front();
        let Some(job) = job else {
            let now = sh.lock().sched.now;
            sh.wait_until(now + 3600 * SEC);
            continue;
        };
        let done = do_job(sh, q, job);
        let scheduler = {
            let mut q = lock(q);
            q.done.push_back(done);
            q.scheduler
        };
        Shared::interrupt(&mut sh.lock(), scheduler);
    }
}
