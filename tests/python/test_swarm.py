"""The home swarm (issue 34 item 2): three sims, each on its own loopback address and UDP port,
find each other through `[swarm].peers`, agree on a leader (the lowest unit id), split one
circuit budget in proportion to 1/(J/TH), bring their measured power under their shares, share
one room reading, refuse a member with another key and forged or replayed datagrams, and hand
leadership over when the leader's processes are killed. Bad input gets the error envelope."""

import hashlib
import hmac
import json
import socket
import time

import pytest

from conftest import http, login, start_sim, stop_sim, wait_for

KEY = "swarm-e2e-key-0123456789"
WRONG_KEY = "another-room-key-987654"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


class Unit:
    def __init__(self, sim, token, port):
        self.sim, self.token, self.port = sim, token, port

    def get(self, path):
        status, _, body = http("GET", f"{self.sim.api_url}{path}", self.token)
        assert status == 200, (path, body)
        return body

    def swarm(self):
        return self.get("/api/swarm")

    def configure(self, **swarm):
        status, _, body = http("POST", f"{self.sim.api_url}/api/config", self.token, {"swarm": swarm})
        assert status == 200, body
        return body

    def power(self):
        return self.get("/api/home/status")["heat_output_watt"]


def sign(key: str, beat: dict) -> bytes:
    payload = json.dumps(beat).encode()
    tag = hmac.new(key.encode(), b"SVW1" + payload, hashlib.sha256).digest()
    return b"SVW1" + tag + payload


def expected_split(budget, ms):
    """The documented rule, written again here: weight 1/(J/TH) (unknown = the worst known),
    capped at each member's own limit, what a cap leaves shared again among the rest."""
    known = [m["efficiency_j_per_th"] for m in ms if m["efficiency_j_per_th"]]
    worst = max(known, default=0)
    weight = {m["unit_id"]: 1 / (m["efficiency_j_per_th"] or worst or 1) for m in ms}
    cap = {m["unit_id"]: min(m["max_watt"] or budget, budget) for m in ms}
    share, left = {}, budget
    while len(share) < len(ms):
        open_ = [i for i in weight if i not in share]
        total = sum(weight[i] for i in open_)
        capped = [i for i in open_ if left * weight[i] / total >= cap[i]]
        if not capped:
            share.update({i: left * weight[i] / total for i in open_})
            break
        for i in capped:
            share[i] = cap[i]
            left -= cap[i]
    return share


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    sims = []
    try:
        for n in range(3):
            sims.append(start_sim(tmp_path_factory.mktemp(f"swarm{n}")))
        yield [Unit(s, login(s), free_udp_port()) for s in sims]
    finally:
        for s in sims:
            stop_sim(s)


def members(body):
    return {m["unit_id"]: m for m in body["members"]}


