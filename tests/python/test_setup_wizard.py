"""Setup wizard end to end on a private, fresh stack: first-boot window, step order, bad input,
the circuit cap reaching hw-agent, and persistence across a gateway restart."""

import datetime
import time
from zoneinfo import ZoneInfo

import pytest

from conftest import PASSWORD, http, start_sim, stop_sim, wait_for


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    s = start_sim(tmp_path_factory.mktemp("wizard"), setup_complete=False)
    try:
        yield s
    finally:
        stop_sim(s)


# `[power]` SETUP_HOLD_WATT: the cap of a miner whose setup is not finished.
SETUP_HOLD_WATT = 600
# The power loop's band above its target (2 %) plus a reading's noise.
HOLD_TOLERANCE = 1.05


def power_samples(api, token, seconds):
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, _, st = http("GET", f"{api}/api/status", token)
        assert status == 200, st
        out.append(st["mining"])
        time.sleep(0.5)
    return out


def assert_held(api, token, seconds=8):
    samples = power_samples(api, token, seconds)
    assert all(m["power_target_watt"] == SETUP_HOLD_WATT for m in samples), samples
    drawn = [m["power_watt"] for m in samples]
    assert max(drawn) <= SETUP_HOLD_WATT * HOLD_TOLERANCE, drawn
    assert max(drawn) > 0, f"held, not idle: {drawn}"


def assert_envelope(status, body, expected_status, field=None):
    assert status == expected_status, body
    assert isinstance(body, dict) and body.get("error"), body
    if field:
        assert body.get("field") == field, body


def status_of(api):
    status, _, body = http("GET", f"{api}/api/setup/status")
    assert status == 200, body
    return body


