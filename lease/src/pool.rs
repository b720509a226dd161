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
//!   within the release timeout. Ids ([`LeaseId`]) are never reused over a
//!   pool's life.
//! - **A lost lease leaves by itself, with one event.** A lease fenced or
//!   lost is reported once ([`Event::Fenced`], [`Event::Lost`]), renewed no
//!   more, and released (its record freed if it still names this holder,
//!   left alone otherwise), then it is gone from the pool: no `remove` is
//!   needed, and no `Released` event follows. `remove` of its id, before or
//!   after it left, returns the loss ([`LeaseError::Fenced`] or
//!   [`LeaseError::Lost`]), and so does [`KeeperPool::stop`] for one still
//!   leaving: a result that cannot be taken for a clean release. To keep the
//!   prefix, acquire it again and `add` the new lease (a new id).
//! - **`may_write()` turns false before the event.** The lease's state
//!   says fenced or lost (so [`PooledLease::may_write`](crate::KeptLease::may_write) is false on every
//!   thread) before its event is on the channel, and before the loss
//!   callback ([`PoolOptions::on_loss`]) runs, on a thread of its own.
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
//! - **Totals per lease and per key.** [`PooledLease::stats`](crate::KeptLease::stats) is one
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
    note_end, release_guarded, renew_guarded, warm_up_guarded, warm_up_lead, Attempt, Event, Loss,
    RenewalSchedule, Step, DEFAULT_RELEASE_TIMEOUT,
};
use crate::kept::{stop_answer, stop_answer_after_leaving, KeptLease};
use crate::lease::{Lease, LeaseStatus, Released};
use crate::mutant::{self, Mutant};
pub(crate) use crate::record::prefix_of;
use crate::stats::{merge_by_key, LeaseStats};
use scheduler::{loss_notices, OnDemand, Registry, Scheduler};
use warm_ups::WarmUps;

internal! {
pub mod driver;
}
mod scheduler;
mod warm_ups;
use crossbeam_channel::{Receiver, Sender};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many threads renew unless told otherwise, beside the scheduler.
pub const DEFAULT_RENEWAL_THREADS: usize = 3;

/// How a [`KeeperPool`] runs.
#[derive(Clone)]
pub struct PoolOptions {
    renewal_threads: usize,
    release_timeout: Duration,
    clock: Arc<dyn Clock>,
    thread_name: String,
    pub(crate) on_loss: Option<OnPoolLoss>,
}

/// A pool's loss callback, shared by clones of one [`PoolOptions`].
type OnPoolLoss = Arc<dyn Fn(&PoolLoss) + Send + Sync>;

impl fmt::Debug for PoolOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolOptions")
            .field("renewal_threads", &self.renewal_threads)
            .field("release_timeout", &self.release_timeout)
            .field("thread_name", &self.thread_name)
            .field("on_loss", &self.on_loss.as_ref().map(|_| "Fn(&PoolLoss)"))
            .finish()
    }
}

/// A lease of a pool that ended without a clean release, as
/// [`PoolOptions::on_loss`] is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolLoss {
    /// The lease's number in the pool.
    pub id: LeaseId,
    /// The prefix it was on.
    pub prefix: String,
    /// The lease object's key.
    pub key: String,
    /// How it ended, as a keeper's callback is told.
    pub loss: Loss,
}

