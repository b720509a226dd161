//! Objects in parts on the directory store: multipart uploads, and
//! streamed reads of objects of any size (issue 31's fenced writes).
//!
//! An upload is one file in the store's own folder,
//! `.bucket-lease/uploads/<id>`, where `id` is 32 random hex digits. It
//! is the object file to be, written in place and never copied; its
//! attribute (see [`super::attr`]) names the upload's key, its metadata,
//! and a *mark* where an object's ETag goes:
//!
//! - [`begin`](DirStore::begin) makes the file, empty, with the attribute
//!   marking no part, and syncs it;
//! - each [part](DirStore::take_part) is appended after the body so far
//!   (in chunks, each synced, the deadline checked before each), then the
//!   mark is rewritten to name the part and the bytes it took
//!   (`"p00003<start><end>"`, 13 hex digits each), and synced: the mark
//!   is the upload's whole state, written after the bytes it names are on
//!   the disk, so bytes after it (a part stopped by a crash) are cut off by
//!   the next request, and the mark doubles as the part's ETag;
//! - the [completion](DirStore::complete) replaces the attribute with the
//!   object's (a fresh ETag and the metadata) and syncs it, takes the
//!   bucket's lock, checks the condition, checks the deadline, and renames
//!   the file over its object, as a PUT renames its temporary file. A
//!   completion that publishes nothing (refused, out of time) writes the
//!   upload's attribute back: the upload is as it was.
//!
//! Every request on an upload but the abort holds a lock on its file
//! ([`File::try_lock`]) and checks, holding it, that the file is still at
//! its name: ids are never reused, so a file gone from its name was
//! completed or aborted meanwhile, and no part is ever written into a
//! published object. Requests on one upload go one at a time: one that
//! finds another under way answers [`StoreErrorKind::Conflict`]. The
//! abort removes the file under the bucket's lock alone, as a DELETE
//! removes an object: a part under way then finishes into the removed
//! file, and the completion answers [`StoreErrorKind::NotFound`].
//!
//! A process stopped in the middle of a completion, after it wrote the
//! object's attribute and before it renamed the file or wrote the mark
//! back, leaves an upload that takes no more requests but its abort: rare,
//! and said so.

use super::beneath::Folder;
use super::layout::{encode_header, parse_header, Header, UPLOAD_DIR};
use super::{
    attr, fresh_etag, random_hex, reached, set_attribute, write_chunks, DirStore, Location,
    Request, Step,
};
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadPart, UploadedPart, MAX_PARTS,
};
use bucket_lease_core::store::{Object, PutMode, StoreError, StoreErrorKind, Version};
use rustix::fs::OFlags;
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Instant;

/// The length of an ETag and of a mark: a quoted 32 characters.
const MARK_LENGTH: usize = 34;
/// The most bytes an upload's body may hold: what 13 hex digits count.
const MAX_UPLOAD_BYTES: u64 = (1 << 52) - 1;

/// The last part an upload took: its number (0 before the first) and the
/// bytes of the body it took, `start..end`, counted after the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    number: u32,
    start: u64,
    end: u64,
}

impl Mark {
    /// An upload with no parts yet.
    const NONE: Mark = Mark {
        number: 0,
        start: 0,
        end: 0,
    };

    /// The mark as written in the header, and as the part's ETag:
    /// `"p` + the number in 5 digits + start and end in 13 hex digits each
    /// + `"`. The `p` tells it from a fresh ETag, which is hex.
    fn text(self) -> String {
        format!(
            "\"p{:05}{:013x}{:013x}\"",
            self.number, self.start, self.end
        )
    }

    /// The mark `text` writes, or `None` for anything else.
    fn parse(text: &str) -> Option<Mark> {
        let inner = text.strip_prefix("\"p")?.strip_suffix('"')?;
        if inner.len() != 31 || !inner.is_ascii() {
            return None;
        }
        let mark = Mark {
            number: inner[..5].parse().ok()?,
            start: u64::from_str_radix(&inner[5..18], 16).ok()?,
            end: u64::from_str_radix(&inner[18..], 16).ok()?,
        };
        // One spelling only (no sign, no upper case), and a range.
        (mark.text() == text && mark.start <= mark.end).then_some(mark)
    }
}

