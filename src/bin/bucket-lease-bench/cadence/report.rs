//! What `bench --interval` reports of its samples: a summary, a series per
//! second, the `--json` object, the `--csv` table and the text table. Pure
//! functions of a [`Run`]: no clock, no store.
//!
//! What it promises:
//!
//! - Latencies are those of the renewals that landed, counted from their
//!   scheduled instant; percentiles are nearest rank, as `measure.rs`
//!   computes them for the back-to-back bench ([`percentile`]).
//! - Every renewal is counted somewhere: `due` is every sample, `fenced`
//!   those that would have fenced their holder ([`Sample::fenced`]), and
//!   the answers add up to `due`.
//! - The clock offset is the intersection of every answer's bounds; when it
//!   is empty (the clock stepped, or service nodes disagree) it says so
//!   and gives the hull of the bounds instead. It is compared with the
//!   skew budget, a third of the TTL.
//! - `--json` carries every sample with every field (enums as their
//!   labels, `null` for none), and [`samples_from_json`] reads them back;
//!   `--csv` has one line per sample, RFC 4180 quoted.
//! - The text's series has at most [`MAX_SERIES_ROWS`] rows: a long run's
//!   seconds are grouped, and the table says by how many.

use super::sample::{Answer, Connection, OffsetBounds, Sample};
use crate::measure;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::Duration;

/// One open-loop run: what was asked and every renewal it scheduled.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The URL benched.
    pub url: String,
    /// The scratch prefix the leases were on.
    pub prefix: String,
    /// The renewal interval (`--interval`).
    pub interval: Duration,
    /// How long the renewals went on (`--duration`).
    pub duration: Duration,
    /// How many leases were renewed side by side (`--leases`).
    pub leases: u32,
    /// The leases' TTL, in seconds.
    pub ttl_s: u64,
    /// `conditional` or `best-effort`.
    pub exclusion: String,
    /// Every scheduled renewal, landed or not.
    pub samples: Vec<Sample>,
}

impl Run {
    /// How many renewals the plan scheduled, every lease's; more than the
    /// samples when a lease ended (fenced or lost: it is renewed no more)
    /// or the run was stopped early.
    pub fn scheduled(&self) -> u64 {
        let plan = super::Plan {
            interval: self.interval,
            duration: self.duration,
        };
        plan.renewals().saturating_mul(u64::from(self.leases))
    }

    /// The most the service's clock may differ from ours: a third of the
    /// TTL, in milliseconds.
    pub fn skew_budget_ms(&self) -> f64 {
        self.ttl_s as f64 * 1000.0 / 3.0
    }
}

/// The nearest-rank `p`th percentile of `sorted` (ascending), with the rank
/// `measure::percentile` uses; `None` when empty. (`measure`'s works on
/// `Duration`s, which a milliseconds value read from a file may not fit.)
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Count, percentiles, max and mean of a set of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// How many values.
    pub count: usize,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
    /// The largest value.
    pub max: f64,
    /// The arithmetic mean.
    pub mean: f64,
}

impl Stats {
    /// The figures of `values`; `None` when there is none.
    pub fn of(mut values: Vec<f64>) -> Option<Stats> {
        values.sort_by(f64::total_cmp);
        let max = *values.last()?;
        Some(Stats {
            count: values.len(),
            p50: percentile(&values, 50.0)?,
            p90: percentile(&values, 90.0)?,
            p99: percentile(&values, 99.0)?,
            p999: percentile(&values, 99.9)?,
            max,
            mean: values.iter().sum::<f64>() / values.len() as f64,
        })
    }
}

/// What the answers' `Date` headers say of the service's clock minus ours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offset {
    /// The lowest offset consistent with every answer (or, when they do not
    /// agree, the lowest bound of any).
    pub low_ms: f64,
    /// The highest offset consistent with every answer (or the highest
    /// bound of any).
    pub high_ms: f64,
    /// Whether every answer's bounds overlap.
    pub consistent: bool,
    /// How many samples had bounds.
    pub answers: usize,
}

