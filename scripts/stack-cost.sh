#!/usr/bin/env bash
# The cost of the stack, as Markdown tables: the stripped release command
# (the release profile strips symbols) plain and static, and the number of
# distinct crates each pulls in, with the 2.5 MiB goal met or missed; then
# the command crate by crate (scripts/crate-sizes.py on the same build with
# its symbols); then a library program (examples/wait_for_lease) built with
# each store feature, so the next addition's cost in bytes is visible.
#
# usage: bash scripts/stack-cost.sh
#
# Crates are counted as distinct name-and-version pairs in
# `cargo tree -p bucket-lease -e normal --target x86_64-unknown-linux-gnu`
# (normal dependencies only: no build or dev dependencies, no crate for
# another platform), the three crates of this workspace included.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
dir="${CARGO_TARGET_DIR:-target}"
crates() {
  cargo tree -q -p bucket-lease -e normal --target "$target" --features "$1" \
    --prefix none --format '{p}' | sed -e 's/ (.*//' | sort -u | wc -l
}
echo "| features | stripped command | distinct crates |"
echo "|---|---|---|"
# `cli` builds the command with every store (fs, s3, r2, minio). Without
# --target: target/release, apart from the static build's
# target/$target/release (a flag change would rebuild everything).
cargo build -q --release --features cli
size=$(stat -c %s "$dir/release/bucket-lease")
command_size=$size
printf '| `cli` | %s bytes (%.2f MB) | %s |\n' "$size" \
  "$(awk "BEGIN { print $size / 1000000 }")" "$(crates cli)"
static="$dir/$target/release/bucket-lease"
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build -q --release --features cli --target "$target"
size=$(stat -c %s "$static")
printf '| `cli`, static (`+crt-static`) | %s bytes (%.2f MB) | %s |\n' "$size" \
  "$(awk "BEGIN { print $size / 1000000 }")" "$(crates cli)"
for features in fs s3; do
  printf '| library only, `%s` (no command) | - | %s |\n' "$features" "$(crates "$features")"
done

goal=2621440
if [ "$command_size" -le "$goal" ]; then
  echo
  echo "Goal, the command (\`cli\`) at most 2.5 MiB ($goal bytes): met, $((goal - command_size)) bytes to spare."
else
  echo
  echo "Goal, the command (\`cli\`) at most 2.5 MiB ($goal bytes): **missed** by $((command_size - goal)) bytes."
fi

echo
echo "The command (\`cli\`), crate by crate: the same build with its symbols"
echo "(\`CARGO_PROFILE_RELEASE_STRIP=none\`), read by \`scripts/crate-sizes.py\`:"
echo
CARGO_TARGET_DIR="$dir/with-symbols" CARGO_PROFILE_RELEASE_STRIP=none \
  cargo build -q --release --features cli
python3 scripts/crate-sizes.py "$dir/with-symbols/release/bucket-lease" "$command_size"

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
