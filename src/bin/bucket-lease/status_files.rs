//! `run --metrics-file PATH` and `--status-file PATH`: the lease as files a
//! monitoring agent reads (node_exporter's textfile collector, a script).
//!
//! What it promises:
//!
//! - **Whole files only.** Each write goes to a hidden temporary file
//!   beside PATH (`.NAME.PID.tmp`, which the textfile collector skips: it
//!   reads `*.prom`) and is renamed over PATH, so a reader sees the last
//!   file or the new one, never half of one.
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
use bucket_lease::channel::{self as crossbeam_channel, Receiver, Sender};
use bucket_lease::stats::{prometheus_not_held, LeaseStats, LossReason, RenewalOutcome};
use bucket_lease::{Lease, LeaseStatus};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
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
        let status = json!({
            "url": self.url,
            "key": self.key,
            "state": state,
            "held": false,
            "seconds_to_fence": 0.0,
            "updated_at": stamp(SystemTime::now()),
            "pid": std::process::id(),
        });
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
        .map(|o| (o.name().to_string(), json!(stats.renewals.get(*o))))
        .collect();
    let losses: serde_json::Map<String, Value> = LossReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), json!(stats.losses.get(*r))))
        .collect();
    let lost_to = match &stats.status {
        LeaseStatus::Lost { holder } => holder.clone(),
        _ => None,
    };
    json!({
        "url": url,
        "key": stats.key,
        "state": stats.state_name(),
        "held": held,
        "epoch": stats.epoch,
        "held_since": stamp(stats.held_since),
        "seconds_to_fence": stats.to_fence.map_or(0.0, |d| d.as_secs_f64()),
        "fence_at": stats.fence_at.map(stamp),
        "lost_to": lost_to,
        "renewals": renewals,
        "retries": stats.retries,
        "last_renewal_s": stats.last_renewal.map(|d| d.as_secs_f64()),
        "losses": losses,
        "transitions": stats.transitions,
        "updated_at": stamp(SystemTime::now()),
        "pid": std::process::id(),
    })
}

/// An instant as the record's stamps are written (RFC 3339, UTC).
fn stamp(at: SystemTime) -> String {
    bucket_lease::record::format_stamp(at)
}

/// Write `bytes` to a hidden temporary file beside `path`, then rename it
/// over `path`.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary_name);
    let written =
        std::fs::write(&temporary, bytes).and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
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

    #[test]
    fn a_missing_directory_is_an_error_that_leaves_nothing() {
        let dir = scratch("missing");
        let path = dir.join("missing").join("lease.prom");
        assert!(replace(&path, b"x").is_err());
        assert!(!dir.join("missing").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
