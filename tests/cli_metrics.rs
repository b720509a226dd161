//! `run --metrics-file` and `--status-file` on a `file://` bucket: the
//! files say held while the command runs and not held after, are read by
//! Prometheus's own parser (`prometheus_client` from PyPI, in the venv
//! `scripts/test-servers.sh` makes), a file that cannot be written
//! stops run before it takes anything, and links planted in the files'
//! directory are never followed (issue 39).

mod cli_common;

use cli_common::{Target, CONFIG};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const KEY: &str = "jobs/nightly/LEASE";

/// The metric families in the text at `path`, as `prometheus_client`'s
/// parser reads them: `{name: {"type": …, "samples": [[name, labels,
/// value]]}}`. `None` (with a note) without the venv, unless
/// `BUCKET_LEASE_REQUIRE_SERVERS=1`.
fn parsed(path: &Path) -> Option<Value> {
    let Some(python) = std::env::var_os("BUCKET_LEASE_PYTHON") else {
        assert!(
            std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "BUCKET_LEASE_PYTHON is not set (scripts/test-servers.sh start writes it)"
        );
        eprintln!(
            "note: BUCKET_LEASE_PYTHON is not set: the text is not parsed by prometheus_client"
        );
        return None;
    };
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = {}
# Bytes, not text: Python's text mode would turn a carriage return in a
# label (which the format allows) into a line break.
for f in text_string_to_metric_families(open(sys.argv[1], "rb").read().decode()):
    families[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(families))
"#;
    let out = Command::new(python)
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "prometheus_client refused {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// The value of `family`'s sample `sample` with `labels` besides `key`.
fn sample(families: &Value, family: &str, sample: &str, labels: &[(&str, &str)]) -> f64 {
    let samples = families[family]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family} in {families}"));
    samples
        .iter()
        .find(|s| {
            s[0] == sample
                && s[1]["key"] == KEY
                && labels.iter().all(|(name, value)| s[1][name] == *value)
                && s[1].as_object().unwrap().len() == labels.len() + 1
        })
        .unwrap_or_else(|| panic!("no sample {sample}{labels:?} in {family}: {samples:?}"))[2]
        .as_f64()
        .unwrap()
}

/// Another `run` holding `url` for 30 s, once it runs its command.
fn held_by_another(t: &Target, url: &str) -> std::process::Child {
    let ready = t.path("holder-ready");
    let holder = t.spawn_holder(
        url,
        30,
        &format!("echo ready > '{}'; sleep 30", ready.display()),
    );
    cli_common::wait_for_file(&ready, Duration::from_secs(20));
    holder
}

/// The `bucket_lease_held` line of the text at `path`.
fn held_line(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find(|l| l.starts_with("bucket_lease_held{"))
        .unwrap_or_else(|| panic!("no bucket_lease_held in {text}"))
        .to_string()
}

