//! Moving a bucket of the first directory layout (`NAME.obj` files, each a
//! header then the body, in `NAME.dir` folders, and the lock file
//! `.bucket-lease.lock`) to this one, in place, keeping every object's
//! bytes, ETag and metadata.
//!
//! What it promises:
//!
//! - every object keeps its bytes, its ETag and its metadata, so a lease
//!   held across the migration keeps its version;
//! - what it cannot move stops it before anything changes, named: a file
//!   the first layout never made, a symbolic link anywhere in the bucket
//!   (refused as every request of the store refuses one), a key this
//!   layout refuses (a segment starting with `.bucket-lease`), two keys a
//!   file system cannot hold together (`a` and `a/b`); an object file
//!   whose header is damaged stops it in step 1, with nothing removed;
//! - it is crash-only: stopped between any two of its system calls, by a
//!   failure of the disk, a kill or a crash of the machine, it is run again
//!   and goes on where it stopped. It keeps no state but what is on the
//!   disk, and no step relies on anything being undone after a failure (a
//!   kill undoes nothing);
//! - every name beneath the bucket's directory is reached through no
//!   symbolic link ([`super::beneath`]);
//! - its errors say what failed on the local disk, and that running
//!   `bucket-lease migrate-dir PATH` again goes on where it stopped.
//!
//! # Steps
//!
//! It holds the first layout's lock while that is a file, and this
//! layout's lock (`.bucket-lease/lock`) once it is made, so no store of
//! either layout writes meanwhile, and no other run migrates. Each step
//! can be done again from its start whatever it did before it stopped, and
//! its end is recorded by a mark in the store's folder `.bucket-lease/`,
//! made (and synced with its folder) only once what the step did is on the
//! disk:
//!
//! 1. *Stage.* The tree is read (the refusals above), the store's own
//!    folder is made as this layout has it (its lock file with the
//!    attribute naming the layout, `tmp/`, `uploads/`), and the staging
//!    tree `.bucket-lease/migrating/` is removed if a run left one and
//!    built again: every object as a plain file with its attribute, each
//!    synced, then every folder of the tree. Mark: `migrated`, holding how
//!    many objects and leftover files the tree had (written as
//!    `migrated.new`, synced, renamed).
//! 2. *Remove.* The first layout's files (objects, and the temporary and
//!    upload files of writes it never finished) and its `NAME.dir` folders
//!    are removed, and the root synced. An object is removed only once the
//!    staging tree holds it with the ETag its file has now: one written
//!    since step 1 (by a store of the first layout, between two runs) or
//!    missing from the tree is staged first, and the tree synced, so no
//!    mark, however it came, makes a run remove an object it has not
//!    copied. Mark: `swapping`.
//! 3. *Swap.* Each entry of the staging tree is renamed into the root, the
//!    root synced, the empty staging folder removed, the store's folder
//!    synced.
//! 4. *Lock.* The first layout's lock file is removed and made again as a
//!    folder, which marks the bucket as of this layout (a store of the
//!    first layout cannot open a folder to lock it); the root is synced.
//! 5. *Clean.* The marks are removed, `swapping` then `migrated`, and the
//!    store's folder synced.
//!
//! # What a run finds, and what it does
//!
//! | `.bucket-lease.lock` | marks | the run that stopped was in | the next run |
//! |---|---|---|---|
//! | a file | none (maybe part of the store's folder, a partial staging tree, `migrated.new`) | step 1 | steps 1 to 5 |
//! | a file | `migrated` (maybe some first-layout files gone) | step 2 | step 2 on what is left, then 3 to 5 |
//! | a file | both (the staging tree whole, partly moved, empty, or gone) | step 3, or step 4 before it removed the file | step 3 on what is left in the staging tree (nothing if it is gone), then 4 and 5 |
//! | none | `swapping` | step 4, between its two calls | steps 3 (nothing left) to 5 |
//! | a folder | any | step 5 | step 5 |
//! | a folder | none | nothing: migrated | nothing ([`Migration::already`]) |
//!
//! Anything else is no bucket being migrated, and is refused with nothing
//! changed: a directory with neither a lock file nor a mark is no bucket
//! of the first layout, and `swapping` without `migrated` (no run leaves
//! it) is refused, as what was staged cannot be told. A FIFO or device at
//! a mark's name, or at the store's folder's, is refused at once, never
//! waited on. A run that waited for a lock another run held
//! looks at the bucket again once it has it, and goes on from there.
//!
//! A store of the first layout that opened the lock file before the
//! migration and still waits for its lock takes the removed file's lock
//! when the migration ends, and would write beside this layout: every
//! process that uses the bucket must be stopped first, as the command
//! says.

