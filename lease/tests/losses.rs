//! How a kept lease ends, one table for every way to keep it: each loss
//! case below runs against a [`Keeper`], a [`PooledLease`] of a
//! [`KeeperPool`] and a [`HeldPrefix`] of a [`HeldSet`], through what the
//! three answer alike ([`KeptLease`]).
//!
//! What it promises, whatever keeps the lease:
//!
//! - **A lease that ended never stops as a clean release.** A takeover
//!   seen by a renewal, by the stop's own release, or by a renewal the
//!   stop waits for is [`LeaseError::Lost`], naming the new holder when
//!   known; renewals that fail until the write deadline, a wall clock
//!   stepped past it, or a renewal hanging past it while the stop waits
//!   are [`LeaseError::Fenced`]. Only a lease held to the end and freed
//!   answers `Ok(Freed)`.
//! - **`may_write()` turns false before the event**, and a lease ended is
//!   renewed no more.
//! - **The loss callback hears of each loss once** (a takeover, the fence,
//!   a panic in a renewal, a stop whose release found the record not ours
//!   or could not release), never of a clean stop or a drop; a callback
//!   that blocks delays no fence, one that panics stops no release.
//! - **A handle outliving its keeper answers from the lease.** A second
//!   stop (of a clone, or after the pool or the set stopped) releases
//!   nothing more and answers by the same rule: `Ok(AlreadyFree)` after a
//!   clean stop, the loss otherwise. A stale clone never touches a newer
//!   lease of its prefix.
//! - **A stop frees the prefix at once** for another contender (for a
//!   held prefix: another set), and a set tries it again only a quarter of
//!   the TTL later.
//!
//! The table is at the end ([`table!`]): one test per case and handle,
//! `<case>::keeper`, `<case>::pooled`, `<case>::held`; a handle a case
//! cannot apply to is named there with the reason. The clock is a
//! [`TestClock`]; the tests wait for events with generous real-time bounds.

use bucket_lease_core::held_set::{HeldPrefix, HeldSet, HeldSetOptions, SetEvent};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::{KeeperPool, PoolEvent, PoolOptions, PooledLease};
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, store::DeleteMode, store::Object, store::PutOptions,
    store::StoreErrorKind, store::Version, Contender, Event, Keeper, KeeperOptions, KeptLease,
    Lease, LeaseError, LeaseOptions, Loss, Released, Store, StoreError,
};
use crossbeam_channel::Receiver;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "a";
const KEY: &str = "a/LEASE";
const TTL_S: u64 = 30;
/// A third of the TTL: when the first renewal falls due.
const INTERVAL: Duration = Duration::from_secs(TTL_S / 3);
/// The real-time bound on anything the test waits for.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long nothing must happen, in real time, for "nothing more".
const QUIET: Duration = Duration::from_millis(200);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Wait (in real time, at most [`PATIENCE`]) until `ready()`; whether it was.
fn real_wait(ready: impl Fn() -> bool) -> bool {
    let until = Instant::now() + PATIENCE;
    while !ready() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

// ------------------------------------------------------------ the store

/// A memory store on a test clock that a case can disturb, on the case's
/// lease key only: PUTs held (in real time) while `closed`; PUTs hung until their deadline on the clock
/// while `hang`; writes that hold the record (acquires and renewals, not
/// releases) failing or panicking; each such write counted.
#[derive(Debug)]
struct Rigged {
    inner: MemoryStore,
    clock: TestClock,
    /// PUTs wait while set, then go through; `waiting` counts them.
    closed: AtomicBool,
    waiting: AtomicUsize,
    /// PUTs wait until their deadline on the clock and time out; `hung`
    /// counts them.
    hang: AtomicBool,
    hung: AtomicUsize,
    /// Writes that hold the record fail (a transport error).
    fail_holding: AtomicBool,
    /// Writes that hold the record panic; `panic_all`: every PUT.
    panic_holding: AtomicBool,
    panic_all: AtomicBool,
    /// Writes that hold the record sent so far.
    holding_writes: AtomicUsize,
}

impl Rigged {
    fn new(clock: &TestClock) -> Arc<Rigged> {
        Arc::new(Rigged {
            inner: MemoryStore::new(),
            clock: clock.clone(),
            closed: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            hang: AtomicBool::new(false),
            hung: AtomicUsize::new(0),
            fail_holding: AtomicBool::new(false),
            panic_holding: AtomicBool::new(false),
            panic_all: AtomicBool::new(false),
            holding_writes: AtomicUsize::new(0),
        })
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.inner.peek(KEY).expect("a LEASE object")).expect("a record")
    }

    fn is_released(&self) -> bool {
        self.record().is_released()
    }

    /// Write a live record of another holder, "usurper" ("night-shift" for
    /// people), over ours.
    fn usurp(&self) {
        let now = format_stamp(self.clock.wall());
        let mut usurper = LeaseRecord::new("usurper", now.clone(), now, TTL_S, 2);
        usurper.holder_name = Some("night-shift".into());
        self.inner.insert(KEY, &usurper.to_bytes());
    }

    /// Write a record of another holder already released (taken over and
    /// freed since, or broken): not ours, and no live holder.
    fn usurp_and_free(&self) {
        let now = format_stamp(self.clock.wall());
        let mut usurper = LeaseRecord::new("usurper", now.clone(), now.clone(), TTL_S, 2);
        usurper.released_at = Some(now);
        self.inner.insert(KEY, &usurper.to_bytes());
    }

    fn holding_writes(&self) -> usize {
        self.holding_writes.load(Ordering::SeqCst)
    }
}

