"""The assembled stack, seen from outside: processes, the path of a share, auth on both ports."""

from pathlib import Path

from conftest import cgminer, http, wait_for

SERVICES = [
    "hw-sim",
    "test-pool",
    "hw-agent",
    "stratum-agent",
    "auth",
    "tuner",
    "legacy-tcp",
    "gateway",
    "proxy",
]


def test_every_service_runs_as_its_own_named_process(sim):
    services = sim.services()
    pids = {}
    for name in SERVICES:
        assert name in services, f"{name} missing from ctl status: {sorted(services)}"
        record = services[name]
        pid = int(record["pid"])
        assert pid > 0, record
        assert "run" in str(record["state"]).lower(), record
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        assert comm == name[:15], f"{name} runs as {comm!r}"
        pids[name] = pid
    assert len(set(pids.values())) == len(SERVICES), pids


def test_shares_reach_the_pool_end_to_end(sim):
    """Chips hash real SHA-256d; the test pool accepts only shares that verify."""

    def accepted():
        summary = cgminer(sim, "summary")["SUMMARY"][0]
        return summary["Accepted"] if summary["Accepted"] > 0 else None

    n = wait_for(accepted, 120, "an accepted share reported on the cgminer API", interval=1)
    assert n >= 1


def test_open_paths_need_no_token_and_the_rest_do(sim):
    status, _, body = http("GET", f"{sim.api_url}/api/auth/status")
    assert status == 200 and isinstance(body, dict), body

    status, headers, body = http("GET", f"{sim.api_url}/api/status")
    assert status == 401, body
    assert headers.get("www-authenticate") == 'Bearer realm="svcrald"', headers
    assert isinstance(body, dict) and body.get("error"), body

    status, _, body = http("GET", f"{sim.api_url}/api/status", token="not-a-real-token")
    assert status == 401, body


def test_token_works_directly_and_through_the_proxy(sim, token):
    status, _, direct = http("GET", f"{sim.api_url}/api/status", token=token)
    assert status == 200, direct
    status, _, proxied = http("GET", f"{sim.http_url}/api/status", token=token)
    assert status == 200, proxied
    assert set(direct) == set(proxied)

    status, _, body = http("GET", f"{sim.http_url}/api/status")
    assert status == 401, body


def test_dashboard_is_served_on_the_http_port(sim):
    status, headers, body = http("GET", f"{sim.http_url}/")
    assert status == 200
    assert "text/html" in headers.get("content-type", ""), headers
    assert "<html" in str(body).lower()
