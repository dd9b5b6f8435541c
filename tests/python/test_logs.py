"""The merged log on the shared stack: every service in time order with RFC 3339 times and
levels, the server-side filters, the download in both formats, the live tail over
/ws?topic=logs, and no secret in any of them."""

import asyncio
import datetime
import json
import re
import time
import urllib.parse

import websockets

from conftest import PASSWORD, http, wait_for

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LEVELS = ["trace", "debug", "info", "warn", "error"]


def logs(sim, token, **params):
    status, headers, body = http("GET", f"{sim.api_url}/api/logs?{urllib.parse.urlencode(params)}", token)
    return status, headers, body


def test_every_service_merged_in_time_order(sim, token):
    status, _, body = logs(sim, token, level="trace", limit=5000)
    assert status == 200, body
    assert body["schema"] == "svcos.api.logs.v1"
    entries = body["entries"]
    assert body["count"] == len(entries) > 0
    services = {e["service"] for e in entries}
    # The stack's services all log at start; at least the mining ones and the gateway are here.
    assert {"hw-agent", "stratum-agent", "gateway"} <= services, services
    times = [e["time_ms"] for e in entries]
    assert times == sorted(times), "oldest first, merged in time order"
    for e in entries:
        assert RFC3339_MS.match(e["time"]), e
        parsed = datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00"))
        assert int(parsed.timestamp() * 1000) == e["time_ms"], e
        assert e["level"] in LEVELS, e
    # The times are real: the newest line is from this run, not the epoch.
    assert abs(times[-1] / 1000 - time.time()) < 3600, times[-1]


def test_numbers_in_log_lines_are_in_plain_precision(sim, token):
    """Issue 31 plain words: the bring-up line said `mhz=243.09999999999968`; it carries the
    PLL's 0.1 MHz step now."""
    status, _, body = logs(sim, token, q="chain brought up", service="hw-agent", limit=100)
    assert status == 200 and body["entries"], body
    for e in body["entries"]:
        mhz = re.search(r"mhz=(\S+)", e["message"])
        assert mhz and re.fullmatch(r"\d+(\.\d)?", mhz.group(1)), e["message"]


