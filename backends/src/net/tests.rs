use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use ureq::unversioned::transport::time::Duration as UreqDuration;

fn config() -> ureq::config::Config {
    ureq::config::Config::default()
}

fn within(timeout: Duration) -> NextTimeout {
    NextTimeout {
        after: UreqDuration::Exact(timeout),
        reason: ureq::Timeout::Global,
        per_read: None,
        per_write: None,
    }
}

fn resolve(resolver: &CachingResolver, url: &str) -> Result<Vec<SocketAddr>, Error> {
    let uri: Uri = url.parse().unwrap();
    resolver
        .resolve(&uri, &config(), within(Duration::from_secs(5)))
        .map(|addrs| addrs.to_vec())
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn no_lookup(host: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
    panic!("looked up {host}")
}

#[test]
fn ip_literals_and_a_fixed_address_resolve_without_a_lookup() {
    let resolver = CachingResolver {
        lookup: no_lookup,
        ..CachingResolver::default()
    };
    assert_eq!(
        resolve(&resolver, "http://127.0.0.1:9000/b/k").unwrap(),
        [addr("127.0.0.1:9000")]
    );
    assert_eq!(
        resolve(&resolver, "https://[::1]/b/k").unwrap(),
        [addr("[::1]:443")]
    );
    assert_eq!(
        resolve(&resolver, "http://10.1.2.3/k").unwrap(),
        [addr("10.1.2.3:80")]
    );
    let fixed = CachingResolver {
        lookup: no_lookup,
        ..CachingResolver::fixed(addr("127.0.0.1:7"))
    };
    assert_eq!(
        resolve(&fixed, "https://bkt.s3.example.com/k").unwrap(),
        [addr("127.0.0.1:7")]
    );
}

static CACHED_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

fn counted_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    assert_eq!(host, "store.example");
    CACHED_LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok(vec![SocketAddr::new([127, 0, 0, 1].into(), port)])
}

#[test]
fn a_host_name_is_looked_up_once_then_served_from_the_cache() {
    let resolver = CachingResolver {
        lookup: counted_lookup,
        ..CachingResolver::default()
    };
    for _ in 0..5 {
        assert_eq!(
            resolve(&resolver, "http://store.example:9000/k").unwrap(),
            [addr("127.0.0.1:9000")]
        );
    }
    assert_eq!(CACHED_LOOKUPS.load(Ordering::SeqCst), 1);
    // Another port is another entry.
    assert_eq!(
        resolve(&resolver, "https://store.example/k").unwrap(),
        [addr("127.0.0.1:443")]
    );
    assert_eq!(CACHED_LOOKUPS.load(Ordering::SeqCst), 2);
}

static FLAKY_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// Succeeds once, then fails.
fn flaky_lookup(_: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if FLAKY_LOOKUPS.fetch_add(1, Ordering::SeqCst) == 0 {
        Ok(vec![SocketAddr::new([127, 0, 0, 2].into(), port)])
    } else {
        Err(io::Error::other("DNS is down"))
    }
}

#[test]
fn a_failed_refresh_keeps_the_last_good_addresses_and_never_fails_a_request() {
    let resolver = CachingResolver {
        lookup: flaky_lookup,
        // Every answer is due for a refresh at once.
        refresh: Duration::ZERO,
        ..CachingResolver::default()
    };
    let good = [addr("127.0.0.2:9000")];
    assert_eq!(
        resolve(&resolver, "http://flaky.example:9000/").unwrap(),
        good
    );
    // Due: served the old addresses at once, refreshed in the background.
    assert_eq!(
        resolve(&resolver, "http://flaky.example:9000/").unwrap(),
        good
    );
    let wait = Instant::now() + Duration::from_secs(10);
    while FLAKY_LOOKUPS.load(Ordering::SeqCst) < 2 || resolver.hosts.lock().unwrap()[0].refreshing {
        assert!(Instant::now() < wait, "the refresh never ran");
        thread::sleep(Duration::from_millis(5));
    }
    // The refresh failed: still the old addresses, and no refresh before
    // RETRY has passed.
    for _ in 0..3 {
        assert_eq!(
            resolve(&resolver, "http://flaky.example:9000/").unwrap(),
            good
        );
    }
    assert_eq!(FLAKY_LOOKUPS.load(Ordering::SeqCst), 2);
}

