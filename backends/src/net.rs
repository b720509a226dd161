//! The connections under the HTTP client: a resolver that caches, and a TCP
//! transport that makes a request on a kept connection cost four system
//! calls.
//!
//! ureq resolves the host of every request before it looks in its pool, and
//! its default resolver does so on a freshly spawned thread whenever a
//! timeout is set. [`CachingResolver`] answers IP literals, `localhost` and
//! names under it (loopback, RFC 6761) without a lookup, and other host
//! names from a cache: a name is looked up on a helper thread only
//! when it is not cached (bounded by the request's deadline) or when its
//! addresses are older than [`REFRESH`] (in the background; the request is
//! served the addresses it already had). A failed refresh keeps the last
//! good addresses, so a DNS failure never fails a request that a pooled
//! connection could carry.
//!
//! [`TcpConnector`] makes [`Tcp`] transports, which differ from ureq's own
//! in four ways:
//!
//! - the request head and a body that fits in the output buffer leave in one
//!   `write`, when the transport first waits for the answer;
//! - the socket timeouts are set only when the one in place would end after
//!   the request's deadline, or before half of it; when a timeout that ends
//!   early fires, the exact remainder is set and the read or write goes on,
//!   so every read and write is still bounded by the deadline, exactly;
//! - a pooled connection is checked once, when it is taken from the pool,
//!   with one non-blocking `recv(MSG_PEEK)` (ureq checks it when it returns
//!   to the pool too, each time with two `ioctl`s around a `read`);
//! - on Linux, each wait for an answer first sets `TCP_QUICKACK`, so an
//!   answer a service writes in two segments is not held back 40 ms by
//!   our delayed ACK (see `quick_ack`).
//!
//! Above them, [`proxy`] sends requests through an HTTP proxy (absolute
//! form for `http://` endpoints, a `CONNECT` tunnel for `https://` ones)
//! and [`tls`] wraps connections in TLS with the roots the store trusts.
//! Both take their settings from [`crate::settings`].

use rustix::net::RecvFlags;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use std::{fmt, thread};
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, ShutdownHandle, Transport,
};
use ureq::Error;

/// Why a request was not sent: its host name lookup, its connection or its
/// TLS handshake failed, before any byte of the request left. Travels
/// inside an `io::Error` through ureq, and is found again by the HTTP
/// client to say that the request took no effect.
#[derive(Debug)]
pub(crate) struct NotSent {
    pub(crate) stage: Stage,
    pub(crate) detail: String,
}

/// Where a request that was not sent stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Lookup,
    Connect,
    Tls,
    /// The server's certificate failed verification: no retry can pass.
    Certificate,
    /// The proxy could not be reached, or did not open a tunnel in time.
    Proxy,
    /// The proxy refused the tunnel (credentials, a port it does not
    /// tunnel to): no retry can pass.
    ProxyRefused,
}

impl fmt::Display for NotSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for NotSent {}

/// The error for a request that stopped at `stage`, before it was sent.
pub(crate) fn not_sent(stage: Stage, kind: io::ErrorKind, detail: impl fmt::Display) -> Error {
    Error::Io(io::Error::new(
        kind,
        NotSent {
            stage,
            detail: detail.to_string(),
        },
    ))
}

/// The [`NotSent`] an error carries, if it carries one.
pub(crate) fn not_sent_of(error: &Error) -> Option<&NotSent> {
    match error {
        Error::Io(e) => e.get_ref()?.downcast_ref::<NotSent>(),
        _ => None,
    }
}

/// How long resolved addresses are used before they are looked up again
/// (in the background: requests keep the old ones meanwhile).
pub(crate) const REFRESH: Duration = Duration::from_secs(60);

/// How long after a failed refresh the next one is tried.
const RETRY: Duration = Duration::from_secs(5);

/// Resolves a request's host: a fixed address (`connect_to`), an IP
/// literal as it is, or a host name from the cache (see the module).
#[derive(Debug)]
pub(crate) struct CachingResolver {
    fixed: Option<SocketAddr>,
    hosts: Arc<Mutex<Vec<Entry>>>,
    /// How long addresses are used before a refresh ([`REFRESH`]).
    refresh: Duration,
    /// The lookup itself: the system's (`getaddrinfo`), or a test's.
    pub(crate) lookup: Lookup,
}

