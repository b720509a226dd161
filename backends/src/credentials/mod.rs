//! Where the HTTP stores' credentials come from, and keeping temporary
//! ones fresh.
//!
//! [`chain`] looks for credentials in the order the AWS CLI and SDKs use,
//! and stops at the first source that is configured:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN`;
//! 2. the shared files `~/.aws/credentials` and `~/.aws/config`
//!    (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`), profile
//!    `AWS_PROFILE` or `default`: static keys (`aws_access_key_id`,
//!    `aws_secret_access_key`, `aws_session_token`) or `credential_process`.
//!    A profile that needs SSO (`sso_*`), an assumed role (`role_arn`,
//!    `source_profile`, `credential_source`), a web identity
//!    (`web_identity_token_file`) or `login_session` is refused with an
//!    error naming the key;
//! 3. web identity (EKS service-account roles): `AWS_WEB_IDENTITY_TOKEN_FILE`
//!    and `AWS_ROLE_ARN` (and `AWS_ROLE_SESSION_NAME`) exchanged by STS
//!    `AssumeRoleWithWebIdentity` (endpoint `AWS_ENDPOINT_URL_STS`, else
//!    the region's); the token file is read again at each refresh;
//! 4. container credentials (ECS, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`, with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN` or `_TOKEN_FILE`;
//! 5. EC2 instance metadata, IMDSv2 only, unless
//!    `AWS_EC2_METADATA_DISABLED=true` (endpoint
//!    `AWS_EC2_METADATA_SERVICE_ENDPOINT`). Being last, it is the one
//!    source asked to find out whether it is there: a machine that is not on
//!    EC2 fails to connect within a second.
//!
//! A [`CredentialsProvider`] holds what its source last gave. Temporary
//! credentials (those with an expiry) are fetched again on the thread that
//! asks for them once they are within the refresh window of their expiry
//! ([`DEFAULT_REFRESH_WINDOW`]), bounded by the asker's deadline. A failed
//! refresh keeps the current credentials while they are valid, with a
//! warning through `log`; once they have expired, the error names the
//! source. [`CredentialsProvider::source`] says where the credentials came
//! from, never what they are: no secret key, session token or
//! web-identity token appears in `Debug`, `Display`, logs or errors.

mod container;
mod imds;
mod process;
pub(crate) mod profile;
mod remote;
mod web_identity;

use crate::sign::Credentials;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long before their expiry temporary credentials are fetched again.
pub const DEFAULT_REFRESH_WINDOW: Duration = Duration::from_secs(5 * 60);

/// How long the chain waits for instance metadata before deciding there is
/// none.
const IMDS_PROBE: Duration = Duration::from_secs(5);

/// The longest a source is given to answer when the asker has no deadline.
pub(crate) const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where credentials came from. `Display` names the source and never a
/// credential.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Given in code ([`CredentialsProvider::fixed`]).
    Code,
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// Static keys in a profile of the shared files.
    Profile {
        /// The profile's name.
        name: String,
    },
    /// A profile's `credential_process`.
    Process {
        /// The profile's name.
        profile: String,
    },
    /// STS `AssumeRoleWithWebIdentity` with a web-identity token file.
    WebIdentity {
        /// The role assumed (not secret).
        role_arn: String,
    },
    /// The container credentials endpoint (ECS, EKS Pod Identity).
    Container,
    /// EC2 instance metadata (IMDSv2).
    InstanceMetadata,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Code => write!(f, "credentials given in code"),
            Source::Environment => {
                write!(
                    f,
                    "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
                )
            }
            Source::Profile { name } => write!(f, "profile {name:?} of the shared files"),
            Source::Process { profile } => {
                write!(f, "the credential_process of profile {profile:?}")
            }
            Source::WebIdentity { role_arn } => write!(
                f,
                "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, role {role_arn})"
            ),
            Source::Container => write!(
                f,
                "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI)"
            ),
            Source::InstanceMetadata => write!(f, "EC2 instance metadata (IMDSv2)"),
        }
    }
}

