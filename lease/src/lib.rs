//! The synchronous core of bucket-lease: one writer at a time on a prefix
//! of an S3-compatible bucket, with no async runtime.
//!
//! - [`store`]: the blocking store trait every backend implements.
//! - [`memory`]: a strict in-memory store that can be told to misbehave.
//! - [`record`]: the `LEASE` object's JSON and how a reader judges it.
//! - [`lease`]: taking, renewing, fencing and releasing the lease.
//! - [`keeper`]: the renewal thread, its events and its loss callback.
//! - [`hold`]: run a closure while holding the lease, released however it
//!   ends ([`Contender::run_while_held`]).
//! - [`pool`]: many leases renewed by a scheduler and a few renewal threads.
//! - [`held_set`]: a set of prefixes kept held, taken again after a loss.
//! - [`stats`]: running totals of a kept lease, in the Prometheus text
//!   format too.
//! - [`fence`]: writes bound to a held lease, stamped with its epoch.
//! - [`inspect`]: reading a lease from outside, and breaking a dead holder's.
//! - [`watch`]: following a lease from outside, each change of holder,
//!   epoch or state reported ([`Watcher`], [`Contender::watch`]).
//! - [`versioned`]: a bucket that keeps every version of the record, named
//!   once with what it costs and the lifecycle rule that bounds it.
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
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::{memory::MemoryStore, Lease, LeaseError, LeaseOptions};
//! use std::sync::Arc;
//!
//! let store = Arc::new(MemoryStore::new());
//! let lease = Lease::acquire(store.clone(), "backups/db1", LeaseOptions::new(30))?;
//! assert!(lease.may_write());
//!
//! // A second instance is told who holds the prefix.
//! match Lease::acquire(store.clone(), "backups/db1", LeaseOptions::new(30)) {
//!     Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, lease.instance_id()),
//!     other => panic!("expected Held, got {other:?}"),
//! }
//!
//! lease.renew()?;
//! lease.release()?;
//! # Ok::<(), LeaseError>(())
//! ```
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
pub mod upload;
pub mod versioned;
pub mod watch;

/// The channel crate whose [`Receiver`](channel::Receiver) carries a
/// [`Keeper`]'s and a [`KeeperPool`]'s events (crossbeam-channel),
/// re-exported so that its types and `select!` can be named without a
/// dependency of your own (and so at the version this crate uses).
pub use crossbeam_channel as channel;

pub use clock::{Clock, SystemClock, TestClock};
pub use error::{HolderRelation, IgnoredCondition, LeaseError, OwnWrite};
pub use fence::{FencedReader, FencedStream, FencedWriter, WriteError};
pub use hold::{HoldError, HoldOutcome, Holding, Ran};
pub use keeper::{Event, Keeper, KeeperOptions, Loss};
pub use kept::KeptLease;
pub use lease::{Cancel, Contender, Exclusion, Lease, LeaseOptions, LeaseStatus, Released, Wait};
pub use pool::{KeeperPool, LeaseId, PoolEvent, PoolOptions, PooledLease};
pub use record::{lease_key, LeaseRecord};
pub use stats::{prometheus_text, LeaseStats};
pub use store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
pub use upload::FencedUpload;
pub use watch::{Change, ChangeKind, LeaseState, Watcher};
