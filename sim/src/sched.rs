//! The scheduler: simulated true time, one event queue, and the baton that
//! lets exactly one simulated thread run at a time.
//!
//! Every simulated thread is an OS thread that runs only while it holds the
//! baton. It gives the baton back whenever it waits for time to pass (a
//! request's answer, a sleep, a timer); the scheduler then runs the
//! earliest event: a thread's wake-up, or a request's effect landing on the
//! store. Ties are broken by the order events were queued, and every
//! random draw happens under the baton, so one seed replays one run.

use super::world::World;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Nanoseconds of simulated true time.
pub(crate) type Nanos = u64;

/// One nanosecond count per second.
pub(crate) const SEC: Nanos = 1_000_000_000;

/// Something due at an instant of true time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// Let thread `tid` run, unless it has been woken since (`gen`).
    Wake { tid: usize, gen: u64 },
    /// Request `id` lands on the store.
    Apply { id: usize },
    /// Whoever holds the lease now crashes.
    CrashHolder,
    /// Contender `c`'s wall clock steps to `skew_ms` off true time.
    Step { c: usize, skew_ms: i64 },
}

/// The payload a simulated thread unwinds with when the run is over.
pub(crate) struct Over;

/// One simulated thread.
#[derive(Debug)]
pub(crate) struct SimThread {
    pub(crate) contender: usize,
    cv: Arc<Condvar>,
    gen: u64,
    interruptible: bool,
    pending: bool,
    pub(crate) done: bool,
}

/// The queue and the baton.
#[derive(Debug, Default)]
pub(crate) struct Sched {
    pub(crate) now: Nanos,
    seq: u64,
    queue: BinaryHeap<Reverse<(Nanos, u64, Ev)>>,
    running: Option<usize>,
    /// The run is over: every simulated thread unwinds as it next waits.
    pub(crate) over: bool,
    pub(crate) threads: Vec<SimThread>,
    handles: Vec<JoinHandle<()>>,
}

impl Sched {
    /// Queue `ev` at `at`.
    pub(crate) fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }
}

/// The world behind its lock, with the scheduler's condition variable.
#[derive(Debug)]
pub(crate) struct Shared {
    m: Mutex<World>,
    main: Condvar,
}

