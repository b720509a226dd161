//! The `bucket-lease` command end to end against moto, through an `s3://`
//! URL and `AWS_ENDPOINT_URL`. Start the servers with
//! `scripts/test-servers.sh start` and source `.ci/tmp/servers.env`; without
//! them each test prints a note and passes, unless
//! `BUCKET_LEASE_REQUIRE_SERVERS=1`.

mod cli_common;

use cli_common::{Proxy, Target};
use std::time::{Duration, Instant};

macro_rules! on_moto {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            if let Some(target) = Target::moto(stringify!($name)) {
                cli_common::$name(&target);
            }
        }
    )*};
}

on_moto!(
    second_run_is_held_then_waits,
    killed_holder_is_taken_over_after_the_ttl,
    inspect_shows_free_and_held,
    the_holder_name_is_shown_where_the_holder_is_named,
    break_stops_the_running_holder,
    break_a_stale_holder,
    sigint_releases_and_stops_the_command,
    the_command_status_is_propagated,
    store_text_is_shown_escaped,
    inspect_survives_absurd_records,
    inspect_shows_who_released_the_lease,
    every_process_of_the_command_is_stopped_when_the_lease_is_lost,
    a_signal_to_run_stops_every_process_of_the_command,
    every_process_of_the_command_dies_with_a_killed_run,
    runs_twice_in_a_row_with_renewals,
    a_command_shorter_than_a_renewal_then_another_run,
);

#[test]
fn a_versioned_bucket_is_named_once_and_by_inspect() {
    if let Some(target) = Target::moto_versioned("versioned") {
        cli_common::a_versioned_bucket_is_named_once_and_by_inspect(&target);
    }
}

/// moto behind a [`Proxy`] the test controls.
fn moto_behind_a_proxy(test: &str) -> Option<(Target, Proxy)> {
    let target = Target::moto(test)?;
    let proxy = Proxy::start(target.endpoint().expect("moto's endpoint"));
    Some((target.through(proxy.endpoint()), proxy))
}

#[test]
fn renewals_that_hang_stop_the_command_by_the_write_deadline() {
    let Some((t, proxy)) = moto_behind_a_proxy("hang") else {
        return;
    };
    cli_common::renewals_that_hang_stop_the_command_by_the_write_deadline(&t, &mut |on| {
        proxy.black_hole(on)
    });
}

