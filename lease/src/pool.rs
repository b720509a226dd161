//! Many leases kept by a few threads: a program that owns many prefixes
//! (shards, tables, databases) renews them all from one [`KeeperPool`].
//!
//! One scheduler thread drives a `RenewalSchedule` per lease (the same
//! machine a [`Keeper`](crate::Keeper) drives) and hands each renewal that
//! falls due to one of a few renewal threads. What it promises:
//!
//! - **Each lease is kept as a `Keeper` would keep it.** Its own schedule
//!   (every third of its TTL after its last confirmed write), its own
//!   retries, its own write deadline and fence: `may_write()` and
//!   `write_deadline()` on the lease read only that lease's state, never
//!   another's. Its events arrive on the pool's channel as [`PoolEvent`]s,
//!   tagged with its id and key.
//! - **One hanging renewal delays no other lease** while a renewal thread
//!   is free: a renewal is bounded by its lease's write deadline, and the
//!   others go to the other threads. With `renewal_threads(0)` the
//!   scheduler renews inline the leases of stores that answer at once
//!   ([`Store::answers_at_once`](crate::Store::answers_at_once): the memory
//!   store), one thread in all; a lease on any store that can wait (a
//!   local directory waits for its bucket's lock, a network store for its
//!   service) is still renewed off the scheduler thread, on renewal threads
//!   the pool starts the first time it needs them, so no store call ever
//!   holds another lease's renewal or its `Fenced`.
//! - **`Fenced` goes out at the write deadline, busy threads or not.** A
//!   renewal handed out carries a wake-up at its deadline: should every
//!   renewal thread still be busy then (the renewal waiting in the queue or
//!   hanging), the lease is reported [`Event::Fenced`] at that instant,
//!   once, if its status says so, and renewed no more; its job's outcome,
//!   when it comes back, adds no event. A renewal that landed in time
//!   leaves the status held, and nothing is reported.
//! - **Leases come and go while it runs.** [`KeeperPool::add`] starts
//!   keeping a lease at once; [`KeeperPool::remove`] stops keeping one and
//!   releases it (after a renewal in flight, which its deadline bounds),
//!   within the release timeout.
//! - **Stopping releases every lease.** [`KeeperPool::stop`] and dropping
//!   the pool release each lease, each within the release timeout, several
//!   at a time, then join every thread.
//! - **Each renewal on a warm connection.** As a keeper does, the pool has
//!   each lease's store [warmed up](crate::Store::warm_up) shortly before
//!   its renewal, once per renewal instant, on a thread that does only
//!   warm-ups (`pool/warm_ups.rs`), started the first time a lease's store
//!   can wait, so a warm-up never holds a renewal or a release; a store
//!   that answers at once (the memory store) is warmed up on the scheduler
//!   thread, and a pool of such leases runs no thread more.
//! - **Totals per lease and per key.** [`PooledLease::stats`] is one
//!   lease's snapshot ([`crate::stats`]); [`KeeperPool::stats`] gives one
//!   per key over the pool's life, so a key taken again after a loss stays
//!   one series with its counters summed.
//! - **A panic in a renewal is that lease's loss**, reported as
//!   [`Event::Lost`], as with a `Keeper`.
//!
//! The pool waits on its own clock ([`PoolOptions::clock`]), which must be
//! the clock its leases were taken with (the system clock unless told
//! otherwise).

use crate::clock::{system_clock, Clock};
use crate::error::LeaseError;
use crate::keeper::{
    note_end, release_guarded, renew_guarded, warm_up_guarded, warm_up_lead, Attempt, Event,
    RenewalSchedule, Step, DEFAULT_RELEASE_TIMEOUT,
};
use crate::lease::{Lease, LeaseStatus, Released};
use crate::mutant::{self, Mutant};
use crate::stats::{merge_by_key, LeaseStats};
use warm_ups::WarmUps;

mod warm_ups;
use crossbeam_channel::{select, Receiver, Sender};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many threads renew unless told otherwise, beside the scheduler.
pub const DEFAULT_RENEWAL_THREADS: usize = 3;

/// How a [`KeeperPool`] runs.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    renewal_threads: usize,
    release_timeout: Duration,
    clock: Arc<dyn Clock>,
    thread_name: String,
}

