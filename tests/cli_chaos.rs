//! Real-process chaos: three `bucket-lease run --ttl 3 --wait N` processes
//! contend on one lease on moto, through a TCP fault proxy whose mode a
//! seeded schedule switches during the run (pass, drop the answer of a
//! forwarded request, delay, black-hole, refuse). Each `run` is restarted
//! when it exits until the time is up. Its command (a shell script) appends
//! `L <time> <instance> <epoch> <name>` lines to a shared log and, for each
//! line, writes one object create-only (this test binary, re-invoked as
//! [`chaos_writer`], stamps the epoch and holder metadata and then appends
//! `W <time> ...` once the write landed). The writes go straight to moto,
//! not through the proxy: the proxy models the lease's network, and a write
//! that lands at once makes its landing time the `W` line's, so that what
//! is checked is who held the lease when it landed.
//!
//! The same across the two gateways of one Ceph cluster (two radosgw
//! processes on it): four `run`s, two through each gateway, each gateway
//! behind a fault proxy of its own, a fault window on one gateway's proxy
//! or on both (default 30 s of chaos). Each line's name carries the route
//! its `run` took, so that a black hole counts only for the holders behind
//! it.
//!
//! Afterwards: the lines of each holder (instance, epoch) form an interval
//! and no two intervals overlap (no slack); epochs grow from one holder to
//! the next; every `run` exited with a documented code; during every
//! black-holed window of length at least 3.5 s (from `a` to `b`) no renewal
//! can land, so the last one that landed was sent before `a` and the
//! holder's write deadline is before `a + 2 s` (2/3 of the TTL): no holder
//! with lines in `[a, a + 2 s)` has a line at or after `a + 2 s`, and no line
//! at all lies in `[a + 2 s, b]` (of those behind it: a black hole on one
//! gateway leaves the other's contenders free to take the lease over once
//! the record expires); every object's metadata names the epoch
//! and holder of the line it was written for.
//!
//! ```text
//! BUCKET_LEASE_REQUIRE_SERVERS=1 cargo test --all-features --test cli_chaos
//! BUCKET_LEASE_CHAOS_SECS=600 ... # a longer run (default 40 s, 30 s on RGW)
//! BUCKET_LEASE_CHAOS_SEED=N ...   # replay a schedule (the seed is printed)
//! BUCKET_LEASE_CHAOS_BROKEN=1 ... # the lease broken on purpose: must fail
//! ```
//!
//! The `…_under_r2_write_limit_*` variants put the HTTP proxy of
//! `tests/s3_proxy` between the TCP fault proxy and moto, limiting writes
//! of each key to one a second as Cloudflare R2 does (`429
//! TooManyRequests` beyond it; one variant per reading of the rule), with
//! the contenders on `r2://` URLs (R2's profile), 30 s of chaos by
//! default.
//!
//! `BUCKET_LEASE_CHAOS_BROKEN=1` runs the contenders with
//! `BUCKET_LEASE_CONDITIONAL=off` and proxies that rename the
//! `If-None-Match` / `If-Match` headers, so the server ignores every
//! condition and `run` no longer excludes anyone; the checks are expected
//! to fail then.

mod cli_common;
mod s3_proxy;

use cli_common::Target;
use s3_proxy::WriteLimit;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PASS: u8 = 0;
const DROP_ANSWER: u8 = 1;
const DELAY: u8 = 2;
const BLACK_HOLE: u8 = 3;
const REFUSE: u8 = 4;
const KINDS: [&str; 5] = ["pass", "drop-answer", "delay", "black-hole", "refuse"];

/// The TTL the contenders run with, in seconds.
const TTL_S: f64 = 3.0;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// splitmix64: a seeded schedule with no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ------------------------------------------------------------ fault proxy

/// A TCP proxy on 127.0.0.1 whose mode applies to every connection, old and
/// new, from the moment it is switched.
struct FaultProxy {
    endpoint: String,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    /// Chunks or connections each mode acted on (index: mode).
    hits: Arc<[AtomicU64; 5]>,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    hits: Arc<[AtomicU64; 5]>,
    strip_conditions: bool,
}

