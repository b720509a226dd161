//! The measuring code shared by `bucket-lease-bench` (`bucket-lease
//! bench`) and the cargo bench `benches/renewal.rs` (which includes this
//! file with `#[path]`), so that a number printed by one means what the
//! same number printed by the other means.
//!
//! What is measured, per row (an operation on one store):
//!
//! - **Latency**: each operation timed on the monotonic clock; the table
//!   gives p50, p99 and max over every sample (nearest rank), and the
//!   spread of p50 across batches (min–max of each batch's own p50).
//! - **CPU per operation, whole process**: `CLOCK_PROCESS_CPUTIME_ID` read
//!   before and after each batch, divided by the batch's operations. It
//!   counts every thread of the process, including threads that a client
//!   starts and ends inside a request, and the kernel time spent on the
//!   process's behalf (system calls); it does not count the server's work
//!   unless the server runs in the process (the memory and fs stores). The
//!   table gives the median over batches and its min–max.
//! - **System calls per operation** are not counted in-process (Linux
//!   keeps no per-process system-call counter; `/proc/self/io`'s `syscr`
//!   and `syscw` count only the read(2)/write(2) family and miss the
//!   send(2)/recv(2) that std's `TcpStream` uses). They come from `strace
//!   -f -c` run twice with different operation counts (the slope), which
//!   [`STRACE_RECIPE`] describes; a row shows them when they were measured.
//!
//! A row may be compared with a floor row (ratios of p50 and CPU) and with
//! the previous run's JSON (the same ratios against the same row then).

use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How to count a row's system calls by hand.
pub const STRACE_RECIPE: &str = "\
system calls per operation: strace -f -c counts every call of every thread;
run the same operations twice with different counts and divide the
difference of the totals by the difference of the counts (setup cancels):
  strace -f -c -o /tmp/a.txt COMMAND-WITH-N1-OPERATIONS
  strace -f -c -o /tmp/b.txt COMMAND-WITH-N2-OPERATIONS
  calls per operation = (total calls in b - total calls in a) / (N2 - N1)";

/// CPU time used so far by every thread of this process, living or ended.
pub fn process_cpu() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One batch of operations, measured as a whole.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    /// How many operations.
    pub ops: u32,
    /// Whole-process CPU time over the batch.
    pub cpu: Duration,
    /// This batch's own p50 latency.
    pub p50: Duration,
}

/// The measurements of one row.
#[derive(Debug, Clone)]
pub struct Row {
    /// What the row measures, e.g. `http renew`.
    pub name: String,
    /// Every operation's latency, in the order measured.
    pub latencies: Vec<Duration>,
    /// The batches, in the order measured.
    pub batches: Vec<Batch>,
    /// System calls per operation, when counted (see [`STRACE_RECIPE`]).
    pub syscalls: Option<f64>,
    /// Threads created per operation (`clone`/`clone3` calls), when counted.
    pub clones: Option<f64>,
}

impl Row {
    /// An empty row named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Row {
            name: name.into(),
            latencies: Vec::new(),
            batches: Vec::new(),
            syscalls: None,
            clones: None,
        }
    }

    /// Run `op` `n` times as one batch, timing each operation and the
    /// batch's whole-process CPU. Stops at the first error.
    ///
    /// # Errors
    ///
    /// The first error `op` returns; the operations before it are kept.
    pub fn batch<E>(&mut self, n: u32, mut op: impl FnMut() -> Result<(), E>) -> Result<(), E> {
        let mut own = Vec::with_capacity(n as usize);
        let cpu = process_cpu();
        let mut failed = None;
        for _ in 0..n {
            let sent = Instant::now();
            let done = op();
            own.push(sent.elapsed());
            if let Err(e) = done {
                failed = Some(e);
                break;
            }
        }
        let cpu = process_cpu().saturating_sub(cpu);
        if let Some(p50) = percentile(&own, 50.0) {
            self.batches.push(Batch {
                ops: own.len() as u32,
                cpu,
                p50,
            });
        }
        self.latencies.extend(own);
        failed.map_or(Ok(()), Err)
    }

    /// Nearest-rank percentile of every latency.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies, p)
    }

    /// CPU per operation: median over batches, min and max.
    pub fn cpu_per_op(&self) -> Option<Spread> {
        Spread::of(self.batches.iter().map(|b| b.cpu / b.ops.max(1)).collect())
    }

    /// Each batch's p50: median, min and max.
    pub fn p50_spread(&self) -> Option<Spread> {
        Spread::of(self.batches.iter().map(|b| b.p50).collect())
    }
}

