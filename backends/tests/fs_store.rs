//! The directory store's conditions hold across processes.
//!
//! Each test runs as the parent, then re-runs this test binary as several
//! child processes (`current_exe`, filtered to the same test, with
//! `BUCKET_LEASE_FS_CHILD_ROOT` set) that open the parent's directory and
//! race on it. The children wait at a barrier kept in the store itself, so
//! they start their requests together.
#![cfg(feature = "fs")]

use bucket_lease_backends::fs::DirStore;
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in a child: the bucket directory to open.
const CHILD_ROOT: &str = "BUCKET_LEASE_FS_CHILD_ROOT";
/// Set in a child: its number.
const CHILD_NUMBER: &str = "BUCKET_LEASE_FS_CHILD_NUMBER";
/// How long a child waits at the barrier, or the parent for its children.
const PATIENCE: Duration = Duration::from_secs(60);

/// A directory under the system's temporary directory with a random name,
/// removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!("bucket-lease-fs-store-{:016x}", getrandom::u64().unwrap());
        let dir = std::env::temp_dir().join(name);
        // The bucket's directory must exist, as an S3 bucket must.
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// In a child process: the store and the child's number.
fn as_child() -> Option<(DirStore, usize)> {
    let root = std::env::var_os(CHILD_ROOT)?;
    let number = std::env::var(CHILD_NUMBER).unwrap().parse().unwrap();
    Some((DirStore::open(Path::new(&root)).unwrap(), number))
}

fn put(store: &DirStore, key: &str, body: &[u8], mode: PutMode) -> Result<(), StoreErrorKind> {
    store
        .put(key, body, &PutOptions::new(mode))
        .map(drop)
        .map_err(|e| e.kind())
}

fn body(store: &DirStore, key: &str) -> Option<String> {
    match store.get(key, None) {
        Ok(object) => Some(String::from_utf8(object.body).unwrap()),
        Err(e) if e.kind() == StoreErrorKind::NotFound => None,
        Err(e) => panic!("{e}"),
    }
}

/// Wait until `ready` holds, or panic naming `what`.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Child side of the barrier: say we are ready, wait for the go.
fn child_barrier(store: &DirStore, number: usize) {
    put(
        store,
        &format!("barrier/ready-{number}"),
        b"",
        PutMode::Create,
    )
    .unwrap();
    wait_for("the go", || body(store, "barrier/go").is_some());
}

