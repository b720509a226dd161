//! One request on the directory store: how it names itself in its errors
//! (method, key, the store's URL), checks its deadline and its condition,
//! and reads object files. Its methods change nothing on the disk but an
//! empty folder where an object is to go (see
//! [`Request::check_condition`]).

use super::attr;
use super::beneath::{Folder, Kind, Resolve};
use super::layout::{parse_header, Header, STATE_DIR};
use super::Location;
use bucket_lease_core::store::{PutMode, StoreError, StoreErrorKind, Version};
use rustix::fs::OFlags;
use std::fs::File;
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

    /// `action` on `path` failed on the local disk, before anything was
    /// published or removed: say which path, why, and what to do. Not
    /// sent: the request took no effect.
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
        self.error(kind).not_sent().with_message(format!(
            "the local disk refused to {action} {}: {error}; nothing was published or removed; \
             {advice}",
            path.display()
        ))
    }

    /// A folder on the way to a key or to the store's own files could not
    /// be opened (or made) for `action`: a link is refused as one; a
    /// failure of the disk is said so.
    pub(super) fn unresolved(&self, failure: Resolve, action: &str) -> StoreError {
        self.resolve_error(failure, |path, e| self.io_error(action, path, e))
    }

    /// `failure` to reach a folder as an error: a link or another bucket
    /// on the way refused as such, and a failure of the disk (a file in the
    /// way, a folder missing, an error) as `disk` says it.
    pub(super) fn resolve_error(
        &self,
        failure: Resolve,
        disk: impl FnOnce(&Path, io::Error) -> StoreError,
    ) -> StoreError {
        match failure {
            Resolve::Link(path) => self.link(&path),
            Resolve::Bucket(path) => self.nested(&path),
            Resolve::NotFolder(path) => disk(
                &path,
                io::Error::new(io::ErrorKind::NotADirectory, "it is a file, not a folder"),
            ),
            Resolve::Missing(path) => disk(
                &path,
                io::Error::new(io::ErrorKind::NotFound, "a folder on its path is missing"),
            ),
            Resolve::Io(path, e) => disk(&path, e),
        }
    }

    /// `path`, on the way to this request's key (or the store's own
    /// files), is a symbolic link: the store follows none, since a link
    /// could lead out of the bucket, or into another bucket where one file
    /// would be two objects. Permanent: only removing the link helps.
    pub(super) fn link(&self, path: &Path) -> StoreError {
        self.error(StoreErrorKind::Rejected)
            .permanent()
            .with_code("SymbolicLink")
            .with_message(format!(
                "{} is a symbolic link, and the directory store follows no link beneath the \
                 bucket's directory (one could lead out of the bucket, or into another bucket, \
                 where one file would be two objects); nothing was done; remove the link (to use \
                 the directory it names, open that directory as a bucket of its own)",
                path.display()
            ))
    }

    /// `path`, a folder on this request's key's path, is the directory of
    /// a bucket of its own (it holds `.bucket-lease`), so the key's file
    /// would be an object of both buckets. Permanent.
    pub(super) fn nested(&self, path: &Path) -> StoreError {
        self.error(StoreErrorKind::Rejected)
            .permanent()
            .with_code("NestedBucket")
            .with_message(format!(
                "{} on the key's path is a bucket of its own (it holds {STATE_DIR}), so the key's \
                 file would be an object of both buckets, one file two objects; nothing was \
                 done; write the key through that bucket, file://{}//…, or choose a key outside \
                 it",
                path.display(),
                crate::settings::url_text(&path.display().to_string())
            ))
    }

    /// `path`, one of the store's own files (or the first layout's lock),
    /// is a FIFO, a socket or a device someone put there: refused at once,
    /// never opened to wait on. Permanent.
    pub(super) fn not_a_file(&self, path: &Path) -> StoreError {
        self.error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "{} is not a regular file or folder of the store's own (a FIFO, a socket or a \
                 device was put there); nothing was done; move it out of the bucket directory",
                path.display()
            ))
    }

    /// `action` on the file `name` in `folder` failed with `error`: a link
    /// at the name (which `O_NOFOLLOW` refuses) is refused as one, any
    /// other failure as the disk's.
    pub(super) fn file_error(
        &self,
        action: &str,
        folder: &Folder,
        name: &str,
        error: io::Error,
    ) -> StoreError {
        self.open_error(folder, name, error, |path, e| {
            self.io_error(action, path, e)
        })
    }

    /// Opening (or making) the file `name` in `folder` failed with `error`:
    /// a link at the name refused as one, any other failure as `disk`
    /// says it.
    pub(super) fn open_error(
        &self,
        folder: &Folder,
        name: &str,
        error: io::Error,
        disk: impl FnOnce(&Path, io::Error) -> StoreError,
    ) -> StoreError {
        let path = folder.path().join(name);
        if matches!(folder.kind(name), Ok(Some(Kind::Link))) {
            return self.link(&path);
        }
        disk(&path, error)
    }

    pub(super) fn corrupt(&self, path: &Path, detail: &str) -> StoreError {
        self.error(StoreErrorKind::Rejected).with_message(format!(
            "{} is not an object of this store: its {} attribute is damaged ({detail}); move \
             it out of the bucket directory",
            path.display(),
            attr::NAME
        ))
    }

    /// The file at `path` holds no object of this store: it was put there
    /// another way, as `detail` says.
    pub(super) fn foreign(&self, path: &Path, detail: &str) -> StoreError {
        self.error(StoreErrorKind::Rejected).with_message(format!(
            "{} is not an object of this store: {detail}; write it through the store (or copy \
             it in with its attributes, cp --preserve=xattr or tar --xattrs, from a bucket \
             written by the store), or move it out of the bucket directory",
            path.display()
        ))
    }

    /// The file system keeps no user extended attributes, where the store
    /// keeps each object's ETag and metadata.
    pub(super) fn no_attributes(&self, path: &Path, error: &io::Error) -> StoreError {
        self.error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "the file system under {} keeps no user extended attributes ({error}), where \
                 the directory store keeps each object's ETag and metadata; put the bucket on \
                 ext4, XFS, btrfs, ZFS or tmpfs (Linux 6.6 or later)",
                path.display()
            ))
    }

    /// `key` cannot be an object here because the directory bucket holds
    /// `taken` as the other kind: a file where `key` needs a folder, or a
    /// folder of longer keys where `key` needs a file. S3 holds both; a
    /// file system cannot.
    pub(super) fn key_conflict(&self, taken: &Path, is_folder: bool) -> StoreError {
        let detail = if is_folder {
            format!(
                "{} is a folder holding longer keys ({}/…), and a file system cannot hold an \
                 object of the same name beside it",
                taken.display(),
                self.key
            )
        } else {
            format!(
                "{} is an object, and a file system cannot hold the folder this key needs \
                 under the same name",
                taken.display()
            )
        };
        self.error(StoreErrorKind::Rejected)
            .permanent()
            .with_code("KeyConflict")
            .with_message(format!(
                "{detail} (S3 can: a directory bucket cannot hold both an object `a` and an \
                 object `a/b`); choose keys of which none is a folder of another, or delete the \
                 object in the way"
            ))
    }

    /// Open the object `name` in `folder` and read its attribute only:
    /// its ETag and metadata, whatever the size of its body. `None` when
    /// there is no object (no file, or a folder of longer keys). A link at
    /// the name is refused, never followed.
    pub(super) fn open_object(
        &self,
        folder: &Folder,
        name: &str,
    ) -> Result<Option<Opened>, StoreError> {
        let path = folder.path().join(name);
        let path = path.as_path();
        // Without waiting: a FIFO or device someone put in the bucket
        // answers at once (and is then refused as no object), where a
        // plain open would wait for a writer for ever.
        let file = match folder.open_file(name, OFlags::RDONLY | OFlags::NONBLOCK) {
            Ok(file) => file,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(e) if no_file_to_open(&e) => {
                if matches!(folder.kind(name), Ok(Some(Kind::Link))) {
                    return Err(self.link(path));
                }
                return Err(self.foreign(
                    path,
                    &format!("it is not a regular file, and cannot be opened as one ({e})"),
                ));
            }
            Err(e) => return Err(self.io_error("open", path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| self.io_error("inspect", path, e))?;
        if meta.is_dir() {
            return Ok(None);
        }
        if !meta.is_file() {
            return Err(self.foreign(path, "it is not a regular file"));
        }
        let raw = match attr::get(&file) {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                return Err(self.foreign(
                    path,
                    &format!(
                        "it has no {} attribute, which holds the ETag of every object the \
                         store writes (was it copied in with cp or tar?)",
                        attr::NAME
                    ),
                ))
            }
            Err(e) if attr::is_unsupported(&e) => return Err(self.no_attributes(path, &e)),
            Err(e) => return Err(self.io_error("read the attribute of", path, e)),
        };
        let header = parse_header(&raw).map_err(|detail| self.corrupt(path, &detail))?;
        if header.key.is_some() {
            return Err(self.corrupt(path, "it is an upload's, not an object's"));
        }
        Ok(Some(Opened {
            header,
            length: meta.len(),
            reader: BufReader::new(file),
        }))
    }

    /// Read the object `name` in `folder`: its header and a body of at
    /// most `max_body` bytes ([`StoreErrorKind::TooLarge`], with the
    /// version, beyond that). `None` when absent.
    pub(super) fn read(
        &self,
        folder: &Folder,
        name: &str,
        max_body: usize,
    ) -> Result<Option<(Header, Vec<u8>)>, StoreError> {
        let path = folder.path().join(name);
        let path = path.as_path();
        let Some(Opened {
            header,
            length,
            mut reader,
        }) = self.open_object(folder, name)?
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
        // file, never change it).
        let cap = u64::try_from(max_body).unwrap_or(u64::MAX);
        if length > cap {
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
    /// answer S3 gives, with its code, the refusal of a key that
    /// conflicts with another ([`Request::key_conflict`]), or of a link on
    /// the key's path. An empty folder where the object goes (a write that
    /// published nothing left it) is removed. Returns the object's folder
    /// when it is there already.
    pub(super) fn check_condition(
        &self,
        root: &Folder,
        at: &Location<'_>,
        mode: &PutMode,
    ) -> Result<Option<Folder>, StoreError> {
        let folder = match root.open_outside(&at.folders, STATE_DIR) {
            Ok(folder) => Some(folder),
            // No object where no folder is, or under a file.
            Err(Resolve::Missing(_)) => None,
            Err(Resolve::NotFolder(path)) => {
                if matches!(mode, PutMode::Update(_)) {
                    return Err(self.refusal(StoreErrorKind::Precondition, "NoSuchKey"));
                }
                return Err(self.key_conflict(&path, false));
            }
            Err(other) => return Err(self.unresolved(other, "open the folder")),
        };
        if let PutMode::Update(wanted) = mode {
            // No object where a folder or nothing is: nothing to update.
            let opened = match &folder {
                Some(folder) => self.open_object(folder, at.name)?,
                None => None,
            };
            return match opened {
                None => Err(self.refusal(StoreErrorKind::Precondition, "NoSuchKey")),
                Some(opened) if !is_version(&opened.header.etag, wanted) => {
                    Err(self.refusal(StoreErrorKind::Precondition, "PreconditionFailed"))
                }
                Some(_) => Ok(folder),
            };
        }
        let occupied = match &folder {
            None => false,
            Some(folder) => match folder.kind(at.name) {
                Ok(None) => false,
                Ok(Some(Kind::Folder)) => {
                    if folder.remove_folder(at.name).is_err() {
                        return Err(self.key_conflict(&at.object, true));
                    }
                    false
                }
                Ok(Some(Kind::Link)) => return Err(self.link(&at.object)),
                Ok(Some(Kind::File | Kind::Other)) => true,
                Err(e) => return Err(self.io_error("inspect", &at.object, e)),
            },
        };
        match mode {
            PutMode::Overwrite => Ok(folder),
            PutMode::Create if occupied => {
                Err(self.refusal(StoreErrorKind::AlreadyExists, "PreconditionFailed"))
            }
            PutMode::Create => Ok(folder),
            _ => Err(unknown_mode(self)),
        }
    }

    /// Sync `folder`, so a rename or removal in it survives a crash: the
    /// last step of a write or delete, whose change is made by then.
    pub(super) fn sync(&self, folder: &Folder) -> Result<(), StoreError> {
        folder.sync().map_err(|e| {
            self.error(StoreErrorKind::Transport).with_message(format!(
                "the change was made, but the local disk refused to sync the folder {}: {e}; \
                 it may not survive a crash; check the disk",
                folder.path().display()
            ))
        })
    }
}

/// Whether an object with `etag` is the version `wanted`. This store keeps
/// no version ids, so a wanted version id never matches.
pub(super) fn is_version(etag: &str, wanted: &Version) -> bool {
    wanted.etag.as_deref() == Some(etag) && wanted.version_id.is_none()
}

/// An object file opened with its attribute read: the body is `reader`.
pub(super) struct Opened {
    pub(super) header: Header,
    /// The length of the file opened (renames replace a file, never change
    /// it): the body's.
    pub(super) length: u64,
    pub(super) reader: BufReader<File>,
}

/// Whether opening a path failed because what is there is no file to read
/// (a socket, a symbolic link loop): no retry can open it.
fn no_file_to_open(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        let errno = error.raw_os_error().map(Errno::from_raw_os_error);
        matches!(errno, Some(Errno::NXIO | Errno::LOOP))
    }
    #[cfg(not(unix))]
    {
        let _ = error;
        false
    }
}

/// The answer to a write or delete mode newer than this store: not
/// implemented, nothing done.
pub(super) fn unknown_mode(request: &Request<'_>) -> StoreError {
    request
        .error(StoreErrorKind::NotImplemented)
        .with_message("the directory store does not know this mode; update bucket-lease-backends")
}