impl PoolOptions {
    /// [`DEFAULT_RENEWAL_THREADS`] renewal threads, releases within
    /// [`DEFAULT_RELEASE_TIMEOUT`], on the system clock, threads named
    /// `bucket-lease-pool`.
    pub fn new() -> Self {
        PoolOptions {
            renewal_threads: DEFAULT_RENEWAL_THREADS,
            release_timeout: DEFAULT_RELEASE_TIMEOUT,
            clock: system_clock(),
            thread_name: "bucket-lease-pool".to_string(),
        }
    }

    /// Renew on `n` threads beside the scheduler. 0 renews on the
    /// scheduler itself the leases of stores that answer at once (the
    /// memory store, [`Store::answers_at_once`](crate::Store::answers_at_once));
    /// leases of any other store (a local directory, which waits for its
    /// lock; a network store) are renewed on [`DEFAULT_RENEWAL_THREADS`]
    /// threads started when the first such renewal falls due. For an HTTP
    /// store keep at least 2, so that one renewal hanging until its
    /// deadline delays no other lease.
    pub fn renewal_threads(mut self, n: usize) -> Self {
        self.renewal_threads = n;
        self
    }

    /// Give each release at most `timeout`.
    /// On a store with a write interval
    /// ([`Store::write_interval`](crate::store::Store::write_interval)),
    /// the interval is added: a release right after a renewal waits its
    /// turn.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
    }

    /// Wait on `clock`: the clock the pool's leases were taken with.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Name the pool's threads `name` (Linux shows 15 bytes).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// A lease's number in its pool, for [`KeeperPool::remove`] and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(u64);

impl LeaseId {
    /// The `i`th id, for a driver of its own (the simulation, the tests).
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn from_index(i: usize) -> Self {
        LeaseId(i as u64)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What happened to one lease of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEvent {
    /// The lease's number in the pool.
    pub id: LeaseId,
    /// The lease object's key.
    pub key: String,
    /// What happened, as a [`Keeper`](crate::Keeper) reports it.
    pub event: Event,
}

/// A lease kept by a pool: ask it before each write.
#[derive(Debug, Clone)]
pub struct PooledLease {
    id: LeaseId,
    lease: Arc<Lease>,
}

impl PooledLease {
    /// Its number in the pool.
    pub fn id(&self) -> LeaseId {
        self.id
    }

    /// The lease, for its key, epoch and state, and for a
    /// [`FencedWriter`](crate::FencedWriter).
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Whether a write may start now.
    #[must_use]
    pub fn may_write(&self) -> bool {
        self.lease.may_write()
    }

    /// When writing must have finished; `None` when it must not start.
    #[must_use]
    pub fn write_deadline(&self) -> Option<Instant> {
        self.lease.write_deadline()
    }

    /// A snapshot of this lease's totals and state ([`crate::stats`]).
    pub fn stats(&self) -> LeaseStats {
        self.lease.stats()
    }
}

/// The leases a pool keeps, as its handle sees them, for
/// [`KeeperPool::stats`]: those added and not yet removed, and the totals
/// of those removed, one per key.
#[derive(Debug, Default)]
struct Registry {
    live: BTreeMap<LeaseId, Arc<Lease>>,
    retired: Vec<LeaseStats>,
}

impl Registry {
    fn retire(&mut self, id: LeaseId) {
        if let Some(lease) = self.live.remove(&id) {
            let gone = lease.stats();
            self.retired = merge_by_key(self.retired.iter().chain([&gone]));
        }
    }
}

/// Leases renewed by a scheduler thread and a few renewal threads. See the
/// [module docs](self).
pub struct KeeperPool {
    commands: Sender<Command>,
    registry: Mutex<Registry>,
    events: Receiver<PoolEvent>,
    next_id: AtomicU64,
    len: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for KeeperPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeeperPool")
            .field("leases", &self.len())
            .field("threads", &self.threads.len())
            .finish()
    }
}

enum Command {
    Add(LeaseId, Arc<Lease>),
    Remove(LeaseId, RemoveReply),
    Stop(StopReply),
}

impl KeeperPool {
    /// Start the scheduler and the renewal threads.
    ///
    /// # Errors
    ///
    /// When the operating system cannot start a thread; those already
    /// started are stopped.
    pub fn spawn(options: PoolOptions) -> std::io::Result<KeeperPool> {
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (jobs, job_rx) = crossbeam_channel::unbounded::<Job>();
        let (done_tx, done) = crossbeam_channel::unbounded();
        let len = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for i in 0..options.renewal_threads {
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            let timeout = options.release_timeout;
            let thread = std::thread::Builder::new()
                .name(format!("{}-{i}", options.thread_name))
                .spawn(move || {
                    for job in job_rx {
                        let _ = done_tx.send(work(job, timeout));
                    }
                })?;
            threads.push(thread);
        }
        let inline = (options.renewal_threads == 0).then(|| OnDemand {
            jobs: job_rx.clone(),
            name: options.thread_name.clone(),
            threads: Vec::new(),
        });
        let scheduler = Scheduler {
            clock: Arc::clone(&options.clock),
            release_timeout: options.release_timeout,
            inline,
            commands: command_rx,
            jobs,
            done,
            done_tx,
            events: events_tx,
            machine: PoolSchedule::new(),
            removers: HashMap::new(),
            stopping: None,
            len: Arc::clone(&len),
            warm_ups: WarmUps::new(&options.thread_name),
        };
        let thread = std::thread::Builder::new()
            .name(options.thread_name.clone())
            .spawn(move || scheduler.run())?;
        threads.push(thread);
        Ok(KeeperPool {
            commands,
            registry: Mutex::new(Registry::default()),
            events,
            next_id: AtomicU64::new(0),
            len,
            threads,
        })
    }

