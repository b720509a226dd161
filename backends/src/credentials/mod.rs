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
//! A [`CredentialsProvider`] holds what its source last gave, and never
//! puts its source on a request's path while it holds valid credentials:
//!
//! - **Refresh ahead, in the background.** A provider whose source can be
//!   asked again has one thread of its own (`credentials-refresh`, started
//!   at its first fetch) that fetches again once the current credentials
//!   are within the refresh window of their expiry
//!   ([`DEFAULT_REFRESH_WINDOW`]; it looks at the clock at least every
//!   minute, so a step of the wall clock is noticed). A failed fetch is
//!   tried again after a pause growing from 1 s to 30 s; the current
//!   credentials stay in use while they are valid. The thread ends when
//!   the provider is dropped (after a fetch in flight returns).
//! - **Valid credentials at once.** A caller whose credentials are valid,
//!   even inside the window, gets them without waiting for anything.
//! - **Bounded waits.** A caller with nothing valid (before the first
//!   fetch, or once the credentials have expired) asks the thread for a
//!   fetch and waits for it, at most until its own deadline (without one,
//!   [`DEFAULT_FETCH_TIMEOUT`] from the call); a failure of that fetch
//!   ends its wait at once. Each fetch is bounded by its own timeout
//!   ([`DEFAULT_FETCH_TIMEOUT`]), whoever waits for it.
//! - **Warned once.** A source that starts failing after it gave
//!   credentials is named, with the reason, in one warning through `log`,
//!   not one per request or per attempt; its recovery is noted once
//!   (`info`). Once the credentials have expired, the error names the
//!   source.
//!
//! [`CredentialsProvider::source`] says where the credentials came from,
//! never what they are: no secret key, session token or web-identity
//! token appears in `Debug`, `Display`, logs or errors.

mod container;
mod imds;
mod process;
pub use process::with_running_groups;
pub(crate) mod profile;
mod remote;
mod web_identity;

use crate::sign::Credentials;
use bucket_lease_core::mutant::StoreMutant;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// How long before their expiry temporary credentials are fetched again.
pub const DEFAULT_REFRESH_WINDOW: Duration = Duration::from_secs(5 * 60);

/// How long the chain waits for instance metadata before deciding there is
/// none.
const IMDS_PROBE: Duration = Duration::from_secs(5);

/// The longest one fetch from a source may take, and the longest a caller
/// with nothing valid and no deadline of its own waits for one.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

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
/// why", tells the whole story (it has no `source()`), and never contains a
/// secret.
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

    /// End a fetch in flight at once, for a provider being dropped (the
    /// process may be about to exit, leaving nobody to end it). The
    /// default does nothing: a request on the network ends with the
    /// process.
    fn cancel(&self) {}
}

/// The longest the refresher sleeps before looking at the clock again.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// The pause after the first fetch of a streak that failed (or gave
/// credentials already due); it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between fetches of a streak that keep failing.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Credentials from one source, refreshed before they expire. See the
/// [module docs](self).
pub struct CredentialsProvider {
    /// The same as `inner`'s (kept here to lend it out).
    source: Source,
    inner: Arc<Inner>,
}

/// What the provider shares with its refresher thread. The thread holds
/// only this, so dropping the provider can end it.
struct Inner {
    fetcher: Option<Box<dyn Fetch>>,
    state: Mutex<State>,
    /// Signalled on every change of `state`: a fetch asked for or
    /// finished, the window changed, the provider dropped.
    changed: Condvar,
}

/// The provider's state, locked only to read or change it (never across
/// a fetch).
struct State {
    source: Source,
    window: Duration,
    /// What the source last gave.
    current: Option<Fetched>,
    /// The service refused `current` ([`CredentialsProvider::refresh_now`]):
    /// due at once, though still handed out until they expire.
    refused: bool,
    /// A caller waits for a fetch: start one now, pause or not.
    wanted: bool,
    /// A fetch is in flight.
    fetching: bool,
    /// Fetches finished, and those that gave credentials.
    finished: u64,
    succeeded: u64,
    /// Fetches in a row that failed or gave credentials already due; the
    /// next is not started before `retry_at`.
    streak: u32,
    retry_at: Option<Instant>,
    /// The last failure, while the source keeps failing; whether that
    /// was warned about.
    failure: Option<String>,
    warned: bool,
    /// Whether the refresher thread has been started.
    started: bool,
    /// The provider was dropped: the refresher ends.
    closed: bool,
}

