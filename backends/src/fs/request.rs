//! One request on the directory store: how it names itself in its errors
//! (method, key, the store's URL), checks its deadline and its condition,
//! and reads object files. Its methods change nothing on the disk.

use super::layout::{parse_header, read_header, Header};
use super::Location;
use bucket_lease_core::store::{PutMode, StoreError, StoreErrorKind, Version};
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The method and key of a request, and the store's URL, to name them in
/// its errors.
pub(super) struct Request<'a> {
    method: &'static str,
    pub(super) key: &'a str,
    store_url: Arc<str>,
}

impl<'a> Request<'a> {
    pub(super) fn new(method: &'static str, key: &'a str, store_url: Arc<str>) -> Self {
        Request {
            method,
            key,
            store_url,
        }
    }

    pub(super) fn error(&self, kind: StoreErrorKind) -> StoreError {
        StoreError::new(kind, self.method, self.key).with_store_url(Arc::clone(&self.store_url))
    }

    /// A refused condition, with S3's code for it.
    pub(super) fn refusal(&self, kind: StoreErrorKind, code: &str) -> StoreError {
        self.error(kind).with_code(code)
    }

    pub(super) fn check_deadline(&self, deadline: Option<Instant>) -> Result<(), StoreError> {
        self.check_deadline_at(deadline, || {
            "the deadline passed before the request started; nothing was done".to_string()
        })
    }

    /// The request stopped at `deadline`, if it has passed, before it
    /// changed anything; `where_` says where (called only then).
    pub(super) fn check_deadline_at(
        &self,
        deadline: Option<Instant>,
        where_: impl FnOnce() -> String,
    ) -> Result<(), StoreError> {
        match deadline {
            Some(deadline) if Instant::now() >= deadline => Err(self.deadline_passed(where_())),
            _ => Ok(()),
        }
    }

    /// The request ran out of time before it changed anything, as
    /// `message` says: timed out, and not sent.
    pub(super) fn deadline_passed(&self, message: String) -> StoreError {
        self.error(StoreErrorKind::Transport)
            .timed_out()
            .not_sent()
            .with_message(message)
    }

    /// `action` on `path` failed: say which path, why, and what to do.
    pub(super) fn io_error(&self, action: &str, path: &Path, error: io::Error) -> StoreError {
        use io::ErrorKind as E;
        let (kind, advice) = match error.kind() {
            E::PermissionDenied | E::ReadOnlyFilesystem => (
                StoreErrorKind::PermissionDenied,
                "make sure this user may read and write the bucket directory",
            ),
            E::InvalidFilename => (
                StoreErrorKind::Rejected,
                "the file system refuses this name; use a shorter or plainer key",
            ),
            E::StorageFull | E::QuotaExceeded => (
                StoreErrorKind::Transport,
                "free some disk space, then retry",
            ),
            _ => (
                StoreErrorKind::Transport,
                "check the bucket directory and the disk, then retry",
            ),
        };
        self.error(kind)
            .with_message(format!("{action} {}: {error}; {advice}", path.display()))
    }

    pub(super) fn corrupt(&self, path: &Path, detail: &str) -> StoreError {
        self.error(StoreErrorKind::Rejected).with_message(format!(
            "{} is not an object file of this store ({detail}); move it out of the bucket \
             directory",
            path.display()
        ))
    }

