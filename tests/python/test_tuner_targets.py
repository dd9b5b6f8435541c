"""The tuner's power target is the operator's: a config write of `[hardware].power_target_watt`
(what the setup wizard and the dashboard's heat level send) becomes the tuner's configured target,
the effective target never rises above it, and a saved profile records what the board draws."""

import pytest

from conftest import http, own_stack, wait_for


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Its own stack: this test moves the power target, which other tests read.
    with own_stack(tmp_path_factory.mktemp("tuner-targets")) as st:
        yield st


def coherent(run_state, configured):
    assert run_state["configured_power_target_watt"] == configured, run_state
    assert run_state["power_target_watt"] <= configured, run_state
    return True


def test_a_config_write_is_the_tuners_configured_target(stack):
    sim, token = stack
    api = sim.api_url
    status, _, body = http("PUT", f"{api}/api/autotuner/active", token, {"active": True})
    assert status == 200, body
    # Below the sim board's nominal power, which is the tuner's own default target.
    for watt in (1000.0, 900.0):
        status, _, body = http("POST", f"{api}/api/config", token,
                               {"hardware": {"power_target_watt": watt}})
        assert status == 200, body

        def followed():
            status, _, s = http("PUT", f"{api}/api/autotuner/active", token, {"active": True})
            assert status == 200, s
            if s["configured_power_target_watt"] != watt:
                return False
            _, _, t = http("GET", f"{api}/api/autotuner/target", token)
            assert t["power_target_watt"] <= t["configured_power_target_watt"], t
            return coherent(s, watt)

        wait_for(followed, 30, f"the tuner taking over {watt} W")

    # A point in force (the chains mine), saved: its figures are the board's, not zeros.
    wait_for(lambda: http("GET", f"{api}/api/status", token)[2]["mining"]["power_watt"] > 0,
             60, "the board drawing power")

    def saved():
        status, _, body = http("POST", f"{api}/api/profiles", token, {"name": "my point"})
        return body if status == 200 else None

    body = wait_for(saved, 60, "a point to save")
    measured = body["profile"]["measured"]
    assert measured["power_watt"] > 0 and measured["hashrate_ths"] > 0, body

    status, _, run_state = http("POST", f"{api}/api/profiles", token,
                                {"name": "my point", "action": "apply"})
    assert status == 200, run_state
    assert run_state["mode"] == "fixed", run_state
    coherent(run_state, 900.0)
    _, _, t = http("GET", f"{api}/api/autotuner/target", token)
    assert t["configured_power_target_watt"] == 900.0, t
    assert t["power_target_watt"] <= 900.0, t