    /// Keep `lease` from now on. Should the pool's scheduler be gone (it
    /// never is while the pool lives), the lease is released and marked
    /// lost, so it forbids writing.
    pub fn add(&self, lease: Lease) -> PooledLease {
        let id = LeaseId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let lease = Arc::new(lease);
        self.registry().live.insert(id, Arc::clone(&lease));
        self.len.fetch_add(1, Ordering::SeqCst);
        if self
            .commands
            .send(Command::Add(id, Arc::clone(&lease)))
            .is_err()
        {
            self.len.fetch_sub(1, Ordering::SeqCst);
            let _ = lease.release();
            lease.mark_lost(None);
        }
        PooledLease { id, lease }
    }

    /// Stop keeping lease `id` and release it (after a renewal in flight);
    /// `None` when the pool does not hold it.
    pub fn remove(&self, id: LeaseId) -> Option<Result<Released, LeaseError>> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.commands.send(Command::Remove(id, reply)).ok()?;
        let removed = answer.recv().ok().flatten();
        self.registry().retire(id);
        removed
    }

    /// A snapshot per key of every lease the pool keeps or kept
    /// ([`crate::stats`]): a key taken again after a loss, under a new id,
    /// is one snapshot, its counters summed over the pool's life and its
    /// gauges from the lease held now (or the latest). Render them with
    /// [`prometheus_text`](crate::stats::prometheus_text). Answered without
    /// I/O.
    pub fn stats(&self) -> Vec<LeaseStats> {
        let registry = self.registry();
        let live: Vec<LeaseStats> = registry.live.values().map(|l| l.stats()).collect();
        merge_by_key(registry.retired.iter().chain(&live))
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every lease's events. Clones of the receiver share one queue; the
    /// queue is unbounded, so a program that never reads it never blocks
    /// the pool.
    pub fn events(&self) -> &Receiver<PoolEvent> {
        &self.events
    }

    /// How many leases the pool keeps.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::SeqCst)
    }