use super::attr;
use super::beneath::{Folder, Kind, Resolve};
use super::layout::{
    encode_header, parse_header, split_key, Header, LOCK, MAGIC, MAGIC_V1, STATE_DIR, TEMP_DIR,
    UPLOAD_DIR, V1_LOCK,
};
use super::request::Request;
use super::{shell_word, DirStore};
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use rustix::fs::OFlags;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The staging tree, in the store's own folder.
const STAGING: &str = "migrating";
/// Made once the staging tree is whole and on the disk (step 1 done): the
/// first layout's files may go. It holds the counts of [`Migration`].
const STAGED: &str = "migrated";
/// [`STAGED`] while it is written, until it is renamed whole.
const STAGED_NEW: &str = "migrated.new";
/// Made once the first layout's files are gone (step 2 done): the staging
/// tree's entries may move into the root.
const SWAPPING: &str = "swapping";
/// The longest header of the first layout.
const MAX_HEADER: u64 = 64 * 1024;
/// How long the migration waits for each lock.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// How many times a run looks at the bucket, each time another run moved
/// it on while this one waited for its lock.
const LOOKS: usize = 3;

/// What a migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Migration {
    /// Objects moved to this layout (by this run and any before it that
    /// stopped, as the first step counted them).
    pub objects: usize,
    /// Leftover temporary and upload files of the first layout, removed
    /// (writes and uploads that were never finished).
    pub leftovers: usize,
    /// The bucket was of this layout already: nothing was done.
    pub already: bool,
}

