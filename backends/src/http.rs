//! The one signed-HTTP client behind every S3-compatible profile.
//!
//! An [`HttpStore`] holds one keep-alive `ureq` agent, so a renewal on a
//! warm connection is one request on an open socket. Every request is
//! signed with SigV4, carries a timeout cut to the caller's deadline, reads
//! at most [`HttpStoreBuilder::max_body`] bytes of answer (an object over
//! the cap is [`StoreErrorKind::TooLarge`], carrying its version, and its
//! body is not read), and has its status mapped to a [`StoreErrorKind`] by
//! meaning (see [`HttpStore`]).
//!
//! What a request costs: no thread (a host name is looked up on a helper
//! thread only the first time and, in the background, once a minute; see
//! `net`), and on a kept connection four system calls: a non-blocking
//! peek that checks the connection, one write, one `setsockopt` (quick
//! ACKs, on Linux), one read. Each connection
//! holds 16 KiB of buffers and is kept idle up to `MAX_IDLE_AGE` (over
//! the longest renewal interval), at most four of them (an acquire's
//! probe sends its four writes at once, each on its own connection).
//!
//! An endpoint never carries credentials: one with user information
//! (`user:password@`) is refused, and no error, `Debug` output or message
//! shows what was before its `@`. A proxy may carry them
//! ([`crate::Proxies`]); they are sent only in `Proxy-Authorization` and
//! shown as `***`.
//!
//! TLS trusts the built-in roots and, beside them, a CA bundle and the
//! system's store when configured ([`HttpStoreBuilder::ca_bundle`],
//! [`HttpStoreBuilder::system_trust`]); requests to an `http://` endpoint
//! go through its proxy in absolute form, to an `https://` one through a
//! `CONNECT` tunnel (`net::proxy`).

use crate::credentials::{CredentialsProvider, Source};
use crate::delete_check::{DeleteCheck, DeleteConditions};
use crate::net::proxy::{ProxyConnector, ProxyResolver};
use crate::net::tls::TlsConnector;
use crate::net::{self, not_sent_of, CachingResolver, Stage, TcpConnector};
use crate::settings::{redact_user_info, url_text, ConfigError, Named, Proxies, Proxy, Trust};
use crate::sign::{sign_request, Credentials, KeyCache};
use crate::spelling::{same_etag, Now, Spelling};
use crate::trace;
use crate::xml::ErrorBody;
use bucket_lease_core::clock::{jittered, transient_backoff, Clock, SystemClock};
use bucket_lease_core::multipart::{ObjectReader, UploadConditions, UploadedPart};
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::spacing::WriteSpacing;
use bucket_lease_core::store::{
    DeleteMode, Delivery, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use idle::IdleWatch;
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use ureq::http::{self, HeaderMap, HeaderName, HeaderValue, Method};
use ureq::unversioned::transport::Connector;

/// How long one call may take, retries included, when the caller gives no
/// earlier deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes read from one answer (an object or an error body).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// The input buffer of a connection: an answer's head must fit in it
/// ([`MAX_ANSWER_HEAD`]); a body goes through it in pieces of this size.
/// Allocated (and zeroed) once per connection; ureq's default is 128 KiB.
const INPUT_BUFFER: usize = 8 * 1024;

/// The largest answer head (status line and headers) read. S3 caps user
/// metadata at 2 KiB; a larger head is an error naming its size, not a
/// truncated answer.
const MAX_ANSWER_HEAD: usize = 6 * 1024;

/// The output buffer of a connection: a request's head must fit in it
/// (signed headers and metadata: 1 to 3 KiB); a body goes through it in
/// pieces. ureq's default is 128 KiB.
const OUTPUT_BUFFER: usize = 8 * 1024;

/// How long an idle connection is kept. The longest renewal interval is a
/// third of the longest TTL a lease takes (`MAX_SANE_TTL_S`, 3600 s):
/// 1200 s, and a keeper's pause before a retry is at most one interval. 1260 s
/// keeps the connection across the longest interval with a minute to spare
/// (ureq's default, 15 s, dropped it for any TTL over 45 s). A connection
/// the server closed meanwhile is found closed when taken from the pool,
/// and a new one is opened.
pub(crate) const MAX_IDLE_AGE: Duration =
    Duration::from_secs(bucket_lease_core::record::MAX_SANE_TTL_S / 3 + 60);

/// Idle connections kept: the acquire probe's four concurrent writes each
/// use one.
const MAX_IDLE_CONNECTIONS: usize = 4;

/// How a request names its bucket.
///
/// Unless one is asked for ([`HttpStoreBuilder::addressing`]), a profile's
/// virtual-hosted default applies only to AWS's own endpoints (the
/// region's, or an explicit one under `amazonaws.com` or
/// `amazonaws.com.cn`): any other endpoint given explicitly (LocalStack,
/// MinIO, Ceph, …) is addressed path-style, as botocore and object_store
/// do, since `bucket.localhost` or `bucket.minio` seldom resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Addressing {
    /// `https://endpoint/bucket/key`.
    Path,
    /// `https://bucket.endpoint/key`. Buckets that are not valid DNS labels
    /// (dots, capitals, underscores) and endpoints given as an IP address
    /// fall back to path-style, as the AWS SDKs do.
    VirtualHosted,
}

impl Addressing {
    /// A setting's value: `path`, `virtual` (or `virtual-hosted`), or
    /// `auto` (`None`: the rule above), as the AWS config key
    /// `addressing_style` takes them.
    ///
    /// # Errors
    ///
    /// The value, when it is none of those.
    pub fn parse_style(value: &str) -> Result<Option<Addressing>, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "path" => Ok(Some(Addressing::Path)),
            "virtual" | "virtual-hosted" | "virtual_hosted" => Ok(Some(Addressing::VirtualHosted)),
            "auto" | "" => Ok(None),
            _ => Err(value.to_string()),
        }
    }
}

/// The defaults that set one service apart from another. Each profile
/// module (`s3`, `r2`, `minio`) defines one; every value can be overridden
/// on the [`HttpStoreBuilder`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Profile {
    /// A short name for messages: `s3`, `r2`, `minio`.
    pub name: &'static str,
    /// How requests name the bucket.
    pub addressing: Addressing,
    /// The signing region when none is configured; `None` makes the region
    /// a required setting.
    pub region: Option<&'static str>,
    /// The endpoint for a region and variant when none is configured (an
    /// error saying why the region has no such variant); `None` makes the
    /// endpoint a required setting.
    pub endpoint_for_region: Option<EndpointForRegion>,
    /// Whether the service honours `If-Match` on DELETE. When `false`, a
    /// [`DeleteMode::IfVersion`] answers [`StoreErrorKind::NotImplemented`]
    /// without sending anything.
    pub conditional_delete: bool,
    /// Whether `If-Match` carries the ETag without its quotes (some services
    /// accept only that).
    pub unquoted_etags: bool,
    /// The shortest time the service allows between two writes of one key
    /// (R2: one second), which the store spaces its own writes by; `None`
    /// for no such limit. See [`Store::write_interval`].
    pub write_interval: Option<Duration>,
}

/// Which of a region's endpoints to use (`AWS_USE_FIPS_ENDPOINT`,
/// `AWS_USE_DUALSTACK_ENDPOINT`); both off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointVariant {
    /// The FIPS 140 endpoint.
    pub fips: bool,
    /// The dual-stack (IPv4 and IPv6) endpoint.
    pub dualstack: bool,
}

impl EndpointVariant {
    /// The variant with `fips` and `dualstack` as given.
    pub fn new(fips: bool, dualstack: bool) -> Self {
        EndpointVariant { fips, dualstack }
    }
}

/// A profile's endpoint for a region in a variant, or why there is none.
pub type EndpointForRegion = fn(&str, EndpointVariant) -> Result<String, String>;

/// Settings for an [`HttpStore`], starting from a [`Profile`]'s defaults.
///
/// ```
/// # mod bucket_lease { pub mod backends { pub use bucket_lease_backends::*; } }
/// # #[cfg(feature = "minio")] {
/// use bucket_lease::backends::{minio, Credentials};
/// let store = minio::builder()
///     .endpoint("http://127.0.0.1:9000")
///     .bucket("leases")
///     .credentials(Credentials::new("minioadmin", "minioadmin"))
///     .build()
///     .unwrap();
/// # }
/// ```
///
/// `Debug` shows the access key id but never the secret, the session token,
/// an endpoint's user information or a proxy's.
#[derive(Clone)]
pub struct HttpStoreBuilder {
    profile: Profile,
    endpoint: Option<String>,
    bucket: Option<String>,
    region: Option<String>,
    credentials: Option<Arc<CredentialsProvider>>,
    /// Asked for; `None` follows the rule of [`Addressing`].
    addressing: Option<Addressing>,
    variant: EndpointVariant,
    conditional_delete: bool,
    unquoted_etags: bool,
    /// The spelling was asked for: it is not learned from the service.
    etag_spelling_set: bool,
    timeout: Duration,
    max_body: usize,
    write_interval: Option<Duration>,
    connect_to: Option<SocketAddr>,
    /// The host name lookup (tests inject one; never real DNS in tests).
    lookup: Option<crate::net::Lookup>,
    /// The roots trusted beside the built-in ones.
    trust: Trust,
    /// `None`: the process environment's, read by `build`.
    proxies: Option<Proxies>,
}

