#!/usr/bin/env python3
"""Measure the `simulated` power-profile points of the Open Mining Data API: run `svcos sim`
(the simulated Antminer S9 of hw-sim), let the svcOS autotuner converge on a series of power
targets, and print one dataset row per converged point (open-data/datasets/power-profiles).

    cargo build -p svcos && SVCOS_BIN=target/debug/svcos python3 bench/open-data-tuner-points.py

The tuner runs with short settle/measurement windows (2 s / 4 s) so a point takes minutes, not
tens of minutes; everything else is the shipped configuration. The figures are what the
tuner's own measurement reports (`measured` of the tuned profile in /api/autotuner/tuned_profiles): simulated silicon, not
hardware.
"""

import json
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from conftest import PASSWORD, http, start_sim, stop_sim  # noqa: E402

# Below the S9 preset (about 1300 W): every point is an undervolt/underclock step, -1, -2, ...
TARGETS = [int(x) for x in (sys.argv[1:] or ["1100", "900"])]


def token(sim):
    http("POST", f"{sim.api_url}/api/auth/setup", body={"password": PASSWORD})
    status, _, body = http("POST", f"{sim.api_url}/api/auth/session", body={"password": PASSWORD})
    assert status == 200, body
    return body.get("token") or body.get("access_token")


def set_tuner(config: Path, target: int):
    text = config.read_text()
    values = {"enabled": "true", "mode": '"power"', "power_target_watt": f"{target}.0", "settle_s": "2", "window_s": "4"}
    head, sep, rest = text.partition("[tuner]\n")
    assert sep, "no [tuner] section in the sim config"
    body, nxt, tail = rest.partition("\n[")
    lines = [l for l in body.split("\n") if l.split("=")[0].strip() not in values]
    lines += [f"{k} = {v}" for k, v in values.items()]
    config.write_text(head + sep + "\n".join(l for l in lines if l.strip()) + "\n" + (("\n[" + tail) if nxt else ""))


def tuned(sim, tok, target, timeout=900):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        status, _, st = http("GET", f"{sim.api_url}/api/autotuner/state", token=tok)
        last = st
        if status == 200 and st.get("state") == "tuned" and abs(st.get("power_target_watt", 0) - target) < 1:
            return st
        time.sleep(2)
    raise SystemExit(f"target {target} W not tuned in {timeout}s: {json.dumps(last)[:2000]}")


def main():
    tmp = Path(tempfile.mkdtemp(prefix="tuner-points-"))
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    try:
        sim = start_sim(tmp)
        stop_sim(sim)
        rows = []
        for i, target in enumerate(TARGETS):
            set_tuner(tmp / "sim" / "config.toml", target)
            sim = start_sim(tmp)
            try:
                tok = token(sim)
                tuned(sim, tok, target)
                _, _, tp = http("GET", f"{sim.api_url}/api/autotuner/tuned_profiles", token=tok)
            finally:
                stop_sim(sim)
            st = next(p for p in tp["profiles"] if p["mode"] == "power" and abs(p["target"] - target) < 1)
            m = st["measured"]
            chains = st.get("chains", [])
            freq = sum(c["frequency_mhz"] for c in chains) / len(chains) if chains else None
            row = {
                "model_slug": "antminer-s9",
                "profile": f"sim-power-{target}w",
                "kind": "simulated",
                "step": -(i + 1),
                "power_w": round(m["power_watt"], 1),
                "hashrate_ths": round(m["hashrate_ths"], 3),
                "voltage_domains": [{"domain": "board", "voltage_mv": round(st["voltage_mv"], 1)}],
                "measured_on": today,
                "source": {
                    "title": f"svcOS autotuner, power mode, target {target} W, on the simulated S9 (hw-sim); bench/open-data-tuner-points.py",
                    "path": "bench/open-data-tuner-points.py",
                },
            }
            if freq:
                row["frequency_mhz"] = round(freq, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
