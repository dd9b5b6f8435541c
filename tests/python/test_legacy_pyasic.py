"""pyasic against the real `svcos sim` stack on port 4028.

pyasic must find the miner through its normal detection (`get_miner(ip)` probes port 4028 with
`version`/`devdetails`, then reads the model from VERSION `Type`), pick its stock-firmware
Antminer S9 backend, and `get_data()` must return the same hashrate, per-board hashrate and
chip counts, temperatures, fans, pools and uptime as the REST API at the same moment. Moving
values are compared against REST snapshots taken just before and just after pyasic's read.
"""

import asyncio

import pytest

from conftest import cgminer, http, wait_for

pyasic = pytest.importorskip("pyasic")


def rest_status(sim, token) -> dict:
    status, _, body = http("GET", f"{sim.api_url}/api/status", token=token)
    assert status == 200, body
    return body


def between(value, a, b, slack=0.0):
    lo, hi = min(a, b), max(a, b)
    return lo - slack <= value <= hi + slack


@pytest.fixture(scope="module")
def mining(sim, token):
    """Wait until the stack mines, has accepted shares, and the legacy API sees both peers."""

    def ready():
        st = rest_status(sim, token)
        mining = st.get("mining") or {}
        pools = st.get("pools") or {}
        if not (mining.get("hashrate_ghs", {}).get("5s", 0) > 0 and pools.get("accepted", 0) > 0):
            return False
        v = cgminer(sim, "summary+stats")
        return all(v[k][0]["STATUS"][0]["STATUS"] == "S" for k in ("summary", "stats"))

    wait_for(ready, 90, "mining with accepted shares")
    return sim


def run(coro):
    return asyncio.run(coro)


def test_pyasic_identifies_an_antminer_s9_on_the_stock_backend(mining):
    miner = run(pyasic.get_miner(mining.bind))
    assert miner is not None, "pyasic did not recognise the miner"
    assert type(miner).__name__ == "BMMinerS9", type(miner)
    assert miner.make == "AntMiner"
    assert str(miner.model).split(" ")[0] == "S9", miner.model  # "S9 (Stock)"
    # The firmware is named honestly: pyasic reports VERSION CompileTime as the fw version.
    data = run(miner.get_data(include=["fw_ver", "api_ver"]))
    assert data.fw_ver.startswith("svcOS "), data.fw_ver
    assert data.api_ver == "3.1"


def test_pyasic_get_data_matches_the_rest_api(mining, token):
    miner = run(pyasic.get_miner(mining.bind))
    before = rest_status(mining, token)
    data = run(miner.get_data())
    after = rest_status(mining, token)

    # Total hashrate (GHS 5s) in TH/s.
    b5, a5 = (s["mining"]["hashrate_ghs"]["5s"] / 1000 for s in (before, after))
    assert data.hashrate is not None
    assert between(float(data.hashrate), b5, a5, slack=0.05 * max(b5, a5)), (data.hashrate, b5, a5)
    expected = after["mining"]["hashrate_ghs"]["expected"] / 1000
    chains_expected = sum(c["hashrate_ghs"]["expected"] for c in after["chains"]) / 1000
    assert float(data.expected_hashrate) == pytest.approx(chains_expected or expected, rel=0.01)

    # Uptime.
    assert between(data.uptime, before["mining"]["uptime_s"], after["mining"]["uptime_s"], slack=2)

    # Boards: slot i is chain i; chips exact, hashrate within the window, temperatures.
    chains = sorted(after["chains"], key=lambda c: c["chain_id"])
    chains_before = sorted(before["chains"], key=lambda c: c["chain_id"])
    assert len(data.hashboards) == len(chains) == 3
    for board, c, cb in zip(data.hashboards, chains, chains_before):
        assert board.slot == c["chain_id"]
        assert board.chips == c["chips_detected"]
        assert board.expected_chips == 63
        assert board.missing is False
        rate = float(board.hashrate)
        lo, hi = cb["hashrate_ghs"]["5s"] / 1000, c["hashrate_ghs"]["5s"] / 1000
        assert between(rate, lo, hi, slack=0.05 * max(lo, hi)), (board.slot, rate, lo, hi)
        # bmminer semantics: tempN = PCB, temp2_N = chip. pyasic's S9 backend reads tempN
        # into `chip_temp` and temp2_N into `temp`, so the pairs arrive swapped there.
        assert between(board.temp, cb["temp_chip_c"], c["temp_chip_c"], slack=1.5), (board.temp, c)
        assert between(board.chip_temp, cb["temp_board_c"], c["temp_board_c"], slack=1.5), (
            board.chip_temp,
            c,
        )

    # Fans (RPM move a little between reads).
    fans = sorted(after["fans"], key=lambda f: f["fan_id"])
    fans_before = sorted(before["fans"], key=lambda f: f["fan_id"])
    assert len(data.fans) == 2 and len(fans) >= 2
    for fan, f, fb in zip(data.fans, fans, fans_before):
        assert between(fan.speed, fb["rpm"], f["rpm"], slack=0.05 * f["rpm"] + 50), (fan.speed, f)

    # Pools with accepted/rejected, active and alive flags.
    rest_pools = {p["index"]: p for p in after["pools"]["list"]}
    rest_pools_before = {p["index"]: p for p in before["pools"]["list"]}
    assert len(data.pools) == len(rest_pools)
    for pool in data.pools:
        p, pb = rest_pools[pool.index], rest_pools_before[pool.index]
        assert str(pool.url) == p["url"] or p["url"].endswith(str(pool.url).split("://")[-1])
        assert pool.user == p["user"]
        assert between(pool.accepted, pb["accepted"], p["accepted"]), (pool.accepted, p)
        assert between(pool.rejected, pb["rejected"], p["rejected"]), (pool.rejected, p)
        assert pool.alive == (p["state"] == "alive")
    assert any(pool.active for pool in data.pools)
    assert sum(pool.accepted for pool in data.pools) > 0


