//! `bench --interval --plot OUT.svg`: a run drawn as one standalone SVG
//! (written by hand: no plotting crate), 960 × 420.
//!
//! What it promises:
//!
//! - Left, the latency CDF of the landed renewals: latency on x (log scale
//!   when the latencies span more than 10×, else linear from 0), with
//!   labelled ticks; 0–100 % on y; p50, p99 and p99.9 marked and listed.
//! - Right, the run in time: one dot per landed renewal at its scheduled
//!   second and latency (same latency scale), kept and new connections in
//!   two colours (and a third for a store that does not tell), every
//!   renewal that did not land as a cross along the top, and a dashed line
//!   at the smallest write budget when it falls on the axis.
//! - A title (URL, interval, duration, leases, TTL), a line of figures, a
//!   legend, axis labels. Every text is XML-escaped, characters XML cannot
//!   hold are replaced, and every number written is finite, whatever the
//!   samples hold; 0 samples, 1 sample or none landed draw an empty but
//!   labelled panel.
//! - It opens in a browser as it is: `xmlns`, `viewBox` and a white
//!   background. Dots that would fall on the same half pixel are drawn
//!   once, so a long run stays a small file.

use super::report::{percentile, summary, Run};
use super::sample::Connection;
use std::collections::HashSet;
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 420.0;
/// The plot areas: left, right, top, bottom.
const CDF: Area = Area {
    x0: 78.0,
    x1: 448.0,
    y0: 92.0,
    y1: 356.0,
};
const TIME: Area = Area {
    x0: 548.0,
    x1: 938.0,
    y0: 92.0,
    y1: 356.0,
};
const KEPT: &str = "#1f77b4";
const NEW: &str = "#ff7f0e";
const UNTOLD: &str = "#2ca02c";
const FAILED: &str = "#d62728";
const BUDGET: &str = "#7b3294";
const GRID: &str = "#e6e6e6";
const INK: &str = "#333333";

#[derive(Debug, Clone, Copy)]
struct Area {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

/// A value axis: `lo`..`hi` onto pixels `p0`..`p1`, linear or log.
#[derive(Debug, Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    p0: f64,
    p1: f64,
}

impl Scale {
    /// Where `v` falls, clamped to the axis (NaN at its start).
    fn at(&self, v: f64) -> f64 {
        let t = if self.log {
            let (lo, hi) = (self.lo.log10(), self.hi.log10());
            (v.max(self.lo).log10() - lo) / (hi - lo)
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        self.p0 + t * (self.p1 - self.p0)
    }

    fn contains(&self, v: f64) -> bool {
        v >= self.lo && v <= self.hi
    }

    fn onto(self, p0: f64, p1: f64) -> Scale {
        Scale { p0, p1, ..self }
    }

    /// The ticks: decades on a log axis (with 2 and 5 between over two
    /// decades or less, 3 over three), 1-2-5 steps on a linear one; at
    /// most about 9.
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().floor() as i32,
                self.hi.log10().ceil() as i32,
            );
            let decades = (b - a).max(1);
            let every = (decades + 6) / 7;
            let mut out = Vec::new();
            for k in (a..=b).step_by(every as usize) {
                let mults: &[f64] = match decades {
                    ..=2 => &[1.0, 2.0, 5.0],
                    3 => &[1.0, 3.0],
                    _ => &[1.0],
                };
                for m in mults {
                    let v = m * 10f64.powi(k);
                    if v.is_finite() && self.lo <= v * (1.0 + 1e-9) && v <= self.hi * (1.0 + 1e-9) {
                        out.push(v);
                    }
                }
            }
            out
        } else {
            let step = nice_step(self.hi - self.lo, 6.0);
            let first = (self.lo / step).ceil();
            (0..=12)
                .map(|i| (first + f64::from(i)) * step)
                .take_while(|v| {
                    v.is_finite() && (*v <= self.hi || *v - self.hi <= (self.hi - self.lo) * 1e-9)
                })
                .collect()
        }
    }
}

/// The smallest 1, 2 or 5 × 10^k at least `range / count`.
fn nice_step(range: f64, count: f64) -> f64 {
    let raw = range / count;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let decade = 10f64.powi(raw.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * decade)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .filter(|s| s.is_finite())
        .unwrap_or(raw)
}

/// The smallest 1, 2 or 5 × 10^k at least `v` (`v` itself past f64).
fn nice_ceil(v: f64) -> f64 {
    let decade = 10f64.powi(v.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * decade)
        .find(|c| *c >= v)
        .filter(|c| c.is_finite())
        .unwrap_or(v)
}

/// The largest 1, 2 or 5 × 10^k at most `v`.
fn nice_floor(v: f64) -> f64 {
    let decade = 10f64.powi(v.log10().floor() as i32);
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * decade)
        .find(|f| *f <= v)
        .unwrap_or(decade)
}

