"""A bad value in config.toml never stops mining (issue 29's reproduction).

`[system].timezone = "Mars/Olympus"` written by hand, then hw-agent SIGKILLed: hw-agent used to
exit 78 on its restart (never restarted), leaving the chips idle with 0 shares. Now every
process runs on the value in force and reports the bad one (svcos_common::config's fallback
rule): hw-agent comes back, shares keep being accepted, the problem shows in
/api/system/health, and the tuner, which re-reads the file every tick, logs it at most once a
minute.
"""

import os
import re
import signal
import time

from conftest import accepted_shares, http, wait_for

BAD_ZONE = "Mars/Olympus"


def with_bad_zone(text: str) -> str:
    line = f'timezone = "{BAD_ZONE}"'
    if re.search(r"(?m)^timezone\s*=", text):
        return re.sub(r'(?m)^timezone\s*=.*$', line, text, count=1)
    return re.sub(r"(?m)^\[system\]\s*$", f"[system]\n{line}", text, count=1)


def test_a_bad_time_zone_and_a_killed_hw_agent_keep_mining(sim, token):
    config = sim.dir / "config.toml"
    original = config.read_text()
    assert "[system]" in original, original
    log_start = len(sim.log())
    try:
        config.write_text(with_bad_zone(original))
        assert BAD_ZONE in config.read_text()

        def reported():
            status, _, body = http("GET", f"{sim.api_url}/api/system/health", token)
            assert status == 200, body
            return [p for p in body["config_problems"] if p["field"] == "system.timezone"]

        problems = wait_for(reported, 10, "the bad zone in /api/system/health")
        assert problems[0]["fallback"] == "value_in_force", problems
        assert BAD_ZONE in problems[0]["message"], problems

        before = sim.services()["hw-agent"]
        os.kill(int(before["pid"]), signal.SIGKILL)

        def back():
            svc = sim.services()["hw-agent"]
            return svc["state"] == "running" and svc["pid"] != before["pid"] and svc

        after = wait_for(back, 30, "hw-agent restarted after SIGKILL")
        assert after["last_exit"] != "exit 78", after
        shares = accepted_shares(sim, token)
        wait_for(lambda: accepted_shares(sim, token) > shares, 30, "accepted shares increasing")

        # The tuner re-reads the file on its 1 s tick; the same problem is logged at most once
        # a minute per process, so once here (the test takes well under a minute).
        def lines(service):
            return [ln for ln in sim.log()[log_start:].splitlines()
                    if BAD_ZONE in ln and ln.startswith(f"{service}:")]

        wait_for(lambda: lines("tuner"), 10, "the tuner reporting the bad zone")
        time.sleep(3)
        assert len(lines("tuner")) == 1, "\n".join(lines("tuner")[:20])
        assert len(lines("hw-agent")) == 1, "\n".join(lines("hw-agent")[:20])
    finally:
        config.write_text(original)
    # The next reload finds a good file: nothing left to report.
    status, _, body = http("GET", f"{sim.api_url}/api/system/health", token)
    assert status == 200, body
    assert body["config_problems"] == [], body["config_problems"]
