//! `bench --compare A.json B.json`: the renewal latencies of two bench
//! runs side by side, with their difference and ratio.
//!
//! What it promises:
//!
//! - It reads either kind of `bench --json`: an open-loop run's (`"mode":
//!   "cadence"`: the latencies of its landed samples, its fenced renewals
//!   and its answers other than 200) and a back-to-back run's (its
//!   `renew.samples_ms`, every renewal's latency; from an older run without
//!   them, its `renew.p50_ms`, `p90_ms`, `p99_ms` and `max_ms`).
//! - Percentiles are nearest rank, computed as the report computes them
//!   (`report::Stats`), so the same samples give the same figures here and
//!   in the run's own table.
//! - A figure one run lacks is shown as `-`, with no difference or ratio;
//!   a file that is not a bench output is refused, naming the file and
//!   the field that is missing.

use super::report::{fmt_ms, samples_from_json, Stats};
use super::sample::Answer;
use crate::measure;
use serde_json::Value;

/// The figures of one run's renewals.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    /// `open loop` or `back-to-back`, with the renewal count.
    what: String,
    /// p50, p90, p99, p99.9, max and mean, when known.
    latency: [Option<f64>; 6],
    /// How many latencies.
    count: Option<u64>,
    /// Renewals that would have fenced (open loop only).
    fenced: Option<u64>,
    /// Renewals answered anything but 200 (open loop only).
    non_200: Option<u64>,
}

const ROWS: [&str; 6] = ["p50", "p90", "p99", "p99.9", "max", "mean"];

fn of_stats(s: Option<Stats>) -> [Option<f64>; 6] {
    match s {
        Some(s) => [s.p50, s.p90, s.p99, s.p999, s.max, s.mean].map(Some),
        None => [None; 6],
    }
}

