//! A tiny HTTP/1.1 server on 127.0.0.1 that answers from a script, for the
//! answers real test servers never give (409, 501, 5xx, huge bodies, slow
//! answers) and for counting connections.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// One scripted answer.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Send no Content-Length and close the connection after the body.
    pub close_delimited: bool,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Declare this Content-Length instead of the body's: a server that
    /// promises more than it sends.
    pub declared_length: Option<u64>,
    /// Keep the connection open this long after sending the body (before
    /// closing it, when close-delimited).
    pub linger: Duration,
}

impl Reply {
    /// `status` with no body.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::default()
        }
    }

    /// The same reply with a header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same reply with a body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }

    /// An S3 XML error body.
    pub fn error(status: u16, code: &str, message: &str, request_id: &str) -> Reply {
        Reply::status(status).body(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
        ))
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `PUT`, …
    pub method: String,
    /// The request target.
    pub path: String,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// When the request's first line had arrived.
    pub at: Instant,
}

impl Seen {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The running server. It lives until the test process ends.
pub struct Canned {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Canned {
    /// Serve `replies` in order, one per request; 500 after the last.
    pub fn start(replies: Vec<Reply>) -> Canned {
        let replies = Mutex::new(replies.into_iter());
        Canned::answering(move |_| {
            replies
                .lock()
                .unwrap()
                .next()
                .unwrap_or_else(|| Reply::status(500))
        })
    }

    /// Answer each request with what `answer` makes of it.
    pub fn answering(answer: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let replies: Arc<Answer> = Arc::new(answer);
        let (c, s) = (connections.clone(), seen.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                c.fetch_add(1, Ordering::SeqCst);
                let (s, replies) = (s.clone(), replies.clone());
                thread::spawn(move || serve(stream, &s, &*replies));
            }
        });
        Canned {
            addr,
            connections,
            seen,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

type Answer = dyn Fn(&Seen) -> Reply + Send + Sync;

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, replies: &Answer) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let at = Instant::now();
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0usize);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Seen {
            method,
            path,
            headers,
            body,
            at,
        };
        let reply = replies(&request);
        seen.lock().unwrap().push(request);
        thread::sleep(reply.delay);
        let mut head = format!("HTTP/1.1 {} Canned\r\n", reply.status);
        for (n, v) in &reply.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if reply.close_delimited {
            head.push_str("connection: close\r\n\r\n");
        } else if let Some(length) = reply.declared_length {
            head.push_str(&format!("content-length: {length}\r\n\r\n"));
        } else {
            head.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len()));
        }
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&reply.body).is_err() {
            return;
        }
        thread::sleep(reply.linger);
        if reply.close_delimited {
            return;
        }
    }
}

/// A store builder for `server`: any profile enabled, path-style to its
/// bucket `bkt`, region `us-east-1`, conditional deletes on, static
/// credentials with a session token.
#[cfg(any(feature = "s3", feature = "r2", feature = "minio"))]
pub fn store_builder(server: &Canned) -> bucket_lease_backends::HttpStoreBuilder {
    bucket_lease_backends::HttpStore::builder(super::any_profile())
        .endpoint(server.url())
        .bucket("bkt")
        .region("us-east-1")
        .conditional_delete(true)
        .credentials(
            bucket_lease_backends::Credentials::new("AKID", "the-secret")
                .with_session_token("the-token"),
        )
}
