//! Objects in parts: the store-level vocabulary of a multipart upload and
//! of a streamed read, which [`crate::upload`] builds fenced writes of any
//! size on.
//!
//! A multipart upload is begun on a key with the metadata the object will
//! carry ([`Store::begin_upload`](crate::store::Store::begin_upload)), takes
//! numbered parts ([`Store::upload_part`](crate::store::Store::upload_part)),
//! and becomes an object only at its completion
//! ([`Store::complete_upload`](crate::store::Store::complete_upload)),
//! which takes a [`PutMode`] as a PUT does: a
//! create-only completion (`If-None-Match: *`) makes nothing when the key
//! is taken. Until then nothing is visible at the key, and an abort
//! ([`Store::abort_upload`](crate::store::Store::abort_upload)) drops the
//! parts.
//!
//! What each store promises about its parts:
//! - parts are numbered from 1, each (but the last) at least
//!   [`MIN_PART_BYTES`] long on the services, and the completion names
//!   them in order;
//! - a part that failed may be sent again under its number (the services
//!   keep the last one sent under a number; the directory store takes
//!   parts only in order, each once it succeeded);
//! - a completion or abort of an upload the store no longer knows (done,
//!   or aborted) is [`StoreErrorKind::NotFound`](crate::store::StoreErrorKind::NotFound).
//!
//! Each request of an upload takes one value that says all its inputs,
//! its deadline included: [`BeginUpload`], [`UploadPart`],
//! [`CompleteUpload`] and [`AbortUpload`]. A store that wraps another
//! hands the request on as it came.
//!
//! Whether a service honours the condition of a completion is a fact of
//! the service, checked once per store as the lease's probe checks PUT;
//! [`UploadConditions`] keeps the verdict.

use std::fmt;
use std::io::Read;
use std::sync::Mutex;
use std::time::Instant;

use crate::store::{Object, PutMode};

/// The smallest part S3 takes, but for an upload's last part: 5 MiB.
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;

/// The largest part S3 takes: 5 GiB.
pub const MAX_PART_BYTES: usize = 5 * 1024 * 1024 * 1024;

/// The most parts one upload may have on S3.
pub const MAX_PARTS: u32 = 10_000;

/// A part the store took: its number and the ETag it answered with, which
/// the completion names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedPart {
    /// The part's number, from 1.
    pub number: u32,
    /// The ETag the store gave the part, as it gave it.
    pub etag: String,
}

/// The beginning of an upload
/// ([`Store::begin_upload`](crate::store::Store::begin_upload)): the key
/// the object will be made at, the user metadata it will carry, and the
/// moment by which the request must have been answered.
#[derive(Debug, Clone, Copy)]
pub struct BeginUpload<'a> {
    /// The object's key.
    pub key: &'a str,
    /// The user metadata the object will carry, as a PUT's.
    pub metadata: &'a [(String, String)],
    /// The request's deadline (see the store's deadline rule).
    pub deadline: Option<Instant>,
}

/// One part of an upload
/// ([`Store::upload_part`](crate::store::Store::upload_part)): part
/// `number` (from 1) of the upload `upload` of `key`, its bytes, and the
/// request's deadline. Its `Debug` shows the body's length, not its
/// bytes.
#[derive(Clone, Copy)]
pub struct UploadPart<'a> {
    /// The key the upload was begun on.
    pub key: &'a str,
    /// The id [`Store::begin_upload`](crate::store::Store::begin_upload)
    /// returned.
    pub upload: &'a str,
    /// The part's number, from 1.
    pub number: u32,
    /// The part's bytes.
    pub body: &'a [u8],
    /// The request's deadline (see the store's deadline rule).
    pub deadline: Option<Instant>,
}

/// The completion of an upload
/// ([`Store::complete_upload`](crate::store::Store::complete_upload)):
/// the upload `upload` of `key` made the object at `key` from `parts` in
/// order, as `mode` says ([`PutMode::Create`]: only if the key is absent).
#[derive(Debug, Clone, Copy)]
pub struct CompleteUpload<'a> {
    /// The key the upload was begun on.
    pub key: &'a str,
    /// The id [`Store::begin_upload`](crate::store::Store::begin_upload)
    /// returned.
    pub upload: &'a str,
    /// The parts the store took, in order.
    pub parts: &'a [UploadedPart],
    /// The condition on the key, as a PUT's.
    pub mode: &'a PutMode,
    /// The request's deadline (see the store's deadline rule).
    pub deadline: Option<Instant>,
}

/// The abort of an upload
/// ([`Store::abort_upload`](crate::store::Store::abort_upload)): the
/// upload `upload` of `key` dropped with its parts.
#[derive(Debug, Clone, Copy)]
pub struct AbortUpload<'a> {
    /// The key the upload was begun on.
    pub key: &'a str,
    /// The id [`Store::begin_upload`](crate::store::Store::begin_upload)
    /// returned.
    pub upload: &'a str,
    /// The request's deadline (see the store's deadline rule).
    pub deadline: Option<Instant>,
}

