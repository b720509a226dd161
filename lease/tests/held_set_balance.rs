//! Held sets that spread over their live workers (`held_set.rs`,
//! "Balance"), on one memory store and one test clock: a worker that joins
//! gets its fair share within 3 TTL, and only the excess moves; a worker
//! that leaves or dies has its share taken by the others (a dead one's
//! within its TTL and a retry); a stable membership moves nothing;
//! `at_most` stays an upper bound. At every step of the clock, no prefix
//! may be written by two workers at once.

use bucket_lease_core::held_set::SetEvent;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::store::{DeleteMode, Object, PutOptions, StoreErrorKind, Version};
use bucket_lease_core::{
    clock::TestClock, HeldSet, HeldSetOptions, KeptLease, LeaseOptions, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_S: u64 = 30;
const TTL: Duration = Duration::from_secs(TTL_S);
/// The clock's step: small beside a renewal interval, so no step fences a
/// lease that renews on its way.
const STEP: Duration = Duration::from_secs(1);

/// A memory store that a worker can lose: once `dead`, every request fails
/// unsent, as for a process that died or was cut off. While `slow_data`,
/// a PUT of a key under `data/` waits (in real time) until it is let go;
/// `waiting` counts those.
#[derive(Debug)]
struct Cuttable {
    inner: Arc<MemoryStore>,
    dead: AtomicBool,
    slow_data: AtomicBool,
    waiting: AtomicUsize,
}

impl Cuttable {
    fn check(&self, method: &'static str, key: &str) -> Result<(), StoreError> {
        match self.dead.load(Ordering::SeqCst) {
            true => Err(StoreError::new(StoreErrorKind::Transport, method, key).not_sent()),
            false => Ok(()),
        }
    }
}

impl Store for Cuttable {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.check("GET", key)?;
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.check("PUT", key)?;
        if key.contains("/data/") && self.slow_data.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while self.slow_data.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.check("DELETE", key)?;
        self.inner.delete(key, mode, d)
    }
}

/// The workers of one set, on one bucket and one clock.
struct Bucket {
    store: Arc<MemoryStore>,
    clock: TestClock,
    shards: Vec<String>,
}

/// One worker: its set, and the store it reaches the bucket through.
struct Worker {
    set: HeldSet,
    link: Arc<Cuttable>,
}

impl Worker {
    fn held(&self) -> usize {
        self.set.held().iter().filter(|h| h.may_write()).count()
    }

    /// The events so far, by kind: given up, taken.
    fn moves(&self) -> (usize, usize) {
        let (mut given_up, mut taken) = (0, 0);
        for event in self.set.events().try_iter() {
            match event {
                SetEvent::Released { .. } => given_up += 1,
                SetEvent::Taken { .. } => taken += 1,
                _ => {}
            }
        }
        (given_up, taken)
    }
}

impl Bucket {
    fn new(shards: usize) -> Self {
        Bucket {
            store: Arc::new(MemoryStore::new()),
            clock: TestClock::new(),
            shards: (0..shards).map(|i| format!("shards/{i}")).collect(),
        }
    }

    fn options(&self) -> HeldSetOptions {
        HeldSetOptions::new(LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone())))
            .retry_pause(Duration::from_secs(1))
    }

    fn join(&self, options: HeldSetOptions) -> Worker {
        let link = Arc::new(Cuttable {
            inner: Arc::clone(&self.store),
            dead: AtomicBool::new(false),
            slow_data: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
        });
        let set = HeldSet::spawn(
            Arc::clone(&link) as Arc<dyn Store>,
            self.shards.clone(),
            options,
        )
        .unwrap();
        Worker { set, link }
    }

    /// No prefix may be written by two workers at once.
    fn one_writer_each(&self, workers: &[&Worker]) {
        for shard in &self.shards {
            let writers = workers
                .iter()
                .filter(|w| w.set.get(shard).is_some_and(|h| h.may_write()))
                .count();
            assert!(writers <= 1, "{shard} may be written by {writers} workers");
        }
    }

    /// Step the clock until `done` holds of the workers' counts, checking
    /// one writer per prefix at each step; the clock time it took.
    fn until(
        &self,
        what: &str,
        workers: &[&Worker],
        within: Duration,
        done: impl Fn(&[usize]) -> bool,
    ) -> Duration {
        let start = bucket_lease_core::clock::Clock::now(&self.clock);
        let patience = Instant::now() + Duration::from_secs(60);
        loop {
            // Let the sets' threads act on this instant.
            std::thread::sleep(Duration::from_millis(20));
            self.one_writer_each(workers);
            let held: Vec<usize> = workers.iter().map(|w| w.held()).collect();
            let elapsed = bucket_lease_core::clock::Clock::now(&self.clock) - start;
            if done(&held) {
                return elapsed;
            }
            assert!(
                elapsed <= within && Instant::now() < patience,
                "{what}: not within {within:?} of the clock ({elapsed:?}): held {held:?}"
            );
            self.clock.advance(STEP);
        }
    }
}

