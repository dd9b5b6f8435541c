"""Turn one measured run into svcos/hot-text.txt.

Input: the linker map of a release `svcos` built with every function on a page of its own
(`-align-all-functions=12`), that binary's path as the running processes map it, and their PIDs.
A page of its text that is present in a process's page table is a function that process ran:
regenerate.sh drops the binary from the page cache and turns the disk's read-ahead off first, so
the kernel's fault-around finds no cached neighbours to map beside the page a fault asked for.

Output (stdout): one pattern per function that ran, in the order the map lists them: a v0 name
with its crates' disambiguators and back-references wildcarded (they differ between builds with
different feature sets; the rest of a v0 name spells out the instance), other names (C code) exact.
"""

import re
import struct
import sys

SECTION = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+\S+:\((\.text\.[^)]*)\)")
CRATE = re.compile(r"Cs[0-9A-Za-z]+_")
BACKREF = re.compile(r"B[0-9A-Za-z]*_")
PAGE = 4096


def pattern(section: str) -> str:
    if section.startswith(".text._R"):
        return BACKREF.sub("B*_", CRATE.sub("Cs*_", section))
    return section


def touched_addresses(binary: str, pids: list[int]) -> set[int]:
    """Virtual addresses of the text pages present in any of the processes (the executable is
    linked without PIE, so they are the link-time addresses)."""
    pages: set[int] = set()
    for pid in pids:
        for line in open(f"/proc/{pid}/maps"):
            parts = line.split()
            if len(parts) < 6 or parts[5] != binary or "x" not in parts[1]:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            with open(f"/proc/{pid}/pagemap", "rb") as f:
                f.seek(lo // PAGE * 8)
                data = f.read((hi - lo) // PAGE * 8)
            for i in range(len(data) // 8):
                (entry,) = struct.unpack_from("<Q", data, i * 8)
                if entry >> 63:
                    pages.add(lo + i * PAGE)
    return pages


def main() -> None:
    linker_map, binary, *pids = sys.argv[1:]
    pages = touched_addresses(binary, [int(p) for p in pids])
    if not pages:
        sys.exit("no text page present: wrong binary path or PIDs")
    seen: set[str] = set()
    ran = ran_bytes = total = 0
    for line in open(linker_map):
        m = SECTION.match(line)
        if not m:
            continue
        start, size, section = int(m.group(1), 16), int(m.group(2), 16), m.group(3)
        total += size
        if not any(p in pages for p in range(start // PAGE * PAGE, start + max(size, 1), PAGE)):
            continue
        ran += 1
        ran_bytes += size
        p = pattern(section)
        if p not in seen:
            seen.add(p)
            print(p)
    print(f"{len(pages)} pages present; {ran} functions ran, {ran_bytes} of {total} text bytes; "
          f"{len(seen)} patterns", file=sys.stderr)


if __name__ == "__main__":
    main()