    /// Whether the pool keeps no lease.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Release every lease and join every thread; each lease's release.
    pub fn stop(mut self) -> Releases {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Releases {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let released = match self.commands.send(Command::Stop(reply)) {
            Ok(()) => answer.recv().unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let ids: Vec<LeaseId> = self.registry().live.keys().copied().collect();
        for id in ids {
            self.registry().retire(id);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        released
    }
}

impl Drop for KeeperPool {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.shut_down();
        }
    }
}

internal! {
/// Whether `job` runs on the scheduler thread itself: only in an inline
/// pool (`renewal_threads(0)`, `inline`), and only for a lease whose store
/// answers at once ([`Store::answers_at_once`](crate::Store::answers_at_once)),
/// so that no store call that can wait holds another lease's fence. The
/// pool and the simulation's pools ask it.
pub fn runs_on_scheduler(inline: bool, job: &Job) -> bool {
    inline
        && (job.lease().store().answers_at_once() || mutant::on(Mutant::PoolInlineEveryStore))
}
}

internal! {
/// Do one job on a renewal thread.
pub fn work(job: Job, release_timeout: Duration) -> Done {
    match job {
        Job::Renew(id, lease, deadline) => Done::Renewed(id, renew_guarded(&lease, deadline)),
        Job::Release(id, lease) => Done::Released(id, release_guarded(&lease, release_timeout)),
        Job::WarmUp(lease, due) => {
            warm_up_guarded(&lease, due);
            Done::Warmed
        }
    }
}
}

internal! {
/// What the pool's machine asks its driver to do.
#[derive(Debug)]
pub enum Job {
    /// Renew this lease, every request bounded by the deadline; then
    /// hand the outcome to [`PoolSchedule::finish`].
    Renew(LeaseId, Arc<Lease>, Instant),
    /// Release this lease; then hand the outcome to
    /// [`PoolSchedule::finish`].
    Release(LeaseId, Arc<Lease>),
    /// Ask this lease's store to [warm up](crate::Store::warm_up) for its
    /// renewal due at the instant (best effort, returning by it). The pool
    /// does it on a thread of its own, never a renewal thread; a driver
    /// that does it with [`work`] hands [`Done::Warmed`] to
    /// [`PoolSchedule::finish`], which changes nothing.
    WarmUp(Arc<Lease>, Instant),
}
}

impl Job {
    /// The lease the job is for.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        match self {
            Job::Renew(_, lease, _) | Job::Release(_, lease) | Job::WarmUp(lease, _) => lease,
        }
    }
}

internal! {
/// A job's outcome, for the pool's machine.
#[derive(Debug)]
pub enum Done {
    /// How a renewal ended.
    Renewed(LeaseId, Attempt),
    /// How a release ended.
    Released(LeaseId, Result<Released, LeaseError>),
    /// A warm-up returned; it changes nothing.
    Warmed,
}
}

/// The answer owed to whoever removes a lease: `None` inside for a lease
/// the pool did not hold.
type RemoveReply = Sender<Option<Result<Released, LeaseError>>>;

/// Each lease's release, as a stop returns them.
type Releases = Vec<(LeaseId, Result<Released, LeaseError>)>;

/// The answer owed to whoever stops the pool.
type StopReply = Sender<Releases>;

/// One lease as the machine sees it.
#[derive(Debug)]
struct Kept {
    lease: Arc<Lease>,
    schedule: RenewalSchedule,
    /// A renewal or the release is out.
    busy: bool,
    /// The lease ended (fenced or lost): nothing to renew.
    ended: bool,
    /// Release it once nothing of it is out.
    removing: bool,
    /// Bumped at each scheduling, so stale wake-ups are skipped.
    generation: u64,
    /// The renewal instant a warm-up wake-up was set for.
    warm_wake_for: Option<Instant>,
    /// The renewal instant the store was last warmed up for.
    warmed_for: Option<Instant>,
}

internal! {
/// The pool's decisions, without threads or I/O: which lease to renew
/// when, what to report, when to release. [`KeeperPool`] drives it with a
/// scheduler thread and renewal threads; a simulation drives the same
/// machine on simulated time. Each lease is stepped by its own
/// [`RenewalSchedule`], so one lease's renewals never move another's fence.
#[derive(Debug, Default)]
pub struct PoolSchedule {
    leases: HashMap<LeaseId, Kept>,
    due: BinaryHeap<Reverse<(Instant, LeaseId, u64)>>,
}
}

impl PoolSchedule {
    /// An empty machine.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep `lease` as `id`; the jobs and events of its first step go to
    /// `jobs` and `events`.
    pub fn add(
        &mut self,
        id: LeaseId,
        lease: Arc<Lease>,
        jobs: &mut Vec<Job>,
        events: &mut Vec<PoolEvent>,
    ) {
        let schedule = RenewalSchedule::new(&lease);
        self.leases.insert(
            id,
            Kept {
                lease,
                schedule,
                busy: false,
                ended: false,
                removing: false,
                generation: 0,
                warm_wake_for: None,
                warmed_for: None,
            },
        );
        self.step(id, jobs, events);
    }

    /// Stop keeping `id`: its release is a job now, or once its renewal in
    /// flight is done. False when the machine does not hold it.
    pub fn remove(&mut self, id: LeaseId, jobs: &mut Vec<Job>) -> bool {
        let Some(kept) = self.leases.get_mut(&id) else {
            return false;
        };
        kept.removing = true;
        self.release_if_free(id, jobs);
        true
    }

