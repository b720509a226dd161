//! What a kept lease answers, whichever way it is kept: [`KeptLease`],
//! one trait that a [`Keeper`](crate::Keeper), a
//! [`PooledLease`](crate::PooledLease) and a
//! [`HeldPrefix`](crate::held_set::HeldPrefix) each answer alike.
//!
//! What it promises, for each of the three:
//!
//! - **Asking never waits on I/O.** [`may_write`](KeptLease::may_write),
//!   [`write_deadline`](KeptLease::write_deadline),
//!   [`epoch`](KeptLease::epoch), [`prefix`](KeptLease::prefix) and
//!   [`stats`](KeptLease::stats) read the lease's state under a mutex held
//!   only for arithmetic, from any thread at any time.
//! - **One end-of-life rule.** [`stop`](KeptLease::stop) stops keeping the
//!   lease, releases it and answers `Ok` only when the lease was held to
//!   the end: [`LeaseError::Fenced`] or [`LeaseError::Lost`] when it was
//!   fenced or lost before the stop (its record still freed if it was
//!   ours), [`LeaseError::Lost`] too when the release found the record
//!   another holder's, else the release's own outcome or error. So
//!   `handle.stop()?` fails for a job that did not hold its lease to the
//!   end, however it was kept.
//! - **A handle outliving its keeper answers from the lease.** A pooled
//!   lease or held prefix stopped after its pool or set let it go (a
//!   clone stopped first, the pool or the set stopped, the lease lost)
//!   releases nothing more and answers by the same rule from how the lease
//!   ended: its loss, or [`Released::AlreadyFree`] after a clean release.
//!
//! The trait is sealed: only this crate's handles answer it. Bring it into
//! scope (`use bucket_lease::KeptLease;`) to call its methods.
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::memory::MemoryStore;
//! use bucket_lease::{Contender, Keeper, KeeperOptions, KeptLease, LeaseOptions};
//! use std::sync::Arc;
//!
//! /// One write, whatever keeps the lease.
//! fn write_part(held: &impl KeptLease, n: u32) -> Result<(), Box<dyn std::error::Error>> {
//!     let key = format!("{}/part-{}-{n}", held.prefix(), held.epoch());
//!     held.writer().put_new(&key, b"...")?;
//!     Ok(())
//! }
//!
//! let store = Arc::new(MemoryStore::new());
//! let keeper = Keeper::spawn(
//!     Contender::new(store, "jobs/7", LeaseOptions::new(30)).try_acquire()?,
//!     KeeperOptions::new(),
//! )?;
//! write_part(&keeper, 0)?;
//! keeper.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::LeaseError;
use crate::fence::FencedWriter;
use crate::lease::{Lease, LeaseStatus, Released};
use crate::record::prefix_of;
use crate::stats::LeaseStats;
use std::sync::Arc;
use std::time::Instant;

/// A held lease kept renewed by this crate, as a program asks it before
/// each write and gives it up. See the [module docs](self).
pub trait KeptLease: sealed::Sealed {
    /// The kept lease, for its key, instance id and state.
    fn lease(&self) -> &Arc<Lease>;

    /// Stop keeping the lease and release it (after a renewal in flight,
    /// which its write deadline bounds; the release within the keeper's
    /// release timeout). `Ok` only when the lease was held to the end: the
    /// release's outcome.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Fenced`] or [`LeaseError::Lost`] when the lease was
    /// fenced or lost before the stop (its record was still freed if it
    /// was ours); [`LeaseError::Lost`] too when the release itself found
    /// the record another holder's (taken over or broken since the last
    /// renewal); otherwise the release's error, when its request failed
    /// (the record then expires after its TTL).
    fn stop(self) -> Result<Released, LeaseError>
    where
        Self: Sized;

    /// The prefix the lease is on, as its key names it (`shards/7` for
    /// `shards/7/LEASE`).
    fn prefix(&self) -> &str {
        prefix_of(self.lease().key())
    }

    /// The lease's epoch: what its writes are stamped with.
    fn epoch(&self) -> u64 {
        self.lease().epoch()
    }

    /// Whether a write may start now.
    #[must_use]
    fn may_write(&self) -> bool {
        self.lease().may_write()
    }

    /// When writing must have finished; `None` when it must not start.
    #[must_use]
    fn write_deadline(&self) -> Option<Instant> {
        self.lease().write_deadline()
    }

    /// Fenced writes under the lease ([`FencedWriter`]). Each call makes a
    /// new writer: keep one to keep its pointers' versions between writes
    /// ([`FencedWriter::put_pointer`] then needs no read first).
    fn writer(&self) -> FencedWriter {
        FencedWriter::new(Arc::clone(self.lease()))
    }

    /// A snapshot of the lease's totals and state: renewals by outcome and
    /// duration, retries, losses, the time left to the fence
    /// ([`crate::stats`]). Answered without I/O;
    /// [`LeaseStats::prometheus`] renders it for a scraper.
    fn stats(&self) -> LeaseStats {
        self.lease().stats()
    }
}

mod sealed {
    /// Only this crate's handles keep a lease.
    pub trait Sealed {}
    impl Sealed for crate::Keeper {}
    impl Sealed for crate::PooledLease {}
    impl Sealed for crate::held_set::HeldPrefix {}
}

/// The end-of-life rule every stop answers by: the loss the lease ended
/// with, if any; [`LeaseError::Lost`] when the release found the record
/// another holder's; else the release's outcome. The answer is kept on
/// the lease (the first one), for any later stop of a handle to it.
pub(crate) fn stop_answer(
    lease: &Lease,
    loss: Option<LeaseError>,
    released: &Result<Released, LeaseError>,
) -> Result<Released, LeaseError> {
    let shown = released
        .as_ref()
        .ok()
        .and_then(|released| released.loss_shown(lease.key()));
    let answer = match loss.or(shown) {
        Some(loss) => Err(loss),
        None => released.clone(),
    };
    lease.recorder().settle(&answer);
    answer
}

/// What a stop answers for a lease its keeper let go already (a clone's
/// stop, the pool's or the set's stop, a loss): the first stop's answer,
/// the release done ([`Released::AlreadyFree`] for a clean one), its loss
/// otherwise. A lease still held (its keeper gone without a release) is
/// released now; one fenced or lost and not yet released answers its loss.
pub(crate) fn stop_answer_after_leaving(lease: &Lease) -> Result<Released, LeaseError> {
    if let Some(first) = lease.recorder().settled() {
        return first.map(|_| Released::AlreadyFree);
    }
    let key = lease.key().to_string();
    match lease.fence_status() {
        LeaseStatus::Held { .. } => stop_answer(lease, None, &lease.release()),
        LeaseStatus::Fenced => Err(LeaseError::Fenced { key }),
        LeaseStatus::Lost { holder } => Err(LeaseError::Lost { key, holder }),
        // Released by hand, through its `lease()`: nothing kept it to an end.
        LeaseStatus::Released => Ok(Released::AlreadyFree),
    }
}
