//! `bucket-lease migrate-dir` goes on where it stopped, whatever system
//! call it stopped at (issue 39): proof by fault injection with strace.
//!
//! A small bucket of the first directory layout (four objects, nested keys,
//! a `LEASE` record, a leftover temporary file) is migrated once under
//! strace to count the file system calls the command makes. Then, for
//! each of those calls in turn, a fresh copy of the bucket is migrated
//! with that one call failing (`EIO`), and another with the command killed
//! there (`SIGKILL`); each time `migrate-dir` is run again without a fault
//! and must finish: exit 0, every object's bytes, ETag and metadata kept,
//! nothing of the migration left behind, the bucket opened by the store,
//! and an update conditional on the lease record's old ETag landing (a
//! held lease stays held). The table of cases is printed.
//!
//! strace counts each system call per thread, and `when=N` injects at a
//! thread's N-th call of that name, so each name is swept over the
//! largest count a thread of the command made.
//!
//! Without strace (or where it may not trace) the test prints a note and
//! returns, unless `BUCKET_LEASE_REQUIRE_SERVERS=1` (scripts/test.sh, which
//! installs strace through scripts/test-servers.sh).

mod cli_common;

use bucket_lease::backends::fs::DirStore;
use bucket_lease::store::{PutMode, PutOptions, Version};
use bucket_lease::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The system calls that touch files, as named on x86-64 and aarch64 (a
/// name the machine lacks is skipped: `?` in strace's filter).
const SYSCALLS: &[&str] = &[
    "openat",
    "openat2",
    "open",
    "mkdir",
    "mkdirat",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "getdents64",
    "newfstatat",
    "statx",
    "read",
    "pread64",
    "write",
    "copy_file_range",
    "sendfile",
    "fsync",
    "fdatasync",
    "fsetxattr",
    "flock",
];

/// The objects of the bucket: key, ETag, metadata as the first layout's
/// header has it (escaped), as the store reads it back, and the bytes.
struct Object {
    key: &'static str,
    etag: &'static str,
    header_meta: &'static [(&'static str, &'static str)],
    metadata: &'static [(&'static str, &'static str)],
    body: Vec<u8>,
}

fn objects() -> Vec<Object> {
    vec![
        Object {
            key: "LEASE",
            etag: "\"5d41402abc4b2a76b9719d911017c592\"",
            header_meta: &[],
            metadata: &[],
            body: br#"{"holder":"4f3c","expires":"2030-01-01T00:00:00Z"}"#.to_vec(),
        },
        Object {
            key: "jobs/parts/1-0",
            etag: "\"e1\"",
            header_meta: &[("bucket-lease-epoch", "7")],
            metadata: &[("bucket-lease-epoch", "7")],
            body: b"\n\npart one\0".to_vec(),
        },
        Object {
            key: "jobs/parts/2-0",
            etag: "\"e2\"",
            header_meta: &[],
            metadata: &[],
            body: (0..5000u32).map(|i| (i % 251) as u8).collect(),
        },
        Object {
            key: "notes",
            etag: "\"e3\"",
            header_meta: &[("note", "a%20b")],
            metadata: &[("note", "a b")],
            body: Vec::new(),
        },
    ]
}

/// Make a bucket of the first layout in the empty directory `dir`.
fn old_bucket(dir: &Path) {
    fs::write(dir.join(".bucket-lease.lock"), b"").unwrap();
    for object in objects() {
        let segments: Vec<&str> = object.key.split('/').collect();
        let (name, folders) = segments.split_last().unwrap();
        let mut path = dir.to_path_buf();
        for folder in folders {
            path.push(format!("{folder}.dir"));
        }
        fs::create_dir_all(&path).unwrap();
        let mut text = format!("bucket-lease object v1\netag {}\n", object.etag);
        for (name, value) in object.header_meta {
            text.push_str(&format!("meta {name} {value}\n"));
        }
        text.push('\n');
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(&object.body);
        fs::write(path.join(format!("{name}.obj")), bytes).unwrap();
    }
    // A write the first layout never finished.
    fs::write(dir.join("jobs.dir/LEASE.0123.tmp"), b"half a record").unwrap();
}

/// The command under test.
fn command() -> &'static str {
    env!("CARGO_BIN_EXE_bucket-lease")
}

