//! `bucket-lease break URL --holder ID [--json]`: take the lease away from
//! a holder the operator names, because it is known to be dead or stuck.
//!
//! What it promises:
//!
//! - It writes only over the exact version it read, and only when that
//!   version names `ID` ([`bucket_lease::inspect::break_lease`]); it never
//!   deletes. The record left behind names `broken-by-{new id}` and is
//!   already expired: the next `run` takes the lease at once, and `ID`'s
//!   next renewal fails, so a `bucket-lease run` holding it stops its
//!   command and exits 76.
//! - It says what it replaced (holder, stamps, epoch, whether it was still
//!   fresh) and with what. Exit 0.
//! - It refuses, writing nothing, when the lease is free, is not a lease
//!   record, or names another holder (it says who): exit 1. When `ID`
//!   renewed between the read and the write, it reads and writes again on
//!   the version read (up to [`bucket_lease::inspect::BREAK_TRIES`]
//!   writes); when the record was released or taken over meanwhile, or
//!   `ID` renewed every time, it says the record changed: exit 75. A failed request
//!   exits 69 (a write with no answer may have landed: inspect to see).
//! - It is bounded as a whole by `--timeout` (default 30 s, as
//!   [`bucket_lease::lease::DEFAULT_CALL_TIMEOUT`]): its reads and writes
//!   share that deadline, and opening the store is cut off at it too; it
//!   never takes longer, whatever the store does (exit 69, saying so).
//! - Text from the records is escaped in the human output and in messages
//!   ([`printable`]); `--json` carries it exactly, JSON-escaped.

use crate::args::{given, require_url, set_url, Arg, Args, Opt, Spec};
use crate::cli::{
    exit, open_store, parse_duration, store_error_code, store_error_summary, Failure, Timeout,
    WATCHDOG_SLACK,
};
use crate::text::{object, printable};
use bucket_lease::clock::SystemClock;
use bucket_lease::inspect::{break_lease_before, BreakError, Broken};
use serde_json::Value;
use std::time::Duration;

/// What `break` does, for its help and the man page.
const ABOUT: &str = "\
Replaces the record naming ID, with a write conditional on the version just
read (never a delete), by one that is already expired: the next contender
takes the lease at once, and ID's next renewal fails (a `bucket-lease run`
holding it stops its command and exits 76). Refuses when the lease is free
or names another holder (exit 1), and when it was released or taken over
meanwhile (exit 75); a renewal by ID meanwhile is read and broken again.
A holder that is still alive may keep writing until its next renewal fails:
break only a holder you know is dead or stuck. `bucket-lease inspect URL`
shows the holder's id. Gives up after --timeout (default 30s), reads and
writes included (exit 69; a write may have landed: inspect to see).
";

/// The options of `break`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Holder,
    Json,
    Timeout,
}

/// `break`'s table: parsing, help, completions and the man page.
const OPTIONS: &[Opt<Key>] = &[
    Opt::valued(
        Key::Holder,
        "holder",
        "ID",
        "the instance id the lease must name (required; `bucket-lease inspect URL` \
               shows it)",
    ),
    Opt::flag(Key::Json, "json", "one JSON object on stdout"),
    Opt::valued(
        Key::Timeout,
        "timeout",
        "DURATION",
        "give up after DURATION, opening the store, reads and writes included (exit 69; \
               a write may have landed: inspect to see; default 30s)",
    ),
];

/// How long `break` may take by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a timed-out break was doing.
const BREAKING: &str = "breaking the lease (a write may have landed: `bucket-lease inspect URL` \
                        shows it)";

/// `break`'s documentation.
pub fn spec() -> Spec {
    Spec::new(
        "break",
        "take the lease on URL's prefix away from a holder known to be dead.",
        "bucket-lease break --holder ID [OPTIONS] URL",
        ABOUT,
        "",
        OPTIONS,
        true,
    )
}

