//! How the directory store lays out a bucket on the disk: the names keys
//! map to, and the text header of an object file (see the parent module's
//! Layout and Keys sections). Pure functions of their inputs: nothing here
//! touches the disk.

use std::fmt::Write as _;
use std::io::{self, BufRead, Read};

/// The first line of every object file.
pub(super) const MAGIC: &str = "bucket-lease object v1";
/// No object file this store writes has a longer header than this.
const MAX_HEADER: u64 = 64 * 1024;
/// The longest key segment: leaves room for the suffixes within the 255-byte
/// file name limit of common file systems.
pub(super) const MAX_SEGMENT: usize = 200;

/// What an object file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) etag: String,
    pub(super) metadata: Vec<(String, String)>,
}

pub(super) fn encode_header(etag: &str, metadata: &[(String, String)]) -> Vec<u8> {
    let mut text = format!("{MAGIC}\netag {}\n", escape(etag));
    for (name, value) in metadata {
        let name = name.to_ascii_lowercase();
        let _ = writeln!(text, "meta {} {}", escape(&name), escape(value));
    }
    text.push('\n');
    text.into_bytes()
}

/// The header's bytes, through its blank line, leaving `reader` at the body.
pub(super) fn read_header(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut limited = Read::take(reader, MAX_HEADER);
    let mut raw = Vec::new();
    loop {
        let start = raw.len();
        if limited.read_until(b'\n', &mut raw)? == 0 || raw[start..] == *b"\n" {
            return Ok(raw);
        }
    }
}

pub(super) fn parse_header(raw: &[u8]) -> Result<Header, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "its header is not UTF-8".to_string())?;
    let text = text
        .strip_suffix("\n\n")
        .ok_or_else(|| "its header does not end in a blank line".to_string())?;
    let mut lines = text.split('\n');
    if lines.next() != Some(MAGIC) {
        return Err(format!("it does not start with `{MAGIC}`"));
    }
    let etag = lines
        .next()
        .and_then(|line| line.strip_prefix("etag "))
        .ok_or_else(|| "its second line is not `etag …`".to_string())?;
    let etag = unescape(etag)?;
    let metadata = lines
        .map(|line| {
            let (name, value) = line
                .strip_prefix("meta ")
                .and_then(|rest| rest.split_once(' '))
                .ok_or_else(|| format!("unexpected header line `{line}`"))?;
            Ok((unescape(name)?, unescape(value)?))
        })
        .collect::<Result<_, String>>()?;
    Ok(Header { etag, metadata })
}

/// `%`, space and control characters as `%XX`; everything else as is.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || c == ' ' || c.is_control() {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unescape(text: &str) -> Result<String, String> {
    let bad = || format!("bad escape in `{text}`");
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

/// The segments of a valid key, or why it is not one.
pub(super) fn split_key(key: &str) -> Result<Vec<&str>, &'static str> {
    if key.is_empty() {
        return Err("the key is empty");
    }
    if key.contains('\0') {
        return Err("the key contains a NUL byte");
    }
    if key.contains('\\') {
        return Err("the key contains a backslash, a path separator on Windows");
    }
    if key.starts_with('/') {
        return Err("the key starts with `/`, as an absolute path does");
    }
    let segments: Vec<&str> = key.split('/').collect();
    for segment in &segments {
        match *segment {
            "" => return Err("the key has an empty segment (`//` or a trailing `/`)"),
            "." | ".." => return Err("the key has a `.` or `..` segment"),
            s if s.len() > MAX_SEGMENT => {
                return Err("a segment of the key is longer than 200 bytes")
            }
            _ => {}
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_and_bad_escapes_are_refused() {
        for text in ["", "plain", "a b%c", "tab\tnew\nline\r", "ünï cödé", "%%"] {
            assert_eq!(unescape(&escape(text)).unwrap(), text);
            assert!(!escape(text).contains([' ', '\n']));
        }
        for bad in ["%", "%4", "%zz", "%FF"] {
            assert!(unescape(bad).is_err(), "{bad}");
        }
    }
}
