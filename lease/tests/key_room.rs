//! A store with a key limit (S3's 1024 bytes): every key an acquire writes,
//! the probe's included, fits whenever the acquire is allowed to start, and
//! a prefix too long for them fails before any request, naming the limit
//! and the longest prefix that fits.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{lease_key, max_prefix_bytes, PROBE_KEY_EXTRA_BYTES};
use bucket_lease_core::{
    store::DeleteMode, store::Object, store::PutOptions, store::StoreErrorKind, store::Version,
    Contender, LeaseError, LeaseOptions, Released, Store, StoreError,
};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const LIMIT: usize = 1024;

/// A strict memory store that refuses keys over [`LIMIT`] bytes as S3 does
/// (`400 KeyTooLongError`) and records every key it was sent.
#[derive(Debug, Default)]
struct Limited {
    inner: MemoryStore,
    keys: Mutex<Vec<String>>,
}

impl Limited {
    fn check(&self, method: &'static str, key: &str) -> Result<(), StoreError> {
        self.keys.lock().unwrap().push(key.to_string());
        if key.len() > LIMIT {
            return Err(StoreError::new(StoreErrorKind::Rejected, method, key)
                .with_code("KeyTooLongError")
                .with_message("Your key is too long"));
        }
        Ok(())
    }
}

impl Store for Limited {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.check("GET", key)?;
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.check("PUT", key)?;
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.check("DELETE", key)?;
        self.inner.delete(key, mode, d)
    }

    fn max_key_bytes(&self) -> Option<usize> {
        Some(LIMIT)
    }
}

fn prefix_of(bytes: usize) -> String {
    // Multi-byte characters, so that bytes and characters differ.
    let mut prefix = "é".repeat(bytes / 2);
    if bytes % 2 == 1 {
        prefix.push('x');
    }
    assert_eq!(prefix.len(), bytes);
    prefix
}

/// The longest prefix allowed: its probe key is exactly the limit, and the
/// acquire, renewal and release all succeed without a refused key.
#[test]
fn the_longest_prefix_allowed_takes_the_lease() {
    let longest = max_prefix_bytes(LIMIT, true);
    assert_eq!(longest, LIMIT - "/LEASE".len() - PROBE_KEY_EXTRA_BYTES);
    let store = Arc::new(Limited::default());
    let prefix = prefix_of(longest);
    let lease = Contender::new(store.clone(), &prefix, LeaseOptions::new(30))
        .try_acquire()
        .expect("every key fits");
    lease.renew().unwrap();
    assert_eq!(lease.release().unwrap(), Released::Freed);
    let keys = store.keys.lock().unwrap().clone();
    let longest_sent = keys.iter().map(String::len).max().unwrap();
    assert_eq!(longest_sent, LIMIT, "the probe key is exactly the limit");
}

/// One byte more: the acquire fails before sending anything, and says why
/// and what fits; the error is permanent (no retry can help).
#[test]
fn a_prefix_one_byte_too_long_fails_before_any_request() {
    let store = Arc::new(Limited::default());
    let prefix = prefix_of(max_prefix_bytes(LIMIT, true) + 1);
    assert!(
        lease_key(&prefix).len() <= LIMIT,
        "the lease key itself fits"
    );
    let err = Contender::new(store.clone(), &prefix, LeaseOptions::new(30))
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, LeaseError::KeyTooLong { .. }), "{err}");
    assert!(err.is_permanent());
    let text = err.to_string();
    for needle in ["1024", &max_prefix_bytes(LIMIT, true).to_string(), "probe"] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    assert!(text.len() < 400, "the message shortens the key: {text}");
    assert!(!text.contains("  "), "one space between words: {text}");
    assert!(store.keys.lock().unwrap().is_empty(), "nothing was sent");
}

/// A best-effort lease sends no probe: only its own key must fit.
#[test]
fn a_best_effort_lease_needs_room_for_its_own_key_only() {
    let store = Arc::new(Limited::default());
    let prefix = prefix_of(LIMIT - "/LEASE".len());
    let options = LeaseOptions::new(30).best_effort(true);
    let lease = Contender::new(store.clone(), &prefix, options.clone())
        .try_acquire()
        .expect("the lease key fits exactly");
    lease.release().unwrap();
    let err = Contender::new(store.clone(), &prefix_of(LIMIT), options)
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, LeaseError::KeyTooLong { .. }), "{err}");
}

/// A store without a limit (memory, a local directory) takes any prefix.
#[test]
fn a_store_without_a_limit_takes_long_prefixes() {
    let store = Arc::new(MemoryStore::new());
    let lease = Contender::new(store, &prefix_of(4000), LeaseOptions::new(30))
        .try_acquire()
        .unwrap();
    lease.release().unwrap();
}
