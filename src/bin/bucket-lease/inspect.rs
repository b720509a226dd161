//! `bucket-lease inspect URL [--json]`: who holds the lease, and whether a
//! contender on this machine would leave it alone.
//!
//! What it promises:
//!
//! - One read of `{prefix}/LEASE`; nothing is written. The command is
//!   bounded as a whole by `--timeout` (default 30 s, as
//!   [`bucket_lease::lease::DEFAULT_CALL_TIMEOUT`]): the read has that
//!   deadline, credentials and the store's own retries included, and
//!   opening the store (which may ask a credentials source) is cut off at
//!   it too; it gives up by then with exit 69, saying so.
//! - Age and freshness are judged by this machine's wall clock against the
//!   TTL the holder wrote, exactly as a contender here would judge them.
//! - A missing lease is not an error: it prints that the lease is free and
//!   exits 0. A record its holder released is free too: it shows "free
//!   (released by X at T), last epoch N". Every successful read exits 0,
//!   free or held; a failed request exits 69, an unusable URL or
//!   environment 78.
//! - `--json` prints one object on stdout: `url`, `key`, `state` (`free`,
//!   `held`, `expired` or `unreadable`), `released` (whether a record
//!   says its holder released it), and for a record `holder` (for a
//!   released one: the last holder), `holder_name` (the holder's name for
//!   people, `host:pid` by default; `null` when the record carries no
//!   valid one), `payload` (the holder's data for followers, as
//!   `run --payload` or `Contender::with_payload` set it; `null` when the
//!   record carries none, or none that is valid: over 1024 bytes, with
//!   control characters, not a string), `instance_nonce` (the nonce of the
//!   holder's process; `null` in records of the async reference, of older
//!   versions and of a break), `acquired_at`, `renewed_at`,
//!   `released_at` (`null` unless released), `ttl_s`, `epoch`, `age_s`
//!   (`null` for a released record),
//!   `expires_in_s`, `fresh`, `suspect`, `broken`, `etag`, `version_id`,
//!   `versioned` (whether the bucket keeps every version of the record: a
//!   version id other than S3's `null`), `read_at`.
//! - On a bucket that keeps versions the human output says so below the
//!   version id: how many versions a day the record gains (at the holder's
//!   TTL for a live record) and the lifecycle rule that bounds them
//!   ([`bucket_lease::versioned`]).
//! - Text from the record (ids, stamps, ETags) is escaped in the human
//!   output ([`printable`]): a record cannot send escape sequences to the
//!   terminal. `--json` carries it exactly, JSON-escaped.
//!
//! With `--watch` it follows the lease ([`bucket_lease::watch`]): one JSON
//! line per change on stdout, each flushed, the first the state as it is.
//! Each line has the fields of `--json`, plus `change` (what changed:
//! `first`, `holder`, `epoch`, `released`, `expired`, `resumed`,
//! `appeared`, `removed` or `unreadable`) and `seen_at` (this machine's
//! clock when it was seen). The record is read every `--interval`
//! (default 1 s) with a conditional GET, so an unchanged record costs a
//! `304` and no body; a record nobody renews is reported `expired` at its
//! expiry by this machine's clock.
//!
//! - `--timeout` bounds opening the store and the first read as a whole
//!   (which must succeed: exit 69, 77 or 78 as without `--watch`), then
//!   each read; it never ends the watch. A read that fails later is logged
//!   and tried again; a permanent failure (refused credentials, a bucket
//!   that does not exist) ends it with that failure's exit code.
//! - SIGINT and SIGTERM end it with exit 0, at once, also mid-wait.
//! - When stdout is closed (`| head -1`) it ends quietly with exit 0 at its
//!   next line; any other failure to write stdout exits 69, saying so.

