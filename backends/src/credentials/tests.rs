//! The chain's order, the shared files, `credential_process` and refresh,
//! with files in a temporary directory and the environment injected.

use super::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh temporary directory.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-creds-{name}-{}-{nanos:x}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An environment of `pairs`; instance metadata is off so nothing leaves
/// the machine.
pub(crate) fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let mut map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    map.entry("AWS_EC2_METADATA_DISABLED".into())
        .or_insert_with(|| "true".into());
    move |name| map.get(name).cloned()
}

/// A home directory holding `~/.aws/config` and `~/.aws/credentials`.
pub(crate) fn home(name: &str, config: &str, credentials: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join(".aws")).unwrap();
    std::fs::write(dir.join(".aws/config"), config).unwrap();
    std::fs::write(dir.join(".aws/credentials"), credentials).unwrap();
    dir
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Every secret the tests hand out holds this.
pub(crate) const SECRET_MARK: &str = "sekrit";

/// Panics when `text` holds a secret.
pub(crate) fn assert_no_secret(text: &str) {
    assert!(!text.contains(SECRET_MARK), "a secret is shown: {text}");
}

/// Install (once) a logger that keeps every warning and note (`info`);
/// the lines logged so far, by every test (filter on a name of your own).
pub(crate) fn capture_log() -> &'static std::sync::Mutex<Vec<String>> {
    struct Keep;
    static KEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    impl log::Log for Keep {
        fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
            metadata.level() <= log::Level::Info
        }
        fn log(&self, record: &log::Record<'_>) {
            if self.enabled(record.metadata()) {
                KEPT.lock()
                    .unwrap()
                    .push(format!("{}: {}", record.level(), record.args()));
            }
        }
        fn flush(&self) {}
    }
    static KEEP: Keep = Keep;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&KEEP).expect("no other logger in these tests");
        log::set_max_level(log::LevelFilter::Info);
    });
    &KEPT
}

/// The lines logged so far that hold `mark`.
fn logged(mark: &str) -> Vec<String> {
    capture_log()
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(mark))
        .cloned()
        .collect()
}

fn key_id(provider: &CredentialsProvider) -> String {
    provider
        .credentials(None)
        .unwrap()
        .access_key_id()
        .to_string()
}

#[test]
fn environment_keys_are_the_first_source() {
    let provider = chain_with_env(&env(&[
        ("AWS_ACCESS_KEY_ID", "AKIDENV".into()),
        ("AWS_SECRET_ACCESS_KEY", format!("{SECRET_MARK}-env")),
        ("AWS_SESSION_TOKEN", format!("{SECRET_MARK}-token")),
    ]))
    .unwrap();
    assert_eq!(provider.source(), &Source::Environment);
    assert_eq!(key_id(&provider), "AKIDENV");
    assert!(provider.credentials(None).unwrap().has_session_token());
    assert_no_secret(&format!("{provider:?} {provider:#?} {}", provider.source()));

    let e = chain_with_env(&env(&[("AWS_ACCESS_KEY_ID", "AKIDENV".into())])).unwrap_err();
    assert!(
        e.to_string().contains("AWS_SECRET_ACCESS_KEY is not"),
        "{e}"
    );
}

/// Sources pair by pair: environment over profile.
#[test]
fn environment_wins_over_a_profile() {
    let home = home(
        "env-over-profile",
        "",
        &format!(
            "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = {SECRET_MARK}\n"
        ),
    );
    let provider = chain_with_env(&env(&[
        ("HOME", path(&home)),
        ("AWS_ACCESS_KEY_ID", "AKIDENV".into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_MARK.into()),
    ]))
    .unwrap();
    assert_eq!(provider.source(), &Source::Environment);
    assert_eq!(key_id(&provider), "AKIDENV");
    // Without the environment's keys, the profile.
    let provider = chain_with_env(&env(&[("HOME", path(&home))])).unwrap();
    assert_eq!(
        provider.source(),
        &Source::Profile {
            name: "default".into()
        }
    );
    assert_eq!(key_id(&provider), "AKIDFILE");
}

