#!/usr/bin/env bash
# The cost of the stack, as Markdown tables: the two stripped release
# programs of `--features cli` (the release profile strips symbols), the job
# command `bucket-lease` and `bucket-lease-bench` (what `bucket-lease bench`
# runs), each plain and static, and the number of distinct crates they pull
# in, with the 2.5 MiB goal of the job command met or missed; then each
# program crate by crate (scripts/crate-sizes.py on the same build with its
# symbols: the job command's own code is the `bucket_lease` row, the
# bench's `bucket_lease_bench`); then a library program
# (examples/wait_for_lease) built with each store feature, so the next
# addition's cost in bytes is visible.
#
# usage: bash scripts/stack-cost.sh
#
# Crates are counted as distinct name-and-version pairs in
# `cargo tree -p bucket-lease -e normal --target x86_64-unknown-linux-gnu`
# (normal dependencies only: no build or dev dependencies, no crate for
# another platform), the three crates of this workspace included. Both
# programs are of one package and one feature set: one count.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
dir="${CARGO_TARGET_DIR:-target}"
goal=2621440
programs=(bucket-lease bucket-lease-bench)
crates() {
  cargo tree -q -p bucket-lease -e normal --target "$target" --features "$1" \
    --prefix none --format '{p}' | sed -e 's/ (.*//' | sort -u | wc -l
}
row() { # LABEL FILE
  local size
  size=$(stat -c %s "$2")
  printf '| %s | %s bytes (%.2f MB, %.2f MiB) | %s |\n' "$1" "$size" \
    "$(awk "BEGIN { print $size / 1000000 }")" "$(awk "BEGIN { print $size / 1048576 }")" \
    "$cli_crates"
}
cli_crates=$(crates cli)
echo "| program (\`--features cli\`) | stripped | distinct crates |"
echo "|---|---|---|"
# `cli` builds both programs with every store (fs, s3, r2, minio). Without
# --target: target/release, apart from the static build's
# target/$target/release (a flag change would rebuild everything).
cargo build -q --release --features cli
for program in "${programs[@]}"; do
  row "\`$program\`" "$dir/release/$program"
done
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build -q --release --features cli --target "$target"
for program in "${programs[@]}"; do
  row "\`$program\`, static (\`+crt-static\`)" "$dir/$target/release/$program"
done
for features in fs s3; do
  printf '| library only, `%s` (no program) | - | %s |\n' "$features" "$(crates "$features")"
done

command_size=$(stat -c %s "$dir/release/bucket-lease")
echo
if [ "$command_size" -le "$goal" ]; then
  echo "Goal, the job command (\`bucket-lease\`) at most 2.5 MiB ($goal bytes): met, $((goal - command_size)) bytes to spare."
else
  echo "Goal, the job command (\`bucket-lease\`) at most 2.5 MiB ($goal bytes): **missed** by $((command_size - goal)) bytes."
fi

# The same build with its symbols, in a target directory of its own.
CARGO_TARGET_DIR="$dir/with-symbols" CARGO_PROFILE_RELEASE_STRIP=none \
  cargo build -q --release --features cli
for program in "${programs[@]}"; do
  echo
  echo "\`$program\`, crate by crate: the same build with its symbols"
  echo "(\`CARGO_PROFILE_RELEASE_STRIP=none\`), read by \`scripts/crate-sizes.py\`:"
  echo
  python3 scripts/crate-sizes.py "$dir/with-symbols/release/$program" \
    "$(stat -c %s "$dir/release/$program")"
done

echo
echo "A library program (\`examples/wait_for_lease\`, stripped) by store feature:"
echo
echo "| features | stripped program | more than \`fs\` alone | distinct crates |"
echo "|---|---|---|---|"
base=""
for features in fs fs,minio fs,s3 fs,s3,r2,minio; do
  CARGO_TARGET_DIR="$dir/by-feature" \
    cargo build -q --release --example wait_for_lease --features "$features"
  size=$(stat -c %s "$dir/by-feature/release/examples/wait_for_lease")
  base=${base:-$size}
  printf '| `%s` | %s bytes | %s bytes | %s |\n' "$features" "$size" "$((size - base))" \
    "$(crates "$features")"
done
