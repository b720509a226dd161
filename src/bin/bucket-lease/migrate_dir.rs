//! `bucket-lease migrate-dir PATH`: move a directory bucket of the first
//! layout (`NAME.obj` files with a header, `NAME.dir` folders) to plain
//! files, in place ([`DirStore::migrate_first_layout`]).
//!
//! What it promises: every object keeps its bytes, ETag and metadata, so a
//! lease held across the migration keeps its version; it refuses with
//! nothing changed when the directory holds what it cannot move (exit 78,
//! naming it); stopped anywhere (a failure of the disk, a kill, a crash),
//! run again it goes on where it stopped, as its errors say; on a bucket
//! of the plain-file layout it says so and exits 0.

use crate::args::{require_url, set_url, Arg, Args, Opt, Spec};
use crate::cli::{exit, store_error_code, Failure};

/// What `migrate-dir` does, for its help and the man page.
const ABOUT: &str = "\
Moves the directory bucket at PATH (a path, or a file:// URL naming the
bucket's directory) from bucket-lease's first layout, where each object
was a NAME.obj file starting with a header, to plain files: the object
`nightly/parts/1-0` becomes the file PATH/nightly/parts/1-0 holding its
bytes, with its ETag and metadata in the extended attribute
user.bucket-lease. Versions are kept, so leases stay as they were. Stop
every process that uses the bucket first: the migration holds the
bucket's lock, and waits for it at most 30s. It changes nothing when the
bucket holds a file the first layout never made, a symbolic link, or keys
a file system cannot hold together (`a` and `a/b`): it names them (exit
78). Stopped anywhere (a failure of the disk, a kill, a crash), run it
again: it goes on where it stopped.
";

/// `migrate-dir` has no options of its own.
const OPTIONS: &[Opt<()>] = &[];

/// `migrate-dir`'s documentation.
pub fn spec() -> Spec {
    Spec::new(
        "migrate-dir",
        "move a directory bucket of the first layout to plain files, in place.",
        "bucket-lease migrate-dir PATH",
        ABOUT,
        "",
        OPTIONS,
        true,
    )
}

/// Parse and run `migrate-dir`.
///
/// # Errors
///
/// A usage failure, or the migration's refusal or failure.
pub fn main(mut p: Args) -> Result<u8, Failure> {
    let mut path = None;
    while let Some(arg) = p.next(OPTIONS, true)? {
        match arg {
            Arg::Help => return Ok(crate::args::print_help(&spec())),
            Arg::Opt((), _) => unreachable!("the table is empty"),
            Arg::Word(word) => set_url(p.command, &mut path, word)?,
        }
    }
    let path = require_url(p.command, path)?;
    p.init_logging();
    migrate(p.command, &path)
}

#[cfg(feature = "fs")]
fn migrate(command: &'static str, given: &str) -> Result<u8, Failure> {
    use bucket_lease::backends::config::StoreUrl;
    use bucket_lease::backends::fs::DirStore;
    // A URL is read as the store reads one (percent-decoded, `localhost`
    // taken, the directory ending at the first `//`); a path as it is.
    let dir = if given.starts_with("file://") {
        match StoreUrl::parse(given) {
            Ok(StoreUrl::File { dir, prefix }) if prefix.is_empty() => dir,
            Ok(_) => {
                return Err(Failure::usage(
                    command,
                    format!("{given:?} names a prefix; name the bucket's directory alone"),
                ))
            }
            Err(e) => return Err(Failure::usage(command, e.to_string())),
        }
    } else {
        std::path::PathBuf::from(given)
    };
    let dir = dir.as_path();
    match DirStore::migrate_first_layout(dir) {
        Ok(done) if done.already => {
            println!(
                "{} is a bucket of plain files already; nothing to do",
                dir.display()
            );
            Ok(exit::OK)
        }
        Ok(done) => {
            println!(
                "migrated {} objects in {} to plain files (removed {} unfinished temporary \
                 and upload files)",
                done.objects,
                dir.display(),
                done.leftovers
            );
            Ok(exit::OK)
        }
        Err(e) => Err(Failure::new(
            store_error_code(&e),
            format!("migrate-dir: {e}"),
        )),
    }
}

#[cfg(not(feature = "fs"))]
fn migrate(command: &'static str, _given: &str) -> Result<u8, Failure> {
    Err(Failure::new(
        exit::CONFIG,
        format!("{command}: this build has no directory store (build with the `fs` feature)"),
    ))
}