/// `program`, run as every case runs it: without the library path cargo
/// sets for tests, which the command does not need and which would make
/// its loader try many more files (calls to fault for nothing).
fn plain(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd
}

/// Whether strace runs and may trace here; `false` with a note (or a
/// failure under `BUCKET_LEASE_REQUIRE_SERVERS=1`) otherwise.
fn strace_usable() -> bool {
    let works = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "true"])
        .output()
        .is_ok_and(|out| out.status.success());
    if works {
        return true;
    }
    let note = "strace is not installed, or may not trace here (scripts/test-servers.sh start \
                installs it)";
    assert!(
        std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() != Ok("1"),
        "{note}"
    );
    eprintln!("note: skipping the fault sweep of migrate-dir: {note}");
    false
}

/// A fresh directory for this test.
fn scratch() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-migrate-faults-{}-{nanos:x}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// How many times a thread of `migrate-dir` calls each of [`SYSCALLS`]
/// (the most any one thread does), from one run on a fresh bucket.
fn count_calls(work: &Path) -> BTreeMap<String, usize> {
    let bucket = work.join("count");
    fs::create_dir(&bucket).unwrap();
    old_bucket(&bucket);
    let log = work.join("count.strace");
    let filter: Vec<String> = SYSCALLS.iter().map(|name| format!("?{name}")).collect();
    let mut cmd = plain("strace");
    cmd.args(["-f", "-qq", "-o"])
        .arg(&log)
        .arg("-e")
        .arg(format!("trace={}", filter.join(",")))
        .arg(command())
        .arg("migrate-dir")
        .arg(&bucket);
    let out = cli_common::output_within(&mut cmd, cli_common::COMMAND_LIMIT);
    assert!(out.status.success(), "the counting run failed: {out:?}");
    // `PID name(` starts each call (`<... name resumed>` ends one that
    // another thread interrupted: not a second call).
    let mut per_thread: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in fs::read_to_string(&log).unwrap().lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some((name, _)) = rest.split_once('(') else {
            continue;
        };
        if SYSCALLS.contains(&name) {
            *per_thread
                .entry((pid.to_string(), name.to_string()))
                .or_default() += 1;
        }
    }
    let mut counts = BTreeMap::new();
    for ((_, name), count) in per_thread {
        let most: &mut usize = counts.entry(name).or_default();
        *most = (*most).max(count);
    }
    fs::remove_dir_all(&bucket).unwrap();
    counts
}

/// A fault injected at one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Eio,
    Kill,
}

impl Fault {
    fn inject(self, syscall: &str, nth: usize) -> String {
        match self {
            Fault::Eio => format!("inject={syscall}:error=EIO:when={nth}"),
            Fault::Kill => format!("inject={syscall}:signal=KILL:when={nth}"),
        }
    }
}

/// What one case came to: whether the faulty run failed (exited other
/// than 0, or was killed), and whether the run again recovered (`Err`
/// says how it did not).
struct Outcome {
    stopped: bool,
    recovered: Result<(), String>,
}

/// One case: a fresh bucket, `migrate-dir` with `fault` at the `nth`
/// call of `syscall`, then `migrate-dir` again.
fn run_case(bucket: &Path, syscall: &str, nth: usize, fault: Fault) -> Outcome {
    fs::create_dir(bucket).unwrap();
    old_bucket(bucket);
    let mut faulty = plain("strace");
    faulty
        .args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(fault.inject(syscall, nth))
        .arg(command())
        .arg("migrate-dir")
        .arg(bucket);
    let first = cli_common::output_within(&mut faulty, cli_common::COMMAND_LIMIT);
    let first_said = String::from_utf8_lossy(&first.stderr).trim().to_string();
    let again = cli_common::output_within(
        plain(command()).arg("migrate-dir").arg(bucket),
        cli_common::COMMAND_LIMIT,
    );
    let recovered = if again.status.success() {
        check_migrated(bucket).map_err(|e| format!("{e} (the faulty run: {first_said})"))
    } else {
        Err(format!(
            "the run again exited {:?}: {} (the faulty run: {:?} {first_said})",
            again.status.code(),
            String::from_utf8_lossy(&again.stderr).trim(),
            first.status
        ))
    };
    Outcome {
        stopped: !first.status.success(),
        recovered,
    }
}

