#!/usr/bin/env bash
# Each store mutant (lease/src/mutant.rs, `StoreMutant`: defects below the
# Store trait, or in time the simulation does not model, such as put_new's
# hashing) must be found by the stores' and the fenced writer's own tests:
# with BUCKET_LEASE_MUTANT naming it, the test that guards it fails;
# without, it passes (the main suite runs it). The tests are the suite's
# own build (every feature, `mutants` among them), run by nextest: a
# mutant is switched at run time, nothing is built again.
#
# usage: bash scripts/check-store-mutants.sh
# The last line is "store mutants: N found, M missed"; the exit status is
# non-zero when M > 0, when a mutant of the code has no row here, or when
# a row's filter names no test.
set -euo pipefail
cd "$(dirname "$0")/.."

# mutant name | nextest filter naming the one test that guards it
finders=(
  "timeout-before-credentials|package(bucket-lease-backends) & kind(lib) & test(=http::tests::time_spent_on_credentials_comes_off_the_request_timeout)"
  "unbounded-process-output|package(bucket-lease-backends) & kind(lib) & test(=credentials::process::tests::a_child_left_holding_the_output_does_not_hold_the_fetch)"
  "unbounded-refresh-wait|package(bucket-lease-backends) & kind(lib) & test(=credentials::tests::a_caller_with_nothing_valid_waits_only_until_its_own_deadline)"
  "delete-conditions-trusted|package(bucket-lease-backends) & binary(=http_canned) & test(=a_service_that_ignores_if_match_on_delete_is_sent_no_conditional_delete)"
  "settled-spelling-switched|package(bucket-lease-backends) & binary(=http_canned) & test(=a_spelling_settled_while_another_threads_question_was_open_stays)"
  "delete-verdict-outlives-spelling|package(bucket-lease-backends) & binary(=http_canned) & test(=the_delete_check_is_made_again_in_a_new_spelling)"
  "dir-chunks-unchecked|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::a_write_whose_deadline_passes_mid_body_writes_no_further_chunk)"
  "dir-lock-last-try-unchecked|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::the_lock_is_never_taken_after_the_deadline)"
  "dir-rename-unchecked|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::a_write_paused_past_its_deadline_under_the_lock_publishes_nothing)"
  "dir-remove-unchecked|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::a_delete_paused_past_its_deadline_under_the_lock_removes_nothing)"
  "dir-folder-links-followed|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::links::a_link_on_a_keys_path_is_refused_and_nothing_outside_is_touched)"
  "dir-file-links-followed|package(bucket-lease-backends) & kind(lib) & test(=fs::tests::links::a_link_at_a_keys_own_name_is_refused_and_never_read_through)"
  "put-new-hashes-after-deadline|package(bucket-lease-core) & kind(lib) & test(=fence::tests::put_new_hashes_the_body_before_it_takes_the_write_deadline)"
  "turn-unsettled-on-panic|package(bucket-lease-core) & binary(=write_interval) & test(=a_write_that_panicked_does_not_keep_its_keys_turn_forever)"
  "turn-taken-after-deadline|package(bucket-lease-core) & binary(=set_handles) & test(=a_spaced_completion_whose_wait_ends_after_the_deadline_publishes_nothing)"
  "spaced-probe-keeps-acquire-stamp|package(bucket-lease-core) & binary(=write_interval) & test(=a_renewal_due_at_a_third_of_the_smallest_ttl_lands_before_the_fence)"
  "upload-completes-unconditionally|package(bucket-lease-core) & binary(=uploads) & test(=a_completion_over_an_earlier_object_is_refused_and_the_upload_aborted)"
  "upload-settled-without-mark|package(bucket-lease-core) & binary(=uploads) & test(=another_upload_of_ours_at_the_key_is_not_taken_for_a_lost_answer)"
  "completion-reuses-part-deadline|package(bucket-lease-core) & binary(=uploads) & test(=a_deadline_passing_while_the_last_part_is_sent_completes_nothing)"
  "upload-left-open-on-drop|package(bucket-lease-core) & binary(=uploads) & test(=an_upload_dropped_unfinished_is_aborted)"
  "set-takes-above-share|package(bucket-lease-core) & binary(=held_set_balance) & test(=a_joiner_gets_its_share_within_three_ttl_and_only_the_excess_moves)"
  "set-gives-up-without-release|package(bucket-lease-core) & binary(=held_set_balance) & test(=a_joiner_gets_its_share_within_three_ttl_and_only_the_excess_moves)"
  "set-releases-before-writes-end|package(bucket-lease-core) & binary(=held_set_balance) & test(=a_prefix_given_up_is_handed_over_only_once_our_writes_in_flight_are_over)"
)

# Every mutant of the code has a row (names as `StoreMutant::name` gives them).
known=$(sed -n 's/.*StoreMutant::[A-Za-z]* => "\([a-z-]*\)".*/\1/p' lease/src/mutant.rs | sort)
listed=$(for row in "${finders[@]}"; do echo "${row%%|*}"; done | sort)
if [ "$known" != "$listed" ]; then
  echo "store mutants in lease/src/mutant.rs and in this script differ:" >&2
  diff <(echo "$known") <(echo "$listed") >&2 || true
  exit 1
fi

found=0
missed=0
for row in "${finders[@]}"; do
  IFS='|' read -r name filter <<<"$row"
  # nextest's exit status: 0 the test passed, 100 it failed, anything else
  # (4: no test matched the filter) an error of this script or the build.
  status=0
  BUCKET_LEASE_MUTANT="$name" cargo nextest run --workspace --all-features --cargo-quiet \
    --status-level none --final-status-level none --no-tests fail -E "$filter" \
    >/dev/null 2>&1 || status=$?
  case "$status" in
    0) echo "MISSED: $name (its test passed: $filter)"; missed=$((missed + 1)) ;;
    100) echo "found: $name (by $filter)"; found=$((found + 1)) ;;
    *) echo "store mutants: $name: nextest exited $status for $filter (no such test, or the build failed); run it by hand to see why" >&2; exit 1 ;;
  esac
done
echo "store mutants: $found found, $missed missed"
[ "$missed" -eq 0 ]