def test_wizard_end_to_end(fresh):
    api = fresh.api_url
    s = status_of(api)
    assert s["schema"] == "svcos.api.setup.status.v1"
    assert s["first_boot"] is True and s["complete"] is False
    assert s["next_step"] == "safety"
    assert {st["step"] for st in s["steps"]} >= {"safety", "circuit", "password", "economics", "quiet_hours"}
    # A fresh install is held at the setup cap, and the open status says so.
    assert s["setup_hold_watt"] == SETUP_HOLD_WATT, s

    # Order: the circuit needs the safety step first.
    status, _, body = http("POST", f"{api}/api/setup/step2-circuit", body={"voltage_v": 240, "breaker_a": 15})
    assert_envelope(status, body, 409)
    assert body["missing_step"] == "safety"

    # Bad input: safety must be accepted explicitly; unknown members are rejected.
    status, _, body = http("POST", f"{api}/api/setup/step1-safety", body={})
    assert_envelope(status, body, 422, "accept")
    status, _, body = http("POST", f"{api}/api/setup/step1-safety", body={"accept": True, "bogus": 1})
    assert_envelope(status, body, 422)
    status, _, body = http("POST", f"{api}/api/setup/step1-safety", body={"accept": True})
    assert status == 200, body
    assert body["steps"][0]["status"] == "done"

    # Completion is never part of the first-boot window.
    status, _, body = http("POST", f"{api}/api/setup/complete")
    assert status == 401, body

    status, _, body = http("POST", f"{api}/api/setup/step2-circuit", body={"voltage_v": 5, "breaker_a": 15})
    assert_envelope(status, body, 422, "voltage_v")
    status, _, body = http("POST", f"{api}/api/setup/step2-circuit", body={"voltage_v": 240, "breaker_a": "x"})
    assert_envelope(status, body, 422)
    status, _, body = http("POST", f"{api}/api/setup/step2-circuit", body={"voltage_v": 240, "breaker_a": 15})
    assert status == 200, body
    circuit = next(st for st in body["steps"] if st["step"] == "circuit")
    assert circuit["values"]["max_continuous_watt"] == 2880
    assert body["circuit_limit_watt"] == 2880

    # The password goes through the auth service; afterwards the window is closed.
    status, _, body = http("POST", f"{api}/api/setup/step3-password", body={"password": PASSWORD})
    assert status == 200, body
    assert body["password_set"] is True
    status, _, body = http("POST", f"{api}/api/setup/step-economics",
                           body={"electricity_price_per_kwh": 0.12, "currency": "usd"})
    assert status == 401, body
    status, _, body = http("POST", f"{api}/api/setup/step3-password", body={"password": "another one"})
    assert status == 401, body

    status, _, body = http("POST", f"{api}/api/auth/session", body={"password": PASSWORD})
    assert status == 200, body
    token = body["token"]

    status, _, body = http("POST", f"{api}/api/setup/step3-password", token, {"password": "another one"})
    assert_envelope(status, body, 409)
    status, _, body = http("POST", f"{api}/api/setup/step-economics", token,
                           {"electricity_price_per_kwh": 0.12, "currency": "dollars"})
    assert_envelope(status, body, 422, "currency")
    status, _, body = http("POST", f"{api}/api/setup/step-economics", token,
                           {"electricity_price_per_kwh": -1, "currency": "usd"})
    assert_envelope(status, body, 422, "electricity_price_per_kwh")
    status, _, body = http("POST", f"{api}/api/setup/step-economics", token,
                           {"electricity_price_per_kwh": 0.12, "currency": "usd"})
    assert status == 200, body
    assert "cost_per_day" in body["estimate"]

    # Quiet hours outside the current time, so they do not cap power during the test.
    status, _, body = http("POST", f"{api}/api/setup/quiet-hours", token,
                           {"start": "25:00", "end": "06:00"})
    assert_envelope(status, body, 400, "home.night_mode.start")
    assert body["code"] == "config_validation"
    status, _, body = http("POST", f"{api}/api/setup/quiet-hours", token,
                           {"start": "22:00", "end": "06:00", "timezone": "Europe/Atlantis"})
    assert_envelope(status, body, 400, "system.timezone")
    assert body["code"] == "config_validation" and "Europe/Atlantis" in body.get("detail", ""), body
    # The window in the zone's wall-clock time (India, UTC+05:30), two to three hours ahead.
    kolkata = datetime.datetime.now(ZoneInfo("Asia/Kolkata"))
    at = [(kolkata + datetime.timedelta(hours=h)).strftime("%H:%M") for h in (2, 3)]
    quiet = {"start": at[0], "end": at[1], "power_cap_watt": 700, "fan_max_percent": 50,
             "timezone": "Asia/Kolkata"}
    status, _, body = http("POST", f"{api}/api/setup/quiet-hours", token, quiet)
    assert status == 200, body
    status, _, night = http("GET", f"{api}/api/home/night-mode", token)
    assert night["timezone"] == "Asia/Kolkata" and night["active_now"] is False, night
    nxt = datetime.datetime.fromisoformat(night["next_change"])
    assert nxt.utcoffset() == datetime.timedelta(hours=5, minutes=30), night
    assert nxt.strftime("%H:%M") == quiet["start"], night

    # Until the wizard is finished the setup cap binds (below the circuit's 2880 W): hw-agent
    # enforces it, and what the board draws stays under it.
    assert_held(api, token)
    status, _, body = http("GET", f"{api}/api/env/recipe", token)
    limit = next(e for e in body["power"] if e["name"] == "hard_limit_watt")
    assert limit["value"] == SETUP_HOLD_WATT and limit["source"] == "config:power.setup_hold", limit

    status, _, body = http("POST", f"{api}/api/setup/complete", token)
    assert status == 200, body
    assert body["complete"] is True and body["missing"] == []
    assert body["setup_hold_watt"] is None, body

    # Finishing lifts the hold: the board goes above the setup cap.
    def above_cap():
        _, _, st = http("GET", f"{api}/api/status", token)
        return (st.get("mining") or {}).get("power_watt", 0) > SETUP_HOLD_WATT * 1.2
    wait_for(above_cap, 60, "power above the setup cap after the wizard finished")

    # The circuit cap is the binding limit: hw-agent's power target follows it.
    def target():
        _, _, st = http("GET", f"{api}/api/status", token)
        return (st.get("mining") or {}).get("power_target_watt") == 2880
    wait_for(target, 60, "hw-agent power target at the circuit cap")

    status, _, cfg = http("GET", f"{api}/api/config", token)
    assert cfg["config"]["power"]["circuit_limit_watt"] == 2880
    assert cfg["config"]["home"]["night_mode"]["start"] == quiet["start"]
    assert cfg["config"]["system"]["timezone"] == "Asia/Kolkata"

    status, _, body = http("POST", f"{api}/api/safety/acknowledge", token, {"warning_ids": ["no_such_warning"]})
    assert_envelope(status, body, 422, "warning_ids")
    status, _, body = http("POST", f"{api}/api/safety/acknowledge", token, {})
    assert status == 200 and body["acknowledged"] is True, body

    before = status_of(api)
    out = fresh.ctl("restart", "gateway")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: http("GET", f"{api}/api/setup/status", timeout=2)[0] == 200, 60, "gateway back")
    after = status_of(api)
    assert after["complete"] is True
    assert after["completed_at_ms"] == before["completed_at_ms"]
    assert after["steps"] == before["steps"]
    assert after["safety_acknowledged_at_ms"] == before["safety_acknowledged_at_ms"]
    econ = next(st for st in after["steps"] if st["step"] == "economics")
    assert econ["values"] == {"electricity_price_per_kwh": 0.12, "currency": "USD"}
    # The open status never carries the password.
    assert PASSWORD not in str(after)
    assert PASSWORD not in (fresh.dir / "state" / "gateway" / "setup-wizard.json").read_text()


def test_a_config_in_service_is_not_held(tmp_path):
    """An update keeps a config written before `setup_hold` existed: such a miner is in service
    and must not be held, though this stack's wizard was never finished."""
    sim = start_sim(tmp_path, setup_complete=False)
    try:
        assert status_of(sim.api_url)["setup_hold_watt"] == SETUP_HOLD_WATT
    finally:
        stop_sim(sim)
    config = sim.dir / "config.toml"
    text = config.read_text()
    assert "setup_hold = true" in text, text
    config.write_text(text.replace("setup_hold = true\n", ""))
    sim = start_sim(tmp_path, setup_complete=False)
    try:
        api = sim.api_url
        s = status_of(api)
        assert s["complete"] is False and s["setup_hold_watt"] is None, s
        status, _, body = http("POST", f"{api}/api/auth/setup", body={"password": PASSWORD})
        assert status in (200, 201), body
        status, _, body = http("POST", f"{api}/api/auth/session", body={"password": PASSWORD})
        token = body["token"]

        def full_power():
            _, _, st = http("GET", f"{api}/api/status", token)
            m = st.get("mining") or {}
            return m.get("power_watt", 0) > SETUP_HOLD_WATT * 1.2 and m.get("power_target_watt") != SETUP_HOLD_WATT
        wait_for(full_power, 60, "full power without the hold")
    finally:
        stop_sim(sim)
