//! Requests through an HTTP proxy, as the AWS CLI sends them (the store
//! chose the proxy for its endpoint, or none for a `NO_PROXY` host: see
//! [`crate::settings::Proxies`]):
//!
//! - to an `https://` endpoint, a tunnel: `CONNECT host:port` to the
//!   proxy, then TLS to the endpoint inside it ([`super::tls`]);
//! - to an `http://` endpoint, each request in absolute form on a
//!   connection to the proxy: `GET http://host:port/bucket/key HTTP/1.1`,
//!   the `Host` header and the signature unchanged ([`AbsoluteForm`]).
//!
//! Either way the proxy's credentials go in `Proxy-Authorization: Basic`,
//! which only this module writes (ureq's own logging never sees it), and
//! the proxy resolves the endpoint's name: [`ProxyResolver`] looks up the
//! proxy's. Every step (the lookup, the connection, the CONNECT and its
//! answer) is bounded by the request's timeout, taken again before each
//! write, so no byte leaves after the deadline. A failure before the
//! request itself left is a request not sent ([`Stage::Proxy`]), and a
//! proxy that refuses the tunnel (407, 403) is a permanent failure
//! ([`Stage::ProxyRefused`]), named with its setting.

use super::{not_sent, not_sent_of, CachingResolver, Stage, Tcp, TcpConnector};
use crate::settings::Proxy;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Instant;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::time::{self, Duration};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, Transport,
};
use ureq::{Error, Timeout};

/// The most bytes of a proxy's answer to CONNECT read (its head).
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// Resolves the proxy's host instead of the endpoint's when the store goes
/// through one (the proxy resolves the endpoint's), else as `inner` does.
#[derive(Debug)]
pub(crate) struct ProxyResolver {
    inner: CachingResolver,
    proxy: Option<(Arc<Proxy>, Uri)>,
}

impl ProxyResolver {
    pub(crate) fn new(inner: CachingResolver, proxy: Option<Arc<Proxy>>) -> ProxyResolver {
        let proxy = proxy.and_then(|proxy| {
            let uri = format!("http://{}/", proxy.authority()).parse().ok()?;
            Some((proxy, uri))
        });
        ProxyResolver { inner, proxy }
    }
}

impl Resolver for ProxyResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, Error> {
        let Some((proxy, proxy_uri)) = &self.proxy else {
            return self.inner.resolve(uri, config, timeout);
        };
        self.inner
            .resolve(proxy_uri, config, timeout)
            .map_err(|e| on_the_way(proxy, "look up", e))
    }

    fn empty(&self) -> ResolvedSocketAddrs {
        self.inner.empty()
    }
}

/// `e`, a failure to reach `proxy`, as a request not sent that names the
/// proxy and its setting.
fn on_the_way(proxy: &Proxy, doing: &str, e: Error) -> Error {
    let (kind, detail) = match &e {
        Error::Io(io) => (
            io.kind(),
            not_sent_of(&e).map_or_else(|| io.to_string(), |n| n.detail.clone()),
        ),
        Error::Timeout(_) => (io::ErrorKind::TimedOut, "timed out".to_string()),
        other => (io::ErrorKind::Other, other.to_string()),
    };
    not_sent(
        Stage::Proxy,
        kind,
        format!(
            "could not {doing} {}: {detail}; check the proxy's host and port in {}",
            proxy.describe(),
            proxy.setting
        ),
    )
}

/// Opens the connection to the proxy, and a tunnel through it to an
/// `https://` endpoint, or an [`AbsoluteForm`] connection for an
/// `http://` one (see the module). Passes on a transport an earlier
/// connector made; makes none when the store has no proxy.
#[derive(Debug)]
pub(crate) struct ProxyConnector(pub(crate) Option<Arc<Proxy>>);

