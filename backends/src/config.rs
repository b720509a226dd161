//! Naming a store with a URL, and filling in the rest from the environment.
//!
//! | URL | store | from the environment |
//! |---|---|---|
//! | `s3://bucket/prefix` | AWS S3 (`s3` feature) | `AWS_REGION` or `AWS_DEFAULT_REGION`; `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` overrides the endpoint |
//! | `r2://bucket/prefix` | Cloudflare R2 (`r2` feature) | `R2_ACCOUNT_ID` and optional `R2_JURISDICTION`, or an endpoint variable |
//! | `minio://bucket/prefix` | MinIO (`minio` feature) | `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (required); `AWS_REGION` |
//! | `file:///dir//prefix` | the directory `/dir` as a bucket (`fs` feature) | nothing |
//!
//! # From a URL to the lease's key
//!
//! One rule for every scheme: a URL is `scheme://BUCKET/PREFIX`, and the
//! lease is the object `PREFIX/LEASE` in the bucket (`LEASE` when the
//! prefix is empty; a trailing `/` is dropped). For `file://` the bucket is
//! a directory path, which holds `/` itself, so an empty segment, `//`,
//! ends it when a prefix follows; without one, the whole path is the
//! bucket's directory and the prefix is empty.
//!
//! | URL | bucket | lease key |
//! |---|---|---|
//! | `s3://b/jobs/nightly` | `b` | `jobs/nightly/LEASE` |
//! | `r2://b/jobs/nightly` | `b` | `jobs/nightly/LEASE` |
//! | `minio://b` | `b` | `LEASE` |
//! | `file:///srv/bkt//jobs/nightly` | the directory `/srv/bkt` | `jobs/nightly/LEASE` |
//! | `file:///srv/bkt/jobs/nightly` | the directory `/srv/bkt/jobs/nightly` | `LEASE` |
//! | `file:///srv/bkt%2F%2Fjobs` | the directory `/srv/bkt//jobs`, that is `/srv/bkt/jobs` (an encoded `/` never ends the bucket) | `LEASE` |
//!
//! The bucket must exist: a missing S3 bucket answers `NoSuchBucket`, and
//! so does a `file://` directory that is missing when the store opens
//! ([`ConfigError::Open`], permanent; `mkdir -p` it). Folders under the
//! directory, for a prefix, are made as needed. A `file://` prefix has no
//! empty segment (no second `//`), since the directory store refuses keys
//! with one.
//!
//! The HTTP stores take their credentials from the chain of
//! [`credentials`] (the environment, then the shared
//! files' profile `AWS_PROFILE` or `default`, …). The profile's `region`
//! and `endpoint_url` apply when `AWS_REGION` / `AWS_DEFAULT_REGION` and
//! the endpoint variables are not set.
//!
//! TLS and proxies, as the AWS CLI takes them: `AWS_CA_BUNDLE`, else the
//! profile's `ca_bundle`, names a PEM file of CA certificates trusted
//! beside the built-in roots; `BUCKET_LEASE_SYSTEM_TRUST=on` trusts the
//! system's store too (`SSL_CERT_FILE`, else the distribution's bundle);
//! `HTTP_PROXY` / `HTTPS_PROXY` by the endpoint's scheme, and `NO_PROXY`
//! (see `Proxies`, HTTP features).
//!
//! `BUCKET_LEASE_WRITE_INTERVAL` (`1s`, `1500ms`, `0` or `off`: any
//! duration [`parse_duration_text`] reads, at most an hour) is the
//! shortest time the service allows between two writes of one key: `r2://`
//! defaults to one second, R2's documented limit, the others to none. Set
//! it for any endpoint that limits writes of a key (Google Cloud Storage
//! behind its S3 API takes one a second too).
//!
//! # Durations
//!
//! One reading of a duration for the environment and for the command
//! line (`bucket-lease`'s `--ttl`, `--wait`, `--timeout`, …):
//! [`parse_duration_text`].
//!
//! Reading the environment is injectable ([`open_with_env`]), so tests
//! need not change the process's variables. Programs that configure in
//! code use the builders (`s3::builder()`, …) instead.
//!
#![cfg_attr(http, doc = "[`credentials`]: crate::credentials")]
#![cfg_attr(not(http), doc = "[`credentials`]: crate#features")]

use crate::settings::{percent_decode, redact_user_info};
use bucket_lease_core::store::Store;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::settings::ConfigError;
#[cfg(http)]
pub use crate::settings::S3_MAX_KEY_BYTES;

/// A store named by a URL. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `s3://bucket/prefix`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix the lease is on.
        prefix: String,
    },
    /// `r2://bucket/prefix`.
    R2 {
        /// The bucket.
        bucket: String,
        /// The prefix the lease is on.
        prefix: String,
    },
    /// `minio://bucket/prefix`.
    Minio {
        /// The bucket.
        bucket: String,
        /// The prefix the lease is on.
        prefix: String,
    },
    /// `file:///dir//prefix`: the directory `dir` used as a bucket, and
    /// the prefix after the first `//` (empty without one: then `dir` is
    /// the whole path). See [the rule](self#from-a-url-to-the-leases-key).
    File {
        /// The directory that holds the objects: the bucket, which must
        /// exist.
        dir: PathBuf,
        /// The prefix the lease is on, in the directory.
        prefix: String,
    },
}

const URL_FIX: &str = "write it as s3://bucket/prefix, r2://bucket/prefix, minio://bucket/prefix \
     or file:///dir//prefix (file:///dir for the directory alone)";

impl StoreUrl {
    /// Parse `url`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] when the scheme is unknown, the bucket is
    /// missing, the URL carries a raw `?`, `#` or `@` (a query, a fragment
    /// or user information: in a prefix, write them `%3F`, `%23`, `%40`),
    /// or a `%` does not start a UTF-8 percent-encoding.
    ///
    /// The bucket, the directory and the prefix are percent-decoded once,
    /// after the URL is split: `s3://b/jobs%3Fnightly` is the prefix
    /// `jobs?nightly`, `%25` a literal `%`, and an encoded `/` (`%2F`)
    /// never ends a `file://` URL's directory. See [the
    /// rule](self#from-a-url-to-the-leases-key) for where the bucket ends.
    pub fn parse(url: &str) -> Result<StoreUrl, ConfigError> {
        let invalid = |why: &str| ConfigError::Invalid {
            what: "URL",
            // User information may hold a secret: never echo it.
            value: redact_user_info(url),
            why: why.to_string(),
            fix: URL_FIX,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid("has no scheme"));
        };
        if rest.contains(['?', '#', '@']) {
            return Err(invalid(
                "carries a raw ?, # or @ (a query, a fragment or user information); to have \
                 one in the prefix, percent-encode it (%3F, %23, %40)",
            ));
        }
        let decode = |part: &str| percent_decode(part).map_err(&invalid);
        if scheme == "file" {
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(invalid("is not an absolute file:/// path"));
            }
            // The bucket's directory ends at the first empty segment.
            let (dir, prefix) = path.split_once("//").unwrap_or((path, ""));
            let prefix = prefix.trim_end_matches('/');
            if prefix.contains("//") {
                return Err(invalid(
                    "has an empty segment in its prefix: the directory ends at the first //, \
                     and a key in a directory bucket has no empty segment",
                ));
            }
            let dir = dir.trim_end_matches('/');
            let dir = if dir.is_empty() { "/" } else { dir };
            return Ok(StoreUrl::File {
                dir: PathBuf::from(decode(dir)?),
                prefix: decode(prefix)?,
            });
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("names no bucket"));
        }
        let (bucket, prefix) = (decode(bucket)?, decode(prefix.trim_end_matches('/'))?);
        match scheme {
            "s3" => Ok(StoreUrl::S3 { bucket, prefix }),
            "r2" => Ok(StoreUrl::R2 { bucket, prefix }),
            "minio" => Ok(StoreUrl::Minio { bucket, prefix }),
            _ => Err(invalid("has an unknown scheme")),
        }
    }

    /// The prefix the lease is on.
    pub fn prefix(&self) -> &str {
        match self {
            StoreUrl::S3 { prefix, .. }
            | StoreUrl::R2 { prefix, .. }
            | StoreUrl::Minio { prefix, .. }
            | StoreUrl::File { prefix, .. } => prefix,
        }
    }

    /// Open the store, reading settings from the process environment.
    ///
    /// # Errors
    ///
    /// As [`StoreUrl::open_with_env`].
    pub fn open(&self) -> Result<Arc<dyn Store>, ConfigError> {
        self.open_with_env(|name| std::env::var(name).ok())
    }

    /// Open the store, reading settings through `env` (a variable's name to
    /// its value).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Missing`] naming the variable to set;
    /// [`ConfigError::Invalid`] for an unusable value;
    /// [`ConfigError::NotBuilt`] when the store's feature is not compiled
    /// in; [`ConfigError::Open`] when the directory is missing (as a
    /// bucket that does not exist: `NoSuchBucket`, permanent), is not a
    /// directory, or cannot be opened.
    pub fn open_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn Store>, ConfigError> {
        match self {
            StoreUrl::File { dir, prefix } => open_dir(dir, prefix),
            _ => open_http(self, &env),
        }
    }
}