use crate::args::{given, require_url, set_url, Arg, Args, Opt, Spec};
use crate::cli::{
    exit, human_secs, open_store, parse_duration, store_error_code, store_error_summary, Failure,
    Timeout, WATCHDOG_SLACK,
};
use crate::text::{object, printable};
use bucket_lease::inspect::{inspect_before, Inspection};
use bucket_lease::record::{format_stamp, LeaseRecord};
use bucket_lease::watch::{Change, Watcher};
use bucket_lease::{clock::SystemClock, lease::Cancel, versioned, LeaseError, Store, Wait};
use serde_json::Value;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `inspect` does, for its help and the man page.
const ABOUT: &str = "\
Prints the holder's instance id (and the nonce of its process, which tells
two processes under one id apart), its name for people (host:pid unless
run --holder-name set another; informational only), its payload (the data
run --payload set for followers), when it took and last renewed the lease,
its age and freshness by this machine's clock, whether the record is
suspect (stamped far in the future or with an absurd TTL), its epoch and
ETag; on a bucket that keeps versions, the version id, how many versions a
day the record gains and the lifecycle rule that bounds them. Writes
nothing. A missing lease prints that it is free and exits 0; a released
one prints who released it, when, and the last epoch. Text from
the record is shown with control characters escaped. Gives up after
--timeout (default 30s), whatever the store or the credentials source
does (exit 69).

With --watch it follows the lease: one JSON line per change (the fields of
--json, plus change: first, holder, epoch, released, expired, resumed,
appeared, removed or unreadable; and seen_at), the first the state as it
is. It reads every --interval with a conditional GET (an unchanged record
costs a 304 and no body) and reports a record nobody renews as expired at
its expiry by this machine's clock. SIGINT or SIGTERM end it with exit 0,
and so does a closed stdout (| head -1), at the next line.
";

/// The options of `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Json,
    Timeout,
    Watch,
    Interval,
}

/// `inspect`'s table: parsing, help, completions and the man page.
const OPTIONS: &[Opt<Key>] = &[
    Opt::flag(
        Key::Json,
        "json",
        "one JSON object on stdout (state: free, held, expired or unreadable; released: \
               true for a released record)",
    ),
    Opt::valued(
        Key::Timeout,
        "timeout",
        "DURATION",
        "give up after DURATION, opening the store and its credentials included (exit \
               69; default 30s); when watching, it bounds opening the store and the first read \
               together, then each read, and never ends the watch",
    ),
    Opt::flag(
        Key::Watch,
        "watch",
        "follow the lease: one JSON line per change (the --json fields, plus change and \
               seen_at) until SIGINT or SIGTERM (exit 0)",
    ),
    Opt::valued(
        Key::Interval,
        "interval",
        "DURATION",
        "with --watch: read the record this often, a conditional GET that costs a 304 \
               while it is unchanged (default 1s)",
    ),
];

/// How long `inspect` may take by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `inspect`'s documentation.
pub fn spec() -> Spec {
    Spec::new(
        "inspect",
        "show who holds the lease on URL's prefix.",
        "bucket-lease inspect [OPTIONS] URL",
        ABOUT,
        "",
        OPTIONS,
        true,
    )
}

