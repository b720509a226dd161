//! What every command module shares: the exit codes ([`exit`], and what
//! each means, [`EXIT_CODES`]), the help's table of the URLs
//! ([`URL_HELP`]),
//! [`Failure`] and how it is printed at the end ([`finish`]), the meaning
//! of a failed request as an exit code, the parsers of option values
//! (durations, the TTL, exit codes) and the opening of a store with the
//! AWS CLI's flags laid over the environment ([`StoreFlags`]). Nothing here
//! depends on a command module or on `main.rs`: `bucket-lease-bench`
//! compiles in the same file.

use bucket_lease::backends::config::{
    self, parse_duration_text, ConfigError, DurationError, DURATION_FORMS, MAX_DURATION,
};
use bucket_lease::lease::DEFAULT_CALL_TIMEOUT;
use bucket_lease::store::{StoreError, StoreErrorKind};
use bucket_lease::{LeaseError, Store};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The exit codes of every command, by name; what each means is its row
/// of [`EXIT_CODES`].
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// `break` refused.
    pub const REFUSED: u8 = 1;
    /// A bad or missing argument (sysexits `EX_USAGE`).
    pub const USAGE: u8 = 64;
    /// A store request failed (`EX_UNAVAILABLE`).
    pub const STORE: u8 = 69;
    /// Held by another instance (`EX_TEMPFAIL`, as `flock -n` can be told
    /// to exit).
    pub const HELD: u8 = 75;
    /// Lost or fenced (`EX_PROTOCOL`).
    pub const LOST: u8 = 76;
    /// Credentials or permissions refused (`EX_NOPERM`).
    pub const NO_PERMISSION: u8 = 77;
    /// The configuration cannot be used (`EX_CONFIG`).
    pub const CONFIG: u8 = 78;
    /// The command could not be executed (as shells say it).
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found (as shells say it).
    pub const NOT_FOUND: u8 = 127;
}

/// One row of [`EXIT_CODES`]: the codes it covers and what they mean.
#[derive(Debug)]
pub struct ExitRow {
    /// The codes, in the order shown; none for `N`, the command's own.
    pub codes: &'static [u8],
    /// What they mean, as one line (the help wraps it).
    pub meaning: &'static str,
}

impl ExitRow {
    /// The codes as shown, with `separator` between them: `75`,
    /// `126 / 127`, or `N` for the command's own.
    pub fn label(&self, separator: &str) -> String {
        if self.codes.is_empty() {
            return "N".to_string();
        }
        let codes: Vec<String> = self.codes.iter().map(u8::to_string).collect();
        codes.join(separator)
    }
}

/// What every exit code means: the one table, from which the help
/// ([`crate::args::exit_codes_text`]) and the man page print theirs, and
/// to which a test holds README's. The commands exit with the codes
/// [`exit`] names, each in a row here; 128 + N is
/// [`signal_exit_code`]'s.
pub const EXIT_CODES: &[ExitRow] = &[
    ExitRow {
        codes: &[exit::OK],
        meaning: "success; `inspect`: the lease was read (free or held)",
    },
    ExitRow {
        codes: &[],
        meaning: "`run`: the command's own exit status; 128+N when signal N killed it",
    },
    ExitRow {
        codes: &[exit::REFUSED],
        meaning: "`break` refused: the lease is free, names another holder, or is not a lease \
                  record",
    },
    ExitRow {
        codes: &[exit::USAGE],
        meaning: "usage: a bad or missing argument (the message names it)",
    },
    ExitRow {
        codes: &[exit::STORE],
        meaning: "a store request failed, or the store ignores conditional writes",
    },
    ExitRow {
        codes: &[exit::HELD],
        meaning: "`run`: held by another instance (after `--wait`, if given; `-E N` makes it \
                  N); `break`: the lease was released or taken over meanwhile (a renewal by \
                  the holder named is broken again)",
    },
    ExitRow {
        codes: &[exit::LOST],
        meaning: "`run`: the lease was lost or fenced while the command ran (the command was \
                  stopped), or fenced before it could start (not started)",
    },
    ExitRow {
        codes: &[exit::NO_PERMISSION],
        meaning: "the service refused the credentials or permissions (`AccessDenied`, \
                  `InvalidAccessKeyId`, `SignatureDoesNotMatch`): check `AWS_*` and the bucket \
                  policy",
    },
    ExitRow {
        codes: &[exit::CONFIG],
        meaning: "configuration: the URL or the environment cannot make a store, the bucket \
                  does not exist, the server's certificate is not trusted, or the proxy refuses",
    },
    ExitRow {
        codes: &[exit::CANNOT_EXECUTE, exit::NOT_FOUND],
        meaning: "`run`: the command could not be executed / was not found; `bench`: likewise \
                  `bucket-lease-bench`, beside `bucket-lease`",
    },
    ExitRow {
        // signal_exit_code of SIGINT, SIGTERM, SIGHUP (a test checks).
        codes: &[130, 143, 129],
        meaning: "`run`: interrupted by SIGINT / SIGTERM / SIGHUP (unless the command exited \
                  by itself)",
    },
];