/// The bucket at `dir` is of the plain-file layout, whole: every object
/// with its bytes, ETag and metadata, nothing else; the store opens it,
/// and an update on the lease record's old ETag lands.
fn check_migrated(dir: &Path) -> Result<(), String> {
    let store = DirStore::open(dir).map_err(|e| format!("the store does not open: {e}"))?;
    let mut found = BTreeSet::new();
    files(dir, "", &mut found);
    let wanted: BTreeSet<String> = objects().iter().map(|o| o.key.to_string()).collect();
    if found != wanted {
        return Err(format!("the bucket holds {found:?}, not {wanted:?}"));
    }
    let own: BTreeSet<String> = names(&dir.join(".bucket-lease"));
    let kept: BTreeSet<String> = ["lock", "tmp", "uploads"].map(String::from).into();
    if own != kept {
        return Err(format!(
            "the store's folder holds {own:?}: the migration left something behind"
        ));
    }
    if !names(&dir.join(".bucket-lease/tmp")).is_empty() {
        return Err("the store's tmp folder is not empty".into());
    }
    for object in objects() {
        let got = store
            .get(object.key, None)
            .map_err(|e| format!("GET {}: {e}", object.key))?;
        let metadata: Vec<(String, String)> = object
            .metadata
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        if got.body != object.body
            || got.version != Version::etag(object.etag)
            || got.metadata != metadata
        {
            return Err(format!(
                "{} came back as {:?} with {:?}, not as it was",
                object.key, got.version, got.metadata
            ));
        }
    }
    let lease = &objects()[0];
    store
        .put(
            lease.key,
            b"{}",
            &PutOptions::new(PutMode::Update(Version::etag(lease.etag))),
        )
        .map_err(|e| format!("the update on the lease record's old ETag failed: {e}"))?;
    Ok(())
}

