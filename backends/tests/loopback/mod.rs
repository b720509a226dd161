//! Loopback doubles for the TLS and proxy tests (`tls_proxy.rs`): a CA
//! made by the test run, an HTTPS server with a certificate it signs, and
//! a forwarding HTTP proxy that notes what it was asked. Everything
//! listens on 127.0.0.1 and stops with the test process.
#![allow(dead_code)]

pub mod ca;
pub mod proxy;
pub mod tls_server;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};

/// A directory of the test's own, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "bucket-lease-{name}-{}-{nanos:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Write `text` to `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One HTTP message head read from a stream: its lines, and the bytes
/// read past it (the start of a body, or of the next message).
pub struct Head {
    pub lines: Vec<String>,
    pub rest: Vec<u8>,
}

impl Head {
    /// The first line (request or status line).
    pub fn first(&self) -> &str {
        &self.lines[0]
    }

    /// A header's value, the name compared without case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.lines[1..].iter().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The declared body length (0 when none is declared).
    pub fn content_length(&self) -> usize {
        self.header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// Read a message head from `stream`, starting with the bytes in `carry`
/// (left over from the message before); `None` at the end of the stream.
pub fn read_head(stream: &mut impl Read, carry: Vec<u8>) -> Option<Head> {
    let mut bytes = carry;
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
            let rest = bytes[end + 4..].to_vec();
            return Some(Head {
                lines: head.split("\r\n").map(str::to_string).collect(),
                rest,
            });
        }
        if bytes.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Read exactly `len` body bytes, `have` already read; what is left past
/// them.
pub fn read_body(
    stream: &mut impl Read,
    mut have: Vec<u8>,
    len: usize,
) -> Option<(Vec<u8>, Vec<u8>)> {
    while have.len() < len {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => have.extend_from_slice(&chunk[..n]),
        }
    }
    let rest = have.split_off(len);
    Some((have, rest))
}

/// Copy everything `from` sends to `to` until either side closes.
pub fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}
