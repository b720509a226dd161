//! The migration from the first directory layout: a bucket of that layout
//! is refused naming it, it moves every object keeping its bytes, ETag
//! and metadata, and it changes nothing when it must refuse.

use super::*;
use crate::fs::migrate::Migration;

/// Write an object file of the first layout for `key` under `root`.
pub(super) fn old_object(root: &Path, key: &str, etag: &str, meta: &[(&str, &str)], body: &[u8]) {
    let mut path = root.to_path_buf();
    let segments: Vec<&str> = key.split('/').collect();
    let (name, folders) = segments.split_last().unwrap();
    for folder in folders {
        path.push(format!("{folder}.dir"));
    }
    fs::create_dir_all(&path).unwrap();
    let mut text = format!("bucket-lease object v1\netag {etag}\n");
    for (name, value) in meta {
        text.push_str(&format!("meta {name} {value}\n"));
    }
    text.push('\n');
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(body);
    fs::write(path.join(format!("{name}.obj")), bytes).unwrap();
}

/// A bucket of the first layout: its lock and one object, the lease
/// record `nightly/LEASE`.
pub(super) fn old_bucket_with_a_lease() -> TempDir {
    let dir = TempDir::new();
    fs::write(dir.0.join(".bucket-lease.lock"), b"").unwrap();
    old_object(
        &dir.0,
        "nightly/LEASE",
        "\"e1\"",
        &[],
        b"{\"holder\":\"x\"}",
    );
    dir
}

/// A bucket of the first layout: three objects and two leftovers.
fn old_bucket() -> TempDir {
    let dir = old_bucket_with_a_lease();
    old_object(
        &dir.0,
        "nightly/parts/1-0",
        "\"e2\"",
        &[("epoch", "7")],
        b"\n\nbytes\0",
    );
    old_object(&dir.0, "k", "\"e3\"", &[("note", "a%20b")], b"");
    fs::write(dir.0.join("nightly.dir/LEASE.0123.tmp"), b"half").unwrap();
    fs::write(dir.0.join("k.abcd.upload"), b"part").unwrap();
    dir
}

#[test]
fn a_bucket_of_the_first_layout_is_refused_naming_the_migration() {
    let dir = old_bucket();
    let e = DirStore::open(&dir.0).unwrap_err();
    assert_eq!(e.code(), Some("FirstLayout"), "{e}");
    assert!(e.is_permanent(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("bucket-lease migrate-dir {}", dir.0.display())),
        "{e}"
    );
    assert!(
        !dir.0.join(".bucket-lease").exists(),
        "nothing made by a refused open"
    );
}

#[test]
fn the_migration_keeps_bytes_etags_and_metadata_and_runs_once() {
    let dir = old_bucket();
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!(
        (done.objects, done.leftovers, done.already),
        (3, 2, false),
        "{done:?}"
    );
    assert_eq!(
        fs::read(dir.0.join("nightly/parts/1-0")).unwrap(),
        b"\n\nbytes\0"
    );
    assert_eq!(
        names(&dir.0),
        [".bucket-lease", ".bucket-lease.lock", "k", "nightly"]
    );
    assert_eq!(names(&dir.0.join("nightly")), ["LEASE", "parts"]);
    assert!(dir.0.join(".bucket-lease.lock").is_dir());
    let store = DirStore::open(&dir.0).unwrap();
    let part = store.get("nightly/parts/1-0", None).unwrap();
    assert_eq!(part.version, Version::etag("\"e2\""));
    assert_eq!(part.metadata, [("epoch".to_string(), "7".to_string())]);
    let k = store.get("k", None).unwrap();
    assert_eq!(
        (k.body, k.version, k.metadata),
        (
            Vec::new(),
            Version::etag("\"e3\""),
            vec![("note".to_string(), "a b".to_string())]
        )
    );
    // The lease's record keeps its version: an update on it lands.
    let lease = store.get("nightly/LEASE", None).unwrap();
    store
        .put(
            "nightly/LEASE",
            b"{}",
            &PutOptions::new(PutMode::Update(lease.version)),
        )
        .unwrap();

    let again = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert!(again.already && again.objects == 0, "{again:?}");
    assert_eq!(Migration::default().objects, 0);
}

