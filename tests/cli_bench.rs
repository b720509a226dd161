//! `bucket-lease-bench` leaves nothing behind: every scratch lease it
//! takes is released, and the scratch `LEASE` object itself is removed,
//! on a `file://` bucket and on moto. It prints the table of the cargo
//! bench (measure.rs) with every operation counted. `bucket-lease bench`
//! runs it, or says how to install it when it is not beside the command.
//! No test looks at a time.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::{Done, Target, USAGE};
use std::path::Path;

/// Every file or folder under `dir` whose path mentions a bench scratch
/// prefix.
fn bench_leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.to_string_lossy().contains("/bench-") {
                found.push(path.display().to_string());
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found
}

#[test]
fn bench_removes_its_scratch_lease_on_a_directory() {
    let t = Target::fs("bench-cleanup");
    let url = t.url("job");
    let done = t.bench(["--iters", "3", "--ttl", "5", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let dir = t.bucket_dir().unwrap();
    assert_eq!(bench_leftovers(&dir), Vec::<String>::new());
}

#[cfg(feature = "s3")]
#[test]
fn bench_removes_its_scratch_lease_on_moto() {
    let Some(t) = Target::moto("bench-cleanup") else {
        return;
    };
    let url = t.url("job");
    let done = t.bench(["--iters", "2", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    let scratch = report["prefix"].as_str().expect("the scratch prefix");
    let (store, _) = t.store(&url);
    let gone = store.get(&bucket_lease::record::lease_key(scratch), None);
    assert!(
        matches!(&gone, Err(e) if e.kind() == bucket_lease::store::StoreErrorKind::NotFound),
        "{gone:?}"
    );
}

#[test]
fn bench_prints_the_shared_table_and_counts_every_operation() {
    let t = Target::fs("bench-table");
    let url = t.url("job");
    let done = t.bench(["-q", "--iters", "3", "--renewals", "4", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let header = done
        .stdout
        .lines()
        .find(|l| l.starts_with("row "))
        .unwrap_or_else(|| panic!("no table header in {}", done.stdout));
    for column in ["p50", "p50 range", "p99", "max", "CPU/op", "CPU range"] {
        assert!(
            header.contains(column),
            "{column:?} missing from {header:?}"
        );
    }
    let ops = |name: &str| -> String {
        let line = done
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in {}", done.stdout));
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(ops("acquire"), "3");
    assert_eq!(ops("renew"), "12");
    assert_eq!(ops("release"), "3");
    assert!(done.stdout.contains("\nrenew latency\n"), "{}", done.stdout);

    let done = t.bench(["--iters", "2", "--renewals", "3", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(report["iterations"], 2);
    assert_eq!(report["renewals_per_round"], 3);
    assert_eq!(report["renew"]["samples"], 6);
    assert_eq!(report["renew"]["batches"], 2);
    assert_eq!(report["acquire"]["samples"], 2);
    assert!(report["renew"]["cpu_us"].is_number(), "{report}");
    assert!(report["renew"]["histogram"].is_array(), "{report}");
    assert_eq!(
        bench_leftovers(&t.bucket_dir().unwrap()),
        Vec::<String>::new()
    );
}

#[test]
fn bench_refuses_zero_renewals() {
    let t = Target::fs("bench-usage");
    let url = t.url("job");
    let done = t.bench(["--renewals", "0", url.as_str()]);
    assert_ne!(done.code, Some(0));
    assert!(done.stderr.contains("--renewals"), "{}", done.stderr);
}

/// `--json` carries measurements only: no field bench never fills
/// (`"clones": null`, `"syscalls": null`); and the table has no column
/// that is `-` in every row (no floor, no previous run, no system calls).
#[test]
fn bench_prints_no_empty_fields_or_columns() {
    let t = Target::fs("bench-empty");
    let url = t.url("job");
    let done = t.bench(["--iters", "2", "--renewals", "2", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    for op in ["acquire", "renew", "release"] {
        let row = report[op].as_object().expect("a row");
        for (field, value) in row {
            assert!(!value.is_null(), "{op}.{field} is null: {report}");
        }
    }
    let done = t.bench(["-q", "--iters", "2", "--renewals", "2", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("row "))
        .expect("a header");
    for column in ["syscalls/op", "floor", "prev"] {
        assert!(!lines[header].contains(column), "{column}: {}", done.stdout);
    }
    for row in &lines[header + 1..header + 4] {
        assert!(
            !row.split("  ").any(|cell| cell.trim() == "-"),
            "an empty cell: {row:?} in {}",
            done.stdout
        );
    }
}

/// `bucket-lease [-q] bench ARGS` runs bucket-lease-bench with ARGS and the
/// `-q` given before `bench`: its output, its exit codes, its help (the one
/// `bucket-lease help bench` prints too).
#[test]
fn bucket_lease_bench_runs_bucket_lease_bench() {
    let t = Target::fs("bench-handover");
    let url = t.url("job");
    let done = t.run(["-q", "bench", "--iters", "2", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert_eq!(done.stderr, "", "-q did not reach the bench");
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(report["iterations"], 2, "{report}");
    let loud = t.run(["bench", "--iters", "1", url.as_str()]);
    assert_eq!(loud.code, Some(0), "{}", loud.stderr);
    assert!(loud.stderr.contains("bench: 1/1 rounds"), "{loud:?}");

    let misuse = t.run(["bench", "--bogus", url.as_str()]);
    assert_eq!(misuse.code, Some(USAGE), "{misuse:?}");
    assert!(
        misuse.stderr.contains("bench: unknown option --bogus")
            && misuse.stderr.contains("try `bucket-lease bench --help`"),
        "{misuse:?}"
    );

    let own = t.bench(["--help"]);
    assert_eq!(own.code, Some(0), "{own:?}");
    assert!(
        own.stdout.contains("bucket-lease-bench [OPTIONS] URL"),
        "{}",
        own.stdout
    );
    assert_eq!(t.run(["bench", "--help"]).stdout, own.stdout);
    assert_eq!(t.run(["help", "bench"]).stdout, own.stdout);
}

/// Without bucket-lease-bench beside it, `bucket-lease bench` runs nothing
/// and says where it looked and how to install it: 127 as a shell's
/// command not found, 126 for a file there that cannot be executed.
/// `bucket-lease help bench` needs no second program.
#[test]
fn bench_without_its_program_names_it_and_how_to_install_it() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-alone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let alone = dir.join("bucket-lease");
    // The same file system as the build: a link, not a copy of the binary.
    std::fs::hard_link(env!("CARGO_BIN_EXE_bucket-lease"), &alone)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_bucket-lease"), &alone).map(drop))
        .unwrap();
    let t = Target::fs("bench-alone");
    let url = t.url("job");
    let run = |args: &[&str]| -> Done {
        Done::from(
            t.command_of(alone.to_str().unwrap(), args)
                .output()
                .unwrap(),
        )
    };
    let sibling = dir.join("bucket-lease-bench");
    let missing = run(&["bench", url.as_str()]);
    assert_eq!(missing.code, Some(127), "{missing:?}");
    for needle in [
        sibling.to_str().unwrap(),
        "`bench` is the program bucket-lease-bench",
        "`cargo install bucket-lease --features cli`",
    ] {
        assert!(missing.stderr.contains(needle), "{needle}: {missing:?}");
    }
    assert_eq!(missing.stdout, "");

    std::fs::write(&sibling, "not a program").unwrap();
    let unusable = run(&["bench", url.as_str()]);
    assert_eq!(unusable.code, Some(126), "{unusable:?}");
    assert!(
        unusable
            .stderr
            .contains("`cargo install bucket-lease --features cli`"),
        "{unusable:?}"
    );

    let help = run(&["help", "bench"]);
    assert_eq!(help.code, Some(0), "{help:?}");
    assert!(
        help.stdout.contains("bucket-lease-bench [OPTIONS] URL"),
        "{}",
        help.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}