/// Run `test` as `children` child processes on `store`'s directory, release
/// them together, and wait until all have exited successfully.
fn run_children(test: &str, store: &DirStore, children: usize) {
    let exe = std::env::current_exe().unwrap();
    let spawned: Vec<Child> = (0..children)
        .map(|number| {
            Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_ROOT, store.root())
                .env(CHILD_NUMBER, number.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for("every child at the barrier", || {
        (0..children).all(|n| body(store, &format!("barrier/ready-{n}")).is_some())
    });
    put(store, "barrier/go", b"", PutMode::Create).unwrap();
    for (number, child) in spawned.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child {number} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

const PROCESSES: usize = 4;
const INCREMENTS: usize = 25;

#[test]
fn increments_from_several_processes_are_all_counted() {
    if let Some((store, number)) = as_child() {
        child_barrier(&store, number);
        for _ in 0..INCREMENTS {
            loop {
                let current = store.get("counter", None).unwrap();
                let n: usize = String::from_utf8(current.body).unwrap().parse().unwrap();
                let next = (n + 1).to_string();
                let mode = PutMode::Update(current.version);
                match put(&store, "counter", next.as_bytes(), mode) {
                    Ok(()) => break,
                    Err(StoreErrorKind::Precondition) => continue,
                    Err(other) => panic!("an update answered {other:?}"),
                }
            }
        }
        return;
    }
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    put(&store, "counter", b"0", PutMode::Create).unwrap();
    run_children(
        "increments_from_several_processes_are_all_counted",
        &store,
        PROCESSES,
    );
    assert_eq!(
        body(&store, "counter").unwrap(),
        (PROCESSES * INCREMENTS).to_string()
    );
}

const RACERS: usize = 6;
const ROUNDS: usize = 20;

#[test]
fn of_processes_racing_to_create_one_key_exactly_one_wins() {
    if let Some((store, number)) = as_child() {
        child_barrier(&store, number);
        let outcomes: Vec<&str> = (0..ROUNDS)
            .map(|round| {
                let key = format!("race-{round}/LEASE");
                match put(&store, &key, number.to_string().as_bytes(), PutMode::Create) {
                    Ok(()) => "won",
                    Err(StoreErrorKind::AlreadyExists) => "refused",
                    Err(other) => panic!("a create answered {other:?}"),
                }
            })
            .collect();
        let key = format!("outcomes/{number}");
        put(&store, &key, outcomes.join(",").as_bytes(), PutMode::Create).unwrap();
        return;
    }
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    run_children(
        "of_processes_racing_to_create_one_key_exactly_one_wins",
        &store,
        RACERS,
    );
    let outcomes: Vec<String> = (0..RACERS)
        .map(|n| body(&store, &format!("outcomes/{n}")).unwrap())
        .collect();
    let mut by_child: Vec<_> = outcomes.iter().map(|o| o.split(',')).collect();
    for round in 0..ROUNDS {
        let answers: Vec<&str> = by_child.iter_mut().map(|o| o.next().unwrap()).collect();
        let winners: Vec<usize> = (0..RACERS).filter(|&n| answers[n] == "won").collect();
        let refused = answers.iter().filter(|&&a| a == "refused").count();
        assert_eq!((winners.len(), refused), (1, RACERS - 1), "round {round}");
        let lease = body(&store, &format!("race-{round}/LEASE")).unwrap();
        assert_eq!(lease, winners[0].to_string(), "round {round}");
    }
}

/// Set in the child that holds the bucket's lock: the file it creates once
/// it holds it. The child holds the lock until that file is removed.
const LOCK_HELD: &str = "BUCKET_LEASE_FS_CHILD_LOCK_HELD";

#[test]
fn a_lock_held_by_another_process_times_out_at_the_deadline() {
    if let Some(held) = std::env::var_os(LOCK_HELD) {
        let root = std::env::var_os(CHILD_ROOT).unwrap();
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(Path::new(&root).join(".bucket-lease/lock"))
            .unwrap();
        lock.lock().unwrap();
        std::fs::write(&held, b"").unwrap();
        wait_for("the parent to let go", || !Path::new(&held).exists());
        return;
    }
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    let version = store
        .put("k", b"before", &PutOptions::new(PutMode::Create))
        .unwrap();
    let held = dir.0.join("child-holds-the-lock");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_lock_held_by_another_process_times_out_at_the_deadline",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT, store.root())
        .env(LOCK_HELD, &held)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the child to hold the lock", || held.exists());

    // Each request on a thread, so a request that waits for ever fails the
    // test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let (s, v) = (store.clone(), version.clone());
    std::thread::spawn(move || {
        let soon = || Some(Instant::now() + Duration::from_millis(200));
        let update = PutOptions::new(PutMode::Update(v)).with_deadline(soon());
        let _ = tx.send(("update", s.put("k", b"after", &update).map(drop)));
        let delete = s.delete("k", &DeleteMode::Unconditional, soon());
        let _ = tx.send(("delete", delete));
    });
    for _ in 0..2 {
        let (what, answer) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("a request still waiting for the lock after 5 s");
        let e = answer.expect_err(what);
        assert_eq!(e.kind(), StoreErrorKind::Transport, "{what}: {e}");
        assert!(e.is_timeout(), "{what}: {e}");
        assert!(!e.may_have_landed(), "{what}: {e}");
        assert!(e.to_string().contains("nothing was sent"), "{what}: {e}");
    }
    let object = store.get("k", None).unwrap();
    assert_eq!((object.body, object.version), (b"before".to_vec(), version));

    std::fs::remove_file(&held).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the lock-holding child failed: {status}");
}

/// A large write started just before its deadline (the case of a fenced
/// upload started late in the lease): writing the body takes far longer
/// than the time left, so the store gives up between two chunks. Nothing
/// is published, the answer says nothing was sent, and no temporary file
/// is left.
#[test]
fn a_large_write_started_just_before_its_deadline_publishes_nothing() {
    use bucket_lease_core::store::Delivery;
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    // 128 MiB: written and synced in 10 ms, it would take over 12 GB/s.
    let body = vec![b'x'; 128 << 20];
    let options = PutOptions::new(PutMode::Create)
        .with_deadline(Some(Instant::now() + Duration::from_millis(10)));
    let e = store.put("big", &body, &options).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(e.is_timeout(), "{e}");
    assert_eq!(e.delivery(), Delivery::NotSent, "{e}");
    assert!(e.to_string().contains("nothing was sent"), "{e}");
    let read = store
        .head("big", None)
        .expect_err("the object was published");
    assert_eq!(read.kind(), StoreErrorKind::NotFound, "{read}");
    let mut left: Vec<_> = std::fs::read_dir(dir.0.join(".bucket-lease/tmp"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    left.sort();
    assert!(left.is_empty(), "a temporary file was left: {left:?}");
    assert!(!dir.0.join("big").exists());
}