/// Credentials could not be found or fetched. `Display` reads "what failed:
/// why" and never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialsError {
    /// No source is configured.
    NotFound {
        /// What was looked at, and why each did not count.
        tried: String,
    },
    /// The selected profile needs a feature this crate does not support.
    Unsupported {
        /// The profile's name.
        profile: String,
        /// The key that needs it (`role_arn`, `sso_start_url`, …).
        key: String,
    },
    /// A configured source is unusable or did not give credentials.
    Source {
        /// The source.
        source: Source,
        /// Why.
        why: String,
    },
    /// The credentials have expired and could not be fetched again.
    Expired {
        /// Where they came from.
        source: Source,
        /// Why the refresh failed.
        why: String,
    },
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialsError::NotFound { tried } => write!(
                f,
                "finding credentials: none configured ({tried}); set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile in ~/.aws/credentials"
            ),
            CredentialsError::Unsupported { profile, key } => write!(
                f,
                "reading profile {profile:?}: its key {key} needs SSO, an assumed role or a \
                 web identity, which bucket-lease does not support; give the profile static \
                 keys or a credential_process (for example `aws configure \
                 export-credentials --format process`)"
            ),
            CredentialsError::Source { source, why } => {
                write!(f, "getting credentials from {source}: {why}")
            }
            CredentialsError::Expired { source, why } => write!(
                f,
                "credentials from {source} have expired and could not be refreshed: {why}"
            ),
        }
    }
}

impl std::error::Error for CredentialsError {}

/// What one fetch from a source gave.
#[derive(Clone)]
pub(crate) struct Fetched {
    pub(crate) credentials: Credentials,
    /// `None` for credentials that do not expire.
    pub(crate) expires: Option<SystemTime>,
}

/// A source that can be asked again. Its error text must never hold a
/// secret.
pub(crate) trait Fetch: Send + Sync {
    fn fetch(&self, deadline: Instant) -> Result<Fetched, String>;
}

/// Credentials from one source, refreshed before they expire. See the
/// [module docs](self).
pub struct CredentialsProvider {
    source: Source,
    fetcher: Option<Box<dyn Fetch>>,
    window: Duration,
    /// What the source last gave; locked only to read or replace it.
    state: Mutex<Option<Fetched>>,
    /// Held by the one thread fetching, for the length of the fetch.
    refreshing: Mutex<()>,
}

impl fmt::Debug for CredentialsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("CredentialsProvider")
            .field("source", &self.source)
            .field("credentials", &state.as_ref().map(|s| &s.credentials))
            .field("expires", &state.as_ref().and_then(|s| s.expires))
            .field("refresh_window", &self.window)
            .finish()
    }
}

impl CredentialsProvider {
    /// Credentials given in code, which never change.
    pub fn fixed(credentials: Credentials) -> Self {
        Self::with_state(
            Source::Code,
            None,
            Some(Fetched {
                credentials,
                expires: None,
            }),
        )
    }

    fn with_state(source: Source, fetcher: Option<Box<dyn Fetch>>, state: Option<Fetched>) -> Self {
        CredentialsProvider {
            source,
            fetcher,
            window: DEFAULT_REFRESH_WINDOW,
            state: Mutex::new(state),
            refreshing: Mutex::new(()),
        }
    }

    /// A provider that asks `fetcher` for its first credentials on first
    /// use.
    pub(crate) fn fetching(source: Source, fetcher: Box<dyn Fetch>) -> Self {
        Self::with_state(source, Some(fetcher), None)
    }

    /// Fetch temporary credentials again once they are within `window` of
    /// their expiry (default [`DEFAULT_REFRESH_WINDOW`]).
    pub fn refresh_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Where the credentials come from (for `inspect -v`; never a value).
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// When the current credentials expire: `None` for credentials that do
    /// not, or before the first fetch.
    pub fn expires(&self) -> Option<SystemTime> {
        self.lock().as_ref().and_then(|s| s.expires)
    }

