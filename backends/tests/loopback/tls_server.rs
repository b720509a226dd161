//! An HTTPS server on 127.0.0.1 with a certificate of the test's CA: it
//! answers every request `404 NoSuchKey` (so a store's GET that reaches it
//! fails with `NotFound`, proving the handshake passed), and counts the
//! connections it accepted and the handshakes that completed.

use super::ca::ServerCert;
use super::{read_body, read_head};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// See the module.
pub struct TlsServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl TlsServer {
    /// A server presenting `cert`.
    pub fn start(cert: ServerCert) -> TlsServer {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(cert.chain, cert.key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let handshakes = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let counts = (
            Arc::clone(&accepted),
            Arc::clone(&handshakes),
            Arc::clone(&requests),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut tcp) = stream else { continue };
                counts.0.fetch_add(1, Ordering::SeqCst);
                let config = Arc::clone(&config);
                let (handshakes, requests) = (Arc::clone(&counts.1), Arc::clone(&counts.2));
                std::thread::spawn(move || {
                    let mut conn = ServerConnection::new(config).unwrap();
                    while conn.is_handshaking() {
                        if conn.complete_io(&mut tcp).is_err() {
                            return;
                        }
                    }
                    handshakes.fetch_add(1, Ordering::SeqCst);
                    let mut tls = StreamOwned::new(conn, tcp);
                    let mut carry = Vec::new();
                    while let Some(head) = read_head(&mut tls, carry) {
                        let len = head.content_length();
                        let Some((_, rest)) = read_body(&mut tls, head.rest.clone(), len) else {
                            return;
                        };
                        carry = rest;
                        requests.fetch_add(1, Ordering::SeqCst);
                        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\
                                    <Code>NoSuchKey</Code><Message>The specified key does \
                                    not exist.</Message><RequestId>TLS1</RequestId></Error>";
                        let body = if head.first().starts_with("HEAD ") {
                            ""
                        } else {
                            body
                        };
                        let answer = format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-type: application/xml\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tls.write_all(answer.as_bytes()).is_err() || tls.flush().is_err() {
                            return;
                        }
                    }
                });
            }
        });
        TlsServer {
            addr,
            accepted,
            handshakes,
            requests,
        }
    }

    /// `https://localhost:PORT` (the certificates name `localhost`).
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// `localhost:PORT`.
    pub fn authority(&self) -> String {
        format!("localhost:{}", self.addr.port())
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Handshakes completed so far.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}