impl<In: Transport> Connector<In> for ProxyConnector {
    type Out = Either<In, Either<Tcp, AbsoluteForm>>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if let Some(transport) = chained {
            return Ok(Some(Either::A(transport)));
        }
        let Some(proxy) = &self.0 else {
            return Ok(None);
        };
        // The end of the request's connect budget, counted from when ureq
        // computed it; each step below takes what is left of it.
        let deadline = match (details.timeout.after, details.now) {
            (Duration::Exact(after), time::Instant::Exact(then)) => Some(then + after),
            (Duration::Exact(after), _) => Some(Instant::now() + after),
            (Duration::NotHappening, _) => None,
        };
        // The resolver gave the proxy's addresses.
        let tcp = match Connector::<()>::connect(&TcpConnector, details, None) {
            Ok(Some(Either::B(tcp))) => tcp,
            Ok(_) => {
                return Err(not_sent(
                    Stage::Proxy,
                    io::ErrorKind::NotConnected,
                    format!("no connection to {} was made", proxy.describe()),
                ))
            }
            Err(e) => return Err(on_the_way(proxy, "connect to", e)),
        };
        let target = authority_of(details.uri);
        if details.needs_tls() {
            let tunnel = connect(tcp, proxy, &target, deadline)?;
            Ok(Some(Either::B(Either::A(tunnel))))
        } else {
            Ok(Some(Either::B(Either::B(AbsoluteForm::new(
                tcp, proxy, &target,
            )))))
        }
    }
}

/// `host:port` of `uri`, the port given or the scheme's.
fn authority_of(uri: &Uri) -> String {
    let host = uri.host().unwrap_or_default();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    format!("{host}:{port}")
}

/// What is left of the request's timeout at `deadline`, right now.
fn left(deadline: Option<Instant>) -> NextTimeout {
    NextTimeout {
        after: match deadline {
            None => Duration::NotHappening,
            Some(d) => Duration::Exact(d.saturating_duration_since(Instant::now())),
        },
        reason: Timeout::Connect,
        per_read: None,
        per_write: None,
    }
}

/// Ask `proxy`, on `tcp`, for a tunnel to `target`, by `deadline`: the
/// connection, now a tunnel, when it answers 2xx.
fn connect(
    mut tcp: Tcp,
    proxy: &Proxy,
    target: &str,
    deadline: Option<Instant>,
) -> Result<Tcp, Error> {
    let mut head = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: bucket-lease/{}\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(authorization) = &proxy.authorization {
        head.push_str("Proxy-Authorization: ");
        head.push_str(authorization);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let failed = |e: Error| {
        let timed_out = matches!(e, Error::Timeout(_))
            || matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::TimedOut);
        let detail = if timed_out {
            "it did not answer in time".to_string()
        } else {
            e.to_string()
        };
        not_sent(
            Stage::Proxy,
            if timed_out {
                io::ErrorKind::TimedOut
            } else {
                io::ErrorKind::Other
            },
            format!(
                "{} did not open a tunnel to {target}: {detail}",
                proxy.describe()
            ),
        )
    };
    let output = tcp.buffers().output();
    if head.len() > output.len() {
        return Err(not_sent(
            Stage::Proxy,
            io::ErrorKind::InvalidInput,
            "the CONNECT request does not fit the connection's buffer",
        ));
    }
    output[..head.len()].copy_from_slice(head.as_bytes());
    tcp.transmit_output(head.len(), left(deadline))
        .map_err(failed)?;
    let end = loop {
        if !tcp.await_input(left(deadline)).map_err(failed)? {
            return Err(failed(Error::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "it closed the connection",
            ))));
        }
        let input = tcp.buffers().input();
        if let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if input.len() >= MAX_CONNECT_ANSWER {
            return Err(failed(Error::Io(io::Error::other(format!(
                "its answer's head is over {MAX_CONNECT_ANSWER} bytes"
            )))));
        }
    };
    let input = tcp.buffers().input();
    let head = String::from_utf8_lossy(&input[..end]).into_owned();
    tcp.buffers().input_consume(end + 4);
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(200..=299) => Ok(tcp),
        Some(status) => Err(refused(proxy, target, status, status_line)),
        None => Err(failed(Error::Io(io::Error::other(format!(
            "it answered {status_line:?}, not HTTP"
        ))))),
    }
}

