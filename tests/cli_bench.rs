//! `bucket-lease bench` leaves nothing behind: every scratch lease it
//! takes is released, and the scratch `LEASE` object itself is removed,
//! on a `file://` bucket and on moto.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::Target;
use std::path::Path;

/// Every file under `dir` whose path mentions a bench scratch prefix.
fn bench_leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().contains("/bench-") {
                found.push(path.display().to_string());
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