/// The URLs and the environment, after every help ([`crate::args::help_text`]).
pub const URL_HELP: &str = "\
URL names the store and the prefix the lease is on ({prefix}/LEASE):
  s3://bucket/prefix      AWS S3: AWS_REGION (or AWS_DEFAULT_REGION); AWS_ENDPOINT_URL[_S3]
                          points it at another S3-compatible endpoint
  r2://bucket/prefix      Cloudflare R2: R2_ACCOUNT_ID [R2_JURISDICTION], or AWS_ENDPOINT_URL
  minio://bucket/prefix   MinIO: AWS_ENDPOINT_URL (required), AWS_REGION
  file:///dir//prefix     the directory /dir used as a bucket (one machine only); it must
                          exist. The first // ends the directory: file:///dir alone is the
                          directory /dir with an empty prefix (LEASE)
Credentials, the first source configured: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
  [AWS_SESSION_TOKEN]; the profile AWS_PROFILE (else default) of ~/.aws/credentials and
  ~/.aws/config (static keys or credential_process); web identity (AWS_WEB_IDENTITY_TOKEN_FILE,
  AWS_ROLE_ARN); container credentials (AWS_CONTAINER_CREDENTIALS_*); EC2 instance metadata
  (IMDSv2; AWS_EC2_METADATA_DISABLED=true turns it off). -v names the source.
Logging: -v (info), -vv (debug), -q (errors only), or BUCKET_LEASE_LOG=error|warn|info|debug|trace|off.";

/// Why a command ended early: the exit code and what to say on stderr.
#[derive(Debug)]
pub struct Failure {
    /// The process's exit code.
    pub code: u8,
    /// What went wrong, printed after `bucket-lease: `.
    pub message: String,
    /// For usage errors: the command whose `--help` to point at.
    pub usage_of: Option<&'static str>,
}

impl Failure {
    /// A failure with exit code `code`.
    pub fn new(code: u8, message: impl fmt::Display) -> Self {
        Failure {
            code,
            message: message.to_string(),
            usage_of: None,
        }
    }

    /// A usage error in `command` (empty for the top level).
    pub fn usage(command: &'static str, message: impl fmt::Display) -> Self {
        let message = if command.is_empty() {
            message.to_string()
        } else {
            format!("{command}: {message}")
        };
        Failure {
            code: exit::USAGE,
            message,
            usage_of: Some(command),
        }
    }

    /// Say on stderr what failed, and for a usage error which help to
    /// read.
    pub fn print(&self) {
        // Messages quote records and service answers: escape what they hold.
        // Through the log's queue: a stderr nobody reads never holds it.
        crate::log::line(format!(
            "bucket-lease: {}",
            crate::text::printable_lines(&self.message)
        ));
        match self.usage_of {
            Some("") => crate::log::line("try `bucket-lease --help`".to_string()),
            Some(command) => crate::log::line(format!("try `bucket-lease {command} --help`")),
            None => {}
        }
    }
}

/// The exit code of a command that ended with `result`: a failure is
/// printed (or left to a [`Timeout::watchdog`] that is ending the process),
/// then the log's queue gets [`EXIT_LOG_BOUND`](crate::log::EXIT_LOG_BOUND)
/// to reach stderr.
pub fn finish(result: Result<u8, Failure>) -> u8 {
    let code = match result {
        Ok(code) => code,
        Err(failure) => {
            // The watchdog's log is bounded by EXIT_LOG_BOUND: twice that
            // is long enough for it to exit.
            if let Some(code) = yield_to_watchdog(2 * crate::log::EXIT_LOG_BOUND) {
                return code;
            }
            failure.print();
            failure.code
        }
    };
    crate::log::finish(crate::log::EXIT_LOG_BOUND);
    code
}

/// The exit code for a failed store request: [`exit::NO_PERMISSION`] for
/// refused credentials or permissions, [`exit::CONFIG`] for another
/// permanent failure (a bucket that does not exist, a server certificate
/// not trusted, a proxy that refuses), else [`exit::STORE`].
pub fn store_error_code(error: &StoreError) -> u8 {
    if error.kind() == StoreErrorKind::PermissionDenied {
        exit::NO_PERMISSION
    } else if error.is_permanent() {
        // A missing bucket, a certificate not trusted, a refusing proxy.
        exit::CONFIG
    } else {
        exit::STORE
    }
}

