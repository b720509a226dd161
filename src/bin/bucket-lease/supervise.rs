//! `bucket-lease __supervise RUN_PID GRACE_MS LOG TTY COMMAND [ARG...]`: the
//! process between `run` and COMMAND (Linux), which stops every process
//! COMMAND starts, and outlives `run` only to kill them.
//!
//! `run` starts it in a process group of its own; it
//!
//! 1. asks the kernel for SIGUSR2 when `run` dies (`PR_SET_PDEATHSIG`),
//!    and checks that its parent is still `RUN_PID` (it may have died
//!    before);
//! 2. becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process
//!    orphaned anywhere below it (a double fork, a daemon) is given to it,
//!    not to init, so every descendant stays in its tree;
//! 3. starts COMMAND in a new process group (led by COMMAND), and reaps
//!    every child it is given until none is left. With TTY `tty` (`run` is
//!    in the foreground of the terminal on its standard input), it makes
//!    COMMAND's group the terminal's foreground group at once, if `run`'s
//!    group still has it (`tcsetpgrp`, SIGTTOU blocked: see
//!    [`crate::tty`]). A COMMAND that used the terminal before that and
//!    was stopped for it (SIGTTIN, SIGTTOU) is continued.
//!
//! What it does, and when ([`Phase`]):
//!
//! | signal or event | what it does |
//! |---|---|
//! | SIGTERM, SIGINT, SIGHUP (from `run`) | SIGTERM to COMMAND's group and to every descendant (then SIGCONT to a stopped one), and every 250 ms to those forked since; SIGKILL after GRACE_MS, unless `run` asks for it earlier |
//! | COMMAND exited, descendants left | the same |
//! | SIGUSR1 (from `run`: SIGKILL is due) | SIGKILL to the group and every descendant, round after round, until none is left |
//! | SIGUSR2 (`run` died) | the same, at once |
//!
//! With TTY `tty`, while COMMAND runs:
//!
//! | signal or event | what it does |
//! |---|---|
//! | COMMAND stopped by a job-control signal (Ctrl-Z: SIGTSTP; SIGSTOP; SIGTTIN or SIGTTOU in the background) | SIGSTOP to its group and every descendant (the whole tree frozen), then SIGTSTP to `run`, which suspends its own job; while stopping (after SIGTERM), SIGCONT to its group instead, so that it can finish |
//! | SIGTSTP (from `run`: suspend; not once stopping) | the whole tree frozen, if it is not already |
//! | in a terminal, another member of COMMAND's group found stopped (looked for every 250 ms: COMMAND inside `vfork` is never reported stopped while the child the terminal stopped waits) | as COMMAND stopped |
//! | SIGCONT (from `run`: go on, `run` checked that the lease may still be written under; not once stopping) | COMMAND's group gets the terminal if `run`'s group has it (`fg`), else it goes on in the background (`bg`); SIGCONT to the group and every descendant |
//!
//! Without it (`-`), COMMAND runs in the background of any terminal: one
//! stopped for using it is left stopped, with a warning.
//!
//! It exits once it has no child left: with COMMAND's exit code, or killed
//! by the signal that killed COMMAND (raised again on itself, with core
//! dumps off), so `run` reads COMMAND's status from it unchanged; either
//! way once its messages went out, or after at most
//! [`EXIT_LOG_BOUND`](crate::log::EXIT_LOG_BOUND) when stderr takes nothing. A kill
//! that cannot finish (a process in uninterruptible sleep, or one it may
//! not signal) ends after [`KILL_BOUND`], naming the processes left.

