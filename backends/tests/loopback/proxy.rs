//! A forwarding HTTP proxy on 127.0.0.1 that notes what each client asked:
//! `CONNECT host:port` is answered 200 and tunnelled; an absolute-form
//! request (`GET http://host:port/path HTTP/1.1`) is sent on to
//! `host:port` in origin form, without the proxy's own headers, and the
//! answers are copied back. It can instead refuse everything with one
//! status, or never answer.

use super::{pipe, read_body, read_head};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request the proxy received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The request line as received (`CONNECT h:p HTTP/1.1`, `GET http://… HTTP/1.1`).
    pub line: String,
    /// The `Proxy-Authorization` header, when sent.
    pub authorization: Option<String>,
    /// The `Host` header, when sent.
    pub host: Option<String>,
}

/// How the proxy treats what it is asked.
#[derive(Debug, Clone)]
enum Mode {
    Forward,
    /// Answer every request with this status line and no body.
    Refuse(&'static str),
    /// Read, note, and never answer.
    Silent,
}

/// See the module.
pub struct Proxy {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<Asked>>>,
}

impl Proxy {
    /// A proxy that forwards.
    pub fn forwarding() -> Proxy {
        Proxy::start(Mode::Forward)
    }

    /// A proxy that answers everything with `status` (such as
    /// `407 Proxy Authentication Required`).
    pub fn refusing(status: &'static str) -> Proxy {
        Proxy::start(Mode::Refuse(status))
    }

    /// A proxy that reads requests and never answers.
    pub fn silent() -> Proxy {
        Proxy::start(Mode::Silent)
    }

    fn start(mode: Mode) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (log, mode) = (Arc::clone(&log), mode.clone());
                std::thread::spawn(move || serve(stream, &log, &mode));
            }
        });
        Proxy { addr, asked }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// `http://USERINFO@127.0.0.1:PORT`.
    pub fn url_with(&self, userinfo: &str) -> String {
        format!("http://{userinfo}@127.0.0.1:{}", self.addr.port())
    }

    /// Everything asked so far.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }
}

fn serve(mut client: TcpStream, log: &Mutex<Vec<Asked>>, mode: &Mode) {
    let mut carry = Vec::new();
    let mut upstream: Option<(String, TcpStream)> = None;
    while let Some(head) = read_head(&mut client, carry) {
        let line = head.first().to_string();
        log.lock().unwrap().push(Asked {
            line: line.clone(),
            authorization: head.header("proxy-authorization").map(str::to_string),
            host: head.header("host").map(str::to_string),
        });
        match mode {
            Mode::Silent => {
                // Hold the connection open, answering nothing.
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(&mut client, &mut sink);
                return;
            }
            Mode::Refuse(status) => {
                let _ = client.write_all(
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                );
                return;
            }
            Mode::Forward => {}
        }
        let mut words = line.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if method == "CONNECT" {
            let Ok(server) = TcpStream::connect(target) else {
                let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
                return;
            };
            let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
            let mut to_server = server.try_clone().unwrap();
            to_server.write_all(&head.rest).unwrap();
            let from_client = client.try_clone().unwrap();
            std::thread::spawn(move || pipe(server, client));
            pipe(from_client, to_server);
            return;
        }
        // Absolute form: http://host:port/path.
        let Some(rest) = target.strip_prefix("http://") else {
            let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
            return;
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        if upstream.as_ref().is_some_and(|(a, _)| a != authority) {
            let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
            return;
        }
        if upstream.is_none() {
            let Ok(server) = TcpStream::connect(authority) else {
                let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
                return;
            };
            let (back, to_client) = (server.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || pipe(back, to_client));
            upstream = Some((authority.to_string(), server));
        }
        let (_, server) = upstream.as_mut().unwrap();
        let mut out = format!("{method} {path} {}\r\n", words.next().unwrap_or("HTTP/1.1"));
        for header in &head.lines[1..] {
            let name = header.split(':').next().unwrap_or("").trim();
            if !name.eq_ignore_ascii_case("proxy-authorization")
                && !name.eq_ignore_ascii_case("proxy-connection")
            {
                out.push_str(header);
                out.push_str("\r\n");
            }
        }
        out.push_str("\r\n");
        let Some((body, rest)) = read_body(&mut client, head.rest.clone(), head.content_length())
        else {
            return;
        };
        if server.write_all(out.as_bytes()).is_err() || server.write_all(&body).is_err() {
            return;
        }
        carry = rest;
    }
}
