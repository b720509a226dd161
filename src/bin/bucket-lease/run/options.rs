//! `run`'s command line: its options table (which also prints the help,
//! the completions and the man page), and the parsing of its arguments
//! into [`Options`].

use crate::args::{given, Arg, Args, Opt, Spec};
use crate::cli::{exit, parse_duration, parse_exit_code, parse_ttl, Failure};
use crate::status_files::Paths;
use crate::text::printable;
use bucket_lease::lease::DEFAULT_TTL_S;
use bucket_lease::record::{check_holder_name, check_payload};
use std::ffi::OsString;
use std::time::Duration;

/// What `run` does, for its help and the man page.
const ABOUT: &str = "\
Takes the lease ({prefix}/LEASE), runs COMMAND while a thread renews the
lease every third of the TTL, and releases it when COMMAND exits. COMMAND
starts only while the lease may be written under.

COMMAND and every process it starts are dead by the lease's write deadline
(two thirds of the TTL after the last renewal that landed). When no renewal
has landed by W = min(grace, TTL/6) before that deadline, they get SIGTERM,
then SIGKILL 50 ms before the deadline, and run exits 76. If the lease is
lost to another instance, SIGTERM at once and SIGKILL W later (never after
the deadline); exit 76. SIGINT, SIGTERM and SIGHUP are passed on to them as
SIGTERM, with SIGKILL after the grace period or 50 ms before the deadline,
whichever comes first (a second signal: SIGKILL at once). When COMMAND
exits, what it left running gets SIGTERM, then SIGKILL after the grace
period; the lease is released once none is left, and run exits with
COMMAND's status.

In a terminal (Linux): when run's standard input is the terminal and run
is in its foreground, COMMAND gets the terminal as under flock (its process
group is made the foreground group), so it can prompt, and Ctrl-C, Ctrl-\\
and Ctrl-Z go to it; run takes the terminal back when COMMAND ends. Ctrl-Z
stops every process of COMMAND and then run's own job, and the lease is not
renewed while suspended: on fg or bg, COMMAND is continued only if the
lease may still be written under; if the write deadline passed, it is
killed without being continued and run exits 76. Otherwise (input from a
file or a pipe, run in the background) COMMAND is in the background of the
terminal, and SIGTSTP is ignored from run's start (while the lease is taken
and while COMMAND runs).

What is stopped (Linux): COMMAND runs in a process group of its own, under
a supervisor process that is the subreaper of everything COMMAND starts.
Signals go to the group and to every descendant, also one that left the
group or the session (setsid, a double fork, a daemon). If run is killed
with SIGKILL, the supervisor kills them all within milliseconds; if the
supervisor is killed, run does. A process run may not signal (another
user's) is named. What escapes: a process started through a service
manager or another daemon (systemd-run, a container runtime, at), a
process on another machine, and everything if run and its supervisor are
killed at once. Elsewhere than on Linux only COMMAND's process group is
signalled.

COMMAND's environment gains BUCKET_LEASE_URL, BUCKET_LEASE_KEY,
BUCKET_LEASE_INSTANCE_ID, BUCKET_LEASE_EPOCH, BUCKET_LEASE_TTL_S,
BUCKET_LEASE_ACQUIRED_AT and BUCKET_LEASE_EXCLUSION, and BUCKET_LEASE_PAYLOAD
given --payload.
";

/// The options of `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Ttl,
    Wait,
    Grace,
    ConflictExitCode,
    BestEffort,
    HolderName,
    Payload,
    MetricsFile,
    StatusFile,
}

