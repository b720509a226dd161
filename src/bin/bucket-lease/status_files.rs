//! `run --metrics-file PATH` and `--status-file PATH`: the lease as files a
//! monitoring agent reads (node_exporter's textfile collector, a script).
//!
//! What it promises:
//!
//! - **Whole files only.** Each write goes to a hidden temporary file
//!   beside PATH (`.NAME.RANDOM.tmp`, which the textfile collector skips:
//!   it reads `*.prom`) and is renamed over PATH, so a reader sees the last
//!   file or the new one, never half of one. A failed write removes its
//!   own temporary; one left by a crash between the write and the rename
//!   is safe to remove.
//! - **Nothing planted in the directory is followed** (issue 39). The
//!   directory is often writable by a group (a textfile collector's). The
//!   temporary's name is random, unpredictable to other processes, and it
//!   is created exclusively, never through a link (`O_CREAT | O_EXCL |
//!   O_NOFOLLOW`): a file or link already at that name is left alone and
//!   another name is tried. When PATH itself is a symbolic link, the
//!   rename replaces the link with a regular file; the link's target is
//!   never written.
//! - **Every renewal and change of state shows.** A thread of its own
//!   looks at the lease's totals ([`bucket_lease::stats`]) every
//!   [`LOOK_EVERY`] and writes when a renewal attempt, a loss or the state
//!   changed, and at least every [`REFRESH_EVERY`] while held, so that
//!   `bucket_lease_seconds_to_fence` stays near the truth. The files also
//!   carry the write deadline as a Unix time
//!   (`bucket_lease_fence_timestamp_seconds`, `fence_at`), which stays
//!   true however old the file is.
//! - **Nothing waits on the files.** Only that thread writes them; the
//!   threads that keep the lease and stop the command never wait on it,
//!   so a stuck disk or NFS mount cannot delay a renewal or a kill.
//! - **Held from the acquire to the release, 0 at the ends.** Before the
//!   lease is taken (while `--wait` waits) the files say not held;
//!   at exit, after the release (or the loss), they say not held again
//!   (`bucket_lease_held{key="…"} 0`), within [`FINAL_WRITE_BOUND`]. A
//!   file that cannot be written at the start ends run with exit 78 before
//!   anything is taken; a later failure is logged once and written again
//!   at the next change.

use crate::cli::{exit, Failure};
use crate::text::object;
use bucket_lease::channel::{self as crossbeam_channel, Receiver, Sender};
use bucket_lease::stats::{prometheus_not_held, LeaseStats, LossReason, RenewalOutcome};
use bucket_lease::{lease::LeaseStatus, Lease};
use serde_json::Value;
use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How often the writer looks at the lease's totals.
pub const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The longest a held lease's files go unwritten.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// How long run waits for the first files (before the acquire), and for
/// the last (at exit), before it goes on without them.
pub const FINAL_WRITE_BOUND: Duration = Duration::from_secs(2);

/// Where the files go, and what they are about.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `--metrics-file`: the Prometheus text.
    pub metrics: Option<PathBuf>,
    /// `--status-file`: the same as one JSON object.
    pub status: Option<PathBuf>,
}

impl Paths {
    /// The files, as a warning names them: `--metrics-file /x.prom`, and
    /// `--status-file /y.json` when given.
    fn describe(&self) -> String {
        let named = [
            ("--metrics-file", &self.metrics),
            ("--status-file", &self.status),
        ];
        named
            .iter()
            .filter_map(|(option, path)| path.as_ref().map(|p| format!("{option} {}", p.display())))
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// The writer thread, and how to tell it of the lease and of the end.
pub struct StatusFiles {
    paths: Paths,
    lease: Arc<Mutex<Option<Arc<Lease>>>>,
    stop: Option<Sender<()>>,
    written: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl StatusFiles {
    /// Write the not-held files for `url` (key `key`) and start the writer;
    /// `None` when neither file was asked for.
    ///
    /// # Errors
    ///
    /// Exit 78 when a file cannot be written (its directory missing or
    /// read-only), naming the option and the path.
    pub fn start(paths: Paths, url: &str, key: &str) -> Result<Option<StatusFiles>, Failure> {
        if paths.metrics.is_none() && paths.status.is_none() {
            return Ok(None);
        }
        let files = paths.clone();
        let writer = Writer {
            paths,
            url: url.to_string(),
            key: key.to_string(),
            failing: false,
        };
        // The first write, on the writer's thread too, bounded: a path that
        // cannot be written is a configuration error, said before anything
        // is taken.
        let (first_tx, first_rx) = crossbeam_channel::bounded(1);
        let (stop, stop_rx) = crossbeam_channel::bounded(1);
        let (written_tx, written) = crossbeam_channel::bounded(1);
        let lease = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&lease);
        let thread = std::thread::Builder::new()
            .name("status-files".to_string())
            .spawn(move || {
                let mut writer = writer;
                let first = writer.write_not_held("waiting");
                let ok = first.is_ok();
                let _ = first_tx.send(first);
                if ok {
                    writer.follow(&shared, &stop_rx);
                    let _ = written_tx.send(());
                }
            })
            .map_err(|e| {
                Failure::new(
                    exit::STORE,
                    format!("run: cannot start the thread that writes the status files: {e}"),
                )
            })?;
        match first_rx.recv_timeout(FINAL_WRITE_BOUND) {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return Err(Failure::new(exit::CONFIG, format!("run: {message}"))),
            Err(_) => log::warn!(
                "{} not written within {} s: check the file system that holds it (slow, full or \
                 stuck?); run goes on, and writes it when that answers",
                files.describe(),
                FINAL_WRITE_BOUND.as_secs()
            ),
        }
        Ok(Some(StatusFiles {
            paths: files,
            lease,
            stop: Some(stop),
            written,
            thread: Some(thread),
        }))
    }

    /// From now on, write what `lease` says.
    pub fn follow(&self, lease: &Arc<Lease>) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(lease));
    }
}

