//! Inline renewal (`renewal_threads(0)`): a pool renews the leases of
//! stores that answer at once (the memory store) on its scheduler, and
//! any other lease on renewal threads it starts when first needed, so a
//! renewal hanging on such a thread holds no memory lease's renewal, its
//! own lease is still fenced at its deadline, and stopping or dropping
//! the pool releases every lease and joins every thread it started.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::TestClock, pool::PoolEvent, store::DeleteMode, store::Object, store::PutOptions,
    store::Version, Contender, Event, KeeperPool, LeaseError, LeaseOptions, PoolOptions, Released,
    Store, StoreError,
};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A memory store whose writes wait while it is stalled (a directory whose
/// lock another process holds); it does not answer at once.
#[derive(Debug, Default)]
struct Stalling {
    inner: MemoryStore,
    stalled: Mutex<bool>,
    waiting: Mutex<usize>,
    turn: Condvar,
}

impl Stalling {
    fn stall(&self, on: bool) {
        *self.stalled.lock().unwrap() = on;
        self.turn.notify_all();
    }
    fn waiting(&self) -> usize {
        *self.waiting.lock().unwrap()
    }
}

impl Store for Stalling {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let mut stalled = self.stalled.lock().unwrap();
        if *stalled {
            *self.waiting.lock().unwrap() += 1;
            while *stalled {
                stalled = self.turn.wait(stalled).unwrap();
            }
            *self.waiting.lock().unwrap() -= 1;
        }
        drop(stalled);
        self.inner.put(key, body, options)
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

fn next_event(pool: &KeeperPool) -> PoolEvent {
    pool.events()
        .recv_timeout(Duration::from_secs(10))
        .expect("an event within 10 s")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A memory lease and a lease on a stalled store in one inline pool: the
/// memory lease keeps renewing on the scheduler while the other's renewal
/// hangs on a renewal thread; the hanging one is reported `Fenced` at its
/// deadline; the stop waits for the hanging renewal, then releases both,
/// and no request is sent after it returned; every thread is joined (the
/// stores' last references come back).
#[test]
fn an_inline_pool_with_a_hanging_renewal_thread_renews_fences_and_stops() {
    let clock = TestClock::new();
    let options = || LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let memory = Arc::new(MemoryStore::new());
    let stalling = Arc::new(Stalling::default());
    let m = Contender::new(memory.clone(), "m", options())
        .try_acquire()
        .unwrap();
    let s = Contender::new(stalling.clone(), "s", options())
        .try_acquire()
        .unwrap();
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(0)
            .clock(Arc::new(clock.clone()))
            .thread_name("inline-pool"),
    )
    .unwrap();
    let (m, s) = (pool.add(m), pool.add(s));
    stalling.stall(true);
    // Let the scheduler take both leases in before time moves.
    wait_until("both leases scheduled", || clock.pending_timers() >= 1);
    clock.advance(Duration::from_secs(11));
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &PoolEvent| e.id == m.id() && matches!(e.event, Event::Renewed { .. }))
    {
        seen.push(next_event(&pool));
    }
    wait_until("the stalled renewal waits", || stalling.waiting() == 1);
    // Past S's write deadline (20 s after its acquire); M renews again.
    let mut fenced = false;
    let mut m_renewed = 0;
    for _ in 0..5 {
        clock.advance(Duration::from_secs(3));
        while let Ok(e) = pool.events().recv_timeout(Duration::from_millis(300)) {
            match (e.id == s.id(), &e.event) {
                (true, Event::Fenced) => fenced = true,
                (false, Event::Renewed { .. }) => m_renewed += 1,
                (true, other) => panic!("S: {other:?}"),
                (false, other) => panic!("M: {other:?}"),
            }
        }
    }
    assert!(fenced, "S was reported fenced while its renewal hung");
    assert!(!s.may_write());
    assert!(
        m.may_write() && m_renewed >= 1,
        "M renewed {m_renewed} times"
    );

    let s_id = s.id();
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let stopper = std::thread::spawn(move || {
        let released = pool.stop();
        let _ = done_tx.send(());
        released
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "stop waits for the renewal in flight"
    );
    stalling.stall(false);
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the stop returns once the renewal is done (no deadlock)");
    let released = stopper.join().unwrap();
    // S, fenced, was still leaving (its renewal hung): the stop returns its
    // loss, never a clean release; M is released.
    assert_eq!(released.len(), 2, "{released:?}");
    for (id, released) in &released {
        if *id == s_id {
            assert!(
                matches!(released, Err(LeaseError::Fenced { .. })),
                "{released:?}"
            );
        } else {
            assert_eq!(released, &Ok(Released::Freed));
        }
    }
    let puts = (memory.puts(), stalling.inner.puts());
    clock.advance(Duration::from_secs(100));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        puts,
        (memory.puts(), stalling.inner.puts()),
        "a request after stop"
    );
    drop((m, s));
    assert_eq!(
        Arc::strong_count(&stalling),
        1,
        "a thread still holds the store"
    );
    assert_eq!(Arc::strong_count(&memory), 1);
}

/// Dropping an inline pool (no stop) whose renewal threads were started
/// releases everything and joins them.
#[test]
fn dropping_an_inline_pool_with_renewal_threads_releases_and_joins() {
    let clock = TestClock::new();
    let options = || LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let stalling = Arc::new(Stalling::default());
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(0)
            .clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let mut handles = Vec::new();
    for i in 0..5 {
        let lease = Contender::new(stalling.clone(), &format!("p{i}"), options())
            .try_acquire()
            .unwrap();
        handles.push(pool.add(lease));
    }
    wait_until("scheduled", || clock.pending_timers() >= 1);
    clock.advance(Duration::from_secs(11));
    let mut renewed = 0;
    while renewed < 5 {
        if matches!(next_event(&pool).event, Event::Renewed { .. }) {
            renewed += 1;
        }
    }
    drop(pool);
    assert!(handles.iter().all(|h| !h.may_write()));
    drop(handles);
    assert_eq!(Arc::strong_count(&stalling), 1);
    for i in 0..5 {
        let rec = bucket_lease_core::record::LeaseRecord::parse(
            &stalling.inner.peek(&format!("p{i}/LEASE")).unwrap(),
        )
        .unwrap();
        assert!(rec.is_released(), "p{i}");
    }
}
