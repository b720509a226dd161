//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 for the tests that speak
//! to real S3-compatible servers (`tests/s3_speak.rs`).
//!
//! It reads each request (head, then as many body bytes as its
//! `Content-Length` says) and, unless a fault is due, sends its bytes to
//! the upstream server unchanged on a connection of its own (the `Host`
//! header the client signed arrives as it was sent), reads the whole
//! answer (by `Content-Length`, chunked, or up to the close) and hands its
//! bytes back. What it adds:
//!
//! - rules: the next N requests with a given method whose decoded path
//!   holds a given text get a canned answer (status, headers, an S3 error
//!   body) without being forwarded, or are forwarded and then get no answer
//!   at all (the client's connection is closed once the upstream answered);
//! - S3's key limit: a request whose key (the percent-decoded path after
//!   the bucket, path-style) is longer than 1024 bytes is answered `400
//!   KeyTooLongError` and not forwarded;
//! - a delay added to every request before it is forwarded (a slow
//!   network path), [`FaultProxy::delay`];
//! - RGW 16.2's refusal of every quoted `If-Match` on PUT, right or wrong
//!   ([`FaultProxy::refuse_quoted_if_match`]);
//! - Cloudflare R2's limit on writes to one key ("Maximum concurrent writes
//!   to the same object name (key): 1 per second", answered `429
//!   TooManyRequests`), [`FaultProxy::limit_writes`], in two readings
//!   ([`WriteLimit`]): see there for what counts as a write and when;
//! - a log of every request: method, decoded path, `Host`, what the proxy
//!   did with it, the status the client got, when it arrived and when it
//!   was forwarded.

// Each test file uses a part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest key S3 accepts, in bytes of its UTF-8 form.
pub const MAX_KEY_BYTES: usize = 1024;

/// A canned answer the proxy gives instead of forwarding.
#[derive(Debug, Clone)]
pub struct Answer {
    status: u16,
    reason: &'static str,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    /// `status` with an S3 error body carrying `code` and `message`, plus
    /// the elements `extra` (name, text) inside `<Error>`.
    pub fn error(status: u16, code: &str, message: &str, extra: &[(&str, &str)]) -> Answer {
        let mut body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{message}</Message>"
        );
        for (name, text) in extra {
            body.push_str(&format!("<{name}>{text}</{name}>"));
        }
        body.push_str("<RequestId>fault-proxy</RequestId></Error>");
        Answer {
            status,
            reason: reason(status),
            headers: Vec::new(),
            body,
        }
    }

    /// R2's answer to a write of a key beyond its limit (R2 error 10058,
    /// <https://developers.cloudflare.com/r2/api/error-codes/>): `429` with
    /// the S3 code `TooManyRequests`.
    pub fn too_many_requests() -> Answer {
        Answer::error(
            429,
            "TooManyRequests",
            "Reduce your concurrent request rate for the same object.",
            &[],
        )
    }

    /// This answer with the header `name: value` too.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let mut text = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n",
            self.status,
            self.reason,
            self.body.len()
        );
        for (name, value) in &self.headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        if !head_only {
            text.push_str(&self.body);
        }
        text.into_bytes()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        301 => "Moved Permanently",
        400 => "Bad Request",
        403 => "Forbidden",
        412 => "Precondition Failed",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Fault",
    }
}

/// What the proxy does with a request a rule matches.
#[derive(Debug, Clone)]
enum Fault {
    /// Answer this instead of forwarding.
    Answer(Answer),
    /// Forward, read the upstream's answer, then close the client's
    /// connection without a byte of it.
    DropAnswer,
    /// Forward unchanged: a rule added before others lets the first
    /// requests through.
    Pass,
}

#[derive(Debug)]
struct Rule {
    method: String,
    path_contains: String,
    remaining: usize,
    fault: Fault,
}

