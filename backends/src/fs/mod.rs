//! A directory on the local disk used as a bucket: the embedded store, which
//! needs no server.
//!
//! [`DirStore`] answers every request as AWS S3 does (see
//! [`bucket_lease_core::store`]), and keeps those promises between all the
//! threads and processes of one machine that open the same directory:
//!
//! - a create-only write ([`PutMode::Create`]) never replaces an object, and
//!   of several racing creates exactly one wins;
//! - an update ([`PutMode::Update`]) lands only while the object still has
//!   the given ETag, and is refused on an absent key without creating it, so
//!   no compare-and-swap is ever lost;
//! - every write gets a fresh ETag, 128 random bits from the operating
//!   system, quoted like S3's (`"9f…"`), never reused;
//! - a conditional delete ([`DeleteMode::IfVersion`]) checks the ETag; a
//!   delete of an absent key succeeds; a read of an absent key answers
//!   [`StoreErrorKind::NotFound`];
//! - user metadata is stored with the object and read back with it, names
//!   in lower case as S3 returns them;
//! - a reader never sees a torn write, and a write or delete that answered
//!   success is on the disk (file and directory synced);
//! - a read returns at most [`MAX_BODY`] bytes (as the HTTP client's
//!   default cap): a larger object answers [`StoreErrorKind::TooLarge`]
//!   carrying its version (the ETag from the object file's header), and its
//!   body is not read, so it can still be replaced conditionally;
//! - a write publishes nothing, and a delete removes nothing, after its
//!   deadline: one that runs out of time answers "not sent" (see
//!   [Deadlines](#deadlines));
//! - the bucket's directory must exist, as a bucket must: a missing one
//!   answers `NoSuchBucket` (permanent) when the store opens, and to a
//!   write should it be removed later, and is never made; the folders
//!   under it that keys with `/` need are made as writes need them;
//! - a bucket never sits inside another: opening a directory under one
//!   that holds the lock file, or for a prefix whose path holds a bucket's
//!   directory, is refused, permanent, naming the URL in use (`/t//jobs`
//!   and `/t/jobs` are one path, and must not be two leases);
//! - errors name the object as a `file://` URL, the directory and the `//`
//!   that ends it, then the key (`GET file:///srv/bkt//jobs/LEASE`; see
//!   `config` for the rule), while their key stays the plain key.
//!
//! # How
//!
//! A write goes to a temporary file beside its object, is synced, and is then
//! renamed over the object, so each object file is replaced whole. Every
//! write and delete checks its condition and renames (or removes) while
//! holding an exclusive lock on the bucket's lock file,
//! `ROOT/.bucket-lease.lock`, taken with [`std::fs::File::try_lock`]; reads
//! take no lock. The lock is held only for the check and the rename: the
//! slow part, writing and syncing the temporary file (in chunks, see
//! [Deadlines](#deadlines)), happens before it.
//!
//! # Layout
//!
//! Key `backups/db1/LEASE` is the file `ROOT/backups.dir/db1.dir/LEASE.obj`.
//! Every name the store makes ends in a suffix of its own (`.obj`, `.dir`,
//! `.tmp`), so a key and the "folder" of longer keys (`a` and `a/b`) live
//! side by side as on S3, and no key can name the store's own files.
//!
//! An object file is a short text header, a blank line, then the body:
//!
//! ```text
//! bucket-lease object v1
//! etag "5d41402abc4b2a76b9719d911017c592"
//! meta owner host-7%20pid-42
//! <blank line>
//! <body bytes>
//! ```
//!
//! Metadata names and values are escaped (`%`, space and control characters
//! as `%XX`).
//!
//! # Keys
//!
//! Keys are `/`-separated. A key that is empty, starts with `/`, has an empty
//! segment (`a//b`, `a/`), a `.` or `..` segment, a NUL byte, a backslash, or a
//! segment longer than 200 bytes is answered [`StoreErrorKind::Rejected`]
//! naming the key.
//!
//! # Deadlines
//!
//! The store keeps the deadline rule of [`bucket_lease_core::store`]: a
//! write publishes nothing (renames no file over its object) and a delete
//! removes nothing after its deadline. A request checks its deadline
//! before it starts, and a write or delete again before each step that can
//! take long:
//!
//! - a write's temporary file is written in chunks of 4 MiB, each synced,
//!   with the deadline checked before each chunk, so a large body stops at
//!   the first chunk boundary after the deadline;
//! - a write or delete then waits for the bucket's lock, trying it only
//!   before its deadline (the try after the last pause included), and
//!   never longer than [`MAX_LOCK_WAIT`] (which also bounds a request with
//!   no deadline). A process that holds the lock longer (stopped, or hung
//!   on a dead disk) makes the request give up, with a message naming the
//!   lock file;
//! - holding the lock, with its condition checked, a write checks its
//!   deadline once more right before it renames its temporary file over
//!   the object, and a delete right before it removes the object.
//!
//! A request that runs out of time at any of these answers
//! [`StoreErrorKind::Transport`],
//! [`Delivery::NotSent`](bucket_lease_core::store::Delivery::NotSent), with
//! [`StoreError::is_timeout`] set and a message saying where it stopped:
//! nothing was published or removed, the temporary file of a write is
//! removed, and the request is safe to retry. Reads take no lock and never
//! wait for it.
//!
//! How late a call can return: by one chunk's write and sync past the
//! deadline, or by the time the condition check, the rename (or removal)
//! and the sync of the object's folder take once the last check passed. On
//! a healthy disk each is far within
//! [`DEADLINE_SLACK`](bucket_lease_core::store::DEADLINE_SLACK); a hung
//! disk holds the call as long as it hangs. And a check is not a lock on
//! time: a process stopped between the last check and its rename (one
//! system call) renames when it continues. The checks narrow that window
//! to the rename itself; a directory offers no rename that is refused
//! after a deadline.
//!
//! # Limits
//!
//! - One machine: file locks on network file systems (NFS, SMB) are not to
//!   be trusted across machines. Use an S3-compatible service there.
//! - On a case-insensitive file system, keys differing only in case are one
//!   object.
//! - A process killed in the middle of a write leaves a `NAME.<hex>.tmp` file;
//!   reads ignore it, and it may be removed while no writer runs. A write
//!   that publishes nothing (refused, or out of time) removes its own.
//! - A write that publishes nothing leaves the folders it made for a new
//!   prefix, empty: reads see no object there, as S3 would show none.
//! - A delete removes the folders it leaves empty (S3 has no folders to
//!   leave behind); a folder made for a new prefix is not itself synced to
//!   its parent.

