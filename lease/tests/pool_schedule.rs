//! Each lease of a `KeeperPool` keeps its own schedule, as a `Keeper`
//! would: renewed every third of its TTL, fenced at its own write
//! deadline and alone (a black-holed lease, or one whose renewal waits
//! in the queue behind hanging ones, is reported `Fenced` at its own
//! deadline while the others are renewed), and its store warmed up
//! shortly before each renewal, once, on a thread that never holds a
//! renewal or a remove.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::{KeeperPool, PoolEvent, PoolOptions};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, store::DeleteMode, store::Object, store::PutOptions,
    store::StoreErrorKind, store::Version, Contender, Event, LeaseError, LeaseOptions, Released,
    Store, StoreError,
};
use crossbeam_channel::Receiver;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_S: u64 = 3;

fn take(store: &Arc<dyn Store>, prefix: &str) -> bucket_lease_core::Lease {
    Contender::new(Arc::clone(store), prefix, LeaseOptions::new(TTL_S))
        .try_acquire()
        .expect("a free prefix is taken")
}

/// A store whose PUTs to one key hang until their deadline, once that key
/// is named.
#[derive(Debug, Default)]
struct BlackHole {
    inner: MemoryStore,
    hole: std::sync::Mutex<String>,
}

impl Store for BlackHole {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if *self.hole.lock().unwrap() == key {
            if let Some(d) = options.deadline {
                std::thread::sleep(d.saturating_duration_since(Instant::now()));
            }
            return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out());
        }
        self.inner.put(key, body, options)
    }
    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}

#[test]
fn a_black_holed_lease_fences_alone() {
    let hole = Arc::new(BlackHole::default());
    let store: Arc<dyn Store> = Arc::clone(&hole) as Arc<dyn Store>;
    let pool = KeeperPool::spawn(PoolOptions::new().renewal_threads(2)).expect("threads start");
    let others: Vec<_> = (0..20)
        .map(|i| pool.add(take(&store, &format!("ok-{i}"))))
        .collect();
    let cut = pool.add(take(&store, "cut"));
    // From now on every renewal of `cut` hangs until its write deadline.
    *hole.hole.lock().unwrap() = "cut/LEASE".to_string();
    std::thread::sleep(Duration::from_secs(3 * TTL_S));
    let mut fenced = HashSet::new();
    for e in pool.events().try_iter() {
        if e.event == Event::Fenced {
            fenced.insert(e.key);
        }
    }
    assert_eq!(fenced, HashSet::from(["cut/LEASE".to_string()]));
    assert!(!cut.may_write());
    for lease in &others {
        assert!(lease.may_write(), "{} was fenced too", lease.lease().key());
    }
}

/// A store on a test clock whose PUTs, once `hang` is set, are held until
/// their deadline on that clock and then time out: a renewal that hangs
/// for as long as it may.
#[derive(Debug)]
struct HangUntilDeadline {
    inner: MemoryStore,
    clock: TestClock,
    hang: AtomicBool,
    /// PUTs being held now.
    held: AtomicUsize,
}

impl Store for HangUntilDeadline {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if !self.hang.load(Ordering::SeqCst) {
            return self.inner.put(key, body, options);
        }
        if let Some(d) = options.deadline {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = self.clock.timer(d).recv();
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out())
    }
    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}

/// Whatever a test ends with, held PUTs are let go (and none held again)
/// before the pool is dropped, so a failed assertion cannot leave the pool
/// waiting for ever on a clock nobody moves.
struct LetGo<'a>(&'a HangUntilDeadline);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        self.0.hang.store(false, Ordering::SeqCst);
        self.0.clock.advance(Duration::from_secs(3600));
    }
}

