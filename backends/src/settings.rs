//! What the configuration (`config`) and the HTTP client (`http`) both
//! need, in a module below both, so that `config` uses `http` and neither
//! is used back: the error of a configuration that cannot make a store,
//! S3's key limit, how a URL or an endpoint is shown without its user
//! information, percent-decoding, and (HTTP features) the TLS roots and
//! the proxies a store uses, which `config` reads from the environment and
//! `http` and `net` put to work.

use bucket_lease_core::store::StoreError;
use std::fmt;
#[cfg(http)]
use std::path::PathBuf;

/// A configuration that cannot make a store. `Display` reads "what failed:
/// why; what to do", tells the whole story (a wrapped error's text
/// included, and no `source()`), and never contains a secret.
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
    #[cfg(http)]
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
            #[cfg(http)]
            ConfigError::Credentials(e) => write!(f, "opening the store: {e}"),
        }
    }
}

/// No `source()`: `Display` already says the wrapped error's text, once
/// (the convention of `bucket_lease_core::error`), so a reporter that walks
/// the chain repeats nothing. Match on [`ConfigError::Open`] or
/// `ConfigError::Credentials` for the error itself.
impl std::error::Error for ConfigError {}

/// The longest key S3, R2 and MinIO accept, in bytes.
#[cfg(http)]
pub const S3_MAX_KEY_BYTES: usize = 1024;

/// `text` (a bucket, a directory, a key) as a store URL holds it: `%`,
/// `?`, `#` and `@` percent-encoded, so that [`percent_decode`] gives it
/// back; for the URLs errors name (of the stores built: none without one).
#[cfg(any(feature = "fs", http))]
pub(crate) fn url_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            '@' => out.push_str("%40"),
            c => out.push(c),
        }
    }
    out
}

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

/// A setting's value and the setting that gave it, for messages (the
/// variable, the profile's key, or the builder's method).
#[cfg(http)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named<T> {
    pub(crate) value: T,
    pub(crate) setting: &'static str,
}

/// The certificates an HTTPS store trusts: always the built-in roots
/// (webpki-roots: Mozilla's), and beside them the certificates of a PEM
/// bundle and, when asked for, the system's store. Read when the store is
/// built (`net::tls`), so a file that cannot be used fails the
/// configuration, not a request.
#[cfg(http)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Trust {
    /// A PEM file of extra roots (`AWS_CA_BUNDLE`, a profile's
    /// `ca_bundle`, `ca_bundle()`).
    pub(crate) bundle: Option<Named<PathBuf>>,
    /// The system's store is trusted too, as this setting asked.
    pub(crate) system: Option<&'static str>,
    /// Where the system's store is, when the environment says
    /// (`SSL_CERT_FILE`); else the distributions' usual places.
    pub(crate) system_file: Option<PathBuf>,
}

/// The proxies an HTTP store's requests go through, chosen as the AWS CLI
/// chooses them: by the endpoint's scheme, `HTTP_PROXY` for an `http://`
/// endpoint (requests in absolute form, `GET http://host:port/key`) and
/// `HTTPS_PROXY` for an `https://` one (a tunnel opened with `CONNECT`),
/// neither for a host that `NO_PROXY` lists. A proxy is
/// `http://[user:password@]host[:port]` (port 80 by default, the scheme
/// may be left out); its user and password, percent-decoded, go in
/// `Proxy-Authorization: Basic`.
///
/// `NO_PROXY` is a comma-separated list: `*` (every host), a host name or
/// IP address (that host), `.example.com` or `*.example.com` (hosts under
/// it), `10.1.` or `10.1.*` (hosts starting so).
///
/// `Debug` shows each proxy with its user information as `***`.
///
/// ```
/// # mod bucket_lease { pub mod backends { pub use bucket_lease_backends::*; } }
/// # #[cfg(feature = "minio")] {
/// use bucket_lease::backends::{minio, Credentials, Proxies};
/// let store = minio::builder()
///     .endpoint("http://minio.internal:9000")
///     .bucket("leases")
///     .credentials(Credentials::new("key-id", "secret"))
///     .proxies(Proxies::none().http("http://proxy.internal:3128").no_proxy("localhost"))
///     .build()
///     .unwrap();
/// # }
/// ```
#[cfg(http)]
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Proxies {
    http: Option<Named<String>>,
    https: Option<Named<String>>,
    no_proxy: Option<Named<String>>,
}

