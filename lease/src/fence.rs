//! Fenced writes and reads: the objects a lease protects, written so that a
//! stale holder cannot overwrite a successor's work, and read so that a
//! reader can reject what an older holder wrote.
//!
//! A [`FencedWriter`] is bound to one held [`Lease`]. What it promises:
//!
//! - **No write starts outside the lease.** Each write asks the lease for
//!   its write deadline right before its first request (`put_new` once it
//!   has hashed the body, so that the hashing, seconds for a large body,
//!   is not spent from the deadline); without one it fails with
//!   [`WriteError::Fenced`] and sends nothing.
//! - **No write lands outside the lease's prefix.** Keys must start with
//!   the lease's prefix (`jobs/nightly/` for the lease on `jobs/nightly`),
//!   or one allowed with [`FencedWriter::allow_prefix`], and no lease
//!   record or probe key is ever written, nor a key with a `.` or `..`
//!   segment (a server or proxy that normalises paths would resolve it
//!   elsewhere, as the directory store refuses it); any other key fails with
//!   [`WriteError::OutsideLease`] and sends nothing.
//! - **No write outlives the lease.** Every request's deadline is the
//!   lease's write deadline, so an upload still in flight when the fence
//!   falls is abandoned by the store client.
//! - **The bucket fences too.** An immutable object is written create-only
//!   ([`put_new`](FencedWriter::put_new)); a pointer or manifest is written
//!   conditional on the version this writer last wrote or read
//!   ([`put_pointer`](FencedWriter::put_pointer)).
//! - **Every object carries the epoch.** Each write stores the lease's epoch,
//!   holder and the holder's process nonce as user metadata
//!   ([`EPOCH_METADATA`], [`HOLDER_METADATA`], [`NONCE_METADATA`];
//!   `x-amz-meta-…` on S3), the holder's name for people when it has one
//!   ([`HOLDER_NAME_METADATA`], escaped to visible ASCII: see there), and
//!   `put_new` a digest of the bytes ([`DIGEST_METADATA`]). The name is
//!   informational: who wrote an object is decided by the epoch, the
//!   instance id and the nonce alone.
//! - **A refusal marks the lease lost only when it proves another writer.**
//!   A refused write reads the object's metadata (one more request, within
//!   the write deadline) and decides by who wrote it:
//!   - this holder at this epoch: our own write, whose answer was lost. An
//!     identical `put_new` succeeds (same digest); a `put_pointer` adopts the
//!     version it finds and swaps once more. "This holder" is our instance
//!     id *and* our process's nonce, as for the lease record
//!     ([`crate::record`]): a process started under the same id is another
//!     holder;
//!   - a greater epoch, or this epoch under another holder (another name,
//!     or our name with another nonce or none): another writer is active.
//!     The lease is marked lost and the write fails with
//!     [`WriteError::Superseded`];
//!   - an earlier epoch (or no epoch: written without fencing): a previous
//!     holder's object, no proof of a concurrent writer. `put_new` fails
//!     with [`WriteError::Exists`], leaving the lease alone; `put_pointer`
//!     swaps against the version it read.
//! - **A newer pointer is proof too.** [`read_pointer`](FencedWriter::read_pointer)
//!   of a pointer a newer holder wrote marks the lease lost and fails with
//!   [`WriteError::Superseded`], remembering nothing to swap on.
//!
//! What a pointer write costs: the first write of a pointer this writer has
//! not read or written is two requests (a HEAD-like read, then the
//! conditional write: create-only when absent); later writes are one. A
//! refusal adds one read and, when the write is retried, one write.
//!
//! A [`FencedReader`] is the other half: it returns an object with the
//! epoch, holder, holder name and process nonce that wrote it, and rejects objects
//! older than the epoch it trusts ([`ReadError::Stale`]) or written
//! without fencing ([`ReadError::Unfenced`]).
//!
//! What no fence can promise: a request the service already received
//! completes even if the lease is lost meanwhile. On a conditional service
//! such a late write can only add an object nobody points at, or lose its
//! pointer race.

