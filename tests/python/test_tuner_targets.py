"""The tuner's power target is the operator's: a config write of `[hardware].power_target_watt`
(what the setup wizard and the dashboard's heat level send) becomes the tuner's configured target,
the effective target never rises above it, and a saved profile records what the board draws."""

import time

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
    def hashing():
        m = http("GET", f"{api}/api/status", token)[2]["mining"]
        return m["power_watt"] > 0 and (m.get("hashrate_ghs") or {}).get("1m", 0) > 0

    # A loaded machine brings the chains up slowly: the 1-minute figure needs shares first.
    wait_for(hashing, 120, "the board drawing power and hashing")

    # The tuner's own window trails /api/status by up to one window: a point saved before its
    # first full window has no hashrate yet, so saving is retried until it has one.
    def saved():
        status, _, body = http("POST", f"{api}/api/profiles", token, {"name": "my point"})
        assert status == 200, body
        measured = body["profile"]["measured"]
        assert measured["power_watt"] > 0 and measured["hashrate_ths"] > 0, body
        return body

    wait_for(saved, 90, "a saved point with the board's figures", interval=2)

    status, _, run_state = http("POST", f"{api}/api/profiles", token,
                                {"name": "my point", "action": "apply"})
    assert status == 200, run_state
    assert run_state["mode"] == "fixed", run_state
    coherent(run_state, 900.0)
    _, _, t = http("GET", f"{api}/api/autotuner/target", token)
    assert t["configured_power_target_watt"] == 900.0, t
    assert t["power_target_watt"] <= 900.0, t


def _mining(api, token):
    """(5-second TH/s, PSU W) from /api/status."""
    _, _, s = http("GET", f"{api}/api/status", token)
    m = s.get("mining", s)
    return (m.get("hashrate_ghs") or {}).get("5s", 0.0) / 1000.0, m.get("power_watt", 0.0)


def _point(api, token, seconds=30):
    """The board over `seconds`, one sample every 3 s: mean PSU watts, mean TH/s the alive chips'
    frequencies make (`hashrate_ghs_expected`), mean 5-second measured TH/s, and the share of
    nonces that failed verification meanwhile.

    J/TH is judged on the frequencies' hashrate: the sim hashes real SHA-256d within a CPU budget
    and falls behind on a contended machine (CI runs a second stack beside this one), so a
    measured hashrate taken minutes apart compares the machine's spare CPU as much as the tuner.
    What the frequencies leave out, chips clocked past their edge, shows in the error share,
    which contention does not move (errors and good nonces fall behind together)."""
    def rejects():
        _, _, r = http("GET", f"{api}/api/diagnostics/shares/local_rejects", token)
        return r["hw_errors"], sum(c["nonces"] for c in r["chains"])

    err0, ok0 = rejects()
    watts, ideal, measured = [], [], []
    for _ in range(int(seconds / 3)):
        ths, watt = _mining(api, token)
        _, _, t = http("GET", f"{api}/api/autotuner/telemetry", token)
        watts.append(watt)
        measured.append(ths)
        ideal.append(sum(c["hashrate_ghs_expected"] for c in t["chains"]) / 1000.0)
        time.sleep(3)
    err1, ok1 = rejects()
    errors, good = err1 - err0, ok1 - ok0
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "watt": mean(watts),
        "ideal_ths": mean(ideal),
        "measured_ths": mean(measured),
        "error_share": errors / max(1, errors + good),
        "nonces": good,
    }


def test_the_tuner_lowers_the_voltage_and_makes_each_terahash_cheaper(tmp_path_factory):
    """Issue 28's check, shortened: a lower power target through `POST /api/config`, the tuner
    on through `PUT /api/autotuner/active`; the voltage falls, the power meets the target and
    J/TH improves on stock measured the same way; off gives stock back. Direction and bounds,
    not timings."""
    with own_stack(tmp_path_factory.mktemp("tuner-earns")) as (sim, token):
        api = sim.api_url
        wait_for(lambda: _mining(api, token)[0] > 0, 90, "the board hashing")
        time.sleep(15)  # the chips warm up and their leakage with them
        stock = _point(api, token)
        assert stock["ideal_ths"] > 0 and stock["nonces"] > 0, stock
        stock_jth = stock["watt"] / stock["ideal_ths"]
        target = round(stock["watt"] * 0.8)
        # Short windows: this test wants the direction, not the best point.
        status, _, body = http("POST", f"{api}/api/config", token, {
            "hardware": {"power_target_watt": target},
            "tuner": {"settle_s": 3, "window_s": 15},
        })
        assert status == 200, body
        status, _, run = http("PUT", f"{api}/api/autotuner/active", token, {"active": True})
        assert status == 200, run
        assert run["active"] is True and run["state"] != "disabled", run
        _, _, cfg = http("GET", f"{api}/api/config", token)
        assert cfg["config"]["tuner"]["enabled"] is True, cfg["config"]["tuner"]

        t0 = time.monotonic()
        trace = []  # what the failure message shows: how the tuner got where it is

        def tuned_point():
            _, _, r = http("GET", f"{api}/api/autotuner/status", token)
            ths, watt = _mining(api, token)
            trace.append((round(time.monotonic() - t0), r.get("state"), r.get("reason"),
                          r.get("voltage_mv"), round(ths, 2), round(watt)))
            return r if 0 < r["voltage_mv"] < 8800 else None

        wait_for(tuned_point, 120, "the tuner lowering the voltage", interval=2)
        # Two minutes of tuning, settled or not (a debug build on a busy CI machine hashes
        # slowly, so the search may still be refining chips): the direction must show by then.
        while time.monotonic() - t0 < 120:
            tuned_point()
            time.sleep(5)
        tuned = _point(api, token)
        why = (tuned, stock, trace)
        assert tuned["watt"] <= target * 1.08, why
        assert tuned["nonces"] > 0 and tuned["measured_ths"] > 0, why
        assert tuned["ideal_ths"] / stock["ideal_ths"] > 0.75, why
        assert tuned["watt"] / tuned["ideal_ths"] < stock_jth * 0.97, why
        # Chips the search is still probing err a little; a board pushed past its edges errs a lot.
        assert tuned["error_share"] < max(0.05, 2 * stock["error_share"]), why
        _, _, r = http("GET", f"{api}/api/autotuner/status", token)
        assert r["voltage_mv"] < 8800, r
        # Per-chip: not every chip of a board at one frequency.
        assert any(c["chips"] for c in r["chains"] if not c.get("switched_off")), r["chains"]

        status, _, run = http("PUT", f"{api}/api/autotuner/active", token, {"active": False})
        assert status == 200 and run["state"] == "disabled", run
        _, _, cfg = http("GET", f"{api}/api/config", token)
        assert cfg["config"]["tuner"]["enabled"] is False, cfg["config"]["tuner"]
