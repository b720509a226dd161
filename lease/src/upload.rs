//! Fenced writes of any size: an immutable object streamed into the bucket
//! under a held lease, in parts, made visible only by a create-only
//! completion the lease's write deadline bounds.
//!
//! [`FencedWriter::create`] returns a [`FencedUpload`], an
//! [`std::io::Write`] whose [`finish`](FencedUpload::finish) returns what
//! [`FencedWriter::put_new`] returns. What it promises, beyond what every
//! fenced write promises ([`crate::fence`]):
//!
//! - **Memory is bounded.** One part is held at a time
//!   ([`DEFAULT_PART_BYTES`], 8 MiB, unless [`FencedUpload::part_size`]
//!   says otherwise); a write that fills it sends it before taking more.
//! - **Small objects go whole.** An object of at most one part goes as one
//!   create-only PUT at `finish`, exactly as `put_new` sends it.
//! - **Every request is fenced.** A larger object is a multipart upload
//!   ([`crate::multipart`]) stamped with the epoch, holder and nonce at its
//!   beginning. Each request (the beginning, each part, the completion)
//!   takes the lease's write deadline right before it goes, and carries it:
//!   without one, nothing more is sent.
//! - **The bucket fences the completion.** The object appears only at the
//!   completion, sent create-only (`If-None-Match: *`): a stale holder's
//!   upload can never replace an object. Whether the service honours that
//!   condition is checked once per store before the first upload (a probe
//!   key beside the lease record, created, then completed over
//!   create-only; the completion must be refused). On a service that
//!   ignores it, streams larger than a part are refused
//!   ([`WriteError::UnfencedUploads`]) unless the lease is best-effort.
//! - **Failure aborts.** At the fence, on loss, on any error, and when the
//!   upload is dropped unfinished, the upload is aborted
//!   (AbortMultipartUpload, best effort, within [`ABORT_BOUND`]): no parts
//!   are left behind to be billed, and nothing is completed afterwards.
//!   Every later write, and `finish`, returns the first error.
//! - **A lost answer is settled.** A completion that got no answer (or
//!   found its upload gone) reads the object's metadata: this holder, this
//!   process's nonce, this epoch and this upload's own mark
//!   ([`UPLOAD_METADATA`]) mean the completion landed, and `finish`
//!   returns its version.
//!
//! What an object of one part shares with `put_new`: its write is settled
//! by its digest, so the same bytes written again by this holder at this
//! epoch (a retry after a lost answer, or another stream of the same
//! bytes) count as the write that landed. An upload in parts is settled by
//! its own mark: another stream at the key is [`WriteError::Exists`].
//!
//! What no fence can promise: a completion the service received before the
//! deadline may land after it. It can only create an object where none
//! was, which nobody points at. And an upload whose beginning got no
//! answer, or whose process was killed, is left open with no id to abort
//! it by: the bucket's lifecycle rule (`AbortIncompleteMultipartUpload`)
//! removes it.

use crate::fence::{
    author_of, stamp_metadata, stamp_of, superseded, Author, FencedWriter, Stamp, WriteError,
};
use crate::lease::{Exclusion, Lease};
use crate::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, CompletionCondition, UploadPart, UploadedPart,
    MAX_PARTS, MAX_PART_BYTES, MIN_PART_BYTES,
};
use crate::mutant::StoreMutant;
use crate::record::{new_instance_id, probe_key};
use crate::store::{DeleteMode, PutMode, PutOptions, StoreError, StoreErrorKind, Version};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The part size of a [`FencedUpload`] unless set: 8 MiB.
pub const DEFAULT_PART_BYTES: usize = 8 * 1024 * 1024;

/// How long an abort may take, from when it is sent: the upload is
/// abandoned either way, and the service removes what an abort missed by
/// the bucket's lifecycle rule (`AbortIncompleteMultipartUpload`).
pub const ABORT_BOUND: Duration = Duration::from_secs(2);

/// How long the read that settles a completion without an answer may take,
/// from when it is sent. A read changes nothing, so it is not bound by the
/// write deadline, which a lost answer may have spent.
pub const SETTLE_BOUND: Duration = Duration::from_secs(5);