/// What the proxy did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Forwarded and answered with the upstream's answer.
    Forwarded,
    /// Answered by a rule with this status, not forwarded.
    Injected(u16),
    /// Forwarded; the answer was dropped and the connection closed.
    Dropped,
    /// Refused with `KeyTooLongError`, not forwarded.
    KeyTooLong,
    /// A write refused by the write limit ([`FaultProxy::limit_writes`]):
    /// answered `429 TooManyRequests`, not forwarded.
    Throttled,
    /// The upstream could not be reached or gave no whole answer; the
    /// client's connection was closed.
    UpstreamFailed,
    /// Not HTTP (a TLS handshake, say): answered `400` as a plain-HTTP
    /// server would, and closed.
    NotHttp,
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The query string as sent (without `?`), empty when none.
    pub query: String,
    /// The `Host` header as sent.
    pub host: String,
    /// What the proxy did with it.
    pub outcome: Outcome,
    /// The status the client was answered with (the upstream's, or the
    /// proxy's own); `None` when the client got no answer.
    pub status: Option<u16>,
    /// When its head had arrived from the client.
    pub arrived: Instant,
    /// When it was sent to the upstream server (after any delay); `None`
    /// when it was not forwarded.
    pub forwarded: Option<Instant>,
    /// Which client connection it came on (1, 2, … in the order accepted).
    pub connection: usize,
    /// Which request of that connection it was (0 for the first).
    pub nth: usize,
}

struct Shared {
    upstream: String,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Seen>>,
    delay: Mutex<Duration>,
    refuse_quoted_if_match: std::sync::atomic::AtomicBool,
    limit: Mutex<Limiter>,
    idle_close: Mutex<Option<Duration>>,
    connections: std::sync::atomic::AtomicUsize,
}

/// Which writes of a key start the window in which the next write of that
/// key is refused ([`FaultProxy::limit_writes`]).
///
/// What is a write of a key (the percent-decoded path, `/bucket/key`; a
/// request on the bucket itself has no key and is never limited): a `PUT`
/// (PutObject, CopyObject), a `DELETE` (an object removed is written too)
/// and a `POST` on the key (CompleteMultipartUpload among them). An
/// UploadPart (`PUT` with `partNumber` and `uploadId` in the query) is not:
/// it writes a part of an upload, not the object name, which only
/// CompleteMultipartUpload writes; were parts writes of the key, the
/// concurrent part uploads every S3 SDK makes (and R2 supports) could not
/// work on R2.
///
/// In both readings a write that arrives while another write of the same
/// key is in flight (forwarded, not yet answered) is refused: the limit is
/// on *concurrent* writes. A window starts when the upstream answered the
/// write (its end), so a client that spaces its writes by the interval
/// from their answers is never refused, one that spaces them from their
/// starts may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteLimit {
    /// A write within the interval after the key's last *accepted* write
    /// (the upstream answered 2xx) is refused; a write the upstream refused
    /// (a `412` of a condition) or a `429` of the limit starts no window.
    AcceptedWrites,
    /// Every write forwarded to the upstream starts a window, whatever its
    /// answer (a `412` too, and one whose answer never came); a `429` of
    /// the limit does not (the write never reached the key).
    EveryWrite,
}

/// The write limit's state: off until [`FaultProxy::limit_writes`].
#[derive(Debug, Default)]
struct Limiter {
    rule: Option<(Duration, WriteLimit)>,
    /// The `Retry-After` header (seconds) sent with each `429`, if any.
    retry_after: Option<u64>,
    /// Per key: the end of the last write that started a window, and how
    /// many writes are in flight.
    keys: HashMap<String, (Option<Instant>, usize)>,
    /// Per key: how many writes were answered `429` by the limit.
    throttled: HashMap<String, usize>,
}