impl Drop for StatusFiles {
    /// The last write (not held), waited for within [`FINAL_WRITE_BOUND`].
    fn drop(&mut self) {
        drop(self.stop.take());
        match self.written.recv_timeout(FINAL_WRITE_BOUND) {
            Ok(()) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(_) => log::warn!(
                "{}: the last write did not finish within {} s, so it may still say the lease \
                 is held; check the file system that holds it (run has released the lease)",
                self.paths.describe(),
                FINAL_WRITE_BOUND.as_secs()
            ),
        }
    }
}

/// The writer thread's side.
struct Writer {
    paths: Paths,
    url: String,
    key: String,
    /// The last write failed (logged once until one succeeds).
    failing: bool,
}

/// What decides whether a new snapshot is worth a write.
#[derive(Debug, PartialEq, Eq)]
struct Change {
    state: &'static str,
    attempts: u64,
    losses: u64,
}

impl Writer {
    /// Follow the lease until told to stop, then write the last files.
    fn follow(&mut self, lease: &Mutex<Option<Arc<Lease>>>, stop: &Receiver<()>) {
        let mut last: Option<(Change, Instant)> = None;
        loop {
            let stopping = matches!(
                stop.recv_timeout(LOOK_EVERY),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) | Ok(())
            );
            let current = lease.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let Some(current) = current else {
                if stopping {
                    // run ends without having taken the lease.
                    self.report(self.write_not_held("exited"));
                    return;
                }
                continue;
            };
            let stats = current.stats();
            if stopping {
                // After the release (which marks the lease released before
                // its request) or the loss: not held.
                self.report(self.write_stats(&stats));
                return;
            }
            let change = Change {
                state: stats.state_name(),
                attempts: stats.renewals.total(),
                losses: stats.losses.total(),
            };
            let due = match &last {
                None => true,
                Some((seen, at)) => {
                    *seen != change || (stats.is_held() && at.elapsed() >= REFRESH_EVERY)
                }
            };
            if due {
                self.report(self.write_stats(&stats));
                last = Some((change, Instant::now()));
            }
        }
    }

    /// Log a failed write once, until a write succeeds.
    fn report(&mut self, written: Result<(), String>) {
        match written {
            Ok(()) => self.failing = false,
            Err(message) if !self.failing => {
                self.failing = true;
                log::warn!("{message}; trying again at the next change");
            }
            Err(_) => {}
        }
    }

    /// The files of a lease not taken: `state` is `waiting` (before the
    /// acquire) or `exited` (run ends without having taken it).
    fn write_not_held(&self, state: &str) -> Result<(), String> {
        let metrics = prometheus_not_held(&self.key);
        let status = object(vec![
            ("url", self.url.as_str().into()),
            ("key", self.key.as_str().into()),
            ("state", state.into()),
            ("held", false.into()),
            ("seconds_to_fence", 0.0.into()),
            ("updated_at", stamp(SystemTime::now()).into()),
            ("pid", std::process::id().into()),
        ]);
        self.write_both(&metrics, &status)
    }

    /// The files of `stats`.
    fn write_stats(&self, stats: &LeaseStats) -> Result<(), String> {
        self.write_both(&stats.prometheus(), &status_json(&self.url, stats))
    }

    fn write_both(&self, metrics: &str, status: &Value) -> Result<(), String> {
        if let Some(path) = &self.paths.metrics {
            replace(path, metrics.as_bytes()).map_err(|e| {
                format!(
                    "--metrics-file {}: cannot write it: {e}; check that its directory exists and \
                     is writable",
                    path.display()
                )
            })?;
        }
        if let Some(path) = &self.paths.status {
            let mut text = status.to_string();
            text.push('\n');
            replace(path, text.as_bytes()).map_err(|e| {
                format!(
                    "--status-file {}: cannot write it: {e}; check that its directory exists and \
                     is writable",
                    path.display()
                )
            })?;
        }
        Ok(())
    }
}

