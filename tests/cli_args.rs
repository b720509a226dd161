//! The command line of `bucket-lease` on `file://` directories (no server):
//! every misuse exits 64 naming the argument, COMMAND's own arguments reach
//! it untouched, durations take units, `-E` sets the "held" exit code.

mod cli_common;

use cli_common::{finish, wait_for_file, Target, HELD, USAGE};
use std::time::{Duration, Instant};

/// Every misuse the tokenizer can see exits 64 with a message naming the
/// argument and pointing at `--help`; nothing is run.
#[test]
fn every_misuse_exits_64_naming_the_argument() {
    let t = Target::fs("misuse");
    let url = t.url("misuse");
    let marker = t.path("started");
    let touch = marker.display().to_string();
    for (args, needle) in [
        (vec!["--version=1"], "--version takes no value"),
        (vec!["-V=1"], "-V takes no value"),
        (vec!["--frobnicate"], "unknown option --frobnicate"),
        (
            vec!["run", "--frobnicate", url.as_str(), "touch", &touch],
            "unknown option --frobnicate",
        ),
        (
            vec!["run", "-Z", url.as_str(), "touch", &touch],
            "unknown option -Z",
        ),
        (
            vec!["inspect", "--json=yes", url.as_str()],
            "--json takes no value",
        ),
        (
            vec!["run", "--best-effort=1", url.as_str(), "touch", &touch],
            "--best-effort takes no value",
        ),
        (
            vec!["inspect", "--quiet=1", url.as_str()],
            "--quiet takes no value",
        ),
        (vec!["run", "--wait"], "--wait needs a value"),
        (
            vec!["break", url.as_str(), "--holder"],
            "--holder needs a value",
        ),
        (vec!["run", "-E"], "-E needs a value"),
        (
            vec!["run", "--ttl=", url.as_str(), "touch", &touch],
            "--ttl: expected",
        ),
        (
            vec!["run", "--wait=", url.as_str(), "touch", &touch],
            "--wait: expected",
        ),
        (
            vec!["inspect", "--region=", url.as_str()],
            "--region: the value is empty",
        ),
        (
            vec!["help", "run", "extra"],
            "unexpected argument \"extra\"",
        ),
        (
            vec!["--profile", "p", "inspect", url.as_str()],
            "it goes after the command",
        ),
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(USAGE), "{args:?}: {done:?}");
        assert!(
            done.stderr.contains(needle),
            "{args:?}: {needle:?} in {done:?}"
        );
        assert!(done.stderr.contains("--help"), "{args:?}: {done:?}");
        assert!(!marker.exists(), "{args:?} ran the command");
    }
}

/// What follows COMMAND's first word is COMMAND's, options and `--`
/// included, with or without a `--` before it.
#[test]
fn command_arguments_reach_it_untouched() {
    let t = Target::fs("untouched");
    let url = t.url("untouched");
    let script = "printf '[%s]' \"$@\"";
    for args in [
        vec![
            "run",
            url.as_str(),
            "--",
            "sh",
            "-c",
            script,
            "sh",
            "--ttl",
            "5",
            "-v",
            "--",
            "-E",
        ],
        vec![
            "run",
            url.as_str(),
            "sh",
            "-c",
            script,
            "sh",
            "--ttl",
            "5",
            "-v",
            "--",
            "-E",
        ],
        vec![
            "run",
            "-q",
            url.as_str(),
            "--",
            "sh",
            "-c",
            script,
            "sh",
            "--ttl",
            "5",
            "-v",
            "--",
            "-E",
        ],
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(0), "{args:?}: {done:?}");
        assert_eq!(done.stdout, "[--ttl][5][-v][--][-E]", "{args:?}: {done:?}");
    }
    // `run URL -- cmd --ttl 5`: the TTL is the default, --ttl 5 is cmd's.
    let done = t.run([
        "run",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo $BUCKET_LEASE_TTL_S \"$@\"",
        "sh",
        "--ttl",
        "5",
    ]);
    assert_eq!(done.stdout.trim(), "30 --ttl 5", "{done:?}");
}