#[test]
fn the_files_say_held_while_the_command_runs_and_not_held_after() {
    let t = Target::fs("metrics-file");
    let url = t.url("jobs/nightly");
    let metrics = t.path("lease.prom");
    let status = t.path("lease.json");
    let during = t.path("during.prom");
    let during_status = t.path("during.json");
    // The command copies the files once they show a renewal (TTL 3 s: one
    // a second), within 10 s.
    let script = format!(
        "for i in $(seq 200); do \
           grep -q 'bucket_lease_renewals_total{{key=\"{KEY}\",outcome=\"ok\"}} [1-9]' '{m}' && break; \
           sleep 0.05; \
         done; \
         cp '{m}' '{d}'; cp '{s}' '{ds}'",
        m = metrics.display(),
        d = during.display(),
        s = status.display(),
        ds = during_status.display(),
    );
    let done = t.run([
        "run",
        "--ttl",
        "3",
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--status-file",
        status.to_str().unwrap(),
        &url,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");

    assert_eq!(
        held_line(&during),
        format!("bucket_lease_held{{key=\"{KEY}\"}} 1")
    );
    assert_eq!(
        held_line(&metrics),
        format!("bucket_lease_held{{key=\"{KEY}\"}} 0")
    );
    let during_json: Value =
        serde_json::from_str(&std::fs::read_to_string(&during_status).unwrap()).unwrap();
    assert_eq!(during_json["held"], true, "{during_json}");
    assert_eq!(during_json["state"], "held");
    assert_eq!(during_json["key"], KEY);
    assert_eq!(during_json["url"], url.as_str());
    assert!(during_json["seconds_to_fence"].as_f64().unwrap() > 0.0);
    assert!(during_json["renewals"]["ok"].as_u64().unwrap() >= 1);
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(after["held"], false, "{after}");
    assert_eq!(after["state"], "released");
    assert_eq!(after["seconds_to_fence"], 0.0);
    assert_eq!(after["losses"]["fenced"], 0);
    let leftovers: Vec<_> = std::fs::read_dir(metrics.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let Some(families) = parsed(&during) else {
        return;
    };
    assert_eq!(families["bucket_lease_held"]["type"], "gauge");
    assert_eq!(
        sample(&families, "bucket_lease_held", "bucket_lease_held", &[]),
        1.0
    );
    assert_eq!(
        sample(&families, "bucket_lease_epoch", "bucket_lease_epoch", &[]),
        1.0
    );
    assert_eq!(families["bucket_lease_renewals"]["type"], "counter");
    let ok = sample(
        &families,
        "bucket_lease_renewals",
        "bucket_lease_renewals_total",
        &[("outcome", "ok")],
    );
    assert!(ok >= 1.0);
    assert_eq!(
        families["bucket_lease_renewal_duration_seconds"]["type"],
        "histogram"
    );
    let count = sample(
        &families,
        "bucket_lease_renewal_duration_seconds",
        "bucket_lease_renewal_duration_seconds_count",
        &[],
    );
    let infinite = sample(
        &families,
        "bucket_lease_renewal_duration_seconds",
        "bucket_lease_renewal_duration_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert_eq!(count, infinite);
    assert!(count >= ok);
    let to_fence = sample(
        &families,
        "bucket_lease_seconds_to_fence",
        "bucket_lease_seconds_to_fence",
        &[],
    );
    assert!(to_fence > 0.0 && to_fence <= 2.0, "{to_fence}");
    for reason in ["fenced", "lost", "not_released"] {
        let n = sample(
            &families,
            "bucket_lease_losses",
            "bucket_lease_losses_total",
            &[("reason", reason)],
        );
        assert_eq!(n, 0.0, "{reason}");
    }
    assert_eq!(families["bucket_lease_transitions"]["type"], "counter");
    assert_eq!(
        sample(
            &families,
            "bucket_lease_transitions",
            "bucket_lease_transitions_total",
            &[]
        ),
        1.0
    );
    let after = parsed(&metrics).unwrap();
    assert_eq!(
        sample(&after, "bucket_lease_held", "bucket_lease_held", &[]),
        0.0
    );
    assert_eq!(
        sample(
            &after,
            "bucket_lease_transitions",
            "bucket_lease_transitions_total",
            &[]
        ),
        2.0
    );
}

/// Issue 39: links planted in the files' directory at the names the
/// temporary files once had (`.NAME.PID.tmp`, with run's pid and its
/// supervisor's) are never followed: the file a link names is not written,
/// none is made where a dangling one points, and the links stay as they
/// were.
#[test]
fn links_planted_in_the_directory_are_never_followed() {
    let t = Target::fs("metrics-planted");
    let url = t.url("jobs/nightly");
    let collector = t.path("collector");
    std::fs::create_dir(&collector).unwrap();
    let victim = t.path("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let elsewhere = t.path("made-through-a-link");
    let metrics = collector.join("lease.prom");
    let status = collector.join("lease.json");
    // COMMAND's parent is run's supervisor, whose parent is run (Linux;
    // elsewhere COMMAND's parent is run itself).
    let script = format!(
        "set -e; run=$(cut -d' ' -f4 /proc/$PPID/stat 2>/dev/null || echo $PPID); \
         for pid in $PPID $run; do \
           ln -s '{v}' '{c}/.lease.prom.'$pid'.tmp'; \
           ln -s '{e}' '{c}/.lease.json.'$pid'.tmp'; \
         done",
        v = victim.display(),
        e = elsewhere.display(),
        c = collector.display(),
    );
    let done = t.run([
        "run",
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--status-file",
        status.to_str().unwrap(),
        &url,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "run wrote its status through a link planted in {}",
        collector.display()
    );
    assert!(
        std::fs::symlink_metadata(&elsewhere).is_err(),
        "run made a file through a dangling link planted in {}",
        collector.display()
    );
    for path in [&metrics, &status] {
        let kind = std::fs::symlink_metadata(path).unwrap().file_type();
        assert!(kind.is_file(), "{} is not a regular file", path.display());
    }
    assert_eq!(
        held_line(&metrics),
        format!("bucket_lease_held{{key=\"{KEY}\"}} 0")
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(after["state"], "released", "{after}");
    for entry in std::fs::read_dir(&collector).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") {
            let target = std::fs::read_link(entry.path())
                .unwrap_or_else(|e| panic!("{name} is not a planted link ({e}): a temporary left"));
            assert!(
                target == victim || target == elsewhere,
                "{name} -> {target:?}"
            );
        }
    }
}

#[test]
fn the_metrics_file_says_not_held_while_run_waits() {
    let t = Target::fs("metrics-wait");
    let url = t.url("jobs/nightly");
    let mut holder = held_by_another(&t, &url);
    let metrics = t.path("waiting.prom");
    let waiter = t.spawn([
        "run",
        "--wait",
        "60",
        "--metrics-file",
        metrics.to_str().unwrap(),
        &url,
        "--",
        "true",
    ]);
    let text = cli_common::wait_for_file(&metrics, Duration::from_secs(20));
    assert!(
        text.contains(&format!("bucket_lease_held{{key=\"{KEY}\"}} 0")),
        "{text}"
    );
    if let Some(families) = parsed(&metrics) {
        assert_eq!(
            sample(&families, "bucket_lease_held", "bucket_lease_held", &[]),
            0.0
        );
    }
    cli_common::signal(&waiter, rustix::process::Signal::INT);
    let _ = cli_common::finish(waiter, Duration::from_secs(30));
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_metrics_file_that_cannot_be_written_stops_run_before_the_acquire() {
    let t = Target::fs("metrics-missing-dir");
    let url = t.url("jobs/nightly");
    let metrics = t.path("no-such-dir").join("lease.prom");
    let done = t.run([
        "run",
        "--metrics-file",
        metrics.to_str().unwrap(),
        &url,
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(CONFIG), "{done:?}");
    assert!(done.stderr.contains("--metrics-file"), "{}", done.stderr);
    assert!(done.stderr.contains("no-such-dir"), "{}", done.stderr);
    assert!(
        done.stderr.contains("check that its directory exists"),
        "{}",
        done.stderr
    );
    assert_eq!(t.inspect(&url)["state"], "free", "nothing was taken");
}

#[test]
fn a_run_that_never_takes_the_lease_leaves_files_that_say_exited_not_held() {
    let t = Target::fs("metrics-held");
    let url = t.url("jobs/nightly");
    let mut holder = held_by_another(&t, &url);
    let metrics = t.path("held.prom");
    let status = t.path("held.json");
    let done = t.run([
        "run",
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--status-file",
        status.to_str().unwrap(),
        &url,
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(cli_common::HELD), "{done:?}");
    assert_eq!(
        held_line(&metrics),
        format!("bucket_lease_held{{key=\"{KEY}\"}} 0")
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(after["state"], "exited", "{after}");
    assert_eq!(after["held"], false);
    assert_eq!(after["seconds_to_fence"], 0.0);
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn one_path_for_both_files_is_a_usage_error() {
    let t = Target::fs("metrics-same-path");
    let url = t.url("jobs/nightly");
    let both = t.path("lease.prom");
    let dotted = t.path(".").join("lease.prom");
    let done = t.run([
        "run",
        "--metrics-file",
        both.to_str().unwrap(),
        "--status-file",
        dotted.to_str().unwrap(),
        &url,
        "--",
        "true",
    ]);
    assert_eq!(done.code, Some(cli_common::USAGE), "{done:?}");
    assert!(
        done.stderr
            .contains("--metrics-file and --status-file name one file"),
        "{}",
        done.stderr
    );
    assert!(!both.exists(), "nothing written");
}
