#!/usr/bin/env python3
"""Text size per crate of an unstripped release binary (what `cargo bloat --crates` prints).

    CARGO_PROFILE_RELEASE_STRIP=false cargo build --release -p svcos --no-default-features
    bench/size/crates.py target/release/svcos [--top 40]

Symbols come from `nm --print-size --demangle=rust`; a symbol counts for the crate its path
starts with (for `<A as B>::f` and `<A>::f`, the crate of A, as cargo-bloat does). With fat LTO
and one codegen unit, generic code is attributed to the crate that defines it, not the one that
instantiated it, and `std` includes what every crate pulled from it. Symbols without a Rust
path (C code such as ring's, compiler builtins) are listed as `[C/other]`. The sum of symbol sizes
is less than the file: the rest is read-only data, relocation and unwind tables.
"""

import argparse
import collections
import os
import re
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("binary")
parser.add_argument("--top", type=int, default=40)
args = parser.parse_args()

out = subprocess.run(
    ["nm", "--print-size", "--size-sort", "--demangle=rust", args.binary],
    capture_output=True, text=True, check=True,
).stdout

sizes = collections.Counter()
sections = collections.Counter()
ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
for line in out.splitlines():
    parts = line.split(None, 3)
    if len(parts) < 4:
        continue
    size = int(parts[1], 16)
    kind, name = parts[2], parts[3]
    sections["text" if kind in "tTwW" else "data"] += size
    n = name.lstrip("<&*")
    if n.startswith("dyn "):
        n = n[4:]
    m = ident.match(n)
    if m and "::" in name:
        crate = m.group(0)
    else:
        crate = "[C/other]"
    sizes[crate] += size

total = sum(sizes.values())
file_size = os.path.getsize(args.binary)
print(f"file {file_size} bytes; symbols {total} bytes "
      f"(text {sections['text']}, data {sections['data']})")
print("| crate | bytes | % of symbols |")
print("|---|---|---|")
for crate, size in sizes.most_common(args.top):
    print(f"| {crate} | {size} | {100 * size / total:.1f} |")
