//! A pool's warm-ups, on a thread of their own.
//!
//! A warm-up ([`Store::warm_up`](crate::Store::warm_up)) may take until
//! the renewal it is for is due, a second or so; on a renewal thread it
//! would hold another lease's renewal, due sooner, past that lease's write
//! deadline (one thread, or as many warm-ups as threads). So the pool
//! hands them to one thread that does nothing else, started the first time
//! one is needed: warm-ups wait for each other, never for a renewal or a
//! release, and a renewal or a release never waits for one. A warm-up
//! whose renewal is due by the time its turn comes is skipped.

use crate::keeper::warm_up_guarded;
use crate::lease::Lease;
use crossbeam_channel::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// See the module.
pub(super) struct WarmUps {
    name: String,
    queue: Option<Sender<(Arc<Lease>, Instant)>>,
    thread: Option<JoinHandle<()>>,
}

impl WarmUps {
    /// None started yet; the thread will be named `{pool's name}-warm-up`.
    pub(super) fn new(pool_name: &str) -> WarmUps {
        WarmUps {
            name: format!("{pool_name}-warm-up"),
            queue: None,
            thread: None,
        }
    }

    /// Warm `lease`'s store up for its renewal due at `due`, on the
    /// warm-up thread. Should the thread not start, the warm-up is left
    /// out (it is only ever an optimisation).
    pub(super) fn send(&mut self, lease: Arc<Lease>, due: Instant) {
        if self.queue.is_none() {
            let (queue, jobs) = crossbeam_channel::unbounded::<(Arc<Lease>, Instant)>();
            let started = std::thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || {
                    for (lease, due) in jobs {
                        if lease.clock().now() < due {
                            warm_up_guarded(&lease, due);
                        }
                    }
                });
            match started {
                Ok(thread) => {
                    self.queue = Some(queue);
                    self.thread = Some(thread);
                }
                Err(e) => {
                    log::debug!("a pool's warm-up thread could not start ({e}): no warm-up");
                    return;
                }
            }
        }
        if let Some(queue) = &self.queue {
            let _ = queue.send((lease, due));
        }
    }
}

impl Drop for WarmUps {
    /// Close the queue and join the thread: the warm-up in progress ends by
    /// its renewal's instant, the others are skipped or short.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