/// The pause after the `streak`-th fetch in a row that failed or gave
/// credentials already due: 1 s, doubling, at most [`MAX_PAUSE`].
fn pause(streak: u32) -> Duration {
    bucket_lease_core::clock::doubling_pause(FIRST_PAUSE, streak, MAX_PAUSE)
}

/// What the refresher does next.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Fetch now.
    Fetch,
    /// Sleep this long (or until woken), then decide again.
    Sleep(Duration),
    /// End: the provider was dropped.
    End,
}

/// A line for the log, written once the state is unlocked.
enum Note {
    Failing(String),
    Recovered(String),
}

impl State {
    fn new(source: Source, current: Option<Fetched>) -> Self {
        State {
            source,
            window: DEFAULT_REFRESH_WINDOW,
            current,
            refused: false,
            wanted: false,
            fetching: false,
            finished: 0,
            succeeded: 0,
            streak: 0,
            retry_at: None,
            failure: None,
            warned: false,
            started: false,
            closed: false,
        }
    }

    /// The current credentials, if they have not expired at `wall`.
    fn valid(&self, wall: SystemTime) -> Option<&Fetched> {
        self.current
            .as_ref()
            .filter(|c| c.expires.is_none_or(|e| wall < e))
    }

    /// How long until the current credentials are due for a refresh at
    /// `wall` (zero: due now); `None` when they never are.
    fn due_in(&self, wall: SystemTime) -> Option<Duration> {
        match &self.current {
            None => Some(Duration::ZERO),
            Some(_) if self.refused => Some(Duration::ZERO),
            Some(current) => current.expires.map(|expires| {
                expires
                    .checked_sub(self.window)
                    .and_then(|due| due.duration_since(wall).ok())
                    .unwrap_or(Duration::ZERO)
            }),
        }
    }

    /// The refresher's next step at `now` (and wall-clock `wall`).
    fn next(&self, now: Instant, wall: SystemTime) -> Next {
        if self.closed {
            return Next::End;
        }
        if self.wanted {
            return Next::Fetch;
        }
        let Some(due_in) = self.due_in(wall) else {
            return Next::Sleep(MAX_SLEEP);
        };
        let paused = self
            .retry_at
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        match due_in.max(paused) {
            Duration::ZERO => Next::Fetch,
            wait => Next::Sleep(wait.min(MAX_SLEEP)),
        }
    }

    /// Record the end of a fetch; what to log.
    fn finish(
        &mut self,
        fetched: Result<Fetched, String>,
        now: Instant,
        wall: SystemTime,
    ) -> Option<Note> {
        self.fetching = false;
        self.wanted = false;
        self.finished += 1;
        match fetched {
            Ok(fresh) => {
                let due_already = fresh.expires.is_some_and(|e| wall + self.window >= e);
                self.current = Some(fresh);
                self.refused = false;
                self.succeeded += 1;
                // Credentials that are due as soon as they come are not
                // asked for again at once (a window longer than their
                // life would otherwise ask without end).
                if due_already {
                    self.streak += 1;
                    self.retry_at = Some(now + pause(self.streak));
                } else {
                    self.streak = 0;
                    self.retry_at = None;
                }
                self.failure = None;
                std::mem::take(&mut self.warned).then(|| {
                    Note::Recovered(format!(
                        "credentials from {} came again after the source had been failing",
                        self.source
                    ))
                })
            }
            Err(why) => {
                self.streak += 1;
                self.retry_at = Some(now + pause(self.streak));
                let first = self.failure.replace(why).is_none();
                // A failure before any credentials came is the error of
                // whoever asks; once they have, a streak is told once. A
                // fetch that failed because the provider was dropped (its
                // program killed: the process is ending) is no news.
                if !first || self.succeeded == 0 || self.closed {
                    return None;
                }
                self.warned = true;
                Some(Note::Failing(self.failing(wall)))
            }
        }
    }

    /// The warning for the first failure of a streak.
    fn failing(&self, wall: SystemTime) -> String {
        let source = &self.source;
        let why = self.failure.as_deref().unwrap_or_default();
        let again = format!(
            "it is tried again in the background, first in {} s",
            pause(self.streak).as_secs()
        );
        match self.valid(wall).map(|c| c.expires) {
            Some(Some(expires)) => format!(
                "refreshing credentials from {source} failed; the current ones stay in use \
                 until they expire (in {} s), and {again}: {why}",
                expires.duration_since(wall).unwrap_or_default().as_secs()
            ),
            Some(None) => format!(
                "refreshing credentials from {source} failed; the current ones stay in use, \
                 and {again}: {why}"
            ),
            None => format!("getting credentials from {source} failed; {again}: {why}"),
        }
    }

