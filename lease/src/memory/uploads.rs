//! The memory store's multipart uploads: parts kept per upload, and a
//! completion decided exactly as a PUT of the joined parts in its mode.

use super::{named, MemoryStore, Misbehaviour, State};
use crate::multipart::{AbortUpload, BeginUpload, CompleteUpload, UploadPart, UploadedPart};
use crate::store::{PutMode, PutOptions, StoreError, StoreErrorKind, Version};
use std::collections::BTreeMap;

/// An upload begun and neither completed nor aborted.
#[derive(Debug)]
pub(super) struct Pending {
    key: String,
    metadata: Vec<(String, String)>,
    /// Each part's ETag and bytes, by number.
    parts: BTreeMap<u32, (String, Vec<u8>)>,
}

impl MemoryStore {
    /// How many uploads were begun and neither completed nor aborted: for
    /// test assertions.
    pub fn uploads_open(&self) -> usize {
        self.lock().uploads.len()
    }

    pub(super) fn begin_upload_in(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        let BeginUpload { key, metadata, .. } = *begin;
        let id = format!("mem-upload-{}", self.fresh_number());
        let mut s = self.lock();
        s.begin("POST", key).map_err(named)?;
        s.uploads.insert(
            id.clone(),
            Pending {
                key: key.to_string(),
                metadata: metadata.to_vec(),
                parts: BTreeMap::new(),
            },
        );
        s.answer("POST", key, id).map_err(named)
    }

    pub(super) fn upload_part_in(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        let number = part.number;
        let etag = format!("\"mem-part-{}\"", self.fresh_number());
        let mut s = self.lock();
        s.begin("PUT", part.key).map_err(named)?;
        let pending = pending(&mut s, "PUT", part.key, part.upload)?;
        pending
            .parts
            .insert(number, (etag.clone(), part.body.to_vec()));
        s.answer("PUT", part.key, UploadedPart { number, etag })
            .map_err(named)
    }

    pub(super) fn complete_upload_in(
        &self,
        complete: &CompleteUpload<'_>,
    ) -> Result<Version, StoreError> {
        let version = self.fresh_version();
        let mut s = self.lock();
        s.puts += 1;
        s.begin("POST", complete.key).map_err(named)?;
        s.turned_away("POST", complete.key).map_err(named)?;
        let ignore = s.on(Misbehaviour::IgnoreConditionOnCompletion);
        let pending = pending(&mut s, "POST", complete.key, complete.upload)?;
        let mut body = Vec::new();
        for part in complete.parts {
            match pending.parts.get(&part.number) {
                Some((etag, bytes)) if *etag == part.etag => body.extend_from_slice(bytes),
                _ => {
                    return Err(named(
                        StoreError::new(StoreErrorKind::Rejected, "POST", complete.key)
                            .with_code("InvalidPart")
                            .with_message(format!(
                                "part {} with ETag {} was not uploaded",
                                part.number, part.etag
                            )),
                    ))
                }
            }
        }
        let mut options = PutOptions::new(if ignore {
            PutMode::Overwrite
        } else {
            complete.mode.clone()
        });
        options.metadata = pending.metadata.clone();
        let decided = Self::put_in(&mut s, "POST", complete.key, &body, &options, version);
        s.decided(complete.key, decided.is_ok());
        if decided.is_ok() {
            s.uploads.remove(complete.upload);
        }
        let version = decided.map_err(named)?;
        s.answer("POST", complete.key, version).map_err(named)
    }

    pub(super) fn abort_upload_in(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        let AbortUpload { key, upload, .. } = *abort;
        let mut s = self.lock();
        s.begin("DELETE", key).map_err(named)?;
        s.uploads.remove(upload);
        s.answer("DELETE", key, ()).map_err(named)
    }
}

/// The upload `upload` of `key`, or the answer S3 gives for an upload it
/// does not know.
fn pending<'s>(
    s: &'s mut State,
    method: &'static str,
    key: &str,
    upload: &str,
) -> Result<&'s mut Pending, StoreError> {
    match s.uploads.get_mut(upload) {
        Some(pending) if pending.key == key => Ok(pending),
        _ => Err(named(
            StoreError::new(StoreErrorKind::NotFound, method, key)
                .with_code("NoSuchUpload")
                .with_message(format!(
                    "no upload {upload} of this key: it was completed or aborted"
                )),
        )),
    }
}
