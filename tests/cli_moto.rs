//! The `bucket-lease` command end to end against moto, through an `s3://`
//! URL and `AWS_ENDPOINT_URL`. Start the servers with
//! `scripts/test-servers.sh start` and source `.ci/tmp/servers.env`; without
//! them each test prints a note and passes, unless
//! `BUCKET_LEASE_REQUIRE_SERVERS=1`.

mod cli_common;

use cli_common::Target;

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
    break_stops_the_running_holder,
    break_a_stale_holder,
    sigint_releases_and_stops_the_command,
    the_command_status_is_propagated,
);

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
