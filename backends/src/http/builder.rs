//! How an [`HttpStore`] is configured and built.
//!
//! A [`Profile`] holds the defaults that set one service apart from
//! another (addressing, region, endpoint, conditional deletes, the spelling
//! of ETags, a write interval); an [`HttpStoreBuilder`] starts from one and
//! overrides any of them; [`HttpStoreBuilder::build`] makes the store and
//! its agent, with the buffers, timeouts and pool of idle connections the
//! constants here set.
//!
//! What it promises: `build` sends nothing. It fails with a [`ConfigError`]
//! saying which setting is missing or which value cannot be used, and how
//! to fix it; it refuses an endpoint that carries user information without
//! ever showing it, and addresses the bucket as [`Addressing`] says. A
//! builder's `Debug` shows no secret.

use super::endpoint::{encode_key, is_dns_label, Endpoint};
use super::idle::IdleWatch;
use super::HttpStore;
use crate::credentials::CredentialsProvider;
use crate::delete_check::DeleteCheck;
use crate::net::proxy::{ProxyConnector, ProxyResolver};
use crate::net::tls::TlsConnector;
use crate::net::{CachingResolver, TcpConnector};
use crate::settings::{redact_user_info, url_text, ConfigError, Named, Proxies, Trust};
use crate::sign::{Credentials, KeyCache};
use crate::spelling::Spelling;
use bucket_lease_core::multipart::UploadConditions;
use bucket_lease_core::spacing::WriteSpacing;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
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
    ///
    /// [`DeleteMode::IfVersion`]: bucket_lease_core::store::DeleteMode::IfVersion
    /// [`StoreErrorKind::NotImplemented`]: bucket_lease_core::store::StoreErrorKind::NotImplemented
    pub conditional_delete: bool,
    /// Whether `If-Match` carries the ETag without its quotes (some services
    /// accept only that).
    pub unquoted_etags: bool,
    /// The shortest time the service allows between two writes of one key
    /// (R2: one second), which the store spaces its own writes by; `None`
    /// for no such limit. See [`Store::write_interval`].
    ///
    /// [`Store::write_interval`]: bucket_lease_core::store::Store::write_interval
    pub write_interval: Option<Duration>,
}

impl Profile {
    /// A service named `name` that names the bucket in the path, signs in
    /// `us-east-1` unless told otherwise, needs its endpoint set, honours
    /// `If-Match` on DELETE, takes quoted ETags and spaces no writes:
    /// MinIO's defaults, and a test server's.
    #[cfg(any(feature = "minio", test))]
    pub(crate) const fn path_style(name: &'static str) -> Profile {
        Profile {
            name,
            addressing: Addressing::Path,
            region: Some("us-east-1"),
            endpoint_for_region: None,
            conditional_delete: true,
            unquoted_etags: false,
            write_interval: None,
        }
    }
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
    ///
    /// [`Store::write_interval`]: bucket_lease_core::store::Store::write_interval
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
    ///
    /// [`StoreErrorKind::TooLarge`]: bucket_lease_core::store::StoreErrorKind::TooLarge
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
