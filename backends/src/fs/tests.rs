//! The directory store's unit tests: layout, conditions, deadlines (with
//! the hook that pauses a request at a [`Step`]), caps.

use super::layout::{MAGIC, MAX_SEGMENT};

/// The bucket's lock file, under the root.
const LOCK_FILE: &str = ".bucket-lease/lock";
/// What `listing` leaves out of the root: the store's own.
const OWN: [&str; 2] = [".bucket-lease", ".bucket-lease.lock"];
use super::*;
use bucket_lease_core::store::PutMode;
use std::cell::Cell;
use std::fs::OpenOptions;
use std::rc::Rc;
use std::time::Duration;

mod links;
mod migrate;
mod review;
mod review_links;
mod review_migrate;
mod uploads;

/// A fresh directory under the system's temporary directory, removed on
/// drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!("bucket-lease-fs-unit-{:016x}", getrandom::u64().unwrap());
        let dir = std::env::temp_dir().join(name);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Make a FIFO at `path`.
fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
}

/// Wake whatever waits to open the FIFO at `path` to read or to write (a
/// writer and a reader come and go, a few times), so the thread a failed
/// test left hanging ends.
fn release_fifo(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..20 {
        for write in [true, false] {
            let _ = OpenOptions::new()
                .write(write)
                .read(!write)
                .custom_flags(OFlags::NONBLOCK.bits() as i32)
                .open(path);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn store() -> (TempDir, DirStore) {
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    (dir, store)
}

/// The bucket's lock taken as another process takes it: a lock on an open
/// file description of its own (as flock and LockFileEx give each
/// process), held until the file is dropped.
fn another_process_locks(dir: &TempDir) -> std::fs::File {
    let holder = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.0.join(LOCK_FILE))
        .unwrap();
    holder.lock().unwrap();
    holder
}

fn put(store: &DirStore, key: &str, body: &[u8], mode: PutMode) -> Result<Version, StoreError> {
    store.put(key, body, &PutOptions::new(mode))
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The names in the bucket's root but the store's own, sorted.
fn listing(root: &Path) -> Vec<String> {
    let mut names = names(root);
    names.retain(|name| !OWN.contains(&name.as_str()));
    names
}

/// The store's temporary and upload files left in the bucket at `root`.
fn leftovers(root: &Path) -> Vec<String> {
    let state = root.join(".bucket-lease");
    let mut left = names(&state.join("tmp"));
    left.extend(names(&state.join("uploads")));
    left
}

#[test]
fn open_needs_the_directory_as_s3_needs_the_bucket_and_refuses_a_file() {
    let dir = TempDir::new();
    let nested = dir.0.join("a/b");
    let e = DirStore::open(&nested).unwrap_err();
    assert_eq!(
        (e.kind(), e.method(), e.key(), e.code()),
        (StoreErrorKind::Rejected, "OPEN", "", Some("NoSuchBucket"))
    );
    assert!(e.is_permanent(), "{e}");
    let shown = e.to_string();
    let path = nested.display();
    assert!(
        shown.starts_with(&format!(
            "OPEN file://{path}: rejected (NoSuchBucket: there is no directory {path} to use \
             as the bucket (mkdir -p {path} makes one)); the bucket does not exist: check its \
             name in the URL, or create it"
        )),
        "{shown}"
    );
    assert!(!dir.0.join("a").exists(), "nothing is created");

    fs::create_dir_all(&nested).unwrap();
    let store = DirStore::open(&nested).unwrap();
    assert_eq!(store.root(), nested);
    assert_eq!(
        format!("{store:?}"),
        format!("DirStore {{ root: {nested:?} }}")
    );
    assert_eq!(store.store_url(), Some(format!("file://{path}//").as_str()));

    let file = dir.0.join("file");
    fs::write(&file, b"x").unwrap();
    let e = DirStore::open(&file).unwrap_err();
    assert_eq!((e.kind(), e.method()), (StoreErrorKind::Rejected, "OPEN"));
    assert!(e.is_permanent(), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("{} is not a directory", file.display())),
        "{e}"
    );
}

#[test]
fn errors_name_the_object_by_its_url_and_keep_the_plain_key() {
    let (dir, store) = store();
    let e = store.get("jobs/nightly/LEASE", None).unwrap_err();
    assert_eq!(e.key(), "jobs/nightly/LEASE");
    let url = format!("file://{}//jobs/nightly/LEASE", dir.0.display());
    assert_eq!(e.url(), url);
    assert!(
        e.to_string().starts_with(&format!("GET {url}: not found")),
        "{e}"
    );
    bucket_lease_core::conformance::assert_said_once(&e, &url);
}

#[test]
fn folders_are_made_under_the_bucket_but_a_removed_bucket_is_not_made_again() {
    let (dir, store) = store();
    put(&store, "a/b/LEASE", b"x", PutMode::Create).unwrap();
    assert_eq!(fs::read(dir.0.join("a/b/LEASE")).unwrap(), b"x");
    fs::remove_dir_all(&dir.0).unwrap();
    for key in ["LEASE", "a/b/LEASE"] {
        let e = put(&store, key, b"x", PutMode::Create).unwrap_err();
        assert_eq!(e.code(), Some("NoSuchBucket"), "{e}");
        assert!(
            e.is_permanent() && e.to_string().contains("mkdir -p"),
            "{e}"
        );
        assert!(
            !dir.0.exists(),
            "{key}: the bucket directory was made again"
        );
    }
}

#[test]
fn keys_are_plain_files_holding_exactly_the_bytes() {
    let (dir, store) = store();
    let body = b"line one\n\0binary\xff";
    let v = put(&store, "nightly/parts/1-0", body, PutMode::Create).unwrap();
    assert_eq!(fs::read(dir.0.join("nightly/parts/1-0")).unwrap(), body);
    assert_eq!(listing(&dir.0), ["nightly"]);
    assert_eq!(names(&dir.0.join("nightly/parts")), ["1-0"]);
    let got = store.get("nightly/parts/1-0", None).unwrap();
    assert_eq!((got.body, got.version), (body.to_vec(), v));
}

/// The one conflict a file system has and S3 has not: `a` and `a/b`.
#[test]
fn an_object_and_a_longer_key_under_it_are_refused_as_a_conflict() {
    let (dir, store) = store();
    put(&store, "a", b"one", PutMode::Create).unwrap();
    for mode in [PutMode::Create, PutMode::Overwrite] {
        let e = put(&store, "a/b", b"two", mode).unwrap_err();
        assert_eq!(
            (e.kind(), e.code(), e.is_permanent()),
            (StoreErrorKind::Rejected, Some("KeyConflict"), true),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("is an object") && text.contains("`a/b`"),
            "{e}"
        );
        assert!(text.contains(&dir.0.join("a").display().to_string()), "{e}");
    }
    assert_eq!(
        store.get("a/b", None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    store
        .delete("a/b", &DeleteMode::Unconditional, None)
        .unwrap();
    assert_eq!(store.get("a", None).unwrap().body, b"one", "left alone");

    put(&store, "c/d", b"three", PutMode::Create).unwrap();
    for mode in [PutMode::Create, PutMode::Overwrite] {
        let e = put(&store, "c", b"four", mode).unwrap_err();
        assert_eq!(e.code(), Some("KeyConflict"), "{e}");
        assert!(
            e.to_string()
                .contains("is a folder holding longer keys (c/…)"),
            "{e}"
        );
    }
    let e = put(
        &store,
        "c",
        b"four",
        PutMode::Update(Version::etag("\"x\"")),
    )
    .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "no object `c`: {e}");
    assert_eq!(
        store.get("c", None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    assert_eq!(
        store.head("c", None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    store.delete("c", &DeleteMode::Unconditional, None).unwrap();
    let version = store.head("c/d", None).unwrap().version;
    store
        .delete("c", &DeleteMode::IfVersion(version), None)
        .unwrap();
    assert_eq!(store.get("c/d", None).unwrap().body, b"three", "left alone");
    assert_eq!(listing(&dir.0), ["a", "c"]);
    assert!(leftovers(&dir.0).is_empty());

    // Once the longer key goes, its folder goes, and the key is free.
    store
        .delete("c/d", &DeleteMode::Unconditional, None)
        .unwrap();
    put(&store, "c", b"four", PutMode::Create).unwrap();
}

/// A folder left empty where an object goes (made by hand, or by a write
/// that published nothing) does not stand in the way.
#[test]
fn an_empty_folder_where_an_object_goes_is_removed_by_the_write() {
    let (dir, store) = store();
    fs::create_dir_all(dir.0.join("e")).unwrap();
    put(&store, "e", b"x", PutMode::Create).unwrap();
    assert_eq!(fs::read(dir.0.join("e")).unwrap(), b"x");
}

/// Files put in the bucket another way are not taken for objects: the
/// answer names the file and what to do.
#[test]
fn a_file_without_the_attribute_is_refused_naming_how_to_copy_it_in() {
    let (dir, store) = store();
    fs::write(dir.0.join("copied"), b"plain").unwrap();
    let e = store.get("copied", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    let text = e.to_string();
    assert!(text.contains("has no user.bucket-lease attribute"), "{e}");
    assert!(text.contains("cp --preserve=xattr"), "{e}");
    let e = put(&store, "copied", b"y", PutMode::Create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{e}");
    assert_eq!(fs::read(dir.0.join("copied")).unwrap(), b"plain");
}

#[cfg(unix)]
#[test]
fn a_fifo_in_the_bucket_is_refused_at_once() {
    let (dir, store) = store();
    let status = std::process::Command::new("mkfifo")
        .arg(dir.0.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let store2 = store.clone();
    std::thread::spawn(move || tx.send(store2.get("pipe", None).map(drop)));
    let e = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the read waited on the FIFO")
        .unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn keys_naming_the_stores_own_files_are_refused() {
    let (_dir, store) = store();
    for key in [
        ".bucket-lease/lock",
        ".bucket-lease.lock",
        "a/.bucket-lease-x/b",
    ] {
        let e = put(&store, key, b"x", PutMode::Overwrite).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key}");
        assert!(e.to_string().contains("keeps for its own files"), "{e}");
    }
}

/// Panics unless a read of `key` in `store` answers `NotFound`.
fn assert_not_found(store: &DirStore, key: &str) {
    assert_eq!(
        store.get(key, None).unwrap_err().kind(),
        StoreErrorKind::NotFound,
        "{key}"
    );
}

#[test]
fn a_delete_removes_the_folders_it_leaves_empty() {
    let (dir, store) = store();
    put(&store, "a/b/c", b"2", PutMode::Create).unwrap();
    put(&store, "a/x/y", b"3", PutMode::Create).unwrap();
    store
        .delete("a/b/c", &DeleteMode::Unconditional, None)
        .unwrap();
    assert_eq!(names(&dir.0.join("a")), ["x"]);
    store
        .delete("a/x/y", &DeleteMode::Unconditional, None)
        .unwrap();
    assert_eq!(
        listing(&dir.0),
        Vec::<String>::new(),
        "`a` went with its last key"
    );
    assert!(dir.0.is_dir(), "the root stays");
    assert_not_found(&store, "a/b/c");
}

/// Puts into a folder that deletes keep emptying and removing all
/// land: folders are made under the lock, where no delete removes them.
#[test]
fn puts_race_deletes_that_remove_their_folder() {
    let (dir, store) = store();
    let store = std::sync::Arc::new(store);
    let deleter = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..300 {
                let key = format!("p/q/d{}", i % 3);
                let _ = put(&store, &key, b"x", PutMode::Overwrite);
                store
                    .delete(&key, &DeleteMode::Unconditional, None)
                    .unwrap();
            }
        })
    };
    for i in 0..300 {
        let key = format!("p/q/k{i}");
        put(&store, &key, b"y", PutMode::Create).unwrap();
        store
            .delete(&key, &DeleteMode::Unconditional, None)
            .unwrap();
    }
    deleter.join().unwrap();
    assert_eq!(listing(&dir.0), Vec::<String>::new());
    assert!(leftovers(&dir.0).is_empty());
}

#[test]
fn invalid_keys_are_rejected_naming_the_key_and_the_reason() {
    let (dir, store) = store();
    for (key, reason) in [
        ("", "empty"),
        ("/abs", "starts with `/`"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("a/../b", "`..`"),
        ("./a", "`.`"),
        ("a\0b", "NUL"),
        ("a\\b", "backslash"),
    ] {
        let e = store.get(key, None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
        assert_eq!(e.key(), key);
        assert!(e.to_string().contains(reason), "{key:?}: {e}");
        let e = put(&store, key, b"x", PutMode::Overwrite).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
        let e = store
            .delete(key, &DeleteMode::Unconditional, None)
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{key:?}");
    }
    let long = "x".repeat(MAX_SEGMENT + 1);
    let e = put(&store, &long, b"x", PutMode::Create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    assert!(put(&store, &"x".repeat(MAX_SEGMENT), b"x", PutMode::Create).is_ok());
    assert_eq!(listing(&dir.0).len(), 1, "only the one valid object");
}

#[test]
fn conditions_are_checked_and_etags_are_fresh_random_hex() {
    let (_dir, store) = store();
    let fake = Version::etag("\"never\"");
    let e = put(&store, "p/LEASE", b"0", PutMode::Update(fake.clone())).unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (StoreErrorKind::Precondition, Some("NoSuchKey"))
    );
    let e = store.get("p/LEASE", None).unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (StoreErrorKind::NotFound, Some("NoSuchKey"))
    );

    let v1 = put(&store, "p/LEASE", b"1", PutMode::Create).unwrap();
    let etag = v1.etag.clone().unwrap();
    assert_eq!(etag.len(), 34, "{etag}");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert!(etag[1..33].bytes().all(|b| b.is_ascii_hexdigit()), "{etag}");
    assert_eq!(v1.version_id, None);

    let e = put(&store, "p/LEASE", b"2", PutMode::Create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists);
    let e = put(&store, "p/LEASE", b"2", PutMode::Update(fake)).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition);
    let with_id = Version {
        etag: v1.etag.clone(),
        version_id: Some("v".into()),
    };
    let e = put(&store, "p/LEASE", b"2", PutMode::Update(with_id)).unwrap_err();
    assert_eq!(
        e.kind(),
        StoreErrorKind::Precondition,
        "no version ids here"
    );
    assert_eq!(store.get("p/LEASE", None).unwrap().body, b"1");

    let v2 = put(&store, "p/LEASE", b"1", PutMode::Update(v1.clone())).unwrap();
    let v3 = put(&store, "p/LEASE", b"1", PutMode::Overwrite).unwrap();
    assert!(v1 != v2 && v2 != v3 && v1 != v3, "same body, fresh ETags");
    assert_eq!(store.get("p/LEASE", None).unwrap().version, v3);

    let del = |v: &Version| store.delete("p/LEASE", &DeleteMode::IfVersion(v.clone()), None);
    assert_eq!(del(&v2).unwrap_err().kind(), StoreErrorKind::Precondition);
    del(&v3).unwrap();
    del(&v3).unwrap();
    store
        .delete("p/LEASE", &DeleteMode::Unconditional, None)
        .unwrap();
    store
        .delete("never/written", &DeleteMode::Unconditional, None)
        .unwrap();
    assert_not_found(&store, "p/LEASE");
}

#[test]
fn refused_and_finished_writes_leave_no_temporary_files() {
    let (dir, store) = store();
    let v = put(&store, "k", b"1", PutMode::Create).unwrap();
    put(&store, "k", b"2", PutMode::Create).unwrap_err();
    put(&store, "k", b"2", PutMode::Update(Version::etag("\"x\""))).unwrap_err();
    put(&store, "k", b"3", PutMode::Update(v)).unwrap();
    put(&store, "k", b"4", PutMode::Overwrite).unwrap();
    assert_eq!(listing(&dir.0), ["k"]);
    assert!(leftovers(&dir.0).is_empty());
}

#[test]
fn metadata_round_trips_escaped_with_names_in_lower_case() {
    let (dir, store) = store();
    let options = PutOptions::new(PutMode::Create)
        .with_metadata("Owner", "host 7%\n")
        .with_metadata("note", "ünïcode");
    store
        .put("m", b"body\n\nwith blank lines", &options)
        .unwrap();
    let got = store.get("m", None).unwrap();
    assert_eq!(got.body, b"body\n\nwith blank lines");
    let expected = [("owner", "host 7%\n"), ("note", "ünïcode")];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(got.metadata, expected);
    let file = File::open(dir.0.join("m")).unwrap();
    let attribute = attr::get(&file).unwrap().unwrap();
    let etag = got.version.etag.unwrap();
    assert_eq!(
        String::from_utf8(attribute).unwrap(),
        format!("{MAGIC}\netag {etag}\nmeta owner host%207%25%0A\nmeta note ünïcode\n")
    );
    assert_eq!(
        fs::read(dir.0.join("m")).unwrap(),
        b"body\n\nwith blank lines"
    );

    store
        .put("m", b"", &PutOptions::new(PutMode::Overwrite))
        .unwrap();
    let got = store.get("m", None).unwrap();
    assert_eq!(
        (got.body, got.metadata),
        (Vec::new(), Vec::new()),
        "replaced, not merged"
    );
}

#[test]
fn a_damaged_attribute_is_reported_with_its_path() {
    let (dir, store) = store();
    for bad in [
        &b"hello"[..],
        b"bucket-lease object v2\netag x\nbogus\n",
        b"bucket-lease object v2\nkey k\netag x\n",
        b"\xff\n",
    ] {
        let path = dir.0.join("x");
        fs::write(&path, b"body").unwrap();
        attr::set(&File::open(&path).unwrap(), bad).unwrap();
        let e = store.get("x", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected);
        assert!(
            e.to_string().contains("x is not an object of this store"),
            "{e}"
        );
        let e = put(&store, "x", b"y", PutMode::Update(Version::etag("x"))).unwrap_err();
        assert_eq!(
            e.kind(),
            StoreErrorKind::Rejected,
            "an update does not replace it"
        );
        assert_eq!(fs::read(&path).unwrap(), b"body");
    }
}

#[test]
fn a_passed_deadline_does_nothing_and_says_it_timed_out() {
    let (dir, store) = store();
    let past = Some(Instant::now() - Duration::from_millis(1));
    let options = PutOptions::new(PutMode::Create).with_deadline(past);
    let e = store.put("k", b"x", &options).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
    assert!(
        e.is_timeout() && e.to_string().contains("nothing was done"),
        "{e}"
    );
    assert!(!e.may_have_landed(), "said not sent: {e}");
    assert_eq!(
        (listing(&dir.0), leftovers(&dir.0)),
        (vec![], vec![]),
        "nothing written"
    );

    let v = put(&store, "k", b"x", PutMode::Create).unwrap();
    assert!(store.get("k", past).unwrap_err().is_timeout());
    let e = store
        .delete("k", &DeleteMode::Unconditional, past)
        .unwrap_err();
    assert!(e.is_timeout());
    let future = Some(Instant::now() + Duration::from_secs(60));
    assert_eq!(store.get("k", future).unwrap().version, v, "not deleted");
}

/// Run `request` on another thread; its answer, or `None` when it has
/// not answered within `patience`.
fn answer_within<T: Send + 'static>(
    patience: Duration,
    request: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(request());
    });
    rx.recv_timeout(patience).ok()
}

#[test]
fn a_held_lock_times_out_at_the_deadline_and_nothing_is_written() {
    let (dir, store) = store();
    let v = put(&store, "k", b"before", PutMode::Create).unwrap();
    let holder = another_process_locks(&dir);

    let lock_path = dir.0.join(LOCK_FILE).display().to_string();
    fn soon() -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(200))
    }
    /// A write or delete on the store, named.
    type Attempt = (
        &'static str,
        Box<dyn FnOnce(&DirStore) -> Result<(), StoreError> + Send>,
    );
    let requests: Vec<Attempt> = vec![
        ("update", {
            let v = v.clone();
            Box::new(move |s: &DirStore| {
                let options = PutOptions::new(PutMode::Update(v)).with_deadline(soon());
                s.put("k", b"after", &options).map(drop)
            })
        }),
        (
            "overwrite",
            Box::new(|s: &DirStore| {
                let options = PutOptions::new(PutMode::Overwrite).with_deadline(soon());
                s.put("k", b"after", &options).map(drop)
            }),
        ),
        (
            "create",
            Box::new(|s: &DirStore| {
                let options = PutOptions::new(PutMode::Create).with_deadline(soon());
                s.put("new", b"after", &options).map(drop)
            }),
        ),
        (
            "delete",
            Box::new(|s: &DirStore| s.delete("k", &DeleteMode::Unconditional, soon())),
        ),
        ("conditional delete", {
            let v = v.clone();
            Box::new(move |s: &DirStore| s.delete("k", &DeleteMode::IfVersion(v), soon()))
        }),
    ];
    for (what, request) in requests {
        let s = store.clone();
        let e = answer_within(Duration::from_secs(5), move || request(&s))
            .unwrap_or_else(|| panic!("{what}: still waiting for the lock after 5 s"))
            .expect_err(what);
        assert_eq!(e.kind(), StoreErrorKind::Transport, "{what}: {e}");
        assert!(e.is_timeout(), "{what}: {e}");
        // Nothing was done: the error says so, and never "may have
        // taken effect".
        assert!(!e.may_have_landed(), "{what}: {e}");
        let text = e.to_string();
        let waited = format!("the lock at {lock_path} was held by another process");
        // On a loaded machine the deadline may pass before the lock is
        // tried at all (syncing the temporary file took that long):
        // nothing was sent then either.
        let never_tried = format!("before the lock at {lock_path} was tried");
        assert!(
            (text.contains(&waited) || text.contains(&never_tried))
                && text.contains("nothing was sent"),
            "{what}: {text}"
        );
    }
    // Reads take no lock: they answer at once, and nothing changed.
    let s = store.clone();
    let got = answer_within(Duration::from_secs(5), move || s.get("k", soon()))
        .expect("a read does not wait for the lock")
        .unwrap();
    assert_eq!((got.body, got.version), (b"before".to_vec(), v.clone()));
    assert_eq!(listing(&dir.0), ["k"]);
    assert!(leftovers(&dir.0).is_empty(), "no temporary files");

    drop(holder);
    // A deadline no loaded disk reaches: this write is about the lock.
    let later = Some(Instant::now() + Duration::from_secs(60));
    let options = PutOptions::new(PutMode::Update(v)).with_deadline(later);
    store
        .put("k", b"after", &options)
        .expect("the lock is free again");
}

/// Run `request` on this thread with `hook` called at each [`Step`]
/// it reaches.
fn with_hook<T>(hook: impl FnMut(Step) + 'static, request: impl FnOnce() -> T) -> T {
    HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    let answer = request();
    HOOK.with(|h| *h.borrow_mut() = None);
    answer
}

/// Return once `deadline` has passed: a request paused at a step (a
/// stopped process, a slow disk) until after its deadline.
/// A count a hook keeps and its test reads.
type Count = Rc<Cell<u32>>;

/// A hook that pauses past `deadline` after each chunk written, and the
/// counts of chunks written and of those written after a pause (late).
fn pausing_after_each_chunk(deadline: Instant) -> (impl FnMut(Step), Count, Count) {
    let (written, late) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let hook = {
        let (written, late) = (written.clone(), late.clone());
        move |step| {
            if step == Step::ChunkWritten {
                if written.get() > 0 {
                    // The previous chunk paused past the deadline.
                    late.set(late.get() + 1);
                }
                written.set(written.get() + 1);
                pause_past(deadline);
            }
        }
    };
    (hook, written, late)
}

fn pause_past(deadline: Instant) {
    while Instant::now() <= deadline {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + LOCK_POLL);
    }
}

/// `answer` is a timeout that sent nothing, and says what was not done.
#[track_caller]
fn assert_not_sent<T: std::fmt::Debug>(what: &str, answer: Result<T, StoreError>) {
    let e = answer.expect_err(what);
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{what}: {e}");
    assert!(e.is_timeout(), "{what}: {e}");
    assert_eq!(
        e.delivery(),
        bucket_lease_core::store::Delivery::NotSent,
        "{what}: {e}"
    );
    assert!(e.to_string().contains("nothing was sent"), "{what}: {e}");
}

/// A write whose deadline passes while its temporary file is being
/// written stops at the next chunk: no byte is written after the
/// deadline but those of the chunk under way, nothing is published,
/// and the temporary file is removed.
#[test]
fn a_write_whose_deadline_passes_mid_body_writes_no_further_chunk() {
    let (dir, store) = store();
    let deadline = Instant::now() + Duration::from_secs(1);
    let (hook, written, late) = pausing_after_each_chunk(deadline);
    let body = vec![b'x'; 2 * CHUNK + CHUNK / 2];
    let options = PutOptions::new(PutMode::Create).with_deadline(Some(deadline));
    let answer = with_hook(hook, || store.put("k", &body, &options));
    assert_eq!(
        late.get(),
        0,
        "{} chunks written after the deadline had passed ({} in all)",
        late.get(),
        written.get()
    );
    assert_not_sent("create", answer);
    assert_eq!(
        (listing(&dir.0), leftovers(&dir.0)),
        (vec![], vec![]),
        "nothing published, nothing left"
    );
}

/// A hook that pauses a request past `deadline` right before it
/// publishes (a stopped process, a slow disk).
fn pause_before_publishing(deadline: Instant) -> impl FnMut(Step) {
    move |step| {
        if step == Step::Publishing {
            pause_past(deadline);
        }
    }
}

/// `k` created holding `before`, and the three writes a test sends over
/// it, each with its name and key: a create of `new`, an update of `k` at
/// its version (returned too), an overwrite of `k`.
fn three_writes_over_k(store: &DirStore) -> (Version, [(&'static str, &'static str, PutMode); 3]) {
    let v = put(store, "k", b"before", PutMode::Create).unwrap();
    let update = PutMode::Update(v.clone());
    let writes = [
        ("create", "new", PutMode::Create),
        ("update", "k", update),
        ("overwrite", "k", PutMode::Overwrite),
    ];
    (v, writes)
}

/// A write paused past its deadline after it took the lock and its
/// condition held publishes nothing: no rename, and the temporary file
/// is removed.
#[test]
fn a_write_paused_past_its_deadline_under_the_lock_publishes_nothing() {
    let (dir, store) = store();
    let (v, writes) = three_writes_over_k(&store);
    for (what, key, mode) in writes {
        let deadline = Instant::now() + Duration::from_millis(100);
        let options = PutOptions::new(mode).with_deadline(Some(deadline));
        let answer = with_hook(pause_before_publishing(deadline), || {
            store.put(key, b"after", &options)
        });
        assert_not_sent(what, answer);
    }
    let got = store.get("k", None).unwrap();
    assert_eq!((got.body, got.version), (b"before".to_vec(), v));
    assert_eq!(listing(&dir.0), ["k"]);
    assert!(leftovers(&dir.0).is_empty(), "no temporary files");
}

/// A delete paused past its deadline after it took the lock and its
/// condition held removes nothing.
#[test]
fn a_delete_paused_past_its_deadline_under_the_lock_removes_nothing() {
    let (dir, store) = store();
    let v = put(&store, "k", b"before", PutMode::Create).unwrap();
    for (what, mode) in [
        ("delete", DeleteMode::Unconditional),
        ("conditional delete", DeleteMode::IfVersion(v.clone())),
    ] {
        let deadline = Instant::now() + Duration::from_millis(100);
        let answer = with_hook(pause_before_publishing(deadline), || {
            store.delete("k", &mode, Some(deadline))
        });
        assert_not_sent(what, answer);
    }
    let got = store.get("k", None).unwrap();
    assert_eq!((got.body, got.version), (b"before".to_vec(), v));
    assert_eq!(listing(&dir.0), ["k"]);
}

/// The lock loop checks the deadline before every try: a lock let go
/// after the deadline, while the loop slept its last sleep, is not
/// taken.
#[test]
fn the_lock_is_never_taken_after_the_deadline() {
    let (dir, store) = store();
    let holder = another_process_locks(&dir);
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut holder = Some(holder);
    let taken = Rc::new(Cell::new(0));
    let hook = {
        let taken = taken.clone();
        move |step| match step {
            // The other holder lets go as soon as the deadline has
            // passed, while this request sleeps.
            Step::LockSlept if Instant::now() > deadline => drop(holder.take()),
            Step::Locked => taken.set(taken.get() + 1),
            _ => {}
        }
    };
    let options = PutOptions::new(PutMode::Create).with_deadline(Some(deadline));
    let answer = with_hook(hook, || store.put("k", b"late", &options));
    assert_eq!(taken.get(), 0, "the lock was taken after the deadline");
    assert_not_sent("create", answer);
    assert_eq!((listing(&dir.0), leftovers(&dir.0)), (vec![], vec![]));
}

/// Two writes of one store (a handle and its clone) on two threads take
/// turns at the bucket's lock: the second waits for the first to let go
/// and is woken then, never finding the lock file taken and sleeping
/// before it tries again (a pool's renewal threads share a store).
#[test]
fn writes_of_one_store_wait_for_the_lock_without_polling() {
    let (_dir, store) = store();
    let (locked_tx, locked) = std::sync::mpsc::channel();
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let first = {
        let store = store.clone();
        std::thread::spawn(move || {
            let hook = move |step| {
                if step == Step::Locked {
                    locked_tx.send(()).unwrap();
                    go.recv().unwrap();
                }
            };
            with_hook(hook, || put(&store, "a", b"first", PutMode::Create))
        })
    };
    locked.recv().unwrap();
    let second = {
        let store = store.clone();
        std::thread::spawn(move || {
            let slept = Rc::new(Cell::new(0));
            let hook = {
                let slept = slept.clone();
                move |step| {
                    if step == Step::LockSlept {
                        slept.set(slept.get() + 1);
                    }
                }
            };
            let answer = with_hook(hook, || put(&store, "b", b"second", PutMode::Create));
            (answer, slept.get())
        })
    };
    // Time for the second write to reach the lock while the first holds it.
    std::thread::sleep(Duration::from_millis(100));
    go_tx.send(()).unwrap();
    first.join().unwrap().unwrap();
    let (answer, slept) = second.join().unwrap();
    answer.unwrap();
    assert_eq!(slept, 0, "the second write polled the lock file");
    assert_eq!(store.get("b", None).unwrap().body, b"second");
}

#[test]
fn an_object_over_the_cap_is_too_large_and_carries_its_version() {
    const CAP: usize = 64 * 1024;
    let (dir, store) = store();
    put(&store, "at-cap", &vec![b'y'; CAP], PutMode::Create).unwrap();
    assert_eq!(store.get("at-cap", None).unwrap().body.len(), CAP);

    let v = put(&store, "big", &vec![b'x'; CAP + 1], PutMode::Create).unwrap();
    let e = match store.get("big", None) {
        Ok(object) => panic!("read {} bytes, over the cap", object.body.len()),
        Err(e) => e,
    };
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
    assert_eq!(e.version(), Some(&v));
    assert!(e.to_string().contains("65536-byte cap"), "{e}");
    // Its version is enough to replace it conditionally, unread.
    let replaced = put(&store, "big", b"small", PutMode::Update(v.clone())).unwrap();
    assert_eq!(store.get("big", None).unwrap().version, replaced);

    // A terabyte (sparse) body is not read: the answer comes at once.
    let file = File::create(dir.0.join("huge")).unwrap();
    attr::set(&file, &encode_header(None, "\"huge\"", &[])).unwrap();
    if file.set_len(1 << 40).is_ok() {
        let e = store.get("huge", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
        assert_eq!(e.version(), Some(&Version::etag("\"huge\"")));
        // HEAD reads the attribute alone, whatever the body's size.
        let head = store.head("huge", None).unwrap();
        assert_eq!(head.version, Version::etag("\"huge\""));
        assert!(head.body.is_empty());
    }
    let e = store.head("absent", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound);
}

#[test]
fn two_handles_on_one_directory_share_objects_and_conditions() {
    let (dir, first) = store();
    let second = DirStore::open(&dir.0).unwrap();
    let v = put(&first, "k", b"1", PutMode::Create).unwrap();
    assert_eq!(
        put(&second, "k", b"2", PutMode::Create).unwrap_err().kind(),
        StoreErrorKind::AlreadyExists
    );
    let v2 = put(&second, "k", b"2", PutMode::Update(v.clone())).unwrap();
    assert_eq!(
        put(&first, "k", b"3", PutMode::Update(v))
            .unwrap_err()
            .kind(),
        StoreErrorKind::Precondition
    );
    assert_eq!(first.get("k", None).unwrap().version, v2);
}
