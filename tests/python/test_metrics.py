"""Prometheus: the real /metrics of a running stack through `promtool check metrics`, the
families of issue 30 with values checked against what the processes and /proc say, and the
restart counter of a SIGKILLed service moving and surviving a restart of the supervisor."""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from conftest import kill_everything, start_sim, stop_sim, wait_for

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian: prometheus) is not installed")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')


def scrape(sim) -> str:
    with urllib.request.urlopen(f"{sim.api_url}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()


def samples(text: str) -> dict:
    """(name, frozenset of label pairs) -> value."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def series(text: str, name: str, **labels) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def family(text: str, name: str) -> dict:
    """label dict (as a frozenset) -> value, for one family."""
    return {lb: v for (n, lb), v in samples(text).items() if n == name}


def promtool_check(text: str):
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, f"promtool: {out.stdout}{out.stderr}\n{text}"


def proc_start_time(pid: int) -> float:
    """Start time of `pid` in Unix seconds, from /proc as Prometheus' own process collector reads it."""
    stat = open(f"/proc/{pid}/stat").read()
    start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    btime = next(int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime "))
    return btime + start_ticks / os.sysconf("SC_CLK_TCK")


def test_metrics_pass_promtool_and_carry_every_family(sim):
    def mining(text):
        # Hashing now, not only once: another test of the shared stack may have put the board
        # to sleep, and a sleeping chain draws no share of the PSU's power.
        chains = family(text, "svcos_chain_nonces_total")
        power = family(text, "svcos_chain_power_watt")
        return chains and all(v > 0 for v in chains.values()) \
            and power and all(v > 0 for v in power.values()) \
            and series(text, "svcos_tuner_active") is not None

    wait_for(lambda: mining(scrape(sim)), 120, "per-chain nonces and the tuner's state in /metrics")

    def consistent():
        # Services whose state and pid did not change around the scrape (another test of the
        # shared stack may restart one meanwhile).
        before = sim.services()
        t = scrape(sim)
        after = sim.services()
        same = {n: s for n, s in after.items()
                if (before[n]["state"], before[n]["pid"]) == (s["state"], s["pid"])}
        return (t, same) if mining(t) and len(same) == len(after) else None

    text, services = wait_for(consistent, 60, "a scrape with no service changing around it")
    promtool_check(text)
    assert series(text, "svcos_up", service="supervisor") == 1
    now = time.time()
    for name, s in services.items():
        running = s["state"] == "running"
        assert series(text, "svcos_up", service=name) == (1 if running else 0), (name, s)
        restarts = series(text, "svcos_service_restarts_total", service=name)
        assert restarts is not None and restarts >= 0, name
        if not running:
            continue
        rss = series(text, "svcos_process_resident_memory_bytes", service=name)
        assert rss is not None and 1_000_000 < rss < 2_000_000_000, (name, rss)
        cpu = series(text, "svcos_process_cpu_seconds_total", service=name)
        # A quiet process may not have used one clock tick yet; the mining loop has.
        assert cpu is not None and cpu >= 0 and (cpu > 0 or name != "hw-agent"), (name, cpu)
        started = series(text, "svcos_process_start_time_seconds", service=name)
        # The supervisor reads /proc as this test does: the same process, the same second.
        pid = int(s["pid"])
        assert abs(started - proc_start_time(pid)) < 1.0, (name, started, pid)
        assert now - 86_400 < started <= now, (name, started)
    assert {"hw-agent", "stratum-agent", "tuner", "gateway", "auth", "legacy-tcp", "proxy"} <= set(services)

    for name in ("svcos_chain_frequency_mhz", "svcos_chain_voltage_volts", "svcos_chain_power_watt"):
        values = family(text, name)
        assert values and all(v > 0 for v in values.values()), (name, values)
    chains = family(text, "svcos_chain_frequency_mhz")
    assert set(family(text, "svcos_chain_hw_errors_total")) == set(chains)
    for v in family(text, "svcos_chain_voltage_volts").values():
        # Chip supply voltage in volts, not millivolts.
        assert 5 < v < 25, v
    # The S9 PSU feeds the hashboards directly (~9 V), in volts.
    assert 5 < series(text, "svcos_psu_voltage_volts") < 25
    assert series(text, "svcos_psu_current_amperes") > 0
    assert series(text, "svcos_psu_power_watt") > 0

    tuner = family(text, "svcos_tuner_state")
    assert sorted(tuner.values()).count(1.0) == 1, tuner
    assert {dict(lb)["state"] for lb in tuner} >= {"disabled", "idle", "tuning", "tuned"}
    update = family(text, "svcos_update_phase")
    assert sorted(update.values()).count(1.0) == 1, update
    assert 0 <= series(text, "svcos_update_progress_percent") <= 100

    # The families of before, under their names.
    for name in ("svcos_info", "svcos_hashrate_ghs", "svcos_nonces_total", "svcos_pool_shares_total",
                 "svcos_chain_temp_celsius", "svcos_fan_rpm", "svcos_best_share"):
        assert f"# TYPE {name} " in text, name


def scrape_when(sim, name: str, service: str) -> str | None:
    """A scrape in which `name{service}` is 1, else None."""
    text = scrape(sim)
    return text if series(text, name, service=service) == 1 else None


def relaunch(tmp_path, sim):
    """SIGKILL the supervisor and every service (nothing gets to save), then start the stack
    again on the same directory."""
    kill_everything(sim)
    return start_sim(tmp_path)


def test_a_killed_services_restart_counter_moves_and_survives_a_supervisor_restart(tmp_path):
    sim = start_sim(tmp_path)
    try:
        text = wait_for(lambda: scrape_when(sim, "svcos_up", "tuner"), 60, "tuner up in /metrics")
        before = series(text, "svcos_service_restarts_total", service="tuner")
        gateway_before = series(text, "svcos_service_restarts_total", service="gateway")
        assert before is not None
        pid = int(sim.services()["tuner"]["pid"])
        os.kill(pid, signal.SIGKILL)

        def counted():
            t = scrape(sim)
            return t if series(t, "svcos_service_restarts_total", service="tuner") == before + 1 \
                and series(t, "svcos_up", service="tuner") == 1 else None

        text = wait_for(counted, 60, "the tuner's restart counted and the tuner back up")
        promtool_check(text)
        # Only the killed service counted a restart.
        assert series(text, "svcos_service_restarts_total", service="gateway") == gateway_before
        assert int(sim.services()["tuner"]["pid"]) != pid
        saved = tmp_path / "sim" / "state" / "supervisor" / "restarts.json"
        assert saved.exists(), list(saved.parent.iterdir())

        sim = relaunch(tmp_path, sim)
        text = wait_for(lambda: scrape_when(sim, "svcos_up", "supervisor"), 60,
                        "the new supervisor answering /metrics")
        assert series(text, "svcos_service_restarts_total", service="tuner") == before + 1, text
        assert series(text, "svcos_service_restarts_total", service="gateway") == gateway_before
    finally:
        stop_sim(sim)