impl DirStore {
    /// Move the bucket in the directory `root` from the first directory
    /// layout to this one, in place: see [Layout](super#layout). Stop every
    /// process that uses the bucket first. Run again after a failure, a
    /// kill or a crash, it goes on where it stopped; on a bucket of this
    /// layout it does nothing and says so ([`Migration::already`]).
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Rejected`], with nothing changed, for a directory
    /// that is no bucket of the first layout, or holds a file the first
    /// layout never made, a symbolic link (code `SymbolicLink`), or two
    /// keys a directory bucket cannot hold together (`a` and `a/b`, code
    /// `KeyConflict`), each named; [`StoreErrorKind::Transport`] when
    /// another process holds the bucket's lock for 30 s, or the file
    /// system fails ([`StoreErrorKind::PermissionDenied`] when it refuses
    /// this user). Each says to run the migration again once its cause is
    /// fixed.
    pub fn migrate_first_layout(root: &Path) -> Result<Migration, StoreError> {
        Run::new(root).migrate()
    }
}

/// One object, or leftover file, of the first layout.
struct OldFile {
    /// The folders it is in, as named on the disk (`nightly.dir`).
    folders: Vec<String>,
    /// Its file's name (`LEASE.obj`).
    name: String,
    /// Its key (`nightly/LEASE`); for a leftover, its path.
    key: String,
}

/// The first layout's files and folders under the root.
#[derive(Default)]
struct Survey {
    /// Objects, by key.
    objects: Vec<OldFile>,
    /// Temporary and upload files of writes never finished.
    leftovers: Vec<OldFile>,
    /// Every `NAME.dir` folder, as the folders to it.
    folders: Vec<Vec<String>>,
}

/// The marks in the store's folder.
#[derive(Debug, Default, PartialEq, Eq)]
struct Marks {
    /// [`STAGED`] is there, with these counts.
    staged: Option<Migration>,
    /// [`SWAPPING`] is there.
    swapping: bool,
}

impl Marks {
    fn any(&self) -> bool {
        self.staged.is_some() || self.swapping
    }
}

/// One run of the migration: the request its errors name, and the
/// bucket's directory as the caller named it.
struct Run<'a> {
    request: Request<'static>,
    path: &'a Path,
}

impl<'a> Run<'a> {
    fn new(path: &'a Path) -> Self {
        let shown = format!(
            "file://{}//",
            crate::settings::url_text(&path.display().to_string())
        );
        Run {
            request: Request::new("MIGRATE", "", shown.into()),
            path,
        }
    }

    fn migrate(&self) -> Result<Migration, StoreError> {
        let root = Folder::root(self.path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => self.not_a_bucket(),
            _ => self.disk("open the bucket's directory", self.path, e),
        })?;
        for _ in 0..LOOKS {
            if let Some(done) = self.look(&root)? {
                return Ok(done);
            }
        }
        Err(self
            .request
            .error(StoreErrorKind::Transport)
            .with_message(format!(
                "another process changed the bucket {} each time this one waited for its lock \
                 ({LOOKS} times): is another migration of it running? Stop every process that \
                 uses the bucket, then {}",
                self.path.display(),
                self.again()
            )))
    }

    /// Look at the bucket, take the locks it calls for, and migrate it
    /// from where it stands; `None` when another run moved it on while
    /// this one waited for a lock, so it must be looked at again.
    fn look(&self, root: &Folder) -> Result<Option<Migration>, StoreError> {
        let old_kind = self.kind(root, V1_LOCK)?;
        let old_lock = match old_kind {
            Some(Kind::File) => match self.lock_old(root)? {
                Some(lock) if self.holds(root, V1_LOCK, &lock)? => Some(lock),
                _ => return Ok(None),
            },
            Some(Kind::Link) => return Err(self.link(&root.path().join(V1_LOCK))),
            Some(Kind::Folder) | None => None,
            Some(Kind::Other) => return Err(self.not_a_bucket()),
        };
        let state = self.state_folder(root)?;
        let marks = match &state {
            Some(state) => self.marks(state)?,
            None => Marks::default(),
        };
        match old_kind {
            Some(Kind::File) => {}
            Some(Kind::Folder) if state.is_some() && !marks.any() => {
                return Ok(Some(Migration {
                    already: true,
                    ..Migration::default()
                }))
            }
            // Step 5, or step 4 between its two calls.
            Some(Kind::Folder) if marks.any() => {}
            None if marks.swapping && marks.staged.is_some() => {}
            _ => return Err(self.not_a_bucket()),
        }
        // `swapping` is made only once `migrated` is: alone, it is no mark
        // a run left, and the first layout's files may not all be staged.
        if old_kind != Some(Kind::Folder) && marks.swapping && marks.staged.is_none() {
            return Err(self.unknown_marks(&state));
        }
        // Step 1 refuses what it cannot move before anything changes.
        let survey = match (&old_lock, &marks) {
            (
                Some(_),
                Marks {
                    staged: None,
                    swapping: false,
                },
            ) => {
                let survey = self.survey(root)?;
                self.refuse_keys(&survey.objects)?;
                Some(survey)
            }
            _ => None,
        };
        let (state, lock) = self.make_state(root)?;
        let _lock = self.take(lock, &state.path().join(LOCK))?;
        if self.kind(root, V1_LOCK)? != old_kind || self.marks(&state)? != marks {
            return Ok(None);
        }
        let mut done = marks.staged.unwrap_or_default();
        if let Some(survey) = survey {
            done = self.stage_all(root, &state, &survey)?;
        }
        if old_lock.is_some() && !marks.swapping {
            self.remove_old(root, &state)?;
            self.mark(&state, SWAPPING)?;
        }
        self.swap(root, &state)?;
        self.lock_folder(root)?;
        drop(old_lock);
        self.clean(&state)?;
        Ok(Some(done))
    }

    /// The store's own folder, if it is there (a link there is refused).
    fn state_folder(&self, root: &Folder) -> Result<Option<Folder>, StoreError> {
        match root.open(&[STATE_DIR]) {
            Ok(state) => Ok(Some(state)),
            Err(Resolve::Missing(_)) => Ok(None),
            // A file, a FIFO: nothing a store of either layout made.
            Err(Resolve::NotFolder(path)) => Err(self.unexpected(&path)),
            Err(e) => Err(self.unresolved(e, "open the store's folder")),
        }
    }

    /// The marks in the store's folder `state`.
    fn marks(&self, state: &Folder) -> Result<Marks, StoreError> {
        let staged = match self.kind(state, STAGED)? {
            Some(_) => Some(self.read_counts(state)?),
            None => None,
        };
        let swapping = self.kind(state, SWAPPING)?.is_some();
        Ok(Marks { staged, swapping })
    }

    /// The counts [`STAGED`] holds: each 0 where the mark does not say
    /// (it is made whole, by a rename, so only a hand can damage it).
    fn read_counts(&self, state: &Folder) -> Result<Migration, StoreError> {
        let mut raw = Vec::new();
        self.open_regular(state, STAGED, OFlags::RDONLY)?
            .take(256)
            .read_to_end(&mut raw)
            .map_err(|e| self.disk("read", &state.path().join(STAGED), e))?;
        let text = String::from_utf8_lossy(&raw);
        let count = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or(0)
        };
        Ok(Migration {
            objects: count("objects"),
            leftovers: count("leftovers"),
            already: false,
        })
    }

    /// Make the store's own folder as this layout has it, or find it: its
    /// folders, and its lock file with the attribute naming the layout
    /// (which also proves the file system keeps attributes). Returns the
    /// folder and the lock file, open; what it made is synced.
    fn make_state(&self, root: &Folder) -> Result<(Folder, File), StoreError> {
        let made = self.make_folder(root, STATE_DIR)?;
        let state = self.open(root, &[STATE_DIR])?;
        let mut made_in = false;
        for name in [TEMP_DIR, UPLOAD_DIR] {
            made_in |= self.make_folder(&state, name)?;
        }
        let lock = state
            .open_file(LOCK, OFlags::RDWR | OFlags::CREATE)
            .map_err(|e| self.file_error("create", &state, LOCK, e))?;
        self.set_attribute(&lock, &state.path().join(LOCK), MAGIC.as_bytes())?;
        if made || made_in {
            self.sync(&state)?;
        }
        if made {
            self.sync(root)?;
        }
        Ok((state, lock))
    }

    /// Make the folder `name` in `parent` unless it is there; whether it
    /// was made.
    fn make_folder(&self, parent: &Folder, name: &str) -> Result<bool, StoreError> {
        match parent.make_folder(name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match self.kind(parent, name)? {
                Some(Kind::Folder) => Ok(false),
                Some(Kind::Link) => Err(self.link(&parent.path().join(name))),
                _ => Err(self.disk("create the folder", &parent.path().join(name), e)),
            },
            Err(e) => Err(self.file_error("create the folder", parent, name, e)),
        }
    }

    /// Step 1: build the staging tree again from the start, then mark it
    /// made; the counts of the migration.
    fn stage_all(
        &self,
        root: &Folder,
        state: &Folder,
        survey: &Survey,
    ) -> Result<Migration, StoreError> {
        self.remove_tree(state, STAGING)?;
        self.make_folder(state, STAGING)?;
        let staging = self.open(state, &[STAGING])?;
        for object in &survey.objects {
            self.stage(root, object, &staging)?;
        }
        self.sync_tree(&staging)?;
        let done = Migration {
            objects: survey.objects.len(),
            leftovers: survey.leftovers.len(),
            already: false,
        };
        let text = format!("objects {}\nleftovers {}\n", done.objects, done.leftovers);
        let mut file = self.open_regular(
            state,
            STAGED_NEW,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        )?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| self.disk("write", &state.path().join(STAGED_NEW), e))?;
        state
            .rename(STAGED_NEW, state, STAGED)
            .map_err(|e| self.disk("rename", &state.path().join(STAGED_NEW), e))?;
        self.sync(state)?;
        Ok(done)
    }

    /// Write `object` into the staging tree as this layout's file: its
    /// body, and its ETag and metadata as its attribute, synced.
    fn stage(&self, root: &Folder, object: &OldFile, staging: &Folder) -> Result<(), StoreError> {
        let (header, reader, source) = self.read_old(root, object)?;
        self.write_staged(object, &header, reader, &source, staging)
    }

    /// The first layout's object file of `object`, opened, its header read
    /// (the reader is left at its body), and its path.
    fn read_old(
        &self,
        root: &Folder,
        object: &OldFile,
    ) -> Result<(Header, BufReader<File>, PathBuf), StoreError> {
        let folder = self.open(root, &object.folders)?;
        let source = folder.path().join(&object.name);
        let file = self.open_regular(&folder, &object.name, OFlags::RDONLY)?;
        let mut reader = BufReader::new(file);
        let mut raw = Vec::new();
        loop {
            let start = raw.len();
            let read = Read::take(&mut reader, MAX_HEADER.saturating_sub(start as u64))
                .read_until(b'\n', &mut raw)
                .map_err(|e| self.disk("read", &source, e))?;
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
            return Err(self
                .request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "{} is not an object file of the first layout (its header is damaged), so \
                     nothing was removed; move it out of the bucket directory, then {}",
                    source.display(),
                    self.again()
                )));
        };
        Ok((header, reader, source))
    }

    /// Write the object read from `source` (its `header`, then its body
    /// from `reader`) into the staging tree, replacing a copy staged
    /// before, synced.
    fn write_staged(
        &self,
        object: &OldFile,
        header: &Header,
        mut reader: BufReader<File>,
        source: &Path,
        staging: &Folder,
    ) -> Result<(), StoreError> {
        let segments = split_key(&object.key).map_err(|reason| self.refused_key(object, reason))?;
        let Some((name, folders)) = segments.split_last() else {
            return Err(self.refused_key(object, "the key is empty"));
        };
        let target_folder = staging
            .make(folders)
            .map_err(|e| self.unresolved(e, "create the folder"))?;
        let target = target_folder.path().join(name);
        match target_folder.remove_file(name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(self.disk("remove the copy staged before", &target, e))
            }
            _ => {}
        }
        let mut file = target_folder
            .create_new(name)
            .map_err(|e| self.file_error("create", &target_folder, name, e))?;
        io::copy(&mut reader, &mut file)
            .map_err(|e| self.disk(&format!("copy {} into", source.display()), &target, e))?;
        let attribute = encode_header(None, &header.etag, &header.metadata);
        self.set_attribute(&file, &target, &attribute)?;
        file.sync_all().map_err(|e| self.disk("sync", &target, e))
    }

    /// Whether the staging tree holds `object` with the ETag `etag`: a
    /// copy staged of the file as it is now.
    fn is_staged(&self, object: &OldFile, etag: &str, staging: &Folder) -> bool {
        let Ok(segments) = split_key(&object.key) else {
            return false;
        };
        let Some((name, folders)) = segments.split_last() else {
            return false;
        };
        let Ok(folder) = staging.open(folders) else {
            return false;
        };
        let Ok(file) = folder.open_file(name, OFlags::RDONLY | OFlags::NONBLOCK) else {
            return false;
        };
        matches!(attr::get(&file), Ok(Some(raw))
            if parse_header(&raw).is_ok_and(|staged| staged.etag == etag && staged.key.is_none()))
    }

    /// Step 2: remove the first layout's files and folders, then mark it
    /// done. An object is removed only once the staging tree holds it as
    /// it is now: one written since the staging (by a store of the first
    /// layout, between two runs), or missing from the tree (a mark left
    /// without it), is staged first, and the tree synced.
    fn remove_old(&self, root: &Folder, state: &Folder) -> Result<(), StoreError> {
        let survey = self.survey(root)?;
        self.refuse_keys(&survey.objects)?;
        self.make_folder(state, STAGING)?;
        let staging = self.open(state, &[STAGING])?;
        let mut restaged = false;
        for object in &survey.objects {
            let (header, reader, source) = self.read_old(root, object)?;
            if !self.is_staged(object, &header.etag, &staging) {
                self.write_staged(object, &header, reader, &source, &staging)?;
                restaged = true;
            }
        }
        if restaged {
            self.sync_tree(&staging)?;
            self.sync(state)?;
        }
        for file in survey.objects.iter().chain(&survey.leftovers) {
            let folder = self.open(root, &file.folders)?;
            folder
                .remove_file(&file.name)
                .map_err(|e| self.disk("remove", &folder.path().join(&file.name), e))?;
        }
        let mut folders = survey.folders;
        // The deepest first, each empty by then.
        folders.sort_unstable_by_key(|folder| std::cmp::Reverse(folder.len()));
        for folder in &folders {
            let Some((name, parents)) = folder.split_last() else {
                continue;
            };
            let parent = self.open(root, parents)?;
            parent
                .remove_folder(name)
                .map_err(|e| self.disk("remove", &parent.path().join(name), e))?;
        }
        self.sync(root)
    }

    /// Step 3: move what is left of the staging tree into the root, then
    /// remove its folder.
    fn swap(&self, root: &Folder, state: &Folder) -> Result<(), StoreError> {
        let staging = match state.open(&[STAGING]) {
            Ok(staging) => staging,
            // Moved and removed by the run that stopped.
            Err(Resolve::Missing(_)) => return Ok(()),
            Err(e) => return Err(self.unresolved(e, "open the staging tree")),
        };
        for (name, _) in self.entries(&staging)? {
            let name = self.utf8(&staging, name)?;
            staging
                .rename(&name, root, &name)
                .map_err(|e| self.disk("move into the root", &staging.path().join(&name), e))?;
        }
        self.sync(root)?;
        state
            .remove_folder(STAGING)
            .map_err(|e| self.disk("remove", staging.path(), e))?;
        self.sync(state)
    }

    /// Step 4: the first layout's lock file becomes a folder, which marks
    /// the bucket as of this layout, and which a store of the first layout
    /// cannot open to lock. (One that opened the file before, and waits for
    /// its lock, takes the removed file's lock when the run ends: the
    /// reason every process must be stopped first.)
    fn lock_folder(&self, root: &Folder) -> Result<(), StoreError> {
        let path = root.path().join(V1_LOCK);
        match self.kind(root, V1_LOCK)? {
            Some(Kind::File) => root
                .remove_file(V1_LOCK)
                .map_err(|e| self.disk("remove the first layout's lock file", &path, e))?,
            Some(Kind::Link) => return Err(self.link(&path)),
            Some(Kind::Other) => return Err(self.unexpected(&path)),
            Some(Kind::Folder) | None => {}
        }
        self.make_folder(root, V1_LOCK)?;
        self.sync(root)
    }

    /// Step 5: remove the marks.
    fn clean(&self, state: &Folder) -> Result<(), StoreError> {
        for mark in [SWAPPING, STAGED] {
            match state.remove_file(mark) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(self.disk("remove", &state.path().join(mark), e))
                }
                _ => {}
            }
        }
        self.sync(state)
    }

    /// Make the empty file `name` in `state` (a mark of a step done), and
    /// sync the folder.
    fn mark(&self, state: &Folder, name: &str) -> Result<(), StoreError> {
        self.open_regular(state, name, OFlags::WRONLY | OFlags::CREATE)?;
        self.sync(state)
    }

    /// Open the file `name` in `folder` with `flags`, without waiting: a
    /// FIFO or device someone put at the name answers at once, and is
    /// refused as no file of the migration's (nothing changed).
    fn open_regular(&self, folder: &Folder, name: &str, flags: OFlags) -> Result<File, StoreError> {
        let path = folder.path().join(name);
        let file = folder
            .open_file(name, flags | OFlags::NONBLOCK)
            .map_err(
                |e| match e.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
                    // A FIFO opened to write with no reader.
                    Some(rustix::io::Errno::NXIO) => self.unexpected(&path),
                    _ => self.file_error("open", folder, name, e),
                },
            )?;
        match file.metadata() {
            Ok(meta) if meta.is_file() => Ok(file),
            Ok(_) => Err(self.unexpected(&path)),
            Err(e) => Err(self.disk("inspect", &path, e)),
        }
    }

    /// A run found marks no run leaves (`swapping` without `migrated`):
    /// refused with nothing changed, as it cannot tell what was staged.
    fn unknown_marks(&self, state: &Option<Folder>) -> StoreError {
        let at = state.as_ref().map_or_else(
            || self.path.join(STATE_DIR),
            |state| state.path().to_path_buf(),
        );
        self.request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "{} holds the mark {SWAPPING} without {STAGED}, which no run of the migration \
                 leaves (was the folder restored or edited by hand?), so nothing was changed: \
                 the first layout's files may not all be staged; if the bucket's objects are \
                 all still its NAME.obj files, remove {SWAPPING}, then {}",
                at.display(),
                self.again()
            ))
    }

    /// The first layout's objects under `root` (with their keys), its
    /// leftover temporary and upload files and its folders; a file it
    /// never made, or a link, is refused.
    fn survey(&self, root: &Folder) -> Result<Survey, StoreError> {
        let mut survey = Survey::default();
        let mut pending = vec![(Vec::<String>::new(), String::new())];
        while let Some((folders, prefix)) = pending.pop() {
            let folder = self.open(root, &folders)?;
            for (name, kind) in self.entries(&folder)? {
                let path = folder.path().join(&name);
                let name = self.utf8(&folder, name)?;
                if kind == Kind::Link {
                    return Err(self.link(&path));
                }
                if folders.is_empty() && name == STATE_DIR && kind != Kind::Folder {
                    return Err(self.unexpected(&path));
                }
                if folders.is_empty() && (name == V1_LOCK || name == STATE_DIR) {
                    // Looked at on their own: the lock, and the store's
                    // folder (opened through no link).
                    continue;
                }
                let mut inner = folders.clone();
                inner.push(name.clone());
                match kind {
                    Kind::Folder => {
                        let Some(segment) = name.strip_suffix(".dir") else {
                            return Err(self.unexpected(&path));
                        };
                        pending.push((inner.clone(), format!("{prefix}{segment}/")));
                        survey.folders.push(inner);
                    }
                    Kind::File => {
                        let file = |key| OldFile {
                            folders: folders.clone(),
                            name: name.clone(),
                            key,
                        };
                        if let Some(object) = name.strip_suffix(".obj") {
                            survey.objects.push(file(format!("{prefix}{object}")));
                        } else if name.ends_with(".tmp") || name.ends_with(".upload") {
                            survey.leftovers.push(file(format!("{prefix}{name}")));
                        } else {
                            return Err(self.unexpected(&path));
                        }
                    }
                    Kind::Link | Kind::Other => return Err(self.unexpected(&path)),
                }
            }
        }
        survey.objects.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(survey)
    }

    /// Refuse keys this layout does not take (a segment starting with
    /// `.bucket-lease`, one too long), and keys a directory bucket cannot
    /// hold together: `a` and `a/b`.
    fn refuse_keys(&self, objects: &[OldFile]) -> Result<(), StoreError> {
        for object in objects {
            if let Err(reason) = split_key(&object.key) {
                return Err(self.refused_key(object, reason));
            }
        }
        let keys: BTreeSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
        for object in objects {
            let mut at = 0;
            while let Some(slash) = object.key[at..].find('/') {
                let folder = &object.key[..at + slash];
                if keys.contains(folder) {
                    return Err(self
                        .request
                        .error(StoreErrorKind::Rejected)
                        .permanent()
                        .with_code("KeyConflict")
                        .with_message(format!(
                            "the bucket holds the objects `{folder}` and `{}`, which a \
                             directory bucket of plain files cannot hold together (the first \
                             needs a file where the second needs a folder), so nothing was \
                             migrated; copy one of them out with the previous version and \
                             delete it, then {}",
                            object.key,
                            self.again()
                        )));
                }
                at += slash + 1;
            }
        }
        Ok(())
    }

    /// Remove the folder `name` in `parent` and all it holds, if it is
    /// there (links in it are removed, never followed).
    fn remove_tree(&self, parent: &Folder, name: &str) -> Result<(), StoreError> {
        let folder = match parent.open(&[name]) {
            Ok(folder) => folder,
            Err(Resolve::Missing(_)) => return Ok(()),
            Err(e) => return Err(self.unresolved(e, "open the folder")),
        };
        for (entry, kind) in self.entries(&folder)? {
            let entry = self.utf8(&folder, entry)?;
            if kind == Kind::Folder {
                self.remove_tree(&folder, &entry)?;
            } else {
                folder
                    .remove_file(&entry)
                    .map_err(|e| self.disk("remove", &folder.path().join(&entry), e))?;
            }
        }
        parent
            .remove_folder(name)
            .map_err(|e| self.disk("remove", folder.path(), e))
    }

    /// Sync every folder of the tree `folder`, the deepest first, so the
    /// staged files are there after a crash before the first layout's go.
    fn sync_tree(&self, folder: &Folder) -> Result<(), StoreError> {
        for (name, kind) in self.entries(folder)? {
            if kind == Kind::Folder {
                let name = self.utf8(folder, name)?;
                self.sync_tree(&self.open(folder, &[name])?)?;
            }
        }
        self.sync(folder)
    }

    /// Take the first layout's lock, waiting at most [`LOCK_WAIT`];
    /// `None` when its file is gone (another run moved the bucket on).
    fn lock_old(&self, root: &Folder) -> Result<Option<File>, StoreError> {
        match root.open_file(V1_LOCK, OFlags::RDWR) {
            Ok(file) => self.take(file, &root.path().join(V1_LOCK)).map(Some),
            // Gone, or made a folder, by another run since this one looked:
            // look again.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.file_error("open the lock file", root, V1_LOCK, e)),
        }
    }

    /// Lock `file` (the lock file at `path`), waiting at most
    /// [`LOCK_WAIT`].
    fn take(&self, file: File, path: &Path) -> Result<File, StoreError> {
        let give_up = Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(fs::TryLockError::WouldBlock) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(self.request.error(StoreErrorKind::Transport).with_message(
                        format!(
                            "another process held the bucket's lock {} for {} s; stop every \
                             process that uses the bucket, then {}",
                            path.display(),
                            LOCK_WAIT.as_secs(),
                            self.again()
                        ),
                    ))
                }
                Err(fs::TryLockError::Error(e)) => return Err(self.disk("lock", path, e)),
            }
        }
    }

    /// Whether `name` in `folder` is still the file `lock` has open.
    fn holds(&self, folder: &Folder, name: &str, lock: &File) -> Result<bool, StoreError> {
        folder
            .holds(name, lock)
            .map_err(|e| self.disk("inspect", &folder.path().join(name), e))
    }

    /// Set the attribute of the staged `file` at `path`.
    fn set_attribute(&self, file: &File, path: &Path, value: &[u8]) -> Result<(), StoreError> {
        attr::set(file, value).map_err(|e| {
            if attr::is_unsupported(&e) {
                self.with_again(self.request.no_attributes(path, &e))
            } else if e.raw_os_error() == Some(7) || e.kind() == io::ErrorKind::StorageFull {
                // E2BIG, or no room left in the file's attribute space.
                self.request
                    .error(StoreErrorKind::Rejected)
                    .with_message(format!(
                        "the file system refused an object's ETag and metadata ({} bytes) as an \
                         extended attribute of {}: {e}, so nothing was removed; copy the object \
                         out with the previous version and delete it, then {}",
                        value.len(),
                        path.display(),
                        self.again()
                    ))
            } else {
                self.disk("set the attribute of", path, e)
            }
        })
    }

    /// What `name` in `folder` is, a link not followed.
    fn kind(&self, folder: &Folder, name: &str) -> Result<Option<Kind>, StoreError> {
        folder
            .kind(name)
            .map_err(|e| self.disk("inspect", &folder.path().join(name), e))
    }

    /// The folder `segments` beneath `folder`, through no link.
    fn open<S: AsRef<str>>(&self, folder: &Folder, segments: &[S]) -> Result<Folder, StoreError> {
        let segments: Vec<&str> = segments.iter().map(AsRef::as_ref).collect();
        folder
            .open(&segments)
            .map_err(|e| self.unresolved(e, "open the folder"))
    }

    /// The names in `folder`, with their kinds.
    fn entries(&self, folder: &Folder) -> Result<Vec<(OsString, Kind)>, StoreError> {
        folder
            .entries()
            .map_err(|e| self.disk("list", folder.path(), e))
    }

    /// `name` in `folder` as text; a name that is not UTF-8 is none the
    /// first layout made, nor the migration.
    fn utf8(&self, folder: &Folder, name: OsString) -> Result<String, StoreError> {
        name.into_string()
            .map_err(|name| self.unexpected(&folder.path().join(name)))
    }

    fn sync(&self, folder: &Folder) -> Result<(), StoreError> {
        folder
            .sync()
            .map_err(|e| self.disk("sync the folder", folder.path(), e))
    }

    /// What to do once the cause of an error is fixed.
    fn again(&self) -> String {
        format!(
            "run `bucket-lease migrate-dir {}` again: it goes on where it stopped",
            shell_word(self.path)
        )
    }

    /// `error`, whose message says what to fix, followed by [`Run::again`].
    fn with_again(&self, error: StoreError) -> StoreError {
        let message = format!(
            "{}; then {}",
            error.message().unwrap_or_default(),
            self.again()
        );
        error.with_message(message)
    }

    /// `action` on `path` failed on the local disk with `error`: the
    /// migration stopped there, every object kept.
    fn disk(&self, action: &str, path: &Path, error: io::Error) -> StoreError {
        self.with_again(self.local(action, path, error))
    }

    /// [`Run::disk`]'s error, without the advice to run again.
    fn local(&self, action: &str, path: &Path, error: io::Error) -> StoreError {
        use io::ErrorKind as E;
        let (kind, advice) = match error.kind() {
            E::PermissionDenied | E::ReadOnlyFilesystem => (
                StoreErrorKind::PermissionDenied,
                "make sure this user may read and write every file and folder of the bucket",
            ),
            E::StorageFull | E::QuotaExceeded => (StoreErrorKind::Transport, "free disk space"),
            _ => (StoreErrorKind::Transport, "check the disk"),
        };
        self.request.error(kind).with_message(format!(
            "the local disk refused to {action} {}: {error}; the migration stopped there, with \
             every object kept (in its first-layout file, in the staging tree \
             {STATE_DIR}/{STAGING}, or in its place); {advice}",
            path.display(),
        ))
    }

    /// A folder beneath the root could not be opened (or made) for
    /// `action`: refused as the store refuses it (a link, another
    /// bucket), or the disk's failure.
    fn unresolved(&self, failure: Resolve, action: &str) -> StoreError {
        let error = self
            .request
            .resolve_error(failure, |path, e| self.local(action, path, e));
        self.with_again(error)
    }

    /// `action` on the file `name` in `folder` failed with `error`: a link
    /// at the name (which `O_NOFOLLOW` refuses) is refused as one.
    fn file_error(
        &self,
        action: &str,
        folder: &Folder,
        name: &str,
        error: io::Error,
    ) -> StoreError {
        let error = self
            .request
            .open_error(folder, name, error, |path, e| self.local(action, path, e));
        self.with_again(error)
    }

    /// `path` is a symbolic link, which the store never follows.
    fn link(&self, path: &Path) -> StoreError {
        self.with_again(self.request.link(path))
    }

    fn not_a_bucket(&self) -> StoreError {
        self.request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "{} is not a bucket of the first directory layout (it has no lock file \
                 {V1_LOCK}), nor one a migration stopped in; name the bucket's directory",
                self.path.display()
            ))
    }

    fn unexpected(&self, path: &Path) -> StoreError {
        self.request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "{} is not a file of the first directory layout (objects NAME.obj, folders \
                 NAME.dir), so this run changed nothing; move it out of the bucket directory, \
                 then {}",
                path.display(),
                self.again()
            ))
    }

    /// `object`'s key is one this layout refuses, for `reason`.
    fn refused_key(&self, object: &OldFile, reason: &str) -> StoreError {
        self.request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_message(format!(
                "the bucket holds the object {:?} ({}), which a bucket of plain files cannot \
                 hold: {reason}; so nothing was migrated; copy it out with the previous version \
                 and delete it, then {}",
                object.key,
                self.path
                    .join(object.folders.join("/"))
                    .join(&object.name)
                    .display(),
                self.again()
            ))
    }
}
