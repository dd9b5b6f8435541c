"""The software reboot (`POST /api/action/reboot`, `POST /api/system/restart`) against a sim of
its own: the supervisor stops every service in reverse boot order and starts them in boot order,
so hw-agent is gone before the simulated board it reads, nothing counts as a crash, every service
comes back and the miner mines again.

Restarting the services one by one in boot order stopped hw-sim under a running hw-agent, which
lost its UARTs, exited 1 and was counted as a crash on every reboot."""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import accepted_shares, http, login, start_sim, stop_sim, wait_for

BOOT_ORDER = ["hw-sim", "test-pool", "hw-agent", "stratum-agent", "auth", "tuner", "legacy-tcp",
              "gateway", "proxy"]


@pytest.fixture(scope="module")
def rsim():
    tmp = Path(tempfile.mkdtemp(prefix="svcos-reboot-"))
    s = start_sim(tmp)
    try:
        yield s
    finally:
        stop_sim(s)
        if os.environ.get("SVCOS_KEEP_SIM") is None:
            shutil.rmtree(tmp, ignore_errors=True)


def all_running(sim) -> dict | None:
    services = sim.services()
    if all(s["state"] == "running" for s in services.values()):
        return services
    return None


def stop_order(log: str) -> list[str]:
    """Services in the order the supervisor logged stopping them."""
    order = []
    for line in log.splitlines():
        m = re.search(r"stopping service=([a-z-]+)", line) or re.search(
            r"service=([a-z-]+) pid=\d+ stopping", line)
        if m and "stopping" in line and m.group(1) not in order:
            order.append(m.group(1))
    return order


@pytest.mark.parametrize("path", ["/api/action/reboot", "/api/system/restart"])
def test_reboot_restarts_the_stack_in_order_without_crashes(rsim, path):
    token = login(rsim)
    start = wait_for(lambda: accepted_shares(rsim, token) or None, 180, "a first accepted share")
    before = wait_for(lambda: all_running(rsim), 120, "every service running")
    mark = len(rsim.log())

    code, _, body = http("POST", f"{rsim.api_url}{path}", token, {}, timeout=60)
    assert code == 200, body

    # Every service is a new process (hw-sim too: a reboot starts the board cold) and running.
    def rebooted():
        after = all_running(rsim)
        if after and all(after[n]["pid"] != before[n]["pid"] for n in BOOT_ORDER):
            return after
        return None

    after = wait_for(rebooted, 240, "every service restarted and running")
    for name in BOOT_ORDER:
        # A reboot is no crash and no restart of a failing service.
        assert after[name]["restarts"] == before[name]["restarts"], (name, before[name], after[name])

    log = rsim.log()[mark:]
    assert "UART vanished" not in log, log[-4000:]
    assert "exited; restarting" not in log, log[-4000:]
    assert stop_order(log) == list(reversed(BOOT_ORDER)), log[-4000:]
    assert body["action"] == "reboot" and body["services"] == BOOT_ORDER, body
    assert body["gateway_restart_scheduled"] is True, body

    token = login(rsim)
    wait_for(lambda: accepted_shares(rsim, token) > start, 240, "shares accepted after the reboot",
             interval=1)
