//! A held set's hand-over of a prefix it gives up: released only once no
//! write already in flight under it can land, even when the wall clock
//! stepped forward after the write took its deadline (the release waits
//! for the last renewal plus the fence on the monotonic clock); and its
//! totals count one transition for the give-up, not one per renewal while
//! it waits. Both failed when a review wrote them, and were fixed.

use bucket_lease_core::held_set::HeldPrefix;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::store::{DeleteMode, Object, PutOptions, Version};
use bucket_lease_core::{
    clock::{Clock, TestClock},
    HeldSet, HeldSetOptions, KeptLease, LeaseOptions, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TTL_S: u64 = 30;
const STEP: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(90);
/// How far the wall clock steps forward (an NTP correction): less than a
/// renewal interval's slack, so no lease fences and no record expires.
const WALL_STEP: Duration = Duration::from_secs(8);

/// Worker A's link to the bucket. While `armed`, the first read of the
/// second membership slot that finds a record (A's census, seeing B) first
/// starts a slow write under each of A's prefixes (in flight: it may land
/// until the write deadline it took) and then steps the wall clock forward.
struct Hooked {
    inner: Arc<MemoryStore>,
    clock: TestClock,
    armed: AtomicBool,
    fired: AtomicBool,
    slow_data: AtomicBool,
    waiting: AtomicUsize,
    held: Mutex<Vec<HeldPrefix>>,
    /// Each write in flight: its prefix and the write deadline it took.
    writes: Mutex<Vec<(String, Instant)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Held by the test while it advances the clock, by the hook while it acts.
    gate: Mutex<()>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

impl Hooked {
    fn fire(&self) {
        let _gate = self.gate.lock().unwrap();
        let held = self.held.lock().unwrap().clone();
        let before = self.waiting.load(Ordering::SeqCst);
        let mut started = 0;
        for h in held {
            let Some(deadline) = h.write_deadline() else {
                continue;
            };
            let prefix = h.prefix().to_string();
            let writer = h.writer();
            let key = format!("{prefix}/data/part-0");
            self.writes.lock().unwrap().push((prefix, deadline));
            self.threads
                .lock()
                .unwrap()
                .push(std::thread::spawn(move || {
                    let _ = writer.put_new(&key, b"a");
                }));
            started += 1;
        }
        let patience = Instant::now() + PATIENCE;
        while self.waiting.load(Ordering::SeqCst) < before + started {
            assert!(Instant::now() < patience, "writes on their way");
            std::thread::sleep(Duration::from_millis(2));
        }
        // The writes have taken their deadlines and are on their way; now
        // the wall clock steps forward.
        self.clock.step_wall(WALL_STEP, true);
        self.fired.store(true, Ordering::SeqCst);
    }
}

impl Store for Hooked {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let got = self.inner.get(key, deadline);
        if key == "workers/1/LEASE" && got.is_ok() && self.armed.swap(false, Ordering::SeqCst) {
            self.fire();
        }
        got
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if key.contains("/data/") && self.slow_data.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while self.slow_data.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

fn options(clock: &TestClock) -> HeldSetOptions {
    HeldSetOptions::new(LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone())))
        .retry_pause(Duration::from_secs(1))
        .members("workers")
}

fn shards(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shards/{i}")).collect()
}

fn record(store: &MemoryStore, prefix: &str) -> Option<LeaseRecord> {
    store
        .peek(&format!("{prefix}/LEASE"))
        .and_then(|body| LeaseRecord::parse(&body))
}

/// Promise (held_set.rs, `give_up_excess`): a prefix given up is released
/// "once no write already in flight can land (its write deadline as of
/// now), so that the taker never writes beside one of ours". The release
/// instant is the fence read when the writes are stopped; a write that
/// started just before, and a wall-clock step forward in between (which
/// shortens the lease's own fence, on both clocks), leave that write's
/// deadline up to the step later than the release: the prefix is free,
/// and taken, while A's write may still land.
#[test]
fn a_wall_step_forward_does_not_hand_a_prefix_over_before_a_write_in_flight_ends() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let link = Arc::new(Hooked {
        inner: Arc::clone(&store),
        clock: clock.clone(),
        armed: AtomicBool::new(false),
        fired: AtomicBool::new(false),
        slow_data: AtomicBool::new(true),
        waiting: AtomicUsize::new(0),
        held: Mutex::new(Vec::new()),
        writes: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        gate: Mutex::new(()),
    });
    let a = HeldSet::spawn(
        Arc::clone(&link) as Arc<dyn Store>,
        shards(2),
        options(&clock),
    )
    .unwrap();
    let patience = Instant::now() + PATIENCE;
    let step = || {
        std::thread::sleep(Duration::from_millis(20));
        assert!(Instant::now() < patience, "out of patience");
        let _gate = link.gate.lock().unwrap();
        clock.advance(STEP);
    };
    while a.held().iter().filter(|h| h.may_write()).count() < 2 {
        step();
    }
    let a_id = a.held()[0].lease().instance_id().to_string();
    *link.held.lock().unwrap() = a.held();
    link.armed.store(true, Ordering::SeqCst);

    // B joins: A's census sees it, A's share falls to one, and A gives one
    // prefix up.
    let b = HeldSet::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        shards(2),
        options(&clock),
    )
    .unwrap();
    let mut handed_over = None;
    while handed_over.is_none() {
        step();
        std::thread::sleep(Duration::from_millis(20));
        if !link.fired.load(Ordering::SeqCst) {
            continue;
        }
        for (prefix, deadline) in link.writes.lock().unwrap().iter() {
            let free = record(&store, prefix)
                .is_some_and(|r| r.released_at.is_some() || r.instance_id != a_id);
            if free {
                handed_over = Some((prefix.clone(), *deadline, clock.now()));
            }
        }
    }
    let (prefix, deadline, at) = handed_over.unwrap();
    // The taker (B or anyone) may take it from this instant.
    let early = deadline.saturating_duration_since(at);
    link.slow_data.store(false, Ordering::SeqCst);
    for t in std::mem::take(&mut *link.threads.lock().unwrap()) {
        t.join().unwrap();
    }
    a.stop();
    b.stop();
    assert!(
        at >= deadline,
        "{prefix} was handed over (its record released) {early:?} before A's write in \
         flight there could no longer land"
    );
}