use crate::lease::Lease;
use crate::multipart::UploadConditions;
use crate::mutant::{self, Mutant, StoreMutant};
use crate::store::{
    named_by, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The metadata name under which each fenced write stores the lease epoch.
pub const EPOCH_METADATA: &str = "bucket-lease-epoch";

/// The metadata name under which each fenced write stores the holder's id.
pub const HOLDER_METADATA: &str = "bucket-lease-holder";

/// The metadata name under which each fenced write stores the nonce of the
/// holder's process ([`Lease::instance_nonce`]).
pub const NONCE_METADATA: &str = "bucket-lease-nonce";

/// The metadata name under which each fenced write stores the holder's
/// name for people ([`Lease::holder_name`]), when it has one.
///
/// S3 user metadata travels in HTTP headers, which carry visible ASCII in
/// practice (the HTTP store refuses anything else), while a name is any
/// printable UTF-8 ([`crate::record::check_holder_name`]). So the value is
/// the name's UTF-8 bytes percent-encoded: every byte outside `!` to `~`,
/// and `%` itself, is written `%XX` (upper-case hex), the rest as it is
/// (`équipe nuit:42` → `%C3%A9quipe%20nuit:42`), at most three times the
/// name's 128 bytes. A reader gets the name back only when the value
/// decodes to one that passes the same check, and none otherwise: a
/// stamped name never makes an object unreadable.
pub const HOLDER_NAME_METADATA: &str = "bucket-lease-holder-name";

/// The metadata name under which `put_new` stores a digest of the bytes.
pub const DIGEST_METADATA: &str = "bucket-lease-digest";

/// Why a fenced write was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// The lease is lost or past its write deadline: nothing was sent.
    Fenced {
        /// The object that was not written.
        key: String,
    },
    /// The store refused the write, and the object's metadata showed
    /// another writer at this epoch or a later one: the lease has been
    /// marked lost. The error names the object that was not written.
    Superseded(StoreError),
    /// `put_new` found the key taken by an earlier holder (or by this one
    /// with other bytes, or by a writer that does not fence): nothing was
    /// written, and the lease is untouched. Choose another key.
    Exists {
        /// The object that was not written.
        key: String,
        /// The epoch the existing object carries, when it carries one.
        epoch: Option<u64>,
        /// The holder the existing object names, when it names one.
        holder: Option<String>,
    },
    /// The key is outside what the writer may touch: not under the lease's
    /// prefix (nor one allowed with [`FencedWriter::allow_prefix`]), or a
    /// lease record or probe key (a last segment of `LEASE` or
    /// `LEASE.probe-…`). Nothing was sent.
    OutsideLease {
        /// The object that was not written.
        key: String,
        /// The prefixes the writer may write under.
        allowed: Vec<String>,
    },
    /// The request failed; if it timed out at the write deadline it may have
    /// landed. Retrying the same write is safe: a landed write of ours is
    /// recognised.
    Store(StoreError),
    /// A streamed write ([`FencedWriter::create`]) needed an upload in
    /// parts, and the service completes one over an existing object even
    /// when told to create it only: the completion would not be fenced.
    /// Nothing was written.
    UnfencedUploads {
        /// The object that was not written.
        key: String,
    },
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
                "write refused ({error}), and the object was written by a newer holder: \
                 another writer is active, so the lease was marked lost; stop writing"
            ),
            WriteError::Exists { key, epoch, .. } => {
                write!(f, "{key} exists already")?;
                match epoch {
                    Some(epoch) => write!(f, " (written at epoch {epoch})")?,
                    None => f.write_str(" (written without fencing)")?,
                }
                f.write_str(
                    ", and an immutable object is never overwritten; write under a new key \
                     (name objects by epoch, for example)",
                )
            }
            WriteError::OutsideLease { key, allowed } if is_lease_key(key) => write!(
                f,
                "write of {key} refused: it is a lease record (or a lease's probe key), which a \
                 fenced write never touches; write the lease's data under another name (allowed: \
                 {})",
                allowed_list(allowed)
            ),
            WriteError::OutsideLease { key, allowed } if has_dot_segment(key) => write!(
                f,
                "write of {key} refused: it has a `.` or `..` segment, which a server or proxy \
                 that normalises paths would resolve outside the lease's prefix (allowed: {}); \
                 name the object without such segments",
                allowed_list(allowed)
            ),
            WriteError::OutsideLease { key, allowed } => write!(
                f,
                "write of {key} refused: it is outside the prefix of the lease that fences it \
                 (allowed: {}); write under the lease's prefix, or allow another prefix with \
                 FencedWriter::allow_prefix if this lease is what fences writes there",
                allowed_list(allowed)
            ),
            WriteError::Store(e) => write!(f, "fenced write failed: {e}"),
            WriteError::UnfencedUploads { key } => write!(
                f,
                "write of {key} refused: it is larger than one part, and this service completes \
                 an upload in parts over an existing object even when told to create it only \
                 (it ignores If-None-Match on CompleteMultipartUpload), so a stale holder's \
                 upload could replace a newer holder's object; write objects of at most one \
                 part, raise the part size, or take the lease best-effort \
                 (BUCKET_LEASE_CONDITIONAL=off, LeaseOptions::best_effort) to stream unfenced"
            ),
        }
    }
}

