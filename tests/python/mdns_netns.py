"""Runs inside a network namespace of its own (test_mdns.py starts it with `unshare --net`):
brings up loopback with multicast, starts a `svcos sim` stack there, turns the mDNS responder
on and off through the REST API, and watches with python-zeroconf, a real mDNS browser. Prints
one JSON line of what the browser saw; test_mdns.py asserts on it.

Nothing here can reach the host's LAN: the namespace has no interface but `lo`.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import http, login, start_sim, stop_sim, wait_for  # noqa: E402
from zeroconf import (  # noqa: E402
    AddressResolver,
    ServiceBrowser,
    ServiceListener,
    Zeroconf,
)

TYPES = ["_http._tcp.local.", "_cgminer._tcp.local."]


class Seen(ServiceListener):
    """Every add/remove the browser reports, per (type, name)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.added: set[tuple[str, str]] = set()
        self.removed: set[tuple[str, str]] = set()

    def add_service(self, zc, type_, name):
        with self.lock:
            self.added.add((type_, name))
            self.removed.discard((type_, name))

    def remove_service(self, zc, type_, name):
        with self.lock:
            self.removed.add((type_, name))

    def update_service(self, zc, type_, name):
        pass


def resolve(zc, type_, name):
    info = zc.get_service_info(type_, name, timeout=3000)
    if info is None:
        return None
    return {
        "port": info.port,
        "server": info.server,
        "addresses": info.parsed_addresses(),
        "txt": {k.decode(): (v.decode() if v is not None else None)
                for k, v in info.properties.items()},
    }


def host_addresses(zc, host):
    resolver = AddressResolver(host)
    if not resolver.request(zc, 3000):
        return []
    return resolver.parsed_addresses()


def main(tmp: Path):
    subprocess.run(["ip", "link", "set", "lo", "up", "multicast", "on"], check=True)
    report = {}
    sim = start_sim(tmp)
    zc = None
    try:
        token = login(sim)
        status, _, body = http("GET", f"{sim.api_url}/api/network/info", token)
        report["info_sim_default"] = body.get("mdns") if status == 200 else {"status": status}

        zc = Zeroconf(interfaces=["127.0.0.1"])
        seen = Seen()
        browsers = [ServiceBrowser(zc, t, seen) for t in TYPES]
        # The sim writes the responder off (it would reach the host's LAN); nothing is there yet.
        time.sleep(3)
        report["before"] = sorted(map(list, seen.added))

        status, _, body = http("POST", f"{sim.api_url}/api/config", token,
                               {"network": {"mdns": {"enabled": True, "interfaces": ["lo"]}}})
        report["enable_status"] = status
        report["enable_body"] = body if status != 200 else None
        want = {(t, f"svcos.{t}") for t in TYPES}
        try:
            wait_for(lambda: want <= seen.added, 30, "both service instances")
        except AssertionError:
            pass
        report["added"] = sorted(map(list, seen.added))
        report["resolved"] = {t: resolve(zc, t, f"svcos.{t}") for t in TYPES}
        report["host"] = host_addresses(zc, "svcos.local.")
        report["bind"] = sim.bind
        report["ports"] = {"http": sim.http_port, "legacy": sim.legacy_port}
        status, _, body = http("GET", f"{sim.api_url}/api/network/info", token)
        report["info_on"] = body.get("mdns") if status == 200 else {"status": status}

        status, _, body = http("POST", f"{sim.api_url}/api/config", token,
                               {"network": {"mdns": {"enabled": False}}})
        report["disable_status"] = status
        started = time.monotonic()
        try:
            wait_for(lambda: want <= seen.removed, 15, "goodbye packets")
        except AssertionError:
            pass
        report["removed"] = sorted(map(list, seen.removed))
        report["removed_after_s"] = round(time.monotonic() - started, 2)
        # Nothing answers any more: a fresh browser's query finds no instance and no host.
        for b in browsers:
            b.cancel()
        zc.close()
        zc = Zeroconf(interfaces=["127.0.0.1"])
        report["resolved_after"] = {t: resolve(zc, t, f"svcos.{t}") for t in TYPES}
        report["host_after"] = host_addresses(zc, "svcos.local.")
        status, _, body = http("GET", f"{sim.api_url}/api/network/info", token)
        report["info_off"] = body.get("mdns") if status == 200 else {"status": status}
    finally:
        if zc is not None:
            zc.close()
        stop_sim(sim)
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