/// As a keeper's [`Loss`] prints, after the lease's key and number:
/// `jobs/7/LEASE (#7): fenced: no renewal landed before the write deadline`.
impl fmt::Display for PoolLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.key, self.id, self.loss)
    }
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
            on_loss: None,
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

    /// Call `callback` once for each lease that ends without a clean
    /// release, as [`KeeperOptions::on_loss`](crate::KeeperOptions::on_loss)
    /// does for a keeper: fenced or lost while kept ([`Loss::Fenced`],
    /// [`Loss::Lost`]), or removed or stopped with a release that failed
    /// ([`Loss::NotReleased`]) or found the record another's. It runs on a
    /// thread of its own, one call at a time, after the lease's state
    /// forbids writing and after the event is sent, so it delays no
    /// renewal and no fence; a panic in it is logged. Keep it short all the
    /// same: the calls queue behind a slow one. A second call of `on_loss`
    /// replaces the first callback.
    pub fn on_loss(mut self, callback: impl Fn(&PoolLoss) + Send + Sync + 'static) -> Self {
        self.on_loss = Some(Arc::new(callback));
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

impl PoolEvent {
    /// `event` of lease `id`, whose object is `key`.
    fn new(id: LeaseId, key: &str, event: Event) -> Self {
        PoolEvent {
            id,
            prefix: prefix_of(key).to_string(),
            key: key.to_string(),
            event,
        }
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What happened to one lease of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolEvent {
    /// The lease's number in the pool.
    pub id: LeaseId,
    /// The prefix the lease is on (`shards/7`), as it was acquired.
    pub prefix: String,
    /// The lease object's key (`shards/7/LEASE`).
    pub key: String,
    /// What happened, as a [`Keeper`](crate::Keeper) reports it.
    pub event: Event,
}

/// A lease kept by a pool: ask it before each write ([`KeptLease`]).
#[derive(Debug, Clone)]
pub struct PooledLease {
    id: LeaseId,
    kept: Arc<Lease>,
    /// The pool's scheduler, for [`KeptLease::stop`].
    pool: Sender<Command>,
}

impl PooledLease {
    /// Its number in the pool.
    pub fn id(&self) -> LeaseId {
        self.id
    }
}

/// What a pooled lease answers, as a keeper does. Its
/// [`stop`](KeptLease::stop) is the pool's [`remove`](KeeperPool::remove)
/// of its id: a lease the pool let go already (a clone stopped first, the
/// pool stopped, the lease lost) answers from how it ended.
impl KeptLease for PooledLease {
    fn lease(&self) -> &Arc<Lease> {
        &self.kept
    }

    fn stop(self) -> Result<Released, LeaseError> {
        remove(&self.pool, self.id).unwrap_or_else(|| stop_answer_after_leaving(&self.kept))
    }
}

/// Ask the pool's scheduler behind `commands` to stop keeping lease `id`
/// and release it; its answer, `None` when it does not hold the lease (or
/// is gone).
fn remove(commands: &Sender<Command>, id: LeaseId) -> Option<Result<Released, LeaseError>> {
    let (reply, answer) = crossbeam_channel::bounded(1);
    commands.send(Command::Remove(id, reply)).ok()?;
    answer.recv().ok().flatten()
}

/// Leases renewed by a scheduler thread and a few renewal threads. See the
/// [module docs](self).
pub struct KeeperPool {
    commands: Sender<Command>,
    registry: Arc<Mutex<Registry>>,
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
        let registry = Arc::new(Mutex::new(Registry::default()));
        let losses = match options.on_loss.clone() {
            Some(callback) => {
                let (notices, thread) = loss_notices(&options.thread_name, callback)?;
                threads.push(thread);
                Some(notices)
            }
            None => None,
        };
        let scheduler = Scheduler {
            clock: Arc::clone(&options.clock),
            release_timeout: options.release_timeout,
            inline,
            commands: command_rx,
            jobs,
            done,
            done_tx,
            events: events_tx,
            len: Arc::clone(&len),
            warm_ups: WarmUps::new(&options.thread_name),
            registry: Arc::clone(&registry),
            losses,
        };
        let thread = std::thread::Builder::new()
            .name(options.thread_name.clone())
            .spawn(move || scheduler.run())?;
        threads.push(thread);
        Ok(KeeperPool {
            commands,
            registry,
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
        PooledLease {
            id,
            kept: lease,
            pool: self.commands.clone(),
        }
    }

    /// Stop keeping lease `id` and release it (after a renewal in flight);
    /// `None` when the pool does not hold it.
    pub fn remove(&self, id: LeaseId) -> Option<Result<Released, LeaseError>> {
        remove(&self.commands, id)
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
        merge_by_key(registry.retired.snapshots().iter().chain(&live))
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

internal! {
/// A lease gone from a [`PoolSchedule`], its release done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// Its id.
    pub id: LeaseId,
    /// Its key.
    pub key: String,
    /// What its release did.
    pub released: Result<Released, LeaseError>,
    /// How it ended before that, if it was fenced or lost.
    pub loss: Option<LeaseError>,
    /// What a `remove` or `stop` of it answers ([`Left::answer`]).
    answer: Result<Released, LeaseError>,
}
}

impl Left {
    /// What a `remove` or `stop` returns for it, by the one end-of-life
    /// rule ([`KeptLease::stop`]): its loss, if it had one;
    /// [`LeaseError::Lost`] when its release found the record another
    /// holder's (taken over since its last renewal); else its release's
    /// outcome.
    pub fn answer(&self) -> Result<Released, LeaseError> {
        self.answer.clone()
    }
}

/// The answer owed to whoever removes a lease: `None` inside for a lease
/// the pool did not hold.
type RemoveReply = Sender<Option<Result<Released, LeaseError>>>;

/// Each lease's release, as [`KeeperPool::stop`] returns them.
pub type Releases = Vec<(LeaseId, Result<Released, LeaseError>)>;

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
    /// What it ended with, which a remove or stop returns: it leaves the
    /// pool by itself once released. Boxed: set only at the end, and a
    /// `LeaseError` is larger than the rest of a kept lease's state.
    loss: Option<Box<LeaseError>>,
    /// Release it once nothing of it is out.
    removing: bool,
    /// Bumped at each scheduling, so stale wake-ups are skipped. 32 bits:
    /// a stale wake-up is dropped from the heap long before a lease is
    /// scheduled 2^32 times more.
    generation: u32,
    /// The renewal instant a warm-up wake-up was last set for (meaningless
    /// while `warm` is `None`)…
    warm_for: Instant,
    /// …and whether the store was warmed up for it since. Two fields
    /// rather than an `Option` of both: 8 bytes less per kept lease.
    warm: Option<Warm>,
}

impl Kept {
    /// Whether the warm-up for the renewal at `until` stands at `warm`.
    fn warm_is(&self, until: Instant, warm: Warm) -> bool {
        self.warm == Some(warm) && self.warm_for == until
    }

    /// Step it again at `at` (as `id`), and at no earlier wake-up: those
    /// are stale from now on.
    fn wake_at(&mut self, at: Instant, id: LeaseId, due: &mut WakeUps) {
        self.generation = self.generation.wrapping_add(1);
        due.push(Reverse((at, id, self.generation)));
    }

    /// The warm-up for the renewal at `until` stands at `warm` now.
    fn set_warm(&mut self, until: Instant, warm: Warm) {
        (self.warm_for, self.warm) = (until, Some(warm));
    }
}

/// When each kept lease is to be stepped again, earliest first, with the
/// generation it was scheduled at (a wake-up of an older one is stale).
type WakeUps = BinaryHeap<Reverse<(Instant, LeaseId, u32)>>;

/// Where a lease's warm-up for one renewal instant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Warm {
    /// A wake-up is set for the warm-up.
    Set,
    /// The warm-up was handed out.
    Done,
}

internal! {
/// The pool's decisions, without threads or I/O: which lease to renew
/// when, what to report, when to release. [`KeeperPool`] drives it with a
/// scheduler thread and renewal threads; a simulation drives the same
/// machine on simulated time. Each lease is stepped by its own
/// [`RenewalSchedule`], so one lease's renewals never move another's fence.
#[derive(Debug, Default)]
pub struct PoolSchedule {
    /// Boxed: a map's slot is 16 bytes rather than a kept lease's 72, and
    /// a map keeps a third of its slots and more free (issue 40: 1 KiB per
    /// lease).
    leases: HashMap<LeaseId, Box<Kept>>,
    due: WakeUps,
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
        let warm_for = lease.confirmed_at();
        self.leases.insert(
            id,
            Box::new(Kept {
                lease,
                schedule,
                busy: false,
                ended: false,
                loss: None,
                removing: false,
                generation: 0,
                warm_for,
                warm: None,
            }),
        );
        self.step(id, jobs, events);
    }

    /// Stop keeping `id`: its release is a job now, or once its renewal in
    /// flight is done. False when the machine does not hold it. A lease
    /// found fenced or lost by then is reported so first (to `events`), and
    /// leaves with that loss.
    pub fn remove(
        &mut self,
        id: LeaseId,
        jobs: &mut Vec<Job>,
        events: &mut Vec<PoolEvent>,
    ) -> bool {
        let Some(kept) = self.leases.get_mut(&id) else {
            return false;
        };
        kept.removing = true;
        self.release_if_free(id, jobs, events);
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
    ) -> Option<Left> {
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
                    events.push(PoolEvent::new(id, kept.lease.key(), event));
                }
                if kept.removing {
                    self.release_if_free(id, jobs, events);
                } else {
                    // Right after a store call: a renewal due now (the last
                    // one landed at the write deadline) waits for a wake-up
                    // first, so a remove or the stop asked meanwhile wins.
                    self.step_with(id, jobs, events, false);
                }
                None
            }
            Done::Warmed => None,
            Done::Released(id, released) => {
                let kept = self.leases.remove(&id)?;
                if kept.loss.is_some() {
                    // It left by itself after its loss, which was its one
                    // event; whoever asks is told of the loss.
                    log::debug!(
                        "{}: released after its loss: {released:?}",
                        kept.lease.key()
                    );
                } else {
                    events.push(PoolEvent::new(
                        id,
                        kept.lease.key(),
                        Event::Released(released.clone()),
                    ));
                }
                let loss = kept.loss.map(|loss| *loss);
                Some(Left {
                    id,
                    key: kept.lease.key().to_string(),
                    answer: stop_answer(&kept.lease, loss.clone(), &released),
                    released,
                    loss,
                })
            }
        }
    }

    /// Ask lease `id`'s schedule what to do, and queue it.
    fn step(&mut self, id: LeaseId, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) {
        self.step_with(id, jobs, events, true);
    }

    /// [`step`](Self::step); `woke`: whether a wake-up or a message, not a
    /// store call's outcome, brought it. A renewal begins only then (as the
    /// keeper driver's): one due at once after a store call is a wake-up
    /// now instead.
    fn step_with(
        &mut self,
        id: LeaseId,
        jobs: &mut Vec<Job>,
        events: &mut Vec<PoolEvent>,
        woke: bool,
    ) {
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
                // A while before the renewal, its store is warmed up (as a
                // keeper does), once per renewal instant, off this thread.
                // As a keeper: only when the lead is still ahead when the
                // wait begins (not after a short retry pause), and once.
                let lead = warm_up_lead(kept.lease.renew_interval());
                let now = kept.lease.clock().now();
                let wake = match until.checked_sub(lead) {
                    _ if kept.warm_is(until, Warm::Done) => until,
                    Some(warm_at) if warm_at > now => {
                        kept.set_warm(until, Warm::Set);
                        warm_at
                    }
                    Some(_) if kept.warm_is(until, Warm::Set) => {
                        kept.set_warm(until, Warm::Done);
                        jobs.push(Job::WarmUp(Arc::clone(&kept.lease), until));
                        until
                    }
                    _ => until,
                };
                kept.wake_at(wake, id, &mut self.due);
            }
            Step::Renew { .. } if !woke => {
                let now = kept.lease.clock().now();
                kept.wake_at(now, id, &mut self.due);
            }
            Step::Renew { .. } if one_at_a_time => {
                let soon = kept.lease.clock().now() + Duration::from_millis(10);
                kept.wake_at(soon, id, &mut self.due);
            }
            Step::Renew { deadline } => {
                kept.busy = true;
                kept.generation = kept.generation.wrapping_add(1);
                if !mutant::on(Mutant::PoolFencedWhenTaken) {
                    // Should the job still be out at its deadline (waiting
                    // for a renewal thread, or hanging), the lease is
                    // fenced then, whoever has it.
                    self.due.push(Reverse((deadline, id, kept.generation)));
                }
                jobs.push(Job::Renew(id, Arc::clone(&kept.lease), deadline));
            }
            Step::End(event) => {
                end(kept, id, event, events);
                self.release_if_free(id, jobs, events);
            }
        }
        self.drop_stale_wakes();
    }

    /// Drop the wake-ups that [`run_due`](Self::run_due) would skip (of a
    /// lease gone, or of an earlier scheduling: a renewal's deadline once
    /// its outcome came back and the lease was scheduled again), once
    /// they make the heap a quarter larger than one wake-up per lease.
    /// Without it the heap held two per lease in steady state (each
    /// renewal's deadline stays until it passes), 100 bytes a lease in a
    /// pool of 10,000 (issue 40). Only skipped entries go, so the machine
    /// wakes and steps exactly as before; amortised, a few look-ups per
    /// scheduling.
    fn drop_stale_wakes(&mut self) {
        let live = self.leases.len();
        if self.due.len() <= live + live / 4 + 64 {
            return;
        }
        let leases = &self.leases;
        self.due.retain(|Reverse((_, id, generation))| {
            leases.get(id).is_some_and(|k| k.generation == *generation)
        });
    }

    /// At the deadline of lease `id`'s renewal still out: if its status
    /// says fenced, report [`Event::Fenced`] now and end it, rather than
    /// when a renewal thread gets round to the job; a lease being removed
    /// too (its release, which waits for the renewal, then returns the
    /// loss).
    fn fence_if_overdue(&mut self, id: LeaseId, events: &mut Vec<PoolEvent>) {
        // The renewal is still out: the release waits for it (`finish`).
        let Some(kept) = self.leases.get_mut(&id) else {
            return;
        };
        // Being removed or not: a remove waiting on this renewal must not
        // keep the fence unsaid past the deadline.
        if !kept.busy || kept.ended {
            return;
        }
        if kept.lease.fence_status() == LeaseStatus::Fenced {
            end(kept, id, Event::Fenced, events);
        }
    }

    /// Queue lease `id`'s release if it is being removed and nothing of it
    /// is out. A lease whose status says fenced or lost by now (a renewal
    /// that found it taken, a deadline passed while a remove waited, a wall
    /// clock stepped) is ended first, as its schedule says, so that it
    /// leaves with its loss, reported once, never as a clean release.
    fn release_if_free(&mut self, id: LeaseId, jobs: &mut Vec<Job>, events: &mut Vec<PoolEvent>) {
        let Some(kept) = self.leases.get_mut(&id) else {
            return;
        };
        if kept.busy || !kept.removing {
            return;
        }
        let ended_unseen = !kept.ended
            && matches!(
                kept.lease.fence_status(),
                LeaseStatus::Fenced | LeaseStatus::Lost { .. }
            );
        if ended_unseen {
            if let Step::End(event) = kept.schedule.step(&kept.lease) {
                end(kept, id, event, events);
            }
        }
        kept.busy = true;
        jobs.push(Job::Release(id, Arc::clone(&kept.lease)));
    }
}