/// No `source()`: `Display` already says the store error's text (see
/// [`crate::error`]).
impl std::error::Error for WriteError {}

/// Whether `key` is a lease record or a lease's probe key: its last path
/// segment is `LEASE` or starts with `LEASE.probe-` (see
/// [`crate::record::lease_key`], [`crate::record::probe_key`]).
fn is_lease_key(key: &str) -> bool {
    let last = key.rsplit('/').next().unwrap_or(key);
    last == "LEASE" || last.starts_with("LEASE.probe-")
}

/// Whether `key` has a `.` or `..` segment, which a server or proxy that
/// normalises paths would resolve elsewhere (S3 itself stores it as it is).
fn has_dot_segment(key: &str) -> bool {
    key.split('/')
        .any(|segment| segment == "." || segment == "..")
}

/// `allowed` for a message: each prefix quoted, the empty one as the whole
/// bucket.
fn allowed_list(allowed: &[String]) -> String {
    let names: Vec<String> = allowed
        .iter()
        .map(|p| match p.as_str() {
            "" => "the whole bucket".to_string(),
            p => format!("{p:?}"),
        })
        .collect();
    names.join(", ")
}

/// Who wrote an existing object, relative to a writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Author {
    /// This holder at this epoch.
    Us,
    /// A greater epoch, or this epoch under another holder.
    Newer,
    /// An earlier epoch, or no epoch at all.
    Older,
}

/// What a fenced write stamped on an object: the epoch, holder,
/// holder's process nonce and holder's name its metadata names, each when
/// present (the name only when valid).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) epoch: Option<u64>,
    pub(crate) holder: Option<String>,
    pub(crate) nonce: Option<String>,
    pub(crate) holder_name: Option<String>,
}

