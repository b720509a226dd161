//! `bucket-lease run` never waits on its own messages (issue 29): a
//! stderr nobody reads cannot keep the command alive past the write
//! deadline. Here stderr is a pipe whose reader stopped reading (as with
//! `run … 2>&1 | stalled-log-shipper`), filled by the command itself, and
//! renewals fail (the bucket's lock is held), so `run` has warnings to give
//! while it must stop the command.

mod cli_common;

use cli_common::{alive, kill_pid, wait_for_file, BucketLock, Target, LOST};
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn a_stalled_stderr_pipe_never_keeps_the_command_past_the_deadline() {
    let t = Target::fs("stalled-pipe");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let url = t.url("stalled");
    // The command fills the pipe (64 KiB) from a child of its own, which
    // then blocks in its write, and ignores SIGTERM itself.
    let script = "head -c 262144 /dev/zero >&2 & \
                  trap '' TERM; echo $$ > \"$DIR/pid.tmp\" && mv \"$DIR/pid.tmp\" \"$DIR/pid\"; \
                  exec sleep 30";
    let mut holder = t
        .command([
            "-v",
            "run",
            "--ttl",
            "3",
            url.as_str(),
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("DIR", t.path(""))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    // Let the child fill the pipe: from here on, every write to it blocks.
    std::thread::sleep(Duration::from_millis(500));
    let cut_at = Instant::now();
    let lock = BucketLock::take(&dir);
    // Every renewal that can land was sent before the cut; its write
    // deadline is two thirds of the 3 s TTL after it was sent.
    let deadline = cut_at + Duration::from_secs(2);
    let observation = Duration::from_millis(600);
    while alive(&pid) && Instant::now() < deadline + observation {
        std::thread::sleep(Duration::from_millis(10));
    }
    let dead_at = Instant::now();
    let still_alive = alive(&pid);
    if still_alive {
        kill_pid(&pid);
    }
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
        !still_alive,
        "the command was alive {observation:?} after the write deadline with stderr stalled; \
         run said: {said}"
    );
    assert!(dead_at < deadline + observation);
    assert_eq!(status.code(), Some(LOST), "run said: {said}");
    assert!(said.contains("SIGKILL"), "run said: {said}");
}
