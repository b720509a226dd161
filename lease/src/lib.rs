//! The synchronous core of bucket-lease: one writer at a time on a prefix
//! of an S3-compatible bucket, with no async runtime.
//!
//! # Which way to hold a lease
//!
//! From the simplest to the most hands-on; each keeps every promise of the
//! ones below it, and the crate's root names what each needs:
//!
//! 1. **A command**: `bucket-lease run URL -- COMMAND` (the crate
//!    `bucket-lease`, feature `cli`) runs it only while it holds the lease.
//! 2. **In a program**: take the lease with a [`Contender`], keep it
//!    renewed on a thread with a [`Keeper`], write under it with its
//!    [`writer`](KeptLease::writer) (asking
//!    [`may_write`](KeptLease::may_write) before writes of your own), give
//!    it up with [`stop`](KeptLease::stop). A closure run only while the
//!    lease is held: [`Contender::run_while_held`].
//! 3. **Many keys on a few threads**: a [`KeeperPool`], a [`PooledLease`]
//!    per key.
//! 4. **Shards of a service**: a [`HeldSet`] takes and keeps what it can of
//!    a set of prefixes.
//! 5. **By hand**: a [`Lease`], [`Lease::renew`] every third of a TTL,
//!    [`Lease::release`] at the end.
//!
//! A keeper, a pooled lease and a held prefix answer alike
//! ([`KeptLease`]): whether a write may start, the write deadline, the
//! epoch, a fenced writer, running totals, and a stop that is `Ok` only for
//! a lease held to its end.
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::memory::MemoryStore;
//! use bucket_lease::{Contender, Keeper, KeeperOptions, KeptLease, LeaseError, LeaseOptions};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let mut contender = Contender::new(store.clone(), "backups/db1", LeaseOptions::new(30));
//! let keeper = Keeper::spawn(contender.try_acquire()?, KeeperOptions::new())?;
//!
//! // Writes start only before the write deadline, stamped with the epoch.
//! keeper.writer().put_new(&format!("backups/db1/part-{}", keeper.epoch()), b"...")?;
//!
//! // A second instance is told who holds the prefix.
//! let mut other = Contender::new(store, "backups/db1", LeaseOptions::new(30));
//! assert!(matches!(other.try_acquire(), Err(LeaseError::Held { .. })));
//!
//! keeper.stop()?; // released, and Ok only if it was held to the end
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! - [`lease`]: taking, renewing, fencing and releasing a lease; waiting
//!   for one.
//! - [`keeper`]: the renewal thread, its events and its loss callback.
//! - [`kept`]: what a kept lease answers, however it is kept.
//! - [`hold`]: run a closure while holding the lease, released however it
//!   ends ([`Contender::run_while_held`]).
//! - [`pool`]: many leases renewed by a scheduler and a few renewal threads.
//! - [`held_set`]: a set of prefixes kept held, taken again after a loss.
//! - [`fence`]: writes bound to a held lease, stamped with its epoch, and
//!   reads that refuse older holders; [`upload`]: objects of any size.
//! - [`stats`]: running totals of a kept lease, in the Prometheus text
//!   format too.
//! - [`inspect`]: reading a lease from outside, and breaking a dead holder's.
//! - [`watch`]: following a lease from outside, each change of holder,
//!   epoch or state reported.
//! - [`store`]: the blocking store trait every backend implements;
//!   [`memory`]: a strict in-memory store that can be told to misbehave;
//!   [`spacing`]: stores that take one write of a key per interval;
//!   [`versioned`]: a bucket that keeps every version of the record;
//!   [`multipart`]: uploads in parts.
//! - [`record`]: the `LEASE` object's JSON and how a reader judges it.
//! - [`clock`]: the monotonic and wall clocks, real and for tests.
//! - [`error`]: why a lease operation failed.
//! - `conformance` (feature `conformance`): the suite every store passes.
//!
//! The feature `internals` is not for users: it makes public, hidden and
//! with no stability promise, what this workspace's own crates drive (the
//! renewal and pool machines, `run`'s kill plan in `supervision`, the
//! mutant switches). The simulation that drives them is the crate
//! `bucket-lease-sim`, which is not published.
//!
//! # Paths in the examples
//!
//! Most programs depend on the crate `bucket-lease`, which re-exports all
//! of this crate at its root and shows these same pages as its own. So the
//! examples name this crate as those programs write it, `bucket_lease`
//! (`bucket_lease::Lease` is this crate's [`Lease`]). A program that
//! depends on this crate alone gives it that name in its `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! bucket_lease = { package = "bucket-lease-core", version = "0.1" }
//! ```
//!
//! or writes `bucket_lease_core` where the examples write `bucket_lease`.
#![forbid(unsafe_code)]
// Where other crates' pages link to this one's items when its docs are not
// built beside theirs (`cargo doc --no-deps -p` of a crate that depends on
// this one): without it rustdoc leaves those links as raw text, with no
// warning. `0.1` is the latest 0.1.x on docs.rs; scripts/check-doc-links.sh
// checks it against the version in Cargo.toml.
#![doc(html_root_url = "https://docs.rs/bucket-lease-core/0.1")]
// docs.rs (nightly, `--cfg docsrs`) marks `conformance` with its feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Declares an internal item: `pub(crate)`, or with the feature
/// `internals` `pub` and hidden from the docs, for this workspace's own
/// simulation and command. Not part of the API either way.
///
/// Without `internals` no program outside this crate can name the engine's
/// machines (the module `supervision` does not exist then); each of these
/// fails to compile:
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::keeper::Attempt;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::keeper::Step;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::keeper::RenewalSchedule;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::pool::Job;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::pool::Done;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0603\nuse bucket_lease_core::pool::driver::drive;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0432\nuse bucket_lease_core::supervision::Stop;\n```"
)]
#[cfg_attr(
    not(feature = "internals"),
    doc = "```compile_fail,E0432\nuse bucket_lease_core::supervision::Seen;\n```"
)]
macro_rules! internal {
    ($(#[$attr:meta])* pub $($item:tt)+) => {
        $(#[$attr])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub $($item)+

        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        pub(crate) $($item)+
    };
}

pub mod clock;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod error;
pub mod fence;
pub mod held_set;
pub mod hold;
pub mod inspect;
pub mod keeper;
pub mod kept;
pub mod lease;
pub mod memory;
pub mod multipart;
#[doc(hidden)]
pub mod mutant;
pub mod pool;
pub mod record;
pub mod spacing;
pub mod stats;
pub mod store;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod supervision;
#[cfg(test)]
mod testing;
pub mod upload;
pub mod versioned;
pub mod watch;

/// The channel crate whose [`Receiver`](channel::Receiver) carries a
/// [`Keeper`]'s and a [`KeeperPool`]'s events (crossbeam-channel),
/// re-exported so that its types and `select!` can be named without a
/// dependency of your own (and so at the version this crate uses).
pub use crossbeam_channel as channel;

// The front door: what a program needs to take a lease, keep it, write
// under it and give it up, on each rung of the ladder (the crate docs).
// Everything else is named by its module.
pub use error::LeaseError;
pub use fence::{FencedWriter, WriteError};
pub use held_set::{HeldSet, HeldSetOptions};
pub use keeper::{Event, Keeper, KeeperOptions, Loss};
pub use kept::KeptLease;
pub use lease::{Contender, Lease, LeaseOptions, Released, Wait};
pub use pool::{KeeperPool, PoolOptions, PooledLease};
pub use store::{Store, StoreError};
