"""The power governor lives in the tuner process, not in the gateway: with the gateway SIGKILLed
and kept down, solar following and the thermostat still move hw-agent's power target (read
through the cgminer API, which never passes through the gateway), and the thermostat's state
survives a SIGKILL of the tuner itself."""

import os
import signal

import pytest

from conftest import cgminer, http, own_stack, wait_for
from test_home_energy import Source, mining, wait_target


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with own_stack(tmp_path_factory.mktemp("power-service")) as st:
        yield st


@pytest.fixture
def source():
    s = Source()
    yield s
    s.close()


def cgminer_target(sim):
    return cgminer(sim, "summary")["SUMMARY"][0].get("Power Target")


def restarted(sim, name, old_pid):
    svc = sim.services().get(name) or {}
    pid = int(svc.get("pid") or 0)
    return pid and pid != old_pid and "run" in str(svc.get("state", "")).lower()


def kill_gateway_and_keep_it_down(sim):
    pid = int(sim.services()["gateway"]["pid"])
    os.kill(pid, signal.SIGKILL)
    # The supervisor restarts it; stop it so that nothing in the gateway can act meanwhile.
    wait_for(lambda: restarted(sim, "gateway", pid), 60, "the gateway restarted")
    out = sim.ctl("stop", "gateway")
    assert out.returncode == 0, out.stderr
    def down():
        try:
            return http("GET", f"{sim.api_url}/api/auth/status", timeout=1)[0] != 200
        except OSError:
            return True
    wait_for(down, 30, "the gateway down", interval=0.5)


def bring_gateway_back(sim):
    out = sim.ctl("start", "gateway")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: http("GET", f"{sim.api_url}/api/auth/status", timeout=2)[0] == 200,
             60, "the gateway back")


def test_solar_following_goes_on_while_the_gateway_is_down(stack, source):
    sim, token = stack
    api = sim.api_url
    source.doc = {"pv": {"spare": 900}}
    cfg = {"enabled": True, "source_url": source.url, "surplus_watt_pointer": "/pv/spare",
           "poll_interval_s": 1, "min_watt": 300, "wake_margin_watt": 100, "min_dwell_s": 1}
    status, _, body = http("POST", f"{api}/api/solar/config", token, cfg)
    assert status == 200 and body["active"] is True, body
    wait_target(api, token, 900, "following the surplus")
    assert cgminer_target(sim) == 900

    kill_gateway_and_keep_it_down(sim)
    try:
        source.doc = {"pv": {"spare": 600}}
        wait_for(lambda: cgminer_target(sim) == 600, 60, "the target follows with no gateway")
        source.doc = {"pv": {"spare": 750}}
        wait_for(lambda: cgminer_target(sim) == 750, 60, "and follows again")
    finally:
        bring_gateway_back(sim)

    _, _, body = http("GET", f"{api}/api/solar/verification-history?limit=500", token)
    seen = {(e.get("reading") or {}).get("surplus_watt") for e in body["entries"]}
    assert {900, 600, 750} <= seen, "decisions made while the gateway was down are recorded"
    assert body["capacity"] == 10000, body["capacity"]

    # The decisions live in the tuner's history store: a restart of the tuner keeps them.
    assert sim.ctl("stop", "tuner").returncode == 0
    assert sim.ctl("start", "tuner").returncode == 0
    def history_back():
        s, _, b = http("GET", f"{api}/api/solar/verification-history?limit=1000", token)
        return b if s == 200 else None
    body = wait_for(history_back, 60, "the verification history answering again")
    seen = {(e.get("reading") or {}).get("surplus_watt") for e in body["entries"]}
    assert {900, 600, 750} <= seen, "decisions survive a tuner restart"
    _, _, st = http("GET", f"{api}/api/solar/status", token)
    assert st["state"] == "running" and st["target_watt"] == 750, st
    http("POST", f"{api}/api/solar/config", token, {"enabled": False})
    wait_target(api, token, 0, "solar off hands the target back")


