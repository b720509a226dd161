//! A directory's claim to be a bucket: its lock file, and the refusal of a
//! bucket inside another, so one path is never two leases.

use super::{Request, LOCK_FILE};
use crate::settings::url_text;
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

/// Make the lock file in `root` (the directory's claim to be a bucket),
/// then refuse `root` when a directory above it is a bucket already, or
/// one on `prefix`'s path under it: `file:///t//jobs/x`,
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