#[test]
fn keys_a_directory_cannot_hold_together_stop_it_with_nothing_changed() {
    let dir = TempDir::new();
    fs::write(dir.0.join(".bucket-lease.lock"), b"").unwrap();
    old_object(&dir.0, "a", "\"e1\"", &[], b"one");
    old_object(&dir.0, "a/b", "\"e2\"", &[], b"two");
    let before = names(&dir.0);
    let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
    assert_eq!(e.code(), Some("KeyConflict"), "{e}");
    assert!(e.to_string().contains("`a` and `a/b`"), "{e}");
    assert!(dir.0.join("a.obj").is_file() && dir.0.join("a.dir/b.obj").is_file());
    assert_eq!(names(&dir.0), before);
    assert!(
        dir.0.join(".bucket-lease.lock").is_file(),
        "still the first layout"
    );
}

#[test]
fn a_file_the_first_layout_never_made_stops_it_with_nothing_changed() {
    let dir = old_bucket();
    fs::write(dir.0.join("nightly.dir/notes.txt"), b"mine").unwrap();
    let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
    assert!(
        e.to_string()
            .contains("notes.txt is not a file of the first"),
        "{e}"
    );
    assert!(dir.0.join("nightly.dir/parts.dir/1-0.obj").is_file());
    fs::remove_file(dir.0.join("nightly.dir/notes.txt")).unwrap();
    DirStore::migrate_first_layout(&dir.0).unwrap();
}

/// A run stopped while it built the staging tree leaves a partial tree
/// and no mark: the next run builds it again from the start.
#[test]
fn a_run_stopped_while_staging_starts_again() {
    let dir = old_bucket();
    let staging = dir.0.join(".bucket-lease/migrating/nightly");
    fs::create_dir_all(&staging).unwrap();
    fs::write(staging.join("half"), b"stale").unwrap();
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!(done.objects, 3);
    assert!(!dir.0.join("nightly/half").exists());
    assert_eq!(names(&dir.0.join("nightly")), ["LEASE", "parts"]);
}

#[test]
fn a_directory_that_was_never_a_bucket_is_not_migrated() {
    let dir = TempDir::new();
    let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
    assert!(
        e.to_string().contains("is not a bucket of the first"),
        "{e}"
    );
    assert_eq!(names(&dir.0), Vec::<String>::new());
}

/// Where a run stopped after step 3 (its staging tree moved and gone):
/// the first layout's lock as it left it.
#[derive(Clone, Copy)]
enum OldLock {
    /// Still the first layout's file.
    File,
    /// Removed, its folder not made yet.
    Gone,
}

/// A bucket as a run of the migration leaves it when it stops after
/// moving and removing its staging tree, with the first layout's lock as
/// `lock` says: every object a plain file with its attribute, and the
/// marks of the steps done in the store's folder.
fn stopped_after_the_swap(lock: OldLock) -> TempDir {
    let dir = old_bucket();
    DirStore::migrate_first_layout(&dir.0).unwrap();
    let old_lock = dir.0.join(".bucket-lease.lock");
    fs::remove_dir(&old_lock).unwrap();
    if let OldLock::File = lock {
        fs::write(&old_lock, b"").unwrap();
    }
    let state = dir.0.join(".bucket-lease");
    fs::write(state.join("migrated"), b"objects 3\nleftovers 2\n").unwrap();
    fs::write(state.join("swapping"), b"").unwrap();
    dir
}

/// The bucket at `dir` is migrated and whole: the store opens it, every
/// object has its bytes, ETag and metadata, the lease record takes an
/// update on its old ETag, and nothing of the migration is left.
fn assert_migrated(dir: &Path) {
    assert!(dir.join(".bucket-lease.lock").is_dir());
    assert_eq!(
        names(&dir.join(".bucket-lease")),
        ["lock", "tmp", "uploads"]
    );
    assert_eq!(listing(dir), ["k", "nightly"]);
    let store = DirStore::open(dir).unwrap();
    let part = store.get("nightly/parts/1-0", None).unwrap();
    assert_eq!(
        (part.body, part.version, part.metadata),
        (
            b"\n\nbytes\0".to_vec(),
            Version::etag("\"e2\""),
            vec![("epoch".to_string(), "7".to_string())]
        )
    );
    assert_eq!(
        store.get("k", None).unwrap().version,
        Version::etag("\"e3\"")
    );
    put(
        &store,
        "nightly/LEASE",
        b"{}",
        PutMode::Update(Version::etag("\"e1\"")),
    )
    .unwrap();
}

/// Issue 39: a run stopped between removing its staging tree and turning
/// the first layout's lock file into a folder left a bucket no later run
/// could finish (`list …/.bucket-lease/migrating: No such file or
/// directory`, every time) and that `run` refused as the first layout.
#[test]
fn a_run_stopped_after_the_staging_tree_went_with_the_lock_still_a_file_finishes() {
    let dir = stopped_after_the_swap(OldLock::File);
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!((done.objects, done.leftovers, done.already), (3, 2, false));
    assert_migrated(&dir.0);
}