/// The latency axis for `values` (finite, in ms): log when the positive
/// ones span more than 10×, else linear from 0.
fn latency_scale(values: &[f64]) -> Scale {
    let max = values.iter().copied().fold(0.0, f64::max);
    let min_positive = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let scale = |lo, hi, log| Scale {
        lo,
        hi,
        log,
        p0: 0.0,
        p1: 1.0,
    };
    if min_positive.is_finite() && max / min_positive > 10.0 {
        return scale(nice_floor(min_positive), nice_ceil(max), true);
    }
    if max > 0.0 {
        // A little room above the largest, so that its dots clear the frame.
        let step = nice_step(max, 6.0);
        let hi = (max * 1.02 / step).ceil() * step;
        return scale(0.0, if hi.is_finite() { hi } else { max }, false);
    }
    scale(0.0, 100.0, false)
}

/// `x` to 3 significant digits at most, without trailing zeros.
fn short_number(x: f64) -> String {
    let text = if x.abs() >= 1e6 {
        return format!("{x:.0e}");
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A latency tick: `500 µs`, `20 ms`, `1.5 s`, `1e300 ms`.
fn tick_label(ms: f64) -> String {
    match ms {
        0.0 => "0".into(),
        ms if ms < 1.0 => format!("{} µs", short_number(ms * 1000.0)),
        ms if ms < 1000.0 => format!("{} ms", short_number(ms)),
        ms if ms < 1e7 => format!("{} s", short_number(ms / 1000.0)),
        ms => format!("{ms:.0e} ms"),
    }
}

/// A coordinate: one decimal, and 0 for what is not finite.
fn n(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "0".into()
    }
}

/// `text` as XML character data or an attribute value: markup escaped,
/// and characters XML 1.0 cannot hold (most C0 controls, U+FFFE, U+FFFF)
/// replaced by U+FFFD.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An SVG being written: `text` and the shapes as methods.
struct Svg(String);

impl Svg {
    fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.0,
            r#"<text x="{}" y="{}" {attrs}>{}</text>"#,
            n(x),
            n(y),
            escape(text)
        );
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
        let _ = writeln!(
            self.0,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
            n(x1),
            n(y1),
            n(x2),
            n(y2)
        );
    }

    fn dot(&mut self, x: f64, y: f64, r: f64, fill: &str) {
        let _ = writeln!(
            self.0,
            r#"<circle cx="{}" cy="{}" r="{}" fill="{fill}"/>"#,
            n(x),
            n(y),
            n(r)
        );
    }

    fn cross(&mut self, x: f64, y: f64, colour: &str) {
        let _ = writeln!(
            self.0,
            r#"<path d="M{} {}l7 7m0 -7l-7 7" stroke="{colour}" stroke-width="2" fill="none"/>"#,
            n(x - 3.5),
            n(y - 3.5)
        );
    }

    /// The frame, grid and ticks of `area` for `x` and `y`.
    fn axes(
        &mut self,
        area: Area,
        x: &Scale,
        x_ticks: &[(f64, String)],
        y: &Scale,
        y_ticks: &[(f64, String)],
    ) {
        for (v, label) in x_ticks {
            let px = x.at(*v);
            self.line((px, area.y0), (px, area.y1), &format!(r#"stroke="{GRID}""#));
            self.line(
                (px, area.y1),
                (px, area.y1 + 5.0),
                &format!(r#"stroke="{INK}""#),
            );
            self.text(px, area.y1 + 18.0, r#"text-anchor="middle""#, label);
        }
        for (v, label) in y_ticks {
            let py = y.at(*v);
            self.line((area.x0, py), (area.x1, py), &format!(r#"stroke="{GRID}""#));
            self.line(
                (area.x0 - 5.0, py),
                (area.x0, py),
                &format!(r#"stroke="{INK}""#),
            );
            self.text(area.x0 - 8.0, py + 4.0, r#"text-anchor="end""#, label);
        }
        let _ = writeln!(
            self.0,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{INK}"/>"#,
            n(area.x0),
            n(area.y0),
            n(area.x1 - area.x0),
            n(area.y1 - area.y0)
        );
    }

    /// A label under the x axis and one along the y axis of `area`.
    fn axis_titles(&mut self, area: Area, x_title: &str, y_title: &str) {
        self.text(
            (area.x0 + area.x1) / 2.0,
            area.y1 + 40.0,
            r#"text-anchor="middle""#,
            x_title,
        );
        let (x, y) = (area.x0 - 64.0, (area.y0 + area.y1) / 2.0);
        self.text(
            x,
            y,
            &format!(
                r#"text-anchor="middle" transform="rotate(-90 {} {})""#,
                n(x),
                n(y)
            ),
            y_title,
        );
    }
}

/// The run as a standalone SVG document.
pub fn svg(run: &Run) -> String {
    let sum = summary(&run.samples);
    let mut landed: Vec<f64> = run
        .samples
        .iter()
        .filter_map(|s| s.latency_ms)
        .filter(|l| l.is_finite())
        .collect();
    landed.sort_by(f64::total_cmp);
    let latency = latency_scale(&landed);
    let mut out = Svg(String::new());
    let _ = writeln!(
        out.0,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12" fill="{INK}">"#
    );
    let _ = writeln!(
        out.0,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let title = format!(
        "bench {}: a renewal every {:?} for {:?}, {} lease{}, TTL {} s ({})",
        clip(&run.url, 60),
        run.interval,
        run.duration,
        run.leases,
        if run.leases == 1 { "" } else { "s" },
        run.ttl_s,
        run.exclusion
    );
    out.text(16.0, 22.0, r#"font-size="15" font-weight="bold""#, &title);
    let figures = match sum.renew {
        Some(r) => format!(
            "{} of {} renewals landed; latency from the scheduled instant: p50 {}, p99 {}, \
             p99.9 {}, max {}; {} would have fenced",
            r.count,
            sum.due,
            tick_label(r.p50),
            tick_label(r.p99),
            tick_label(r.p999),
            tick_label(r.max),
            sum.fenced
        ),
        None => format!("none of {} renewals landed", sum.due),
    };
    out.text(16.0, 42.0, "", &figures);
    cdf_panel(&mut out, &landed, latency);
    let legend = time_panel(&mut out, run, latency);
    let mut x = 16.0;
    for (mark, colour, label) in legend {
        match mark {
            Mark::Dot => out.dot(x + 4.0, 58.0, 4.0, colour),
            Mark::Cross => out.cross(x + 4.0, 58.0, colour),
            Mark::Dash => out.line(
                (x - 4.0, 58.0),
                (x + 12.0, 58.0),
                &format!(r#"stroke="{colour}" stroke-width="2" stroke-dasharray="4 3""#),
            ),
        }
        out.text(x + 16.0, 62.0, "", &label);
        x += 34.0 + 6.6 * label.chars().count() as f64;
    }
    out.0.push_str("</svg>\n");
    out.0
}

fn cdf_panel(out: &mut Svg, landed: &[f64], latency: Scale) {
    let x = latency.onto(CDF.x0, CDF.x1);
    let y = Scale {
        lo: 0.0,
        hi: 100.0,
        log: false,
        p0: CDF.y1,
        p1: CDF.y0,
    };
    let x_ticks: Vec<(f64, String)> = x.ticks().into_iter().map(|v| (v, tick_label(v))).collect();
    let y_ticks: Vec<(f64, String)> = [0.0, 25.0, 50.0, 75.0, 100.0]
        .into_iter()
        .map(|p| (p, format!("{p} %")))
        .collect();
    out.text(
        CDF.x0,
        CDF.y0 - 8.0,
        r#"font-weight="bold""#,
        &format!("CDF of the latency of {} landed renewals", landed.len()),
    );
    out.axes(CDF, &x, &x_ticks, &y, &y_ticks);
    out.axis_titles(
        CDF,
        &format!(
            "latency from the scheduled instant{}",
            if x.log { " (log scale)" } else { "" }
        ),
        "renewals at or below (%)",
    );
    if landed.is_empty() {
        out.text(
            (CDF.x0 + CDF.x1) / 2.0,
            (CDF.y0 + CDF.y1) / 2.0,
            r##"text-anchor="middle" fill="#888888""##,
            "no renewal landed",
        );
        return;
    }
    // A step line, one point per change of pixel.
    let count = landed.len() as f64;
    let mut points: Vec<(f64, f64)> = vec![(x.at(landed[0]), CDF.y1)];
    for (i, v) in landed.iter().enumerate() {
        let px = x.at(*v);
        for share in [i as f64 / count, (i + 1) as f64 / count] {
            let p = (
                (px * 10.0).round() / 10.0,
                (y.at(share * 100.0) * 10.0).round() / 10.0,
            );
            let len = points.len();
            if points[len - 1] == p {
                continue;
            }
            // Drop the middle of three points on one vertical or horizontal.
            if len >= 2 {
                let (a, b) = (points[len - 2], points[len - 1]);
                if (a.0 == b.0 && b.0 == p.0) || (a.1 == b.1 && b.1 == p.1) {
                    points[len - 1] = p;
                    continue;
                }
            }
            points.push(p);
        }
    }
    let path: Vec<String> = points
        .iter()
        .map(|(a, b)| format!("{},{}", n(*a), n(*b)))
        .collect();
    let _ = writeln!(
        out.0,
        r#"<polyline points="{}" fill="none" stroke="{KEPT}" stroke-width="2"/>"#,
        path.join(" ")
    );
    let mut listed = Vec::new();
    for (label, p) in [("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)] {
        let Some(v) = percentile(landed, p) else {
            continue;
        };
        let (px, py) = (x.at(v), y.at(p));
        out.line(
            (px, CDF.y1),
            (px, py),
            &format!(r#"stroke="{INK}" stroke-dasharray="3 3""#),
        );
        out.dot(px, py, 3.5, INK);
        listed.push(format!("{label}: {}", tick_label(v)));
    }
    // The values in a box over the lower right, where a CDF has no line.
    let wide = listed.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64 * 6.8 + 16.0;
    let (left, top) = (
        CDF.x1 - 8.0 - wide,
        CDF.y1 - 12.0 - 16.0 * listed.len() as f64,
    );
    let _ = writeln!(
        out.0,
        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="white" stroke="{GRID}"/>"#,
        n(left),
        n(top),
        n(wide),
        n(CDF.y1 - 6.0 - top)
    );
    for (i, line) in listed.iter().enumerate() {
        out.text(left + 8.0, top + 15.0 + 16.0 * i as f64, "", line);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mark {
    Dot,
    Cross,
    Dash,
}

/// The time panel; the legend of what it drew.
fn time_panel(out: &mut Svg, run: &Run, latency: Scale) -> Vec<(Mark, &'static str, String)> {
    let last = run
        .samples
        .iter()
        .map(|s| s.scheduled_s)
        .filter(|s| s.is_finite())
        .fold(run.duration.as_secs_f64(), f64::max);
    let step = nice_step(last, 6.0);
    let x = Scale {
        lo: 0.0,
        hi: match (last / step).ceil() * step {
            hi if hi > 0.0 && hi.is_finite() => hi,
            _ if last > 0.0 => last,
            _ => 1.0,
        },
        log: false,
        p0: TIME.x0,
        p1: TIME.x1,
    };
    let y = latency.onto(TIME.y1, TIME.y0);
    let x_ticks: Vec<(f64, String)> = x
        .ticks()
        .into_iter()
        .map(|v| (v, short_number(v)))
        .collect();
    let y_ticks: Vec<(f64, String)> = y.ticks().into_iter().map(|v| (v, tick_label(v))).collect();
    out.text(
        TIME.x0,
        TIME.y0 - 8.0,
        r#"font-weight="bold""#,
        "each renewal's latency at its scheduled instant",
    );
    out.axes(TIME, &x, &x_ticks, &y, &y_ticks);
    out.axis_titles(
        TIME,
        "seconds from the start (scheduled)",
        &format!("latency{}", if y.log { " (log scale)" } else { "" }),
    );
    let mut drawn = HashSet::new();
    let mut counts = [0usize; 4];
    for s in &run.samples {
        let px = x.at(s.scheduled_s);
        let (kind, colour, py) = match (s.latency_ms, s.connection) {
            (None, _) => (3, FAILED, TIME.y0 + 7.0),
            (Some(l), Connection::Kept) => (0, KEPT, y.at(l)),
            (Some(l), Connection::New { .. }) => (1, NEW, y.at(l)),
            (Some(l), Connection::Unknown) => (2, UNTOLD, y.at(l)),
        };
        counts[kind] += 1;
        // Half-pixel cells: a dot drawn again would not show.
        if !drawn.insert((kind, (px * 2.0).round() as i64, (py * 2.0).round() as i64)) {
            continue;
        }
        if kind == 3 {
            out.cross(px, py, colour);
        } else {
            out.dot(px, py, 2.5, colour);
        }
    }
    let mut legend = Vec::new();
    for (kind, mark, colour, name) in [
        (0, Mark::Dot, KEPT, "kept connection"),
        (1, Mark::Dot, NEW, "new connection"),
        (2, Mark::Dot, UNTOLD, "connection not told"),
        (3, Mark::Cross, FAILED, "did not land, drawn along the top"),
    ] {
        if counts[kind] > 0 {
            legend.push((mark, colour, format!("{name} ({})", counts[kind])));
        }
    }
    let budget = run
        .samples
        .iter()
        .map(|s| s.budget_ms)
        .filter(|b| b.is_finite())
        .fold(f64::INFINITY, f64::min);
    if budget.is_finite() {
        let fits = y.contains(budget);
        if fits {
            let py = y.at(budget);
            out.line(
                (TIME.x0, py),
                (TIME.x1, py),
                &format!(r#"stroke="{BUDGET}" stroke-width="1.5" stroke-dasharray="6 4""#),
            );
        }
        legend.push((
            Mark::Dash,
            BUDGET,
            format!(
                "smallest write budget {}{}",
                tick_label(budget),
                if fits { "" } else { " (off the axis)" }
            ),
        ));
    }
    legend
}

#[cfg(test)]
#[path = "plot_tests.rs"]
mod tests;
