//! A directory's claim to be a bucket: the store's own folder
//! (`.bucket-lease/`, with the lock, temporary files and uploads), the
//! check that the file system keeps the attributes objects need, the
//! refusal of a bucket of the first layout (naming its migration), and the
//! refusal of a bucket inside another, so one path is never two leases.

use super::beneath::{Folder, Kind, Resolve};
use super::layout::{LOCK, MAGIC, STATE_DIR, TEMP_DIR, UPLOAD_DIR, V1_LOCK};
use super::{attr, shell_word, Request};
use crate::settings::url_text;
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use rustix::fs::OFlags;
use std::fs;
use std::io;
use std::path::Path;

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
    let dir =
        Folder::root(root).map_err(|e| request.io_error("open the bucket's directory", root, e))?;
    refuse_first_layout(request, &dir)?;
    let mut made = Vec::new();
    let claimed = (|| {
        // Each made in its folder, opened beneath the root: a link planted
        // at `.bucket-lease` (to another bucket's, say) is refused.
        for (folder, name, kind) in [
            (&[][..], STATE_DIR, Kind::Folder),
            (&[STATE_DIR][..], TEMP_DIR, Kind::Folder),
            (&[STATE_DIR][..], UPLOAD_DIR, Kind::Folder),
            (&[STATE_DIR][..], LOCK, Kind::File),
            // The first layout's lock file, as a folder: a store of that
            // layout (an older bucket-lease) fails to open it, so it never
            // writes in a bucket of this one.
            (&[][..], V1_LOCK, Kind::Folder),
        ] {
            make(request, &dir, folder, name, kind, &mut made)?;
        }
        // Again, now that the folder is made or found: a store of the
        // first layout that made its lock file there since the first look
        // holds the name, and this open must not go on beside it.
        refuse_first_layout(request, &dir)?;
        check_attributes(request, &dir)?;
        nested_bucket(request, root, &dir, prefix)
    })();
    if claimed.is_err() {
        // What the claim made a moment ago goes (no write ever used it),
        // so the directory stays free to be named right.
        for (folder, name) in made.iter().rev() {
            if let Ok(folder) = dir.open(folder) {
                let _ = folder
                    .remove_folder(name)
                    .or_else(|_| folder.remove_file(name));
            }
        }
    }
    claimed
}