/// Refuse an upload id this store never gives: one that could name
/// another file (`../x`) included.
fn check_id(request: &Request<'_>, upload: &str) -> Result<(), StoreError> {
    let valid = upload.len() == 32
        && upload
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !valid {
        return Err(request
            .error(StoreErrorKind::Rejected)
            .with_message(format!(
                "{upload:?} is not an upload id of the directory store (its ids are 32 lowercase \
             hex digits); pass the id begin_upload returned for this key"
            )));
    }
    Ok(())
}

/// The answer for an upload the store does not know (any more).
fn no_such_upload(request: &Request<'_>, upload: &str) -> StoreError {
    request
        .refusal(StoreErrorKind::NotFound, "NoSuchUpload")
        .with_message(format!(
            "there is no upload {upload} of this key: it was completed or aborted, or begun for \
             another key; begin a new upload"
        ))
}

/// An upload's file, opened and locked for one request (the lock goes with
/// the file), with its state read from its mark.
struct OpenUpload {
    file: File,
    /// The store's folder of uploads, where the file is (named by its id).
    folder: Folder,
    /// The file's path, for messages.
    path: PathBuf,
    /// The upload's id.
    id: String,
    /// The upload's attribute: its key and metadata, and its mark.
    header: Header,
    /// The last part taken.
    last: Mark,
}

impl OpenUpload {
    /// Open and lock the file of upload `upload` in `folder`, the
    /// store's folder of uploads, and cut off bytes after its last part (a
    /// part a crash stopped).
    fn open(request: &Request<'_>, folder: Folder, upload: &str) -> Result<OpenUpload, StoreError> {
        let path = folder.path().join(upload);
        let file = match folder.open_file(upload, OFlags::RDWR) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(no_such_upload(request, upload))
            }
            Err(e) => return Err(request.file_error("open", &folder, upload, e)),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(request
                    .error(StoreErrorKind::Conflict)
                    .with_message(format!(
                        "another request on upload {upload} (a part, or its completion) is under \
                     way in this or another process, and the directory store takes an upload's \
                     requests one at a time; send the next once it has answered"
                    )))
            }
            Err(fs::TryLockError::Error(e)) => return Err(request.io_error("lock", &path, e)),
        }
        // Still at its name, now that no other request on it runs: a file
        // completed (renamed over its object) or aborted (removed) since it
        // was opened is not this upload's any more.
        match folder.kind(upload) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(no_such_upload(request, upload)),
            Err(e) => return Err(request.io_error("inspect", &path, e)),
        }
        let damaged = |detail: &str| {
            request
                .error(StoreErrorKind::Rejected)
                .with_message(format!(
                    "the upload's file {} {detail}, and takes no more parts or completions; abort \
                 the upload and upload the object again",
                    path.display()
                ))
        };
        let raw = match attr::get(&file) {
            Ok(Some(raw)) => raw,
            Ok(None) => return Err(damaged(&format!("has no {} attribute", attr::NAME))),
            Err(e) => return Err(request.io_error("read the attribute of", &path, e)),
        };
        let header = parse_header(&raw)
            .map_err(|detail| damaged(&format!("is not an upload of this store ({detail})")))?;
        let Some(key) = header.key.as_deref() else {
            return Err(damaged(
                "was being completed by a request that stopped before it published the object \
                 or put the upload back as it was (its process ended, or the disk failed)",
            ));
        };
        if key != request.key {
            return Err(no_such_upload(request, upload));
        }
        let last = Mark::parse(&header.etag)
            .ok_or_else(|| damaged("has no mark of its parts where its ETag goes"))?;
        let length = file
            .metadata()
            .map_err(|e| request.io_error("inspect", &path, e))?
            .len();
        if length < last.end {
            return Err(damaged("is shorter than the parts it took"));
        }
        if length > last.end {
            file.set_len(last.end)
                .map_err(|e| request.io_error("cut a stopped part off", &path, e))?;
        }
        Ok(OpenUpload {
            file,
            folder,
            path,
            id: upload.to_string(),
            header,
            last,
        })
    }

    /// Write the upload's attribute with `text` (a mark) where the ETag
    /// goes, or, with `object`, the object's attribute with `text` its
    /// ETag; and sync it.
    fn write_mark(
        &mut self,
        request: &Request<'_>,
        text: &str,
        object: bool,
    ) -> Result<(), StoreError> {
        debug_assert_eq!(text.len(), MARK_LENGTH, "{text}");
        let key = (!object).then_some(request.key);
        let attribute = encode_header(key, text, &self.header.metadata);
        set_attribute(request, &self.file, &self.path, &attribute)?;
        self.file
            .sync_all()
            .map_err(|e| request.io_error("write", &self.path, e))
    }

    /// Put the upload back as its last part left it, after a request on it
    /// that did not finish: best effort (an upload it fails to restore says
    /// so to the next request).
    fn restore(&mut self, request: &Request<'_>) {
        let _ = self.write_mark(request, &self.last.text(), false);
        let _ = self.file.set_len(self.last.end);
    }
}