#[cfg(http)]
impl fmt::Debug for Proxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |named: &Option<Named<String>>| {
            named
                .as_ref()
                .map(|n| format!("{} ({})", redact_user_info(&n.value), n.setting))
        };
        f.debug_struct("Proxies")
            .field("http", &shown(&self.http))
            .field("https", &shown(&self.https))
            .field("no_proxy", &self.no_proxy.as_ref().map(|n| &n.value))
            .finish()
    }
}

#[cfg(http)]
impl Proxies {
    /// No proxy at all.
    pub fn none() -> Self {
        Proxies::default()
    }

    /// The process's `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` (each also
    /// in lower case, which the upper-case name wins over; an empty value
    /// is no value). `ALL_PROXY` is not read, as the AWS CLI does not
    /// read it.
    pub fn from_env() -> Self {
        Proxies::from_vars(&|name| std::env::var(name).ok())
    }

    /// [`Proxies::from_env`], reading the environment through `env`.
    pub(crate) fn from_vars(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let read = |upper: &'static str, lower: &'static str| {
            [upper, lower].into_iter().find_map(|setting| {
                env(setting)
                    .filter(|v| !v.trim().is_empty())
                    .map(|value| Named { value, setting })
            })
        };
        Proxies {
            http: read("HTTP_PROXY", "http_proxy"),
            https: read("HTTPS_PROXY", "https_proxy"),
            no_proxy: read("NO_PROXY", "no_proxy"),
        }
    }

    /// The proxy for `http://` endpoints.
    pub fn http(mut self, url: impl Into<String>) -> Self {
        self.http = Some(Named {
            value: url.into(),
            setting: "Proxies::http",
        });
        self
    }

    /// The proxy for `https://` endpoints.
    pub fn https(mut self, url: impl Into<String>) -> Self {
        self.https = Some(Named {
            value: url.into(),
            setting: "Proxies::https",
        });
        self
    }

    /// The hosts reached without a proxy (the form of `NO_PROXY`).
    pub fn no_proxy(mut self, list: impl Into<String>) -> Self {
        self.no_proxy = Some(Named {
            value: list.into(),
            setting: "Proxies::no_proxy",
        });
        self
    }

    /// The proxy for requests to `host` (no port; `[…]` around an IPv6
    /// address) over `scheme`, `None` for none or a `NO_PROXY` host.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the setting, for a proxy URL that
    /// cannot be used (another scheme than `http://`, no host, a bad port,
    /// user information that does not decode).
    pub(crate) fn for_host(
        &self,
        what: &'static str,
        scheme: &str,
        host: &str,
    ) -> Result<Option<Proxy>, ConfigError> {
        let chosen = match scheme {
            "https" => &self.https,
            _ => &self.http,
        };
        let Some(named) = chosen else { return Ok(None) };
        let proxy = Proxy::parse(what, named)?;
        let listed = self
            .no_proxy
            .as_ref()
            .is_some_and(|list| no_proxy_lists(&list.value, host));
        Ok((!listed).then_some(proxy))
    }
}

/// Whether `host` is one of the hosts `list` (the form of `NO_PROXY`)
/// names: `*`, the host itself, a suffix (`.example.com`, `*.example.com`)
/// or a prefix (`10.1.`, `10.1.*`), compared without case.
#[cfg(http)]
fn no_proxy_lists(list: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    list.split(',')
        .map(|entry| entry.trim().to_ascii_lowercase())
        .filter(|entry| !entry.is_empty())
        .any(|entry| {
            if entry == "*" {
                true
            } else if let Some(suffix) = entry.strip_prefix('*') {
                host.ends_with(suffix)
            } else if entry.starts_with('.') {
                host.ends_with(&entry)
            } else if let Some(prefix) = entry.strip_suffix('*') {
                host.starts_with(prefix)
            } else if entry.ends_with('.') {
                host.starts_with(&entry)
            } else {
                host == entry
            }
        })
}

/// One HTTP proxy, parsed from its setting. `Debug` and
/// [`Proxy::describe`] show its URL with the user information as `***`;
/// the `Proxy-Authorization` value is never shown.
#[cfg(http)]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    /// The host, as given (`[…]` around an IPv6 address).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `Basic …`: a secret.
    pub(crate) authorization: Option<String>,
    /// The setting that named it.
    pub(crate) setting: &'static str,
}

