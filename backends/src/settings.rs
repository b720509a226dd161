//! What the configuration (`config`) and the HTTP client (`http`) both
//! need, in a module below both, so that `config` uses `http` and neither
//! is used back: the error of a configuration that cannot make a store,
//! S3's key limit, how a URL or an endpoint is shown without its user
//! information, and percent-decoding.

use bucket_lease_core::store::StoreError;
use std::fmt;

/// A configuration that cannot make a store. `Display` reads "what failed:
/// why; what to do", and never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required setting is absent.
    Missing {
        /// What was being configured (`s3`, `store URL`, …).
        what: &'static str,
        /// The field or environment variable to set.
        setting: &'static str,
        /// How to set it.
        fix: &'static str,
    },
    /// A setting has a value that cannot be used.
    Invalid {
        /// What was being configured.
        what: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: String,
        /// What to give instead.
        fix: &'static str,
    },
    /// The URL names a kind of store this build leaves out.
    NotBuilt {
        /// The URL's scheme.
        scheme: &'static str,
        /// The cargo feature that brings it in.
        feature: &'static str,
    },
    /// Opening the store failed.
    Open(StoreError),
    /// No credentials were found, or their source failed.
    #[cfg(feature = "_http")]
    Credentials(crate::credentials::CredentialsError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Missing { what, setting, fix } => {
                write!(
                    f,
                    "configuring the {what} store: {setting} is not set; {fix}"
                )
            }
            ConfigError::Invalid {
                what,
                value,
                why,
                fix,
            } => write!(f, "configuring the {what} store: {value:?} {why}; {fix}"),
            ConfigError::NotBuilt { scheme, feature } => write!(
                f,
                "opening a {scheme}:// store: this build has no `{feature}` feature; \
                 rebuild with --features {feature}"
            ),
            ConfigError::Open(e) => write!(f, "opening the store: {e}"),
            #[cfg(feature = "_http")]
            ConfigError::Credentials(e) => write!(f, "opening the store: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Open(e) => Some(e),
            #[cfg(feature = "_http")]
            ConfigError::Credentials(e) => Some(e),
            _ => None,
        }
    }
}

/// The longest key S3, R2 and MinIO accept, in bytes.
#[cfg(feature = "_http")]
pub const S3_MAX_KEY_BYTES: usize = 1024;

/// `text` with each `%XX` replaced by its byte, once.
pub(crate) fn percent_decode(text: &str) -> Result<String, &'static str> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (Some(high), Some(low)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err("has a % not followed by two hex digits; write a literal % as %25");
            };
            // Two hex digits: at most 255.
            out.push(u8::try_from(high * 16 + low).unwrap_or(u8::MAX));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "decodes to bytes that are not UTF-8")
}

/// `text` (a URL or an endpoint) fit to show: everything between a known
/// scheme (or the start) and the last `@` replaced by `***`, since user
/// information may hold a secret (`http://***@127.0.0.1:9000`). The last
/// `@`, not the first one before a `/`, because a secret may itself hold
/// `/` or `@`. Text without an `@` is returned as is.
pub(crate) fn redact_user_info(text: &str) -> String {
    let Some(at) = text.rfind('@') else {
        return text.to_string();
    };
    // Keep a scheme this crate knows; anything else before `://` may be
    // part of the user information.
    let start = text
        .split_once("://")
        .filter(|(scheme, _)| {
            ["http", "https", "s3", "r2", "minio", "file"]
                .iter()
                .any(|known| scheme.eq_ignore_ascii_case(known))
        })
        .map_or(0, |(scheme, _)| scheme.len() + "://".len())
        .min(at);
    format!("{}***{}", &text[..start], &text[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_redacted_up_to_the_last_at() {
        for (text, shown) in [
            (
                "http://AKID:secret@127.0.0.1:9000",
                "http://***@127.0.0.1:9000",
            ),
            ("AKID:secret@127.0.0.1:9000", "***@127.0.0.1:9000"),
            ("http://AKID:se/cr@t@h/p", "http://***@h/p"),
            ("AKID://secret@h", "***@h"),
            ("ftp://AKID:secret@h", "***@h"),
            ("HTTPS://AKID:secret@h", "HTTPS://***@h"),
            ("s3://bucket/prefix", "s3://bucket/prefix"),
            ("@", "***@"),
        ] {
            assert_eq!(redact_user_info(text), shown, "{text}");
        }
    }
}