impl fmt::Debug for HttpStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpStoreBuilder")
            .field("profile", &self.profile)
            .field("endpoint", &self.endpoint.as_deref().map(redact_user_info))
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .field("addressing", &self.addressing)
            .field("variant", &self.variant)
            .field("conditional_delete", &self.conditional_delete)
            .field("unquoted_etags", &self.unquoted_etags)
            .field("timeout", &self.timeout)
            .field("max_body", &self.max_body)
            .field("write_interval", &self.write_interval)
            .field("connect_to", &self.connect_to)
            .field("trust", &self.trust)
            .field("proxies", &self.proxies)
            .finish()
    }
}

impl HttpStoreBuilder {
    /// A builder holding `profile`'s defaults.
    pub fn new(profile: Profile) -> Self {
        HttpStoreBuilder {
            profile,
            endpoint: None,
            bucket: None,
            region: None,
            credentials: None,
            addressing: None,
            variant: EndpointVariant::default(),
            conditional_delete: profile.conditional_delete,
            unquoted_etags: profile.unquoted_etags,
            etag_spelling_set: false,
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            write_interval: profile.write_interval,
            connect_to: None,
            lookup: None,
            trust: Trust::default(),
            proxies: None,
        }
    }

    /// The shortest time the service allows between two writes of one key,
    /// which the store then spaces its own writes of each key by (a write
    /// waits its turn within its deadline) and the lease plans for (see
    /// [`Store::write_interval`]). The `r2` profile's default is one
    /// second, R2's documented limit; the others have none. `Duration::ZERO`
    /// sets none. `BUCKET_LEASE_WRITE_INTERVAL` sets it from the
    /// environment (`1s`, `1500ms`, `0`).
    pub fn write_interval(mut self, interval: Duration) -> Self {
        self.write_interval = (!interval.is_zero()).then_some(interval);
        self
    }