/// Wait (in real time, at most `patience`) until `ready()`; whether it was.
fn real_wait(patience: Duration, ready: impl Fn() -> bool) -> bool {
    let until = Instant::now() + patience;
    while !ready() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The next event for `key` within 5 s of real time, skipping other keys'.
fn next_for(events: &Receiver<PoolEvent>, key: &str) -> Option<Event> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(e) if e.key == key => return Some(e.event),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

#[test]
fn a_renewal_queued_behind_a_hanging_one_is_fenced_at_its_own_deadline() {
    let clock = TestClock::new();
    let store = Arc::new(HangUntilDeadline {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        hang: AtomicBool::new(false),
        held: AtomicUsize::new(0),
    });
    let shared: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
    let take = |prefix: &str, ttl_s: u64| {
        let options = LeaseOptions::new(ttl_s).clock(Arc::new(clock.clone()));
        Contender::new(Arc::clone(&shared), prefix, options)
            .try_acquire()
            .expect("a free prefix is taken")
    };
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(1)
            .clock(Arc::new(clock.clone())),
    )
    .expect("threads start");
    let _let_go = LetGo(&store);
    let t0 = clock.now();
    let secs = Duration::from_secs;
    // `long` (TTL 30 s) renews at 10 s and may hang until 20 s; `short`
    // (TTL 6 s, taken at 9 s) renews at 11 s, behind it, and is fenced at
    // 13 s: 7 s before the only renewal thread is free again.
    let long = pool.add(take("long", 30));
    clock.advance(secs(9));
    let short = pool.add(take("short", 6));
    let short_deadline = short.write_deadline().expect("held");
    assert_eq!(short_deadline, t0 + secs(13));
    store.hang.store(true, Ordering::SeqCst);
    clock.advance(secs(1));
    assert!(
        real_wait(secs(10), || store.held.load(Ordering::SeqCst) == 1),
        "long's renewal holds the renewal thread"
    );
    // Let the scheduler queue short's renewal (it then waits on a timer
    // of its own) before the clock reaches short's deadline.
    clock.advance(secs(1));
    real_wait(secs(2), || clock.pending_timers() >= 2);
    clock.advance(short_deadline - clock.now());
    let fenced = next_for(pool.events(), "short/LEASE");
    assert_eq!(
        fenced,
        Some(Event::Fenced),
        "short's Fenced event by its write deadline (13 s), with its renewal still queued \
         behind long's, which hangs until 20 s"
    );
    assert!(clock.now() <= short_deadline + Duration::from_millis(100));
    assert!(!short.may_write());
    assert!(long.may_write(), "long is not due to fence before 20 s");
    // Long's renewal times out at 20 s: long is fenced, and short's stale
    // job, taken only now, reports nothing more.
    // The timeout and the fence fall at the same instant: the failed
    // renewal may be reported first, with no retry left.
    clock.advance(t0 + secs(20) - clock.now());
    let mut next = next_for(pool.events(), "long/LEASE");
    if let Some(Event::RenewalFailed { retrying, .. }) = &next {
        assert!(!retrying, "no time is left to retry at the fence");
        next = next_for(pool.events(), "long/LEASE");
    }
    assert_eq!(next, Some(Event::Fenced));
    // A lease that ended is released by the pool at once: let every held
    // request (those releases included) go, and none hang again.
    store.hang.store(false, Ordering::SeqCst);
    clock.advance(secs(10));
    assert!(real_wait(secs(10), || store.held.load(Ordering::SeqCst) == 0));
    let events = pool.events().clone();
    // Both were fenced: they leave by themselves, and one still leaving
    // is stopped with its loss, never a clean release.
    let released = pool.stop();
    assert!(released.len() <= 2, "{released:?}");
    for (id, released) in released {
        assert!(
            matches!(released, Err(LeaseError::Fenced { .. })),
            "{id:?}: {released:?}"
        );
    }
    let later: Vec<_> = events
        .try_iter()
        .filter(|e| e.event == Event::Fenced)
        .map(|e| e.key)
        .collect();
    assert!(later.is_empty(), "a second Fenced event for {later:?}");
}

/// A memory store that records each warm-up's renewal instant and, given
/// a test clock, takes until that instant to return (a HEAD to a slow
/// service, say), as its contract allows.
#[derive(Debug, Default)]
struct WarmUps {
    inner: MemoryStore,
    dues: std::sync::Mutex<Vec<Instant>>,
    slow_on: Option<TestClock>,
    warming: AtomicUsize,
}

impl WarmUps {
    /// Each warm-up returns only at its renewal's instant on `clock`.
    fn slow(clock: &TestClock) -> Self {
        WarmUps {
            slow_on: Some(clock.clone()),
            ..WarmUps::default()
        }
    }
}

