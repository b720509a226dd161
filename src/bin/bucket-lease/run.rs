//! `bucket-lease run URL [--ttl S] [--wait S] [--grace S] [--best-effort]
//! -- COMMAND [ARG...]`: run COMMAND only while this process holds the
//! lease, like `flock` for a bucket prefix.
//!
//! What it promises:
//!
//! - **COMMAND starts only once the lease is held.** Without `--wait` there
//!   is one attempt; a lease held by another instance exits 75 naming the
//!   holder. With `--wait S` the same [`Contender`] (one instance id) tries
//!   again every quarter of the TTL (between 0.2 and 1 s, jittered) until S
//!   seconds have passed, so a write of ours whose answer was lost is
//!   recognised as ours. SIGINT or SIGTERM while waiting gives up (130 or
//!   143), removing any record of ours that landed unseen.
//! - **The lease is kept while COMMAND runs** by the renewal thread
//!   ([`Keeper`]), every third of the TTL. Retried renewals are logged.
//! - **A lost or fenced lease stops COMMAND**: SIGTERM at once, SIGKILL
//!   after the grace period, which is then cut to a third of the TTL (the
//!   margin between our fence and anyone else's takeover). Exit 76.
//! - **The exit status is COMMAND's**: its exit code, or 128+N when signal
//!   N killed it. 126/127 when it could not be started (the lease is
//!   released first).
//! - **SIGINT, SIGTERM and SIGHUP release the lease**: the command is sent
//!   SIGTERM (a second signal sends SIGKILL at once), is given the grace
//!   period, then SIGKILL; then the lease is released. Exit COMMAND's own
//!   exit code if it exited by itself, else 128 + the signal received
//!   (130, 143, 129).
//! - **The lease is released when COMMAND exits**, whatever its status
//!   (unless it was lost: a record naming someone else is left alone). A
//!   failed release is logged; the record then expires after its TTL.
//! - COMMAND sees `BUCKET_LEASE_URL`, `BUCKET_LEASE_KEY`,
//!   `BUCKET_LEASE_INSTANCE_ID`, `BUCKET_LEASE_EPOCH`, `BUCKET_LEASE_TTL_S`,
//!   `BUCKET_LEASE_ACQUIRED_AT` and `BUCKET_LEASE_EXCLUSION`
//!   (`conditional` or `best-effort`) in its environment.
//! - `--best-effort`, or `BUCKET_LEASE_CONDITIONAL=off`, takes a
//!   best-effort lease on a service without conditional writes (logged as
//!   a warning). A service caught ignoring conditions exits 69.
//!
//! - **COMMAND dies with `bucket-lease`.** On Linux, if `bucket-lease`
//!   itself is killed with SIGKILL (it can then release nothing), the kernel
//!   kills COMMAND too, long before the lease can be taken over (see
//!   [`crate::child`]).
//!
//! What it cannot promise: only COMMAND itself is signalled (a shell
//! script should `exec` its last command; its own children are not
//! killed with it).

