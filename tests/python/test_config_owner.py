"""One config writer: every surface changes `config.toml` through the gateway's writer.

The bug this pins (issue 29): a pool added over the cgminer API was written to `config.toml` by
stratum-agent behind the gateway's back; `GET /api/pools` did not show it, and the next REST
write of any key rewrote the file from the gateway's copy and dropped it. Now stratum-agent's
pool commands go through the writer (`svcos.config.v1.ConfigService` on gateway.sock) as
compare-and-set writes, the last-pool rule lives with stratum-agent, and a stale REST write
(`If-Match` naming an old generation) is refused with 409.
"""

import json
import socket
import tomllib
import urllib.error
import urllib.request

import grpc
import pytest

from conftest import http, login, start_sim, stop_sim, wait_for
from test_grpc_admin import Reflected, channel

ADDED = "stratum+tcp://127.0.0.1:3334"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = start_sim(tmp_path_factory.mktemp("config-owner"))
    try:
        yield s
    finally:
        stop_sim(s)


@pytest.fixture(scope="module")
def token(stack) -> str:
    return login(stack)


def cg(stack, command: str, parameter: str | None = None) -> dict:
    """One cgminer request (bare JSON, read to EOF); its first STATUS record."""
    request = {"command": command}
    if parameter is not None:
        request["parameter"] = parameter
    with socket.create_connection((stack.bind, stack.legacy_port), timeout=10) as s:
        s.sendall(json.dumps(request).encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.rstrip(b"\0"))


@pytest.fixture(scope="module")
def privileged(stack, token):
    """`[legacy].allow = ["W:127.0.0.0/8"]` in force (legacy-tcp reads it when it starts)."""
    status, _, body = http("POST", f"{stack.api_url}/api/config", token,
                           {"legacy": {"allow": ["W:127.0.0.0/8"]}})
    assert status == 200, body
    out = stack.ctl("restart", "legacy-tcp")
    assert out.returncode == 0, out.stderr

    def ready():
        # `pools` needs stratum-agent's stream; `privileged` answers S only on the W: list.
        return (cg(stack, "privileged")["STATUS"][0]["STATUS"] == "S"
                and cg(stack, "pools")["STATUS"][0]["STATUS"] == "S")

    wait_for(ready, 60, "legacy-tcp with write access")
    return stack


def rest_pool_urls(stack, token) -> list:
    status, _, body = http("GET", f"{stack.api_url}/api/pools", token=token)
    assert status == 200, body
    return [p["url"] for p in body["pools"]]


def cgminer_pool_urls(stack) -> list:
    return [p["URL"] for p in cg(stack, "pools").get("POOLS", [])]


def file_config(stack) -> dict:
    return tomllib.loads((stack.dir / "config.toml").read_text())


def file_pool_urls(stack) -> list:
    return [p["url"] for p in file_config(stack).get("pools", [])]


