//! One writer at a time on a prefix of an S3-compatible bucket (AWS S3,
//! Cloudflare R2, MinIO, or a local directory used as a bucket), with no
//! async runtime.
//!
//! One object, `{prefix}/LEASE`, names the holder. It is taken and renewed
//! with conditional PUTs (create-only, then update-if-ETag), and a holder
//! stops writing (fences itself) a third of a TTL before anyone else may
//! take over. What it writes under the lease is stamped with the lease's
//! epoch, so a reader can refuse an older holder's objects.
//!
//! This crate is the facade: the engine (`bucket-lease-core`) at its root,
//! the stores (`bucket-lease-backends`) as [`backends`]. With the feature
//! `cli` it is also the command `bucket-lease`, which runs a program only
//! while it holds the lease.
//!
//! ```
//! use bucket_lease::backends::config;
//! use bucket_lease::{Contender, Keeper, KeeperOptions, KeptLease, LeaseOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # if !cfg!(feature = "fs") { return Ok(()); } // the store `file://` is the feature `fs`
//! // A directory used as a bucket (here a new one); with the features `s3`,
//! // `r2` or `minio`, `s3://BUCKET/PREFIX` and so on, credentials from the
//! // environment.
//! let bucket = std::env::temp_dir().join(format!("my-bucket-{}", std::process::id()));
//! std::fs::create_dir_all(&bucket)?;
//! let (store, prefix) = config::open(&format!("file://{}//nightly", bucket.display()))?;
//!
//! // Take the lease (or be told who holds it), then renew it on a thread.
//! let mut contender = Contender::new(store, &prefix, LeaseOptions::new(30));
//! let keeper = Keeper::spawn(contender.try_acquire()?, KeeperOptions::new())?;
//!
//! // Write only while it is held: each write starts only before the
//! // lease's write deadline, and is stamped with its epoch.
//! let epoch = keeper.epoch();
//! let writer = keeper.writer();
//! writer.put_new(&format!("{prefix}/parts/{epoch}-0"), b"...")?;
//!
//! keeper.stop()?; // releases the lease and joins the renewal thread
//! # std::fs::remove_dir_all(&bucket)?;
//! # Ok(()) }
//! ```
//!
//! # Which way to hold a lease
//!
//! From the simplest to the most hands-on; each keeps every promise of the
//! ones below it:
//!
//! 1. **A command**: `bucket-lease run URL -- COMMAND` (feature `cli`)
//!    runs it only while it holds the lease, as `flock(1)` would.
//! 2. **In a program**: [`Keeper`], as above: take the lease with a
//!    [`Contender`], keep it renewed on a thread, write under it with
//!    [`Keeper::writer`](crate::KeptLease::writer) (asking [`Keeper::may_write`](crate::KeptLease::may_write) before writes of
//!    your own), give it up with [`Keeper::stop`](crate::KeptLease::stop). A closure run only
//!    while it is held: [`Contender::run_while_held`].
//! 3. **Many keys on a few threads**: [`KeeperPool`], a [`PooledLease`]
//!    per key, answering as a keeper does.
//! 4. **Shards of a service**: [`HeldSet`] takes and keeps what it can
//!    of a set of prefixes, a [`HeldPrefix`](held_set::HeldPrefix) each.
//! 5. **By hand**: [`Lease`]: [`Lease::renew`] every third of a TTL,
//!    [`Lease::release`] at the end; the module [`lease`] holds every
//!    promise of a lease's life.
//!
//! # Topics
//!
//! - Taking, renewing, fencing and releasing a lease: [`Contender`],
//!   [`Lease`], [`LeaseOptions`]; the module [`lease`] holds every promise
//!   of a lease's life.
//! - Keeping it renewed on a thread, its events and its loss callback:
//!   [`Keeper`] ([`keeper`]).
//! - Running a closure while holding it, released however it ends:
//!   [`Contender::run_while_held`] ([`hold`]).
//! - Waiting for a lease, bounded and cancellable: [`Wait`],
//!   [`Contender::acquire_with`].
//! - Writes bound to the lease and reads that refuse older holders:
//!   [`FencedWriter`], [`fence::FencedReader`] ([`fence`]); objects of any size
//!   streamed: [`FencedWriter::create`] ([`upload`]).
//! - What every kept lease answers, however it is kept: [`KeptLease`]
//!   ([`kept`]).
//! - Many leases on a few threads: [`KeeperPool`] ([`pool`]); shards of a
//!   service: [`HeldSet`] ([`held_set`]).
//! - Looking from outside: who holds a lease, breaking a dead holder's
//!   ([`inspect`]), following each change ([`watch::Watcher`]).
//! - Running totals, in the Prometheus text format too: [`stats`].
//! - Stores: a URL and the environment ([`backends::config`]), each store's
//!   module under [`backends`], the trait they implement ([`Store`]), an
//!   in-memory store for tests ([`memory`]), stores that limit writes of a
//!   key ([`spacing`]), versioned buckets ([`versioned`]).
//! - Errors: [`LeaseError`], [`WriteError`], [`StoreError`] ([`error`]).
//! - The `LEASE` record ([`record`]) and the clocks ([`clock`]).
//!
//! The long form, with every promise, the configuration by environment
//! variables, the command and how to monitor, test and benchmark, is the
//! [README](https://crates.io/crates/bucket-lease).
//!
//! # Features
//!
//! | feature | what |
//! |---|---|
//! | `fs` (default) | a directory on the local disk used as a bucket (`file://`) |
//! | `s3`, `r2`, `minio` | AWS S3, Cloudflare R2, MinIO (`s3://`, `r2://`, `minio://`) |
//! | `cli` | the command `bucket-lease`, with every store |
//!
//! # Paths in the examples
//!
//! Every example on these pages names items as a program that depends on
//! this crate writes them: `bucket_lease::…` for the engine,
//! `bucket_lease::backends::…` for the stores. That holds on the pages of
//! `bucket-lease-core` and `bucket-lease-backends` too, which say how to
//! read them when depending on one of those alone.
#![forbid(unsafe_code)]

// Inlined, so that the stores' pages are this crate's too (one search,
// and examples that name `bucket_lease::backends`).
#[doc(inline)]
pub use bucket_lease_backends as backends;
pub use bucket_lease_core::*;

/// The README, the long form of these docs, is not shown here (its
/// crates.io page is): this only compiles its Rust examples as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