impl Bucket {
    /// Step the clock through `span`, checking one writer per prefix at
    /// each step.
    fn run_for(&self, workers: &[&Worker], span: Duration) {
        let end = bucket_lease_core::clock::Clock::now(&self.clock) + span;
        while bucket_lease_core::clock::Clock::now(&self.clock) < end {
            std::thread::sleep(Duration::from_millis(10));
            self.one_writer_each(workers);
            self.clock.advance(STEP);
        }
    }
}

fn even(held: &[usize], shards: usize) -> bool {
    held.iter().sum::<usize>() == shards
        && held.iter().max().unwrap() - held.iter().min().unwrap() <= 1
}

#[test]
fn a_joiner_gets_its_share_within_three_ttl_and_only_the_excess_moves() {
    let bucket = Bucket::new(12);
    let a = bucket.join(bucket.options());
    bucket.until("A alone takes every shard", &[&a], TTL, |h| h == [12]);
    a.moves();

    let b = bucket.join(bucket.options());
    let took = bucket.until("A and B even", &[&a, &b], 3 * TTL, |h| even(h, 12));
    let ((a_gave, _), (_, b_took)) = (a.moves(), b.moves());
    assert_eq!(a_gave, 6, "A gave up its excess, no more (in {took:?})");
    assert_eq!(b_took, 6, "B took what A gave up");

    // A stable membership moves nothing.
    bucket.run_for(&[&a, &b], 5 * TTL);
    assert_eq!((a.moves(), b.moves()), ((0, 0), (0, 0)), "no churn");
    assert!(even(&[a.held(), b.held()], 12));
    a.set.stop();
    b.set.stop();
}

#[test]
fn workers_started_together_split_the_set_evenly() {
    let bucket = Bucket::new(10);
    let workers: Vec<Worker> = (0..3).map(|_| bucket.join(bucket.options())).collect();
    let all: Vec<&Worker> = workers.iter().collect();
    bucket.until("three even", &all, 3 * TTL, |h| even(h, 10));
    for w in workers {
        w.set.stop();
    }
}

#[test]
fn a_worker_that_leaves_has_its_share_taken_within_three_ttl() {
    let bucket = Bucket::new(10);
    let (a, b, c) = (
        bucket.join(bucket.options()),
        bucket.join(bucket.options()),
        bucket.join(bucket.options()),
    );
    bucket.until("three even", &[&a, &b, &c], 3 * TTL, |h| even(h, 10));
    let released = c.set.stop();
    assert!(released.iter().all(|(_, r)| r.is_ok()), "{released:?}");
    bucket.until("two even", &[&a, &b], 3 * TTL, |h| even(h, 10));
    a.set.stop();
    b.set.stop();
}

#[test]
fn a_dead_workers_share_is_taken_within_its_ttl_and_a_retry() {
    let bucket = Bucket::new(8);
    let (a, b) = (bucket.join(bucket.options()), bucket.join(bucket.options()));
    bucket.until("two even", &[&a, &b], 3 * TTL, |h| even(h, 8));
    // B is cut off: its renewals fail, its leases fence, and its records
    // (its slot's and its prefixes') expire a TTL after its last renewal.
    b.link.dead.store(true, Ordering::SeqCst);
    let took = bucket.until("A holds everything", &[&a, &b], 2 * TTL, |h| h[0] == 8);
    // A TTL from B's last renewal (up to a third of a TTL before the cut),
    // then A's next try of each prefix (a quarter TTL, jittered to 3/8) and
    // its census (a third, jittered to a half).
    assert!(took <= TTL + TTL / 2, "taken {took:?} after the cut");
    a.set.stop();
}

