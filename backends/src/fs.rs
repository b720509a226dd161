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

use crate::settings::url_text;
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first line of every object file.
const MAGIC: &str = "bucket-lease object v1";
/// The file whose lock every write and delete holds, directly under the root.
const LOCK_FILE: &str = ".bucket-lease.lock";

/// Make the lock file in `root` (the directory's claim to be a bucket),
/// then refuse `root` when a directory above it is a bucket already, or
/// one on `prefix`'s path under it: `file:///t//jobs/x`,
/// `file:///t/jobs//x` and `file:///t/jobs/x` name one path, and would
/// otherwise be three leases, each with its own lock and record. The claim
/// comes first so that of two stores opening at once, in a directory and
/// in one inside it, at least one sees the other; a refused claim is taken
/// back. A directory this process may not write to is still opened (to
/// read it) without the claim.
fn claim_as_bucket(request: &Request<'_>, root: &Path, prefix: &str) -> Result<(), StoreError> {
    let lock = root.join(LOCK_FILE);
    let claimed = match OpenOptions::new().write(true).create_new(true).open(&lock) {
        Ok(_) => true,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::AlreadyExists
                    | io::ErrorKind::PermissionDenied
                    | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            false
        }
        Err(e) => return Err(request.io_error("create the lock file", &lock, e)),
    };
    let refused = nested_bucket(request, root, prefix);
    if refused.is_err() && claimed {
        // The claim made a moment ago goes (no write ever held it), so the
        // directory stays free to be named right.
        let _ = fs::remove_file(&lock);
    }
    refused
}

/// A bucket above `root`, or one on `prefix`'s path under it, if any.
fn nested_bucket(request: &Request<'_>, root: &Path, prefix: &str) -> Result<(), StoreError> {
    let real = fs::canonicalize(root).map_err(|e| request.io_error("resolve", root, e))?;
    for outer in real.ancestors().skip(1) {
        if outer.join(LOCK_FILE).exists() {
            let rest = real.strip_prefix(outer).unwrap_or(&real);
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the directory {} is inside {}, a bucket already (it holds {LOCK_FILE}), \
                     and one path must have one spelling, or it would be two leases; name it \
                     file://{}//{} (or, if {} is no longer a bucket, remove its {LOCK_FILE})",
                    real.display(),
                    outer.display(),
                    url_text(&outer.display().to_string()),
                    url_text(&rest.display().to_string()),
                    outer.display(),
                )));
        }
    }
    let mut inner = root.to_path_buf();
    let segments: Vec<&str> = prefix.split('/').filter(|s| !s.is_empty()).collect();
    for (at, segment) in segments.iter().enumerate() {
        inner.push(segment);
        if inner.join(LOCK_FILE).exists() {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the directory {} on the prefix's path is a bucket of its own (it holds \
                     {LOCK_FILE}), so this URL would be a second lease on the same path; name \
                     it as that bucket's users do, file://{}//{}",
                    inner.display(),
                    url_text(&inner.display().to_string()),
                    url_text(&segments[at + 1..].join("/"))
                )));
        }
    }
    Ok(())
}
/// No object file this store writes has a longer header than this.
const MAX_HEADER: u64 = 64 * 1024;
/// The longest key segment: leaves room for the suffixes within the 255-byte
/// file name limit of common file systems.
const MAX_SEGMENT: usize = 200;

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

/// What an object file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    etag: String,
    metadata: Vec<(String, String)>,
}

fn encode_header(etag: &str, metadata: &[(String, String)]) -> Vec<u8> {
    let mut text = format!("{MAGIC}\netag {}\n", escape(etag));
    for (name, value) in metadata {
        let name = name.to_ascii_lowercase();
        let _ = writeln!(text, "meta {} {}", escape(&name), escape(value));
    }
    text.push('\n');
    text.into_bytes()
}

/// The header's bytes, through its blank line, leaving `reader` at the body.
fn read_header(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut limited = Read::take(reader, MAX_HEADER);
    let mut raw = Vec::new();
    loop {
        let start = raw.len();
        if limited.read_until(b'\n', &mut raw)? == 0 || raw[start..] == *b"\n" {
            return Ok(raw);
        }
    }
}

