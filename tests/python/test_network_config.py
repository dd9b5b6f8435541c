"""LAN settings through the API (docs/API-SHAPES.md "Network settings"): a valid static address is
saved through the config writer and written as the systemd-networkd file; a bad address, prefix,
gateway, DNS list, method or hostname is refused with a 422 naming the field, and neither the file
nor the config changes. The sim has no networkd: the file is only written, into the sim's state
folder, where these tests read it. Also: what `/api/network/info` and `/api/system/info` report
about this host's interfaces agrees with the kernel."""

import json
import shutil
import subprocess
import time
from pathlib import Path

from conftest import http

STATIC = {"method": "static", "address": "192.168.77.20/24", "gateway": "192.168.77.1",
          "dns": ["192.168.77.1", "1.1.1.1"]}


def network_file(sim) -> Path:
    return sim.dir / "state" / "gateway" / "network" / "10-svcos-lan.network"


def put(sim, token, body):
    return http("PUT", f"{sim.api_url}/api/network/config", token, body)


def ipv4(sim, token) -> dict:
    status, _, body = http("GET", f"{sim.api_url}/api/config", token)
    assert status == 200, body
    return body["config"]["network"]["ipv4"]


def back_to_dhcp(sim, token):
    status, _, body = put(sim, token, {"method": "dhcp"})
    assert status == 200, body
    assert "DHCP=ipv4\n" in network_file(sim).read_text()


def test_a_static_address_is_saved_and_written_for_networkd(sim, token):
    try:
        status, _, body = put(sim, token, STATIC)
        assert status == 200, body
        assert body["schema"] == "svcos.api.network.config.v1"
        assert body["networkd_file"] == str(network_file(sim)), body
        assert body["file_written"] is True, body
        text = network_file(sim).read_text()
        assert "[Match]\nName=eth0\n" in text, text
        assert ("[Network]\nAddress=192.168.77.20/24\nGateway=192.168.77.1\n"
                "DNS=192.168.77.1\nDNS=1.1.1.1\n") in text, text
        assert "DHCP" not in text
        assert network_file(sim).stat().st_mode & 0o777 == 0o644
        # Saved through the one config writer, and read back the same way.
        saved = ipv4(sim, token)
        assert saved == {"method": "static", "interface": "eth0", "address": "192.168.77.20/24",
                         "gateway": "192.168.77.1", "dns": ["192.168.77.1", "1.1.1.1"]}, saved
        status, _, got = http("GET", f"{sim.api_url}/api/network/config", token)
        assert status == 200 and got["file_written"] is None, got
        for k in ("method", "address", "gateway", "dns"):
            assert got[k] == STATIC[k], (k, got)
        status, _, info = http("GET", f"{sim.api_url}/api/network/info", token)
        assert status == 200 and info["method"] == "static", info
        # The same settings again: saved, the file left as it is.
        mtime = network_file(sim).stat().st_mtime_ns
        time.sleep(0.05)
        status, _, again = put(sim, token, STATIC)
        assert status == 200 and again["file_written"] is False, again
        assert network_file(sim).stat().st_mtime_ns == mtime
    finally:
        back_to_dhcp(sim, token)


def test_dhcp_sends_the_hostname_and_an_own_dns_list_replaces_the_servers(sim, token):
    status, _, cfg = http("GET", f"{sim.api_url}/api/network/config", token)
    hostname = cfg["hostname"]
    try:
        status, _, body = put(sim, token, {"method": "dhcp", "dns": ["9.9.9.9"], "hostname": "lan-test-rig"})
        assert status == 200, body
        assert body["hostname"] == "lan-test-rig" and body["file_written"] is True, body
        text = network_file(sim).read_text()
        assert "DHCP=ipv4\nDNS=9.9.9.9\n" in text, text
        assert "Hostname=lan-test-rig\n" in text and "UseDNS=no\n" in text, text
        # The hostname is [system].hostname, the same one /api/network/info reports.
        status, _, info = http("GET", f"{sim.api_url}/api/network/info", token)
        assert info["hostname"] == "lan-test-rig", info
    finally:
        status, _, body = put(sim, token, {"method": "dhcp", "hostname": hostname})
        assert status == 200, body
    assert "UseDNS" not in network_file(sim).read_text()


