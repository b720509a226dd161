//! Moving a bucket of the first directory layout (`NAME.obj` files, each a
//! header then the body, in `NAME.dir` folders, and the lock file
//! `.bucket-lease.lock`) to this one, in place, keeping every object's
//! bytes, ETag and metadata.
//!
//! It holds the first layout's lock the whole time, so no store of that
//! layout writes meanwhile, and goes in steps that can each be run again:
//!
//! 1. every object is read, and written as a plain file with its attribute
//!    into a staging tree, `.bucket-lease/migrating/` (built again from the
//!    start if a run stopped here), and `.bucket-lease/migrated` is made;
//! 2. the first layout's files (objects, folders, leftover temporary and
//!    upload files) are removed, and `.bucket-lease/swapping` is made;
//! 3. the staging tree's entries are moved into the root;
//! 4. the first layout's lock file becomes a folder, which marks the
//!    bucket as of this layout.
//!
//! Before anything changes, the whole tree is read: a file the first
//! layout never made, a key this layout refuses (a segment starting with
//! `.bucket-lease`), or two keys a file system cannot hold together (`a`
//! and `a/b`) stop the migration with nothing changed; an object file
//! whose header is damaged stops it in step 1, with nothing removed.
//!
//! A store of the first layout that opened the lock file before the
//! migration and still waits for its lock takes the removed file's lock
//! when the migration ends, and would write beside this layout: every
//! process that uses the bucket must be stopped first, as the command
//! says.

use super::layout::{
    encode_header, parse_header, split_key, LOCK, MAGIC, MAGIC_V1, STATE_DIR, TEMP_DIR, UPLOAD_DIR,
    V1_LOCK,
};
use super::request::Request;
use super::{set_attribute, DirStore};
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The staging tree, in the store's own folder.
const STAGING: &str = "migrating";
/// Made once the staging tree is whole: the first layout's files may go.
const STAGED: &str = "migrated";
/// Made once the first layout's files are gone: the staging tree's
/// entries may move into the root.
const SWAPPING: &str = "swapping";
/// The longest header of the first layout.
const MAX_HEADER: u64 = 64 * 1024;
/// How long the migration waits for the first layout's lock.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// What a migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Migration {
    /// Objects moved to this layout.
    pub objects: usize,
    /// Leftover temporary and upload files of the first layout, removed
    /// (writes and uploads that were never finished).
    pub leftovers: usize,
    /// The bucket was of this layout already: nothing was done.
    pub already: bool,
}

/// One object of the first layout.
struct OldObject {
    key: String,
    file: PathBuf,
}