#[cfg(http)]
impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(http)]
impl Proxy {
    /// The proxy `named` gives.
    fn parse(what: &'static str, named: &Named<String>) -> Result<Proxy, ConfigError> {
        let Named { value, setting } = named;
        let invalid = |why: String| ConfigError::Invalid {
            what,
            value: redact_user_info(value),
            why: format!("{why} ({setting})"),
            fix: "give the proxy as http://[user:password@]host[:port]",
        };
        let text = value.trim();
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _))
                if ["https", "socks", "socks4", "socks4a", "socks5", "socks5h"]
                    .iter()
                    .any(|known| scheme.eq_ignore_ascii_case(known)) =>
            {
                return Err(invalid(format!(
                    "is a {scheme}:// proxy; only plain-HTTP proxies (http://) are supported"
                )));
            }
            // Anything else before `://` may be user information.
            Some(_) if !text[..text.find("://").unwrap_or(0)].contains('@') => {
                return Err(invalid("has an unknown scheme".into()));
            }
            _ => text.strip_prefix("//").unwrap_or(text),
        };
        // The last `@` ends the user information (a password may hold one,
        // or a `/`), as redact_user_info reads it.
        let (userinfo, hostport) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let hostport = hostport.split('/').next().unwrap_or("");
        let authority = hostport
            .parse::<ureq::http::uri::Authority>()
            .ok()
            .filter(|a| !a.host().is_empty())
            .ok_or_else(|| invalid("has no host, or an invalid host or port".into()))?;
        let after_host = &hostport[hostport.rfind(']').unwrap_or(0)..];
        if after_host
            .rsplit_once(':')
            .is_some_and(|(_, port)| port.parse::<u16>().is_err())
        {
            return Err(invalid("has an invalid port".into()));
        }
        let authorization = match userinfo {
            None => None,
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let decode = |part: &str| {
                    percent_decode(part).map_err(|why| {
                        invalid(format!(
                            "has user information that {}",
                            why.trim_start_matches("has ")
                        ))
                    })
                };
                let pair = format!("{}:{}", decode(user)?, decode(password)?);
                Some(format!("Basic {}", base64(pair.as_bytes())))
            }
        };
        Ok(Proxy {
            host: authority.host().to_string(),
            port: authority.port_u16().unwrap_or(80),
            authorization,
            setting,
        })
    }

    /// `host:port`, to connect to.
    pub(crate) fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// "the proxy http://***@host:port (SETTING)", for messages.
    pub(crate) fn describe(&self) -> String {
        let userinfo = if self.authorization.is_some() {
            "***@"
        } else {
            ""
        };
        format!(
            "the proxy http://{userinfo}{} ({})",
            self.authority(),
            self.setting
        )
    }
}

