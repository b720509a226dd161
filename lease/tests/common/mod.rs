//! A store wrapper for tests that need to see or disturb single requests.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    store::DeleteMode, store::Object, store::PutMode, store::PutOptions, store::Version, Store,
    StoreError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A strict in-memory store that records each write's deadline, mode and
/// the name of the thread that sent it, and can be told to panic on writes.
#[derive(Debug, Default)]
pub struct Recording {
    pub inner: MemoryStore,
    pub put_deadlines: Mutex<Vec<Option<Instant>>>,
    pub put_threads: Mutex<Vec<Option<String>>>,
    pub put_modes: Mutex<Vec<PutMode>>,
    pub panic_on_put: AtomicBool,
    /// Each write's instant, as it arrived.
    pub put_times: Mutex<Vec<Instant>>,
    /// Each warm-up, by the instant of the renewal it was for.
    pub warm_ups: Mutex<Vec<Instant>>,
    pub panic_on_warm_up: AtomicBool,
}

impl Recording {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn last_put_deadline(&self) -> Option<Instant> {
        self.put_deadlines.lock().unwrap().last().copied().flatten()
    }
}

impl Store for Recording {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.put_times.lock().unwrap().push(Instant::now());
        self.put_deadlines.lock().unwrap().push(options.deadline);
        self.put_modes.lock().unwrap().push(options.mode.clone());
        let name = std::thread::current().name().map(str::to_string);
        self.put_threads.lock().unwrap().push(name);
        if self.panic_on_put.load(Ordering::SeqCst) {
            panic!("injected panic in the store");
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }

    fn warm_up(&self, _key: &str, due: Instant) {
        self.warm_ups.lock().unwrap().push(due);
        if self.panic_on_warm_up.load(Ordering::SeqCst) {
            panic!("injected panic in a warm-up");
        }
    }
}
