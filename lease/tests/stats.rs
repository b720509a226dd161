//! A kept lease's totals ([`bucket_lease_core::stats`]): each renewal
//! counted once by outcome, retries, the one loss, the fence's distance,
//! and the Prometheus text, on the memory store with a test clock.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::stats::{prometheus_text, LossReason, RenewalOutcome, LATENCY_BUCKETS_S};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, stats::LeaseStats, store::DeleteMode, store::Object,
    store::PutOptions, store::StoreErrorKind, store::Version, Event, Keeper, KeeperOptions,
    KeeperPool, Lease, LeaseOptions, PoolOptions, Store, StoreError,
};
use crossbeam_channel::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(10);

/// A memory store whose next writes fail with the errors queued.
#[derive(Debug, Default)]
struct Failing {
    inner: MemoryStore,
    next_put_errors: Mutex<Vec<StoreError>>,
}

impl Failing {
    fn fail_puts(&self, errors: Vec<StoreError>) {
        *self.next_put_errors.lock().unwrap() = errors;
    }
}

impl Store for Failing {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if let Some(e) = self.next_put_errors.lock().unwrap().pop() {
            return Err(e);
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
    fn answers_at_once(&self) -> bool {
        true
    }
}

fn start(ttl_s: u64) -> (Arc<Failing>, TestClock, Keeper) {
    let store = Arc::new(Failing::default());
    let clock = TestClock::new();
    let options = LeaseOptions::new(ttl_s).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    (store, clock, keeper)
}

fn next(events: &Receiver<Event>) -> Event {
    events.recv_timeout(PATIENCE).expect("an event within 10 s")
}

/// The value of the one series line that starts with `series`.
fn value(text: &str, series: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .collect();
    assert_eq!(lines.len(), 1, "one line for {series} in:\n{text}");
    lines[0][series.len() + 1..].to_string()
}

#[test]
fn a_new_keeper_is_held_once_with_its_fence_ahead_and_nothing_counted() {
    let (_store, clock, keeper) = start(30);
    let stats = keeper.stats();
    assert!(stats.is_held());
    assert_eq!(stats.state_name(), "held");
    assert_eq!(stats.key, "db/LEASE");
    assert_eq!(stats.epoch, keeper.lease().epoch());
    assert_eq!(stats.transitions, 1);
    assert_eq!(stats.renewals.total(), 0);
    assert_eq!(stats.losses.total(), 0);
    assert_eq!(stats.last_renewal, None);
    assert_eq!(stats.to_fence, Some(Duration::from_secs(20)));
    assert_eq!(stats.held_since, clock.wall());
    clock.advance(Duration::from_secs(5));
    assert_eq!(keeper.stats().to_fence, Some(Duration::from_secs(15)));
}

#[test]
fn each_renewal_is_counted_by_outcome_and_a_retry_after_a_failure() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    clock.advance(Duration::from_secs(10));
    assert!(matches!(next(&events), Event::Renewed { .. }));
    // Popped last first: a timeout, then a plain failure.
    store.fail_puts(vec![
        StoreError::new(StoreErrorKind::Transport, "PUT", "db/LEASE"),
        StoreError::new(StoreErrorKind::Transport, "PUT", "db/LEASE").timed_out(),
    ]);
    clock.advance(Duration::from_secs(10));
    assert!(matches!(next(&events), Event::RenewalFailed { .. }));
    clock.advance(Duration::from_secs(1));
    assert!(matches!(next(&events), Event::RenewalFailed { .. }));
    clock.advance(Duration::from_secs(1));
    assert!(matches!(next(&events), Event::Renewed { .. }));

    let stats = keeper.stats();
    assert_eq!(stats.renewals.ok, 2);
    assert_eq!(stats.renewals.timed_out, 1);
    assert_eq!(stats.renewals.failed, 1);
    assert_eq!(stats.renewals.refused, 0);
    assert_eq!(stats.retries, 2, "the two attempts after a failure");
    assert_eq!(stats.latency.count(), 4);
    assert_eq!(stats.last_renewal, Some(Duration::ZERO), "a test clock");
    assert_eq!(stats.losses.total(), 0);
    assert!(stats.is_held());
    let text = stats.prometheus();
    let key = "key=\"db/LEASE\"";
    assert_eq!(
        value(
            &text,
            &format!("bucket_lease_renewals_total{{{key},outcome=\"ok\"}}")
        ),
        "2"
    );
    assert_eq!(
        value(
            &text,
            &format!("bucket_lease_renewals_total{{{key},outcome=\"timed_out\"}}")
        ),
        "1"
    );
    assert_eq!(
        value(
            &text,
            &format!("bucket_lease_renewal_retries_total{{{key}}}")
        ),
        "2"
    );
    assert_eq!(
        value(
            &text,
            &format!("bucket_lease_renewal_duration_seconds_count{{{key}}}")
        ),
        "4"
    );
    assert_eq!(
        value(
            &text,
            &format!("bucket_lease_renewal_duration_seconds_bucket{{{key},le=\"+Inf\"}}")
        ),
        "4"
    );
    keeper.stop().unwrap();
}

