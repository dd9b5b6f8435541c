#!/usr/bin/env python3
"""Memory soak (issue 29, "flat memory"): a `svcos sim` mines for `--minutes`, and every minute
each of its processes' PSS and anonymous PSS is read from /proc/<pid>/smaps_rollup while one
status request per minute keeps the gateway, auth and the tuner answering. At the end a Markdown
table gives, per process, its PSS at `--warmup` minutes and the most it grew after that; the
target is at most 256 KB. Measures and prints; asserts nothing. Method and results:
docs/PERFORMANCE.md ("Memory over an hour").

Usage: cargo build --release -p svcos
       python3 bench/memsoak.py [--minutes 60] [--warmup 10] [--jsonl soak.jsonl]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
os.environ.setdefault("SVCOS_BIN", str(ROOT / "target" / "release" / "svcos"))

from conftest import http, login, start_sim, stop_sim  # noqa: E402

LIMIT_KB = 256


def rollup(pid):
    """(PSS, anonymous PSS) in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            fields[parts[0][:-1]] = int(parts[1])
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0)


def stack_processes(tag):
    """Every process whose command line names the sim's folder, by process name. A restarted
    process keeps its name, so a restart shows as a jump, not a new row."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not any(tag.encode() in a for a in argv):
                continue
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            out[name] = rollup(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--jsonl", help="also write each minute's sample here")
    a = ap.parse_args()
    samples = []
    sink = open(a.jsonl, "w") if a.jsonl else None
    with tempfile.TemporaryDirectory() as d:
        sim = start_sim(Path(d))
        try:
            token = login(sim)
            t0 = time.time()
            for minute in range(a.minutes + 1):
                if http("GET", f"{sim.api_url}/api/status", token)[0] == 401:
                    token = login(sim)  # the session outlived its lifetime
                row = {"minute": minute, "procs": stack_processes(d)}
                samples.append(row)
                line = json.dumps(row)
                print(line, flush=True)
                if sink:
                    print(line, file=sink, flush=True)
                if minute < a.minutes:
                    time.sleep(max(0.0, t0 + 60 * (minute + 1) - time.time()))
        finally:
            stop_sim(sim)
    report(samples, a.warmup)


def report(samples, warmup):
    base = next((s for s in samples if s["minute"] >= warmup), samples[-1])
    later = [s for s in samples if s["minute"] >= base["minute"]]
    print(
        f"\n| Process | PSS at {base['minute']} min | PSS at end | Most growth after {base['minute']} min "
        f"| Anonymous PSS at {base['minute']} min / end | ≤ {LIMIT_KB} KB |"
    )
    print("|---|---|---|---|---|---|")
    for name in sorted(base["procs"]):
        pss0, anon0 = base["procs"][name]
        seen = [s["procs"][name] for s in later if name in s["procs"]]
        grew = max(p for p, _ in seen) - pss0
        end_pss, end_anon = seen[-1]
        verdict = "yes" if grew <= LIMIT_KB else "**no**"
        print(f"| {name} | {pss0} KB | {end_pss} KB | {grew} KB | {anon0} / {end_anon} KB | {verdict} |")


if __name__ == "__main__":
    main()
