//! Run a piece of work only while holding the lease: wait for it, keep it
//! renewed on a thread, run the work on the caller's thread, release it.
//!
//! [`Contender::run_while_held`] is the whole life of a lease in one call,
//! what client-go's `RunOrDie` and a lock client's acquire-with-monitor do.
//! What it promises:
//!
//! - **The work starts only under the lease.** The lease is taken with
//!   [`Contender::acquire_with`], bounded by the caller's [`Wait`]; the
//!   closure is called only if the lease may still be written when the
//!   renewal thread ([`Keeper`]) has started. A wait that ends without the
//!   lease returns its error and runs nothing.
//! - **The closure runs on the caller's thread**, with a [`Holding`] that
//!   answers without I/O whether it may write ([`Holding::may_write`]),
//!   until when ([`Holding::write_deadline`]), and whether to stop
//!   ([`Holding::stop_requested`]: the lease was fenced or lost, the
//!   keeper ended, or the write deadline passed, whichever is seen
//!   first). Its writes can go through [`Holding::writer`], a
//!   [`FencedWriter`] bound to the lease. Nothing interrupts the closure:
//!   it is told, and must stop writing itself. A callback given with
//!   [`KeeperOptions::on_loss`] is called too, on the renewal thread.
//! - **The lease is released however the closure ends.** When it returns
//!   and when it panics, the keeper is stopped (its release bounded by the
//!   keeper's release timeout). A panic is then passed on to the caller
//!   unchanged.
//! - **The answer says how the lease fared** beside the closure's value
//!   ([`Ran`]): [`HoldOutcome::Released`] when it was held until the
//!   closure returned and then freed, [`HoldOutcome::Fenced`] or
//!   [`HoldOutcome::Lost`] when it ended while the closure ran (also when
//!   the closure returned after its write deadline, before the keeper
//!   noticed), and [`HoldOutcome::ReleaseFailed`] when it was held
//!   throughout but the release failed (the record expires after its TTL).
//!
//! A wait that fails with a store error may leave a record of ours behind
//! (a write whose answer was lost): the contender is the caller's, so
//! [`Contender::release_abandoned_before`] can hand it back.

use crate::error::LeaseError;
use crate::fence::FencedWriter;
use crate::keeper::{Event, Keeper, KeeperOptions, Loss};
use crate::kept::KeptLease;
use crate::lease::{Contender, Lease, LeaseStatus, Released, Wait};
use crossbeam_channel::Receiver;
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What the closure of [`Contender::run_while_held`] is given: the lease's
/// state, asked without I/O from the closure's thread.
#[derive(Debug)]
pub struct Holding<'a> {
    keeper: &'a Keeper,
    writer: FencedWriter,
    ended: &'a Ending,
    /// Set the first time [`Holding::stop_requested`] answers true, so that
    /// it never answers false again (a renewal can land after the fence).
    stop_seen: AtomicBool,
}

impl Holding<'_> {
    /// Whether the closure may start a write now.
    #[must_use]
    pub fn may_write(&self) -> bool {
        self.keeper.may_write()
    }

    /// When the closure must have finished writing; `None` when it must
    /// not write at all.
    #[must_use]
    pub fn write_deadline(&self) -> Option<Instant> {
        self.keeper.write_deadline()
    }

    /// Whether the closure should stop now: the lease was fenced or lost,
    /// the keeper ended, or the write deadline passed. Once true, it stays
    /// true.
    #[must_use]
    pub fn stop_requested(&self) -> bool {
        if self.stop_seen.load(Ordering::SeqCst) {
            return true;
        }
        let stop = self.ended.get().is_some() || !self.keeper.may_write();
        if stop {
            self.stop_seen.store(true, Ordering::SeqCst);
        }
        stop
    }

    /// The lease, for its key, epoch and instance id.
    pub fn lease(&self) -> &Arc<Lease> {
        self.keeper.lease()
    }

    /// A fenced writer bound to the lease: create-only objects and
    /// conditional pointers, each bounded by the write deadline and
    /// stamped with the lease's epoch (see [`crate::fence`]).
    pub fn writer(&self) -> &FencedWriter {
        &self.writer
    }

    /// The keeper's events (renewals, failures, the fence, a loss).
    pub fn events(&self) -> &Receiver<Event> {
        self.keeper.events()
    }
}

