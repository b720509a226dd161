//! The conformance suite on the strict in-memory store, and on stores broken
//! on purpose, to show that each check catches the promise it is about.

use bucket_lease_core::conformance::{self, Capabilities};
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, Version,
};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[test]
fn the_strict_memory_store_passes_every_check() {
    let store = MemoryStore::new();
    let started = Instant::now();
    let capabilities: Capabilities = conformance::run_all(&store, "conformance/memory");
    assert!(capabilities.conditional_delete);
    assert!(!capabilities.ignores_delete_conditions);
    assert_eq!(
        store.keys(),
        Vec::<String>::new(),
        "a passing run leaves nothing"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_store_without_conditional_delete_passes_and_is_reported() {
    let store = MemoryStore::new();
    store.set(Misbehaviour::NoConditionalDelete);
    let capabilities = conformance::run_all(&store, "p/");
    assert!(!capabilities.conditional_delete);
    assert!(!capabilities.ignores_delete_conditions);
    assert_eq!(store.keys(), Vec::<String>::new());
}

/// A service that honours conditional PUTs but deletes whatever is there
/// when a DELETE carries `If-Match` (Ceph RGW 16.2): the suite passes it
/// and says so, for a caller that deletes conditionally to check; the
/// check on its own still fails it (below).
#[test]
fn a_store_that_ignores_delete_conditions_passes_and_is_reported() {
    let store = Flawed::new(Flaw::DeleteIgnoresVersion);
    let capabilities = conformance::run_all(&store, "p/");
    assert!(!capabilities.conditional_delete);
    assert!(capabilities.ignores_delete_conditions);
    assert_eq!(store.inner.keys(), Vec::<String>::new());
}

#[test]
fn the_race_retries_an_update_that_met_a_conflict() {
    let store = MemoryStore::new();
    store.conflict_next_writes(3);
    conformance::compare_and_swap_race(&store, "race", 1, 4);
    // The first write, 3 updates answered Conflict, 4 that landed.
    assert_eq!(store.puts(), 8);
    assert_eq!(store.keys(), Vec::<String>::new());
}

/// The panic message of `check`, which must fail.
fn failure_of(check: impl FnOnce()) -> String {
    let payload = panic::catch_unwind(AssertUnwindSafe(check))
        .expect_err("the suite accepted a store that breaks a promise");
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(String::new, |s| s.to_string()),
    }
}

fn assert_caught(check: impl FnOnce(), name: &str, answer: &str) {
    let message = failure_of(check);
    assert!(
        message.starts_with(&format!("store conformance check `{name}` failed on key ")),
        "{message}"
    );
    assert!(message.contains(answer), "{message}");
}

#[test]
fn each_memory_misbehaviour_fails_its_check() {
    let broken = |switch| {
        let store = MemoryStore::new();
        store.set(switch);
        store
    };
    let store = broken(Misbehaviour::IgnoreIfNoneMatch);
    assert_caught(
        || conformance::create_only(&store, "p"),
        "create_only",
        "a create over an existing object answered Ok(",
    );
    let store = broken(Misbehaviour::IgnoreIfMatch);
    assert_caught(
        || conformance::update_if_version(&store, "p"),
        "update_if_version",
        "an update with a stale version answered Ok(",
    );
    let store = broken(Misbehaviour::CreateOnIfMatchAbsent);
    assert_caught(
        || conformance::update_on_absent_key(&store, "p"),
        "update_on_absent_key",
        "an update of an absent key answered Ok(",
    );
    let store = broken(Misbehaviour::NotModifiedOnCreate);
    conformance::create_only(&store, "p"); // still AlreadyExists: conformant
    let store = broken(Misbehaviour::NoConditions);
    assert_caught(
        || conformance::create_only(&store, "p"),
        "create_only",
        "a create on an absent key answered NotImplemented",
    );
}

/// Ways to break a store that `MemoryStore` has no switch for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// Every write answers the same version.
    SameVersion,
    /// Metadata is dropped on write.
    DropsMetadata,
    /// A conditional delete removes whatever is there.
    DeleteIgnoresVersion,
    /// A conditional delete answers NotImplemented, but deletes anyway.
    DeletesDespiteNotImplemented,
    /// A conditional delete answers success and deletes nothing.
    DeleteSucceedsDoingNothing,
    /// A read of an absent key answers an empty object.
    EmptyForAbsent,
    /// Every fifth accepted update answers success but is not stored.
    LosesEveryFifthUpdate,
}

#[derive(Debug)]
struct Flawed {
    inner: MemoryStore,
    flaw: Flaw,
    updates: AtomicU64,
}

impl Flawed {
    fn new(flaw: Flaw) -> Self {
        Flawed {
            inner: MemoryStore::new(),
            flaw,
            updates: AtomicU64::new(0),
        }
    }
}