impl Offset {
    fn of(bounds: impl Iterator<Item = OffsetBounds>) -> Option<Offset> {
        let bounds: Vec<OffsetBounds> = bounds.collect();
        let fold = |pick: fn(f64, f64) -> f64, start: f64, field: fn(&OffsetBounds) -> f64| {
            bounds.iter().map(field).fold(start, pick)
        };
        let (low, high) = (
            fold(f64::max, f64::NEG_INFINITY, |b| b.low_ms),
            fold(f64::min, f64::INFINITY, |b| b.high_ms),
        );
        let answers = bounds.len();
        if answers == 0 {
            return None;
        }
        if low <= high {
            return Some(Offset {
                low_ms: low,
                high_ms: high,
                consistent: true,
                answers,
            });
        }
        Some(Offset {
            low_ms: fold(f64::min, f64::INFINITY, |b| b.low_ms),
            high_ms: fold(f64::max, f64::NEG_INFINITY, |b| b.high_ms),
            consistent: false,
            answers,
        })
    }

    /// The largest offset the bounds allow, either way.
    pub fn worst_ms(&self) -> f64 {
        self.low_ms.abs().max(self.high_ms.abs())
    }
}

/// The figures of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Every renewal scheduled.
    pub due: usize,
    /// The latencies of those that landed.
    pub renew: Option<Stats>,
    /// Those that would have fenced their holder.
    pub fenced: usize,
    /// Requests beyond the first, over every renewal.
    pub retries: u64,
    /// Renewals that took more than one request.
    pub retried: usize,
    /// How many renewals got each answer, by label (`200`, `503`,
    /// `timeout`…), status codes first.
    pub answers: BTreeMap<String, usize>,
    /// Renewals whose first request went out on a kept connection.
    pub kept: usize,
    /// … on a new one.
    pub new: usize,
    /// … on one the store does not tell.
    pub unknown: usize,
    /// Connect times of the new connections.
    pub connect: Option<Stats>,
    /// TLS handshakes of the new connections that had one.
    pub tls: Option<Stats>,
    /// The smallest headroom (budget left) of a landed renewal.
    pub headroom_min: Option<f64>,
    /// The 1st percentile of the headrooms.
    pub headroom_p1: Option<f64>,
    /// The clock offset, when any answer had a `Date`.
    pub offset: Option<Offset>,
}

/// The figures of `samples`.
pub fn summary(samples: &[Sample]) -> Summary {
    let mut answers = BTreeMap::new();
    let (mut kept, mut new, mut unknown) = (0, 0, 0);
    let (mut connect, mut tls) = (Vec::new(), Vec::new());
    for s in samples {
        *answers.entry(s.answer.label()).or_insert(0) += 1;
        match s.connection {
            Connection::Kept => kept += 1,
            Connection::New { connect_ms, tls_ms } => {
                new += 1;
                connect.push(connect_ms);
                tls.extend(tls_ms);
            }
            Connection::Unknown => unknown += 1,
        }
    }
    let mut headroom: Vec<f64> = samples.iter().filter_map(Sample::headroom_ms).collect();
    headroom.sort_by(f64::total_cmp);
    Summary {
        due: samples.len(),
        renew: Stats::of(samples.iter().filter_map(|s| s.latency_ms).collect()),
        fenced: samples.iter().filter(|s| s.fenced()).count(),
        retries: samples.iter().map(|s| u64::from(s.retries())).sum(),
        retried: samples.iter().filter(|s| s.retries() > 0).count(),
        answers,
        kept,
        new,
        unknown,
        connect: Stats::of(connect),
        tls: Stats::of(tls),
        headroom_min: headroom.first().copied(),
        headroom_p1: percentile(&headroom, 1.0),
        offset: Offset::of(samples.iter().filter_map(|s| s.offset)),
    }
}