mod claim;
mod layout;
#[cfg(test)]
mod tests;

use crate::settings::url_text;
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use claim::claim_as_bucket;
use layout::{encode_header, parse_header, read_header, split_key, Header};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The file whose lock every write and delete holds, directly under the root.
const LOCK_FILE: &str = ".bucket-lease.lock";

/// The most bytes a read returns, as the HTTP stores' default cap. A
/// larger object answers [`StoreErrorKind::TooLarge`] with its version.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest a write or delete waits for the bucket's lock, whatever its
/// deadline; also the bound for a request without one.
pub const MAX_LOCK_WAIT: Duration = Duration::from_secs(30);

/// How many times a put makes its folder again when a delete removed it
/// (empty) between the making and the writing.
const FOLDER_TRIES: u32 = 5;

/// The longest pause between two attempts at the bucket's lock.
const LOCK_POLL: Duration = Duration::from_millis(10);

/// How much of a temporary file is written (and synced) between two checks
/// of the request's deadline.
const CHUNK: usize = 4 << 20;

/// Where a write or delete stands: the points at which the tests' hook
/// makes a request slow, deterministically (compiled away outside tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A chunk of the temporary file was written (and synced, but for the
    /// last, which the file's sync covers).
    ChunkWritten,
    /// The lock loop slept, and is about to go round again.
    LockSlept,
    /// The bucket's lock was taken.
    Locked,
    /// The condition held: the temporary file is about to be renamed over
    /// its object, or the object removed.
    Publishing,
}