def test_bad_settings_are_refused_naming_the_field_and_change_nothing(sim, token):
    status, _, body = put(sim, token, STATIC)
    assert status == 200, body
    try:
        config_path = sim.dir / "config.toml"
        before_file = network_file(sim).read_bytes()
        before_config = config_path.read_bytes()
        before_gen = http("GET", f"{sim.api_url}/api/network/config", token)[2]["generation"]
        cases = [
            ({**STATIC, "gateway": "192.168.78.1"}, "gateway"),
            ({**STATIC, "gateway": "192.168.77.255"}, "gateway"),
            ({**STATIC, "gateway": "192.168.77.20"}, "gateway"),
            ({**STATIC, "gateway": ""}, "gateway"),
            ({**STATIC, "address": "192.168.77.20/33"}, "address"),
            ({**STATIC, "address": "192.168.77.20/31"}, "address"),
            ({**STATIC, "address": "192.168.77.20"}, "address"),
            ({**STATIC, "address": "192.168.077.20/24"}, "address"),
            ({**STATIC, "address": "192.168.77.0/24"}, "address"),
            ({**STATIC, "dns": ["1.1.1.1", "not-an-address"]}, "dns[1]"),
            ({**STATIC, "dns": []}, "dns"),
            ({**STATIC, "dns": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "9.9.9.9"]}, "dns"),
            ({**STATIC, "method": "auto"}, "method"),
            ({"method": "dhcp", "address": "192.168.77.20/24"}, "address"),
            ({**STATIC, "interface": "eth 0"}, "interface"),
            ({**STATIC, "hostname": "bad_name"}, "hostname"),
        ]
        for bad, field in cases:
            status, _, answer = put(sim, token, bad)
            assert status == 422, (bad, answer)
            assert answer["field"] == field, (bad, answer)
            assert answer["code"] == "config_validation", answer
            assert answer["error"] == f"invalid value for {field}" and answer["detail"], answer
        # A body of the wrong shape is the gateway's usual 422 (no field to name).
        status, _, answer = put(sim, token, {**STATIC, "dns": "1.1.1.1"})
        assert status == 422 and "field" not in answer, answer
        status, _, answer = put(sim, token, {**STATIC, "netmask": "255.255.255.0"})
        assert status == 422, answer
        status, _, answer = put(sim, None, STATIC)
        assert status == 401, answer
        assert network_file(sim).read_bytes() == before_file
        assert config_path.read_bytes() == before_config
        assert http("GET", f"{sim.api_url}/api/network/config", token)[2]["generation"] == before_gen
        assert ipv4(sim, token)["address"] == STATIC["address"]
    finally:
        back_to_dhcp(sim, token)


def kernel_ipv4() -> dict:
    """name -> [address/prefix] of every interface but loopback, from `ip -j addr`."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True)
    return {i["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in i.get("addr_info", [])]
            for i in json.loads(out.stdout) if i["ifname"] != "lo"}


def test_interfaces_addresses_and_uptime_agree_with_the_kernel(sim, token):
    status, _, info = http("GET", f"{sim.api_url}/api/network/info", token)
    assert status == 200, info
    assert "not reported" not in info["note"], info
    names = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo")
    assert [i["name"] for i in info["interfaces"]] == names, info["interfaces"]
    for i in info["interfaces"]:
        mac = (Path("/sys/class/net") / i["name"] / "address").read_text().strip().lower()
        assert i["mac"] == (mac if mac not in ("", "00:00:00:00:00:00") else None), i
    if shutil.which("ip"):
        kernel = kernel_ipv4()
        for i in info["interfaces"]:
            assert sorted(i["ipv4"]) == sorted(kernel.get(i["name"], [])), (i, kernel)
    status, _, system = http("GET", f"{sim.api_url}/api/system/info", token)
    assert status == 200, system
    primary = info["primary"]
    if primary and primary["ipv4"]:
        assert system["ip_address"] == primary["ipv4"][0].split("/")[0], (system, primary)
        assert system["mac_address"] == primary["mac"], (system, primary)
    else:
        assert system["ip_address"] is None
    boot = float(Path("/proc/uptime").read_text().split()[0])
    assert abs(system["system_uptime_s"] - boot) < 30, (system["system_uptime_s"], boot)
    assert system["mining_uptime_s"] is None or system["mining_uptime_s"] <= system["system_uptime_s"]
