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
//! - [`fence`]: writes bound to a held lease, stamped with its epoch.
//! - [`inspect`]: reading a lease from outside, and breaking a dead holder's.
//! - [`supervision`]: when a command under the lease gets SIGTERM and SIGKILL.
//! - [`clock`]: the monotonic and wall clocks, real and for tests.
//! - [`error`]: why a lease operation failed.
//! - `conformance` (feature `conformance`): the suite every store passes.
//! - `sim` (feature `simulation`): the deterministic simulation of many
//!   contenders under faults, and its checker.
//!
//! ```
//! use bucket_lease_core::{memory::MemoryStore, Lease, LeaseError, LeaseOptions};
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

pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod fence;
pub mod hold;
pub mod inspect;
pub mod keeper;
pub mod lease;
pub mod memory;
#[doc(hidden)]
pub mod mutant;
pub mod pool;
pub mod record;
#[cfg(feature = "simulation")]
pub mod sim;
pub mod store;
pub mod supervision;

/// The channel crate whose [`Receiver`](channel::Receiver) carries a
/// [`Keeper`]'s and a [`KeeperPool`]'s events (crossbeam-channel),
/// re-exported so that its types and `select!` can be named without a
/// dependency of your own (and so at the version this crate uses).
pub use crossbeam_channel as channel;

pub use clock::{Clock, SystemClock, TestClock};
pub use error::{IgnoredCondition, LeaseError, OwnWrite};
pub use fence::{FencedWriter, WriteError};
pub use hold::{HoldError, HoldOutcome, Holding, Ran};
pub use keeper::{Event, Keeper, KeeperOptions, Loss};
pub use lease::{Cancel, Contender, Exclusion, Lease, LeaseOptions, LeaseStatus, Released, Wait};
pub use pool::{KeeperPool, LeaseId, PoolEvent, PoolOptions, PooledLease};
pub use record::{lease_key, LeaseRecord};
pub use store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
