//! A kept lease's totals (`bucket_lease_core::stats`) in the schedules a
//! review found wrong: a late renewal, a release by hand, a renewal by hand
//! beside the keeper. Each test names the promise it checks.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::TestClock, store::DeleteMode, store::Object, store::PutOptions, store::Version, Event,
    Keeper, KeeperOptions, Lease, LeaseOptions, Store, StoreError,
};
use crossbeam_channel::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(10);

/// A memory store whose writes, while `hold` is on, wait until `go` says
/// so (whatever their deadline: an answer that comes late), telling
/// `entered` first.
#[derive(Debug)]
struct Gate {
    inner: MemoryStore,
    hold: Mutex<bool>,
    entered: Sender<()>,
    go: Receiver<()>,
}

fn gate() -> (Arc<Gate>, Receiver<()>, Sender<()>) {
    let (entered_tx, entered_rx) = crossbeam_channel::unbounded();
    let (go_tx, go_rx) = crossbeam_channel::unbounded();
    let store = Arc::new(Gate {
        inner: MemoryStore::new(),
        hold: Mutex::new(false),
        entered: entered_tx,
        go: go_rx,
    });
    (store, entered_rx, go_tx)
}

impl Gate {
    fn hold(&self, on: bool) {
        *self.hold.lock().unwrap() = on;
    }
}

impl Store for Gate {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if *self.hold.lock().unwrap() {
            let _ = self.entered.send(());
            self.go.recv_timeout(PATIENCE).expect("told to go on");
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

fn keeper_on(store: Arc<Gate>, clock: &TestClock) -> Keeper {
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store, "db", options).unwrap();
    Keeper::spawn(lease, KeeperOptions::new()).unwrap()
}

/// Promise: `bucket_lease_transitions_total` is a counter ("changes of
/// held: one at each acquire, one at each end"), so it never goes down
/// within a process's life. A renewal whose answer comes after the write
/// deadline holds the lease again (`Lease::renew_before`'s docs): held
/// goes 1 -> 0 -> 1, and the counter must read 1, 2, 3 (or at least not
/// fall). It reads 1, 2, 1.
#[test]
fn transitions_never_go_down_when_a_late_renewal_holds_the_lease_again() {
    let (store, entered, go) = gate();
    let clock = TestClock::new();
    let keeper = keeper_on(Arc::clone(&store), &clock);
    let events = keeper.events().clone();
    assert_eq!(keeper.stats().transitions, 1);

    // The renewal (10 s in) is sent, and its answer is slow.
    store.hold(true);
    clock.advance(Duration::from_secs(10));
    entered.recv_timeout(PATIENCE).expect("the renewal is sent");
    // Past the write deadline (20 s after the acquire): not held.
    clock.advance(Duration::from_secs(15));
    let fenced = keeper.stats();
    assert!(!fenced.is_held(), "{fenced:?}");
    assert_eq!(fenced.transitions, 2, "held, then not held");

    // The answer lands: held again, to 20 s after the renewal was sent.
    store.hold(false);
    go.send(()).unwrap();
    loop {
        match events.recv_timeout(PATIENCE).expect("an event") {
            Event::Renewed { .. } => break,
            Event::RenewalFailed { .. } => continue,
            other => panic!("{other:?}"),
        }
    }
    let again = keeper.stats();
    assert!(
        again.is_held(),
        "the late renewal holds it again: {again:?}"
    );
    assert!(
        again.transitions >= fenced.transitions,
        "bucket_lease_transitions_total went down from {} to {} (held 1 -> 0 -> 1)",
        fenced.transitions,
        again.transitions
    );
    keeper.stop().unwrap();
}

/// Promise: "Every renewal attempt is counted once ... by outcome", and
/// `failed` is a failure. A program may renew a lease its keeper renews
/// (`Lease::renew_before`'s docs: the one that starts second sends nothing
/// and gets `RenewalInProgress`). Here the only renewal request sent (by
/// hand) landed; the keeper's turn, which sent nothing, is counted
/// `failed` (so `LeaseRenewalsFailing` fires and a retry is counted), and
/// the renewal that landed is counted nowhere.
#[test]
fn a_renewal_by_hand_beside_the_keeper_is_not_a_failed_attempt() {
    let (store, entered, go) = gate();
    let clock = TestClock::new();
    let keeper = keeper_on(Arc::clone(&store), &clock);
    let events = keeper.events().clone();

    store.hold(true);
    let lease = Arc::clone(keeper.lease());
    let by_hand = std::thread::spawn(move || lease.renew());
    entered
        .recv_timeout(PATIENCE)
        .expect("the hand renewal is sent");
    // The keeper's turn comes while the hand renewal is out.
    clock.advance(Duration::from_secs(10));
    let event = events.recv_timeout(PATIENCE).expect("the keeper's turn");
    store.hold(false);
    go.send(()).unwrap();
    by_hand.join().unwrap().expect("the hand renewal landed");

    let stats = keeper.stats();
    assert!(
        stats.renewals.failed == 0 && stats.renewals.ok == 1,
        "one renewal sent, and it landed; the keeper's turn sent nothing ({event:?}); \
         counted: {:?}, retries {}",
        stats.renewals,
        stats.retries
    );
    keeper.stop().unwrap();
}

/// Promise: "A lease ends once. The first of fenced, lost, or
/// released-with-a-failure ... is the loss counted; a clean release is no
/// loss." A lease its program released by hand (cleanly: `Freed`) is
/// counted a `fenced` loss as soon as its keeper looks at it again, so
/// `bucket_lease_losses_total{reason="fenced"}` and the `LeaseLost` alert
/// fire for a lease nobody lost.
#[test]
fn a_clean_release_by_hand_is_no_loss() {
    let (store, _entered, _go) = gate();
    let clock = TestClock::new();
    let keeper = keeper_on(store, &clock);
    let events = keeper.events().clone();
    let released = keeper.lease().release().expect("released by hand");
    assert_eq!(released, bucket_lease_core::Released::Freed);
    let right_after = keeper.stats();
    assert_eq!(right_after.state_name(), "released");
    assert_eq!(right_after.losses.total(), 0, "{right_after:?}");
    // The keeper's next look (its renewal was due 10 s in).
    clock.advance(Duration::from_secs(10));
    let event = events
        .recv_timeout(PATIENCE)
        .expect("the keeper's next step");
    let later = keeper.stats();
    assert_eq!(
        later.losses.total(),
        0,
        "a clean release counted as a loss after the keeper said {event:?}: {:?}",
        later.losses
    );
    let _ = keeper.stop();
}

/// As [`a_clean_release_by_hand_is_no_loss`], in a pool: a pooled lease
/// released by hand is counted a `fenced` loss in `KeeperPool::stats`.
#[test]
fn a_clean_release_by_hand_is_no_loss_in_a_pool() {
    use bucket_lease_core::{KeeperPool, PoolOptions};
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(0)
            .clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let pooled = pool.add(Lease::acquire(store, "shard-1", options).unwrap());
    assert_eq!(
        pooled.lease().release().unwrap(),
        bucket_lease_core::Released::Freed
    );
    clock.advance(Duration::from_secs(10));
    let event = pool
        .events()
        .recv_timeout(PATIENCE)
        .expect("the pool's next look");
    let stats = pool.stats();
    assert_eq!(
        stats[0].losses.total(),
        0,
        "a clean release counted as a loss after the pool said {event:?}: {:?}",
        stats[0].losses
    );
    pool.stop();
}