/// `--ttl`, `--wait` and `--grace` take seconds with fractions and the
/// units s, m, h; the TTL must come out whole, from 1 to 3600 s.
#[test]
fn durations_take_units_and_the_ttl_stays_whole() {
    let t = Target::fs("durations");
    let url = t.url("durations");
    for (ttl, seconds) in [
        ("30s", "30"),
        ("1m", "60"),
        ("0.5m", "30"),
        ("1h", "3600"),
        ("7", "7"),
    ] {
        let done = t.run([
            "run",
            "--ttl",
            ttl,
            "--wait",
            "1.5",
            "--grace",
            "0.5h",
            url.as_str(),
            "--",
            "sh",
            "-c",
            "echo $BUCKET_LEASE_TTL_S",
        ]);
        assert_eq!(done.code, Some(0), "--ttl {ttl}: {done:?}");
        assert_eq!(done.stdout.trim(), seconds, "--ttl {ttl}: {done:?}");
    }
    for (ttl, why) in [
        ("1.5", "a whole number of seconds"),
        ("2h", "suspect"),
        ("0s", "1 to 3600"),
        ("-1", "1 to 3600"),
        ("1x", "1 to 3600"),
        ("m", "1 to 3600"),
    ] {
        let done = t.run(["run", "--ttl", ttl, url.as_str(), "--", "true"]);
        assert_eq!(done.code, Some(USAGE), "--ttl {ttl}: {done:?}");
        assert!(
            done.stderr.contains(why),
            "--ttl {ttl}: {why:?} in {done:?}"
        );
    }
    for wait in ["1e3", "-1s", "5w", "1.2.3", "inf", ""] {
        let done = t.run(["run", "--wait", wait, url.as_str(), "--", "true"]);
        assert_eq!(done.code, Some(USAGE), "--wait {wait}: {done:?}");
        assert!(done.stderr.contains("90s, 1m, 0.5h"), "the forms: {done:?}");
    }

    // A fractional wait on a held lease gives up after about that long.
    let holder = t.spawn_holder(&url, 5, "echo held > \"$DIR/held\"; sleep 4");
    wait_for_file(&t.path("held"), Duration::from_secs(10));
    let started = Instant::now();
    let done = t.run(["run", "--wait", "0.8s", url.as_str(), "--", "true"]);
    let took = started.elapsed();
    assert_eq!(done.code, Some(HELD), "{done:?}");
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    let _ = finish(holder, Duration::from_secs(20));
}

/// `-E N` / `--conflict-exit-code N`, as in flock: the exit code when the
/// lease is held; 75 by default; 0 to 255.
#[test]
fn conflict_exit_code_is_the_code_when_held() {
    let t = Target::fs("conflict");
    let url = t.url("conflict");
    for bad in ["256", "-1", "x", "1.5", ""] {
        let done = t.run(["run", "-E", bad, url.as_str(), "--", "true"]);
        assert_eq!(done.code, Some(USAGE), "-E {bad}: {done:?}");
        assert!(done.stderr.contains("0 to 255"), "-E {bad}: {done:?}");
    }
    // Free: COMMAND's own 75 is its own.
    let done = t.run(["run", "-E", "99", url.as_str(), "--", "sh", "-c", "exit 75"]);
    assert_eq!(done.code, Some(75), "{done:?}");

    let holder = t.spawn_holder(&url, 5, "echo held > \"$DIR/held\"; sleep 3");
    wait_for_file(&t.path("held"), Duration::from_secs(10));
    let marker = t.path("second");
    let touch = marker.display().to_string();
    for (args, code) in [
        (vec!["run", url.as_str(), "touch", &touch], HELD),
        (vec!["run", "-E", "99", url.as_str(), "touch", &touch], 99),
        (vec!["run", "-E99", url.as_str(), "touch", &touch], 99),
        (
            vec![
                "run",
                "--conflict-exit-code=0",
                url.as_str(),
                "touch",
                &touch,
            ],
            0,
        ),
        (
            vec![
                "run",
                "--conflict-exit-code",
                "3",
                "--wait",
                "0.3",
                url.as_str(),
                "touch",
                &touch,
            ],
            3,
        ),
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(code), "{args:?}: {done:?}");
        assert!(done.stderr.contains("held by"), "{args:?}: {done:?}");
    }
    assert!(!marker.exists(), "a held lease runs nothing");
    let _ = finish(holder, Duration::from_secs(20));
}

/// `bucket-lease --generate KIND` for the four kinds.
fn generated(t: &Target, kind: &str) -> String {
    let done = t.run(["--generate", kind]);
    assert_eq!(done.code, Some(0), "{kind}: {done:?}");
    assert!(done.stderr.is_empty(), "{kind}: {done:?}");
    done.stdout
}