/// The renewals due in one span of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Its first second (from the start of the run).
    pub start_s: u64,
    /// How many seconds it covers.
    pub width_s: u64,
    /// Renewals due in it.
    pub due: usize,
    /// Those that landed.
    pub landed: usize,
    /// Their median latency.
    pub p50_ms: Option<f64>,
    /// Their largest latency.
    pub max_ms: Option<f64>,
    /// Those that would have fenced.
    pub fenced: usize,
    /// Those answered anything but 200.
    pub non_200: usize,
}

/// The renewals due in each span of `width_s` seconds of `scheduled_s`
/// that has any, in order.
pub fn series(samples: &[Sample], width_s: u64) -> Vec<Span> {
    let width_s = width_s.max(1);
    let mut spans: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        // `as` saturates: a negative or NaN instant lands in the first span.
        let second = s.scheduled_s.floor() as u64;
        spans.entry(second / width_s).or_default().push(s);
    }
    spans
        .into_iter()
        .map(|(i, due)| {
            let mut landed: Vec<f64> = due.iter().filter_map(|s| s.latency_ms).collect();
            landed.sort_by(f64::total_cmp);
            Span {
                start_s: i * width_s,
                width_s,
                due: due.len(),
                landed: landed.len(),
                p50_ms: percentile(&landed, 50.0),
                max_ms: landed.last().copied(),
                fenced: due.iter().filter(|s| s.fenced()).count(),
                non_200: due
                    .iter()
                    .filter(|s| s.answer != Answer::Status(200))
                    .count(),
            }
        })
        .collect()
}

/// At most this many rows in the text's series.
pub const MAX_SERIES_ROWS: usize = 30;

/// The narrowest span width (1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30
/// min, then whole hours) that gives `samples` at most
/// [`MAX_SERIES_ROWS`] rows.
fn text_width_s(samples: &[Sample]) -> u64 {
    const NICE: [u64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800];
    let fits = |w: u64| series(samples, w).len() <= MAX_SERIES_ROWS;
    NICE.into_iter()
        .chain((1..).map(|h| h * 3600))
        .find(|w| fits(*w))
        .unwrap_or(1)
}

/// `x` rounded to `places` decimals (left as it is when that would
/// overflow); `None` for NaN and infinities, which JSON cannot hold.
fn rounded(x: f64, places: i32) -> Option<f64> {
    let scale = 10f64.powi(places);
    let r = (x * scale).round() / scale;
    match (x.is_finite(), r.is_finite()) {
        (false, _) => None,
        (true, true) => Some(r),
        (true, false) => Some(x),
    }
}

/// Milliseconds for JSON and CSV: to the microsecond.
fn ms3(x: f64) -> Option<f64> {
    rounded(x, 3)
}

fn stats_json(s: Option<Stats>) -> Value {
    let f = |pick: fn(&Stats) -> f64| s.as_ref().and_then(|s| ms3(pick(s)));
    json!({
        "count": s.map_or(0, |s| s.count),
        "p50_ms": f(|s| s.p50),
        "p90_ms": f(|s| s.p90),
        "p99_ms": f(|s| s.p99),
        "p999_ms": f(|s| s.p999),
        "max_ms": f(|s| s.max),
        "mean_ms": f(|s| s.mean),
    })
}

fn p50_max_json(s: Option<Stats>) -> Value {
    s.map_or(
        Value::Null,
        |s| json!({ "p50": ms3(s.p50), "max": ms3(s.max) }),
    )
}

/// One sample as JSON: every field, enums as labels, `null` for none;
/// the connection and the offset flattened as in the CSV, and the derived
/// `headroom_ms` and `fenced` beside them (ignored when read back).
fn sample_json(s: &Sample) -> Value {
    let (connect_ms, tls_ms) = match s.connection {
        Connection::New { connect_ms, tls_ms } => (ms3(connect_ms), tls_ms.and_then(ms3)),
        _ => (None, None),
    };
    json!({
        "lease": s.lease,
        "seq": s.seq,
        "scheduled_s": rounded(s.scheduled_s, 6),
        "latency_ms": s.latency_ms.and_then(ms3),
        "start_ms": ms3(s.start_ms),
        "answer": s.answer.label(),
        "requests": s.requests,
        "connection": s.connection.label(),
        "connect_ms": connect_ms,
        "tls_ms": tls_ms,
        "budget_ms": ms3(s.budget_ms),
        "headroom_ms": s.headroom_ms().and_then(ms3),
        "fenced": s.fenced(),
        "offset_low_ms": s.offset.and_then(|o| ms3(o.low_ms)),
        "offset_high_ms": s.offset.and_then(|o| ms3(o.high_ms)),
    })
}

