"""Webhooks against a real HTTP receiver that verifies the HMAC-SHA256 signature.

The receiver is a Python http.server on a free loopback port; it checks
`X-Svcos-Signature: sha256=<hex HMAC(secret, raw body)>`, that `X-Svcos-Timestamp` equals the
signed `sent_at` and is recent, and can be told to answer 500 to exercise retries. Events are
produced through REST (sleep and wake). The shared stack's [webhook] section is restored at the
end.
"""

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import http, wait_for

SECRET = "hook-secret-4b1d"


class Receiver:
    def __init__(self):
        self.requests = []
        # event name -> how many of its next deliveries get a 500
        self.fail = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                event = headers.get("x-svcos-event")
                with outer.lock:
                    fail = outer.fail.get(event, 0) > 0
                    if fail:
                        outer.fail[event] -= 1
                    outer.requests.append(
                        {"path": self.path, "headers": headers, "raw": raw, "status": 500 if fail else 200}
                    )
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str, event: str | None = None):
        with self.lock:
            return [
                r for r in self.requests
                if r["path"] == path and (event is None or r["headers"].get("x-svcos-event") == event)
            ]

    def close(self):
        self.server.shutdown()


def verify(req, secret: str) -> dict:
    """What a receiver does: check the signature over the raw body, then the timestamp."""
    sig = req["headers"].get("x-svcos-signature", "")
    want = "sha256=" + hmac.new(secret.encode(), req["raw"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(sig, want), f"bad signature {sig!r}"
    body = json.loads(req["raw"])
    ts = int(req["headers"]["x-svcos-timestamp"])
    assert ts == body["sent_at"], "timestamp header must equal the signed sent_at"
    assert abs(time.time() - ts) <= 300, "stale timestamp"
    assert req["headers"]["x-svcos-delivery"] == body["id"]
    assert req["headers"]["x-svcos-event"] == body["event"]
    assert req["headers"]["content-type"] == "application/json"
    return body


@pytest.fixture()
def receiver(sim, token):
    r = Receiver()
    yield r
    code, _, body = http(
        "POST", f"{sim.api_url}/api/config/webhook", token, {"enabled": False, "hooks": []}
    )
    assert code == 200, body
    r.close()


def configure(sim, token, body):
    code, _, report = http("POST", f"{sim.api_url}/api/config/webhook", token, body)
    assert code == 200, report
    assert report["schema"] == "svcos.api.config.write.v1" and not report["restart_required"], report
    return report


def sleep_wake(sim, token):
    try:
        code, _, body = http("POST", f"{sim.api_url}/api/action/sleep", token)
        assert code == 200, body
        wait_for(
            lambda: http("GET", f"{sim.api_url}/api/status", token)[2]["mining"]["state"] == "sleeping",
            30, "sleeping",
        )
    finally:
        code, _, body = http("POST", f"{sim.api_url}/api/action/wake", token)
        assert code == 200, body


def test_signed_test_event_real_events_filters_and_retry(sim, token, receiver):
    configure(sim, token, {
        "enabled": True,
        "hooks": [
            {"url": receiver.url("/miner"), "secret": SECRET, "events": ["miner.*"]},
            {"url": receiver.url("/pools-only"), "secret": "other", "events": ["pool.*"]},
        ],
    })

    # GET masks the secret and never returns it.
    code, _, body = http("GET", f"{sim.api_url}/api/config/webhook", token)
    assert code == 200 and body["schema"] == "svcos.api.config.webhook.v1", body
    assert SECRET not in json.dumps(body)
    assert body["config"]["hooks"][0]["secret"] == "********"
    assert body["config"]["hooks"][0]["secret_set"] is True
    assert "miner.sleep" in body["events_available"]
    code, _, whole = http("GET", f"{sim.api_url}/api/config", token)
    assert code == 200 and SECRET not in json.dumps(whole)

    # The test endpoint: a signed "test" event, the receiver's status and the latency.
    code, _, report = http("POST", f"{sim.api_url}/api/config/webhook/test", token, {"index": 0})
    assert code == 200 and report["schema"] == "svcos.api.webhook_test.v1", report
    assert report["ok"] is True, report
    result = report["results"][0]
    assert result["status_code"] == 200 and result["signed"] is True, result
    assert isinstance(result["latency_ms"], int)
    got = receiver.on("/miner", "test")
    assert len(got) == 1
    body = verify(got[0], SECRET)
    assert body["schema"] == "svcos.event.v1" and body["id"] == report["event_id"]

    # A real event: sleep then wake through REST, delivered signed to the matching hook only.
    sleep_wake(sim, token)
    sleep = wait_for(lambda: receiver.on("/miner", "miner.sleep"), 30, "miner.sleep delivered")[0]
    body = verify(sleep, SECRET)
    assert body["data"]["to"] == "sleeping" and body["attempt"] == 1, body
    wait_for(lambda: receiver.on("/miner", "miner.wake"), 30, "miner.wake delivered")
    assert receiver.on("/pools-only") == [], "the pool-only hook got a miner event"

    # Retry: the receiver answers 500 twice; the third attempt succeeds with the same delivery id.
    with receiver.lock:
        receiver.fail["miner.sleep"] = 2
    before = len(receiver.on("/miner", "miner.sleep"))
    sleep_wake(sim, token)
    attempts = wait_for(
        lambda: (a := receiver.on("/miner", "miner.sleep")[before:]) and len(a) >= 3 and a,
        60, "three attempts of the second miner.sleep",
    )
    assert [a["status"] for a in attempts[:3]] == [500, 500, 200]
    bodies = [verify(a, SECRET) for a in attempts[:3]]
    assert len({b["id"] for b in bodies}) == 1, "retries keep the delivery id"
    assert [b["attempt"] for b in bodies] == [1, 2, 3]

    def hook_status():
        _, _, b = http("GET", f"{sim.api_url}/api/config/webhook", token)
        h = b["hooks"][0]
        last = h["last_delivery"]
        return h if last and last["event"].startswith("miner.") and h["retries"] >= 2 and last["ok"] else h

    h = wait_for(lambda: (h := hook_status()) and h["retries"] >= 2 and h["last_delivery"]["ok"] and h, 30, "hook status with retries")
    assert h["delivered"] >= 3 and h["url"] == receiver.url("/miner") and h["failed"] == 0, h
    assert h["last_delivery"]["status_code"] == 200 and h["active"], h

    # A POST that omits the secret keeps it: the next test event still verifies.
    configure(sim, token, {"hooks": [{"url": receiver.url("/miner"), "events": ["miner.*"]}]})
    code, _, report = http("POST", f"{sim.api_url}/api/config/webhook/test", token, {})
    assert code == 200 and report["ok"], report
    verify(receiver.on("/miner", "test")[-1], SECRET)


def test_test_endpoint_reports_failures(sim, token, receiver):
    with receiver.lock:
        receiver.fail["test"] = 1
    code, _, report = http(
        "POST", f"{sim.api_url}/api/config/webhook/test", token,
        {"url": receiver.url("/adhoc"), "secret": "k"},
    )
    assert code == 200 and report["ok"] is False, report
    assert report["results"][0]["status_code"] == 500, report
    verify(receiver.on("/adhoc", "test")[0], "k")
    # Nothing listening: a connection error, not a hang.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    code, _, report = http(
        "POST", f"{sim.api_url}/api/config/webhook/test", token, {"url": f"http://127.0.0.1:{dead}/x"}
    )
    assert code == 200 and report["ok"] is False, report
    assert report["results"][0]["status_code"] is None and report["results"][0]["error"], report


def test_bad_webhook_settings_get_the_envelope(sim, token):
    for body, field in [
        ({"hooks": [{"url": "https://example.org/x"}]}, "webhook.hooks[0].url"),
        ({"hooks": [{"url": "ftp://10.0.0.1/x"}]}, "webhook.hooks[0].url"),
        ({"hooks": [{"url": "http://10.0.0.1/x", "events": ["miner.slep"]}]}, "webhook.hooks[0].events[0]"),
        ({"timeout_ms": 10}, "webhook.timeout_ms"),
        ({"max_attempts": 0}, "webhook.max_attempts"),
    ]:
        code, _, err = http("POST", f"{sim.api_url}/api/config/webhook", token, body)
        assert code == 400, (body, err)
        assert err["code"] == "config_validation" and err["field"] == field, (body, err)
    code, _, err = http(
        "POST", f"{sim.api_url}/api/config/webhook/test", token, {"url": "https://example.org/"}
    )
    assert code == 400 and err["field"] == "url" and "https" in err["detail"], err