/// What a failed store request means and what to fix, to go before its
/// message: for the exit codes [`store_error_code`] gives besides
/// [`exit::STORE`], and for a throttled answer; empty otherwise.
pub fn store_error_summary(error: &StoreError) -> &'static str {
    match store_error_code(error) {
        exit::NO_PERMISSION => {
            "the service refused the credentials or their permissions (check the credentials \
             -v names the source of, and that they may read and write this prefix): "
        }
        // The store's error says it, and what to do, itself.
        exit::CONFIG if error.code() == Some("NoSuchBucket") => "",
        exit::CONFIG => "no retry can succeed until a setting changes (the message names it): ",
        _ if error.is_throttled() && matches!(error.method(), "GET" | "HEAD") => {
            "the service throttled a read of this key (it asks for fewer requests: read less \
             often, such as a longer --interval, or try again later): "
        }
        _ if error.is_throttled() => {
            "the service throttled a write of this key (R2 and Google Cloud Storage take one \
             write of a key a second: for an endpoint other than r2://, set \
             BUCKET_LEASE_WRITE_INTERVAL=1s; a holder renewing at the shortest TTL takes every \
             turn): "
        }
        _ => "",
    }
}

/// The exit code for a lease error: [`exit::HELD`], [`exit::LOST`] for an
/// acquire that outlasted its own fence, [`exit::USAGE`] for a TTL out of
/// range, [`exit::CONFIG`] for a prefix too long for the store's keys,
/// [`store_error_code`] for a failed request, else [`exit::STORE`].
pub fn lease_error_code(error: &LeaseError) -> u8 {
    match error.cause() {
        LeaseError::Held { .. } => exit::HELD,
        LeaseError::Fenced { .. } => exit::LOST,
        LeaseError::TtlTooLong { .. } | LeaseError::TtlTooShort { .. } => exit::USAGE,
        LeaseError::KeyTooLong { .. } => exit::CONFIG,
        LeaseError::Store(e) => store_error_code(e),
        _ => exit::STORE,
    }
}

/// [`store_error_summary`] for the request behind a lease error, if any.
pub fn lease_error_summary(error: &LeaseError) -> &'static str {
    error.store_error().map_or("", store_error_summary)
}

/// The exit code for "stopped by signal `sig`": 128 + `sig`, as shells
/// report it (255 for a number that does not fit).
pub fn signal_exit_code(sig: i32) -> u8 {
    sig.checked_add(128)
        .and_then(|code| u8::try_from(code).ok())
        .unwrap_or(u8::MAX)
}

/// Parse a duration for `option` (see [`DURATION_FORMS`]), from 0 up to
/// [`MAX_DURATION`]: [`parse_duration_text`], the environment's reading
/// too.
///
/// # Errors
///
/// A usage failure naming the option, the value, the forms and the range.
pub fn parse_duration(
    command: &'static str,
    option: &str,
    value: &str,
) -> Result<Duration, Failure> {
    // `off` is the write interval's word for none; to an option it would
    // read as 0, which for --timeout, --wait or --grace is the opposite
    // of what the word says: refused, as the command line always did.
    if value.trim().eq_ignore_ascii_case("off") {
        return Err(Failure::usage(
            command,
            format!(
                "{option}: expected a duration, as {DURATION_FORMS}; got {value:?}, which an option \
                 does not take (leave the option out for its default; 0 is no time at all, \
                 not no limit)"
            ),
        ));
    }
    parse_duration_text(value).map_err(|_| {
        Failure::usage(
            command,
            format!(
                "{option}: expected a duration from 0 up to {} seconds, as {DURATION_FORMS}; got \
                 {value:?}",
                MAX_DURATION.as_secs()
            ),
        )
    })
}

/// Parse a lease TTL for `option`: a duration (see [`DURATION_FORMS`])
/// that is a whole number of seconds from 1 to
/// [`MAX_SANE_TTL_S`](bucket_lease::record::MAX_SANE_TTL_S).
///
/// # Errors
///
/// A usage failure naming the option, the value, the range and why.
pub fn parse_ttl(command: &'static str, option: &str, value: &str) -> Result<u64, Failure> {
    use bucket_lease::record::MAX_SANE_TTL_S;
    let longest = Duration::from_secs(MAX_SANE_TTL_S);
    let why = match parse_duration_text(value) {
        Ok(ttl) if ttl.subsec_nanos() == 0 && (1..=MAX_SANE_TTL_S).contains(&ttl.as_secs()) => {
            return Ok(ttl.as_secs());
        }
        Ok(ttl) if ttl > longest => LONG_TTL,
        Err(DurationError::TooLong) => LONG_TTL,
        Ok(ttl) if ttl.subsec_nanos() != 0 => " (a TTL is a whole number of seconds)",
        _ => "",
    };
    Err(Failure::usage(
        command,
        format!(
            "{option}: expected a whole number of seconds from 1 to {MAX_SANE_TTL_S} (such as \
             30, 30s or 1m), got {value:?}{why}"
        ),
    ))
}

