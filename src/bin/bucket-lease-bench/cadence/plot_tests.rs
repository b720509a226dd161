//! The plot's tests (plot.rs): well-formed, escaped and finite SVG for
//! every shape of run, and what it draws.

use super::super::report::tests_support::{failed, landed, realistic, run};
use super::super::sample::Sample;
use super::*;

/// Why `svg` is not well-formed XML as far as a small checker sees: tags
/// balanced and properly nested, attributes quoted, `&` only in entities,
/// no `<` or `>` outside markup.
fn malformed(svg: &str) -> Option<String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = svg;
    let entity = |text: &str| -> Option<String> {
        for (i, _) in text.match_indices('&') {
            let tail = &text[i..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| tail.starts_with(e));
            if !ok {
                return Some(format!("a bare & in {text:?}"));
            }
        }
        if text.contains('>') {
            return Some(format!("a bare > in {text:?}"));
        }
        None
    };
    while let Some(start) = rest.find('<') {
        if let Some(e) = entity(&rest[..start]) {
            return Some(e);
        }
        let end = rest[start..].find('>')? + start;
        let tag = &rest[start + 1..end];
        if tag.contains('<') {
            return Some(format!("a < inside the tag {tag:?}"));
        }
        if !tag.matches('"').count().is_multiple_of(2) {
            return Some(format!("unbalanced quotes in {tag:?}"));
        }
        // Attribute values are between quotes: check them as text.
        for (i, value) in tag.split('"').enumerate() {
            if i % 2 == 1 {
                if let Some(e) = entity(value) {
                    return Some(e);
                }
            }
        }
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(top) if top == name => {}
                other => return Some(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') && !tag.starts_with('?') && !tag.starts_with('!') {
            open.push(tag.split_whitespace().next().unwrap_or(""));
        }
        rest = &rest[end + 1..];
    }
    if let Some(e) = entity(rest) {
        return Some(e);
    }
    if !open.is_empty() {
        return Some(format!("unclosed: {open:?}"));
    }
    None
}

/// A number in an attribute that is not finite (`NaN`, `inf`).
fn non_finite(svg: &str) -> Option<String> {
    svg.split('"')
        .skip(1)
        .step_by(2)
        .flat_map(|v| v.split([' ', ',', '(', ')']))
        .find(|t| t.contains("NaN") || t.contains("inf"))
        .map(|t| format!("{t:?} in an attribute"))
}

