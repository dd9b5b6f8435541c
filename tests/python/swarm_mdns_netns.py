"""Runs inside a network namespace of its own (test_mdns.py starts it with `unshare --net`):
two `svcos sim` stacks on loopback with multicast, each with the mDNS responder and the swarm
on and NO `[swarm].peers`; they must find each other through `_svcos-swarm._udp` alone. Prints
one JSON line of what each unit's `GET /api/swarm` said; test_mdns.py asserts on it.

Nothing here can reach the host's LAN: the namespace has no interface but `lo`.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import http, login, start_sim, stop_sim, wait_for  # noqa: E402

KEY = "swarm-mdns-key-0123456789"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def main(tmp: Path):
    subprocess.run(["ip", "link", "set", "lo", "up", "multicast", "on"], check=True)
    report = {"units": []}
    sims = []
    try:
        for n in range(2):
            (tmp / f"unit{n}").mkdir()
            sims.append(start_sim(tmp / f"unit{n}"))
        units = []
        for n, sim in enumerate(sims):
            token = login(sim)
            status, _, body = http("POST", f"{sim.api_url}/api/network/hostname", token,
                                   {"hostname": f"den-{n}"})
            assert status == 200, body
            port = free_udp_port()
            status, _, body = http("POST", f"{sim.api_url}/api/config", token, {
                "network": {"mdns": {"enabled": True, "interfaces": ["lo"]}},
                "swarm": {"enabled": True, "key": KEY, "circuit_budget_watt": 1500,
                          "port": port},
            })
            assert status == 200, body
            units.append((sim, token, port))

        def swarm(unit):
            sim, token, _ = unit
            status, _, body = http("GET", f"{sim.api_url}/api/swarm", token)
            assert status == 200, body
            return body

        def agreed():
            views = [swarm(u) for u in units]
            ids = {v["unit_id"] for v in views}
            # The share is from the last beat (up to a second older than the member list):
            # wait until one unit leads and the other follows its allocation.
            # One side's browse is enough for the swarm to form (its beats tell the other of
            # it); wait for both browses too.
            return (all({m["unit_id"] for m in v["members"]} == ids for v in views)
                    and sorted(v["share_source"] or "" for v in views) == ["allocated", "leader"]
                    and all(v["discovered"] for v in views))

        try:
            wait_for(agreed, 60, "the two units to find each other over mDNS and split")
        except AssertionError:
            pass
        for unit in units:
            body = swarm(unit)
            sim, token, port = unit
            status, _, cfg = http("GET", f"{sim.api_url}/api/config", token)
            report["units"].append({
                "unit_id": body["unit_id"],
                "port": port,
                "peers": cfg["config"]["swarm"]["peers"] if status == 200 else None,
                "members": sorted(m["unit_id"] for m in body["members"]),
                "leader": body["leader"],
                "discovered": body["discovered"],
                "share_watt": body["share_watt"],
                "share_source": body["share_source"],
            })
    finally:
        for sim in sims:
            stop_sim(sim)
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
