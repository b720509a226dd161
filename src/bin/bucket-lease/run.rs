//! `bucket-lease run [--ttl DURATION] [--wait DURATION] [--grace DURATION]
//! [-E N] [--best-effort] URL [--] COMMAND [ARG...]`: run COMMAND only
//! while this process holds the lease, like `flock` for a bucket prefix.
//! The options are `options::OPTIONS`, the table that also prints the help, the
//! completions and the man page.
//!
//! What it promises:
//!
//! - **COMMAND starts only while the lease may be written under.** Without
//!   `--wait` there is one attempt; a lease held by another instance exits
//!   75 naming the holder (or N, given `-E N` / `--conflict-exit-code N`,
//!   as `flock -E`). With `--wait S` the same [`Contender`] (one
//!   instance id, so a write of ours whose answer was lost is recognised as
//!   ours) then waits with [`Contender::acquire_with`]: it sleeps until the
//!   holder's record can expire by this machine's clock, re-reading it at
//!   least every quarter of the TTL (between 0.2 and 1 s, jittered) so a
//!   release is noticed at once, until S seconds have passed. COMMAND is
//!   started only if [`Lease::may_write`] is true at that instant; a lease
//!   fenced before that (an acquire slower than two thirds of the TTL) is
//!   released and run exits 76 without starting it.
//! - **The wait is bounded.** The first attempt's requests, the probe's
//!   included, are abandoned 10 s after the start; every later attempt's
//!   at `min(now + 10 s, start + S)`, so `run` gives up within
//!   `max(S, 10 s)`, plus at most 2 s to look for a record of ours that
//!   may have landed unseen. Refused credentials or permissions (exit 77)
//!   and a missing bucket (exit 78) end it at once, with what to fix.
//!   SIGINT or SIGTERM end the wait at once, even in the middle of a
//!   request (130 or 143): the wait is cancelled, and within 2 s a lease
//!   taken meanwhile is released, or a record of ours looked for.
//! - **The lease is kept while COMMAND runs** by the renewal thread
//!   ([`Keeper`]), every third of the TTL. Retried renewals are logged.
//! - **Every process of COMMAND is dead by the write deadline.** What is
//!   signalled is COMMAND's process group and every process it started,
//!   wherever it went (see "What is stopped" below). The write deadline is
//!   two thirds of the TTL after the last renewal that landed (sent). With
//!   `W = min(grace, TTL/6)`: once the deadline is less than `W` away (a
//!   renewal due at TTL/3 has not landed within TTL/6), they get SIGTERM,
//!   and SIGKILL [`KILL_MARGIN`](bucket_lease::supervision::KILL_MARGIN) before the deadline. Once the
//!   lease is fenced, SIGKILL at once. A lost lease (another instance holds
//!   it) gets SIGTERM at once and SIGKILL `W` later, never later than just
//!   before the last known deadline. The supervising loop reads the lease's
//!   state on every turn, whatever the renewal thread reports, and wakes
//!   for each of these instants. Once stopping has begun, a renewal that
//!   lands later does not undo it. Exit 76.
//! - **The exit status is COMMAND's**: its exit code, or 128+N when signal
//!   N killed it, whatever the processes it left did. 126/127 when it
//!   could not be started (the lease is released first).
//! - **SIGINT, SIGTERM and SIGHUP release the lease**: every process of
//!   the command is sent SIGTERM (a second signal sends SIGKILL at once)
//!   and SIGKILL after the grace period, or just before the write deadline
//!   if that comes first; then the lease is released. Without a terminal
//!   (see "In a terminal" below), SIGTSTP is ignored from `run`'s start,
//!   while the lease is taken and while the command runs: a suspended
//!   `run` could neither renew nor stop it. Exit
//!   COMMAND's own exit code if it exited by itself, else 128 + the signal
//!   received (130, 143, 129).
//! - **The lease is released when COMMAND exits and nothing it started is
//!   left**: processes it left running get SIGTERM, then SIGKILL after the
//!   grace period (or the deadline rule above, if that comes first). Then
//!   the lease is released whatever the status (unless it was lost: a
//!   record naming someone else is left alone), within
//!   `min(5 s, max(1 s, TTL/3))`. A failed release is logged; the
//!   record then expires after its TTL.
//! - COMMAND sees `BUCKET_LEASE_URL`, `BUCKET_LEASE_KEY`,
//!   `BUCKET_LEASE_INSTANCE_ID`, `BUCKET_LEASE_EPOCH`, `BUCKET_LEASE_TTL_S`,
//!   `BUCKET_LEASE_ACQUIRED_AT` and `BUCKET_LEASE_EXCLUSION`
//!   (`conditional` or `best-effort`) in its environment, and
//!   `BUCKET_LEASE_PAYLOAD` given `--payload`.
//! - `--metrics-file PATH` and `--status-file PATH` keep the lease's
//!   totals in PATH (the Prometheus text; one JSON object), replaced whole
//!   after every renewal and change of state, not held before the acquire
//!   and at exit; no thread that keeps the deadline waits on them
//!   ([`crate::status_files`]).
//! - `--holder-name NAME` writes NAME in the record's `holder_name`
//!   instead of `host:pid`, for people (`inspect`, "held by" messages);
//!   it never changes who holds the lease (the instance id and this
//!   process's nonce do). A name that is empty, over 128 bytes or holds a
//!   control or invisible character is a usage error (64).
//! - `--payload VALUE` writes VALUE in the record's `payload`, for
//!   followers (`inspect` shows it, and any reader of the record finds
//!   it); it is kept by every renewal and the release, and COMMAND sees
//!   it as `BUCKET_LEASE_PAYLOAD` (unset without `--payload`). A payload
//!   over 1024 bytes or with a control or invisible character (a line
//!   break included: give such data as base64) is a usage error (64)
//!   naming the limit or the character.
//! - `--best-effort`, or `BUCKET_LEASE_CONDITIONAL=off`, takes a
//!   best-effort lease on a service without conditional writes (logged as
//!   a warning). A service caught ignoring conditions exits 69.
//! - Durations are seconds (`1.5`) or take a unit (`90s`, `1m`, `0.5h`,
//!   `1d`). `--ttl` is a whole number of seconds from 1 to 3600 (a longer
//!   TTL makes every contender treat the record as suspect); `--wait` and
//!   `--grace` up to 10^9 s. Anything else is a usage error (64), never an
//!   overflow.
//!
//! - **COMMAND's processes die with `bucket-lease`.** On Linux, if `run`
//!   itself is killed with SIGKILL (it can then release nothing), its
//!   supervisor kills every process of COMMAND within milliseconds, long
//!   before the lease can be taken over; if the supervisor is killed,
//!   `run` kills what it leaves before releasing.
//!
//! What is stopped (Linux; see [`crate::child`] and [`crate::supervise`]):
//! COMMAND runs in a process group of its own under a supervisor that is
//! the child subreaper of everything COMMAND starts, and `run` is the
//! subreaper above it. Every descendant is found in `/proc`, including
//! one that left the group or the session (`setsid`, a double fork, a
//! daemon) or lives in a PID namespace it created; `run` exits only when
//! none is left, or names the processes it could not kill (one running as
//! another user, or stuck in the kernel). Elsewhere than on Linux, only
//! COMMAND's process group is signalled, and nothing when `run` is killed
//! with SIGKILL.
//!
//! In a terminal (Linux, [`crate::tty`]): when `run`'s standard input is
//! its controlling terminal and `run` is in its foreground (started at a
//! shell's prompt, not with `&`), COMMAND gets the terminal, as under
//! `flock`: its supervisor makes COMMAND's process group the foreground
//! group as soon as it starts (`tcsetpgrp`, as a shell does for a job),
//! so it can prompt, and Ctrl-C, Ctrl-\ and Ctrl-Z go to it and not to
//! `run`: `sleep` interrupted by Ctrl-C dies of SIGINT, and `run`
//! releases the lease and exits 130, COMMAND's status. (GNU `timeout
//! --foreground` is the precedent for letting a supervised command have
//! the terminal; it keeps the command in its own group and gives up
//! stopping the command's children. COMMAND keeps a group of its own
//! here, so that it can be signalled as a whole without `run`.) Once
//! every process of COMMAND is gone, on every path,
//! `run` gives the terminal back to its own group if the foreground group
//! is gone (not if the shell took it after `bg`). Ctrl-Z:
//!
//! 1. COMMAND's group stops (SIGTSTP from the terminal). Its supervisor
//!    sees it, stops every other process of COMMAND too (SIGSTOP: a
//!    daemon it started would otherwise go on with nobody renewing), and
//!    sends SIGTSTP to `run`.
//! 2. `run` stops its own job (SIGTSTP to its group, SIGSTOP to itself),
//!    so the shell prints its prompt, as for `flock`. Nothing of `run`
//!    runs, so the lease is not renewed and may expire meanwhile. SIGTSTP
//!    sent to `run` (`kill -TSTP %1`) does the same. When no shell with
//!    job control could continue the job (`run`'s group is orphaned: the
//!    first process above it outside the group is in another session, as
//!    under `setsid -c`), Ctrl-Z is ignored with a warning and the command
//!    continued, as the kernel ignores it for `flock` there.
//! 3. When `run` is continued, `fg` (with the terminal) or `bg` (without),
//!    it first checks [`Lease::may_write`]: if the write deadline passed
//!    while it was suspended, COMMAND is killed (SIGKILL) still stopped,
//!    never continued, and `run` exits 76. Else the supervisor continues
//!    every process; after `fg` COMMAND's group gets the terminal again,
//!    after `bg` it runs in the background, and reading the terminal stops
//!    the job again (as for any background job). A signal sent to `run`
//!    while it was suspended (`kill %1`, which also continues it) is acted
//!    on then, as if it came at that moment: the grace period counts from
//!    then, not from the suspension.
//!
//! A process continued by hand (`kill -CONT PID`) while `run` is
//! suspended runs with nobody renewing the lease, as when `run` itself is
//! frozen. `run` and the supervisor block SIGTTOU and SIGTTIN whatever
//! standard input is, and write their messages from a thread of their own
//! (see `log`), so that a message never stops them (`stty tostop` in the
//! background) nor holds them (a stalled pipe, a suspended terminal): they
//! signal first and say so after. In any other case (standard input a file or a pipe, `run` in
//! the background) nothing changes: COMMAND runs in the background of the
//! terminal, one that reads it is stopped (SIGTTIN) with a warning, and
//! SIGTSTP is ignored.
//!
//! What it cannot promise: a process COMMAND did not start itself escapes
//! (a service started through a service manager, such as `systemd-run`, or
//! asked of another daemon, such as a container runtime or `at`; a process
//! on another machine), and so do COMMAND's processes if `run` and its
//! supervisor are both killed with SIGKILL at once. A write sent before
//! its process died may still land after the deadline (the service
//! received it); a process paused between its check and its write sends
//! it when it wakes. A wait interrupted by a signal may leave a record of
//! ours that lands after the look for it: it expires after its TTL.