thread_local! {
    static TID: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// The simulated thread running on this OS thread.
pub(crate) fn current() -> usize {
    TID.with(|t| t.get())
}

/// Make this OS thread simulated thread `tid` for whatever asks
/// [`current`]: the exhaustive search (`explore/`) runs each process on a
/// thread of its own, numbered by process.
pub(crate) fn set_current(tid: usize) {
    TID.with(|t| t.set(tid));
}

impl Shared {
    pub(crate) fn new(world: World) -> Arc<Shared> {
        Arc::new(Shared {
            m: Mutex::new(world),
            main: Condvar::new(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start a simulated thread of contender `c`, first run at the current
    /// instant (after the caller gives the baton back).
    pub(crate) fn spawn(
        self: &Arc<Self>,
        c: usize,
        f: impl FnOnce(Arc<Shared>) + Send + 'static,
    ) -> usize {
        let mut w = self.lock();
        let tid = w.sched.threads.len();
        let cv = Arc::new(Condvar::new());
        w.sched.threads.push(SimThread {
            contender: c,
            cv: Arc::clone(&cv),
            gen: 0,
            interruptible: false,
            pending: false,
            done: false,
        });
        let now = w.sched.now;
        w.sched.push(now, Ev::Wake { tid, gen: 0 });
        w.contenders[c].threads.push(tid);
        let sh = Arc::clone(self);
        let handle = std::thread::spawn(move || {
            TID.with(|t| t.set(tid));
            {
                let mut w = sh.lock();
                while w.sched.running != Some(tid) && !w.sched.over {
                    w = cv.wait(w).unwrap_or_else(|e| e.into_inner());
                }
                if w.sched.over {
                    return;
                }
            }
            let sh2 = Arc::clone(&sh);
            let outcome = catch_unwind(AssertUnwindSafe(move || f(sh2)));
            let mut w = sh.lock();
            w.sched.threads[tid].done = true;
            if let Err(panic) = outcome {
                if !panic.is::<Over>() {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    w.violation(format!("a simulated thread panicked: {message}"));
                }
            }
            if w.sched.running == Some(tid) {
                w.sched.running = None;
                sh.main.notify_one();
            }
        });
        w.sched.handles.push(handle);
        tid
    }

    /// Give the baton back until `at` (or, when `interruptible`, an
    /// [`interrupt`](Self::interrupt)). Called by the running thread.
    fn block(&self, mut w: MutexGuard<'_, World>, at: Nanos, interruptible: bool) {
        let tid = current();
        if interruptible && w.sched.threads[tid].pending {
            w.sched.threads[tid].pending = false;
            return;
        }
        let gen = w.sched.threads[tid].gen;
        let at = at.max(w.sched.now);
        w.sched.push(at, Ev::Wake { tid, gen });
        w.sched.threads[tid].interruptible = interruptible;
        w.sched.running = None;
        self.main.notify_one();
        let cv = Arc::clone(&w.sched.threads[tid].cv);
        while w.sched.running != Some(tid) && !w.sched.over {
            w = cv.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        w.sched.threads[tid].interruptible = false;
        w.sched.threads[tid].pending = false;
        if w.sched.over {
            drop(w);
            resume_unwind(Box::new(Over));
        }
    }

    /// Let time pass for the calling thread until `at`.
    pub(crate) fn sleep_until(&self, at: Nanos) {
        let w = self.lock();
        self.block(w, at, false);
    }

    /// As [`sleep_until`](Self::sleep_until), but an interrupt ends it.
    pub(crate) fn wait_until(&self, at: Nanos) {
        let w = self.lock();
        self.block(w, at, true);
    }

    /// Wake thread `tid` now if it waits interruptibly; otherwise make its
    /// next interruptible wait return at once.
    pub(crate) fn interrupt(w: &mut World, tid: usize) {
        let now = w.sched.now;
        let t = &mut w.sched.threads[tid];
        if t.interruptible {
            t.gen += 1;
            t.interruptible = false;
            let gen = t.gen;
            w.sched.push(now, Ev::Wake { tid, gen });
        } else {
            t.pending = true;
        }
    }

    /// [`interrupt`](Self::interrupt) each of `tids`, in order.
    pub(crate) fn interrupt_each(&self, tids: &[usize]) {
        let mut w = self.lock();
        for &tid in tids {
            Self::interrupt(&mut w, tid);
        }
    }

    /// Run events until the queue is empty or past `end`; then end every
    /// simulated thread and join them.
    pub(crate) fn run(&self, end: Nanos) {
        let mut w = self.lock();
        while let Some(Reverse((at, _, ev))) = w.sched.queue.pop() {
            if at > end {
                break;
            }
            w.sched.now = at;
            match ev {
                Ev::Wake { tid, gen } => {
                    let t = &w.sched.threads[tid];
                    if t.gen != gen || t.done {
                        continue;
                    }
                    let c = t.contender;
                    if w.contenders[c].crashed {
                        continue;
                    }
                    if let Some(resume) = w.paused_until(c, at) {
                        w.sched.push(resume, Ev::Wake { tid, gen });
                        continue;
                    }
                    w.sched.running = Some(tid);
                    let cv = Arc::clone(&w.sched.threads[tid].cv);
                    cv.notify_one();
                    while w.sched.running.is_some() {
                        w = self.main.wait(w).unwrap_or_else(|e| e.into_inner());
                    }
                }
                Ev::Apply { id } => w.apply(id),
                Ev::CrashHolder => w.crash_holder(),
                Ev::Step { c, skew_ms } => w.step_wall(c, skew_ms),
            }
        }
        w.sched.now = w.sched.now.max(end);
        w.finish();
        w.sched.over = true;
        for t in &w.sched.threads {
            t.cv.notify_all();
        }
        let handles = std::mem::take(&mut w.sched.handles);
        drop(w);
        for h in handles {
            let _ = h.join();
        }
    }
}