    /// The error for a caller with nothing valid, given why.
    fn error(&self, why: String) -> CredentialsError {
        match self.current {
            Some(_) => CredentialsError::Expired {
                source: self.source.clone(),
                why,
            },
            None => CredentialsError::Source {
                source: self.source.clone(),
                why,
            },
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_timeout<'a>(
        &self,
        state: MutexGuard<'a, State>,
        wait: Duration,
    ) -> MutexGuard<'a, State> {
        match self.changed.wait_timeout(state, wait) {
            Ok((state, _)) => state,
            Err(e) => e.into_inner().0,
        }
    }

    /// Start the refresher thread unless it runs.
    fn start_refresher(self: &Arc<Self>, state: &mut State) -> Result<(), String> {
        if state.started || self.fetcher.is_none() {
            return Ok(());
        }
        let inner = Arc::clone(self);
        std::thread::Builder::new()
            .name("credentials-refresh".into())
            .spawn(move || inner.refresh())
            .map_err(|e| format!("cannot start the thread that refreshes credentials: {e}"))?;
        state.started = true;
        Ok(())
    }

    /// The refresher thread's life: fetch when due or asked, else sleep.
    fn refresh(&self) {
        let Some(fetcher) = &self.fetcher else {
            return;
        };
        let mut state = self.lock();
        loop {
            match state.next(Instant::now(), SystemTime::now()) {
                Next::End => return,
                Next::Sleep(wait) => state = self.wait_timeout(state, wait),
                Next::Fetch => {
                    state.fetching = true;
                    drop(state);
                    let fetched = fetch(fetcher.as_ref());
                    state = self.lock();
                    let note = state.finish(fetched, Instant::now(), SystemTime::now());
                    self.changed.notify_all();
                    if let Some(note) = note {
                        drop(state);
                        match note {
                            Note::Failing(line) => log::warn!("{line}"),
                            Note::Recovered(line) => log::info!("{line}"),
                        }
                        state = self.lock();
                    }
                }
            }
        }
    }
}

/// One fetch from `fetcher`, bounded by [`DEFAULT_FETCH_TIMEOUT`].
fn fetch(fetcher: &dyn Fetch) -> Result<Fetched, String> {
    let deadline = Instant::now() + DEFAULT_FETCH_TIMEOUT;
    let fetched =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fetcher.fetch(deadline)))
            .map_err(|_| "the source's code panicked".to_string())??;
    if fetched.expires.is_some_and(|e| e <= SystemTime::now()) {
        return Err("the source gave credentials that have already expired".into());
    }
    Ok(fetched)
}

impl fmt::Debug for CredentialsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("CredentialsProvider")
            .field("source", &self.source)
            .field(
                "credentials",
                &state.current.as_ref().map(|s| &s.credentials),
            )
            .field("expires", &state.current.as_ref().and_then(|s| s.expires))
            .field("refresh_window", &state.window)
            .finish()
    }
}

