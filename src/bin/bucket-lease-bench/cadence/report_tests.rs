//! The report's tests (report.rs), on synthetic samples.

use super::tests_support::{failed, landed, realistic, run};
use super::*;

fn bounds(low_ms: f64, high_ms: f64) -> Option<OffsetBounds> {
    Some(OffsetBounds { low_ms, high_ms })
}

#[test]
fn percentiles_are_the_nearest_rank_of_measure() {
    let ms: Vec<f64> = (1..=1000).rev().map(|i| f64::from(i) * 0.5).collect();
    let durations: Vec<Duration> = ms
        .iter()
        .map(|m| Duration::from_secs_f64(m / 1000.0))
        .collect();
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    for p in [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
        let ours = percentile(&sorted, p).unwrap();
        let theirs = measure::percentile(&durations, p).unwrap();
        assert!(
            (ours - theirs.as_secs_f64() * 1000.0).abs() < 1e-6,
            "p{p}: {ours} vs {theirs:?}"
        );
    }
    assert_eq!(percentile(&[], 50.0), None);
    let s = Stats::of(vec![3.0, 1.0, 2.0, 6.0]).unwrap();
    assert_eq!((s.count, s.p50, s.max, s.mean), (4, 2.0, 6.0, 3.0));
    assert_eq!(Stats::of(Vec::new()), None);
}

#[test]
fn the_summary_counts_every_renewal() {
    let sum = summary(&realistic(300));
    assert_eq!(sum.due, 300);
    let renew = sum.renew.unwrap();
    assert_eq!(renew.count, 298);
    assert_eq!(renew.p50, 21.5);
    assert_eq!(renew.max, 65.0);
    assert_eq!(sum.fenced, 2);
    assert_eq!((sum.retries, sum.retried), (4, 2));
    let answers: Vec<(&str, usize)> = sum.answers.iter().map(|(l, n)| (&**l, *n)).collect();
    assert_eq!(answers, [("200", 298), ("503", 1), ("timeout", 1)]);
    assert_eq!((sum.new, sum.kept, sum.unknown), (4, 294, 2));
    assert_eq!(sum.connect.unwrap().max, 1.5);
    assert_eq!(sum.tls.unwrap().p50, 30.0);
    assert_eq!(sum.headroom_min, Some(2000.0 - 65.0));
    assert_eq!(sum.offset, None);
}

#[test]
fn a_renewal_that_lands_past_its_budget_would_have_fenced() {
    let late = Sample {
        budget_ms: 40.0,
        ..landed(0, 0.0, 60.0)
    };
    let sum = summary(&[late, landed(1, 0.25, 21.0)]);
    assert_eq!(sum.fenced, 1);
    assert_eq!(sum.headroom_min, Some(-20.0));
    assert_eq!(sum.renew.unwrap().count, 2);
}

#[test]
fn the_clock_offset_is_the_intersection_of_the_bounds() {
    let with = |bs: &[(f64, f64)]| -> Vec<Sample> {
        bs.iter()
            .enumerate()
            .map(|(i, (l, h))| Sample {
                offset: bounds(*l, *h),
                ..landed(i as u64, i as f64, 20.0)
            })
            .collect()
    };
    let o = summary(&with(&[(-500.0, 500.0), (-200.0, 800.0), (-300.0, 300.0)]))
        .offset
        .unwrap();
    assert_eq!(
        (o.low_ms, o.high_ms, o.consistent, o.answers),
        (-200.0, 300.0, true, 3)
    );
    let r = run(with(&[(-500.0, 500.0), (-200.0, 800.0), (-300.0, 300.0)]));
    let text = render_text(&r).join("\n");
    assert!(text.contains("all 3 Date headers agree"), "{text}");
    assert!(text.contains("within budget"), "{text}");
    assert_eq!(to_json(&r)["clock_offset_ms"]["within_budget"], true);

    // Disjoint bounds: the hull, and said so.
    let o = summary(&with(&[(-500.0, -400.0), (100.0, 200.0)]))
        .offset
        .unwrap();
    assert_eq!((o.low_ms, o.high_ms, o.consistent), (-500.0, 200.0, false));
    let text = render_text(&run(with(&[(-500.0, -400.0), (100.0, 200.0)]))).join("\n");
    assert!(text.contains("do not agree"), "{text}");

    // A service 1.2 to 1.8 s ahead, with a budget of 1 s (TTL 3 s).
    let r = run(with(&[(1200.0, 1800.0)]));
    let text = render_text(&r).join("\n");
    assert!(text.contains("OVER budget"), "{text}");
    let json = to_json(&r);
    assert_eq!(json["clock_offset_ms"]["within_budget"], false);
    assert_eq!(json["clock_offset_ms"]["skew_budget"], 1000.0);
    assert_eq!(json["clock_offset_ms"]["consistent"], true);

    let text = render_text(&run(realistic(10))).join("\n");
    assert!(text.contains("clock offset: not measured"), "{text}");
}