def test_filters_narrow_the_lines(sim, token):
    _, _, all_lines = logs(sim, token, level="trace", limit=5000)
    status, _, one = logs(sim, token, service="hw-agent", level="trace", limit=5000)
    assert status == 200, one
    assert one["count"] > 0 and {e["service"] for e in one["entries"]} == {"hw-agent"}
    status, _, two = logs(sim, token, service="hw-agent,gateway", level="trace", limit=5000)
    assert {e["service"] for e in two["entries"]} <= {"hw-agent", "gateway"}
    status, _, warn = logs(sim, token, level="warn", limit=5000)
    assert all(e["level"] in ("warn", "error") for e in warn["entries"]), warn
    # Search: a word of some hw-agent message finds that line, and every answer contains it.
    word = next(w for e in one["entries"] for w in e["message"].split() if re.fullmatch(r"[a-z]{5,}", w))
    status, _, found = logs(sim, token, q=word.upper(), level="trace", limit=5000)
    assert found["count"] > 0
    assert all(word in (e["message"].lower() + e["service"]) for e in found["entries"]), found
    # since: only lines at or after it.
    middle = all_lines["entries"][len(all_lines["entries"]) // 2]
    status, _, later = logs(sim, token, since=middle["time"], level="trace", limit=5000)
    assert later["count"] > 0 and all(e["time_ms"] >= middle["time_ms"] for e in later["entries"])
    # limit keeps the newest.
    status, _, two_newest = logs(sim, token, level="trace", limit=2)
    assert two_newest["count"] == 2 and two_newest["truncated"] is True
    assert two_newest["entries"][-1]["time_ms"] >= all_lines["entries"][-1]["time_ms"]


def test_bad_filters_get_the_envelope(sim, token):
    for params, field in (({"service": "miner"}, "service"), ({"level": "loud"}, "level"),
                          ({"since": "yesterday"}, "since"), ({"limit": "0"}, "limit"),
                          ({"limit": "100000"}, "limit")):
        status, _, body = logs(sim, token, **params)
        assert status == 400, (params, body)
        assert body["error"] and body["field"] == field, body
    status, _, body = http("GET", f"{sim.api_url}/api/logs/download?format=xml", token)
    assert status == 400 and body["field"] == "format", body
    for path in ("/api/logs", "/api/logs/download"):
        status, _, body = http("GET", f"{sim.api_url}{path}")
        assert status == 401, body


def test_download_as_text_and_ndjson(sim, token):
    status, headers, text = http("GET", f"{sim.api_url}/api/logs/download?service=hw-agent", token)
    assert status == 200
    assert headers["content-type"].startswith("text/plain"), headers
    assert "attachment" in headers["content-disposition"] and ".txt" in headers["content-disposition"]
    lines = text.splitlines()
    assert lines and all(re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z +(TRACE|DEBUG|INFO|WARN|ERROR) hw-agent: ", ln) for ln in lines), lines[:5]
    status, headers, raw = http("GET", f"{sim.api_url}/api/logs/download?format=ndjson&level=warn", token)
    assert status == 200 and headers["content-type"] == "application/x-ndjson", headers
    # The body is one JSON object per line (or nothing when no line is a warning).
    text = raw if isinstance(raw, str) else json.dumps(raw) + "\n"
    for line in filter(None, text.splitlines()):
        e = json.loads(line)
        assert e["level"] in ("warn", "error") and RFC3339_MS.match(e["time"]), e


def test_the_live_tail_sends_new_lines_as_they_are_written(sim, token):
    """/ws?topic=logs: the backlog asked for, then each new line. Restarting the tuner makes it
    log its start, which must come over the open socket."""

    async def main():
        _, _, known = logs(sim, token, service="tuner", level="trace", limit=2)
        url = f"ws://{sim.bind}:{sim.api_port}/ws?topic=logs&service=tuner&level=trace&limit=2&token={token}"
        async with websockets.connect(url) as ws:
            backlog = []
            while len(backlog) < known["count"]:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                backlog.append(frame)
            start = time.time() * 1000
            out = sim.ctl("restart", "tuner")
            assert out.returncode == 0, out.stderr
            fresh = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not fresh:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                # Heartbeats keep a quiet tail alive; they are /ws's own frames.
                if frame["type"] == "heartbeat":
                    assert frame["schema"] == "svcos.ws.heartbeat.v1", frame
                elif frame["time_ms"] >= start - 1000:
                    fresh.append(frame)
            return known["entries"], backlog, fresh

    known, backlog, fresh = asyncio.run(main())
    assert known, "the tuner logged at its start"
    # The backlog is the newest lines GET /api/logs answers, in the same shape.
    assert [f["message"] for f in backlog] == [e["message"] for e in known], (backlog, known)
    for f in backlog + fresh:
        assert f["type"] == "log" and f["schema"] == "svcos.ws.log.v1", f
        assert f["service"] == "tuner" and RFC3339_MS.match(f["time"]), f
    assert fresh, "a line written after the socket opened"
    # A bad filter is refused before the upgrade, with the envelope; no token, no stream.
    status, _, body = http("GET", f"{sim.api_url}/ws?topic=logs&level=loud&token={token}")
    assert status == 400 and body["field"] == "level", body
    status, _, body = http("GET", f"{sim.api_url}/ws?topic=logs")
    assert status == 401, body


def test_no_secret_reaches_the_log_view(sim, token):
    # A failed and a good login, and a pool URL with a password, all exercise logging paths.
    http("POST", f"{sim.api_url}/api/auth/session", body={"password": "wrong horse " + PASSWORD})
    http("POST", f"{sim.api_url}/api/pools/test", token,
         {"url": f"stratum+tcp://rig:hunter2pw@{sim.bind}:1", "user": "w", "timeout_ms": 500})
    wait_for(lambda: logs(sim, token, level="trace", limit=5000)[2]["count"] > 0, 10, "lines")
    _, _, body = logs(sim, token, level="trace", limit=5000)
    _, _, text = http("GET", f"{sim.api_url}/api/logs/download?level=trace", token)
    for shown in (json.dumps(body), text):
        assert PASSWORD not in shown
        assert token not in shown
        assert "hunter2pw" not in shown