/// Refuse `parts` unless they are exactly the parts the upload took, in
/// order, each with the ETag it was given (its mark), up to `last`.
fn check_parts(
    request: &Request<'_>,
    upload: &str,
    parts: &[UploadedPart],
    last: Mark,
) -> Result<(), StoreError> {
    let refuse = |code: &str, detail: String| {
        request
            .refusal(StoreErrorKind::Rejected, code)
            .with_message(format!(
                "{detail}; a completion names every part upload {upload} took ({} of them), in \
                 order 1, 2, 3…, each with the ETag it answered",
                last.number
            ))
    };
    if parts.is_empty() {
        return Err(refuse(
            "MalformedXML",
            "the completion names no part".into(),
        ));
    }
    let mut end = 0;
    for (at, part) in parts.iter().enumerate() {
        let position = at + 1;
        if usize::try_from(part.number) != Ok(position) {
            return Err(refuse(
                "InvalidPartOrder",
                format!(
                    "part number {} is named in position {position}",
                    part.number
                ),
            ));
        }
        match Mark::parse(&part.etag) {
            Some(mark) if mark.number == part.number && mark.start == end => end = mark.end,
            _ => {
                return Err(refuse(
                    "InvalidPart",
                    format!(
                        "part {} is named with the ETag {:?}, which is not the one it was given",
                        part.number, part.etag
                    ),
                ))
            }
        }
    }
    if parts.last().map(|part| part.etag.as_str()) != Some(last.text().as_str()) {
        return Err(refuse(
            "InvalidPart",
            format!(
                "the completion names {} parts, not the ones taken",
                parts.len()
            ),
        ));
    }
    Ok(())
}

