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
    process_home_slow(name, lifetime_s, failing, &[])
}

/// [`process_home`], where the runs in `slow` take 2 s.
fn process_home_slow(
    name: &str,
    lifetime_s: u64,
    failing: &[u32],
    slow: &[u32],
) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let counter = dir.join("runs");
    let failing = failing
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let slow = slow
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let script = dir.join("creds.sh");
    std::fs::write(
        &script,
        format!(
            r#"n=$(( $(cat '{c}' 2>/dev/null || echo 0) + 1 )); echo $n > '{c}'
for f in {failing}; do [ "$f" = "$n" ] && {{ echo "run $n fails" >&2; exit 1; }}; done
for s in {slow}; do [ "$s" = "$n" ] && sleep 2; done
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
            "[profile proc]\ncredential_process = sh '{}'\n",
            script.display()
        ),
    )
    .unwrap();
    (dir, counter)
}

fn runs(counter: &Path) -> u32 {
    std::fs::read_to_string(counter)
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(0)
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
    // seconds, and 6 s leaves a slow first run outside the window), the
    // next request runs it again, before the expiry.
    while SystemTime::now() + Duration::from_secs(2) < expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(key_id(&provider), "AKIDPROC2");
    assert!(SystemTime::now() < expires);
    assert!(provider.expires().unwrap() > expires);
    assert_no_secret(&format!("{provider:?}"));
}

#[test]
fn a_failed_refresh_keeps_valid_credentials_and_expired_ones_name_the_source() {
    // Runs 2 and later fail. The credentials live 6 s (stamped to the
    // second), so even a slow first run leaves them well outside the 2 s
    // refresh window: exactly one refresh is tried inside it.
    let (home, counter) = process_home("process-fails", 6, &[2, 3, 4, 5, 6, 7, 8, 9]);
    let provider = chain_with_env(&env(&[
        ("HOME", path(&home)),
        ("AWS_PROFILE", "proc".into()),
    ]))
    .unwrap()
    .refresh_window(Duration::from_secs(2));
    assert_eq!(key_id(&provider), "AKIDPROC1");
    let expires = provider.expires().unwrap();
    while SystemTime::now() + Duration::from_secs(2) < expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    // In the window, the refresh fails: the still-valid ones are used,
    // with a warning naming the source and no secret.
    let logged = capture_log();
    assert_eq!(key_id(&provider), "AKIDPROC1");
    assert_eq!(runs(&counter), 2);
    let warnings = logged.lock().unwrap().clone();
    let warning = warnings
        .iter()
        .find(|w| w.contains("credential_process of profile \"proc\""))
        .unwrap_or_else(|| panic!("no warning: {warnings:?}"));
    assert!(
        warning.contains("stay in use until they expire"),
        "{warning}"
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
        shown.contains("credential_process of profile \"proc\"") && shown.contains("have expired"),
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
    assert!(e.to_string().contains("by the deadline"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4), "not killed");
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
fn while_one_thread_refreshes_others_sign_with_the_valid_credentials() {
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
    let refreshing = {
        let provider = provider.clone();
        std::thread::spawn(move || key_id(&provider))
    };
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    assert_eq!(key_id(&provider), "AKIDPROC1");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "waited {:?} for another thread's fetch",
        asked.elapsed()
    );
    assert_eq!(refreshing.join().unwrap(), "AKIDPROC2");
    assert_eq!(key_id(&provider), "AKIDPROC2");
}

fn wait_until_due(provider: &CredentialsProvider, window: Duration) {
    let expires = provider.expires().unwrap();
    while SystemTime::now() + window < expires {
        std::thread::sleep(Duration::from_millis(20));
    }
}