/// The key a `method` request on the decoded `path` with `query` writes,
/// or `None` when it writes no key (a read, a bucket-level request, an
/// UploadPart).
fn written_key(method: &str, path: &str, query: &str) -> Option<String> {
    let has_key = path
        .trim_start_matches('/')
        .split_once('/')
        .is_some_and(|(_, key)| !key.is_empty());
    let upload_part = method == "PUT"
        && query.split('&').any(|p| p.starts_with("partNumber="))
        && query.split('&').any(|p| p.starts_with("uploadId="));
    (matches!(method, "PUT" | "POST" | "DELETE") && has_key && !upload_part)
        .then(|| path.to_string())
}

impl Limiter {
    /// Whether a write of `key` may be forwarded now; when it may, it is in
    /// flight until [`settle`](Self::settle).
    fn admit(&mut self, key: &str) -> bool {
        let Some((interval, _)) = self.rule else {
            return true;
        };
        let now = Instant::now();
        let state = self.keys.entry(key.to_string()).or_insert((None, 0));
        let recent = state.0.is_some_and(|end| now < end + interval);
        if state.1 > 0 || recent {
            *self.throttled.entry(key.to_string()).or_insert(0) += 1;
            return false;
        }
        state.1 += 1;
        true
    }

    /// A write of `key` admitted by [`admit`](Self::admit) was answered
    /// `status` by the upstream (`None`: no whole answer).
    fn settle(&mut self, key: &str, status: Option<u16>) {
        let Some((_, mode)) = self.rule else {
            return;
        };
        let state = self.keys.entry(key.to_string()).or_insert((None, 1));
        state.1 = state.1.saturating_sub(1);
        // No answer: it may have landed, so it counts in either reading.
        let accepted = status.is_none_or(|s| (200..300).contains(&s));
        if accepted || mode != WriteLimit::AcceptedWrites {
            state.0 = Some(Instant::now());
        }
    }

    fn answer(&self) -> Answer {
        let answer = Answer::too_many_requests();
        match self.retry_after {
            Some(seconds) => answer.header("retry-after", &seconds.to_string()),
            None => answer,
        }
    }
}

