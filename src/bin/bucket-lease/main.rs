//! `bucket-lease`: take, look at, break and measure a lease on a prefix of
//! an S3-compatible bucket from the shell.
//!
//! This file parses the command line (by hand: every error names the bad
//! argument and exits [`exit::USAGE`]), opens the store the URL names, and
//! hands over to one module per command: [`run`], [`inspect`], [`brk`]
//! (`break`) and [`bench`]. [`log`] prints the library's warnings on
//! stderr.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`run`: the command succeeded; `inspect`: the lease was read, free or held) |
//! | N | `run`: the command's own exit status; 128+N when signal N killed it |
//! | 1 | `break` refused: the lease is free, names another holder, or is not a lease record |
//! | 64 | usage: a bad or missing argument |
//! | 69 | a store request failed, or the store ignores conditional writes |
//! | 75 | `run`: the lease is held by another instance (after `--wait`, if given); `break`: the lease changed meanwhile |
//! | 76 | `run`: the lease was lost or fenced while the command ran (the command was stopped), or before it could start (it was not started) |
//! | 77 | the service refused the credentials or the permissions (`AccessDenied`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`) |
//! | 78 | configuration: the URL, the environment or the store's settings cannot be used, the bucket does not exist, the server's certificate is not trusted, or the proxy refuses |
//! | 126, 127 | `run`: the command could not be executed, or was not found |
//! | 130, 143, 129 | `run`: interrupted by SIGINT, SIGTERM or SIGHUP, the command stopped by a signal |
//!
//! Text that came from the bucket or the service is escaped before it
//! reaches the terminal ([`text::printable`]).
#![forbid(unsafe_code)]

mod bench;
mod brk;
mod child;
mod inspect;
mod log;
// Shared with benches/renewal.rs, which uses what `bench` does not.
#[allow(dead_code)]
mod measure;
#[cfg(target_os = "linux")]
mod procs;
mod run;
#[cfg(target_os = "linux")]
mod supervise;
mod text;
mod tty;

use bucket_lease::backends::config::{self, ConfigError};
use bucket_lease::store::{StoreError, StoreErrorKind};
use bucket_lease::{LeaseError, Store};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;

/// The exit codes of every command; see the [crate docs](crate).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// `break` refused: nothing to break, or another holder.
    pub const REFUSED: u8 = 1;
    /// A bad or missing argument (sysexits `EX_USAGE`).
    pub const USAGE: u8 = 64;
    /// A store request failed, or the store ignores conditions
    /// (`EX_UNAVAILABLE`).
    pub const STORE: u8 = 69;
    /// The lease is held by another instance (`EX_TEMPFAIL`, as `flock -n`
    /// can be told to exit).
    pub const HELD: u8 = 75;
    /// The lease was lost or fenced while the command ran, or before it
    /// could start (`EX_PROTOCOL`).
    pub const LOST: u8 = 76;
    /// The service refused the credentials or the permissions
    /// (`EX_NOPERM`).
    pub const NO_PERMISSION: u8 = 77;
    /// The configuration cannot be used (`EX_CONFIG`).
    pub const CONFIG: u8 = 78;
    /// The command was found but could not be executed (as shells do).
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found (as shells do).
    pub const NOT_FOUND: u8 = 127;
}

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0        success; `inspect`: the lease was read (free or held)
  N        `run`: the command's own exit status; 128+N when signal N killed it
  1        `break` refused: the lease is free, names another holder, or is no lease record
  64       usage: a bad or missing argument
  69       a store request failed, or the store ignores conditional writes
  75       `run`: held by another instance (after --wait); `break`: it changed meanwhile
  76       `run`: the lease was lost or fenced while the command ran (it was stopped),
           or before it could start (it was not started)
  77       the service refused the credentials or the permissions
  78       configuration: the URL or the environment cannot make a store, the bucket
           does not exist, the server's certificate is not trusted, or the proxy refuses
  126/127  `run`: the command could not be executed / was not found
  130/143/129  `run`: interrupted by SIGINT / SIGTERM / SIGHUP (unless the command exited
           by itself)";

const URL_HELP: &str = "\
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

const MAIN_HELP: &str = "\
bucket-lease: one process at a time holds a lease on a prefix of an S3-compatible bucket.

Usage:
  bucket-lease run [OPTIONS] URL [--] COMMAND [ARG...]
  bucket-lease inspect [--json] URL
  bucket-lease break --holder ID [--json] URL
  bucket-lease bench [--iters N] [--json] URL
  bucket-lease help [COMMAND]

Commands:
  run       take the lease, run COMMAND while keeping it, release it when COMMAND exits
  inspect   show who holds the lease, how old it is and whether it is fresh
  break     take the lease away from a named (dead) holder, with a conditional write
  bench     measure acquire, renew and release latency against a scratch prefix