/// A median and the range around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    /// The median (the lower middle value for an even count).
    pub median: Duration,
    /// The smallest value.
    pub min: Duration,
    /// The largest value.
    pub max: Duration,
}

impl Spread {
    fn of(mut values: Vec<Duration>) -> Option<Spread> {
        values.sort_unstable();
        Some(Spread {
            median: *values.get((values.len().checked_sub(1)?) / 2)?,
            min: *values.first()?,
            max: *values.last()?,
        })
    }
}

/// The nearest-rank `p`th percentile of `samples`.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A duration for a table: µs below a millisecond, ms below ten seconds.
pub fn short(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.1} s", us / 1e6)
    }
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "-".to_string()
    } else {
        format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64())
    }
}

/// The previous run's figures of row `name` in `previous` (as
/// [`to_json`] wrote them): p50 and median CPU per operation.
fn previous_row(previous: Option<&Value>, name: &str) -> Option<(Duration, Duration)> {
    let row = previous?["rows"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)?;
    let us = |field: &str| {
        row[field]
            .as_f64()
            .map(|us| Duration::from_secs_f64(us / 1e6))
    };
    Some((us("p50_us")?, us("cpu_us")?))
}

/// The table of `rows` as cells, header first: latency, CPU, system calls,
/// ratios to the row named `floor` (when present) and to `previous`.
pub fn table(rows: &[Row], floor: Option<&str>, previous: Option<&Value>) -> Vec<Vec<String>> {
    let mut out = vec![[
        "row",
        "ops",
        "p50",
        "p50 range",
        "p99",
        "max",
        "CPU/op",
        "CPU range",
        "syscalls/op",
        "p50 ÷ floor",
        "CPU ÷ floor",
        "p50 ÷ prev",
        "CPU ÷ prev",
    ]
    .map(String::from)
    .to_vec()];
    let floor = floor.and_then(|f| rows.iter().find(|r| r.name == f));
    let dash = || "-".to_string();
    for row in rows {
        let p50 = row.percentile(50.0);
        let cpu = row.cpu_per_op();
        let range = |s: Option<Spread>| {
            s.map_or_else(dash, |s| format!("{}–{}", short(s.min), short(s.max)))
        };
        let vs = |other: Option<(Duration, Duration)>| match (other, p50, cpu) {
            (Some((op50, ocpu)), Some(p50), Some(cpu)) => {
                (ratio(p50, op50), ratio(cpu.median, ocpu))
            }
            _ => (dash(), dash()),
        };
        let to_floor = vs(floor
            .filter(|f| f.name != row.name)
            .and_then(|f| Some((f.percentile(50.0)?, f.cpu_per_op()?.median))));
        let to_prev = vs(previous_row(previous, &row.name));
        out.push(vec![
            row.name.clone(),
            row.latencies.len().to_string(),
            p50.map_or_else(dash, short),
            range(row.p50_spread()),
            row.percentile(99.0).map_or_else(dash, short),
            row.percentile(100.0).map_or_else(dash, short),
            cpu.map_or_else(dash, |c| short(c.median)),
            range(cpu),
            // A slope of a call-free row can come out a hair below zero.
            match (row.syscalls.map(|s| s.max(0.0)), row.clones) {
                (Some(s), Some(c)) if c >= 0.05 => format!("{s:.1} ({c:.1} clone)"),
                (Some(s), _) => format!("{s:.1}"),
                _ => dash(),
            },
            to_floor.0,
            to_floor.1,
            to_prev.0,
            to_prev.1,
        ]);
    }
    out
}