def test_swarm_end_to_end(units):
    a, b, c = units
    # Off by default: an empty swarm, and a reading has nothing to share with.
    off = a.swarm()
    assert off["schema"] == "svcos.api.swarm.v1" and off["enabled"] is False, off
    assert off["members"] == [] and off["leader"] is None and len(off["unit_id"]) == 16, off
    status, _, body = http("POST", f"{a.sim.api_url}/api/swarm/room-temp", a.token, {"room_c": 20})
    assert status == 409 and body["error"], body

    # A short key is refused naming its field; nothing is written.
    before = (a.sim.dir / "config.toml").read_text()
    status, _, body = http("POST", f"{a.sim.api_url}/api/config", a.token,
                           {"swarm": {"enabled": True, "key": "short", "circuit_budget_watt": 1000}})
    assert status == 400 and body["field"] == "swarm.key", body
    status, _, body = http("POST", f"{a.sim.api_url}/api/config", a.token,
                           {"swarm": {"enabled": True, "key": KEY, "circuit_budget_watt": 1000,
                                      "peers": ["nope"]}})
    assert status == 400 and body["field"] == "swarm.peers[0]", body
    assert (a.sim.dir / "config.toml").read_text() == before

    # Each unit's own draw, to pick a budget that binds.
    for u in units:
        wait_for(lambda u=u: u.power() > 100, 90, "mining power")
    natural = sum(u.power() for u in units)
    budget = round(0.6 * natural)

    peer = lambda u: f"{u.sim.bind}:{u.port}"  # noqa: E731
    # A lists B and C; B and C list only A (A answers whom it hears). C has another key.
    a.configure(enabled=True, key=KEY, circuit_budget_watt=budget, port=a.port, peers=[peer(b), peer(c)])
    b.configure(enabled=True, key=KEY, circuit_budget_watt=budget, port=b.port, peers=[peer(a)])
    c.configure(enabled=True, key=WRONG_KEY, circuit_budget_watt=budget, port=c.port, peers=[peer(a)])
    ids = {u: u.swarm()["unit_id"] for u in (a, b, c)}
    assert len(set(ids.values())) == 3, ids

    wait_for(lambda: set(members(a.swarm())) == {ids[a], ids[b]}, 30, "A and B to find each other")
    wait_for(lambda: set(members(b.swarm())) == {ids[a], ids[b]}, 30, "B to see A")
    wait_for(lambda: c.swarm()["dropped"]["bad_signature"] > 0, 30, "C to refuse A's beats")
    wait_for(lambda: a.swarm()["dropped"]["bad_signature"] > 0, 30, "A to refuse C's beats")
    assert set(members(c.swarm())) == {ids[c]}, c.swarm()

    # C gets the room's key (the config echoes it masked, never in clear) and joins.
    report = c.configure(key=KEY)
    assert KEY not in json.dumps(report)
    cfg = c.get("/api/config")["config"]["swarm"]
    assert cfg["key"] != KEY and cfg["enabled"] is True, cfg
    all_ids = set(ids.values())
    for u in units:
        wait_for(lambda u=u: set(members(u.swarm())) == all_ids, 30, "all three members")
    leader = min(all_ids)

    def agreed():
        views = [u.swarm() for u in units]
        if any(v["leader"] != leader for v in views):
            return None
        shares = [v["share_watt"] for v in views]
        if any(s is None for s in shares) or sum(shares) > budget + 0.5:
            return None
        if [v["share_source"] for v in views if v["unit_id"] != leader] != ["allocated"] * 2:
            return None
        return views

    views = wait_for(agreed, 30, "one leader and an allocation")
    lead_view = next(v for v in views if v["unit_id"] == leader)
    assert members(lead_view)[leader]["leader"] is True
    assert lead_view["rule"] == "proportional_to_inverse_j_per_th"
    # The rule: shares in proportion to 1/(J/TH), capped at each unit's own limit.
    ms = list(members(lead_view).values())
    want = expected_split(budget, ms)
    for m in ms:
        assert abs(m["share_watt"] - want[m["unit_id"]]) <= 0.05 * want[m["unit_id"]] + 1, (m, want, ms)
    # Every unit applies its own share as the governor's `swarm` limit...
    def limit_follows_share(u):
        share = u.swarm()["share_watt"]
        limits = u.get("/api/home/status")["thermostat"]["governor"]["limits"]
        swarm_limit = [lim["watt"] for lim in limits if lim["source"] == "swarm"]
        return swarm_limit and abs(swarm_limit[0] - share) <= 2

    for u in units:
        wait_for(lambda u=u: limit_follows_share(u), 15, "the governor's swarm limit at the share")

    # ...and its measured power comes down to it (the tuner meets a target within a few per
    # cent; hw-agent's backstop leaves it 10 % above while the tuner holds it).
    def under_shares():
        shares = {v["unit_id"]: v["share_watt"] for v in (u.swarm() for u in units)}
        return all(u.power() <= shares[ids[u]] * 1.10 for u in units)

    wait_for(under_shares, 120, "each unit's power under its share", interval=2)

    # A reading posted on B reaches A's and C's thermostats.
    status, _, body = http("POST", f"{b.sim.api_url}/api/swarm/room-temp", b.token,
                           {"room_c": 17.5, "source": "kitchen"})
    assert status == 200 and body["room"]["room_c"] == 17.5, body
    assert body["room"]["origin_unit_id"] == ids[b], body
    for u in (a, c):
        wait_for(lambda u=u: (u.swarm()["room"] or {}).get("room_c") == 17.5, 15, "the shared reading")
        thermo = u.get("/api/home/status")["thermostat"]
        assert thermo["room_c"] == 17.5 and thermo["source"] == "swarm:kitchen", thermo

    # Forged datagrams: another key is refused; a correctly signed beat is admitted once and
    # its replay refused.
    target = ("127.0.0.1", a.port)
    now_ms = int(time.time() * 1000)
    beat = {"unit_id": "ffffffffffffffff", "boot": 1, "seq": 1, "sent_ms": now_ms, "name": "forged",
            "power_watt": 100.0, "max_watt": 50.0, "efficiency_j_per_th": 30.0, "room": None,
            "allocation": None}
    before = a.swarm()["dropped"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(sign(WRONG_KEY, beat), target)
        s.sendto(b"not a swarm datagram", target)
        good = sign(KEY, beat)
        s.sendto(good, target)
        time.sleep(0.3)
        s.sendto(good, target)
    wait_for(lambda: a.swarm()["dropped"]["replay"] > before["replay"], 10, "the replay refused")
    after = a.swarm()["dropped"]
    assert after["bad_signature"] > before["bad_signature"], (before, after)
    assert after["malformed"] > before["malformed"], (before, after)
    assert "ffffffffffffffff" in members(a.swarm()), "a correctly signed beat is admitted"

    # The key never shows in an answer or a log.
    for u in units:
        assert KEY not in json.dumps(u.swarm()) and KEY not in json.dumps(u.get("/api/config"))
        assert KEY not in u.sim.log()
        for f in (u.sim.dir).rglob("*.log"):
            assert KEY not in f.read_text(errors="replace"), f

    # Kill the leader's processes: the next lowest id takes over and re-splits among two.
    lead_unit = next(u for u in units if ids[u] == leader)
    rest = [u for u in units if u is not lead_unit]
    old_epoch = max(u.swarm()["epoch"] for u in rest)
    stop_sim(lead_unit.sim)
    new_leader = min(ids[u] for u in rest)

    def handed_over():
        views = [u.swarm() for u in rest]
        ok = all(v["leader"] == new_leader and set(members(v)) == {ids[u] for u in rest}
                 and v["epoch"] != old_epoch for v in views)
        return ok and sum(v["share_watt"] for v in views) <= budget + 0.5 and views

    views = wait_for(handed_over, 30, "the next lowest id to lead")
    assert all(v["share_watt"] > 0 for v in views), views


def test_swarm_routes_refuse_bad_input_with_the_envelope(units):
    u = next(x for x in units if x.sim.proc.poll() is None)
    url = f"{u.sim.api_url}/api/swarm/room-temp"
    for body, field in [({"room_c": 99}, "room_c"), ({"room_c": -41}, "room_c")]:
        status, _, answer = http("POST", url, u.token, body)
        assert status == 422 and answer["field"] == field and "-40 to 60" in answer["detail"], answer
    for body in [{"room_c": "warm"}, {"celsius": 20}, {}, [1]]:
        status, _, answer = http("POST", url, u.token, body)
        assert status in (400, 422) and answer["error"], (body, answer)
    for method, path in [("GET", "/api/swarm"), ("POST", "/api/swarm/room-temp")]:
        status, _, answer = http(method, f"{u.sim.api_url}{path}", None, {"room_c": 20} if method == "POST" else None)
        assert status == 401 and answer["error"], answer