Options:
  -h, --help      this help; `bucket-lease COMMAND --help` for a command's
  -V, --version   the version and the stores built in
  -v, --verbose   say more on stderr (repeat for more)
  -q, --quiet     only errors on stderr
";

fn main() -> ExitCode {
    let args: VecDeque<OsString> = std::env::args_os().skip(1).collect();
    #[cfg(target_os = "linux")]
    if args.front().is_some_and(|a| a == child::SUPERVISE) {
        return ExitCode::from(supervise::main(&Vec::from(args)[1..]));
    }
    let code = match dispatch(Parser::new("", args)) {
        Ok(code) => code,
        Err(failure) => {
            failure.print();
            failure.code
        }
    };
    ExitCode::from(code)
}

fn dispatch(mut p: Parser) -> Result<u8, Failure> {
    let word = match p.option()? {
        None => {
            return Err(Failure::usage(
                "",
                "no command given (run, inspect, break or bench)",
            ))
        }
        Some(Token::Word(word)) => word.to_string_lossy().into_owned(),
        Some(Token::Long(name, _)) if name == "version" => return Ok(print_version()),
        Some(Token::Short('V')) => return Ok(print_version()),
        Some(Token::Help) => return Ok(print_help(MAIN_HELP)),
        Some(tok) => return Err(p.unexpected(&tok)),
    };
    p.command = match word.as_str() {
        "run" => "run",
        "inspect" => "inspect",
        "break" => "break",
        "bench" => "bench",
        "help" => return help_for(&mut p),
        other => {
            return Err(Failure::usage(
                "",
                format!("unknown command {other:?} (run, inspect, break or bench)"),
            ))
        }
    };
    match p.command {
        "run" => run::main(p),
        "inspect" => inspect::main(p),
        "break" => brk::main(p),
        _ => bench::main(p),
    }
}

fn help_for(p: &mut Parser) -> Result<u8, Failure> {
    let text = match p.token()? {
        None => MAIN_HELP,
        Some(Token::Word(w)) => match w.to_string_lossy().as_ref() {
            "run" => run::HELP,
            "inspect" => inspect::HELP,
            "break" => brk::HELP,
            "bench" => bench::HELP,
            other => {
                return Err(Failure::usage(
                    "",
                    format!("help: unknown command {other:?} (run, inspect, break or bench)"),
                ))
            }
        },
        Some(tok) => return Err(p.unexpected(&tok)),
    };
    Ok(print_help(text))
}

fn print_help(text: &str) -> u8 {
    println!("{text}\n{URL_HELP}\n\n{EXIT_CODES_HELP}");
    exit::OK
}

fn print_version() -> u8 {
    let features: Vec<&str> = [
        ("fs", cfg!(feature = "fs")),
        ("s3", cfg!(feature = "s3")),
        ("r2", cfg!(feature = "r2")),
        ("minio", cfg!(feature = "minio")),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| *name)
    .collect();
    println!(
        "bucket-lease {} (stores: {})",
        env!("CARGO_PKG_VERSION"),
        features.join(", ")
    );
    exit::OK
}

/// Why a command ended early: the exit code and what to say on stderr.
#[derive(Debug)]
pub struct Failure {
    /// The process's exit code.
    pub code: u8,
    /// What went wrong, printed after `bucket-lease: `.
    pub message: String,
    /// For usage errors: the command whose `--help` to point at.
    usage_of: Option<&'static str>,
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

    fn print(&self) {
        // Messages quote records and service answers: escape what they hold.
        eprintln!("bucket-lease: {}", text::printable_lines(&self.message));
        match self.usage_of {
            Some("") => eprintln!("try `bucket-lease --help`"),
            Some(command) => eprintln!("try `bucket-lease {command} --help`"),
            None => {}
        }
    }
}

/// One piece of the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// `--name` or `--name=value`.
    Long(String, Option<String>),
    /// One letter of `-x` or `-xyz`.
    Short(char),
    /// Anything else: a positional argument.
    Word(OsString),
    /// `--`: everything after it is positional.
    Dashes,
    /// `-h` or `--help` (only from [`Parser::option`]).
    Help,
}

/// A hand-written command-line reader: long options with `=` or a separate
/// value, bundled short flags, `--`, and the options every command shares
/// (`-v`, `-q`, `-h`).
#[derive(Debug)]
pub struct Parser {
    /// The command being parsed, for error messages (empty at the top).
    pub command: &'static str,
    args: VecDeque<OsString>,
    shorts: VecDeque<char>,
    /// How many `-v` were given.
    pub verbose: u8,
    /// Whether `-q` was given.
    pub quiet: bool,
}

impl Parser {
    fn new(command: &'static str, args: VecDeque<OsString>) -> Self {
        Parser {
            command,
            args,
            shorts: VecDeque::new(),
            verbose: 0,
            quiet: false,
        }
    }

