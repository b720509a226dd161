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
    Opt::valued(
        Key::Iters,
        "iters",
        "N",
        "how many acquire/renew/release rounds (default 20)",
    ),
    Opt::valued(
        Key::Renewals,
        "renewals",
        "K",
        "renewals per round (default 10)",
    ),
    Opt::valued(
        Key::Ttl,
        "ttl",
        "DURATION",
        "the TTL of the scratch leases, a whole number of seconds from 1 to 3600 (30, \
               30s, 1m; default 30)",
    ),
    Opt::flag(
        Key::BestEffort,
        "best-effort",
        "measure a best-effort lease (also BUCKET_LEASE_CONDITIONAL=off)",
    ),
    Opt::flag(Key::Json, "json", "one JSON object on stdout"),
    Opt::valued(
        Key::Timeout,
        "timeout",
        "DURATION",
        "give up after DURATION (exit 69; default 10m, or --duration and 2m more), then \
               take at most 2 s more to release the scratch leases and 2 s to remove them",
    ),
    Opt::valued(
        Key::Interval,
        "interval",
        "DURATION",
        "renew at this cadence, open loop, rather than back to back (default a third of \
               the TTL when --duration is given); each renewal's latency counts from its \
               scheduled instant",
    ),
    Opt::valued(
        Key::Duration,
        "duration",
        "DURATION",
        "how long to renew at the cadence (default 1m when --interval is given)",
    ),
    Opt::valued(
        Key::Leases,
        "leases",
        "N",
        "renew N leases at once at the cadence, each on a scratch prefix of its own under \
               one prefix (default 1, at most 1000)",
    ),
    Opt::valued(
        Key::Csv,
        "csv",
        "FILE",
        "write every renewal of the cadence run to FILE, one CSV line each",
    ),
    Opt::valued(
        Key::Plot,
        "plot",
        "FILE",
        "draw the cadence run's latency CDF and time series in FILE (SVG)",
    ),
    Opt::valued(
        Key::Compare,
        "compare",
        "A.json",
        "compare two runs' --json outputs (bench --compare A.json B.json): each \
               percentile of renewal latency in A and B, and B/A; nothing is sent",
    ),
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