/// How the lease fared while the closure of
/// [`Contender::run_while_held`] ran, and after.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldOutcome {
    /// The lease was held until the closure returned, then given up
    /// ([`Released::Freed`], or [`Released::AlreadyFree`]).
    Released(Released),
    /// No renewal landed before the write deadline while the closure ran
    /// (or it returned after that deadline). The record was then released
    /// if it was still ours: `release` says how that went.
    Fenced {
        /// The release that followed.
        release: Result<Released, LeaseError>,
    },
    /// The lease was lost while the closure ran (taken over, broken, or a
    /// write proved another writer), or the release found the record
    /// another's. Nothing of the new holder's was touched.
    Lost {
        /// Who holds it now, when known.
        holder: Option<String>,
        /// Why it was lost.
        reason: String,
    },
    /// The lease was held until the closure returned, but the release
    /// failed: the record keeps the prefix taken until its TTL runs out.
    ReleaseFailed(LeaseError),
}

impl HoldOutcome {
    /// Whether the lease was held, by this process alone, from the start
    /// of the closure until it returned.
    pub fn held_throughout(&self) -> bool {
        matches!(
            self,
            HoldOutcome::Released(_) | HoldOutcome::ReleaseFailed(_)
        )
    }
}

/// The closure's value and how the lease fared: what
/// [`Contender::run_while_held`] returns.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "the outcome says whether the work ran under the lease throughout"]
pub struct Ran<T> {
    /// What the closure returned.
    pub value: T,
    /// How the lease fared.
    pub outcome: HoldOutcome,
}

/// Why [`Contender::run_while_held`] ran nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum HoldError {
    /// The lease was not taken (the wait ended with this error), or it was
    /// fenced before the closure could start ([`LeaseError::Fenced`]; the
    /// lease was released).
    Lease(LeaseError),
    /// The renewal thread could not be started; the lease was released.
    Thread(std::io::Error),
}

impl fmt::Display for HoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldError::Lease(e) => e.fmt(f),
            HoldError::Thread(e) => write!(
                f,
                "the lease was taken but its renewal thread could not start (the lease was \
                 released): {e}"
            ),
        }
    }
}

impl std::error::Error for HoldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HoldError::Lease(e) => e.source(),
            HoldError::Thread(e) => Some(e),
        }
    }
}

impl From<LeaseError> for HoldError {
    fn from(e: LeaseError) -> Self {
        HoldError::Lease(e)
    }
}

/// The first loss the keeper reported, shared with its callback.
#[derive(Debug, Default)]
struct Ending(Mutex<Option<Loss>>);