/// `stats` as the status file's JSON object.
fn status_json(url: &str, stats: &LeaseStats) -> Value {
    let held = stats.is_held();
    let renewals: serde_json::Map<String, Value> = RenewalOutcome::ALL
        .iter()
        .map(|o| (o.name().to_string(), stats.renewals.get(*o).into()))
        .collect();
    let losses: serde_json::Map<String, Value> = LossReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), stats.losses.get(*r).into()))
        .collect();
    let lost_to = match &stats.status {
        LeaseStatus::Lost { holder } => holder.clone(),
        _ => None,
    };
    object(vec![
        ("url", url.into()),
        ("key", stats.key.as_str().into()),
        ("state", stats.state_name().into()),
        ("held", held.into()),
        ("epoch", stats.epoch.into()),
        ("held_since", stamp(stats.held_since).into()),
        (
            "seconds_to_fence",
            stats.to_fence.map_or(0.0, |d| d.as_secs_f64()).into(),
        ),
        ("fence_at", stats.fence_at.map(stamp).into()),
        ("lost_to", lost_to.into()),
        ("renewals", renewals.into()),
        ("retries", stats.retries.into()),
        (
            "last_renewal_s",
            stats.last_renewal.map(|d| d.as_secs_f64()).into(),
        ),
        ("losses", losses.into()),
        ("transitions", stats.transitions.into()),
        ("updated_at", stamp(SystemTime::now()).into()),
        ("pid", std::process::id().into()),
    ])
}

/// An instant as the record's stamps are written (RFC 3339, UTC).
fn stamp(at: SystemTime) -> String {
    bucket_lease::record::format_stamp(at)
}

/// How many fresh names [`replace`] tries for its temporary file before it
/// gives up: a name is taken only by a file someone else put there.
const TEMPORARY_TRIES: usize = 8;

/// Write `bytes` to a temporary file of ours beside `path`, then rename it
/// over `path`, so a reader sees the old file or the new one, whole.
///
/// The temporary is made by [`create_temporary`]: a new file under a fresh
/// random name, never an existing file or a link someone planted. When
/// `path` is a link, the rename replaces the link itself with a regular
/// file; what it pointed at is never written. On a failure after the
/// temporary was made, that temporary is removed, and nothing else.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let (temporary, mut file) = create_temporary(path, || temporary_name(name))?;
    let written = file.write_all(bytes);
    drop(file);
    let replaced = written.and_then(|()| std::fs::rename(&temporary, path));
    if replaced.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    replaced
}

/// A new file beside `path` named by `fresh` (tried again with a new name,
/// at most [`TEMPORARY_TRIES`] times, when the name is taken), and its path.
///
/// It is created exclusively and without following links (`O_CREAT |
/// O_EXCL | O_NOFOLLOW`): whatever is already at the name, a file or a
/// link to anywhere, is left as it is and another name is tried. Its mode
/// is `0666` less the umask, as the files' were before, so a reader such as
/// node_exporter reads it as it read them.
fn create_temporary(
    path: &Path,
    mut fresh: impl FnMut() -> OsString,
) -> std::io::Result<(PathBuf, File)> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    for _ in 0..TEMPORARY_TRIES {
        let temporary = path.with_file_name(fresh());
        match options.open(&temporary) {
            Ok(file) => return Ok((temporary, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{TEMPORARY_TRIES} fresh names for its temporary file were all taken in its \
             directory (something is making files or links there at random names: find \
             and stop it)"
        ),
    ))
}

