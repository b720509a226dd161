//! Fenced writes: the objects a lease protects, written so that a stale
//! holder cannot overwrite a successor's work.
//!
//! A [`FencedWriter`] is bound to one held [`Lease`]. What it promises:
//!
//! - **No write starts outside the lease.** Each write first asks the lease
//!   for its write deadline; without one it fails with
//!   [`WriteError::Fenced`] and sends nothing.
//! - **No write outlives the lease.** The request's deadline is the lease's
//!   write deadline, so an upload still in flight when the fence falls is
//!   abandoned by the store client.
//! - **The bucket fences too.** An immutable object is written create-only
//!   ([`put_new`](FencedWriter::put_new)); a pointer or manifest is written
//!   conditional on the version this writer last wrote or read
//!   ([`put_pointer`](FencedWriter::put_pointer)). A refused condition means
//!   another writer is active: the lease is marked lost at once, without a
//!   request, and the write fails with [`WriteError::Superseded`].
//! - **Every object carries the epoch.** Each write stores the lease's epoch
//!   and holder as user metadata ([`EPOCH_METADATA`], [`HOLDER_METADATA`];
//!   `x-amz-meta-…` on S3), so a reader can reject objects written under an
//!   older epoch than the one it trusts.
//!
//! What it cannot promise: a request the service already received completes
//! even if the lease is lost meanwhile. On a conditional service such a late
//! write can only add an object nobody points at, or lose its pointer race.

use crate::lease::Lease;
use crate::store::{Object, PutMode, PutOptions, StoreError, StoreErrorKind, Version};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// The metadata name under which each fenced write stores the lease epoch.
pub const EPOCH_METADATA: &str = "bucket-lease-epoch";

/// The metadata name under which each fenced write stores the holder's id.
pub const HOLDER_METADATA: &str = "bucket-lease-holder";

/// Why a fenced write was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// The lease is lost or past its write deadline: nothing was sent.
    Fenced {
        /// The object that was not written.
        key: String,
    },
    /// The store refused the write's condition: another writer is active,
    /// and the lease has been marked lost.
    /// The error names the object that was not written.
    Superseded(StoreError),
    /// The request failed; if it timed out at the write deadline it may have
    /// landed.
    Store(StoreError),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Fenced { key } => write!(
                f,
                "write of {key} not started: the lease is lost or past its write deadline; \
                 acquire the lease again before writing"
            ),
            WriteError::Superseded(error) => write!(
                f,
                "write refused ({error}): another writer is active, so the lease was marked \
                 lost; stop writing"
            ),
            WriteError::Store(e) => write!(f, "fenced write failed: {e}"),
        }
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WriteError::Superseded(error) | WriteError::Store(error) => Some(error),
            WriteError::Fenced { .. } => None,
        }
    }
}

/// Writes objects under a held lease. See the [module docs](self).
#[derive(Debug)]
pub struct FencedWriter {
    lease: Arc<Lease>,
    /// The version this writer last wrote or read, per pointer key.
    pointers: Mutex<HashMap<String, Version>>,
}

impl FencedWriter {
    /// A writer bound to `lease`.
    pub fn new(lease: Arc<Lease>) -> Self {
        FencedWriter {
            lease,
            pointers: Mutex::new(HashMap::new()),
        }
    }

    /// The lease the writer is bound to.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Write an immutable object: create-only, so nothing is ever
    /// overwritten.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Superseded`]
    /// when the key exists already; [`WriteError::Store`] when the request
    /// failed or timed out at the write deadline.
    pub fn put_new(&self, key: &str, body: &[u8]) -> Result<Version, WriteError> {
        self.write(key, body, PutMode::Create)
    }

    /// Read a pointer and remember its version for the next
    /// [`put_pointer`](Self::put_pointer). `None` when it is absent.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Store`] when
    /// the request failed.
    pub fn read_pointer(&self, key: &str) -> Result<Option<Object>, WriteError> {
        let deadline = self.deadline(key)?;
        match self.lease.store().get(key, Some(deadline)) {
            Ok(object) => {
                self.pointers()
                    .insert(key.to_string(), object.version.clone());
                Ok(Some(object))
            }
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                self.pointers().remove(key);
                Ok(None)
            }
            Err(e) => Err(WriteError::Store(e)),
        }
    }

    /// Write a pointer or manifest: conditional on the version this writer
    /// last wrote or read, or create-only when it has seen none.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Superseded`]
    /// when another writer changed the pointer; [`WriteError::Store`] when
    /// the request failed or timed out (the pointer's version is then
    /// unknown: read it again).
    pub fn put_pointer(&self, key: &str, body: &[u8]) -> Result<Version, WriteError> {
        let mode = match self.pointers().get(key) {
            Some(version) => PutMode::Update(version.clone()),
            None => PutMode::Create,
        };
        let written = self.write(key, body, mode);
        let mut pointers = self.pointers();
        match &written {
            Ok(version) => {
                pointers.insert(key.to_string(), version.clone());
            }
            Err(WriteError::Store(_)) => {
                pointers.remove(key);
            }
            Err(_) => {}
        }
        written
    }

    fn write(&self, key: &str, body: &[u8], mode: PutMode) -> Result<Version, WriteError> {
        let deadline = self.deadline(key)?;
        let options = PutOptions::new(mode)
            .with_deadline(Some(deadline))
            .with_metadata(EPOCH_METADATA, self.lease.epoch().to_string())
            .with_metadata(HOLDER_METADATA, self.lease.instance_id());
        match self.lease.store().put(key, body, &options) {
            Ok(version) => Ok(version),
            Err(error) if error.is_refusal() => {
                log::warn!("{key}: a fenced write was refused ({error}); marking the lease lost");
                self.lease.mark_lost(None);
                Err(WriteError::Superseded(error))
            }
            Err(error) => Err(WriteError::Store(error)),
        }
    }

    fn deadline(&self, key: &str) -> Result<std::time::Instant, WriteError> {
        self.lease
            .write_deadline()
            .ok_or_else(|| WriteError::Fenced {
                key: key.to_string(),
            })
    }

    fn pointers(&self) -> MutexGuard<'_, HashMap<String, Version>> {
        self.pointers.lock().unwrap_or_else(|e| e.into_inner())
    }
}