#[test]
fn a_takeover_is_one_refused_renewal_and_one_loss_and_held_goes_to_0() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    let now = format_stamp(clock.wall());
    let usurper = LeaseRecord::new("usurper", now.clone(), now, 30, 2);
    store.inner.insert("db/LEASE", &usurper.to_bytes());
    clock.advance(Duration::from_secs(10));
    assert!(matches!(next(&events), Event::Lost { .. }));
    let stats = keeper.stats();
    assert_eq!(stats.state_name(), "lost");
    assert_eq!(stats.renewals.refused, 1);
    assert_eq!(stats.losses.lost, 1);
    assert_eq!(stats.losses.total(), 1);
    assert_eq!(stats.transitions, 2);
    assert_eq!(stats.to_fence, None);
    let text = stats.prometheus();
    assert_eq!(value(&text, "bucket_lease_held{key=\"db/LEASE\"}"), "0");
    assert_eq!(
        value(&text, "bucket_lease_seconds_to_fence{key=\"db/LEASE\"}"),
        "0"
    );
    assert_eq!(
        value(
            &text,
            "bucket_lease_losses_total{key=\"db/LEASE\",reason=\"lost\"}"
        ),
        "1"
    );
    // The release finds the record another's: still one loss.
    let lease = Arc::clone(keeper.lease());
    assert!(keeper.stop().is_err(), "lost");
    assert_eq!(lease.stats().losses.total(), 1);
}

#[test]
fn the_fence_is_one_loss_and_a_clean_release_is_none() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    store.fail_puts(
        (0..1000)
            .map(|_| StoreError::new(StoreErrorKind::Transport, "PUT", "db/LEASE"))
            .collect(),
    );
    let fenced = loop {
        clock.advance(Duration::from_millis(500));
        if let Ok(Event::Fenced) = events.recv_timeout(Duration::from_millis(100)) {
            break keeper.stats();
        }
        assert!(clock.now() < keeper.lease().confirmed_at() + Duration::from_secs(30));
    };
    assert_eq!(fenced.state_name(), "fenced");
    assert_eq!(fenced.losses.get(LossReason::Fenced), 1);
    assert_eq!(fenced.losses.total(), 1);
    assert!(fenced.renewals.get(RenewalOutcome::Failed) >= 3);
    assert_eq!(fenced.retries, fenced.renewals.total() - 1);
    store.fail_puts(Vec::new());
    let lease = Arc::clone(keeper.lease());
    assert!(keeper.stop().is_err(), "fenced");
    assert_eq!(
        lease.stats().losses.total(),
        1,
        "the release after the fence adds none"
    );

    let (_store, _clock, keeper) = start(30);
    let lease = Arc::clone(keeper.lease());
    keeper.stop().unwrap();
    let released = lease.stats();
    assert_eq!(released.state_name(), "released");
    assert_eq!(released.losses.total(), 0);
    assert_eq!(released.transitions, 2);
    assert!(released
        .prometheus()
        .contains("bucket_lease_held{key=\"db/LEASE\"} 0\n"));
}

#[test]
fn a_stop_whose_release_fails_is_a_loss_not_released() {
    let (store, _clock, keeper) = start(30);
    let lease = Arc::clone(keeper.lease());
    store.fail_puts(
        (0..1000)
            .map(|_| StoreError::new(StoreErrorKind::Transport, "PUT", "db/LEASE").not_sent())
            .collect(),
    );
    assert!(keeper.stop().is_err());
    assert_eq!(lease.stats().losses.get(LossReason::NotReleased), 1);
}

#[test]
fn the_text_writes_each_family_once_with_every_key_escaped() {
    let store = Arc::new(MemoryStore::new());
    let a = Lease::acquire(store.clone(), "a", LeaseOptions::new(30)).unwrap();
    let b = Lease::acquire(store.clone(), "odd\"dir\\x", LeaseOptions::new(30)).unwrap();
    let text = prometheus_text([&a.stats(), &b.stats()]);
    for family in [
        "bucket_lease_held",
        "bucket_lease_epoch",
        "bucket_lease_renewals_total",
        "bucket_lease_renewal_duration_seconds",
        "bucket_lease_seconds_to_fence",
        "bucket_lease_losses_total",
        "bucket_lease_transitions_total",
    ] {
        assert_eq!(
            text.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family} once"
        );
    }
    assert_eq!(value(&text, "bucket_lease_held{key=\"a/LEASE\"}"), "1");
    assert_eq!(
        value(&text, "bucket_lease_held{key=\"odd\\\"dir\\\\x/LEASE\"}"),
        "1"
    );
    let buckets = text
        .lines()
        .filter(|l| l.starts_with("bucket_lease_renewal_duration_seconds_bucket{key=\"a/LEASE\""))
        .count();
    assert_eq!(buckets, LATENCY_BUCKETS_S.len() + 1);
}

#[test]
fn a_pool_keeps_one_series_per_key_across_a_loss_and_a_new_lease() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(0)
            .clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let first = pool.add(Lease::acquire(store.clone(), "shard-1", options.clone()).unwrap());
    clock.advance(Duration::from_secs(10));
    let renewed = pool.events().recv_timeout(PATIENCE).unwrap();
    assert!(
        matches!(renewed.event, Event::Renewed { .. }),
        "{renewed:?}"
    );
    assert_eq!(first.stats().renewals.ok, 1);
    pool.remove(first.id()).unwrap().unwrap();
    let second = pool.add(Lease::acquire(store.clone(), "shard-1", options).unwrap());
    let stats: Vec<LeaseStats> = pool.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].renewals.ok, 1, "the first lease's renewal kept");
    assert_eq!(stats[0].transitions, 3, "held, released, held again");
    assert!(stats[0].is_held());
    assert_eq!(stats[0].epoch, second.lease().epoch());
    let text = prometheus_text(&stats);
    assert_eq!(
        value(&text, "bucket_lease_held{key=\"shard-1/LEASE\"}"),
        "1"
    );
    pool.stop();
}