/// `run`'s table: parsing, help, completions and the man page.
const OPTIONS: &[Opt<Key>] = &[
    Opt {
        key: Key::Ttl,
        long: "ttl",
        short: None,
        value: Some("DURATION"),
        help: "the lease's TTL, a whole number of seconds from 1 to 3600 (30, 30s, 1m; \
               default 30)",
    },
    Opt {
        key: Key::Wait,
        long: "wait",
        short: None,
        value: Some("DURATION"),
        help: "wait up to DURATION for a held lease (1.5, 90s, 5m, 1h; default: one attempt, \
               then the conflict exit code if held). Every request is bounded: run gives up \
               within max(DURATION, 10 s) plus 2 s; refused credentials (77) or a missing \
               bucket (78) end it at once, and so do SIGINT and SIGTERM",
    },
    Opt {
        key: Key::Grace,
        long: "grace",
        short: None,
        value: Some("DURATION"),
        help: "how long COMMAND may take to stop after SIGTERM (default 10s); never past the \
               write deadline",
    },
    Opt {
        key: Key::ConflictExitCode,
        long: "conflict-exit-code",
        short: Some('E'),
        value: Some("N"),
        help: "the exit code when the lease is held by another instance (after --wait), 0 to \
               255 (default 75), as flock -E: so that COMMAND's own 75 is not taken for \
               \"held\"",
    },
    Opt {
        key: Key::BestEffort,
        long: "best-effort",
        short: None,
        value: None,
        help: "read-then-write instead of conditional writes, for services without them (also \
               BUCKET_LEASE_CONDITIONAL=off); logged as a warning",
    },
    Opt {
        key: Key::HolderName,
        long: "holder-name",
        short: None,
        value: Some("NAME"),
        help: "a readable name for the holder, shown by inspect; default host:pid",
    },
    Opt {
        key: Key::Payload,
        long: "payload",
        short: None,
        value: Some("VALUE"),
        help: "data for followers in the record (an address, a generation), kept by every \
               renewal and the release, shown by inspect and given to COMMAND as \
               BUCKET_LEASE_PAYLOAD: printable text on one line, at most 1024 bytes (give bytes \
               as base64)",
    },
    Opt {
        key: Key::MetricsFile,
        long: "metrics-file",
        short: None,
        value: Some("PATH"),
        help: "keep PATH the lease's metrics in the Prometheus text format \
               (bucket_lease_held, bucket_lease_seconds_to_fence, renewals, losses), for \
               node_exporter's textfile collector: replaced whole after every renewal and \
               change of state, at least every second while held; not held before the \
               acquire and at exit",
    },
    Opt {
        key: Key::StatusFile,
        long: "status-file",
        short: None,
        value: Some("PATH"),
        help: "keep PATH the same as one JSON object (state, held, epoch, seconds_to_fence, \
               fence_at, renewals, losses), replaced whole as --metrics-file is",
    },
];

/// `run`'s documentation.
pub fn spec() -> Spec {
    Spec::new(
        "run",
        "run COMMAND while holding the lease on URL's prefix.",
        "bucket-lease run [OPTIONS] URL [--] COMMAND [ARG...]",
        ABOUT,
        "",
        OPTIONS,
        true,
    )
}

/// The default grace period after SIGTERM.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// What the command line asked for.
pub(super) struct Options {
    pub(super) url: String,
    pub(super) ttl_s: u64,
    pub(super) wait: Option<Duration>,
    pub(super) grace: Duration,
    pub(super) best_effort: bool,
    /// The exit code when the lease is held (`-E`).
    pub(super) conflict_exit_code: u8,
    /// A readable name for the holder (`--holder-name`).
    pub(super) holder_name: Option<String>,
    /// Data for followers in the record (`--payload`).
    pub(super) payload: Option<String>,
    /// `--metrics-file` and `--status-file`.
    pub(super) files: Paths,
    pub(super) command: Vec<OsString>,
}

