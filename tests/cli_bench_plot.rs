//! `bench --interval --plot` draws a plot a browser shows: the command's
//! SVG, screenshot by headless Chromium, is not a blank page, and its CSV
//! and JSON hold the same samples. `scripts/png_ink.py` judges the
//! screenshot (the share of non-white pixels, the colours); it is shown
//! to judge a white image blank, on its own and through Chromium.
//!
//! Chromium is `/usr/bin/chromium` (or `$BUCKET_LEASE_CHROMIUM`) and the
//! checker needs `python3`; without them the tests print a note and pass,
//! unless `BUCKET_LEASE_REQUIRE_CHROMIUM=1`, when they fail. No test
//! looks at a time.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::{output_within, Target};
use rustix::process::{kill_process_group, Pid, Signal};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one screenshot may take before Chromium counts as hung.
const CHROMIUM_LIMIT: Duration = Duration::from_secs(90);

/// The colour of the CDF's line (plot.rs `KEPT`): drawn whenever a
/// renewal landed.
const CDF_COLOUR: &str = "1f77b4";

/// A note and `None` when `what` is missing, or a failure under
/// `BUCKET_LEASE_REQUIRE_CHROMIUM=1`.
fn missing<T>(test: &str, what: &str) -> Option<T> {
    let note = format!(
        "{what} (apt-get install -y --no-install-recommends chromium python3; \
         BUCKET_LEASE_REQUIRE_CHROMIUM=1 makes this a failure)"
    );
    assert!(
        std::env::var("BUCKET_LEASE_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
        "{test}: {note}"
    );
    eprintln!("note: skipping {test}: {note}");
    None
}

fn python(test: &str) -> Option<()> {
    let found = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        Some(())
    } else {
        missing(test, "python3 is not installed")
    }
}

fn chromium(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("BUCKET_LEASE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.is_file() {
        Some(path)
    } else {
        missing(test, &format!("{} is not installed", path.display()))
    }
}