/// An object's body as [`DirStore::open_object`] streams it: its open file
/// after the header (so one whole version, whatever replaces the object
/// meanwhile), failing with [`io::ErrorKind::TimedOut`] once the read's
/// deadline has passed.
struct Body {
    reader: BufReader<File>,
    deadline: Option<Instant>,
    /// The object's URL, for the error.
    url: String,
    read: u64,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "GET {}: the deadline passed after {} bytes of the body were read; open \
                     the object again with a later deadline to read it whole",
                    self.url, self.read
                ),
            ));
        }
        let n = self.reader.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl DirStore {
    /// [`Store::begin_upload`](bucket_lease_core::store::Store::begin_upload):
    /// the upload's file, empty, its attribute marking no part, synced
    /// with its folder.
    pub(super) fn begin(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        let request = self.request("POST", begin.key);
        request.check_deadline(begin.deadline)?;
        // The key is checked now, as S3 checks it, though the upload's
        // file is not beside its object: its spelling, and its path (a
        // link or another bucket on it is refused now, not after every
        // part was written; the completion checks again).
        let at = self.locate(&request)?;
        let root = self.root_folder(&request)?;
        self.find_folder(&request, &root, &at)?;
        let upload = random_hex(&request, "an upload id")?;
        let attribute = encode_header(Some(begin.key), &Mark::NONE.text(), begin.metadata);
        let file = self.write_own(
            &request,
            &root,
            UPLOAD_DIR,
            upload.clone(),
            &attribute,
            &[],
            begin.deadline,
        )?;
        request.sync(&file.folder)?;
        file.keep();
        Ok(upload)
    }

    /// [`Store::upload_part`](bucket_lease_core::store::Store::upload_part):
    /// parts in order only, appended, then marked.
    pub(super) fn take_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        let number = part.number;
        let request = self.request("PUT", part.key);
        request.check_deadline(part.deadline)?;
        let at = self.locate(&request)?;
        check_id(&request, part.upload)?;
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .with_message(format!(
                    "part number {number} is out of range: parts are numbered 1 to {MAX_PARTS}"
                )));
        }
        let root = self.root_folder(&request)?;
        self.find_folder(&request, &root, &at)?;
        let folder = self.own_folder(&request, &root, UPLOAD_DIR)?;
        let mut open = OpenUpload::open(&request, folder, part.upload)?;
        let next = open.last.number + 1;
        if number != next {
            let detail = if number < next {
                format!("part {number} was taken already")
            } else {
                format!("part {number} came before part {next}")
            };
            return Err(request
                .refusal(StoreErrorKind::Rejected, "InvalidPartOrder")
                .with_message(format!(
                    "{detail}: the directory store takes each part of an upload once, in order \
                     1, 2, 3…; send part {next} next (to send a part again, abort the upload \
                     and begin again)"
                )));
        }
        let start = open.last.end;
        let end = start
            .checked_add(part.body.len() as u64)
            .filter(|end| *end <= MAX_UPLOAD_BYTES)
            .ok_or_else(|| {
                request
                    .error(StoreErrorKind::Rejected)
                    .with_message(format!(
                        "the upload would pass the {MAX_UPLOAD_BYTES} bytes the directory store \
                     takes in one object"
                    ))
            })?;
        let mark = Mark { number, start, end };
        let taken = Self::append(&request, &mut open, part.body, mark, part.deadline);
        if taken.is_err() {
            open.restore(&request);
        }
        taken?;
        Ok(UploadedPart {
            number,
            etag: mark.text(),
        })
    }

    /// Append `body` to `open` as the part `mark` names, then write the
    /// mark, the deadline checked before each chunk and before the mark.
    fn append(
        request: &Request<'_>,
        open: &mut OpenUpload,
        body: &[u8],
        mark: Mark,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let path = open.path.clone();
        let failed = |e| request.io_error("write", &path, e);
        open.file
            .seek(SeekFrom::Start(mark.start))
            .map_err(failed)?;
        let stopped = |written: usize| {
            format!(
                "the deadline passed while part {} was written to {} ({written} of {} bytes), \
                 so the part was not taken and its bytes are cut off; send it again with a later \
                 deadline, or in smaller parts",
                mark.number,
                path.display(),
                body.len()
            )
        };
        write_chunks(request, &mut open.file, &path, body, deadline, stopped)?;
        open.file.sync_data().map_err(failed)?;
        reached(Step::Publishing);
        request.check_deadline_at(deadline, || stopped(body.len()))?;
        open.write_mark(request, &mark.text(), false)
    }

    /// [`Store::complete_upload`](bucket_lease_core::store::Store::complete_upload):
    /// the upload's file renamed over its object under the bucket's lock,
    /// as a PUT in `mode` renames its temporary file.
    pub(super) fn complete(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        let request = self.request("POST", complete.key);
        request.check_deadline(complete.deadline)?;
        let at = self.locate(&request)?;
        check_id(&request, complete.upload)?;
        let root = self.root_folder(&request)?;
        let folder = self.own_folder(&request, &root, UPLOAD_DIR)?;
        let mut open = OpenUpload::open(&request, folder, complete.upload)?;
        check_parts(&request, complete.upload, complete.parts, open.last)?;
        let etag = fresh_etag(&request)?;
        let published = self.publish(
            &request,
            &root,
            &at,
            &mut open,
            &etag,
            complete.mode,
            complete.deadline,
        );
        match published {
            Ok(folder) => {
                request.sync(&folder)?;
                Ok(Version::etag(etag))
            }
            Err(e) => {
                open.restore(&request);
                Err(e)
            }
        }
    }

    /// Write the object's attribute, with `etag`, over the upload's, take
    /// the bucket's lock, check `mode`'s condition and the deadline, and
    /// rename the upload's file over its object.
    #[allow(clippy::too_many_arguments)]
    fn publish(
        &self,
        request: &Request<'_>,
        root: &Folder,
        at: &Location<'_>,
        open: &mut OpenUpload,
        etag: &str,
        mode: &PutMode,
        deadline: Option<Instant>,
    ) -> Result<Folder, StoreError> {
        open.write_mark(request, etag, true)?;
        let _lock = self.lock(request, root, deadline)?;
        let found = request.check_condition(root, at, mode)?;
        let late = || {
            format!(
                "the deadline passed after the condition was checked, before upload {} was \
                 renamed over {}, so the object was not published and the upload is as it was \
                 (complete or abort it); give the completion a later deadline",
                open.id,
                at.object.display()
            )
        };
        // Aborted while this request waited for the lock.
        let gone = || no_such_upload(request, &open.id);
        let from = (&open.folder, open.id.as_str());
        self.publish_at(request, root, at, found, from, deadline, late, gone)
    }

    /// [`Store::abort_upload`](bucket_lease_core::store::Store::abort_upload):
    /// the upload's file removed under the bucket's lock, with the folders
    /// that leaves empty, as a DELETE removes an object.
    pub(super) fn abort(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        let request = self.request("DELETE", abort.key);
        request.check_deadline(abort.deadline)?;
        self.locate(&request)?;
        check_id(&request, abort.upload)?;
        let root = self.root_folder(&request)?;
        let folder = self.own_folder(&request, &root, UPLOAD_DIR)?;
        let path = folder.path().join(abort.upload);
        // Only an upload of this key: an id begun for another key aborts
        // nothing, as an id never given does.
        // Without waiting: a FIFO someone put at the name answers at once.
        let file = match folder.open_file(abort.upload, OFlags::RDONLY | OFlags::NONBLOCK) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(request.file_error("open", &folder, abort.upload, e)),
        };
        if !file.metadata().is_ok_and(|meta| meta.is_file()) {
            return Err(request.not_a_file(&path));
        }
        let header = attr::get(&file)
            .ok()
            .flatten()
            .and_then(|raw| parse_header(&raw).ok());
        if header.is_some_and(|header| header.key.is_some_and(|k| k != request.key)) {
            return Ok(());
        }
        drop(file);
        let lock = self.lock(&request, &root, abort.deadline)?;
        reached(Step::Publishing);
        request.check_deadline_at(abort.deadline, || {
            format!(
                "the deadline passed after the lock was taken, before {} was removed, so the \
                 upload was not aborted; abort it again with a later deadline",
                path.display()
            )
        })?;
        match folder.remove_file(abort.upload) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(request.io_error("remove", &path, e)),
        }
        drop(lock);
        request.sync(&folder)
    }

    /// [`Store::open`](bucket_lease_core::store::Store::open): the header
    /// read, the body streamed from the same open file, with no cap.
    pub(super) fn open_object(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<ObjectReader, StoreError> {
        let request = self.request("GET", key);
        let opened = self.open_found(&request, deadline)?;
        let object = Object::new(Vec::new(), Version::etag(opened.header.etag))
            .with_metadata(opened.header.metadata);
        Ok(ObjectReader {
            object,
            body: Box::new(Body {
                reader: opened.reader,
                deadline,
                // The object's URL, as errors name it.
                url: request.error(StoreErrorKind::NotFound).url(),
                read: 0,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_are_told_from_etags() {
        for mark in [
            Mark::NONE,
            Mark {
                number: MAX_PARTS,
                start: MAX_UPLOAD_BYTES - 1,
                end: MAX_UPLOAD_BYTES,
            },
        ] {
            assert_eq!(mark.text().len(), MARK_LENGTH);
            assert_eq!(Mark::parse(&mark.text()), Some(mark));
        }
        let request = Request::new("PUT", "k", "file:///t//".into());
        let etag = fresh_etag(&request).unwrap();
        assert_eq!(etag.len(), MARK_LENGTH, "an ETag fits over a mark");
        assert_eq!(Mark::parse(&etag), None, "and is told from one");
        let good = Mark {
            number: 1,
            start: 2,
            end: 10,
        }
        .text();
        for bad in [
            good.to_uppercase().replace('P', "p"),
            good.replacen('0', "", 1),
            good.replacen("p0", "p+", 1),
            format!("\"p00001{:013x}{:013x}\"", 10, 2),
            good.trim_matches('"').to_string(),
        ] {
            assert_eq!(Mark::parse(&bad), None, "{bad}");
        }
    }
}