use crate::{
    exit, human_secs, open_store, parse_seconds, parse_whole_seconds, Failure, Parser, Token,
};
use bucket_lease::lease::{jittered, DEFAULT_TTL_S};
use bucket_lease::{
    Contender, Event, Exclusion, Keeper, KeeperOptions, Lease, LeaseError, LeaseOptions, Released,
};
use rustix::process::{kill_process, Pid, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// `bucket-lease run --help`.
pub const HELP: &str = "\
bucket-lease run: run COMMAND while holding the lease on URL's prefix.

Usage: bucket-lease run [OPTIONS] URL [--] COMMAND [ARG...]

Takes the lease ({prefix}/LEASE), runs COMMAND while a thread renews the
lease every third of the TTL, and releases it when COMMAND exits. If the
lease is lost or fenced (renewals failing for two thirds of the TTL),
COMMAND gets SIGTERM, then SIGKILL after the grace period (at most a third
of the TTL), and run exits 76. SIGINT, SIGTERM and SIGHUP are passed on to
COMMAND as SIGTERM; the lease is released once it has exited. Only COMMAND
itself is signalled: end a shell script with `exec`. On Linux, if
bucket-lease itself is killed with SIGKILL, the kernel kills COMMAND too.

COMMAND's environment gains BUCKET_LEASE_URL, BUCKET_LEASE_KEY,
BUCKET_LEASE_INSTANCE_ID, BUCKET_LEASE_EPOCH, BUCKET_LEASE_TTL_S,
BUCKET_LEASE_ACQUIRED_AT and BUCKET_LEASE_EXCLUSION.

Options:
  --ttl S         the lease's TTL in whole seconds (default 30)
  --wait S        wait up to S seconds for a held lease (default: fail at once, exit 75)
  --grace S       how long COMMAND may take to stop after SIGTERM (default 10)
  --best-effort   read-then-write instead of conditional writes, for services without
                  them (also BUCKET_LEASE_CONDITIONAL=off); logged as a warning
  -v, -q          more or less on stderr
  -h, --help      this help
";

/// How often the supervising loop looks at the command and the signals.
const TICK: Duration = Duration::from_millis(50);

/// The default grace period after SIGTERM.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

struct Options {
    url: String,
    ttl_s: u64,
    wait: Option<Duration>,
    grace: Duration,
    best_effort: bool,
    command: Vec<OsString>,
}

fn parse(p: &mut Parser) -> Result<Option<Options>, Failure> {
    let cmd = p.command;
    let mut url: Option<String> = None;
    let (mut ttl_s, mut wait, mut grace, mut best_effort) =
        (DEFAULT_TTL_S, None, DEFAULT_GRACE, false);
    let mut command = Vec::new();
    while let Some(tok) = p.option()? {
        match tok {
            Token::Help => {
                crate::print_help(HELP);
                return Ok(None);
            }
            Token::Long(ref name, _) if name == "ttl" => {
                ttl_s = parse_whole_seconds(cmd, "--ttl", &p.value(&tok)?)?;
            }
            Token::Long(ref name, _) if name == "wait" => {
                wait = Some(parse_seconds(cmd, "--wait", &p.value(&tok)?)?);
            }
            Token::Long(ref name, _) if name == "grace" => {
                grace = parse_seconds(cmd, "--grace", &p.value(&tok)?)?;
            }
            Token::Long(ref name, _) if name == "best-effort" => {
                p.flag(&tok)?;
                best_effort = true;
            }
            Token::Word(word) if url.is_none() => match word.into_string() {
                Ok(s) => url = Some(s),
                Err(word) => {
                    return Err(Failure::usage(
                        cmd,
                        format!("URL {word:?} is not valid UTF-8"),
                    ))
                }
            },
            Token::Word(word) => {
                command.push(word);
                command.extend(p.rest());
            }
            Token::Dashes if url.is_some() => command.extend(p.rest()),
            Token::Dashes => {
                return Err(Failure::usage(cmd, "missing URL before `--`"));
            }
            other => return Err(p.unexpected(&other)),
        }
    }
    let Some(url) = url else {
        return Err(Failure::usage(
            cmd,
            "missing URL (such as s3://bucket/prefix)",
        ));
    };
    if command.is_empty() {
        return Err(Failure::usage(
            cmd,
            "missing COMMAND to run (after the URL and `--`)",
        ));
    }
    Ok(Some(Options {
        url,
        ttl_s,
        wait,
        grace,
        best_effort,
        command,
    }))
}

/// Parse and run `run`.
///
/// # Errors
///
/// A usage, configuration, held, lost or store failure; the command's
/// status is returned as `Ok`.
pub fn main(mut p: Parser) -> Result<u8, Failure> {
    let Some(o) = parse(&mut p)? else {
        return Ok(exit::OK);
    };
    p.init_logging();
    let (store, prefix) = open_store(&o.url)?;
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Failure::new(exit::STORE, format!("run: cannot handle signals: {e}")))?;
    let mut options = LeaseOptions::from_env(o.ttl_s);
    if o.best_effort {
        options = options.best_effort(true);
    }
    let mut contender = Contender::new(store, &prefix, options);
    let lease = acquire(&mut contender, &o, &mut signals)?;
    log::info!(
        "holding {} as {} (epoch {}, {}, ttl {} s)",
        lease.key(),
        lease.instance_id(),
        lease.epoch(),
        exclusion_name(lease.exclusion()),
        lease.ttl_s()
    );
    let mut command = crate::child::command(&o.command[0], &o.command[1..]);
    command
        .env("BUCKET_LEASE_URL", &o.url)
        .env("BUCKET_LEASE_KEY", lease.key())
        .env("BUCKET_LEASE_INSTANCE_ID", lease.instance_id())
        .env("BUCKET_LEASE_EPOCH", lease.epoch().to_string())
        .env("BUCKET_LEASE_TTL_S", lease.ttl_s().to_string())
        .env("BUCKET_LEASE_ACQUIRED_AT", lease.acquired_at())
        .env("BUCKET_LEASE_EXCLUSION", exclusion_name(lease.exclusion()));
    let keeper =
        Keeper::spawn(lease, KeeperOptions::new().thread_name("lease-keeper")).map_err(|e| {
            Failure::new(
                exit::STORE,
                format!("run: cannot start the renewal thread: {e}"),
            )
        })?;
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            release(keeper);
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            return Err(Failure::new(
                code,
                format!("run: cannot run {:?}: {e}", o.command[0]),
            ));
        }
    };
    let (status, stop) = supervise(child, &keeper, &mut signals, o.grace)?;
    let lost_meanwhile = stop.is_none() && lost_in(&keeper);
    release(keeper);
    let status_text = describe_status(status);
    match stop {
        Some(Stop::Lost(why)) => Err(Failure::new(
            exit::LOST,
            format!("run: {why}; the command was stopped ({status_text})"),
        )),
        Some(Stop::Signal(sig)) => {
            let code = status.code().map_or(128 + sig as u8, |c| c as u8);
            log::info!("stopped by {}: the command {status_text}", signal_name(sig));
            Ok(code)
        }
        None if lost_meanwhile => Err(Failure::new(
            exit::LOST,
            format!("run: the lease was lost while the command ran; the command {status_text}"),
        )),
        None => {
            log::info!("the command {status_text}");
            Ok(exit_code(status))
        }
    }
}

