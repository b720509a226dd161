//! Defects an adversarial review of `DirStore::migrate_first_layout`
//! (`bucket-lease migrate-dir`, issue 39) found, each shown by a test that
//! fails on 9a7b1c9: marks trusted without the staging tree that should go
//! with them (every object deleted, or stranded behind a lock folder), a
//! write by a store of the first layout between a run that stopped and the
//! next one (lost), and a FIFO in the store's folder (waited on for ever).

use super::migrate::{old_bucket_with_a_lease, old_object};
use super::*;
use bucket_lease_core::store::Store;
use std::sync::mpsc;

/// A bucket of the first layout: two objects, one nested.
fn old_bucket() -> TempDir {
    let dir = old_bucket_with_a_lease();
    old_object(&dir.0, "k", "\"e3\"", &[("note", "a%20b")], b"kept");
    dir
}

/// A bucket as a run leaves it when it stops right after step 1 (its
/// `migrated` mark made and synced, nothing of the first layout removed
/// yet): the store's folder with its lock, the whole staging tree (each
/// object a plain file with its attribute), and the mark. Built from a
/// twin bucket migrated whole, its tree moved into the staging folder
/// (a rename keeps the attributes).
fn stopped_after_staging() -> TempDir {
    let dir = old_bucket();
    let twin = old_bucket();
    DirStore::migrate_first_layout(&twin.0).unwrap();
    fs::rename(twin.0.join(".bucket-lease"), dir.0.join(".bucket-lease")).unwrap();
    let staging = dir.0.join(".bucket-lease/migrating");
    fs::create_dir(&staging).unwrap();
    for name in listing(&twin.0) {
        fs::rename(twin.0.join(&name), staging.join(&name)).unwrap();
    }
    fs::write(
        dir.0.join(".bucket-lease/migrated"),
        b"objects 2\nleftovers 0\n",
    )
    .unwrap();
    dir
}

/// Whether the object `key` is still somewhere: its first-layout file
/// (`name` under the root), or readable from the store with `body`.
fn kept(root: &Path, old_file: &str, key: &str, body: &[u8]) -> bool {
    if root.join(old_file).is_file() {
        return true;
    }
    DirStore::open(root)
        .ok()
        .and_then(|store| store.get(key, None).ok())
        .is_some_and(|object| object.body == body)
}

/// Run the migration of `root` on a thread; its answer if it came within
/// `wait`, `None` if it still waits (then `fifo` is released so the
/// thread ends).
fn migrate_within(root: &Path, wait: Duration, fifo: &Path) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    let path = root.to_path_buf();
    let run = std::thread::spawn(move || {
        let answer = format!("{:?}", DirStore::migrate_first_layout(&path));
        let _ = tx.send(answer);
    });
    let answer = rx.recv_timeout(wait).ok();
    if answer.is_none() {
        release_fifo(fifo);
    }
    let _ = run.join();
    answer
}

/// Promise: "every object's bytes, ETag and metadata kept"; a mark is
/// made "only once what the step did is on the disk". Schedule: a bucket
/// of the first layout whose `.bucket-lease/` holds a `migrated` file
/// but no staging tree (a user's or another tool's file, a store folder
/// copied or restored with the bucket, an earlier run's folder with its
/// `migrating` tree lost): the run trusts the mark, skips step 1, and
/// step 2 removes every `NAME.obj` although no copy of it was ever
/// staged. Every object is gone, and the run answers Ok.
#[test]
fn review_a_migrated_mark_without_its_staging_tree_deletes_every_object() {
    let dir = old_bucket();
    fs::create_dir(dir.0.join(".bucket-lease")).unwrap();
    fs::write(dir.0.join(".bucket-lease/migrated"), b"").unwrap();
    let answer = DirStore::migrate_first_layout(&dir.0);
    assert!(
        kept(&dir.0, "k.obj", "k", b"kept"),
        "the object `k` was deleted, neither its first-layout file nor a plain file left \
         (migration answered {answer:?}); the bucket holds {:?}",
        listing(&dir.0)
    );
}

/// Promise: "every object's bytes, ETag and metadata kept"; the error of
/// a run that stopped says every object is kept, "in its first-layout
/// file", and to run again. Schedule: a run stops after step 1 (its
/// `migrated` mark made, the first layout's lock still a file, which a
/// store of the first layout still takes); before the next run such a
/// store creates the object `fresh` and updates `k` (new ETag `"e8"`).
/// The next run trusts the staging tree built before those writes: step
/// 2 removes `fresh.obj` and the new `k.obj`, which were never staged;
/// `fresh` is lost, and `k` silently goes back to its old bytes and ETag.
#[test]
fn review_a_write_of_the_first_layout_between_two_runs_is_lost() {
    let dir = stopped_after_staging();
    old_object(&dir.0, "fresh", "\"e9\"", &[], b"written between the runs");
    old_object(&dir.0, "k", "\"e8\"", &[], b"updated between the runs");
    let answer = DirStore::migrate_first_layout(&dir.0);
    assert!(
        kept(&dir.0, "fresh.obj", "fresh", b"written between the runs"),
        "the object `fresh`, written by a store of the first layout after the run that \
         stopped, was deleted (migration answered {answer:?}); the bucket holds {:?}",
        listing(&dir.0)
    );
    assert!(
        kept(&dir.0, "k.obj", "k", b"updated between the runs"),
        "the update of `k` made between the runs was undone (migration answered {answer:?})"
    );
}

