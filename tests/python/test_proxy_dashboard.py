"""The port-80 proxy of a real `svcos sim` stack: forwarding, hardening, and the dashboard in a
real headless Chromium (skipped, with the reason printed, when Chromium is not installed).

Chromium is driven over the DevTools protocol with the `websockets` client from
tests/requirements.txt, so no browser-automation package is needed.
"""

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

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
    assert "/static/app.js" in body
    status, headers, body = http("GET", f"{sim.http_url}/static/app.js")
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


class DevTools:
    """A minimal Chrome DevTools Protocol client for one page."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg["result"]

    async def js(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = await self.js(expression)
            if last:
                return last
            await asyncio.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last {last!r}")


def launch_chromium(profile: Path):
    proc = subprocess.Popen(
        [
            shutil.which("chromium"),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1280,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    port_file = profile / "DevToolsActivePort"
    wait_for(port_file.exists, 30, "Chromium's DevTools port")
    port = int(port_file.read_text().splitlines()[0])

    def page_ws():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        return pages[0]["webSocketDebuggerUrl"] if pages else None

    return proc, wait_for(page_ws, 30, "a Chromium page target")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_dashboard_logs_in_and_shows_live_status_in_chromium(sim, token):
    import websockets

    profile = Path(tempfile.mkdtemp(prefix="svcos-chromium-"))
    proc, ws_url = launch_chromium(profile)
    shot = Path(os.environ.get("SVCOS_SCREENSHOT_DIR", profile)) / "dashboard.png"

    async def drive():
        async with websockets.connect(ws_url, max_size=None) as ws:
            dt = DevTools(ws)
            await dt.call("Page.enable")
            await dt.call("Page.navigate", url=f"{sim.http_url}/")
            # The password is set by the `token` fixture: the page must ask to log in.
            # Not `?.hidden`: on the blank page before navigation commits that is `!undefined`, true.
            await dt.until(
                "(() => { const v = document.getElementById('view-login'); return !!v && !v.hidden; })()",
                30,
                "the login view",
            )
            await dt.js(
                "document.getElementById('login-password').value = %s;"
                "document.getElementById('login-form').requestSubmit(); true" % json.dumps(PASSWORD)
            )
            # Generous: the login queues for argon2, which runs at low priority on a loaded CI box.
            await dt.until("!document.getElementById('view-status').hidden", 90, "the status view")
            # The first poll has rendered once the "Updated" line is filled.
            await dt.until("document.getElementById('updated').textContent.length > 0", 30, "a render")
            facts = await dt.js(
                "({token: !!sessionStorage.getItem('svcos.token'),"
                " mode: document.getElementById('mode').textContent,"
                " host: document.getElementById('hostname').textContent,"
                " chains: [...document.querySelectorAll('#chains tbody tr')].map(r => r.cells.length),"
                " fans: [...document.querySelectorAll('#fans tbody tr')].map(r => r.cells.length),"
                " pools: [...document.querySelectorAll('#pools td.url')].map(td => td.textContent)})"
            )
            shot_data = await dt.call("Page.captureScreenshot", format="png")
            return facts, base64.b64decode(shot_data["data"])

    try:
        facts, png = asyncio.run(drive())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    shot.write_bytes(png)
    print(f"dashboard screenshot: {shot} ({len(png)} bytes)")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert facts["token"], facts
    # What the page shows is what the API says (whatever state the simulated board is in).
    status, _, api = http("GET", f"{sim.http_url}/api/status", token=token)
    assert status == 200, api
    labels = {"home": "Space Heater mode", "standard": "Mining mode", "hacker": "Hacker mode"}
    assert facts["mode"] == labels[api["mode"]], (facts, api["mode"])
    assert facts["host"] == api["hostname"], facts
    chains = api.get("chains") or []
    if chains:
        assert len(facts["chains"]) == len(chains) and all(n == 7 for n in facts["chains"]), facts
    else:
        assert facts["chains"] == [1], facts  # the one "no hashboards / restarting" row
    fans = api.get("fans") or []
    assert len(facts["fans"]) == max(len(fans), 1), facts
    pools = (api.get("pools") or {}).get("list") or []
    assert facts["pools"] == [p["url"] for p in pools], (facts, pools)
    if "SVCOS_SCREENSHOT_DIR" in os.environ:
        # The screenshot lives elsewhere; the browser profile is no longer needed.
        shutil.rmtree(profile, ignore_errors=True)
