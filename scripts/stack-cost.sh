#!/usr/bin/env bash
# The cost of the stack, as a Markdown table: the stripped release command
# per feature set (the release profile strips symbols), and the number of
# distinct crates each pulls in.
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