/// The metadata name under which a multipart upload stores a mark of its
/// own (32 random hex digits), by which a completion whose answer was lost
/// is recognised.
pub const UPLOAD_METADATA: &str = "bucket-lease-upload";

/// An immutable object being written in a stream. See the [module
/// docs](self). Its `Debug` shows where it is, never the bytes it holds.
pub struct FencedUpload {
    /// A writer with the same lease and prefixes, for the single PUT.
    writer: FencedWriter,
    key: String,
    part_bytes: usize,
    /// The bytes not sent yet: at most one part.
    buffer: Vec<u8>,
    state: State,
    /// The deadline the last part went with: kept only for a mutant.
    last_part_deadline: Option<Instant>,
}

impl std::fmt::Debug for FencedUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedUpload")
            .field("key", &self.key)
            .field("part_bytes", &self.part_bytes)
            .field("buffered", &self.buffer.len())
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum State {
    /// Nothing sent: the bytes so far fit in one part.
    Buffering,
    /// An upload begun on the store, and the parts it took.
    Sending {
        upload: String,
        mark: String,
        parts: Vec<UploadedPart>,
    },
    /// Failed with this error, the upload (if any) aborted.
    Failed(WriteError),
    /// Finished.
    Done,
}

impl FencedWriter {
    /// Stream an immutable object to `key`: write its bytes to the
    /// returned [`FencedUpload`], then [`finish`](FencedUpload::finish) it.
    /// Nothing is sent until a part is full. See [`crate::upload`].
    ///
    /// # Errors
    ///
    /// [`WriteError::OutsideLease`] for a key this writer may not touch;
    /// [`WriteError::Fenced`] outside the lease.
    pub fn create(&self, key: &str) -> Result<FencedUpload, WriteError> {
        self.fenced_deadline(key)?;
        Ok(FencedUpload {
            writer: self.sibling(),
            key: key.to_string(),
            part_bytes: DEFAULT_PART_BYTES,
            buffer: Vec::new(),
            state: State::Buffering,
            last_part_deadline: None,
        })
    }
}

impl FencedUpload {
    /// The same upload, in parts of `bytes`. S3 takes parts of 5 MiB to
    /// 5 GiB ([`MIN_PART_BYTES`], [`MAX_PART_BYTES`]) and at most 10,000 of
    /// them, so the part size bounds the object: 8 MiB parts make at most
    /// 78 GiB.
    ///
    /// # Panics
    ///
    /// When `bytes` is outside 5 MiB to 5 GiB, or once bytes were written.
    #[must_use]
    pub fn part_size(mut self, bytes: usize) -> Self {
        assert!(
            (MIN_PART_BYTES..=MAX_PART_BYTES).contains(&bytes),
            "part size {bytes} is outside S3's 5 MiB to 5 GiB"
        );
        assert!(
            self.buffer.is_empty() && matches!(self.state, State::Buffering),
            "the part size is set before the first write"
        );
        self.part_bytes = bytes;
        self
    }

    /// The key being written.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The store's id of the multipart upload, once one is begun (the
    /// first part is full): for logs, and for finding what an abort left.
    pub fn upload_id(&self) -> Option<&str> {
        match &self.state {
            State::Sending { upload, .. } => Some(upload),
            _ => None,
        }
    }

    /// How many parts the store has taken so far.
    pub fn parts_sent(&self) -> usize {
        match &self.state {
            State::Sending { parts, .. } => parts.len(),
            _ => 0,
        }
    }