#[test]
fn profiles_come_from_both_files_and_the_credentials_file_wins() {
    let dir = temp_dir("files");
    let config = dir.join("my-config");
    let credentials = dir.join("my-credentials");
    std::fs::write(
        &config,
        format!(
            "[default]\nregion = us-east-1\n\n[profile dev]\nregion = eu-west-3\n\
             endpoint_url = http://127.0.0.1:9\naws_access_key_id = AKIDCONFIG\n\
             aws_secret_access_key = {SECRET_MARK}-c\n"
        ),
    )
    .unwrap();
    std::fs::write(
        &credentials,
        format!(
            "[dev]\naws_access_key_id = AKIDCREDS\naws_secret_access_key = {SECRET_MARK}-k\n\
             aws_session_token = {SECRET_MARK}-t\n"
        ),
    )
    .unwrap();
    let vars = [
        ("AWS_CONFIG_FILE", path(&config)),
        ("AWS_SHARED_CREDENTIALS_FILE", path(&credentials)),
        ("AWS_PROFILE", "dev".to_string()),
    ];
    let provider = chain_with_env(&env(&vars)).unwrap();
    assert_eq!(provider.source(), &Source::Profile { name: "dev".into() });
    assert_eq!(key_id(&provider), "AKIDCREDS");
    assert!(provider.credentials(None).unwrap().has_session_token());
    let profile = profile::Profile::load(&env(&vars)).unwrap();
    assert_eq!(profile.get("region"), Some("eu-west-3"));
    assert_eq!(profile.get("endpoint_url"), Some("http://127.0.0.1:9"));
    assert_no_secret(&format!("{provider:?} {}", provider.source()));

    // A profile named by AWS_PROFILE that no file holds is an error.
    let mut missing = vars.clone();
    missing[2].1 = "nope".into();
    let e = chain_with_env(&env(&missing)).unwrap_err().to_string();
    assert!(
        e.contains("AWS_PROFILE names it") && e.contains("\"nope\""),
        "{e}"
    );
    // `default` with only a region configures no credentials.
    let e = chain_with_env(&env(&vars[..2])).unwrap_err();
    assert!(matches!(e, CredentialsError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("has no aws_access_key_id"), "{e}");
}

#[test]
fn profiles_needing_sso_or_roles_are_refused_naming_the_key() {
    for key in [
        "role_arn = arn:aws:iam::1:role/r\nsource_profile = base",
        "sso_start_url = https://x.awsapps.com/start",
        "sso_session = corp",
        "credential_source = Ec2InstanceMetadata",
        "web_identity_token_file = /tmp/t",
    ] {
        let home = home(
            "unsupported",
            &format!("[profile p]\n{key}\n"),
            &format!("[p]\naws_access_key_id = A\naws_secret_access_key = {SECRET_MARK}\n"),
        );
        let e = chain_with_env(&env(&[("HOME", path(&home)), ("AWS_PROFILE", "p".into())]))
            .unwrap_err();
        let name = key.split(' ').next().unwrap();
        let shown = e.to_string();
        assert!(
            matches!(&e, CredentialsError::Unsupported { key, .. } if key == name)
                || (name == "role_arn" && shown.contains("source_profile")),
            "{name}: {e:?}"
        );
        assert!(shown.contains("does not support"), "{shown}");
        assert_no_secret(&format!("{e} {e:?}"));
    }
}

/// A `credential_process` that prints credentials numbered by how often
/// it ran (`AKIDPROC1`, …), expiring `lifetime_s` seconds from now; runs
/// listed in `failing` exit 1.
fn process_home(name: &str, lifetime_s: u64, failing: &[u32]) -> (PathBuf, PathBuf) {
    let cases = failing
        .iter()
        .map(|n| format!("{n}) echo \"run {n} fails\" >&2; exit 1 ;;"))
        .collect::<String>();
    process_script(name, "proc", lifetime_s, &cases)
}

/// [`process_home`], where the runs in `slow` take 2 s.
fn process_home_slow(
    name: &str,
    lifetime_s: u64,
    failing: &[u32],
    slow: &[u32],
) -> (PathBuf, PathBuf) {
    let mut cases = failing
        .iter()
        .map(|n| format!("{n}) echo \"run {n} fails\" >&2; exit 1 ;;"))
        .collect::<String>();
    cases.extend(slow.iter().map(|n| format!("{n}) sleep 2 ;;")));
    process_script(name, "proc", lifetime_s, &cases)
}

/// A home whose profile `profile` has a `credential_process` printing
/// credentials numbered by its run (`AKIDPROC1`, …) that expire
/// `lifetime_s` seconds later; `cases` are `case` arms on the run's
/// number (`2) sleep 3 ;;`, `3|4) exit 1 ;;`) run first. The home and
/// the file counting the runs.
fn process_script(name: &str, profile: &str, lifetime_s: u64, cases: &str) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let counter = dir.join("runs");
    let script = dir.join("creds.sh");
    std::fs::write(
        &script,
        format!(
            r#"n=$(( $(cat '{c}' 2>/dev/null || echo 0) + 1 )); echo $n > '{c}'
case $n in {cases} esac
exp=$(date -u -d "+{lifetime_s} seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{{"Version": 1, "AccessKeyId": "AKIDPROC%s", "SecretAccessKey": "{SECRET_MARK}-%s", "SessionToken": "{SECRET_MARK}-t%s", "Expiration": "%s"}}' $n $n $n $exp
"#,
            c = counter.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join(".aws")).unwrap();
    std::fs::write(
        dir.join(".aws/config"),
        format!(
            "[profile {profile}]\ncredential_process = sh '{}'\n",
            script.display()
        ),
    )
    .unwrap();
    (dir, counter)
}

/// The provider of `home`'s profile `profile`, not yet asked for anything.
fn unprimed(home: &Path, profile: &str) -> CredentialsProvider {
    profile::Profile::load(&env(&[
        ("HOME", path(home)),
        ("AWS_PROFILE", profile.into()),
    ]))
    .unwrap()
    .credentials()
    .unwrap()
    .unwrap()
}

/// The provider of `home`'s profile `profile`, from the chain (which has
/// asked it once).
fn primed(home: &Path, profile: &str) -> CredentialsProvider {
    chain_with_env(&env(&[
        ("HOME", path(home)),
        ("AWS_PROFILE", profile.into()),
    ]))
    .unwrap()
}

fn runs(counter: &Path) -> u32 {
    std::fs::read_to_string(counter)
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(0)
}

/// Poll `done` every 20 ms until it holds; panics naming `what` after
/// `limit`.
fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn credential_process_is_run_and_refreshed_before_its_expiration() {
    let (home, counter) = process_home("process", 6, &[]);
    let provider = chain_with_env(&env(&[
        ("HOME", path(&home)),
        ("AWS_PROFILE", "proc".into()),
    ]))
    .unwrap()
    .refresh_window(Duration::from_secs(2));
    assert_eq!(
        provider.source(),
        &Source::Process {
            profile: "proc".into()
        }
    );
    // Run once when the chain is built; not again while fresh.
    assert_eq!(key_id(&provider), "AKIDPROC1");
    assert_eq!(key_id(&provider), "AKIDPROC1");
    assert_eq!(runs(&counter), 1);
    let expires = provider.expires().expect("temporary");
    // Within the window (2 s before the 6 s expiry; stamps have whole
    // seconds, and 6 s leaves a slow first run outside the window), it is
    // run again in the background, and callers get the new ones before
    // the expiry.
    wait_until_due(&provider, Duration::from_secs(2));
    until("the refresh", Duration::from_secs(3), || {
        key_id(&provider) != "AKIDPROC1"
    });
    assert_eq!(key_id(&provider), "AKIDPROC2");
    assert!(SystemTime::now() < expires);
    assert!(provider.expires().unwrap() > expires);
    assert_no_secret(&format!("{provider:?}"));
}

#[test]
fn a_failed_refresh_keeps_valid_credentials_and_expired_ones_name_the_source() {
    // Runs 2 and later fail. The credentials live 6 s (stamped to the
    // second), so even a slow first run leaves them well outside the 2 s
    // refresh window.
    capture_log();
    let (home, counter) = process_script(
        "process-fails",
        "fails-later",
        6,
        "[2-9]|1[0-9]) echo \"run $n fails\" >&2; exit 1 ;;",
    );
    let provider = primed(&home, "fails-later").refresh_window(Duration::from_secs(2));
    assert_eq!(key_id(&provider), "AKIDPROC1");
    let expires = provider.expires().unwrap();
    // In the window, the refresh fails: the still-valid ones are used,
    // with a warning naming the source and no secret.
    wait_until_due(&provider, Duration::from_secs(2));
    until("the failed refresh", Duration::from_secs(2), || {
        runs(&counter) >= 2 && !logged("profile \"fails-later\"").is_empty()
    });
    assert_eq!(key_id(&provider), "AKIDPROC1");
    let warnings = logged("profile \"fails-later\"");
    assert!(
        warnings[0].contains("stay in use until they expire"),
        "{warnings:?}"
    );
    for w in &warnings {
        assert_no_secret(w);
    }
    while SystemTime::now() < expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = provider.credentials(None).unwrap_err();
    assert!(matches!(e, CredentialsError::Expired { .. }), "{e:?}");
    let shown = e.to_string();
    assert!(
        shown.contains("credential_process of profile \"fails-later\"")
            && shown.contains("have expired"),
        "{shown}"
    );
    assert_no_secret(&format!("{e} {e:?}"));
}

#[test]
fn a_failing_or_slow_credential_process_is_an_error_naming_it() {
    let home = home(
        "process-bad",
        &format!(
            "[profile fails]\ncredential_process = echo {SECRET_MARK}; exit 3\n\
             [profile garbage]\ncredential_process = echo '{SECRET_MARK} not json'\n\
             [profile slow]\ncredential_process = sleep 5\n"
        ),
        "",
    );
    for (profile, why) in [
        ("fails", "credential_process failed"),
        ("garbage", "not JSON"),
    ] {
        let e = chain_with_env(&env(&[
            ("HOME", path(&home)),
            ("AWS_PROFILE", profile.into()),
        ]))
        .unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.contains(&format!("credential_process of profile \"{profile}\""))
                && shown.contains(why),
            "{shown}"
        );
        assert_no_secret(&format!("{e} {e:?}"));
    }
    let provider = profile::Profile::load(&env(&[
        ("HOME", path(&home)),
        ("AWS_PROFILE", "slow".into()),
    ]))
    .unwrap()
    .credentials()
    .unwrap()
    .unwrap();
    let started = Instant::now();
    let e = provider
        .credentials(Some(Instant::now() + Duration::from_millis(300)))
        .unwrap_err();
    // The caller's wait ends at its deadline (the run goes on behind it,
    // bounded by its own timeout).
    assert!(e.to_string().contains("by the deadline"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited for the run"
    );
}

#[test]
fn nothing_configured_says_what_was_looked_at() {
    let e = chain_with_env(&env(&[])).unwrap_err();
    let shown = e.to_string();
    assert!(
        shown.contains("AWS_ACCESS_KEY_ID is not set")
            && shown.contains("no shared credentials or config file"),
        "{shown}"
    );
}

#[cfg(feature = "s3")]
#[test]
fn a_profile_gives_the_store_its_region_and_endpoint_and_names_its_source() {
    let home = home(
        "store",
        "[profile dev]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:9\n",
        &format!("[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = {SECRET_MARK}\n"),
    );
    let url = crate::config::StoreUrl::parse("s3://bkt/p").unwrap();
    let vars = [("HOME", path(&home)), ("AWS_PROFILE", "dev".to_string())];
    let store = crate::config::http_builder(&url, &env(&vars))
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(store.base_url(), "http://127.0.0.1:9/bkt");
    assert_eq!(
        store.credentials_source(),
        &Source::Profile { name: "dev".into() }
    );
    let debug = format!("{store:?}");
    assert!(
        debug.contains("eu-west-3") && debug.contains("AKIDDEV"),
        "{debug}"
    );
    assert_no_secret(&debug);
    // The environment's region and endpoint win over the profile's.
    let mut vars = vars.to_vec();
    vars.push(("AWS_REGION", "us-west-2".into()));
    vars.push(("AWS_ENDPOINT_URL", "http://127.0.0.1:10".into()));
    let store = crate::config::http_builder(&url, &env(&vars))
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(store.base_url(), "http://127.0.0.1:10/bkt");
    assert!(format!("{store:?}").contains("us-west-2"));
}

#[test]
fn while_the_source_is_asked_again_every_thread_signs_with_the_valid_credentials() {
    // Run 2 takes 2 s.
    let (home, _) = process_home_slow("process-slow", 4, &[], &[2]);
    let provider = Arc::new(
        chain_with_env(&env(&[
            ("HOME", path(&home)),
            ("AWS_PROFILE", "proc".into()),
        ]))
        .unwrap()
        .refresh_window(Duration::from_secs(3)),
    );
    assert_eq!(key_id(&provider), "AKIDPROC1");
    wait_until_due(&provider, Duration::from_secs(3));
    let asking: Vec<_> = (0..2)
        .map(|_| {
            let provider = provider.clone();
            std::thread::spawn(move || {
                let asked = Instant::now();
                (key_id(&provider), asked.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for thread in asking {
        let (key, took) = thread.join().unwrap();
        assert_eq!(key, "AKIDPROC1");
        assert!(
            took < Duration::from_secs(1),
            "waited {took:?} for the fetch"
        );
    }
    // Run 2's credentials may themselves be due at once (their expiry is
    // stamped to the second, 4 s after a 2 s run, inside the 3 s window),
    // so run 3 can replace them before a look sees them: any key after
    // the first shows the slow refresh landed.
    until("the slow refresh", Duration::from_secs(10), || {
        key_id(&provider) != "AKIDPROC1"
    });
}

fn wait_until_due(provider: &CredentialsProvider, window: Duration) {
    let expires = provider.expires().unwrap();
    while SystemTime::now() + window < expires {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// While one caller waits with no deadline for a slow first fetch, a
/// caller with a 300 ms deadline and nothing valid gives up at its own
/// deadline, with an error naming the source.
#[test]
fn a_caller_with_nothing_valid_waits_only_until_its_own_deadline() {
    let (home, _) = process_script("own-deadline", "own-deadline", 3600, "1) sleep 3 ;;");
    let provider = Arc::new(unprimed(&home, "own-deadline"));
    let patient = {
        let provider = provider.clone();
        std::thread::spawn(move || key_id(&provider))
    };
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    let got = provider.credentials(Some(asked + Duration::from_millis(300)));
    let took = asked.elapsed();
    // The old code waited for the other caller's fetch: about 3 s.
    assert!(took < Duration::from_millis(800), "waited {took:?}");
    let e = got.expect_err("no credentials can have come by the deadline");
    let shown = e.to_string();
    assert!(
        shown.contains("credential_process of profile \"own-deadline\"")
            && shown.contains("by the deadline"),
        "{shown}"
    );
    assert_eq!(patient.join().unwrap(), "AKIDPROC1");
    assert_no_secret(&format!("{e:?} {provider:?}"));
}

/// A caller waiting for a fetch that fails gets that failure at once, not
/// at its deadline.
#[test]
fn a_failed_fetch_ends_the_wait_of_a_caller_with_nothing_valid() {
    let (home, _) = process_script(
        "fails-while-waited",
        "fails-while-waited",
        3600,
        "1) sleep 1; exit 1 ;;",
    );
    let provider = unprimed(&home, "fails-while-waited");
    let asked = Instant::now();
    let e = provider
        .credentials(Some(asked + Duration::from_secs(20)))
        .unwrap_err();
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        matches!(e, CredentialsError::Source { .. }) && e.to_string().contains("failed"),
        "{e}"
    );
}

/// Credentials in the refresh window are valid: callers get them at once
/// while the source (slow: 2 s) is asked again behind them, and a later
/// call gets the new ones.
#[test]
fn valid_credentials_are_used_at_once_while_a_slow_refresh_runs_behind() {
    let (home, counter) = process_script("behind", "behind", 5, "2) sleep 2 ;;");
    let provider = primed(&home, "behind").refresh_window(Duration::from_secs(4));
    let first_expiry = provider.expires().unwrap();
    wait_until_due(&provider, Duration::from_secs(4));
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    let mut saw_second_run = false;
    let fresh = loop {
        let asked = Instant::now();
        let key = provider
            .credentials(Some(asked + Duration::from_millis(300)))
            .unwrap()
            .access_key_id()
            .to_string();
        slowest = slowest.max(asked.elapsed());
        saw_second_run |= runs(&counter) >= 2 && key == "AKIDPROC1";
        if key != "AKIDPROC1" {
            break key;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no refresh in the background"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The old code ran the 2 s refresh on the first caller in the window.
    assert!(
        slowest < Duration::from_millis(50),
        "a call took {slowest:?}"
    );
    assert!(saw_second_run, "the refresh was never seen running");
    assert_eq!(fresh, "AKIDPROC2");
    assert!(
        SystemTime::now() < first_expiry,
        "refreshed only after the expiry"
    );
}

/// A source that fails while valid credentials last is warned about once
/// (naming it), however many calls are made, and its recovery is noted
/// once.
#[test]
fn a_failing_source_is_warned_about_once_and_its_recovery_noted() {
    capture_log();
    let (home, counter) = process_script(
        "warn-once",
        "warn-once",
        8,
        "2|3) echo \"run $n fails\" >&2; exit 1 ;;",
    );
    let provider = primed(&home, "warn-once").refresh_window(Duration::from_secs(7));
    let started = Instant::now();
    let mut calls = 0;
    loop {
        let key = key_id(&provider);
        calls += 1;
        if key == "AKIDPROC4" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(12),
            "never recovered: {} runs",
            runs(&counter)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The refresher logs its note after it hands the new credentials out
    // (never under its lock): the note may come a moment after the key.
    let noted = Instant::now();
    let mut lines = logged("profile \"warn-once\"");
    while !lines.iter().any(|l| l.starts_with("INFO")) && noted.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
        lines = logged("profile \"warn-once\"");
    }
    let warnings: Vec<_> = lines.iter().filter(|l| l.starts_with("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{calls} calls, {lines:?}");
    assert!(warnings[0].contains("failed"), "{warnings:?}");
    let notes: Vec<_> = lines.iter().filter(|l| l.starts_with("INFO")).collect();
    assert_eq!(notes.len(), 1, "{lines:?}");
    for line in &lines {
        assert_no_secret(line);
    }
}

/// `refresh_now` waits for new credentials at most until its deadline,
/// even while another caller waits for the same slow fetch.
#[test]
fn refresh_now_is_bounded_by_its_deadline() {
    let (home, _) = process_script("refresh-now", "refresh-now", 3600, "2) sleep 3 ;;");
    let provider = Arc::new(primed(&home, "refresh-now"));
    assert_eq!(key_id(&provider), "AKIDPROC1");
    let patient = {
        let provider = provider.clone();
        std::thread::spawn(move || provider.refresh_now(None))
    };
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    let refreshed = provider.refresh_now(Some(asked + Duration::from_millis(300)));
    let took = asked.elapsed();
    // The old code waited for the other caller's 3 s fetch.
    assert!(took < Duration::from_millis(800), "waited {took:?}");
    assert!(!refreshed, "run 2 cannot have finished");
    // Meanwhile the current credentials are still handed out.
    assert_eq!(key_id(&provider), "AKIDPROC1");
    assert!(patient.join().unwrap(), "the patient caller got run 2");
    assert_eq!(key_id(&provider), "AKIDPROC2");
    assert!(provider.refresh_now(Some(Instant::now() + Duration::from_secs(10))));
    assert_eq!(key_id(&provider), "AKIDPROC3");
}

/// A source that answers at once with credentials living this long.
struct AtOnce(Duration);

impl Fetch for AtOnce {
    fn fetch(&self, _deadline: Instant) -> Result<Fetched, String> {
        Ok(Fetched {
            credentials: Credentials::new("AKIDFAKE", SECRET_MARK),
            expires: Some(SystemTime::now() + self.0),
        })
    }
}

#[test]
fn the_refresher_ends_when_its_provider_is_dropped() {
    let provider = CredentialsProvider::fetching(
        Source::Container,
        Box::new(AtOnce(Duration::from_secs(3600))),
    );
    assert_eq!(key_id(&provider), "AKIDFAKE");
    let shared = Arc::downgrade(&provider.inner);
    assert_eq!(shared.strong_count(), 2, "the provider and its refresher");
    drop(provider);
    until("the refresher's end", Duration::from_secs(2), || {
        shared.upgrade().is_none()
    });
}

/// Credentials fetched at `wall`, expiring `lifetime` later.
fn fetched(wall: SystemTime, lifetime: Duration) -> Fetched {
    Fetched {
        credentials: Credentials::new("AKIDSTATE", SECRET_MARK),
        expires: Some(wall + lifetime),
    }
}

#[test]
fn the_refresher_sleeps_until_the_window_and_never_more_than_a_minute() {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let at = |lifetime: Duration| {
        State::new(Source::Container, Some(fetched(wall, lifetime))).next(now, wall)
    };
    // The window is 5 minutes: 10 s before it, sleep 10 s; far from it,
    // a minute at most; within it, fetch.
    assert_eq!(
        at(minutes(5) + Duration::from_secs(10)),
        Next::Sleep(Duration::from_secs(10))
    );
    assert_eq!(at(minutes(60)), Next::Sleep(MAX_SLEEP));
    assert_eq!(at(minutes(4)), Next::Fetch);
    assert_eq!(at(Duration::ZERO), Next::Fetch);
    // Nothing yet, or refused by the service: fetch.
    assert_eq!(
        State::new(Source::Container, None).next(now, wall),
        Next::Fetch
    );
    let mut refused = State::new(Source::Container, Some(fetched(wall, minutes(60))));
    refused.refused = true;
    assert_eq!(refused.next(now, wall), Next::Fetch);
    // Credentials that do not expire: only look at the clock again.
    let lasting = State::new(
        Source::Container,
        Some(Fetched {
            credentials: Credentials::new("AKIDSTATE", SECRET_MARK),
            expires: None,
        }),
    );
    assert_eq!(lasting.next(now, wall), Next::Sleep(MAX_SLEEP));
    // Due but pausing after a failure: sleep out the pause, unless a
    // caller waits; dropped: end.
    let mut paused = State::new(Source::Container, Some(fetched(wall, minutes(1))));
    paused.retry_at = Some(now + Duration::from_secs(3));
    assert_eq!(paused.next(now, wall), Next::Sleep(Duration::from_secs(3)));
    paused.wanted = true;
    assert_eq!(paused.next(now, wall), Next::Fetch);
    paused.closed = true;
    assert_eq!(paused.next(now, wall), Next::End);
}

#[test]
fn failures_pause_longer_each_time_and_are_told_once() {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let hour = Duration::from_secs(3600);
    let mut state = State::new(Source::Container, None);
    // A failure before any credentials came is the asker's error, not a
    // warning.
    assert!(state.finish(Err("down".into()), now, wall).is_none());
    assert_eq!(state.retry_at, Some(now + FIRST_PAUSE));
    assert!(state.finish(Ok(fetched(wall, hour)), now, wall).is_none());
    assert_eq!((state.retry_at, state.streak), (None, 0));
    // After credentials came: the first failure of a streak is told once,
    // the pause doubles up to its cap, and the recovery is told once.
    let mut pauses = Vec::new();
    let mut notes = 0;
    for _ in 0..8 {
        if let Some(Note::Failing(line)) = state.finish(Err("down".into()), now, wall) {
            assert!(line.contains("container credentials") && line.contains("down"));
            assert!(line.contains("stay in use"), "{line}");
            notes += 1;
        }
        pauses.push(state.retry_at.unwrap() - now);
    }
    assert_eq!(notes, 1);
    let secs: Vec<u64> = pauses.iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert!(matches!(
        state.finish(Ok(fetched(wall, hour)), now, wall),
        Some(Note::Recovered(_))
    ));
    assert!(state.finish(Ok(fetched(wall, hour)), now, wall).is_none());
    // Credentials due as soon as they came are not asked for again at
    // once.
    assert!(state
        .finish(Ok(fetched(wall, Duration::from_secs(60))), now, wall)
        .is_none());
    assert_eq!(state.retry_at, Some(now + FIRST_PAUSE));
    assert_eq!(state.next(now, wall), Next::Sleep(FIRST_PAUSE));
}

/// A fetch that fails because the provider was dropped meanwhile (its
/// program cancelled, killed, as the process ends) is not told: `run`
/// said "refreshing credentials … failed … SIGKILL" on its way out.
#[test]
fn a_fetch_cancelled_by_the_providers_drop_is_not_told() {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let mut state = State::new(
        Source::Container,
        Some(fetched(wall, Duration::from_secs(60))),
    );
    state.succeeded = 1;
    state.closed = true;
    assert!(state
        .finish(
            Err("credential_process failed (signal: 9 (SIGKILL))".into()),
            now,
            wall
        )
        .is_none());
}