/// The names in `dir`.
fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The files under `dir` (the store's own left out), as keys.
fn files(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if prefix.is_empty() && name.starts_with(".bucket-lease") {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            files(&entry.path(), &format!("{prefix}{name}/"), out);
        } else {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

#[test]
fn migrate_dir_recovers_from_a_failure_or_a_kill_at_every_file_system_call() {
    if !strace_usable() {
        return;
    }
    let started = Instant::now();
    let work = scratch();
    let counts = count_calls(&work);
    let cases: Vec<(String, usize, Fault)> = counts
        .iter()
        .flat_map(|(name, &count)| {
            (1..=count).flat_map(move |nth| {
                [Fault::Eio, Fault::Kill].map(|fault| (name.clone(), nth, fault))
            })
        })
        .collect();
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    // Two at a time: each case is two short processes, mostly waiting on
    // strace and fsync.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some((syscall, nth, fault)) = cases.get(at) else {
                    break;
                };
                let bucket = work.join(format!("case-{at}"));
                let outcome = run_case(&bucket, syscall, *nth, *fault);
                let _ = fs::remove_dir_all(&bucket);
                outcomes
                    .lock()
                    .unwrap()
                    .push((syscall.clone(), *nth, *fault, outcome));
            });
        }
    });
    let _ = fs::remove_dir_all(&work);
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by(|a, b| (&a.0, a.2, a.1).cmp(&(&b.0, b.2, b.1)));

    // syscall -> [[cases, stopped, recovered]; EIO, KILL]
    let mut table: BTreeMap<&str, [[usize; 3]; 2]> = BTreeMap::new();
    for (syscall, _, fault, outcome) in &outcomes {
        let cell = &mut table.entry(syscall.as_str()).or_default()[*fault as usize];
        cell[0] += 1;
        cell[1] += usize::from(outcome.stopped);
        cell[2] += usize::from(outcome.recovered.is_ok());
    }
    println!(
        "migrate-dir under fault injection: cases (calls faulted), stopped (the faulty run \
         failed, or was killed), recovered (the run again finished the migration, every \
         object kept)"
    );
    let row = |name: &str, cells: &[[usize; 3]; 2]| {
        println!(
            "{name:<16} {:>6} {:>8} {:>10}   {:>6} {:>8} {:>10}",
            cells[0][0], cells[0][1], cells[0][2], cells[1][0], cells[1][1], cells[1][2]
        );
    };
    println!(
        "{:<16} {:>26}   {:>26}",
        "", "EIO at the call", "SIGKILL at the call"
    );
    println!(
        "{:<16} {:>6} {:>8} {:>10}   {:>6} {:>8} {:>10}",
        "syscall", "cases", "stopped", "recovered", "cases", "stopped", "recovered"
    );
    let mut total = [[0; 3]; 2];
    for (syscall, cells) in &table {
        row(syscall, cells);
        for (sum, cell) in total.iter_mut().zip(cells) {
            for (sum, count) in sum.iter_mut().zip(cell) {
                *sum += count;
            }
        }
    }
    row("total", &total);
    let failed: Vec<_> = outcomes
        .iter()
        .filter_map(|(syscall, nth, fault, outcome)| {
            outcome
                .recovered
                .as_ref()
                .err()
                .map(|why| format!("{fault:?} at {syscall} #{nth}: {why}"))
        })
        .collect();
    println!(
        "{} cases, {} failed, in {:.1?}",
        outcomes.len(),
        failed.len(),
        started.elapsed()
    );
    for line in failed.iter().take(30) {
        println!("FAILED {line}");
    }
    // The faults took effect (a strace that injected nothing would make
    // every case pass).
    assert!(
        total[0][1] > 0 && total[1][1] * 2 > total[1][0],
        "too few faulty runs stopped: {total:?}"
    );
    assert!(
        failed.is_empty(),
        "{} of {} cases did not recover (listed above)",
        failed.len(),
        outcomes.len()
    );
}

/// Promise: migrate-dir takes "PATH (a path, or a file:// URL naming the
/// bucket's directory)", and its errors name the bucket as such a URL
/// (`MIGRATE file:///srv/a%25b//`). Schedule: a bucket of the first layout
/// in the directory `a%b`, named as the store's URLs name it,
/// `file:///…/a%25b//` (percent-decoded by `StoreUrl::parse`), and as
/// `file://localhost/…/a%25b//` (which `StoreUrl::parse` also takes):
/// migrate-dir decodes nothing and keeps `localhost`, so it looks for
/// `…/a%25b` (or the relative `localhost/…`) and answers "not a bucket of
/// the first directory layout", exit 78.
#[test]
fn review_a_file_url_is_not_percent_decoded_nor_localhost_taken() {
    let dir = std::env::temp_dir().join(format!("review-migrate-cli-{}", std::process::id()));
    for url_of in [
        |path: &str| format!("file://{}//", path.replace('%', "%25")),
        |path: &str| format!("file://localhost{}//", path.replace('%', "%25")),
    ] {
        let _ = fs::remove_dir_all(&dir);
        let bucket = dir.join("a%b");
        fs::create_dir_all(&bucket).unwrap();
        fs::write(bucket.join(".bucket-lease.lock"), b"").unwrap();
        fs::write(
            bucket.join("k.obj"),
            b"bucket-lease object v1\netag \"e1\"\n\nbody",
        )
        .unwrap();
        let url = url_of(bucket.to_str().unwrap());
        let out = Command::new(env!("CARGO_BIN_EXE_bucket-lease"))
            .args(["migrate-dir", &url])
            .output()
            .unwrap();
        let _ = fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "migrate-dir {url} exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