    /// Send what is left and make the object: one create-only PUT for an
    /// object of at most one part, else the last part and the create-only
    /// completion. Returns the object's version.
    ///
    /// # Errors
    ///
    /// The first error the upload met (it was aborted then), or, as for
    /// [`FencedWriter::put_new`]: [`WriteError::Fenced`] outside the lease;
    /// [`WriteError::Superseded`] when a newer holder wrote the key;
    /// [`WriteError::Exists`] when an earlier holder did (or this one, in
    /// another write); [`WriteError::Store`] when a request failed (the
    /// upload is aborted; writing the stream again is safe).
    pub fn finish(mut self) -> Result<Version, WriteError> {
        // The last part of an upload in parts (a part is sent only once a
        // byte after it arrives, so there always is one).
        if matches!(self.state, State::Sending { .. }) && !self.buffer.is_empty() {
            self.send_part()?;
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Failed(error) => Err(error),
            State::Done => unreachable!("finish takes the upload"),
            State::Buffering => {
                let body = std::mem::take(&mut self.buffer);
                self.writer.put_new(&self.key, &body)
            }
            State::Sending {
                upload,
                mark,
                parts,
            } => self.complete(&upload, &mark, &parts),
        }
    }

    fn lease(&self) -> &Arc<Lease> {
        self.writer.lease()
    }

    /// Send the buffered part, beginning the upload first when it is the
    /// first; on failure, abort the upload and keep the error.
    fn send_part(&mut self) -> Result<(), WriteError> {
        let sent = self.try_send_part();
        if let Err(error) = &sent {
            self.fail(error.clone());
        }
        sent
    }

    fn try_send_part(&mut self) -> Result<(), WriteError> {
        if matches!(self.state, State::Buffering) {
            self.check_completion_condition()?;
            let mark = new_instance_id();
            let mut metadata = stamp_metadata(self.lease());
            metadata.push((UPLOAD_METADATA.to_string(), mark.clone()));
            let deadline = self.writer.fenced_deadline(&self.key)?;
            let upload = self
                .lease()
                .store()
                .begin_upload(&BeginUpload::new(&self.key, &metadata).with_deadline(Some(deadline)))
                .map_err(WriteError::Store)?;
            self.state = State::Sending {
                upload,
                mark,
                parts: Vec::new(),
            };
        }
        let State::Sending { upload, parts, .. } = &self.state else {
            unreachable!("the upload was begun");
        };
        let number = u32::try_from(parts.len() + 1).unwrap_or(u32::MAX);
        if number > MAX_PARTS {
            return Err(WriteError::Store(
                StoreError::new(StoreErrorKind::Rejected, "PUT", &self.key).with_message(format!(
                    "the object needs more than {MAX_PARTS} parts of {} bytes; set a larger \
                     part size (FencedUpload::part_size)",
                    self.part_bytes
                )),
            ));
        }
        // Taken right before the request: a deadline that passed while the
        // part was filled sends nothing.
        let deadline = self.writer.fenced_deadline(&self.key)?;
        self.last_part_deadline = Some(deadline);
        let part = self
            .lease()
            .store()
            .upload_part(
                &UploadPart::new(&self.key, upload, number, &self.buffer)
                    .with_deadline(Some(deadline)),
            )
            .map_err(WriteError::Store)?;
        if let State::Sending { parts, .. } = &mut self.state {
            parts.push(part);
        }
        self.buffer.clear();
        Ok(())
    }