pub(crate) type Lookup = fn(&str, u16) -> io::Result<Vec<SocketAddr>>;

fn system_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

impl Default for CachingResolver {
    fn default() -> Self {
        CachingResolver {
            fixed: None,
            hosts: Arc::default(),
            refresh: REFRESH,
            lookup: system_lookup,
        }
    }
}

#[derive(Debug)]
struct Entry {
    host: String,
    port: u16,
    addrs: ResolvedSocketAddrs,
    /// When to look the name up again.
    refresh_at: Instant,
    /// A background refresh is under way.
    refreshing: bool,
}

impl CachingResolver {
    /// Every host resolves to `addr`.
    pub(crate) fn fixed(addr: SocketAddr) -> Self {
        CachingResolver {
            fixed: Some(addr),
            ..CachingResolver::default()
        }
    }

    fn one(&self, addr: SocketAddr) -> ResolvedSocketAddrs {
        let mut addrs = self.empty();
        addrs.push(addr);
        addrs
    }

    /// Look `host:port` up on a helper thread, which stores what it finds
    /// (even after the caller stopped waiting) and answers on the channel.
    fn spawn_lookup(
        &self,
        host: &str,
        port: u16,
    ) -> io::Result<mpsc::Receiver<io::Result<ResolvedSocketAddrs>>> {
        let (tx, rx) = mpsc::sync_channel(1);
        let hosts = Arc::downgrade(&self.hosts);
        let empty = self.empty();
        let name = host.to_string();
        let (lookup, refresh) = (self.lookup, self.refresh);
        thread::Builder::new()
            .name("bucket-lease-resolve".into())
            .spawn(move || {
                let result = lookup(&name, port).and_then(|found| addresses(found, empty));
                store(&hosts, &name, port, refresh, &result);
                // The caller may have stopped waiting.
                let _ = tx.send(result);
            })?;
        Ok(rx)
    }
}

/// The first addresses found, as many as ureq takes.
/// Whether `host` is `localhost` or a name under it, which are the
/// loopback addresses by definition (RFC 6761, section 6.3): answered
/// without a lookup, as curl and browsers do, so that a bucket in the host
/// name (`bucket.localhost`) reaches a local server and no query for it
/// leaves the machine.
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    let tail = host.len().saturating_sub("localhost".len());
    host.get(tail..)
        .is_some_and(|end| end.eq_ignore_ascii_case("localhost"))
        && (tail == 0 || host.as_bytes()[tail - 1] == b'.')
}

fn addresses(
    found: Vec<SocketAddr>,
    mut addrs: ResolvedSocketAddrs,
) -> io::Result<ResolvedSocketAddrs> {
    for addr in found {
        if addrs.try_push(addr).is_err() {
            break;
        }
    }
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the host name resolved to no address",
        ));
    }
    Ok(addrs)
}

/// Record a lookup's result: new addresses on success; on failure the last
/// good ones stay, and the next refresh is tried after [`RETRY`].
fn store(
    hosts: &Weak<Mutex<Vec<Entry>>>,
    host: &str,
    port: u16,
    refresh: Duration,
    result: &io::Result<ResolvedSocketAddrs>,
) {
    let Some(hosts) = hosts.upgrade() else { return };
    let mut hosts = hosts.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    let position = hosts.iter().position(|e| e.host == host && e.port == port);
    match (result, position) {
        (Ok(addrs), Some(i)) => {
            hosts[i].addrs = addrs.clone();
            hosts[i].refresh_at = now + refresh;
            hosts[i].refreshing = false;
        }
        (Ok(addrs), None) => hosts.push(Entry {
            host: host.to_string(),
            port,
            addrs: addrs.clone(),
            refresh_at: now + refresh,
            refreshing: false,
        }),
        (Err(e), Some(i)) => {
            log::warn!(
                "looking up {host} again failed ({e}); new connections keep using the \
                 addresses found before"
            );
            hosts[i].refresh_at = now + RETRY;
            hosts[i].refreshing = false;
        }
        (Err(_), None) => {}
    }
}