/// What a test runs at each [`Step`].
#[cfg(test)]
type Hook = Box<dyn FnMut(Step)>;

#[cfg(test)]
thread_local! {
    /// The tests' hook, called at each [`Step`] a request on this thread
    /// reaches.
    static HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

/// The request on this thread reached `step`: call the tests' hook.
fn reached(step: Step) {
    #[cfg(test)]
    HOOK.with(|hook| {
        if let Some(hook) = hook.borrow_mut().as_mut() {
            hook(step);
        }
    });
    #[cfg(not(test))]
    let _ = step;
}

/// A local directory used as a bucket. See the [module docs](self).
///
/// Cloning it is cheap; clones, other `DirStore`s and other processes opened
/// on the same directory share its objects and its lock.
#[derive(Clone, PartialEq, Eq)]
pub struct DirStore {
    root: PathBuf,
    /// `file://ROOT//`, as a user writes it, for errors.
    store_url: Arc<str>,
}

impl std::fmt::Debug for DirStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirStore")
            .field("root", &self.root)
            .finish()
    }
}

/// `path` as one word for a shell: in single quotes unless it is plain.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

impl DirStore {
    /// The bucket in the directory `root`, which must exist, as an S3
    /// bucket must: a store is never made where a path was mistyped. A
    /// relative `root` is taken from the current directory now, once.
    /// Folders under it, for keys with `/`, are made as writes need them.
    ///
    /// # Errors
    ///
    /// A missing directory answers [`StoreErrorKind::Rejected`] with the
    /// code `NoSuchBucket`, as S3 answers for a missing bucket, and a path
    /// that is not a directory [`StoreErrorKind::Rejected`]; both are
    /// [permanent](StoreError::is_permanent) and say what to do (create the
    /// directory, or fix the path). [`StoreErrorKind::PermissionDenied`]
    /// when it cannot be read for lack of permission, and
    /// [`StoreErrorKind::Transport`] for any other failure of the file
    /// system. The error's method is `OPEN`, its key empty, and its
    /// [`url`](StoreError::url) `file://` and the directory.
    ///
    /// The directory must not be inside another bucket's directory (one
    /// that holds the lock file `.bucket-lease.lock`), which is refused,
    /// permanent, naming the URL to use instead: one path, one lease.
    pub fn open(root: &Path) -> Result<DirStore, StoreError> {
        DirStore::open_for(root, "")
    }

    /// [`DirStore::open`] for a lease on `prefix`, which also refuses a
    /// prefix whose path under the directory holds another bucket's
    /// directory (`file:///t//jobs/x` while `/t/jobs` is a bucket): the
    /// check `config` makes for every `file://` URL.
    ///
    /// # Errors
    ///
    /// As [`DirStore::open`].
    pub fn open_for(root: &Path, prefix: &str) -> Result<DirStore, StoreError> {
        let shown = |root: &Path| format!("file://{}", url_text(&root.display().to_string()));
        let request = Request::new("OPEN", "", shown(root).into());
        let root = std::path::absolute(root)
            .map_err(|e| request.io_error("find the absolute path of", root, e))?;
        let request = Request::new("OPEN", "", shown(&root).into());
        match fs::metadata(&root) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(request
                    .error(StoreErrorKind::Rejected)
                    .permanent()
                    .with_message(format!(
                        "{} is not a directory; name the directory to use as the bucket (fix \
                         the URL), or move the file away and create the directory (mkdir -p {})",
                        root.display(),
                        shell_word(&root)
                    )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(request
                    .error(StoreErrorKind::Rejected)
                    .with_code("NoSuchBucket")
                    .with_message(format!(
                        "there is no directory {} to use as the bucket (mkdir -p {} makes one)",
                        root.display(),
                        shell_word(&root)
                    )))
            }
            Err(e) => return Err(request.io_error("inspect", &root, e)),
        }
        claim_as_bucket(&request, &root, prefix)?;
        let store_url = format!("file://{}//", url_text(&root.display().to_string())).into();
        Ok(DirStore { root, store_url })
    }

