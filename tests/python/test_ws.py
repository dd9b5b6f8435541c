"""`/ws` read with the `websockets` client: one frame per change of its content, and a heartbeat
frame when nothing changed for HEARTBEAT_S (docs/API-SHAPES.md, "WebSocket /ws")."""

import json
import os
import signal
import time

from websockets.sync.client import connect

from conftest import wait_for

# The documented longest silence (svcos_api_types::ws::HEARTBEAT).
HEARTBEAT_S = 10
# Scheduling slack on a loaded test machine.
SLACK_S = 3


def frames(ws, seconds: float):
    """(monotonic time, raw text) of every frame for `seconds`."""
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            raw = ws.recv(timeout=left)
        except TimeoutError:
            break
        out.append((time.monotonic(), raw))
    return out


def url(sim, token):
    return f"ws://{sim.bind}:{sim.api_port}/ws?token={token}"


def test_one_frame_per_change(sim, token):
    with connect(url(sim, token), max_size=None) as ws:
        got = frames(ws, 10)
    telemetry = [raw for _, raw in got if json.loads(raw)["type"] == "telemetry"]
    # hw-agent publishes at 1 Hz, so the stream is never quiet long enough for a heartbeat.
    assert len(telemetry) >= 5, got
    repeats = [a for a, b in zip(telemetry, telemetry[1:]) if a == b]
    assert not repeats, f"{len(repeats)} of {len(telemetry)} frames repeated the one before"
    seqs = [json.loads(raw)["seq"] for raw in telemetry]
    assert seqs == sorted(seqs), seqs


def test_heartbeat_when_nothing_changes(sim, token):
    """hw-agent stopped (SIGSTOP, so its stream neither moves nor closes): the telemetry stops
    changing and the stream sends a heartbeat HEARTBEAT_S after its last frame, then telemetry
    again once hw-agent runs."""
    hw_agent = int(sim.services()["hw-agent"]["pid"])
    with connect(url(sim, token), max_size=None) as ws:
        first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "telemetry", first
        last_at = time.monotonic()
        kinds = []
        beat = silence = None
        os.kill(hw_agent, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 3 * HEARTBEAT_S
            while beat is None and (left := deadline - time.monotonic()) > 0:
                try:
                    m = json.loads(ws.recv(timeout=left))
                except TimeoutError:
                    break
                now = time.monotonic()
                kinds.append(m["type"])
                if m["type"] == "heartbeat":
                    beat, silence = m, now - last_at
                last_at = now
        finally:
            os.kill(hw_agent, signal.SIGCONT)
        assert beat is not None, f"no heartbeat in {3 * HEARTBEAT_S} s: {kinds}"
        assert beat["schema"] == "svcos.ws.heartbeat.v1", beat
        assert set(beat) == {"type", "schema", "timestamp_ms"}, beat
        assert abs(beat["timestamp_ms"] / 1000 - time.time()) < 60, beat
        # The silence before it: HEARTBEAT_S, not less (nothing but changes is sent) and not
        # much more.
        assert HEARTBEAT_S - 0.5 <= silence <= HEARTBEAT_S + SLACK_S, (silence, kinds)
        # hw-agent runs again: telemetry frames resume.
        wait_for(
            lambda: any(json.loads(raw)["type"] == "telemetry" for _, raw in frames(ws, 2)),
            30, "telemetry frames after SIGCONT",
        )