/// End the keeping of lease `id` with `event` (fenced or lost): reported
/// once, renewed no more, and released (its record freed if still ours)
/// as soon as nothing of it is out, leaving the pool.
fn end(kept: &mut Kept, id: LeaseId, event: Event, events: &mut Vec<PoolEvent>) {
    kept.ended = true;
    kept.removing = true;
    let key = kept.lease.key().to_string();
    if kept.lease.fence_status() == LeaseStatus::Released {
        // Released by hand: no loss, and its one event is the release's.
        note_end(&kept.lease, &event);
        return;
    }
    kept.loss = Some(Box::new(match &event {
        Event::Lost { holder, .. } => LeaseError::Lost {
            key: key.clone(),
            holder: holder.clone(),
        },
        _ => LeaseError::Fenced { key: key.clone() },
    }));
    note_end(&kept.lease, &event);
    if event == Event::Fenced {
        // Renewed no more: a renewal still out, landing late, must not let
        // it write again.
        kept.lease.fence_for_good();
        log::warn!("{}: fenced: no renewal landed in time", kept.lease.key());
    }
    events.push(PoolEvent::new(id, &key, event));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;
    use crate::lease::LeaseOptions;
    use crate::memory::MemoryStore;

    /// What a pool keeps per lease, held to issue 40's budget (1 KiB per
    /// pooled lease, measured by `benches/pool.rs`): the lease in its `Arc`
    /// (424 bytes, a 432-byte block of the allocator), its boxed place in
    /// the machine, and nothing allocated for the system clock or the
    /// claim. A field that grows one of them fails here first.
    #[test]
    fn a_lease_and_its_place_in_the_pool_stay_within_budget() {
        assert!(
            std::mem::size_of::<Lease>() <= 408,
            "a Lease grew to {} bytes",
            std::mem::size_of::<Lease>()
        );
        assert!(
            std::mem::size_of::<Kept>() <= 72,
            "a kept lease grew to {} bytes",
            std::mem::size_of::<Kept>()
        );
        assert_eq!(std::mem::size_of::<Box<Kept>>(), 8);
        let (a, b) = (crate::clock::system_clock(), crate::clock::system_clock());
        assert!(Arc::ptr_eq(&a, &b), "each lease would allocate its clock");
    }

    /// A pool's loss prints as a keeper's does, naming which lease.
    #[test]
    fn a_pool_loss_prints_as_a_keepers_naming_the_lease() {
        let loss = PoolLoss {
            id: LeaseId(7),
            prefix: "jobs/7".into(),
            key: "jobs/7/LEASE".into(),
            loss: Loss::Fenced,
        };
        assert_eq!(
            loss.to_string(),
            format!("jobs/7/LEASE (#7): {}", Loss::Fenced)
        );
    }

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
        // nothing is renewed any more, and the lease is released to leave.
        let failed = LeaseError::Fenced {
            key: "m/LEASE".into(),
        };
        let done = Done::Renewed(id, Attempt::Failed(failed.clone()));
        assert!(machine.finish(done, &mut jobs, &mut events).is_none());
        assert!(events.is_empty(), "{events:?}");
        assert!(matches!(jobs.as_slice(), [Job::Release(..)]), "{jobs:?}");
        assert_eq!(machine.next_wake(), None);
        let done = work(jobs.remove(0), Duration::from_secs(5));
        // It leaves with its loss, and no second event.
        let left = machine.finish(done, &mut jobs, &mut events).unwrap();
        assert_eq!((left.id, left.answer()), (id, Err(failed)));
        assert_eq!(left.released, Ok(Released::Freed), "its record freed");
        assert!(events.is_empty(), "{events:?}");
        assert!(machine.is_empty());
        assert!(!machine.remove(id, &mut jobs, &mut events), "gone");
    }

    #[test]
    fn stale_wake_ups_do_not_pile_up() {
        // 400 leases with a TTL of 3 s, renewed every second for a minute:
        // each renewal's deadline wake-up, stale once it landed, stayed
        // until it passed (two wake-ups a lease, 800); no more than a
        // quarter more than one a lease now.
        let clock = TestClock::new();
        let store = Arc::new(MemoryStore::new());
        let mut machine = PoolSchedule::new();
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        let n = 400;
        let mut leases = Vec::new();
        for i in 0..n {
            let options = LeaseOptions::new(3).clock(Arc::new(clock.clone()));
            let lease = Arc::new(Lease::acquire(store.clone(), &format!("m{i}"), options).unwrap());
            machine.add(
                LeaseId::from_index(i),
                Arc::clone(&lease),
                &mut jobs,
                &mut events,
            );
            leases.push(lease);
        }
        let mut most = 0;
        for _ in 0..600 {
            clock.advance(Duration::from_millis(100));
            machine.run_due(clock.now(), &mut jobs, &mut events);
            for job in std::mem::take(&mut jobs) {
                let done = work(job, Duration::from_secs(5));
                machine.finish(done, &mut jobs, &mut events);
            }
            most = most.max(machine.due.len());
        }
        assert!(most <= n + n / 4 + 64 + 1, "{most} wake-ups");
        let renewed = events
            .iter()
            .filter(|e| matches!(e.event, Event::Renewed { .. }))
            .count();
        assert!(renewed >= 55 * n, "{renewed} renewals");
        assert!(leases.iter().all(|l| l.may_write()));
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
    fn a_lease_being_removed_is_still_fenced_at_its_deadline_and_leaves_with_the_loss() {
        let (clock, mut machine, id, _lease) = one_lease();
        let job = renewal_out(&clock, &mut machine);
        let (mut jobs, mut events) = (Vec::new(), Vec::new());
        assert!(machine.remove(id, &mut jobs, &mut events));
        assert!(jobs.is_empty(), "the release waits for the renewal out");
        clock.advance(Duration::from_secs(1));
        machine.run_due(clock.now(), &mut jobs, &mut events);
        let kinds: Vec<_> = events.drain(..).map(|e| e.event).collect();
        assert_eq!(
            kinds,
            vec![Event::Fenced],
            "at its deadline, removed or not"
        );
        machine.finish(work(job, Duration::from_secs(5)), &mut jobs, &mut events);
        assert!(matches!(jobs.as_slice(), [Job::Release(..)]));
        let done = work(jobs.remove(0), Duration::from_secs(5));
        let left = machine.finish(done, &mut jobs, &mut events).unwrap();
        assert!(
            matches!(left.answer(), Err(LeaseError::Fenced { .. })),
            "{left:?}"
        );
        assert!(events.is_empty(), "one event: {events:?}");
    }
}