const LONG_TTL: &str = " (every contender treats a record with a longer TTL as suspect, and \
                        may take it over from a live holder)";

/// Parse an exit code for `option`: a whole number from 0 to 255.
///
/// # Errors
///
/// A usage failure naming the option, the value and the range.
pub fn parse_exit_code(command: &'static str, option: &str, value: &str) -> Result<u8, Failure> {
    value
        .parse::<u8>()
        .ok()
        .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            Failure::usage(
                command,
                format!(
                    "{option}: expected an exit code, a whole number from 0 to 255, got {value:?}"
                ),
            )
        })
}

/// A whole number from 1 to 1,000,000 for `option`.
///
/// # Errors
///
/// A usage failure naming the option, the value and the range.
#[allow(dead_code, reason = "bucket-lease-bench's options alone take counts")]
pub fn parse_count(command: &'static str, option: &str, value: &str) -> Result<u64, Failure> {
    match value.parse::<u64>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(Failure::usage(
            command,
            format!("{option}: expected a whole number from 1 to 1000000, got {value:?}"),
        )),
    }
}

/// The AWS CLI's `--profile`, `--region` and `--endpoint-url`, laid over
/// the environment the store is configured from, as the AWS CLI lays
/// them: each wins over every variable and profile setting for the same
/// thing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreFlags {
    /// `--profile`: the shared files' profile, as `AWS_PROFILE`. As in the
    /// AWS CLI, a profile named on the command line also wins over the
    /// environment's keys (`AWS_ACCESS_KEY_ID` and its kin are not read).
    pub profile: Option<String>,
    /// `--region`: as `AWS_REGION`, so it wins over `AWS_DEFAULT_REGION`
    /// and the profile's `region`.
    pub region: Option<String>,
    /// `--endpoint-url`: the S3 endpoint, over `AWS_ENDPOINT_URL_S3`,
    /// `AWS_ENDPOINT_URL` and the profile's `endpoint_url`.
    pub endpoint_url: Option<String>,
}

impl StoreFlags {
    /// The value of the variable `name` with the flags laid over `env`.
    pub fn lookup(&self, name: &str, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let flag = match name {
            "AWS_PROFILE" => &self.profile,
            "AWS_REGION" => &self.region,
            "AWS_ENDPOINT_URL_S3" | "AWS_ENDPOINT_URL" => &self.endpoint_url,
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" | "AWS_SESSION_TOKEN"
                if self.profile.is_some() =>
            {
                return None
            }
            _ => &None,
        };
        flag.clone().or_else(|| env(name))
    }

    /// Whether any flag is given.
    pub fn any(&self) -> bool {
        self.profile.is_some() || self.region.is_some() || self.endpoint_url.is_some()
    }
}

/// Open the store `url` names, from the process environment with `flags`
/// laid over it.
///
/// # Errors
///
/// A configuration failure ([`exit::CONFIG`]) saying what to set.
pub fn open_store(url: &str, flags: &StoreFlags) -> Result<(Arc<dyn Store>, String), Failure> {
    if flags.any() && url.starts_with("file:") {
        log::warn!("--profile, --region and --endpoint-url do not apply to a file:// URL: ignored");
    }
    config::open_with_env(url, |name| flags.lookup(name, |n| std::env::var(n).ok())).map_err(
        |e: ConfigError| {
            let message = e.to_string();
            // The backends name the variable; the flag gave the name here.
            let message = match flags.profile {
                Some(_) => message.replace("AWS_PROFILE names it", "--profile names it"),
                None => message,
            };
            Failure::new(exit::CONFIG, message)
        },
    )
}

/// How long after a [`Timeout`] its [`watchdog`](Timeout::watchdog) ends
/// the process: a request bounded by the deadline returns within the
/// store's slack (200 ms), so the watchdog only cuts off what has none.
pub const WATCHDOG_SLACK: Duration = Duration::from_millis(500);

/// The exit code of a [`Timeout::watchdog`] that fired: it is ending the
/// process, and its failure is the one to report.
static WATCHDOG_FIRED: std::sync::OnceLock<u8> = std::sync::OnceLock::new();

/// If a watchdog fired, wait for it to end the process (it prints its
/// failure, bounded, and exits), and return its code should it not have
/// within `bound`. A failure the watchdog caused (a credentials source it
/// killed, say) must not be reported in its place, nor exit first.
fn yield_to_watchdog(bound: Duration) -> Option<u8> {
    let code = *WATCHDOG_FIRED.get()?;
    std::thread::sleep(bound);
    Some(code)
}

