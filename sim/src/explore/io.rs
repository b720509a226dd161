//! What a process's real code runs on in the search: a [`Store`] whose
//! every request is a step the scheduler chooses the fate of (on the
//! world's real `MemoryStore`), and a [`Clock`] on the world's true time
//! with the process's own wall-clock skew, whose jitter is no choice at
//! all (the base pause, as is).

use super::baton::Exec;
use crate::env::frozen;
use crate::world::Op;
use bucket_lease_core::channel::{self, Receiver};
use bucket_lease_core::clock::Clock;
use bucket_lease_core::store::{DeleteMode, Object, PutOptions, Store, StoreError, Version};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Process `p`'s view of the store.
pub(crate) struct SearchStore {
    pub(crate) exec: Arc<Exec>,
    pub(crate) p: usize,
}

impl fmt::Debug for SearchStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SearchStore(c{})", self.p)
    }
}

impl Store for SearchStore {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.exec
            .request(self.p, Op::Get(key.to_string()), deadline)?
            .into_get(key)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let op = Op::Put(key.to_string(), body.to_vec(), options.clone());
        self.exec
            .request(self.p, op, options.deadline)?
            .into_put(key)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let op = Op::Delete(key.to_string(), mode.clone());
        self.exec.request(self.p, op, deadline)?.into_delete(key)
    }
}

/// Process `p`'s clocks: true time on the monotonic clock, true time plus
/// the process's skew on the wall clock.
pub(crate) struct SearchClock {
    pub(crate) exec: Arc<Exec>,
    pub(crate) p: usize,
}

impl fmt::Debug for SearchClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SearchClock(c{})", self.p)
    }
}

impl Clock for SearchClock {
    // Frozen while the checker asks a `Lease` whether it may write, on the
    // thread that holds the world (see `env::with_frozen_clocks`).
    fn now(&self) -> Instant {
        if let Some((mono, _)) = frozen(self.p) {
            return mono;
        }
        self.exec.lock().w.mono()
    }

    fn wall(&self) -> SystemTime {
        if let Some((_, wall)) = frozen(self.p) {
            return wall;
        }
        self.exec.lock().w.wall(self.p)
    }

    fn sleep(&self, duration: Duration) {
        let at = {
            let s = self.exec.lock();
            s.w.sched.now + u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX / 2)
        };
        self.exec.sleep_until(self.p, at);
    }

    fn timer(&self, at: Instant) -> Receiver<Instant> {
        let until = self.exec.lock().w.nanos_of(at);
        self.exec.sleep_until(self.p, until);
        let (tx, rx) = channel::bounded(1);
        let _ = tx.try_send(self.now());
        rx
    }

    fn jitter(&self, base: Duration) -> Duration {
        base
    }
}
