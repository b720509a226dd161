//! One process, two `Lease` values for one key (issue 28): an old value
//! never touches the record a newer one wrote, whatever the program does
//! with it (renew, release, drop, keeper stop, pool removal, clean-up of an
//! abandoned acquire). Identity is per acquire, not per process: each
//! acquire call draws a claim that its record carries. On the in-memory
//! store with a test clock.

use bucket_lease_core::lease::TRANSIENT_WRITE_TRIES;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::TestClock, error::HolderRelation, Contender, Keeper, KeeperOptions, KeeperPool, Lease,
    LeaseError, LeaseOptions, PoolOptions, Released,
};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "db/LEASE";
const NAME: &str = "backup-host-1";
const TTL_S: u64 = 30;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

struct World {
    store: Arc<MemoryStore>,
    clock: TestClock,
}

impl World {
    fn new() -> Self {
        World {
            store: Arc::new(MemoryStore::new()),
            clock: TestClock::new(),
        }
    }

    fn options(&self) -> LeaseOptions {
        LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone()))
    }

    /// A contender named [`NAME`] in this test's own process.
    fn ours(&self) -> Contender {
        Contender::new(self.store.clone(), "db", self.options()).with_instance_id(NAME)
    }

    /// A contender in another process.
    fn other_process(&self) -> Contender {
        Contender::new(self.store.clone(), "db", self.options())
            .with_instance_id("other-host")
            .with_instance_nonce("another-process")
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.store.peek(KEY).expect("a LEASE object")).expect("a record")
    }
}