    /// Make the upload the object, create-only, within the write deadline;
    /// a refusal or a lost answer is settled by the object's metadata.
    fn complete(
        &mut self,
        upload: &str,
        mark: &str,
        parts: &[UploadedPart],
    ) -> Result<Version, WriteError> {
        let store = Arc::clone(self.lease().store());
        let fenced = match self
            .last_part_deadline
            .filter(|_| StoreMutant::CompletionReusesPartDeadline.on())
        {
            Some(deadline) => Ok(deadline),
            None => self.writer.fenced_deadline(&self.key),
        };
        let deadline = match fenced {
            Ok(deadline) => deadline,
            Err(error) => return Err(self.abort_with(upload, error)),
        };
        let mode = if StoreMutant::UploadCompletesUnconditionally.on() {
            PutMode::Overwrite
        } else {
            PutMode::Create
        };
        let failure = match store.complete_upload(
            &CompleteUpload::new(&self.key, upload, parts, &mode).with_deadline(Some(deadline)),
        ) {
            Ok(version) => return Ok(version),
            Err(error) => error,
        };
        match failure.kind() {
            // No answer, or the upload gone: perhaps our completion landed.
            StoreErrorKind::Transport | StoreErrorKind::NotFound => {}
            _ if failure.is_refusal() => {}
            _ => return Err(self.abort_with(upload, WriteError::Store(failure))),
        }
        let settle = self.lease().clock().now() + SETTLE_BOUND;
        let existing = match store.head(&self.key, Some(settle)) {
            Ok(existing) => existing,
            Err(_) => return Err(self.abort_with(upload, WriteError::Store(failure))),
        };
        let ours = StoreMutant::UploadSettledWithoutMark.on()
            || existing
                .metadata
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(UPLOAD_METADATA) && v == mark);
        match author_of(self.lease(), &existing) {
            Author::Us if ours => {
                log::debug!(
                    "{}: our own completion had landed; its answer was lost",
                    self.key
                );
                Ok(existing.version)
            }
            // A newer holder's object at our key: another writer is active.
            Author::Newer => {
                let error = superseded(self.lease(), failure);
                Err(self.abort_with(upload, error))
            }
            _ if failure.is_refusal() => {
                let Stamp { epoch, holder, .. } = stamp_of(&existing);
                let error = WriteError::Exists {
                    key: self.key.clone(),
                    epoch,
                    holder,
                };
                Err(self.abort_with(upload, error))
            }
            // Not refused, and someone else's object is there: our
            // completion did not land, and cannot now.
            _ => Err(self.abort_with(upload, WriteError::Store(failure))),
        }
    }

    /// Whether a completion on this store is fenced: the verdict kept by
    /// the store (or this writer), checked first when there is none.
    fn check_completion_condition(&self) -> Result<(), WriteError> {
        let store = self.lease().store();
        let kept = store
            .upload_conditions()
            .unwrap_or(&self.writer.uploads_checked);
        let verdict = match kept.verdict() {
            Some(verdict) => verdict,
            None => kept.settle(self.probe_completion()?),
        };
        match (verdict, self.lease().exclusion()) {
            (CompletionCondition::Honoured, _) => Ok(()),
            (CompletionCondition::Ignored, Exclusion::BestEffort) => {
                log::warn!(
                    "{}: this service ignores If-None-Match on completing an upload in parts; \
                     the lease is best-effort, so the upload goes unfenced",
                    self.key
                );
                Ok(())
            }
            (CompletionCondition::Ignored, _) => Err(WriteError::UnfencedUploads {
                key: self.key.clone(),
            }),
        }
    }

    /// Check once whether the service refuses a create-only completion over
    /// an existing object: a probe key beside the lease record is created,
    /// then an upload of it is completed create-only. Each request takes
    /// the write deadline right before it goes. The probe object and
    /// upload are removed, best effort, whatever happened (a create whose
    /// answer was lost may have landed).
    fn probe_completion(&self) -> Result<CompletionCondition, WriteError> {
        let store = Arc::clone(self.lease().store());
        let probe = probe_key(self.lease().key());
        let fenced = || self.writer.fenced_deadline(&self.key);
        let mut upload = None;
        let checked = (|| {
            let create = PutOptions::new(PutMode::Create).with_deadline(Some(fenced()?));
            store.put(&probe, b"", &create).map_err(WriteError::Store)?;
            let id = store
                .begin_upload(&BeginUpload::new(&probe, &[]).with_deadline(Some(fenced()?)))
                .map_err(WriteError::Store)?;
            let id = upload.insert(id);
            let part = store
                .upload_part(
                    &UploadPart::new(&probe, id, 1, b"bucket-lease completion check")
                        .with_deadline(Some(fenced()?)),
                )
                .map_err(WriteError::Store)?;
            let mode = PutMode::Create;
            match store.complete_upload(
                &CompleteUpload::new(&probe, id, &[part], &mode).with_deadline(Some(fenced()?)),
            ) {
                Ok(_) => {
                    upload = None;
                    Ok(CompletionCondition::Ignored)
                }
                Err(e) if e.kind() == StoreErrorKind::AlreadyExists => {
                    Ok(CompletionCondition::Honoured)
                }
                Err(e) => Err(WriteError::Store(e)),
            }
        })();
        if let Some(id) = &upload {
            let _ = store.abort_upload(
                &AbortUpload::new(&probe, id).with_deadline(Some(self.cleanup_bound())),
            );
        }
        // A delete of the probe key waits its turn on a store with a write
        // interval (the completion wrote the key): its bound allows for it.
        if let Err(e) = store.delete(
            &probe,
            &DeleteMode::Unconditional,
            Some(self.cleanup_bound()),
        ) {
            log::warn!(
                "{probe}: could not remove the object that checked the service's completion \
                 ({e}); remove it by hand"
            );
        }
        match checked {
            Ok(CompletionCondition::Ignored) => log::warn!(
                "{}: the service completed an upload over an existing object although told to \
                 create it only: uploads in parts are not fenced here",
                store.store_url().unwrap_or("the store")
            ),
            Ok(CompletionCondition::Honoured) => {
                log::debug!("the service refuses a create-only completion over an existing object")
            }
            Err(_) => {}
        }
        checked
    }

    /// The deadline of a request that cleans up (an abort, the probe's
    /// delete): [`ABORT_BOUND`] from now on the lease's clock, and the
    /// store's write interval on top, since such a request may wait for
    /// its key's turn.
    fn cleanup_bound(&self) -> Instant {
        let interval = self.lease().store().write_interval().unwrap_or_default();
        self.lease().clock().now() + ABORT_BOUND + interval
    }

    /// Abort the upload, and keep `error` for every later call.
    fn fail(&mut self, error: WriteError) {
        if let State::Sending { upload, .. } = &self.state {
            let upload = upload.clone();
            self.abort(&upload);
        }
        self.buffer = Vec::new();
        self.state = State::Failed(error);
    }

    /// `error`, once the upload is aborted.
    fn abort_with(&mut self, upload: &str, error: WriteError) -> WriteError {
        self.abort(upload);
        error
    }

    /// Abort the upload, best effort, within [`ABORT_BOUND`].
    fn abort(&self, upload: &str) {
        let bound = self.cleanup_bound();
        if let Err(e) = self
            .lease()
            .store()
            .abort_upload(&AbortUpload::new(&self.key, upload).with_deadline(Some(bound)))
        {
            log::warn!(
                "{}: could not abort the unfinished upload {upload} ({e}); its parts stay \
                 until the bucket's lifecycle rule removes them",
                self.key
            );
        }
    }

    /// The error every call after a failure returns.
    fn failed(&self) -> Option<&WriteError> {
        match &self.state {
            State::Failed(error) => Some(error),
            _ => None,
        }
    }
}