    /// The bucket's directory, as an absolute path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Make the folder `dir` under the root and those between, as
    /// [`fs::create_dir_all`] does, but never the root itself: a bucket
    /// directory removed since the store opened answers as a missing
    /// bucket, `NoSuchBucket`.
    fn make_folders(&self, request: &Request<'_>, dir: &Path) -> Result<(), StoreError> {
        if dir == self.root || !dir.starts_with(&self.root) {
            if self.root.is_dir() {
                return Ok(());
            }
            return Err(request
                .error(StoreErrorKind::Rejected)
                .with_code("NoSuchBucket")
                .with_message(format!(
                    "the bucket's directory {} is gone (mkdir -p {} makes it again)",
                    self.root.display(),
                    shell_word(&self.root)
                )));
        }
        match fs::create_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) if dir.is_dir() => return Ok(()),
            Err(e) => return Err(request.io_error("create directory", dir, e)),
        }
        self.make_folders(request, dir.parent().unwrap_or(&self.root))?;
        match fs::create_dir(dir) {
            Err(_) if dir.is_dir() => Ok(()),
            other => other.map_err(|e| request.io_error("create directory", dir, e)),
        }
    }

    fn request<'a>(&self, method: &'static str, key: &'a str) -> Request<'a> {
        Request::new(method, key, Arc::clone(&self.store_url))
    }

    /// Where `key`'s object lives, or the reason the key is refused.
    fn locate(&self, request: &Request<'_>) -> Result<Location, StoreError> {
        let segments = split_key(request.key).map_err(|reason| {
            request
                .error(StoreErrorKind::Rejected)
                .with_message(format!("invalid key for a directory bucket: {reason}"))
        })?;
        let Some((name, folders)) = segments.split_last() else {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .with_message("invalid key for a directory bucket: the key is empty"));
        };
        let mut dir = self.root.clone();
        for folder in folders {
            dir.push(format!("{folder}.dir"));
        }
        Ok(Location {
            object: dir.join(format!("{name}.obj")),
            name: (*name).to_string(),
            dir,
        })
    }

    /// Remove `dir` and the folders above it (never the root) while they
    /// are empty, as S3 has no folders to leave behind; called under the
    /// lock. Returns the folder whose entries changed last: the first one
    /// left in place.
    fn remove_empty_folders(&self, dir: &Path) -> PathBuf {
        let mut dir = dir.to_path_buf();
        // `remove_dir` removes only an empty folder: one with a temporary
        // file being written (a put in progress) stays.
        while dir != self.root && dir.starts_with(&self.root) && fs::remove_dir(&dir).is_ok() {
            dir.pop();
        }
        dir
    }

    /// Take the bucket's lock, waiting no later than `deadline` and no
    /// longer than [`MAX_LOCK_WAIT`]; it is released when the returned file
    /// closes.
    fn lock(&self, request: &Request<'_>, deadline: Option<Instant>) -> Result<File, StoreError> {
        let path = self.root.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| request.io_error("open the lock file", &path, e))?;
        let started = Instant::now();
        // `None` only when MAX_LOCK_WAIT from now is past what an Instant
        // can hold, and there is no deadline: no bound can be reached then.
        let give_up = match (deadline, started.checked_add(MAX_LOCK_WAIT)) {
            (Some(deadline), Some(bound)) => Some(deadline.min(bound)),
            (deadline, bound) => deadline.or(bound),
        };
        let timed_out = |tried: bool| {
            request.deadline_passed(if tried {
                format!(
                    "the lock at {} was held by another process for the {} ms this request \
                     could wait (if the lock stays held, look for a stopped process using the \
                     bucket directory)",
                    path.display(),
                    started.elapsed().as_millis()
                )
            } else {
                format!(
                    "the deadline passed before the lock at {} was tried (the steps before it, \
                     such as writing the temporary file, took that long), so nothing was done; \
                     give the request a later deadline",
                    path.display()
                )
            })
        };
        let mut pause = Duration::from_millis(1);
        let mut tried = false;
        loop {
            // Checked before every try, the one after the last sleep
            // included: a lock let go after the deadline is never taken.
            let left = give_up.map(|at| at.saturating_duration_since(Instant::now()));
            let passed = left.is_some_and(|left| left.is_zero());
            if passed && !StoreMutant::DirLockLastTryUnchecked.on() {
                return Err(timed_out(tried));
            }
            tried = true;
            match file.try_lock() {
                Ok(()) => {
                    reached(Step::Locked);
                    return Ok(file);
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(request.io_error("lock", &path, e))
                }
            }
            if passed {
                // The defect a review found: the check came after the try.
                return Err(timed_out(tried));
            }
            std::thread::sleep(left.map_or(pause, |left| pause.min(left)));
            pause = pause.saturating_mul(2).min(LOCK_POLL);
            reached(Step::LockSlept);
        }
    }
}