/// Parse `url` and open its store from the process environment; returns
/// the store and the prefix the lease is on.
///
/// # Errors
///
/// As [`StoreUrl::parse`] and [`StoreUrl::open_with_env`].
pub fn open(url: &str) -> Result<(Arc<dyn Store>, String), ConfigError> {
    open_with_env(url, |name| std::env::var(name).ok())
}

/// [`open`], reading the environment through `env`.
///
/// # Errors
///
/// As [`StoreUrl::parse`] and [`StoreUrl::open_with_env`].
pub fn open_with_env(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Arc<dyn Store>, String), ConfigError> {
    let parsed = StoreUrl::parse(url)?;
    let store = parsed.open_with_env(env).map_err(|e| match (&parsed, e) {
        #[cfg(feature = "fs")]
        (StoreUrl::File { dir, .. }, ConfigError::Open(e))
            if is_single_slash(url) && e.code() == Some("NoSuchBucket") =>
        {
            ConfigError::Open(both_readings(dir, e))
        }
        (_, e) => e,
    })?;
    Ok((store, parsed.prefix().to_string()))
}

#[cfg(feature = "fs")]
fn open_dir(dir: &std::path::Path, prefix: &str) -> Result<Arc<dyn Store>, ConfigError> {
    let store = crate::fs::DirStore::open_for(dir, prefix).map_err(ConfigError::Open)?;
    Ok(Arc::new(store))
}

/// Whether `url` is a `file://` URL with no `//` in its path: the whole
/// path names the bucket's directory.
#[cfg(feature = "fs")]
fn is_single_slash(url: &str) -> bool {
    url.strip_prefix("file://")
        .map(|rest| rest.strip_prefix("localhost").unwrap_or(rest))
        .is_some_and(|path| !path.contains("//"))
}

/// The answer for a single-slash URL (`file:///srv/bkt/nightly`) whose
/// directory is missing: it names both readings, the whole path as the
/// bucket and the deepest directory that exists as the bucket with the
/// rest as the prefix, so the user picks one, not a `mkdir -p` they did
/// not mean.
#[cfg(feature = "fs")]
fn both_readings(
    dir: &std::path::Path,
    error: bucket_lease_core::store::StoreError,
) -> bucket_lease_core::store::StoreError {
    let shown = dir.display();
    let existing = dir.ancestors().skip(1).find(|at| at.is_dir());
    let split = existing
        .filter(|at| at.parent().is_some())
        .and_then(|at| Some((at, dir.strip_prefix(at).ok()?)));
    use crate::fs::shell_word;
    use crate::settings::url_text;
    let bucket = |path: &std::path::Path| url_text(&path.display().to_string());
    let mkdir = shell_word(dir);
    let message = match split {
        Some((at, rest)) => format!(
            "there is no directory {shown}, which this URL names as the bucket (a single `/` \
             before the path makes it all the bucket's directory); for the bucket {} with the \
             prefix {}, write file://{}//{}; for {shown} itself as the bucket, make it first \
             (mkdir -p {mkdir})",
            at.display(),
            rest.display(),
            bucket(at),
            url_text(&rest.display().to_string()),
        ),
        None => format!(
            "there is no directory {shown}, which this URL names as the bucket; make it first \
             (mkdir -p {mkdir}), or name a directory that exists, with `//` before the prefix \
             (file:///srv/bkt//jobs/nightly)"
        ),
    };
    error.with_message(message)
}

#[cfg(not(feature = "fs"))]
fn open_dir(_dir: &std::path::Path, _prefix: &str) -> Result<Arc<dyn Store>, ConfigError> {
    Err(ConfigError::NotBuilt {
        scheme: "file",
        feature: "fs",
    })
}