/// The figures of one bench output, or why it is not one (`name` is the
/// file, for the message).
fn figures(run: &Value, name: &str) -> Result<Figures, String> {
    if !run.is_object() {
        return Err(format!("{name}: not a bench output (not a JSON object)"));
    }
    if run["mode"] == "cadence" {
        let samples = samples_from_json(run).map_err(|e| format!("{name}: {e}"))?;
        let landed: Vec<f64> = samples.iter().filter_map(|s| s.latency_ms).collect();
        let count = landed.len() as u64;
        return Ok(Figures {
            what: format!("open loop, {count} of {} renewals landed", samples.len()),
            latency: of_stats(Stats::of(landed)),
            count: Some(count),
            fenced: Some(samples.iter().filter(|s| s.fenced()).count() as u64),
            non_200: Some(
                samples
                    .iter()
                    .filter(|s| s.answer != Answer::Status(200))
                    .count() as u64,
            ),
        });
    }
    let renew = run.get("renew").filter(|r| r.is_object()).ok_or_else(|| {
        format!(
            "{name}: not a bench output: no \"renew\" object (a back-to-back run) and no \
                 \"mode\": \"cadence\" (an open-loop run)"
        )
    })?;
    if let Some(list) = renew.get("samples_ms") {
        let values = list
            .as_array()
            .and_then(|l| l.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
            .ok_or_else(|| format!("{name}: \"renew.samples_ms\" is not an array of numbers"))?;
        let count = values.len() as u64;
        return Ok(Figures {
            what: format!("back-to-back, {count} renewals"),
            latency: of_stats(Stats::of(values)),
            count: Some(count),
            fenced: None,
            non_200: None,
        });
    }
    let field = |key: &str| renew.get(key).and_then(Value::as_f64);
    let latency = [
        field("p50_ms"),
        field("p90_ms"),
        field("p99_ms"),
        None,
        field("max_ms"),
        None,
    ];
    if latency.iter().all(Option::is_none) {
        return Err(format!(
            "{name}: not a bench output: \"renew\" has neither \"samples_ms\" nor \"p50_ms\""
        ));
    }
    let count = renew.get("samples").and_then(Value::as_u64);
    Ok(Figures {
        what: format!(
            "back-to-back, {} renewals (percentiles only)",
            count.map_or_else(|| "?".to_string(), |c| c.to_string())
        ),
        latency,
        count,
        fenced: None,
        non_200: None,
    })
}

/// `b − a` and `b ÷ a` as table cells.
fn difference(a: Option<f64>, b: Option<f64>, fmt: fn(f64) -> String) -> [String; 2] {
    match (a, b) {
        (Some(a), Some(b)) => {
            let d = b - a;
            let sign = if d > 0.0 { "+" } else { "" };
            let ratio = if a == 0.0 {
                "-".to_string()
            } else {
                format!("{:.2}x", b / a)
            };
            [format!("{sign}{}", fmt(d)), ratio]
        }
        _ => ["-".to_string(), "-".to_string()],
    }
}

/// The table comparing run `b` with run `a` (`a_name` and `b_name` are
/// their files): a line naming each, then rows p50, p90, p99, p99.9, max,
/// mean, count, and (when either run has them) fenced and non-200, with
/// columns A, B, B − A and B ÷ A.
///
/// # Errors
///
/// A file that is not a bench output, naming it and the field.
pub fn compare(a: &Value, b: &Value, a_name: &str, b_name: &str) -> Result<Vec<String>, String> {
    let (fa, fb) = (figures(a, a_name)?, figures(b, b_name)?);
    let dash = |x: Option<f64>, fmt: fn(f64) -> String| x.map_or_else(|| "-".to_string(), fmt);
    let count = |x: f64| format!("{x:.0}");
    let mut cells = vec![["renew", "A", "B", "B − A", "B ÷ A"]
        .map(String::from)
        .to_vec()];
    let mut row = |label: &str, x: Option<f64>, y: Option<f64>, fmt: fn(f64) -> String| {
        let [d, r] = difference(x, y, fmt);
        cells.push(vec![label.to_string(), dash(x, fmt), dash(y, fmt), d, r]);
    };
    for (i, label) in ROWS.iter().enumerate() {
        row(label, fa.latency[i], fb.latency[i], fmt_ms);
    }
    let float = |x: Option<u64>| x.map(|x| x as f64);
    row("count", float(fa.count), float(fb.count), count);
    for (label, x, y) in [
        ("fenced", fa.fenced, fb.fenced),
        ("non-200", fa.non_200, fb.non_200),
    ] {
        if x.is_some() || y.is_some() {
            row(label, float(x), float(y), count);
        }
    }
    let mut out = vec![
        format!("A: {a_name} ({})", fa.what),
        format!("B: {b_name} ({})", fb.what),
    ];
    out.extend(measure::render_text(&cells));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::report::tests_support::{failed, landed, run};
    use super::super::report::to_json;
    use super::*;
    use serde_json::json;

    /// The cell of `row` under the column whose header starts with
    /// `column`.
    fn cell(lines: &[String], row: &str, column: usize) -> String {
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(row))
            .unwrap_or_else(|| panic!("no row {row} in {lines:#?}"));
        // Cells are separated by two spaces or more.
        let cells: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        cells[column].to_string()
    }

    fn cadence(latencies: &[f64], failures: u64) -> Value {
        let mut samples: Vec<_> = latencies
            .iter()
            .enumerate()
            .map(|(i, l)| landed(i as u64, i as f64 * 0.25, *l))
            .collect();
        let n = samples.len() as u64;
        samples.extend((0..failures).map(|i| failed(n + i, (n + i) as f64 * 0.25)));
        to_json(&run(samples))
    }

    #[test]
    fn two_open_loop_runs() {
        let a = cadence(&[20.0; 100], 0);
        let mut slow = vec![40.0; 99];
        slow.push(400.0);
        let b = cadence(&slow, 2);
        let lines = compare(&a, &b, "a.json", "b.json").unwrap();
        assert!(
            lines[0].starts_with("A: a.json (open loop, 100 of 100"),
            "{lines:#?}"
        );
        assert!(
            lines[1].contains("100 of 102 renewals landed"),
            "{lines:#?}"
        );
        assert_eq!(cell(&lines, "p50", 1), "20.0 ms");
        assert_eq!(cell(&lines, "p50", 2), "40.0 ms");
        assert_eq!(cell(&lines, "p50", 3), "+20.0 ms");
        assert_eq!(cell(&lines, "p50", 4), "2.00x");
        assert_eq!(cell(&lines, "max", 2), "400.0 ms");
        assert_eq!(cell(&lines, "max", 4), "20.00x");
        assert_eq!(cell(&lines, "p99", 2), "40.0 ms");
        assert_eq!(cell(&lines, "mean", 2), "43.6 ms");
        assert_eq!(cell(&lines, "count", 1), "100");
        assert_eq!(cell(&lines, "fenced", 2), "2");
        assert_eq!(cell(&lines, "fenced", 3), "+2");
        assert_eq!(cell(&lines, "fenced", 4), "-"); // 2 ÷ 0
        assert_eq!(cell(&lines, "non-200", 2), "2");
        // Faster: a negative difference.
        let back = compare(&b, &a, "b.json", "a.json").unwrap();
        assert_eq!(cell(&back, "p50", 3), "-20.0 ms");
        assert_eq!(cell(&back, "p50", 4), "0.50x");
    }

    #[test]
    fn a_back_to_back_run_with_and_without_its_samples() {
        let with = json!({
            "iterations": 2,
            "renew": { "samples": 4, "p50_ms": 9.0, "samples_ms": [10.0, 12.0, 14.0, 16.0] },
        });
        let without = json!({
            "renew": { "samples": 20, "p50_ms": 10.0, "p90_ms": 11.0, "p99_ms": 30.0, "max_ms": 31.0 },
        });
        let open = cadence(&[20.0, 20.0, 30.0, 40.0], 0);
        let lines = compare(&with, &open, "b2b.json", "open.json").unwrap();
        assert!(lines[0].contains("back-to-back, 4 renewals"), "{lines:#?}");
        // From the samples, not from the stored p50.
        assert_eq!(cell(&lines, "p50", 1), "12.0 ms");
        assert_eq!(cell(&lines, "p50", 4), "1.67x");
        assert_eq!(cell(&lines, "mean", 1), "13.0 ms");
        assert_eq!(cell(&lines, "fenced", 1), "-");
        assert_eq!(cell(&lines, "fenced", 2), "0");
        assert_eq!(cell(&lines, "fenced", 3), "-");

        let lines = compare(&without, &with, "old.json", "new.json").unwrap();
        assert!(
            lines[0].contains("20 renewals (percentiles only)"),
            "{lines:#?}"
        );
        assert_eq!(cell(&lines, "p99", 1), "30.0 ms");
        assert_eq!(cell(&lines, "p99", 2), "16.0 ms");
        assert_eq!(cell(&lines, "p99.9", 1), "-");
        assert_eq!(cell(&lines, "p99.9", 3), "-");
        assert_eq!(cell(&lines, "count", 3), "-16");
        assert!(!lines.iter().any(|l| l.starts_with("fenced")), "{lines:#?}");
    }

    #[test]
    fn what_is_not_a_bench_output_is_refused_by_name() {
        let good = cadence(&[20.0], 0);
        let err = |v: Value| compare(&good, &v, "good.json", "other.json").unwrap_err();
        assert!(err(json!([1, 2])).starts_with("other.json: not a bench output"));
        let e = err(json!({ "rows": [] }));
        assert!(
            e.starts_with("other.json:") && e.contains("\"renew\""),
            "{e}"
        );
        let e = err(json!({ "renew": { "samples_ms": [1.0, "x"] } }));
        assert!(e.contains("renew.samples_ms"), "{e}");
        let e = err(json!({ "renew": { "samples": 3 } }));
        assert!(e.contains("\"p50_ms\""), "{e}");
        let e = err(json!({ "mode": "cadence", "samples": [{ "lease": 0 }] }));
        assert!(e.starts_with("other.json: samples[0]: no field"), "{e}");
        let e = compare(&json!(null), &good, "first.json", "good.json").unwrap_err();
        assert!(e.starts_with("first.json:"), "{e}");
    }
}