    /// The service's URL: `https://host[:port][/base]`, or `host[:port]`
    /// for HTTPS. Plain HTTP only when it says `http://`. User information
    /// (`user:password@`) is refused by [`build`](Self::build): credentials
    /// go in [`credentials`](Self::credentials).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The bucket (required).
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = Some(bucket.into());
        self
    }

    /// The signing region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The credentials to sign with, which never change (this or
    /// [`credentials_provider`](Self::credentials_provider) is required).
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(Arc::new(CredentialsProvider::fixed(credentials)));
        self
    }

    /// Where to get the credentials for each request, such as the chain
    /// ([`crate::credentials::chain`]): temporary credentials are refreshed
    /// before they expire, and a `403` with `ExpiredToken` or
    /// `InvalidToken` is answered by one refresh and one retry within the
    /// request's deadline.
    pub fn credentials_provider(mut self, provider: CredentialsProvider) -> Self {
        self.credentials = Some(Arc::new(provider));
        self
    }

    /// Path-style or virtual-hosted requests, whatever the endpoint (see
    /// [`Addressing`] for the rule when this is not called).
    pub fn addressing(mut self, addressing: Addressing) -> Self {
        self.addressing = Some(addressing);
        self
    }

    /// [`addressing`](Self::addressing) when `Some`; `None` restores the
    /// rule of [`Addressing`].
    pub fn addressing_style(mut self, addressing: Option<Addressing>) -> Self {
        self.addressing = addressing;
        self
    }

    /// Use the region's FIPS or dual-stack endpoint (for a profile that
    /// makes the endpoint from the region; an explicit endpoint has no
    /// variant, and asking for one with it fails the build).
    pub fn endpoint_variant(mut self, variant: EndpointVariant) -> Self {
        self.variant = variant;
        self
    }

    /// Whether to send `If-Match` on DELETE (see
    /// [`Profile::conditional_delete`]).
    pub fn conditional_delete(mut self, on: bool) -> Self {
        self.conditional_delete = on;
        self
    }

    /// Whether to strip the quotes from ETags sent in `If-Match`, for good.
    /// Unless this is called, the store learns the spelling from the
    /// service: see [`HttpStore`].
    pub fn unquoted_etags(mut self, on: bool) -> Self {
        self.unquoted_etags = on;
        self.etag_spelling_set = true;
        self
    }

    /// The longest one call may take (default [`DEFAULT_TIMEOUT`]): a call
    /// with no deadline of its own ends by this long after it started, its
    /// retries and any wait for credentials included; a caller's earlier
    /// deadline cuts it further.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most bytes read from one answer (default [`DEFAULT_MAX_BODY`]).
    /// A larger object is a [`StoreErrorKind::TooLarge`] error carrying the
    /// object's version, never an unbounded allocation: its body is not read
    /// when the answer declares its length, and read no further than one
    /// byte past the cap when it does not.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Connect to `addr` whatever the endpoint's host name resolves to,
    /// keeping the host name in the request and its signature (as curl's
    /// `--connect-to`). For pinned addresses and for testing
    /// virtual-hosted addressing against a local server.
    pub fn connect_to(mut self, addr: SocketAddr) -> Self {
        self.connect_to = Some(addr);
        self
    }

    /// Trust the certificates of the PEM file at `path` as roots, beside
    /// the built-in ones (Mozilla's, from webpki-roots), as `AWS_CA_BUNDLE`
    /// does. [`build`](Self::build) reads it for an `https://` endpoint: a
    /// file that cannot be read, holds no certificate or one that cannot be
    /// a root fails the build, naming the file.
    pub fn ca_bundle(self, path: impl Into<PathBuf>) -> Self {
        self.ca_bundle_named(path, "ca_bundle()")
    }

    /// [`ca_bundle`](Self::ca_bundle), named in messages by `setting`.
    pub(crate) fn ca_bundle_named(
        mut self,
        path: impl Into<PathBuf>,
        setting: &'static str,
    ) -> Self {
        self.trust.bundle = Some(Named {
            value: path.into(),
            setting,
        });
        self
    }

    /// Trust the system's store too, beside the built-in roots (and a
    /// [`ca_bundle`](Self::ca_bundle)): the PEM file `SSL_CERT_FILE` names
    /// when it is set, else the first of the distributions' usual files
    /// (`/etc/ssl/certs/ca-certificates.crt`,
    /// `/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem`, …). None found
    /// fails [`build`](Self::build) for an `https://` endpoint.
    pub fn system_trust(self, on: bool) -> Self {
        let file = std::env::var_os("SSL_CERT_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        self.system_trust_named(on.then_some("system_trust()"), file)
    }

    /// The system's store trusted as `setting` asks (`None`: not), found
    /// in `file` when given.
    pub(crate) fn system_trust_named(
        mut self,
        setting: Option<&'static str>,
        file: Option<PathBuf>,
    ) -> Self {
        self.trust.system = setting;
        self.trust.system_file = file;
        self
    }

    /// The proxies requests go through (see [`Proxies`]): by default
    /// [`Proxies::from_env`], the process's `HTTP_PROXY`, `HTTPS_PROXY`
    /// and `NO_PROXY`, read by [`build`](Self::build). A store with
    /// [`connect_to`](Self::connect_to) uses no proxy.
    pub fn proxies(mut self, proxies: Proxies) -> Self {
        self.proxies = Some(proxies);
        self
    }

    /// Look host names up with `lookup` instead of the system's resolver.
    #[cfg(test)]
    pub(crate) fn lookup(mut self, lookup: crate::net::Lookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// The store.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Missing`] naming the setting when the bucket, the
    /// credentials, the region or the endpoint (where the profile has no
    /// default) is not set; [`ConfigError::Invalid`] when the endpoint or
    /// the bucket cannot be used, in particular when the endpoint carries
    /// user information (shown redacted, as `http://***@host`), or when
    /// the proxy for the endpoint's scheme cannot be used; for an
    /// `https://` endpoint, [`ConfigError::Invalid`] naming the file and
    /// the setting when a [`ca_bundle`](Self::ca_bundle) (or the system's
    /// store) cannot be read or holds no certificate.
    pub fn build(self) -> Result<HttpStore, ConfigError> {
        let what = self.profile.name;
        let bucket = self.bucket.ok_or(ConfigError::Missing {
            what,
            setting: "bucket",
            fix: "give it in the URL (s3://BUCKET/prefix) or call bucket()",
        })?;
        if bucket.is_empty() || bucket.contains('/') {
            return Err(ConfigError::Invalid {
                what,
                value: bucket,
                why: "is not a bucket name".into(),
                fix: "name a bucket without slashes",
            });
        }
        let credentials = self.credentials.ok_or(ConfigError::Missing {
            what,
            setting: "credentials",
            fix: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or call credentials()",
        })?;
        let region = match (self.region, self.profile.region) {
            (Some(region), _) => region,
            (None, Some(default)) => default.to_string(),
            (None, None) => {
                return Err(ConfigError::Missing {
                    what,
                    setting: "region",
                    fix: "set AWS_REGION (or AWS_DEFAULT_REGION), or call region()",
                })
            }
        };
        let custom_endpoint = self.endpoint.is_some();
        let variant = self.variant;
        let endpoint = match (self.endpoint, self.profile.endpoint_for_region) {
            (Some(endpoint), Some(_)) if variant != EndpointVariant::default() => {
                return Err(ConfigError::Invalid {
                    what,
                    value: redact_user_info(&endpoint),
                    why: "is an explicit endpoint, which has no FIPS or dual-stack variant".into(),
                    fix: "unset AWS_USE_FIPS_ENDPOINT and AWS_USE_DUALSTACK_ENDPOINT (or \
                          use_fips_endpoint and use_dualstack_endpoint in the profile), or name \
                          the variant's endpoint in AWS_ENDPOINT_URL",
                });
            }
            (Some(endpoint), _) => endpoint,
            (None, Some(for_region)) => {
                for_region(&region, variant).map_err(|why| ConfigError::Invalid {
                    what,
                    value: region.clone(),
                    why,
                    fix: if variant.fips {
                        "unset AWS_USE_FIPS_ENDPOINT (or use_fips_endpoint in the profile)"
                    } else {
                        "unset AWS_USE_DUALSTACK_ENDPOINT (or use_dualstack_endpoint in the \
                         profile)"
                    },
                })?
            }
            (None, None) => {
                return Err(ConfigError::Missing {
                    what,
                    setting: "endpoint",
                    fix: "set AWS_ENDPOINT_URL, or call endpoint()",
                })
            }
        };
        // Anything before an `@` may be a secret, wherever the `@` is (a
        // secret may hold a `/`): refuse it, and never echo it.
        if endpoint.contains('@') {
            return Err(ConfigError::Invalid {
                what,
                value: redact_user_info(&endpoint),
                why: "carries user information (user:password@), which is never sent nor shown"
                    .into(),
                fix: "put the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or \
                      call credentials()) and give the endpoint as https://host[:port][/path]",
            });
        }
        let endpoint = Endpoint::parse(&endpoint).map_err(|why| ConfigError::Invalid {
            what,
            value: redact_user_info(&endpoint),
            why,
            fix: "give the endpoint as https://host[:port][/path] (http:// for plain HTTP)",
        })?;
        let addressing = self
            .addressing
            .unwrap_or(if custom_endpoint && !endpoint.host_is_aws() {
                Addressing::Path
            } else {
                self.profile.addressing
            });
        let virtual_hosted = addressing == Addressing::VirtualHosted
            && is_dns_label(&bucket)
            && !endpoint.host_is_ip();
        // `host:port` the requests go to, for messages.
        let port = endpoint.authority[endpoint.host().len()..]
            .strip_prefix(':')
            .unwrap_or(if endpoint.scheme == "https" {
                "443"
            } else {
                "80"
            });
        let target = if virtual_hosted {
            format!("{bucket}.{}:{port}", endpoint.host())
        } else {
            format!("{}:{port}", endpoint.host())
        };
        let base_url = if virtual_hosted {
            format!(
                "{}://{}.{}{}",
                endpoint.scheme, bucket, endpoint.authority, endpoint.base_path
            )
        } else {
            format!(
                "{}://{}{}/{}",
                endpoint.scheme,
                endpoint.authority,
                endpoint.base_path,
                encode_key(&bucket)
            )
        };

        // The proxy for the endpoint's scheme, unless NO_PROXY lists the
        // host the requests name.
        let host = if virtual_hosted {
            format!("{bucket}.{}", endpoint.host())
        } else {
            endpoint.host().to_string()
        };
        let proxy = match (self.connect_to, self.proxies) {
            (Some(_), _) => None,
            (None, Some(proxies)) => proxies.for_host(what, endpoint.scheme, &host)?,
            (None, None) => Proxies::from_env().for_host(what, endpoint.scheme, &host)?,
        }
        .map(Arc::new);
        let tls = match endpoint.scheme {
            "https" => Some(TlsConnector::new(&self.trust, what)?),
            _ => None,
        };

        let config = ureq::Agent::config_builder()
            // Proxies are ours (`net::proxy`): ureq's would read the
            // process environment, send CONNECT for http:// too, and pick
            // one proxy for both schemes.
            .proxy(None)
            // Statuses are answers to map, not errors.
            .http_status_as_error(false)
            // A redirect means the wrong region or endpoint: report it.
            .max_redirects(0)
            .https_only(endpoint.scheme == "https")
            .timeout_global(Some(self.timeout))
            .user_agent(concat!("bucket-lease/", env!("CARGO_PKG_VERSION")))
            .input_buffer_size(INPUT_BUFFER)
            .output_buffer_size(OUTPUT_BUFFER)
            .max_response_header_size(MAX_ANSWER_HEAD)
            .max_idle_age(MAX_IDLE_AGE)
            .max_idle_connections(MAX_IDLE_CONNECTIONS)
            .max_idle_connections_per_host(MAX_IDLE_CONNECTIONS)
            .build();
        // A proxy's connection or tunnel (`net::proxy`), else our TCP
        // transport; then TLS for https:// (`net::tls`).
        let connector = ().chain(ProxyConnector(proxy.clone())).chain(TcpConnector);
        let mut resolver = match self.connect_to {
            Some(addr) => CachingResolver::fixed(addr),
            None => CachingResolver::default(),
        };
        if let Some(lookup) = self.lookup {
            resolver.lookup = lookup;
        }
        let resolver = ProxyResolver::new(resolver, proxy.clone());
        let agent = match tls {
            Some(tls) => ureq::Agent::with_parts(config, connector.chain(tls), resolver),
            None => ureq::Agent::with_parts(config, connector, resolver),
        };

        Ok(HttpStore {
            agent,
            target,
            proxy,
            custom_endpoint,
            profile: self.profile.name,
            base_url,
            store_url: format!("{}://{}/", self.profile.name, url_text(&bucket)).into(),
            bucket,
            credentials,
            region,
            keys: KeyCache::new(),
            delete_conditions: DeleteCheck::new(self.conditional_delete),
            spelling: Spelling::new(self.unquoted_etags, self.etag_spelling_set),
            timeout: self.timeout,
            max_body: self.max_body,
            spacing: self.write_interval.map(WriteSpacing::new),
            upload_conditions: UploadConditions::new(),
            idle: IdleWatch::default(),
        })
    }
}

/// A bucket on an S3-compatible service, reached with signed HTTP requests.
///
/// Answers are mapped by meaning:
///
/// | answer | meaning |
/// |---|---|
/// | 412 or 304 to a create-only PUT | [`StoreErrorKind::AlreadyExists`] |
/// | 412 or 304 to an update-if-ETag PUT, 404 to it | [`StoreErrorKind::Precondition`] |
/// | 412 to a DELETE with `If-Match` | [`StoreErrorKind::Precondition`] |
/// | 200 to a GET, the object over the read cap | [`StoreErrorKind::TooLarge`], with the version from the answer's `ETag` and `x-amz-version-id`; the body is not read |
/// | 404 to a GET | [`StoreErrorKind::NotFound`] |
/// | 404 to a DELETE | success: the key is gone |
/// | 409 | [`StoreErrorKind::Conflict`] |
/// | 401, 403 | [`StoreErrorKind::PermissionDenied`] |
/// | 501 or code `NotImplemented` to a conditional request | [`StoreErrorKind::NotImplemented`] |
/// | a conditional DELETE the profile does not send ([`Profile::conditional_delete`]), or one the service was not seen to honour in the spelling of ETags in use (checked before the first, and again after the spelling changed: see below) | [`StoreErrorKind::NotImplemented`], nothing sent |
/// | 5xx, 408, 429 | [`StoreErrorKind::Transport`], [`Delivery::Answered`](bucket_lease_core::store::Delivery): it may have landed |
/// | 429, or 503 with code `SlowDown` | the same, marked [throttled](StoreError::is_throttled), with the answer's `Retry-After` (seconds; at most an hour) as [`StoreError::retry_after`] |
/// | timeout, reset, closed after sending | [`StoreErrorKind::Transport`]: it may have landed |
/// | (retries) | a request not sent, and a GET, HEAD or unconditional DELETE that got a 5xx, 408, 429 or no answer, is sent again, up to three times in all, after a jittered pause, within the deadline; a write that may have been sent is not |
/// | host name lookup, connection, proxy or TLS handshake failed | [`StoreErrorKind::Transport`], [`Delivery::NotSent`](bucket_lease_core::store::Delivery): nothing was sent, the message names `host:port` (and the proxy with its setting) |
/// | the server's certificate fails verification (unknown issuer, expired, another name) | [`StoreErrorKind::Rejected`], code `InvalidCertificate`, not sent, [permanent](StoreError::is_permanent): never retried; the message names the problem and the setting that fixes it |
/// | the proxy refuses the tunnel (4xx to `CONNECT`), or answers 407 to a request | [`StoreErrorKind::Rejected`], code `ProxyRefused` (or `HTTP 407`), permanent; the message names the proxy and its setting |
/// | 301, 307, or `AuthorizationHeaderMalformed` naming a region: the bucket is elsewhere | [`StoreErrorKind::Rejected`], its message naming the bucket's region (`x-amz-bucket-region`, `<Region>`) or the endpoint the service names, and what to set |
/// | code `NoSuchBucket`, 501 to an unconditional request, other 3xx and 4xx | [`StoreErrorKind::Rejected`] |
/// | an `If-Match` write or delete whose version has no ETag | [`StoreErrorKind::Rejected`], nothing sent |
///
/// [`StoreErrorKind::NotImplemented`] thus means only that this client or
/// profile cannot send the condition, or that the service said it cannot
/// honour it; a version without an ETag (from an answer that carried none)
/// is a failed request, never a reason to write without the condition.
///
/// The ETag in `If-Match` is sent as the service returned it, in quotes,
/// unless the builder's [`unquoted_etags`](HttpStoreBuilder::unquoted_etags)
/// (`BUCKET_LEASE_UNQUOTED_ETAGS`) fixes the spelling. Until a write on a
/// right ETag has been accepted, a refused `If-Match` write is followed by
/// a HEAD: when the object still has that very ETag, the service refused a
/// right condition (Ceph RGW 16.2 refuses every quoted one), and the write
/// is sent once more bare; accepted, that spelling is kept for the store's
/// life, with one warning, and counted ([`Store::condition_spelling`]) so
/// an acquire's probe checks its refusals again in it.
///
/// A profile's conditional deletes are not trusted to the service either:
/// before the first one is sent, the store checks once on a scratch object
/// beside its key that a delete on a wrong ETag is refused and one on the
/// right ETag accepted (five requests), and sends none if the service
/// failed that check (Ceph RGW 16.2 deletes whatever the ETag). The check
/// holds for the spelling of ETags it was made in: after the spelling
/// changed, the next conditional delete checks again.
///
/// # Throttling and write intervals
///
/// Whether a throttled write took effect is decided as for any other
/// answer that is not a success: it may have. AWS documents `503 SlowDown`
/// as a request to reduce the request rate and to retry with backoff (S3
/// User Guide, "Amazon S3 error best practices" and "Best practices design
/// patterns: optimizing Amazon S3 performance"; the AWS knowledge center
/// adds that rapid concurrent PUTs to one key may be answered 503), and
/// says of `InternalError` that a request "might not have processed"; no
/// page promises that a `SlowDown` took no effect. Cloudflare documents a
/// 429 as the answer beyond R2's "maximum concurrent writes to the same
/// object name (key): 1 per second" (R2 "Limits") and RFC 6585 defines
/// 429 with an optional `Retry-After`; neither says the write was not
/// applied, and a gateway's 429 or 503 may come after it forwarded the
/// request. So the lease settles a throttled write by reading, as it does
/// a lost answer: it is never taken as a refusal (never "held"), and the
/// next try waits at least the `Retry-After`.
///
/// A store with a write interval ([`HttpStoreBuilder::write_interval`];
/// the `r2` profile's default is one second) spaces its own writes of each
/// key by it: a PUT or DELETE waits until an interval after the answer to
/// the store's previous write of that key (or the `Retry-After` of a
/// throttled answer, if longer), and is not sent, failing
/// [not sent](bucket_lease_core::store::Delivery::NotSent), when that
/// comes after its deadline. Reads are not spaced.
///
/// # Uploads in parts
///
/// A completion ([`Store::complete_upload`]) takes its mode as a PUT does
/// (`If-None-Match: *`, `If-Match`) and its answers map as a PUT's, but:
/// 404 `NoSuchUpload` is [`StoreErrorKind::NotFound`]; a `200` whose body
/// is an `<Error>` (S3 may answer a completion so) is the error its code
/// says; a completion that may have been sent is never sent again (the
/// lease settles it by reading), and it alone of an upload's requests
/// counts as a write for a write interval. Begins, parts and aborts are
/// sent again after no answer or a transient one, as reads are: a part
/// again replaces itself, an abort again finds nothing to abort (which
/// succeeds), and a begin again makes at most an empty upload nobody knows
/// the id of. Which services honour a completion's condition is checked
/// by the lease, and the verdict kept for the store's life
/// ([`Store::upload_conditions`]).
///
/// An error body over the cap is not read; the status alone decides.
/// Every error names the method, the key, the service's code (or the HTTP
/// status when the body has none), its message and request id.
pub struct HttpStore {
    agent: ureq::Agent,
    /// `host:port` the requests go to, for messages.
    target: String,
    /// The proxy requests go through.
    proxy: Option<Arc<Proxy>>,
    /// The endpoint was given, not made from the region.
    custom_endpoint: bool,
    profile: &'static str,
    base_url: String,
    bucket: String,
    /// `{profile}://{bucket}/`, as a user writes it, for errors.
    store_url: Arc<str>,
    credentials: Arc<CredentialsProvider>,
    region: String,
    /// The last signing key derived, for its credentials, day and region
    /// (derived once a day and once per set of credentials, not per
    /// request).
    keys: KeyCache,
    /// Whether conditional deletes are sent: checked on the service first.
    delete_conditions: DeleteCheck,
    /// How `If-Match` spells ETags, learned from the service.
    spelling: Spelling,
    timeout: Duration,
    max_body: usize,
    /// The turns of each key's writes, on a service with a write interval.
    spacing: Option<WriteSpacing>,
    /// Whether the service honours a completion's condition: the verdict
    /// of the core's fenced uploads, kept for the store's life.
    upload_conditions: UploadConditions,
    /// How long its connections stay open while idle, as seen: when a
    /// renewal should be warmed up.
    idle: IdleWatch,
}

impl fmt::Debug for HttpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpStore")
            .field("profile", &self.profile)
            .field("base_url", &self.base_url)
            .field("proxy", &self.proxy)
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .field("delete_conditions", &self.delete_conditions.state())
            .field("unquoted_etags", &self.spelling.bare())
            .field("timeout", &self.timeout)
            .field("max_body", &self.max_body)
            .field(
                "write_interval",
                &self.spacing.as_ref().map(WriteSpacing::interval),
            )
            .finish_non_exhaustive()
    }
}

