//! `bucket-lease run` in a real terminal: an interactive shell with job
//! control (`bash -i`, made the session leader of a pseudo-terminal by
//! `setsid -c`) is driven by writing keystrokes to the terminal's master
//! side and reading what it prints, as a person at a terminal would. Every
//! wait is bounded; a test that does not see what it waits for fails with
//! the transcript, and the session is hung up and killed.
//!
//! What is checked: a command's prompt is answered (the command gets the
//! terminal, as under flock); Ctrl-C and Ctrl-\ reach the command itself
//! and the shell gets the terminal back; Ctrl-Z suspends the whole job,
//! `fg` continues it with the terminal and `bg` without; a job suspended
//! past its write deadline is killed without being continued (exit 76),
//! and one sent SIGTERM (`kill %1`) gives its command the whole grace
//! period once continued; a lost lease stops the command, also after the
//! terminal stopped it (SIGTTIN) while it had it, which is not a Ctrl-Z
//! and goes on; `run` hands the terminal back to a script that started it;
//! messages under `stty tostop` do not stop `run`; and with stdin not the
//! terminal nothing changes. Every time the lease is released.

mod cli_common;
mod cli_pty;

use cli_common::Target;
use cli_pty::{can_run, Terminal, PROMPT, WAIT};
use std::time::{Duration, Instant};

/// Whether signal number `signal` is ignored by this process (SigIgn in
/// /proc/self/status), so by everything it starts.
fn ignored_here(signal: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("SigIgn:"))?;
            u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// Wait until the process whose pid the command wrote in `$DIR/pid` is
/// in the terminal's foreground group (`/proc/PID/stat`: its group is the
/// terminal's `tpgid`), so that a key typed now reaches it.
fn wait_for_the_foreground(t: &Target, term: &Terminal) {
    let deadline = Instant::now() + WAIT;
    loop {
        let stat = std::fs::read_to_string(t.path("pid"))
            .ok()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok());
        // After the name: state ppid pgrp session tty_nr tpgid.
        let fields: Vec<String> = stat
            .as_deref()
            .and_then(|s| s.rsplit_once(") "))
            .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        if fields.len() > 5 && fields[2] == fields[5] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the command was not in the terminal's foreground within {WAIT:?} ({fields:?}):\n{}",
            term.transcript()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until a running (not stopped) process whose command line holds
/// `marker` leads the terminal's foreground group: the command has the
/// terminal; with `reading`, it also waits in its read of the terminal.
/// Typed before that, Ctrl-Z may reach the command while the kernel's
/// SIGTTIN for its first read (made before it was given the terminal) has
/// it stopped, or is about to, and the supervisor's SIGCONT for that stop
/// discards the pending SIGTSTP: a keystroke in the first instant lost, as
/// a user would type it again, not a test of what follows it. A read
/// waiting for input (`wait_woken`) is one made in the foreground, after
/// any such SIGTTIN was taken.
fn wait_for_the_command_in_the_foreground(term: &Terminal, marker: &str, reading: bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let found = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let dir = entry.path();
                let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                if !cmdline.contains(marker)
                    || cmdline.contains("bucket-lease")
                    || cmdline.contains("$BL")
                {
                    return None;
                }
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // After the name: state ppid pgrp session tty_nr tpgid.
                let (_, rest) = stat.rsplit_once(") ")?;
                let f: Vec<&str> = rest.split_whitespace().collect();
                let waits_for_input =
                    || std::fs::read_to_string(dir.join("wchan")).is_ok_and(|w| w == "wait_woken");
                (f.len() > 5 && f[0] != "T" && f[2] == f[5] && (!reading || waits_for_input()))
                    .then_some(())
            })
            .next()
            .is_some();
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no running {marker:?} held the terminal's foreground within {WAIT:?}:\n{}\n{}",
            term.transcript(),
            cli_pty::processes()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_released(t: &Target, url: &str, term: &Terminal) {
    let state = t.inspect(url)["state"].clone();
    assert_eq!(
        state,
        "free",
        "the lease is released:\n{}",
        term.transcript()
    );
}

