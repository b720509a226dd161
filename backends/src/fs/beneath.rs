//! Folders and files beneath the bucket's directory, reached without
//! following a link: what keeps the directory store inside its bucket when
//! others write in the tree too (a shared disk, a group-writable folder).
//!
//! What it promises:
//!
//! - The bucket's directory itself is opened by the path its user named
//!   (links in that path are the user's choice, and are followed); every
//!   name under it is looked up from that open directory, one folder at a
//!   time, and never through a symbolic link. A link met on the way is an
//!   error naming it ([`Resolve::Link`]), so no key, prefix or file of the
//!   store's own leads out of the bucket or into another bucket.
//! - On Linux the whole path is resolved by one `openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (5.6
//!   and later); elsewhere, or where it is refused (an older kernel, a
//!   seccomp filter), by a walk from the directory with `O_NOFOLLOW` on
//!   each name. A failed `openat2` is looked at again by the walk, which
//!   names the link or the file in the way.
//! - Files are opened, made, renamed and removed relative to their open
//!   folder (`openat`, `renameat`, `unlinkat`), with `O_NOFOLLOW`: a link
//!   at a file's own name is not followed either, and a file the store
//!   makes is made exclusively (`O_CREAT | O_EXCL`).

use bucket_lease_core::mutant::StoreMutant;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// What a name in a folder is, as `lstat` sees it (a link is not
/// followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Folder,
    Link,
    /// A FIFO, a socket, a device.
    Other,
}

impl Kind {
    fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Folder,
            FileType::Symlink => Kind::Link,
            _ => Kind::Other,
        }
    }
}

/// Why a folder beneath the bucket's directory could not be opened, each
/// with the path it stopped at (for messages).
#[derive(Debug)]
pub(super) enum Resolve {
    /// A name on the way is a symbolic link, which is never followed.
    Link(PathBuf),
    /// A name on the way is a file (or a FIFO, a socket), not a folder.
    NotFolder(PathBuf),
    /// A name on the way is not there.
    Missing(PathBuf),
    /// A folder on the way is another bucket's directory.
    Bucket(PathBuf),
    /// The file system failed.
    Io(PathBuf, io::Error),
}

/// A folder of the bucket, open: every name is looked up in it, never
/// through a link. `path` is where it is, for messages only; no path is
/// ever opened again by its text.
#[derive(Debug)]
pub(super) struct Folder {
    fd: OwnedFd,
    path: PathBuf,
}

/// The flags every folder is opened with: to read (a folder must be open
/// to be synced), never through a link at its own name.
fn folder_flags() -> OFlags {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if StoreMutant::DirFolderLinksFollowed.on() {
        return flags;
    }
    flags | OFlags::NOFOLLOW
}