fn parse_header(raw: &[u8]) -> Result<Header, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "its header is not UTF-8".to_string())?;
    let text = text
        .strip_suffix("\n\n")
        .ok_or_else(|| "its header does not end in a blank line".to_string())?;
    let mut lines = text.split('\n');
    if lines.next() != Some(MAGIC) {
        return Err(format!("it does not start with `{MAGIC}`"));
    }
    let etag = lines
        .next()
        .and_then(|line| line.strip_prefix("etag "))
        .ok_or_else(|| "its second line is not `etag …`".to_string())?;
    let etag = unescape(etag)?;
    let metadata = lines
        .map(|line| {
            let (name, value) = line
                .strip_prefix("meta ")
                .and_then(|rest| rest.split_once(' '))
                .ok_or_else(|| format!("unexpected header line `{line}`"))?;
            Ok((unescape(name)?, unescape(value)?))
        })
        .collect::<Result<_, String>>()?;
    Ok(Header { etag, metadata })
}

/// `%`, space and control characters as `%XX`; everything else as is.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || c == ' ' || c.is_control() {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unescape(text: &str) -> Result<String, String> {
    let bad = || format!("bad escape in `{text}`");
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

/// The segments of a valid key, or why it is not one.
fn split_key(key: &str) -> Result<Vec<&str>, &'static str> {
    if key.is_empty() {
        return Err("the key is empty");
    }
    if key.contains('\0') {
        return Err("the key contains a NUL byte");
    }
    if key.contains('\\') {
        return Err("the key contains a backslash, a path separator on Windows");
    }
    if key.starts_with('/') {
        return Err("the key starts with `/`, as an absolute path does");
    }
    let segments: Vec<&str> = key.split('/').collect();
    for segment in &segments {
        match *segment {
            "" => return Err("the key has an empty segment (`//` or a trailing `/`)"),
            "." | ".." => return Err("the key has a `.` or `..` segment"),
            s if s.len() > MAX_SEGMENT => {
                return Err("a segment of the key is longer than 200 bytes")
            }
            _ => {}
        }
    }
    Ok(segments)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    /// A fresh directory under the system's temporary directory, removed on
    /// drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let name = format!("bucket-lease-fs-unit-{:016x}", getrandom::u64().unwrap());
            let dir = std::env::temp_dir().join(name);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn store() -> (TempDir, DirStore) {
        let dir = TempDir::new();
        let store = DirStore::open(&dir.0).unwrap();
        (dir, store)
    }

    fn put(store: &DirStore, key: &str, body: &[u8], mode: PutMode) -> Result<Version, StoreError> {
        store.put(key, body, &PutOptions::new(mode))
    }

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn open_needs_the_directory_as_s3_needs_the_bucket_and_refuses_a_file() {
        let dir = TempDir::new();
        let nested = dir.0.join("a/b");
        let e = DirStore::open(&nested).unwrap_err();
        assert_eq!(
            (e.kind(), e.method(), e.key(), e.code()),
            (StoreErrorKind::Rejected, "OPEN", "", Some("NoSuchBucket"))
        );
        assert!(e.is_permanent(), "{e}");
        let shown = e.to_string();
        let path = nested.display();
        assert!(
            shown.starts_with(&format!(
                "OPEN file://{path}: rejected (NoSuchBucket: there is no directory {path} to use \
                 as the bucket (mkdir -p {path} makes one)); the bucket does not exist: check its \
                 name in the URL, or create it"
            )),
            "{shown}"
        );
        assert!(!dir.0.join("a").exists(), "nothing is created");

        fs::create_dir_all(&nested).unwrap();
        let store = DirStore::open(&nested).unwrap();
        assert_eq!(store.root(), nested);
        assert_eq!(
            format!("{store:?}"),
            format!("DirStore {{ root: {nested:?} }}")
        );
        assert_eq!(store.store_url(), Some(format!("file://{path}//").as_str()));

        let file = dir.0.join("file");
        fs::write(&file, b"x").unwrap();
        let e = DirStore::open(&file).unwrap_err();
        assert_eq!((e.kind(), e.method()), (StoreErrorKind::Rejected, "OPEN"));
        assert!(e.is_permanent(), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("{} is not a directory", file.display())),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_object_by_its_url_and_keep_the_plain_key() {
        let (dir, store) = store();
        let e = store.get("jobs/nightly/LEASE", None).unwrap_err();
        assert_eq!(e.key(), "jobs/nightly/LEASE");
        let url = format!("file://{}//jobs/nightly/LEASE", dir.0.display());
        assert_eq!(e.url(), url);
        assert!(
            e.to_string().starts_with(&format!("GET {url}: not found")),
            "{e}"
        );
        bucket_lease_core::conformance::assert_said_once(&e, &url);
    }

    #[test]
    fn folders_are_made_under_the_bucket_but_a_removed_bucket_is_not_made_again() {
        let (dir, store) = store();
        put(&store, "a/b/LEASE", b"x", PutMode::Create).unwrap();
        assert!(dir.0.join("a.dir/b.dir/LEASE.obj").is_file());
        fs::remove_dir_all(&dir.0).unwrap();
        for key in ["LEASE", "a/b/LEASE"] {
            let e = put(&store, key, b"x", PutMode::Create).unwrap_err();
            assert_eq!(e.code(), Some("NoSuchBucket"), "{e}");
            assert!(
                e.is_permanent() && e.to_string().contains("mkdir -p"),
                "{e}"
            );
            assert!(
                !dir.0.exists(),
                "{key}: the bucket directory was made again"
            );
        }
    }

    #[test]
    fn keys_map_to_suffixed_names_so_a_key_and_its_folder_coexist() {
        let (dir, store) = store();
        let v1 = put(&store, "a", b"one", PutMode::Create).unwrap();
        let v2 = put(&store, "a/b", b"two", PutMode::Create).unwrap();
        assert_eq!(names(&dir.0), [".bucket-lease.lock", "a.dir", "a.obj"]);
        assert_eq!(names(&dir.0.join("a.dir")), ["b.obj"]);
        let a = store.get("a", None).unwrap();
        let b = store.get("a/b", None).unwrap();
        assert_eq!((a.body, a.version), (b"one".to_vec(), v1));
        assert_eq!((b.body, b.version), (b"two".to_vec(), v2));
    }

    #[test]
    fn a_delete_removes_the_folders_it_leaves_empty() {
        let (dir, store) = store();
        put(&store, "a", b"1", PutMode::Create).unwrap();
        put(&store, "a/b/c", b"2", PutMode::Create).unwrap();
        put(&store, "a/x/y", b"3", PutMode::Create).unwrap();
        store
            .delete("a/b/c", &DeleteMode::Unconditional, None)
            .unwrap();
        assert_eq!(names(&dir.0.join("a.dir")), ["x.dir"]);
        store
            .delete("a/x/y", &DeleteMode::Unconditional, None)
            .unwrap();
        assert_eq!(names(&dir.0), [".bucket-lease.lock", "a.obj"]);
        store.delete("a", &DeleteMode::Unconditional, None).unwrap();
        assert_eq!(names(&dir.0), [".bucket-lease.lock"]);
        assert!(dir.0.is_dir(), "the root stays");
        assert_eq!(
            store.get("a/b/c", None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );
    }

    /// Puts into a folder that deletes keep emptying and removing all
    /// land: a put whose new folder was removed before its temporary file
    /// was in it makes it again.
    #[test]
    fn puts_race_deletes_that_remove_their_folder() {
        let (dir, store) = store();
        let store = std::sync::Arc::new(store);
        let deleter = {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let key = format!("p/q/d{}", i % 3);
                    let _ = put(&store, &key, b"x", PutMode::Overwrite);
                    store
                        .delete(&key, &DeleteMode::Unconditional, None)
                        .unwrap();
                }
            })
        };
        for i in 0..300 {
            let key = format!("p/q/k{i}");
            put(&store, &key, b"y", PutMode::Create).unwrap();
            store
                .delete(&key, &DeleteMode::Unconditional, None)
                .unwrap();
        }
        deleter.join().unwrap();
        assert_eq!(names(&dir.0), [".bucket-lease.lock"]);
    }

    #[test]
    fn invalid_keys_are_rejected_naming_the_key_and_the_reason() {
        let (dir, store) = store();
        for (key, reason) in [
            ("", "empty"),
            ("/abs", "starts with `/`"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("a/../b", "`..`"),
            ("./a", "`.`"),
            ("a\0b", "NUL"),
            ("a\\b", "backslash"),
        ] {
            let e = store.get(key, None).unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
            assert_eq!(e.key(), key);
            assert!(e.to_string().contains(reason), "{key:?}: {e}");
            let e = put(&store, key, b"x", PutMode::Overwrite).unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
            let e = store
                .delete(key, &DeleteMode::Unconditional, None)
                .unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
        }
        let long = "x".repeat(MAX_SEGMENT + 1);
        let e = put(&store, &long, b"x", PutMode::Create).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected);
        assert!(put(&store, &"x".repeat(MAX_SEGMENT), b"x", PutMode::Create).is_ok());
        assert_eq!(
            names(&dir.0).len(),
            2,
            "only the lock file and the one valid object"
        );
    }

    #[test]
    fn conditions_are_checked_and_etags_are_fresh_random_hex() {
        let (_dir, store) = store();
        let fake = Version::etag("\"never\"");
        let e = put(&store, "p/LEASE", b"0", PutMode::Update(fake.clone())).unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (StoreErrorKind::Precondition, Some("NoSuchKey"))
        );
        let e = store.get("p/LEASE", None).unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (StoreErrorKind::NotFound, Some("NoSuchKey"))
        );

        let v1 = put(&store, "p/LEASE", b"1", PutMode::Create).unwrap();
        let etag = v1.etag.clone().unwrap();
        assert_eq!(etag.len(), 34, "{etag}");
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
        assert!(etag[1..33].bytes().all(|b| b.is_ascii_hexdigit()), "{etag}");
        assert_eq!(v1.version_id, None);

        let e = put(&store, "p/LEASE", b"2", PutMode::Create).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::AlreadyExists);
        let e = put(&store, "p/LEASE", b"2", PutMode::Update(fake)).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Precondition);
        let with_id = Version {
            etag: v1.etag.clone(),
            version_id: Some("v".into()),
        };
        let e = put(&store, "p/LEASE", b"2", PutMode::Update(with_id)).unwrap_err();
        assert_eq!(
            e.kind(),
            StoreErrorKind::Precondition,
            "no version ids here"
        );
        assert_eq!(store.get("p/LEASE", None).unwrap().body, b"1");

        let v2 = put(&store, "p/LEASE", b"1", PutMode::Update(v1.clone())).unwrap();
        let v3 = put(&store, "p/LEASE", b"1", PutMode::Overwrite).unwrap();
        assert!(v1 != v2 && v2 != v3 && v1 != v3, "same body, fresh ETags");
        assert_eq!(store.get("p/LEASE", None).unwrap().version, v3);

        let del = |v: &Version| store.delete("p/LEASE", &DeleteMode::IfVersion(v.clone()), None);
        assert_eq!(del(&v2).unwrap_err().kind(), StoreErrorKind::Precondition);
        del(&v3).unwrap();
        del(&v3).unwrap();
        store
            .delete("p/LEASE", &DeleteMode::Unconditional, None)
            .unwrap();
        store
            .delete("never/written", &DeleteMode::Unconditional, None)
            .unwrap();
        assert_eq!(
            store.get("p/LEASE", None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );
    }

    #[test]
    fn refused_and_finished_writes_leave_no_temporary_files() {
        let (dir, store) = store();
        let v = put(&store, "k", b"1", PutMode::Create).unwrap();
        put(&store, "k", b"2", PutMode::Create).unwrap_err();
        put(&store, "k", b"2", PutMode::Update(Version::etag("\"x\""))).unwrap_err();
        put(&store, "k", b"3", PutMode::Update(v)).unwrap();
        put(&store, "k", b"4", PutMode::Overwrite).unwrap();
        assert_eq!(names(&dir.0), [".bucket-lease.lock", "k.obj"]);
    }

    #[test]
    fn metadata_round_trips_escaped_with_names_in_lower_case() {
        let (dir, store) = store();
        let options = PutOptions::new(PutMode::Create)
            .with_metadata("Owner", "host 7%\n")
            .with_metadata("note", "ünïcode");
        store
            .put("m", b"body\n\nwith blank lines", &options)
            .unwrap();
        let got = store.get("m", None).unwrap();
        assert_eq!(got.body, b"body\n\nwith blank lines");
        let expected = [("owner", "host 7%\n"), ("note", "ünïcode")];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(got.metadata, expected);
        let file = fs::read_to_string(dir.0.join("m.obj")).unwrap();
        let etag = got.version.etag.unwrap();
        assert_eq!(
            file,
            format!(
                "{MAGIC}\netag {etag}\nmeta owner host%207%25%0A\nmeta note ünïcode\n\n\
                 body\n\nwith blank lines"
            )
        );

        store
            .put("m", b"", &PutOptions::new(PutMode::Overwrite))
            .unwrap();
        let got = store.get("m", None).unwrap();
        assert_eq!(
            (got.body, got.metadata),
            (Vec::new(), Vec::new()),
            "replaced, not merged"
        );
    }

    #[test]
    fn a_file_the_store_did_not_write_is_reported_with_its_path() {
        let (dir, store) = store();
        for bad in [
            &b"hello"[..],
            b"bucket-lease object v1\netag x\nbogus\n\nbody",
            b"\xff\n\n",
        ] {
            fs::write(dir.0.join("x.obj"), bad).unwrap();
            let e = store.get("x", None).unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected);
            assert!(e.to_string().contains("x.obj is not an object file"), "{e}");
            let e = put(&store, "x", b"y", PutMode::Update(Version::etag("x"))).unwrap_err();
            assert_eq!(
                e.kind(),
                StoreErrorKind::Rejected,
                "an update does not replace it"
            );
            assert_eq!(fs::read(dir.0.join("x.obj")).unwrap(), bad);
        }
    }

    #[test]
    fn a_passed_deadline_does_nothing_and_says_it_timed_out() {
        let (dir, store) = store();
        let past = Some(Instant::now() - Duration::from_millis(1));
        let options = PutOptions::new(PutMode::Create).with_deadline(past);
        let e = store.put("k", b"x", &options).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Transport);
        assert!(
            e.is_timeout() && e.to_string().contains("nothing was done"),
            "{e}"
        );
        assert!(!e.may_have_landed(), "said not sent: {e}");
        assert_eq!(
            names(&dir.0),
            vec![LOCK_FILE.to_string()],
            "nothing written but the lock file the store opened with"
        );

        let v = put(&store, "k", b"x", PutMode::Create).unwrap();
        assert!(store.get("k", past).unwrap_err().is_timeout());
        let e = store
            .delete("k", &DeleteMode::Unconditional, past)
            .unwrap_err();
        assert!(e.is_timeout());
        let future = Some(Instant::now() + Duration::from_secs(60));
        assert_eq!(store.get("k", future).unwrap().version, v, "not deleted");
    }

    /// Run `request` on another thread; its answer, or `None` when it has
    /// not answered within `patience`.
    fn answer_within<T: Send + 'static>(
        patience: Duration,
        request: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(request());
        });
        rx.recv_timeout(patience).ok()
    }

    #[test]
    fn a_held_lock_times_out_at_the_deadline_and_nothing_is_written() {
        let (dir, store) = store();
        let v = put(&store, "k", b"before", PutMode::Create).unwrap();
        // Another process holding the bucket's lock: a lock on its own open
        // file description, as flock and LockFileEx give each process.
        let holder = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.0.join(LOCK_FILE))
            .unwrap();
        holder.lock().unwrap();

        let lock_path = dir.0.join(LOCK_FILE).display().to_string();
        fn soon() -> Option<Instant> {
            Some(Instant::now() + Duration::from_millis(200))
        }
        /// A write or delete on the store, named.
        type Attempt = (
            &'static str,
            Box<dyn FnOnce(&DirStore) -> Result<(), StoreError> + Send>,
        );
        let requests: Vec<Attempt> = vec![
            ("update", {
                let v = v.clone();
                Box::new(move |s: &DirStore| {
                    let options = PutOptions::new(PutMode::Update(v)).with_deadline(soon());
                    s.put("k", b"after", &options).map(drop)
                })
            }),
            (
                "overwrite",
                Box::new(|s: &DirStore| {
                    let options = PutOptions::new(PutMode::Overwrite).with_deadline(soon());
                    s.put("k", b"after", &options).map(drop)
                }),
            ),
            (
                "create",
                Box::new(|s: &DirStore| {
                    let options = PutOptions::new(PutMode::Create).with_deadline(soon());
                    s.put("new", b"after", &options).map(drop)
                }),
            ),
            (
                "delete",
                Box::new(|s: &DirStore| s.delete("k", &DeleteMode::Unconditional, soon())),
            ),
            ("conditional delete", {
                let v = v.clone();
                Box::new(move |s: &DirStore| s.delete("k", &DeleteMode::IfVersion(v), soon()))
            }),
        ];
        for (what, request) in requests {
            let s = store.clone();
            let e = answer_within(Duration::from_secs(5), move || request(&s))
                .unwrap_or_else(|| panic!("{what}: still waiting for the lock after 5 s"))
                .expect_err(what);
            assert_eq!(e.kind(), StoreErrorKind::Transport, "{what}: {e}");
            assert!(e.is_timeout(), "{what}: {e}");
            // Nothing was done: the error says so, and never "may have
            // taken effect".
            assert!(!e.may_have_landed(), "{what}: {e}");
            let text = e.to_string();
            let waited = format!("the lock at {lock_path} was held by another process");
            // On a loaded machine the deadline may pass before the lock is
            // tried at all (syncing the temporary file took that long):
            // nothing was sent then either.
            let never_tried = format!("before the lock at {lock_path} was tried");
            assert!(
                (text.contains(&waited) || text.contains(&never_tried))
                    && text.contains("nothing was sent"),
                "{what}: {text}"
            );
        }
        // Reads take no lock: they answer at once, and nothing changed.
        let s = store.clone();
        let got = answer_within(Duration::from_secs(5), move || s.get("k", soon()))
            .expect("a read does not wait for the lock")
            .unwrap();
        assert_eq!((got.body, got.version), (b"before".to_vec(), v.clone()));
        assert_eq!(
            names(&dir.0),
            [".bucket-lease.lock", "k.obj"],
            "no temporary files"
        );

        drop(holder);
        // A deadline no loaded disk reaches: this write is about the lock.
        let later = Some(Instant::now() + Duration::from_secs(60));
        let options = PutOptions::new(PutMode::Update(v)).with_deadline(later);
        store
            .put("k", b"after", &options)
            .expect("the lock is free again");
    }

    /// Run `request` on this thread with `hook` called at each [`Step`]
    /// it reaches.
    fn with_hook<T>(hook: impl FnMut(Step) + 'static, request: impl FnOnce() -> T) -> T {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        let answer = request();
        HOOK.with(|h| *h.borrow_mut() = None);
        answer
    }

    /// Return once `deadline` has passed: a request paused at a step (a
    /// stopped process, a slow disk) until after its deadline.
    fn pause_past(deadline: Instant) {
        while Instant::now() <= deadline {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + LOCK_POLL);
        }
    }

    /// `answer` is a timeout that sent nothing, and says what was not done.
    #[track_caller]
    fn assert_not_sent<T: std::fmt::Debug>(what: &str, answer: Result<T, StoreError>) {
        let e = answer.expect_err(what);
        assert_eq!(e.kind(), StoreErrorKind::Transport, "{what}: {e}");
        assert!(e.is_timeout(), "{what}: {e}");
        assert_eq!(
            e.delivery(),
            bucket_lease_core::store::Delivery::NotSent,
            "{what}: {e}"
        );
        assert!(e.to_string().contains("nothing was sent"), "{what}: {e}");
    }

    /// A write whose deadline passes while its temporary file is being
    /// written stops at the next chunk: no byte is written after the
    /// deadline but those of the chunk under way, nothing is published,
    /// and the temporary file is removed.
    #[test]
    fn a_write_whose_deadline_passes_mid_body_writes_no_further_chunk() {
        let (dir, store) = store();
        let deadline = Instant::now() + Duration::from_secs(1);
        let (written, late) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        let hook = {
            let (written, late) = (written.clone(), late.clone());
            move |step| {
                if step == Step::ChunkWritten {
                    if written.get() > 0 {
                        // The previous chunk paused past the deadline.
                        late.set(late.get() + 1);
                    }
                    written.set(written.get() + 1);
                    pause_past(deadline);
                }
            }
        };
        let body = vec![b'x'; 2 * CHUNK + CHUNK / 2];
        let options = PutOptions::new(PutMode::Create).with_deadline(Some(deadline));
        let answer = with_hook(hook, || store.put("k", &body, &options));
        assert_eq!(
            late.get(),
            0,
            "{} chunks written after the deadline had passed ({} in all)",
            late.get(),
            written.get()
        );
        assert_not_sent("create", answer);
        assert_eq!(
            names(&dir.0),
            [LOCK_FILE],
            "nothing published, nothing left"
        );
    }

    /// A hook that pauses a request past `deadline` right before it
    /// publishes (a stopped process, a slow disk).
    fn pause_before_publishing(deadline: Instant) -> impl FnMut(Step) {
        move |step| {
            if step == Step::Publishing {
                pause_past(deadline);
            }
        }
    }

    /// A write paused past its deadline after it took the lock and its
    /// condition held publishes nothing: no rename, and the temporary file
    /// is removed.
    #[test]
    fn a_write_paused_past_its_deadline_under_the_lock_publishes_nothing() {
        let (dir, store) = store();
        let v = put(&store, "k", b"before", PutMode::Create).unwrap();
        for (what, key, mode) in [
            ("create", "new", PutMode::Create),
            ("update", "k", PutMode::Update(v.clone())),
            ("overwrite", "k", PutMode::Overwrite),
        ] {
            let deadline = Instant::now() + Duration::from_millis(100);
            let options = PutOptions::new(mode).with_deadline(Some(deadline));
            let answer = with_hook(pause_before_publishing(deadline), || {
                store.put(key, b"after", &options)
            });
            assert_not_sent(what, answer);
        }
        let got = store.get("k", None).unwrap();
        assert_eq!((got.body, got.version), (b"before".to_vec(), v));
        assert_eq!(names(&dir.0), [LOCK_FILE, "k.obj"], "no temporary files");
    }

    /// A delete paused past its deadline after it took the lock and its
    /// condition held removes nothing.
    #[test]
    fn a_delete_paused_past_its_deadline_under_the_lock_removes_nothing() {
        let (dir, store) = store();
        let v = put(&store, "k", b"before", PutMode::Create).unwrap();
        for (what, mode) in [
            ("delete", DeleteMode::Unconditional),
            ("conditional delete", DeleteMode::IfVersion(v.clone())),
        ] {
            let deadline = Instant::now() + Duration::from_millis(100);
            let answer = with_hook(pause_before_publishing(deadline), || {
                store.delete("k", &mode, Some(deadline))
            });
            assert_not_sent(what, answer);
        }
        let got = store.get("k", None).unwrap();
        assert_eq!((got.body, got.version), (b"before".to_vec(), v));
        assert_eq!(names(&dir.0), [LOCK_FILE, "k.obj"]);
    }

    /// The lock loop checks the deadline before every try: a lock let go
    /// after the deadline, while the loop slept its last sleep, is not
    /// taken.
    #[test]
    fn the_lock_is_never_taken_after_the_deadline() {
        let (dir, store) = store();
        // Another holder of the bucket's lock: its own open file
        // description, as another process has.
        let holder = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.0.join(LOCK_FILE))
            .unwrap();
        holder.lock().unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut holder = Some(holder);
        let taken = Rc::new(Cell::new(0));
        let hook = {
            let taken = taken.clone();
            move |step| match step {
                // The other holder lets go as soon as the deadline has
                // passed, while this request sleeps.
                Step::LockSlept if Instant::now() > deadline => drop(holder.take()),
                Step::Locked => taken.set(taken.get() + 1),
                _ => {}
            }
        };
        let options = PutOptions::new(PutMode::Create).with_deadline(Some(deadline));
        let answer = with_hook(hook, || store.put("k", b"late", &options));
        assert_eq!(taken.get(), 0, "the lock was taken after the deadline");
        assert_not_sent("create", answer);
        assert_eq!(names(&dir.0), [LOCK_FILE]);
    }

    #[test]
    fn an_object_over_the_cap_is_too_large_and_carries_its_version() {
        const CAP: usize = 64 * 1024;
        let (dir, store) = store();
        put(&store, "at-cap", &vec![b'y'; CAP], PutMode::Create).unwrap();
        assert_eq!(store.get("at-cap", None).unwrap().body.len(), CAP);

        let v = put(&store, "big", &vec![b'x'; CAP + 1], PutMode::Create).unwrap();
        let e = match store.get("big", None) {
            Ok(object) => panic!("read {} bytes, over the cap", object.body.len()),
            Err(e) => e,
        };
        assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
        assert_eq!(e.version(), Some(&v));
        assert!(e.to_string().contains("65536-byte cap"), "{e}");
        // Its version is enough to replace it conditionally, unread.
        let replaced = put(&store, "big", b"small", PutMode::Update(v.clone())).unwrap();
        assert_eq!(store.get("big", None).unwrap().version, replaced);

        // A terabyte (sparse) body is not read: the answer comes at once.
        let header = encode_header("\"huge\"", &[]);
        let file = File::create(dir.0.join("huge.obj")).unwrap();
        (&file).write_all(&header).unwrap();
        if file.set_len(header.len() as u64 + (1 << 40)).is_ok() {
            let e = store.get("huge", None).unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
            assert_eq!(e.version(), Some(&Version::etag("\"huge\"")));
            // HEAD reads the header alone, whatever the body's size.
            let head = store.head("huge", None).unwrap();
            assert_eq!(head.version, Version::etag("\"huge\""));
            assert!(head.body.is_empty());
        }
        let e = store.head("absent", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::NotFound);
    }

    #[test]
    fn two_handles_on_one_directory_share_objects_and_conditions() {
        let (dir, first) = store();
        let second = DirStore::open(&dir.0).unwrap();
        let v = put(&first, "k", b"1", PutMode::Create).unwrap();
        assert_eq!(
            put(&second, "k", b"2", PutMode::Create).unwrap_err().kind(),
            StoreErrorKind::AlreadyExists
        );
        let v2 = put(&second, "k", b"2", PutMode::Update(v.clone())).unwrap();
        assert_eq!(
            put(&first, "k", b"3", PutMode::Update(v))
                .unwrap_err()
                .kind(),
            StoreErrorKind::Precondition
        );
        assert_eq!(first.get("k", None).unwrap().version, v2);
    }

    #[test]
    fn escaping_round_trips_and_bad_escapes_are_refused() {
        for text in ["", "plain", "a b%c", "tab\tnew\nline\r", "ünï cödé", "%%"] {
            assert_eq!(unescape(&escape(text)).unwrap(), text);
            assert!(!escape(text).contains([' ', '\n']));
        }
        for bad in ["%", "%4", "%zz", "%FF"] {
            assert!(unescape(bad).is_err(), "{bad}");
        }
    }
}
