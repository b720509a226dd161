//! An interactive shell on a pseudo-terminal, driven as a person at a
//! terminal would: keystrokes written to the master side, what it prints
//! read from there (`cli_tty.rs`, `cli_stderr.rs`). Every wait is bounded;
//! an expectation that is not met fails with the transcript and what the
//! processes are doing, and the session is hung up and killed on drop.
#![allow(dead_code)]

use crate::cli_common::Target;
use rustix::process::{kill_process, Pid, Signal};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shell's prompt.
pub const PROMPT: &str = "tty$ ";

/// How long any one thing the terminal should show may take to appear.
pub const WAIT: Duration = Duration::from_secs(20);

/// An interactive shell on a pseudo-terminal of its own.
pub struct Terminal {
    master: File,
    /// The terminal side's path (`/dev/pts/N`).
    name: String,
    output: Arc<Mutex<Vec<u8>>>,
    /// How much of the output the expectations have read.
    read_to: usize,
    shell: Child,
}

impl Terminal {
    /// `bash -i` on a new pseudo-terminal, its controlling terminal, with
    /// `$BL` (the binary), `$URL` and `$DIR` (the scratch directory) set.
    pub fn start(t: &Target, url: &str) -> Terminal {
        let mut term = Terminal::start_with(
            t,
            url,
            &["bash", "--norc", "--noprofile", "--noediting", "-i"],
        );
        term.expect(PROMPT);
        term
    }

    /// `program` (with its arguments) as the session leader of a new
    /// pseudo-terminal, its controlling terminal, with the environment
    /// [`start`](Self::start) describes.
    pub fn start_with(t: &Target, url: &str, program: &[&str]) -> Terminal {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pseudo-terminal");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("the terminal's name");
        let name = name.to_str().expect("a UTF-8 name").to_string();
        let slave = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc_o_noctty())
            .open(&name)
            .expect("the terminal side opens");
        let master = File::from(master);
        let shell = Command::new("setsid")
            .arg("-c")
            .args(program)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", t.path(""))
            .env("TERM", "dumb")
            .env("PS1", PROMPT)
            .env("HISTFILE", "/dev/null")
            .env("BL", env!("CARGO_BIN_EXE_bucket-lease"))
            .env("URL", url)
            .env("DIR", t.path(""))
            .stdin(Stdio::from(slave.try_clone().expect("a second handle")))
            .stdout(Stdio::from(slave.try_clone().expect("a third handle")))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("setsid and bash start (util-linux and bash are installed)");
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("a reading handle");
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with an error (EIO) once the last process on the
            // terminal side closes it.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master,
            name,
            output,
            read_to: 0,
            shell,
        }
    }

    /// Type `text` (`\x03` is Ctrl-C, `\x1a` Ctrl-Z, `\x1c` Ctrl-\, `\x13`
    /// Ctrl-S, `\x11` Ctrl-Q).
    pub fn type_keys(&mut self, text: &str) {
        self.master
            .write_all(text.as_bytes())
            .expect("the keystrokes are written");
    }

    /// Everything the terminal showed so far (without the NUL bytes of
    /// [`takes_output`](Self::takes_output)).
    pub fn transcript(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).replace(['\r', '\0'], "")
    }

    /// Whether a write to the terminal side goes through now: a NUL byte
    /// written without blocking (a description of its own, `O_NONBLOCK`)
    /// is taken, or refused with `EAGAIN` where a blocking write would
    /// wait (output suspended with Ctrl-S: the terminal takes nothing).
    pub fn takes_output(&self) -> bool {
        let mut side = OpenOptions::new()
            .write(true)
            .custom_flags(libc_o_noctty() | rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&self.name)
            .expect("the terminal side opens");
        match side.write(b"\0") {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("a write to the terminal side failed: {e}"),
        }
    }

    /// Ctrl-S (the terminal's STOP character, with `IXON` as terminals
    /// start), then wait until the terminal takes no more output: from
    /// then on every write to it blocks, until Ctrl-Q.
    pub fn suspend_output(&mut self) {
        self.type_keys("\x13");
        let deadline = Instant::now() + WAIT;
        while self.takes_output() {
            assert!(
                Instant::now() < deadline,
                "the terminal still takes output {WAIT:?} after Ctrl-S:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until the terminal shows `what` after what was expected last;
    /// the text up to and including it.
    pub fn expect(&mut self, what: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.transcript();
            if let Some(at) = text.get(self.read_to..).and_then(|rest| rest.find(what)) {
                let end = self.read_to + at + what.len();
                let seen = text[self.read_to..end].to_string();
                self.read_to = end;
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal did not show {what:?} within {WAIT:?}; it showed:\n{text}\n\
                 processes (pid ppid pgid tpgid state wchan command):\n{}",
                processes()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the terminal shows `what` anywhere within `limit`: for
    /// text that is not ordered with the rest (a process the shell does
    /// not wait for).
    pub fn shows(&self, what: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.transcript().contains(what) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Wait for the next prompt: the code on the `RC=N` line before it.
    pub fn exit_code_after(&mut self) -> i32 {
        let seen = self.expect(PROMPT);
        let rc = seen
            .rsplit("RC=")
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        rc.unwrap_or_else(|| panic!("no RC= line before the prompt: {seen:?}"))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Ctrl-Q, in case a test suspended the output: the session then
        // sees its hangup and ends without being held in a write.
        let _ = self.master.write_all(b"\x11");
        // An interactive bash passes SIGHUP on to every job (continuing the
        // stopped ones), and `run` releases on SIGHUP.
        let pid = Pid::from_child(&self.shell);
        let _ = kill_process(pid, Signal::HUP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.shell.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.shell.kill();
        let _ = self.shell.wait();
        // What is left of the session (a `run` stopped for good by a
        // failed test, say): SIGKILL, which reaches a stopped process.
        let session = pid.as_raw_nonzero().get().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(other) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // After the name: state ppid pgrp session.
            let in_session = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(3))
                == Some(session.as_str());
            if in_session {
                if let Some(other) = Pid::from_raw(other) {
                    let _ = kill_process(other, Signal::KILL);
                }
            }
        }
        if std::thread::panicking() {
            eprintln!("--- the terminal session ---\n{}", self.transcript());
        }
    }
}

/// What every process of the test's sessions is doing (state, where it
/// sleeps, its threads' states, its signal masks), for a failure's message:
/// a hang shows who waits on whom.
pub fn processes() -> String {
    let script = "ps -eo pid,ppid,pgid,tpgid,stat,wchan:24,args | \
                  grep -E 'bucket-lease|sh -c|sleep|bash --norc' | grep -v grep; \
                  for p in $(pgrep -x bucket-lease); do echo \"== $p\"; \
                  for t in /proc/$p/task/*; do \
                  echo \"  thread $(cut -d' ' -f3 $t/stat) $(cat $t/wchan) $(cat $t/comm)\"; done; \
                  grep -E 'SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt' /proc/$p/status; done";
    match Command::new("sh").arg("-c").arg(script).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(ps failed: {e})"),
    }
}

/// `O_NOCTTY`: opening the terminal side does not make it the test's
/// controlling terminal.
fn libc_o_noctty() -> i32 {
    rustix::fs::OFlags::NOCTTY.bits() as i32
}

/// Whether this machine can run the terminal tests.
pub fn can_run() -> bool {
    let found = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    let ok = found("setsid") && found("bash");
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "setsid (util-linux) and bash are needed for the terminal tests"
        );
        eprintln!("note: skipping: setsid (util-linux) and bash are needed");
    }
    ok
}