/// Parse and run `inspect`.
///
/// # Errors
///
/// A usage, configuration or store failure.
pub fn main(mut p: Args) -> Result<u8, Failure> {
    let (mut url, mut json, mut limit) = (None, false, DEFAULT_TIMEOUT);
    let (mut watch, mut interval) = (false, None);
    while let Some(arg) = p.next(OPTIONS, true)? {
        match arg {
            Arg::Help => return Ok(crate::args::print_help(&spec())),
            Arg::Opt(Key::Json, _) => json = true,
            Arg::Opt(Key::Timeout, value) => {
                limit = parse_duration(p.command, "--timeout", &given(value))?;
            }
            Arg::Opt(Key::Watch, _) => watch = true,
            Arg::Opt(Key::Interval, value) => {
                let every = parse_duration(p.command, "--interval", &given(value))?;
                if every.is_zero() {
                    return Err(Failure::usage(
                        p.command,
                        "--interval: must be more than 0, such as 1s or 250ms",
                    ));
                }
                interval = Some(every);
            }
            Arg::Word(word) => set_url(p.command, &mut url, word)?,
        }
    }
    let url = require_url(p.command, url)?;
    if interval.is_some() && !watch {
        return Err(Failure::usage(
            p.command,
            "--interval is how often --watch reads the record: give --watch too",
        ));
    }
    p.init_logging();
    if watch {
        return watch_lease(&p, &url, limit, interval.unwrap_or(DEFAULT_INTERVAL));
    }
    let timeout = Timeout::start(p.command, limit);
    // Opening the store takes no deadline: this ends the process if it
    // (or anything else) outlasts the bound.
    let _watchdog = timeout.watchdog("reading the lease", WATCHDOG_SLACK);
    let (store, prefix) = open_store(&url, &p.shared.store)?;
    let seen = inspect_before(&*store, &prefix, &SystemClock, timeout.deadline()).map_err(|e| {
        if timeout.is_cause(&e) {
            return timeout.failure("reading the lease");
        }
        Failure::new(
            store_error_code(&e),
            format!("inspect: {}reading the lease: {e}", store_error_summary(&e)),
        )
    })?;
    let key = bucket_lease::record::lease_key(&prefix);
    if json {
        println!(
            "{}",
            crate::text::json_line(&to_json(&url, &key, seen.as_ref()))
        );
    } else {
        print_human(&url, &key, seen.as_ref());
    }
    Ok(exit::OK)
}

/// How often `--watch` reads the record unless told otherwise.
const DEFAULT_INTERVAL: Duration = bucket_lease::lease::DEFAULT_MAX_REREAD;

/// `inspect --watch`: see the [module docs](self).
fn watch_lease(p: &Args, url: &str, limit: Duration, interval: Duration) -> Result<u8, Failure> {
    // Before anything that may wait: from here SIGINT and SIGTERM cancel
    // the watch (exit 0) rather than kill the process.
    let cancel = Cancel::new();
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Failure::new(exit::STORE, format!("inspect: cannot handle signals: {e}")))?;
    let on_signal = cancel.clone();
    std::thread::Builder::new()
        .name("signals".to_string())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::debug!("signal {sig}: ending the watch");
                on_signal.cancel();
                end_at_once();
            }
        })
        .map_err(|e| Failure::new(exit::STORE, format!("inspect: cannot handle signals: {e}")))?;
    let timeout = Timeout::start(p.command, limit);
    let watchdog = timeout.watchdog("reading the lease", WATCHDOG_SLACK);
    let (store, prefix) = open_store(url, &p.shared.store)?;
    let store: Arc<dyn Store> = store;
    let key = bucket_lease::record::lease_key(&prefix);
    let mut watcher = Watcher::new(store, &prefix, Arc::new(SystemClock));
    let wait = |deadline| {
        let wait = match deadline {
            Some(deadline) => Wait::until(deadline),
            None => Wait::forever(),
        };
        wait.max_reread(interval)
            .attempt_timeout(limit)
            .cancel(cancel.clone())
    };
    // The first read within --timeout, as without --watch.
    let first = watcher.next_change(&wait(timeout.deadline()));
    drop(watchdog);
    let failed = |e: LeaseError| match e {
        LeaseError::Cancelled { .. } => Ok(exit::OK),
        LeaseError::Store(e) if timeout.is_cause(&e) => Err(timeout.failure("reading the lease")),
        LeaseError::Store(e) => Err(Failure::new(
            store_error_code(&e),
            format!("inspect: {}reading the lease: {e}", store_error_summary(&e)),
        )),
        e => Err(Failure::new(exit::STORE, format!("inspect: {e}"))),
    };
    let mut change = match first {
        Ok(Some(change)) => change,
        Ok(None) => return Err(timeout.failure("reading the lease")),
        Err(e) => return failed(e),
    };
    let forever = wait(None);
    loop {
        match print_change(url, &key, &change) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            Err(e) => {
                return Err(Failure::new(
                    exit::STORE,
                    format!(
                        "inspect: writing a change to stdout failed: {e}; check where stdout goes"
                    ),
                ))
            }
        }
        change = loop {
            match watcher.next_change(&forever) {
                Ok(Some(change)) => break change,
                // No deadline: only a cancel or a permanent error end it.
                Ok(None) => {}
                Err(e) => return failed(e),
            }
        };
    }
}