/// One kind of request, which decides what its answers mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    /// A GET with `If-None-Match` on a known ETag (`Store::get_if_changed`):
    /// `304 Not Modified` is its answer for an unchanged object.
    GetIfChanged,
    Head,
    Create,
    Update,
    Overwrite,
    Delete,
    DeleteIfMatch,
    /// A GET whose body is handed out as a stream (`Store::open`), bounded
    /// by the request's timeout when `body_bounded`, else by nothing.
    Open {
        body_bounded: bool,
    },
    /// CreateMultipartUpload (`POST ?uploads`).
    BeginUpload,
    /// UploadPart (`PUT ?partNumber=N&uploadId=ID`).
    UploadPart,
    /// CompleteMultipartUpload (`POST ?uploadId=ID`), under a condition.
    CompleteUpload(Guard),
    /// AbortMultipartUpload (`DELETE ?uploadId=ID`).
    AbortUpload,
}

/// The condition a completion of an upload is sent under, as a PUT's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// `If-None-Match: *`.
    IfAbsent,
    /// `If-Match`.
    IfMatch,
    /// None.
    Unconditional,
}

impl Op {
    fn method(self) -> &'static str {
        match self {
            Op::Get | Op::GetIfChanged | Op::Open { .. } => "GET",
            Op::Head => "HEAD",
            Op::Create | Op::Update | Op::Overwrite | Op::UploadPart => "PUT",
            Op::Delete | Op::DeleteIfMatch | Op::AbortUpload => "DELETE",
            Op::BeginUpload | Op::CompleteUpload(_) => "POST",
        }
    }

    fn conditional(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Update
                | Op::DeleteIfMatch
                | Op::CompleteUpload(Guard::IfAbsent | Guard::IfMatch)
        )
    }

    /// Whether the request changes the object at its key: what a service's
    /// write interval counts. A completion does (it makes the object); the
    /// other requests of an upload do not (they change the upload, which
    /// nothing reads at the key), so the parts of one upload are not
    /// spaced by the interval.
    fn writes(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Update
                | Op::Overwrite
                | Op::Delete
                | Op::DeleteIfMatch
                | Op::CompleteUpload(_)
        )
    }
}

/// What an answer means for `op`: `None` for success, else the error kind.
fn failure_kind(op: Op, status: u16, code: Option<&str>) -> Option<StoreErrorKind> {
    use StoreErrorKind::*;
    if (200..300).contains(&status) || (status == 304 && op == Op::GetIfChanged) {
        return None;
    }
    if code == Some("NoSuchBucket") {
        return Some(Rejected);
    }
    // A condition the service cannot honour, or uploads in parts it does
    // not take.
    if (op.conditional() || op == Op::BeginUpload)
        && (status == 501 || code == Some("NotImplemented"))
    {
        return Some(NotImplemented);
    }
    Some(match (status, op) {
        (404, Op::Delete | Op::DeleteIfMatch | Op::AbortUpload) => return None,
        (404, Op::Get | Op::GetIfChanged | Op::Head | Op::Open { .. } | Op::UploadPart) => NotFound,
        (404, Op::Update) => Precondition,
        // If-Match on an absent key; the upload itself is known.
        (404, Op::CompleteUpload(Guard::IfMatch)) if code == Some("NoSuchKey") => Precondition,
        // NoSuchUpload: completed or aborted already.
        (404, Op::CompleteUpload(_)) => NotFound,
        (304 | 412, Op::Create | Op::CompleteUpload(Guard::IfAbsent)) => AlreadyExists,
        (304 | 412, Op::Update | Op::DeleteIfMatch | Op::CompleteUpload(Guard::IfMatch)) => {
            Precondition
        }
        (409, _) => Conflict,
        (401 | 403, _) => PermissionDenied,
        (501, _) => Rejected,
        (408 | 429 | 500..=599, _) => Transport,
        _ => Rejected,
    })
}

/// An answer whose body was read (up to the cap), or, for a successful
/// [`Op::Open`], left to read.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Result<Vec<u8>, usize>,
    /// The unread body of a successful [`Op::Open`].
    stream: Option<ureq::Body>,
}

impl HttpStore {
    /// A builder starting from `profile`'s defaults.
    pub fn builder(profile: Profile) -> HttpStoreBuilder {
        HttpStoreBuilder::new(profile)
    }

    /// The bucket this store reads and writes.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Where this store's credentials come from (never their values).
    pub fn credentials_source(&self) -> &Source {
        self.credentials.source()
    }

    /// When the credentials in use expire (`None` for credentials that do
    /// not, or before the first request).
    pub fn credentials_expire(&self) -> Option<SystemTime> {
        self.credentials.expires()
    }