/// The proxy: listening until the test process ends.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` (`http://host:port`).
    pub fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: upstream.trim_start_matches("http://").to_string(),
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            delay: Mutex::new(Duration::ZERO),
            refuse_quoted_if_match: std::sync::atomic::AtomicBool::new(false),
            limit: Mutex::new(Limiter::default()),
            idle_close: Mutex::new(None),
            connections: std::sync::atomic::AtomicUsize::new(0),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let shared = Arc::clone(&accepting);
                std::thread::spawn(move || serve(client, &shared));
            }
        });
        FaultProxy { port, shared }
    }

    /// Close a client connection that sent nothing for `idle` after its
    /// last answer (the server side closes it, as nginx, load balancers and
    /// some S3-compatible servers do); `None`, the default, keeps it.
    pub fn close_idle(&self, idle: Option<Duration>) {
        *self.shared.idle_close.lock().unwrap() = idle;
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answer the next `times` `method` requests whose decoded path holds
    /// `path_contains` with `answer`, not forwarding them.
    pub fn inject(&self, method: &str, path_contains: &str, times: usize, answer: Answer) {
        self.add(method, path_contains, times, Fault::Answer(answer));
    }

    /// Forward the next `times` `method` requests whose decoded path holds
    /// `path_contains`, then close the client's connection unanswered.
    pub fn drop_answer(&self, method: &str, path_contains: &str, times: usize) {
        self.add(method, path_contains, times, Fault::DropAnswer);
    }

    /// Forward the next `times` `method` requests whose decoded path holds
    /// `path_contains` unchanged, before any rule added later applies.
    pub fn pass(&self, method: &str, path_contains: &str, times: usize) {
        self.add(method, path_contains, times, Fault::Pass);
    }

    /// Hold every request that arrives from now on for `delay` before
    /// forwarding it (its answer is not delayed further).
    pub fn delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// Answer every PUT whose `If-Match` carries an ETag in quotes with
    /// `412 PreconditionFailed`, right or wrong, as Ceph RGW 16.2 does (a
    /// bare ETag is forwarded).
    pub fn refuse_quoted_if_match(&self) {
        self.shared
            .refuse_quoted_if_match
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Limit writes of each key as Cloudflare R2 does: a write of a key
    /// within `interval` of the end of the key's last write (which writes
    /// count: `mode`, see [`WriteLimit`]), or while another write of it is
    /// in flight, is answered `429 TooManyRequests` (R2's S3 error body)
    /// and not forwarded. Replaces an earlier limit; the keys' history is
    /// kept.
    pub fn limit_writes(&self, interval: Duration, mode: WriteLimit) {
        self.shared.limit.lock().unwrap().rule = Some((interval, mode));
    }

    /// Send `Retry-After: SECONDS` with each `429` of the write limit
    /// (`None`, the default: no header, as R2 documents none).
    pub fn retry_after(&self, seconds: Option<u64>) {
        self.shared.limit.lock().unwrap().retry_after = seconds;
    }

    /// Lift the write limit (the counts of [`throttled`](Self::throttled)
    /// stay).
    pub fn unlimit_writes(&self) {
        self.shared.limit.lock().unwrap().rule = None;
    }

    /// How many writes the write limit answered `429`, over the keys whose
    /// decoded path (`/bucket/key`) holds `path_contains` (every key for
    /// `""`).
    pub fn throttled(&self, path_contains: &str) -> usize {
        self.shared
            .limit
            .lock()
            .unwrap()
            .throttled
            .iter()
            .filter(|(key, _)| key.contains(path_contains))
            .map(|(_, n)| n)
            .sum()
    }

    /// The write limit's `429`s per key (decoded path), for messages.
    pub fn throttled_per_key(&self) -> Vec<(String, usize)> {
        let mut all: Vec<(String, usize)> = self
            .shared
            .limit
            .lock()
            .unwrap()
            .throttled
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        all.sort();
        all
    }

    /// Forget every rule: forward everything from now on.
    pub fn clear(&self) {
        self.shared.rules.lock().unwrap().clear();
    }

    fn add(&self, method: &str, path_contains: &str, times: usize, fault: Fault) {
        self.shared.rules.lock().unwrap().push(Rule {
            method: method.to_string(),
            path_contains: path_contains.to_string(),
            remaining: times,
            fault,
        });
    }

    /// Every request seen so far, in order of arrival.
    pub fn log(&self) -> Vec<Seen> {
        self.shared.log.lock().unwrap().clone()
    }

    /// How many `method` requests (any method for `""`) whose decoded path
    /// holds `path_contains` the proxy saw (whatever it did with them).
    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.count_where(method, path_contains, |_| true)
    }

    /// How many of those [`count`](Self::count) counts ended in `outcome`.
    pub fn count_outcome(&self, method: &str, path_contains: &str, outcome: Outcome) -> usize {
        self.count_where(method, path_contains, |o| o == outcome)
    }

    fn count_where(&self, method: &str, path: &str, keep: impl Fn(Outcome) -> bool) -> usize {
        self.log()
            .iter()
            .filter(|s| {
                (method.is_empty() || s.method == method)
                    && s.path.contains(path)
                    && keep(s.outcome)
            })
            .count()
    }
}

/// `text` with each `%XX` replaced by its byte (lossy UTF-8 after).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request's head as received, and what the proxy needs of it.
struct Head {
    raw: Vec<u8>,
    method: String,
    target: String,
    host: String,
    content_length: usize,
    /// The `If-Match` header, as sent.
    if_match: Option<String>,
}

