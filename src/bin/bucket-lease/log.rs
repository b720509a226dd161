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
//! - A line is written whole (stderr is locked for it); a failed write is
//!   ignored, never a panic.
//! - Control characters in a record's text (which may quote a lease
//!   record's `instance_id` or a service's answer) are escaped
//!   ([`printable_lines`]): nothing logged can drive the terminal.
//!
//! So best-effort leases, suspect takeovers, retried renewals and breaks
//! show on stderr by default.

use crate::text::printable_lines;
use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;

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
        let mut err = std::io::stderr().lock();
        let _ = if self.level >= LevelFilter::Debug {
            writeln!(
                err,
                "bucket-lease: {level}: [{}] {message}",
                printable_lines(record.target()),
            )
        } else {
            writeln!(err, "bucket-lease: {level}: {message}")
        };
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
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