impl Ending {
    fn get(&self) -> MutexGuard<'_, Option<Loss>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Contender {
    /// Take the lease (waiting as `wait` says), keep it renewed on a
    /// thread started with `options`, run `work` on this thread while it
    /// is held, then release it. See the [module docs](crate::hold).
    ///
    /// ```
    /// # extern crate bucket_lease_core as bucket_lease;
    /// use bucket_lease::hold::HoldOutcome;
    /// use bucket_lease::memory::MemoryStore;
    /// use bucket_lease::{Contender, KeeperOptions, LeaseOptions, Wait, WriteError};
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryStore::new());
    /// let mut contender = Contender::new(store.clone(), "jobs/nightly", LeaseOptions::new(30));
    /// let wait = Wait::until(Instant::now() + Duration::from_secs(60));
    /// let on_loss = KeeperOptions::new().on_loss(|loss| eprintln!("lease ended: {loss}"));
    /// let ran = contender.run_while_held(&wait, on_loss, |held| {
    ///     let epoch = held.lease().epoch();
    ///     let mut written = 0;
    ///     for part in 0..3 {
    ///         if held.stop_requested() {
    ///             break; // fenced or lost: stop writing at once
    ///         }
    ///         let key = format!("jobs/nightly/parts/{epoch}-{part}");
    ///         held.writer().put_new(&key, b"...")?;
    ///         written += 1;
    ///     }
    ///     Ok::<_, WriteError>(written)
    /// })?;
    /// assert_eq!(ran.value?, 3);
    /// assert!(ran.outcome.held_throughout());
    /// assert!(matches!(ran.outcome, HoldOutcome::Released(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`HoldError::Lease`] with the wait's error when the lease was not
    /// taken ([`LeaseError::Held`] naming the holder at the wait's
    /// deadline, [`LeaseError::Cancelled`], a permanent error), or with
    /// [`LeaseError::Fenced`] when it could no longer be written by the
    /// time the renewal thread started; [`HoldError::Thread`] when that
    /// thread could not start. In each case `work` was not called and
    /// nothing of ours holds the key (but see the module docs for a
    /// store error during the wait).
    ///
    /// # Panics
    ///
    /// When `work` panics: the lease is released first, then the panic
    /// goes on unchanged.
    pub fn run_while_held<T>(
        &mut self,
        wait: &Wait,
        mut options: KeeperOptions,
        work: impl FnOnce(&Holding<'_>) -> T,
    ) -> Result<Ran<T>, HoldError> {
        let lease = self.acquire_with(wait)?;
        let ended = Arc::new(Ending::default());
        let theirs = options.take_on_loss();
        let ours = Arc::clone(&ended);
        options = options.on_loss(move |loss: &Loss| {
            *ours.get() = Some(loss.clone());
            if let Some(theirs) = &theirs {
                theirs(loss);
            }
        });
        let keeper = Keeper::spawn(lease, options).map_err(HoldError::Thread)?;
        if !keeper.may_write() {
            let key = keeper.lease().key().to_string();
            if let Err(e) = keeper.stop_with_release() {
                log::warn!("{key}: fenced before the work could start, and not released: {e}");
            }
            return Err(HoldError::Lease(LeaseError::Fenced { key }));
        }
        let holding = Holding {
            keeper: &keeper,
            writer: FencedWriter::new(Arc::clone(keeper.lease())),
            ended: &ended,
            stop_seen: AtomicBool::new(false),
        };
        let value = catch_unwind(AssertUnwindSafe(|| work(&holding)));
        // The lease as the closure left it, before the release changes it.
        let at_return = keeper.lease().fence_status();
        drop(holding);
        let released = keeper.stop_with_release();
        let value = match value {
            Ok(value) => value,
            Err(panic) => {
                log::warn!(
                    "the work under the lease panicked; the lease was released: {released:?}"
                );
                resume_unwind(panic)
            }
        };
        let reported = ended.get().take();
        let outcome = match (reported, at_return) {
            (Some(Loss::Lost { holder, reason, .. }), _) => HoldOutcome::Lost { holder, reason },
            (_, LeaseStatus::Lost { holder }) => HoldOutcome::Lost {
                holder,
                reason: "a refused write marked it lost".to_string(),
            },
            (Some(Loss::Fenced), _) | (_, LeaseStatus::Fenced) => {
                HoldOutcome::Fenced { release: released }
            }
            (_, _) => match released {
                Ok(Released::LeftAlone { holder, .. }) => HoldOutcome::Lost {
                    holder,
                    reason: "the release found the record another holder's".to_string(),
                },
                Ok(released) => HoldOutcome::Released(released),
                Err(e) => HoldOutcome::ReleaseFailed(e),
            },
        };
        Ok(Ran { value, outcome })
    }
}
