//! The command's logger: the library's `log` records, one line each on
//! stderr, as `bucket-lease: warning: …`.
//!
//! What it promises:
//!
//! - The level is `-q` (errors only), the default `warn`, `-v` (`info`),
//!   `-vv` (`debug`) or `-vvv` (`trace`); without `-v` or `-q` the
//!   environment variable `BUCKET_LEASE_LOG` (`off`, `error`, `warn`,
//!   `info`, `debug`, `trace`) sets it. A value it cannot read is reported
//!   once and ignored.
//! - Below `trace`, only bucket-lease's own records are shown: the HTTP
//!   client's chatter stays out of the way. At `trace` the other crates'
//!   records show too, from `debug` up: a release build compiles every
//!   `trace` record out (the `cli` feature's `log/release_max_level_debug`,
//!   for the command's size; bucket-lease itself logs nothing at `trace`).
//! - **Logging never waits on stderr.** A record becomes one line in a
//!   bounded queue ([`QUEUE_LINES`]) that a thread of its own writes out;
//!   a line that does not fit is dropped and counted, and the count is
//!   written before the next line that goes out. So a stderr whose reader
//!   stopped reading (a stalled pipe, a terminal suspended with Ctrl-S, a
//!   background job under `stty tostop`) can hold only that writer
//!   thread, never the thread that logged: `run`'s threads, which keep
//!   the write deadline, log and go on. [`finish`] lets the queue drain
//!   for a bounded time at exit.
//! - A line is written whole (stderr is locked for it); a failed write is
//!   ignored, never a panic.
//! - Control characters in a record's text (which may quote a lease
//!   record's `instance_id` or a service's answer) are escaped
//!   ([`printable_lines`]): nothing logged can drive the terminal.
//!
//! So best-effort leases, suspect takeovers, retried renewals and breaks
//! show on stderr by default.

use crate::text::printable_lines;
use bucket_lease::channel::{self, Receiver, Sender, TrySendError};
use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How many lines may wait for stderr before more are dropped.
pub const QUEUE_LINES: usize = 256;

/// How long the command waits at exit for its log lines to reach stderr
/// ([`finish`]): what it said is seen, and a stderr nobody reads holds it
/// no longer.
pub const EXIT_LOG_BOUND: Duration = Duration::from_secs(1);

/// The lines on their way to stderr, and what became of those that did
/// not fit.
struct Queue {
    lines: Sender<String>,
    /// Lines dropped since the writer last said how many.
    dropped: AtomicU64,
    /// Lines queued and not yet written out (or given up on).
    pending: AtomicUsize,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();

/// Queue `line` (without its newline) for stderr; drop and count it when
/// the queue is full. Before the writer thread is started (a usage error
/// found before the command line is read), the line is written at once.
pub fn line(line: String) {
    let Some(queue) = QUEUE.get() else {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
        return;
    };
    queue.pending.fetch_add(1, Ordering::SeqCst);
    match queue.lines.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            queue.pending.fetch_sub(1, Ordering::SeqCst);
            queue.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Wait at most `bound` for the queued lines to reach stderr: at exit, so
/// that what was said is seen, but never held by a stderr nobody reads.
/// Whether everything went out.
pub fn finish(bound: Duration) -> bool {
    let Some(queue) = QUEUE.get() else {
        return true;
    };
    let end = Instant::now() + bound;
    loop {
        let idle = queue.pending.load(Ordering::SeqCst) == 0;
        if idle || Instant::now() >= end {
            return idle;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Start the writer thread, once. Without a thread (the system refused
/// one), lines are dropped and counted rather than written by the caller.
fn start_writer() {
    QUEUE.get_or_init(|| {
        let (lines, queued) = channel::bounded(QUEUE_LINES);
        if let Err(e) = std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || write_out(&queued))
        {
            let _ = writeln!(
                std::io::stderr().lock(),
                "bucket-lease: warning: no thread for log lines ({e}): they are dropped"
            );
        }
        Queue {
            lines,
            dropped: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
        }
    });
}

/// The writer thread: each queued line, whole, after a note of how many
/// were dropped before it.
fn write_out(queued: &Receiver<String>) {
    for line in queued {
        let Some(queue) = QUEUE.get() else { continue };
        let mut err = std::io::stderr().lock();
        let dropped = queue.dropped.swap(0, Ordering::SeqCst);
        if dropped > 0 {
            let _ = writeln!(
                err,
                "bucket-lease: warning: {dropped} log lines dropped: stderr was not being read"
            );
        }
        let _ = writeln!(err, "{line}");
        drop(err);
        queue.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The environment variable that sets the level when neither `-v` nor `-q`
/// is given.
pub const LOG_ENV: &str = "BUCKET_LEASE_LOG";

struct StderrLogger {
    level: LevelFilter,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level
            && (self.level == LevelFilter::Trace || metadata.target().starts_with("bucket_lease"))
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        let message = printable_lines(&record.args().to_string());
        line(if self.level >= LevelFilter::Debug {
            format!(
                "bucket-lease: {level}: [{}] {message}",
                printable_lines(record.target()),
            )
        } else {
            format!("bucket-lease: {level}: {message}")
        });
    }

    /// Never waits on stderr: see [`finish`].
    fn flush(&self) {}
}

/// The level `-v` given `verbose` times, `-q`, and the environment ask for.
fn level(verbose: u8, quiet: bool, env: Option<String>) -> (LevelFilter, Option<String>) {
    if quiet {
        return (LevelFilter::Error, None);
    }
    match verbose {
        0 => {}
        1 => return (LevelFilter::Info, None),
        2 => return (LevelFilter::Debug, None),
        _ => return (LevelFilter::Trace, None),
    }
    let Some(value) = env.filter(|v| !v.trim().is_empty()) else {
        return (LevelFilter::Warn, None);
    };
    match value.trim().parse::<LevelFilter>() {
        Ok(level) => (level, None),
        Err(_) => (
            LevelFilter::Warn,
            Some(format!(
                "{LOG_ENV}={value:?} is not a level (off, error, warn, info, debug, trace); \
                 using warn"
            )),
        ),
    }
}

/// Install the logger. Called once, after the command line is parsed.
pub fn init(verbose: u8, quiet: bool) {
    let (level, complaint) = level(verbose, quiet, std::env::var(LOG_ENV).ok());
    start_writer();
    // One logger for the life of the process: leaking it is the point.
    if log::set_logger(Box::leak(Box::new(StderrLogger { level }))).is_ok() {
        log::set_max_level(level);
    }
    if let Some(complaint) = complaint {
        log::warn!("{complaint}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_environment() {
        let env = || Some("debug".to_string());
        assert_eq!(level(0, false, None).0, LevelFilter::Warn);
        assert_eq!(level(0, false, env()).0, LevelFilter::Debug);
        assert_eq!(level(1, false, env()).0, LevelFilter::Info);
        assert_eq!(level(3, false, None).0, LevelFilter::Trace);
        assert_eq!(level(2, true, env()).0, LevelFilter::Error);
        assert_eq!(level(0, false, Some("OFF".into())).0, LevelFilter::Off);
        let (l, complaint) = level(0, false, Some("loud".into()));
        assert_eq!(l, LevelFilter::Warn);
        assert!(complaint.unwrap().contains("loud"));
    }
}