impl Store for Rigged {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        // Only the case's lease is disturbed and counted: a set's
        // membership lease (beside it) goes straight through.
        if key != KEY {
            return self.inner.put(key, body, options);
        }
        let holding = !LeaseRecord::parse(body).is_some_and(|r| r.is_released());
        if holding {
            self.holding_writes.fetch_add(1, Ordering::SeqCst);
        }
        if self.panic_all.load(Ordering::SeqCst)
            || (holding && self.panic_holding.load(Ordering::SeqCst))
        {
            panic!("injected panic in the store");
        }
        if holding && self.fail_holding.load(Ordering::SeqCst) {
            return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key)
                .with_message("no answer (injected)"));
        }
        if self.closed.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while self.closed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        if self.hang.load(Ordering::SeqCst) {
            if let Some(deadline) = options.deadline {
                self.hung.fetch_add(1, Ordering::SeqCst);
                let _ = self.clock.timer(deadline).recv();
                self.hung.fetch_sub(1, Ordering::SeqCst);
            }
            return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out());
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

// ------------------------------------------------------- the handles

/// Which way the lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// [`Keeper::spawn`]: its own thread.
    Keeper,
    /// [`KeeperPool::add`]: a pool's threads.
    Pooled,
    /// [`HeldSet::spawn`] of one prefix: a set, on its own pool.
    Held,
}

/// What the loss callback does besides reporting the loss.
enum Callback {
    /// Report it, with the name of the thread it runs on.
    Reports,
    /// Report it, then wait until the test lets it go on.
    Blocks(Receiver<()>),
    /// Panic (after reporting it).
    Panics,
}

/// A kept lease, whichever way it is kept.
enum Handle {
    Keeper(Keeper),
    Pooled(PooledLease),
    Held(HeldPrefix),
}

/// The stop every handle answers, by the one end-of-life rule.
fn stop_kept<K: KeptLease>(kept: K) -> Result<Released, LeaseError> {
    kept.stop()
}

impl Handle {
    fn kept(&self) -> &dyn KeptLease {
        match self {
            Handle::Keeper(k) => k,
            Handle::Pooled(p) => p,
            Handle::Held(h) => h,
        }
    }

    fn stop(self) -> Result<Released, LeaseError> {
        match self {
            Handle::Keeper(k) => stop_kept(k),
            Handle::Pooled(p) => stop_kept(p),
            Handle::Held(h) => stop_kept(h),
        }
    }

    /// A second handle on the same lease: `None` for a keeper, which has
    /// one (its stop consumes it).
    fn try_clone(&self) -> Option<Handle> {
        match self {
            Handle::Keeper(_) => None,
            Handle::Pooled(p) => Some(Handle::Pooled(p.clone())),
            Handle::Held(h) => Some(Handle::Held(h.clone())),
        }
    }
}

/// What keeps the handle's lease besides the handle.
enum Owner {
    /// A keeper keeps its lease itself.
    Itself,
    Pool(KeeperPool),
    Set(HeldSet),
}

/// The events a handle's keeper sends.
enum Events {
    Keeper(Receiver<Event>),
    Pool(Receiver<PoolEvent>),
    Set(Receiver<SetEvent>),
}

impl Events {
    /// The next event, as a keeper reports it; a set's prefix taken or
    /// its attempt failed are passed over.
    fn next(&self, patience: Duration) -> Option<Event> {
        let until = Instant::now() + patience;
        let left = || until.saturating_duration_since(Instant::now());
        match self {
            Events::Keeper(events) => events.recv_timeout(patience).ok(),
            Events::Pool(events) => events.recv_timeout(patience).ok().map(|e| e.event),
            Events::Set(events) => loop {
                match events.recv_timeout(left()).ok()? {
                    SetEvent::Lost {
                        loss: Loss::Fenced, ..
                    } => return Some(Event::Fenced),
                    SetEvent::Lost {
                        loss:
                            Loss::Lost {
                                holder,
                                holder_name,
                                reason,
                            },
                        ..
                    } => {
                        return Some(Event::Lost {
                            holder,
                            holder_name,
                            reason,
                        })
                    }
                    SetEvent::Released { released, .. } => return Some(Event::Released(released)),
                    _ => {}
                }
            },
        }
    }

    /// Every event until none came for `quiet`.
    fn drain(&self, quiet: Duration) -> Vec<Event> {
        std::iter::from_fn(|| self.next(quiet)).collect()
    }
}

/// One kept lease on a [`Rigged`] store, its events and its loss
/// callback's calls.
struct Rig {
    store: Arc<Rigged>,
    clock: TestClock,
    handle: Option<Handle>,
    owner: Owner,
    events: Events,
    /// Each call of the loss callback, with the name of its thread.
    losses: Receiver<(Loss, String)>,
}

impl Rig {
    fn new(kind: Kind) -> Rig {
        Rig::with(kind, Callback::Reports)
    }

    fn with(kind: Kind, callback: Callback) -> Rig {
        let clock = TestClock::new();
        let store = Rigged::new(&clock);
        let (tx, losses) = crossbeam_channel::unbounded();
        let on_loss = move |loss: &Loss| {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            let _ = tx.send((loss.clone(), thread));
            match &callback {
                Callback::Reports => {}
                Callback::Blocks(go_on) => {
                    let _ = go_on.recv_timeout(PATIENCE);
                }
                Callback::Panics => panic!("the loss callback panics"),
            }
        };
        let (handle, owner, events) = match kind {
            Kind::Keeper => Rig::keeper(&store, &clock, on_loss),
            Kind::Pooled => Rig::pooled(&store, &clock, on_loss),
            Kind::Held => Rig::held(&store, &clock, on_loss),
        };
        Rig {
            store,
            clock,
            handle: Some(handle),
            owner,
            events,
            losses,
        }
    }