/// `cells` without the columns that are `-` in every row below the
/// header (no floor, no previous run, no system calls counted).
pub fn without_empty_columns(cells: &[Vec<String>]) -> Vec<Vec<String>> {
    let columns = cells.first().map_or(0, Vec::len);
    let keep: Vec<bool> = (0..columns)
        .map(|i| {
            cells
                .iter()
                .skip(1)
                .any(|row| row.get(i).is_some_and(|cell| cell != "-"))
        })
        .collect();
    cells
        .iter()
        .map(|row| {
            row.iter()
                .zip(&keep)
                .filter(|(_, keep)| **keep)
                .map(|(cell, _)| cell.clone())
                .collect()
        })
        .collect()
}

/// `cells` as aligned text columns (the first left-aligned).
pub fn render_text(cells: &[Vec<String>]) -> Vec<String> {
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            cells
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    cells
        .iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                if i == 0 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad + 2));
                    line.push_str(cell);
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// `cells` as a Markdown table.
pub fn render_markdown(cells: &[Vec<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in cells.iter().enumerate() {
        out.push(format!("| {} |", r.join(" | ")));
        if i == 0 {
            out.push(format!("|{}", "---|".repeat(r.len())));
        }
    }
    out
}

/// One row as JSON: counts, percentiles in µs, CPU in µs (median, min,
/// max), system calls when counted, and the histogram.
pub fn row_json(row: &Row) -> Value {
    let us = |d: Option<Duration>| d.map(|d| round3(d.as_secs_f64() * 1e6));
    let ms = |p: f64| row.percentile(p).map(|d| round3(d.as_secs_f64() * 1000.0));
    let cpu = row.cpu_per_op();
    let buckets: Vec<Value> = bucket_counts(&row.latencies)
        .iter()
        .zip(EDGES_MS)
        .map(|(count, le)| {
            json!({ "le_ms": if le.is_finite() { json!(le) } else { json!("inf") }, "count": count })
        })
        .collect();
    let mut out = json!({
        "name": row.name,
        "samples": row.latencies.len(),
        "batches": row.batches.len(),
        "p50_ms": ms(50.0),
        "p90_ms": ms(90.0),
        "p99_ms": ms(99.0),
        "max_ms": ms(100.0),
        "p50_us": us(row.percentile(50.0)),
        "cpu_us": us(cpu.map(|c| c.median)),
        "cpu_min_us": us(cpu.map(|c| c.min)),
        "cpu_max_us": us(cpu.map(|c| c.max)),
        "histogram": buckets,
    });
    // Counted only by the cargo bench (under strace): absent, not null,
    // when they were not.
    if let Value::Object(map) = &mut out {
        for (field, value) in [("syscalls", row.syscalls), ("clones", row.clones)] {
            if let Some(value) = value {
                map.insert(field.to_string(), json!(round3(value)));
            }
        }
    }
    out
}

/// Every row as `{"rows": [...]}`.
pub fn to_json(rows: &[Row]) -> Value {
    json!({ "rows": rows.iter().map(row_json).collect::<Vec<_>>() })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Histogram bucket upper bounds, in milliseconds.
pub const EDGES_MS: [f64; 21] = [
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
    30000.0,
    f64::INFINITY,
];

fn bucket_counts(samples: &[Duration]) -> Vec<usize> {
    let mut counts = vec![0; EDGES_MS.len()];
    for s in samples {
        let ms = s.as_secs_f64() * 1000.0;
        let i = EDGES_MS
            .iter()
            .position(|le| ms < *le)
            .unwrap_or(EDGES_MS.len() - 1);
        counts[i] += 1;
    }
    counts
}

/// One line per bucket from the first to the last non-empty one, with a
/// bar scaled to 40 characters.
pub fn histogram(samples: &[Duration]) -> Vec<String> {
    let counts = bucket_counts(samples);
    let (Some(first), Some(last)) = (
        counts.iter().position(|c| *c > 0),
        counts.iter().rposition(|c| *c > 0),
    ) else {
        return vec!["  (no samples)".to_string()];
    };
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    (first..=last)
        .map(|i| {
            let label = if EDGES_MS[i].is_finite() {
                format!("< {} ms", EDGES_MS[i])
            } else {
                format!(">= {} ms", EDGES_MS[i - 1])
            };
            let width = counts[i].saturating_mul(40).div_ceil(most);
            format!("  {label:>11} |{:<40} {}", "#".repeat(width), counts[i])
        })
        .collect()
}

// The bench (harness = false) compiles no #[test] functions, and then
// leaves this import unused.
#[cfg(test)]
#[allow(unused_imports)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&samples, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(
            percentile(&samples, 100.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(percentile(&[], 50.0), None);
        let one = [Duration::from_millis(7)];
        assert_eq!(percentile(&one, 1.0), Some(one[0]));
    }

    #[test]
    fn the_histogram_spans_the_non_empty_buckets() {
        let samples = [3, 4, 30, 31, 32].map(Duration::from_millis);
        let lines = histogram(&samples);
        assert_eq!(lines.len(), 4, "{lines:#?}"); // < 5, 10, 20 and 50 ms
        assert!(lines[0].contains("< 5 ms") && lines[0].ends_with(" 2"));
        assert!(lines[3].contains("< 50 ms") && lines[3].ends_with(" 3"));
        assert!(lines[1].ends_with(" 0"));
        let slow = [Duration::from_secs(40)];
        assert!(histogram(&slow)[0].contains(">= 30000 ms"));
    }

    #[test]
    fn a_batch_keeps_the_operations_before_an_error() {
        let mut row = Row::new("r");
        let mut left = 3;
        let done = row.batch(10, || {
            left -= 1;
            if left == 0 {
                Err("third")
            } else {
                Ok(())
            }
        });
        assert_eq!(done, Err("third"));
        assert_eq!(row.latencies.len(), 3);
        assert_eq!(row.batches.len(), 1);
        assert_eq!(row.batches[0].ops, 3);
    }

    #[test]
    fn ratios_are_to_the_floor_and_to_the_previous_run() {
        let mut fast = Row::new("floor");
        let mut slow = Row::new("renew");
        for (row, ms) in [(&mut fast, 1), (&mut slow, 3)] {
            row.latencies = vec![Duration::from_millis(ms); 4];
            row.batches = vec![Batch {
                ops: 4,
                cpu: Duration::from_millis(4 * ms),
                p50: Duration::from_millis(ms),
            }];
        }
        let previous = json!({ "rows": [{ "name": "renew", "p50_us": 6000.0, "cpu_us": 1500.0 }] });
        let cells = table(&[fast, slow], Some("floor"), Some(&previous));
        let header = &cells[0];
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        assert_eq!(cells[1][col("p50 ÷ floor")], "-");
        assert_eq!(cells[2][col("p50 ÷ floor")], "3.00x");
        assert_eq!(cells[2][col("CPU ÷ floor")], "3.00x");
        assert_eq!(cells[2][col("p50 ÷ prev")], "0.50x");
        assert_eq!(cells[2][col("CPU ÷ prev")], "2.00x");
        assert_eq!(cells[1][col("p50 ÷ prev")], "-");
        let kept = without_empty_columns(&cells);
        let mut expected = cells[0].clone();
        expected.retain(|h| h != "syscalls/op");
        assert_eq!(kept[0], expected, "only syscalls/op is empty");
        assert_eq!(
            without_empty_columns(&cells[..1]),
            vec![Vec::<String>::new()]
        );
        let md = render_markdown(&cells);
        assert!(md[1].starts_with("|---|"));
        assert_eq!(render_text(&cells).len(), 3);
    }
}
