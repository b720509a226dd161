//! A process that keeps many leases in one pool: the real
//! [`PoolSchedule`] driven by the core's pool driver ([`drive`]), the one
//! loop a [`bucket_lease_core::KeeperPool`]'s scheduler runs, with its
//! scheduler and renewal threads as simulated threads.
//!
//! The pool's contender has no faults of its own, but one of its leases is
//! black-holed after it is taken (every request on its key hangs until its
//! deadline); one other lease is removed and released on the way. The
//! checker then requires that the black-holed lease is fenced by its own
//! write deadline and that no other lease of the pool is ever fenced or
//! lost: one lease's renewals never move another's fence.
//!
//! Some pool runs renew *inline* (`renewal_threads(0)`): the driver
//! asks the real [`runs_on_scheduler`](bucket_lease_core::pool::runs_on_scheduler)
//! which jobs it does on its own thread. A store call that waits there (the black-holed lease's) would
//! hold every other lease's renewals and `Fenced` (the mutant
//! `pool-inline-every-store`), which the checks below catch.
//!
//! Some pool runs are *jammed*: one renewal thread, and the black-holed
//! lease has three times the run's TTL (the others one or two), so while
//! its renewal hangs every renewal thread is busy and the others' renewals
//! wait in the queue past their own write deadlines. There the others are
//! fenced too, and the checker requires that every lease whose write
//! deadline passed was reported fenced by that deadline, not when a thread
//! took its job.

use super::env::{id, store_of, without_probe_names, SimClock};
use super::rng::Rng;
use super::sched::{current, Nanos, Shared, SEC};
use super::world::World;
use bucket_lease_core::clock::Clock;
use bucket_lease_core::keeper::Event;
use bucket_lease_core::lease::{Contender, Lease, LeaseOptions, Released};
use bucket_lease_core::pool::driver::{drive, Runtime, Wake};
use bucket_lease_core::pool::{work, Done, Job, LeaseId, Left, PoolEvent, PoolSchedule};
use bucket_lease_core::LeaseError;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the pool's threads share.
#[derive(Default)]
struct Queues {
    jobs: VecDeque<Job>,
    done: VecDeque<Done>,
    workers: Vec<usize>,
}

/// How the pool run is set up and what it saw, for the checker.
#[derive(Debug, Clone)]
pub(crate) struct PoolRun {
    /// The pool's contender.
    pub(crate) contender: usize,
    /// How many leases, and how many renewal threads.
    pub(crate) leases: usize,
    pub(crate) threads: usize,
    /// The key black-holed, from when, and the lease's write deadline then.
    pub(crate) hole: String,
    pub(crate) hole_from: Nanos,
    pub(crate) hole_deadline: Option<Nanos>,
    /// The key removed, and when.
    pub(crate) removed: Option<(String, Nanos)>,
    /// Every event of the pool: when, which key, what.
    pub(crate) events: Vec<(Nanos, String, String)>,
    /// Each lease's TTL in seconds.
    pub(crate) ttls: Vec<u64>,
    /// One renewal thread, which the black-holed lease holds (see the
    /// module docs).
    pub(crate) jammed: bool,
    /// The pool renews inline (`renewal_threads(0)`): its scheduler does
    /// itself the jobs the real [`runs_on_scheduler`](bucket_lease_core::pool::runs_on_scheduler) gives it (those of a
    /// store that answers at once, which the simulated store never does),
    /// and hands the rest to renewal threads, as the real pool's threads
    /// started when first needed.
    pub(crate) inline: bool,
    /// Each lease's write deadline on the monotonic clock, as of the
    /// scheduler's last look (none before its first look; for a lease that
    /// left the pool, the last one seen).
    pub(crate) deadlines: Vec<Option<Nanos>>,
    /// Every `Fenced` event: when, which key, and the lease's write deadline
    /// on the monotonic clock then.
    pub(crate) fenced: Vec<(Nanos, String, Nanos)>,
    /// When the pool began to run: the process takes its leases one after
    /// another first, so a lease whose write deadline passed by then (a
    /// short TTL and many acquires) is fenced when the pool starts, not
    /// by its deadline; the checkers judge the pool from here.
    pub(crate) started: Nanos,
}

/// Some pool runs (chosen by the seed) are jammed: one renewal thread, and
/// the black-holed lease 0 with three times the run's TTL (the others
/// alternate one and two), so that its hanging renewal holds the only
/// thread for a whole TTL of the shortest.
pub(crate) fn maybe_jammed(mut run: PoolRun, rng: &mut Rng, ttl_s: u64) -> PoolRun {
    if !rng.chance(3000) {
        return run;
    }
    run.jammed = true;
    run.threads = 1;
    run.ttls = (0..run.leases)
        .map(|i| match i {
            0 => 3 * ttl_s,
            _ if i % 2 == 1 => ttl_s,
            _ => 2 * ttl_s,
        })
        .collect();
    run
}