impl<'a> BeginUpload<'a> {
    /// The beginning of an upload of `key` whose object will carry
    /// `metadata`, with no deadline.
    pub fn new(key: &'a str, metadata: &'a [(String, String)]) -> Self {
        BeginUpload {
            key,
            metadata,
            deadline: None,
        }
    }

    /// The same request, answered by `deadline`.
    pub fn with_deadline(self, deadline: Option<Instant>) -> Self {
        BeginUpload { deadline, ..self }
    }
}

impl fmt::Debug for UploadPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UploadPart")
            .field("key", &self.key)
            .field("upload", &self.upload)
            .field("number", &self.number)
            .field("body_bytes", &self.body.len())
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<'a> UploadPart<'a> {
    /// Part `number` of the upload `upload` of `key`, its bytes `body`,
    /// with no deadline.
    pub fn new(key: &'a str, upload: &'a str, number: u32, body: &'a [u8]) -> Self {
        UploadPart {
            key,
            upload,
            number,
            body,
            deadline: None,
        }
    }

    /// The same request, answered by `deadline`.
    pub fn with_deadline(self, deadline: Option<Instant>) -> Self {
        UploadPart { deadline, ..self }
    }
}

impl<'a> CompleteUpload<'a> {
    /// The completion of the upload `upload` of `key` from `parts`, as
    /// `mode` says, with no deadline.
    pub fn new(
        key: &'a str,
        upload: &'a str,
        parts: &'a [UploadedPart],
        mode: &'a PutMode,
    ) -> Self {
        CompleteUpload {
            key,
            upload,
            parts,
            mode,
            deadline: None,
        }
    }

    /// The same request, answered by `deadline`.
    pub fn with_deadline(self, deadline: Option<Instant>) -> Self {
        CompleteUpload { deadline, ..self }
    }
}

impl<'a> AbortUpload<'a> {
    /// The abort of the upload `upload` of `key`, with no deadline.
    pub fn new(key: &'a str, upload: &'a str) -> Self {
        AbortUpload {
            key,
            upload,
            deadline: None,
        }
    }

    /// The same request, answered by `deadline`.
    pub fn with_deadline(self, deadline: Option<Instant>) -> Self {
        AbortUpload { deadline, ..self }
    }
}

/// An object's version and metadata with its bytes still to be read: what
/// [`Store::open`](crate::store::Store::open) returns for objects of any
/// size.
pub struct ObjectReader {
    /// The object's version and metadata; its `body` is empty.
    pub object: Object,
    /// The object's bytes, read as they arrive.
    pub body: Box<dyn Read + Send>,
}

impl fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectReader")
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

/// Whether a service refuses a create-only completion of an upload on a
/// key that exists: the fact a fenced upload rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionCondition {
    /// The completion was refused (412): create-only uploads are fenced.
    Honoured,
    /// The completion replaced the object: the service ignores the
    /// condition, and an upload would overwrite whatever is at its key.
    Ignored,
}

/// The verdict on a store's [`CompletionCondition`], checked once and kept
/// for the store's life. A store that keeps one returns it from
/// [`Store::upload_conditions`](crate::store::Store::upload_conditions).
#[derive(Debug, Default)]
pub struct UploadConditions {
    verdict: Mutex<Option<CompletionCondition>>,
}

impl UploadConditions {
    /// No verdict yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The verdict, once checked.
    pub fn verdict(&self) -> Option<CompletionCondition> {
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `verdict`, and return the one kept: [`Ignored`] once any
    /// check saw the condition ignored (a service that honoured it once and
    /// not later is not to be trusted), else [`Honoured`].
    ///
    /// [`Ignored`]: CompletionCondition::Ignored
    /// [`Honoured`]: CompletionCondition::Honoured
    pub fn settle(&self, verdict: CompletionCondition) -> CompletionCondition {
        let mut kept = self.verdict.lock().unwrap_or_else(|e| e.into_inner());
        let settled = match (*kept, verdict) {
            (Some(CompletionCondition::Ignored), _) | (_, CompletionCondition::Ignored) => {
                CompletionCondition::Ignored
            }
            _ => CompletionCondition::Honoured,
        };
        *kept = Some(settled);
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parts_debug_shows_its_length_not_its_bytes() {
        let part = UploadPart::new("k", "id", 1, b"secret bytes");
        let shown = format!("{part:?}");
        assert!(shown.contains("body_bytes: 12"), "{shown}");
        assert!(!shown.contains("115"), "the bytes are shown: {shown}");
    }
}
