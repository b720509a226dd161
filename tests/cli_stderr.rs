//! `bucket-lease run` never waits on its own messages (issue 29): a
//! stderr nobody takes cannot keep the command alive past the write
//! deadline, nor a killed `run`'s command alive at all. The command
//! ignores SIGTERM and appends a time stamp to a file every 50 ms; each
//! test prints where its last write fell. In the first three, renewals
//! hang (the bucket's lock is held), so `run` has messages to give while
//! it must stop the command. stderr is:
//!
//! - a pipe whose reader stopped reading (as with `run … 2>&1 |
//!   stalled-log-shipper`), filled by the command itself;
//! - a terminal whose output is suspended (Ctrl-S), `run` in its
//!   foreground with `-v`;
//! - a terminal under `stty tostop`, `run` in its background, its
//!   standard input the terminal or `/dev/null`: `run` is not stopped;
//! - a terminal whose output is suspended (Ctrl-S), and `run` killed with
//!   SIGKILL: its supervisor kills the command within moments, and says
//!   so once the terminal takes output again within its exit bound.
//!
//! Before the fix the first three commands outlived the deadline (`run`
//! blocked in its write, or stopped by SIGTTOU before it sent a signal),
//! and the last one outlived `run` (its supervisor blocked in its write).

mod cli_common;
mod cli_pty;

use cli_common::{alive, kill_pid, wait_for_file, BucketLock, Target, LOST};
use cli_pty::{can_run, processes, Terminal, PROMPT, WAIT};
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The command, for `bash -c` (no single quote: it is typed inside
/// them): it ignores SIGTERM, records its pid in `$DIR/pid`, then appends
/// the wall-clock time to `$DIR/ticks` every 50 ms until it is killed.
const TICKING: &str = "trap \"\" TERM; echo $$ > \"$DIR/pid.tmp\" && mv \"$DIR/pid.tmp\" \
                       \"$DIR/pid\"; while :; do echo $EPOCHREALTIME >> \"$DIR/ticks\"; \
                       sleep 0.05; done";

/// The TTL every test's `run` takes, but the last: renewals every second.
const TTL: &str = "3";

/// Every renewal that can land was sent before the cut; its write
/// deadline is two thirds of the TTL after it was sent.
const DEADLINE_AFTER_CUT: Duration = Duration::from_secs(2);

/// What the test can see late: the kernel's bookkeeping and the polling.
const OBSERVATION: Duration = Duration::from_millis(600);

/// How soon after `run` is killed its supervisor must have killed the
/// command: it takes milliseconds; the rest is for a loaded machine.
const AFTER_RUN_IS_KILLED: Duration = Duration::from_millis(500);

/// An instant on both clocks: the test's, and the command's time stamps.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    wall: SystemTime,
}