/// Make the folder or empty file `name` in the folder `folder` beneath
/// `root` unless it is there, noting it in `made` when this call made it.
/// A path this process may not write is left to be read as it is; a link
/// on the way, or at the name, is refused.
fn make<'a>(
    request: &Request<'_>,
    root: &Folder,
    folder: &'a [&'a str],
    name: &'a str,
    kind: Kind,
    made: &mut Vec<(&'a [&'a str], &'a str)>,
) -> Result<(), StoreError> {
    let parent = root
        .open(folder)
        .map_err(|e| request.unresolved(e, "open the store's folder"))?;
    let result = match kind {
        Kind::Folder => parent.make_folder(name),
        _ => parent.create_new(name).map(drop),
    };
    match result {
        Ok(()) => {
            made.push((folder, name));
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match parent.kind(name) {
            Ok(Some(Kind::Link)) => Err(request.link(&parent.path().join(name))),
            _ => Ok(()),
        },
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(request.io_error("create", &parent.path().join(name), e)),
    }
}

/// Refuse a file system that keeps no user extended attributes, where
/// objects keep their ETags: the lock file carries one, naming the layout.
fn check_attributes(request: &Request<'_>, root: &Folder) -> Result<(), StoreError> {
    let Ok(state) = root.open(&[STATE_DIR]) else {
        // A bucket this process cannot read: its reads say so.
        return Ok(());
    };
    let lock = state.path().join(LOCK);
    // Without waiting: a FIFO someone put there answers at once, and is
    // refused as no lock file.
    let file = match state.open_file(LOCK, OFlags::RDONLY | OFlags::NONBLOCK) {
        Ok(file) => file,
        Err(e) if matches!(state.kind(LOCK), Ok(Some(Kind::Link))) => {
            return Err(request.file_error("open the lock file", &state, LOCK, e))
        }
        Err(_) => return Ok(()),
    };
    if !file.metadata().is_ok_and(|meta| meta.is_file()) {
        return Err(request.not_a_file(&lock));
    }
    let found = match attr::get(&file) {
        Err(e) if attr::is_unsupported(&e) => return Err(request.no_attributes(&lock, &e)),
        found => found,
    };
    if matches!(found, Ok(Some(_))) {
        return Ok(());
    }
    let Ok(file) = state.open_file(LOCK, OFlags::WRONLY) else {
        return Ok(());
    };
    match attr::set(&file, MAGIC.as_bytes()) {
        Err(e) if attr::is_unsupported(&e) => Err(request.no_attributes(&lock, &e)),
        _ => Ok(()),
    }
}

/// Refuse a bucket of the first layout (its lock file a file): its objects
/// are not plain files, and a store of this layout would not see them.
fn refuse_first_layout(request: &Request<'_>, root: &Folder) -> Result<(), StoreError> {
    match root.kind(V1_LOCK) {
        Ok(Some(Kind::File)) => Err(request
            .error(StoreErrorKind::Rejected)
            .permanent()
            .with_code("FirstLayout")
            .with_message(format!(
                "the directory {root} is a bucket of bucket-lease's first directory layout \
                 (objects as NAME.obj files starting with a header, folders as NAME.dir; it \
                 holds {V1_LOCK} as a file), which this version neither reads nor writes; stop \
                 every process that uses it, then migrate it in place with `bucket-lease \
                 migrate-dir {word}`: each object becomes a plain file holding its bytes, with \
                 its ETag and metadata kept",
                root = root.path().display(),
                word = shell_word(root.path()),
            ))),
        Ok(Some(Kind::Link)) => Err(request.link(&root.path().join(V1_LOCK))),
        Ok(Some(Kind::Other)) => Err(request.not_a_file(&root.path().join(V1_LOCK))),
        _ => Ok(()),
    }
}

/// Whether the directory `dir` is a bucket's: it holds the store's own
/// folder, or the first layout's lock file.
fn is_bucket(dir: &Path) -> bool {
    dir.join(STATE_DIR).is_dir() || dir.join(V1_LOCK).exists()
}

/// Whether the open folder `dir` is a bucket's: it holds the store's own
/// folder, or the first layout's lock file.
fn holds_bucket(dir: &Folder) -> bool {
    matches!(dir.kind(STATE_DIR), Ok(Some(Kind::Folder)))
        || matches!(dir.kind(V1_LOCK), Ok(Some(_)))
}

/// A bucket above `root` (at `path`), or one on `prefix`'s path under it,
/// if any; a link on `prefix`'s path is refused, so the path under the
/// root is the real one.
fn nested_bucket(
    request: &Request<'_>,
    path: &Path,
    root: &Folder,
    prefix: &str,
) -> Result<(), StoreError> {
    let real = fs::canonicalize(path).map_err(|e| request.io_error("resolve", path, e))?;
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
    let segments: Vec<&str> = prefix.split('/').filter(|s| !s.is_empty()).collect();
    for at in 0..segments.len() {
        let inner = match root.open(&segments[..=at]) {
            Ok(inner) => inner,
            // Nothing there yet (a bucket made there later sees this one
            // above it), or a file, which no write can go under.
            Err(Resolve::Missing(_) | Resolve::NotFolder(_)) => break,
            Err(other) => return Err(request.unresolved(other, "open the prefix's folder")),
        };
        let inner_path = inner.path();
        if holds_bucket(&inner) {
            return Err(request
                .error(StoreErrorKind::Rejected)
                .permanent()
                .with_message(format!(
                    "the directory {} on the prefix's path is a bucket of its own (it holds \
                     {STATE_DIR}), so this URL would be a second lease on the same path; name \
                     it as that bucket's users do, file://{}//{}",
                    inner_path.display(),
                    url_text(&inner_path.display().to_string()),
                    url_text(&segments[at + 1..].join("/"))
                )));
        }
    }
    Ok(())
}
