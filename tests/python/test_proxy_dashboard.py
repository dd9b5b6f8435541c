"""The port-80 proxy of a real `svcos sim` stack: forwarding, hardening and asset serving.
The dashboard itself is tested in headless Chromium by test_dashboard.py.
"""

import json
import os
import signal
import socket
import time

from conftest import PASSWORD, http, wait_for


def lower(headers: dict) -> dict:
    """HTTP header names are case-insensitive; the server sends them in lower case."""
    return {k.lower(): v for k, v in headers.items()}


def raw_request(host: str, port: int, request: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def test_api_through_the_proxy_forwards_authorization_unchanged(sim, token):
    status, headers, body = http("GET", f"{sim.http_url}/api/status", token=token)
    assert status == 200, body
    assert body.get("schema") == "svcos.api.status.v1", body
    status, headers, body = http("GET", f"{sim.http_url}/api/status")
    assert status == 401, body
    assert lower(headers).get("www-authenticate") == 'Bearer realm="svcrald"'
    assert body["error"]
    status, _, body = http("GET", f"{sim.http_url}/api/status", token="garbage")
    assert status == 401, body


def test_proxy_refuses_foreign_hosts_and_unknown_paths(sim):
    answer = raw_request(
        sim.bind,
        sim.http_port,
        b"GET /api/auth/status HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 421"), head
    assert json.loads(body)["code"] == "unclassified_error"
    status, headers, body = http("GET", f"{sim.http_url}/nope")
    assert status == 404 and body["error"], body
    assert "access-control-allow-origin" not in lower(headers)


def test_dashboard_assets_are_served(sim):
    status, headers, body = http("GET", f"{sim.http_url}/")
    headers = lower(headers)
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in headers["content-security-policy"]
    # Scripts are served under content-hashed names (tests/python/test_dashboard.py checks
    # caching and compression; the dashboard itself is tested in Chromium there).
    start = body.index("/static/app.")
    app = body[start : body.index('"', start)]
    status, headers, body = http("GET", f"{sim.http_url}{app}")
    assert status == 200 and "/api/status" in body


def _restarted(sim, name: str, old_pid: int):
    def check():
        row = sim.services()[name]
        return row["state"] == "running" and row["pid"] not in (None, old_pid)

    wait_for(check, 60, f"{name} restarted by the supervisor")


def test_sessions_survive_sigkill_of_auth(sim, token):
    status, _, body = http("POST", f"{sim.http_url}/api/auth/session", body={"password": PASSWORD})
    assert status == 200, body
    mine = body["token"]
    auth = sim.services()["auth"]
    os.kill(auth["pid"], signal.SIGKILL)
    _restarted(sim, "auth", auth["pid"])

    # Logging out asks auth itself (no gateway cache involved): it can only succeed if the
    # new auth process loaded the session the killed one had written.
    def logout():
        status, _, body = http("DELETE", f"{sim.http_url}/api/auth/session/current", token=mine)
        return (status, body) if status not in (502, 503, 504) else None

    status, body = wait_for(logout, 30, "auth answering again")
    assert status == 200, body
    status, _, body = http("GET", f"{sim.http_url}/api/status", token=mine)
    assert status == 401, body
    status, _, body = http("GET", f"{sim.http_url}/api/status", token=token)
    assert status == 200, body


def test_proxy_answers_promptly_while_the_gateway_is_killed(sim, token):
    gateway = sim.services()["gateway"]
    os.kill(gateway["pid"], signal.SIGKILL)
    seen = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        # urllib raises on a timeout: a hanging proxy fails the test here.
        status, headers, body = http("GET", f"{sim.http_url}/api/status", token=token, timeout=5)
        seen.append(status)
        assert status in (200, 502, 503), (status, body)
        if status != 200:
            assert body["error"] and body["code"] == "unclassified_error", body
    print(f"answers while the gateway restarted: {sorted(set(seen))} over {len(seen)} requests")
    _restarted(sim, "gateway", gateway["pid"])
    wait_for(lambda: http("GET", f"{sim.http_url}/api/status", token=token)[0] == 200, 30, "gateway back")
