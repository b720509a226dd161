//! `bucket-lease bench` leaves nothing behind: every scratch lease it
//! takes is released, and the scratch `LEASE` object itself is removed,
//! on a `file://` bucket and on moto. It prints the table of the cargo
//! bench (measure.rs) with every operation counted. No test looks at a time.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::Target;
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
    let done = t.run(["bench", "--iters", "3", "--ttl", "5", url.as_str()]);
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
    let done = t.run(["bench", "--iters", "2", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    let scratch = report["prefix"].as_str().expect("the scratch prefix");
    let (store, _) = t.store(&url);
    let gone = store.get(&bucket_lease::lease_key(scratch), None);
    assert!(
        matches!(&gone, Err(e) if e.kind() == bucket_lease::StoreErrorKind::NotFound),
        "{gone:?}"
    );
}

#[test]
fn bench_prints_the_shared_table_and_counts_every_operation() {
    let t = Target::fs("bench-table");
    let url = t.url("job");
    let done = t.run([
        "bench",
        "-q",
        "--iters",
        "3",
        "--renewals",
        "4",
        url.as_str(),
    ]);
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

    let done = t.run([
        "bench",
        "--iters",
        "2",
        "--renewals",
        "3",
        "--json",
        url.as_str(),
    ]);
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
    let done = t.run(["bench", "--renewals", "0", url.as_str()]);
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
    let done = t.run([
        "bench",
        "--iters",
        "2",
        "--renewals",
        "2",
        "--json",
        url.as_str(),
    ]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    for op in ["acquire", "renew", "release"] {
        let row = report[op].as_object().expect("a row");
        for (field, value) in row {
            assert!(!value.is_null(), "{op}.{field} is null: {report}");
        }
    }
    let done = t.run([
        "bench",
        "-q",
        "--iters",
        "2",
        "--renewals",
        "2",
        url.as_str(),
    ]);
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
