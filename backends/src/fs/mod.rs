//! A directory on the local disk used as a bucket: the embedded store, which
//! needs no server.
//!
//! [`DirStore`] answers every request as AWS S3 does (see
//! [`store`](bucket_lease_core::store)), and keeps those promises between all the
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
//!   carrying its version (the ETag from the object file's attribute), and its
//!   body is not read, so it can still be replaced conditionally; a
//!   streamed read ([`Store::open`]) has no cap, and reads one whole
//!   version whatever replaces the object meanwhile;
//! - an object may be written in parts, as a multipart upload
//!   ([`Store::begin_upload`]), completed under a [`PutMode`] as a write
//!   is, and never copied on the way (see [Uploads](#uploads));
//! - a write publishes nothing, and a delete removes nothing, after its
//!   deadline: one that runs out of time answers "not sent" (see
//!   [Deadlines](#deadlines));
//! - the bucket's directory must exist, as a bucket must: a missing one
//!   answers `NoSuchBucket` (permanent) when the store opens, and to a
//!   write should it be removed later, and is never made; the folders
//!   under it that keys with `/` need are made as writes need them;
//! - no symbolic link beneath the bucket's directory is followed: every
//!   key, prefix and file of the store's own is resolved from the open
//!   directory through no link (on Linux one `openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, else `O_NOFOLLOW` on each
//!   name), and a link on a key's
//!   path, at its name, on a prefix's path or in `.bucket-lease/` is
//!   refused, [`StoreErrorKind::Rejected`] with the code `SymbolicLink`,
//!   [permanent](StoreError::is_permanent), naming the link; nothing
//!   outside the bucket is read, written or removed. The directory's own
//!   path, as its user names it, may run through links;
//! - a failure of the local disk before anything was published or removed
//!   names the file and what failed, and is
//!   [`Delivery::NotSent`](bucket_lease_core::store::Delivery::NotSent):
//!   the request took no effect;
//! - a bucket never sits inside another: opening a directory under one
//!   that holds the lock file, or for a prefix whose path holds a bucket's
//!   directory, is refused, permanent, naming the URL in use (`/t//jobs`
//!   and `/t/jobs` are one path, and must not be two leases); a prefix's
//!   path holds no link, so it is the real one; and a key whose path runs
//!   through another bucket's directory (one made before this one, inside
//!   it) is refused, code `NestedBucket`: one file is never two objects;
//! - errors name the object as a `file://` URL, the directory and the `//`
//!   that ends it, then the key (`GET file:///srv/bkt//jobs/LEASE`; see
//!   `config` for the rule), while their key stays the plain key.
//!
//! # How
//!
//! A write goes to a temporary file in the store's own folder, is synced,
//! and is then renamed over the object, so each object file is replaced
//! whole. Every write and delete checks its condition and renames (or
//! removes) while holding an exclusive lock on the bucket's lock file,
//! `ROOT/.bucket-lease/lock`, taken with [`std::fs::File::try_lock`];
//! reads take no lock. The lock is held only for the check, the folders a
//! new key needs, and the rename: the slow part, writing and syncing the
//! temporary file (in chunks, see [Deadlines](#deadlines)), happens before
//! it. The requests of one handle and its clones (a pool's renewal
//! threads) take turns before they try the file, each woken as soon as
//! the one before it lets go; only a lock held by another process (or
//! another handle) is tried again after a pause.
//!
//! # Layout
//!
//! A directory bucket is a directory of plain files: the object
//! `nightly/parts/1-0` of `file:///srv/bkt//nightly` is the file
//! `/srv/bkt/nightly/parts/1-0`, holding exactly the object's bytes, so
//! `cat`, `cp`, `tar` and a restore script read it as they read any file.
//!
//! Its ETag and metadata are in the file's extended attribute
//! `user.bucket-lease` (`getfattr -n user.bucket-lease FILE` shows it):
//!
//! ```text
//! bucket-lease object v2
//! etag "5d41402abc4b2a76b9719d911017c592"
//! meta owner host-7%20pid-42
//! ```
//!
//! with metadata names and values escaped (`%`, space and control
//! characters as `%XX`). An attribute rather than a file beside the object,
//! because an attribute belongs to the file: a write sets it on its
//! temporary file before the one rename that publishes both, and a read
//! takes the ETag and the bytes from one open file, so no reader ever
//! pairs a version's ETag with another version's bytes, and no crash
//! leaves the two out of step. A second file would need two renames, and a
//! reader could see one without the other. The cost: the file system must
//! keep user extended attributes (ext4, XFS, btrfs and ZFS do; tmpfs from
//! Linux 6.6), which the store checks when it opens, refusing one that
//! does not; and a file copied into the bucket without its attribute is
//! not an object (its reads say so, naming `cp --preserve=xattr`).
//!
//! The store keeps its own files in `ROOT/.bucket-lease/`: the lock,
//! `tmp/` for writes' temporary files, and `uploads/` for uploads. No key
//! may have a segment starting with `.bucket-lease`. `ROOT/.bucket-lease.lock`
//! is a folder: it was the first layout's lock file, and a store of that
//! layout cannot open a folder to lock it, so an older version never
//! writes in a bucket of this one.
//!
//! A file system cannot hold what S3 can: an object `a` and an object
//! `a/b` (the first needs a file where the second needs a folder). A write
//! that would make one beside the other is refused,
//! [`StoreErrorKind::Rejected`] with the code `KeyConflict`, permanent,
//! naming the path in the way; a read of `a` where `a` is a folder of
//! longer keys answers [`StoreErrorKind::NotFound`], as S3 would.
//!
//! A bucket of the first layout (objects as `NAME.obj` files starting with
//! a header, folders as `NAME.dir`; its `.bucket-lease.lock` a file) is
//! refused when the store opens, code `FirstLayout`, naming its migration:
//! [`DirStore::migrate_first_layout`], or `bucket-lease migrate-dir PATH`.
//!
//! # Uploads
//!
//! An upload is the object file to be, `ROOT/.bucket-lease/uploads/<id>`,
//! `id` being 32 random hex digits (any other id is refused,
//! [`StoreErrorKind::Rejected`], so none names a file elsewhere). Its
//! attribute names its key and metadata, and a mark where an object's
//! ETag goes; each part is appended (chunk by chunk, as a write's temporary
//! file is written) and synced, then the mark is rewritten to name it. The
//! completion writes the object's attribute, with a fresh ETag, and renames
//! the file over its object as a write renames its temporary file: the body
//! is never copied, and a reader never sees a torn object. What differs
//! from S3:
//!
//! - parts are taken in order, 1, 2, 3…, each once: a part out of order or
//!   sent again is refused ([`StoreErrorKind::Rejected`],
//!   `InvalidPartOrder`) and changes nothing, so a part that failed is sent
//!   again under its number, and one taken is never replaced;
//! - requests on one upload go one at a time: one that finds another under
//!   way answers [`StoreErrorKind::Conflict`];
//! - the completion names every part taken, in order, with its ETag; a
//!   completion that publishes nothing (refused, out of time) leaves the
//!   upload as it was, to complete again or abort.
//!
//! # Keys
//!
//! Keys are `/`-separated, each segment a folder or file name. A key that
//! is empty, starts with `/`, has an empty segment (`a//b`, `a/`), a `.` or
//! `..` segment, a segment starting with `.bucket-lease`, a NUL byte, a
//! backslash, or a segment longer than 255 bytes is answered
//! [`StoreErrorKind::Rejected`] naming the key.
//!
//! # Deadlines
//!
//! The store keeps the deadline rule of [`store`](bucket_lease_core::store): a
//! write publishes nothing (renames no file over its object) and a delete
//! removes nothing after its deadline. A request checks its deadline
//! before it starts, and a write or delete again before each step that can
//! take long:
//!
//! - a write's temporary file is written in chunks of 4 MiB, each synced,
//!   with the deadline checked before each chunk, so a large body stops at
//!   the first chunk boundary after the deadline;
//! - a write or delete then waits for the bucket's lock (its handle's
//!   turn, then the file), trying it only
//!   before its deadline (the try after the last pause included), and
//!   never longer than [`MAX_LOCK_WAIT`] (which also bounds a request with
//!   no deadline). A process that holds the lock longer (stopped, or hung
//!   on a dead disk) makes the request give up, with a message naming the
//!   lock file;
//! - holding the lock, with its condition checked, a write checks its
//!   deadline once more right before it renames its temporary file over
//!   the object, and a delete right before it removes the object.
//!
//! An upload's part is written as a temporary file is, and checks its
//! deadline once more before the mark that takes it (a part out of time
//! is cut off, not taken); a completion and an abort wait for the lock and
//! check their deadline as a write and a delete do.
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
//! - A process killed in the middle of a write leaves a file in
//!   `.bucket-lease/tmp/`; reads never see it, and it may be removed while
//!   no writer runs. A write that publishes nothing (refused, or out of
//!   time) removes its own.
//! - An upload never completed nor aborted (its process killed) stays as
//!   its file in `.bucket-lease/uploads/`, as S3 keeps an incomplete
//!   multipart upload until it is aborted; reads never see it. Abort it,
//!   or remove the file while no writer uses it. A part a killed process
//!   left half-written is cut off by the upload's next request; a process
//!   killed in the middle of a completion (between two system calls)
//!   leaves an upload that answers that it must be aborted.
//! - Folders for a new key are made under the lock right before the
//!   rename; a write whose deadline passes there removes them again.
//! - A delete removes the folders it leaves empty (S3 has no folders to
//!   leave behind); a folder made for a new prefix is not itself synced to
//!   its parent.
//!
//! [`PutMode`]: bucket_lease_core::store::PutMode
//! [`PutMode::Create`]: bucket_lease_core::store::PutMode::Create
//! [`PutMode::Update`]: bucket_lease_core::store::PutMode::Update