    /// Open the object at `path` and read its header only: its ETag and
    /// metadata, whatever the size of its body. `None` when absent.
    pub(super) fn open_header(&self, path: &Path) -> Result<Option<Opened>, StoreError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io_error("open", path, e)),
        };
        let mut reader = BufReader::new(file);
        let raw = read_header(&mut reader).map_err(|e| self.io_error("read", path, e))?;
        let header = parse_header(&raw).map_err(|detail| self.corrupt(path, &detail))?;
        Ok(Some(Opened {
            header,
            header_length: raw.len(),
            reader,
        }))
    }

    /// Read the object at `path`: its header and a body of at most
    /// `max_body` bytes ([`StoreErrorKind::TooLarge`], with the version,
    /// beyond that). `None` when absent.
    pub(super) fn read(
        &self,
        path: &Path,
        max_body: usize,
    ) -> Result<Option<(Header, Vec<u8>)>, StoreError> {
        let Some(Opened {
            header,
            header_length,
            mut reader,
        }) = self.open_header(path)?
        else {
            return Ok(None);
        };
        let too_large = || {
            self.error(StoreErrorKind::TooLarge)
                .with_message(format!(
                    "the object is larger than the {max_body}-byte cap and was not read; it \
                     can be replaced conditionally on the version this error carries"
                ))
                .with_version(Version::etag(header.etag.clone()))
        };
        // The length of the file this reader has open (renames replace a
        // file, never change it), less its header.
        let length = reader
            .get_ref()
            .metadata()
            .map_err(|e| self.io_error("inspect", path, e))?
            .len();
        let header_length = u64::try_from(header_length).unwrap_or(u64::MAX);
        let cap = u64::try_from(max_body).unwrap_or(u64::MAX);
        if length.saturating_sub(header_length) > cap {
            return Err(too_large());
        }
        // Bounded all the same, should the file grow meanwhile.
        let mut body = Vec::new();
        Read::take(&mut reader, cap.saturating_add(1))
            .read_to_end(&mut body)
            .map_err(|e| self.io_error("read", path, e))?;
        if body.len() > max_body {
            return Err(too_large());
        }
        Ok(Some((header, body)))
    }

    /// Whether a write in `mode` may replace what is at `at` now: called
    /// under the bucket's lock, right before publishing. A refusal is the
    /// answer S3 gives, with its code.
    pub(super) fn check_condition(&self, at: &Location, mode: &PutMode) -> Result<(), StoreError> {
        match mode {
            PutMode::Overwrite => Ok(()),
            PutMode::Create => match fs::symlink_metadata(&at.object) {
                Ok(_) => Err(self.refusal(StoreErrorKind::AlreadyExists, "PreconditionFailed")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.io_error("inspect", &at.object, e)),
            },
            PutMode::Update(wanted) => match self.open_header(&at.object)? {
                None => Err(self.refusal(StoreErrorKind::Precondition, "NoSuchKey")),
                Some(opened) if !is_version(&opened.header.etag, wanted) => {
                    Err(self.refusal(StoreErrorKind::Precondition, "PreconditionFailed"))
                }
                Some(_) => Ok(()),
            },
            _ => Err(unknown_mode(self)),
        }
    }

    /// Sync `dir`, so a rename or removal in it survives a crash. Only Unix
    /// can open a directory to sync it. It is synced after the bucket's
    /// lock is let go, so another request may have removed it meanwhile (a
    /// delete that emptied it): then there is nothing of ours left in it
    /// to sync, and whoever removed it synced its parent.
    pub(super) fn sync_dir(&self, dir: &Path) -> Result<(), StoreError> {
        if cfg!(unix) {
            match File::open(dir).and_then(|d| d.sync_all()) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io_error("sync directory", dir, e)),
            }
        }
        Ok(())
    }
}

/// Whether an object with `etag` is the version `wanted`. This store keeps
/// no version ids, so a wanted version id never matches.
pub(super) fn is_version(etag: &str, wanted: &Version) -> bool {
    wanted.etag.as_deref() == Some(etag) && wanted.version_id.is_none()
}

/// An object file opened with its header read: the body follows in
/// `reader`.
pub(super) struct Opened {
    pub(super) header: Header,
    /// How many bytes of the file the header takes.
    pub(super) header_length: usize,
    pub(super) reader: BufReader<File>,
}

/// The answer to a write or delete mode newer than this store: not
/// implemented, nothing done.
pub(super) fn unknown_mode(request: &Request<'_>) -> StoreError {
    request
        .error(StoreErrorKind::NotImplemented)
        .with_message("the directory store does not know this mode; update bucket-lease-backends")
}