    /// Whether the source can be asked again.
    pub(crate) fn refreshable(&self) -> bool {
        self.fetcher.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Fetched>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credentials to sign with now: the current ones, or fresh ones
    /// when the current ones are within the refresh window of their expiry
    /// (one fetch, bounded by `deadline`). While another thread is
    /// fetching, a thread whose current credentials are still valid signs
    /// with them rather than wait.
    ///
    /// # Errors
    ///
    /// [`CredentialsError::Source`] when the first fetch fails;
    /// [`CredentialsError::Expired`] when the credentials have expired and
    /// the refresh failed. A failed refresh of still-valid credentials is
    /// a warning, not an error.
    pub fn credentials(&self, deadline: Option<Instant>) -> Result<Credentials, CredentialsError> {
        let now = SystemTime::now();
        let current = self.lock().clone();
        let valid = |f: &Fetched| f.expires.is_none_or(|e| now < e);
        if let Some(current) = &current {
            let due = current
                .expires
                .is_some_and(|expires| now + self.window >= expires);
            if !due {
                return Ok(current.credentials.clone());
            }
            if self.fetcher.is_none() {
                return if valid(current) {
                    Ok(current.credentials.clone())
                } else {
                    Err(CredentialsError::Expired {
                        source: self.source.clone(),
                        why: "the source cannot be asked again".into(),
                    })
                };
            }
        }
        let _refreshing = match self.refreshing.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::WouldBlock) => match &current {
                // Another thread is fetching: sign with what is valid.
                Some(current) if valid(current) => return Ok(current.credentials.clone()),
                // Nothing valid: wait for that fetch (bounded by its
                // asker's deadline), then look again.
                _ => self.refreshing.lock().unwrap_or_else(|e| e.into_inner()),
            },
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        };
        // Another thread may have refreshed meanwhile.
        let current = self.lock().clone();
        if let Some(fresh) = &current {
            if fresh
                .expires
                .is_some_and(|expires| SystemTime::now() + self.window < expires)
            {
                return Ok(fresh.credentials.clone());
            }
        }
        match self.fetch(deadline) {
            Ok(fresh) => {
                let credentials = fresh.credentials.clone();
                *self.lock() = Some(fresh);
                Ok(credentials)
            }
            Err(why) => match current {
                Some(current) if valid(&current) => {
                    log::warn!(
                        "refreshing credentials from {} failed; the current ones stay in use \
                         until they expire: {why}",
                        self.source
                    );
                    Ok(current.credentials)
                }
                Some(_) => Err(CredentialsError::Expired {
                    source: self.source.clone(),
                    why,
                }),
                None => Err(CredentialsError::Source {
                    source: self.source.clone(),
                    why,
                }),
            },
        }
    }

    /// Fetch again now, whatever the expiry (after the service said the
    /// token expired). `true` when new credentials were fetched.
    pub(crate) fn refresh_now(&self, deadline: Option<Instant>) -> bool {
        if self.fetcher.is_none() {
            return false;
        }
        let _refreshing = self.refreshing.lock().unwrap_or_else(|e| e.into_inner());
        match self.fetch(deadline) {
            Ok(fresh) => {
                *self.lock() = Some(fresh);
                true
            }
            Err(why) => {
                log::warn!(
                    "refreshing credentials from {} failed (the service refused the current \
                     ones): {why}",
                    self.source
                );
                false
            }
        }
    }

    fn fetch(&self, deadline: Option<Instant>) -> Result<Fetched, String> {
        let fetcher = self
            .fetcher
            .as_ref()
            .ok_or_else(|| "the source cannot be asked again".to_string())?;
        let deadline = deadline.unwrap_or_else(|| Instant::now() + DEFAULT_FETCH_TIMEOUT);
        if deadline <= Instant::now() {
            return Err("the deadline passed before the source was asked".into());
        }
        let fetched = fetcher.fetch(deadline)?;
        if fetched.expires.is_some_and(|e| e <= SystemTime::now()) {
            return Err("the source gave credentials that have already expired".into());
        }
        Ok(fetched)
    }

    /// The credentials held now, without fetching (tests).
    #[cfg(test)]
    pub(crate) fn current(&self) -> Option<Credentials> {
        self.lock().as_ref().map(|s| s.credentials.clone())
    }
}