impl Resolver for CachingResolver {
    fn resolve(
        &self,
        uri: &Uri,
        _config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, Error> {
        if let Some(addr) = self.fixed {
            return Ok(self.one(addr));
        }
        let authority = uri.authority().ok_or(Error::HostNotFound)?;
        let port = authority
            .port_u16()
            .or_else(|| match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            })
            .ok_or(Error::HostNotFound)?;
        let host = authority.host();
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(self.one(SocketAddr::new(ip, port)));
        }
        if is_localhost(host) {
            let mut addrs = self.one(SocketAddr::from(([127, 0, 0, 1], port)));
            addrs.push(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)));
            return Ok(addrs);
        }
        {
            let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = hosts.iter_mut().find(|e| e.host == host && e.port == port) {
                if !entry.refreshing && Instant::now() >= entry.refresh_at {
                    // Refresh in the background; if no thread can be made,
                    // try again later. Either way, answer what we have.
                    entry.refreshing = self.spawn_lookup(host, port).is_ok();
                    if !entry.refreshing {
                        entry.refresh_at = Instant::now() + RETRY;
                    }
                }
                return Ok(entry.addrs.clone());
            }
        }
        // Not cached: wait for the lookup, within the request's deadline.
        let rx = self
            .spawn_lookup(host, port)
            .map_err(|e| not_sent(Stage::Lookup, e.kind(), e))?;
        let answer = if timeout.after.is_not_happening() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(*timeout.after)
        };
        match answer {
            Ok(Ok(addrs)) => Ok(addrs),
            Ok(Err(e)) => Err(not_sent(Stage::Lookup, e.kind(), e)),
            Err(RecvTimeoutError::Timeout) => Err(not_sent(
                Stage::Lookup,
                io::ErrorKind::TimedOut,
                "the lookup did not finish in time",
            )),
            Err(RecvTimeoutError::Disconnected) => Err(not_sent(
                Stage::Lookup,
                io::ErrorKind::Other,
                "the lookup ended without an answer",
            )),
        }
    }
}

thread_local! {
    /// Whether this thread opened a connection since [`take_opened`].
    static OPENED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread opened a TCP connection since the last call: the
/// HTTP client asks around each request, to learn whether the one it kept
/// was still open (see `http::idle`).
pub(crate) fn take_opened() -> bool {
    OPENED.with(|o| o.replace(false))
}

/// Opens [`Tcp`] transports (see the module); passes on a transport an
/// earlier connector in the chain made (a proxy's).
#[derive(Debug, Default)]
pub(crate) struct TcpConnector;

impl<In: Transport> Connector<In> for TcpConnector {
    type Out = Either<In, Tcp>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if let Some(transport) = chained {
            return Ok(Some(Either::A(transport)));
        }
        let deadline = (!details.timeout.after.is_not_happening())
            .then(|| Instant::now() + *details.timeout.after);
        let began = Instant::now();
        let mut last = None;
        let count = details.addrs.len();
        for (i, addr) in details.addrs.iter().enumerate() {
            // Each address gets an equal share of what is left.
            let share = deadline.map(|d| {
                let left = d.saturating_duration_since(Instant::now());
                (left / u32::try_from(count - i).unwrap_or(1)).max(Duration::from_millis(10))
            });
            let attempt = match share {
                Some(share) => TcpStream::connect_timeout(addr, share),
                None => TcpStream::connect(addr),
            };
            match attempt {
                Ok(stream) => {
                    if details.config.no_delay() {
                        stream.set_nodelay(true)?;
                    }
                    // Closed, the connection is reset and whatever is still
                    // queued to send is dropped: a request abandoned at its
                    // deadline must not go on leaving from the kernel's
                    // buffer, and reach the service whole after it.
                    rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO))
                        .map_err(io::Error::from)?;
                    let transport = Tcp::new(stream, details.config);
                    (details.register_shutdown)(transport.shutdown_handle())?;
                    OPENED.with(|o| o.set(true));
                    crate::trace::connected(began.elapsed());
                    return Ok(Some(Either::B(transport)));
                }
                Err(e) => last = Some(e),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        Err(match last {
            Some(e) if e.kind() != io::ErrorKind::TimedOut => not_sent(Stage::Connect, e.kind(), e),
            Some(_) => not_sent(
                Stage::Connect,
                io::ErrorKind::TimedOut,
                "the connection did not open in time",
            ),
            None => not_sent(
                Stage::Connect,
                io::ErrorKind::Other,
                "no address to connect to",
            ),
        })
    }
}