mod options;

use bucket_lease::KeptLease;
pub use options::spec;
use options::{parse, Options};

use crate::args::Args;
use crate::child::Job;
use crate::cli::{
    exit, human_secs, lease_error_code, lease_error_summary, open_store, signal_exit_code, Failure,
};
use crate::status_files::StatusFiles;
use crate::text::printable;
use bucket_lease::keeper::DEFAULT_RELEASE_TIMEOUT;
use bucket_lease::record::lease_key;
use bucket_lease::supervision::{Plan, Seen, Stop};
use bucket_lease::{
    lease::Cancel, lease::Exclusion, Contender, Event, Keeper, KeeperOptions, Lease, LeaseError,
    LeaseOptions, Released, Store, Wait,
};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGTSTP};
use signal_hook::iterator::Signals;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the supervising loop looks at the command and the signals, at
/// the least: it also wakes for each SIGTERM and SIGKILL instant.
const TICK: Duration = Duration::from_millis(50);

/// How long after SIGKILL `run` waits for the command's supervisor to exit
/// before killing it too (it goes on killing for at most
/// `supervise::KILL_BOUND`, 10 s).
const SUPERVISOR_TIMEOUT: Duration = Duration::from_secs(12);

/// The longest one acquire attempt (every request of it) may take, and the
/// least a `--wait` is given.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `run` lets its own lines reach stderr before it starts the
/// command, so that they come first; a stderr nobody reads delays the
/// command no longer than this.
const BEFORE_COMMAND_LOG_BOUND: Duration = Duration::from_millis(300);

