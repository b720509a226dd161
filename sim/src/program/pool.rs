//! A [`bucket_lease_core::KeeperPool`] as a program holds one: the real
//! [`PoolSchedule`] driven by the core's pool driver ([`drive`]) on a
//! simulated scheduler thread, the loop the pool's scheduler runs, and its
//! jobs done by the real [`work`] on simulated renewal threads (for a pool
//! of 0 renewal threads, started the first time a job needs one, as the
//! real pool's: the simulated store never answers at once). `add` hands
//! the program's real `Lease` to the machine; `remove` asks the driver to
//! release it and waits for that release, as the real one does, and says
//! `None` for an id the pool never held (a lease that left after its loss
//! answers its loss).
//!
//! The real pool starts OS threads the simulation cannot schedule, so
//! this module is its threads, as the driver's runtime: commands and
//! finished jobs from queues, jobs to the renewal threads, events to the
//! queue the program reads. The driver, the machine, the leases and the
//! jobs' calls are the real ones.

use super::super::sched::{current, Shared, SEC};
use super::super::values::ValueId;
use bucket_lease_core::keeper::DEFAULT_RELEASE_TIMEOUT;
use bucket_lease_core::lease::{Lease, Released};
use bucket_lease_core::pool::driver::{drive, Runtime, Wake};
use bucket_lease_core::pool::{
    work, Done, Job, LeaseId, PoolEvent, PoolSchedule, DEFAULT_RENEWAL_THREADS,
};
use bucket_lease_core::LeaseError;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// (`KeeperPool::spawn`), on the simulation's true time (the pool's
    /// clock is its process's, whose monotonic side is true time).
    pub(crate) fn spawn(sh: &Arc<Shared>, c: usize, threads: usize) -> Self {
        let queues = Arc::new(Mutex::new(Queues::default()));
        let scheduler = {
            let q = Arc::clone(&queues);
            sh.spawn(c, move |sh| schedule(&sh, c, &q, threads == 0))
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

/// The scheduler thread: the core's pool driver on [`Scheduler`].
fn schedule(sh: &Arc<Shared>, c: usize, q: &Arc<Mutex<Queues>>, inline: bool) {
    let mut scheduler = Scheduler {
        sh,
        c,
        q,
        inline,
        removed: HashSet::new(),
    };
    drive(&mut scheduler, inline, DEFAULT_RELEASE_TIMEOUT);
}

/// The pool's scheduler thread as the pool driver's runtime: commands and
/// finished jobs from the queues, jobs to the renewal threads (an inline
/// pool starts [`DEFAULT_RENEWAL_THREADS`] the first time a job needs
/// one, as the real one does), events to the queue the program reads.
struct Scheduler<'a> {
    sh: &'a Arc<Shared>,
    c: usize,
    q: &'a Arc<Mutex<Queues>>,
    inline: bool,
    /// The leases whose remove was asked: nothing of theirs but the release
    /// may be handed out.
    removed: HashSet<LeaseId>,
}

impl Scheduler<'_> {
    /// A renewal of a lease removed, handed out, is a violation (mutant
    /// `driver-pool-renews-after-remove`).
    fn check_job(&self, job: &Job) {
        if let Job::Renew(id, ..) = job {
            if self.removed.contains(id) {
                let c = self.c;
                self.sh.lock().violation(format!(
                    "pool: c{c}'s driver handed out a renewal of {id} after its remove"
                ));
            }
        }
    }

    /// Put `job` on the renewal threads' queue and wake them.
    fn queue(&self, job: Job) {
        let workers = {
            let mut q = lock(self.q);
            q.jobs.push_back(job);
            q.workers.clone()
        };
        self.sh.interrupt_each(&workers);
    }
}

impl Runtime for Scheduler<'_> {
    type Reply = LeaseId;
    type StopReply = ();

    fn now(&self) -> Instant {
        self.sh.lock().mono()
    }

    fn wait(&mut self, until: Option<Instant>, _: &PoolSchedule) -> Wake<LeaseId, ()> {
        loop {
            {
                let mut q = lock(self.q);
                match q.commands.pop_front() {
                    Some(Command::Add(id, lease)) => return Wake::Add(id, lease),
                    Some(Command::Remove(id)) => {
                        self.removed.insert(id);
                        return Wake::Remove(id, id);
                    }
                    None => {}
                }
                if let Some(done) = q.done.pop_front() {
                    return Wake::Done(done);
                }
            }
            let wake = {
                let w = self.sh.lock();
                let later = w.sched.now + 3600 * SEC;
                let due = until.map_or(later, |at| w.nanos_of(at).min(later));
                if until.is_some() && due <= w.sched.now {
                    return Wake::Due;
                }
                due
            };
            self.sh.wait_until(wake);
        }
    }

    fn hand_out(&mut self, job: Job) -> Result<(), Job> {
        self.check_job(&job);
        if self.inline && lock(self.q).workers.is_empty() {
            for _ in 0..DEFAULT_RENEWAL_THREADS {
                let q = Arc::clone(self.q);
                let tid = self.sh.spawn(self.c, move |sh| renewal_thread(&sh, &q));
                lock(self.q).workers.push(tid);
            }
        }
        self.queue(job);
        Ok(())
    }

    /// On a renewal thread, or here in an inline pool (a warm-up takes no
    /// simulated time off a keeper's thread, and sends nothing).
    fn warm_up(&mut self, lease: Arc<Lease>, due: Instant) {
        let job = Job::WarmUp(lease, due);
        if self.inline {
            let _ = work(job, DEFAULT_RELEASE_TIMEOUT);
        } else {
            self.queue(job);
        }
    }

    fn run_here(&mut self, job: Job, _: Duration) -> Done {
        self.check_job(&job);
        do_job(self.sh, self.q, job)
    }

    fn report(&mut self, event: PoolEvent, _: &PoolSchedule) {
        {
            let mut w = self.sh.lock();
            let (key, text) = (event.key.clone(), format!("{:?}", event.event));
            let c = self.c;
            w.log(|| format!("c{c} pool event: {} {key}: {text}", event.id));
        }
        lock(self.q).events.push_back(event);
    }

    fn answer(&mut self, id: LeaseId, released: Option<Result<Released, LeaseError>>) {
        answer(self.sh, self.q, id, released);
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