/// A TCP connection with its buffers (see the module).
pub(crate) struct Tcp {
    stream: Arc<TcpStream>,
    buffers: Bufs,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// I/O happened since the last [`Transport::is_open`]: the connection
    /// is returning to the pool straight after its answer was read.
    used: bool,
}

impl fmt::Debug for Tcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tcp")
            .field("peer", &self.stream.peer_addr().ok())
            .finish_non_exhaustive()
    }
}

impl Tcp {
    fn new(stream: TcpStream, config: &ureq::config::Config) -> Tcp {
        Tcp {
            stream: Arc::new(stream),
            buffers: Bufs::new(config.input_buffer_size(), config.output_buffer_size()),
            read_timeout: None,
            write_timeout: None,
            used: true,
        }
    }

    fn shutdown_handle(&self) -> Weak<dyn ShutdownHandle> {
        Arc::downgrade(&self.stream) as Weak<dyn ShutdownHandle>
    }

    /// Send what [`Transport::transmit_output`] left in the output buffer.
    fn flush(&mut self, timeout: NextTimeout) -> Result<(), Error> {
        if self.buffers.pending == 0 {
            return Ok(());
        }
        self.used = true;
        let timeout = timeout.for_write();
        let deadline = deadline_of(timeout)?;
        let mut sent = 0;
        while sent < self.buffers.pending {
            arm(&mut self.write_timeout, deadline, timeout, |t| {
                self.stream.set_write_timeout(t)
            })?;
            match (&*self.stream).write(&self.buffers.output[sent..self.buffers.pending]) {
                Ok(0) => return Err(Error::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => sent += n,
                Err(e) if retryable(&e) => expired(deadline, timeout, &mut self.write_timeout)?,
                Err(e) => return Err(Error::Io(e)),
            }
        }
        self.buffers.pending = 0;
        Ok(())
    }
}

/// Acknowledge what arrives at once, not after the delayed-ACK timer
/// (40 ms on Linux): a service that writes an answer's head and body in
/// two segments (Ceph RGW does, on a refused write) holds the second back
/// under Nagle until the first is acknowledged, so every such answer would
/// wait for our delayed ACK. Linux leaves quick-ack mode on its own (when
/// it sees a request and answer pattern, which is ours), so this is set
/// before every wait for an answer, one `setsockopt`. A failure only
/// costs the delay. Elsewhere, nothing to do.
fn quick_ack(stream: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = rustix::net::sockopt::set_tcp_quickack(stream, true);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = stream;
}

/// When the timeout ends, `None` for never; an error when it has ended.
fn deadline_of(timeout: NextTimeout) -> Result<Option<Instant>, Error> {
    if timeout.after.is_not_happening() {
        Ok(None)
    } else if timeout.after.is_zero() {
        Err(Error::Timeout(timeout.reason))
    } else {
        Ok(Some(Instant::now() + *timeout.after))
    }
}

fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A socket timeout fired (or a signal interrupted the call): an error when
/// the deadline has passed, else forget the timeout in place so the next
/// [`arm`] sets the exact remainder.
fn expired(
    deadline: Option<Instant>,
    timeout: NextTimeout,
    current: &mut Option<Duration>,
) -> Result<(), Error> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(Error::Timeout(timeout.reason));
    }
    *current = Some(Duration::ZERO);
    Ok(())
}

/// Make the socket timeout in place end no later than `deadline`, setting
/// it only when it would end after the deadline or before half of the
/// time left (a timeout that ends early is answered by [`expired`]).
fn arm(
    current: &mut Option<Duration>,
    deadline: Option<Instant>,
    timeout: NextTimeout,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> Result<(), Error> {
    let want = match deadline {
        None => None,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(timeout.reason));
            }
            Some(left)
        }
    };
    let new = match (*current, want) {
        (None, None) => return Ok(()),
        (Some(c), Some(w)) if !c.is_zero() && c <= w && c >= w / 2 => return Ok(()),
        // After a timeout that ended early: exactly what is left.
        (Some(c), Some(w)) if c.is_zero() => Some(w),
        // Three quarters of what is left, so that the next requests, with
        // about the same time left, keep it (never below a millisecond:
        // the kernel counts in ticks anyway).
        (_, want) => want.map(|w| (w / 4 * 3).max(Duration::from_millis(1)).min(w)),
    };
    set(new)?;
    *current = new;
    Ok(())
}