#[test]
fn the_series_counts_each_second() {
    let mut samples = realistic(12); // 0, 0.25, … 2.75 s
    samples[5] = failed(5, 1.25);
    let s = series(&samples, 1);
    assert_eq!(s.len(), 3);
    assert_eq!((s[0].start_s, s[0].due, s[0].landed), (0, 4, 4));
    assert_eq!(
        (s[1].due, s[1].landed, s[1].fenced, s[1].non_200),
        (4, 3, 1, 1)
    );
    assert_eq!(s[0].max_ms, Some(60.0)); // the new connection at 0 s
    let wide = series(&samples, 2);
    assert_eq!(wide.len(), 2);
    assert_eq!((wide[0].start_s, wide[0].due, wide[1].start_s), (0, 8, 2));
}

#[test]
fn the_text_says_what_happened() {
    let lines = render_text(&run(realistic(300)));
    let text = lines.join("\n");
    for part in [
        "298 landed of 300 due",
        "p50 21.5 ms",
        "p99.9 65.0 ms",
        "answers: 200 ×298, 5xx ×1, timeout ×1",
        "4 new (connect p50 1.50 ms, max 1.50 ms; TLS p50 30.0 ms, max 30.0 ms), 294 kept",
        "retries: 4 (in 2 of 300 renewals)",
        "fenced: 2 of 300 renewals would have fenced",
        "min 1935.0 ms, p1 1939.0 ms",
        // 75 s of schedule: 1 s and 2 s rows are too many.
        "per 5 s of the schedule",
    ] {
        assert!(text.contains(part), "{part:?} missing from\n{text}");
    }
    let series_at = lines
        .iter()
        .position(|l| l.contains("of the schedule"))
        .unwrap();
    let rows = &lines[series_at + 2..];
    assert_eq!(rows.len(), 15, "{rows:#?}");
    assert!(rows[0].trim_start().starts_with("0–4 "), "{rows:#?}");
    assert!(lines.iter().any(|l| l.contains("< 50 ms")), "a histogram");

    let short = render_text(&run(realistic(8))).join("\n");
    assert!(short.contains("per second of the schedule"), "{short}");
    let none = render_text(&run(Vec::new())).join("\n");
    assert!(none.contains("(none landed)"), "{none}");
    assert!(none.contains("0 of 0 renewals"), "{none}");
    let all_failed = render_text(&run(vec![failed(0, 0.0), failed(1, 0.25)])).join("\n");
    assert!(
        all_failed.contains("2 of 2 renewals would have fenced"),
        "{all_failed}"
    );
}

#[test]
fn milliseconds_read_as_durations_do() {
    assert_eq!(fmt_ms(0.85), "850 µs");
    assert_eq!(fmt_ms(21.25), "21.2 ms");
    assert_eq!(fmt_ms(-65.0), "-65.0 ms");
    assert_eq!(fmt_ms(12_000.0), "12.0 s");
    assert_eq!(fmt_ms(1e300), "1e300 ms");
    assert_eq!(fmt_ms(f64::NAN), "NaN ms");
}