/// The whole run as one JSON object (`bench --interval --json`).
pub fn to_json(run: &Run) -> Value {
    let sum = summary(&run.samples);
    let answers: Map<String, Value> = sum
        .answers
        .iter()
        .map(|(label, n)| (label.clone(), json!(n)))
        .collect();
    let budget = run.skew_budget_ms();
    let offset = match sum.offset {
        Some(o) => json!({
            "low": ms3(o.low_ms),
            "high": ms3(o.high_ms),
            "consistent": o.consistent,
            "skew_budget": ms3(budget),
            "within_budget": o.worst_ms() < budget,
            "answers": o.answers,
        }),
        None => json!({
            "low": null, "high": null, "consistent": null, "skew_budget": ms3(budget),
            "within_budget": null, "answers": 0,
        }),
    };
    let series: Vec<Value> = series(&run.samples, 1)
        .iter()
        .map(|s| {
            json!({
                "second": s.start_s,
                "due": s.due,
                "landed": s.landed,
                "p50_ms": s.p50_ms.and_then(ms3),
                "max_ms": s.max_ms.and_then(ms3),
                "fenced": s.fenced,
                "non_200": s.non_200,
            })
        })
        .collect();
    json!({
        "mode": "cadence",
        "url": run.url,
        "prefix": run.prefix,
        "interval_s": run.interval.as_secs_f64(),
        "duration_s": run.duration.as_secs_f64(),
        "leases": run.leases,
        "ttl_s": run.ttl_s,
        "exclusion": run.exclusion,
        "due": sum.due,
        "scheduled": run.scheduled(),
        "renew": stats_json(sum.renew),
        "fenced": sum.fenced,
        "retries": sum.retries,
        "answers": answers,
        "connections": {
            "kept": sum.kept,
            "new": sum.new,
            "unknown": sum.unknown,
            "connect_ms": p50_max_json(sum.connect),
            "tls_ms": p50_max_json(sum.tls),
        },
        "headroom_ms": {
            "min": sum.headroom_min.and_then(ms3),
            "p1": sum.headroom_p1.and_then(ms3),
        },
        "clock_offset_ms": offset,
        "series": series,
        "samples": run.samples.iter().map(sample_json).collect::<Vec<_>>(),
    })
}

/// The samples of a run's JSON (the object [`to_json`] wrote, or its
/// `samples` array).
///
/// # Errors
///
/// Which sample and which field is missing or not what it should be.
pub fn samples_from_json(run: &Value) -> Result<Vec<Sample>, String> {
    let list = match run {
        Value::Array(list) => list,
        _ => run["samples"]
            .as_array()
            .ok_or("no \"samples\" array (not the JSON of `bench --interval`)")?,
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| sample_from_json(v).map_err(|e| format!("samples[{i}]: {e}")))
        .collect()
}

