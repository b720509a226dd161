//! An endpoint's URL taken apart, and the rules a request's URL is made by.
//!
//! What it promises: [`Endpoint::parse`] takes `https://host[:port][/path]`
//! (`https://` when no scheme is written, `http://` only when it is) and
//! refuses, saying why, any other scheme, a query or a fragment, user
//! information and a host or port that is missing or not valid; it keeps
//! the authority lowercased and the path without a trailing slash.
//! [`is_dns_label`] says whether a bucket can name a virtual host, and
//! [`encode_key`] percent-encodes a key for a request's path, everything
//! but unreserved characters and `/`.

use ureq::http;

/// An endpoint split into the parts a request URL is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    pub(super) scheme: &'static str,
    /// `host[:port]`, as given.
    pub(super) authority: String,
    /// `""` or `/path` without a trailing slash.
    pub(super) base_path: String,
}

impl Endpoint {
    pub(super) fn parse(text: &str) -> Result<Endpoint, String> {
        let (scheme, rest) = match text.split_once("://") {
            Some(("https", rest)) => ("https", rest),
            Some(("http", rest)) => ("http", rest),
            Some((other, _)) => {
                return Err(format!("has the scheme {other}:// (not http or https)"))
            }
            None => ("https", text),
        };
        if rest.contains(['?', '#']) {
            return Err("has a query or a fragment".into());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err("has no host, or carries user information".into());
        }
        let after_host = &authority[authority.rfind(']').unwrap_or(0)..];
        let bad_port = after_host
            .rsplit_once(':')
            .is_some_and(|(_, port)| port.parse::<u16>().is_err());
        if bad_port || authority.parse::<http::uri::Authority>().is_err() {
            return Err("has an invalid host or port".into());
        }
        Ok(Endpoint {
            scheme,
            authority: authority.to_ascii_lowercase(),
            base_path: path.trim_end_matches('/').to_string(),
        })
    }

    /// The host, without the port.
    pub(super) fn host(&self) -> &str {
        self.authority
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(self.authority.as_str(), |(host, _)| host)
    }

    pub(super) fn host_is_ip(&self) -> bool {
        let host = self.host();
        host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok()
    }

    /// Whether the host is one of AWS's own (under `amazonaws.com` or
    /// `amazonaws.com.cn`).
    pub(super) fn host_is_aws(&self) -> bool {
        let host = self.host().trim_end_matches('.');
        [".amazonaws.com", ".amazonaws.com.cn"]
            .iter()
            .any(|suffix| host.ends_with(suffix))
    }
}

/// Whether `bucket` can be the first label of a host name.
pub(super) fn is_dns_label(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !bucket.starts_with('-')
        && !bucket.ends_with('-')
}

/// Percent-encode a key for an S3 path: everything but unreserved
/// characters and `/`.
pub(super) fn encode_key(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}