impl FaultProxy {
    fn start(upstream: &str, strip_conditions: bool) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let shared = Shared {
            upstream: upstream.trim_start_matches("http://").to_string(),
            mode: Arc::new(AtomicU8::new(PASS)),
            delay_ms: Arc::new(AtomicU64::new(0)),
            hits: Arc::new(Default::default()),
            strip_conditions,
        };
        let proxy = FaultProxy {
            endpoint,
            mode: shared.mode.clone(),
            delay_ms: shared.delay_ms.clone(),
            hits: shared.hits.clone(),
        };
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if shared.mode.load(Ordering::SeqCst) == REFUSE {
                    shared.hits[REFUSE as usize].fetch_add(1, Ordering::Relaxed);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let shared = shared.clone();
                std::thread::spawn(move || relay(client, shared));
            }
        });
        proxy
    }

    fn set(&self, mode: u8, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
        self.mode.store(mode, Ordering::SeqCst);
    }
}

/// Replace `from` by `to` (same length) everywhere in `buf`.
fn rename(buf: &mut [u8], from: &[u8], to: &[u8]) {
    let mut i = 0;
    while i + from.len() <= buf.len() {
        if buf[i..i + from.len()].eq_ignore_ascii_case(from) {
            buf[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
}

fn relay(client: TcpStream, s: Shared) {
    let Ok(server) = TcpStream::connect(&s.upstream) else {
        return;
    };
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = s.clone();
    let up_client = client.try_clone().ok();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf) {
            if up.mode.load(Ordering::SeqCst) == DELAY {
                up.hits[DELAY as usize].fetch_add(1, Ordering::Relaxed);
                let ms = up.delay_ms.load(Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(ms));
            }
            match up.mode.load(Ordering::SeqCst) {
                BLACK_HOLE => {
                    up.hits[BLACK_HOLE as usize].fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                REFUSE => break,
                _ => {}
            }
            if up.strip_conditions {
                rename(&mut buf[..n], b"if-none-match:", b"x-ignored-mat:");
                rename(&mut buf[..n], b"if-match:", b"x-ignore:");
            }
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Both);
        if let Some(c) = up_client {
            let _ = c.shutdown(Shutdown::Both);
        }
    });
    let (mut from_server, mut to_client) = (server, client);
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from_server.read(&mut buf) {
        match s.mode.load(Ordering::SeqCst) {
            BLACK_HOLE => {
                s.hits[BLACK_HOLE as usize].fetch_add(1, Ordering::Relaxed);
                continue;
            }
            DROP_ANSWER => {
                // The request went through; its answer never comes back.
                s.hits[DROP_ANSWER as usize].fetch_add(1, Ordering::Relaxed);
                break;
            }
            REFUSE => break,
            _ => {}
        }
        if to_client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to_client.shutdown(Shutdown::Both);
    let _ = from_server.shutdown(Shutdown::Both);
}

// ------------------------------------------------------- process guard

/// The pids of the `run`s still going; each gets SIGKILL when the guard is
/// dropped (their supervisors then kill their commands), also on a panic.
#[derive(Clone, Default)]
struct Pids(Arc<Mutex<HashSet<u32>>>);

impl Pids {
    fn add(&self, pid: u32) {
        self.0.lock().unwrap().insert(pid);
    }
    fn remove(&self, pid: u32) {
        self.0.lock().unwrap().remove(&pid);
    }
    fn kill_all(&self) {
        let pids: Vec<u32> = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for pid in pids {
            cli_common::kill_pid(&pid.to_string());
        }
    }
}

/// Kills every recorded `run` when dropped (the end of the test, or a
/// panic in it).
struct KillOnDrop(Pids);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill_all();
    }
}

// ---------------------------------------------------------------- writer

/// Not a test of its own: the command's writer. Run by the script as
/// `THIS_BINARY --exact chaos_writer` with `CHAOS_PUT=NAME` and
/// `CHAOS_LOG=LOG` (and `run`'s `BUCKET_LEASE_*`); without them it does
/// nothing.
#[test]
fn chaos_writer() {
    let Ok(name) = std::env::var("CHAOS_PUT") else {
        return;
    };
    use bucket_lease::fence::{EPOCH_METADATA, HOLDER_METADATA};
    use bucket_lease::store::{PutMode, PutOptions};
    let var = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("{n} is not set"));
    let (url, epoch, holder, log) = (
        var("BUCKET_LEASE_URL"),
        var("BUCKET_LEASE_EPOCH"),
        var("BUCKET_LEASE_INSTANCE_ID"),
        var("CHAOS_LOG"),
    );
    let (store, prefix) = bucket_lease::backends::config::open(&url).expect("the store opens");
    let options = PutOptions::new(PutMode::Create)
        .with_deadline(Some(Instant::now() + Duration::from_secs(5)))
        .with_metadata(EPOCH_METADATA, epoch.as_str())
        .with_metadata(HOLDER_METADATA, holder.as_str());
    store
        .put(&format!("{prefix}/chaos/{name}"), name.as_bytes(), &options)
        .expect("the object is written");
    let line = format!("W {:.9} {holder} {epoch} {name}\n", now());
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .expect("the log is written");
}