    /// The next token, or `None` at the end.
    ///
    /// # Errors
    ///
    /// A usage failure for an option that is not UTF-8.
    pub fn token(&mut self) -> Result<Option<Token>, Failure> {
        if let Some(c) = self.shorts.pop_front() {
            return Ok(Some(Token::Short(c)));
        }
        let Some(arg) = self.args.pop_front() else {
            return Ok(None);
        };
        let bytes = arg.as_encoded_bytes();
        if bytes == b"--" {
            return Ok(Some(Token::Dashes));
        }
        if bytes.len() < 2 || bytes[0] != b'-' {
            return Ok(Some(Token::Word(arg)));
        }
        let Some(text) = arg.to_str() else {
            return Err(Failure::usage(
                self.command,
                format!("option {arg:?} is not valid UTF-8"),
            ));
        };
        if let Some(long) = text.strip_prefix("--") {
            return Ok(Some(match long.split_once('=') {
                Some((name, value)) => Token::Long(name.to_string(), Some(value.to_string())),
                None => Token::Long(long.to_string(), None),
            }));
        }
        let mut letters = text[1..].chars();
        let first = letters.next().unwrap_or('-');
        self.shorts.extend(letters);
        Ok(Some(Token::Short(first)))
    }

    /// The value of the option `tok`: its `=value`, or the next argument.
    ///
    /// # Errors
    ///
    /// A usage failure naming the option when the value is missing, or for
    /// a short option bundled with others.
    pub fn value(&mut self, tok: &Token) -> Result<String, Failure> {
        let name = describe(tok);
        if let Token::Long(_, Some(value)) = tok {
            return Ok(value.clone());
        }
        if !self.shorts.is_empty() {
            return Err(Failure::usage(
                self.command,
                format!("{name} takes a value; give it separately"),
            ));
        }
        match self.args.pop_front() {
            Some(value) => value.into_string().map_err(|value| {
                Failure::usage(
                    self.command,
                    format!("{name}: {value:?} is not valid UTF-8"),
                )
            }),
            None => Err(Failure::usage(
                self.command,
                format!("{name} needs a value"),
            )),
        }
    }

    /// Everything not read yet, as given.
    pub fn rest(&mut self) -> Vec<OsString> {
        self.args.drain(..).collect()
    }

    /// Handle an option every command shares (`-v`, `-q`); true when `tok`
    /// was one.
    ///
    /// # Errors
    ///
    /// A usage failure when `tok` has a value it does not take.
    pub fn common(&mut self, tok: &Token) -> Result<bool, Failure> {
        let flag = match tok {
            Token::Short('v') => "verbose",
            Token::Short('q') => "quiet",
            Token::Long(name, value) if name == "verbose" || name == "quiet" => {
                if value.is_some() {
                    return Err(Failure::usage(
                        self.command,
                        format!("--{name} takes no value"),
                    ));
                }
                name.as_str()
            }
            _ => return Ok(false),
        };
        if flag == "verbose" {
            self.verbose = self.verbose.saturating_add(1);
        } else {
            self.quiet = true;
        }
        Ok(true)
    }

    /// The next token a command must handle itself: the options every
    /// command shares (`-v`, `-q`) are taken here, and `-h` / `--help`
    /// come back as [`Token::Help`].
    ///
    /// # Errors
    ///
    /// As [`token`](Self::token) and [`common`](Self::common).
    pub fn option(&mut self) -> Result<Option<Token>, Failure> {
        while let Some(tok) = self.token()? {
            if self.common(&tok)? {
                continue;
            }
            let help = matches!(tok, Token::Short('h'))
                || matches!(&tok, Token::Long(name, None) if name == "help");
            return Ok(Some(if help { Token::Help } else { tok }));
        }
        Ok(None)
    }

    /// A flag that takes no value: a usage failure when `tok` carries one.
    ///
    /// # Errors
    ///
    /// As said.
    pub fn flag(&self, tok: &Token) -> Result<(), Failure> {
        match tok {
            Token::Long(name, Some(_)) => Err(Failure::usage(
                self.command,
                format!("--{name} takes no value"),
            )),
            _ => Ok(()),
        }
    }

    /// The usage failure for a token the command does not take.
    pub fn unexpected(&self, tok: &Token) -> Failure {
        let what = match tok {
            Token::Word(w) => format!("unexpected argument {w:?}"),
            Token::Dashes => "unexpected `--`".to_string(),
            other => format!("unknown option {}", describe(other)),
        };
        Failure::usage(self.command, what)
    }

    /// Turn on logging at the level asked for.
    pub fn init_logging(&self) {
        log::init(self.verbose, self.quiet);
    }
}

/// How an option token was written, for messages.
pub fn describe(tok: &Token) -> String {
    match tok {
        Token::Long(name, _) => format!("--{name}"),
        Token::Short(c) => format!("-{c}"),
        Token::Word(w) => format!("{w:?}"),
        Token::Dashes => "--".to_string(),
        Token::Help => "--help".to_string(),
    }
}

