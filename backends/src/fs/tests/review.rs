//! Defects a review of the plain-file layout (6c6550e) found, each shown
//! by a test that failed on that commit: the migration and keys this
//! layout refuses, a first-layout lock file made while a store opens, and
//! files that cannot be opened as files.

use super::migrate::old_object;
use super::*;

fn old_bucket_with(keys: &[(&str, &str, &[u8])]) -> TempDir {
    let dir = TempDir::new();
    fs::write(dir.0.join(".bucket-lease.lock"), b"").unwrap();
    for (key, etag, body) in keys {
        old_object(&dir.0, key, etag, &[], body);
    }
    dir
}

/// The first layout took any segment but `.`/`..`/empty, so the key
/// `.bucket-lease.lock` was an object there (`.bucket-lease.lock.obj`).
/// The migration stages it, renames it over the first layout's lock
/// file (step 3), then removes that path (step 4): the object is gone,
/// and the migration answers success counting it.
#[test]
fn review_migration_never_loses_an_object_keyed_like_the_old_lock() {
    let dir = old_bucket_with(&[
        (".bucket-lease.lock", "\"e1\"", b"precious"),
        ("k", "\"e2\"", b"other"),
    ]);
    let answer = DirStore::migrate_first_layout(&dir.0);
    // Either it refuses with nothing changed (the key cannot be held by this
    // layout), or the object's bytes are still somewhere in the bucket.
    match answer {
        Err(_) => assert!(
            dir.0.join(".bucket-lease.lock.obj").is_file(),
            "refused, but the object's first-layout file is gone"
        ),
        Ok(done) => {
            let found = walk(&dir.0)
                .into_iter()
                .any(|file| fs::read(&file).is_ok_and(|b| b == b"precious"));
            assert!(
                found,
                "the migration answered {done:?} but the object `.bucket-lease.lock` (bytes \
                 `precious`) is nowhere in {}: {:?}",
                dir.0.display(),
                walk(&dir.0)
            );
        }
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

/// The old key `.bucket-lease` (`.bucket-lease.obj`): the survey takes it,
/// step 2 removes the first layout's files, and step 3 fails renaming the
/// staged file over the store's own folder; every later run fails the
/// same way, and the bucket stays refused (FirstLayout) for ever. The doc
/// promises that keys it cannot take stop it "with nothing changed".
#[test]
fn review_migration_of_an_old_key_this_layout_refuses_changes_nothing_or_finishes() {
    let dir = old_bucket_with(&[(".bucket-lease", "\"e1\"", b"one"), ("k", "\"e2\"", b"two")]);
    match DirStore::migrate_first_layout(&dir.0) {
        Err(e) => assert!(
            dir.0.join("k.obj").is_file() && dir.0.join(".bucket-lease.obj").is_file(),
            "the migration failed ({e}) after removing the first layout's files: {:?}",
            names(&dir.0)
        ),
        // Finished: the bucket opens.
        Ok(_) => drop(DirStore::open(&dir.0).unwrap()),
    }
}

/// The marker `.bucket-lease/migrated` lists the staging tree's top
/// entries one a line; a key with a new line in its first segment (valid
/// in both layouts) makes a name that is not in the staging tree, so the
/// very first run believes step 3 began, skips step 2, and leaves every
/// first-layout file (`k.obj`, leftovers) in the migrated bucket.
#[test]
fn review_migration_removes_the_first_layout_files_whatever_the_keys() {
    let dir = old_bucket_with(&[("x\ny", "\"e1\"", b"one"), ("k", "\"e2\"", b"two")]);
    fs::write(dir.0.join("k.abcd.upload"), b"part").unwrap();
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!(
        listing(&dir.0),
        ["k", "x\ny"],
        "first-layout files left in the migrated bucket ({done:?})"
    );
}

/// A key with a segment starting `.bucket-lease` (valid in the first
/// layout) is migrated to a file no request of this layout can name:
/// the object is kept on the disk but lost to the store (GET refuses the
/// key), where the doc promises each object keeps its bytes, ETag and
/// metadata, or a refusal with nothing changed.
#[test]
fn review_migration_keeps_every_object_readable() {
    let dir = old_bucket_with(&[(".bucket-lease-notes", "\"e1\"", b"one")]);
    let migrated = DirStore::migrate_first_layout(&dir.0);
    if migrated.is_ok() {
        let store = DirStore::open(&dir.0).unwrap();
        let got = store.get(".bucket-lease-notes", None);
        assert!(
            got.is_ok(),
            "migrated, but the object cannot be read: {}",
            got.unwrap_err()
        );
    }
}

/// An older bucket-lease (first layout) claims a directory by making
/// `.bucket-lease.lock` with `create_new` and then locks that file. A
/// store of this layout opening the same fresh directory at the same
/// moment checks for that file (refuse_first_layout), then makes its own
/// folders, and then makes `.bucket-lease.lock` as a folder, taking an
/// `AlreadyExists` as success without looking at what is there. When the
/// old version's file lands between the two, both open: each writes under
/// its own lock (`.bucket-lease/lock` vs `.bucket-lease.lock`), so two
/// create-only writes of the lease record (`LEASE` and `LEASE.obj`) both
/// win. A store that opened must leave `.bucket-lease.lock` a folder.
#[test]
fn review_an_open_never_accepts_a_first_layout_lock_file_made_meanwhile() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc as StdArc;
    for round in 0..3000 {
        let dir = TempDir::new();
        let go = StdArc::new(AtomicBool::new(false));
        let old = {
            let (go, lock) = (go.clone(), dir.0.join(".bucket-lease.lock"));
            // Delay the old version's claim by a varying few microseconds.
            let spin = round % 200;
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {}
                let start = Instant::now();
                while start.elapsed() < Duration::from_nanos(spin * 500) {}
                // The first layout's claim.
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&lock)
                    .is_ok()
            })
        };
        go.store(true, Ordering::Release);
        let opened = DirStore::open(&dir.0);
        let old_claimed = old.join().unwrap();
        if let Ok(store) = opened {
            let lock = dir.0.join(".bucket-lease.lock");
            if old_claimed || !lock.is_dir() {
                // The old version's claim holds: it locks this file and
                // writes `LEASE.obj`; this store writes `LEASE`.
                let old_lock = File::options().write(true).open(&lock).unwrap();
                old_lock.try_lock().unwrap();
                put(&store, "LEASE", b"new holder", PutMode::Create).unwrap();
                panic!(
                    "round {round}: the store opened while {} is a file (the first layout's \
                     lock, held now by an old version), and its create-only write won under \
                     its own lock",
                    lock.display()
                );
            }
        }
    }
}

/// Files put in the bucket by hand that are no object: a FIFO is refused
/// at once as "not a regular file" (Rejected), but a Unix socket or a
/// symlink loop answers Transport (retryable, "may have taken effect"),
/// so a lease retries a read that can never succeed. The module docs: a
/// file that is not a regular file is refused as no object.
#[test]
fn review_a_socket_or_a_symlink_loop_in_the_bucket_is_refused_not_a_transport_failure() {
    let (dir, store) = store();
    let _socket = std::os::unix::net::UnixListener::bind(dir.0.join("sock")).unwrap();
    std::os::unix::fs::symlink("loop", dir.0.join("loop")).unwrap();
    for key in ["sock", "loop"] {
        let e = store.get(key, None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "GET {key}: {e}");
    }
}