/// How long the look for a record of ours left by a failed or interrupted
/// attempt may take.
const ABANDON_TIMEOUT: Duration = Duration::from_secs(2);

/// Parse and run `run`.
///
/// # Errors
///
/// A usage, configuration, held, lost or store failure; the command's
/// status is returned as `Ok`.
pub fn main(mut p: Args) -> Result<u8, Failure> {
    // SIGTTOU and SIGTTIN are blocked from `main` on (`tty`), before any
    // thread starts: no message stops run.
    let Some(o) = parse(&mut p)? else {
        return Ok(exit::OK);
    };
    p.init_logging();
    let (store, prefix) = open_store(&o.url, &p.shared.store)?;
    // Dropped after the keeper (declared before it): its last write comes
    // after the release.
    let files = StatusFiles::start(o.files.clone(), &o.url, &lease_key(&prefix))?;
    // SIGTSTP too, from the start: never the default stop, which would
    // leave a `run` that holds the lease renewing nothing (see `supervise`
    // and `acquire` for what Ctrl-Z does).
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGTSTP])
        .map_err(|e| Failure::new(exit::STORE, format!("run: cannot handle signals: {e}")))?;
    let mut options = LeaseOptions::new(o.ttl_s).best_effort_from_env();
    if o.best_effort {
        options = options.best_effort(true);
    }
    let lease = acquire(&store, &prefix, &options, &o, &mut signals)?;
    log::info!(
        "holding {} as {}{} (epoch {}, {}, ttl {} s)",
        lease.key(),
        lease.instance_id(),
        lease
            .holder_name()
            .map(|name| format!(" ({})", printable(name)))
            .unwrap_or_default(),
        lease.epoch(),
        Exclusion::name(lease.exclusion()),
        lease.ttl_s()
    );
    // Looked at now, not before the wait: a `run` suspended and put in the
    // background meanwhile does not take the terminal.
    let interactive = crate::tty::interactive();
    let mut start = crate::child::command(
        &o.command[0],
        &o.command[1..],
        o.grace,
        p.shared.verbose,
        p.shared.quiet,
        interactive,
    );
    start
        .command
        .env("BUCKET_LEASE_URL", &o.url)
        .env("BUCKET_LEASE_KEY", lease.key())
        .env("BUCKET_LEASE_INSTANCE_ID", lease.instance_id())
        .env("BUCKET_LEASE_EPOCH", lease.epoch().to_string())
        .env("BUCKET_LEASE_TTL_S", lease.ttl_s().to_string())
        .env("BUCKET_LEASE_ACQUIRED_AT", lease.acquired_at())
        .env("BUCKET_LEASE_EXCLUSION", Exclusion::name(lease.exclusion()));
    // Never one inherited from a `run` above this one.
    match lease.payload() {
        Some(payload) => start.command.env("BUCKET_LEASE_PAYLOAD", payload),
        None => start.command.env_remove("BUCKET_LEASE_PAYLOAD"),
    };
    let keeper_options = KeeperOptions::new()
        .thread_name("lease-keeper")
        .release_timeout(release_timeout(o.ttl_s));
    let keeper = Keeper::spawn(lease, keeper_options).map_err(|e| {
        Failure::new(
            exit::STORE,
            format!("run: cannot start the renewal thread: {e}"),
        )
    })?;
    if let Some(files) = &files {
        files.follow(keeper.lease());
    }
    // What run said so far ("holding …") comes before what the command
    // says, unless stderr is not being read: then the command starts
    // after at most this bound, its lines unsaid. (Before the last look
    // at the lease: the command starts only while it may be written.)
    crate::log::finish(BEFORE_COMMAND_LOG_BOUND);
    if !keeper.may_write() {
        release(keeper);
        return Err(Failure::new(
            exit::LOST,
            "run: the lease was fenced before the command could start (taking it took two \
             thirds of its TTL); the command was not started",
        ));
    }
    let job = match Job::spawn(start) {
        Ok(job) => job,
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
    let interactive = job.interactive();
    let supervised = supervise(job, &keeper, &mut signals, o.grace);
    if interactive {
        // Every process of the command is gone by now, whatever the path.
        crate::tty::take_back();
    }
    let (status, stop) = supervised?;
    let lost_meanwhile = stop.is_none() && lost_in(&keeper);
    release(keeper);
    let status_text = describe_status(status);
    match stop {
        Some(Stop::Lease(why)) => Err(Failure::new(
            exit::LOST,
            format!("run: {why}; the command was stopped ({status_text})"),
        )),
        Some(Stop::Signal(sig)) => {
            let code = status.code().map_or(signal_exit_code(sig), exit_byte);
            log::info!("stopped by {}: the command {status_text}", signal_name(sig));
            Ok(code)
        }
        None if lost_meanwhile => Err(Failure::new(
            exit::LOST,
            format!(
                "run: the lease was lost or fenced while the command ran; the command \
                 {status_text}"
            ),
        )),
        None => {
            log::info!("the command {status_text}");
            Ok(exit_code(status))
        }
    }
}