impl Store for WarmUps {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }

    fn warm_up(&self, _key: &str, due: Instant) {
        self.dues.lock().unwrap().push(due);
        if let Some(clock) = &self.slow_on {
            self.warming.fetch_add(1, Ordering::SeqCst);
            let _ = clock.timer(due).recv();
            self.warming.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// As a keeper, the pool has each lease's store warmed up a second before
/// its renewal (a quarter of the interval at most), once, for that
/// renewal's instant; the renewal follows at its time.
#[test]
fn the_pool_warms_each_store_up_shortly_before_each_renewal() {
    let clock = TestClock::new();
    let store = Arc::new(WarmUps::default());
    let shared: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Contender::new(shared, "warm", options)
        .try_acquire()
        .expect("a free prefix is taken");
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(1)
            .clock(Arc::new(clock.clone())),
    )
    .expect("threads start");
    let due = clock.now() + Duration::from_secs(10);
    pool.add(lease);
    let warmed = |n: usize| {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let dues = store.dues.lock().unwrap().clone();
            if dues.len() >= n || Instant::now() > end {
                return dues;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    clock.advance(Duration::from_millis(8_990));
    std::thread::sleep(Duration::from_millis(150));
    assert!(store.dues.lock().unwrap().is_empty(), "too early");
    clock.advance(Duration::from_millis(10));
    assert_eq!(warmed(1), [due]);
    assert!(pool.events().try_recv().is_err(), "warmed, not renewed");
    clock.advance(Duration::from_secs(1));
    let event = pool.events().recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(event.event, Event::Renewed { .. }), "{event:?}");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(store.dues.lock().unwrap().len(), 1, "once per renewal");
    clock.advance(Duration::from_secs(9));
    assert_eq!(warmed(2).len(), 2);
    let _ = pool.stop();
}

/// Lets every timer of the test clock fire when dropped, so nothing the
/// test started waits for ever.
struct LetTimeGo(TestClock);

impl Drop for LetTimeGo {
    fn drop(&mut self) {
        self.0.advance(Duration::from_secs(3600));
    }
}

/// Warm-ups beside renewals on the renewal threads. `long` leases (TTL
/// 30 s, lead 1 s) are warmed up from 9 s until their renewal at 10 s,
/// each warm-up taking until then; `short` (TTL 1 s, taken at 8.9 s) is due
/// at 9.233 s and fenced at 9.566 s. On a healthy store it is renewed, as a
/// keeper would renew it, however many warm-ups are out.
fn a_short_lease_is_renewed_beside_slow_warm_ups(threads: usize, longs: usize) {
    let clock = TestClock::new();
    let store = Arc::new(WarmUps::slow(&clock));
    let shared: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
    let take = |prefix: &str, ttl_s: u64| {
        let options = LeaseOptions::new(ttl_s).clock(Arc::new(clock.clone()));
        Contender::new(Arc::clone(&shared), prefix, options)
            .try_acquire()
            .expect("a free prefix is taken")
    };
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(threads)
            .clock(Arc::new(clock.clone())),
    )
    .expect("threads start");
    let _let_go = LetTimeGo(clock.clone());
    let ms = Duration::from_millis;
    let t0 = clock.now();
    let _longs: Vec<_> = (0..longs)
        .map(|i| pool.add(take(&format!("long{i}"), 30)))
        .collect();
    std::thread::sleep(ms(200));
    clock.advance(ms(8_900));
    let short = pool.add(take("short", 1));
    let deadline = short.write_deadline().unwrap();
    std::thread::sleep(ms(200));
    clock.advance(ms(100)); // 9.0 s: the long leases' warm-ups go out
    assert!(real_wait(Duration::from_secs(5), || {
        store.warming.load(Ordering::SeqCst) >= 1
    }));
    for at in [9_150, 9_233, 9_300, 9_400, 9_500] {
        clock.advance(t0 + ms(at) - clock.now());
        std::thread::sleep(ms(100));
    }
    clock.advance(deadline - clock.now());
    let event = next_for(pool.events(), "short/LEASE");
    assert!(
        matches!(event, Some(Event::Renewed { .. })),
        "short: {event:?}; warm-ups still out: {}",
        store.warming.load(Ordering::SeqCst)
    );
}

#[test]
fn a_warm_up_never_holds_the_only_renewal_thread() {
    a_short_lease_is_renewed_beside_slow_warm_ups(1, 1);
}

#[test]
fn warm_ups_never_fill_the_renewal_threads() {
    a_short_lease_is_renewed_beside_slow_warm_ups(3, 3);
}

/// A remove is answered without waiting behind the lease's own warm-up
/// on the only renewal thread.
#[test]
fn a_remove_never_waits_for_a_warm_up() {
    let clock = TestClock::new();
    let store = Arc::new(WarmUps::slow(&clock));
    let shared: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Contender::new(shared, "a", options).try_acquire().unwrap();
    let pool = Arc::new(
        KeeperPool::spawn(
            PoolOptions::new()
                .renewal_threads(1)
                .clock(Arc::new(clock.clone())),
        )
        .unwrap(),
    );
    let _let_go = LetTimeGo(clock.clone());
    let a = pool.add(lease);
    std::thread::sleep(Duration::from_millis(200));
    clock.advance(Duration::from_secs(9)); // a's warm-up is out until 10 s
    assert!(real_wait(Duration::from_secs(5), || {
        store.warming.load(Ordering::SeqCst) == 1
    }));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (p, id) = (Arc::clone(&pool), a.id());
    std::thread::spawn(move || {
        let _ = tx.send(p.remove(id));
    });
    let removed = rx.recv_timeout(Duration::from_secs(3));
    assert!(
        matches!(removed, Ok(Some(Ok(Released::Freed)))),
        "{removed:?}"
    );
}
