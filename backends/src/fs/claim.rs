//! A directory's claim to be a bucket: the store's own folder
//! (`.bucket-lease/`, with the lock, temporary files and uploads), the
//! check that the file system keeps the attributes objects need, the
//! refusal of a bucket of the first layout (naming its migration), and the
//! refusal of a bucket inside another, so one path is never two leases.

use super::layout::{LOCK, MAGIC, STATE_DIR, TEMP_DIR, UPLOAD_DIR, V1_LOCK};
use super::{attr, Request};
use crate::settings::url_text;
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Make the store's own folder in `root` (the directory's claim to be a
/// bucket) and what it holds, check that the file system keeps extended
/// attributes, then refuse `root` when a directory above it is a bucket
/// already, or one on `prefix`'s path under it: `file:///t//jobs/x`,
/// `file:///t/jobs//x` and `file:///t/jobs/x` name one path, and would
/// otherwise be three leases, each with its own lock and record. The claim
/// comes first so that of two stores opening at once, in a directory and
/// in one inside it, at least one sees the other; a refused claim is taken
/// back. A directory this process may not write to is still opened (to
/// read it) without the claim.
pub(super) fn claim_as_bucket(
    request: &Request<'_>,
    root: &Path,
    prefix: &str,
) -> Result<(), StoreError> {
    refuse_first_layout(request, root)?;
    let state = root.join(STATE_DIR);
    let mut made = Vec::new();
    let claimed = (|| {
        make(request, &state, &mut made, Kind::Folder)?;
        make(request, &state.join(TEMP_DIR), &mut made, Kind::Folder)?;
        make(request, &state.join(UPLOAD_DIR), &mut made, Kind::Folder)?;
        make(request, &state.join(LOCK), &mut made, Kind::File)?;
        // The first layout's lock file, as a folder: a store of that
        // layout (an older bucket-lease) fails to open it, so it never
        // writes in a bucket of this one.
        make(request, &root.join(V1_LOCK), &mut made, Kind::Folder)?;
        // Again, now that the folder is made or found: a store of the
        // first layout that made its lock file there since the first look
        // holds the name, and this open must not go on beside it.
        refuse_first_layout(request, root)?;
        check_attributes(request, &state.join(LOCK))?;
        nested_bucket(request, root, prefix)
    })();
    if claimed.is_err() {
        // What the claim made a moment ago goes (no write ever used it),
        // so the directory stays free to be named right.
        for path in made.iter().rev() {
            let _ = fs::remove_dir(path).or_else(|_| fs::remove_file(path));
        }
    }
    claimed
}

enum Kind {
    Folder,
    File,
}

/// Make the folder or empty file `path` unless it is there, noting it in
/// `made` when this call made it. A path this process may not write is left
/// to be read as it is.
fn make(
    request: &Request<'_>,
    path: &Path,
    made: &mut Vec<PathBuf>,
    kind: Kind,
) -> Result<(), StoreError> {
    let result = match kind {
        Kind::Folder => fs::create_dir(path),
        Kind::File => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map(drop),
    };
    match result {
        Ok(()) => {
            made.push(path.to_path_buf());
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::AlreadyExists
                    | io::ErrorKind::PermissionDenied
                    | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(request.io_error("create", path, e)),
    }
}

/// Refuse a file system that keeps no user extended attributes, where
/// objects keep their ETags: the lock file carries one, naming the layout.
fn check_attributes(request: &Request<'_>, lock: &Path) -> Result<(), StoreError> {
    let file = match File::open(lock) {
        Ok(file) => file,
        // A bucket this process cannot read: its reads say so.
        Err(_) => return Ok(()),
    };
    let found = match attr::get(&file) {
        Err(e) if attr::is_unsupported(&e) => return Err(request.no_attributes(lock, &e)),
        found => found,
    };
    if matches!(found, Ok(Some(_))) {
        return Ok(());
    }
    let Ok(file) = OpenOptions::new().write(true).open(lock) else {
        return Ok(());
    };
    match attr::set(&file, MAGIC.as_bytes()) {
        Err(e) if attr::is_unsupported(&e) => Err(request.no_attributes(lock, &e)),
        _ => Ok(()),
    }
}

/// Refuse a bucket of the first layout (its lock file a file): its objects
/// are not plain files, and a store of this layout would not see them.
fn refuse_first_layout(request: &Request<'_>, root: &Path) -> Result<(), StoreError> {
    match fs::symlink_metadata(root.join(V1_LOCK)) {
        Ok(meta) if !meta.is_dir() => Err(request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_code("FirstLayout")
            .with_message(format!(
                "the directory {root} is a bucket of bucket-lease's first directory layout \
                 (objects as NAME.obj files starting with a header, folders as NAME.dir; it \
                 holds {V1_LOCK} as a file), which this version neither reads nor writes; stop \
                 every process that uses it, then migrate it in place with `bucket-lease \
                 migrate-dir {root}`: each object becomes a plain file holding its bytes, with \
                 its ETag and metadata kept",
                root = root.display()
            ))),
        _ => Ok(()),
    }
}

/// Whether the directory `dir` is a bucket's: it holds the store's own
/// folder, or the first layout's lock file.
pub(super) fn is_bucket(dir: &Path) -> bool {
    dir.join(STATE_DIR).is_dir() || dir.join(V1_LOCK).exists()
}

/// A bucket above `root`, or one on `prefix`'s path under it, if any.
fn nested_bucket(request: &Request<'_>, root: &Path, prefix: &str) -> Result<(), StoreError> {
    let real = fs::canonicalize(root).map_err(|e| request.io_error("resolve", root, e))?;
    for outer in real.ancestors().skip(1) {
        if is_bucket(outer) {
            let rest = real.strip_prefix(outer).unwrap_or(&real);
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the directory {} is inside {}, a bucket already (it holds {STATE_DIR}), \
                     and one path must have one spelling, or it would be two leases; name it \
                     file://{}//{} (or, if {} is no longer a bucket, remove its {STATE_DIR} \
                     and {V1_LOCK})",
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
        if is_bucket(&inner) {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the directory {} on the prefix's path is a bucket of its own (it holds \
                     {STATE_DIR}), so this URL would be a second lease on the same path; name \
                     it as that bucket's users do, file://{}//{}",
                    inner.display(),
                    url_text(&inner.display().to_string()),
                    url_text(&segments[at + 1..].join("/"))
                )));
        }
    }
    Ok(())
}