    /// The lease held as `id` (for the simulation and the tests).
    #[cfg(any(test, feature = "internals"))]
    pub fn lease(&self, id: LeaseId) -> Option<&Arc<Lease>> {
        self.leases.get(&id).map(|k| &k.lease)
    }

    /// The ids of every lease held.
    pub fn ids(&self) -> Vec<LeaseId> {
        self.leases.keys().copied().collect()
    }

    /// Whether no lease is held (removed leases leave once released).
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// When the machine next has something to do, if ever.
    pub fn next_wake(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Step every lease whose time has come by `now`.
    pub fn run_due(&mut self, now: Instant, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) {
        while let Some(Reverse((at, id, generation))) = self.due.peek().copied() {
            if at > now {
                break;
            }
            self.due.pop();
            if self
                .leases
                .get(&id)
                .is_some_and(|k| k.generation == generation)
            {
                self.fence_if_overdue(id, events);
                self.step(id, jobs, events);
            }
        }
    }

    /// Take a job's outcome. A finished release is returned, the lease
    /// gone from the machine.
    pub fn finish(
        &mut self,
        done: Done,
        jobs: &mut Vec<Job>,
        events: &mut Vec<PoolEvent>,
    ) -> Option<(LeaseId, Result<Released, LeaseError>)> {
        match done {
            Done::Renewed(id, attempt) => {
                let kept = self.leases.get_mut(&id)?;
                kept.busy = false;
                if kept.ended {
                    // Reported fenced at the deadline while this renewal was
                    // out: nothing more to report. A loss still marks the
                    // lease lost, so its release leaves the record alone.
                    if matches!(attempt, Attempt::Lost { .. }) {
                        kept.lease.mark_lost(None);
                    }
                } else if let Some(event) = kept.schedule.record(&kept.lease, attempt) {
                    let key = kept.lease.key().to_string();
                    events.push(PoolEvent { id, key, event });
                }
                if kept.removing {
                    self.release_if_free(id, jobs);
                } else {
                    self.step(id, jobs, events);
                }
                None
            }
            Done::Warmed => None,
            Done::Released(id, released) => {
                let kept = self.leases.remove(&id)?;
                let key = kept.lease.key().to_string();
                events.push(PoolEvent {
                    id,
                    key,
                    event: Event::Released(released.clone()),
                });
                Some((id, released))
            }
        }
    }

    /// Ask lease `id`'s schedule what to do, and queue it.
    fn step(&mut self, id: LeaseId, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) {
        let one_at_a_time =
            mutant::on(Mutant::PoolSerialRenewals) && self.leases.values().any(|k| k.busy);
        let Some(kept) = self.leases.get_mut(&id) else {
            return;
        };
        if kept.busy || kept.ended || kept.removing {
            return;
        }
        match kept.schedule.step(&kept.lease) {
            Step::Wait { until } => {
                kept.generation += 1;
                // A while before the renewal, its store is warmed up (as a
                // keeper does), once per renewal instant, off this thread.
                // As a keeper: only when the lead is still ahead when the
                // wait begins (not after a short retry pause), and once.
                let lead = warm_up_lead(kept.lease.renew_interval());
                let now = kept.lease.clock().now();
                let wake = match until.checked_sub(lead) {
                    _ if kept.warmed_for == Some(until) => until,
                    Some(warm_at) if warm_at > now => {
                        kept.warm_wake_for = Some(until);
                        warm_at
                    }
                    Some(_) if kept.warm_wake_for == Some(until) => {
                        kept.warmed_for = Some(until);
                        jobs.push(Job::WarmUp(Arc::clone(&kept.lease), until));
                        until
                    }
                    _ => until,
                };
                self.due.push(Reverse((wake, id, kept.generation)));
            }
            Step::Renew { .. } if one_at_a_time => {
                kept.generation += 1;
                let soon = kept.lease.clock().now() + Duration::from_millis(10);
                self.due.push(Reverse((soon, id, kept.generation)));
            }
            Step::Renew { deadline } => {
                kept.busy = true;
                kept.generation += 1;
                if !mutant::on(Mutant::PoolFencedWhenTaken) {
                    // Should the job still be out at its deadline (waiting
                    // for a renewal thread, or hanging), the lease is
                    // fenced then, whoever has it.
                    self.due.push(Reverse((deadline, id, kept.generation)));
                }
                jobs.push(Job::Renew(id, Arc::clone(&kept.lease), deadline));
            }
            Step::End(event) => end(kept, id, event, events),
        }
    }

    /// At the deadline of lease `id`'s renewal still out: if its status
    /// says fenced, report [`Event::Fenced`] now and end it, rather than
    /// when a renewal thread gets round to the job. A lease being removed
    /// is left to its release.
    fn fence_if_overdue(&mut self, id: LeaseId, events: &mut Vec<PoolEvent>) {
        let Some(kept) = self.leases.get_mut(&id) else {
            return;
        };
        if !kept.busy || kept.ended || kept.removing {
            return;
        }
        if kept.lease.status() == LeaseStatus::Fenced {
            end(kept, id, Event::Fenced, events);
        }
    }

    /// Queue lease `id`'s release if it is being removed and nothing of it
    /// is out.
    fn release_if_free(&mut self, id: LeaseId, jobs: &mut Vec<Job>) {
        let Some(kept) = self.leases.get_mut(&id) else {
            return;
        };
        if kept.busy || !kept.removing {
            return;
        }
        kept.busy = true;
        jobs.push(Job::Release(id, Arc::clone(&kept.lease)));
    }
}

/// End the keeping of lease `id` with `event` (fenced or lost): reported
/// once, renewed no more.
fn end(kept: &mut Kept, id: LeaseId, event: Event, events: &mut Vec<PoolEvent>) {
    kept.ended = true;
    note_end(&kept.lease, &event);
    if event == Event::Fenced {
        // Renewed no more: a renewal still out, landing late, must not let
        // it write again.
        kept.lease.fence_for_good();
        log::warn!("{}: fenced: no renewal landed in time", kept.lease.key());
    }
    let key = kept.lease.key().to_string();
    events.push(PoolEvent { id, key, event });
}

/// An inline pool's renewal threads, for the leases of stores that can
/// wait: none until one is needed.
struct OnDemand {
    jobs: Receiver<Job>,
    name: String,
    threads: Vec<JoinHandle<()>>,
}

/// The scheduler thread: drives a [`PoolSchedule`] with channels and the
/// pool's clock.
struct Scheduler {
    clock: Arc<dyn Clock>,
    release_timeout: Duration,
    /// Renewing inline (`renewal_threads(0)`): the threads for the jobs
    /// that may not run here.
    inline: Option<OnDemand>,
    commands: Receiver<Command>,
    jobs: Sender<Job>,
    done: Receiver<Done>,
    done_tx: Sender<Done>,
    events: Sender<PoolEvent>,
    machine: PoolSchedule,
    /// Who waits for each lease being removed.
    removers: HashMap<LeaseId, RemoveReply>,
    /// The stop in progress, and the releases it collected.
    stopping: Option<(Option<StopReply>, Releases)>,
    /// The pool's count of its leases.
    len: Arc<AtomicUsize>,
    /// The warm-ups, off the renewal threads.
    warm_ups: WarmUps,
}

impl Scheduler {
    fn run(mut self) {
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
                        if self.machine.remove(id, &mut jobs) {
                            self.removers.insert(id, reply);
                        } else {
                            let _ = reply.send(None);
                        }
                    }
                    Ok(Command::Stop(reply)) => self.stop(Some(reply), &mut jobs),
                    // The handle is gone without a stop: release everything.
                    Err(_) => {
                        self.commands = crossbeam_channel::never();
                        self.stop(None, &mut jobs);
                    }
                },
                recv(self.done) -> done => {
                    if let Ok(done) = done {
                        if let Some((id, released)) = self.machine.finish(done, &mut jobs, &mut events) {
                            self.len.fetch_sub(1, Ordering::SeqCst);
                            match self.removers.remove(&id) {
                                Some(reply) => {
                                    let _ = reply.send(Some(released));
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
                let _ = self.events.send(event);
            }
            for job in jobs {
                self.dispatch(job);
            }
        }
    }

    /// Remove every lease; answer `reply` once all are released.
    fn stop(&mut self, reply: Option<StopReply>, jobs: &mut Vec<Job>) {
        self.stopping.get_or_insert((None, Vec::new())).0 = reply;
        for id in self.machine.ids() {
            self.machine.remove(id, jobs);
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
    fn start(&mut self, release_timeout: Duration, done: &Sender<Done>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;
    use crate::lease::LeaseOptions;
    use crate::memory::MemoryStore;

    /// A machine keeping one lease with a TTL of 3 s (renewed after 1 s,
    /// fenced after 2 s) on a test clock.
    fn one_lease() -> (TestClock, PoolSchedule, LeaseId, Arc<Lease>) {
        let clock = TestClock::new();
        let options = LeaseOptions::new(3).clock(Arc::new(clock.clone()));
        let lease = Arc::new(Lease::acquire(Arc::new(MemoryStore::new()), "m", options).unwrap());
        let mut machine = PoolSchedule::new();
        let id = LeaseId::from_index(0);
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        machine.add(id, Arc::clone(&lease), &mut jobs, &mut events);
        assert!(jobs.is_empty() && events.is_empty());
        (clock, machine, id, lease)
    }

    /// Advance to the renewal and take its job, as a driver would.
    fn renewal_out(clock: &TestClock, machine: &mut PoolSchedule) -> Job {
        clock.advance(Duration::from_secs(1));
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        machine.run_due(clock.now(), &mut jobs, &mut events);
        assert!(events.is_empty());
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        jobs.remove(0)
    }

    #[test]
    fn a_renewal_still_out_at_its_deadline_is_fenced_then_and_once() {
        let (clock, mut machine, id, lease) = one_lease();
        let deadline = lease.write_deadline().unwrap();
        let job = renewal_out(&clock, &mut machine);
        assert!(matches!(job, Job::Renew(_, _, d) if d == deadline));
        assert_eq!(
            machine.next_wake(),
            Some(deadline),
            "a wake-up at its deadline"
        );
        clock.advance(Duration::from_secs(1));
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        machine.run_due(clock.now(), &mut jobs, &mut events);
        let kinds: Vec<_> = events.iter().map(|e| e.event.clone()).collect();
        assert_eq!(kinds, vec![Event::Fenced]);
        assert!(jobs.is_empty());
        events.clear();
        // The job comes back late, as a timeout: nothing more is reported,
        // and nothing is renewed any more.
        let failed = LeaseError::Fenced {
            key: "m/LEASE".into(),
        };
        let done = Done::Renewed(id, Attempt::Failed(failed));
        assert!(machine.finish(done, &mut jobs, &mut events).is_none());
        assert!(jobs.is_empty() && events.is_empty(), "{events:?}");
        assert_eq!(machine.next_wake(), None);
        clock.advance(Duration::from_secs(60));
        machine.run_due(clock.now(), &mut jobs, &mut events);
        assert!(jobs.is_empty() && events.is_empty(), "{events:?}");
        // Removing it still releases it.
        assert!(machine.remove(id, &mut jobs));
        assert!(matches!(jobs.as_slice(), [Job::Release(..)]));
        let done = work(jobs.remove(0), Duration::from_secs(5));
        let released = machine.finish(done, &mut jobs, &mut events);
        assert_eq!(released, Some((id, Ok(Released::Freed))));
        assert!(machine.is_empty());
    }

    #[test]
    fn a_renewal_that_landed_before_its_deadline_is_not_fenced() {
        let (clock, mut machine, id, _lease) = one_lease();
        let job = renewal_out(&clock, &mut machine);
        // The renewal lands at once, but its outcome reaches the machine
        // only after the old deadline's wake-up.
        let done = work(job, Duration::from_secs(5));
        clock.advance(Duration::from_secs(1));
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        machine.run_due(clock.now(), &mut jobs, &mut events);
        assert!(events.is_empty(), "{events:?}");
        machine.finish(done, &mut jobs, &mut events);
        assert!(matches!(
            events.as_slice(),
            [PoolEvent {
                event: Event::Renewed { .. },
                ..
            }]
        ));
        assert!(machine.next_wake().is_some(), "renewed on");
        assert!(machine.lease(id).unwrap().may_write());
    }

    #[test]
    fn a_lease_being_removed_is_left_to_its_release() {
        let (clock, mut machine, id, _lease) = one_lease();
        let job = renewal_out(&clock, &mut machine);
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        assert!(machine.remove(id, &mut jobs));
        assert!(jobs.is_empty(), "the release waits for the renewal out");
        clock.advance(Duration::from_secs(1));
        machine.run_due(clock.now(), &mut jobs, &mut events);
        assert!(events.is_empty(), "{events:?}");
        machine.finish(work(job, Duration::from_secs(5)), &mut jobs, &mut events);
        assert!(matches!(jobs.as_slice(), [Job::Release(..)]));
    }
}