/// How long the release at the end may take: a third of the TTL, between
/// 1 s and the keeper's default. A release that fails leaves a record that
/// expires after its TTL anyway.
fn release_timeout(ttl_s: u64) -> Duration {
    (Duration::from_secs(ttl_s) / 3).clamp(Duration::from_secs(1), DEFAULT_RELEASE_TIMEOUT)
}

// ------------------------------------------------------------- acquiring

/// What the acquire thread hands back, once: a slot and a condition
/// variable (a channel would do, for more code in the command).
struct Answer<T> {
    slot: Mutex<Option<T>>,
    ready: Condvar,
}

impl<T> Default for Answer<T> {
    fn default() -> Self {
        Answer {
            slot: Mutex::new(None),
            ready: Condvar::new(),
        }
    }
}

impl<T> Answer<T> {
    fn give(&self, value: T) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
        self.ready.notify_all();
    }

    /// The answer, if it is given within `limit`.
    fn within(&self, limit: Duration) -> Option<T> {
        let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut slot, _) = self
            .ready
            .wait_timeout_while(slot, limit, |slot| slot.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        slot.take()
    }
}

/// Take the lease, waiting as `--wait` says. See the [module docs](self).
fn acquire(
    store: &Arc<dyn Store>,
    prefix: &str,
    options: &LeaseOptions,
    o: &Options,
    signals: &mut Signals,
) -> Result<Lease, Failure> {
    let start = Instant::now();
    // --wait is at most 10^9 s, so the sum fits; if it did not, there
    // would be no end to the wait.
    let wait = o.wait.map(|wait| match start.checked_add(wait) {
        Some(end) => Wait::until(end),
        None => Wait::forever(),
    });
    let poll = Duration::from_millis(o.ttl_s.saturating_mul(250))
        .clamp(Duration::from_millis(200), Duration::from_secs(1));
    let cancel = Cancel::new();
    let wait = wait.map(|w| {
        w.attempt_timeout(ACQUIRE_TIMEOUT)
            .max_reread(poll)
            .cancel(cancel.clone())
    });
    let mut contender = Contender::new(Arc::clone(store), prefix, options.clone());
    if let Some(name) = &o.holder_name {
        contender = contender
            .with_holder_name(name.clone())
            .map_err(|e| Failure::usage("run", e))?;
    }
    if let Some(payload) = &o.payload {
        contender = contender
            .with_payload(payload.clone())
            .map_err(|e| Failure::usage("run", e))?;
    }
    let id = contender.instance_id().to_string();
    let answer = Arc::new(Answer::default());
    let given = Arc::clone(&answer);
    let worker = std::thread::Builder::new()
        .name("acquire".to_string())
        .spawn(move || {
            let result = take(&mut contender, start, wait.as_ref());
            given.give((contender, result));
        })
        .map_err(|e| Failure::new(exit::STORE, format!("run: cannot start a thread: {e}")))?;
    let (contender, result) = loop {
        let mut pending = signals.pending().peekable();
        while pending.next_if_eq(&SIGTSTP).is_some() {
            wait_suspended();
        }
        if let Some(sig) = pending.next() {
            cancel.cancel();
            // The attempt in flight ends by its deadline; give it a moment,
            // then hand back whatever of ours it may have written.
            match answer.within(ABANDON_TIMEOUT) {
                Some((_, Ok(lease))) => {
                    let deadline = Instant::now().checked_add(ABANDON_TIMEOUT);
                    if let Err(e) = lease.release_before(deadline) {
                        log::warn!("could not release the lease taken as the signal came: {e}");
                    }
                }
                Some((contender, Err(_))) => abandon(&contender),
                // The attempt still has the contender, and is still in
                // flight: one built anew under its id has this process's
                // nonce too. run exits now, so nothing of this process
                // writes after it: the record the attempt may have
                // written is freed whatever claims it.
                None => {
                    let contender = Contender::new(Arc::clone(store), prefix, options.clone())
                        .with_instance_id(id.clone());
                    let deadline = Instant::now().checked_add(ABANDON_TIMEOUT);
                    if let Err(e) = contender.release_at_exit_before(deadline) {
                        log::warn!("could not check for an abandoned record of ours: {e}");
                    }
                }
            }
            return Err(interrupted(sig));
        }
        if let Some(done) = answer.within(TICK) {
            break done;
        }
        // Ended without an answer (looked at once more: it may have given
        // one just before it ended).
        if worker.is_finished() {
            match answer.within(Duration::ZERO) {
                Some(done) => break done,
                None => {
                    return Err(Failure::new(
                        exit::STORE,
                        "run: the attempt to take the lease panicked",
                    ))
                }
            }
        }
    };
    let error = match result {
        Ok(lease) => return Ok(lease),
        Err(error) => error,
    };
    // A bucket that does not exist holds no record of ours: nothing to
    // look for, and no second message saying so.
    let no_bucket = error
        .store_error()
        .is_some_and(|e| e.code() == Some("NoSuchBucket"));
    // A failed request, or a record left behind: look for ours once more.
    let left = matches!(error, LeaseError::RecordLeft { .. });
    if (left || matches!(error, LeaseError::Store(_))) && !no_bucket {
        abandon(&contender);
    }
    let code = match error {
        // Held (after --wait, if given): the code -E chose.
        LeaseError::Held { .. } => o.conflict_exit_code,
        _ => lease_error_code(&error),
    };
    Err(Failure::new(
        code,
        format!("run: {}{error}", lease_error_summary(&error)),
    ))
}