fn sample_from_json(v: &Value) -> Result<Sample, String> {
    let field = |name: &str| -> Result<&Value, String> {
        v.get(name).ok_or_else(|| format!("no field \"{name}\""))
    };
    let number = |name: &str| -> Result<f64, String> {
        field(name)?
            .as_f64()
            .ok_or_else(|| format!("\"{name}\" is not a number"))
    };
    let maybe = |name: &str| -> Result<Option<f64>, String> {
        match v.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => number(name).map(Some),
        }
    };
    let whole = |name: &str| -> Result<u64, String> {
        field(name)?
            .as_u64()
            .ok_or_else(|| format!("\"{name}\" is not a whole number"))
    };
    let small = |name: &str| -> Result<u32, String> {
        u32::try_from(whole(name)?).map_err(|_| format!("\"{name}\" is too large"))
    };
    let label = |name: &str| -> Result<&str, String> {
        field(name)?
            .as_str()
            .ok_or_else(|| format!("\"{name}\" is not a string"))
    };
    let answer = label("answer")?;
    let connection = match label("connection")? {
        "kept" => Connection::Kept,
        "unknown" => Connection::Unknown,
        "new" => Connection::New {
            connect_ms: number("connect_ms")?,
            tls_ms: maybe("tls_ms")?,
        },
        other => return Err(format!("unknown connection {other:?}")),
    };
    let offset = match (maybe("offset_low_ms")?, maybe("offset_high_ms")?) {
        (Some(low_ms), Some(high_ms)) => Some(OffsetBounds { low_ms, high_ms }),
        (None, None) => None,
        _ => return Err("one offset bound without the other".into()),
    };
    Ok(Sample {
        lease: small("lease")?,
        seq: whole("seq")?,
        scheduled_s: number("scheduled_s")?,
        latency_ms: maybe("latency_ms")?,
        start_ms: number("start_ms")?,
        answer: Answer::parse(answer).ok_or_else(|| format!("unknown answer {answer:?}"))?,
        requests: small("requests")?,
        connection,
        budget_ms: number("budget_ms")?,
        offset,
    })
}

/// The columns of [`write_csv`].
pub const CSV_COLUMNS: [&str; 15] = [
    "lease",
    "seq",
    "scheduled_s",
    "latency_ms",
    "start_ms",
    "answer",
    "requests",
    "connection",
    "connect_ms",
    "tls_ms",
    "budget_ms",
    "headroom_ms",
    "fenced",
    "offset_low_ms",
    "offset_high_ms",
];

/// `cell` quoted as RFC 4180 asks when it holds a comma, a quote or a line
/// break.
fn csv_cell(cell: &str) -> String {
    if cell.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_string()
    }
}

/// Every sample as CSV: the header [`CSV_COLUMNS`], then one line per
/// sample with the values of its JSON (empty cells for none).
///
/// # Errors
///
/// A failed write.
pub fn write_csv(run: &Run, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "{}", CSV_COLUMNS.join(","))?;
    for s in &run.samples {
        let v = sample_json(s);
        let cells: Vec<String> = CSV_COLUMNS
            .iter()
            .map(|c| match &v[*c] {
                Value::Null => String::new(),
                Value::String(s) => csv_cell(s),
                other => csv_cell(&other.to_string()),
            })
            .collect();
        writeln!(out, "{}", cells.join(","))?;
    }
    out.flush()
}

/// Milliseconds as `measure::short` writes a duration (`850 µs`, `21.3
/// ms`, `12.0 s`), with a sign; past what a `Duration` holds, in plain
/// milliseconds.
pub fn fmt_ms(ms: f64) -> String {
    let sign = if ms < 0.0 { "-" } else { "" };
    match Duration::try_from_secs_f64(ms.abs() / 1000.0) {
        Ok(d) if ms.is_finite() => format!("{sign}{}", measure::short(d)),
        _ => format!("{ms:e} ms"),
    }
}

