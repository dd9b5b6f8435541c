"""Shared fixtures: one real `svcos sim` stack per test session, driven by real clients.

The stack binds a loopback address of its own (127.0.0.N) so that the legacy API can listen on
the real port 4028, which is the only port pyasic probes.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"


def svcos_bin() -> Path:
    if os.environ.get("SVCOS_BIN"):
        return Path(os.environ["SVCOS_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "svcos"
        if p.exists():
            return p
    raise RuntimeError("svcos binary not built: run `cargo build -p svcos` first")


def _port_free(addr: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
            return True
        except OSError:
            return False


def _port_window() -> range:
    """The 12k ports below the kernel's ephemeral range.

    A port from the ephemeral range can become the local end of some outgoing connection between
    picking it and the service's bind, and then stays taken for that connection's life.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            start = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        start = 32768
    low = max(1024, start - 12000)
    return range(low, max(low + 1, start))


_next_port = [os.getpid() * 7919]


def _free_port(addr: str) -> int:
    window = _port_window()
    for _ in window:
        _next_port[0] += 1
        port = window[_next_port[0] % len(window)]
        if _port_free(addr, port):
            return port
    raise RuntimeError(f"no free port in {window}")


def pick_loopback() -> str:
    """A loopback address whose port 4028 is free (127.0.0.1 is often taken by other tools)."""
    for n in range(2, 250):
        addr = f"127.0.0.{n}"
        if _port_free(addr, 4028):
            return addr
    raise RuntimeError("no loopback address with a free port 4028")


@dataclass
class Sim:
    """A running `svcos sim` instance."""

    dir: Path
    bind: str
    api_port: int
    http_port: int
    legacy_port: int
    pool_port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def api_url(self) -> str:
        return f"http://{self.bind}:{self.api_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.bind}:{self.http_port}"

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(svcos_bin()), "ctl", "--dir", str(self.dir), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )

    def services(self) -> dict:
        """name -> service record from `svcos ctl status --json`."""
        out = self.ctl("status", "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        items = data["services"] if isinstance(data, dict) else data
        return {s["name"]: s for s in items}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def http(method: str, url: str, token: str | None = None, body=None, timeout=10.0):
    """(status, lower-cased headers, parsed JSON or text) without raising on HTTP errors."""
    data = None
    headers = {}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, hdrs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    # HTTP header names are case-insensitive; callers look them up in lower case.
    hdrs = {k.lower(): v for k, v in hdrs.items()}
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, hdrs, parsed


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - we report the last failure below
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def start_sim(tmp: Path, setup_complete: bool = True) -> Sim:
    """Start `svcos sim` under `tmp`. By default as a miner in service (`--setup-complete`: the
    first config is one that finished setup, so hw-agent does not hold it at the setup cap);
    `setup_complete=False` starts a fresh install, held until the wizard is finished."""
    bind = pick_loopback()
    ports = dict(
        api_port=_free_port(bind),
        http_port=_free_port(bind),
        legacy_port=4028,
        pool_port=_free_port(bind),
    )
    log_path = tmp / "sim.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [
            str(svcos_bin()),
            "sim",
            "--dir",
            str(tmp / "sim"),
            "--bind",
            bind,
            "--api-port",
            str(ports["api_port"]),
            "--http-port",
            str(ports["http_port"]),
            "--legacy-port",
            str(ports["legacy_port"]),
            "--pool-port",
            str(ports["pool_port"]),
            *(["--setup-complete"] if setup_complete else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sim = Sim(dir=tmp / "sim", bind=bind, proc=proc, log_path=log_path, **ports)

    def api_up():
        assert proc.poll() is None, f"svcos sim exited early:\n{sim.log()[-4000:]}"
        status, _, _ = http("GET", f"{sim.api_url}/api/auth/status", timeout=2)
        return status == 200

    wait_for(api_up, 120, "the REST API of svcos sim")
    return sim


def stop_sim(sim: Sim):
    if sim.proc.poll() is None:
        sim.proc.send_signal(signal.SIGTERM)
        try:
            sim.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(sim.proc.pid, signal.SIGKILL)
            sim.proc.wait(timeout=5)
    # Children live in their own sessions; make sure none outlive the test run.
    subprocess.run(["pkill", "-KILL", "-f", "--", f"--dir {sim.dir}"], check=False)


# The shared stack's warnings, kept past its teardown for the report of a run that failed
# (CI shows the report, and the stack's folder is gone by then).
_SIM_WARNINGS: list[str] = []


@pytest.fixture(scope="session")
def sim(request):
    tmp = Path(tempfile.mkdtemp(prefix="svcos-e2e-"))
    s = start_sim(tmp)
    try:
        yield s
    finally:
        stop_sim(s)
        if request.session.testsfailed:
            lines = [ln for ln in s.log().splitlines() if " WARN " in ln or " ERROR " in ln]
            _SIM_WARNINGS.extend(lines[-80:])
        if os.environ.get("SVCOS_KEEP_SIM") is None:
            shutil.rmtree(tmp, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    if _SIM_WARNINGS:
        terminalreporter.section("the shared sim's last warnings")
        for line in _SIM_WARNINGS:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def token(sim) -> str:
    """A bearer token for the shared sim."""
    return login(sim)


def login(sim) -> str:
    """A bearer token for `sim`, setting the first-boot password if none is set yet."""
    status, _, body = http("GET", f"{sim.api_url}/api/auth/status")
    assert status == 200, body
    if not body.get("password_set"):
        status, _, body = http("POST", f"{sim.api_url}/api/auth/setup", body={"password": PASSWORD})
        assert status in (200, 201), body
    status, _, body = http("POST", f"{sim.api_url}/api/auth/session", body={"password": PASSWORD})
    assert status == 200, body
    tok = body.get("token")
    assert tok, body
    return tok


@contextlib.contextmanager
def own_stack(tmp: Path):
    """A stack of a test module's own in `tmp` (for tests that change what others read), with
    an owner token: yields (sim, token)."""
    s = start_sim(tmp)
    try:
        yield s, login(s)
    finally:
        stop_sim(s)


def accepted_shares(sim, token) -> int:
    """Shares the pool answered "accepted" to, as stratum-agent counted its verdicts; 0 while
    /api/status has no pool section yet."""
    status, _, body = http("GET", f"{sim.api_url}/api/status", token)
    if status != 200 or not isinstance(body, dict) or not body.get("pools"):
        return 0
    return int(body["pools"]["accepted"])


def cgminer(sim, command: str) -> dict:
    """One request on the cgminer port the way pyasic sends it (bare JSON, read to EOF)."""
    with socket.create_connection((sim.bind, sim.legacy_port), timeout=5) as s:
        s.sendall(json.dumps({"command": command}).encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.endswith(b"\0"), data[-50:]
    return json.loads(data[:-1])


def kill_everything(sim):
    """SIGKILL every service and the supervisor, by pid: nothing gets to flush."""
    pids = [int(s["pid"]) for s in sim.services().values() if int(s.get("pid") or 0) > 0]
    os.kill(sim.proc.pid, signal.SIGKILL)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sim.proc.wait(timeout=10)
    for pid in pids:
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                 open(f"/proc/{pid}/stat").read().split()[2] == "Z", 10, f"pid {pid} gone")
