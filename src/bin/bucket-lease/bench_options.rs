//! `bench`'s command line, for both programs that read it: its option
//! table and its documentation. `bucket-lease-bench` parses its arguments
//! with [`OPTIONS`]; `bucket-lease` prints `help bench`, the completions
//! and the man page from [`spec`], and hands `bench` to
//! `bucket-lease-bench` (`bench.rs`). One table, so the help, the
//! completions and the parser cannot disagree.

use crate::args::{Opt, Spec};

/// What `bench` does, for its help and the man page.
pub const ABOUT: &str = "\
Takes, renews and releases a lease N times on a scratch prefix under URL's
({prefix}/bench-XXXXXXXX), never on the real lease, and prints per operation
the latency (p50, the range of p50 across rounds, p99, max), the CPU the
whole process spent (median over rounds, and its range) and a histogram. An
acquire is six requests (a read, the write, and the probe's four: three
refused writes that check the service honours conditions, one accepted on
the record's own ETag, the write a renewal is); a renewal one; a
release one. The table is the one `cargo bench --bench renewal` prints
(docs/BENCHMARKS.md).
";

/// After the options in `bench`'s help.
pub const FOOTER: &str = "\
System calls per renewal (not counted in-process): run it twice under
strace with different --renewals and divide the difference:
  strace -f -c -o a.txt bucket-lease bench -q --iters 1 --renewals 100 URL
  strace -f -c -o b.txt bucket-lease bench -q --iters 1 --renewals 600 URL
  (total calls in b.txt - total calls in a.txt) / 500
";

/// The options of `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Iters,
    Renewals,
    Ttl,
    BestEffort,
    Json,
    Timeout,
    Interval,
    Duration,
    Leases,
    Csv,
    Plot,
    Compare,
}

/// `bench`'s table: parsing, help, completions and the man page.
pub const OPTIONS: &[Opt<Key>] = &[
    Opt {
        key: Key::Iters,
        long: "iters",
        short: None,
        value: Some("N"),
        help: "how many acquire/renew/release rounds (default 20)",
    },
    Opt {
        key: Key::Renewals,
        long: "renewals",
        short: None,
        value: Some("K"),
        help: "renewals per round (default 10)",
    },
    Opt {
        key: Key::Ttl,
        long: "ttl",
        short: None,
        value: Some("DURATION"),
        help: "the TTL of the scratch leases, a whole number of seconds from 1 to 3600 (30, \
               30s, 1m; default 30)",
    },
    Opt {
        key: Key::BestEffort,
        long: "best-effort",
        short: None,
        value: None,
        help: "measure a best-effort lease (also BUCKET_LEASE_CONDITIONAL=off)",
    },
    Opt {
        key: Key::Json,
        long: "json",
        short: None,
        value: None,
        help: "one JSON object on stdout",
    },
    Opt {
        key: Key::Timeout,
        long: "timeout",
        short: None,
        value: Some("DURATION"),
        help: "give up after DURATION (exit 69; default 10m, or --duration and 2m more), then \
               take at most 2 s more to release the scratch leases and 2 s to remove them",
    },
    Opt {
        key: Key::Interval,
        long: "interval",
        short: None,
        value: Some("DURATION"),
        help: "renew at this cadence, open loop, rather than back to back (default a third of \
               the TTL when --duration is given); each renewal's latency counts from its \
               scheduled instant",
    },
    Opt {
        key: Key::Duration,
        long: "duration",
        short: None,
        value: Some("DURATION"),
        help: "how long to renew at the cadence (default 1m when --interval is given)",
    },
    Opt {
        key: Key::Leases,
        long: "leases",
        short: None,
        value: Some("N"),
        help: "renew N leases at once at the cadence, each on a scratch prefix of its own under \
               one prefix (default 1, at most 1000)",
    },
    Opt {
        key: Key::Csv,
        long: "csv",
        short: None,
        value: Some("FILE"),
        help: "write every renewal of the cadence run to FILE, one CSV line each",
    },
    Opt {
        key: Key::Plot,
        long: "plot",
        short: None,
        value: Some("FILE"),
        help: "draw the cadence run's latency CDF and time series in FILE (SVG)",
    },
    Opt {
        key: Key::Compare,
        long: "compare",
        short: None,
        value: Some("A.json"),
        help: "compare two runs' --json outputs (bench --compare A.json B.json): each \
               percentile of renewal latency in A and B, and B/A; nothing is sent",
    },
];

/// `bench`'s documentation.
pub fn spec() -> Spec {
    Spec::new(
        "bench",
        "measure acquire, renew and release against URL's bucket.",
        "bucket-lease bench [OPTIONS] URL\n       bucket-lease-bench [OPTIONS] URL",
        ABOUT,
        FOOTER,
        OPTIONS,
        true,
    )
}
