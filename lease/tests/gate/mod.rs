//! A memory store whose PUTs can be held at chosen points, by the name of
//! the thread that sends them, and the [`World`] of the tests that use it:
//! exact schedules of threads that share one store and one lease.
#![allow(dead_code)]

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::{
    clock::TestClock, store::DeleteMode, store::Object, store::PutOptions, store::Version,
    Contender, LeaseOptions, Store, StoreError,
};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When a gate holds a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum When {
    /// Before it reaches the store (a paused sender, a slow connection).
    Before,
    /// After it landed, before its answer comes back (a late answer).
    After,
}

/// A gate: the request says it got there on `reached`, then waits on `go`.
struct Gate {
    reached: Sender<()>,
    go: Receiver<()>,
}

thread_local! {
    /// How many PUTs this thread has sent through a [`Gated`] store.
    static PUTS: Cell<usize> = const { Cell::new(0) };
}

/// A memory store whose PUTs can be held, by the name of the thread that
/// sends them and their number on that thread (1 for the first).
pub struct Gated {
    pub inner: Arc<MemoryStore>,
    gates: Mutex<HashMap<(String, usize, When), Gate>>,
}

impl fmt::Debug for Gated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Gated")
    }
}

/// The test's end of a gate.
pub struct Held {
    reached: Receiver<()>,
    go: Sender<()>,
}

impl Held {
    pub fn wait_reached(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(10))
            .expect("the request reached its gate");
    }
    pub fn open(&self) {
        self.go.send(()).expect("the request waits at its gate");
    }
}

impl Gated {
    pub fn new(inner: Arc<MemoryStore>) -> Arc<Gated> {
        Arc::new(Gated {
            inner,
            gates: Mutex::new(HashMap::new()),
        })
    }

    /// Hold the `nth` PUT of thread `thread` at `when`.
    pub fn hold(&self, thread: &str, nth: usize, when: When) -> Held {
        let (reached_tx, reached_rx) = bounded(1);
        let (go_tx, go_rx) = bounded(1);
        self.gates.lock().unwrap().insert(
            (thread.to_string(), nth, when),
            Gate {
                reached: reached_tx,
                go: go_rx,
            },
        );
        Held {
            reached: reached_rx,
            go: go_tx,
        }
    }

    fn pass(&self, nth: usize, when: When) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        let gate = self.gates.lock().unwrap().remove(&(name, nth, when));
        if let Some(gate) = gate {
            let _ = gate.reached.send(());
            let _ = gate.go.recv_timeout(Duration::from_secs(10));
        }
    }
}

impl Store for Gated {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let nth = PUTS.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        self.pass(nth, When::Before);
        let answer = self.inner.put(key, body, options);
        self.pass(nth, When::After);
        answer
    }
    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
    fn store_url(&self) -> Option<&str> {
        self.inner.store_url()
    }
}

/// Spawn a scoped thread named `name` (the gates know threads by name).
pub fn spawn_named<'s, T: Send + 's>(
    scope: &'s std::thread::Scope<'s, '_>,
    name: &str,
    f: impl FnOnce() -> T + Send + 's,
) -> std::thread::ScopedJoinHandle<'s, T> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, f)
        .unwrap()
}

/// The lease's key in a [`World`].
pub const KEY: &str = "db/LEASE";
/// The instance id of this process's contenders.
pub const NAME: &str = "backup-host-1";
/// Their TTL, in seconds.
pub const TTL_S: u64 = 30;

/// `s` seconds.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// One memory store, seen through the gates by this process and directly
/// by another, and one test clock.
pub struct World {
    pub memory: Arc<MemoryStore>,
    pub store: Arc<Gated>,
    pub clock: TestClock,
}

impl World {
    pub fn new() -> Self {
        let memory = Arc::new(MemoryStore::new());
        World {
            store: Gated::new(memory.clone()),
            memory,
            clock: TestClock::new(),
        }
    }

    /// A TTL of [`TTL_S`] on the test clock.
    pub fn options(&self) -> LeaseOptions {
        LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone()))
    }

    /// A contender named [`NAME`] of this process, through the gates.
    pub fn ours(&self) -> Contender {
        Contender::new(self.store.clone(), "db", self.options()).with_instance_id(NAME)
    }

    /// A contender of another process.
    pub fn other_process(&self) -> Contender {
        Contender::new(self.memory.clone(), "db", self.options())
            .with_instance_id("other-host")
            .with_instance_nonce("another-process")
    }

    /// A lease of ours whose record is at a version it does not know: a
    /// renewal's write landed and its answer was lost.
    pub fn lease_with_an_unseen_version(&self) -> bucket_lease_core::Lease {
        let lease = self.ours().try_acquire().expect("taken");
        self.memory.lose_next_answers(1);
        lease
            .renew()
            .expect_err("the answer was lost (the write landed)");
        lease
    }

    /// The record as it stands.
    pub fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.memory.peek(KEY).expect("a LEASE object")).expect("a record")
    }
}