/// `scripts/png_ink.py ARGS`: its exit code and what it printed.
fn png_ink(args: &[&str]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/png_ink.py");
    let out = output_within(
        Command::new("python3").arg(script).args(args),
        Duration::from_secs(60),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// `svg` as Chromium shows it, written to `png`, in a window of 1000 ×
/// 460 with a profile of its own under `scratch`. Chromium and every
/// process it started are killed if it takes longer than
/// [`CHROMIUM_LIMIT`].
fn screenshot(chromium: &Path, svg: &Path, png: &Path, scratch: &Path) {
    let profile = scratch.join(format!(
        "chromium-profile-{}",
        png.file_stem().unwrap().to_string_lossy()
    ));
    let log = scratch.join(format!(
        "chromium-{}.log",
        png.file_stem().unwrap().to_string_lossy()
    ));
    let log_file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1000,460",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        // Its own process group: a hung Chromium is killed with its
        // helpers (zygote, renderer, GPU process).
        .process_group(0)
        .spawn()
        .expect("chromium starts");
    let pid = Pid::from_child(&child);
    let deadline = Instant::now() + CHROMIUM_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = kill_process_group(pid, Signal::KILL);
            let _ = child.wait();
            panic!(
                "chromium did not exit within {CHROMIUM_LIMIT:?}; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Helpers left behind would hold the profile: end the group.
    let _ = kill_process_group(pid, Signal::KILL);
    assert!(
        status.success() && png.is_file(),
        "chromium failed ({status}) or wrote no {}; its log:\n{}",
        png.display(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// `path` parses as XML whose root is an SVG element (Python's parser:
/// Chromium shows a page of its own, which has ink, for an SVG that does
/// not parse).
fn assert_svg_parses(path: &Path) {
    let out = output_within(
        Command::new("python3").args([
            "-c",
            "import sys, xml.etree.ElementTree as E\n\
             root = E.parse(sys.argv[1]).getroot()\n\
             assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag\n\
             print(len(list(root.iter())), 'elements')",
            &path.display().to_string(),
        ]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{} is not an SVG document: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The checker can fail: it judges a white image blank, and its own
/// decoder (every PNG filter type) right.
#[test]
fn the_ink_checker_judges_a_white_image_blank() {
    let test = "the_ink_checker_judges_a_white_image_blank";
    let Some(()) = python(test) else { return };
    let (code, text) = png_ink(&["--self-test"]);
    assert_eq!(code, Some(0), "{text}");
    let t = Target::fs("png-ink");
    let white = t.path("white.png");
    let (code, text) = png_ink(&["--write-blank", white.to_str().unwrap(), "1000", "460"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = png_ink(&[white.to_str().unwrap()]);
    assert_eq!(code, Some(1), "a white image has ink? {text}");
    assert!(text.contains("blank"), "{text}");
    let (code, text) = png_ink(&[t.path("none.png").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
}

/// Through Chromium: an SVG with nothing on it comes out blank, one with
/// a line and dots does not, and the line's colour is found.
#[test]
fn chromium_screenshots_are_judged_by_their_ink() {
    let test = "chromium_screenshots_are_judged_by_their_ink";
    let (Some(()), Some(chromium)) = (python(test), chromium(test)) else {
        return;
    };
    let t = Target::fs("png-ink-chromium");
    let head = r#"<svg xmlns="http://www.w3.org/2000/svg" width="960" height="420" viewBox="0 0 960 420"><rect x="0" y="0" width="960" height="420" fill="white"/>"#;
    let empty = t.path("empty.svg");
    std::fs::write(&empty, format!("{head}</svg>\n")).unwrap();
    let drawn = t.path("drawn.svg");
    let dots: String = (0..40)
        .map(|i| {
            format!(
                r##"<circle cx="{}" cy="200" r="6" fill="#ff7f0e"/>"##,
                100 + i * 20
            )
        })
        .collect();
    std::fs::write(
        &drawn,
        format!(
            r##"{head}<polyline points="80,380 200,100 900,60" fill="none" stroke="#{CDF_COLOUR}" stroke-width="8"/>{dots}<text x="20" y="30" font-size="20">a &amp; b</text></svg>
"##
        ),
    )
    .unwrap();
    for svg in [&empty, &drawn] {
        assert_svg_parses(svg);
    }
    let (empty_png, drawn_png) = (t.path("empty.png"), t.path("drawn.png"));
    screenshot(&chromium, &empty, &empty_png, &t.path(""));
    screenshot(&chromium, &drawn, &drawn_png, &t.path(""));
    let (code, text) = png_ink(&[empty_png.to_str().unwrap()]);
    assert_eq!(code, Some(1), "an empty SVG has ink? {text}");
    let (code, text) = png_ink(&[
        drawn_png.to_str().unwrap(),
        "--expect-colour",
        CDF_COLOUR,
        "--expect-colour",
        "ff7f0e",
    ]);
    assert_eq!(code, Some(0), "a drawn SVG is blank? {text}");
}

/// The command's plot of a short open-loop run on a directory shows in
/// Chromium, and its CSV and JSON have a line and an entry per sample.
#[test]
fn bench_plot_shows_in_a_browser() {
    let test = "bench_plot_shows_in_a_browser";
    let (Some(()), Some(chromium)) = (python(test), chromium(test)) else {
        return;
    };
    let t = Target::fs("bench-plot");
    let url = t.url("job");
    let (svg, csv, png) = (t.path("out.svg"), t.path("out.csv"), t.path("out.png"));
    let done = t.bench([
        "--ttl",
        "3",
        "--interval",
        "250ms",
        "--duration",
        "3s",
        "--plot",
        svg.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--json",
        url.as_str(),
    ]);
    assert_eq!(done.code, Some(0), "{done:?}");
    let report: Value = serde_json::from_str(&done.stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON ({e}): {}", done.stdout));
    assert_eq!(report["mode"], "cadence", "{report}");
    let samples = report["samples"].as_array().expect("a samples array");
    assert!(!samples.is_empty(), "no renewal in 3 s: {report}");
    let landed = samples
        .iter()
        .filter(|s| s["latency_ms"].is_number())
        .count();
    assert_eq!(report["renew"]["count"], landed, "{report}");
    assert_eq!(
        report["renew"]["p50_ms"].is_number(),
        landed > 0,
        "{report}"
    );

    let csv = std::fs::read_to_string(&csv).expect("the CSV is written");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("lease,seq,scheduled_s,latency_ms,"),
        "{csv}"
    );
    assert_eq!(lines.len(), samples.len() + 1, "{csv}");

    let text = std::fs::read_to_string(&svg).expect("the plot is written");
    assert!(
        text.starts_with("<svg") && text.contains("viewBox"),
        "{text}"
    );
    assert_svg_parses(&svg);
    screenshot(&chromium, &svg, &png, &t.path(""));
    let mut args = vec![png.to_str().unwrap()];
    if landed > 0 {
        args.extend(["--expect-colour", CDF_COLOUR]);
    }
    let (code, text) = png_ink(&args);
    assert_eq!(code, Some(0), "the plot shows blank in Chromium: {text}");
}
