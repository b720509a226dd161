#!/usr/bin/env bash
# Each store mutant (lease/src/mutant.rs, `StoreMutant`: defects below the
# Store trait, or in time the simulation does not model, such as put_new's
# hashing) must be found by the stores' and the fenced writer's own tests:
# with BUCKET_LEASE_MUTANT naming it, the test that guards it fails;
# without, it passes (the main suite runs it).
#
# usage: bash scripts/check-store-mutants.sh
# The last line is "store mutants: N found, M missed"; the exit status is
# non-zero when M > 0 or a mutant of the code has no row here.
set -euo pipefail
cd "$(dirname "$0")/.."

# mutant name | cargo test arguments | test name filter
finders=(
  "timeout-before-credentials|-p bucket-lease-backends --features minio,mutants --lib|http::tests::time_spent_on_credentials_comes_off_the_request_timeout"
  "unbounded-process-output|-p bucket-lease-backends --features minio,mutants --lib|credentials::process::tests::a_child_left_holding_the_output_does_not_hold_the_fetch"
  "unbounded-refresh-wait|-p bucket-lease-backends --features minio,mutants --lib|credentials::tests::a_caller_with_nothing_valid_waits_only_until_its_own_deadline"
  "delete-conditions-trusted|-p bucket-lease-backends --features minio,mutants --test http_canned|a_service_that_ignores_if_match_on_delete_is_sent_no_conditional_delete"
  "settled-spelling-switched|-p bucket-lease-backends --features minio,mutants --test http_canned|a_spelling_settled_while_another_threads_question_was_open_stays"
  "delete-verdict-outlives-spelling|-p bucket-lease-backends --features minio,mutants --test http_canned|the_delete_check_is_made_again_in_a_new_spelling"
  "dir-chunks-unchecked|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::a_write_whose_deadline_passes_mid_body_writes_no_further_chunk"
  "dir-lock-last-try-unchecked|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::the_lock_is_never_taken_after_the_deadline"
  "dir-rename-unchecked|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::a_write_paused_past_its_deadline_under_the_lock_publishes_nothing"
  "dir-remove-unchecked|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::a_delete_paused_past_its_deadline_under_the_lock_removes_nothing"
  "dir-folder-links-followed|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::links::a_link_on_a_keys_path_is_refused_and_nothing_outside_is_touched"
  "dir-file-links-followed|-p bucket-lease-backends --features fs,mutants --lib|fs::tests::links::a_link_at_a_keys_own_name_is_refused_and_never_read_through"
  "put-new-hashes-after-deadline|-p bucket-lease-core --features mutants --lib|fence::tests::put_new_hashes_the_body_before_it_takes_the_write_deadline"
  "turn-unsettled-on-panic|-p bucket-lease-core --features mutants --test write_interval|a_write_that_panicked_does_not_keep_its_keys_turn_forever"
  "spaced-probe-keeps-acquire-stamp|-p bucket-lease-core --features mutants --test write_interval|a_renewal_due_at_a_third_of_the_smallest_ttl_lands_before_the_fence"
  "upload-completes-unconditionally|-p bucket-lease-core --features mutants --test uploads|a_completion_over_an_earlier_object_is_refused_and_the_upload_aborted"
  "upload-settled-without-mark|-p bucket-lease-core --features mutants --test uploads|another_upload_of_ours_at_the_key_is_not_taken_for_a_lost_answer"
  "completion-reuses-part-deadline|-p bucket-lease-core --features mutants --test uploads|a_deadline_passing_while_the_last_part_is_sent_completes_nothing"
  "upload-left-open-on-drop|-p bucket-lease-core --features mutants --test uploads|an_upload_dropped_unfinished_is_aborted"
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
  IFS='|' read -r name args filter <<<"$row"
  # shellcheck disable=SC2086 # the arguments are words
  cargo build --quiet --tests $args
  # shellcheck disable=SC2086
  if BUCKET_LEASE_MUTANT="$name" cargo test --quiet $args -- --exact "$filter" >/dev/null 2>&1; then
    echo "MISSED: $name (its test $filter passed)"
    missed=$((missed + 1))
  else
    echo "found: $name (by $filter)"
    found=$((found + 1))
  fi
done
echo "store mutants: $found found, $missed missed"
[ "$missed" -eq 0 ]
