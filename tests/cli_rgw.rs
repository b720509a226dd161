//! The `bucket-lease` command end to end against a real Ceph RGW 16.2,
//! through a `minio://` URL and `AWS_ENDPOINT_URL`, with default settings:
//! RGW refuses a quoted `If-Match` even when the ETag is right, and every
//! run learns, in its acquire's probe, to send ETags bare. Start the
//! servers with `scripts/test-servers.sh start` and source
//! `.ci/tmp/servers.env`; without them each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`.

mod cli_common;

use cli_common::Target;

macro_rules! on_rgw {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            if let Some(target) = Target::rgw(stringify!($name)) {
                cli_common::$name(&target);
            }
        }
    )*};
}

on_rgw!(
    runs_twice_in_a_row_with_renewals,
    a_command_shorter_than_a_renewal_then_another_run,
    second_run_is_held_then_waits,
    killed_holder_is_taken_over_after_the_ttl,
    inspect_shows_free_and_held,
    inspect_shows_who_released_the_lease,
    break_stops_the_running_holder,
    break_a_stale_holder,
    sigint_releases_and_stops_the_command,
    the_command_status_is_propagated,
    every_process_of_the_command_is_stopped_when_the_lease_is_lost,
    bench_runs_and_leaves_the_lease_free,
);

/// Each run says once what it learned about the spelling, and nothing
/// worse: the warning, no error.
#[test]
fn a_run_warns_once_that_etags_go_bare() {
    let Some(t) = Target::rgw("warns-once") else {
        return;
    };
    let url = t.url("lease");
    let done = t.run(["run", "--ttl", "3", url.as_str(), "--", "sleep", "1.5"]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(
        done.stderr.matches("sent that way from now on").count(),
        1,
        "{done:?}"
    );
    assert!(!done.stderr.contains("error"), "{done:?}");
}
