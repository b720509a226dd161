//! Review of issue 33's `run --metrics-file` / `--status-file` on a
//! `file://` bucket: cases the promises cover and the first tests did not.

mod cli_common;

use cli_common::Target;

const KEY: &str = "jobs/nightly/LEASE";

/// Promise: "at exit ... they say not held again
/// (`bucket_lease_held{key="…"} 0`)", and the metrics file is the
/// Prometheus text. Given the same PATH for both options, run neither
/// refuses it nor keeps the Prometheus text there: the status file's JSON
/// is renamed over the metrics each time, so the textfile collector reads
/// JSON (and drops the file, so the lease's metrics vanish), and the file
/// never says `bucket_lease_held{...} 0`.
#[test]
fn one_path_for_both_files_is_refused_or_keeps_the_metrics() {
    let t = Target::fs("metrics-same-path");
    let url = t.url("jobs/nightly");
    let both = t.path("lease.prom");
    let done = t.run([
        "run",
        "--metrics-file",
        both.to_str().unwrap(),
        "--status-file",
        both.to_str().unwrap(),
        &url,
        "--",
        "true",
    ]);
    if done.code == Some(cli_common::USAGE) || done.code == Some(cli_common::CONFIG) {
        assert!(done.stderr.contains("--status-file"), "{}", done.stderr);
        return;
    }
    let text = std::fs::read_to_string(&both).unwrap_or_default();
    assert!(
        text.contains(&format!("bucket_lease_held{{key=\"{KEY}\"}} 0\n")),
        "run exited {:?} and left in its --metrics-file:\n{text}",
        done.code
    );
}