/// Issue 39: a run stopped once the lock file was removed and before its
/// folder was made left a bucket that a later run called "not a bucket of
/// the first directory layout".
#[test]
fn a_run_stopped_after_the_lock_file_went_before_its_folder_finishes() {
    let dir = stopped_after_the_swap(OldLock::Gone);
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!((done.objects, done.leftovers, done.already), (3, 2, false));
    assert_migrated(&dir.0);
}

/// A run stopped while it moved the staging tree's entries into the root
/// (marks made, some entries moved): the next moves the rest.
#[test]
fn a_run_stopped_while_moving_the_staging_tree_moves_the_rest() {
    let dir = stopped_after_the_swap(OldLock::File);
    let staging = dir.0.join(".bucket-lease/migrating");
    fs::create_dir(&staging).unwrap();
    fs::rename(dir.0.join("nightly"), staging.join("nightly")).unwrap();
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!((done.objects, done.already), (3, false));
    assert_migrated(&dir.0);
}

/// A run stopped once the lock was a folder, before it removed its marks:
/// the bucket opens already, and the next run removes them.
#[test]
fn marks_left_by_a_run_that_stopped_at_its_end_are_removed() {
    let dir = stopped_after_the_swap(OldLock::Gone);
    fs::create_dir(dir.0.join(".bucket-lease.lock")).unwrap();
    drop(DirStore::open(&dir.0).unwrap());
    let done = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_eq!((done.objects, done.already), (3, false));
    assert_migrated(&dir.0);
    let again = DirStore::migrate_first_layout(&dir.0).unwrap();
    assert!(again.already, "{again:?}");
}

/// A symbolic link anywhere in a bucket of the first layout (a folder's
/// entry, the store's own folder) stops the migration with nothing
/// changed, naming the link, as every request of the store refuses one.
#[test]
fn a_link_in_the_old_bucket_stops_it_with_nothing_changed_naming_it() {
    for (at, target) in [
        ("nightly.dir/parts.dir/2-0.obj", "1-0.obj"),
        ("nightly.dir/elsewhere.dir", "/tmp"),
        (".bucket-lease", "/tmp"),
    ] {
        let dir = old_bucket();
        std::os::unix::fs::symlink(target, dir.0.join(at)).unwrap();
        let before = names(&dir.0);
        let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
        assert_eq!(e.code(), Some("SymbolicLink"), "{at}: {e}");
        assert!(
            e.to_string()
                .contains(&format!("{} is a symbolic link", dir.0.join(at).display())),
            "{at}: {e}"
        );
        assert!(e.to_string().contains("migrate-dir"), "{at}: {e}");
        assert_eq!(names(&dir.0), before, "{at}");
        assert!(
            dir.0.join("nightly.dir/parts.dir/1-0.obj").is_file(),
            "{at}"
        );
        assert!(dir.0.join(".bucket-lease.lock").is_file(), "{at}");
        fs::remove_file(dir.0.join(at)).unwrap();
        DirStore::migrate_first_layout(&dir.0).unwrap();
        assert_migrated(&dir.0);
    }
}

/// A failure on the local disk names what failed, and says that running
/// the command again goes on where it stopped.
#[test]
fn a_disk_failure_says_to_run_the_command_again() {
    let dir = old_bucket();
    // A file where the staging tree goes: the disk refuses to make it.
    fs::create_dir(dir.0.join(".bucket-lease")).unwrap();
    fs::write(dir.0.join(".bucket-lease/migrating"), b"").unwrap();
    let e = DirStore::migrate_first_layout(&dir.0).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(".bucket-lease/migrating"), "{e}");
    assert!(
        text.contains(&format!(
            "run `bucket-lease migrate-dir {}` again: it goes on where it stopped",
            dir.0.display()
        )),
        "{e}"
    );
    fs::remove_file(dir.0.join(".bucket-lease/migrating")).unwrap();
    DirStore::migrate_first_layout(&dir.0).unwrap();
    assert_migrated(&dir.0);
}

/// Two runs at once: the one that waited for the first layout's lock
/// while the other migrated finds the lock file gone when it gets it,
/// looks again, and finds the bucket migrated.
#[test]
fn two_runs_at_once_both_end_with_the_bucket_migrated() {
    for _ in 0..20 {
        let dir = old_bucket();
        let start = std::sync::Barrier::new(2);
        let answers: Vec<Migration> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        DirStore::migrate_first_layout(&dir.0).unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        assert_eq!(
            answers.iter().filter(|done| !done.already).count(),
            1,
            "{answers:?}"
        );
        assert_migrated(&dir.0);
    }
}
