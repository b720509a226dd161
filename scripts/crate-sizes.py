#!/usr/bin/env python3
"""What each crate costs in a binary built with its symbols: a Markdown table.

usage: python3 scripts/crate-sizes.py BINARY [STRIPPED_SIZE]

Every function and data symbol `nm --print-size -C` lists is given to the
crate its demangled path starts with (`rustls::…` to rustls; for
`<A as B>::f`, the crate of A). Symbols without a Rust path go to one row:
C and assembly (ring's), the C library's, and tables without a name
(ring's P-256 precomputation is one). What no symbol covers (unwinding
tables, relocations, headers, string literals merged by the linker) is the
last row when STRIPPED_SIZE, the size of the same build stripped, is given.
Generic code is counted where its path puts it: `core::…` and `alloc::…`
instances made for other crates' types stay with core and alloc, so the
table shows where bytes go, not who asked for them.
"""

import collections
import re
import subprocess
import sys


def crate_of(name):
    name = name.lstrip("<&*").replace("dyn ", "").replace("mut ", "")
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    return match.group(1) if match else None


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    binary = sys.argv[1]
    listing = subprocess.run(
        ["nm", "--print-size", "--size-sort", "-C", binary],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sizes = collections.Counter()
    for line in listing.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[2] not in "tTrRdDbBvVwW":
            continue
        crate = crate_of(parts[3]) or "(no Rust path: C, assembly, unnamed tables)"
        sizes[crate] += int(parts[1], 16)
    total = sum(sizes.values())
    print("| crate | bytes | share |")
    print("|---|---|---|")
    shown = 0
    for crate, size in sizes.most_common():
        if size < 2000:
            break
        shown += size
        print(f"| {crate} | {size:,} | {100 * size / total:.1f}% |")
    rest = total - shown
    print(f"| {len(sizes) - sum(1 for s in sizes.values() if s >= 2000)} more, "
          f"under 2,000 each | {rest:,} | {100 * rest / total:.1f}% |")
    print(f"| **every symbol** | **{total:,}** | 100% |")
    if len(sys.argv) == 3:
        stripped = int(sys.argv[2])
        print(f"| in no symbol (unwinding tables, relocations, headers) | "
              f"{stripped - total:,} | |")
        print(f"| **the stripped binary** | **{stripped:,}** | |")


if __name__ == "__main__":
    main()