impl Store for Flawed {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        match self.inner.get(key, deadline) {
            Err(_) if self.flaw == Flaw::EmptyForAbsent => {
                Ok(Object::new(Vec::new(), Version::etag("\"empty\"")))
            }
            Ok(object) if self.flaw == Flaw::SameVersion => {
                Ok(Object::new(object.body, Version::etag("\"same\""))
                    .with_metadata(object.metadata))
            }
            other => other,
        }
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let mut options = options.clone();
        match self.flaw {
            Flaw::DropsMetadata => options.metadata.clear(),
            Flaw::LosesEveryFifthUpdate if matches!(options.mode, PutMode::Update(_)) => {
                let current = self.inner.get(key, None)?;
                if options.mode != PutMode::Update(current.version) {
                    return self.inner.put(key, body, &options);
                }
                if self.updates.fetch_add(1, Ordering::Relaxed) % 5 == 4 {
                    return Ok(Version::etag(format!("\"lost-{}\"", self.inner.puts())));
                }
            }
            _ => {}
        }
        let version = self.inner.put(key, body, &options)?;
        Ok(match self.flaw {
            Flaw::SameVersion => Version::etag("\"same\""),
            _ => version,
        })
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        match (self.flaw, mode) {
            (Flaw::DeleteIgnoresVersion, DeleteMode::IfVersion(_)) => {
                self.inner.delete(key, &DeleteMode::Unconditional, deadline)
            }
            (Flaw::DeleteSucceedsDoingNothing, DeleteMode::IfVersion(_)) => Ok(()),
            (Flaw::DeletesDespiteNotImplemented, DeleteMode::IfVersion(_)) => {
                self.inner
                    .delete(key, &DeleteMode::Unconditional, deadline)?;
                Err(StoreError::new(
                    bucket_lease_core::store::StoreErrorKind::NotImplemented,
                    "DELETE",
                    key,
                ))
            }
            _ => self.inner.delete(key, mode, deadline),
        }
    }
}

#[test]
fn stores_broken_in_other_ways_fail_their_checks() {
    let store = Flawed::new(Flaw::SameVersion);
    assert_caught(
        || conformance::overwrite(&store, "p"),
        "overwrite",
        "the second overwrite returned version Version { etag: Some(\"\\\"same\\\"\")",
    );
    assert_caught(
        || conformance::versions_round_trip(&store, "p"),
        "versions_round_trip",
        "write 1 (update) answered Precondition",
    );

    let store = Flawed::new(Flaw::DropsMetadata);
    assert_caught(
        || conformance::metadata_round_trip(&store, "p"),
        "metadata_round_trip",
        "a read returned metadata []; expected [(\"note\", \"two words\"), (\"owner\", \
         \"conformance-suite\")]",
    );

    let store = Flawed::new(Flaw::DeleteIgnoresVersion);
    assert_caught(
        || {
            conformance::delete_if_version(&store, "p");
        },
        "delete_if_version",
        "a conditional delete with a stale version answered Ok(())",
    );

    // Nor does the suite, which reports a store that ignores the
    // condition, pass one whose success deleted nothing.
    let store = Flawed::new(Flaw::DeleteSucceedsDoingNothing);
    assert_caught(
        || {
            conformance::run_all(&store, "p");
        },
        "delete_if_version",
        "a conditional delete with a stale version answered Ok(()), and a read after it \
         answered Ok(",
    );

    let store = Flawed::new(Flaw::DeletesDespiteNotImplemented);
    assert_caught(
        || {
            conformance::delete_if_version(&store, "p");
        },
        "delete_if_version",
        "a read after a conditional delete answered NotImplemented answered NotFound",
    );

    let store = Flawed::new(Flaw::EmptyForAbsent);
    assert_caught(
        || conformance::absent_keys(&store, "p"),
        "absent_keys",
        "a read of a key never written answered Ok(",
    );

    let store = Flawed::new(Flaw::LosesEveryFifthUpdate);
    assert_caught(
        || conformance::compare_and_swap_race(&store, "p", 1, 10),
        "compare_and_swap_race",
        "1 workers × 10 increments ended at 8, not 10",
    );
}

/// A service that answers some conditional writes with a 5xx under
/// contention (Ceph RGW 16.2 answers a write that lost a race inside the
/// service `500 UnknownError`): of every three updates, one lands but its
/// answer is an error, one is an error and does not land.
#[derive(Debug, Default)]
struct TransientUpdates {
    inner: MemoryStore,
    updates: AtomicU64,
}

impl Store for TransientUpdates {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let transient = || {
            StoreError::new(
                bucket_lease_core::store::StoreErrorKind::Transport,
                "PUT",
                key,
            )
        };
        if !matches!(options.mode, PutMode::Update(_)) {
            return self.inner.put(key, body, options);
        }
        match self.updates.fetch_add(1, Ordering::Relaxed) % 3 {
            1 => self.inner.put(key, body, options).and(Err(transient())),
            2 => Err(transient()),
            _ => self.inner.put(key, body, options),
        }
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

/// The race decides an update answered with a transient error by reading,
/// as a lease does: one that landed is counted once, one that did not is
/// tried again; the total is still exact, alone and with rivals.
#[test]
fn the_race_reads_to_decide_an_update_answered_with_a_transient_error() {
    for workers in [1, 4] {
        let store = TransientUpdates::default();
        conformance::compare_and_swap_race(&store, "race", workers, 9);
        assert!(store.updates.load(Ordering::Relaxed) >= 9 * workers as u64);
        assert_eq!(store.inner.keys(), Vec::<String>::new());
    }
}