/// The session: `read x` under `run` in a terminal gets what is
/// typed (it used to be stopped by SIGTTIN: "the command was stopped: it
/// used the terminal …", and hang until Ctrl-C).
#[test]
fn a_prompt_is_answered() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-prompt");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    // Typed text is echoed: the quotes keep what is waited for out of the
    // echo of the command line.
    term.type_keys(
        "\"$BL\" run \"$URL\" -- sh -c 'printf \"as\"\"k> \"; read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    term.expect("ask> ");
    term.type_keys("hello\n");
    term.expect("got:hello");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    // The shell has the terminal again: the next command runs.
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-C and Ctrl-\ go to the command (the terminal's foreground), as
/// under flock: `sleep` dies of SIGINT (130) or SIGQUIT (131), the lease is
/// released, and the shell gets the terminal back. (`run` used to get
/// them itself: Ctrl-\ killed `run`, leaving the lease held.)
#[test]
fn ctrl_c_and_ctrl_backslash_reach_the_command() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-ctrl-c");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    for (key, code, signal) in [("\x03", 130, 2), ("\x1c", 131, 3)] {
        if ignored_here(signal) {
            // Ignored when this test started (an asynchronous list of a
            // shell without job control ignores SIGINT and SIGQUIT), it
            // stays ignored down to the command, as under flock: the key
            // cannot stop it.
            println!("signal {signal} is ignored by this test process: its key is not tried");
            continue;
        }
        let _ = std::fs::remove_file(t.path("pid"));
        term.type_keys(
            "\"$BL\" run \"$URL\" -- sh -c 'echo $$ > \"$DIR/pid\"; exec sleep 100'; echo R\"C=$?\"\n",
        );
        wait_for_the_foreground(&t, &term);
        term.type_keys(key);
        assert_eq!(term.exit_code_after(), code, "{}", term.transcript());
        assert_released(&t, &url, &term);
        term.type_keys("echo next-$((6*7))\n");
        term.expect("next-42");
        term.expect(PROMPT);
    }
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z suspends the job (the shell prints its prompt again), `fg`
/// continues it with the terminal, and the command then reads what is
/// typed and finishes; the lease is released. (Ctrl-Z used to be ignored
/// by `run`, with a warning, while the command sat stopped by SIGTTIN.)
#[test]
fn ctrl_z_then_fg_continues_the_job() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-ctrl-z");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    // Not followed by `; echo $?`: bash goes on with a list when a job in
    // it stops. `fg` returns the job's status.
    term.type_keys(
        "\"$BL\" run --ttl 30 \"$URL\" -- sh -c 'printf \"as\"\"k> \"; read x; echo got:$x'\n",
    );
    term.expect("ask> ");
    wait_for_the_command_in_the_foreground(&term, "read x", true);
    term.type_keys("\x1a");
    term.expect("Stopped");
    term.expect(PROMPT);
    term.type_keys("jobs -l\n");
    term.expect("Stopped");
    term.expect(PROMPT);
    assert_eq!(t.inspect(&url)["state"], "held", "{}", term.transcript());
    term.type_keys("fg\n");
    // bash prints the job's command line; `read` is still waiting.
    std::thread::sleep(Duration::from_millis(500));
    term.type_keys("hello\n");
    term.expect("got:hello");
    term.expect(PROMPT);
    term.type_keys("echo R\"C=$?\"\n");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// A job suspended past its write deadline is killed on `fg` without
/// being continued: nothing of the command runs once the lease may no
/// longer be written under, and `run` exits 76.
#[test]
fn fg_after_the_write_deadline_kills_without_continuing() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-late-fg");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    let ticks = t.path("ticks");
    // The command appends a line every 50 ms while it runs.
    term.type_keys(
        "\"$BL\" run --ttl 3 \"$URL\" -- sh -c 'echo st\"\"arted; while :; do echo t >> \"$DIR/ticks\"; sleep 0.05; done'\n",
    );
    term.expect("started");
    wait_for_the_command_in_the_foreground(&term, "arted; while", false);
    std::thread::sleep(Duration::from_millis(300));
    term.type_keys("\x1a");
    term.expect("Stopped");
    term.expect(PROMPT);
    std::thread::sleep(Duration::from_millis(300));
    let count = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default().len();
    let at_stop = count(&ticks);
    assert!(at_stop > 0, "the command ran: {}", term.transcript());
    // The write deadline is 2 s after the last renewal (TTL 3 s).
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(count(&ticks), at_stop, "nothing ran while suspended");
    term.type_keys("fg\n");
    term.expect(PROMPT);
    term.type_keys("echo R\"C=$?\"\n");
    assert_eq!(term.exit_code_after(), 76, "{}", term.transcript());
    assert_eq!(count(&ticks), at_stop, "the command was never continued");
    let shown = term.transcript();
    assert!(shown.contains("write deadline"), "{shown}");
    assert_released(&t, &url, &term);
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// SIGTERM to a suspended job (`kill %1`, which continues it too) gives
/// the command its whole grace period once run goes on, counted from then:
/// the command's cleanup runs to its end and run exits with its status. (A
/// signal taken as run went on was dated from before the suspension, so a
/// job suspended longer than the grace period had its command killed at
/// once, "the command did not stop in time".)
#[test]
fn a_signal_to_a_suspended_job_gives_the_command_its_grace() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-z-term");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "\"$BL\" run --ttl 30 --grace 3 \"$URL\" -- sh -c 'trap \"echo clea\"\"ning; sleep 0.5; echo clea\"\"ned; exit 3\" TERM; echo $$ > \"$DIR/pid\"; while :; do sleep 0.1; done'\n",
    );
    wait_for_the_foreground(&t, &term);
    term.type_keys("\x1a");
    term.expect("Stopped");
    term.expect(PROMPT);
    // Longer than the grace period, well within the write deadline (20 s).
    std::thread::sleep(Duration::from_secs(4));
    // `fg`, not `wait %1`: bash may not have seen yet that `kill`
    // continued the job, and `wait` returns at once for a stopped one.
    term.type_keys("kill %1; fg; echo R\"C=$?\"\n");
    term.expect("cleaned");
    assert_eq!(term.exit_code_after(), 3, "{}", term.transcript());
    let shown = term.transcript();
    assert!(!shown.contains("did not stop in time"), "{shown}");
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z then `bg`: the command goes on in the background (the shell
/// takes commands meanwhile) until it reads the terminal, which stops the
/// job again (as any background job); `fg` then gives it the terminal.
#[test]
fn ctrl_z_then_bg_runs_in_the_background_until_it_reads() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-bg");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    let ticks = t.path("ticks");
    term.type_keys(
        "\"$BL\" run --ttl 30 \"$URL\" -- sh -c 'echo st\"\"arted; while [ ! -e \"$DIR/go\" ]; do echo t >> \"$DIR/ticks\"; sleep 0.05; done; printf \"as\"\"k> \"; read x; echo got:$x'\n",
    );
    term.expect("started");
    wait_for_the_command_in_the_foreground(&term, "arted; while", false);
    std::thread::sleep(Duration::from_millis(300));
    term.type_keys("\x1a");
    term.expect("Stopped");
    term.expect(PROMPT);
    let count = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default().len();
    std::thread::sleep(Duration::from_millis(300));
    let at_stop = count(&ticks);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(&ticks), at_stop, "stopped: {}", term.transcript());
    term.type_keys("bg\n");
    term.expect(PROMPT);
    // The shell has the terminal while the job runs in the background.
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    term.expect(PROMPT);
    let deadline = Instant::now() + WAIT;
    while count(&ticks) <= at_stop {
        assert!(
            Instant::now() < deadline,
            "not continued: {}",
            term.transcript()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Now it reads the terminal, from the background: stopped again.
    term.type_keys("touch \"$DIR/go\"; sleep 1; jobs\n");
    term.expect("Stopped");
    term.expect(PROMPT);
    term.type_keys("fg\n");
    std::thread::sleep(Duration::from_millis(500));
    term.type_keys("hello\n");
    term.expect("got:hello");
    term.expect(PROMPT);
    term.type_keys("echo R\"C=$?\"\n");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// A lease lost while the command has the terminal (here: broken by
/// another process): the command is stopped, run exits 76, and the shell
/// has the terminal again.
#[test]
fn a_lost_lease_stops_the_command_and_the_shell_gets_the_terminal_back() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-lost");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "\"$BL\" run --ttl 30 --grace 1 \"$URL\" -- sh -c 'printf \"as\"\"k> \"; read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    term.expect("ask> ");
    let holder = t.holder(&url).expect("a holder");
    let broken = t.run(["break", "--holder", holder.as_str(), url.as_str()]);
    assert_eq!(broken.code, Some(0), "{broken:?}");
    assert_eq!(term.exit_code_after(), 76, "{}", term.transcript());
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// A command stopped for the terminal while it has it goes on, and a lease
/// lost afterwards still ends in exit 76 and the shell's prompt (issue
/// 28). The kernel stops a command that reads the terminal before its
/// supervisor gave it the foreground (SIGTTIN); that stop can land just
/// after the supervisor last asked `wait`, and its look in `/proc` for a
/// stop `wait` cannot report (COMMAND inside `vfork`) saw COMMAND stopped
/// first and took it for Ctrl-Z, without the signal that `wait` would have
/// named: run's job was stopped (`Stopped`, RC=147) with nobody to continue
/// it. Here the command gets SIGTTIN a hundred times (sent by itself to
/// its group, as the kernel sends it), so that stops land while the
/// supervisor looks.
#[test]
fn a_command_stopped_for_the_terminal_goes_on_and_a_lost_lease_ends_in_76() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-ttin");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "\"$BL\" run --ttl 6 --grace 1 \"$URL\" -- sh -c 'n=0; while [ $n -lt 100 ]; do kill -TTIN 0; n=$((n+1)); done; printf \"as\"\"k> \"; read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    term.expect("ask> ");
    let holder = t.holder(&url).expect("a holder");
    let broken = t.run(["break", "--holder", holder.as_str(), url.as_str()]);
    assert_eq!(broken.code, Some(0), "{broken:?}");
    assert_eq!(term.exit_code_after(), 76, "{}", term.transcript());
    let shown = term.transcript();
    assert!(!shown.contains("Stopped"), "{shown}");
    term.type_keys("echo next-$((6*7))\n");
    term.expect("next-42");
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Nothing changes when standard input is not the terminal: the command
/// reads its input, and Ctrl-Z goes to `run`, which ignores it (a
/// suspended run could neither renew the lease nor stop the command).
#[test]
fn without_the_terminal_on_stdin_nothing_changes() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-no-stdin");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "echo hello | \"$BL\" run \"$URL\" -- sh -c 'read x; echo got:$x; sleep 1'; echo R\"C=$?\"\n",
    );
    term.expect("got:hello");
    term.type_keys("\x1a");
    term.expect("SIGTSTP ignored");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z while COMMAND itself is inside a fork (dash's `vfork`: the
/// parent waits, unstoppable, until its child execs, and the child is the
/// one the terminal stops). Only a grandchild is then stopped, which the
/// supervisor is never told of by `wait`: it used to miss the stop, and the
/// terminal hung with no prompt. A loop that forks all the time is caught
/// inside a fork on most tries; each must suspend, and `fg` continue it.
#[test]
fn ctrl_z_while_the_command_forks_suspends_the_job() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-z-fork");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "\"$BL\" run --ttl 30 \"$URL\" -- sh -c 'echo st\"\"arted; while [ ! -e \"$DIR/go\" ]; do /bin/true; done; echo fin\"\"ished'; echo R\"C=$?\"\n",
    );
    term.expect("started");
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        term.type_keys("\x1a");
        term.expect("Stopped");
        term.expect(PROMPT);
        term.type_keys("fg\n");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(t.path("go"), b"").expect("the go file is written");
    term.expect("finished");
    term.expect(PROMPT);
    term.type_keys("echo R\"C=$?\"\n");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z while `run` waits for the lease, its input not the terminal: as
/// while the command runs, it is ignored, not a stop of `run` (which
/// would renew nothing once it holds the lease). It used to stop `run`
/// with the default action until the command had started.
#[test]
fn ctrl_z_while_the_lease_is_taken_is_ignored_without_the_terminal() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-z-wait");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys("\"$BL\" run -q \"$URL\" -- sleep 2 < /dev/null & sleep 0.5\n");
    term.expect(PROMPT);
    term.type_keys(
        "echo hello | \"$BL\" run --wait 20s \"$URL\" -- sh -c 'read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    std::thread::sleep(Duration::from_millis(500));
    term.type_keys("\x1a");
    term.expect("SIGTSTP ignored");
    term.expect("got:hello");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z while `run` waits for the lease in the terminal's foreground
/// suspends the job as at the shell; `fg` goes on waiting, and the
/// command then gets the terminal.
#[test]
fn ctrl_z_while_the_lease_is_taken_suspends_in_the_terminal() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-z-wait-fg");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys("\"$BL\" run -q \"$URL\" -- sleep 2 < /dev/null & sleep 0.5\n");
    term.expect(PROMPT);
    term.type_keys(
        "\"$BL\" run --wait 20s \"$URL\" -- sh -c 'printf \"as\"\"k> \"; read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    std::thread::sleep(Duration::from_millis(500));
    term.type_keys("\x1a");
    term.expect("Stopped");
    term.expect(PROMPT);
    term.type_keys("fg\n");
    term.expect("ask> ");
    term.type_keys("hello\n");
    term.expect("got:hello");
    term.expect(PROMPT);
    term.type_keys("echo R\"C=$?\"\n");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// `run` hands the terminal back itself when the command ends: a script
/// (a shell without job control, which never takes the terminal) reads
/// the terminal again after `run`.
#[test]
fn the_terminal_is_handed_back_to_what_started_run() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-back");
    let url = t.url("p");
    std::fs::write(
        t.path("two.sh"),
        "\"$BL\" run \"$URL\" -- sh -c 'printf \"first> \"; read x; echo got:$x'\n\
         printf 'second> '; read y; echo then:$y\n",
    )
    .expect("the script is written");
    let mut term = Terminal::start(&t, &url);
    term.type_keys("bash \"$DIR/two.sh\"; echo R\"C=$?\"\n");
    term.expect("first> ");
    term.type_keys("a\n");
    term.expect("got:a");
    term.expect("second> ");
    term.type_keys("b\n");
    term.expect("then:b");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Under `stty tostop` a background process that writes to the terminal
/// is stopped (SIGTTOU): `run` and the supervisor, in the background while
/// the command has the terminal, still log (here: each renewal, `-vv`).
#[test]
fn messages_while_the_command_has_the_terminal_do_not_stop_run() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-tostop");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys("stty tostop\n");
    term.expect(PROMPT);
    term.type_keys(
        "\"$BL\" run -vv --ttl 3 \"$URL\" -- sh -c 'sleep 2.5; printf \"as\"\"k> \"; read x; echo got:$x'; echo R\"C=$?\"\n",
    );
    term.expect("ask> ");
    term.type_keys("hello\n");
    term.expect("got:hello");
    assert_eq!(term.exit_code_after(), 0, "{}", term.transcript());
    let shown = term.transcript();
    assert!(
        shown.contains("renewed in"),
        "a renewal was logged: {shown}"
    );
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z under a `run` that no job-control shell could continue (its job
/// is an orphaned process group: here `sh -c`, the terminal's session
/// leader, started it) is ignored, as the kernel ignores it for flock
/// there: the command is continued at once, and reads what is typed.
#[test]
fn ctrl_z_without_a_job_control_shell_is_ignored() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-orphan");
    let url = t.url("p");
    let mut term = Terminal::start_with(
        &t,
        &url,
        &[
            "sh",
            "-c",
            "\"$BL\" run \"$URL\" -- sh -c 'printf \"ask> \"; read x; echo got:$x'; echo RC=$?",
        ],
    );
    term.expect("ask> ");
    wait_for_the_command_in_the_foreground(&term, "read x", true);
    term.type_keys("\x1a");
    term.expect("Ctrl-Z ignored");
    term.type_keys("hello\n");
    term.expect("got:hello");
    term.expect("RC=0");
    assert_released(&t, &url, &term);
    println!("--- the terminal session ---\n{}", term.transcript());
}

/// Ctrl-Z while the command is being stopped (the lease was lost; it got
/// SIGTERM and cleans up): the command is continued, so it finishes its
/// cleanup instead of sitting stopped until SIGKILL.
#[test]
fn ctrl_z_while_the_command_is_being_stopped_lets_it_finish() {
    if !can_run() {
        return;
    }
    let t = Target::fs("tty-ctrl-z-stopping");
    let url = t.url("p");
    let mut term = Terminal::start(&t, &url);
    term.type_keys(
        "\"$BL\" run --ttl 30 \"$URL\" -- sh -c 'trap \"echo clea\"\"ning; sleep 1; echo clea\"\"ned; exit 3\" TERM; echo $$ > \"$DIR/pid\"; while :; do sleep 0.1; done'; echo R\"C=$?\"\n",
    );
    wait_for_the_foreground(&t, &term);
    let holder = t.holder(&url).expect("a holder");
    let broken = t.run(["break", "--holder", holder.as_str(), url.as_str()]);
    assert_eq!(broken.code, Some(0), "{broken:?}");
    term.expect("cleaning");
    term.type_keys("\x1a");
    term.expect("cleaned");
    assert_eq!(term.exit_code_after(), 76, "{}", term.transcript());
    println!("--- the terminal session ---\n{}", term.transcript());
}