/// One attempt bounded by [`ACQUIRE_TIMEOUT`]; then, with `--wait`, the
/// library's wait ([`Contender::acquire_with`]) until its end.
fn take(
    contender: &mut Contender,
    start: Instant,
    wait: Option<&Wait>,
) -> Result<Lease, LeaseError> {
    let first = contender.try_acquire_before(start.checked_add(ACQUIRE_TIMEOUT));
    let (Some(wait), Err(error)) = (wait, &first) else {
        return first;
    };
    let left = match wait.deadline() {
        Some(end) => end.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    };
    if error.is_permanent() || left.is_zero() {
        return first;
    }
    match error {
        LeaseError::Held {
            holder,
            holder_name,
            key,
            ..
        } => log::info!(
            "{key} is held by {holder}{}; waiting up to {}",
            holder_name
                .as_deref()
                .map(|name| format!(" ({name})"))
                .unwrap_or_default(),
            human_secs(left.as_secs_f64())
        ),
        _ => log::warn!("taking the lease failed, retrying: {error}"),
    }
    contender.acquire_with(wait)
}

/// The failure for a wait ended by signal `sig`.
fn interrupted(sig: i32) -> Failure {
    Failure::new(
        signal_exit_code(sig),
        format!("run: {} while waiting for the lease", signal_name(sig)),
    )
}