def test_summary_and_stats_agree_with_rest(mining, token):
    before = rest_status(mining, token)
    v = cgminer(mining, "summary+pools+stats")
    after = rest_status(mining, token)
    s = v["summary"][0]["SUMMARY"][0]
    assert between(s["Accepted"], before["pools"]["accepted"], after["pools"]["accepted"])
    assert between(s["Rejected"], before["pools"]["rejected"], after["pools"]["rejected"])
    assert between(s["Hardware Errors"], before["mining"]["hw_errors"], after["mining"]["hw_errors"])
    stats = v["stats"][0]["STATS"]
    assert stats[0]["Type"] == "Antminer S9"
    assert stats[1]["rate_unit"] == "GH"
    for c in after["chains"]:
        n = c["chain_id"] + 1
        assert stats[1][f"chain_acn{n}"] == c["chips_detected"]
        assert len(stats[1][f"chain_acs{n}"].replace(" ", "")) == c["chips_expected"]


def test_privileged_commands_are_refused_by_default(mining):
    miner = run(pyasic.get_miner(mining.bind))
    with pytest.raises(pyasic.APIError, match="Access denied"):
        run(miner.rpc.switchpool(0))
    v = cgminer(mining, "restart")
    assert v["STATUS"][0]["STATUS"] == "E" and v["STATUS"][0]["Code"] == 45


def test_stratum_agent_down_is_reported_and_known_values_kept(mining, token):
    """While stratum-agent is stopped the API answers at once: pools STATUS=W (nothing live),
    summary STATUS=I with the hashrate still in it, so pyasic still reads the hashrate."""
    out = mining.ctl("stop", "stratum-agent")
    assert out.returncode == 0, out.stderr
    try:

        def pools_down():
            v = cgminer(mining, "pools")
            return v["STATUS"][0]["STATUS"] == "W" and "stratum-agent" in v["STATUS"][0]["Msg"]

        wait_for(pools_down, 15, "pools to report stratum-agent down")
        v = cgminer(mining, "summary")
        assert v["STATUS"][0]["STATUS"] == "I", v
        assert "stratum-agent unavailable" in v["STATUS"][0]["Msg"]
        assert v["SUMMARY"][0]["GHS 5s"] > 0
        assert "Accepted" not in v["SUMMARY"][0]
        miner = run(pyasic.get_miner(mining.bind))
        data = run(miner.get_data(include=["hashrate", "pools"]))
        assert data.hashrate is not None and float(data.hashrate) > 0
        assert data.pools == []
    finally:
        out = mining.ctl("start", "stratum-agent")
        assert out.returncode == 0, out.stderr

    def pools_back():
        return cgminer(mining, "pools")["STATUS"][0]["STATUS"] == "S"

    wait_for(pools_back, 30, "pools to come back")


# What pyasic's stock S9 backend reads for power, MAC and hostname: nothing. `BMMinerS9` is
# `BMMiner` (pyasic/miners/backends/bmminer.py), whose data locations name the cgminer
# commands `version`, `summary`, `stats` and `pools` only; `wattage`, `mac` and `hostname` fall
# through to `MinerProtocol`'s `_get_wattage`/`_get_mac`/`_get_hostname`, which return None
# without asking the miner anything. pyasic reads those fields only in backends of other
# firmware (Braiins OS, LuxOS, VNish, ePIC, Hiveon ...) or of newer stock models through the
# Antminer web API (AntminerModern: /cgi-bin/get_system_info.cgi), so svcOS cannot fill them
# without pretending to be one of those. The firmware still offers the truth on port 4028:
# `stats` and `summary` carry hw-agent's calibrated `Power`, which pyasic's RPC client returns.
UNREAD = ("wattage", "mac", "hostname")


def test_pyasic_s9_backend_asks_the_miner_nothing_for_power_mac_and_hostname(mining):
    """If a pyasic release starts reading one of these, this fails: then serve what it reads."""
    miner = run(pyasic.get_miner(mining.bind))
    for field in UNREAD:
        location = getattr(miner.data_locations, field)
        assert location.kwargs == [], (field, location)
    data = run(miner.get_data(include=list(UNREAD)))
    assert (data.wattage, data.mac, data.hostname) == (None, None, None)


def test_power_reaches_pyasic_through_stats_as_rest_reports_it(mining, token):
    miner = run(pyasic.get_miner(mining.bind))
    before = rest_status(mining, token)
    stats = run(miner.rpc.stats())
    summary = run(miner.rpc.summary())
    after = rest_status(mining, token)
    lo, hi = before["mining"]["power_watt"], after["mining"]["power_watt"]
    assert hi > 0
    for watts in (stats["STATS"][1]["Power"], summary["SUMMARY"][0]["Power"]):
        assert between(watts, lo, hi, slack=0.05 * hi), (watts, lo, hi)