/// The overall bound of a command (`--timeout`): when it passes, the
/// command ends with [`exit::STORE`], the code of a request that failed
/// for now, saying what timed out and how to give it longer.
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    command: &'static str,
    limit: Duration,
    end: Option<Instant>,
}

impl Timeout {
    /// A bound of `limit` from now for `command`.
    pub fn start(command: &'static str, limit: Duration) -> Timeout {
        Timeout {
            command,
            limit,
            end: Instant::now().checked_add(limit),
        }
    }

    /// When it passes (`None`: too far to say).
    pub fn deadline(&self) -> Option<Instant> {
        self.end
    }

    /// The deadline of one call: the library's default bound for a call
    /// ([`DEFAULT_CALL_TIMEOUT`]), or this bound if it comes first.
    #[allow(dead_code, reason = "bucket-lease-bench's calls alone take it")]
    pub fn call_deadline(&self) -> Option<Instant> {
        let call = Instant::now().checked_add(DEFAULT_CALL_TIMEOUT);
        match (call, self.end) {
            (Some(call), Some(end)) => Some(call.min(end)),
            (call, end) => call.or(end),
        }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        self.end.is_some_and(|end| Instant::now() >= end)
    }

    /// The failure once it has passed while `doing` (such as "reading the
    /// lease").
    pub fn failure(&self, doing: &str) -> Failure {
        let longer = (self.limit.as_secs_f64() * 2.0).ceil().max(1.0);
        Failure::new(
            exit::STORE,
            format!(
                "{}: timed out after {} (--timeout) {doing}. Give it longer with --timeout, such as --timeout {longer:.0}s",
                self.command,
                human_secs(self.limit.as_secs_f64())
            ),
        )
    }

    /// Whether `error` is this bound passing (rather than a request's own
    /// failure).
    pub fn is_cause(&self, error: &StoreError) -> bool {
        error.is_timeout() && self.passed()
    }

    /// A guard that ends the process with [`failure`](Self::failure)
    /// `slack` after the bound, unless dropped first: the backstop for a
    /// step that takes no deadline (opening a store asks its credentials
    /// source once, for up to 30 s).
    pub fn watchdog(&self, doing: &'static str, slack: Duration) -> Watchdog {
        // A flag and a park rather than a channel: the same wait, without
        // a copy of std's channel code for one message that never comes.
        let disarmed = Arc::new(AtomicBool::new(false));
        let fire = self.end.and_then(|end| end.checked_add(slack));
        let this = *self;
        let flag = Arc::clone(&disarmed);
        let spawned = std::thread::Builder::new()
            .name("timeout".to_string())
            .spawn(move || {
                let Some(fire) = fire else { return };
                // A park may end early (unparked by the disarm, or for no
                // reason): the flag and the clock decide.
                loop {
                    if flag.load(Ordering::SeqCst) {
                        return;
                    }
                    let left = fire.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::park_timeout(left);
                }
                let failure = this.failure(doing);
                // First: the main thread, woken by the kill below with an
                // error of its own, leaves the exit to this thread.
                let _ = WATCHDOG_FIRED.set(failure.code);
                kill_credential_helpers();
                failure.print();
                crate::log::finish(crate::log::EXIT_LOG_BOUND);
                std::process::exit(i32::from(failure.code));
            });
        let thread = match spawned {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                log::warn!(
                    "cannot start the --timeout thread ({e}): the requests keep their bounds"
                );
                None
            }
        };
        Watchdog { disarmed, thread }
    }
}