#[cfg(http)]
fn open_http(
    url: &StoreUrl,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Store>, ConfigError> {
    check_prefix_room(url)?;
    let store = http_builder(url, env)?.build()?;
    // Which source, never what it holds (`Source`'s Display shows no value).
    log::info!(
        "bucket {}: credentials from {}",
        store.bucket(),
        store.credentials_source()
    );
    Ok(Arc::new(store))
}

/// [`ConfigError::Invalid`] when the URL's prefix leaves no room in
/// [`S3_MAX_KEY_BYTES`] for the lease key and the acquire probe's key
/// beside it.
#[cfg(http)]
fn check_prefix_room(url: &StoreUrl) -> Result<(), ConfigError> {
    use bucket_lease_core::record::{max_prefix_bytes, PROBE_KEY_EXTRA_BYTES};
    let prefix = url.prefix();
    let longest = max_prefix_bytes(S3_MAX_KEY_BYTES, true);
    if prefix.len() <= longest {
        return Ok(());
    }
    let shown: String = prefix.chars().take(40).collect();
    Err(ConfigError::Invalid {
        what: url_profile_name(url),
        value: format!("{shown}…"),
        why: format!(
            "is a prefix of {} bytes: keys are at most {S3_MAX_KEY_BYTES} bytes, and an \
             acquire writes {{prefix}}/LEASE and, beside it, a probe key {PROBE_KEY_EXTRA_BYTES} \
             bytes longer; use a prefix of at most {longest} bytes",
            prefix.len()
        ),
        fix: "shorten the prefix in the URL",
    })
}

#[cfg(not(http))]
fn open_http(
    url: &StoreUrl,
    _env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Store>, ConfigError> {
    Err(not_built(url))
}

/// The profile's short name, for messages (`s3`, `r2`, `minio`, `file`).
#[cfg(http)]
fn url_profile_name(url: &StoreUrl) -> &'static str {
    match url {
        StoreUrl::S3 { .. } => "s3",
        StoreUrl::R2 { .. } => "r2",
        StoreUrl::Minio { .. } => "minio",
        StoreUrl::File { .. } => "file",
    }
}

/// How durations are written, for help texts and messages: the forms
/// [`parse_duration_text`] reads that are worth teaching.
pub const DURATION_FORMS: &str = "seconds (1.5), or with a unit: 250ms, 90s, 1m, 0.5h, 1d";

/// The longest duration [`parse_duration_text`] reads: 10^9 s, about 31
/// years, far from any overflow when added to an instant.
pub const MAX_DURATION: Duration = Duration::from_secs(1_000_000_000);

/// The longest `BUCKET_LEASE_WRITE_INTERVAL`: an hour.
#[cfg(http)]
const MAX_WRITE_INTERVAL: Duration = Duration::from_secs(3600);

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Why a text is not a duration ([`parse_duration_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Not written as a duration (see [`DURATION_FORMS`]): a sign other
    /// than `+`, an exponent, `inf`, no digit, an unknown unit.
    NotADuration,
    /// A duration longer than [`MAX_DURATION`].
    TooLong,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::NotADuration => {
                write!(f, "is not a duration: write {DURATION_FORMS}")
            }
            DurationError::TooLong => write!(
                f,
                "is longer than {} seconds, the longest duration: write a shorter one",
                MAX_DURATION.as_secs()
            ),
        }
    }
}

impl std::error::Error for DurationError {}

/// Read a duration, from 0 up to [`MAX_DURATION`], as the command line
/// and the environment (`BUCKET_LEASE_WRITE_INTERVAL`) take one.
///
/// The forms ([`DURATION_FORMS`]): a number of seconds, fractions
/// allowed (`1.5`, `.5`, `1.`), optionally followed by `ms`, `s`, `m`, `h`
/// or `d` with no space (`250ms`, `90s`, `2.5m`, `0.5h`, `1d`), as
/// `timeout(1)` takes them. Read exactly, in decimal (`0.1h` is 360 s,
/// not a float's neighbour of it); digits past the 18th after the point
/// are dropped.
///
/// Also, as `BUCKET_LEASE_WRITE_INTERVAL` has always read them: a whole
/// number of seconds or milliseconds with spaces around it or before its
/// unit, or a `+` before it (`" 1 "`, `1 s`, `1500 ms`, `+1`, `+1500ms`;
/// a whole number is at most 4,294,967,295 in these forms), and `off`
/// in any case for 0.
///
/// ```
/// # mod bucket_lease { pub mod backends { pub use bucket_lease_backends::*; } }
/// use bucket_lease::backends::config::{parse_duration_text, DurationError};
/// use std::time::Duration;
///
/// assert_eq!(parse_duration_text("1.5"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration_text("0.1h"), Ok(Duration::from_secs(360)));
/// assert_eq!(parse_duration_text("1500 ms"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration_text("off"), Ok(Duration::ZERO));
/// assert_eq!(parse_duration_text("-1"), Err(DurationError::NotADuration));
/// ```
///
/// # Errors
///
/// [`DurationError::NotADuration`] for a text in none of these forms,
/// [`DurationError::TooLong`] beyond [`MAX_DURATION`].
pub fn parse_duration_text(text: &str) -> Result<Duration, DurationError> {
    let nanos = decimal_nanos(text)
        .or_else(|| whole_nanos(text))
        .ok_or(DurationError::NotADuration)?;
    if nanos > MAX_DURATION.as_nanos() {
        return Err(DurationError::TooLong);
    }
    // At most 10^9 s: both parts fit.
    let seconds = u64::try_from(nanos / NANOS_PER_SECOND).map_err(|_| DurationError::TooLong)?;
    let nanos = u32::try_from(nanos % NANOS_PER_SECOND).map_err(|_| DurationError::TooLong)?;
    Ok(Duration::new(seconds, nanos))
}

/// A duration in the command line's forms, in nanoseconds: a number of
/// seconds, fractions allowed, optionally followed by `ms`, `s`, `m`, `h`
/// or `d`; `None` when it is not one (a sign, an exponent, `inf`, no
/// digit, a space). A value too large to hold is `u128::MAX`.
fn decimal_nanos(text: &str) -> Option<u128> {
    if let Some(number) = text.strip_suffix("ms") {
        // A plain number of milliseconds (not `1mms`).
        if !number.ends_with(|c: char| c.is_ascii_digit() || c == '.') {
            return None;
        }
        return decimal_nanos(number).map(|n| n / 1000);
    }
    let (number, unit) = match text.as_bytes().last()? {
        b's' => (&text[..text.len() - 1], 1),
        b'm' => (&text[..text.len() - 1], 60),
        b'h' => (&text[..text.len() - 1], 3600),
        b'd' => (&text[..text.len() - 1], 86_400),
        _ => (text, 1),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |text: &str| text.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let decimal = |text: &str| {
        text.bytes().fold(0u128, |n, b| {
            n.saturating_mul(10).saturating_add(u128::from(b - b'0'))
        })
    };
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(18));
    let unit_nanos = unit * NANOS_PER_SECOND;
    // Below 10^18 times 86,400 × 10^9: no overflow.
    let part = decimal(fraction) * unit_nanos / scale;
    Some(
        decimal(whole)
            .saturating_mul(unit_nanos)
            .saturating_add(part),
    )
}

/// A duration in the forms only `BUCKET_LEASE_WRITE_INTERVAL` read, in
/// nanoseconds: `off`, or a whole number of seconds or milliseconds as
/// `u32`'s parser reads it (a `+` allowed), spaces around it and before
/// its unit allowed.
fn whole_nanos(text: &str) -> Option<u128> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Some(0);
    }
    let (number, unit_nanos) = match text.strip_suffix("ms") {
        Some(number) => (number, NANOS_PER_SECOND / 1000),
        None => (text.strip_suffix('s').unwrap_or(text), NANOS_PER_SECOND),
    };
    let count: u32 = number.trim().parse().ok()?;
    Some(u128::from(count) * unit_nanos)
}

/// `BUCKET_LEASE_WRITE_INTERVAL`'s `value` for the store `what`: a
/// duration ([`parse_duration_text`]) of at most an hour; 0 (or `off`)
/// for none.
#[cfg(http)]
fn write_interval(what: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let why = match parse_duration_text(value) {
        Ok(interval) if interval <= MAX_WRITE_INTERVAL => return Ok(interval),
        Ok(_) | Err(DurationError::TooLong) => "is longer than an hour, the longest write interval",
        Err(_) => "is not a duration",
    };
    Err(ConfigError::Invalid {
        what,
        value: value.to_string(),
        why: format!("{why} (BUCKET_LEASE_WRITE_INTERVAL)"),
        fix: "set it to a duration of at most an hour, as seconds (1.5) or with a unit (1s, \
              1500ms, 0.5m), or to 0 (or off) for none",
    })
}

fn not_built(url: &StoreUrl) -> ConfigError {
    let (scheme, feature) = match url {
        StoreUrl::S3 { .. } => ("s3", "s3"),
        StoreUrl::R2 { .. } => ("r2", "r2"),
        StoreUrl::Minio { .. } => ("minio", "minio"),
        StoreUrl::File { .. } => ("file", "fs"),
    };
    ConfigError::NotBuilt { scheme, feature }
}

/// The builder for an HTTP store URL, filled in from `env`: for programs
/// that want to change more (timeouts, addressing) before
/// [`build`](crate::HttpStoreBuilder::build).
///
/// # Errors
///
/// [`ConfigError::Missing`] naming the variable to set;
/// [`ConfigError::NotBuilt`] for a store this build leaves out or a
/// `file://` URL.
#[cfg(http)]
pub fn http_builder(
    url: &StoreUrl,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<crate::HttpStoreBuilder, ConfigError> {
    use crate::credentials::{self, profile::Profile, CredentialsError, Source};
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let profile = Profile::load(env).map_err(|why| {
        ConfigError::Credentials(CredentialsError::Source {
            source: Source::Profile {
                name: Profile::selected_name(env),
            },
            why,
        })
    })?;
    let endpoint = var("AWS_ENDPOINT_URL_S3")
        .or_else(|| var("AWS_ENDPOINT_URL"))
        .or_else(|| profile.get("endpoint_url").map(str::to_string));
    // Ours first, then the AWS config key in the profile's `s3` section.
    let addressing = match var("BUCKET_LEASE_ADDRESSING_STYLE") {
        Some(style) => Some((style, "BUCKET_LEASE_ADDRESSING_STYLE")),
        None => profile.get("s3.addressing_style").map(|style| {
            (
                style.to_string(),
                "addressing_style in the profile's s3 section",
            )
        }),
    };
    let addressing = match addressing {
        None => None,
        Some((style, setting)) => {
            crate::Addressing::parse_style(&style).map_err(|value| ConfigError::Invalid {
                what: url_profile_name(url),
                value,
                why: format!("is not an addressing style ({setting})"),
                fix: "set it to path, virtual or auto",
            })?
        }
    };
    // AWS_USE_FIPS_ENDPOINT / AWS_USE_DUALSTACK_ENDPOINT, else the profile's
    // use_fips_endpoint / use_dualstack_endpoint.
    #[cfg(feature = "s3")]
    let flag = |variable: &'static str, key: &str| -> Result<bool, ConfigError> {
        let Some(value) = var(variable).or_else(|| profile.get(key).map(str::to_string)) else {
            return Ok(false);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(ConfigError::Invalid {
                what: "s3",
                value,
                why: format!("is not true or false ({variable})"),
                fix: "set it to true or false",
            }),
        }
    };
    #[cfg(any(feature = "s3", feature = "minio"))]
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| profile.get("region").map(str::to_string));
    #[cfg(feature = "s3")]
    let region_missing = region.is_none();
    let (builder, bucket) = match url {
        #[cfg(feature = "s3")]
        StoreUrl::S3 { bucket, .. } => {
            let variant = crate::EndpointVariant::new(
                flag("AWS_USE_FIPS_ENDPOINT", "use_fips_endpoint")?,
                flag("AWS_USE_DUALSTACK_ENDPOINT", "use_dualstack_endpoint")?,
            );
            let mut b = crate::s3::builder().endpoint_variant(variant);
            if let Some(region) = region {
                b = b.region(region);
            }
            if let Some(endpoint) = endpoint {
                b = b.endpoint(endpoint);
            }
            (b, bucket)
        }
        #[cfg(feature = "r2")]
        StoreUrl::R2 { bucket, .. } => {
            // R2 signs for region `auto`; AWS_REGION belongs to AWS.
            let endpoint = match (endpoint, var("R2_ACCOUNT_ID")) {
                (Some(endpoint), Some(_)) => {
                    log::warn!(
                        "both an endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the \
                         profile's endpoint_url) and R2_ACCOUNT_ID are set: the endpoint wins, \
                         R2_ACCOUNT_ID and R2_JURISDICTION are ignored"
                    );
                    endpoint
                }
                (Some(endpoint), None) => endpoint,
                (None, Some(account)) => {
                    crate::r2::endpoint(&account, var("R2_JURISDICTION").as_deref())
                }
                (None, None) => {
                    return Err(ConfigError::Missing {
                        what: "r2",
                        setting: "R2_ACCOUNT_ID",
                        fix: "set R2_ACCOUNT_ID (and R2_JURISDICTION for a jurisdiction), \
                              or AWS_ENDPOINT_URL",
                    })
                }
            };
            (crate::r2::builder().endpoint(endpoint), bucket)
        }
        #[cfg(feature = "minio")]
        StoreUrl::Minio { bucket, .. } => {
            let Some(endpoint) = endpoint else {
                return Err(ConfigError::Missing {
                    what: "minio",
                    setting: "AWS_ENDPOINT_URL",
                    fix: "set AWS_ENDPOINT_URL to the server's URL, such as http://127.0.0.1:9000",
                });
            };
            let mut b = crate::minio::builder().endpoint(endpoint);
            if let Some(region) = region {
                b = b.region(region);
            }
            (b, bucket)
        }
        other => return Err(not_built(other)),
    };
    // An on/off variable: `None` when unset.
    let switch = |variable: &'static str| -> Result<Option<bool>, ConfigError> {
        let Some(value) = var(variable) else {
            return Ok(None);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "on" | "true" => Ok(Some(true)),
            "off" | "false" => Ok(Some(false)),
            _ => Err(ConfigError::Invalid {
                what: url_profile_name(url),
                value,
                why: format!("is not on or off ({variable})"),
                fix: "set it to on or off (true or false)",
            }),
        }
    };
    // Switches for services that differ (R2 by default sends no
    // conditional deletes): on or off, else the profile's default.
    let mut builder = builder;
    for (variable, set) in [
        (
            "BUCKET_LEASE_CONDITIONAL_DELETE",
            crate::HttpStoreBuilder::conditional_delete as fn(_, bool) -> _,
        ),
        (
            "BUCKET_LEASE_UNQUOTED_ETAGS",
            crate::HttpStoreBuilder::unquoted_etags,
        ),
    ] {
        if let Some(on) = switch(variable)? {
            builder = set(builder, on);
        }
    }
    if let Some(value) = var("BUCKET_LEASE_WRITE_INTERVAL") {
        builder = builder.write_interval(write_interval(url_profile_name(url), &value)?);
    }
    // The roots trusted beside the built-in ones, as the AWS CLI reads
    // them (the variable wins over the profile), and the system's store
    // when asked for, found through SSL_CERT_FILE as OpenSSL finds it.
    if let Some(path) = var("AWS_CA_BUNDLE") {
        builder = builder.ca_bundle_named(path, "AWS_CA_BUNDLE");
    } else if let Some(path) = profile.get("ca_bundle") {
        builder = builder.ca_bundle_named(path, "ca_bundle in the profile");
    }
    if switch("BUCKET_LEASE_SYSTEM_TRUST")? == Some(true) {
        builder = builder.system_trust_named(
            Some("BUCKET_LEASE_SYSTEM_TRUST"),
            var("SSL_CERT_FILE").map(PathBuf::from),
        );
    }
    // HTTP_PROXY / HTTPS_PROXY by the endpoint's scheme, and NO_PROXY.
    builder = builder.proxies(crate::Proxies::from_vars(env));
    let provider =
        credentials::chain_with_profile(env, &profile).map_err(ConfigError::Credentials)?;
    // Said here rather than by the builder, whose message names region().
    #[cfg(feature = "s3")]
    if region_missing && matches!(url, StoreUrl::S3 { .. }) {
        return Err(ConfigError::Missing {
            what: "s3",
            setting: "region",
            fix: "set AWS_REGION (or AWS_DEFAULT_REGION, or region in the shared config profile)",
        });
    }
    Ok(builder
        .addressing_style(addressing)
        .bucket(bucket.clone())
        .credentials_provider(provider))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme() {
        assert_eq!(
            StoreUrl::parse("s3://b/jobs/nightly/").unwrap(),
            StoreUrl::S3 {
                bucket: "b".into(),
                prefix: "jobs/nightly".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("r2://b").unwrap(),
            StoreUrl::R2 {
                bucket: "b".into(),
                prefix: "".into()
            }
        );
        assert_eq!(StoreUrl::parse("minio://b/p").unwrap().prefix(), "p");
        let file = |dir: &str, prefix: &str| StoreUrl::File {
            dir: dir.into(),
            prefix: prefix.into(),
        };
        for (url, parsed) in [
            // `//` ends the directory: the prefix is as in s3://b/jobs/nightly.
            (
                "file:///srv/bkt//jobs/nightly",
                file("/srv/bkt", "jobs/nightly"),
            ),
            (
                "file:///srv/bkt//jobs/nightly/",
                file("/srv/bkt", "jobs/nightly"),
            ),
            // Without `//`, the whole path is the directory.
            (
                "file:///srv/bkt/jobs/nightly",
                file("/srv/bkt/jobs/nightly", ""),
            ),
            (
                "file:///var/lib/leases/jobs",
                file("/var/lib/leases/jobs", ""),
            ),
            ("file:///top", file("/top", "")),
            ("file://localhost/d/", file("/d", "")),
            ("file:///srv/bkt//", file("/srv/bkt", "")),
            ("file:////jobs", file("/", "jobs")),
            ("file:///", file("/", "")),
        ] {
            assert_eq!(StoreUrl::parse(url).unwrap(), parsed, "{url}");
        }
    }

    /// The lease key is `PREFIX/LEASE` for every scheme, `file://` with its
    /// `//` included.
    #[test]
    fn one_rule_maps_every_scheme_to_the_lease_key() {
        use bucket_lease_core::record::lease_key;
        for url in [
            "s3://b/jobs/nightly",
            "r2://b/jobs/nightly/",
            "minio://b/jobs/nightly",
            "file:///srv/bkt//jobs/nightly",
        ] {
            let prefix = StoreUrl::parse(url).unwrap().prefix().to_string();
            assert_eq!(lease_key(&prefix), "jobs/nightly/LEASE", "{url}");
        }
        for url in [
            "s3://b",
            "s3://b/",
            "file:///srv/bkt/jobs/nightly",
            "file:///srv/bkt//",
        ] {
            let prefix = StoreUrl::parse(url).unwrap().prefix().to_string();
            assert_eq!(lease_key(&prefix), "LEASE", "{url}");
        }
    }

    /// A `/` encoded as `%2F` is decoded after the split, so it never ends
    /// the directory; a second `//` would make a key no directory bucket
    /// takes, and is refused.
    #[test]
    fn an_encoded_slash_stays_in_the_directory_and_a_second_double_slash_is_refused() {
        assert_eq!(
            StoreUrl::parse("file:///srv/bkt%2F%2Fjobs").unwrap(),
            StoreUrl::File {
                dir: "/srv/bkt//jobs".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("file:///srv/bkt//a%2F%2Fb")
                .unwrap()
                .prefix(),
            "a//b"
        );
        let e = StoreUrl::parse("file:///srv/bkt//jobs//nightly")
            .unwrap_err()
            .to_string();
        assert!(e.contains("has an empty segment in its prefix"), "{e}");
        assert!(e.contains("file:///dir//prefix"), "{e}");
    }

    #[test]
    fn bad_urls_say_what_to_write_and_hide_user_information() {
        for url in [
            "gs://b/p",
            "s3:///p",
            "s3://b/p?x=1",
            "no-scheme",
            "file://relative/p",
        ] {
            let e = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(e.starts_with("configuring the URL store: "), "{e}");
            assert!(e.contains("write it as s3://bucket/prefix"), "{e}");
        }
        let e = StoreUrl::parse("s3://AKID:hunter2@b/p")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn prefixes_are_percent_decoded_once_and_raw_query_characters_say_to_encode() {
        assert_eq!(
            StoreUrl::parse("s3://b/jobs%3Fx%23y%40z/").unwrap(),
            StoreUrl::S3 {
                bucket: "b".into(),
                prefix: "jobs?x#y@z".into()
            }
        );
        // Once: %25 is a literal %, and what follows it stays as written.
        assert_eq!(
            StoreUrl::parse("minio://b/a%252F%20b%C3%A9")
                .unwrap()
                .prefix(),
            "a%2F b\u{e9}"
        );
        assert_eq!(
            StoreUrl::parse("file:///tmp/d%20x//p%3F").unwrap(),
            StoreUrl::File {
                dir: "/tmp/d x".into(),
                prefix: "p?".into()
            }
        );
        for (url, why) in [
            (
                "s3://b/p?x",
                "configuring the URL store: \"s3://b/p?x\" carries a raw ?, # or @ (a query, a \
                 fragment or user information); to have one in the prefix, percent-encode it \
                 (%3F, %23, %40)",
            ),
            (
                "s3://b/p#x",
                "configuring the URL store: \"s3://b/p#x\" carries a raw ?, # or @",
            ),
            (
                "s3://b/p%zz",
                "configuring the URL store: \"s3://b/p%zz\" has a % not followed by two hex \
                 digits; write a literal % as %25",
            ),
            (
                "s3://b/p%",
                "configuring the URL store: \"s3://b/p%\" has a % not followed by two hex digits",
            ),
            (
                "s3://b/p%FF",
                "configuring the URL store: \"s3://b/p%FF\" decodes to bytes that are not UTF-8",
            ),
        ] {
            let e = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(e.starts_with(why), "{url}: {e}");
        }
    }

    #[test]
    fn missing_features_are_named() {
        #[cfg(not(feature = "fs"))]
        {
            let e = open_with_env("file:///tmp/x", |_| None).err().unwrap();
            assert_eq!(
                e.to_string(),
                "opening a file:// store: this build has no `fs` feature; rebuild with --features fs"
            );
        }
        #[cfg(not(feature = "r2"))]
        {
            let e = open_with_env("r2://b/p", |_| None).err().unwrap();
            assert_eq!(
                e,
                ConfigError::NotBuilt {
                    scheme: "r2",
                    feature: "r2"
                }
            );
        }
    }

    /// A path of its own (not made) in the temporary directory, for the
    /// test `name`.
    #[cfg(feature = "fs")]
    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "bucket-lease-config-{name}-{:016x}",
            getrandom::u64().unwrap()
        ))
    }

    /// What opening `url` (with no environment) is refused with: an
    /// `Open` error, which must be permanent, and its text.
    #[cfg(feature = "fs")]
    fn refused_open(url: &str) -> (bucket_lease_core::store::StoreError, String) {
        let e = open_with_env(url, |_| None)
            .err()
            .unwrap_or_else(|| panic!("{url}: opened, where it must be refused"));
        let ConfigError::Open(open) = &e else {
            panic!("{url}: {e}");
        };
        assert!(open.is_permanent(), "{e}");
        (open.clone(), e.to_string())
    }

    #[cfg(feature = "fs")]
    #[test]
    fn file_urls_open_the_directory_store() {
        use bucket_lease_core::store::{PutMode, PutOptions};
        let dir = scratch("open");
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.to_str().unwrap().to_string();
        let (store, prefix) = open_with_env(&format!("file://{dir}//jobs"), |_| None).unwrap();
        assert_eq!(prefix, "jobs");
        store
            .put("jobs/LEASE", b"x", &PutOptions::new(PutMode::Create))
            .unwrap();
        assert_eq!(store.get("jobs/LEASE", None).unwrap().body, b"x");
        let e = store.get("jobs/nothing", None).unwrap_err();
        assert_eq!(e.url(), format!("file://{dir}//jobs/nothing"));
        let _ = std::fs::remove_dir_all(&dir);

        let file = std::env::temp_dir().join(format!("bucket-lease-config-{}", std::process::id()));
        std::fs::write(&file, b"not a directory").unwrap();
        let url = format!("file://{}//p", file.to_str().unwrap());
        let (_, text) = refused_open(&url);
        assert!(
            text.starts_with("opening the store: OPEN file://"),
            "{text}"
        );
        assert!(text.contains("is not a directory"), "{text}");
        let _ = std::fs::remove_file(&file);
    }

    /// Two spellings of one path (`/t//jobs/nightly`, `/t/jobs//nightly`,
    /// `/t/jobs/nightly`) would be two leases, each with its own lock and
    /// record: whichever opens second is refused, naming the spelling the
    /// first one uses, in both orders.
    #[cfg(feature = "fs")]
    #[test]
    fn a_bucket_directory_never_nests_another() {
        let top = scratch("nest");
        std::fs::create_dir_all(top.join("jobs/nightly")).unwrap();
        let t = top.display().to_string();
        // Opened beside a bucket that nests it or sits in it: refused.
        let refused = |url: &str, within: &str| {
            let (_, text) = refused_open(url);
            assert!(text.contains(within), "{url}: {text}");
        };
        // The outer directory first: the inner spellings are refused.
        open_with_env(&format!("file://{t}//jobs/nightly"), |_| None).unwrap();
        refused(
            &format!("file://{t}/jobs//nightly"),
            &format!("file://{t}//jobs"),
        );
        refused(
            &format!("file://{t}/jobs/nightly"),
            &format!("file://{t}//jobs/nightly"),
        );
        // The outer one again, and a sibling of the inner, still open.
        open_with_env(&format!("file://{t}//jobs/nightly"), |_| None).unwrap();
        std::fs::remove_dir_all(top.join(".bucket-lease")).unwrap();
        std::fs::remove_dir(top.join(".bucket-lease.lock")).unwrap();
        // The inner directory first: the outer spelling is refused.
        open_with_env(&format!("file://{t}/jobs/nightly"), |_| None).unwrap();
        refused(
            &format!("file://{t}//jobs/nightly"),
            &format!("file://{t}/jobs/nightly"),
        );
        // The refused claims were taken back: the inner one opens again.
        assert!(!top.join(".bucket-lease").exists());
        assert!(!top.join(".bucket-lease.lock").exists());
        open_with_env(&format!("file://{t}/jobs/nightly"), |_| None).unwrap();
        let _ = std::fs::remove_dir_all(&top);
    }

    /// A directory that does not exist is a missing bucket: nothing is
    /// made, and the error names the directory and how to make it.
    #[cfg(feature = "fs")]
    #[test]
    fn a_missing_directory_is_a_missing_bucket() {
        let dir = scratch("missing").join("jobs");
        let shown = dir.display().to_string();
        for url in [
            format!("file://{shown}"),
            format!("file://{shown}//nightly"),
        ] {
            let (open, text) = refused_open(&url);
            assert_eq!(open.code(), Some("NoSuchBucket"), "{text}");
            assert!(text.contains(&format!("mkdir -p {shown}")), "{text}");
            assert_eq!(
                text.matches(&format!("no directory {shown}")).count(),
                1,
                "{text}"
            );
            assert!(
                !dir.exists() && !dir.parent().unwrap().exists(),
                "{url}: made"
            );
        }
    }

    #[cfg(feature = "s3")]
    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[cfg(feature = "s3")]
    #[test]
    fn a_prefix_too_long_for_s3_keys_is_refused_naming_the_limit() {
        let env = env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        let longest = bucket_lease_core::record::max_prefix_bytes(S3_MAX_KEY_BYTES, true);
        assert_eq!(longest, 979);
        // Percent-encoded bytes count once decoded.
        let fits = format!("s3://b/{}%3F", "p".repeat(longest - 1));
        let (store, _) = open_with_env(&fits, &env).unwrap();
        assert_eq!(store.max_key_bytes(), Some(S3_MAX_KEY_BYTES));
        let over = format!("s3://b/{}", "p".repeat(longest + 1));
        let e = open_with_env(&over, &env).err().unwrap();
        assert!(matches!(e, ConfigError::Invalid { .. }), "{e}");
        let text = e.to_string();
        for needle in ["980 bytes", "1024 bytes", "at most 979 bytes", "probe"] {
            assert!(text.contains(needle), "{needle:?} missing from: {text}");
        }
        assert!(text.len() < 500, "the prefix is shortened: {text}");
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_needs_a_region_and_credentials_and_names_the_variables() {
        let e = open_with_env("s3://b/p", env_of(&[("AWS_EC2_METADATA_DISABLED", "true")]))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("AWS_ACCESS_KEY_ID is not set"),
            "{e}"
        );
        let e = open_with_env(
            "s3://b/p",
            env_of(&[
                ("AWS_ACCESS_KEY_ID", "AKID"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
            ]),
        )
        .err()
        .unwrap();
        assert_eq!(
            e.to_string(),
            "configuring the s3 store: region is not set; set AWS_REGION (or \
             AWS_DEFAULT_REGION, or region in the shared config profile)"
        );
        let e = open_with_env("s3://b/p", env_of(&[("AWS_ACCESS_KEY_ID", "AKID")]))
            .err()
            .unwrap();
        assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");

        let (store, prefix) = open_with_env(
            "s3://my-bucket/p/q",
            env_of(&[
                ("AWS_ACCESS_KEY_ID", "AKID"),
                ("AWS_SECRET_ACCESS_KEY", "very-secret"),
                ("AWS_SESSION_TOKEN", "token-secret"),
                ("AWS_DEFAULT_REGION", "eu-west-1"),
            ]),
        )
        .unwrap();
        assert_eq!(prefix, "p/q");
        let debug = format!("{store:?}");
        assert!(
            debug.contains("https://my-bucket.s3.eu-west-1.amazonaws.com"),
            "{debug}"
        );
        assert!(debug.contains("AKID"), "{debug}");
        assert!(!debug.contains("very-secret") && !debug.contains("token-secret"));

        let builder = http_builder(
            &StoreUrl::parse("s3://my-bucket/p").unwrap(),
            &env_of(&[
                ("AWS_ACCESS_KEY_ID", "AKID"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
                ("AWS_REGION", "us-west-2"),
                ("AWS_DEFAULT_REGION", "eu-west-1"),
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ]),
        )
        .unwrap();
        let store = builder.build().unwrap();
        // An IP endpoint cannot carry a bucket label: path-style.
        assert_eq!(store.base_url(), "http://127.0.0.1:9000/my-bucket");
        assert!(format!("{store:?}").contains("us-west-2"));
    }

    /// The store `url` opens with test credentials, no home directory, no
    /// instance metadata, and the variables `extra` (the first of a name
    /// wins), or the error it is refused with, as text.
    #[cfg(http)]
    fn built(url: &str, extra: &[(&str, &str)]) -> Result<crate::HttpStore, String> {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKID".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("s".to_string()),
            "AWS_EC2_METADATA_DISABLED" => Some("true".to_string()),
            "HOME" => Some("/nonexistent-bucket-lease-home".to_string()),
            n => extra.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()),
        };
        let url = StoreUrl::parse(url).unwrap();
        http_builder(&url, &env)
            .and_then(|b| b.build())
            .map_err(|e| e.to_string())
    }

    /// The base URL of the store `url` opens as [`built`] opens it.
    #[cfg(feature = "s3")]
    fn s3_base_url(url: &str, extra: &[(&str, &str)]) -> Result<String, String> {
        built(url, extra).map(|store| store.base_url().to_string())
    }

    /// The addressing rule through the environment and a profile's `s3`
    /// section: path-style for a custom endpoint, virtual-hosted for AWS's,
    /// and `BUCKET_LEASE_ADDRESSING_STYLE` (over the profile's
    /// `addressing_style`) forcing either.
    #[cfg(feature = "s3")]
    #[test]
    fn addressing_follows_the_endpoint_unless_a_setting_forces_it() {
        let base = |extra: &[(&str, &str)]| {
            let mut all = vec![("AWS_REGION", "eu-west-1")];
            all.extend_from_slice(extra);
            s3_base_url("s3://my-bucket/p", &all)
        };
        assert_eq!(
            base(&[]).unwrap(),
            "https://my-bucket.s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            base(&[("AWS_ENDPOINT_URL", "http://localhost:4566")]).unwrap(),
            "http://localhost:4566/my-bucket"
        );
        assert_eq!(
            base(&[("AWS_ENDPOINT_URL_S3", "http://minio:9000")]).unwrap(),
            "http://minio:9000/my-bucket"
        );
        assert_eq!(
            base(&[
                ("AWS_ENDPOINT_URL", "http://localhost:4566"),
                ("BUCKET_LEASE_ADDRESSING_STYLE", "virtual"),
            ])
            .unwrap(),
            "http://my-bucket.localhost:4566"
        );
        assert_eq!(
            base(&[("BUCKET_LEASE_ADDRESSING_STYLE", "path")]).unwrap(),
            "https://s3.eu-west-1.amazonaws.com/my-bucket"
        );
        assert_eq!(
            base(&[("BUCKET_LEASE_ADDRESSING_STYLE", "auto")]).unwrap(),
            "https://my-bucket.s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            base(&[("BUCKET_LEASE_ADDRESSING_STYLE", "sideways")]).unwrap_err(),
            "configuring the s3 store: \"sideways\" is not an addressing style \
             (BUCKET_LEASE_ADDRESSING_STYLE); set it to path, virtual or auto"
        );

        // A profile's `s3` section, which the environment variable overrides.
        let dir = std::env::temp_dir().join(format!(
            "bucket-lease-addressing-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config");
        std::fs::write(
            &config,
            "[default]\nendpoint_url = http://ceph.internal:7480\ns3 =\n  addressing_style = virtual\n\
             [profile other]\ns3 =\n    addressing_style = path\n",
        )
        .unwrap();
        let config = config.to_str().unwrap().to_string();
        let missing = dir.join("credentials").to_str().unwrap().to_string();
        let files = [
            ("AWS_CONFIG_FILE", config.as_str()),
            ("AWS_SHARED_CREDENTIALS_FILE", missing.as_str()),
        ];
        assert_eq!(base(&files).unwrap(), "http://my-bucket.ceph.internal:7480");
        let mut forced = files.to_vec();
        forced.push(("BUCKET_LEASE_ADDRESSING_STYLE", "path"));
        assert_eq!(
            base(&forced).unwrap(),
            "http://ceph.internal:7480/my-bucket"
        );
        let mut other = files.to_vec();
        other.push(("AWS_PROFILE", "other"));
        assert_eq!(
            base(&other).unwrap(),
            "https://s3.eu-west-1.amazonaws.com/my-bucket"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The endpoint of each standard partition, and the FIPS and
    /// dual-stack variants asked for in the environment or the profile.
    #[cfg(feature = "s3")]
    #[test]
    fn regions_reach_their_partitions_endpoints_and_variants() {
        let base = |extra: &[(&str, &str)]| s3_base_url("s3://bkt/p", extra);
        for (region, fips, dualstack, url) in [
            (
                "eu-west-1",
                "",
                "",
                "https://bkt.s3.eu-west-1.amazonaws.com",
            ),
            (
                "us-east-1",
                "true",
                "",
                "https://bkt.s3-fips.us-east-1.amazonaws.com",
            ),
            (
                "us-east-2",
                "",
                "true",
                "https://bkt.s3.dualstack.us-east-2.amazonaws.com",
            ),
            (
                "us-west-2",
                "TRUE",
                "true",
                "https://bkt.s3-fips.dualstack.us-west-2.amazonaws.com",
            ),
            (
                "eu-west-1",
                "false",
                "false",
                "https://bkt.s3.eu-west-1.amazonaws.com",
            ),
            (
                "cn-north-1",
                "",
                "",
                "https://bkt.s3.cn-north-1.amazonaws.com.cn",
            ),
            (
                "cn-northwest-1",
                "",
                "true",
                "https://bkt.s3.dualstack.cn-northwest-1.amazonaws.com.cn",
            ),
            (
                "us-gov-west-1",
                "",
                "",
                "https://bkt.s3.us-gov-west-1.amazonaws.com",
            ),
            (
                "us-gov-east-1",
                "true",
                "",
                "https://bkt.s3-fips.us-gov-east-1.amazonaws.com",
            ),
            (
                "us-gov-west-1",
                "true",
                "true",
                "https://bkt.s3-fips.dualstack.us-gov-west-1.amazonaws.com",
            ),
        ] {
            let got = base(&[
                ("AWS_REGION", region),
                ("AWS_USE_FIPS_ENDPOINT", fips),
                ("AWS_USE_DUALSTACK_ENDPOINT", dualstack),
            ]);
            assert_eq!(
                got.as_deref(),
                Ok(url),
                "{region} fips={fips} dualstack={dualstack}"
            );
        }
        // China has no FIPS endpoints; a custom endpoint has no variants;
        // a value that is not a boolean is named.
        assert_eq!(
            base(&[
                ("AWS_REGION", "cn-north-1"),
                ("AWS_USE_FIPS_ENDPOINT", "true")
            ])
            .unwrap_err(),
            "configuring the s3 store: \"cn-north-1\" has no FIPS endpoint (the aws-cn \
             partition has none); unset AWS_USE_FIPS_ENDPOINT (or use_fips_endpoint in the \
             profile)"
        );
        assert_eq!(
            base(&[
                ("AWS_REGION", "eu-west-1"),
                ("AWS_ENDPOINT_URL", "http://localhost:4566"),
                ("AWS_USE_DUALSTACK_ENDPOINT", "true"),
            ])
            .unwrap_err(),
            "configuring the s3 store: \"http://localhost:4566\" is an explicit endpoint, \
             which has no FIPS or dual-stack variant; unset AWS_USE_FIPS_ENDPOINT and \
             AWS_USE_DUALSTACK_ENDPOINT (or use_fips_endpoint and use_dualstack_endpoint in \
             the profile), or name the variant's endpoint in AWS_ENDPOINT_URL"
        );
        assert_eq!(
            base(&[
                ("AWS_REGION", "eu-west-1"),
                ("AWS_USE_FIPS_ENDPOINT", "yes")
            ])
            .unwrap_err(),
            "configuring the s3 store: \"yes\" is not true or false (AWS_USE_FIPS_ENDPOINT); \
             set it to true or false"
        );
    }

    /// Endpoints carrying `user:password@` in each form a configuration
    /// can meet: with and without a scheme, a secret holding a `/` (as AWS
    /// secrets do), and alongside each other reason to refuse the endpoint.
    #[cfg(http)]
    pub(crate) const ENDPOINTS_WITH_USER_INFO: [&str; 7] = [
        "http://AKID:secret@127.0.0.1:9000",
        "AKID:secret@127.0.0.1:9000",
        "http://AKID:secret/with+slash@127.0.0.1:9000",
        "https://AKID:secret@minio.lan:9000/base?x=1",
        "ftp://AKID:secret@127.0.0.1:9000",
        "http://AKID:secret@127.0.0.1:notaport",
        "http://AKID:secret@",
    ];

    /// Panics when `text` shows any part of the user information above
    /// (the `secret_access_key` field name of `Credentials`' `Debug` aside).
    #[cfg(http)]
    pub(crate) fn assert_no_user_information(text: &str) {
        let scrubbed = text.replace("secret_access_key", "");
        assert!(
            !scrubbed.contains("AKID") && !scrubbed.contains("secret"),
            "user information shown: {text}"
        );
    }

    /// A single-slash URL whose path is missing names both readings in
    /// one error: the path as the bucket (made with mkdir -p), and the
    /// deepest directory that exists as the bucket, the rest its prefix.
    #[cfg(feature = "fs")]
    #[test]
    fn a_single_slash_url_to_a_missing_path_names_both_readings() {
        let top = scratch("readings");
        std::fs::create_dir_all(&top).unwrap();
        let t = top.display().to_string();
        let (_, text) = refused_open(&format!("file://{t}/nightly/parts"));
        assert!(
            text.contains(&format!("write file://{t}//nightly/parts;")),
            "{text}"
        );
        assert!(
            text.contains(&format!("mkdir -p {t}/nightly/parts")),
            "{text}"
        );
        assert!(!top.join("nightly").exists(), "made");
        // The `//` reading it names opens.
        open_with_env(&format!("file://{t}//nightly/parts"), |_| None).unwrap();
        let _ = std::fs::remove_dir_all(&top);
    }

    #[cfg(http)]
    #[test]
    // The pushes are each behind a profile's feature.
    #[allow(clippy::vec_init_then_push)]
    fn no_configuration_path_shows_user_information_from_an_endpoint() {
        let mut urls = Vec::new();
        #[cfg(feature = "s3")]
        urls.push("s3://bkt/p");
        #[cfg(feature = "r2")]
        urls.push("r2://bkt/p");
        #[cfg(feature = "minio")]
        urls.push("minio://bkt/p");
        for url in urls {
            for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] {
                for endpoint in ENDPOINTS_WITH_USER_INFO {
                    let env = |name: &str| match name {
                        "AWS_ACCESS_KEY_ID" => Some("id-from-env".to_string()),
                        "AWS_SECRET_ACCESS_KEY" => Some("key-from-env".to_string()),
                        "AWS_REGION" => Some("us-east-1".to_string()),
                        n if n == variable => Some(endpoint.to_string()),
                        _ => None,
                    };
                    let e = open_with_env(url, env).expect_err("refused");
                    let text = format!("{e} {e:?} {e:#?}");
                    assert_no_user_information(&text);
                    assert!(
                        text.contains("configuring the"),
                        "{url} {variable}={endpoint}: {text}"
                    );
                    let parsed = StoreUrl::parse(url).unwrap();
                    let builder = http_builder(&parsed, &env).unwrap();
                    assert_no_user_information(&format!("{builder:?} {builder:#?}"));
                }
                // The one saying why names where the credentials go instead.
                let env = |name: &str| match name {
                    "AWS_ACCESS_KEY_ID" => Some("id-from-env".to_string()),
                    "AWS_SECRET_ACCESS_KEY" => Some("key-from-env".to_string()),
                    "AWS_REGION" => Some("us-east-1".to_string()),
                    n if n == variable => Some(ENDPOINTS_WITH_USER_INFO[0].to_string()),
                    _ => None,
                };
                let e = open_with_env(url, env).expect_err("refused").to_string();
                assert!(
                    e.contains("user information")
                        && e.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
                    "{e}"
                );
            }
        }
        // R2 builds its endpoint from the account id and the jurisdiction.
        #[cfg(feature = "r2")]
        for (account, jurisdiction) in [("AKID:secret@evil", None), ("acct", Some("AKID:secret@x"))]
        {
            let env = |name: &str| match name {
                "AWS_ACCESS_KEY_ID" => Some("id-from-env".to_string()),
                "AWS_SECRET_ACCESS_KEY" => Some("key-from-env".to_string()),
                "R2_ACCOUNT_ID" => Some(account.to_string()),
                "R2_JURISDICTION" => jurisdiction.map(str::to_string),
                _ => None,
            };
            let e = open_with_env("r2://bkt/p", env).expect_err("refused");
            assert_no_user_information(&format!("{e} {e:?}"));
        }
        // User information in the store URL itself.
        let e = StoreUrl::parse("s3://AKID:secret@bkt/p").unwrap_err();
        assert_no_user_information(&format!("{e} {e:?}"));
    }

    #[cfg(feature = "r2")]
    #[test]
    fn r2_endpoint_comes_from_the_account_and_jurisdiction() {
        let e = built("r2://bkt/p", &[]).unwrap_err();
        assert!(e.contains("R2_ACCOUNT_ID is not set"), "{e}");
        let store = built(
            "r2://bkt/p",
            &[
                ("AWS_REGION", "us-east-1"),
                ("R2_ACCOUNT_ID", "acct"),
                ("R2_JURISDICTION", "eu"),
            ],
        )
        .unwrap();
        assert_eq!(
            store.base_url(),
            "https://acct.eu.r2.cloudflarestorage.com/bkt"
        );
        assert!(format!("{store:?}").contains("region: \"auto\""));
    }

    /// R2's two switches, settable where the rest of the configuration
    /// lives.
    #[cfg(feature = "r2")]
    #[test]
    fn conditional_deletes_and_unquoted_etags_are_set_from_the_environment() {
        let debug = |extra: &[(&str, &str)]| {
            let mut all = vec![("R2_ACCOUNT_ID", "acct")];
            all.extend_from_slice(extra);
            built("r2://bkt/p", &all).map(|store| format!("{store:?}"))
        };
        let plain = debug(&[]).unwrap();
        assert!(plain.contains("delete_conditions: Off"), "{plain}");
        assert!(plain.contains("unquoted_etags: false"), "{plain}");
        let set = debug(&[
            ("BUCKET_LEASE_CONDITIONAL_DELETE", "true"),
            ("BUCKET_LEASE_UNQUOTED_ETAGS", "on"),
        ])
        .unwrap();
        assert!(set.contains("delete_conditions: Unchecked"), "{set}");
        assert!(set.contains("unquoted_etags: true"), "{set}");
        assert_eq!(
            debug(&[("BUCKET_LEASE_UNQUOTED_ETAGS", "maybe")]).unwrap_err(),
            "configuring the r2 store: \"maybe\" is not on or off \
             (BUCKET_LEASE_UNQUOTED_ETAGS); set it to on or off (true or false)"
        );
    }

    #[cfg(all(feature = "r2", feature = "s3"))]
    #[test]
    fn the_write_interval_is_r2s_second_unless_the_environment_sets_it() {
        let debug = |url: &str, interval: Option<&str>| {
            let mut all = vec![("AWS_REGION", "us-east-1"), ("R2_ACCOUNT_ID", "acct")];
            all.extend(interval.map(|text| ("BUCKET_LEASE_WRITE_INTERVAL", text)));
            built(url, &all).map(|store| format!("{store:?}"))
        };
        let shown = |text: String| {
            let at = text.find("write_interval: ").expect("shown") + "write_interval: ".len();
            text[at..].split([',', ' ']).next().unwrap().to_string()
        };
        assert_eq!(shown(debug("r2://b/p", None).unwrap()), "Some(1s)");
        assert_eq!(shown(debug("s3://b/p", None).unwrap()), "None");
        assert_eq!(shown(debug("r2://b/p", Some("0")).unwrap()), "None");
        assert_eq!(shown(debug("r2://b/p", Some("off")).unwrap()), "None");
        assert_eq!(
            shown(debug("s3://b/p", Some("1500ms")).unwrap()),
            "Some(1.5s)"
        );
        assert_eq!(shown(debug("s3://b/p", Some("2s")).unwrap()), "Some(2s)");
        let bad = debug("s3://b/p", Some("soon")).unwrap_err();
        assert!(bad.contains("BUCKET_LEASE_WRITE_INTERVAL"), "{bad}");
    }

    /// What the two parsers answered before they became one, by text:
    /// the command line's, then `BUCKET_LEASE_WRITE_INTERVAL`'s.
    const RECORDED: &[(&str, Option<u128>, Option<u128>)] =
        include!("config/recorded_durations.txt");

    /// Texts in the forms only the write interval read that it refused
    /// for its range alone (over an hour), as the one parser reads them:
    /// the range is each reader's (the write interval still refuses them).
    const OVER_AN_HOUR: &[(&str, u128)] = &[
        ("+3601", 3_601_000_000_000),
        (" 7200 ", 7_200_000_000_000),
        ("+4294967295ms", 4_294_967_295_000_000),
    ];

    /// The one parser reads every text either parser read, as it read it
    /// (they agree where both did), and refuses what both refused but
    /// for the write interval's range; a refusal says what to write.
    #[test]
    fn one_parser_reads_what_either_read_as_it_read_it() {
        for (text, command_line, interval) in RECORDED {
            let over_an_hour = OVER_AN_HOUR
                .iter()
                .find(|(t, _)| t == text)
                .map(|(_, n)| *n);
            if let (Some(a), Some(b)) = (command_line, interval) {
                assert_eq!(a, b, "{text:?}: the two parsers agree where both read it");
            }
            let expected = command_line.or(*interval).or(over_an_hour);
            let got = parse_duration_text(text);
            assert_eq!(got.map(|d| d.as_nanos()).ok(), expected, "{text:?}");
            if let Err(e) = got {
                let message = e.to_string();
                assert!(
                    message.contains("90s, 1m, 0.5h") || message.contains("write a shorter"),
                    "{text:?}: {message}"
                );
            }
        }
        for (text, _) in OVER_AN_HOUR {
            assert!(RECORDED
                .iter()
                .any(|(t, a, b)| t == text && a.is_none() && b.is_none()));
        }
        assert_eq!(
            parse_duration_text("1000000001"),
            Err(DurationError::TooLong)
        );
        assert_eq!(
            parse_duration_text("99999999999999999999999999999999999999999999d"),
            Err(DurationError::TooLong)
        );
        assert_eq!(parse_duration_text("-1"), Err(DurationError::NotADuration));
        assert_eq!(parse_duration_text(""), Err(DurationError::NotADuration));
    }

    /// `BUCKET_LEASE_WRITE_INTERVAL` reads every text it read, as it read
    /// it, and now the command line's forms too, up to an hour; a refusal
    /// names the variable, why and what to set.
    #[cfg(http)]
    #[test]
    fn the_write_interval_reads_what_it_read_and_the_command_lines_forms() {
        let hour = 3_600 * NANOS_PER_SECOND;
        for (text, command_line, interval) in RECORDED {
            let expected = interval.or(command_line.filter(|n| *n <= hour));
            let got = write_interval("s3", text);
            assert_eq!(
                got.as_ref().ok().map(Duration::as_nanos),
                expected,
                "{text:?}"
            );
            if let Err(e) = got {
                let message = e.to_string();
                assert!(message.contains("BUCKET_LEASE_WRITE_INTERVAL"), "{message}");
                assert!(message.contains("at most an hour"), "{message}");
                // Read but too long (a valid one longer than 10^9 s too).
                let over = matches!(
                    parse_duration_text(text),
                    Ok(_) | Err(DurationError::TooLong)
                );
                let why = if over {
                    "longer than an hour"
                } else {
                    "is not a duration"
                };
                assert!(message.contains(why), "{text:?}: {message}");
            }
        }
    }

    #[cfg(feature = "minio")]
    #[test]
    fn minio_needs_an_endpoint() {
        let e = built("minio://bkt/p", &[]).unwrap_err();
        assert!(e.contains("AWS_ENDPOINT_URL is not set"), "{e}");
        let store = built(
            "minio://bkt/p",
            &[("AWS_ENDPOINT_URL_S3", "http://minio.lan:9000/")],
        )
        .unwrap();
        assert_eq!(store.base_url(), "http://minio.lan:9000/bkt");
    }
}