/// A fresh name for the temporary file of the file `name`:
/// `.NAME.RANDOM.tmp`, hidden and not `*.prom`, so the textfile collector
/// skips it. RANDOM is 64 bits no other process can predict: the hash,
/// under keys std draws from the operating system's random source
/// ([`RandomState`]), of a count of the names made, the time and the pid.
fn temporary_name(name: &OsStr) -> OsString {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(MADE.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{:016x}.tmp", hasher.finish()));
    temporary
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new empty directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "bucket-lease-status-{name}-{}-{:?}",
            std::process::id(),
            SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = scratch("replace");
        let path = dir.join("lease.prom");
        replace(&path, b"one\n").unwrap();
        replace(&path, b"two\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("lease.prom")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The names in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The name the temporary of `file` had before issue 39: `.NAME.PID.tmp`,
    /// which anyone who can write the directory could plant a link at.
    fn predictable_name(file: &str) -> String {
        format!(".{file}.{}.tmp", std::process::id())
    }

    #[test]
    fn a_link_planted_where_the_temporary_used_to_go_is_never_followed() {
        let dir = scratch("planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let elsewhere = dir.join("made-through-a-link");
        let metrics = dir.join("lease.prom");
        let status = dir.join("lease.json");
        // One link at an existing file, one at a name that does not exist
        // yet: neither may be written or made.
        let planted = dir.join(predictable_name("lease.prom"));
        let dangling = dir.join(predictable_name("lease.json"));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dangling).unwrap();

        replace(&metrics, b"held 1\n").unwrap();
        replace(&status, b"{}\n").unwrap();

        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"precious\n",
            "the victim was written through the link planted at {}",
            planted.display()
        );
        assert!(
            std::fs::symlink_metadata(&elsewhere).is_err(),
            "a file was made through the link planted at {}",
            dangling.display()
        );
        for (path, bytes) in [(&metrics, &b"held 1\n"[..]), (&status, &b"{}\n"[..])] {
            let kind = std::fs::symlink_metadata(path).unwrap().file_type();
            assert!(kind.is_file(), "{} is not a regular file", path.display());
            assert_eq!(std::fs::read(path).unwrap(), bytes);
        }
        // The planted links are someone else's: left as they were.
        assert_eq!(std::fs::read_link(&planted).unwrap(), victim);
        assert_eq!(std::fs::read_link(&dangling).unwrap(), elsewhere);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_temporary_has_a_fresh_name_each_time() {
        let name = std::ffi::OsStr::new("lease.prom");
        let first = temporary_name(name);
        let second = temporary_name(name);
        assert_ne!(first, second, "two writes used one temporary name");
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let fresh = temporary_name(name).into_string().unwrap();
            // Hidden and not `*.prom`, so the textfile collector skips it.
            assert!(
                fresh.starts_with(".lease.prom.") && fresh.ends_with(".tmp"),
                "{fresh}"
            );
            assert_ne!(fresh, predictable_name("lease.prom"));
            assert!(seen.insert(fresh.clone()), "{fresh} came twice");
        }
    }

    #[test]
    fn a_taken_name_is_left_alone_and_a_fresh_one_tried_a_bounded_number_of_times() {
        let dir = scratch("taken");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".taken.tmp")).unwrap();
        let path = dir.join("lease.prom");

        let mut names = [".taken.tmp", ".free.tmp"].into_iter().map(OsString::from);
        let (temporary, file) = create_temporary(&path, || names.next().unwrap()).unwrap();
        drop(file);
        assert_eq!(temporary, dir.join(".free.tmp"));
        let kind = std::fs::symlink_metadata(&temporary).unwrap().file_type();
        assert!(kind.is_file(), "{kind:?}");
        std::fs::remove_file(&temporary).unwrap();

        let mut tries = 0;
        let taken = create_temporary(&path, || {
            tries += 1;
            OsString::from(".taken.tmp")
        })
        .unwrap_err();
        assert_eq!(tries, TEMPORARY_TRIES);
        assert_eq!(taken.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(taken.to_string().contains("were all taken"), "{taken}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        assert_eq!(names_in(&dir), [".taken.tmp", "victim"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_path_that_is_a_link_becomes_a_file_and_its_target_is_untouched() {
        let dir = scratch("path-link");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let path = dir.join("lease.prom");
        std::os::unix::fs::symlink(&victim, &path).unwrap();

        replace(&path, b"held 1\n").unwrap();

        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        assert!(kind.is_file(), "PATH is still a link: {kind:?}");
        assert_eq!(std::fs::read(&path).unwrap(), b"held 1\n");
        assert_eq!(names_in(&dir), ["lease.prom", "victim"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_rename_removes_its_own_temporary_and_nothing_else() {
        let dir = scratch("rename-fails");
        // A directory at PATH: the rename over it fails (EISDIR).
        let path = dir.join("lease.prom");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let planted = dir.join(predictable_name("lease.prom"));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();

        assert!(replace(&path, b"held 1\n").is_err());

        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"precious\n",
            "the victim was written through a planted link"
        );
        assert_eq!(
            names_in(&dir),
            [
                predictable_name("lease.prom").as_str(),
                "lease.prom",
                "victim"
            ],
            "the temporary was left, or a name it did not make was removed"
        );
        assert_eq!(names_in(&path), ["inside"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_that_leaves_nothing() {
        let dir = scratch("missing");
        let path = dir.join("missing").join("lease.prom");
        assert!(replace(&path, b"x").is_err());
        assert!(!dir.join("missing").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