use crate::child::{SUPERVISE, TTY};
use crate::cli::exit;
use crate::{procs, tty};
use rustix::io::Errno;
use rustix::process::{
    getpid, getppid, getrlimit, kill_process, kill_process_group, set_child_subreaper,
    set_parent_process_death_signal, setrlimit, wait, Pid, Resource, Rlimit, Signal, WaitOptions,
    WaitStatus,
};
use signal_hook::consts::{SIGCHLD, SIGCONT, SIGHUP, SIGINT, SIGTERM, SIGTSTP, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// The longest a kill goes on before the processes left are named and the
/// supervisor exits all the same.
pub const KILL_BOUND: Duration = Duration::from_secs(10);

/// How often, at most, the tree is scanned again while processes are being
/// stopped with SIGTERM (to reach those forked since).
const RESCAN: Duration = Duration::from_millis(250);

/// How long the supervisor waits to see `run` stop itself when one batch
/// of signals holds both its SIGTSTP (freeze) and its SIGCONT (resume):
/// `run` stops itself right after asking for a freeze.
const RUN_STOPS_WITHIN: Duration = Duration::from_millis(50);

/// Whether `run` (pid `run`) is stopped, or stops within
/// [`RUN_STOPS_WITHIN`].
fn run_stops_soon(run: i32) -> bool {
    let end = Instant::now() + RUN_STOPS_WITHIN;
    loop {
        if procs::is_stopped(run) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The signals of one batch in the order to act on them. Pending signals
/// come out by number, not in the order they were sent, so `run`'s
/// SIGCONT (resume, 18) came out before the SIGTSTP (freeze, 20) it sent
/// earlier, when both waited for a busy supervisor: the tree was continued,
/// then stopped again, and stayed stopped with `run` running (a flaky
/// `fg` in CI). `run` stops itself right after asking for a freeze and
/// resumes only once continued, so with both in one batch, `run` stopped
/// (or stopping: `run_stopped` waits a moment) means the freeze came last,
/// and running means the resume did; that one is acted on last.
fn job_control_order(mut batch: Vec<i32>, run_stopped: impl FnOnce() -> bool) -> Vec<i32> {
    if !(batch.contains(&SIGTSTP) && batch.contains(&SIGCONT)) {
        return batch;
    }
    let last = if run_stopped() { SIGTSTP } else { SIGCONT };
    batch.retain(|&sig| sig != last);
    batch.push(last);
    batch
}

/// How often a waiting phase looks at the clock and the signals.
const TICK: Duration = Duration::from_millis(20);

/// Where the supervisor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// COMMAND runs; nothing asked. Sleeps until a signal or a child's
    /// exit.
    Running,
    /// Stopping (told to, or COMMAND exited and left processes): every
    /// process got SIGTERM, those forked since get it at `rescan_at`, and
    /// SIGKILL goes at `kill_at` (`run` may ask for it earlier).
    Stopping {
        rescan_at: Instant,
        kill_at: Option<Instant>,
    },
    /// SIGKILL to everything until none is left, then exit.
    Killing,
}

/// Run the supervisor; returns the exit code (COMMAND's), or does not
/// return when COMMAND was killed by a signal (it is raised on itself).
pub fn main(args: &[OsString]) -> u8 {
    let [parent, grace_ms, log, terminal, program, rest @ ..] = args else {
        let _ = writeln!(
            std::io::stderr(),
            "bucket-lease: {SUPERVISE} is internal to `bucket-lease run`"
        );
        return exit::USAGE;
    };
    let (verbose, quiet) = match log.to_str() {
        Some("q") => (0, true),
        Some(n) => (n.parse().unwrap_or(0), false),
        None => (0, false),
    };
    crate::log::init(verbose, quiet);
    let grace = grace_ms
        .to_str()
        .and_then(|ms| ms.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    // The signals first: one from `run` that came before would be lost.
    let mut signals = match Signals::new([SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2]) {
        Ok(signals) => signals,
        Err(e) => return setup_failed("cannot handle signals", &e),
    };
    if let Err(e) = set_parent_process_death_signal(Some(Signal::USR2)) {
        return setup_failed("cannot tie the command to bucket-lease", &e);
    }
    let run =
        getppid().filter(|p| parent.to_str() == Some(p.as_raw_nonzero().to_string().as_str()));
    let Some(run) = run else {
        // `run` died before the death signal was set: nobody holds a lease.
        return exit::LOST;
    };
    let interactive = terminal == TTY;
    if interactive {
        for sig in [SIGTSTP, SIGCONT] {
            if let Err(e) = signals.add_signal(sig) {
                return setup_failed("cannot handle job-control signals", &e);
            }
        }
    }
    if let Err(e) = set_child_subreaper(Some(Pid::INIT)) {
        return setup_failed("cannot become the subreaper of the command", &e);
    }
    let mut command = Command::new(program);
    command.args(rest).process_group(0);
    let child = match tty::spawn_with_terminal_stops(&mut command) {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "bucket-lease: run: cannot run {program:?}: {e}"
            );
            return if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
        }
    };
    // Reaped with wait() (waitpid(-1)) below, with every orphan; never through
    // `child`, which would race it.
    let command = Pid::from_child(&child);
    drop(child);
    let terminal = interactive.then_some(Terminal { run, frozen: false });
    if let Some(terminal) = &terminal {
        terminal.give_to(command);
    }
    let status = Supervisor {
        command,
        grace,
        status: None,
        phase: Phase::Running,
        termed: procs::Sent::default(),
        terminal,
        next_stop_scan: Instant::now(),
    }
    .run(&mut signals);
    mirror(status)
}

fn setup_failed(what: &str, e: &dyn std::fmt::Display) -> u8 {
    let _ = writeln!(
        std::io::stderr(),
        "bucket-lease: run: {what}: {e}; the command was not started"
    );
    exit::CANNOT_EXECUTE
}

struct Supervisor {
    command: Pid,
    grace: Duration,
    /// COMMAND's status, once reaped.
    status: Option<WaitStatus>,
    phase: Phase,
    /// Who got SIGTERM already.
    termed: procs::Sent,
    /// With TTY `tty`: COMMAND has the terminal's foreground.
    terminal: Option<Terminal>,
    /// When the tree is next looked at for a process the terminal stopped.
    next_stop_scan: Instant,
}

/// COMMAND in the foreground of the terminal (TTY `tty`).
struct Terminal {
    /// `run`, told with SIGTSTP when COMMAND is stopped.
    run: Pid,
    /// Whether the tree was stopped (SIGSTOP) and not continued since.
    frozen: bool,
}

impl Terminal {
    /// Give COMMAND's group (led by `command`) the terminal, if `run`'s
    /// group has it: not after `bg`, nor once `run` is in the background.
    fn give_to(&self, command: Pid) {
        let runs_group = crate::ids::group_of(self.run);
        if runs_group.is_none() || tty::foreground() != runs_group {
            return;
        }
        if let Err(e) = tty::give(command) {
            log::warn!(
                "cannot give the command the terminal ({e}): it runs in the background, and is \
                 stopped if it reads the terminal (give it its input from a file or a pipe)"
            );
        }
    }
}

impl Supervisor {
    /// Supervise until no child is left; COMMAND's status.
    fn run(mut self, signals: &mut Signals) -> Option<WaitStatus> {
        loop {
            if !self.reap() {
                return self.status;
            }
            let now = Instant::now();
            // A signal taken here (a SIGCHLD that came after the reap above,
            // say) is not in the pipe any more: the loop must go round
            // again rather than sleep, or that child's exit is never seen.
            let mut took_signals = false;
            let batch: Vec<i32> = signals.pending().collect();
            for sig in self.in_order_sent(batch) {
                took_signals = true;
                self.on_signal(sig, now);
            }
            if self.phase == Phase::Running && self.status.is_some() {
                self.drain(now);
            }
            match self.phase {
                Phase::Running if took_signals => {}
                Phase::Running if self.watches_for_a_stop() => {
                    // COMMAND itself may not be told stopped by `wait`: see
                    // `look_for_a_stop`. Signals are taken every tick.
                    std::thread::sleep(TICK);
                    if now >= self.next_stop_scan {
                        self.next_stop_scan = now + RESCAN;
                        self.look_for_a_stop();
                    }
                }
                Phase::Running => {
                    // Nothing is timed: sleep until a signal (SIGCHLD too).
                    let batch: Vec<i32> = signals.wait().collect();
                    for sig in self.in_order_sent(batch) {
                        self.on_signal(sig, Instant::now());
                    }
                }
                Phase::Stopping { kill_at, .. } if kill_at.is_some_and(|at| now >= at) => {
                    log::warn!(
                        "processes of the command did not stop within the grace period: sending \
                         SIGKILL"
                    );
                    self.phase = Phase::Killing;
                }
                Phase::Stopping { rescan_at, kill_at } => {
                    if now >= rescan_at {
                        self.terminate(now, kill_at);
                    }
                    std::thread::sleep(TICK);
                }
                Phase::Killing => {
                    self.kill_all();
                    return self.status;
                }
            }
        }
    }

    /// Reap every child that has exited; false once no child is left.
    fn reap(&mut self) -> bool {
        loop {
            match wait(WaitOptions::NOHANG | WaitOptions::UNTRACED) {
                Ok(Some((pid, status))) if status.stopped() => {
                    if pid == self.command {
                        self.on_stopped(status);
                    }
                }
                Ok(Some((pid, status))) => {
                    if pid == self.command {
                        self.status = Some(status);
                    }
                }
                Ok(None) => return true,
                Err(Errno::INTR) => {}
                Err(Errno::CHILD) => return false,
                Err(e) => {
                    log::error!("run: cannot wait for the command: {e}");
                    self.phase = Phase::Killing;
                    return true;
                }
            }
        }
    }

    fn on_signal(&mut self, sig: i32, now: Instant) {
        match sig {
            // Once stopping, a second request changes nothing: `run` sends
            // SIGUSR1 when SIGKILL is due.
            SIGTERM | SIGINT | SIGHUP if self.phase == Phase::Running => {
                self.terminate(now, now.checked_add(self.grace));
            }
            SIGUSR1 => self.phase = Phase::Killing,
            SIGUSR2 if self.phase != Phase::Killing => {
                self.phase = Phase::Killing;
                log::error!("bucket-lease run died: killing every process of the command");
            }
            SIGTSTP if self.phase == Phase::Running => self.freeze(),
            SIGCONT if self.phase == Phase::Running => self.thaw(),
            _ => {}
        }
    }

    /// `batch` in the order `run` meant it: see [`job_control_order`].
    fn in_order_sent(&self, batch: Vec<i32>) -> Vec<i32> {
        match self.terminal.as_ref() {
            Some(t) => {
                let run = t.run.as_raw_nonzero().get();
                job_control_order(batch, || run_stops_soon(run))
            }
            None => batch,
        }
    }

    /// COMMAND was stopped (see the module docs for what follows).
    fn on_stopped(&mut self, status: WaitStatus) {
        let Some((run, frozen)) = self.terminal.as_ref().map(|t| (t.run, t.frozen)) else {
            warn_stopped(status);
            return;
        };
        if self.phase != Phase::Running {
            // Being stopped (Ctrl-Z during the grace period): let it go on
            // to its end.
            let _ = kill_process_group(self.command, Signal::CONT);
            return;
        }
        if frozen {
            // Asked for by run.
            return;
        }
        let for_the_terminal = matches!(status.stopping_signal(),
            Some(s) if s == Signal::TTIN.as_raw() || s == Signal::TTOU.as_raw());
        if for_the_terminal && tty::foreground() == Some(self.command) {
            // It used the terminal before it was given it: go on.
            let _ = kill_process_group(self.command, Signal::CONT);
            return;
        }
        self.suspend_with(run);
    }

    /// A process of COMMAND's group other than COMMAND was found stopped
    /// (see [`look_for_a_stop`](Self::look_for_a_stop)); as
    /// [`on_stopped`](Self::on_stopped), the signal unknown.
    fn on_stopped_member(&mut self) {
        let Some((run, frozen)) = self.terminal.as_ref().map(|t| (t.run, t.frozen)) else {
            return;
        };
        if self.phase != Phase::Running || frozen {
            return;
        }
        self.suspend_with(run);
    }

    /// Freeze the tree and tell `run`, which suspends its own job.
    fn suspend_with(&mut self, run: Pid) {
        self.freeze();
        if let Err(e) = kill_process(run, Signal::TSTP) {
            log::warn!(
                "cannot tell run that the command was stopped ({e}): the command stays stopped \
                 until this supervisor (pid {}) gets SIGCONT",
                getpid().as_raw_nonzero()
            );
        }
    }

    /// Whether the tree must be looked at for a stop `wait` cannot report:
    /// in a terminal, while it runs and is not frozen.
    fn watches_for_a_stop(&self) -> bool {
        self.terminal.as_ref().is_some_and(|t| !t.frozen)
    }

    /// Ctrl-Z stops every process of COMMAND's group, but `wait` tells only
    /// of COMMAND: one inside `vfork` (dash, for each command it runs)
    /// waits, unstoppable, for a child that the terminal stopped before it
    /// could exec, and is never reported stopped. Another member of
    /// COMMAND's group found stopped is taken as COMMAND stopped, every
    /// [`RESCAN`]. COMMAND itself found stopped is left to `wait`, which
    /// reports it (now, or as soon as all its threads are stopped) and
    /// names the signal, which `/proc` does not: the kernel's SIGTTIN for
    /// a read made before COMMAND had the terminal may land after the last
    /// `wait`, and taken for Ctrl-Z here it stopped run's job for nothing
    /// (issue 28); [`on_stopped`](Self::on_stopped) continues it.
    fn look_for_a_stop(&mut self) {
        let group = self.command.as_raw_nonzero().get();
        let stopped: Vec<i32> = procs::descendants(getpid())
            .into_iter()
            .filter(|p| p.pgid == group && p.state == 'T')
            .map(|p| p.pid)
            .collect();
        if !stopped.is_empty() && !stopped.contains(&group) {
            self.on_stopped_member();
        }
    }

    /// Stop (SIGSTOP) COMMAND's group and every descendant, unless they
    /// are stopped already; nothing runs until [`thaw`](Self::thaw).
    fn freeze(&mut self) {
        let Some(terminal) = &mut self.terminal else {
            return;
        };
        if terminal.frozen {
            return;
        }
        terminal.frozen = true;
        let round = procs::signal_all(
            getpid(),
            Signal::STOP,
            Some(self.command),
            &mut procs::Sent::default(),
        );
        for (p, e) in round.failed {
            log::warn!("cannot stop {p} with the rest of the command ({e}): it goes on");
        }
    }

    /// Continue what [`freeze`](Self::freeze) stopped, COMMAND's group in
    /// the terminal's foreground if `run`'s group has it.
    fn thaw(&mut self) {
        let Some(terminal) = &mut self.terminal else {
            return;
        };
        if !terminal.frozen {
            return;
        }
        terminal.frozen = false;
        terminal.give_to(self.command);
        let _ = kill_process_group(self.command, Signal::CONT);
        let round = procs::signal_all(
            getpid(),
            Signal::CONT,
            Some(self.command),
            &mut procs::Sent::default(),
        );
        for (p, e) in round.failed {
            log::warn!("cannot continue {p} ({e}): it stays stopped (send it SIGCONT)");
        }
    }

    /// COMMAND exited by itself: stop what it left, if anything.
    fn drain(&mut self, now: Instant) {
        let kill_at = now.checked_add(self.grace);
        if self.terminate(now, kill_at) > 0 {
            log::warn!(
                "the command exited and left processes running: sent them SIGTERM, SIGKILL in {} \
                 s",
                self.grace.as_secs_f64()
            );
        } else {
            self.phase = Phase::Running;
        }
    }

    /// SIGTERM to every process not sent one yet (at a rescan, only those
    /// forked since: a second SIGTERM is, to many programs, a request to
    /// stop at once), and stop: SIGKILL at `kill_at`. How many processes
    /// are left.
    fn terminate(&mut self, now: Instant, kill_at: Option<Instant>) -> usize {
        let round = procs::signal_all(getpid(), Signal::TERM, Some(self.command), &mut self.termed);
        for (p, e) in round.failed {
            log::warn!("cannot send SIGTERM to {p}: {e}");
        }
        self.phase = Phase::Stopping {
            rescan_at: now.checked_add(RESCAN).unwrap_or(now),
            kill_at,
        };
        round.found.len()
    }

    /// SIGKILL every descendant until none is left (reaping them), bounded.
    fn kill_all(&mut self) {
        let command = self.command;
        let mut status = self.status;
        let mut reap = || {
            while let Ok(Some((pid, st))) = wait(WaitOptions::NOHANG) {
                if pid == command {
                    status = Some(st);
                }
            }
        };
        if let Err(left) =
            procs::kill_all(getpid(), Some(command), KILL_BOUND, &mut reap, &|_| false)
        {
            log::error!(
                "could not kill every process of the command within {} s: {}",
                KILL_BOUND.as_secs(),
                left.join("; ")
            );
        }
        // What is still unreaped goes to `run` (a subreaper) when this exits.
        reap();
        self.status = status;
    }
}

/// Say why COMMAND stopped, if it stopped for the terminal.
fn warn_stopped(status: WaitStatus) {
    if matches!(status.stopping_signal(), Some(s) if s == Signal::TTIN.as_raw() || s == Signal::TTOU.as_raw())
    {
        log::warn!(
            "the command was stopped: it used the terminal, and it runs in a process group of \
             its own, in the background (give it its input from a file or a pipe)"
        );
    }
}

/// Exit as COMMAND did: its exit code, or its signal raised on this
/// process (no core dump), once the log lines went out (or the exit
/// bound passed: a stderr nobody takes holds it no longer), as `main`
/// waits for them after a return.
fn mirror(status: Option<WaitStatus>) -> u8 {
    let Some(status) = status else {
        log::error!("the command's status is unknown");
        return 1;
    };
    if let Some(code) = status.exit_status() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    let Some(sig) = status.terminating_signal() else {
        return 1;
    };
    let maximum = getrlimit(Resource::Core).maximum;
    let _ = setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum,
        },
    );
    // Raising the signal ends this process here: what it said goes out
    // first, within the bound (`main`'s own drain never comes).
    crate::log::finish(crate::log::EXIT_LOG_BOUND);
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // A signal that does not kill by default (or that could not be
    // raised): the status a shell would give.
    crate::cli::signal_exit_code(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both of `run`'s job-control signals in one batch: the one `run`
    /// sent last, by its state, is acted on last; any other batch as it
    /// came, and `run` is not looked at for it.
    #[test]
    fn a_freeze_and_a_resume_in_one_batch_keep_the_order_sent() {
        // Resumed after a freeze (`fg`): run is running.
        assert_eq!(
            job_control_order(vec![SIGCONT, SIGTSTP], || false),
            [SIGTSTP, SIGCONT]
        );
        // Frozen after a resume: run has stopped itself.
        assert_eq!(
            job_control_order(vec![SIGCONT, SIGTSTP, SIGCHLD], || true),
            [SIGCONT, SIGCHLD, SIGTSTP]
        );
        let untouched = |batch: Vec<i32>| {
            job_control_order(batch.clone(), || panic!("run looked at for {batch:?}"))
        };
        assert_eq!(untouched(vec![SIGCONT, SIGCHLD]), [SIGCONT, SIGCHLD]);
        assert_eq!(untouched(vec![SIGTSTP]), [SIGTSTP]);
        assert_eq!(untouched(Vec::new()), Vec::<i32>::new());
    }
}
