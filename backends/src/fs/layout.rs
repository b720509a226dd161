//! How the directory store lays out a bucket on the disk: the path a key
//! names, the names the store keeps for itself, and the text of the
//! attribute that carries an object's ETag and metadata (see the parent
//! module's Layout and Keys sections). Pure functions of their inputs:
//! nothing here touches the disk.

use std::fmt::Write as _;

/// The first line of every attribute this store writes.
pub(super) const MAGIC: &str = "bucket-lease object v2";
/// The first line of an object file of the first layout (its header, in
/// the file before the body), which [`super::migrate`] reads.
pub(super) const MAGIC_V1: &str = "bucket-lease object v1";
/// The longest key segment: the 255-byte file name limit of common file
/// systems.
pub(super) const MAX_SEGMENT: usize = 255;
/// The folder, directly under the root, where the store keeps its own
/// files: the lock, temporary files and uploads. No key may name it.
pub(super) const STATE_DIR: &str = ".bucket-lease";
/// The bucket's lock file, in [`STATE_DIR`].
pub(super) const LOCK: &str = "lock";
/// Where writes' temporary files are made, in [`STATE_DIR`].
pub(super) const TEMP_DIR: &str = "tmp";
/// Where uploads' files are, in [`STATE_DIR`].
pub(super) const UPLOAD_DIR: &str = "uploads";
/// The first layout's lock file, directly under the root. In a bucket of
/// this layout it is a folder, which a store of the first layout cannot
/// open to lock, so it never writes here; as a file, it marks a bucket of
/// the first layout.
pub(super) const V1_LOCK: &str = ".bucket-lease.lock";

/// What an object's (or an upload's) attribute says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    /// The upload's key; `None` for an object.
    pub(super) key: Option<String>,
    pub(super) etag: String,
    pub(super) metadata: Vec<(String, String)>,
}

/// The attribute of an object with `etag` and `metadata`, or, with `key`,
/// of an upload of that key whose mark is `etag`.
pub(super) fn encode_header(
    key: Option<&str>,
    etag: &str,
    metadata: &[(String, String)],
) -> Vec<u8> {
    let mut text = format!("{MAGIC}\n");
    if let Some(key) = key {
        let _ = writeln!(text, "key {}", escape(key));
    }
    let _ = writeln!(text, "etag {}", escape(etag));
    for (name, value) in metadata {
        let name = name.to_ascii_lowercase();
        let _ = writeln!(text, "meta {} {}", escape(&name), escape(value));
    }
    text.into_bytes()
}

pub(super) fn parse_header(raw: &[u8]) -> Result<Header, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "it is not UTF-8".to_string())?;
    let text = text
        .strip_suffix('\n')
        .ok_or_else(|| "it does not end in a new line".to_string())?;
    let mut lines = text.split('\n').peekable();
    if lines.next() != Some(MAGIC) {
        return Err(format!("it does not start with `{MAGIC}`"));
    }
    let key = match lines.peek().and_then(|line| line.strip_prefix("key ")) {
        Some(key) => {
            let key = unescape(key)?;
            lines.next();
            Some(key)
        }
        None => None,
    };
    let etag = lines
        .next()
        .and_then(|line| line.strip_prefix("etag "))
        .ok_or_else(|| "it has no `etag …` line after its first".to_string())?;
    let etag = unescape(etag)?;
    let metadata = lines
        .map(|line| {
            let (name, value) = line
                .strip_prefix("meta ")
                .and_then(|rest| rest.split_once(' '))
                .ok_or_else(|| format!("unexpected line `{line}`"))?;
            Ok((unescape(name)?, unescape(value)?))
        })
        .collect::<Result<_, String>>()?;
    Ok(Header {
        key,
        etag,
        metadata,
    })
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
            s if s.starts_with(STATE_DIR) => {
                return Err(
                    "a segment of the key starts with `.bucket-lease`, a name the \
                            store keeps for its own files",
                )
            }
            s if s.len() > MAX_SEGMENT => {
                return Err("a segment of the key is longer than 255 bytes")
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