/// Mark released a record of ours that may have landed during a failed or
/// interrupted attempt; bounded by [`ABANDON_TIMEOUT`].
fn abandon(contender: &Contender) {
    let deadline = Instant::now().checked_add(ABANDON_TIMEOUT);
    if let Err(e) = contender.release_abandoned_before(deadline) {
        log::warn!("could not check for an abandoned record of ours: {e}");
    }
}

// ------------------------------------------------------------ supervising

/// "the lease was lost to instance ID (NAME) (REASON)", with what is known.
fn lost_to(holder: Option<String>, holder_name: Option<String>, reason: Option<&str>) -> String {
    let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
    match holder {
        Some(h) => format!(
            "the lease was lost to instance {}{}{reason}",
            printable(&h),
            named(holder_name.as_deref())
        ),
        None => format!("the lease was lost{reason}"),
    }
}

/// ` (NAME)`, escaped, for a holder with a name; nothing for one without.
fn named(holder_name: Option<&str>) -> String {
    holder_name
        .map(|name| format!(" ({})", printable(name)))
        .unwrap_or_default()
}

/// Wait for the command, stopping it when a signal arrives or the lease is
/// about to be, or is, fenced or lost (see [`Plan`]). Returns its status
/// and why it was stopped, if it was.
fn supervise(
    mut job: Job,
    keeper: &Keeper,
    signals: &mut Signals,
    grace: Duration,
) -> Result<(ExitStatus, Option<Stop>), Failure> {
    let mut plan = Plan::new(grace, Duration::from_secs(keeper.lease().ttl_s()));
    let mut reported: Option<Seen> = None;
    let mut events_open = true;
    let mut killed_at: Option<Instant> = None;
    let mut supervisor_killed = false;
    // SIGTSTP (handled since run started): without a terminal a suspended
    // run could not renew the lease nor stop the command, which runs in a
    // process group of its own and would go on, so it is ignored; in a
    // terminal it suspends the whole job.
    loop {
        match job.try_wait() {
            Ok(Some(status)) => {
                job.sweep();
                return Ok((status, plan.stop().cloned()));
            }
            Ok(None) => {}
            Err(e) => {
                job.kill();
                job.kill_supervisor();
                job.sweep();
                return Err(Failure::new(
                    exit::STORE,
                    format!("run: cannot wait for the command: {e}"),
                ));
            }
        }
        let mut now = Instant::now();
        let mut terminate_now = false;
        if let Some(event) = reported.take() {
            terminate_now |= plan.observe(now, event);
        }
        terminate_now |= plan.observe(now, Seen::of(keeper.lease()));
        let mut pending: Vec<i32> = signals.pending().collect();
        if job.interactive() && plan.stop().is_none() && pending.contains(&SIGTSTP) {
            pending.retain(|&sig| sig != SIGTSTP);
            if !crate::tty::job_control() {
                log::warn!(
                    "Ctrl-Z ignored: run's job has no shell with job control above it to \
                     continue it (SIGINT or SIGTERM stop the command)"
                );
                job.resume();
            } else {
                let resumed = suspend(&job, keeper);
                // SIGTSTP is sent to run's own group too: those are not new.
                pending.extend(signals.pending().filter(|&sig| sig != SIGTSTP));
                // Everything from here on is dated from now, not from before
                // the suspension (however long): a signal taken now gets its
                // whole grace, and the lease is looked at again.
                now = Instant::now();
                if resumed {
                    terminate_now |= plan.observe(now, Seen::of(keeper.lease()));
                } else {
                    let why = "the write deadline passed while run was suspended (Ctrl-Z), so \
                               the command was not continued (continue a suspended run within \
                               two thirds of its TTL, or give it a longer --ttl)";
                    log::info!("the write deadline passed while suspended: SIGKILL to the command");
                    job.kill();
                    killed_at = Some(now);
                    plan.observe(now, Seen::Lost(why.to_string()));
                }
            }
        }
        for sig in pending {
            if sig == SIGTSTP {
                let why = if job.interactive() {
                    "the command is being stopped"
                } else {
                    "a suspended run can neither renew the lease nor stop the command (SIGINT or \
                     SIGTERM stop both)"
                };
                log::warn!("SIGTSTP ignored: {why}");
                continue;
            }
            log::info!(
                "{}: stopping the command (SIGTERM, SIGKILL after {} or just before the write \
                 deadline) and releasing the lease",
                signal_name(sig),
                human_secs(grace.as_secs_f64())
            );
            terminate_now |= plan.signal(now, sig);
        }
        if terminate_now {
            if let Some(Stop::Lease(why)) = plan.stop() {
                let kill = plan
                    .kill_at(now)
                    .map_or("no SIGKILL planned".to_string(), |at| {
                        format!(
                            "SIGKILL in {}",
                            human_secs(at.saturating_duration_since(now).as_secs_f64())
                        )
                    });
                job.terminate();
                log::error!("{why}: stopping the command (SIGTERM now, {kill})");
            } else {
                job.terminate();
            }
        }
        if killed_at.is_none() && plan.kill_due(now) {
            job.kill();
            killed_at = Some(now);
            log::warn!("the command did not stop in time: sent SIGKILL to all its processes");
        }
        if !supervisor_killed
            && killed_at.is_some_and(|at| now.saturating_duration_since(at) >= SUPERVISOR_TIMEOUT)
        {
            log::error!(
                "the command's supervisor has not exited {} s after SIGKILL: killing it",
                SUPERVISOR_TIMEOUT.as_secs()
            );
            job.kill_supervisor();
            supervisor_killed = true;
        }
        let wait = match plan.next_wake(now) {
            Some(at) if killed_at.is_none() => at.saturating_duration_since(now).min(TICK),
            _ => TICK,
        };
        if !events_open {
            std::thread::sleep(wait);
            continue;
        }
        match keeper.events().recv_timeout(wait) {
            Ok(Event::Lost {
                holder,
                holder_name,
                reason,
            }) => {
                reported = Some(Seen::Lost(lost_to(holder, holder_name, Some(&reason))));
            }
            Ok(Event::Fenced) => reported = Some(Seen::Fenced),
            Ok(Event::Renewed { latency }) => log::debug!("renewed in {latency:?}"),
            Ok(_) => {}
            Err(e) if e.is_timeout() => {}
            Err(_) => {
                events_open = false;
                reported = Some(Seen::Lost("the renewal thread ended".to_string()));
            }
        }
    }
}