/// Note each lease's write deadline (monotonic: the wall clock can only
/// bring it forward) as the scheduler sees it now.
fn note_deadlines(w: &mut World, machine: &PoolSchedule) {
    let Some(n) = w.pool.as_ref().map(|r| r.leases) else {
        return;
    };
    for i in 0..n {
        let deadline = machine
            .lease(LeaseId::from_index(i))
            .map(|lease| w.nanos_of(lease.confirmed_at() + lease.fence_after()));
        if let (Some(d), Some(run)) = (deadline, w.pool.as_mut()) {
            run.deadlines[i] = Some(d);
        }
    }
}

/// Keep a `Fenced` event with the lease's write deadline at that moment.
fn note_fenced(w: &mut World, machine: &PoolSchedule, event: &PoolEvent) {
    if event.event != Event::Fenced {
        return;
    }
    let Some(lease) = machine.lease(event.id) else {
        return;
    };
    let deadline = w.nanos_of(lease.confirmed_at() + lease.fence_after());
    let t = w.sched.now;
    if let Some(run) = w.pool.as_mut() {
        run.fenced.push((t, event.key.clone(), deadline));
    }
}

fn lock(q: &Mutex<Queues>) -> std::sync::MutexGuard<'_, Queues> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pool's scheduler thread: take the leases, start the renewal
/// threads, then run the core's pool driver on [`Scheduler`].
pub(crate) fn pool_holder(sh: Arc<Shared>, c: usize) {
    let (n, threads, ttls, hole_from, remove_at, inline) = {
        let w = sh.lock();
        let run = w.pool.as_ref().expect("a pool run");
        let remove_at = run.removed.as_ref().map_or(Nanos::MAX, |(_, t)| *t);
        (
            run.leases,
            run.threads,
            run.ttls.clone(),
            run.hole_from,
            remove_at,
            run.inline,
        )
    };
    let clock: Arc<dyn Clock> = Arc::new(SimClock {
        sh: Arc::clone(&sh),
        c,
    });
    let store = store_of(&sh, c);
    let queues = Arc::new(Mutex::new(Queues::default()));
    let me = current();
    let mut adds = VecDeque::new();
    for (i, &ttl_s) in ttls.iter().enumerate() {
        let mut contender = Contender::new(
            Arc::clone(&store),
            &format!("sim/pool-{i}"),
            LeaseOptions::new(ttl_s).clock(Arc::clone(&clock)),
        )
        .with_instance_id(format!("{}-{i}", id(c)))
        .with_instance_nonce(super::world::nonce_of(c));
        let lease = loop {
            match contender.try_acquire() {
                Ok(lease) => break lease,
                Err(e) => {
                    let text = without_probe_names(&e.to_string());
                    sh.lock()
                        .log(|| format!("c{c} pool acquire of lease {i} fails: {text}"));
                    clock.sleep(Duration::from_millis(100));
                }
            }
        };
        adds.push_back((LeaseId::from_index(i), Arc::new(lease)));
    }
    {
        let mut w = sh.lock();
        let now = w.sched.now;
        if let Some(run) = w.pool.as_mut() {
            run.started = now;
        }
    }
    for _ in 0..threads {
        let q = Arc::clone(&queues);
        let tid = sh.spawn(c, move |sh| renewal_thread(&sh, &q, me));
        lock(&queues).workers.push(tid);
    }
    let mut scheduler = Scheduler {
        sh: &sh,
        c,
        queues: &queues,
        adds,
        hole_from: Some(hole_from),
        remove: n
            .checked_sub(1)
            .filter(|&i| i > 0)
            .map(|i| (LeaseId::from_index(i), remove_at)),
        removed: None,
    };
    drive(&mut scheduler, inline, Duration::from_secs(5));
}

/// The pool's scheduler thread as the core's pool driver's runtime: the
/// leases taken, added first; the black hole and the remove at their
/// instants; each renewal thread's outcome; the deadlines and events noted
/// for the checker.
struct Scheduler<'a> {
    sh: &'a Arc<Shared>,
    c: usize,
    queues: &'a Mutex<Queues>,
    /// The leases taken, still to be added.
    adds: VecDeque<(LeaseId, Arc<Lease>)>,
    /// When the black hole begins, until it has.
    hole_from: Option<Nanos>,
    /// The lease to remove and when, until it is.
    remove: Option<(LeaseId, Nanos)>,
    /// The lease removed: nothing of it but its release may be handed out.
    removed: Option<LeaseId>,
}

impl Scheduler<'_> {
    /// A renewal of the removed lease handed out is a violation (mutant
    /// `driver-pool-renews-after-remove`).
    fn check_job(&self, job: &Job) {
        if let (Job::Renew(id, ..), Some(removed)) = (job, self.removed) {
            if *id == removed {
                let mut w = self.sh.lock();
                let c = self.c;
                w.violation(format!(
                    "pool: c{c}'s driver handed out a renewal of {id} after its remove"
                ));
            }
        }
    }
}