    fn lease_options(clock: &TestClock) -> LeaseOptions {
        LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone()))
    }

    fn take(store: &Arc<Rigged>, clock: &TestClock) -> Lease {
        Contender::new(
            Arc::clone(store) as Arc<dyn Store>,
            PREFIX,
            Rig::lease_options(clock),
        )
        .try_acquire()
        .expect("a free prefix is taken")
    }

    /// A [`Keeper`] with `on_loss` as its loss callback.
    fn keeper(
        store: &Arc<Rigged>,
        clock: &TestClock,
        on_loss: impl Fn(&Loss) + Send + Sync + 'static,
    ) -> (Handle, Owner, Events) {
        let keeper = Keeper::spawn(
            Rig::take(store, clock),
            KeeperOptions::new().on_loss(on_loss),
        )
        .expect("the thread starts");
        let events = Events::Keeper(keeper.events().clone());
        (Handle::Keeper(keeper), Owner::Itself, events)
    }

    fn pool_options(
        clock: &TestClock,
        on_loss: impl Fn(&Loss) + Send + Sync + 'static,
    ) -> PoolOptions {
        PoolOptions::new()
            .renewal_threads(2)
            .clock(Arc::new(clock.clone()))
            .on_loss(move |loss| on_loss(&loss.loss))
    }

    /// A [`PooledLease`] of a pool with `on_loss` as its loss callback.
    fn pooled(
        store: &Arc<Rigged>,
        clock: &TestClock,
        on_loss: impl Fn(&Loss) + Send + Sync + 'static,
    ) -> (Handle, Owner, Events) {
        let pool = KeeperPool::spawn(Rig::pool_options(clock, on_loss)).expect("threads start");
        let lease = pool.add(Rig::take(store, clock));
        let events = Events::Pool(pool.events().clone());
        (Handle::Pooled(lease), Owner::Pool(pool), events)
    }

    /// The [`HeldPrefix`] of a set of one prefix, whose pool has `on_loss`
    /// as its loss callback. After a loss the set tries the prefix again
    /// only after an hour (on the test clock), so that no case sees it
    /// taken again unless it moves the clock that far.
    fn held(
        store: &Arc<Rigged>,
        clock: &TestClock,
        on_loss: impl Fn(&Loss) + Send + Sync + 'static,
    ) -> (Handle, Owner, Events) {
        let options = HeldSetOptions::new(Rig::lease_options(clock))
            .pool(Rig::pool_options(clock, on_loss))
            .retry_pause(secs(3600));
        let set = HeldSet::spawn(
            Arc::clone(store) as Arc<dyn Store>,
            [PREFIX.to_string()],
            options,
        )
        .expect("threads start");
        match set.events().recv_timeout(PATIENCE) {
            Ok(SetEvent::Taken { prefix, .. }) => assert_eq!(prefix, PREFIX),
            other => panic!("expected the prefix taken, got {other:?}"),
        }
        let held = set.get(PREFIX).expect("the prefix is held");
        let events = Events::Set(set.events().clone());
        (Handle::Held(held), Owner::Set(set), events)
    }

    fn handle(&self) -> &Handle {
        self.handle.as_ref().expect("not stopped yet")
    }

    fn kept(&self) -> &dyn KeptLease {
        self.handle().kept()
    }

    /// The handle, to stop (on another thread, say).
    fn take_handle(&mut self) -> Handle {
        self.handle.take().expect("not stopped yet")
    }

    fn stop(&mut self) -> Result<Released, LeaseError> {
        self.take_handle().stop()
    }

    fn clone_handle(&self) -> Handle {
        self.handle()
            .try_clone()
            .expect("a pooled lease or a held prefix has clones")
    }

    /// Stop the pool or the set that keeps the lease.
    fn stop_owner(&mut self) {
        match std::mem::replace(&mut self.owner, Owner::Itself) {
            Owner::Itself => panic!("a keeper is its own owner"),
            Owner::Pool(pool) => drop(pool.stop()),
            Owner::Set(set) => drop(set.stop()),
        }
    }

    fn next_event(&self) -> Event {
        self.events
            .next(PATIENCE)
            .expect("an event within the patience")
    }

    fn drain(&self) -> Vec<Event> {
        self.events.drain(QUIET)
    }

    /// Once the keeping thread sleeps on a timer, so that the clock may move.
    fn until_asleep(&self) {
        assert!(
            real_wait(|| self.clock.pending_timers() >= 1),
            "the keeper sleeps on a timer"
        );
    }

    /// The one call of the loss callback.
    fn loss_heard(&self) -> (Loss, String) {
        self.losses
            .recv_timeout(PATIENCE)
            .expect("the loss callback is called")
    }

    fn no_more_losses(&self) {
        if let Ok(more) = self.losses.recv_timeout(QUIET) {
            panic!("the loss callback is called once, then got {more:?}");
        }
    }

    /// A refused write elsewhere marks the lease lost (to `holder`); the
    /// keeper sees it at its next wake-up, a renewal interval on.
    fn lost_by_a_writer(&self, holder: Option<&str>) {
        self.until_asleep();
        self.kept().lease().mark_lost(holder.map(str::to_string));
        self.clock.advance(INTERVAL);
    }

    /// A renewal falls due: the clock moves a renewal interval on.
    fn renewal_due(&self) {
        self.until_asleep();
        self.clock.advance(INTERVAL);
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Whatever a case ends with, nothing stays held at the store, so
        // that a failed assertion cannot leave a stop waiting for ever.
        self.store.closed.store(false, Ordering::SeqCst);
        self.store.hang.store(false, Ordering::SeqCst);
        self.store.fail_holding.store(false, Ordering::SeqCst);
        self.store.panic_holding.store(false, Ordering::SeqCst);
        self.store.panic_all.store(false, Ordering::SeqCst);
        if self.store.hung.load(Ordering::SeqCst) > 0 {
            self.clock.advance(secs(3600));
        }
    }
}