impl io::Write for FencedUpload {
    /// Take bytes into the part being filled; a full part is sent first,
    /// within the write deadline. An error is a [`WriteError`] inside the
    /// [`io::Error`] ([`io::Error::get_ref`]); the upload is aborted then,
    /// and [`finish`](FencedUpload::finish) returns that error.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Some(error) = self.failed() {
            return Err(io::Error::other(error.clone()));
        }
        if matches!(self.state, State::Done) {
            return Err(io::Error::other("the upload is finished"));
        }
        if bytes.is_empty() {
            return Ok(0);
        }
        if self.buffer.len() == self.part_bytes {
            self.send_part().map_err(io::Error::other)?;
        }
        if self.buffer.capacity() == 0 {
            self.buffer.reserve_exact(self.part_bytes);
        }
        let taken = bytes.len().min(self.part_bytes - self.buffer.len());
        self.buffer.extend_from_slice(&bytes[..taken]);
        Ok(taken)
    }

    /// Nothing to do: a part goes when it is full, the rest at `finish`
    /// (services refuse parts under 5 MiB but the last).
    fn flush(&mut self) -> io::Result<()> {
        match self.failed() {
            Some(error) => Err(io::Error::other(error.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for FencedUpload {
    /// An upload dropped unfinished is aborted, best effort, within
    /// [`ABORT_BOUND`].
    fn drop(&mut self) {
        if StoreMutant::UploadLeftOpenOnDrop.on() {
            return;
        }
        if let State::Sending { upload, .. } = &self.state {
            let upload = upload.clone();
            log::debug!("{}: upload dropped unfinished; aborting it", self.key);
            self.abort(&upload);
        }
    }
}