/// The run as text: what was run, the latency percentiles and histogram,
/// the answers, connections, retries, fenced renewals, headroom, clock
/// offset, and the series (at most [`MAX_SERIES_ROWS`] rows).
pub fn render_text(run: &Run) -> Vec<String> {
    let sum = summary(&run.samples);
    let mut out = vec![format!(
        "bench {}: a renewal every {:?} for {:?}, {} lease{} (TTL {} s, {} lease) on scratch \
         prefix {}",
        run.url,
        run.interval,
        run.duration,
        run.leases,
        if run.leases == 1 { "" } else { "s" },
        run.ttl_s,
        run.exclusion,
        run.prefix,
    )];
    let landed = sum.renew.map_or(0, |s| s.count);
    out.push(format!(
        "renew latency from each renewal's scheduled instant, {landed} landed of {} due:",
        sum.due
    ));
    match sum.renew {
        Some(s) => {
            out.push(format!(
                "  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {}",
                fmt_ms(s.p50),
                fmt_ms(s.p90),
                fmt_ms(s.p99),
                fmt_ms(s.p999),
                fmt_ms(s.max),
                fmt_ms(s.mean)
            ));
            let durations: Vec<Duration> = run
                .samples
                .iter()
                .filter_map(|s| s.latency_ms)
                .map(|ms| Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX))
                .collect();
            out.extend(measure::histogram(&durations));
        }
        None => out.push("  (none landed)".into()),
    }
    out.push(format!("answers: {}", answers_line(&sum.answers)));
    out.push(format!("connections: {}", connections_line(&sum)));
    out.push(format!(
        "retries: {} (in {} of {} renewals)",
        sum.retries, sum.retried, sum.due
    ));
    out.push(format!(
        "fenced: {} of {} renewals would have fenced",
        sum.fenced, sum.due
    ));
    let unreached = run.scheduled().saturating_sub(sum.due as u64);
    if unreached > 0 {
        out.push(format!(
            "not reached: {unreached} of {} scheduled renewals (their lease had fenced or was \
             lost, and is renewed no more; or the run was stopped)",
            run.scheduled()
        ));
    }
    out.push(match (sum.headroom_min, sum.headroom_p1) {
        (Some(min), Some(p1)) => format!(
            "headroom (write deadline minus latency): min {}, p1 {}",
            fmt_ms(min),
            fmt_ms(p1)
        ),
        _ => "headroom: none (no renewal landed)".into(),
    });
    out.push(offset_line(sum.offset, run.skew_budget_ms()));
    out.extend(series_lines(&run.samples));
    out
}