/// Take the lease, waiting as `--wait` says.
fn acquire(
    contender: &mut Contender,
    o: &Options,
    signals: &mut Signals,
) -> Result<Lease, Failure> {
    let deadline = o.wait.map(|w| Instant::now() + w);
    let poll = Duration::from_millis(o.ttl_s.saturating_mul(250))
        .clamp(Duration::from_millis(200), Duration::from_secs(1));
    let mut announced = false;
    loop {
        let error = match contender.try_acquire() {
            Ok(lease) => return Ok(lease),
            Err(e) => e,
        };
        let code = match &error {
            LeaseError::Held { .. } => exit::HELD,
            LeaseError::Store(_) => exit::STORE,
            _ => return Err(Failure::new(exit::STORE, format!("run: {error}"))),
        };
        let now = Instant::now();
        let Some(deadline) = deadline.filter(|d| now < *d) else {
            if code == exit::STORE {
                abandon(contender);
            }
            return Err(Failure::new(code, format!("run: {error}")));
        };
        match &error {
            LeaseError::Held { holder, key } if !announced => {
                log::info!(
                    "{key} is held by {holder}; waiting up to {}",
                    human_secs((deadline - now).as_secs_f64())
                );
                announced = true;
            }
            LeaseError::Store(_) => log::warn!("taking the lease failed, retrying: {error}"),
            _ => {}
        }
        let until = (now + jittered(poll)).min(deadline);
        while Instant::now() < until {
            if let Some(sig) = signals.pending().next() {
                abandon(contender);
                return Err(Failure::new(
                    128 + sig as u8,
                    format!("run: {} while waiting for the lease", signal_name(sig)),
                ));
            }
            std::thread::sleep(TICK.min(until.saturating_duration_since(Instant::now())));
        }
    }
}

/// Remove a record of ours that may have landed during a failed attempt.
fn abandon(contender: &Contender) {
    if let Err(e) = contender.release_abandoned() {
        log::warn!("could not check for an abandoned record of ours: {e}");
    }
}

/// Why the command was told to stop.
enum Stop {
    /// A signal to this process.
    Signal(i32),
    /// The lease was lost or fenced, as said.
    Lost(String),
}