    /// The URL an object's key is appended to (`…/bucket` path-style,
    /// `https://bucket.host` virtual-hosted).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    fn url(&self, key: &str) -> String {
        format!("{}/{}", self.base_url, encode_key(key))
    }

    /// The unsigned request for `op` on `key`, its ETag spelled as the
    /// store spells them now.
    fn request(
        &self,
        op: Op,
        key: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
    ) -> Result<http::Request<()>, StoreError> {
        self.request_spelled(op, key, condition, metadata, self.spelling.bare())
    }

    /// The unsigned request for `op` on `key`, its ETag sent `bare` or in
    /// quotes.
    fn request_spelled(
        &self,
        op: Op,
        key: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
        bare: bool,
    ) -> Result<http::Request<()>, StoreError> {
        self.request_to(op, key, "", condition, metadata, bare)
    }

    /// The unsigned request for `op` on `key` with `query` (`""`, or
    /// `?…` as sent: a multipart upload's, which the signer takes), its
    /// ETag sent `bare` or in quotes.
    fn request_to(
        &self,
        op: Op,
        key: &str,
        query: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
        bare: bool,
    ) -> Result<http::Request<()>, StoreError> {
        let fail = |message: String| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), key).with_message(message)
        };
        let mut builder = http::Request::builder().uri(self.url(key) + query);
        builder = match op {
            Op::Get | Op::GetIfChanged | Op::Open { .. } => builder.method(Method::GET),
            Op::Head => builder.method(Method::HEAD),
            Op::Delete | Op::DeleteIfMatch | Op::AbortUpload => builder.method(Method::DELETE),
            // moto stores a form-urlencoded body as empty; say what it is.
            // The object a begun upload makes has the type it was begun
            // with.
            Op::Create | Op::Update | Op::Overwrite => builder
                .method(Method::PUT)
                .header("content-type", "application/octet-stream"),
            Op::BeginUpload => builder
                .method(Method::POST)
                .header("content-type", "application/octet-stream"),
            Op::UploadPart => builder.method(Method::PUT),
            Op::CompleteUpload(_) => builder
                .method(Method::POST)
                .header("content-type", "application/xml"),
        };
        match (op, condition) {
            (Op::Create | Op::CompleteUpload(Guard::IfAbsent), _) => {
                builder = builder.header("if-none-match", "*");
            }
            (
                Op::Update | Op::DeleteIfMatch | Op::CompleteUpload(Guard::IfMatch),
                Some(version),
            ) => {
                let Some(etag) = &version.etag else {
                    return Err(StoreError::new(StoreErrorKind::Rejected, op.method(), key)
                        .with_message(
                            "the version has no ETag: the service's earlier answer carried \
                             none, so If-Match cannot be sent; nothing was sent (read the \
                             object again for a version with an ETag)",
                        ));
                };
                builder = builder.header("if-match", Spelling::spell(etag, bare));
            }
            (Op::GetIfChanged, Some(version)) => {
                builder = builder.header("if-none-match", if_changed::spelled(version, key)?);
            }
            _ => {}
        }
        let mut request = builder
            .body(())
            .map_err(|e| fail(format!("cannot form the request: {e}")))?;
        for (name, value) in metadata {
            let name = HeaderName::try_from(format!("x-amz-meta-{}", name.to_ascii_lowercase()))
                .map_err(|_| fail(format!("metadata name {name:?} is not a header name")))?;
            let value = HeaderValue::try_from(value.as_str())
                .ok()
                .filter(|v| v.to_str().is_ok())
                .ok_or_else(|| fail(format!("metadata {name} is not visible ASCII")))?;
            request.headers_mut().append(name, value);
        }
        Ok(request)
    }

    /// `request`, signed as of `time` with the current credentials.
    #[cfg(test)]
    fn signed(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        time: SystemTime,
    ) -> Result<http::Request<()>, StoreError> {
        let credentials = self.credentials_for(op, key, None)?;
        self.signed_as(&credentials, op, key, request, body, time)
    }

    /// The credentials to sign with: the valid ones at once (the
    /// provider refreshes them in the background), or, with nothing
    /// valid, the ones a fetch gives by `deadline`. An error names the
    /// source; nothing was sent, but it is a [`StoreErrorKind::Transport`]
    /// so a renewal retries until its deadline (the source may answer
    /// again).
    fn credentials_for(
        &self,
        op: Op,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Credentials, StoreError> {
        self.credentials.credentials(deadline).map_err(|e| {
            StoreError::new(StoreErrorKind::Transport, op.method(), key)
                .with_code("CredentialsUnavailable")
                .with_message(e.to_string())
                .not_sent()
        })
    }

    /// `request`, signed as of `time` with `credentials`.
    fn signed_as(
        &self,
        credentials: &Credentials,
        op: Op,
        key: &str,
        mut request: http::Request<()>,
        body: &[u8],
        time: SystemTime,
    ) -> Result<http::Request<()>, StoreError> {
        sign_request(
            credentials,
            &self.region,
            &self.keys,
            &mut request,
            body,
            time,
        )
        .map_err(|e| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), key).with_message(e.to_string())
        })?;
        Ok(request)
    }

    /// The timeout of a request sent now: what is left before `deadline`,
    /// at most the store's timeout, or an error (nothing sent) once it
    /// has passed.
    fn time_left(
        &self,
        op: Op,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Duration, StoreError> {
        let Some(deadline) = deadline else {
            return Ok(self.timeout);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(StoreError::new(StoreErrorKind::Transport, op.method(), key)
                .with_message("the deadline passed before the request was sent")
                .timed_out()
                .not_sent());
        }
        // A stream's whole read is bounded by its caller's deadline, however
        // far: its stages up to the answer's head take the store's timeout
        // as well (see `send_now`).
        if op == (Op::Open { body_bounded: true }) {
            return Ok(left);
        }
        Ok(left.min(self.timeout))
    }

    /// Sign and send `request`, and read its answer up to the cap; a
    /// write waits its key's turn first on a service with a write interval
    /// ([`WriteSpacing`]), and is not sent when the turn comes after
    /// `deadline`.
    fn send(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        let spacing = match &self.spacing {
            Some(spacing) if op.writes() => spacing,
            _ => return self.send_now(op, key, request, body, deadline),
        };
        let clock = SystemClock;
        let turn = match spacing.take_turn(key, &clock, deadline) {
            Ok(turn) => turn,
            Err(late) => return Err(late.error(op.method(), key, spacing.interval(), clock.now())),
        };
        let answer = self.send_now(op, key, request, body, deadline);
        match &answer {
            Err(e) if e.delivery() == Delivery::NotSent => turn.not_sent(),
            Err(_) => turn.wrote(None),
            Ok(answer) => turn.wrote(throttle_of(op, answer).flatten()),
        }
        answer
    }

    /// [`send`](Self::send), now.
    fn send_now(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        // The defect a review found: the timeout taken before the wait for
        // credentials, so a slow source let the request leave late.
        let early = StoreMutant::TimeoutBeforeCredentials
            .on()
            .then(|| self.time_left(op, key, deadline));
        let credentials = self.credentials_for(op, key, deadline)?;
        let request = self.signed_as(&credentials, op, key, request, body, SystemTime::now())?;
        // Taken now, right before the bytes go out: whatever the credentials
        // cost came off the time left, and none of the request leaves after
        // the deadline (ureq bounds the lookup, the connection, the
        // handshake, the write and the answer by this one timeout).
        let timeout = match early {
            Some(timeout) => timeout?,
            None => self.time_left(op, key, deadline)?,
        };
        let request = self.agent.configure_request(request.map(|()| body));
        let request = match op {
            // A stream's body is bounded by its deadline (by nothing without
            // one); each stage up to the answer's head by the time left, at
            // most the store's timeout.
            Op::Open { body_bounded } => {
                let head = timeout.min(self.timeout);
                request
                    .timeout_global(body_bounded.then_some(timeout))
                    .timeout_resolve(Some(head))
                    .timeout_connect(Some(head))
                    .timeout_send_request(Some(head))
                    .timeout_recv_response(Some(head))
            }
            _ => request.timeout_global(Some(timeout)),
        }
        .build();
        let traced = trace::begin(op.method());
        let begun = self.idle.begin();
        net::take_opened();
        let ran = self
            .agent
            .run(request)
            .map_err(|e| transport_error(op, key, &self.target, self.proxy.as_deref(), e));
        self.idle.end(begun, net::take_opened());
        if let Some(traced) = traced {
            traced.end(
                trace_outcome(&ran),
                ran.as_ref().ok().and_then(service_date),
            );
        }
        let mut response = ran?;
        let status = response.status().as_u16();
        let declared = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        // A cap beyond u64 (never, in practice) reads everything.
        let cap = u64::try_from(self.max_body).unwrap_or(u64::MAX);
        if matches!(op, Op::Open { .. }) && (200..300).contains(&status) {
            let (parts, stream) = response.into_parts();
            return Ok(Answer {
                status,
                headers: parts.headers,
                body: Ok(Vec::new()),
                stream: Some(stream),
            });
        }
        let body = if op == Op::Head {
            // An answer to HEAD has no body, whatever length it declares.
            Ok(Vec::new())
        } else if declared.is_some_and(|n| n > cap) {
            Err(self.max_body)
        } else {
            // The declared length (at most the cap) at once, rather than
            // growing from empty; read_to_end still checks for more.
            let mut bytes =
                Vec::with_capacity(declared.map_or(0, |n| usize::try_from(n).unwrap_or(0)));
            response
                .body_mut()
                .as_reader()
                .take(cap.saturating_add(1))
                .read_to_end(&mut bytes)
                .map_err(|e| {
                    transport_error(
                        op,
                        key,
                        &self.target,
                        self.proxy.as_deref(),
                        ureq::Error::from(e),
                    )
                })?;
            if bytes.len() > self.max_body {
                Err(self.max_body)
            } else {
                Ok(bytes)
            }
        };
        Ok(Answer {
            status,
            headers: response.into_parts().0.headers,
            body,
            stream: None,
        })
    }

    /// `Ok(answer)` when the answer means success for `op`, else its error.
    /// A completion's `200` whose body is an `<Error>` is the error its
    /// code says ([`multipart::status_of_error`]).
    fn check(&self, op: Op, key: &str, answer: Answer) -> Result<Answer, StoreError> {
        let (status, parsed) = status_and_error(op, &answer);
        let success = (200..300).contains(&answer.status);
        let Some(kind) = failure_kind(op, status, parsed.code.as_deref()) else {
            return Ok(answer);
        };
        let mut error = StoreError::new(kind, op.method(), key);
        if kind == StoreErrorKind::Transport {
            // A 5xx (or 408, 429): the service's own answer.
            error = error.answered();
        }
        if let Some(retry_after) =
            throttle_of_parts(status, &answer.headers, parsed.code.as_deref())
        {
            error = error.throttled(retry_after);
        }
        let mut error = error.with_code(
            parsed
                .code
                .unwrap_or_else(|| format!("HTTP {}", answer.status)),
        );
        // A proxy in front of an http:// endpoint answers for itself.
        if let (407, Some(proxy)) = (answer.status, &self.proxy) {
            let fix = if proxy.authorization.is_some() {
                format!("check the user and password in {}", proxy.setting)
            } else {
                format!(
                    "give the proxy's user and password in {} (http://user:password@host:port)",
                    proxy.setting
                )
            };
            return Err(error
                .with_message(format!(
                    "{} refused the request (407 Proxy Authentication Required); {fix}",
                    proxy.describe()
                ))
                .permanent());
        }
        let region = header(&answer.headers, "x-amz-bucket-region").or(parsed.region);
        let message = match (&answer.body, parsed.message) {
            _ if is_wrong_region(answer.status, error.code())
                && (region.is_some() || parsed.endpoint.is_some()) =>
            {
                Some(self.wrong_region(region.as_deref(), parsed.endpoint.as_deref()))
            }
            (Err(cap), _) => Some(format!(
                "error body larger than the {cap}-byte cap, not read"
            )),
            (Ok(_), message) if success => Some(format!(
                "{} (in the body of a {} answer, as S3 may answer a completion)",
                message.as_deref().unwrap_or("no message"),
                answer.status
            )),
            (Ok(_), message) => message,
        };
        if let Some(message) = message {
            error = error.with_message(message);
        }
        let request_id = parsed
            .request_id
            .or_else(|| header(&answer.headers, "x-amz-request-id"));
        if let Some(id) = request_id {
            error = error.with_request_id(id);
        }
        Err(error)
    }

    /// What a redirect or a refused signing region says: the bucket's
    /// region (or the endpoint the service names) and what to set.
    fn wrong_region(&self, region: Option<&str>, endpoint: Option<&str>) -> String {
        let endpoint_too = if self.custom_endpoint {
            " and an endpoint in that region in AWS_ENDPOINT_URL"
        } else {
            ""
        };
        let (bucket, ours) = (&self.bucket, &self.region);
        match (region, endpoint) {
            (Some(region), endpoint) => {
                let mut text = format!(
                    "the bucket {bucket} is in region {region}, not {ours}; set \
                     AWS_REGION={region}{endpoint_too}"
                );
                if let Some(endpoint) = endpoint {
                    text.push_str(&format!(
                        " (its endpoint, as the service gives it: {endpoint})"
                    ));
                }
                text
            }
            (None, endpoint) => format!(
                "the bucket {bucket} is not in region {ours}: the service sends its requests \
                 to {}; set AWS_REGION to the bucket's region{endpoint_too}",
                endpoint.unwrap_or("another endpoint")
            ),
        }
    }

    /// Send `request` until it succeeds, fails for good, or has been tried
    /// [`MAX_ATTEMPTS`] times: a transient failure is tried again after a
    /// jittered pause, when that is safe (see [`retryable`]). Every attempt
    /// shares one deadline: the caller's, or the store's timeout from now.
    fn execute(
        &self,
        op: Op,
        key: &str,
        mut request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        // One bound for the whole call, retries and credentials included:
        // a caller without a deadline gets the store's timeout once, not
        // once per attempt.
        let bound = deadline.unwrap_or_else(|| Instant::now() + self.timeout);
        let deadline = Some(bound);
        let mut attempt = 1;
        loop {
            let again = (attempt < MAX_ATTEMPTS).then(|| copy(&request));
            let result = self.execute_once(op, key, request, body, deadline);
            let (Err(e), Some(next)) = (&result, again) else {
                return result;
            };
            if !retryable(op, e) {
                return result;
            }
            let pause = backoff(attempt);
            // Only when a pause and some of a request still fit.
            if Instant::now() + pause * 2 >= bound {
                return result;
            }
            log::debug!(
                "{} {key}: {e}; trying again in {pause:?} (attempt {} of {MAX_ATTEMPTS})",
                op.method(),
                attempt + 1
            );
            std::thread::sleep(pause);
            request = next;
            attempt += 1;
        }
    }

    fn execute_once(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        let again = self.credentials.refreshable().then(|| copy(&request));
        let answer = self.send(op, key, request, body, deadline)?;
        match (self.check(op, key, answer), again) {
            (Err(e), Some(again))
                if e.kind() == StoreErrorKind::PermissionDenied
                    && matches!(e.code(), Some("ExpiredToken" | "InvalidToken")) =>
            {
                // The service says the token is stale before we thought it
                // was: fetch once more and try once more, within the deadline.
                if !self.credentials.refresh_now(deadline) {
                    return Err(e);
                }
                log::warn!(
                    "{} {key}: the service refused the credentials from {} ({}); retrying \
                     once with fresh ones",
                    op.method(),
                    self.credentials.source(),
                    e.code().unwrap_or_default()
                );
                let answer = self.send(op, key, again, body, deadline)?;
                self.check(op, key, answer)
            }
            (result, _) => result,
        }
    }
}

