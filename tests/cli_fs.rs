//! The `bucket-lease` command end to end on `file://` directories: no
//! server needed. The scenarios live in `cli_common`; the argument and
//! configuration errors are checked here once.

mod cli_common;

use cli_common::{BucketLock, Target, USAGE};
use std::time::{Duration, Instant};

#[test]
fn second_run_is_held_then_waits() {
    cli_common::second_run_is_held_then_waits(&Target::fs("two-runs"));
}

#[test]
fn killed_holder_is_taken_over_after_the_ttl() {
    cli_common::killed_holder_is_taken_over_after_the_ttl(&Target::fs("sigkill"));
}

#[test]
fn inspect_shows_free_and_held() {
    cli_common::inspect_shows_free_and_held(&Target::fs("inspect"));
}

#[test]
fn break_stops_the_running_holder() {
    cli_common::break_stops_the_running_holder(&Target::fs("break-running"));
}

#[test]
fn break_a_stale_holder() {
    cli_common::break_a_stale_holder(&Target::fs("break-stale"));
}

#[test]
fn sigint_releases_and_stops_the_command() {
    cli_common::sigint_releases_and_stops_the_command(&Target::fs("sigint"));
}

#[test]
fn the_command_status_is_propagated() {
    cli_common::the_command_status_is_propagated(&Target::fs("status"));
}

#[test]
fn renewals_that_hang_stop_the_command_by_the_write_deadline() {
    let t = Target::fs("hang");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let mut lock = None;
    // Holding the bucket's lock makes every write, renewals included, wait.
    cli_common::renewals_that_hang_stop_the_command_by_the_write_deadline(&t, &mut |on| {
        lock = on.then(|| BucketLock::take(&dir));
    });
}

#[test]
fn runs_twice_in_a_row_with_renewals() {
    cli_common::runs_twice_in_a_row_with_renewals(&Target::fs("twice"));
}

#[test]
fn a_command_shorter_than_a_renewal_then_another_run() {
    cli_common::a_command_shorter_than_a_renewal_then_another_run(&Target::fs("short"));
}

#[test]
fn inspect_shows_who_released_the_lease() {
    cli_common::inspect_shows_who_released_the_lease(&Target::fs("released"));
}

#[test]
fn the_holder_name_is_shown_where_the_holder_is_named() {
    cli_common::the_holder_name_is_shown_where_the_holder_is_named(&Target::fs("named"));
}

#[test]
fn store_text_is_shown_escaped() {
    cli_common::store_text_is_shown_escaped(&Target::fs("evil"));
}

#[test]
fn inspect_survives_absurd_records() {
    cli_common::inspect_survives_absurd_records(&Target::fs("absurd"));
}