// ------------------------------------------------------------- the run

/// What the command does: LINES lines, 0.1 s apart, each followed by one
/// create-only write, straight to its route's server (`$DIRECT`); then it
/// exits CODE. Each line's name starts with the route's number (`r0-`).
const SCRIPT: &str = r#"
i=0
while [ "$i" -lt "$LINES" ]; do
  name="r$ROUTE-$BUCKET_LEASE_INSTANCE_ID-$i"
  echo "L $(date +%s.%N) $BUCKET_LEASE_INSTANCE_ID $BUCKET_LEASE_EPOCH $name" >> "$CHAOS_LOG"
  AWS_ENDPOINT_URL="$DIRECT" CHAOS_PUT="$name" "$WRITER" --exact chaos_writer --quiet >/dev/null 2>&1
  i=$((i+1))
  sleep 0.1
done
exit "$CODE"
"#;

struct Exit {
    code: Option<i32>,
    own: i32,
    stderr: String,
}

struct Window {
    mode: u8,
    /// The route whose proxy it was on; `None`: every route's.
    route: Option<usize>,
    from: f64,
    to: f64,
}

impl Window {
    fn hits(&self, route: usize) -> bool {
        self.route.is_none_or(|r| r == route)
    }
}

#[derive(Debug)]
struct Line {
    kind: char,
    t: f64,
    holder: String,
    epoch: u64,
    name: String,
}

impl Line {
    /// The route of the contender that wrote it (its name's `rN-`).
    fn route(&self) -> usize {
        self.name
            .strip_prefix('r')
            .and_then(|n| n.split('-').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a line without its route: {self:?}"))
    }
}

/// A holder: its instance and epoch.
type Holder = (String, u64);
/// A holder's interval: the times of its first and last lines, and the
/// route its `run` took.
type Span = (f64, f64, usize);

/// One way to the store: the fault proxy in front of one server (or
/// gateway), the target through it that the contenders use, and the
/// server's own endpoint, which the writer uses.
struct Route {
    proxy: FaultProxy,
    /// The proxy limiting writes of each key, under a write limit.
    limiter: Option<s3_proxy::FaultProxy>,
    target: Target,
    direct: String,
}

#[test]
fn three_contenders_under_network_faults() {
    chaos("chaos", None, 40);
}

#[test]
fn three_contenders_under_r2_write_limit_accepted_writes() {
    chaos("chaos-r2-accepted", Some(WriteLimit::AcceptedWrites), 30);
}

#[test]
fn three_contenders_under_r2_write_limit_every_write() {
    chaos("chaos-r2-every", Some(WriteLimit::EveryWrite), 30);
}

/// The chaos run on the lease `name`; with `limit`, moto is behind a proxy
/// limiting writes of each key to one a second (read as `limit` says) and
/// the contenders use `r2://` URLs. `default_secs` of chaos unless
/// `BUCKET_LEASE_CHAOS_SECS` says otherwise.
fn chaos(name: &str, limit: Option<WriteLimit>, default_secs: u64) {
    // One chaos run at a time: the test harness would run the variants at
    // once, and their load would eat into each other's timing margins.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(moto) = Target::moto(name) else {
        return;
    };
    contenders_under_network_faults(vec![moto], 3, default_secs, limit);
}

/// The same across the two gateways of one Ceph cluster (two radosgw
/// processes, `scripts/test-servers.sh`): four contenders, two through
/// each gateway, each gateway behind a fault proxy of its own; a fault
/// window is on one gateway's proxy or on both. A holder cut off from its
/// gateway is fenced while the others, through the other gateway, may take
/// the lease over once its record expires.
#[test]
fn contenders_across_two_gateways_under_network_faults() {
    let Some(gateways) = Target::rgw_gateways("chaos-gateways") else {
        return;
    };
    contenders_under_network_faults(Vec::from(gateways), 4, 30, None);
}