/// Ctrl-Z (SIGTSTP) while the lease is being taken: in the terminal's
/// foreground, with a shell that can continue it, run's job stops as at
/// the shell (the attempt's thread too; `fg` goes on waiting, and the
/// lease's deadline is checked before the command starts); otherwise it is
/// ignored, as while the command runs.
fn wait_suspended() {
    use rustix::process::{getpid, kill_process, Signal};
    if !(crate::tty::interactive() && crate::tty::job_control()) {
        log::warn!(
            "SIGTSTP ignored: a suspended run could not renew the lease it is taking (SIGINT or \
             SIGTERM stop it)"
        );
        return;
    }
    log::info!("suspended while taking the lease; `fg` or `bg` go on");
    // Ctrl-Z reached the rest of run's job from the terminal itself; run,
    // which handles SIGTSTP, stops on its own (a SIGTSTP sent to the group
    // would come back to it, and stop it again once continued).
    if let Err(e) = kill_process(getpid(), Signal::STOP) {
        log::warn!("run could not stop itself ({e}): it goes on taking the lease");
    }
}

/// Ctrl-Z in a terminal, or SIGTSTP to run's job: the command's whole
/// tree is stopped by its supervisor, and run's own job stops, so that the
/// shell prints its prompt again (renewal stops meanwhile). When run is
/// continued (`fg`: with the terminal; `bg`: without), the tree is
/// continued only while the lease may still be written under; false when
/// it may not (the caller kills the command, still stopped).
fn suspend(job: &Job, keeper: &Keeper) -> bool {
    use rustix::process::{getpid, kill_process, kill_process_group, Signal};
    log::info!(
        "suspended: the command and run stop, and the lease is not renewed; `fg` or `bg` \
         continue the command only if the lease may still be written under"
    );
    job.freeze();
    // The others in run's job (a pipeline's other commands, a script
    // that started run) stop as the shell expects; run, which handles
    // SIGTSTP, stops itself.
    if let Some(own) = crate::ids::own_group() {
        let _ = kill_process_group(own, Signal::TSTP);
    }
    if let Err(e) = kill_process(getpid(), Signal::STOP) {
        log::warn!("run could not stop itself ({e}): the command goes on");
    }
    // Continued.
    if !keeper.may_write() {
        return false;
    }
    log::info!("continued: the lease is still held; the command goes on");
    job.resume();
    true
}