/// The stamp an object's metadata carries.
pub(crate) fn stamp_of(object: &Object) -> Stamp {
    let value = |name: &str| {
        object
            .metadata
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    Stamp {
        epoch: value(EPOCH_METADATA).and_then(|v| v.trim().parse::<u64>().ok()),
        holder: value(HOLDER_METADATA),
        nonce: value(NONCE_METADATA),
        holder_name: value(HOLDER_NAME_METADATA).and_then(|v| decode_name(&v)),
    }
}

/// A holder name as [`HOLDER_NAME_METADATA`] stores it: percent-encoded
/// to visible ASCII.
fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The holder name [`HOLDER_NAME_METADATA`]'s `value` encodes, when it
/// decodes (either case of hex) to UTF-8 that is a valid holder name.
fn decode_name(value: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(value.len());
    let mut rest = value.bytes();
    while let Some(byte) = rest.next() {
        if byte != b'%' {
            bytes.push(byte);
            continue;
        }
        let hex = [rest.next()?, rest.next()?];
        let hex = std::str::from_utf8(&hex).ok()?;
        bytes.push(u8::from_str_radix(hex, 16).ok()?);
    }
    let name = String::from_utf8(bytes).ok()?;
    crate::record::check_holder_name(&name)
        .is_ok()
        .then_some(name)
}

/// A digest of `bytes` for recognising our own landed write: 64-bit
/// FNV-1a, as 16 hex digits. Not a defence against anyone: the holder and
/// epoch decide who wrote an object; the digest only tells two writes of
/// one holder apart.
fn digest(bytes: &[u8]) -> String {
    // The tests make hashing take long here, deterministically.
    #[cfg(test)]
    tests::WHILE_HASHING.with(|hook| {
        if let Some(hook) = hook.borrow().as_ref() {
            hook();
        }
    });
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The metadata every fenced write stamps on its object: the lease's
/// epoch, holder and the holder's process nonce.
pub(crate) fn stamp_metadata(lease: &Lease) -> Vec<(String, String)> {
    let mut metadata = vec![
        (EPOCH_METADATA.to_string(), lease.epoch().to_string()),
        (HOLDER_METADATA.to_string(), lease.instance_id().to_string()),
        (
            NONCE_METADATA.to_string(),
            lease.instance_nonce().to_string(),
        ),
    ];
    if let Some(name) = lease.holder_name() {
        metadata.push((HOLDER_NAME_METADATA.to_string(), encode_name(name)));
    }
    metadata
}

/// Who wrote `object`, relative to `lease`: us only for its epoch, its
/// instance id and its process's nonce; another process at its epoch
/// (under its name too, or without a nonce) is a writer it did not know of.
pub(crate) fn author_of(lease: &Lease, object: &Object) -> Author {
    let Stamp {
        epoch,
        holder,
        nonce,
        ..
    } = stamp_of(object);
    let ours = lease.epoch();
    let our_process =
        nonce.as_deref() == Some(lease.instance_nonce()) || mutant::on(Mutant::SameNameIsOurs);
    match epoch.unwrap_or(0) {
        e if e > ours => Author::Newer,
        e if e < ours => Author::Older,
        _ if holder.as_deref() == Some(lease.instance_id()) && our_process => Author::Us,
        _ => Author::Newer,
    }
}

/// `refusal`'s write was refused and a newer holder wrote its object:
/// mark `lease` lost, and say so.
pub(crate) fn superseded(lease: &Lease, refusal: StoreError) -> WriteError {
    log::warn!(
        "{}: a fenced write was refused and a newer holder wrote it ({refusal}); marking \
         the lease lost",
        refusal.key()
    );
    lease.mark_lost(None);
    WriteError::Superseded(refusal)
}

/// Writes objects under a held lease. See the [module docs](self).
#[derive(Debug)]
pub struct FencedWriter {
    lease: Arc<Lease>,
    /// The prefixes (each ending in `/`, or empty for the whole bucket)
    /// keys must start with: the lease's own, and those allowed.
    allowed: Vec<String>,
    /// The version this writer last wrote or read, per pointer key.
    pointers: Mutex<HashMap<String, Version>>,
    /// Whether the service fences a completed upload, for a store that
    /// keeps no verdict of its own ([`Store::upload_conditions`]); shared
    /// with the writer's uploads.
    pub(crate) uploads_checked: Arc<UploadConditions>,
}

impl FencedWriter {
    /// A writer bound to `lease`, writing under the lease's prefix only:
    /// for the lease on `jobs/nightly` (its record `jobs/nightly/LEASE`),
    /// keys that start with `jobs/nightly/`; for the empty prefix, the
    /// whole bucket. No lease record or probe key is ever written.
    pub fn new(lease: Arc<Lease>) -> Self {
        let own = lease
            .key()
            .strip_suffix("LEASE")
            .unwrap_or_default()
            .to_string();
        FencedWriter {
            lease,
            allowed: vec![own],
            pointers: Mutex::new(HashMap::new()),
            uploads_checked: Arc::default(),
        }
    }

    /// A writer with this one's lease, prefixes and upload verdict, and no
    /// pointers: what an upload writes through.
    pub(crate) fn sibling(&self) -> FencedWriter {
        FencedWriter {
            lease: Arc::clone(&self.lease),
            allowed: self.allowed.clone(),
            pointers: Mutex::new(HashMap::new()),
            uploads_checked: Arc::clone(&self.uploads_checked),
        }
    }

    /// Also write under `prefix` (a trailing `/` is added when missing):
    /// for data this lease fences although it lives elsewhere, such as a
    /// table whose lease sits under a `locks/` prefix. Every writer of
    /// that data must then be fenced by this same lease; lease records
    /// stay out of reach.
    #[must_use]
    pub fn allow_prefix(mut self, prefix: &str) -> Self {
        let prefix = match prefix.trim_end_matches('/') {
            "" => String::new(),
            p => format!("{p}/"),
        };
        if !self.allowed.contains(&prefix) {
            self.allowed.push(prefix);
        }
        self
    }

    /// The lease the writer is bound to.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Write an immutable object: create-only, so nothing is ever
    /// overwritten. Retrying after a [`WriteError::Store`] is safe: a write
    /// of ours that landed is recognised by its holder, epoch and digest.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Superseded`]
    /// when a newer holder wrote the key; [`WriteError::Exists`] when an
    /// earlier holder did; [`WriteError::Store`] when a request failed or
    /// timed out at the write deadline.
    pub fn put_new(&self, key: &str, body: &[u8]) -> Result<Version, WriteError> {
        self.check_key(key)?;
        // The defect a review found: the deadline taken before the hashing,
        // which for a large body takes seconds, so the request left with
        // its deadline spent or passed.
        let early = StoreMutant::PutNewHashesAfterDeadline
            .on()
            .then(|| self.fenced_deadline(key));
        let sum = digest(body);
        // Taken once the body is hashed, right before the request: a
        // deadline that passed meanwhile fences the write, and sends nothing.
        let deadline = match early {
            Some(deadline) => deadline?,
            None => self.fenced_deadline(key)?,
        };
        let options = self
            .options(PutMode::Create, deadline)
            .with_metadata(DIGEST_METADATA, sum.clone());
        let refusal = match self.lease.store().put(key, body, &options) {
            Ok(version) => return Ok(version),
            Err(error) if error.is_refusal() => error,
            Err(error) => return Err(WriteError::Store(error)),
        };
        let existing = self.head(key, deadline)?;
        match self.author(&existing) {
            Author::Us
                if existing
                    .metadata
                    .contains(&(DIGEST_METADATA.to_string(), sum)) =>
            {
                log::debug!("{key}: our own write had landed; its answer was lost");
                Ok(existing.version)
            }
            Author::Newer => Err(self.superseded(refusal)),
            Author::Us | Author::Older => {
                let Stamp { epoch, holder, .. } = stamp_of(&existing);
                Err(WriteError::Exists {
                    key: key.to_string(),
                    epoch,
                    holder,
                })
            }
        }
    }

    /// Read a pointer and remember its version for the next
    /// [`put_pointer`](Self::put_pointer). `None` when it is absent. A
    /// pointer a newer holder wrote proves this lease superseded: the lease
    /// is marked lost and nothing is remembered, so no later swap can move
    /// the pointer back to an older epoch.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Superseded`]
    /// when a newer holder wrote the pointer; [`WriteError::Store`] when
    /// the request failed.
    pub fn read_pointer(&self, key: &str) -> Result<Option<Object>, WriteError> {
        let deadline = self.fenced_deadline(key)?;
        match self.lease.store().get(key, Some(deadline)) {
            Ok(object) if self.author(&object) == Author::Newer => {
                self.pointers().remove(key);
                let Stamp { epoch, holder, .. } = stamp_of(&object);
                let proof = StoreError::new(StoreErrorKind::Precondition, "GET", key).with_message(
                    format!(
                        "the pointer was written at epoch {} by {}, after this lease's epoch {}",
                        epoch.unwrap_or(0),
                        holder.as_deref().unwrap_or("an unnamed holder"),
                        self.lease.epoch()
                    ),
                );
                Err(self.superseded(named_by(proof, &**self.lease.store())))
            }
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
    /// last wrote or read; a pointer it has not seen is read first (absent:
    /// create-only). See the [module docs](self) for what a refusal does and
    /// what a pointer write costs.
    ///
    /// # Errors
    ///
    /// [`WriteError::Fenced`] outside the lease; [`WriteError::Superseded`]
    /// when a newer holder wrote the pointer; [`WriteError::Store`] when a
    /// request failed or timed out (retrying is safe), or when the pointer
    /// changed under an older writer twice in a row.
    pub fn put_pointer(&self, key: &str, body: &[u8]) -> Result<Version, WriteError> {
        let deadline = self.fenced_deadline(key)?;
        let known = self.pointers().get(key).cloned();
        let mut version = match known {
            Some(version) => Some(version),
            None => self.current_version(key, deadline)?,
        };
        let mut tries = 0;
        loop {
            let mode = if mutant::on(Mutant::PointerOverwrites) {
                PutMode::Overwrite
            } else {
                version.clone().map_or(PutMode::Create, PutMode::Update)
            };
            let refusal = match self
                .lease
                .store()
                .put(key, body, &self.options(mode, deadline))
            {
                Ok(written) => {
                    self.pointers().insert(key.to_string(), written.clone());
                    return Ok(written);
                }
                Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotFound => e,
                // The write may have landed: keep the version we had, so a
                // retry is refused, finds our own write and adopts it.
                Err(e) => return Err(WriteError::Store(e)),
            };
            tries += 1;
            let existing = match self.lease.store().head(key, Some(deadline)) {
                Ok(existing) => Some(existing),
                Err(e) if e.kind() == StoreErrorKind::NotFound => None,
                Err(e) => return Err(WriteError::Store(e)),
            };
            if existing.as_ref().map(|o| self.author(o)) == Some(Author::Newer) {
                self.pointers().remove(key);
                return Err(self.superseded(refusal));
            }
            if tries > 1 {
                self.pointers().remove(key);
                return Err(WriteError::Store(refusal));
            }
            log::debug!("{key}: pointer moved by us or an earlier holder; swapping on it");
            version = existing.map(|o| o.version);
        }
    }

    /// The write options every fenced write carries.
    fn options(&self, mode: PutMode, deadline: Instant) -> PutOptions {
        PutOptions::new(mode)
            .with_deadline(Some(deadline))
            .with_metadata_list(stamp_metadata(&self.lease))
    }

    /// The version of `key` now; `None` when absent.
    fn current_version(&self, key: &str, deadline: Instant) -> Result<Option<Version>, WriteError> {
        match self.lease.store().head(key, Some(deadline)) {
            Ok(object) => Ok(Some(object.version)),
            Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
            Err(e) => Err(WriteError::Store(e)),
        }
    }

    fn head(&self, key: &str, deadline: Instant) -> Result<Object, WriteError> {
        self.lease
            .store()
            .head(key, Some(deadline))
            .map_err(WriteError::Store)
    }

    fn author(&self, object: &Object) -> Author {
        author_of(&self.lease, object)
    }

    fn superseded(&self, refusal: StoreError) -> WriteError {
        superseded(&self.lease, refusal)
    }

    /// The deadline of a request on `key`: the lease's write deadline, once
    /// the key is known to be one this writer may touch.
    pub(crate) fn fenced_deadline(&self, key: &str) -> Result<Instant, WriteError> {
        self.check_key(key)?;
        self.lease
            .write_deadline()
            .ok_or_else(|| WriteError::Fenced {
                key: key.to_string(),
            })
    }

    /// Whether this writer may touch `key`: under an allowed prefix, and
    /// not a lease record or probe key.
    fn check_key(&self, key: &str) -> Result<(), WriteError> {
        let inside = self.allowed.iter().any(|p| key.starts_with(p.as_str()));
        if !inside || is_lease_key(key) || has_dot_segment(key) {
            return Err(WriteError::OutsideLease {
                key: key.to_string(),
                allowed: self.allowed.clone(),
            });
        }
        Ok(())
    }

    fn pointers(&self) -> MutexGuard<'_, HashMap<String, Version>> {
        self.pointers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An object as a [`FencedReader`] returns it: with the epoch and holder
/// that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedObject {
    /// The object, bytes, version and metadata.
    pub object: Object,
    /// The epoch of the lease it was written under.
    pub epoch: u64,
    /// The holder that wrote it (its instance id), when named.
    pub holder: Option<String>,
    /// The nonce of the holder's process, when stamped (objects written by
    /// older versions carry none).
    pub nonce: Option<String>,
    /// The holder's name for people, when stamped and valid
    /// ([`HOLDER_NAME_METADATA`]); informational only.
    pub holder_name: Option<String>,
}

/// Why a [`FencedReader`] returned no object.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadError {
    /// The object was written under an older epoch than the reader trusts:
    /// by a holder that had already been superseded.
    Stale {
        /// The object read.
        key: String,
        /// The epoch it carries.
        epoch: u64,
        /// The oldest epoch the reader accepts.
        trusted: u64,
    },
    /// The object carries no epoch: it was not written through a
    /// [`FencedWriter`].
    Unfenced {
        /// The object read.
        key: String,
    },
    /// The request failed (a missing object is
    /// [`StoreErrorKind::NotFound`]).
    Store(StoreError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Stale {
                key,
                epoch,
                trusted,
            } => write!(
                f,
                "{key} was written at epoch {epoch}, older than the epoch {trusted} this reader \
                 trusts: a superseded holder wrote it; ignore it"
            ),
            ReadError::Unfenced { key } => write!(
                f,
                "{key} carries no lease epoch: it was not written through a fenced writer"
            ),
            ReadError::Store(e) => write!(f, "fenced read failed: {e}"),
        }
    }
}

/// No `source()`: `Display` already says the store error's text (see
/// [`crate::error`]).
impl std::error::Error for ReadError {}

/// Reads fenced objects, rejecting those older than the epoch it trusts.
/// See the [module docs](self).
#[derive(Debug, Clone)]
pub struct FencedReader {
    store: Arc<dyn Store>,
    trusted: u64,
}

impl FencedReader {
    /// A reader of `store` that accepts every fenced object.
    pub fn new(store: Arc<dyn Store>) -> Self {
        FencedReader { store, trusted: 0 }
    }

    /// The same reader, rejecting objects written before `epoch` (for
    /// example the epoch of the pointer or manifest that named them, or the
    /// newest epoch the reader has seen).
    pub fn trusting(mut self, epoch: u64) -> Self {
        self.trusted = epoch;
        self
    }

    /// The oldest epoch this reader accepts.
    pub fn trusted(&self) -> u64 {
        self.trusted
    }

    /// Read `key` with the epoch and holder that wrote it.
    ///
    /// # Errors
    ///
    /// As [`get_before`](Self::get_before).
    pub fn get(&self, key: &str) -> Result<FencedObject, ReadError> {
        self.get_before(key, None)
    }

    /// Read `key`, abandoning the request at `deadline`.
    ///
    /// # Errors
    ///
    /// [`ReadError::Stale`] for an object older than the trusted epoch,
    /// [`ReadError::Unfenced`] for one without an epoch,
    /// [`ReadError::Store`] when the request failed or the key is absent.
    pub fn get_before(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<FencedObject, ReadError> {
        let object = self.store.get(key, deadline).map_err(ReadError::Store)?;
        let (epoch, stamp) = self.checked(key, &object)?;
        Ok(FencedObject {
            object,
            epoch,
            holder: stamp.holder,
            nonce: stamp.nonce,
            holder_name: stamp.holder_name,
        })
    }

    /// Read `key` as a stream, for objects of any size: the epoch and
    /// holder are checked when the answer begins, before the first byte is
    /// handed out. Nothing bounds the read; see
    /// [`open_before`](Self::open_before).
    ///
    /// # Errors
    ///
    /// As [`open_before`](Self::open_before).
    pub fn open(&self, key: &str) -> Result<FencedStream, ReadError> {
        self.open_before(key, None)
    }

    /// Read `key` as a stream, abandoning the read, body included, at
    /// `deadline` (`None`: the answer's start is bounded by the store's own
    /// limit, the body by nothing).
    ///
    /// # Errors
    ///
    /// As [`get_before`](Self::get_before), before any byte is read; a
    /// failure while reading the body is an [`std::io::Error`] from the
    /// stream.
    pub fn open_before(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<FencedStream, ReadError> {
        let reader = self.store.open(key, deadline).map_err(ReadError::Store)?;
        let (epoch, stamp) = self.checked(key, &reader.object)?;
        Ok(FencedStream {
            object: reader.object,
            epoch,
            holder: stamp.holder,
            nonce: stamp.nonce,
            holder_name: stamp.holder_name,
            body: reader.body,
        })
    }

    /// The epoch `object` carries and the rest of its stamp, once it has
    /// an epoch and that epoch is one this reader trusts.
    fn checked(&self, key: &str, object: &Object) -> Result<(u64, Stamp), ReadError> {
        let stamp = stamp_of(object);
        let Some(epoch) = stamp.epoch else {
            return Err(ReadError::Unfenced {
                key: key.to_string(),
            });
        };
        if epoch < self.trusted {
            return Err(ReadError::Stale {
                key: key.to_string(),
                epoch,
                trusted: self.trusted,
            });
        }
        Ok((epoch, stamp))
    }
}

/// An object as [`FencedReader::open`] returns it: its epoch checked, its
/// bytes read as they arrive ([`std::io::Read`]).
#[non_exhaustive]
pub struct FencedStream {
    /// The object's version and metadata; its `body` is empty.
    pub object: Object,
    /// The epoch of the lease it was written under.
    pub epoch: u64,
    /// The holder that wrote it (its instance id), when named.
    pub holder: Option<String>,
    /// The nonce of the holder's process, when stamped.
    pub nonce: Option<String>,
    /// The holder's name for people, when stamped and valid
    /// ([`HOLDER_NAME_METADATA`]); informational only.
    pub holder_name: Option<String>,
    body: Box<dyn std::io::Read + Send>,
}

impl fmt::Debug for FencedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedStream")
            .field("object", &self.object)
            .field("epoch", &self.epoch)
            .field("holder", &self.holder)
            .field("nonce", &self.nonce)
            .field("holder_name", &self.holder_name)
            .finish_non_exhaustive()
    }
}

impl std::io::Read for FencedStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.body.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::assert_said_once;
    use crate::memory::MemoryStore;
    use crate::{clock::TestClock, LeaseOptions};
    use std::time::Duration;

    thread_local! {
        /// Called as `digest` starts hashing on this thread: a test's way
        /// to make hashing take long.
        pub(super) static WHILE_HASHING: std::cell::RefCell<Option<Box<dyn Fn()>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Hashing a large body takes time (seconds for 384 MiB in a debug
    /// build): `put_new` hashes before it takes the write deadline, so a
    /// deadline that passes while it hashes fences the write, and no
    /// request leaves with a deadline already past.
    #[test]
    fn put_new_hashes_the_body_before_it_takes_the_write_deadline() {
        let store = Arc::new(MemoryStore::new());
        let clock = TestClock::new();
        let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
        let lease = Lease::acquire(store.clone(), "db", options).unwrap();
        let writer = FencedWriter::new(Arc::new(lease));
        let hashing = clock.clone();
        // The write deadline is 20 s away; hashing takes 25.
        WHILE_HASHING.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || hashing.advance(Duration::from_secs(25))))
        });
        let requests = store.requests();
        let answer = writer.put_new("db/big", b"a large body");
        WHILE_HASHING.with(|hook| *hook.borrow_mut() = None);
        assert_eq!(
            answer,
            Err(WriteError::Fenced {
                key: "db/big".into()
            })
        );
        assert_eq!(store.requests(), requests, "a request was sent");
    }

    #[test]
    fn holder_names_are_stamped_as_visible_ascii_and_read_back() {
        assert_eq!(encode_name("équipe nuit:42"), "%C3%A9quipe%20nuit:42");
        assert_eq!(encode_name("100%"), "100%25");
        for name in ["équipe nuit:42", "100%", "日本:7", "a b\\c"] {
            assert_eq!(decode_name(&encode_name(name)).as_deref(), Some(name));
        }
        assert_eq!(decode_name("%c3%a9t%C3%A9").as_deref(), Some("été"));
        for odd in ["%", "%4", "%zz", "%ff", "%1b", "%e2%80%ae", ""] {
            assert_eq!(decode_name(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn a_store_failure_behind_a_fenced_write_or_read_is_said_once() {
        let store = StoreError::new(StoreErrorKind::Precondition, "PUT", "p/part")
            .with_code("PreconditionFailed")
            .with_store_url("s3://b/");
        let text = store.to_string();
        for e in [
            WriteError::Store(store.clone()),
            WriteError::Superseded(store.clone()),
        ] {
            assert_said_once(&e, &text);
            assert!(e.to_string().contains("PUT s3://b/p/part"), "{e}");
        }
        let e = ReadError::Store(store);
        assert_said_once(&e, &text);
    }
}