/// Parse and run `break`.
///
/// # Errors
///
/// A usage, configuration, refusal or store failure.
pub fn main(mut p: Args) -> Result<u8, Failure> {
    let (mut url, mut holder, mut json, mut limit) = (None, None, false, DEFAULT_TIMEOUT);
    while let Some(arg) = p.next(OPTIONS, true)? {
        match arg {
            Arg::Help => return Ok(crate::args::print_help(&spec())),
            Arg::Opt(Key::Json, _) => json = true,
            Arg::Opt(Key::Holder, id) => {
                let id = given(id);
                if id.is_empty() {
                    return Err(Failure::usage(p.command, "--holder: the id is empty"));
                }
                holder = Some(id);
            }
            Arg::Opt(Key::Timeout, value) => {
                limit = parse_duration(p.command, "--timeout", &given(value))?;
            }
            Arg::Word(word) => set_url(p.command, &mut url, word)?,
        }
    }
    let url = require_url(p.command, url)?;
    let Some(holder) = holder else {
        return Err(Failure::usage(
            p.command,
            "missing --holder ID (the instance id `bucket-lease inspect` shows)",
        ));
    };
    p.init_logging();
    let timeout = Timeout::start(p.command, limit);
    let _watchdog = timeout.watchdog(BREAKING, WATCHDOG_SLACK);
    let (store, prefix) = open_store(&url, &p.shared.store)?;
    match break_lease_before(&*store, &prefix, &holder, &SystemClock, timeout.deadline()) {
        Ok(broken) => {
            if json {
                println!("{}", crate::text::json_line(&to_json(&url, &broken)));
            } else {
                print_human(&url, &broken);
            }
            Ok(exit::OK)
        }
        Err(BreakError::Store(e)) if timeout.is_cause(&e) => Err(timeout.failure(BREAKING)),
        Err(e) => {
            let code = match &e {
                BreakError::Changed { .. } => exit::HELD,
                BreakError::Store(e) => store_error_code(e),
                _ => exit::REFUSED,
            };
            if json {
                println!("{}", crate::text::json_line(&refusal_json(&url, &e)));
            }
            let summary = match &e {
                BreakError::Store(e) => store_error_summary(e),
                _ => "",
            };
            Err(Failure::new(code, format!("break: {summary}{e}")))
        }
    }
}

fn to_json(url: &str, b: &Broken) -> Value {
    let (old, new) = (&b.replaced, &b.record);
    object(vec![
        ("url", url.into()),
        ("key", b.key.as_str().into()),
        ("broken", true.into()),
        (
            "replaced",
            object(vec![
                ("holder", old.instance_id.as_str().into()),
                ("acquired_at", old.acquired_at.as_str().into()),
                ("renewed_at", old.renewed_at.as_str().into()),
                ("ttl_s", old.ttl_s.into()),
                ("epoch", old.epoch.into()),
                ("fresh", b.was_fresh.into()),
                ("etag", b.replaced_version.etag.as_deref().into()),
                (
                    "version_id",
                    b.replaced_version.version_id.as_deref().into(),
                ),
            ]),
        ),
        (
            "record",
            object(vec![
                ("holder", new.instance_id.as_str().into()),
                ("acquired_at", new.acquired_at.as_str().into()),
                ("renewed_at", new.renewed_at.as_str().into()),
                ("ttl_s", new.ttl_s.into()),
                ("epoch", new.epoch.into()),
                ("etag", b.version.etag.as_deref().into()),
                ("version_id", b.version.version_id.as_deref().into()),
            ]),
        ),
    ])
}

fn refusal_json(url: &str, e: &BreakError) -> Value {
    let (reason, holder) = match e {
        BreakError::Free { .. } => ("free", None),
        BreakError::Unreadable { .. } => ("unreadable", None),
        BreakError::OtherHolder { holder, .. } => ("other-holder", Some(holder.clone())),
        BreakError::Changed { holder, .. } => ("changed", holder.clone()),
        _ => ("store-error", None),
    };
    object(vec![
        ("url", url.into()),
        ("key", e.key().into()),
        ("broken", false.into()),
        ("reason", reason.into()),
        ("holder", holder.into()),
        ("error", e.to_string().into()),
    ])
}

fn print_human(url: &str, b: &Broken) {
    let replaced = printable(&b.replaced.instance_id);
    println!("broke lease {url} ({})", b.key);
    println!(
        "  replaced  instance {replaced} (epoch {}, acquired_at {}, renewed_at {}, ttl_s {}; {} \
         by this machine's clock; etag {})",
        b.replaced.epoch,
        printable(&b.replaced.acquired_at),
        printable(&b.replaced.renewed_at),
        b.replaced.ttl_s,
        if b.was_fresh {
            "still fresh"
        } else {
            "already stale"
        },
        printable(b.replaced_version.etag.as_deref().unwrap_or("(none)")),
    );
    println!(
        "  with      {} (epoch {}, ttl_s {}, already expired)",
        printable(&b.record.instance_id),
        b.record.epoch,
        b.record.ttl_s
    );
    println!(
        "the next contender takes the lease at once; instance {replaced}'s next renewal fails"
    );
}
