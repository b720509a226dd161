//! The command's log lines go through a bounded queue to a writer thread
//! (issue 29); with a stderr that works, none is lost at exit and they keep
//! their order against the command's own output. Found by review: both
//! failed before their fix.

mod cli_common;

use cli_common::{alive, kill_pid, wait_for_file, Target};
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `run -v` says which lease it holds before it starts the command (the
/// line is logged before the command is spawned). With a stderr that works
/// (a pipe read at once), that line must come before anything the command
/// writes to the same stderr. The line goes through the log's queue,
/// which `run` drains (for a bounded time) before it starts the command;
/// without that, the command's first line overtook it in 8 of 300 runs.
#[test]
fn run_says_holding_before_the_command_speaks() {
    let t = Target::fs("log-holding");
    let url = t.url("holding");
    let mut overtaken = Vec::new();
    let runs = 100;
    for i in 0..runs {
        let done = t.run([
            "-v",
            "run",
            url.as_str(),
            "--",
            "sh",
            "-c",
            "echo child-out >&2",
        ]);
        assert_eq!(done.code, Some(0), "{done:?}");
        let first = done.stderr.lines().next().unwrap_or("");
        if !first.contains("holding") {
            overtaken.push((i, done.stderr.clone()));
        }
    }
    assert!(
        overtaken.is_empty(),
        "in {} of {runs} runs the command's output came before `run`'s own \"holding\" line, \
         logged before the command started; first: {:?}",
        overtaken.len(),
        overtaken.first()
    );
}

/// What the supervisor (`bucket-lease run`'s child that runs COMMAND) says
/// when `run` is SIGKILLed: "bucket-lease run died: killing every process
/// of the command". It kills COMMAND, and then, COMMAND having died of
/// SIGKILL, raises SIGKILL on itself (`mirror`): it never returns to
/// `main`, where `log::finish` would drain its queue. Here stderr is a
/// pipe its reader reads 300 ms late (well within the 1 s `finish` bound),
/// and full meanwhile because the command wrote 256 KiB to it.
///
/// `fill`: whether the command fills the pipe (the control does not).
fn supervisor_line_after_run_died(fill: bool, read_after: Duration) -> String {
    let t = Target::fs(if fill { "log-sup-full" } else { "log-sup" });
    let url = t.url("sup");
    let script = if fill {
        "head -c 262144 /dev/zero >&2 & \
         echo $$ > \"$DIR/pid.tmp\" && mv \"$DIR/pid.tmp\" \"$DIR/pid\"; exec sleep 30"
    } else {
        "echo $$ > \"$DIR/pid.tmp\" && mv \"$DIR/pid.tmp\" \"$DIR/pid\"; exec sleep 30"
    };
    let mut run = t
        .command(["run", url.as_str(), "--", "sh", "-c", script])
        .env("DIR", t.path(""))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    // Let the command fill the pipe.
    std::thread::sleep(Duration::from_millis(500));
    let mut stderr = run.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let start_reading = std::sync::Arc::new(std::sync::Barrier::new(2));
    let go = start_reading.clone();
    let reader = std::thread::spawn(move || {
        go.wait();
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        let _ = tx.send(());
        String::from_utf8_lossy(&text).replace('\0', "")
    });
    if !fill {
        start_reading.wait();
    }
    run.kill().expect("SIGKILL to run");
    let _ = run.wait();
    if fill {
        std::thread::sleep(read_after);
        start_reading.wait();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(&pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_pid(&pid);
    rx.recv_timeout(Duration::from_secs(20))
        .expect("every writer of the pipe is gone");
    reader.join().unwrap()
}

#[test]
fn the_supervisors_last_line_reaches_a_stderr_read_at_once() {
    let said = supervisor_line_after_run_died(false, Duration::ZERO);
    assert!(said.contains("bucket-lease run died"), "said: {said:?}");
}

#[test]
fn the_supervisors_last_line_reaches_a_stderr_read_300ms_late() {
    let said = supervisor_line_after_run_died(true, Duration::from_millis(300));
    assert!(
        said.contains("bucket-lease run died"),
        "the supervisor's error line was lost: it raised SIGKILL on itself without draining \
         its log queue (stderr read 300 ms late); said: {said:?}"
    );
}