/// The error of a second acquire while another live value of this process
/// holds the record.
fn assert_held_by_this_process(result: Result<Lease, LeaseError>, epoch: u64) {
    match result {
        Err(
            ref e @ LeaseError::Held {
                ref holder,
                relation,
                ..
            },
        ) => {
            assert_eq!(holder, NAME);
            assert_eq!(relation, HolderRelation::ThisProcess, "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("another Lease of this process (epoch {epoch}, "))
                    && text.contains("release or drop it"),
                "{text}"
            );
        }
        Err(other) => panic!("expected Held by this process, got {other}"),
        Ok(lease) => panic!(
            "a second acquire took the record of a live lease of this process (epoch {})",
            lease.epoch()
        ),
    }
}

/// The schedule: a plain retry loop re-acquires after `Fenced`
/// while the old value lives, then drops it.
#[test]
fn a_retry_loop_never_lets_the_old_value_free_the_new_one() {
    let w = World::new();
    let mut contender = w.ours();
    let old = contender.try_acquire().expect("taken");
    assert_eq!(old.epoch(), 1);

    // No renewal for more than two thirds of a TTL: fenced, record fresh.
    w.clock.advance(secs(21));
    assert!(!old.may_write());
    assert_held_by_this_process(contender.try_acquire(), 1);
    assert_eq!(w.record().epoch, 1, "the refused acquire wrote nothing");

    // Once the record is stale it is taken over as another process's
    // would be: at the next epoch.
    w.clock.advance(secs(10));
    let new = contender.try_acquire().expect("stale: taken over");
    assert_eq!(new.epoch(), 2);
    assert!(new.may_write());

    // The old value goes: its release leaves the new record alone.
    assert!(matches!(old.release(), Ok(Released::LeftAlone { .. })));
    drop(old);
    let left = w.record();
    assert_eq!((left.epoch, left.is_released()), (2, false));

    // Nobody else gets in while the new value may write.
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    new.renew().expect("the new value still holds it");
}

/// The old value's renewal, refused on the new record, must not adopt it.
#[test]
fn an_old_value_s_renewal_never_adopts_a_newer_value_s_record() {
    let w = World::new();
    let mut contender = w.ours();
    let old = contender.try_acquire().unwrap();
    w.clock.advance(secs(TTL_S + 1));
    let new = contender.try_acquire().expect("stale: taken over");
    assert_eq!(new.epoch(), 2);
    let written = w.record();

    assert!(
        matches!(old.renew(), Err(LeaseError::Lost { .. })),
        "the newer value's record is not the old one's to adopt"
    );
    assert!(!old.may_write());
    assert_eq!(w.record(), written, "the old renewal wrote nothing");
    new.renew().expect("the new value holds it");
}

/// Two contenders of one process under one id (as `bucket-lease run`
/// builds a second one to clean up): the second is kept out of the first's
/// live lease, and its clean-up of an abandoned acquire leaves it alone.
#[test]
fn a_second_contender_of_the_process_is_kept_out_of_a_live_value() {
    let w = World::new();
    let first = w.ours().try_acquire().unwrap();
    assert_held_by_this_process(w.ours().try_acquire(), 1);
    assert_eq!(
        w.ours().release_abandoned().unwrap(),
        Released::LeftAlone {
            holder: Some(NAME.into()),
            holder_name: first.holder_name().map(Into::into),
        },
        "a live value's record is no abandoned acquire's"
    );
    assert!(!w.record().is_released());
    w.clock.advance(secs(10));
    first.renew().expect("still the first's");
}

/// A value that is gone (released, dropped) leaves nothing behind that
/// keeps its own process out; one that released badly leaves a record that
/// is taken over at once, at the next epoch.
#[test]
fn a_record_no_live_value_holds_is_taken_over_at_once() {
    let w = World::new();
    let mut contender = w.ours();
    let first = contender.try_acquire().unwrap();
    // Its release fails (the answer lost on every write), then it goes.
    w.store.fail_next_requests(16);
    first.release().expect_err("the store failed");
    w.store.fail_next_requests(0);
    drop(first);
    let again = contender.try_acquire().expect("no live value holds it");
    assert_eq!(again.epoch(), 2, "a new value is a new holder");
}

/// Within one acquire call a write that landed unseen is still ours.
#[test]
fn a_lost_answer_of_the_same_acquire_is_still_taken_back_at_its_epoch() {
    let w = World::new();
    w.store.lose_next_answers(1);
    let lease = w.ours().try_acquire().expect("its own write, read back");
    assert_eq!(lease.epoch(), 1);
    assert!(lease.may_write());

    // An acquire that failed after every write landed unseen leaves an
    // orphan: the next acquire of the process takes it at the next epoch.
    drop(lease);
    let w = World::new();
    w.store.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    w.ours().try_acquire().expect_err("no answer ever came");
    assert_eq!(w.record().epoch, 1);
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    let lease = w.ours().try_acquire().expect("an orphan of this process");
    assert_eq!(lease.epoch(), 2);
}

/// The keeper form of the retry loop: `keeper = Keeper::spawn(...)`
/// builds the new keeper before the old one is dropped.
#[test]
fn replacing_a_fenced_keeper_never_frees_the_new_lease() {
    let w = World::new();
    let mut contender = w.ours();
    let mut keeper = Keeper::spawn(contender.try_acquire().unwrap(), KeeperOptions::new()).unwrap();
    // The store refuses every request: the keeper cannot renew.
    w.store.fail_next_requests(usize::MAX);
    w.clock.advance(secs(TTL_S + 1));
    assert!(!keeper.may_write());
    w.store.fail_next_requests(0);
    keeper = Keeper::spawn(contender.try_acquire().unwrap(), KeeperOptions::new()).unwrap();
    assert_eq!(keeper.lease().epoch(), 2);
    let left = w.record();
    assert_eq!((left.epoch, left.is_released()), (2, false));
    assert!(keeper.may_write());
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    drop(keeper);
}

/// The pool form: on loss, acquire again, `add` the new lease, `remove`
/// the old id (which releases the old value).
#[test]
fn a_pool_removing_the_old_value_never_frees_the_new_one() {
    let w = World::new();
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(1)
            .clock(Arc::new(w.clock.clone())),
    )
    .unwrap();
    let mut contender = w.ours();
    let old = pool.add(contender.try_acquire().unwrap());
    w.store.fail_next_requests(usize::MAX);
    w.clock.advance(secs(TTL_S + 1));
    assert!(!old.may_write());
    w.store.fail_next_requests(0);
    let new = pool.add(contender.try_acquire().unwrap());
    assert_eq!(new.lease().epoch(), 2);
    let removed = pool.remove(old.id()).expect("the old id was in the pool");
    assert!(
        !matches!(removed, Ok(Released::Freed)),
        "the old value freed a record: {removed:?}"
    );
    let left = w.record();
    assert_eq!((left.epoch, left.is_released()), (2, false));
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    drop(pool.stop());
}