/// Parse a lease TTL for `option`: whole seconds from 1 to
/// [`MAX_SANE_TTL_S`](bucket_lease::record::MAX_SANE_TTL_S).
///
/// # Errors
///
/// A usage failure naming the option, the value, the range and why.
pub fn parse_ttl(command: &'static str, option: &str, value: &str) -> Result<u64, Failure> {
    use bucket_lease::record::MAX_SANE_TTL_S;
    let why = match value.parse::<u64>() {
        Ok(n) if (1..=MAX_SANE_TTL_S).contains(&n) => return Ok(n),
        Ok(0) => "",
        // A number too large for u64 is too long a TTL too.
        Ok(_) => LONG_TTL,
        Err(_) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => LONG_TTL,
        Err(_) => "",
    };
    Err(Failure::usage(
        command,
        format!(
            "{option}: expected a whole number of seconds from 1 to {MAX_SANE_TTL_S}, got \
             {value:?}{why}"
        ),
    ))
}

const LONG_TTL: &str = " (every contender treats a record with a longer TTL as suspect, and \
                        may take it over from a live holder)";

/// The longest duration [`parse_seconds`] accepts: 10^9 s, about 31 years,
/// far from any overflow when added to an instant.
pub const MAX_SECONDS: f64 = 1e9;

/// Parse a duration in seconds (decimals allowed, 0 allowed, up to
/// [`MAX_SECONDS`]) for `option`.
///
/// # Errors
///
/// A usage failure naming the option, the value and the range.
pub fn parse_seconds(
    command: &'static str,
    option: &str,
    value: &str,
) -> Result<std::time::Duration, Failure> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=MAX_SECONDS).contains(s))
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            Failure::usage(
                command,
                format!(
                    "{option}: expected a number of seconds from 0 up to {MAX_SECONDS:.0}, got \
                     {value:?}"
                ),
            )
        })
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
/// [`exit::STORE`]; empty otherwise.
pub fn store_error_summary(error: &StoreError) -> &'static str {
    match store_error_code(error) {
        exit::NO_PERMISSION => {
            "the service refused the credentials or their permissions (check the credentials \
             -v names the source of, and that they may read and write this prefix): "
        }
        // The store's error says it, and what to do, itself.
        exit::CONFIG if error.code() == Some("NoSuchBucket") => "",
        exit::CONFIG => "no retry can succeed until a setting changes (the message names it): ",
        _ => "",
    }
}

/// The exit code for a lease error: [`exit::HELD`], [`exit::LOST`] for an
/// acquire that outlasted its own fence, [`exit::USAGE`] for a TTL out of
/// range, [`exit::CONFIG`] for a prefix too long for the store's keys,
/// [`store_error_code`] for a failed request, else [`exit::STORE`].
pub fn lease_error_code(error: &LeaseError) -> u8 {
    match error {
        LeaseError::Held { .. } => exit::HELD,
        LeaseError::Fenced { .. } => exit::LOST,
        LeaseError::TtlTooLong { .. } => exit::USAGE,
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

/// The URL argument, once: a usage failure for a second one.
///
/// # Errors
///
/// As said.
pub fn set_url(
    command: &'static str,
    url: &mut Option<String>,
    word: OsString,
) -> Result<(), Failure> {
    if let Some(first) = url {
        return Err(Failure::usage(
            command,
            format!("unexpected argument {word:?} (the URL is already {first:?})"),
        ));
    }
    match word.into_string() {
        Ok(s) => {
            *url = Some(s);
            Ok(())
        }
        Err(word) => Err(Failure::usage(
            command,
            format!("URL {word:?} is not valid UTF-8"),
        )),
    }
}

/// The URL, or a usage failure saying it is missing.
///
/// # Errors
///
/// As said.
pub fn require_url(command: &'static str, url: Option<String>) -> Result<String, Failure> {
    url.ok_or_else(|| Failure::usage(command, "missing URL (such as s3://bucket/prefix)"))
}

/// Open the store `url` names, from the process environment.
///
/// # Errors
///
/// A configuration failure ([`exit::CONFIG`]) saying what to set.
pub fn open_store(url: &str) -> Result<(Arc<dyn Store>, String), Failure> {
    config::open(url).map_err(|e: ConfigError| Failure::new(exit::CONFIG, e))
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

    #[test]
    fn signal_exit_codes_never_overflow() {
        assert_eq!(signal_exit_code(2), 130);
        assert_eq!(signal_exit_code(15), 143);
        assert_eq!(signal_exit_code(127), 255);
        assert_eq!(signal_exit_code(128), 255);
        assert_eq!(signal_exit_code(i32::MAX), 255);
    }
}