/// `200 ×358, 412 ×1, 5xx ×2, timeout ×1`: status codes first, 5xx
/// grouped.
fn answers_line(answers: &BTreeMap<String, usize>) -> String {
    let server = |l: &str| l.len() == 3 && l.starts_with('5') && l.parse::<u16>().is_ok();
    let mut parts = Vec::new();
    let fives: usize = answers
        .iter()
        .filter(|(l, _)| server(l))
        .map(|(_, n)| n)
        .sum();
    let mut fives_done = false;
    for (label, n) in answers {
        if server(label) {
            if !fives_done {
                parts.push(format!("5xx ×{fives}"));
                fives_done = true;
            }
        } else {
            parts.push(format!("{label} ×{n}"));
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn connections_line(sum: &Summary) -> String {
    let mut parts = Vec::new();
    if sum.new > 0 {
        let mut new = format!("{} new", sum.new);
        if let Some(c) = sum.connect {
            new.push_str(&format!(
                " (connect p50 {}, max {}",
                fmt_ms(c.p50),
                fmt_ms(c.max)
            ));
            match sum.tls {
                Some(t) => new.push_str(&format!(
                    "; TLS p50 {}, max {})",
                    fmt_ms(t.p50),
                    fmt_ms(t.max)
                )),
                None => new.push_str("; no TLS)"),
            }
        }
        parts.push(new);
    }
    if sum.kept > 0 {
        parts.push(format!("{} kept", sum.kept));
    }
    if sum.unknown > 0 {
        parts.push(format!("{} not told by the store", sum.unknown));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn offset_line(offset: Option<Offset>, budget: f64) -> String {
    let Some(o) = offset else {
        return "clock offset: not measured (no answer had a Date header)".into();
    };
    let range = format!("[{}, {}]", fmt_ms(o.low_ms), fmt_ms(o.high_ms));
    let how = if o.consistent {
        format!(
            "service minus local clock in {range} (all {} Date headers agree)",
            o.answers
        )
    } else {
        format!(
            "the {} Date headers do not agree (the clock stepped, or the service's nodes \
             differ): service minus local clock anywhere in {range}",
            o.answers
        )
    };
    let worst = o.worst_ms();
    let verdict = if worst < budget {
        "within budget"
    } else {
        "OVER budget"
    };
    format!(
        "clock offset: {how}; |offset| ≤ {}, {:.0}% of the skew budget {} (TTL/3): {verdict}",
        fmt_ms(worst),
        100.0 * worst / budget.max(f64::MIN_POSITIVE),
        fmt_ms(budget)
    )
}

fn series_lines(samples: &[Sample]) -> Vec<String> {
    if samples.is_empty() {
        return Vec::new();
    }
    let width = text_width_s(samples);
    let heading = if width == 1 {
        "per second of the schedule:".to_string()
    } else {
        format!("per {width} s of the schedule (seconds grouped to fit {MAX_SERIES_ROWS} rows):")
    };
    let dash = |x: Option<f64>| x.map_or_else(|| "-".to_string(), fmt_ms);
    let mut cells = vec![
        ["second", "due", "landed", "p50", "max", "fenced", "non-200"]
            .map(String::from)
            .to_vec(),
    ];
    for s in series(samples, width) {
        cells.push(vec![
            if width == 1 {
                s.start_s.to_string()
            } else {
                format!("{}–{}", s.start_s, s.start_s + width - 1)
            },
            s.due.to_string(),
            s.landed.to_string(),
            dash(s.p50_ms),
            dash(s.max_ms),
            s.fenced.to_string(),
            s.non_200.to_string(),
        ]);
    }
    let mut out = vec![heading];
    out.extend(
        measure::render_text(&cells)
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    out
}

/// Synthetic samples for the tests of the report, the comparison and the
/// plot.
#[cfg(test)]
pub mod tests_support {
    use super::*;

    /// A landed renewal of lease 0, due at `scheduled_s`, that took
    /// `latency_ms` on a kept connection with a 2 s budget.
    pub fn landed(seq: u64, scheduled_s: f64, latency_ms: f64) -> Sample {
        Sample {
            lease: 0,
            seq,
            scheduled_s,
            latency_ms: Some(latency_ms),
            start_ms: 0.5,
            answer: Answer::Status(200),
            requests: 1,
            connection: Connection::Kept,
            budget_ms: 2000.0,
            offset: None,
        }
    }

    /// A renewal that never landed: a timeout after `requests` requests.
    pub fn failed(seq: u64, scheduled_s: f64) -> Sample {
        Sample {
            latency_ms: None,
            answer: Answer::Timeout,
            requests: 3,
            connection: Connection::Unknown,
            ..landed(seq, scheduled_s, 0.0)
        }
    }

    /// A run of `samples` on a made-up URL, every 250 ms for 3 s.
    pub fn run(samples: Vec<Sample>) -> Run {
        Run {
            url: "s3://bucket/jobs".into(),
            prefix: "jobs/bench-0123abcd".into(),
            interval: Duration::from_millis(250),
            duration: Duration::from_secs(3),
            leases: 1,
            ttl_s: 3,
            exclusion: "conditional".into(),
            samples,
        }
    }

    /// `n` renewals every 250 ms: kept connections at 21 ms, a new one
    /// every 50th at 60 ms (connect 1.5 ms, TLS 30 ms), and two that
    /// never landed (a timeout at the 100th, a 503 at the 200th).
    pub fn realistic(n: u64) -> Vec<Sample> {
        (0..n)
            .map(|i| {
                let at = i as f64 * 0.25;
                match i {
                    100 => failed(i, at),
                    200 => Sample {
                        answer: Answer::Status(503),
                        ..failed(i, at)
                    },
                    _ if i % 50 == 0 => Sample {
                        connection: Connection::New {
                            connect_ms: 1.5,
                            tls_ms: Some(30.0),
                        },
                        ..landed(i, at, 60.0 + (i % 7) as f64)
                    },
                    _ => landed(i, at, 21.0 + (i % 5) as f64 * 0.25),
                }
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