/// The paths of one key.
#[derive(Debug)]
struct Location {
    /// The folder that holds the object file.
    dir: PathBuf,
    /// The object file.
    object: PathBuf,
    /// The key's last segment.
    name: String,
}

/// The method and key of a request, and the store's URL, to name them in
/// its errors.
struct Request<'a> {
    method: &'static str,
    key: &'a str,
    store_url: Arc<str>,
}

impl<'a> Request<'a> {
    fn new(method: &'static str, key: &'a str, store_url: Arc<str>) -> Self {
        Request {
            method,
            key,
            store_url,
        }
    }

    fn error(&self, kind: StoreErrorKind) -> StoreError {
        StoreError::new(kind, self.method, self.key).with_store_url(Arc::clone(&self.store_url))
    }

    /// A refused condition, with S3's code for it.
    fn refusal(&self, kind: StoreErrorKind, code: &str) -> StoreError {
        self.error(kind).with_code(code)
    }

    fn check_deadline(&self, deadline: Option<Instant>) -> Result<(), StoreError> {
        self.check_deadline_at(deadline, || {
            "the deadline passed before the request started; nothing was done".to_string()
        })
    }

    /// The request stopped at `deadline`, if it has passed, before it
    /// changed anything; `where_` says where (called only then).
    fn check_deadline_at(
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
    fn deadline_passed(&self, message: String) -> StoreError {
        self.error(StoreErrorKind::Transport)
            .timed_out()
            .not_sent()
            .with_message(message)
    }

    /// `action` on `path` failed: say which path, why, and what to do.
    fn io_error(&self, action: &str, path: &Path, error: io::Error) -> StoreError {
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

    fn corrupt(&self, path: &Path, detail: &str) -> StoreError {
        self.error(StoreErrorKind::Rejected).with_message(format!(
            "{} is not an object file of this store ({detail}); move it out of the bucket \
             directory",
            path.display()
        ))
    }

    /// The object at `path`, with its body when `body_cap` gives the most
    /// bytes to read (else an empty body), or `None` when there is none.
    ///
    /// A body over the cap is [`StoreErrorKind::TooLarge`] carrying the
    /// object's version, and is not read.
    /// Open the object at `path` and read its header only: its ETag and
    /// metadata, whatever the size of its body. `None` when absent.
    fn open_header(&self, path: &Path) -> Result<Option<Opened>, StoreError> {
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
    fn read(&self, path: &Path, max_body: usize) -> Result<Option<(Header, Vec<u8>)>, StoreError> {
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

    /// Sync `dir`, so a rename or removal in it survives a crash. Only Unix
    /// can open a directory to sync it. It is synced after the bucket's
    /// lock is let go, so another request may have removed it meanwhile (a
    /// delete that emptied it): then there is nothing of ours left in it
    /// to sync, and whoever removed it synced its parent.
    fn sync_dir(&self, dir: &Path) -> Result<(), StoreError> {
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

/// A written, synced temporary file, removed on drop unless renamed over its
/// object.
struct TempFile {
    path: PathBuf,
    renamed: bool,
}

impl TempFile {
    /// Write `header` and `body` to a fresh temporary file beside `at`'s
    /// object and sync it: the body in chunks of [`CHUNK`] bytes, each
    /// synced, with `deadline` checked before each, so that a deadline
    /// that passes meanwhile stops the write at the next chunk (and the
    /// file is removed).
    fn write(
        request: &Request<'_>,
        at: &Location,
        etag: &str,
        header: &[u8],
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<TempFile, StoreError> {
        // The ETag is random and fresh, so it names the file uniquely.
        let path = at
            .dir
            .join(format!("{}.{}.tmp", at.name, etag.trim_matches('"')));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| request.io_error("create", &path, e))?;
        let temp = TempFile {
            path,
            renamed: false,
        };
        let failed = |e| request.io_error("write", &temp.path, e);
        file.write_all(header).map_err(failed)?;
        let chunks = body.len().div_ceil(CHUNK);
        for (index, chunk) in body.chunks(CHUNK).enumerate() {
            if !StoreMutant::DirChunksUnchecked.on() {
                request.check_deadline_at(deadline, || {
                    format!(
                        "the deadline passed while the temporary file {} was written ({} of {} \
                         bytes), so the object was not published and the file is removed; give \
                         the write a later deadline, or write less under one",
                        temp.path.display(),
                        index * CHUNK,
                        body.len()
                    )
                })?;
            }
            file.write_all(chunk).map_err(failed)?;
            // Synced chunk by chunk (the last by `sync_all` below), so that
            // no sync at the end takes as long as the whole body.
            if index + 1 < chunks {
                file.sync_data().map_err(failed)?;
            }
            reached(Step::ChunkWritten);
        }
        file.sync_all().map_err(failed)?;
        Ok(temp)
    }

    fn rename_to(mut self, request: &Request<'_>, object: &Path) -> Result<(), StoreError> {
        fs::rename(&self.path, object).map_err(|e| request.io_error("rename into", object, e))?;
        self.renamed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            // Best effort: a leftover temporary file is ignored by reads.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A fresh ETag: 128 random bits as quoted hex.
fn fresh_etag(request: &Request<'_>) -> Result<String, StoreError> {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).map_err(|e| {
        request
            .error(StoreErrorKind::Transport)
            .with_message(format!(
                "the operating system gave no random bytes for an ETag: {e}"
            ))
    })?;
    let mut etag = String::with_capacity(34);
    etag.push('"');
    for byte in bits {
        let _ = write!(etag, "{byte:02x}");
    }
    etag.push('"');
    Ok(etag)
}

/// Whether an object with `etag` is the version `wanted`. This store keeps
/// no version ids, so a wanted version id never matches.
fn is_version(etag: &str, wanted: &Version) -> bool {
    wanted.etag.as_deref() == Some(etag) && wanted.version_id.is_none()
}

impl Store for DirStore {
    /// `file://ROOT//`: the bucket's directory, and the `//` that ends it.
    fn store_url(&self) -> Option<&str> {
        Some(&self.store_url)
    }

    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let request = self.request("GET", key);
        request.check_deadline(deadline)?;
        let at = self.locate(&request)?;
        match request.read(&at.object, MAX_BODY)? {
            Some((header, body)) => {
                Ok(Object::new(body, Version::etag(header.etag)).with_metadata(header.metadata))
            }
            None => Err(request.refusal(StoreErrorKind::NotFound, "NoSuchKey")),
        }
    }

    /// The object's header alone: its version and metadata, for an
    /// object of any size.
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let request = self.request("HEAD", key);
        request.check_deadline(deadline)?;
        let at = self.locate(&request)?;
        match request.open_header(&at.object)? {
            Some(Opened { header, .. }) => {
                Ok(Object::new(Vec::new(), Version::etag(header.etag))
                    .with_metadata(header.metadata))
            }
            None => Err(request.refusal(StoreErrorKind::NotFound, "NoSuchKey")),
        }
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let request = self.request("PUT", key);
        request.check_deadline(options.deadline)?;
        let at = self.locate(&request)?;
        let etag = fresh_etag(&request)?;
        let header = encode_header(&etag, &options.metadata);
        // A delete removes the folders it leaves empty (under the lock), so
        // a folder just made may be gone before the temporary file is in
        // it: make it again. Once the file is in it, it is not empty.
        // (`create_dir_all` itself fails when a folder it found is removed
        // before it looks again.) A lasting failure is tried a few times.
        // A write stopped by its deadline is not tried again.
        let mut tries = 0;
        let temp = loop {
            let written = self.make_folders(&request, &at.dir).and_then(|()| {
                TempFile::write(&request, &at, &etag, &header, body, options.deadline)
            });
            match written {
                Err(e) if tries < FOLDER_TRIES && !e.is_timeout() => tries += 1,
                written => break written?,
            }
        };

        let lock = self.lock(&request, options.deadline)?;
        match &options.mode {
            PutMode::Overwrite => {}
            PutMode::Create => match fs::symlink_metadata(&at.object) {
                Ok(_) => {
                    return Err(request.refusal(StoreErrorKind::AlreadyExists, "PreconditionFailed"))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(request.io_error("inspect", &at.object, e)),
            },
            PutMode::Update(wanted) => match request.open_header(&at.object)? {
                None => return Err(request.refusal(StoreErrorKind::Precondition, "NoSuchKey")),
                Some(opened) if !is_version(&opened.header.etag, wanted) => {
                    return Err(request.refusal(StoreErrorKind::Precondition, "PreconditionFailed"))
                }
                Some(_) => {}
            },
            _ => return Err(unknown_mode(&request)),
        }
        reached(Step::Publishing);
        // Checked once more right before the rename: the temporary file
        // was written, the lock taken and the condition checked since the
        // last check, and a write past its deadline publishes nothing.
        if !StoreMutant::DirRenameUnchecked.on() {
            request.check_deadline_at(options.deadline, || {
                format!(
                    "the deadline passed after the temporary file was written and the \
                     condition checked, before it was renamed over {}, so the object was not \
                     published and the file is removed; give the write a later deadline",
                    at.object.display()
                )
            })?;
        }
        temp.rename_to(&request, &at.object)?;
        drop(lock);

        request.sync_dir(&at.dir)?;
        Ok(Version::etag(etag))
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let request = self.request("DELETE", key);
        request.check_deadline(deadline)?;
        let at = self.locate(&request)?;

        let lock = self.lock(&request, deadline)?;
        match mode {
            DeleteMode::Unconditional => {}
            DeleteMode::IfVersion(wanted) => match request.open_header(&at.object)? {
                None => return Ok(()),
                Some(opened) if !is_version(&opened.header.etag, wanted) => {
                    return Err(request.refusal(StoreErrorKind::Precondition, "PreconditionFailed"))
                }
                Some(_) => {}
            },
            _ => return Err(unknown_mode(&request)),
        }
        reached(Step::Publishing);
        // Checked once more right before the removal: a delete past its
        // deadline removes nothing.
        if !StoreMutant::DirRemoveUnchecked.on() {
            request.check_deadline_at(deadline, || {
                format!(
                    "the deadline passed after the lock was taken and the condition checked, \
                     before {} was removed, so nothing was removed; give the delete a later \
                     deadline",
                    at.object.display()
                )
            })?;
        }
        match fs::remove_file(&at.object) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(request.io_error("remove", &at.object, e)),
        }
        let changed = self.remove_empty_folders(&at.dir);
        drop(lock);

        request.sync_dir(&changed)
    }
}

/// An object file opened with its header read: the body follows in
/// `reader`.
struct Opened {
    header: Header,
    /// How many bytes of the file the header takes.
    header_length: usize,
    reader: BufReader<File>,
}

/// The answer to a write or delete mode newer than this store: not
/// implemented, nothing done.
fn unknown_mode(request: &Request<'_>) -> StoreError {
    request
        .error(StoreErrorKind::NotImplemented)
        .with_message("the directory store does not know this mode; update bucket-lease-backends")
}