/// Whether `answer` asks the client to slow down, and for how long when it
/// says: `Some(retry_after)` for a 429 or a 503 whose code is S3's
/// `SlowDown`. See [`HttpStore`] for what such an answer means.
fn throttle_of(op: Op, answer: &Answer) -> Option<Option<Duration>> {
    let (status, parsed) = status_and_error(op, answer);
    throttle_of_parts(status, &answer.headers, parsed.code.as_deref())
}

/// The status `answer` stands for, and its error body: a failure's own,
/// and for a completion's `200` whose body is an `<Error>`, the status its
/// code says ([`multipart::status_of_error`]).
fn status_and_error(op: Op, answer: &Answer) -> (u16, ErrorBody) {
    let success = (200..300).contains(&answer.status);
    match &answer.body {
        Ok(bytes) if !success => (answer.status, ErrorBody::parse(bytes)),
        Ok(bytes) if matches!(op, Op::CompleteUpload(_)) => {
            let parsed = ErrorBody::parse(bytes);
            match parsed.code.as_deref().map(multipart::status_of_error) {
                Some(status) => (status, parsed),
                None => (answer.status, ErrorBody::default()),
            }
        }
        _ => (answer.status, ErrorBody::default()),
    }
}

/// [`throttle_of`], with the answer's status (the one its error code
/// stands for) and error code already read.
fn throttle_of_parts(
    status: u16,
    headers: &HeaderMap,
    code: Option<&str>,
) -> Option<Option<Duration>> {
    let throttled =
        status == 429 || (status == 503 && code.is_some_and(|c| c.starts_with("SlowDown")));
    throttled.then(|| retry_after(headers))
}

/// The longest `Retry-After` honoured: a longer one is taken as this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// An answer's `Retry-After` in seconds (its HTTP-date form is not read),
/// at most [`MAX_RETRY_AFTER`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = header(headers, "retry-after")?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The most times one request is sent (the AWS SDKs' standard mode).
const MAX_ATTEMPTS: u32 = 3;

/// Whether `error` is worth trying `op` again for: a request that was not
/// sent (nothing can have landed), or one that the same request again does
/// no harm to (a read, an unconditional delete, and of an upload: a part,
/// which a second send under its number replaces; an abort, which a second
/// send finds done; a begin, whose duplicate is an empty upload nobody
/// learns the id of, as the first may be after a lost answer) that got no
/// answer or a transient one (5xx, 408, 429: `SlowDown`, `InternalError`,
/// `RequestTimeout`). A write that may have reached the service is never
/// re-sent, and neither is a completion (a second one, after the first
/// landed, would be refused by the very object the first made): the lease
/// logic reconciles an unknown outcome by reading.
fn retryable(op: Op, error: &StoreError) -> bool {
    use bucket_lease_core::store::Delivery;
    if error.kind() != StoreErrorKind::Transport {
        return false;
    }
    error.delivery() == Delivery::NotSent
        || matches!(
            op,
            Op::Get
                | Op::GetIfChanged
                | Op::Head
                | Op::Delete
                | Op::Open { .. }
                | Op::BeginUpload
                | Op::UploadPart
                | Op::AbortUpload
        )
}