impl Mark {
    fn now() -> Mark {
        Mark {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn plus(self, d: Duration) -> Mark {
        Mark {
            at: self.at + d,
            wall: self.wall + d,
        }
    }
}

/// What became of the command after a [`Mark`].
struct Watched {
    /// It died (was first seen dead) by the mark plus the margin.
    dead: bool,
    /// When it died and its last write, from the mark; if it did not die,
    /// what every process was doing then. For the test's messages.
    said: String,
}

/// Watch the command (`pid`) until it dies or `mark` plus `margin`
/// passes (then kill it); print what became of it under `row`.
fn watch(t: &Target, row: &str, pid: &str, mark: Mark, margin: Duration) -> Watched {
    watch_with(t, row, pid, mark, margin, || {})
}

/// [`watch`], calling `each` on every look.
fn watch_with(
    t: &Target,
    row: &str,
    pid: &str,
    mark: Mark,
    margin: Duration,
    mut each: impl FnMut(),
) -> Watched {
    let dead_at = loop {
        each();
        if !alive(pid) {
            break Some(Instant::now());
        }
        if Instant::now() >= mark.at + margin {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (dead, held) = match dead_at {
        Some(at) => {
            let from = at.saturating_duration_since(mark.at).as_secs_f64()
                - mark.at.saturating_duration_since(at).as_secs_f64();
            (format!("dead {from:+.3} s"), String::new())
        }
        None => {
            // Who holds whom, before the command is killed and things go on.
            let held = format!("\n{}", processes());
            kill_pid(pid);
            let alive = format!("alive at {:+.3} s (then killed)", margin.as_secs_f64());
            (alive, held)
        }
    };
    let last = match last_write(t) {
        Some(stamp) => {
            let mark = mark.wall.duration_since(UNIX_EPOCH).expect("after 1970");
            format!("{:+.3} s", stamp - mark.as_secs_f64())
        }
        None => "none".to_string(),
    };
    let said = format!("{row}: the command {dead}, its last write {last}, from the mark");
    println!("{said}");
    Watched {
        dead: dead_at.is_some(),
        said: said + &held,
    }
}

/// The command's last time stamp, in seconds since 1970.
fn last_write(t: &Target) -> Option<f64> {
    let ticks = std::fs::read_to_string(t.path("ticks")).ok()?;
    // A line cut short by the kill is not a time stamp.
    ticks
        .lines()
        .rev()
        .find_map(|line| line.trim().replace(',', ".").parse::<f64>().ok())
}

/// The parent of process `pid`, from `/proc/PID/stat`.
fn parent_of(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process is there");
    // After the name: state ppid.
    let (_, rest) = stat.rsplit_once(") ").expect("a stat line");
    rest.split_whitespace().nth(1).expect("a ppid").to_string()
}

/// The state letter of process `pid` (`T`: stopped), if it is there.
fn state_of(pid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[test]
fn a_stalled_stderr_pipe_never_keeps_the_command_past_the_deadline() {
    let t = Target::fs("stalled-pipe");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let url = t.url("stalled");
    // The command fills the pipe (64 KiB) from a child of its own, which
    // then blocks in its write.
    let script = format!("head -c 262144 /dev/zero >&2 & {TICKING}");
    let mut holder = t
        .command([
            "-v",
            "run",
            "--ttl",
            TTL,
            url.as_str(),
            "--",
            "bash",
            "-c",
            script.as_str(),
        ])
        .env("DIR", t.path(""))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    // Let the child fill the pipe: from here on, every write to it blocks.
    std::thread::sleep(Duration::from_millis(500));
    let lock = BucketLock::take(&dir);
    let deadline = Mark::now().plus(DEADLINE_AFTER_CUT);
    let seen = watch(&t, "a stalled pipe", &pid, deadline, OBSERVATION);
    // Now read the pipe, so that whatever is blocked on it goes on.
    let mut stderr = holder.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        String::from_utf8_lossy(&text).replace('\0', "")
    });
    let limit = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = holder.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > limit {
            let _ = holder.kill();
            break holder.wait().expect("run ends");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(lock);
    let said = reader.join().expect("the reader");
    assert!(
        seen.dead,
        "{}: the command outlived the write deadline with stderr stalled; run said: {said}",
        seen.said
    );
    assert_eq!(status.code(), Some(LOST), "run said: {said}");
    assert!(said.contains("SIGKILL"), "run said: {said}");
}

/// Ctrl-S at the terminal `run` is in the foreground of: every write to
/// it blocks (a write of the test's own is refused with `EAGAIN`), `run`
/// (with `-v`) and its supervisor included. `run` used to block in its
/// message before SIGTERM (its renewal thread waiting for stderr's lock),
/// and the command outlived the deadline until Ctrl-Q.
#[test]
fn a_suspended_terminal_never_keeps_the_command_past_the_deadline() {
    if !can_run() {
        return;
    }
    let t = Target::fs("stderr-ctrl-s");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(&format!(
        "\"$BL\" -v run --ttl {TTL} \"$URL\" -- bash -c '{TICKING}'; echo R\"C=$?\"\n"
    ));
    let pid = wait_for_file(&t.path("pid"), WAIT);
    std::thread::sleep(Duration::from_millis(300));
    term.suspend_output();
    let lock = BucketLock::take(&dir);
    let deadline = Mark::now().plus(DEADLINE_AFTER_CUT);
    let seen = watch(&t, "a suspended terminal", &pid, deadline, OBSERVATION);
    let suspended = !term.takes_output();
    // Ctrl-Q while run still waits for its messages to go out (it exits
    // a second or two after the command, whatever stderr does).
    term.type_keys("\x11");
    let code = term.exit_code_after();
    drop(lock);
    let shown = term.transcript();
    assert!(suspended, "the output was suspended throughout: {shown}");
    assert!(
        seen.dead,
        "{}: the command outlived the write deadline with the terminal suspended:\n{shown}",
        seen.said
    );
    assert_eq!(code, LOST, "{shown}");
    assert!(
        shown.contains("sent SIGKILL"),
        "run said so, after: {shown}"
    );
    println!("--- the terminal session ---\n{shown}");
}

/// `run` in the background of a terminal under `stty tostop` (a write to
/// the terminal from the background stops the writer with SIGTTOU), its
/// standard input the terminal, then `/dev/null`: its messages never stop
/// it. With `/dev/null`, `run` used to be stopped by its first message,
/// the one before SIGTERM, and sent no signal at all.
#[test]
fn messages_from_the_background_under_tostop_never_stop_run() {
    if !can_run() {
        return;
    }
    let t = Target::fs("stderr-tostop");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys("stty tostop\n");
    term.expect(PROMPT);
    for (n, (input, redirect)) in [("the terminal", ""), ("/dev/null", " < /dev/null")]
        .into_iter()
        .enumerate()
    {
        for file in ["pid", "ticks", "run"] {
            let _ = std::fs::remove_file(t.path(file));
        }
        // `wait` returns when the job ends, or stops.
        term.type_keys(&format!(
            "\"$BL\" run --ttl {TTL} \"$URL-{n}\" -- bash -c '{TICKING}'{redirect} & \
             echo $! > \"$DIR/run\"; wait $!; echo R\"C=$?\"\n"
        ));
        let run = wait_for_file(&t.path("run"), WAIT);
        let pid = wait_for_file(&t.path("pid"), WAIT);
        std::thread::sleep(Duration::from_millis(300));
        let lock = BucketLock::take(&dir);
        let deadline = Mark::now().plus(DEADLINE_AFTER_CUT);
        let mut stopped = false;
        let row = format!("stty tostop, run in the background, stdin {input}");
        let seen = watch_with(&t, &row, &pid, deadline, OBSERVATION, || {
            stopped |= state_of(&run) == Some('T');
        });
        let shown = term.transcript();
        assert!(
            !stopped,
            "{}: run was stopped (stdin {input}):\n{shown}",
            seen.said
        );
        assert!(
            seen.dead,
            "{}: the command outlived the write deadline (stdin {input}):\n{shown}",
            seen.said
        );
        let code = term.exit_code_after();
        drop(lock);
        assert_eq!(code, LOST, "stdin {input}: {}", term.transcript());
    }
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-S, then `run` killed with SIGKILL: its supervisor (told by the
/// kernel, SIGUSR2) kills the command at once, though its message says
/// so to a terminal that takes nothing. It used to block in that message
/// first, and the command lived on with nobody renewing the lease.
#[test]
fn a_killed_run_on_a_suspended_terminal_leaves_no_command() {
    if !can_run() {
        return;
    }
    let t = Target::fs("stderr-ctrl-s-killed");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    // The default TTL (30 s): the write deadline is far.
    term.type_keys(&format!(
        "\"$BL\" run \"$URL\" -- bash -c '{TICKING}'; echo R\"C=$?\"\n"
    ));
    let pid = wait_for_file(&t.path("pid"), WAIT);
    let run = parent_of(&parent_of(&pid));
    let run_args = std::fs::read(format!("/proc/{run}/cmdline")).unwrap_or_default();
    assert!(
        run_args.split(|&b| b == 0).any(|arg| arg == b"run"),
        "{run} is run: {}",
        String::from_utf8_lossy(&run_args)
    );
    std::thread::sleep(Duration::from_millis(300));
    term.suspend_output();
    kill_pid(&run);
    let killed = Mark::now();
    let seen = watch(
        &t,
        "a suspended terminal, run killed",
        &pid,
        killed,
        AFTER_RUN_IS_KILLED,
    );
    // Ctrl-Q well after the kill, well within the second the supervisor
    // gives its messages at exit: it says why it killed the command.
    std::thread::sleep(Duration::from_millis(300));
    term.type_keys("\x11");
    let code = term.exit_code_after();
    // The supervisor outlives run: its line may follow the prompt.
    let said = term.shows("bucket-lease run died", WAIT);
    let shown = term.transcript();
    assert!(
        seen.dead,
        "{}: the command outlived run by {AFTER_RUN_IS_KILLED:?}:\n{shown}",
        seen.said
    );
    assert_eq!(code, 128 + 9, "run was killed: {shown}");
    assert!(said, "the supervisor said so, after: {shown}");
    println!("--- the terminal session ---\n{shown}");
}

/// (Review of issue 40.) A COMMAND that does not exist exits 127, as the
/// module docs of `run` promise, also when stderr is a pipe nobody reads
/// any more (`run … 2>&1 | head -1` after `head` is done): the message
/// may be lost, the exit code may not. The supervisor prints "cannot run"
/// with `eprintln!`, which panics on EPIPE: 101 in a build that unwinds,
/// and SIGABRT (134: "killed by signal 6") in the release build, whose
/// `panic = "abort"` turns the panic into an abort.
#[test]
fn a_command_not_found_exits_127_with_stderr_a_closed_pipe() {
    let t = Target::fs("not-found-closed-stderr");
    let url = t.url("job");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let status = t
        .command([
            "run",
            url.as_str(),
            "--",
            "/nonexistent/bucket-lease-review-cmd",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .expect("run starts");
    assert_eq!(status.code(), Some(127), "{status:?}");
}