/// The credentials chain over the process environment. See the
/// [module docs](self).
///
/// # Errors
///
/// As [`chain_with_env`].
pub fn chain() -> Result<CredentialsProvider, CredentialsError> {
    chain_with_env(&|name| std::env::var(name).ok())
}

/// The credentials chain, reading variables through `env` (`HOME` locates
/// `~/.aws`). The first source found is asked for credentials at once, so
/// a misconfigured source fails here.
///
/// # Errors
///
/// [`CredentialsError::NotFound`] when no source is configured;
/// [`CredentialsError::Unsupported`] naming a profile key this crate does
/// not support; [`CredentialsError::Source`] when the first source found
/// is unusable or fails.
pub fn chain_with_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<CredentialsProvider, CredentialsError> {
    let profile = profile::Profile::load(env).map_err(|why| CredentialsError::Source {
        source: Source::Profile {
            name: profile::Profile::selected_name(env),
        },
        why,
    })?;
    chain_with_profile(env, &profile)
}

/// [`chain_with_env`] with the profile already read.
pub(crate) fn chain_with_profile(
    env: &dyn Fn(&str) -> Option<String>,
    profile: &profile::Profile,
) -> Result<CredentialsProvider, CredentialsError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let mut tried = Vec::new();

    // 1. The environment.
    if let Some(access_key) = var("AWS_ACCESS_KEY_ID") {
        let Some(secret) = var("AWS_SECRET_ACCESS_KEY") else {
            return Err(CredentialsError::Source {
                source: Source::Environment,
                why: "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set it \
                      beside AWS_ACCESS_KEY_ID"
                    .into(),
            });
        };
        let mut credentials = Credentials::new(access_key, secret);
        if let Some(token) = var("AWS_SESSION_TOKEN") {
            credentials = credentials.with_session_token(token);
        }
        let mut provider = CredentialsProvider::fixed(credentials);
        provider.source = Source::Environment;
        return Ok(provider);
    }
    tried.push("AWS_ACCESS_KEY_ID is not set".to_string());

    // 2. The shared files.
    match profile.credentials()? {
        Some(provider) => return prime(provider),
        None => tried.push(profile.why_not_configured()),
    }

    // 3. Web identity.
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| profile.get("region").map(str::to_string));
    match web_identity::provider(env, region.as_deref()) {
        Ok(Some(provider)) => return prime(provider),
        Ok(None) => tried.push("no AWS_WEB_IDENTITY_TOKEN_FILE".into()),
        Err((source, why)) => return Err(CredentialsError::Source { source, why }),
    }

    // 4. Container credentials.
    match container::provider(env) {
        Ok(Some(provider)) => return prime(provider),
        Ok(None) => tried.push("no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI".into()),
        Err(why) => {
            return Err(CredentialsError::Source {
                source: Source::Container,
                why,
            })
        }
    }

    // 5. Instance metadata: asked, since only asking tells whether it is
    // there.
    match imds::provider(env) {
        None => tried.push("AWS_EC2_METADATA_DISABLED is true".into()),
        Some(provider) => match provider.credentials(Some(Instant::now() + IMDS_PROBE)) {
            Ok(_) => return Ok(provider),
            Err(e) => tried.push(format!("EC2 instance metadata: {e}")),
        },
    }

    Err(CredentialsError::NotFound {
        tried: tried.join("; "),
    })
}

/// Ask `provider` for its first credentials, so a misconfigured source
/// fails when the store is opened.
fn prime(provider: CredentialsProvider) -> Result<CredentialsProvider, CredentialsError> {
    provider.credentials(None)?;
    Ok(provider)
}

impl CredentialsProvider {
    pub(crate) fn with_source(mut self, source: Source) -> Self {
        self.source = source;
        self
    }
}

#[cfg(test)]
pub(crate) mod tests;