/// Parse `run`'s arguments; `None` after `--help`.
pub(super) fn parse(p: &mut Args) -> Result<Option<Options>, Failure> {
    let cmd = p.command;
    let mut url: Option<String> = None;
    let mut o = Options {
        url: String::new(),
        ttl_s: DEFAULT_TTL_S,
        wait: None,
        grace: DEFAULT_GRACE,
        best_effort: false,
        conflict_exit_code: exit::HELD,
        holder_name: None,
        payload: None,
        files: Paths {
            metrics: None,
            status: None,
        },
        command: Vec::new(),
    };
    loop {
        if url.is_none() && p.dashes_next() {
            return Err(Failure::usage(cmd, "missing URL before `--`"));
        }
        let Some(arg) = p.next(OPTIONS, true)? else {
            break;
        };
        match arg {
            Arg::Help => {
                crate::args::print_help(&spec());
                return Ok(None);
            }
            Arg::Opt(key, value) => {
                let value = given(value);
                match key {
                    Key::Ttl => o.ttl_s = parse_ttl(cmd, "--ttl", &value)?,
                    Key::Wait => o.wait = Some(parse_duration(cmd, "--wait", &value)?),
                    Key::Grace => o.grace = parse_duration(cmd, "--grace", &value)?,
                    Key::ConflictExitCode => {
                        o.conflict_exit_code =
                            parse_exit_code(cmd, "-E/--conflict-exit-code", &value)?;
                    }
                    Key::BestEffort => o.best_effort = true,
                    Key::MetricsFile => {
                        o.files.metrics = Some(file_path(cmd, "--metrics-file", value)?)
                    }
                    Key::StatusFile => {
                        o.files.status = Some(file_path(cmd, "--status-file", value)?)
                    }
                    Key::HolderName => {
                        if let Err(e) = check_holder_name(&value) {
                            return Err(Failure::usage(
                                cmd,
                                format!("--holder-name {:?}: {e}", printable(&value)),
                            ));
                        }
                        o.holder_name = Some(value);
                    }
                    Key::Payload => {
                        if let Err(e) = check_payload(&value) {
                            return Err(Failure::usage(
                                cmd,
                                format!("--payload {:?}: {e}", printable(&shortened(&value))),
                            ));
                        }
                        o.payload = Some(value);
                    }
                }
            }
            Arg::Word(word) if url.is_none() => match word.into_string() {
                Ok(s) => url = Some(s),
                Err(word) => {
                    return Err(Failure::usage(
                        cmd,
                        format!("URL {word:?} is not valid UTF-8"),
                    ))
                }
            },
            // COMMAND's first word: the rest is its own, exactly as given.
            Arg::Word(word) => {
                o.command.push(word);
                o.command.extend(p.rest());
                break;
            }
        }
    }
    let Some(url) = url else {
        return Err(Failure::usage(
            cmd,
            "missing URL (such as s3://bucket/prefix)",
        ));
    };
    if o.command.is_empty() {
        return Err(Failure::usage(
            cmd,
            "missing COMMAND to run (after the URL and `--`)",
        ));
    }
    if let (Some(metrics), Some(status)) = (&o.files.metrics, &o.files.status) {
        if same_file(metrics, status) {
            return Err(Failure::usage(
                cmd,
                format!(
                    "--metrics-file and --status-file name one file ({}): each is replaced \
                     whole by its own text; give two paths",
                    printable(&metrics.to_string_lossy())
                ),
            ));
        }
    }
    o.url = url;
    Ok(Some(o))
}

/// `text` cut to its first 40 characters and `…` when longer: a payload
/// over the limit is named, not echoed whole.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Whether `a` and `b` name one file: the same path once made absolute
/// (`lease.prom` and `./lease.prom`), or, when both exist, one file
/// through links.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let absolute = |p: &std::path::Path| std::path::absolute(p).ok();
    if absolute(a).is_some_and(|a| Some(a) == absolute(b)) {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// A file option's PATH: not empty, and naming a file.
fn file_path(
    cmd: &'static str,
    option: &str,
    value: String,
) -> Result<std::path::PathBuf, Failure> {
    let path = std::path::PathBuf::from(value);
    if path.file_name().is_none() {
        return Err(Failure::usage(
            cmd,
            format!("{option} {:?}: names no file (give a path such as /var/lib/node_exporter/lease.prom)", printable(&path.to_string_lossy())),
        ));
    }
    Ok(path)
}