impl Drop for CredentialsProvider {
    fn drop(&mut self) {
        let fetching = {
            let mut state = self.inner.lock();
            state.closed = true;
            state.fetching
        };
        self.inner.changed.notify_all();
        // A program run for a fetch would outlive a process that exits now.
        if let (true, Some(fetcher)) = (fetching, &self.inner.fetcher) {
            fetcher.cancel();
        }
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

    fn with_state(
        source: Source,
        fetcher: Option<Box<dyn Fetch>>,
        current: Option<Fetched>,
    ) -> Self {
        CredentialsProvider {
            source: source.clone(),
            inner: Arc::new(Inner {
                fetcher,
                state: Mutex::new(State::new(source, current)),
                changed: Condvar::new(),
            }),
        }
    }

    /// A provider that asks `fetcher` for its first credentials on first
    /// use.
    pub(crate) fn fetching(source: Source, fetcher: Box<dyn Fetch>) -> Self {
        Self::with_state(source, Some(fetcher), None)
    }

    /// Fetch temporary credentials again once they are within `window` of
    /// their expiry (default [`DEFAULT_REFRESH_WINDOW`]).
    pub fn refresh_window(self, window: Duration) -> Self {
        self.inner.lock().window = window;
        self.inner.changed.notify_all();
        self
    }

    /// Where the credentials come from (for `inspect -v`; never a value).
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// When the current credentials expire: `None` for credentials that do
    /// not, or before the first fetch.
    pub fn expires(&self) -> Option<SystemTime> {
        self.inner.lock().current.as_ref().and_then(|s| s.expires)
    }

    /// Whether the source can be asked again.
    pub(crate) fn refreshable(&self) -> bool {
        self.inner.fetcher.is_some()
    }

    /// The credentials to sign with now. Valid ones come at once, even
    /// within the refresh window (the refresher is woken if it has not
    /// started on them). With nothing valid, the refresher is asked for a
    /// fetch, and the call waits for it until `deadline` (`None`:
    /// [`DEFAULT_FETCH_TIMEOUT`] from now) but not past the failure of
    /// that fetch.
    ///
    /// # Errors
    ///
    /// [`CredentialsError::Source`] when there have been no credentials
    /// yet and none came by the deadline (or the fetch failed);
    /// [`CredentialsError::Expired`] when the credentials have expired
    /// and none came by the deadline (or the fetch failed). A failed
    /// refresh of still-valid credentials is one warning, not an error.
    pub fn credentials(&self, deadline: Option<Instant>) -> Result<Credentials, CredentialsError> {
        let asked = Instant::now();
        let deadline = deadline.unwrap_or(asked + DEFAULT_FETCH_TIMEOUT);
        let mut state = self.inner.lock();
        let wall = SystemTime::now();
        if let Some(credentials) = state.valid(wall).map(|c| c.credentials.clone()) {
            let untouched = !state.fetching && state.retry_at.is_none() && !state.wanted;
            if untouched && state.due_in(wall) == Some(Duration::ZERO) {
                // Due, and nothing has started on it: wake the refresher.
                if self.inner.start_refresher(&mut state).is_ok() {
                    self.inner.changed.notify_all();
                }
            }
            return Ok(credentials);
        }
        if self.inner.fetcher.is_none() {
            return Err(state.error("the source cannot be asked again".into()));
        }
        if let Err(why) = self.inner.start_refresher(&mut state) {
            return Err(state.error(why));
        }
        state.wanted = true;
        self.inner.changed.notify_all();
        let finished = state.finished;
        loop {
            if let Some(fresh) = state.valid(SystemTime::now()) {
                return Ok(fresh.credentials.clone());
            }
            if state.finished > finished {
                let why = state
                    .failure
                    .clone()
                    .unwrap_or_else(|| "the credentials fetched expired at once".into());
                return Err(state.error(why));
            }
            if StoreMutant::UnboundedRefreshWait.on() {
                // The old defect: wait for the fetch, however long.
                state = self.inner.wait_timeout(state, MAX_SLEEP);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut why = format!(
                    "none came by the deadline (the source did not answer in {} ms)",
                    asked.elapsed().as_millis()
                );
                if let Some(failure) = &state.failure {
                    why.push_str(&format!("; its last attempt failed: {failure}"));
                }
                return Err(state.error(why));
            }
            state = self.inner.wait_timeout(state, left);
        }
    }

    /// The service refused the current credentials (its token expired
    /// before we thought): mark them due now, have the refresher fetch,
    /// and wait for a fetch that ends after this call began, at most
    /// until `deadline` (`None`: [`DEFAULT_FETCH_TIMEOUT`] from now).
    /// `true` when new credentials came in time.
    pub(crate) fn refresh_now(&self, deadline: Option<Instant>) -> bool {
        if self.inner.fetcher.is_none() {
            return false;
        }
        let deadline = deadline.unwrap_or_else(|| Instant::now() + DEFAULT_FETCH_TIMEOUT);
        let mut state = self.inner.lock();
        if self.inner.start_refresher(&mut state).is_err() {
            return false;
        }
        state.refused = true;
        state.wanted = true;
        self.inner.changed.notify_all();
        let (finished, succeeded) = (state.finished, state.succeeded);
        loop {
            if state.succeeded > succeeded {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if state.finished > finished || left.is_zero() {
                return false;
            }
            state = self.inner.wait_timeout(state, left);
        }
    }

    /// The credentials held now, without fetching (tests).
    #[cfg(test)]
    pub(crate) fn current(&self) -> Option<Credentials> {
        self.inner
            .lock()
            .current
            .as_ref()
            .map(|s| s.credentials.clone())
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
        return Ok(CredentialsProvider::fixed(credentials).with_source(Source::Environment));
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
        self.inner.lock().source = source.clone();
        self.source = source;
        self
    }
}

#[cfg(test)]
pub(crate) mod tests;