/// Whether the lease was lost or fenced by the time the command exited by
/// itself: reported by the keeper, or seen in the lease's state.
fn lost_in(keeper: &Keeper) -> bool {
    let pending_loss = keeper
        .events()
        .try_iter()
        .any(|e| matches!(e, Event::Lost { .. } | Event::Fenced));
    pending_loss || !keeper.may_write()
}

/// Stop renewing and release, saying what happened.
fn release(keeper: Keeper) {
    // What the release did, whatever ended the lease before (said already).
    match keeper.stop_with_release() {
        Ok(Released::Freed) => log::info!("released the lease"),
        Ok(Released::AlreadyFree) => log::info!("the lease was already free"),
        Ok(Released::LeftAlone {
            holder: Some(h),
            holder_name,
        }) => log::warn!(
            "not releasing: the lease is held by instance {}{} now",
            printable(&h),
            named(holder_name.as_deref())
        ),
        Ok(Released::LeftAlone { holder: None, .. }) => {
            log::warn!("not releasing: the lease record is not ours any more")
        }
        Ok(other) => log::info!("released: {other:?}"),
        Err(e) => log::warn!("releasing the lease failed (it expires after its TTL): {e}"),
    }
}

/// An exit status as the byte a shell sees (Unix statuses are 0 to 255).
fn exit_byte(code: i32) -> u8 {
    u8::try_from(code & 0xff).unwrap_or(u8::MAX)
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => exit_byte(code),
        (None, Some(sig)) => signal_exit_code(sig),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_bytes_never_overflow() {
        assert_eq!(exit_byte(7), 7);
        assert_eq!(exit_byte(255), 255);
        assert_eq!(exit_byte(256), 0);
        assert_eq!(exit_byte(-1), 255);
        assert_eq!(release_timeout(3), Duration::from_secs(1));
        assert_eq!(release_timeout(30), DEFAULT_RELEASE_TIMEOUT);
    }
}
