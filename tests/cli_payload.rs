//! `run --payload` and what `inspect` shows of a record's payload (issue
//! 34), on `file://` directories: the payload is written, kept, shown
//! (human, `--json`, `--watch`) and handed to COMMAND; an invalid one is a
//! usage error naming the limit; a hostile one in the bucket is shown as
//! none and never breaks `inspect`.
#![cfg(all(feature = "cli", feature = "fs"))]

mod cli_common;

use bucket_lease::record::format_stamp;
use cli_common::{finish, pid_then_sleep, signal, wait_for_file, Target, USAGE};
use rustix::process::Signal;
use std::io::{BufRead, BufReader};
use std::time::{Duration, SystemTime};

const PAYLOAD: &str = r#"{"addr":"10.0.0.7:5432","gen":3} é"#;

/// The payload is in the record while COMMAND runs (inspect: human,
/// `--json`, `--watch`), in COMMAND's environment, and still in the
/// record once run released it.
#[test]
fn run_payload_is_written_shown_and_kept() {
    let t = Target::fs("payload");
    let url = t.url("jobs");
    let script = format!(
        "echo \"$BUCKET_LEASE_PAYLOAD\" > \"$DIR/env\"; {}",
        pid_then_sleep("pid")
    );
    let mut cmd = t.command([
        "run",
        "--ttl",
        "3",
        "--payload",
        PAYLOAD,
        url.as_str(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    cmd.env("DIR", t.path(""))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let holder = cmd.spawn().expect("the binary starts");
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let env = wait_for_file(&t.path("env"), Duration::from_secs(10));
    assert_eq!(env.trim_end(), PAYLOAD, "BUCKET_LEASE_PAYLOAD");

    let json = t.inspect(&url);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["payload"], PAYLOAD, "{json}");
    let human = t.run(["inspect", url.as_str()]);
    assert!(
        human
            .stdout
            .contains(&format!("  payload      {PAYLOAD}\n")),
        "{human:?}"
    );

    let mut watch = t.spawn(["inspect", "--watch", "--interval", "100ms", url.as_str()]);
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("a first line").unwrap()).unwrap();
    assert_eq!(first["change"], "first", "{first}");
    assert_eq!(first["payload"], PAYLOAD, "{first}");
    signal(&watch, Signal::INT);
    let _ = watch.wait();

    // Past a renewal (every second at a TTL of 3 s): still there.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(t.inspect(&url)["payload"], PAYLOAD);
    cli_common::kill_pid(pid.trim());
    let done = finish(holder, Duration::from_secs(30));
    assert!(done.code.is_some(), "{done:?}");
    let json = t.inspect(&url);
    assert_eq!(
        (json["state"].as_str(), json["released"].as_bool()),
        (Some("free"), Some(true)),
        "{json}"
    );
    assert_eq!(json["payload"], PAYLOAD, "the released record keeps it");
    let human = t.run(["inspect", url.as_str()]);
    assert!(human.stdout.contains("  payload      "), "{human:?}");
}

/// Without `--payload` the record has none: JSON `null`, no human line,
/// and an empty `BUCKET_LEASE_PAYLOAD` is not set at all.
#[test]
fn without_a_payload_there_is_none() {
    let t = Target::fs("no-payload");
    let url = t.url("jobs");
    let done = t.run([
        "run",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo ${BUCKET_LEASE_PAYLOAD-unset}",
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(done.stdout.trim(), "unset");
    let json = t.inspect(&url);
    assert!(json["payload"].is_null(), "{json}");
    let human = t.run(["inspect", url.as_str()]);
    assert!(!human.stdout.contains("\n  payload "), "{human:?}");
}

/// A payload over 1 KiB, or with a control character, is a usage error
/// (64) that names the limit or the character; nothing is taken.
#[test]
fn an_invalid_payload_is_a_usage_error_naming_the_limit() {
    let t = Target::fs("bad-payload");
    let url = t.url("jobs");
    let long = "x".repeat(1025);
    let done = t.run([
        "run",
        "--payload",
        long.as_str(),
        url.as_str(),
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(USAGE), "{done:?}");
    assert!(
        done.stderr.contains("--payload")
            && done.stderr.contains("1025 bytes, over the maximum of 1024"),
        "{done:?}"
    );
    assert!(
        !done.stderr.contains(&long),
        "the payload is not echoed whole"
    );
    let done = t.run([
        "run",
        "--payload",
        "a\u{1b}[2Jb\nc",
        url.as_str(),
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(USAGE), "{done:?}");
    assert!(done.stderr.contains("base64"), "{done:?}");
    assert!(!done.stderr.contains('\u{1b}'), "escaped: {done:?}");
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// A record whose payload a hostile writer chose (escapes, too long,
/// huge, not a string) is inspected without a panic: the record is shown,
/// the payload as none, nothing raw reaches the terminal.
#[test]
fn a_hostile_payload_is_shown_as_none() {
    let t = Target::fs("evil-payload");
    let url = t.url("jobs");
    let now = format_stamp(SystemTime::now());
    for payload in [
        serde_json::json!("evil\u{1b}]0;pwned\u{7}\u{202e}"),
        serde_json::json!("y".repeat(1025)),
        serde_json::json!("z".repeat(60 * 1024)),
        serde_json::json!({"nested": [1, 2]}),
        serde_json::json!(7),
    ] {
        let record = serde_json::json!({"instance_id": "holder", "acquired_at": now,
            "renewed_at": now, "ttl_s": 30, "epoch": 1, "payload": payload});
        t.put_lease(&url, record.to_string().as_bytes());
        let human = t.run(["inspect", url.as_str()]);
        assert_eq!(human.code, Some(0), "{human:?}");
        assert!(human.stdout.contains("holder       holder"), "{human:?}");
        assert!(!human.stdout.contains("\n  payload "), "{human:?}");
        assert!(
            !human
                .stdout
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{human:?}"
        );
        let json = t.inspect(&url);
        assert_eq!(json["holder"], "holder", "{json}");
        assert!(json["payload"].is_null(), "{json}");
    }
}