impl DirStore {
    /// Move the bucket in the directory `root` from the first directory
    /// layout to this one, in place: see [Layout](super#layout). Stop every
    /// process that uses the bucket first. Run again after a failure or a
    /// crash, it goes on where it stopped; on a bucket of this layout it
    /// does nothing and says so ([`Migration::already`]).
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Rejected`], with nothing changed, for a directory
    /// that is no bucket, or holds a file the first layout never made, or
    /// two keys a directory bucket cannot hold together (`a` and `a/b`,
    /// named); [`StoreErrorKind::Transport`] when another process holds
    /// the bucket's lock for 30 s, or the file system fails.
    pub fn migrate_first_layout(root: &Path) -> Result<Migration, StoreError> {
        let shown = format!(
            "file://{}//",
            crate::settings::url_text(&root.display().to_string())
        );
        let request = Request::new("MIGRATE", "", shown.into());
        let old_lock = root.join(V1_LOCK);
        match fs::symlink_metadata(&old_lock) {
            Ok(meta) if meta.is_dir() && root.join(STATE_DIR).is_dir() => {
                return Ok(Migration {
                    already: true,
                    ..Migration::default()
                })
            }
            Ok(meta) if meta.is_file() => {}
            _ => {
                return Err(request
                    .error(StoreErrorKind::Rejected)
                    .permanent()
                    .with_message(format!(
                        "{} is not a bucket of the first directory layout (it has no lock \
                         file {V1_LOCK}); name the bucket's directory",
                        root.display()
                    )))
            }
        }
        let lock = lock_old(&request, &old_lock)?;
        let state = root.join(STATE_DIR);
        let staging = state.join(STAGING);
        let staged = state.join(STAGED);
        let mut migration = Migration::default();
        let swapping = state.join(SWAPPING);
        if !staged.exists() {
            // Step 1, from the start, once the survey found nothing to
            // refuse.
            let (objects, _) = survey(&request, root)?;
            refuse_keys(&request, &objects)?;
            make_state(&request, &state)?;
            if staging.exists() {
                fs::remove_dir_all(&staging)
                    .map_err(|e| request.io_error("remove the unfinished", &staging, e))?;
            }
            fs::create_dir(&staging).map_err(|e| request.io_error("create", &staging, e))?;
            for object in &objects {
                stage(&request, object, &staging)?;
            }
            sync_tree(&request, &staging)?;
            write_synced(&request, &staged)?;
        }
        // Step 2, unless it finished (step 3 began): then the root holds no
        // file of the first layout, and entries of this one that the survey
        // would refuse.
        if !swapping.exists() {
            let (objects, leftovers) = survey(&request, root)?;
            migration.leftovers = leftovers.len();
            for file in objects.iter().map(|o| &o.file).chain(&leftovers) {
                fs::remove_file(file).map_err(|e| request.io_error("remove", file, e))?;
            }
            remove_old_folders(&request, root)?;
            request.sync_dir(root)?;
            write_synced(&request, &swapping)?;
        }
        // Step 3.
        migration.objects = count_files(&request, &staging)?;
        for entry in read_dir(&request, &staging)? {
            let to = root.join(entry.file_name());
            fs::rename(entry.path(), &to).map_err(|e| request.io_error("move into", &to, e))?;
        }
        request.sync_dir(root)?;
        fs::remove_dir(&staging).map_err(|e| request.io_error("remove", &staging, e))?;
        // Step 4, still holding its lock: the lock file becomes the folder
        // that marks this layout, which a store of the first layout cannot
        // open to lock. (One that opened the file before, and waits for
        // its lock, takes the removed file's lock when this returns: the
        // reason every process must be stopped first.)
        fs::remove_file(&old_lock).map_err(|e| request.io_error("remove", &old_lock, e))?;
        fs::create_dir(&old_lock).map_err(|e| request.io_error("create", &old_lock, e))?;
        drop(lock);
        request.sync_dir(root)?;
        let _ = fs::remove_file(&staged);
        let _ = fs::remove_file(&swapping);
        Ok(migration)
    }
}

/// Make the store's own folder at `state` as this layout has it: its
/// folders, and its lock file with the attribute naming the layout (which
/// also proves the file system keeps attributes).
fn make_state(request: &Request<'_>, state: &Path) -> Result<(), StoreError> {
    for dir in [
        state.to_path_buf(),
        state.join(TEMP_DIR),
        state.join(UPLOAD_DIR),
    ] {
        match fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(request.io_error("create", &dir, e))
            }
            _ => {}
        }
    }
    let lock = state.join(LOCK);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|e| request.io_error("create", &lock, e))?;
    set_attribute(request, &file, &lock, MAGIC.as_bytes())
}

/// Make the empty file `path` (a mark of a step done), synced with its
/// folder.
fn write_synced(request: &Request<'_>, path: &Path) -> Result<(), StoreError> {
    File::create(path)
        .and_then(|file| file.sync_all())
        .map_err(|e| request.io_error("create", path, e))?;
    request.sync_dir(path.parent().unwrap_or(path))
}

/// How many files the tree at `dir` holds (those a run stopped in step 3
/// moved already are not counted).
fn count_files(request: &Request<'_>, dir: &Path) -> Result<usize, StoreError> {
    let mut count = 0;
    for entry in read_dir(request, dir)? {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            count += count_files(request, &entry.path())?;
        } else {
            count += 1;
        }
    }
    Ok(count)
}

/// Take the first layout's lock, waiting at most [`LOCK_WAIT`].
fn lock_old(request: &Request<'_>, path: &Path) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| request.io_error("open the lock file", path, e))?;
    let give_up = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(request
                    .error(StoreErrorKind::Transport)
                    .with_message(format!(
                        "another process held the bucket's lock {} for {} s; stop every process \
                     that uses the bucket, then migrate again",
                        path.display(),
                        LOCK_WAIT.as_secs()
                    )))
            }
            Err(fs::TryLockError::Error(e)) => return Err(request.io_error("lock", path, e)),
        }
    }
}

fn read_dir(request: &Request<'_>, dir: &Path) -> Result<Vec<fs::DirEntry>, StoreError> {
    fs::read_dir(dir)
        .and_then(|entries| entries.collect::<io::Result<Vec<_>>>())
        .map_err(|e| request.io_error("list", dir, e))
}

/// The first layout's objects under `root` (with their keys) and its
/// leftover temporary and upload files; a file it never made is refused.
fn survey(
    request: &Request<'_>,
    root: &Path,
) -> Result<(Vec<OldObject>, Vec<PathBuf>), StoreError> {
    let (mut objects, mut leftovers) = (Vec::new(), Vec::new());
    let mut folders = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = folders.pop() {
        for entry in read_dir(request, &dir)? {
            let name = entry.file_name();
            let path = entry.path();
            let Some(name) = name.to_str() else {
                return Err(unexpected(request, &path));
            };
            let kind = entry
                .file_type()
                .map_err(|e| request.io_error("inspect", &path, e))?;
            if dir == root && (name == STATE_DIR || name == V1_LOCK) {
                continue;
            }
            if kind.is_dir() {
                let Some(folder) = name.strip_suffix(".dir") else {
                    return Err(unexpected(request, &path));
                };
                folders.push((path.clone(), format!("{prefix}{folder}/")));
            } else if let Some(object) = name.strip_suffix(".obj").filter(|_| kind.is_file()) {
                objects.push(OldObject {
                    key: format!("{prefix}{object}"),
                    file: path,
                });
            } else if kind.is_file() && (name.ends_with(".tmp") || name.ends_with(".upload")) {
                leftovers.push(path);
            } else {
                return Err(unexpected(request, &path));
            }
        }
    }
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    Ok((objects, leftovers))
}

fn unexpected(request: &Request<'_>, path: &Path) -> StoreError {
    request
        .error(StoreErrorKind::Rejected)
        .permanent()
        .with_message(format!(
            "{} is not a file of the first directory layout (objects NAME.obj, folders \
             NAME.dir), so nothing was migrated; move it out of the bucket directory, then \
             migrate again",
            path.display()
        ))
}

/// Refuse keys this layout does not take (a segment starting with
/// `.bucket-lease`, one too long), and keys a directory bucket cannot hold
/// together: `a` and `a/b`.
fn refuse_keys(request: &Request<'_>, objects: &[OldObject]) -> Result<(), StoreError> {
    for object in objects {
        if let Err(reason) = split_key(&object.key) {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the bucket holds the object {:?} ({}), which a bucket of plain files \
                     cannot hold: {reason}; so nothing was migrated; copy it out with the \
                     previous version and delete it, then migrate again",
                    object.key,
                    object.file.display()
                )));
        }
    }
    let keys: BTreeSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    for object in objects {
        let mut at = 0;
        while let Some(slash) = object.key[at..].find('/') {
            let folder = &object.key[..at + slash];
            if keys.contains(folder) {
                return Err(request
                    .error(StoreErrorKind::Rejected)
                    .permanent()
                    .with_code("KeyConflict")
                    .with_message(format!(
                        "the bucket holds the objects `{folder}` and `{}`, which a directory \
                         bucket of plain files cannot hold together (the first needs a file \
                         where the second needs a folder), so nothing was migrated; copy one \
                         of them out with the previous version and delete it, then migrate \
                         again",
                        object.key
                    )));
            }
            at += slash + 1;
        }
    }
    Ok(())
}

/// Write `object` into the staging tree as this layout's file: its body,
/// and its ETag and metadata as its attribute.
fn stage(request: &Request<'_>, object: &OldObject, staging: &Path) -> Result<(), StoreError> {
    let source = &object.file;
    let mut reader =
        BufReader::new(File::open(source).map_err(|e| request.io_error("open", source, e))?);
    let mut raw = Vec::new();
    loop {
        let start = raw.len();
        let read = Read::take(&mut reader, MAX_HEADER.saturating_sub(start as u64))
            .read_until(b'\n', &mut raw)
            .map_err(|e| request.io_error("read", source, e))?;
        if read == 0 || raw[start..] == *b"\n" {
            break;
        }
    }
    // The first layout's header is this layout's attribute but for its
    // first line and the blank line that ends it.
    let header = std::str::from_utf8(&raw)
        .ok()
        .and_then(|text| text.strip_prefix(MAGIC_V1))
        .and_then(|rest| rest.strip_suffix('\n'))
        .and_then(|rest| parse_header(format!("{MAGIC}{rest}").as_bytes()).ok())
        .filter(|header| header.key.is_none());
    let Some(header) = header else {
        return Err(request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "{} is not an object file of the first layout (its header is damaged), so \
                 nothing was removed; move it out of the bucket directory, then migrate again",
                source.display()
            )));
    };
    let target = staging.join(&object.key);
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(|e| request.io_error("create", parent, e))?;
    }
    let mut file = File::create(&target).map_err(|e| request.io_error("create", &target, e))?;
    io::copy(&mut reader, &mut file).map_err(|e| request.io_error("copy into", &target, e))?;
    file.flush()
        .map_err(|e| request.io_error("write", &target, e))?;
    let attribute = encode_header(None, &header.etag, &header.metadata);
    set_attribute(request, &file, &target, &attribute)?;
    file.sync_all()
        .map_err(|e| request.io_error("sync", &target, e))
}

/// Sync every folder of the tree at `dir`, so the staged files are there
/// after a crash before the first layout's go.
fn sync_tree(request: &Request<'_>, dir: &Path) -> Result<(), StoreError> {
    for entry in read_dir(request, dir)? {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            sync_tree(request, &entry.path())?;
        }
    }
    request.sync_dir(dir)
}

/// Remove the first layout's `NAME.dir` folders under `root`, now empty.
fn remove_old_folders(request: &Request<'_>, root: &Path) -> Result<(), StoreError> {
    fn remove(request: &Request<'_>, dir: &Path) -> Result<(), StoreError> {
        for entry in read_dir(request, dir)? {
            let path = entry.path();
            let old = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".dir"));
            if old && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove(request, &path)?;
                fs::remove_dir(&path).map_err(|e| request.io_error("remove", &path, e))?;
            }
        }
        Ok(())
    }
    remove(request, root)
}