/// `bytes` in base64 (RFC 4648, with padding), for `Proxy-Authorization`.
#[cfg(http)]
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucket_lease_core::conformance::assert_said_once;

    #[test]
    fn a_wrapped_error_is_said_once_along_the_chain() {
        use bucket_lease_core::store::StoreErrorKind;
        let open = StoreError::new(StoreErrorKind::Rejected, "OPEN", "")
            .with_code("NoSuchBucket")
            .with_store_url("file:///srv/nonexist");
        let e = ConfigError::Open(open.clone());
        assert_said_once(&e, &open.to_string());
        assert!(e
            .to_string()
            .starts_with("opening the store: OPEN file:///srv/nonexist: "));
        #[cfg(http)]
        {
            use crate::credentials::{CredentialsError, Source};
            let why = CredentialsError::Source {
                source: Source::Environment,
                why: "AWS_SECRET_ACCESS_KEY is not set".into(),
            };
            assert_said_once(&why, &why.to_string());
            let e = ConfigError::Credentials(why.clone());
            assert_said_once(&e, &why.to_string());
        }
    }

    #[cfg(any(feature = "fs", http))]
    #[test]
    fn url_text_encodes_what_a_store_url_decodes() {
        let text = "a%b?c#d@e f/g";
        assert_eq!(url_text(text), "a%25b%3Fc%23d%40e f/g");
        assert_eq!(percent_decode(&url_text(text)).unwrap(), text);
    }

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

    #[cfg(http)]
    #[test]
    fn base64_of_rfc_4648s_examples() {
        for (text, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(text.as_bytes()), encoded, "{text}");
        }
    }

    #[cfg(http)]
    fn proxy(value: &str) -> Result<Proxy, String> {
        let named = Named {
            value: value.to_string(),
            setting: "HTTP_PROXY",
        };
        Proxy::parse("s3", &named).map_err(|e| e.to_string())
    }

    #[cfg(http)]
    #[test]
    fn proxy_urls_as_the_aws_cli_takes_them() {
        let p = proxy("http://proxy.internal:3128").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, &p.authorization),
            ("proxy.internal", 3128, &None)
        );
        assert_eq!(
            p.describe(),
            "the proxy http://proxy.internal:3128 (HTTP_PROXY)"
        );
        // No scheme means http://; no port means 80; a trailing slash is fine.
        for text in [
            "proxy.internal",
            "//proxy.internal",
            "HTTP://proxy.internal/",
        ] {
            let p = proxy(text).unwrap();
            assert_eq!((p.host.as_str(), p.port), ("proxy.internal", 80), "{text}");
        }
        let p = proxy("http://[::1]:8080").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("[::1]", 8080));
        // User information, percent-decoded, up to the last @.
        let p = proxy("http://lease-user:pa%3Ass%40word%2F%2B@10.0.0.1:3128").unwrap();
        assert_eq!(
            p.authorization.as_deref(),
            Some("Basic bGVhc2UtdXNlcjpwYTpzc0B3b3JkLys=")
        );
        let p = proxy("http://u:p@ss@h:1").unwrap();
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"u:p@ss")).as_str())
        );
        assert_eq!(p.describe(), "the proxy http://***@h:1 (HTTP_PROXY)");
        assert_eq!(format!("{p:?}"), "the proxy http://***@h:1 (HTTP_PROXY)");
        let p = proxy("user@h").unwrap();
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"user:")).as_str())
        );

        for (text, why) in [
            (
                "https://proxy:443",
                "is a https:// proxy; only plain-HTTP proxies",
            ),
            ("socks5://u:secret@proxy:1080", "is a socks5:// proxy"),
            ("ftp://proxy", "has an unknown scheme"),
            ("http://proxy:notaport", "invalid"),
            ("http://proxy:99999", "invalid"),
            ("http://", "has no host"),
            ("http://u:secret@", "has no host"),
            ("http://u:%zz@proxy", "has user information that"),
        ] {
            let e = proxy(text).unwrap_err();
            assert!(e.contains(why) && e.contains("(HTTP_PROXY)"), "{text}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[cfg(http)]
    #[test]
    fn no_proxy_entries_match_as_before() {
        for (list, host, listed) in [
            ("*", "anything.example", true),
            ("s3.internal", "s3.internal", true),
            ("S3.Internal", "s3.INTERNAL", true),
            ("s3.internal", "bkt.s3.internal", false),
            (".internal", "bkt.s3.internal", true),
            ("*.internal", "bkt.s3.internal", true),
            (".internal", "internal", false),
            ("10.1.", "10.1.2.3", true),
            ("10.1.*", "10.1.2.3", true),
            ("10.1.", "10.10.2.3", false),
            ("a, 127.0.0.1 ,b", "127.0.0.1", true),
            (" , ", "127.0.0.1", false),
        ] {
            assert_eq!(no_proxy_lists(list, host), listed, "{list:?} {host}");
        }
    }

    #[cfg(http)]
    #[test]
    fn proxies_are_chosen_by_scheme_upper_case_first_and_shown_redacted() {
        let vars = |name: &str| match name {
            "HTTP_PROXY" => Some("http://u:secret@upper:1".to_string()),
            "http_proxy" => Some("http://lower:2".to_string()),
            "https_proxy" => Some("secure:3".to_string()),
            "NO_PROXY" => Some("".to_string()),
            "no_proxy" => Some("skipped.example".to_string()),
            _ => None,
        };
        let proxies = Proxies::from_vars(&vars);
        let http = proxies
            .for_host("s3", "http", "s3.example")
            .unwrap()
            .unwrap();
        assert_eq!(
            (http.authority(), http.setting),
            ("upper:1".to_string(), "HTTP_PROXY")
        );
        let https = proxies
            .for_host("s3", "https", "s3.example")
            .unwrap()
            .unwrap();
        assert_eq!(
            (https.authority(), https.setting),
            ("secure:3".to_string(), "https_proxy")
        );
        assert_eq!(
            proxies.for_host("s3", "https", "skipped.example").unwrap(),
            None
        );
        let shown = format!("{proxies:?}");
        assert!(
            !shown.contains("secret") && shown.contains("http://***@upper:1"),
            "{shown}"
        );
        assert_eq!(Proxies::none().for_host("s3", "http", "h").unwrap(), None);
        let code = Proxies::none().https("http://h:8080").no_proxy("other");
        assert_eq!(
            code.for_host("s3", "https", "s3.example")
                .unwrap()
                .unwrap()
                .setting,
            "Proxies::https"
        );
    }
}