/// What the bash completion offers for the words `line` (the last one
/// being completed).
fn bash_completes(script: &std::path::Path, line: &[&str]) -> Vec<String> {
    let words: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _bucket_lease; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        words.join(" "),
        line.len() - 1
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{line:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether every line of `text` has its single quotes paired (outside a
/// backslash escape): a crude syntax check for shells not installed.
fn quotes_pair(text: &str, escapes_inside: bool) {
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let (mut inside, mut chars) = (false, line.chars().peekable());
        while let Some(c) = chars.next() {
            match c {
                '\\' if escapes_inside || !inside => {
                    chars.next();
                }
                '\'' => inside = !inside,
                _ => {}
            }
        }
        assert!(!inside, "line {}: unpaired quote in {line:?}", n + 1);
    }
}

/// The completions and the man page come out of the option tables: bash
/// accepts its script and completes from it; the zsh and fish scripts
/// have the shape their shells read (checked by the shell when installed);
/// the man page formats without a warning; every option the help lists is
/// in each of them.
#[test]
fn completions_and_the_man_page_are_generated_from_the_tables() {
    let t = Target::fs("generate");
    let bash = generated(&t, "complete-bash");
    let script = t.path("bucket-lease.bash");
    std::fs::write(&script, &bash).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(check.status.success(), "bash -n: {check:?}");
    assert_eq!(
        bash_completes(&script, &["bucket-lease", "run", "--tt"]),
        ["--ttl"]
    );
    assert!(bash_completes(&script, &["bucket-lease", "run", "-"]).contains(&"-E".to_string()));
    assert_eq!(
        bash_completes(&script, &["bucket-lease", "inspect", "--end"]),
        ["--endpoint-url"]
    );
    assert_eq!(
        bash_completes(&script, &["bucket-lease", "--gen"]),
        ["--generate"]
    );
    assert_eq!(
        bash_completes(&script, &["bucket-lease", "--generate", "complete-f"]),
        ["complete-fish"]
    );
    assert_eq!(bash_completes(&script, &["bucket-lease", "br"]), ["break"]);
    assert_eq!(
        bash_completes(&script, &["bucket-lease", "run", "--ttl", ""]),
        Vec::<String>::new()
    );
    assert!(
        bash_completes(&script, &["bucket-lease", "run", "u", "--", "ech"])
            .contains(&"echo".to_string())
    );

    let zsh = generated(&t, "complete-zsh");
    assert!(zsh.starts_with("#compdef bucket-lease\n"), "{zsh}");
    assert!(zsh.contains("_arguments") && zsh.trim_end().ends_with("_bucket_lease \"$@\""));
    quotes_pair(&zsh, false);
    let fish = generated(&t, "complete-fish");
    for line in fish
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(line.starts_with("complete -c bucket-lease "), "{line:?}");
    }
    quotes_pair(&fish, true);
    for (shell, text, check) in [("zsh", &zsh, "-n"), ("fish", &fish, "--no-execute")] {
        let path = t.path(shell);
        std::fs::write(&path, text).unwrap();
        match std::process::Command::new(shell)
            .arg(check)
            .arg(&path)
            .output()
        {
            Ok(out) => assert!(out.status.success(), "{shell} {check}: {out:?}"),
            Err(e) => {
                eprintln!("note: {shell} is not installed ({e}); its script was checked by shape")
            }
        }
    }

    let man = generated(&t, "man");
    assert!(man.contains(".TH BUCKET\\-LEASE 1"), "{man}");
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "COMMANDS",
        "EXIT STATUS",
    ] {
        assert!(man.contains(&format!(".SH {section}\n")), "{section}");
    }
    let page = t.path("bucket-lease.1");
    std::fs::write(&page, &man).unwrap();
    match std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
    {
        Ok(out) => assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff: {out:?}"
        ),
        Err(e) => eprintln!("note: groff is not installed ({e}); the page was checked by shape"),
    }

    // Every option each help lists is in every output.
    for cmd in ["", "run", "inspect", "break", "bench", "migrate-dir"] {
        let help = if cmd.is_empty() {
            t.run(["--help"])
        } else {
            t.run([cmd, "--help"])
        };
        // The option lines: `  -E, --conflict-exit-code N` or `      --ttl DURATION`.
        let options: Vec<&str> = help
            .stdout
            .lines()
            .skip_while(|l| *l != "Options:")
            .take_while(|l| !l.is_empty())
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
            .collect();
        assert!(
            options.contains(&"--help") && options.len() >= 4,
            "{cmd}: {options:?}"
        );
        for option in options {
            let name = &option[2..];
            assert!(bash.contains(option), "{cmd} {option}: bash");
            assert!(zsh.contains(option), "{cmd} {option}: zsh");
            assert!(fish.contains(&format!("-l {name}")), "{cmd} {option}: fish");
            assert!(
                man.contains(&name.replace('-', "\\-")),
                "{cmd} {option}: man"
            );
        }
    }
    let bad = t.run(["--generate", "complete-tcsh"]);
    assert_eq!(bad.code, Some(USAGE), "{bad:?}");
    assert!(
        bad.stderr
            .contains("complete-bash, complete-zsh, complete-fish, man"),
        "{bad:?}"
    );
}

/// A profile named by `--profile` that the shared files do not hold is a
/// configuration error naming the flag, not the variable.
#[test]
fn a_missing_profile_named_by_the_flag_is_said_so() {
    let t = Target::fs("no-profile");
    let done = t.run([
        "inspect",
        "--profile",
        "nope",
        "--region",
        "us-east-1",
        "s3://b/p",
    ]);
    assert_eq!(done.code, Some(cli_common::CONFIG), "{done:?}");
    assert!(done.stderr.contains("profile \"nope\""), "{done:?}");
    assert!(done.stderr.contains("--profile names it"), "{done:?}");
}