def post_config(stack, token, patch: dict, if_match: str | None = None):
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    if if_match is not None:
        headers["If-Match"] = if_match
    req = urllib.request.Request(f"{stack.api_url}/api/config", data=json.dumps(patch).encode(),
                                 method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ensure_added(stack) -> int:
    """The index of the added pool, adding it over cgminer when it is not there."""
    if ADDED not in file_pool_urls(stack):
        reply = cg(stack, "addpool", f"{ADDED},w2,x")
        assert reply["STATUS"][0]["STATUS"] == "S", reply
    wait_for(lambda: ADDED in cgminer_pool_urls(stack), 10, "the pool in cgminer pools")
    return cgminer_pool_urls(stack).index(ADDED)


def test_a_pool_added_over_cgminer_shows_everywhere_and_survives_a_rest_write(privileged, token):
    stack = privileged
    reply = cg(stack, "addpool", f"{ADDED},w2,x")
    assert reply["STATUS"][0]["STATUS"] == "S", reply

    # Every surface shows it a moment later, and the file holds it.
    wait_for(lambda: ADDED in rest_pool_urls(stack, token), 10, "the pool in GET /api/pools")
    wait_for(lambda: ADDED in cgminer_pool_urls(stack), 10, "the pool in cgminer pools")
    assert ADDED in file_pool_urls(stack)

    # A REST write of an unrelated key keeps it: the writer's copy already had it.
    status, body = post_config(stack, token, {"thermal": {"target_temp_c": 74}})
    assert status == 200, body
    assert body["changed"] == ["thermal.target_temp_c"], body
    assert ADDED in rest_pool_urls(stack, token)
    assert ADDED in cgminer_pool_urls(stack)
    saved = file_config(stack)
    assert ADDED in [p["url"] for p in saved["pools"]]
    assert saved["thermal"]["target_temp_c"] == 74


def test_a_stale_generation_is_refused_and_changes_nothing(privileged, token):
    stack = privileged
    status, _, body = http("GET", f"{stack.api_url}/api/config", token=token)
    assert status == 200, body
    generation = body["generation"]

    status, body = post_config(stack, token, {"thermal": {"target_temp_c": 73}}, f'"{generation}"')
    assert status == 200, body
    assert body["generation"] > generation, body

    # The same base again: another write (the one above) came first.
    before = (stack.dir / "config.toml").read_bytes()
    status, body = post_config(stack, token, {"thermal": {"target_temp_c": 72}}, str(generation))
    assert status == 409, body
    assert body["code"] == "config_conflict", body
    assert body["field"] == "generation", body
    assert (stack.dir / "config.toml").read_bytes() == before
    assert file_config(stack)["thermal"]["target_temp_c"] == 73

    # A cgminer write moves the generation too: a REST client holding the old one is refused.
    index = str(ensure_added(stack))
    status, _, body = http("GET", f"{stack.api_url}/api/config", token=token)
    generation = body["generation"]
    reply = cg(stack, "disablepool", index)
    assert reply["STATUS"][0]["STATUS"] == "S", reply
    assert [p["enabled"] for p in file_config(stack)["pools"]][int(index)] is False
    status, body = post_config(stack, token, {"thermal": {"target_temp_c": 71}}, str(generation))
    assert status == 409, body
    reply = cg(stack, "enablepool", index)
    assert reply["STATUS"][0]["STATUS"] == "S", reply


def test_the_last_pool_cannot_be_removed_over_cgminer_or_grpc(privileged, token):
    stack = privileged
    # Down to one pool: remove the pools that are not the one mining.
    def remove_others():
        pools = cg(stack, "pools")["POOLS"]
        for p in pools:
            if len(pools) > 1 and p["URL"] == ADDED:
                reply = cg(stack, "removepool", str(p["POOL"]))
                assert reply["STATUS"][0]["STATUS"] == "S", reply
                return False
        return len(pools) == 1

    ensure_added(stack)
    wait_for(remove_others, 20, "one pool left")
    assert ADDED not in rest_pool_urls(stack, token)
    assert len(file_pool_urls(stack)) == 1
    before = (stack.dir / "config.toml").read_bytes()

    reply = cg(stack, "removepool", "0")
    status = reply["STATUS"][0]
    assert status["STATUS"] == "E", reply
    assert status["Code"] == 66, reply
    assert status["Msg"].startswith("Cannot remove last pool 0:"), reply

    with channel(stack, "stratum-agent") as ch:
        with pytest.raises(grpc.RpcError) as err:
            Reflected(ch).call("svcos.stratum.v1.StratumService", "RemovePool", index=0)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value
    assert "last pool" in err.value.details()

    assert (stack.dir / "config.toml").read_bytes() == before
    assert len(rest_pool_urls(stack, token)) == 1


def test_one_rule_one_home_every_front_shows_the_owners_verdict(stack, token):
    """Issue 29 item 4: a range, a J/TH and a thermal verdict each come from their owner.

    The fan target's range is hw-agent's (svcos_common::bounds): REST's direct fan write and a
    config write refuse an out-of-range target with the same words, each naming its field, and
    the file is untouched. J/TH and the posture are hw-agent's figures in telemetry: REST and
    the gateway's own surfaces show them, consistent with the power and hashrate beside them.
    """
    status, _, body = http("POST", f"{stack.api_url}/api/config", token, {"system": {"mode": "standard"}})
    assert status == 200, body
    before = (stack.dir / "config.toml").read_text()

    status, _, body = http("POST", f"{stack.api_url}/api/fan", token, {"mode": "manual"})
    assert status == 400, body
    assert body["field"] == "pwm_percent", body
    assert body["detail"] == "manual mode needs 1-100 %", body

    status, _, fan = http("POST", f"{stack.api_url}/api/fan", token, {"mode": "auto", "target_temp_c": 20})
    assert status == 400, fan
    assert fan["field"] == "target_temp_c", fan
    status, _, cfg = http("POST", f"{stack.api_url}/api/config", token, {"thermal": {"target_temp_c": 20}})
    assert status == 400, cfg
    assert cfg["field"] == "thermal.target_temp_c", cfg
    # One rule, one wording: the config's refusal and hw-agent's carry the same range.
    assert "30-95 C" in fan["detail"] and cfg["detail"] == "30-95 C", (fan, cfg)
    assert (stack.dir / "config.toml").read_text() == before

    def efficient():
        s, _, e = http("GET", f"{stack.api_url}/api/autotuner/efficiency", token)
        return e if s == 200 and e.get("efficiency_j_per_th") else None

    e = wait_for(efficient, 90, "a J/TH from hw-agent")
    implied = e["power_watt"] / (e["hashrate_ghs_1m"] / 1000.0)
    assert abs(e["efficiency_j_per_th"] - implied) <= implied * 0.01, e
    for c in e["chains"]:
        if c["efficiency_j_per_th"] is not None:
            chain_implied = c["power_watt"] / (c["hashrate_ghs_1m"] / 1000.0)
            assert abs(c["efficiency_j_per_th"] - chain_implied) <= chain_implied * 0.02, c

    status, _, posture = http("GET", f"{stack.api_url}/api/thermal/posture", token)
    assert status == 200, posture
    hottest, target = posture["temp_max_c"], posture["target_temp_c"]
    expected = ("dangerous" if hottest >= posture["dangerous_temp_c"] else
                "hot" if hottest >= posture["hot_temp_c"] else
                "warm" if hottest > target + 5.0 else "normal")
    assert posture["posture"] == expected, posture