/// Kill the `credential_process` runs in flight (each in a process group
/// of its own), which would outlive a process that exits at once and
/// keep its output open.
pub fn kill_credential_helpers() {
    use rustix::process::{kill_process_group, Pid, Signal};
    bucket_lease_backends::credentials::with_running_groups(|groups| {
        for group in groups {
            if let Some(pid) = i32::try_from(*group).ok().and_then(Pid::from_raw) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
    });
}

/// See [`Timeout::watchdog`]: dropping it disarms it.
#[derive(Debug)]
pub struct Watchdog {
    disarmed: Arc<AtomicBool>,
    /// The watchdog's thread, to wake when disarmed (none if it could not
    /// start).
    thread: Option<std::thread::Thread>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarmed.store(true, Ordering::SeqCst);
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

/// A number of seconds for people: `850 ms`, `3.2 s`, `4 min 5 s`, `5.1 h`,
/// `12.5 days`, `2026 years`; never a panic, whatever the number.
pub fn human_secs(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "an unknown time".to_string();
    }
    let a = seconds.abs();
    let sign = if seconds < 0.0 { "-" } else { "" };
    if a < 1.0 {
        format!("{sign}{:.0} ms", a * 1000.0)
    } else if a < 120.0 {
        format!("{sign}{a:.1} s")
    } else if a < 7200.0 {
        // Below 7200, so both casts are exact.
        format!("{sign}{} min {} s", (a / 60.0) as u64, (a % 60.0) as u64)
    } else if a < 172_800.0 {
        format!("{sign}{:.1} h", a / 3600.0)
    } else if a < 3.0e7 {
        format!("{sign}{:.1} days", a / 86_400.0)
    } else {
        format!("{sign}{:.0} years", a / 31_557_600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_secs_reads_any_number() {
        assert_eq!(human_secs(0.25), "250 ms");
        assert_eq!(human_secs(-3.21), "-3.2 s");
        assert_eq!(human_secs(245.0), "4 min 5 s");
        assert_eq!(human_secs(7200.0), "2.0 h");
        assert_eq!(human_secs(864_000.0), "10.0 days");
        assert_eq!(human_secs(-3.15576e10), "-1000 years");
        assert_eq!(human_secs(f64::NAN), "an unknown time");
        assert_eq!(human_secs(f64::INFINITY), "an unknown time");
    }

    /// A throttled read is told to read less often, never to space writes.
    #[test]
    fn a_throttled_read_is_not_called_a_write() {
        let read = StoreError::new(StoreErrorKind::Transport, "GET", "k").throttled(None);
        assert!(store_error_summary(&read).contains("throttled a read"));
        assert!(!store_error_summary(&read).contains("WRITE_INTERVAL"));
        let write = StoreError::new(StoreErrorKind::Transport, "PUT", "k").throttled(None);
        assert!(store_error_summary(&write).contains("throttled a write"));
    }

    /// A failure no retry can cure (an untrusted certificate, a refusing
    /// proxy) is a configuration problem, as a missing bucket is.
    #[test]
    fn permanent_store_failures_exit_as_configuration() {
        let certificate = StoreError::new(StoreErrorKind::Rejected, "GET", "k")
            .with_code("InvalidCertificate")
            .permanent();
        assert_eq!(store_error_code(&certificate), exit::CONFIG);
        assert!(store_error_summary(&certificate).contains("until a setting changes"));
        let bucket =
            StoreError::new(StoreErrorKind::Rejected, "GET", "k").with_code("NoSuchBucket");
        assert_eq!(store_error_code(&bucket), exit::CONFIG);
        // Said once, by the store error itself.
        assert_eq!(store_error_summary(&bucket), "");
        assert!(bucket.to_string().contains("the bucket does not exist"));
        let other = StoreError::new(StoreErrorKind::Rejected, "GET", "k");
        assert_eq!(store_error_code(&other), exit::STORE);
        assert_eq!(store_error_summary(&other), "");
    }

    /// README's exit code table is [`EXIT_CODES`], word for word: the
    /// block from its header to the first blank line.
    #[test]
    fn the_readmes_exit_code_table_is_the_one_table() {
        let readme = include_str!("../../../README.md");
        let header = "| exit code | meaning |\n";
        let at = readme.find(header).expect("README has an exit code table");
        let table = readme[at..].split("\n\n").next().unwrap().trim_end();
        let mut expected = format!("{header}|---|---|");
        for row in EXIT_CODES {
            expected.push_str(&format!("\n| {} | {} |", row.label(" / "), row.meaning));
        }
        assert!(
            table == expected,
            "README.md's exit code table is not cli::EXIT_CODES; write it as:\n\n{expected}\n"
        );
        assert_eq!(readme.matches(header).count(), 1, "one table in README");
    }

    /// Every code the commands exit with by name is in one row; the
    /// signal row's are [`signal_exit_code`]'s; no code is in two rows.
    #[test]
    fn every_exit_code_is_in_one_row() {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let named = [
            exit::OK,
            exit::REFUSED,
            exit::USAGE,
            exit::STORE,
            exit::HELD,
            exit::LOST,
            exit::NO_PERMISSION,
            exit::CONFIG,
            exit::CANNOT_EXECUTE,
            exit::NOT_FOUND,
        ];
        let signals = [SIGINT, SIGTERM, SIGHUP].map(signal_exit_code);
        let mut shown: Vec<u8> = EXIT_CODES.iter().flat_map(|r| r.codes).copied().collect();
        for code in named.iter().chain(&signals) {
            assert_eq!(shown.iter().filter(|c| *c == code).count(), 1, "{code}");
        }
        assert!(EXIT_CODES.iter().any(|r| r.codes == signals), "{signals:?}");
        let count = shown.len();
        shown.sort_unstable();
        shown.dedup();
        assert_eq!(shown.len(), count, "a code in two rows");
        assert_eq!(EXIT_CODES.iter().filter(|r| r.codes.is_empty()).count(), 1);
    }

    /// The help's exit code table keeps within 80 columns, every meaning
    /// in it whole.
    #[test]
    fn the_helps_exit_codes_fit_80_columns() {
        let text = crate::args::exit_codes_text(EXIT_CODES);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{} columns: {line}", line.len());
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        for row in EXIT_CODES {
            let meaning: Vec<&str> = row.meaning.split_whitespace().collect();
            assert!(
                words.windows(meaning.len()).any(|w| w == meaning),
                "{}",
                row.meaning
            );
        }
    }

    #[test]
    fn signal_exit_codes_never_overflow() {
        assert_eq!(signal_exit_code(2), 130);
        assert_eq!(signal_exit_code(15), 143);
        assert_eq!(signal_exit_code(127), 255);
        assert_eq!(signal_exit_code(128), 255);
        assert_eq!(signal_exit_code(i32::MAX), 255);
    }

    #[test]
    fn durations_take_fractions_and_units() {
        let d = |v: &str| parse_duration("t", "--wait", v).map(|d| d.as_secs_f64());
        assert_eq!(d("1.5").unwrap(), 1.5);
        assert_eq!(d("90s").unwrap(), 90.0);
        assert_eq!(d("250ms").unwrap(), 0.25);
        assert_eq!(d("1.5ms").unwrap(), 0.0015);
        assert!(d("1mms").is_err() && d("ms").is_err() && d("5sms").is_err());
        assert_eq!(d("1m").unwrap(), 60.0);
        assert_eq!(d("0.5h").unwrap(), 1800.0);
        assert_eq!(d("1d").unwrap(), 86_400.0);
        assert_eq!(d(".5").unwrap(), 0.5);
        assert_eq!(d("0").unwrap(), 0.0);
        // The environment's forms (BUCKET_LEASE_WRITE_INTERVAL's).
        assert_eq!(d("+1").unwrap(), 1.0);
        assert_eq!(d("1 s").unwrap(), 1.0);
        assert_eq!(d("1 ms").unwrap(), 0.001);
        // …but `off`, which to an option would read as 0: `--timeout off`
        // must not mean a timeout at once.
        for off in ["off", "OFF", " off "] {
            let e = d(off).expect_err(off);
            assert!(e.message.contains("does not take"), "{off}: {}", e.message);
        }
        for bad in [
            "", "s", "-1", "1e3", "inf", "NaN", "1.2.3", "1.5 s", "2y", "1e10",
        ] {
            let e = d(bad).expect_err(bad);
            assert!(e.message.contains("90s, 1m, 0.5h"), "{bad}: {}", e.message);
        }
        assert!(d("1000000000").is_ok() && d("1000000001").is_err());
        assert!(d("99999999999999999999999999999999999999999999d").is_err());
        // Decimal, exactly: what a float would round.
        let exact = |v: &str| parse_duration("t", "--wait", v).unwrap();
        assert_eq!(exact("0.1h"), Duration::from_secs(360));
        assert_eq!(exact("0.3"), Duration::from_millis(300));
        assert_eq!(exact("1.000000001"), Duration::new(1, 1));
        assert_eq!(exact("0.0000000009"), Duration::ZERO);
        assert_eq!(exact("2.5m"), Duration::from_secs(150));
        assert_eq!(exact("1."), Duration::from_secs(1));
        assert_eq!(
            exact("0.1234567890123456789999d"),
            Duration::new(10_666, 666_570_666)
        );
    }

    /// The command line reads each text of the recorded table it read as
    /// it read it, and the environment's forms too: the one parser's
    /// answers (`config`'s tests hold them to the table), but for `off`,
    /// which it refused and still refuses.
    #[test]
    fn durations_read_what_they_read_and_the_environments_forms() {
        let recorded: &[(&str, Option<u128>, Option<u128>)] =
            include!("../../../backends/src/config/recorded_durations.txt");
        for (text, command_line, interval) in recorded {
            let got = parse_duration("t", "--wait", text).ok();
            if text.trim().eq_ignore_ascii_case("off") {
                assert_eq!((got, command_line), (None, &None), "{text:?}");
                continue;
            }
            assert_eq!(got, parse_duration_text(text).ok(), "{text:?}");
            let got = got.map(|d| d.as_nanos());
            if command_line.is_some() || interval.is_some() {
                assert_eq!(got, command_line.or(*interval), "{text:?}");
            }
        }
    }

    /// The refusal of `off` tells what to give instead; what it tells
    /// must not be the very thing `off` was refused for: 0 given to
    /// `--timeout` is a timeout at once, not none.
    #[test]
    fn the_refusal_of_off_never_advises_a_timeout_at_once() {
        let e = parse_duration("inspect", "--timeout", "off").unwrap_err();
        let zero = parse_duration("inspect", "--timeout", "0").unwrap();
        assert!(
            Timeout::start("inspect", zero).passed(),
            "--timeout 0 is a timeout at once"
        );
        assert!(
            !e.message.contains("0 for none"),
            "advises --timeout 0, a timeout at once: {}",
            e.message
        );
    }

    /// README's sentence on the environment's forms the options take names
    /// only forms they take: each duration in it is read by
    /// [`parse_duration`].
    #[test]
    fn the_readmes_duration_forms_are_what_the_options_take() {
        let readme = include_str!("../../../README.md");
        let at = readme
            .find("Durations (`--wait`")
            .expect("README says how durations are written");
        let paragraph = readme[at..].split("\n\n").next().unwrap();
        // The sentence on the forms the options take from the environment.
        let at = paragraph
            .find("take the forms it always took")
            .expect("README says which of the environment's forms the options take");
        let sentence = paragraph[at..].split(". ").next().unwrap();
        let forms: Vec<String> = sentence
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|form| form.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|form| parse_duration_text(form).is_ok())
            .collect();
        assert!(forms.iter().any(|f| f == "1500 ms"), "{forms:?}");
        for form in &forms {
            assert!(
                parse_duration("t", "--wait", form).is_ok(),
                "README says the options take `{form}`: {}",
                parse_duration("t", "--wait", form).unwrap_err().message
            );
        }
    }

    #[test]
    fn a_ttl_is_whole_seconds_from_1_to_3600() {
        let t = |v: &str| parse_ttl("t", "--ttl", v);
        assert_eq!(t("30").unwrap(), 30);
        assert_eq!(t("30s").unwrap(), 30);
        assert_eq!(t("0.5m").unwrap(), 30);
        assert_eq!(t("1h").unwrap(), 3600);
        assert_eq!(t("0.1h").unwrap(), 360);
        assert!(t("1.5")
            .unwrap_err()
            .message
            .contains("whole number of seconds)"));
        assert!(t("2h").unwrap_err().message.contains("suspect"));
        assert!(t("99999999999999999999999")
            .unwrap_err()
            .message
            .contains("suspect"));
        assert!(t("0").unwrap_err().message.contains("1 to 3600"));
    }

    #[test]
    fn exit_codes_are_0_to_255() {
        assert_eq!(parse_exit_code("t", "-E", "0").unwrap(), 0);
        assert_eq!(parse_exit_code("t", "-E", "255").unwrap(), 255);
        for bad in ["256", "-1", "+1", "", "x", "1.0"] {
            assert!(parse_exit_code("t", "-E", bad).is_err(), "{bad}");
        }
    }

    /// The flags win over the environment's variables for the same thing;
    /// `--profile` hides the environment's keys, as in the AWS CLI.
    #[test]
    fn store_flags_are_laid_over_the_environment() {
        let env = |name: &str| Some(format!("env-{name}"));
        let none = StoreFlags::default();
        assert_eq!(
            none.lookup("AWS_REGION", env).as_deref(),
            Some("env-AWS_REGION")
        );
        assert_eq!(
            none.lookup("AWS_ACCESS_KEY_ID", env).as_deref(),
            Some("env-AWS_ACCESS_KEY_ID")
        );
        let flags = StoreFlags {
            profile: Some("p".into()),
            region: Some("r".into()),
            endpoint_url: Some("http://e".into()),
        };
        assert_eq!(flags.lookup("AWS_PROFILE", env).as_deref(), Some("p"));
        assert_eq!(flags.lookup("AWS_REGION", env).as_deref(), Some("r"));
        assert_eq!(
            flags.lookup("AWS_ENDPOINT_URL_S3", env).as_deref(),
            Some("http://e")
        );
        assert_eq!(
            flags.lookup("AWS_ENDPOINT_URL", env).as_deref(),
            Some("http://e")
        );
        for key in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            assert_eq!(flags.lookup(key, env), None, "{key}");
        }
        // Unrelated variables pass through; the STS endpoint stays the
        // environment's (--endpoint-url is S3's, as in the AWS CLI).
        assert_eq!(
            flags.lookup("AWS_ENDPOINT_URL_STS", env).as_deref(),
            Some("env-AWS_ENDPOINT_URL_STS")
        );
        // The region a store is opened with: --region over AWS_REGION and
        // AWS_DEFAULT_REGION (config.rs reads AWS_REGION first).
        let region_only = StoreFlags {
            region: Some("eu-west-3".into()),
            ..StoreFlags::default()
        };
        let env = |name: &str| match name {
            "AWS_DEFAULT_REGION" => Some("us-west-1".to_string()),
            _ => None,
        };
        assert_eq!(
            region_only.lookup("AWS_REGION", env).as_deref(),
            Some("eu-west-3")
        );
    }
}
