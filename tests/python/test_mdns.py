"""mDNS/DNS-SD (docs/API-SHAPES.md "mDNS/DNS-SD"): python-zeroconf, a real browser, finds
`svcos.local`, `_http._tcp` on the dashboard port and `_cgminer._tcp` on the cgminer port with
the documented TXT records; `[network.mdns] enabled = false` withdraws them with goodbye packets.

Two stacks with the swarm on and no peer list find each other through `_svcos-swarm._udp`
(swarm_mdns_netns.py).

The stack and the browser run in a network namespace of their own (mdns_netns.py under
`unshare --net`), whose only interface is loopback: no packet reaches the host's LAN.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import svcos_bin

HERE = Path(__file__).resolve().parent
HTTP = "_http._tcp.local."
CGMINER = "_cgminer._tcp.local."


def run_in_netns(tmp_path_factory, script, name):
    """Run `script` under `unshare --net` (its own namespace, only `lo`) and return the JSON
    report it prints last."""
    pytest.importorskip("zeroconf")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare/ip not installed: no network namespace for the mDNS test")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {probe.stderr.strip()}")
    tmp = tmp_path_factory.mktemp(name)
    env = dict(os.environ, SVCOS_BIN=str(svcos_bin()))
    out = subprocess.run(
        ["unshare", "--net", "--", sys.executable, str(HERE / script), str(tmp)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, f"{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_in_netns(tmp_path_factory, "mdns_netns.py", "mdns")


def test_sim_keeps_the_responder_off_until_asked(report):
    assert report["info_sim_default"]["enabled"] is False, report["info_sim_default"]
    assert report["info_sim_default"]["running"] is False
    assert report["before"] == [], "the sim announced without being asked"


def test_browser_finds_the_services_and_the_host(report):
    assert report["enable_status"] == 200, report["enable_body"]
    assert [HTTP, f"svcos.{HTTP}"] in report["added"], report["added"]
    assert [CGMINER, f"svcos.{CGMINER}"] in report["added"], report["added"]
    http_svc = report["resolved"][HTTP]
    cg = report["resolved"][CGMINER]
    assert http_svc and cg, report["resolved"]
    assert http_svc["port"] == report["ports"]["http"]
    assert cg["port"] == report["ports"]["legacy"] == 4028
    assert http_svc["server"] == cg["server"] == "svcos.local."
    # The sim's gateway binds one loopback address: that address, and only it, is announced.
    assert http_svc["addresses"] == [report["bind"]], http_svc
    assert report["host"] == [report["bind"]], report["host"]
    for txt in (http_svc["txt"], cg["txt"]):
        assert txt["txtvers"] == "1"
        assert txt["model"] == "Antminer S9"
        assert txt["firmware"] == "svcOS"
        assert txt["version"]
    assert http_svc["txt"]["path"] == "/"
    assert http_svc["txt"]["api"] == "/api"
    on = report["info_on"]
    assert on["enabled"] and on["running"] and on["host"] == "svcos.local.", on
    assert on["interfaces"] == ["lo"]
    assert sorted(s["service_type"] for s in on["services"]) == sorted([HTTP, CGMINER])


def test_turning_it_off_withdraws_everything(report):
    assert report["disable_status"] == 200
    assert [HTTP, f"svcos.{HTTP}"] in report["removed"], report
    assert [CGMINER, f"svcos.{CGMINER}"] in report["removed"], report
    # Goodbye packets, not the records' TTL (75 min): the browser hears of it within seconds.
    assert report["removed_after_s"] < 10, report["removed_after_s"]
    assert report["resolved_after"] == {HTTP: None, CGMINER: None}, report["resolved_after"]
    assert report["host_after"] == [], report["host_after"]
    off = report["info_off"]
    assert off["enabled"] is False and off["running"] is False and off["services"] == [], off


@pytest.fixture(scope="module")
def swarm_report(tmp_path_factory):
    return run_in_netns(tmp_path_factory, "swarm_mdns_netns.py", "swarm-mdns")


def test_swarm_units_find_each_other_over_mdns_without_a_peer_list(swarm_report):
    """`_svcos-swarm._udp` (issue 34): with the responder and the swarm on and no
    `[swarm].peers`, two units find each other's beat port over mDNS, admit each other by their
    signed beats, and agree on one leader (the lowest id) and a split of the one budget."""
    a, b = swarm_report["units"]
    assert a["peers"] == [] and b["peers"] == [], swarm_report
    ids = sorted([a["unit_id"], b["unit_id"]])
    assert a["members"] == ids and b["members"] == ids, swarm_report
    # Each found the other's beat port through the browse (and not its own).
    assert any(d.endswith(f":{b['port']}") for d in a["discovered"]), swarm_report
    assert any(d.endswith(f":{a['port']}") for d in b["discovered"]), swarm_report
    assert not any(d.endswith(f":{a['port']}") for d in a["discovered"]), swarm_report
    assert a["leader"] == b["leader"] == ids[0], swarm_report
    assert {a["share_source"], b["share_source"]} == {"leader", "allocated"}, swarm_report
    assert a["share_watt"] + b["share_watt"] <= 1500 + 1e-6, swarm_report