#[test]
fn a_ttl_outside_1_to_3600_s_is_a_usage_error() {
    let t = Target::fs("ttl-range");
    let url = t.url("ttl");
    for ttl in [
        "0",
        "3601",
        "86400",
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        for cmd in ["run", "bench"] {
            let mut args = vec![cmd, "--ttl", ttl, url.as_str()];
            if cmd == "run" {
                args.extend(["--", "touch", "started"]);
            }
            let done = t.run(&args);
            assert_eq!(done.code, Some(USAGE), "{args:?}: {done:?}");
            assert!(done.stderr.contains("1 to 3600"), "{args:?}: {done:?}");
            assert!(!done.stderr.contains("panicked"), "{args:?}: {done:?}");
        }
    }
    assert_eq!(t.inspect(&url)["state"], "free", "nothing was taken");
    let done = t.run(["run", "--ttl", "3600", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(0), "the maximum itself is fine: {done:?}");
}

#[test]
fn huge_durations_are_refused_not_overflowed() {
    let t = Target::fs("huge");
    let url = t.url("huge");
    for (option, value) in [
        ("--wait", "1e300"),
        ("--wait", "inf"),
        ("--wait", "NaN"),
        ("--grace", "18446744073709551616"),
        ("--grace", "1e10"),
    ] {
        let args = ["run", option, value, url.as_str(), "--", "true"];
        let done = t.run(args);
        assert_eq!(done.code, Some(USAGE), "{args:?}: {done:?}");
        assert!(
            done.stderr.contains(&format!("{option}: expected")) && done.stderr.contains("up to"),
            "{args:?}: the range is named: {done:?}"
        );
        assert!(!done.stderr.contains("panicked"), "{args:?}: {done:?}");
    }
    // The largest accepted values run normally.
    let started = Instant::now();
    let done = t.run([
        "run",
        "--wait",
        "1000000000",
        "--grace",
        "1000000000",
        url.as_str(),
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn bad_arguments_exit_64_naming_the_argument() {
    let t = Target::fs("usage");
    let url = t.url("usage");
    for (args, needle) in [
        (vec![], "no command given"),
        (vec!["frobnicate"], "unknown command \"frobnicate\""),
        (vec!["run", url.as_str()], "missing COMMAND"),
        (vec!["run", "--", "true"], "missing URL"),
        (
            vec!["run", "--ttl", "soon", url.as_str(), "true"],
            "--ttl: expected",
        ),
        (vec!["run", "--wait"], "--wait needs a value"),
        (
            vec!["run", "--grace=-1", url.as_str(), "true"],
            "--grace: expected",
        ),
        (
            vec!["run", "--bogus", url.as_str(), "true"],
            "unknown option --bogus",
        ),
        (vec!["inspect"], "missing URL"),
        (
            vec!["inspect", url.as_str(), "extra"],
            "unexpected argument \"extra\"",
        ),
        (
            vec!["inspect", "--json=yes", url.as_str()],
            "--json takes no value",
        ),
        (vec!["break", url.as_str()], "missing --holder"),
        (
            vec!["bench", "--iters", "0", url.as_str()],
            "--iters: expected",
        ),
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(64), "{args:?}: {done:?}");
        assert!(
            done.stderr.contains(needle),
            "{args:?}: {needle:?} in {done:?}"
        );
        assert!(done.stderr.contains("--help"), "{args:?}: {done:?}");
    }
}

#[test]
fn help_and_version() {
    let t = Target::fs("help");
    for args in [
        vec!["--help"],
        vec!["help"],
        vec!["run", "--help"],
        vec!["help", "inspect"],
        vec!["break", "-h"],
        vec!["bench", "--help"],
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(0), "{args:?}: {done:?}");
        assert!(done.stdout.contains("Usage"), "{args:?}: {done:?}");
        assert!(done.stdout.contains("75"), "the exit codes: {args:?}");
    }
    let version = t.run(["--version"]);
    assert_eq!(version.code, Some(0));
    assert!(version.stdout.starts_with("bucket-lease 0."), "{version:?}");
}

#[test]
fn configuration_errors_exit_78() {
    let t = Target::fs("config");
    for (url, needle) in [
        ("gs://bucket/prefix", "unknown scheme"),
        ("file://relative/path", "absolute"),
        #[cfg(feature = "s3")]
        ("s3://bucket/prefix", "AWS_"),
        #[cfg(feature = "minio")]
        ("minio://bucket/prefix", "AWS_ENDPOINT_URL"),
    ] {
        for cmd in ["inspect", "run"] {
            let done = t.run(
                [cmd, url, "true"]
                    .iter()
                    .take(if cmd == "run" { 3 } else { 2 }),
            );
            assert_eq!(done.code, Some(78), "{cmd} {url}: {done:?}");
            assert!(
                done.stderr.contains(needle),
                "{cmd} {url}: {needle:?} in {done:?}"
            );
        }
    }
}

/// A `file://` directory that does not exist is a missing bucket, as on
/// S3: `run` exits 78 without running the command and makes nothing, and
/// the message names the directory, says to create it, and says so once.
#[test]
fn a_missing_directory_is_a_missing_bucket_and_exits_78() {
    let t = Target::fs("no-dir");
    let missing = t.path("nonexist/jobs");
    let marker = t.path("ran");
    for url in [
        format!("file://{}", missing.display()),
        format!("file://{}//nightly", missing.display()),
    ] {
        let script = format!("touch '{}'", marker.display());
        let done = t.run(["run", url.as_str(), "--", "sh", "-c", &script]);
        assert_eq!(done.code, Some(78), "{url}: {done:?}");
        assert!(!marker.exists(), "{url}: the command ran: {done:?}");
        assert!(
            !missing.exists() && !t.path("nonexist").exists(),
            "{url}: made"
        );
        let dir = missing.display().to_string();
        assert!(
            done.stderr.contains(&format!("mkdir -p {dir}")),
            "{url}: {done:?}"
        );
        assert_eq!(
            done.stderr.matches(&format!("no directory {dir}")).count(),
            1,
            "{url}: said once: {done:?}"
        );
        if !url.contains("//nightly") {
            // One slash: the one error names the other reading too.
            let other = format!("write file://{}//nonexist/jobs;", t.path("").display());
            let other = other.replace("///nonexist", "//nonexist");
            assert!(done.stderr.contains(&other), "{url}: {other} in {done:?}");
        }
        assert_eq!(
            done.stderr.lines().count(),
            1,
            "{url}: one message: {done:?}"
        );
        let inspect = t.run(["inspect", url.as_str()]);
        assert_eq!(inspect.code, Some(78), "{url}: {inspect:?}");
    }
}

/// A prefix whose folder is a link out of the bucket (issue 39): `run`
/// exits 78 naming the link, runs nothing, and writes nothing where the
/// link points; twice in a row, the same.
#[test]
fn a_prefix_through_a_link_out_of_the_bucket_exits_78_naming_it() {
    let t = Target::fs("link-prefix");
    let (bucket, outside) = (t.path("bucket"), t.path("outside"));
    std::fs::create_dir_all(&bucket).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let link = bucket.join("nightly");
    std::os::unix::fs::symlink("../outside", &link).unwrap();
    let marker = t.path("ran");
    let url = format!("file://{}//nightly", bucket.display());
    for _ in 0..2 {
        let script = format!("touch '{}'", marker.display());
        let done = t.run(["run", url.as_str(), "--", "sh", "-c", &script]);
        assert_eq!(done.code, Some(78), "{done:?}");
        assert!(!marker.exists(), "the command ran: {done:?}");
        assert!(
            done.stderr
                .contains(&format!("{} is a symbolic link", link.display())),
            "{done:?}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written through the link: {done:?}"
        );
    }
}

/// A file where the bucket's directory should be: exit 78, naming it.
#[test]
fn a_file_for_the_directory_exits_78() {
    let t = Target::fs("file-dir");
    let file = t.path("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let url = format!("file://{}//jobs", file.display());
    let done = t.run(["run", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(78), "{done:?}");
    assert!(
        done.stderr
            .contains(&format!("{} is not a directory", file.display())),
        "{done:?}"
    );
}

/// A store error names the object by its URL, `file://DIR//PREFIX/LEASE`,
/// and the command's message says the store's text once.
#[test]
fn a_store_error_names_the_lease_url_once() {
    let t = Target::fs("named");
    let url = t.url("jobs");
    let dir = t.bucket_dir().unwrap();
    // A file the store did not write where the LEASE object should be
    // (no attribute with its ETag): every read fails.
    std::fs::create_dir_all(dir.join("jobs")).unwrap();
    std::fs::write(dir.join("jobs/LEASE"), b"{}").unwrap();
    let done = t.run(["inspect", url.as_str()]);
    assert_ne!(done.code, Some(0), "{done:?}");
    let named = format!("GET {url}/LEASE: ");
    assert_eq!(
        done.stderr.matches(&named).count(),
        1,
        "{named:?} in {done:?}"
    );
}

#[test]
fn bench_measures_on_a_scratch_prefix() {
    let t = Target::fs("bench");
    let url = t.url("real");
    let done = t.run(["bench", "--iters", "5", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{done:?}");
    let json: serde_json::Value = serde_json::from_str(&done.stdout).expect("JSON");
    assert_eq!(json["iterations"], 5);
    assert_eq!(json["exclusion"], "conditional");
    assert!(json["prefix"].as_str().unwrap().contains("real/bench-"));
    // One acquire and one release per iteration, renewals_per_round renewals.
    let per_round = json["renewals_per_round"]
        .as_u64()
        .expect("renewals per round");
    for (op, samples) in [("acquire", 5), ("renew", 5 * per_round), ("release", 5)] {
        assert_eq!(json[op]["samples"], samples, "{json}");
        for q in ["p50_ms", "p90_ms", "p99_ms", "max_ms"] {
            assert!(
                json[op][q].as_f64().is_some_and(|v| v >= 0.0),
                "{op} {q}: {json}"
            );
        }
    }
    assert!(done.stderr.contains("5/5"), "progress on stderr: {done:?}");
    assert_eq!(
        t.inspect(&url)["state"],
        "free",
        "the real lease is untouched"
    );

    let human = t.run(["bench", "-q", "--iters", "3", url.as_str()]);
    assert_eq!(human.code, Some(0), "{human:?}");
    for needle in ["p50", "p99", "acquire", "renew", "release", "|#"] {
        assert!(human.stdout.contains(needle), "{needle:?} in {human:?}");
    }
    assert!(human.stderr.is_empty(), "-q: {human:?}");
}

#[test]
fn best_effort_is_taken_and_said() {
    let t = Target::fs("best-effort");
    let url = t.url("be");
    let done = t.run([
        "run",
        "--best-effort",
        url.as_str(),
        "sh",
        "-c",
        "echo $BUCKET_LEASE_EXCLUSION",
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(done.stdout.trim(), "best-effort");
    assert!(done.stderr.contains("best-effort"), "warned: {done:?}");
    let mut cmd = t.command([
        "run",
        url.as_str(),
        "sh",
        "-c",
        "echo $BUCKET_LEASE_EXCLUSION",
    ]);
    cmd.env("BUCKET_LEASE_CONDITIONAL", "off");
    let done = cli_common::Done::from(cli_common::output_within(
        &mut cmd,
        cli_common::COMMAND_LIMIT,
    ));
    assert_eq!(done.stdout.trim(), "best-effort", "{done:?}");
}

#[test]
fn every_process_of_the_command_is_stopped_when_the_lease_is_lost() {
    cli_common::every_process_of_the_command_is_stopped_when_the_lease_is_lost(&Target::fs(
        "lost-family",
    ));
}

#[test]
fn every_process_of_the_command_is_dead_by_the_deadline_when_renewals_hang() {
    let t = Target::fs("fenced-family");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let mut lock = None;
    cli_common::every_process_of_the_command_is_dead_by_the_deadline_when_renewals_hang(
        &t,
        &mut |on| lock = on.then(|| BucketLock::take(&dir)),
    );
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_at_the_deadline() {
    let t = Target::fs("stubborn");
    let dir = t.bucket_dir().expect("a file:// bucket");
    let mut lock = None;
    cli_common::a_child_that_ignores_sigterm_is_killed_at_the_deadline(&t, &mut |on| {
        lock = on.then(|| BucketLock::take(&dir));
    });
}

#[test]
fn a_signal_to_run_stops_every_process_of_the_command() {
    cli_common::a_signal_to_run_stops_every_process_of_the_command(&Target::fs("signal-family"));
}

#[test]
fn every_process_of_the_command_dies_with_a_killed_run() {
    cli_common::every_process_of_the_command_dies_with_a_killed_run(&Target::fs("killed-family"));
}

#[test]
fn every_process_dies_when_the_supervisor_is_killed() {
    cli_common::every_process_dies_when_the_supervisor_is_killed(&Target::fs("supervisor"));
}

#[test]
fn what_the_command_leaves_behind_is_stopped() {
    cli_common::what_the_command_leaves_behind_is_stopped(&Target::fs("leftovers"));
}

/// `cmd` started as the first process of a new PID namespace, as a
/// container starts its entry point (`docker run … bucket-lease run`): its
/// group and session were made outside the namespace, so the kernel shows
/// their ids as 0 inside it. `None` (with a note) where `unshare --pid`
/// is not allowed.
fn in_a_new_pid_namespace(cmd: &std::process::Command) -> Option<std::process::Command> {
    let allowed = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !allowed {
        eprintln!("note: skipping: `unshare --pid --fork --mount-proc` is not allowed here");
        return None;
    }
    let mut wrapped = std::process::Command::new("unshare");
    wrapped
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    Some(wrapped)
}

/// `run` as a container's first process: SIGTERM, and then a lost lease,
/// stop the command as anywhere else (it is sent SIGTERM, cleans up and
/// exits 0), and `run` exits as it would there: with the command's status
/// after SIGTERM, with 76 once the lease is lost. (It panicked once it signalled the
/// command: the ids of its group, 0 there, were taken for nonzero.)
#[test]
fn run_as_a_containers_first_process_stops_its_command() {
    let t = Target::fs("pid-namespace");
    let script = "trap 'echo cleaned > \"$DIR/$NAME\"; exit 0' TERM; \
                  echo up > \"$DIR/$NAME.up\"; while :; do sleep 0.1; done";
    for (name, code) in [("term", 0), ("lost", 76)] {
        let url = t.url(name);
        let mut cmd = t.command([
            "run", "--ttl", "3", "--grace", "2", &url, "--", "sh", "-c", script,
        ]);
        cmd.env("DIR", t.path(".")).env("NAME", name);
        let Some(mut cmd) = in_a_new_pid_namespace(&cmd) else {
            return;
        };
        let out = std::fs::File::create(t.path("run.out")).unwrap();
        let err = std::fs::File::create(t.path("run.err")).unwrap();
        let unshare = cmd.stdout(out).stderr(err).spawn().expect("unshare starts");
        cli_common::wait_for_file(&t.path(&format!("{name}.up")), Duration::from_secs(10));
        if name == "term" {
            // run is unshare's only child (pid 1 inside).
            let run = cli_common::children_of(unshare.id());
            assert_eq!(run.len(), 1, "{run:?}");
            let run = rustix::process::Pid::from_raw(run[0]).expect("a pid");
            rustix::process::kill_process(run, rustix::process::Signal::TERM).expect("sent");
        } else {
            let id = t.holder(&url).expect("held");
            let broke = t.run(["break", "--holder", id.as_str(), url.as_str()]);
            assert_eq!(broke.code, Some(0), "{broke:?}");
        }
        let done = cli_common::finish_run(&t, unshare, Duration::from_secs(20));
        assert!(!done.stderr.contains("panicked"), "{name}: {done:?}");
        assert_eq!(done.code, Some(code), "{name}: {done:?}");
        let cleaned = std::fs::read_to_string(t.path(name)).unwrap_or_default();
        assert_eq!(
            cleaned.trim(),
            "cleaned",
            "{name}: the command was not signalled: {done:?}"
        );
        if name == "term" {
            assert_eq!(t.inspect(&url)["state"], "free", "{done:?}");
        }
    }
}

/// The tests' bound on a command: one that hangs fails its test instead
/// of holding up the suite, and so does one that leaves a process holding
/// its output.
#[test]
fn a_hung_command_fails_its_test_in_time() {
    for script in ["sleep 30", "sleep 30 & echo left"] {
        let limit = std::time::Duration::from_secs(1);
        let started = Instant::now();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", script]);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cli_common::output_within(&mut cmd, limit)
        }));
        assert!(failed.is_err(), "{script}: not failed");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{script}: too late"
        );
    }
}

/// A bucket of the first directory layout: `run` refuses it naming
/// `migrate-dir` (exit 78, the command never runs); `migrate-dir` moves
/// it to plain files, keeping the lease record's version, once; then the
/// command runs and the record is a plain file.
#[test]
fn a_first_layout_bucket_is_refused_until_migrate_dir_moves_it() {
    let t = Target::fs("first-layout");
    let dir = t.bucket_dir().unwrap();
    std::fs::write(dir.join(".bucket-lease.lock"), b"").unwrap();
    std::fs::create_dir_all(dir.join("jobs.dir/parts.dir")).unwrap();
    std::fs::write(
        dir.join("jobs.dir/parts.dir/1-0.obj"),
        b"bucket-lease object v1\netag \"e1\"\nmeta bucket-lease-epoch 1\n\npart bytes",
    )
    .unwrap();
    let url = t.url("jobs");
    let marker = t.path("ran");
    let script = format!("touch '{}'", marker.display());
    let refused = t.run(["run", url.as_str(), "--", "sh", "-c", &script]);
    assert_eq!(refused.code, Some(78), "{refused:?}");
    assert!(!marker.exists(), "the command ran: {refused:?}");
    let hint = format!("bucket-lease migrate-dir {}", dir.display());
    assert!(refused.stderr.contains(&hint), "{refused:?}");

    let path = dir.display().to_string();
    let migrated = t.run(["migrate-dir", path.as_str()]);
    assert_eq!(migrated.code, Some(0), "{migrated:?}");
    assert!(
        migrated.stdout.starts_with("migrated 1 objects in "),
        "{migrated:?}"
    );
    let again = t.run(["migrate-dir", &format!("file://{path}")]);
    assert_eq!(again.code, Some(0), "{again:?}");
    assert!(again.stdout.contains("plain files already"), "{again:?}");

    let ran = t.run(["run", url.as_str(), "--", "sh", "-c", &script]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(marker.exists());
    assert_eq!(
        std::fs::read(dir.join("jobs/parts/1-0")).unwrap(),
        b"part bytes"
    );
    assert!(dir.join("jobs").is_dir() && !dir.join("jobs.dir").exists());

    let not_a_bucket = t.path("elsewhere");
    std::fs::create_dir_all(&not_a_bucket).unwrap();
    let refused = t.run(["migrate-dir", &not_a_bucket.display().to_string()]);
    assert_eq!(refused.code, Some(78), "{refused:?}");
    assert!(
        refused.stderr.contains("is not a bucket of the first"),
        "{refused:?}"
    );
}