impl Runtime for Scheduler<'_> {
    type Reply = ();
    type StopReply = ();

    fn now(&self) -> Instant {
        self.sh.lock().mono()
    }

    fn wait(&mut self, until: Option<Instant>, machine: &PoolSchedule) -> Wake<(), ()> {
        let c = self.c;
        loop {
            if let Some((id, lease)) = self.adds.pop_front() {
                return Wake::Add(id, lease);
            }
            let now = self.sh.lock().sched.now;
            if self.hole_from.is_some_and(|at| now >= at) {
                self.hole_from = None;
                let mut w = self.sh.lock();
                let key = w.pool.as_ref().map(|r| r.hole.clone()).unwrap_or_default();
                w.log(|| format!("c{c} pool: {key} is black-holed from now"));
                w.black_hole = Some(key);
            }
            if self.hole_from.is_none() {
                // The black-holed lease's write deadline: two thirds of a
                // TTL after the last renewal that landed (a renewal sent
                // before the hole may still land).
                if let Some(lease) = machine.lease(LeaseId::from_index(0)) {
                    let deadline = lease.confirmed_at() + lease.fence_after();
                    let mut w = self.sh.lock();
                    let deadline = w.nanos_of(deadline);
                    if let Some(run) = w.pool.as_mut() {
                        run.hole_deadline = Some(deadline);
                    }
                }
            }
            if let Some((id, _)) = self.remove.filter(|(_, at)| now >= *at) {
                self.remove = None;
                self.removed = Some(id);
                self.sh
                    .lock()
                    .log(|| format!("c{c} pool: removing lease {id}"));
                return Wake::Remove(id, ());
            }
            // A lease gone from the machine, its release done.
            if let Some(done) = lock(self.queues).done.pop_front() {
                return Wake::Done(done);
            }
            let mut w = self.sh.lock();
            note_deadlines(&mut w, machine);
            let due = until.map_or(Nanos::MAX, |at| w.nanos_of(at));
            if due <= w.sched.now {
                return Wake::Due;
            }
            let mut wake = due;
            if let Some(at) = self.hole_from {
                wake = wake.min(at);
            }
            if let Some((_, at)) = self.remove {
                wake = wake.min(at);
            }
            let wake = wake.min(w.sched.now + 3600 * SEC);
            drop(w);
            self.sh.wait_until(wake);
        }
    }

    fn hand_out(&mut self, job: Job) -> Result<(), Job> {
        self.check_job(&job);
        let workers = {
            let mut q = lock(self.queues);
            q.jobs.push_back(job);
            q.workers.clone()
        };
        self.sh.interrupt_each(&workers);
        Ok(())
    }

    /// On the renewal threads, as before the pool had a warm-ups' thread
    /// (a warm-up takes no simulated time off a keeper's thread).
    fn warm_up(&mut self, lease: Arc<Lease>, due: Instant) {
        let _ = self.hand_out(Job::WarmUp(lease, due));
    }

    fn run_here(&mut self, job: Job, release_timeout: Duration) -> Done {
        self.check_job(&job);
        work(job, release_timeout)
    }

    fn report(&mut self, event: PoolEvent, machine: &PoolSchedule) {
        let mut w = self.sh.lock();
        let t = w.sched.now;
        note_fenced(&mut w, machine, &event);
        let PoolEvent { key, event, .. } = event;
        let text = format!("{event:?}");
        let c = self.c;
        w.log(|| format!("c{c} pool event: {key}: {text}"));
        if let Some(run) = w.pool.as_mut() {
            run.events.push((t, key, text));
        }
    }

    fn answer(&mut self, (): (), _: Option<Result<Released, LeaseError>>) {}

    /// A lease that ended (fenced, lost) leaves with no event of its own:
    /// its release is noted as the run's, for the check that a removed
    /// lease's record is freed.
    fn left(&mut self, left: &Left) {
        if left.loss.is_none() {
            return;
        }
        let mut w = self.sh.lock();
        let t = w.sched.now;
        if let Some(run) = w.pool.as_mut() {
            let text = format!("left after its loss, released {:?}", left.released);
            run.events.push((t, left.key.clone(), text));
        }
    }
}

/// A renewal thread: take jobs, do them, hand back what happened.
fn renewal_thread(sh: &Arc<Shared>, queues: &Mutex<Queues>, scheduler: usize) {
    loop {
        let job = lock(queues).jobs.pop_front();
        let Some(job) = job else {
            let now = sh.lock().sched.now;
            sh.wait_until(now + 3600 * SEC);
            continue;
        };
        let done = work(job, Duration::from_secs(5));
        lock(queues).done.push_back(done);
        Shared::interrupt(&mut sh.lock(), scheduler);
    }
}