/// The chaos run: `contenders` restarted `run`s, contender `c` reaching the
/// store through `servers[c % servers.len()]` (targets naming the same
/// leases, each on its own endpoint) behind a fault proxy of its own, for
/// `default_secs` of faults unless `BUCKET_LEASE_CHAOS_SECS` says; then
/// the checks of the module's documentation. With `limit`, each route has
/// a proxy limiting writes of each key to one a second (read as `limit`
/// says) behind its fault proxy, and the contenders use `r2://` URLs.
fn contenders_under_network_faults(
    servers: Vec<Target>,
    contenders: u64,
    default_secs: u64,
    limit: Option<WriteLimit>,
) {
    let broken = std::env::var("BUCKET_LEASE_CHAOS_BROKEN").as_deref() == Ok("1");
    let secs: u64 = std::env::var("BUCKET_LEASE_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_secs);
    let seed: u64 = std::env::var("BUCKET_LEASE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("chaos: seed {seed} ({secs} s; replay with BUCKET_LEASE_CHAOS_SEED={seed})");

    let routes: Arc<Vec<Route>> = Arc::new(
        servers
            .into_iter()
            .map(|server| {
                let direct = server.endpoint().expect("a server's endpoint").to_string();
                // Under a write limit the chain is TCP faults -> the limit ->
                // the server.
                let limiter = limit.map(|mode| {
                    let limiter = s3_proxy::FaultProxy::start(&direct);
                    limiter.limit_writes(Duration::from_secs(1), mode);
                    limiter
                });
                let upstream = limiter.as_ref().map_or(direct.clone(), |l| l.endpoint());
                let proxy = FaultProxy::start(&upstream, broken);
                let target = server.through(&proxy.endpoint);
                let target = if limit.is_some() {
                    target.on_r2()
                } else {
                    target
                };
                Route {
                    proxy,
                    limiter,
                    target,
                    direct,
                }
            })
            .collect(),
    );
    let t = &routes[0].target;
    let url = t.url("lease");
    assert!(
        routes.iter().all(|r| r.target.url("lease") == url),
        "every route names the same lease"
    );
    let log = t.path("log");
    std::fs::write(&log, b"").unwrap();
    let writer = std::env::current_exe().expect("this test binary");

    let pids = Pids::default();
    let _guard = KillOnDrop(pids.clone());
    let stop_at = Instant::now() + Duration::from_secs(secs);
    let exits: Arc<Mutex<Vec<Exit>>> = Arc::default();

    // The contenders, each restarted when its `run` exits.
    let mut threads = Vec::new();
    for c in 0..contenders {
        let (routes, url, log, writer, pids, exits) = (
            routes.clone(),
            url.clone(),
            log.clone(),
            writer.clone(),
            pids.clone(),
            exits.clone(),
        );
        let route = (c % routes.len() as u64) as usize;
        let mut rng = Rng(seed ^ (c + 1).wrapping_mul(0x5851_f42d_4c95_7f2d));
        threads.push(std::thread::spawn(move || {
            let Route { target, direct, .. } = &routes[route];
            while Instant::now() < stop_at {
                let wait = (1 + rng.below(4)).to_string();
                let lines = (5 + rng.below(30)).to_string();
                let own = if rng.below(4) == 0 { 3 } else { 0 };
                let mut args = vec!["run", "--ttl", "3", "--grace", "1", "--wait", &wait];
                if broken {
                    args.push("--best-effort");
                }
                args.extend([url.as_str(), "--", "sh", "-c", SCRIPT]);
                let mut cmd = target.command(args);
                cmd.env("CHAOS_LOG", &log)
                    .env("ROUTE", route.to_string())
                    .env("DIRECT", direct)
                    .env("WRITER", &writer)
                    .env("LINES", &lines)
                    .env("CODE", own.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                if broken {
                    cmd.env("BUCKET_LEASE_CONDITIONAL", "off");
                }
                let child = cmd.spawn().expect("the binary starts");
                let pid = child.id();
                pids.add(pid);
                let out = child.wait_with_output().expect("run is waited for");
                pids.remove(pid);
                exits.lock().unwrap().push(Exit {
                    code: out.status.code(),
                    own,
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                });
            }
        }));
    }

    // The schedule of faults.
    let mut rng = Rng(seed);
    let mut windows: Vec<Window> = Vec::new();
    // Every fault kind comes once early (between passes), in a seeded
    // order; then the kinds are drawn at random.
    let mut forced = vec![DROP_ANSWER, DELAY, BLACK_HOLE, REFUSE];
    for i in (1..forced.len()).rev() {
        forced.swap(i, rng.below(i as u64 + 1) as usize);
    }
    while Instant::now() < stop_at {
        let drawn = match rng.below(100) {
            0..55 => PASS,
            55..67 => DROP_ANSWER,
            67..79 => DELAY,
            79..90 => BLACK_HOLE,
            _ => REFUSE,
        };
        let mode = match windows.len() % 2 {
            0 if !forced.is_empty() => PASS,
            _ => forced.pop().unwrap_or(drawn),
        };
        let length = match mode {
            BLACK_HOLE => 3500 + rng.below(1500),
            PASS => 1000 + rng.below(3000),
            _ => 300 + rng.below(1700),
        };
        let delay = Duration::from_millis(100 + rng.below(1400));
        // With more than one route, a fault is on one route's proxy or on
        // all of them (one draw more; none with one route).
        let route = match routes.len() {
            1 => None,
            n => Some(rng.below(n as u64 + 1) as usize).filter(|&r| r < n),
        };
        if mode == BLACK_HOLE {
            // Aim it at a holder: start it as a line is written (or after
            // 4 s with none).
            let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
            let (before, until) = (size(&log), Instant::now() + Duration::from_secs(4));
            while size(&log) == before && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let window = Window {
            mode,
            route,
            from: now(),
            to: 0.0,
        };
        for (r, Route { proxy, .. }) in routes.iter().enumerate() {
            if window.hits(r) {
                proxy.set(mode, delay);
            } else {
                proxy.set(PASS, Duration::ZERO);
            }
        }
        std::thread::sleep(Duration::from_millis(length));
        windows.push(Window {
            to: now(),
            ..window
        });
    }
    for Route { proxy, .. } in routes.iter() {
        proxy.set(PASS, Duration::ZERO);
    }

    // Every `run` ends on its own (the commands are short, waits bounded);
    // past this the guard kills what is left and the test fails.
    let drain = Instant::now() + Duration::from_secs(40);
    for c in threads {
        while !c.is_finished() && Instant::now() < drain {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            c.is_finished(),
            "a run did not end within 40 s of the chaos"
        );
        c.join().expect("a contender thread");
    }

    // --------------------------------------------------------- checks
    let mut per_kind = BTreeMap::new();
    for w in &windows {
        *per_kind.entry(KINDS[w.mode as usize]).or_insert(0) += 1;
    }
    let hits: Vec<String> = (1..5)
        .map(|m| {
            let per_route: Vec<String> = routes
                .iter()
                .map(|r| r.proxy.hits[m].load(Ordering::Relaxed).to_string())
                .collect();
            format!("{}={}", KINDS[m], per_route.join("+"))
        })
        .collect();
    let exits = exits.lock().unwrap();
    let mut codes = BTreeMap::new();
    for e in exits.iter() {
        *codes.entry(e.code).or_insert(0) += 1;
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Line> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 5, "a log line: {l:?}");
            Line {
                kind: f[0].chars().next().unwrap(),
                t: f[1].parse().expect("a time"),
                holder: f[2].to_string(),
                epoch: f[3].parse().expect("an epoch"),
                name: f[4].to_string(),
            }
        })
        .collect();
    eprintln!(
        "chaos: seed {seed}: windows {per_kind:?}; requests hit: {}; runs {} (codes {codes:?}); \
         {} lines",
        hits.join(" "),
        exits.len(),
        lines.len()
    );
    for limiter in routes.iter().filter_map(|r| r.limiter.as_ref()) {
        eprintln!(
            "chaos: seed {seed}: {limit:?}: 429s per key: {:?}",
            limiter.throttled_per_key()
        );
    }

    for code in [69, 75, 76] {
        if let Some(e) = exits.iter().find(|e| e.code == Some(code)) {
            let last = e.stderr.lines().last().unwrap_or("");
            eprintln!("chaos: an exit {code}: {last}");
        }
    }
    let mut failures: Vec<String> = Vec::new();

    // 1. Every `run` exited with a documented code.
    for e in exits.iter() {
        let ok =
            matches!(e.code, Some(0 | 69 | 75 | 76 | 77 | 78 | 130 | 143)) || e.code == Some(e.own);
        if !ok {
            failures.push(format!("run exited {:?}: {}", e.code, e.stderr));
        }
    }

    // 2. Holders' lines form intervals that do not overlap; epochs grow.
    // Each holder's interval, and the route its `run` took.
    let mut spans: HashMap<Holder, Span> = HashMap::new();
    for l in &lines {
        let s = spans
            .entry((l.holder.clone(), l.epoch))
            .or_insert((l.t, l.t, l.route()));
        s.0 = s.0.min(l.t);
        s.1 = s.1.max(l.t);
    }
    let mut spans: Vec<(Holder, Span)> = spans.into_iter().collect();
    spans.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
    for pair in spans.windows(2) {
        let ((ha, ea), (_, end_a, _)) = &pair[0];
        let ((hb, eb), (start_b, _, _)) = &pair[1];
        if start_b <= end_a {
            failures.push(format!(
                "holders overlap: {ha} (epoch {ea}) until {end_a:.6}, {hb} (epoch {eb}) from \
                 {start_b:.6}"
            ));
        }
        if eb <= ea {
            failures.push(format!("epoch {eb} ({hb}) followed epoch {ea} ({ha})"));
        }
    }

    // 3. A black-holed holder's command is dead by its write deadline
    // (a holder whose route the black hole was on).
    let fence = 2.0 * TTL_S / 3.0;
    let mut holes_checked = 0;
    // Holders a black hole caught, and how long before its write deadline
    // the last one's last line was.
    let (mut holes_hit, mut margin) = (0, f64::INFINITY);
    for w in windows
        .iter()
        .filter(|w| w.mode == BLACK_HOLE && w.to - w.from >= 3.5)
    {
        holes_checked += 1;
        let deadline = w.from + fence;
        for ((h, e), (start, end, _)) in spans.iter().filter(|s| w.hits(s.1 .2)) {
            if *start < deadline && *end >= w.from {
                holes_hit += 1;
                margin = margin.min(deadline - end);
            }
            if *start < deadline && *end >= w.from && *end >= deadline {
                failures.push(format!(
                    "{h} (epoch {e}) wrote at {end:.6}, after the write deadline {deadline:.6} \
                     of a black hole from {:.6}",
                    w.from
                ));
            }
        }
        let inside = |l: &&Line| l.t >= deadline && l.t <= w.to && w.hits(l.route());
        if let Some(l) = lines.iter().find(inside) {
            failures.push(format!(
                "a line at {:.6} inside a black hole {:.6}..{:.6}: {l:?}",
                l.t, w.from, w.to
            ));
        }
    }

    // 4. Every object names the epoch and holder of its line.
    let (store, prefix) = t.store(&url);
    let mut objects = 0;
    let written: HashSet<&str> = lines
        .iter()
        .filter(|l| l.kind == 'W')
        .map(|l| l.name.as_str())
        .collect();
    for l in lines.iter().filter(|l| l.kind == 'L') {
        match store.get(&format!("{prefix}/chaos/{}", l.name), None) {
            Ok(object) => {
                objects += 1;
                let meta = |n: &str| {
                    object
                        .metadata
                        .iter()
                        .find(|(k, _)| k == n)
                        .map(|(_, v)| v.clone())
                };
                if meta("bucket-lease-epoch") != Some(l.epoch.to_string())
                    || meta("bucket-lease-holder").as_deref() != Some(l.holder.as_str())
                {
                    failures.push(format!(
                        "object {} has metadata {:?}, its line {l:?}",
                        l.name, object.metadata
                    ));
                }
            }
            Err(e) if written.contains(l.name.as_str()) => {
                failures.push(format!("object {} was written but reads as {e}", l.name));
            }
            Err(_) => {}
        }
    }
    let mut per_route = vec![0; routes.len()];
    for (_, (_, _, route)) in &spans {
        per_route[*route] += 1;
    }
    let top_epoch = spans.iter().map(|((_, e), _)| *e).max().unwrap_or(0);
    eprintln!(
        "chaos: seed {seed}: {} holders (per route {per_route:?}), epochs up to {top_epoch}, \
         {objects} objects, {holes_checked} black holes checked, {holes_hit} holders caught in \
         one (last line at least {margin:.3} s before the deadline)",
        spans.len()
    );
    let directs: Vec<&str> = routes.iter().map(|r| r.direct.as_str()).collect();
    assert!(
        spans.len() >= 2,
        "fewer than two holders ran a command, the run proves nothing (run exit codes \
         {codes:?}; are the servers still at {directs:?}?)"
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