fn lost_to(answer: &Result<Released, LeaseError>) -> Option<&str> {
    match answer {
        Err(LeaseError::Lost { holder, .. }) => holder.as_deref(),
        other => panic!("expected Err(Lost), got {other:?}"),
    }
}

fn is_fenced(answer: &Result<Released, LeaseError>) -> bool {
    matches!(answer, Err(LeaseError::Fenced { .. }))
}

/// For a handle with clones: a second stop, of a clone taken before the
/// first, releases nothing more and answers as `check` wants.
fn a_clone_answers_alike(
    rig: &Rig,
    clone: Option<Handle>,
    check: impl Fn(&Result<Released, LeaseError>) -> bool,
) {
    let Some(clone) = clone else { return };
    let record = rig.store.inner.peek(KEY);
    let writes = rig.store.inner.puts();
    let again = clone.stop();
    assert!(check(&again), "the second stop answered {again:?}");
    assert_eq!(
        rig.store.inner.puts(),
        writes,
        "a second stop writes nothing"
    );
    assert_eq!(rig.store.inner.peek(KEY), record, "nor changes the record");
    assert!(
        rig.losses.try_recv().is_err(),
        "nor calls the loss callback"
    );
}

// --------------------------------------------------------------- cases

/// A takeover seen by a renewal: `Lost` naming the new holder (and its
/// name for people), `may_write()` false as the event comes, the loss
/// callback called once (a keeper's on its renewal thread), and the stop
/// `Err(Lost)` naming the holder, the new holder's record left alone.
fn a_takeover_seen_by_a_renewal(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.handle().try_clone();
    rig.store.usurp();
    rig.renewal_due();
    match rig.next_event() {
        Event::Lost {
            holder,
            holder_name,
            ..
        } => {
            assert!(!rig.kept().may_write(), "false before the event");
            assert_eq!(holder.as_deref(), Some("usurper"));
            assert_eq!(holder_name.as_deref(), Some("night-shift"), "its name too");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(rig.kept().write_deadline().is_none());
    let (loss, thread) = rig.loss_heard();
    match loss {
        Loss::Lost { holder, .. } => assert_eq!(holder.as_deref(), Some("usurper")),
        other => panic!("expected Lost, got {other:?}"),
    }
    if kind == Kind::Keeper {
        assert_eq!(thread, "bucket-lease", "on the keeper's renewal thread");
    }
    let stopped = rig.stop();
    assert_eq!(
        lost_to(&stopped),
        Some("usurper"),
        "a lost lease never stops as released"
    );
    assert_eq!(
        rig.store.record().instance_id,
        "usurper",
        "the new holder's record stays"
    );
    assert!(!rig.store.is_released());
    rig.no_more_losses();
    a_clone_answers_alike(&rig, clone, |a| lost_to(a) == Some("usurper"));
}

/// A takeover between two renewals, seen only by the stop's release: the
/// stop is `Err(Lost)` naming the new holder, whose record stays, and the
/// loss callback hears of it. A keeper's `stop_with_release` still says
/// what the release did.
fn a_takeover_seen_only_by_the_stop(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.handle().try_clone();
    rig.store.usurp();
    let stopped = rig.stop();
    assert_eq!(lost_to(&stopped), Some("usurper"));
    assert!(!rig.store.is_released(), "the new holder's record stays");
    match rig.loss_heard().0 {
        Loss::Lost { holder, .. } => assert_eq!(holder.as_deref(), Some("usurper")),
        other => panic!("expected Lost, got {other:?}"),
    }
    rig.no_more_losses();
    a_clone_answers_alike(&rig, clone, |a| matches!(a, Err(LeaseError::Lost { .. })));
    if kind == Kind::Keeper {
        let mut rig = Rig::new(kind);
        rig.store.usurp();
        let Handle::Keeper(keeper) = rig.take_handle() else {
            unreachable!()
        };
        match keeper.stop_with_release() {
            Ok(Released::LeftAlone { holder, .. }) => {
                assert_eq!(holder.as_deref(), Some("usurper"))
            }
            other => panic!("expected the release's LeftAlone, got {other:?}"),
        }
        assert!(!rig.store.is_released());
    }
}

/// Renewals that keep failing end in the fence, at the write deadline
/// (within the half-second step), after retries; the loss callback hears
/// `Fenced` and, blocked, delays nothing; no renewal follows the fence;
/// the stop is `Err(Fenced)` and our record is freed.
fn renewals_failing_until_the_fence(kind: Kind) {
    let (go_on_tx, go_on) = crossbeam_channel::bounded(1);
    let mut rig = Rig::with(kind, Callback::Blocks(go_on));
    let clone = rig.handle().try_clone();
    let deadline = rig.kept().write_deadline().expect("held");
    rig.store.fail_holding.store(true, Ordering::SeqCst);
    rig.until_asleep();
    let mut failures = 0;
    let fenced_at = loop {
        rig.clock.advance(Duration::from_millis(500));
        match rig.events.next(QUIET) {
            Some(Event::RenewalFailed { .. }) => failures += 1,
            Some(Event::Fenced) => {
                assert!(!rig.kept().may_write(), "false before the event");
                break rig.clock.now();
            }
            Some(other) => panic!("unexpected {other:?}"),
            None => assert!(rig.clock.now() < deadline + secs(1), "no Fenced event"),
        }
    };
    assert!(fenced_at >= deadline && fenced_at < deadline + secs(1));
    let stats = rig.kept().stats();
    let failed = stats.renewals.failed + stats.renewals.timed_out + stats.renewals.refused;
    assert!(failed >= 3 && stats.retries >= 2, "retried: {stats:?}");
    if kind != Kind::Held {
        // A set passes its pool's renewal events over.
        assert_eq!(u64::try_from(failures).unwrap(), failed, "one event each");
    }
    // The callback blocks: the lease is fenced all the same.
    assert_eq!(rig.losses.recv_timeout(PATIENCE).unwrap().0, Loss::Fenced);
    assert!(!rig.kept().may_write() && rig.kept().write_deadline().is_none());
    go_on_tx.send(()).unwrap();
    let writes = rig.store.holding_writes();
    rig.clock.advance(secs(60));
    assert!(
        !rig.drain()
            .iter()
            .any(|e| matches!(e, Event::RenewalFailed { .. } | Event::Renewed { .. })),
        "no renewal after the fence"
    );
    assert_eq!(
        rig.store.holding_writes(),
        writes,
        "no renewal after the fence"
    );
    rig.store.fail_holding.store(false, Ordering::SeqCst);
    let stopped = rig.stop();
    assert!(
        is_fenced(&stopped),
        "a fenced lease never stops as released: {stopped:?}"
    );
    assert!(rig.store.is_released(), "our record is freed");
    rig.no_more_losses();
    a_clone_answers_alike(&rig, clone, is_fenced);
}

/// The wall clock steps forward past the fence: the lease's own status
/// says fenced (`may_write()` false) before the keeper's next wake-up, and
/// a stop then is not `Ok`: `Err(Fenced)`.
fn fenced_by_a_stepped_wall_clock(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.handle().try_clone();
    rig.until_asleep();
    rig.clock.step_wall(secs(TTL_S), true);
    assert!(!rig.kept().may_write(), "fenced by the wall clock");
    let stopped = rig.stop();
    assert!(
        is_fenced(&stopped),
        "a lease fenced when stopped was not held to the end, yet stop answered {stopped:?}"
    );
    assert_eq!(rig.loss_heard().0, Loss::Fenced);
    rig.no_more_losses();
    a_clone_answers_alike(&rig, clone, is_fenced);
}

/// A stop that has to wait for a renewal hanging until the write
/// deadline: the lease is fenced at that deadline, reported `Fenced`, and
/// the stop answers `Err(Fenced)` (the release itself goes through).
fn a_stop_during_a_renewal_that_hangs_past_the_fence(kind: Kind) {
    let mut rig = Rig::new(kind);
    let deadline = rig.kept().write_deadline().unwrap();
    rig.store.hang.store(true, Ordering::SeqCst);
    rig.renewal_due();
    assert!(
        real_wait(|| rig.store.hung.load(Ordering::SeqCst) == 1),
        "the renewal hangs"
    );
    let handle = rig.take_handle();
    let lease = Arc::clone(handle.kept().lease());
    let stopped = std::thread::scope(|s| {
        let stopping = s.spawn(move || handle.stop());
        // Whether the stop is asked before the fence or at it, the
        // answer is the same.
        std::thread::sleep(QUIET);
        rig.store.hang.store(false, Ordering::SeqCst);
        rig.clock.advance(deadline - rig.clock.now());
        stopping.join().unwrap()
    });
    assert!(!lease.may_write());
    let events = rig.drain();
    assert!(
        is_fenced(&stopped),
        "the lease was fenced while the stop waited, yet stop answered {stopped:?} \
         (events {events:?})"
    );
    if kind == Kind::Held {
        // A set reports a prefix it gave up once, with the stop's answer.
        assert!(
            matches!(
                events[..],
                [Event::Released(Err(LeaseError::Fenced { .. }))]
            ),
            "{events:?}"
        );
    } else {
        assert!(events.contains(&Event::Fenced), "{events:?}");
    }
    assert!(rig.store.is_released(), "our record is freed");
}

/// A stop that waits for a renewal in flight, which then finds the record
/// taken over: one `Lost` event, and the stop answers `Err(Lost)`.
fn a_stop_during_a_renewal_that_finds_a_takeover(kind: Kind) {
    let mut rig = Rig::new(kind);
    rig.store.closed.store(true, Ordering::SeqCst);
    rig.renewal_due();
    assert!(
        real_wait(|| rig.store.waiting.load(Ordering::SeqCst) == 1),
        "the renewal waits at the gate"
    );
    // Meanwhile another holder takes the record (a takeover after a stall).
    rig.store.usurp();
    let handle = rig.take_handle();
    let lease = Arc::clone(handle.kept().lease());
    let stopped = std::thread::scope(|s| {
        let stopping = s.spawn(move || handle.stop());
        std::thread::sleep(QUIET);
        rig.store.closed.store(false, Ordering::SeqCst);
        stopping.join().unwrap()
    });
    assert!(!lease.may_write());
    let events = rig.drain();
    // A set reports a prefix it gave up once, with the stop's answer.
    let lost_events = events
        .iter()
        .filter(|e| match e {
            Event::Lost { .. } => true,
            Event::Released(Err(LeaseError::Lost { .. })) => kind == Kind::Held,
            _ => false,
        })
        .count();
    assert!(
        lost_events == 1 && lost_to(&stopped) == Some("usurper"),
        "the lease was lost to \"usurper\" while the stop waited: expected one Lost \
         event and Err(Lost), got events {events:?} and stop {stopped:?}"
    );
}

/// A clean stop: `Ok(Freed)`, the record freed, one `Released` event and
/// nothing after it, the loss callback never called. A second stop of a
/// clone answers `Ok(AlreadyFree)`.
fn a_clean_stop(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.handle().try_clone();
    assert_eq!(rig.stop(), Ok(Released::Freed));
    assert!(rig.store.is_released());
    let events = rig.drain();
    assert_eq!(
        events,
        [Event::Released(Ok(Released::Freed))],
        "then nothing"
    );
    assert!(rig.losses.recv_timeout(QUIET).is_err(), "no loss");
    a_clone_answers_alike(&rig, clone, |a| *a == Ok(Released::AlreadyFree));
}

/// Dropping what keeps the lease (the keeper, the pool, the set) releases
/// it, and the loss callback is not called.
fn a_drop_releases_without_a_loss(kind: Kind) {
    let mut rig = Rig::new(kind);
    let lease = Arc::clone(rig.kept().lease());
    drop(rig.take_handle());
    drop(std::mem::replace(&mut rig.owner, Owner::Itself));
    assert!(rig.store.is_released());
    assert!(!lease.may_write());
    assert!(rig.losses.recv_timeout(QUIET).is_err(), "no loss");
}

/// Between two renewals the record was taken over and freed by its new
/// holder (or broken): the stop's release finds a record not ours with
/// no live holder. The stop says lost, and the loss callback, promised
/// for every end other than a release that freed the record, hears of it.
fn a_release_that_found_the_record_not_ours(kind: Kind) {
    let mut rig = Rig::new(kind);
    rig.store.usurp_and_free();
    let stopped = rig.stop();
    assert!(
        matches!(stopped, Err(LeaseError::Lost { .. })),
        "not held to the end, yet stop answered {stopped:?}"
    );
    match rig.loss_heard().0 {
        Loss::Lost { .. } => {}
        other => panic!("the loss callback is called with Lost, got {other:?}"),
    }
    rig.no_more_losses();
}

/// After a stop whose release found the record not ours and no longer
/// live (so it answered `Err(Lost)` and the loss callback heard `Lost`),
/// a clone's stop answers the loss too, not `Ok(AlreadyFree)`, which is
/// kept for a clean release.
fn a_second_stop_after_a_release_that_found_the_record_not_ours(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.clone_handle();
    rig.store.usurp_and_free();
    assert!(matches!(rig.stop(), Err(LeaseError::Lost { .. })));
    assert!(matches!(rig.loss_heard().0, Loss::Lost { .. }));
    a_clone_answers_alike(&rig, Some(clone), |a| {
        matches!(a, Err(LeaseError::Lost { .. }))
    });
}

/// After a stop whose release found the record taken over (so it
/// answered `Err(Lost)` naming the new holder), a clone's stop answers
/// the same loss, naming the same holder.
fn a_second_stop_after_a_takeover_seen_by_the_stop_names_the_holder(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.clone_handle();
    rig.store.usurp();
    assert_eq!(lost_to(&rig.stop()), Some("usurper"));
    match rig.loss_heard().0 {
        Loss::Lost { holder, .. } => assert_eq!(holder.as_deref(), Some("usurper")),
        other => panic!("expected Lost, got {other:?}"),
    }
    a_clone_answers_alike(
        &rig,
        Some(clone),
        |a| matches!(a, Err(LeaseError::Lost { holder: Some(h), .. }) if h == "usurper"),
    );
}

/// A stop whose release fails: the stop is an error, the loss callback
/// hears `NotReleased` with the release's error, once; a second stop
/// says the release failed too.
fn a_stop_that_could_not_release(kind: Kind) {
    let mut rig = Rig::new(kind);
    let clone = rig.handle().try_clone();
    rig.store.inner.fail_next_requests(usize::MAX);
    assert!(rig.stop().is_err(), "the release failed");
    match rig.loss_heard().0 {
        Loss::NotReleased(error) => assert!(error.to_string().contains("no answer"), "{error}"),
        other => panic!("expected NotReleased, got {other:?}"),
    }
    rig.no_more_losses();
    a_clone_answers_alike(&rig, clone, |a| matches!(a, Err(LeaseError::Store(_))));
}

/// A panic in a renewal is a loss, not silence: `Lost` with no holder and
/// the panic's message; the stop says lost and frees our record. A
/// release that panics too makes the stop an error, not a panic.
fn a_panic_in_a_renewal(kind: Kind) {
    let mut rig = Rig::new(kind);
    rig.store.panic_holding.store(true, Ordering::SeqCst);
    rig.renewal_due();
    match rig.next_event() {
        Event::Lost { holder, reason, .. } => {
            assert_eq!(holder, None);
            assert!(reason.contains("injected panic in the store"), "{reason}");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(!rig.kept().may_write());
    assert_eq!(rig.kept().stats().losses.lost, 1, "a loss");
    if kind == Kind::Keeper {
        // A pool releases a lost lease at once; a keeper at its stop.
        assert!(rig.kept().lease().is_lost());
    }
    assert!(matches!(rig.stop(), Err(LeaseError::Lost { .. })));
    assert!(rig.store.is_released(), "our record is freed all the same");
    // Every write panics, the release too.
    let mut rig = Rig::new(kind);
    rig.store.panic_all.store(true, Ordering::SeqCst);
    rig.renewal_due();
    assert!(matches!(rig.next_event(), Event::Lost { .. }));
    assert!(rig.stop().is_err());
}

/// A lease marked lost by a writer (a refused fenced write) ends the
/// renewals: `Lost` naming the holder, and no renewal is sent.
fn marked_lost_by_a_writer(kind: Kind) {
    let rig = Rig::new(kind);
    let writes = rig.store.holding_writes();
    rig.lost_by_a_writer(Some("other"));
    match rig.next_event() {
        Event::Lost { holder, .. } => assert_eq!(holder.as_deref(), Some("other")),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(rig.store.holding_writes(), writes, "no renewal");
}

/// A loss callback that panics stops no release: the stop says lost and
/// our record is freed.
fn a_panicking_loss_callback(kind: Kind) {
    let mut rig = Rig::with(kind, Callback::Panics);
    rig.lost_by_a_writer(None);
    assert!(matches!(rig.next_event(), Event::Lost { .. }));
    assert!(matches!(rig.loss_heard().0, Loss::Lost { .. }));
    assert!(matches!(rig.stop(), Err(LeaseError::Lost { .. })));
    assert!(rig.store.is_released(), "our record is freed all the same");
}

/// A lost lease leaves its pool by itself, releasing its record; two
/// stops (of clones) asked while that release is in flight both answer
/// the loss (neither is told the lease was never held).
fn two_stops_of_a_lost_lease_while_it_leaves(kind: Kind) {
    let rig = Rig::new(kind);
    let (first, second) = (rig.clone_handle(), rig.clone_handle());
    let lease = Arc::clone(rig.kept().lease());
    rig.until_asleep();
    // A refused write elsewhere marks it lost; the pool sees it at its
    // next wake and releases it, and that release's PUT waits.
    rig.store.closed.store(true, Ordering::SeqCst);
    lease.mark_lost(None);
    rig.clock.advance(INTERVAL);
    assert!(
        real_wait(|| rig.store.waiting.load(Ordering::SeqCst) == 1),
        "the lost lease's release is in flight"
    );
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(move || first.stop());
        std::thread::sleep(QUIET);
        let second = s.spawn(move || second.stop());
        std::thread::sleep(QUIET);
        rig.store.closed.store(false, Ordering::SeqCst);
        (first.join().unwrap(), second.join().unwrap())
    });
    assert!(
        matches!(second, Err(LeaseError::Lost { .. })),
        "second: {second:?}"
    );
    assert!(
        matches!(first, Err(LeaseError::Lost { .. })),
        "a stop of a lost lease still leaving must return its loss, got {first:?}"
    );
}

/// A lost lease whose leaving met a stop: a stop after it left answers
/// the loss too, whichever way the first raced the release.
fn a_stop_after_a_lost_lease_left(kind: Kind) {
    let rig = Rig::new(kind);
    let (during, after) = (rig.clone_handle(), rig.clone_handle());
    let lease = Arc::clone(rig.kept().lease());
    rig.until_asleep();
    rig.store.closed.store(true, Ordering::SeqCst);
    lease.mark_lost(None);
    rig.clock.advance(INTERVAL);
    assert!(real_wait(|| rig.store.waiting.load(Ordering::SeqCst) == 1));
    std::thread::scope(|s| {
        let during = s.spawn(move || during.stop());
        std::thread::sleep(QUIET);
        rig.store.closed.store(false, Ordering::SeqCst);
        let during = during.join().unwrap();
        assert!(matches!(during, Err(LeaseError::Lost { .. })), "{during:?}");
    });
    match &rig.owner {
        Owner::Pool(pool) => assert_eq!(pool.len(), 0, "it left"),
        Owner::Set(set) => assert!(set.get(PREFIX).is_none(), "it left"),
        Owner::Itself => unreachable!(),
    }
    let after = after.stop();
    assert!(
        matches!(after, Err(LeaseError::Lost { .. })),
        "a stop after the lost lease left must return its loss, got {after:?}"
    );
}

/// A handle stopped after its pool or set stopped releases nothing more
/// and answers from how the lease ended: `Ok(AlreadyFree)` after the
/// clean release the pool's stop made, the loss after a loss.
fn a_stop_after_the_owner_stopped(kind: Kind) {
    let mut rig = Rig::new(kind);
    rig.stop_owner();
    assert!(rig.store.is_released(), "the owner's stop released it");
    let writes = rig.store.inner.puts();
    assert_eq!(rig.stop(), Ok(Released::AlreadyFree));
    assert_eq!(rig.store.inner.puts(), writes, "nothing more written");
    assert!(rig.losses.recv_timeout(QUIET).is_err(), "no loss");

    let mut rig = Rig::new(kind);
    rig.store.usurp();
    rig.renewal_due();
    assert!(matches!(rig.next_event(), Event::Lost { .. }));
    rig.stop_owner();
    let writes = rig.store.inner.puts();
    assert_eq!(lost_to(&rig.stop()), Some("usurper"));
    assert_eq!(rig.store.inner.puts(), writes, "nothing more written");
    assert_eq!(rig.store.record().instance_id, "usurper");
}

/// A stale clone (of a lease that ended, cleanly or by a loss) stopped
/// after a newer lease of its prefix is kept: it answers from its own
/// lease and never touches the newer one, which is still kept, renewed
/// and not released.
fn a_stale_clone_never_touches_a_newer_lease(kind: Kind) {
    for lost in [false, true] {
        let mut rig = Rig::new(kind);
        let stale = rig.clone_handle();
        let old_epoch = rig.kept().epoch();
        if lost {
            rig.lost_by_a_writer(None);
            assert!(matches!(rig.next_event(), Event::Lost { .. }));
            assert!(
                real_wait(|| rig.store.is_released()),
                "the pool released it"
            );
        } else {
            assert_eq!(rig.stop(), Ok(Released::Freed));
        }
        // The prefix is kept again, under a newer lease.
        let newer = match &rig.owner {
            Owner::Pool(pool) => Handle::Pooled(pool.add(Rig::take(&rig.store, &rig.clock))),
            Owner::Set(set) => {
                // The set tries again a quarter TTL after a stop, the
                // retry pause (an hour here) after a loss, jittered.
                let taken = (0..120).any(|_| {
                    rig.clock.advance(secs(60));
                    matches!(
                        set.events().recv_timeout(Duration::from_millis(50)),
                        Ok(SetEvent::Taken { .. })
                    ) || set.get(PREFIX).is_some_and(|h| h.epoch() > old_epoch)
                });
                assert!(taken, "the set takes its prefix again");
                Handle::Held(set.get(PREFIX).expect("held again"))
            }
            Owner::Itself => unreachable!(),
        };
        assert!(newer.kept().epoch() > old_epoch);
        let record = rig.store.inner.peek(KEY);
        let answer = stale.stop();
        if lost {
            assert!(matches!(answer, Err(LeaseError::Lost { .. })), "{answer:?}");
        } else {
            assert_eq!(answer, Ok(Released::AlreadyFree));
        }
        assert_eq!(
            rig.store.inner.peek(KEY),
            record,
            "the newer lease's record untouched"
        );
        assert!(newer.kept().may_write(), "the newer lease still kept");
        if let Owner::Set(set) = &rig.owner {
            assert!(set.get(PREFIX).is_some(), "the set still holds its prefix");
        }
        // It is still renewed.
        let renewed_at = rig.store.record().renewed_at;
        let before = newer.kept().stats().renewals.ok;
        rig.until_asleep();
        rig.clock.advance(INTERVAL);
        let renewed = real_wait(|| newer.kept().stats().renewals.ok > before);
        assert!(renewed, "the newer lease is renewed");
        assert_ne!(rig.store.record().renewed_at, renewed_at);
        assert_eq!(newer.stop(), Ok(Released::Freed));
    }
}

/// A stop frees the prefix at once: another contender takes it with no
/// wait (a held prefix's: another set, too). A set that gave a prefix up
/// reports it (`SetEvent::Released`) and tries it again only a quarter of
/// the TTL later (jittered: between an eighth and three eighths).
fn a_stop_frees_the_prefix_at_once(kind: Kind) {
    let mut rig = Rig::new(kind);
    let epoch = rig.kept().epoch();
    assert_eq!(rig.stop(), Ok(Released::Freed));
    if kind == Kind::Held {
        let Owner::Set(set) = &rig.owner else {
            unreachable!()
        };
        assert!(set.get(PREFIX).is_none(), "given up");
        // Free at once: another contender takes it on its first attempt.
        let second = Contender::new(
            Arc::clone(&rig.store) as Arc<dyn Store>,
            PREFIX,
            Rig::lease_options(&rig.clock),
        )
        .try_acquire()
        .expect("another contender takes the prefix at once");
        assert!(second.epoch() > epoch);
        assert_eq!(second.release(), Ok(Released::Freed));
        // The first set tries it again a quarter of the TTL later.
        let quarter = secs(TTL_S) / 4;
        let start = rig.clock.now();
        let retaken_after = loop {
            rig.clock.advance(Duration::from_millis(250));
            if let Ok(SetEvent::Taken { .. }) = set.events().recv_timeout(Duration::from_millis(50))
            {
                break rig.clock.now() - start;
            }
            assert!(
                rig.clock.now() - start <= quarter * 3 / 2 + secs(1),
                "taken again within three eighths of the TTL"
            );
        };
        assert!(
            retaken_after >= quarter / 2,
            "not before an eighth: {retaken_after:?}"
        );
    } else {
        let other = Contender::new(
            Arc::clone(&rig.store) as Arc<dyn Store>,
            PREFIX,
            Rig::lease_options(&rig.clock),
        )
        .try_acquire()
        .expect("another contender takes the prefix at once");
        assert!(other.epoch() > epoch);
    }
}

// --------------------------------------------------------------- the table

/// One module per case, one test per handle: `yes` runs the case against
/// that handle; a string says why the case cannot apply to it.
macro_rules! table {
    ($( $case:ident: keeper $k:tt, pooled $p:tt, held $h:tt; )*) => {
        $( mod $case {
            table!(@cell $case, keeper, Keeper, $k);
            table!(@cell $case, pooled, Pooled, $p);
            table!(@cell $case, held, Held, $h);
        } )*
    };
    (@cell $case:ident, $test:ident, $kind:ident, yes) => {
        #[test]
        fn $test() {
            super::$case(super::Kind::$kind);
        }
    };
    (@cell $case:ident, $test:ident, $kind:ident, $why_not:literal) => {};
}

table! {
    a_takeover_seen_by_a_renewal: keeper yes, pooled yes, held yes;
    a_takeover_seen_only_by_the_stop: keeper yes, pooled yes, held yes;
    renewals_failing_until_the_fence: keeper yes, pooled yes, held yes;
    fenced_by_a_stepped_wall_clock: keeper yes, pooled yes, held yes;
    a_stop_during_a_renewal_that_hangs_past_the_fence: keeper yes, pooled yes, held yes;
    a_stop_during_a_renewal_that_finds_a_takeover: keeper yes, pooled yes, held yes;
    a_clean_stop: keeper yes, pooled yes, held yes;
    a_drop_releases_without_a_loss: keeper yes, pooled yes, held yes;
    a_release_that_found_the_record_not_ours: keeper yes, pooled yes, held yes;
    a_stop_that_could_not_release: keeper yes, pooled yes, held yes;
    a_panic_in_a_renewal: keeper yes, pooled yes, held yes;
    marked_lost_by_a_writer: keeper yes, pooled yes, held yes;
    a_panicking_loss_callback: keeper yes, pooled yes, held yes;
    two_stops_of_a_lost_lease_while_it_leaves:
        keeper "a keeper has one handle (no clone), and releases a lost lease only at its stop",
        pooled yes, held yes;
    a_stop_after_a_lost_lease_left:
        keeper "a keeper has one handle (no clone), and releases a lost lease only at its stop",
        pooled yes, held yes;
    a_stop_after_the_owner_stopped:
        keeper "a keeper is its own owner: its stop is the only one",
        pooled yes, held yes;
    a_stale_clone_never_touches_a_newer_lease:
        keeper "a keeper has one handle (no clone) and keeps one lease",
        pooled yes, held yes;
    a_stop_frees_the_prefix_at_once: keeper yes, pooled yes, held yes;
    a_second_stop_after_a_release_that_found_the_record_not_ours:
        keeper "a keeper has one handle (no clone)",
        pooled yes,
        held yes;
    a_second_stop_after_a_takeover_seen_by_the_stop_names_the_holder:
        keeper "a keeper has one handle (no clone)",
        pooled yes,
        held yes;
}