#[test]
fn at_most_stays_an_upper_bound() {
    let bucket = Bucket::new(10);
    let a = bucket.join(bucket.options().at_most(3));
    bucket.until("A holds its cap", &[&a], TTL, |h| h == [3]);
    bucket.run_for(&[&a], TTL);
    assert_eq!(a.held(), 3, "never above the cap, alone");
    let b = bucket.join(bucket.options());
    bucket.until("B holds its share", &[&a, &b], 3 * TTL, |h| h == [3, 5]);
    a.set.stop();
    b.set.stop();
}

#[test]
fn a_prefix_given_up_is_handed_over_only_once_our_writes_in_flight_are_over() {
    let bucket = Bucket::new(2);
    let a = bucket.join(bucket.options());
    bucket.until("A alone takes both", &[&a], TTL, |h| h == [2]);
    // Right after a renewal, so that the writes' deadlines (two thirds of
    // a TTL on) come after any census of A's that follows B's joining (a
    // third of a TTL at most, jittered by half): released at the give-up,
    // as the mutant does, the prefix would go before its deadline.
    let first = a.set.held().pop().expect("held");
    let before = first.write_deadline().expect("held");
    while first.write_deadline().is_none_or(|d| d <= before) {
        bucket.clock.advance(STEP);
        std::thread::sleep(Duration::from_millis(20));
    }
    // A write under each of A's prefixes is on its way, and slow: it may
    // land up to its write deadline.
    a.link.slow_data.store(true, Ordering::SeqCst);
    let writes: Vec<_> = a
        .set
        .held()
        .into_iter()
        .map(|held| {
            let prefix = held.prefix().to_string();
            let deadline = held.write_deadline().expect("held");
            let ours = held.lease().instance_id().to_string();
            let writer = held.writer();
            let key = format!("{prefix}/data/part-0");
            let write = std::thread::spawn(move || writer.put_new(&key, b"a").is_ok());
            (prefix, deadline, ours, write)
        })
        .collect();
    assert!(
        (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            a.link.waiting.load(Ordering::SeqCst) == 2
        }),
        "both writes on their way"
    );
    // B joins: A's share falls to one, and it gives one prefix up. At every
    // step, a prefix's record stays A's and live while A's write there may
    // still land.
    let b = bucket.join(bucket.options());
    let start = bucket_lease_core::clock::Clock::now(&bucket.clock);
    let patience = Instant::now() + Duration::from_secs(60);
    loop {
        // Time for the sets' threads to act on this instant, even on a
        // loaded machine (four steps of slack between a census and the
        // writes' deadlines).
        std::thread::sleep(Duration::from_millis(50));
        let now = bucket_lease_core::clock::Clock::now(&bucket.clock);
        for (prefix, deadline, ours, _) in &writes {
            let record = bucket
                .store
                .peek(&format!("{prefix}/LEASE"))
                .and_then(|body| bucket_lease_core::record::LeaseRecord::parse(&body))
                .expect("a record");
            let still_ours = record.instance_id == *ours && !record.is_released();
            assert!(
                still_ours || now >= *deadline,
                "{prefix} handed over {:?} before A's write in flight there could no longer land",
                *deadline - now
            );
        }
        bucket.one_writer_each(&[&a, &b]);
        if [a.held(), b.held()] == [1, 1] {
            break;
        }
        assert!(
            now - start <= 3 * TTL && Instant::now() < patience,
            "B never took its share"
        );
        bucket.clock.advance(STEP);
    }
    a.link.slow_data.store(false, Ordering::SeqCst);
    for (_, _, _, write) in writes {
        let _ = write.join().unwrap();
    }
    a.set.stop();
    b.set.stop();
}