/// Promise (stats.rs): transitions count the changes of "held" seen: one
/// more each time the lease is seen no longer held, or held again (a late
/// renewal). A prefix being given up is seen not held by each snapshot
/// (`status`, Fenced) and held again by each renewal (`fence_deadline`):
/// its totals count a fence and a recovery per renewal and snapshot, where
/// the lease was given up once.
#[test]
fn a_prefix_being_given_up_counts_one_transition_not_one_per_renewal() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let a = HeldSet::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        shards(2),
        options(&clock),
    )
    .unwrap();
    let patience = Instant::now() + PATIENCE;
    let step = || {
        std::thread::sleep(Duration::from_millis(20));
        assert!(Instant::now() < patience, "out of patience");
        clock.advance(STEP);
    };
    while a.held().iter().filter(|h| h.may_write()).count() < 2 {
        step();
    }
    let held = a.held();
    let b = HeldSet::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        shards(2),
        options(&clock),
    )
    .unwrap();
    // Snapshot every step (a scraper) until one of A's prefixes is released.
    let released = loop {
        step();
        std::thread::sleep(Duration::from_millis(20));
        for h in &held {
            let _ = h.stats();
        }
        if let Some(h) = held
            .iter()
            .find(|h| record(&store, h.prefix()).is_some_and(|r| r.released_at.is_some()))
        {
            break h;
        }
    };
    let transitions = released.stats().transitions;
    a.stop();
    b.stop();
    // Held from the acquire (1), then not held from the give-up on (2).
    assert_eq!(
        transitions,
        2,
        "{}: transitions after one give-up",
        released.prefix()
    );
}