#[test]
fn every_process_of_the_command_is_dead_by_the_deadline_when_renewals_hang() {
    let Some((t, proxy)) = moto_behind_a_proxy("fenced-family") else {
        return;
    };
    cli_common::every_process_of_the_command_is_dead_by_the_deadline_when_renewals_hang(
        &t,
        &mut |on| proxy.black_hole(on),
    );
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_at_the_deadline() {
    let Some((t, proxy)) = moto_behind_a_proxy("stubborn") else {
        return;
    };
    cli_common::a_child_that_ignores_sigterm_is_killed_at_the_deadline(&t, &mut |on| {
        proxy.black_hole(on)
    });
}

/// An acquire so slow that the lease is fenced by the time it is taken
/// (each request held 1.2 s; the create and the probe, whose four writes
/// go out at once, outlast 2/3 of a 3 s TTL) never starts the command.
#[test]
fn a_lease_fenced_during_its_acquire_never_starts_the_command() {
    let Some((t, proxy)) = moto_behind_a_proxy("slow-acquire") else {
        return;
    };
    proxy.delay(Duration::from_millis(1200));
    let url = t.url("slow");
    let marker = t.path("started");
    let done = t.run([
        "run",
        "--ttl",
        "3",
        "--wait",
        "1",
        url.as_str(),
        "--",
        "sh",
        "-c",
        &format!("touch '{}'; sleep 1", marker.display()),
    ]);
    // (A command started and stopped at once may not have run `touch`.)
    assert!(
        !marker.exists() && !done.stderr.contains("the command was stopped"),
        "the command was started: {done:?}"
    );
    assert_ne!(done.code, Some(0), "{done:?}");
}

/// A bucket that does not exist fails at once with exit 78, however long
/// `--wait` is.
#[test]
fn a_missing_bucket_fails_at_once_with_78() {
    let Some(t) = Target::moto("no-bucket") else {
        return;
    };
    let endpoint = t.endpoint().expect("moto's endpoint").to_string();
    let t = Target::http("no-bucket", &endpoint, "bucket-lease-no-such-bucket");
    let started = Instant::now();
    let url = t.url("lease");
    let done = t.run(["run", "--wait", "30", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(cli_common::CONFIG), "{done:?}");
    assert!(done.stderr.contains("does not exist"), "{done:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{done:?}");
}

/// A missing bucket's message names the lease by its URL,
/// `s3://BUCKET/PREFIX/LEASE`, and says the store's answer once, for
/// `inspect` as for `run`.
#[test]
fn a_missing_bucket_is_named_by_the_lease_url_once() {
    let Some(t) = Target::moto("no-bucket-url") else {
        return;
    };
    let endpoint = t.endpoint().expect("moto's endpoint").to_string();
    let t = Target::http("no-bucket-url", &endpoint, "bucket-lease-no-such-bucket");
    let url = t.url("lease");
    for args in [
        vec!["inspect", url.as_str()],
        vec!["run", url.as_str(), "--", "true"],
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(cli_common::CONFIG), "{args:?}: {done:?}");
        let named = format!("GET {url}/LEASE: rejected (NoSuchBucket");
        assert!(named.starts_with("GET s3://bucket-lease-no-such-bucket/cli-"));
        assert_eq!(done.stderr.matches(&named).count(), 1, "{args:?}: {done:?}");
        assert_eq!(
            done.stderr.matches("does not exist").count(),
            2,
            "{args:?}: the service's message and the hint, once each: {done:?}"
        );
        assert_eq!(
            done.stderr.lines().count(),
            1,
            "{args:?}: one message: {done:?}"
        );
    }
}

#[test]
fn bench_runs_against_moto() {
    let Some(t) = Target::moto("bench") else {
        return;
    };
    let url = t.url("real");
    let done = t.run(["bench", "-q", "--iters", "3", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{done:?}");
    let json: serde_json::Value = serde_json::from_str(&done.stdout).expect("JSON");
    assert_eq!(json["iterations"], 3);
    assert_eq!(json["exclusion"], "conditional", "moto honours conditions");
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// `-v` says which source the credentials came from, and never a key.
#[test]
fn verbose_names_the_credentials_source_never_the_keys() {
    let Some(t) = Target::moto("credentials-source") else {
        return;
    };
    let url = t.url("lease");
    let done = t.run(["inspect", "-v", url.as_str()]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(
        done.stderr.contains("credentials from the environment"),
        "{done:?}"
    );
    assert!(!done.stderr.contains("test-secret"), "{done:?}");
}

/// An endpoint on 127.0.0.1 where nothing listens: every connection is
/// refused.
fn closed_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// `--endpoint-url` and `--region` win over the environment, on every
/// command that opens a store, as in the AWS CLI: with the environment's
/// endpoint refusing connections and no region set, the flags reach moto.
#[test]
fn endpoint_url_and_region_flags_win_over_the_environment() {
    let Some(t) = Target::moto("aws-flags") else {
        return;
    };
    let moto = t.endpoint().expect("moto's endpoint").to_string();
    let t = t
        .through(&closed_endpoint())
        .with_env("AWS_ENDPOINT_URL_S3", Some(&closed_endpoint()))
        .with_env("AWS_REGION", None);
    let url = t.url("lease");
    let no_region = t.run(["inspect", url.as_str()]);
    assert_eq!(no_region.code, Some(78), "{no_region:?}");
    assert!(
        no_region.stderr.contains("region is not set"),
        "{no_region:?}"
    );
    let refused = t.run(["inspect", "--region", "us-east-1", url.as_str()]);
    assert_eq!(
        refused.code,
        Some(69),
        "the environment's endpoint: {refused:?}"
    );
    let flags = ["--region", "us-east-1", "--endpoint-url", moto.as_str()];
    let mut inspect = vec!["inspect", "--json"];
    inspect.extend(flags);
    inspect.push(&url);
    let done = t.run(&inspect);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(done.stdout.contains("\"state\":\"free\""), "{done:?}");
    let mut run = vec!["run"];
    run.extend(flags);
    run.extend([url.as_str(), "--", "sh", "-c", "echo $BUCKET_LEASE_EPOCH"]);
    let done = t.run(&run);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(done.stdout.trim(), "1", "{done:?}");
    let mut bench = vec!["bench", "-q", "--iters", "1", "--renewals", "1"];
    bench.extend(flags);
    bench.push(&url);
    let done = t.run(&bench);
    assert_eq!(done.code, Some(0), "{done:?}");
    let mut brk = vec!["break", "--holder", "nobody"];
    brk.extend(flags);
    brk.push(&url);
    let done = t.run(&brk);
    assert_eq!(done.code, Some(1), "a released lease is free: {done:?}");
}

/// `--profile` picks the shared files' profile (its region, endpoint and
/// keys) over AWS_PROFILE, and as in the AWS CLI its keys win over the
/// environment's.
#[test]
fn profile_flag_picks_the_profile() {
    let Some(t) = Target::moto("aws-profile") else {
        return;
    };
    let moto = t.endpoint().expect("moto's endpoint").to_string();
    let config = t.path("config");
    let credentials = t.path("credentials");
    std::fs::write(
        &config,
        format!("[profile other]\nregion = us-east-1\nendpoint_url = {moto}\n"),
    )
    .unwrap();
    std::fs::write(
        &credentials,
        "[other]\naws_access_key_id = profile-key\naws_secret_access_key = profile-secret\n",
    )
    .unwrap();
    let t = t
        .with_env("AWS_ENDPOINT_URL", None)
        .with_env("AWS_REGION", None)
        .with_env("AWS_PROFILE", Some("missing"))
        .with_env("AWS_CONFIG_FILE", Some(&config.display().to_string()))
        .with_env(
            "AWS_SHARED_CREDENTIALS_FILE",
            Some(&credentials.display().to_string()),
        );
    let url = t.url("lease");
    let without = t.run(["inspect", url.as_str()]);
    assert_ne!(without.code, Some(0), "AWS_PROFILE=missing: {without:?}");
    let done = t.run(["inspect", "-v", "--profile", "other", url.as_str()]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(done.stderr.contains("profile \"other\""), "{done:?}");
    assert!(!done.stderr.contains("the environment"), "{done:?}");
}
