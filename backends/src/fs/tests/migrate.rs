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

/// A bucket of the first layout: three objects and two leftovers.
fn old_bucket() -> TempDir {
    let dir = TempDir::new();
    fs::write(dir.0.join(".bucket-lease.lock"), b"").unwrap();
    old_object(
        &dir.0,
        "nightly/LEASE",
        "\"e1\"",
        &[],
        b"{\"holder\":\"x\"}",
    );
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