fn check(svg: &str) {
    assert!(
        svg.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg""#),
        "{svg}"
    );
    assert!(svg.contains(r#"viewBox="0 0 960 420""#), "{svg}");
    assert!(svg.contains(r#"fill="white""#), "a background: {svg}");
    assert!(svg.ends_with("</svg>\n"));
    assert_eq!(malformed(svg), None, "{svg}");
    assert_eq!(non_finite(svg), None, "{svg}");
}

#[test]
fn the_checker_finds_what_it_looks_for() {
    assert_eq!(malformed("<a><b/></a>"), None);
    assert!(malformed("<a><b></a>").is_some());
    assert!(malformed("<a>x & y</a>").is_some());
    assert!(malformed(r#"<a t="x<y"></a>"#).is_some());
    assert!(malformed(r#"<a t="1></a>"#).is_some());
    assert!(malformed("<a>").is_some());
    assert!(non_finite(r#"<a x="NaN"/>"#).is_some());
    assert!(non_finite(r#"<a points="1,2 inf,3"/>"#).is_some());
    assert_eq!(non_finite(r#"<a x="1.5"/>"#), None);
}

#[test]
fn a_realistic_run_draws_every_kind_of_mark() {
    let r = run(realistic(300));
    let svg = svg(&r);
    check(&svg);
    assert!(svg.contains("kept connection (294)"), "{svg}");
    assert!(svg.contains("new connection (4)"), "{svg}");
    assert!(
        svg.contains("did not land, drawn along the top (2)"),
        "{svg}"
    );
    assert!(svg.contains(&format!(r#"fill="{NEW}""#)));
    assert_eq!(svg.matches(&format!(r#"stroke="{FAILED}""#)).count(), 3); // 2 + legend
    assert!(svg.contains("<polyline"));
    for label in ["p50: 21.5 ms", "p99: 61 ms", "p99.9: 65 ms"] {
        assert!(svg.contains(label), "{label} missing");
    }
    // 21 to 65 ms is a linear axis; the 2 s budget is off it.
    assert!(!svg.contains("log scale"));
    assert!(svg.contains("smallest write budget 2 s (off the axis)"));
    assert!(svg.contains("298 of 300 renewals landed"));
}

#[test]
fn latencies_over_ten_times_apart_are_on_a_log_axis_with_the_budget() {
    let samples: Vec<Sample> = (0..50)
        .map(|i| landed(i, i as f64, if i == 7 { 1500.0 } else { 20.0 }))
        .collect();
    let svg = svg(&run(samples));
    check(&svg);
    assert!(svg.contains("(log scale)"));
    // 20 ms to 2 s: ticks at 1 and 3 of each decade, and the 2 s budget
    // drawn as a dashed line.
    for tick in [">30 ms<", ">100 ms<", ">300 ms<", ">1 s<"] {
        assert!(svg.contains(tick), "{tick} missing");
    }
    assert!(svg.contains("smallest write budget 2 s<"), "{svg}");
    assert!(svg.contains(r#"stroke-dasharray="6 4""#));
}

#[test]
fn text_is_escaped() {
    let mut r = run(realistic(3));
    r.url = "s3://b/<script>&\"'\u{1b}x".into();
    r.exclusion = "a<b".into();
    let svg = svg(&r);
    check(&svg);
    assert!(
        svg.contains("s3://b/&lt;script&gt;&amp;&quot;&apos;\u{fffd}x"),
        "{svg}"
    );
    assert!(svg.contains("a&lt;b"));
    assert!(!svg.contains("<script"));
    assert!(!svg.contains('\u{1b}'));
    let long = format!("s3://bucket/{}", "p".repeat(200));
    r.url = long;
    assert!(svg_title(&super::svg(&r)).chars().count() < 130);
}

fn svg_title(svg: &str) -> String {
    let start = svg.find(r#"font-weight="bold">"#).unwrap() + 19;
    svg[start..].split('<').next().unwrap().to_string()
}

#[test]
fn empty_single_and_failed_runs_draw() {
    for (name, samples) in [
        ("none", Vec::new()),
        ("one", vec![landed(0, 0.0, 21.0)]),
        ("zero latency", vec![landed(0, 0.0, 0.0)]),
        ("all failed", vec![failed(0, 0.0), failed(1, 0.25)]),
    ] {
        let svg = svg(&run(samples));
        check(&svg);
        assert!(svg.contains("</svg>"), "{name}");
    }
    let svg = svg(&run(vec![failed(0, 0.0), failed(1, 0.25)]));
    assert!(svg.contains("no renewal landed"));
    assert!(svg.contains("none of 2 renewals landed"));
    assert!(!svg.contains("<polyline"));
    let svg = super::svg(&run(Vec::new()));
    assert!(svg.contains("none of 0 renewals landed"));
}

#[test]
fn absurd_numbers_stay_finite() {
    let mut samples = vec![
        landed(0, 0.0, 1e300),
        landed(1, 1.0, f64::MAX),
        landed(2, 2.0, 20.0),
        landed(3, f64::NAN, 20.0),
        landed(4, -5.0, 20.0),
        landed(5, 1e308, 20.0),
        landed(6, 3.0, f64::INFINITY),
        landed(7, 4.0, f64::NAN),
        landed(8, 5.0, -3.0),
    ];
    samples[2].budget_ms = f64::NAN;
    samples[3].connection = Connection::New {
        connect_ms: f64::INFINITY,
        tls_ms: Some(f64::NAN),
    };
    let svg = svg(&run(samples));
    check(&svg);
    assert!(svg.contains("(log scale)"));
    // Only huge values: a linear axis up to f64::MAX.
    let svg = super::svg(&run(vec![landed(0, 0.0, f64::MAX), landed(1, 1.0, 0.0)]));
    check(&svg);
}

#[test]
fn a_long_run_draws_each_half_pixel_once() {
    // 100,000 renewals at the same two latencies: a few hundred dots.
    let samples: Vec<Sample> = (0..100_000)
        .map(|i| landed(i, i as f64 * 0.01, if i % 2 == 0 { 20.0 } else { 30.0 }))
        .collect();
    let svg = svg(&run(samples));
    check(&svg);
    let dots = svg.matches("<circle").count();
    assert!(dots < 2000, "{dots} dots");
    assert!(svg.len() < 200_000, "{} bytes", svg.len());
}

#[test]
fn scales_and_ticks() {
    let lin = latency_scale(&[21.0, 65.0]);
    assert!(!lin.log);
    assert_eq!((lin.lo, lin.hi), (0.0, 80.0));
    assert_eq!(lin.ticks(), [0.0, 20.0, 40.0, 60.0, 80.0]);
    let log = latency_scale(&[0.4, 20.0, 1500.0]);
    assert!(log.log);
    assert_eq!((log.lo, log.hi), (0.2, 2000.0));
    assert_eq!(log.ticks(), [1.0, 10.0, 100.0, 1000.0]);
    let narrow = latency_scale(&[15.0, 200.0]);
    assert_eq!(narrow.ticks(), [10.0, 20.0, 50.0, 100.0, 200.0]);
    let s = narrow.onto(0.0, 100.0);
    assert_eq!(
        (s.at(10.0), s.at(200.0), s.at(1e9), s.at(f64::NAN)),
        (0.0, 100.0, 100.0, 0.0)
    );
    assert_eq!(tick_label(0.5), "500 µs");
    assert_eq!(tick_label(20.0), "20 ms");
    assert_eq!(tick_label(1500.0), "1.5 s");
    assert_eq!(tick_label(1e300), "1e300 ms");
    assert_eq!(nice_step(70.0, 6.0), 20.0);
    assert_eq!(nice_step(0.0, 6.0), 1.0);
    assert_eq!(short_number(2e307), "2e307");
    let huge = latency_scale(&[f64::MAX, 0.0]);
    assert!(huge.ticks().iter().all(|t| t.is_finite() && *t <= f64::MAX));
}

/// Writes plots of synthetic runs into `$BUCKET_LEASE_PLOT_DIR` (default:
/// the temporary directory), to look at:
/// `cargo test --features cli --bin bucket-lease plot -- --ignored`.
/// `bucket-lease-plot.svg`: 300 renewals at 21 ms, new connections at 60
/// ms, two failures (a linear axis); `bucket-lease-plot-log.svg`: 4
/// leases over 10 minutes with a slow tail past the budget (a log axis).
#[test]
#[ignore = "writes files to look at"]
fn write_plots_to_look_at() {
    let dir = std::env::var("BUCKET_LEASE_PLOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let path = dir.join("bucket-lease-plot.svg");
    std::fs::write(&path, svg(&run(realistic(300)))).unwrap();
    eprintln!("wrote {}", path.display());
    let mut tail = run((0..2400u64)
        .map(|i| {
            let lease = (i % 4) as u32;
            let at = (i / 4) as f64 + f64::from(lease) * 0.25;
            // A spread from 15 ms, a slow tail every 97th, one 2.5 s.
            let ms = 15.0 + ((i * 7919) % 100) as f64 * 0.3 + if i % 97 == 0 { 400.0 } else { 0.0 };
            let ms = if i == 1500 { 2500.0 } else { ms };
            let mut s = if i % 211 == 0 {
                failed(i, at)
            } else {
                landed(i, at, ms)
            };
            s.lease = lease;
            s
        })
        .collect());
    tail.leases = 4;
    tail.interval = std::time::Duration::from_secs(1);
    tail.duration = std::time::Duration::from_secs(600);
    let path = dir.join("bucket-lease-plot-log.svg");
    std::fs::write(&path, svg(&tail)).unwrap();
    eprintln!("wrote {}", path.display());
}