def test_thermostat_state_survives_the_tuner_and_acts_without_the_gateway(stack):
    sim, token = stack
    api = sim.api_url
    status, _, body = http("POST", f"{api}/api/config", token, {"home": {"reading_max_age_s": 15}})
    assert status == 200, body
    status, _, body = http("POST", f"{api}/api/home/target", token,
                           {"target_room_c": 21, "min_watt": 300, "max_watt": 1200, "step_watt": 200})
    assert status == 200 and body["enabled"] is True, body
    status, _, body = http("POST", f"{api}/api/home/room-temp", token, {"room_c": 25, "source": "test"})
    assert status == 200 and body["action"] == "lower", body
    level, at = body["level_watt"], body["reading_at_ms"]
    wait_target(api, token, level, "thermostat level applied")

    # The tuner (which runs the governor) is SIGKILLed: its thermostat state comes back.
    pid = int(sim.services()["tuner"]["pid"])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: restarted(sim, "tuner", pid), 60, "the tuner restarted")

    def thermostat():
        s, _, b = http("POST", f"{api}/api/home/target", token, {"enabled": True})
        return b if s == 200 else None
    body = wait_for(thermostat, 60, "the thermostat answering again")
    assert (body["level_watt"], body["reading_at_ms"], body["room_c"]) == (level, at, 25), body
    assert mining(api, token)["power_target_watt"] == level

    # With the gateway down, the reading goes stale and the governor hands the target back.
    kill_gateway_and_keep_it_down(sim)
    try:
        wait_for(lambda: cgminer_target(sim) == 0, 90, "a stale reading releases the target")
    finally:
        bring_gateway_back(sim)
    http("POST", f"{api}/api/home/target", token, {"enabled": False})


def test_room_factor_and_cold_start_warm_up_end_in_hw_agents_target(stack):
    """The governor's own limits reach hw-agent (read through the cgminer API): the room factor
    takes W per degree C above its reference off the operator's target, and the warm-up cap holds
    while the hottest chip is below the warm-up temperature, then lets go."""
    sim, token = stack
    api = sim.api_url

    def post(path, body):
        status, _, answer = http("POST", f"{api}{path}", token, body)
        assert status == 200, (path, answer)
        return answer

    def cold():
        status, _, body = http("GET", f"{api}/api/thermal/cold_environment", token)
        assert status == 200, body
        return body

    post("/api/config", {"hardware": {"power_target_watt": 1000}, "home": {"reading_max_age_s": 900}})
    post("/api/home/room-temp", {"room_c": 24, "source": "test"})
    body = post("/api/autotuner/room-temp-factor", {"watt_per_c": 25, "reference_room_c": 20})
    assert (body["room_c"], body["limit"]["limit_watt"], body["limit"]["binding"]) == (24, 900, True), body
    wait_for(lambda: cgminer_target(sim) == 900, 60, "the room factor's 900 W in hw-agent")
    try:
        # The sim's chips run far below 90 C: switched on while hashing, the warm-up caps at once.
        post("/api/config", {"governor": {"cold_environment": {
            "enabled": True, "warmup_watt": 600, "warmup_temp_c": 90, "warmup_max_s": 7200}}})
        wait_for(lambda: cold()["phase"] == "warming_up" and cgminer_target(sim) == 600, 60,
                 "the warm-up cap in hw-agent")
        body = cold()
        assert body["governor"]["binding"] == "warmup" and body["limit"]["limit_watt"] == 600, body
        assert body["fan_min_percent"] >= 0 and body["warming_since_ms"] > 0, body
        # Warm by the new threshold: the warm-up is done and the room factor binds again.
        post("/api/config", {"governor": {"cold_environment": {"warmup_temp_c": 20}}})
        wait_for(lambda: cold()["phase"] == "done" and cgminer_target(sim) == 900, 60, "the warm-up ended")
    finally:
        post("/api/config", {"governor": {"cold_environment": {"enabled": False}}})
        post("/api/autotuner/room-temp-factor", {"enabled": False})
        post("/api/config", {"hardware": {"power_target_watt": 0}})