mod attr;
mod beneath;
mod claim;
mod layout;
mod migrate;
mod request;
#[cfg(test)]
mod tests;
mod upload;

use crate::settings::url_text;
use beneath::{Folder, Kind, Resolve};
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart,
};
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::store::{
    DeleteMode, Object, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use claim::claim_as_bucket;
use layout::{encode_header, split_key, LOCK, STATE_DIR, TEMP_DIR};
pub use migrate::Migration;
use request::{is_version, unknown_mode, Opened, Request};
use rustix::fs::OFlags;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The most bytes a read returns, as the HTTP stores' default cap. A
/// larger object answers [`StoreErrorKind::TooLarge`] with its version.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest a write or delete waits for the bucket's lock, whatever its
/// deadline; also the bound for a request without one.
pub const MAX_LOCK_WAIT: Duration = Duration::from_secs(30);

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
/// on the same directory share its objects and its lock. Two handles are
/// equal when they open the same directory.
#[derive(Clone)]
pub struct DirStore {
    root: PathBuf,
    /// `file://ROOT//`, as a user writes it, for errors.
    store_url: Arc<str>,
    /// The verdict on create-only completions, shared by clones: see
    /// [`Store::upload_conditions`] below.
    upload_conditions: Arc<UploadConditions>,
    /// The turns of this handle's and its clones' requests at the
    /// bucket's lock.
    turns: Arc<Turns>,
}

/// The bucket's lock as the requests of one handle and its clones take
/// turns at it: one at a time tries the lock file, and the next is woken
/// as soon as it lets go. Without it, threads of one process (a pool's
/// renewal threads) would find the file locked by each other and sleep
/// before trying again, as they must for another process (a file lock
/// has no wait bounded by a deadline), though the lock is held only for a
/// check and a rename.
#[derive(Debug, Default)]
struct Turns {
    taken: Mutex<bool>,
    freed: Condvar,
}

/// One request's turn at the bucket's lock, given back on drop.
struct Turn<'a>(&'a Turns);