impl Folder {
    /// The bucket's directory at `root`, by the path its user named.
    pub(super) fn root(root: &Path) -> io::Result<Folder> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(root, flags, Mode::empty())?;
        Ok(Folder {
            fd,
            path: root.to_path_buf(),
        })
    }

    /// Where the folder is.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The folder `segments` beneath this one, each a plain name.
    pub(super) fn open(&self, segments: &[&str]) -> Result<Folder, Resolve> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(opened) = self.open_in_one(segments) {
            return opened;
        }
        self.walk(segments, false, None)
    }

    /// [`Folder::open`] by the walk, refusing a folder on the way (this
    /// one left out) that holds a name `own`: a folder of another bucket's
    /// own, which makes the folder that bucket's ([`Resolve::Bucket`]).
    pub(super) fn open_outside(&self, segments: &[&str], own: &str) -> Result<Folder, Resolve> {
        self.walk(segments, false, Some(own))
    }

    /// [`Folder::open`], making each folder that is missing on the way
    /// (as `mkdir -p` does, but never through a link).
    pub(super) fn make(&self, segments: &[&str]) -> Result<Folder, Resolve> {
        // Opened at once where it is there, as it is for every write but
        // a key's first.
        match self.open(segments) {
            Err(Resolve::Missing(_)) => self.walk(segments, true, None),
            opened => opened,
        }
    }

    /// One `openat2` for the whole path, beneath this folder and through
    /// no link: `None` when the kernel refuses the call itself (older
    /// than 5.6, or filtered), so the walk does it. A failure on the way
    /// is looked at again by the walk, which names where it stopped.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn open_in_one(&self, segments: &[&str]) -> Option<Result<Folder, Resolve>> {
        use rustix::fs::ResolveFlags;
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Set once the kernel refused `openat2` itself: not asked again.
        static REFUSED: AtomicBool = AtomicBool::new(false);
        if REFUSED.load(Ordering::Relaxed)
            || forced_walk()
            || StoreMutant::DirFolderLinksFollowed.on()
        {
            return None;
        }
        let joined = if segments.is_empty() {
            ".".to_string()
        } else {
            segments.join("/")
        };
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.fd, &joined, folder_flags(), Mode::empty(), resolve) {
            Ok(fd) => {
                let mut path = self.path.clone();
                path.extend(segments);
                Some(Ok(Folder { fd, path }))
            }
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                REFUSED.store(true, Ordering::Relaxed);
                None
            }
            // Where it stopped, and why, the walk tells.
            Err(_) => None,
        }
    }

    /// Open (or, with `make`, make) each of `segments` in turn from this
    /// folder, with `O_NOFOLLOW`; with `own`, refuse a folder opened on
    /// the way that holds that name ([`Resolve::Bucket`]).
    fn walk(&self, segments: &[&str], make: bool, own: Option<&str>) -> Result<Folder, Resolve> {
        let mut fd = rustix::fs::openat(&self.fd, ".", folder_flags(), Mode::empty())
            .map_err(|e| Resolve::Io(self.path.clone(), e.into()))?;
        let mut path = self.path.clone();
        for segment in segments {
            path.push(segment);
            // One name each, going down only (keys refuse these already).
            if matches!(*segment, "" | "." | "..") || segment.contains('/') {
                let invalid = io::Error::new(io::ErrorKind::InvalidInput, "not one folder's name");
                return Err(Resolve::Io(path, invalid));
            }
            if make {
                match rustix::fs::mkdirat(&fd, *segment, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(rustix::io::Errno::NOENT) => return Err(Resolve::Missing(path)),
                    Err(e) => return Err(classify(fd.as_fd(), segment, path, e)),
                }
            }
            fd = match rustix::fs::openat(&fd, *segment, folder_flags(), Mode::empty()) {
                Ok(next) => next,
                Err(e) => return Err(classify(fd.as_fd(), segment, path, e)),
            };
            if let Some(own) = own {
                match rustix::fs::statat(&fd, own, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(_) => return Err(Resolve::Bucket(path)),
                    Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(Resolve::Io(path, e.into())),
                }
            }
        }
        Ok(Folder { fd, path })
    }

    /// What `name` in this folder is, not following a link; `None` when
    /// nothing is there.
    pub(super) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Kind::of(FileType::from_raw_mode(stat.st_mode)))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `name` in this folder is the very file `file` has open (the
    /// same device and inode), a link at the name not followed: `false`
    /// when nothing, or another file, is there now.
    pub(super) fn holds(&self, name: &str, file: &File) -> io::Result<bool> {
        let open = rustix::fs::fstat(file)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(at) => Ok(at.st_dev == open.st_dev && at.st_ino == open.st_ino),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Open the file `name` in this folder with `flags` (`O_NOFOLLOW` and
    /// `O_CLOEXEC` added): a link at the name is not followed, and fails
    /// with `ELOOP`.
    pub(super) fn open_file(&self, name: &str, flags: OFlags) -> io::Result<File> {
        let mut flags = flags | OFlags::CLOEXEC;
        if !StoreMutant::DirFileLinksFollowed.on() {
            flags |= OFlags::NOFOLLOW;
        }
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o666))?;
        Ok(File::from(fd))
    }

    /// Make the file `name` in this folder, to write: exclusively, so
    /// nothing already at the name (a link planted there included) is
    /// opened.
    pub(super) fn create_new(&self, name: &str) -> io::Result<File> {
        self.open_file(name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL)
    }

    /// Make the folder `name` in this folder (`AlreadyExists` when
    /// something is at the name).
    pub(super) fn make_folder(&self, name: &str) -> io::Result<()> {
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777)).map_err(Into::into)
    }

    /// Rename `name` in this folder to `to_name` in `to`, replacing what
    /// is there (a link at `to_name` is replaced, never followed).
    pub(super) fn rename(&self, name: &str, to: &Folder, to_name: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, name, &to.fd, to_name).map_err(Into::into)
    }

    /// Remove the file (or link) `name` from this folder.
    pub(super) fn remove_file(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(Into::into)
    }

    /// Remove the folder `name` from this folder, if it is empty.
    pub(super) fn remove_folder(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).map_err(Into::into)
    }

    /// The names in this folder (`.` and `..` left out), each with its
    /// kind as `lstat` sees it.
    pub(super) fn entries(&self) -> io::Result<Vec<(OsString, Kind)>> {
        let mut entries = Vec::new();
        // `read_from` reads through a descriptor of its own, opened anew,
        // so this folder's position is never moved.
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsString::from_vec(name.to_vec());
            // The kind the listing gave, or, where the file system gives
            // none, the one `lstat` does.
            let kind = match entry.file_type() {
                FileType::Unknown => match name.to_str().map(|n| self.kind(n)) {
                    Some(Ok(Some(kind))) => kind,
                    Some(Ok(None)) => continue,
                    Some(Err(e)) => return Err(e),
                    None => Kind::Other,
                },
                file_type => Kind::of(file_type),
            };
            entries.push((name, kind));
        }
        Ok(entries)
    }

    /// Sync the folder, so a rename or removal in it survives a crash.
    pub(super) fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(Into::into)
    }
}

/// Why opening `segment` in the folder `dir` (at `path` with `segment`)
/// failed with `errno`: a link, a file in the way, nothing there, or a
/// failure of the file system. `O_NOFOLLOW` answers `ELOOP` for a link on
/// Linux and macOS (`EMLINK` on FreeBSD), and `O_DIRECTORY` `ENOTDIR` for
/// a file; `lstat` tells them apart wherever the answer is unclear.
fn classify(
    dir: BorrowedFd<'_>,
    segment: &str,
    path: PathBuf,
    errno: rustix::io::Errno,
) -> Resolve {
    use rustix::io::Errno;
    if errno == Errno::NOENT {
        return Resolve::Missing(path);
    }
    match rustix::fs::statat(dir, segment, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match Kind::of(FileType::from_raw_mode(stat.st_mode)) {
            Kind::Link => Resolve::Link(path),
            Kind::File | Kind::Other => Resolve::NotFolder(path),
            Kind::Folder => Resolve::Io(path, errno.into()),
        },
        Err(Errno::NOENT) => Resolve::Missing(path),
        Err(_) => Resolve::Io(path, errno.into()),
    }
}

/// Whether this thread's tests asked for the walk, so that it is tested
/// on a kernel that has `openat2`.
#[cfg(test)]
fn forced_walk() -> bool {
    FORCE_WALK.with(std::cell::Cell::get)
}

#[cfg(not(test))]
#[inline(always)]
fn forced_walk() -> bool {
    false
}

#[cfg(test)]
thread_local! {
    /// Set by a test to resolve by the walk alone on this thread.
    pub(super) static FORCE_WALK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
