//! A held set of the tests on one memory store and one test clock, its
//! pool renewing inline, and the wait for what it took.

use bucket_lease_core::held_set::SetEvent;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::TestClock, HeldSet, HeldSetOptions, LeaseOptions, PoolOptions, Store,
};
use std::sync::Arc;
use std::time::Duration;

pub const TTL_S: u64 = 30;

/// The real-time bound on anything a test waits for.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Leases of [`TTL_S`] on `clock`.
pub fn options(clock: &TestClock) -> LeaseOptions {
    LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone()))
}

/// A set of `prefixes` on `store` and `clock`.
pub fn set(store: &Arc<MemoryStore>, clock: &TestClock, prefixes: &[&str]) -> HeldSet {
    HeldSet::spawn(
        Arc::clone(store) as Arc<dyn Store>,
        prefixes.iter().map(|p| p.to_string()),
        HeldSetOptions::new(options(clock)).pool(
            PoolOptions::new()
                .clock(Arc::new(clock.clone()))
                .renewal_threads(0),
        ),
    )
    .expect("threads start")
}

/// The set's next event, which must be a prefix taken.
pub fn taken(set: &HeldSet) -> (String, u64) {
    match set.events().recv_timeout(PATIENCE) {
        Ok(SetEvent::Taken { prefix, epoch }) => (prefix, epoch),
        other => panic!("expected Taken, got {other:?}"),
    }
}