impl Turns {
    /// Wait for the turn until `give_up` (with none, as long as it takes);
    /// `None` when `give_up` came first.
    fn take(&self, give_up: Option<Instant>) -> Option<Turn<'_>> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        while *taken {
            taken = match give_up {
                None => self.freed.wait(taken).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    let waited = self.freed.wait_timeout(taken, left);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
        *taken = true;
        Some(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.taken.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.freed.notify_one();
    }
}

/// The bucket's lock, held: the lock file, then this handle's turn, are
/// let go on drop (in that order).
struct Locked<'a> {
    _file: File,
    _turn: Turn<'a>,
}

impl PartialEq for DirStore {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for DirStore {}

impl std::fmt::Debug for DirStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirStore")
            .field("root", &self.root)
            .finish()
    }
}

/// `path` as one word for a shell: in single quotes unless it is plain.
pub(crate) fn shell_word(path: &Path) -> String {
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
        Ok(DirStore {
            root,
            store_url,
            upload_conditions: Arc::default(),
            turns: Arc::default(),
        })
    }

    /// The bucket's directory, as an absolute path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The object `request` names, opened (its header read, its body
    /// still to read), for a HEAD or a streamed read; `NoSuchKey` when
    /// there is none.
    fn open_found(
        &self,
        request: &Request<'_>,
        deadline: Option<Instant>,
    ) -> Result<Opened, StoreError> {
        request.check_deadline(deadline)?;
        let at = self.locate(request)?;
        let root = self.root_folder(request)?;
        let found = match self.find_folder(request, &root, &at)? {
            Some(folder) => request.open_object(&folder, at.name)?,
            None => None,
        };
        found.ok_or_else(|| request.refusal(StoreErrorKind::NotFound, "NoSuchKey"))
    }

    /// The bucket's directory, open, for one request: a directory removed
    /// since the store opened answers as a missing bucket, `NoSuchBucket`.
    fn root_folder(&self, request: &Request<'_>) -> Result<Folder, StoreError> {
        Folder::root(&self.root).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => self.bucket_gone(request),
            _ => request.io_error("open the bucket's directory", &self.root, e),
        })
    }

    /// The folder that holds `at`'s object, opened beneath `root`, or
    /// `None` when there is none (a name on the way is missing, or is a
    /// file: no object can be under it). A link on the way is refused, and
    /// so is a folder that is another bucket's directory.
    fn find_folder(
        &self,
        request: &Request<'_>,
        root: &Folder,
        at: &Location<'_>,
    ) -> Result<Option<Folder>, StoreError> {
        match root.open_outside(&at.folders, STATE_DIR) {
            Ok(folder) => Ok(Some(folder)),
            Err(Resolve::Missing(_) | Resolve::NotFolder(_)) => Ok(None),
            Err(other) => Err(request.unresolved(other, "open the folder")),
        }
    }

    /// Make the folders of `at`'s key beneath `root`, as `mkdir -p` does
    /// but through no link, and never the root itself: a bucket directory
    /// removed since the request began answers as a missing bucket,
    /// `NoSuchBucket`. Called under the bucket's lock, so no delete
    /// removes a folder between its making and the rename into it. An
    /// object where a folder goes is refused as a conflict of keys.
    fn make_folders(
        &self,
        request: &Request<'_>,
        root: &Folder,
        at: &Location<'_>,
    ) -> Result<Folder, StoreError> {
        root.make(&at.folders).map_err(|e| match e {
            Resolve::Missing(_) => self.bucket_gone(request),
            Resolve::NotFolder(path) => request.key_conflict(&path, false),
            other => request.unresolved(other, "create the folder"),
        })
    }

    /// The answer once the bucket's directory is gone: a missing bucket.
    fn bucket_gone(&self, request: &Request<'_>) -> StoreError {
        request
            .error(StoreErrorKind::Rejected)
            .with_code("NoSuchBucket")
            .with_message(format!(
                "the bucket's directory {} is gone (mkdir -p {} makes it again)",
                self.root.display(),
                shell_word(&self.root)
            ))
    }

    /// One of the store's own folders (`TEMP_DIR`, `UPLOAD_DIR`) in
    /// `.bucket-lease/`, opened beneath `root`, and made again should
    /// someone have removed it.
    fn own_folder(
        &self,
        request: &Request<'_>,
        root: &Folder,
        name: &str,
    ) -> Result<Folder, StoreError> {
        root.make(&[STATE_DIR, name]).map_err(|e| match e {
            Resolve::Missing(_) => self.bucket_gone(request),
            other => request.unresolved(other, "open the store's folder"),
        })
    }

    fn request<'a>(&self, method: &'static str, key: &'a str) -> Request<'a> {
        Request::new(method, key, Arc::clone(&self.store_url))
    }

    /// Where `key`'s object lives, or the reason the key is refused.
    fn locate<'k>(&self, request: &Request<'k>) -> Result<Location<'k>, StoreError> {
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
        let mut object = self.root.clone();
        object.extend(&segments);
        Ok(Location {
            object,
            name,
            folders: folders.to_vec(),
        })
    }

    /// Write a fresh file `name` in the store's own folder `own` (made
    /// again should someone have removed it), with `attribute` and
    /// `body`, as [`TempFile::write`] does.
    #[allow(clippy::too_many_arguments)]
    fn write_own(
        &self,
        request: &Request<'_>,
        root: &Folder,
        own: &str,
        name: String,
        attribute: &[u8],
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<TempFile, StoreError> {
        let folder = self.own_folder(request, root, own)?;
        TempFile::write(request, folder, name, attribute, body, deadline)
    }

    /// Make `at`'s folders (unless `found` is the folder, open), check the
    /// deadline once more, and rename the file `from_name` in `from` over
    /// `at`'s object: the publishing step of a write and of a completion,
    /// called under the bucket's lock with the condition checked. A
    /// deadline passed by now publishes nothing, and the folders just made
    /// go again; `late` says where it stopped. Returns the object's folder,
    /// to sync.
    #[allow(clippy::too_many_arguments)]
    fn publish_at(
        &self,
        request: &Request<'_>,
        root: &Folder,
        at: &Location<'_>,
        found: Option<Folder>,
        (from, from_name): (&Folder, &str),
        deadline: Option<Instant>,
        late: impl FnOnce() -> String,
        gone: impl FnOnce() -> StoreError,
    ) -> Result<Folder, StoreError> {
        let folder = match found {
            Some(folder) => folder,
            None => self.make_folders(request, root, at)?,
        };
        reached(Step::Publishing);
        // Checked once more right before the rename: the file was written,
        // the lock taken and the condition checked since the last check,
        // and a write past its deadline publishes nothing.
        if !StoreMutant::DirRenameUnchecked.on() {
            if let Err(e) = request.check_deadline_at(deadline, late) {
                self.remove_empty_folders(root, &at.folders);
                return Err(e);
            }
        }
        match from.rename(from_name, &folder, at.name) {
            Ok(()) => Ok(folder),
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && matches!(from.kind(from_name), Ok(None)) =>
            {
                self.remove_empty_folders(root, &at.folders);
                Err(gone())
            }
            Err(e) => Err(request.io_error("rename into", &at.object, e)),
        }
    }

    /// Remove the folders `folders` beneath `root`, from the deepest up
    /// (never the root), while they are empty, as S3 has no folders to
    /// leave behind; called under the lock. Returns the folder whose
    /// entries changed last, the first one left in place, to sync (`None`
    /// if it cannot be opened).
    fn remove_empty_folders(&self, root: &Folder, folders: &[&str]) -> Option<Folder> {
        // `unlinkat(AT_REMOVEDIR)` removes only an empty folder: one with a
        // temporary file being written (a put in progress) or an upload's
        // file stays.
        for depth in (0..folders.len()).rev() {
            let parent = root.open(&folders[..depth]).ok()?;
            if parent.remove_folder(folders[depth]).is_err() {
                return root.open(&folders[..=depth]).ok();
            }
        }
        root.open(&[]).ok()
    }

    /// Take the bucket's lock, waiting no later than `deadline` and no
    /// longer than [`MAX_LOCK_WAIT`]: this handle's turn first (woken when
    /// the request before it lets go), then the lock file (tried again
    /// after a pause while another process holds it). It is released when
    /// the returned guard drops.
    fn lock(
        &self,
        request: &Request<'_>,
        root: &Folder,
        deadline: Option<Instant>,
    ) -> Result<Locked<'_>, StoreError> {
        let state = root.make(&[STATE_DIR]).map_err(|e| match e {
            Resolve::Missing(_) => self.bucket_gone(request),
            other => request.unresolved(other, "open the store's folder"),
        })?;
        let path = state.path().join(LOCK);
        let file = state
            .open_file(LOCK, OFlags::RDWR | OFlags::CREATE)
            .map_err(|e| request.file_error("open the lock file", &state, LOCK, e))?;
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
        let Some(turn) = self.turns.take(give_up) else {
            return Err(request.deadline_passed(format!(
                "the lock at {} was held by this process's other requests on the bucket for \
                 the {} ms this request could wait, so nothing was done",
                path.display(),
                started.elapsed().as_millis()
            )));
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
                    return Ok(Locked {
                        _file: file,
                        _turn: turn,
                    });
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

/// Where one key's object is: its folders beneath the root and its name,
/// and their paths, for messages.
#[derive(Debug)]
struct Location<'k> {
    /// The key's segments before its last: the folders that hold the
    /// object file, from the root down.
    folders: Vec<&'k str>,
    /// The object file's name in the last of them.
    name: &'k str,
    /// The object file.
    object: PathBuf,
}

/// A written, synced temporary file in one of the store's own folders,
/// removed on drop unless renamed over its object (or kept).
struct TempFile {
    folder: Folder,
    name: String,
    /// Its path, for messages.
    path: PathBuf,
    renamed: bool,
}

impl TempFile {
    /// Write `body` to a fresh file `name` in `folder` (one of the store's
    /// own), give it `attribute`, and sync it, the body as
    /// [`write_chunks`] does; a deadline that passes meanwhile stops the
    /// write at the next chunk, and the file is removed.
    fn write(
        request: &Request<'_>,
        folder: Folder,
        name: String,
        attribute: &[u8],
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<TempFile, StoreError> {
        let path = folder.path().join(&name);
        let mut file = folder
            .create_new(&name)
            .map_err(|e| request.file_error("create", &folder, &name, e))?;
        let temp = TempFile {
            folder,
            name,
            path,
            renamed: false,
        };
        set_attribute(request, &file, &temp.path, attribute)?;
        write_chunks(request, &mut file, &temp.path, body, deadline, |written| {
            format!(
                "the deadline passed while the temporary file {} was written ({written} of {} \
                 bytes), so the object was not published and the file is removed; give the \
                 write a later deadline, or write less under one",
                temp.path.display(),
                body.len()
            )
        })?;
        file.sync_all()
            .map_err(|e| request.io_error("write", &temp.path, e))?;
        Ok(temp)
    }

    /// Keep the file where it is (an upload's, which later requests add
    /// to): it is no longer removed on drop.
    fn keep(mut self) {
        self.renamed = true;
    }

    /// The file was renamed over its object: it is no longer removed on
    /// drop.
    fn published(mut self) {
        self.renamed = true;
    }
}

/// Write `body` to `file` (at `path`) from its position, in chunks of
/// [`CHUNK`] bytes, each but the last synced (the caller syncs the file),
/// with `deadline` checked before each, so that a large body stops at the
/// first chunk boundary after its deadline; `stopped` says, from the bytes
/// written, what that left undone.
fn write_chunks(
    request: &Request<'_>,
    file: &mut File,
    path: &Path,
    body: &[u8],
    deadline: Option<Instant>,
    stopped: impl Fn(usize) -> String,
) -> Result<(), StoreError> {
    let failed = |e| request.io_error("write", path, e);
    let chunks = body.len().div_ceil(CHUNK);
    for (index, chunk) in body.chunks(CHUNK).enumerate() {
        if !StoreMutant::DirChunksUnchecked.on() {
            request.check_deadline_at(deadline, || stopped(index * CHUNK))?;
        }
        file.write_all(chunk).map_err(failed)?;
        // Synced chunk by chunk (the last by the caller), so that no sync
        // at the end takes as long as the whole body.
        if index + 1 < chunks {
            file.sync_data().map_err(failed)?;
        }
        reached(Step::ChunkWritten);
    }
    Ok(())
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            // Best effort: a leftover temporary file is ignored by reads.
            let _ = self.folder.remove_file(&self.name);
        }
    }
}

