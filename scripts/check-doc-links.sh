#!/usr/bin/env bash
# No page of the rendered docs shows a link rustdoc could not resolve.
#
# `RUSTDOCFLAGS="-D warnings"` catches a broken link in the crate being
# documented, but not one in docs that rustdoc renders again on another
# crate's pages: the facade `bucket-lease` inlines every item of the core
# (`pub use bucket_lease_core::*`) and resolves the core's links once more,
# from the core's compiled metadata, where an import under `#[cfg(doc)]`
# does not exist. Such a link is left on the facade's page as raw text,
# `[<code>Contender::watch</code>]`, and nothing warns. So this builds the
# docs as a user and docs.rs get them and reads the HTML of every page:
#
# - each published crate alone, with its default features and with all,
#   none of its dependencies' docs beside it (`cargo doc --no-deps -p`);
# - the workspace with every feature (what CI builds).
#
# A page fails on an unresolved link's text (`[` `backticked text` `]`,
# rendered `[<code>…</code>]`) or on a link whose target is a Rust path
# (`href="…::…"`, what an unresolved `[text](path)` becomes). Code blocks
# are not read. Nor are the pages' "Blanket Implementations": those are the
# docs of other crates' traits implemented for every type (tracing's
# `Instrument` and `WithSubscriber`, through aws-sigv4), which this
# workspace cannot change.
#
# It also checks the rule for example paths (docs/ARCHITECTURE.md, "The
# docs"): no example in the core's or the backends' docs shows
# `bucket_lease_core::` or `bucket_lease_backends::` (hidden `# ` lines may).
#
# usage: bash scripts/check-doc-links.sh
set -euo pipefail
cd "$(dirname "$0")/.."

doc=target/doc
status=0

# check DIR...: the rendered pages under each crate's folder of target/doc.
check() {
  python3 - "$@" <<'EOF' || status=1
import html
import pathlib
import re
import sys

RAW = re.compile(r"\[<code>(.*?)</code>\]", re.S)
PATH_HREF = re.compile(r'<a[^>]*href="([^"#]*::[^"]*)"')
PRE = re.compile(r"<pre\b.*?</pre>", re.S)
TAG = re.compile(r"<[^>]+>")

failures = 0
pages = 0
for folder in sys.argv[1:]:
    for page in sorted(pathlib.Path(folder).rglob("*.html")):
        pages += 1
        text = page.read_text(encoding="utf-8", errors="replace")
        # Other crates' blanket impls come last on a page.
        text = text.split('id="blanket-implementations"', 1)[0]
        text = PRE.sub("", text)
        found = [html.unescape(TAG.sub("", m.group(0))) for m in RAW.finditer(text)]
        found += ["link to " + html.unescape(m.group(1)) for m in PATH_HREF.finditer(text)]
        for item in dict.fromkeys(found):
            print(f"{page}: unresolved link: {item}")
            failures += 1
print(f"{pages} pages read under {', '.join(sys.argv[1:])}: {failures} unresolved links",
      file=sys.stderr)
sys.exit(1 if failures else 0)
EOF
}

echo "== example paths" >&2
python3 - <<'EOF' || status=1
import pathlib
import re
import sys

FENCE = re.compile(r"^\s*(?:///|//!) ?```+(.*)$")
DOC = re.compile(r"^\s*(?:///|//!) ?(.*)$")
# A fence's words that still mean Rust (anything else, `text`, `toml`, is not).
RUST = re.compile(r"^(rust|no_run|should_panic|compile_fail|ignore|edition\d+|E\d+)?$")
failed = False
for root in ("lease/src", "backends/src"):
    for path in sorted(pathlib.Path(root).rglob("*.rs")):
        in_block = in_code = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            fence = FENCE.match(line)
            if fence:
                words = re.split(r"[\s,]+", fence.group(1).strip())
                in_block, in_code = not in_block, not in_block and all(map(RUST.match, words))
                continue
            doc = DOC.match(line)
            if not (in_code and doc):
                continue
            text = doc.group(1)
            if text.startswith("# ") or text == "#":
                continue
            if re.search(r"\bbucket_lease_(core|backends)\b", text):
                failed = True
                print(f"{path}:{number}: an example shows a path users of bucket-lease cannot write: {text.strip()}")
sys.exit(1 if failed else 0)
EOF

# fresh DIR...: no pages left in target/doc from an earlier build.
fresh() {
  local dir
  for dir in "$@"; do rm -rf "${doc:?}/$dir"; done
}

# Each build starts from no pages at all, as in a fresh checkout: a crate
# whose dependency's docs are not beside it must still link to them (on
# docs.rs, through `html_root_url`), and cargo renders a crate again when
# its folder is gone.
crates=(bucket_lease bucket_lease_core bucket_lease_backends bucket_lease_sim)
for crate in bucket-lease-core bucket-lease-backends bucket-lease; do
  dir=${crate//-/_}
  for features in "" --all-features; do
    echo "== $crate ${features:-(default features)}" >&2
    fresh "${crates[@]}"
    # shellcheck disable=SC2086 # empty or one flag
    cargo doc --no-deps -p "$crate" $features
    check "$doc/$dir"
  done
done

# Last, so that target/doc holds every crate's pages afterwards.
echo "== the workspace, every feature" >&2
fresh "${crates[@]}"
cargo doc --workspace --all-features --no-deps
check "${crates[@]/#/$doc/}"

# html_root_url names the docs.rs version of what is released: `0.1` for
# every 0.1.x (`1` from 1.0 on).
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
case $version in
  0.*) series=$(echo "$version" | cut -d. -f1,2) ;;
  *) series=$(echo "$version" | cut -d. -f1) ;;
esac
for pair in lease:bucket-lease-core backends:bucket-lease-backends; do
  root="https://docs.rs/${pair#*:}/$series"
  if ! grep -qF "#![doc(html_root_url = \"$root\")]" "${pair%%:*}/src/lib.rs"; then
    echo "${pair%%:*}/src/lib.rs: html_root_url is not $root (version $version)" >&2
    status=1
  fi
done

if [ "$status" -ne 0 ]; then
  echo "doc links: see above. An unresolved link on the facade's pages: write" \
    "the link's full path (\`crate::…\`), not an import under #[cfg(doc)]" >&2
fi
exit "$status"