/// Promise: a run "goes on where it stopped", leaving a bucket the store
/// can use, every object kept; a state the table does not list is
/// "refused with nothing changed". Schedule: a bucket of the first layout
/// whose `.bucket-lease/` holds a `swapping` file and no `migrated` (no
/// run ever leaves that: `swapping` is made after `migrated` and removed
/// before it): the run skips steps 1 and 2, turns the lock file into a
/// folder and answers Ok with 0 objects. Every object is left as a
/// `NAME.obj` file with its header in a bucket of the new layout: the
/// store reads no object `k`, a store of the first layout can no longer
/// lock the bucket, and every later migrate-dir says "already".
#[test]
fn review_a_swapping_mark_alone_strands_every_object_behind_a_lock_folder() {
    let dir = old_bucket();
    fs::create_dir(dir.0.join(".bucket-lease")).unwrap();
    fs::write(dir.0.join(".bucket-lease/swapping"), b"").unwrap();
    let answer = DirStore::migrate_first_layout(&dir.0);
    let usable_by_the_first_layout = dir.0.join(".bucket-lease.lock").is_file();
    let read = DirStore::open(&dir.0).and_then(|store| store.get("k", None));
    assert!(
        usable_by_the_first_layout || read.as_ref().is_ok_and(|k| k.body == b"kept"),
        "the object `k` is neither in a bucket of the first layout nor readable from the \
         store (migration answered {answer:?}; get k: {:?}); the bucket holds {:?}",
        read.map(|k| k.body),
        listing(&dir.0)
    );
}

/// Promise: files others leave in `.bucket-lease/` (a FIFO among them)
/// are refused at once, never waited on (as the store's own open does
/// for its lock); errors say what failed. Schedule: in a bucket of the
/// first layout whose run stopped in step 1 (its `.bucket-lease/` made),
/// someone puts a FIFO at one of the two marks:
/// - `.bucket-lease/migrated.new`: the next run opens it `O_WRONLY`
///   without `O_NONBLOCK` to write the mark and waits for a reader for
///   ever;
/// - `.bucket-lease/migrated`, the mark a run reads first: `read_counts`
///   opens it `O_RDONLY` without `O_NONBLOCK`, and the run waits for a
///   writer for ever (and, once one comes and goes, reads no counts and
///   goes on as if step 1 were done).
#[test]
fn review_a_fifo_at_either_mark_hangs_the_migration() {
    for mark in ["migrated.new", "migrated"] {
        let dir = old_bucket();
        fs::create_dir(dir.0.join(".bucket-lease")).unwrap();
        let fifo = dir.0.join(".bucket-lease").join(mark);
        mkfifo(&fifo);
        let answer = migrate_within(&dir.0, Duration::from_secs(10), &fifo);
        assert!(
            answer.is_some(),
            "migrate-dir still waited after 10 s on the FIFO {}",
            fifo.display()
        );
    }
}

/// Promise: a file the first layout never made stops the run, "named",
/// with nothing changed, as refused (exit 78) and saying to move it out;
/// errors say what failed. Schedule: a bucket of the first layout holding
/// a plain file named `.bucket-lease` (the first layout never made one):
/// the survey skips the name as the store's folder, then making the
/// store's folder fails, and the run answers a retryable Transport error
/// blaming the disk ("the local disk refused to open the store's folder
/// … check the disk … run … again"), which no rerun fixes.
#[test]
fn review_a_file_at_the_store_folder_name_is_blamed_on_the_disk() {
    let dir = old_bucket();
    fs::write(dir.0.join(".bucket-lease"), b"mine").unwrap();
    let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
    assert!(dir.0.join("k.obj").is_file(), "nothing removed");
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    assert!(
        e.to_string()
            .contains("is not a file of the first directory layout"),
        "{e}"
    );
}

/// Promise: errors name the command to run, one that can be pasted (the
/// migration's own errors quote the path with `shell_word`). Schedule:
/// `DirStore::open` on a bucket of the first layout in a directory whose
/// name holds a space says "migrate it in place with `bucket-lease
/// migrate-dir /tmp/…/my bucket`", unquoted: pasted, it names two
/// arguments and fails.
#[test]
fn review_the_first_layout_refusal_names_an_unquoted_command() {
    let outer = TempDir::new();
    let root = outer.0.join("my bucket");
    fs::create_dir(&root).unwrap();
    fs::write(root.join(".bucket-lease.lock"), b"").unwrap();
    old_object(&root, "k", "\"e3\"", &[], b"kept");
    let e = DirStore::open(&root).unwrap_err();
    let command = format!("bucket-lease migrate-dir {}", shell_word(&root));
    assert!(e.to_string().contains(&command), "no `{command}` in: {e}");
}