fn failing_lookup(_: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
    Err(io::Error::other("DNS is down"))
}

fn empty_lookup(_: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
    Ok(Vec::new())
}

fn slow_lookup(_: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    thread::sleep(Duration::from_secs(2));
    Ok(vec![SocketAddr::new([127, 0, 0, 1].into(), port)])
}

#[test]
fn a_name_never_resolved_fails_and_a_lookup_is_bounded_by_the_deadline() {
    for lookup in [failing_lookup as Lookup, empty_lookup] {
        let resolver = CachingResolver {
            lookup,
            ..CachingResolver::default()
        };
        assert!(resolve(&resolver, "http://down.example/").is_err());
    }
    let resolver = CachingResolver {
        lookup: slow_lookup,
        ..CachingResolver::default()
    };
    let uri: Uri = "http://slow.example/".parse().unwrap();
    let started = Instant::now();
    let e = resolver
        .resolve(&uri, &config(), within(Duration::from_millis(50)))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::TimedOut),
        "{e}"
    );
    assert_eq!(not_sent_of(&e).map(|n| n.stage), Some(Stage::Lookup));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn buffers_hand_out_the_output_after_what_is_pending_and_compact_the_input() {
    let mut b = Bufs::new(1024, 1024);
    b.output()[..3].copy_from_slice(b"abc");
    b.pending += 3;
    assert_eq!(b.output().len(), 1021);
    b.output()[..2].copy_from_slice(b"de");
    b.pending += 2;
    assert_eq!(&b.output[..b.pending], b"abcde");

    let n = b.input_append_buf().len();
    assert_eq!(n, 1024);
    b.input_append_buf()[..1024].fill(7);
    b.input_appended(1024);
    b.input_consume(1000);
    assert!(b.can_use_input());
    assert_eq!(b.input().len(), 24);
    // Full: what is left moves to the front.
    assert_eq!(b.input_append_buf().len(), 1000);
    assert_eq!(b.input(), [7; 24]);
    b.input_consume(24);
    assert!(b.input().is_empty());
    assert_eq!(b.input_append_buf().len(), 1024);
}

#[test]
fn localhost_names_are_localhost_and_its_subdomains_only() {
    for host in [
        "localhost",
        "LOCALHOST",
        "bkt.localhost",
        "a.b.localhost",
        "localhost.",
    ] {
        assert!(is_localhost(host), "{host}");
    }
    for host in [
        "notlocalhost",
        "localhost.example",
        "local",
        "",
        "bkt.localhost.net",
    ] {
        assert!(!is_localhost(host), "{host}");
    }
}

/// Waiting for an answer puts the socket in quick-ack mode each time, so
/// that a service that writes an answer's head and body in two segments
/// (Ceph RGW does, on a refusal) is not held back by our delayed ACK
/// (Nagle on its side waits for it: 40 ms). Read back with `getsockopt`:
/// the socket is first put in delayed-ACK mode, as the kernel does after
/// our request goes out, and the peer answers only once it sees quick-ack
/// mode set by the wait, so this fails (after 5 s) when the wait never
/// sets it.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn each_wait_for_an_answer_sets_quick_ack_mode() {
    use rustix::net::sockopt::{set_tcp_quickack, tcp_quickack};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let probe = stream.try_clone().unwrap();
    let mut tcp = Tcp::new(stream, &config());
    for round in 1..=3 {
        set_tcp_quickack(&probe, false).unwrap();
        assert!(
            !tcp_quickack(&probe).unwrap(),
            "round {round}: delayed ACKs"
        );
        let waiting = thread::spawn(move || {
            let answered = tcp.await_input(within(Duration::from_secs(10)));
            (tcp, answered)
        });
        let wait = Instant::now() + Duration::from_secs(5);
        while !tcp_quickack(&probe).unwrap() {
            if Instant::now() >= wait {
                peer.write_all(b"x").unwrap();
                waiting.join().unwrap().1.unwrap();
                panic!("round {round}: waiting for an answer left delayed ACKs on");
            }
            thread::sleep(Duration::from_millis(1));
        }
        peer.write_all(b"answer").unwrap();
        let (back, answered) = waiting.join().unwrap();
        assert!(answered.unwrap(), "round {round}");
        tcp = back;
        let n = tcp.buffers().input().len();
        tcp.buffers().input_consume(n);
    }
}