/// Give the file `file` (at `path`) the attribute `value`: its ETag and
/// metadata (see [`attr`]).
fn set_attribute(
    request: &Request<'_>,
    file: &File,
    path: &Path,
    value: &[u8],
) -> Result<(), StoreError> {
    attr::set(file, value).map_err(|e| {
        if attr::is_unsupported(&e) {
            request.no_attributes(path, &e)
        } else if e.raw_os_error() == Some(7) || e.kind() == io::ErrorKind::StorageFull {
            // E2BIG, or no room left in the file's attribute space.
            request
                .error(StoreErrorKind::Rejected)
                .with_message(format!(
                    "the file system refused the object's metadata ({} bytes with its ETag) as \
                     an extended attribute of {}: {e}; send less metadata",
                    value.len(),
                    path.display()
                ))
        } else {
            request.io_error("set the attribute of", path, e)
        }
    })
}

/// A fresh ETag: 128 random bits as quoted hex.
fn fresh_etag(request: &Request<'_>) -> Result<String, StoreError> {
    Ok(format!("\"{}\"", random_hex(request, "an ETag")?))
}

/// 128 random bits from the operating system as 32 lowercase hex digits,
/// for `what` (an ETag, an upload id).
fn random_hex(request: &Request<'_>, what: &str) -> Result<String, StoreError> {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).map_err(|e| {
        request
            .error(StoreErrorKind::Transport)
            .with_message(format!(
                "the operating system gave no random bytes for {what}: {e}; nothing was \
                 written, retry"
            ))
    })?;
    let mut hex = String::with_capacity(32);
    for byte in bits {
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(hex)
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
        let root = self.root_folder(&request)?;
        let found = match self.find_folder(&request, &root, &at)? {
            Some(folder) => request.read(&folder, at.name, MAX_BODY)?,
            None => None,
        };
        match found {
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
        let Opened { header, .. } = self.open_found(&request, deadline)?;
        Ok(Object::new(Vec::new(), Version::etag(header.etag)).with_metadata(header.metadata))
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let request = self.request("PUT", key);
        request.check_deadline(options.deadline)?;
        let at = self.locate(&request)?;
        let root = self.root_folder(&request)?;
        let etag = fresh_etag(&request)?;
        let attribute = encode_header(None, &etag, &options.metadata);
        // The ETag is random and fresh, so it names the file uniquely.
        let name = etag.trim_matches('"').to_string();
        let temp = self.write_own(
            &request,
            &root,
            TEMP_DIR,
            name,
            &attribute,
            body,
            options.deadline,
        )?;

        let lock = self.lock(&request, &root, options.deadline)?;
        let found = request.check_condition(&root, &at, &options.mode)?;
        let late = || {
            format!(
                "the deadline passed after the temporary file was written and the condition \
                 checked, before it was renamed over {}, so the object was not published and \
                 the file is removed; give the write a later deadline",
                at.object.display()
            )
        };
        let gone = || {
            request
                .error(StoreErrorKind::Transport)
                .not_sent()
                .with_message(format!(
                    "the temporary file {} was removed before it was renamed over {} (by someone \
                 cleaning the store's folder while it wrote?); nothing was published, retry",
                    temp.path.display(),
                    at.object.display()
                ))
        };
        let folder = self.publish_at(
            &request,
            &root,
            &at,
            found,
            (&temp.folder, &temp.name),
            options.deadline,
            late,
            gone,
        )?;
        temp.published();
        drop(lock);

        request.sync(&folder)?;
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
        let root = self.root_folder(&request)?;

        let lock = self.lock(&request, &root, deadline)?;
        // No folder, or a file where one of its folders should be: no
        // object.
        let Some(folder) = self.find_folder(&request, &root, &at)? else {
            return Ok(());
        };
        match folder.kind(at.name) {
            Ok(Some(Kind::Link)) => return Err(request.link(&at.object)),
            // No object: none there, or a folder of longer keys.
            Ok(None | Some(Kind::Folder)) => return Ok(()),
            Ok(Some(Kind::File | Kind::Other)) => {}
            Err(e) => return Err(request.io_error("inspect", &at.object, e)),
        }
        match mode {
            DeleteMode::Unconditional => {}
            DeleteMode::IfVersion(wanted) => match request.open_object(&folder, at.name)? {
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
        match folder.remove_file(at.name) {
            Ok(()) => {}
            // Gone meanwhile, or a folder put there: no object.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) =>
            {
                return Ok(())
            }
            Err(e) => return Err(request.io_error("remove", &at.object, e)),
        }
        let changed = self.remove_empty_folders(&root, &at.folders);
        drop(lock);

        match changed {
            Some(changed) => request.sync(&changed),
            None => Ok(()),
        }
    }

    /// The object's header, then its body streamed from the same open
    /// file, whatever its size: a rename that replaces the object
    /// meanwhile leaves this file whole, so the reader reads one version.
    /// The deadline bounds the body too: a read after it fails with
    /// [`io::ErrorKind::TimedOut`].
    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        self.open_object(key, deadline)
    }

    /// Kept unsettled, for the lease's check to settle once per store (and
    /// its clones): the condition is this store's own code, checked under
    /// the bucket's lock as for a PUT, and the check costs a few local file
    /// operations, while settling it here unchecked would hide a defect in
    /// that code from the one check that would show it.
    fn upload_conditions(&self) -> Option<&UploadConditions> {
        Some(&self.upload_conditions)
    }

    /// The upload's file, `NAME.<id>.upload` beside the object, holds its
    /// header (metadata included) from now on; see [Uploads](self#uploads).
    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        self.begin(begin)
    }

    /// Parts are taken in order, each once: a part out of order or sent
    /// again is refused ([`StoreErrorKind::Rejected`], `InvalidPartOrder`)
    /// and changes nothing. A part whose deadline passes is not taken.
    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        self.take_part(part)
    }

    /// Publishes the upload's file as a PUT in its `mode` publishes its
    /// temporary file; its `parts` must name every part taken, in order, with
    /// its ETag ([`StoreErrorKind::Rejected`] else). A completion that
    /// publishes nothing leaves the upload as it was, to complete again or
    /// abort.
    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        self.complete(complete)
    }

    /// Removes the upload's file, and the folders that leaves empty, under
    /// the bucket's lock.
    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        self.abort(abort)
    }
}