/// The pause before attempt `attempt + 1`: the core's
/// [`transient_backoff`], jittered (one half to three halves), so that
/// clients refused together do not retry together.
fn backoff(attempt: u32) -> Duration {
    jittered(transient_backoff(attempt))
}

/// Whether an answer says the bucket is in another region: a redirect, or
/// a signature scoped to the wrong region.
fn is_wrong_region(status: u16, code: Option<&str>) -> bool {
    matches!(status, 301 | 307)
        || matches!(
            code,
            Some(
                "PermanentRedirect"
                    | "TemporaryRedirect"
                    | "AuthorizationHeaderMalformed"
                    | "IllegalLocationConstraintException"
            )
        )
}

/// An unsigned request's copy, for a retry.
pub(crate) fn copy(request: &http::Request<()>) -> http::Request<()> {
    let mut again = http::Request::new(());
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.version_mut() = request.version();
    *again.headers_mut() = request.headers().clone();
    again
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn version_of(headers: &HeaderMap) -> Version {
    Version {
        etag: header(headers, "etag"),
        version_id: header(headers, "x-amz-version-id"),
    }
}

/// The object a successful GET answered, or [`StoreErrorKind::TooLarge`]
/// (carrying the version its headers name, when they name one) when its
/// body was over the cap.
fn object_of(key: &str, answer: Answer) -> Result<Object, StoreError> {
    let version = version_of(&answer.headers);
    let body = match answer.body {
        Ok(body) => body,
        Err(cap) => {
            let error = StoreError::new(StoreErrorKind::TooLarge, "GET", key);
            let read = format!(
                "the object is larger than the {cap}-byte cap; its body was not read past it"
            );
            return Err(if version == Version::default() {
                error.with_message(format!("{read}; the answer named no version of it"))
            } else {
                error
                    .with_message(format!(
                        "{read}; it can be replaced conditionally on the version this error \
                         carries"
                    ))
                    .with_version(version)
            });
        }
    };
    let metadata = answer
        .headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str().strip_prefix("x-amz-meta-")?;
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            Some((name.to_string(), value))
        })
        .collect();
    Ok(Object::new(body, version).with_metadata(metadata))
}

/// The error for a request that got no answer: not sent (the lookup, the
/// connection, the proxy or the TLS handshake to `target` failed), or
/// sent (through `via`, a proxy) and not answered. A certificate the
/// client does not trust, or a proxy that refuses the tunnel, is
/// [`StoreErrorKind::Rejected`] and permanent: trying again cannot help.
/// How a request ended, for [`trace`].
fn trace_outcome(ran: &Result<http::Response<ureq::Body>, StoreError>) -> trace::Outcome {
    match ran {
        Ok(response) => trace::Outcome::Status(response.status().as_u16()),
        Err(e) if e.delivery() == Delivery::NotSent => trace::Outcome::NotSent,
        Err(e) if e.is_timeout() => trace::Outcome::Timeout,
        Err(_) => trace::Outcome::Failed,
    }
}

/// The answer's `Date` (`Sun, 06 Nov 1994 08:49:37 GMT`, the only form
/// HTTP/1.1 services send), when it has one that reads.
fn service_date(response: &http::Response<ureq::Body>) -> Option<SystemTime> {
    parse_http_date(response.headers().get("date")?.to_str().ok()?)
}

/// See [`service_date`].
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut words = text.split_ascii_whitespace();
    let (_weekday, day, month, year, clock, zone) = (
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
    );
    if zone != "GMT" || words.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = i64::try_from(MONTHS.iter().position(|m| *m == month)? + 1).ok()?;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let mut hms = clock.split(':').map(|n| n.parse::<i64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || !(1970..=9999).contains(&year) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

fn transport_error(
    op: Op,
    key: &str,
    target: &str,
    via: Option<&Proxy>,
    error: ureq::Error,
) -> StoreError {
    let timed_out = match &error {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(e) => matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        _ => false,
    };
    let kind = match &error {
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::RequireHttpsOnly(_) => {
            StoreErrorKind::Rejected
        }
        _ => StoreErrorKind::Transport,
    };
    let (kind, code) = match not_sent_of(&error).map(|n| n.stage) {
        Some(Stage::Certificate) => (StoreErrorKind::Rejected, Some("InvalidCertificate")),
        Some(Stage::ProxyRefused) => (StoreErrorKind::Rejected, Some("ProxyRefused")),
        _ => (kind, None),
    };
    let mut e = StoreError::new(kind, op.method(), key);
    if let Some(code) = code {
        e = e.with_code(code).permanent();
    }
    let e = if let Some(not_sent) = not_sent_of(&error) {
        let detail = &not_sent.detail;
        let message = match not_sent.stage {
            Stage::Certificate => format!("the TLS handshake with {target} failed: {detail}"),
            Stage::Proxy | Stage::ProxyRefused if detail.contains(target) => detail.clone(),
            Stage::Proxy | Stage::ProxyRefused => {
                format!("{detail} (requests to {target} go through the proxy)")
            }
            Stage::Lookup => {
                let host = target.rsplit_once(':').map_or(target, |(host, _)| host);
                format!(
                    "could not look up {host} (for {target}): {detail}; check the endpoint's \
                     host name, or the region"
                )
            }
            Stage::Connect => format!(
                "could not connect to {target}: {detail}; check that the service listens at \
                 {target}, the endpoint's host and port"
            ),
            // rustls' word for a record that is not TLS: a plain-HTTP server.
            Stage::Tls if detail.contains("InvalidContentType") => format!(
                "the TLS handshake with {target} failed: the server did not answer in TLS \
                 ({detail}); check http:// vs https:// in the endpoint"
            ),
            // A plain-HTTP server waits, silent, for a request line.
            Stage::Tls if timed_out => format!(
                "the TLS handshake with {target} failed: {detail}; a server that speaks plain \
                 HTTP never answers one: check http:// vs https:// in the endpoint"
            ),
            Stage::Tls => format!(
                "the TLS handshake with {target} failed: {detail}; check the endpoint and the \
                 server's certificate"
            ),
        };
        e.with_message(message).not_sent()
    } else if kind == StoreErrorKind::Transport {
        let detail = match &error {
            ureq::Error::Io(io) => io.to_string(),
            ureq::Error::Timeout(_) => "timed out".to_string(),
            other => other.to_string(),
        };
        match via {
            Some(proxy) => e.with_message(format!(
                "sent to {target} through {}, then: {detail}",
                proxy.describe()
            )),
            None => e.with_message(format!("sent to {target}, then: {detail}")),
        }
    } else {
        e.with_message(error.to_string())
    };
    if timed_out {
        e.timed_out()
    } else {
        e
    }
}

impl Store for HttpStore {
    /// Requests go out on separate pooled connections, so an acquire's
    /// probe sends its four writes at once.
    fn concurrent_requests(&self) -> bool {
        true
    }

    /// How many times the store changed its spelling of ETags in
    /// `If-Match` (see [`HttpStore`]).
    fn condition_spelling(&self) -> u64 {
        self.spelling.changes()
    }

    /// S3's limit, which R2 and MinIO share.
    fn max_key_bytes(&self) -> Option<usize> {
        Some(crate::settings::S3_MAX_KEY_BYTES)
    }

    /// The profile's or the builder's
    /// ([`HttpStoreBuilder::write_interval`]).
    fn write_interval(&self) -> Option<Duration> {
        self.spacing.as_ref().map(WriteSpacing::interval)
    }

    /// One HEAD of `key`, bounded by `due`, when a connection idle until
    /// `due` would likely be gone by what the store has seen (see
    /// `http/idle.rs`); nothing otherwise.
    fn warm_up(&self, key: &str, due: Instant) {
        if due <= Instant::now() || !self.idle.needs_warming(due) {
            return;
        }
        match self.head(key, Some(due)) {
            Ok(_) => log::debug!("{key}: warmed a connection up for the renewal"),
            Err(e) if e.kind() == StoreErrorKind::NotFound => {}
            Err(e) => log::debug!("{key}: warming a connection up failed: {e}"),
        }
    }

    fn await_write_turn(&self, key: &str, deadline: Option<Instant>) {
        if let Some(spacing) = &self.spacing {
            spacing.await_turn(key, &SystemClock, deadline);
        }
    }

    /// `s3://bucket/`, `r2://bucket/` or `minio://bucket/`, by the profile.
    fn store_url(&self) -> Option<&str> {
        Some(&self.store_url)
    }

    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.get_object(key, deadline).map_err(|e| self.named(e))
    }

    /// A GET with `If-None-Match: <known ETag>`: a `304` is `Ok(None)`;
    /// a `200` at the known version too (a service that ignores the
    /// header). See `http/if_changed.rs`.
    fn get_if_changed(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        self.get_if_changed_object(key, known, deadline)
            .map_err(|e| self.named(e))
    }

    /// A HEAD request: the version and metadata of an object of any size.
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.head_object(key, deadline).map_err(|e| self.named(e))
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.put_object(key, body, options)
            .map_err(|e| self.named(e))
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.delete_object(key, mode, deadline)
            .map_err(|e| self.named(e))
    }

    /// A GET whose body is read as it arrives, with no cap: the deadline
    /// bounds the whole read; with none, each stage up to the answer's
    /// head is bounded by the store's timeout and the body by nothing.
    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        self.open_object(key, deadline).map_err(|e| self.named(e))
    }

    fn upload_conditions(&self) -> Option<&UploadConditions> {
        Some(&self.upload_conditions)
    }

    fn begin_upload(
        &self,
        key: &str,
        metadata: &[(String, String)],
        deadline: Option<Instant>,
    ) -> Result<String, StoreError> {
        self.begin_upload_object(key, metadata, deadline)
            .map_err(|e| self.named(e))
    }

    fn upload_part(
        &self,
        key: &str,
        upload: &str,
        number: u32,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<UploadedPart, StoreError> {
        self.upload_part_object(key, upload, number, body, deadline)
            .map_err(|e| self.named(e))
    }

    fn complete_upload(
        &self,
        key: &str,
        upload: &str,
        parts: &[UploadedPart],
        mode: &PutMode,
        deadline: Option<Instant>,
    ) -> Result<Version, StoreError> {
        self.complete_upload_object(key, upload, parts, mode, deadline)
            .map_err(|e| self.named(e))
    }

    fn abort_upload(
        &self,
        key: &str,
        upload: &str,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.abort_upload_object(key, upload, deadline)
            .map_err(|e| self.named(e))
    }
}