#[test]
fn the_json_has_the_figures_and_every_sample() {
    let r = run(realistic(300));
    let j = to_json(&r);
    assert_eq!(j["mode"], "cadence");
    assert_eq!(j["interval_s"], 0.25);
    assert_eq!(j["duration_s"], 3.0);
    assert_eq!(j["ttl_s"], 3);
    assert_eq!(j["exclusion"], "conditional");
    assert_eq!(j["renew"]["count"], 298);
    assert_eq!(j["renew"]["p50_ms"], 21.5);
    assert_eq!(j["renew"]["max_ms"], 65.0);
    for key in ["p90_ms", "p99_ms", "p999_ms", "mean_ms"] {
        assert!(j["renew"][key].is_f64(), "{key}: {}", j["renew"]);
    }
    assert_eq!(j["fenced"], 2);
    assert_eq!(j["retries"], 4);
    assert_eq!(j["answers"], json!({ "200": 298, "503": 1, "timeout": 1 }));
    assert_eq!(j["connections"]["new"], 4);
    assert_eq!(j["connections"]["tls_ms"]["max"], 30.0);
    assert_eq!(j["headroom_ms"]["min"], 1935.0);
    assert_eq!(j["series"].as_array().unwrap().len(), 75);
    assert_eq!(j["series"][25]["non_200"], 1);
    let s = &j["samples"][100];
    assert_eq!(s["answer"], "timeout");
    assert_eq!(s["latency_ms"], Value::Null);
    assert_eq!(s["fenced"], true);
    assert_eq!(j["samples"][50]["connection"], "new");
    assert_eq!(j["samples"][50]["connect_ms"], 1.5);

    let empty = to_json(&run(Vec::new()));
    assert_eq!(empty["renew"]["count"], 0);
    assert_eq!(empty["renew"]["p50_ms"], Value::Null);
    assert_eq!(empty["samples"], json!([]));
}

#[test]
fn samples_read_back_from_the_json_are_the_samples() {
    let mut samples = realistic(300);
    samples[7].offset = bounds(-250.5, 740.125);
    samples[8].connection = Connection::New {
        connect_ms: 0.25,
        tls_ms: None,
    };
    samples[9].answer = Answer::NotSent;
    samples[10].answer = Answer::Failed;
    samples[11].lease = 4;
    let j = to_json(&run(samples.clone()));
    // Through text, as a file is read.
    let read: Value = serde_json::from_str(&j.to_string()).unwrap();
    assert_eq!(samples_from_json(&read), Ok(samples.clone()));
    assert_eq!(samples_from_json(&read["samples"]), Ok(samples));

    let mut bad = read.clone();
    bad["samples"][3]["answer"] = json!("maybe");
    assert_eq!(
        samples_from_json(&bad),
        Err("samples[3]: unknown answer \"maybe\"".into())
    );
    let mut bad = read.clone();
    bad["samples"][0]
        .as_object_mut()
        .unwrap()
        .remove("budget_ms");
    assert_eq!(
        samples_from_json(&bad),
        Err("samples[0]: no field \"budget_ms\"".into())
    );
    let mut bad = read;
    bad["samples"][2]["offset_high_ms"] = json!(5.0);
    assert!(samples_from_json(&bad).unwrap_err().contains("samples[2]"));
    assert!(samples_from_json(&json!({ "rows": [] }))
        .unwrap_err()
        .contains("no \"samples\""));
}

#[test]
fn the_csv_has_a_line_per_sample() {
    let mut samples = realistic(5);
    samples[1] = failed(1, 0.25);
    samples[2].offset = bounds(-10.0, 990.0);
    let mut out = Vec::new();
    write_csv(&run(samples), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], CSV_COLUMNS.join(","));
    assert_eq!(
        lines[1],
        "0,0,0.0,60.0,0.5,200,1,new,1.5,30.0,2000.0,1940.0,false,,"
    );
    assert_eq!(lines[2], "0,1,0.25,,0.5,timeout,3,unknown,,,2000.0,,true,,");
    assert!(lines[3].ends_with(",false,-10.0,990.0"), "{}", lines[3]);
    for line in &lines {
        assert_eq!(line.split(',').count(), CSV_COLUMNS.len(), "{line}");
    }
    assert_eq!(csv_cell("plain"), "plain");
    assert_eq!(csv_cell("a,\"b\""), "\"a,\"\"b\"\"\"");
    assert_eq!(csv_cell("two\nlines"), "\"two\nlines\"");
}

/// Renewals the plan scheduled but never sampled (a lease that fenced is
/// renewed no more) are told apart from those due: 3 s at 250 ms is 12.
#[test]
fn renewals_not_reached_are_counted_against_the_plan() {
    let r = run(vec![landed(0, 0.25, 21.0), failed(1, 0.5)]);
    assert_eq!(r.scheduled(), 12);
    assert_eq!(to_json(&r)["scheduled"], 12);
    assert_eq!(to_json(&r)["due"], 2);
    let text = render_text(&r).join("\n");
    assert!(
        text.contains("not reached: 10 of 12 scheduled renewals"),
        "{text}"
    );
    let full = run((0..12)
        .map(|i| landed(i, 0.25 * (i + 1) as f64, 21.0))
        .collect());
    assert!(!render_text(&full).join("\n").contains("not reached"));
}