impl Transport for Tcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    /// Keep the bytes until the output buffer is half full or the answer is
    /// awaited, so that the head and a small body go in one `write`.
    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        self.buffers.pending += amount;
        if self.buffers.pending * 2 >= self.buffers.output.len() {
            self.flush(timeout)?;
        }
        Ok(())
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.flush(timeout)?;
        if self.buffers.can_use_input() {
            return Ok(true);
        }
        self.await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.flush(timeout)?;
        self.used = true;
        let timeout = timeout.for_read();
        let deadline = deadline_of(timeout)?;
        quick_ack(&self.stream);
        loop {
            arm(&mut self.read_timeout, deadline, timeout, |t| {
                self.stream.set_read_timeout(t)
            })?;
            let input = self.buffers.input_append_buf();
            match (&*self.stream).read(input) {
                Ok(n) => {
                    self.buffers.input_appended(n);
                    return Ok(n > 0);
                }
                Err(e) if retryable(&e) => expired(deadline, timeout, &mut self.read_timeout)?,
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }

    /// Right after an answer (the connection going back to the pool) this
    /// answers yes without a system call: the check that matters is the one
    /// when the connection is taken from the pool, one `recv(MSG_PEEK |
    /// MSG_DONTWAIT)`, where anything but "would block" (bytes nobody asked
    /// for, the end of the stream, an error) means closed.
    fn is_open(&mut self) -> bool {
        if self.buffers.pending > 0 {
            return false;
        }
        if std::mem::take(&mut self.used) {
            return true;
        }
        let mut byte = [0u8; 1];
        matches!(
            rustix::net::recv(
                &*self.stream,
                &mut byte[..],
                RecvFlags::PEEK | RecvFlags::DONTWAIT
            ),
            Err(rustix::io::Errno::AGAIN)
        )
    }
}

/// The buffers of one connection, allocated (and zeroed) once when it
/// opens. `output[..pending]` was handed to `transmit_output` and is not
/// sent yet; `input[consumed..filled]` is read and not yet consumed.
struct Bufs {
    input: Vec<u8>,
    consumed: usize,
    filled: usize,
    progress: bool,
    output: Vec<u8>,
    pending: usize,
}

impl Bufs {
    fn new(input: usize, output: usize) -> Bufs {
        Bufs {
            input: vec![0; input.max(1024)],
            consumed: 0,
            filled: 0,
            progress: false,
            output: vec![0; output.max(1024)],
            pending: 0,
        }
    }
}

impl Buffers for Bufs {
    fn output(&mut self) -> &mut [u8] {
        &mut self.output[self.pending..]
    }

    fn input(&self) -> &[u8] {
        &self.input[self.consumed..self.filled]
    }

    fn input_append_buf(&mut self) -> &mut [u8] {
        if self.consumed > 0 && self.filled == self.input.len() {
            // Move what is left to the front to make room.
            self.input.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
            self.consumed = 0;
        }
        &mut self.input[self.filled..]
    }

    fn input_appended(&mut self, amount: usize) {
        self.filled += amount;
    }

    fn input_consume(&mut self, amount: usize) {
        self.progress = amount > 0;
        self.consumed += amount;
        if self.consumed == self.filled {
            self.consumed = 0;
            self.filled = 0;
        }
    }

    /// The scratch space is used only for chunked request bodies, which
    /// this client never sends (bodies are slices of known length).
    fn tmp_and_output(&mut self) -> (&mut [u8], &mut [u8]) {
        let tmp = &mut self.input[self.filled..];
        (tmp, &mut self.output[self.pending..])
    }

    fn can_use_input(&self) -> bool {
        self.filled > self.consumed && self.progress
    }
}

pub(crate) mod proxy;
pub(crate) mod tls;

#[cfg(test)]
mod tests;