/// The requests behind [`Store`]'s methods, whose errors those name with
/// the store's URL.
impl HttpStore {
    /// `error`, naming this store ([`Store::store_url`]).
    fn named(&self, error: StoreError) -> StoreError {
        error.with_store_url(Arc::clone(&self.store_url))
    }

    fn get_object(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let request = self.request(Op::Get, key, None, &[])?;
        let answer = self.execute(Op::Get, key, request, &[], deadline)?;
        object_of(key, answer)
    }

    fn head_object(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let request = self.request(Op::Head, key, None, &[])?;
        let answer = self.execute(Op::Head, key, request, &[], deadline)?;
        object_of(key, answer)
    }

    fn put_object(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
    ) -> Result<Version, StoreError> {
        let (op, condition) = match &options.mode {
            PutMode::Create => (Op::Create, None),
            PutMode::Update(version) => (Op::Update, Some(version)),
            PutMode::Overwrite => (Op::Overwrite, None),
            _ => return Err(unknown_mode("PUT", key)),
        };
        // One bound for the write, and for the HEAD and second write a
        // refusal of a right ETag may cost.
        let deadline = Some(
            options
                .deadline
                .unwrap_or_else(|| Instant::now() + self.timeout),
        );
        // The spelling the write goes out in, and any switch is decided
        // against.
        let sent = self.spelling.now();
        let bare = sent.bare();
        let request = self.request_spelled(op, key, condition, &options.metadata, bare)?;
        let (answer, spelled) = match (self.execute(op, key, request, body, deadline), condition) {
            (Ok(answer), _) => (answer, bare),
            (Err(e), Some(version))
                if e.kind() == StoreErrorKind::Precondition
                    && self.spelling.open()
                    && self.refused_a_right_etag(key, version, deadline) =>
            {
                let answer = self.put_respelled(key, body, options, sent, deadline, e)?;
                (answer, !bare)
            }
            (Err(e), _) => return Err(e),
        };
        if op == Op::Update {
            self.spelling.accepted(spelled);
        }
        Ok(version_of(&answer.headers))
    }

    fn delete_object(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let version = match mode {
            DeleteMode::Unconditional => {
                let request = self.request(Op::Delete, key, None, &[])?;
                self.execute(Op::Delete, key, request, &[], deadline)?;
                return Ok(());
            }
            DeleteMode::IfVersion(version) if version.etag.is_none() => {
                // Refused without a request, whatever the service does.
                return self.delete_if_match(key, version, deadline, self.spelling.bare());
            }
            DeleteMode::IfVersion(version) => version,
            _ => return Err(unknown_mode("DELETE", key)),
        };
        // One bound for the check a first conditional delete costs, and
        // for the delete.
        let bound = deadline.unwrap_or_else(|| Instant::now() + self.timeout);
        // Sent in the spelling of ETags the service's conditional deletes
        // were checked in.
        let spelled = self.spelling.now().spelled();
        let Some(checked) = self.delete_conditions.allows(self, key, spelled, bound)? else {
            let why = match self.delete_conditions.state() {
                DeleteConditions::Off => format!(
                    "the {} profile does not send conditional deletes (turn them on with \
                     conditional_delete(true))",
                    self.profile
                ),
                _ => format!(
                    "the service was seen to ignore If-Match on DELETE with {} ETags, the \
                     spelling in use, so conditional deletes are not sent to it",
                    spelled.name()
                ),
            };
            return Err(
                StoreError::new(StoreErrorKind::NotImplemented, "DELETE", key).with_message(why),
            );
        };
        self.delete_if_match(key, version, Some(bound), checked.bare)
    }
}

impl HttpStore {
    /// A DELETE conditional on `version`, its ETag sent `bare` or quoted,
    /// whatever is known of the service's conditional deletes (the caller
    /// checked, in that spelling).
    pub(crate) fn delete_if_match(
        &self,
        key: &str,
        version: &Version,
        deadline: Option<Instant>,
        bare: bool,
    ) -> Result<(), StoreError> {
        let request = self.request_spelled(Op::DeleteIfMatch, key, Some(version), &[], bare)?;
        self.execute(Op::DeleteIfMatch, key, request, &[], deadline)?;
        Ok(())
    }

    /// `host:port` the requests go to, for messages.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

impl HttpStore {
    /// Whether `key` still has the ETag of `version`, which a write
    /// conditional on it was just refused for: one HEAD, within
    /// `deadline`. (A failed HEAD answers no: the refusal stands.)
    fn refused_a_right_etag(
        &self,
        key: &str,
        version: &Version,
        deadline: Option<Instant>,
    ) -> bool {
        let (Some(sent), Ok(object)) = (&version.etag, self.head(key, deadline)) else {
            return false;
        };
        object
            .version
            .etag
            .as_deref()
            .is_some_and(|now| same_etag(now, sent))
    }

    /// Send the `If-Match` write refused in the spelling `sent` once more
    /// in the other one, by `deadline` (see [`crate::spelling`]): its
    /// answer, or `refused` when the other spelling is refused too, or when
    /// the spelling `sent` settled since (another thread's write on a
    /// right ETag was accepted in it: it is not questioned any more).
    fn put_respelled(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
        sent: Now,
        deadline: Option<Instant>,
        refused: StoreError,
    ) -> Result<Answer, StoreError> {
        let PutMode::Update(version) = &options.mode else {
            return Err(refused);
        };
        let bare = sent.bare();
        let switched = self.spelling.switch_from(sent);
        if switched.is_none() && self.spelling.bare() == bare {
            // Settled in the spelling the write was refused in (or switched
            // and back by others): the refusal stands, and nothing goes
            // out in a spelling the store does not use.
            return Err(refused);
        }
        // This call switched, or another thread did first.
        let request =
            self.request_spelled(Op::Update, key, Some(version), &options.metadata, !bare)?;
        match self.execute(Op::Update, key, request, body, deadline) {
            Ok(answer) => {
                if switched.is_some() {
                    log::warn!(
                        "{}: the service refused If-Match with the object's own ETag in \
                         {} and accepted it {}; ETags are sent that way from now on (set \
                         BUCKET_LEASE_UNQUOTED_ETAGS={} to start so)",
                        self.profile,
                        if bare { "bare" } else { "quotes" },
                        if bare { "in quotes" } else { "bare" },
                        if bare { "off" } else { "on" },
                    );
                }
                Ok(answer)
            }
            Err(e) if e.kind() == StoreErrorKind::Precondition => {
                // Neither spelling, if the object still has that ETag: keep
                // the first, and its refusal (unless the new one settled
                // meanwhile: then it stays). If it changed meanwhile, the
                // second write lost a race, which says nothing against the
                // new spelling (switching back then could leave a busy key
                // refused in the wrong spelling for good).
                if let Some(switched) = switched {
                    if self.refused_a_right_etag(key, version, deadline) {
                        self.spelling.switch_from(switched);
                    }
                }
                Err(refused)
            }
            Err(e) => Err(e),
        }
    }
}

/// An endpoint split into the parts a request URL is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    scheme: &'static str,
    /// `host[:port]`, as given.
    authority: String,
    /// `""` or `/path` without a trailing slash.
    base_path: String,
}

impl Endpoint {
    fn parse(text: &str) -> Result<Endpoint, String> {
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
    fn host(&self) -> &str {
        self.authority
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(self.authority.as_str(), |(host, _)| host)
    }

    fn host_is_ip(&self) -> bool {
        let host = self.host();
        host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok()
    }

    /// Whether the host is one of AWS's own (under `amazonaws.com` or
    /// `amazonaws.com.cn`).
    fn host_is_aws(&self) -> bool {
        let host = self.host().trim_end_matches('.');
        [".amazonaws.com", ".amazonaws.com.cn"]
            .iter()
            .any(|suffix| host.ends_with(suffix))
    }
}

/// Whether `bucket` can be the first label of a host name.
fn is_dns_label(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !bucket.starts_with('-')
        && !bucket.ends_with('-')
}

/// Percent-encode a key for an S3 path: everything but unreserved
/// characters and `/`.
fn encode_key(key: &str) -> String {
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

/// The answer to a write or delete mode newer than this client: not
/// implemented, nothing sent.
fn unknown_mode(method: &'static str, key: &str) -> StoreError {
    StoreError::new(StoreErrorKind::NotImplemented, method, key)
        .with_message("the HTTP store does not know this mode; update bucket-lease-backends")
}

mod idle;
mod if_changed;
mod multipart;

#[cfg(test)]
mod tests;
