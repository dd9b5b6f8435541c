"""Fleet discovery against real stacks: the session stack and a private one both listen on
127.0.0.N:4028 (legacy-tcp); a scan over a loopback range finds and identifies both. Also the
network block data derived from the pool job."""

import json
import re
from pathlib import Path

import pytest

from conftest import http, own_stack, wait_for


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    with own_stack(tmp_path_factory.mktemp("fleet")) as st:
        yield st


def test_discovery_finds_and_identifies_both_stacks(sim, second):
    other, token = second
    api = other.api_url
    for bad in ("8.8.8.0/30", "10.0.0.0/20", "127.0.0.9-127.0.0.1", "nope"):
        status, _, body = http("POST", f"{api}/api/fleet/discover", token, {"range": bad})
        assert status == 422 and body["field"] == "range", (bad, body)

    # Wait until both legacy APIs answer with live data before scanning.
    for s in (sim, other):
        wait_for(lambda s=s: http("GET", f"{s.api_url}/api/auth/status")[0] == 200, 60, "stack up")
    lo, hi = sorted(int(s.bind.rsplit(".", 1)[1]) for s in (sim, other))
    rng = f"127.0.0.{lo}-127.0.0.{hi}"

    def scan():
        status, _, body = http("POST", f"{api}/api/fleet/discover", token,
                               {"range": rng, "timeout_ms": 1500}, timeout=60)
        assert status == 200, body
        found = {m["ip"]: m for m in body["miners"]}
        ok = all(found.get(s.bind, {}).get("pools") for s in (sim, other))
        return body if ok else None

    body = wait_for(scan, 90, "both stacks discovered with their pools", interval=2)
    assert body["scanned"] == hi - lo + 1
    found = {m["ip"]: m for m in body["miners"]}
    for s in (sim, other):
        m = found[s.bind]
        assert m["port"] == 4028
        assert m["svcos"] is True and m["firmware"] == "svcOS", m
        assert m["model"] == "Antminer S9" and m["make"] == "Bitmain", m
        assert m["api_version"] == "3.1"
        assert any(str(s.pool_port) in p["url"] for p in m["pools"]), m
    # An address in the range where nothing listens is not a miner.
    for n in range(lo, hi + 1):
        ip = f"127.0.0.{n}"
        if ip not in found:
            assert ip not in {m["ip"] for m in body["miners"]}

    status, _, listed = http("GET", f"{api}/api/fleet/miners", token)
    assert status == 200 and {m["ip"] for m in listed["miners"]} == set(found)

    status, _, stats = http("GET", f"{api}/api/fleet/pool-stats", token)
    assert status == 200 and stats["miners"] == len(found), stats
    urls = {p["url"] for p in stats["pools"]}
    for s in (sim, other):
        assert any(str(s.pool_port) in u for u in urls), stats


def test_network_block_from_the_pool_job(second):
    other, token = second

    def block():
        status, _, body = http("GET", f"{other.api_url}/api/network/block", token)
        return body if status == 200 else None

    body = wait_for(block, 60, "a pool job")
    assert re.fullmatch(r"[0-9a-f]{64}", body["previous_block_hash"]), body
    assert isinstance(body["height"], int) and body["height"] >= 0, body
    assert re.fullmatch(r"[0-9a-f]{8}", body["nbits"]), body
    assert body["network_difficulty"] > 0, body
    status, _, schema = http("GET", f"{other.api_url}/api/network/config_schema", token)
    assert status == 200 and schema["json_schema"]["type"] == "object", schema
    # Served is the committed schema derived from the config types, strict like the config.
    committed = json.loads((Path(__file__).resolve().parents[2] / "docs" / "config.schema.json").read_text())
    assert schema["json_schema"] == committed
    assert committed["additionalProperties"] is False
    assert committed["$defs"]["ApiConfig"]["additionalProperties"] is False
