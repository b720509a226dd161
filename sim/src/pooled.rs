//! A process that keeps many leases in one pool: the real
//! [`PoolSchedule`] driven as [`bucket_lease_core::KeeperPool`] drives it, with its
//! scheduler and renewal threads as simulated threads.
//!
//! The pool's contender has no faults of its own, but one of its leases is
//! black-holed after it is taken (every request on its key hangs until its
//! deadline); one other lease is removed and released on the way. The
//! checker then requires that the black-holed lease is fenced by its own
//! write deadline and that no other lease of the pool is ever fenced or
//! lost: one lease's renewals never move another's fence.
//!
//! Some pool runs renew *inline* (`renewal_threads(0)`): the scheduler
//! asks the real [`runs_on_scheduler`] which jobs it does on its own
//! thread. A store call that waits there (the black-holed lease's) would
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
use bucket_lease_core::lease::{Contender, LeaseOptions};
use bucket_lease_core::pool::{
    runs_on_scheduler, work, Done, Job, LeaseId, PoolEvent, PoolSchedule,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// itself the jobs the real [`runs_on_scheduler`] gives it (those of a
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
/// threads, then drive the machine.
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
    let mut machine = PoolSchedule::new();
    let queues = Arc::new(Mutex::new(Queues::default()));
    let me = current();
    let (mut jobs, mut events) = (Vec::new(), Vec::new());
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
        machine.add(
            LeaseId::from_index(i),
            Arc::new(lease),
            &mut jobs,
            &mut events,
        );
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
    let mut holed = false;
    let mut removed = false;
    loop {
        let now = sh.lock().sched.now;
        if !holed && now >= hole_from {
            holed = true;
            let mut w = sh.lock();
            let key = w.pool.as_ref().map(|r| r.hole.clone()).unwrap_or_default();
            w.log(|| format!("c{c} pool: {key} is black-holed from now"));
            w.black_hole = Some(key);
        }
        if holed {
            // The black-holed lease's write deadline: two thirds of a TTL
            // after the last renewal that landed (a renewal sent before
            // the hole may still land).
            if let Some(lease) = machine.lease(LeaseId::from_index(0)) {
                let deadline = lease.confirmed_at() + lease.fence_after();
                let mut w = sh.lock();
                let deadline = w.nanos_of(deadline);
                if let Some(run) = w.pool.as_mut() {
                    run.hole_deadline = Some(deadline);
                }
            }
        }
        if !removed && now >= remove_at {
            removed = true;
            if let Some(i) = n.checked_sub(1).filter(|&i| i > 0) {
                machine.remove(LeaseId::from_index(i), &mut jobs, &mut events);
                sh.lock().log(|| format!("c{c} pool: removing lease {i}"));
            }
        }
        // Leases gone from the machine, their releases done.
        let mut left = Vec::new();
        loop {
            let done = lock(&queues).done.pop_front();
            let Some(done) = done else { break };
            left.extend(machine.finish(done, &mut jobs, &mut events));
        }
        machine.run_due(clock.now(), &mut jobs, &mut events);
        // An inline pool does here, on the scheduler's own thread, what the
        // real pool would (finishing one may hand out another).
        while let Some(at) = jobs.iter().position(|job| runs_on_scheduler(inline, job)) {
            let done = work(jobs.remove(at), Duration::from_secs(5));
            left.extend(machine.finish(done, &mut jobs, &mut events));
        }
        // A lease that ended (fenced, lost) leaves with no event of its
        // own: its release is noted as the run's, for the check that a
        // removed lease's record is freed.
        for gone in left.into_iter().filter(|gone| gone.loss.is_some()) {
            let mut w = sh.lock();
            let t = w.sched.now;
            if let Some(run) = w.pool.as_mut() {
                let text = format!("left after its loss, released {:?}", gone.released);
                run.events.push((t, gone.key, text));
            }
        }
        {
            let mut w = sh.lock();
            let t = w.sched.now;
            note_deadlines(&mut w, &machine);
            for e in &events {
                note_fenced(&mut w, &machine, e);
            }
            for PoolEvent { key, event, .. } in events.drain(..) {
                let text = format!("{event:?}");
                w.log(|| format!("c{c} pool event: {key}: {text}"));
                if let Some(run) = w.pool.as_mut() {
                    run.events.push((t, key, text));
                }
            }
        }
        if !jobs.is_empty() {
            let workers = {
                let mut q = lock(&queues);
                q.jobs.extend(jobs.drain(..));
                q.workers.clone()
            };
            let mut w = sh.lock();
            for tid in workers {
                Shared::interrupt(&mut w, tid);
            }
        }
        let wake = {
            let w = sh.lock();
            let mut wake = machine.next_wake().map_or(Nanos::MAX, |at| w.nanos_of(at));
            if !holed {
                wake = wake.min(hole_from);
            }
            if !removed {
                wake = wake.min(remove_at);
            }
            wake.min(w.sched.now + 3600 * SEC)
        };
        sh.wait_until(wake);
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