/// The error for a proxy that answered CONNECT with `status`: permanent
/// for a refusal (4xx: credentials, a port it does not tunnel to), a
/// request not sent that may be tried again for a 5xx (the proxy could
/// not reach the endpoint).
fn refused(proxy: &Proxy, target: &str, status: u16, line: &str) -> Error {
    let answer = line.split_once(' ').map_or(line, |(_, rest)| rest);
    let what = format!(
        "{} refused a tunnel to {target} (CONNECT): {answer}",
        proxy.describe()
    );
    let setting = proxy.setting;
    match status {
        407 if proxy.authorization.is_some() => not_sent(
            Stage::ProxyRefused,
            io::ErrorKind::PermissionDenied,
            format!("{what}; check the user and password in {setting}"),
        ),
        407 => not_sent(
            Stage::ProxyRefused,
            io::ErrorKind::PermissionDenied,
            format!(
                "{what}; give the proxy's user and password in {setting} \
                 (http://user:password@host:port)"
            ),
        ),
        400..=499 => not_sent(
            Stage::ProxyRefused,
            io::ErrorKind::PermissionDenied,
            format!(
                "{what}; the proxy does not tunnel to this endpoint: ask for it to be allowed, \
                 or list the endpoint's host in NO_PROXY"
            ),
        ),
        _ => not_sent(Stage::Proxy, io::ErrorKind::Other, what),
    }
}

/// A connection to an HTTP proxy that sends each request in absolute form:
/// the request line's target gets the endpoint's `http://host:port` in
/// front of its path, and `Proxy-Authorization` goes after the request
/// line. The rest (the `Host` header, the signed headers, the body) is
/// sent as it was written.
pub(crate) struct AbsoluteForm {
    inner: Tcp,
    /// `http://host:port`.
    origin: Vec<u8>,
    /// `Proxy-Authorization: Basic …\r\n`, or nothing: a secret.
    authorization: Vec<u8>,
    /// The next bytes handed over start a request.
    at_start: bool,
    /// Which proxy, for `Debug`.
    proxy: String,
}

impl fmt::Debug for AbsoluteForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbsoluteForm")
            .field("via", &self.proxy)
            .field("inner", &self.inner)
            .finish()
    }
}

impl AbsoluteForm {
    fn new(inner: Tcp, proxy: &Proxy, target: &str) -> AbsoluteForm {
        let authorization = proxy
            .authorization
            .as_ref()
            .map(|a| format!("Proxy-Authorization: {a}\r\n").into_bytes())
            .unwrap_or_default();
        AbsoluteForm {
            inner,
            origin: format!("http://{target}").into_bytes(),
            authorization,
            at_start: true,
            proxy: proxy.describe(),
        }
    }

    /// Rewrite the first `amount` bytes of the output buffer, the start of
    /// a request, into absolute form (see the type): the number of bytes
    /// to send instead.
    fn rewrite(&mut self, amount: usize) -> Result<usize, Error> {
        let (origin, authorization) = (self.origin.len(), self.authorization.len());
        let output = self.inner.buffers().output();
        let head = &output[..amount];
        let target = head.iter().position(|&b| b == b' ').map(|i| i + 1);
        let line_end = head.windows(2).position(|w| w == b"\r\n").map(|i| i + 2);
        let (Some(target), Some(line_end)) = (target, line_end) else {
            return Err(not_sent(
                Stage::Proxy,
                io::ErrorKind::InvalidData,
                "the request line is not whole in the first bytes sent",
            ));
        };
        if head.get(target) != Some(&b'/') || amount + origin + authorization > output.len() {
            return Err(not_sent(
                Stage::Proxy,
                io::ErrorKind::InvalidInput,
                "the request does not fit the proxy's absolute form in the connection's buffer",
            ));
        }
        output.copy_within(line_end..amount, line_end + origin + authorization);
        output.copy_within(target..line_end, target + origin);
        output[target..target + origin].copy_from_slice(&self.origin);
        output[line_end + origin..line_end + origin + authorization]
            .copy_from_slice(&self.authorization);
        Ok(amount + origin + authorization)
    }
}

impl Transport for AbsoluteForm {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let amount = if self.at_start && amount > 0 {
            self.at_start = false;
            self.rewrite(amount)?
        } else {
            amount
        };
        self.inner.transmit_output(amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        // What comes in is an answer: the next bytes out start a request.
        self.at_start = true;
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.at_start = true;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }
}