/// Held while a change is written, so that a signal never cuts a line.
static PRINTING: Mutex<()> = Mutex::new(());

/// How long a signal lets the line being written finish.
const LINE_BOUND: Duration = Duration::from_millis(200);

/// After SIGINT or SIGTERM: exit 0 now, whatever the main thread waits on
/// (a read that hangs, a credentials source), once the line being written,
/// if any, is whole (within [`LINE_BOUND`]; stdout that nobody reads does
/// not hold the exit), and a `credential_process` in flight killed.
fn end_at_once() {
    // A credentials source in flight would outlive the exit, holding
    // stdout and stderr open.
    crate::cli::kill_credential_helpers();
    let give_up = std::time::Instant::now() + LINE_BOUND;
    loop {
        match PRINTING.try_lock() {
            Ok(_guard) => std::process::exit(i32::from(exit::OK)),
            Err(std::sync::TryLockError::Poisoned(_)) => std::process::exit(i32::from(exit::OK)),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() >= give_up => {
                std::process::exit(i32::from(exit::OK))
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// One change as a JSON line on stdout, flushed.
fn print_change(url: &str, key: &str, change: &Change) -> std::io::Result<()> {
    let _printing = PRINTING.lock().unwrap_or_else(|e| e.into_inner());
    let mut line = to_json(url, key, change.inspection.as_ref());
    if let Value::Object(fields) = &mut line {
        fields.insert("change".to_string(), change.kind.name().into());
        fields.insert("seen_at".to_string(), format_stamp(change.seen_at).into());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", crate::text::json_line(&line))?;
    out.flush()
}

fn state(seen: Option<&Inspection>) -> &'static str {
    match seen {
        None => "free",
        Some(s) if s.record.is_none() => "unreadable",
        Some(s) if s.is_released() => "free",
        Some(s) if s.fresh => "held",
        Some(_) => "expired",
    }
}

fn millis(s: Option<f64>) -> Option<f64> {
    s.map(|s| (s * 1000.0).round() / 1000.0)
}

/// The `--json` object.
pub fn to_json(url: &str, key: &str, seen: Option<&Inspection>) -> Value {
    let released = seen.is_some_and(Inspection::is_released);
    let mut fields = vec![
        ("url", url.into()),
        ("key", key.into()),
        ("state", state(seen).into()),
        ("released", released.into()),
    ];
    let Some(s) = seen else {
        return object(fields);
    };
    let record = s.record.as_ref();
    fields.extend([
        ("holder", s.holder().into()),
        ("holder_name", s.holder_name().into()),
        ("payload", s.payload().into()),
        (
            "instance_nonce",
            record.and_then(|r| r.instance_nonce.as_deref()).into(),
        ),
        ("acquired_at", record.map(|r| r.acquired_at.as_str()).into()),
        ("renewed_at", record.map(|r| r.renewed_at.as_str()).into()),
        ("released_at", s.released_at().into()),
        ("ttl_s", record.map(|r| r.ttl_s).into()),
        ("epoch", record.map(|r| r.epoch).into()),
        // A released record's renewed_at is the epoch: no age to speak of.
        (
            "age_s",
            millis(s.age_s().filter(|_| !s.is_released())).into(),
        ),
        ("expires_in_s", millis(s.expires_in_s()).into()),
        ("fresh", s.fresh.into()),
        ("suspect", s.suspect.into()),
        ("broken", s.is_broken().into()),
        ("etag", s.version.etag.as_deref().into()),
        ("version_id", s.version.version_id.as_deref().into()),
        ("versioned", s.is_versioned().into()),
        ("read_at", format_stamp(s.read_at).into()),
    ]);
    object(fields)
}

fn print_human(url: &str, key: &str, seen: Option<&Inspection>) {
    let Some(s) = seen else {
        println!("lease {url} ({key}) is free: there is no lease record");
        return;
    };
    let Some(record) = &s.record else {
        println!(
            "lease {url} ({key}): the object is not a lease record; the next contender \
             overwrites it"
        );
        print_version(s);
        return;
    };
    let holder = printable(&record.instance_id);
    if let Some(released_at) = s.released_at() {
        println!(
            "lease {url} ({key}) is free (released by {holder} at {}), last epoch {}",
            printable(released_at),
            record.epoch
        );
        println!("  last holder  {holder}");
        print_name(record);
        print_payload(record);
        print_nonce(record);
        println!("  acquired_at  {}", printable(&record.acquired_at));
        println!("  released_at  {}", printable(released_at));
        println!(
            "  epoch        {} (the next holder takes {})",
            record.epoch,
            next_epoch(record.epoch)
        );
        print_version(s);
        return;
    }
    let verdict = match (s.fresh, s.is_broken()) {
        (_, true) => "broken (free for the next contender)",
        (true, _) => "held",
        (false, _) => "expired (free for the next contender)",
    };
    println!("lease {url} ({key}) is {verdict}");
    println!("  holder       {holder}");
    print_name(record);
    print_payload(record);
    print_nonce(record);
    println!("  acquired_at  {}", printable(&record.acquired_at));
    let age = match s.age_s() {
        Some(age) if age < 0.0 => {
            format!("{} in the future by this machine's clock", human_secs(-age))
        }
        Some(age) => format!("{} ago by this machine's clock", human_secs(age)),
        None => "does not parse: the record counts as expired".to_string(),
    };
    println!("  renewed_at   {} ({age})", printable(&record.renewed_at));
    println!("  ttl_s        {}", record.ttl_s);
    let freshness = match s.expires_in_s() {
        Some(left) if s.fresh => format!("fresh: expires in {}", human_secs(left)),
        Some(left) => format!("expired {} ago", human_secs(-left)),
        None if s.fresh => "fresh: expires too far ahead to say when".to_string(),
        None => "expired".to_string(),
    };
    println!("  state        {freshness}");
    println!(
        "  suspect      {}",
        if s.suspect {
            "yes: stamped more than its TTL ahead or with an absurd TTL; a contender takes it \
             over once it has sat unchanged for one of the contender's TTLs"
        } else {
            "no"
        }
    );
    println!("  epoch        {}", record.epoch);
    print_version(s);
}

/// The holder's name for people, when the record carries a valid one.
fn print_name(record: &LeaseRecord) {
    if let Some(name) = &record.holder_name {
        println!("  holder_name  {}", printable(name));
    }
}

/// The holder's payload, when the record carries a valid one (escaped all
/// the same: the terminal never gets what a record chose).
fn print_payload(record: &LeaseRecord) {
    if let Some(payload) = &record.payload {
        println!("  payload      {}", printable(payload));
    }
}

/// The nonce of the holder's process, when the record carries one (records
/// of the reference, of older versions and of a break carry none).
fn print_nonce(record: &LeaseRecord) {
    if let Some(nonce) = &record.instance_nonce {
        println!("  nonce        {}", printable(nonce));
    }
}

/// The epoch the next holder takes after `epoch`, in words.
fn next_epoch(epoch: u64) -> String {
    match epoch.checked_add(1) {
        Some(next) => next.to_string(),
        None => "none: the epoch is at its maximum".to_string(),
    }
}

fn print_version(s: &Inspection) {
    println!(
        "  etag         {}",
        printable(s.version.etag.as_deref().unwrap_or("(none)"))
    );
    if let Some(id) = &s.version.version_id {
        println!("  version_id   {}", printable(id));
    }
    if s.is_versioned() {
        // The holder's TTL, for a record a holder renews.
        let ttl_s = s
            .record
            .as_ref()
            .filter(|r| !r.is_released() && !s.is_broken() && !s.suspect)
            .map(|r| r.ttl_s);
        println!(
            "  versioned    yes: the bucket keeps every version of the record, {}",
            versioned::cost(ttl_s)
        );
        println!("  lifecycle    {}", printable(&versioned::remedy(&s.key)));
    }
}