/// Wait for the command, stopping it when a signal arrives or the lease is
/// lost or fenced. Returns its status and why it was stopped, if it was.
fn supervise(
    mut child: Child,
    keeper: &Keeper,
    signals: &mut Signals,
    grace: Duration,
) -> Result<(ExitStatus, Option<Stop>), Failure> {
    let loss_grace = grace.min(Duration::from_millis(keeper.lease().ttl_s() * 1000 / 3));
    let mut stop: Option<Stop> = None;
    // When to send SIGKILL, once SIGTERM has been sent.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok((status, stop)),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::new(
                    exit::STORE,
                    format!("run: cannot wait for the command: {e}"),
                ));
            }
        }
        let mut begin = |why: Stop, grace: Duration, child: &Child| {
            if stop.is_none() {
                terminate(child);
                stop = Some(why);
                kill_at = Some(Instant::now() + grace);
            } else {
                // A second reason (a second Ctrl-C): no more waiting.
                kill_at = Some(Instant::now());
            }
        };
        match keeper.events().recv_timeout(TICK) {
            Ok(Event::Lost { holder, reason }) => {
                let why = match holder {
                    Some(h) => format!("the lease was lost to instance {h} ({reason})"),
                    None => format!("the lease was lost ({reason})"),
                };
                log::error!("{why}: stopping the command");
                begin(Stop::Lost(why), loss_grace, &child);
            }
            Ok(Event::Fenced) => {
                let why = "the lease was fenced: no renewal landed in time".to_string();
                log::error!("{why}: stopping the command");
                begin(Stop::Lost(why), loss_grace, &child);
            }
            Ok(Event::Renewed { latency }) => log::debug!("renewed in {latency:?}"),
            Ok(_) => {}
            Err(e) if e.is_timeout() => {}
            Err(_) => {
                let why = "the renewal thread ended".to_string();
                log::error!("{why}: stopping the command");
                begin(Stop::Lost(why), loss_grace, &child);
            }
        }
        let received: Vec<i32> = signals.pending().collect();
        for sig in received {
            log::info!(
                "{}: stopping the command (SIGTERM, SIGKILL after {}) and releasing the lease",
                signal_name(sig),
                human_secs(grace.as_secs_f64())
            );
            begin(Stop::Signal(sig), grace, &child);
        }
        if !killed && kill_at.is_some_and(|at| Instant::now() >= at) {
            log::warn!("the command did not stop in time: sending SIGKILL");
            let _ = child.kill();
            killed = true;
        }
    }
}

/// Send SIGTERM to the command (not yet reaped, so its pid is still its).
fn terminate(child: &Child) {
    if let Err(e) = kill_process(Pid::from_child(child), Signal::TERM) {
        log::warn!("could not send SIGTERM to the command: {e}");
    }
}

/// Whether the keeper reported the lease lost or fenced after the command
/// had already exited.
fn lost_in(keeper: &Keeper) -> bool {
    let pending_loss = keeper
        .events()
        .try_iter()
        .any(|e| matches!(e, Event::Lost { .. } | Event::Fenced));
    pending_loss || keeper.lease().is_lost()
}

/// Stop renewing and release, saying what happened.
fn release(keeper: Keeper) {
    match keeper.stop() {
        Ok(Released::Deleted) => log::info!("released the lease"),
        Ok(Released::AlreadyGone) => log::info!("the lease record was already gone"),
        Ok(Released::LeftAlone { holder: Some(h) }) => {
            log::warn!("not releasing: the lease is held by instance {h} now")
        }
        Ok(Released::LeftAlone { holder: None }) => {
            log::warn!("not releasing: the lease record is not ours any more")
        }
        Err(e) => log::warn!("releasing the lease failed (it expires after its TTL): {e}"),
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => 1,
    }
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
        (None, None) => format!("ended: {status}"),
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        9 => "SIGKILL".into(),
        other => format!("signal {other}"),
    }
}

fn exclusion_name(exclusion: Exclusion) -> &'static str {
    match exclusion {
        Exclusion::Conditional => "conditional",
        Exclusion::BestEffort => "best-effort",
    }
}