/// Read one request head; `None` at the end of the connection.
fn read_head(reader: &mut impl BufRead) -> Option<Head> {
    let mut raw = Vec::new();
    loop {
        let before = raw.len();
        if reader.read_until(b'\n', &mut raw).ok()? == 0 {
            return None;
        }
        if raw[before..] == *b"\r\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let target = request_line.next()?.to_string();
    let (mut host, mut content_length, mut if_match) = (String::new(), 0, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "host" => host = value.trim().to_string(),
            "content-length" => content_length = value.trim().parse().unwrap_or(0),
            "if-match" => if_match = Some(value.trim().to_string()),
            _ => {}
        }
    }
    Some(Head {
        raw,
        method,
        target,
        host,
        content_length,
        if_match,
    })
}

/// Serve one client connection, request after request.
fn serve(client: TcpStream, shared: &Shared) {
    let Ok(mut to_client) = client.try_clone() else {
        return;
    };
    let connection = shared
        .connections
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        + 1;
    let mut nth = 0;
    let mut reader = BufReader::new(client);
    // A request starts with its method's capital letters; anything else
    // (a TLS ClientHello) gets what a plain-HTTP server would answer.
    if let Ok([first, ..]) = reader.fill_buf() {
        if !first.is_ascii_uppercase() {
            shared.log.lock().unwrap().push(Seen {
                method: String::new(),
                path: String::new(),
                query: String::new(),
                host: String::new(),
                outcome: Outcome::NotHttp,
                status: Some(400),
                arrived: Instant::now(),
                forwarded: None,
                connection,
                nth: 0,
            });
            let _ = to_client.write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            let _ = to_client.shutdown(Shutdown::Both);
            return;
        }
    }
    loop {
        // Idle for the set time with nothing sent: closed from our side.
        let idle = *shared.idle_close.lock().unwrap();
        let _ = reader.get_ref().set_read_timeout(idle);
        let Some(head) = read_head(&mut reader) else {
            let _ = to_client.shutdown(Shutdown::Both);
            return;
        };
        let _ = reader.get_ref().set_read_timeout(None);
        let arrived = Instant::now();
        let mut body = vec![0; head.content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (path, query) = head
            .target
            .split_once('?')
            .unwrap_or((head.target.as_str(), ""));
        let path = percent_decode(path);
        let key_bytes = path
            .trim_start_matches('/')
            .split_once('/')
            .map_or(0, |(_, key)| key.len());
        let fault = if key_bytes > MAX_KEY_BYTES {
            Some(Fault::Answer(Answer::error(
                400,
                "KeyTooLongError",
                "Your key is too long",
                &[],
            )))
        } else if head.method == "PUT"
            && head.if_match.as_deref().is_some_and(|e| e.starts_with('"'))
            && shared
                .refuse_quoted_if_match
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            Some(Fault::Answer(Answer::error(
                412,
                "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold",
                &[],
            )))
        } else {
            due_fault(shared, &head.method, &path)
        };
        let head_only = head.method == "HEAD";
        let mut forwarded = None;
        let mut forward = || {
            forwarded = Some(Instant::now());
            exchange(&shared.upstream, &head.raw, &body, head_only)
        };
        let delay = || std::thread::sleep(*shared.delay.lock().unwrap());
        // The write limit applies to what would reach the upstream, when
        // it would (after the delay).
        let key = written_key(&head.method, &path, query);
        let admit = |key: &Option<String>| match key {
            Some(key) => shared.limit.lock().unwrap().admit(key),
            None => true,
        };
        let settle = |key: &Option<String>, status: Option<u16>| {
            if let Some(key) = key {
                shared.limit.lock().unwrap().settle(key, status);
            }
        };
        let throttled = || Some(shared.limit.lock().unwrap().answer().bytes(head_only));
        let (outcome, reply, keep_open) = match fault {
            Some(Fault::Answer(answer)) => {
                let outcome = if key_bytes > MAX_KEY_BYTES {
                    Outcome::KeyTooLong
                } else {
                    Outcome::Injected(answer.status)
                };
                (outcome, Some(answer.bytes(head_only)), true)
            }
            Some(Fault::DropAnswer) => {
                delay();
                if admit(&key) {
                    let answered = forward();
                    settle(&key, answered.as_ref().and_then(|(a, _)| status_of(a)));
                    (Outcome::Dropped, None, false)
                } else {
                    (Outcome::Throttled, throttled(), true)
                }
            }
            None | Some(Fault::Pass) => {
                delay();
                if admit(&key) {
                    let answered = forward();
                    settle(&key, answered.as_ref().and_then(|(a, _)| status_of(a)));
                    match answered {
                        Some((answer, keep_open)) => (Outcome::Forwarded, Some(answer), keep_open),
                        None => (Outcome::UpstreamFailed, None, false),
                    }
                } else {
                    (Outcome::Throttled, throttled(), true)
                }
            }
        };
        shared.log.lock().unwrap().push(Seen {
            method: head.method.clone(),
            path,
            query: query.to_string(),
            host: head.host.clone(),
            outcome,
            status: reply.as_deref().and_then(status_of),
            arrived,
            forwarded,
            connection,
            nth,
        });
        nth += 1;
        let written = reply.is_some_and(|bytes| to_client.write_all(&bytes).is_ok());
        if !written || !keep_open {
            let _ = to_client.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// The status code of an HTTP answer's bytes.
fn status_of(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|&b| b == b'\r').next()?;
    std::str::from_utf8(line)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// The fault due for a `method` request on `path`, counting it off its
/// rule.
fn due_fault(shared: &Shared, method: &str, path: &str) -> Option<Fault> {
    let mut rules = shared.rules.lock().unwrap();
    let rule = rules
        .iter_mut()
        .find(|r| r.remaining > 0 && r.method == method && path.contains(&r.path_contains))?;
    rule.remaining -= 1;
    Some(rule.fault.clone())
}

/// Send one request upstream on a fresh connection and read its whole
/// answer: its bytes, and whether the client's connection may stay open
/// after it. `None` when there was no whole answer.
fn exchange(upstream: &str, head: &[u8], body: &[u8], head_only: bool) -> Option<(Vec<u8>, bool)> {
    let mut server = TcpStream::connect(upstream).ok()?;
    server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    server.write_all(head).ok()?;
    server.write_all(body).ok()?;
    let mut reader = BufReader::new(server);
    let mut answer = Vec::new();
    let mut status = 0u16;
    let (mut length, mut chunked, mut close) = (None, false, false);
    loop {
        let before = answer.len();
        if reader.read_until(b'\n', &mut answer).ok()? == 0 {
            return None;
        }
        let line = String::from_utf8_lossy(&answer[before..]).to_ascii_lowercase();
        if before == 0 {
            status = line.split(' ').nth(1)?.parse().ok()?;
            continue;
        }
        if line == "\r\n" {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value.contains("close"),
            _ => {}
        }
    }
    if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        return Some((answer, !close));
    }
    if chunked {
        loop {
            let before = answer.len();
            if reader.read_until(b'\n', &mut answer).ok()? == 0 {
                return None;
            }
            let size_line = String::from_utf8_lossy(&answer[before..]).into_owned();
            let size_hex = size_line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16).ok()?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let before = answer.len();
                    if reader.read_until(b'\n', &mut answer).ok()? == 0 {
                        return None;
                    }
                    if answer[before..] == *b"\r\n" {
                        return Some((answer, !close));
                    }
                }
            }
            let start = answer.len();
            answer.resize(start + size + 2, 0);
            reader.read_exact(&mut answer[start..]).ok()?;
        }
    }
    match length {
        Some(length) => {
            let start = answer.len();
            answer.resize(start + length, 0);
            reader.read_exact(&mut answer[start..]).ok()?;
            Some((answer, !close))
        }
        None => {
            // Neither length nor chunks: the body ends with the connection,
            // and so must the client's.
            reader.read_to_end(&mut answer).ok()?;
            Some((answer, false))
        }
    }
}
