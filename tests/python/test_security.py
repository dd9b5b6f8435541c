"""Bad input never breaks mining or loses settings (issue 16.9) and config backup/restore with
undo (issue 13.6), each probed on a private, real `svcos sim` the way an attacker or a careless
owner would."""

import json
import selectors
import socket
import time
import tomllib
import urllib.request
from http.client import HTTPConnection

import anyio
import pytest

from conftest import PASSWORD, http, start_sim, stop_sim, wait_for

POOL_SECRET = "hunter22-pool-secret"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = start_sim(tmp_path_factory.mktemp("security"))
    try:
        yield s
    finally:
        stop_sim(s)


@pytest.fixture(scope="module")
def token(stack) -> str:
    http("POST", f"{stack.api_url}/api/auth/setup", body={"password": PASSWORD})
    status, _, body = http("POST", f"{stack.api_url}/api/auth/session", body={"password": PASSWORD})
    assert status == 200, body
    return body["token"]


def get_config(stack, token) -> dict:
    status, _, body = http("GET", f"{stack.api_url}/api/config", token=token)
    assert status == 200, body
    return body["config"]


def export(stack, token) -> str:
    req = urllib.request.Request(
        f"{stack.api_url}/api/config/export", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def assert_envelope(status, body, expected, field=None):
    assert status == expected, body
    assert isinstance(body, dict) and body.get("error"), body
    if field is not None:
        assert body.get("field") == field, body


def cgminer_raw(stack, payload: bytes) -> bytes:
    with socket.create_connection((stack.bind, stack.legacy_port), timeout=10) as s:
        s.sendall(payload)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def service_running(stack, name: str) -> bool:
    return stack.services()[name]["state"] == "running"


def test_power_target_above_the_shared_bound_is_refused(stack, token):
    # svcos_common::bounds::POWER_TARGET_WATT, the bound hw-agent's SetPowerTarget checks too.
    status, _, body = http("POST", f"{stack.api_url}/api/config", token,
                           {"hardware": {"power_target_watt": 10001}})
    assert_envelope(status, body, 400, "hardware.power_target_watt")
    assert body.get("code") == "config_validation" and "10000 W" in body.get("detail", ""), body


def test_legacy_allow_prefix_over_32_is_refused_everywhere_config_enters(stack, token):
    api = stack.api_url
    bad = "W:127.0.0.5/33"
    status, _, body = http("POST", f"{api}/api/config", token, {"legacy": {"allow": [bad]}})
    assert_envelope(status, body, 400, "legacy.allow[0]")
    assert body.get("code") == "config_validation", body
    toml = f'[legacy]\nallow = ["{bad}"]\n'
    status, _, body = http("POST", f"{api}/api/config/import", token, {"toml": toml})
    assert_envelope(status, body, 400, "legacy.allow[0]")
    backup = export(stack, token)
    assert "allow = []" in backup, backup
    status, _, body = http("POST", f"{api}/api/config/restore", token, {"toml": backup.replace("allow = []", f'allow = ["{bad}"]')})
    assert_envelope(status, body, 400, "legacy.allow[0]")
    assert get_config(stack, token)["legacy"]["allow"] == []

    # What the gateway accepts, legacy-tcp runs with: restart it and it stays up.
    status, _, body = http("POST", f"{api}/api/config", token, {"legacy": {"allow": ["W:127.0.0.5/32"]}})
    assert status == 200, body
    out = stack.ctl("restart", "legacy-tcp")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: service_running(stack, "legacy-tcp"), 60, "legacy-tcp running again")
    reply = json.loads(cgminer_raw(stack, b'{"command":"version"}').rstrip(b"\0"))
    assert reply["STATUS"][0]["STATUS"] == "S", reply
    assert stack.services()["legacy-tcp"]["state"] == "running"


def test_import_merges_refuses_no_pool_and_keeps_masked_secrets(stack, token):
    api = stack.api_url
    before = get_config(stack, token)
    assert before["pools"], "the sim mines against its test pool"
    secret_before = export(stack, token)

    # A partial document changes only what it names.
    status, _, body = http("POST", f"{api}/api/config/import", token, {"toml": "[thermal]\ntarget_temp_c = 71.0\n"})
    assert status == 200, body
    assert body["changed"] == ["thermal.target_temp_c"], body
    after = get_config(stack, token)
    assert after["thermal"]["target_temp_c"] == 71.0
    for section in ("pools", "api", "legacy", "power", "mqtt", "webhook", "system"):
        assert after[section] == before[section], section

    # No pool: refused, nothing changes.
    status, _, body = http("POST", f"{api}/api/config/import", token, {"config": {"pools": []}})
    assert_envelope(status, body, 400, "pools")
    # An explicit full replace must carry the required sections.
    status, _, body = http("POST", f"{api}/api/config/import", token, {"toml": "[thermal]\ntarget_temp_c = 70.0\n", "mode": "replace"})
    assert_envelope(status, body, 400, "system")
    assert get_config(stack, token)["pools"] == before["pools"]

    # Re-importing GET /api/config (secrets masked) keeps the stored secrets.
    status, _, whole = http("GET", f"{api}/api/config", token=token)
    assert whole["config"]["pools"][0]["password"] == "********"
    status, _, body = http("POST", f"{api}/api/config/import", token, {"config": whole, "mode": "replace"})
    assert status == 200, body
    text = export(stack, token)
    assert "********" not in text, text
    now, then = tomllib.loads(text), tomllib.loads(secret_before)
    for section in ("pools", "mqtt", "webhook"):
        assert now[section] == then[section], section


def test_pool_url_credentials_are_masked_everywhere(stack, token):
    api = stack.api_url
    pools = get_config(stack, token)["pools"]
    secret_url = f"stratum+tcp://alice:{POOL_SECRET}@{stack.bind}:{stack.pool_port}"
    # First in line, so stratum-agent dials it rather than holding it as an idle backup.
    new = [{"url": secret_url, "user": "alice.rig", "password": "x", "priority": 0}]
    new += [dict(p, priority=p["priority"] + 1) for p in pools]
    status, _, body = http("POST", f"{api}/api/pools", token, {"pools": new})
    assert status == 200, body

    def shown():
        _, _, st = http("GET", f"{api}/api/status", token=token)
        return "alice:********@" in json.dumps(st)

    wait_for(shown, 60, "the new pool in /api/status, masked")

    def connected():
        _, _, body = http("GET", f"{api}/api/pools", token=token)
        status = body["pools"][0].get("status") or {}
        return status.get("state") == "alive" and status.get("connected_since", 0) > 0 and status

    # The URL's credentials are not dialled: the pool behind the '@' is reached and authorises
    # (the pool in use stays until failback's hysteresis has passed).
    wait_for(connected, 60, "the pool with credentials in its URL connected")
    surfaces = {}
    for path in ("/api/status", "/api/pools", "/api/config", "/api/config/shared", "/api/pools/failover_policy"):
        status, _, body = http("GET", f"{api}{path}", token=token)
        assert status == 200, (path, body)
        surfaces[path] = json.dumps(body)
    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as r:
        surfaces["/metrics"] = r.read().decode()
    surfaces["cgminer pools"] = cgminer_raw(stack, b'{"command":"pools"}').decode(errors="replace")
    for where, text in surfaces.items():
        assert POOL_SECRET not in text, f"{where} shows the pool URL password"
    assert "alice:********@" in surfaces["/metrics"]
    assert POOL_SECRET in export(stack, token), "the explicit export keeps it"

    # Echoing the masked list back keeps the real URL.
    status, _, body = http("GET", f"{api}/api/pools", token=token)
    echoed = [{k: p[k] for k in ("url", "user", "password", "priority", "quota", "enabled")} for p in body["pools"]]
    status, _, body = http("POST", f"{api}/api/pools", token, {"pools": echoed})
    assert status == 200, body
    assert POOL_SECRET in export(stack, token)
    status, _, body = http("POST", f"{api}/api/pools", token, {"pools": pools})
    assert status == 200, body


def test_cgminer_empty_join_is_valid_json(stack):
    for payload in (b'{"command":"+"}', b'{"command":"++"}'):
        raw = cgminer_raw(stack, payload)
        assert raw.endswith(b"\0"), raw
        reply = json.loads(raw[:-1])
        assert reply["STATUS"][0]["STATUS"] == "E", reply
    plain = cgminer_raw(stack, b"+")
    assert b"STATUS=E" in plain, plain


def test_restore_validates_first_and_undo_is_one_step(stack, token):
    api = stack.api_url
    backup = export(stack, token)
    original = get_config(stack, token)["system"]["hostname"]

    # A broken backup is refused before anything is written.
    status, _, body = http("POST", f"{api}/api/config/restore", token, {"toml": "[system]\nhostname = \"x\"\n"})
    assert_envelope(status, body, 400, "api")
    status, _, body = http("POST", f"{api}/api/config/restore", token, {"toml": backup.replace("[thermal]", "[thermal]\nbogus = 1")})
    assert status == 400, body
    assert get_config(stack, token)["system"]["hostname"] == original

    changed = backup.replace(f'hostname = "{original}"', 'hostname = "restored-rig"')
    assert changed != backup
    status, _, body = http("POST", f"{api}/api/config/restore", token, {"toml": changed})
    assert status == 200, body
    assert body["undo"]["available"] is True, body
    assert get_config(stack, token)["system"]["hostname"] == "restored-rig"
    status, _, manifest = http("GET", f"{api}/api/config/backup/manifest", token=token)
    assert manifest["undo"]["available"] is True, manifest

    status, _, body = http("POST", f"{api}/api/config/restore/undo", token, {})
    assert status == 200, body
    assert body["undo"]["available"] is False, body
    assert get_config(stack, token)["system"]["hostname"] == original
    assert export(stack, token) == backup, "the undo puts back the exact previous config"
    status, _, body = http("POST", f"{api}/api/config/restore/undo", token, {})
    assert_envelope(status, body, 409)


def raw_http(host: str, port: int, method: str, path: str, headers=None, body: bytes | None = None, source: str | None = None, timeout=15.0):
    """(status, headers, parsed body) over http.client, optionally from a chosen source address."""
    conn = HTTPConnection(host, port, timeout=timeout, source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return r.status, hdrs, parsed
    finally:
        conn.close()


def test_foreign_host_gets_the_same_status_on_both_ports_and_extra_names_work(stack, token):
    ports = {"gateway": stack.api_port, "proxy": stack.http_port}
    for name, port in ports.items():
        for host in ("evil.example", "miner.lan", "garage.home.arpa", f"{stack.bind}.evil.example"):
            status, _, body = raw_http(stack.bind, port, "GET", "/api/status", {"Host": host})
            assert status == 421, (name, host, body)
            assert body["error"] == "unexpected Host header", (name, body)
        for host in (stack.bind, f"{stack.bind}:{port}", "localhost", "svcos.local"):
            status, _, body = raw_http(stack.bind, port, "GET", "/api/status", {"Host": host, "Authorization": f"Bearer {token}"})
            assert status == 200, (name, host, body)

    status, _, body = http("POST", f"{stack.api_url}/api/config", token, {"api": {"allowed_hosts": ["miner.lan", "*.home.arpa"]}})
    assert status == 200, body
    assert {"key": "api.allowed_hosts", "service": "proxy"} in body["restart_required"], body
    status, _, body = http("POST", f"{stack.api_url}/api/config", token, {"api": {"allowed_hosts": ["*"]}})
    assert_envelope(status, body, 400, "api.allowed_hosts[0]")
    out = stack.ctl("restart", "proxy")
    assert out.returncode == 0, out.stderr

    def proxy_answers():
        return raw_http(stack.bind, stack.http_port, "GET", "/api/auth/status", {"Host": "miner.lan"})[0] == 200

    wait_for(proxy_answers, 60, "the restarted proxy answering to miner.lan")
    for name, port in ports.items():
        for host, want in (("miner.lan", 200), ("MINER.LAN:80", 200), ("garage.home.arpa", 200), ("home.arpa", 421), ("evil.example", 421)):
            status, _, body = raw_http(stack.bind, port, "GET", "/api/status", {"Host": host, "Authorization": f"Bearer {token}"})
            assert status == want, (name, host, body)
    status, _, body = http("POST", f"{stack.api_url}/api/config", token, {"api": {"allowed_hosts": []}})
    assert status == 200, body


def test_cross_site_browser_writes_are_refused_and_the_miners_own_pages_are_not(stack, token):
    """A page on another site may make the browser send a "simple" POST (a form, or fetch with
    text/plain) without asking first; it must not log in, set the password or act."""
    login_body = json.dumps({"password": PASSWORD}).encode()

    def restarts():
        status, _, body = http("GET", f"{stack.api_url}/api/system/health", token=token)
        assert status == 200, body
        return {s["name"]: s["restarts"] for s in body["services"]}

    before = restarts()
    for name, port in {"gateway": stack.api_port, "proxy": stack.http_port}.items():
        for path in ("/api/auth/session", "/api/auth/setup", "/api/setup/skip-safety", "/api/action/reboot"):
            for headers in (
                {"Origin": "http://evil.example", "Content-Type": "text/plain"},
                {"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
                {"Origin": "null", "Content-Type": "text/plain;charset=+json"},
                {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
            ):
                status, _, body = raw_http(stack.bind, port, "POST", path, headers, login_body, source="127.0.0.221")
                assert status == 403, (name, path, headers, body)
                assert body["error"] == "cross-site request refused", body
        # Without an Origin a JSON look-alike media type is still not JSON.
        status, _, body = raw_http(stack.bind, port, "POST", "/api/auth/session",
                                   {"Content-Type": "text/plain;charset=+json"}, login_body, source="127.0.0.221")
        assert status == 415, (name, body)
        # The dashboard's own origin (the proxy forwards Host and Origin as they came), and
        # clients that are not browsers, still log in.
        origin = f"http://{stack.bind}:{port}"
        for headers in ({"Origin": origin, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
                        {"Content-Type": "application/json"}):
            status, _, body = raw_http(stack.bind, port, "POST", "/api/auth/session", headers, login_body, source="127.0.0.221")
            assert status == 200 and body["token"], (name, headers, body)
    assert restarts() == before, "the refused reboots restarted nothing"


def test_a_second_host_header_is_refused_on_both_ports(stack):
    for port in (stack.api_port, stack.http_port):
        with socket.create_connection((stack.bind, port), timeout=10) as s:
            s.sendall(f"GET /api/auth/status HTTP/1.1\r\nHost: {stack.bind}\r\nHost: evil.example\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), (port, head)
        assert json.loads(body)["error"] == "more than one Host header", body


def test_forwarded_for_is_believed_only_from_the_proxy(stack):
    """The setup limit (3 per 60 s per address) cannot be dodged by naming other addresses."""
    src = "127.0.0.211"
    statuses = []
    for i in range(5):
        status, _, body = raw_http(
            stack.bind, stack.api_port, "POST", "/api/auth/setup",
            {"Content-Type": "application/json", "X-Forwarded-For": f"10.9.8.{i}"},
            json.dumps({"password": "another password 1"}).encode(), source=src,
        )
        statuses.append(status)
    assert statuses[:3] == [409, 409, 409], statuses
    assert statuses[3:] == [429, 429], statuses
    # Through the proxy the real client address counts, whatever the client claims.
    src = "127.0.0.212"
    statuses = []
    for i in range(5):
        status, headers, body = raw_http(
            stack.bind, stack.http_port, "POST", "/api/auth/setup",
            {"Content-Type": "application/json", "X-Forwarded-For": f"10.9.7.{i}", "X-Svcos-Proxy-Key": "guess"},
            json.dumps({"password": "another password 1"}).encode(), source=src,
        )
        statuses.append(status)
    assert statuses == [409, 409, 409, 429, 429], statuses
    assert int(headers["retry-after"]) >= 1, headers


def test_failed_logins_are_throttled_per_address_without_locking_the_owner_out(stack):
    attacker = "127.0.0.213"
    statuses = []
    retry = None
    for _ in range(12):
        status, headers, body = raw_http(
            stack.bind, stack.api_port, "POST", "/api/auth/session",
            {"Content-Type": "application/json"}, json.dumps({"password": "wrong guess 123"}).encode(), source=attacker,
        )
        statuses.append(status)
        if status == 429:
            retry = int(headers["retry-after"])
            assert body.get("retry_after_s") == retry, body
            break
    assert statuses[:5] == [401] * 5, statuses
    assert statuses[-1] == 429, f"no throttling after {len(statuses)} wrong guesses: {statuses}"
    # (That even the right password waits out the wait is pinned with a manual clock in
    # services/auth/tests/auth_service.rs.) The owner elsewhere is never affected ...
    status, _, body = raw_http(
        stack.bind, stack.api_port, "POST", "/api/auth/session",
        {"Content-Type": "application/json"}, json.dumps({"password": PASSWORD}).encode(), source="127.0.0.214",
    )
    assert status == 200, body

    # ... and from the throttled address the right password works once the short wait is over.
    def owner_gets_in():
        status, _, _ = raw_http(
            stack.bind, stack.api_port, "POST", "/api/auth/session",
            {"Content-Type": "application/json"}, json.dumps({"password": PASSWORD}).encode(), source=attacker,
        )
        return status == 200

    assert retry <= 30
    wait_for(owner_gets_in, 60, "the right password accepted after the wait", interval=1.0)


def test_large_body_to_a_route_that_does_not_read_it_is_not_a_502(stack, token):
    body = json.dumps({"padding": "x" * 100_000}).encode()
    for port in (stack.http_port, stack.api_port):
        conn = HTTPConnection(stack.bind, port, timeout=15)
        try:
            for path, want in (("/api/status", 401), ("/api/no-such-route", 404), ("/api/auth/status", 200)):
                conn.request("POST" if path != "/api/auth/status" else "GET", path, body=body if path != "/api/auth/status" else None,
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status in (want, 405), (port, path, r.status)
        finally:
            conn.close()


def test_a_flood_of_held_connections_does_not_lock_the_owner_out(stack, token):
    flood_src = "127.0.0.215"
    held = []
    try:
        for port in (stack.api_port, stack.http_port, stack.legacy_port):
            for _ in range(150):
                s = socket.socket()
                s.bind((flood_src, 0))
                s.settimeout(5)
                try:
                    s.connect((stack.bind, port))
                except OSError:
                    s.close()
                    continue
                held.append((port, s))
        # Beyond its share the flooding address was turned away at once, and told why: 503 with
        # the envelope on the HTTP ports, a cgminer STATUS=E on 4028. (Read right away: the
        # connections it may hold stay silent until the servers' header timeouts close them.)
        answers = {s: b"" for _, s in held}
        closed = set()
        with selectors.DefaultSelector() as sel:
            for _, s in held:
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
            deadline = time.monotonic() + 3
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.2):
                    try:
                        chunk = key.fileobj.recv(4096)
                    except OSError:
                        chunk = b""
                    answers[key.fileobj] += chunk
                    if not chunk:
                        closed.add(key.fileobj)
                        sel.unregister(key.fileobj)
        refused = {port: 0 for port, _ in held}
        for port, s in held:
            if s not in closed:
                continue
            data = answers[s]
            if port == stack.legacy_port and data == b"":
                continue  # one it held, given up on by its read timeout (silent client)
            if port == stack.legacy_port:
                status = json.loads(data.rstrip(b"\0"))["STATUS"][0]
                assert status["STATUS"] == "E" and "Too many connections" in status["Msg"], data
            else:
                assert data.startswith(b"HTTP/1.1 503"), data
                assert b"too many connections" in data, data
            refused[port] += 1
        # The owner, from another address, is served while the flood is held.
        status, _, body = http("GET", f"{stack.api_url}/api/status", token=token, timeout=8)
        assert status == 200, body
        status, _, body = http("GET", f"{stack.http_url}/api/status", token=token, timeout=8)
        assert status == 200, body
        with socket.create_connection((stack.bind, stack.legacy_port), timeout=8) as s:
            s.sendall(b'{"command":"summary"}')
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert json.loads(data.rstrip(b"\0"))["STATUS"][0]["STATUS"] == "S"
        # Each port holds a few dozen of the address's connections at most and refuses the rest.
        assert all(n >= 100 for n in refused.values()), f"refused per port: {refused}"
    finally:
        for _, s in held:
            s.close()
    assert all(stack.services()[n]["state"] == "running" for n in ("gateway", "proxy", "legacy-tcp"))


def test_damaged_state_files_are_moved_aside_reported_and_never_fatal(stack, token):
    api = stack.api_url
    tuner_settings = stack.dir / "state" / "tuner" / "settings.json"
    tuner_settings.parent.mkdir(parents=True, exist_ok=True)
    # A truncated file, as a power cut during a non-atomic copy by hand leaves it.
    tuner_settings.write_text('{"schema": "svcos.tuner.settings.v1", "active": tr')
    out = stack.ctl("restart", "tuner")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: service_running(stack, "tuner"), 60, "the tuner running again")

    wizard = stack.dir / "state" / "gateway" / "setup-wizard.json"
    wizard.parent.mkdir(parents=True, exist_ok=True)
    wizard.write_text('{"steps": {"safety": {"sta')
    status, _, body = http("GET", f"{api}/api/setup/status")
    assert status == 200, body

    def reported():
        status, _, body = http("GET", f"{api}/api/safety/warnings")
        assert status == 200, body
        files = {w["message"].split("'s ")[1].split(" ")[0] for w in body["warnings"] if w["id"] == "state_file_recovered"}
        return {"settings.json", "setup-wizard.json"} <= files

    wait_for(reported, 30, "both damaged files in /api/safety/warnings")
    assert list(tuner_settings.parent.glob("settings.json.corrupt-*")), "the bad bytes are kept"
    assert list(wizard.parent.glob("setup-wizard.json.corrupt-*"))
    tuner = stack.services()["tuner"]
    assert tuner["state"] == "running", tuner


def test_non_utf8_password_hash_refuses_logins_without_a_restart_loop(stack, token):
    # The reproduction of issue 29: one non-UTF-8 byte made auth exit 1 in a loop until the
    # supervisor restarted the whole stack, hw-sim included. Now auth moves the file aside
    # and answers 503 (services/auth/src/store.rs), and the chips' side is never touched.
    phc = stack.dir / "state" / "auth" / "password.phc"
    original = phc.read_bytes()
    before = stack.services()
    try:
        phc.write_bytes(original[:20] + b"\xff" + original[20:])
        out = stack.ctl("restart", "auth")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: service_running(stack, "auth"), 60, "auth running again")

        def answer():
            status, _, body = raw_http(
                stack.bind, stack.api_port, "POST", "/api/auth/session",
                {"Content-Type": "application/json"}, json.dumps({"password": PASSWORD}).encode(), source="127.0.0.216",
            )
            # A 503 without the reset hint is auth still coming up.
            return (status, body) if "reset" in json.dumps(body) else None

        status, body = wait_for(answer, 60, "auth answering about the damaged hash")
        assert status == 503, body
        text = json.dumps(body)
        assert str(stack.dir) not in text and "/state/" not in text and "password.phc" not in text, text
        assert list(phc.parent.glob("password.phc.corrupt-*")), "the bad bytes are kept"
        time.sleep(2)
        after = stack.services()
        assert after["auth"]["state"] == "running", after["auth"]
        for name in ("hw-sim", "hw-agent"):
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted"
    finally:
        for aside in phc.parent.glob("password.phc.corrupt-*"):
            aside.unlink()
        phc.write_bytes(original)
        stack.ctl("restart", "auth")
        wait_for(lambda: service_running(stack, "auth"), 60, "auth running again")


NEW_PASSWORD = "a brand new owner passphrase"


def login(stack, password, source="127.0.0.217"):
    status, _, body = raw_http(
        stack.bind, stack.api_port, "POST", "/api/auth/session",
        {"Content-Type": "application/json"}, json.dumps({"password": password}).encode(), source=source,
    )
    return status, body


def test_read_only_api_tokens_and_password_change(stack, token):
    api = stack.api_url
    status, second = login(stack, PASSWORD)
    assert status == 200, second
    other = second["token"]

    status, _, created = http("POST", f"{api}/api/auth/tokens", token, {"name": "home-assistant"})
    assert status == 200, created
    ro = created["token"]
    assert ro.startswith("svcro_") and created["scope"] == "read", created
    stored = (stack.dir / "state" / "auth" / "api-tokens.json").read_text()
    assert ro not in stored and ro[6:] not in stored, "stored hashed, like sessions"

    # It reads ...
    for path in ("/api/status", "/api/pools", "/api/config"):
        status, _, body = http("GET", f"{api}{path}", token=ro)
        assert status == 200, (path, body)
    status, _, body = http("GET", f"{stack.http_url}/api/status", token=ro)
    assert status == 200, body
    # ... and never writes, with a clear envelope.
    for method, path, payload in (
        ("POST", "/api/config", {"thermal": {"target_temp_c": 70}}),
        ("POST", "/api/pools", {"pools": []}),
        ("POST", "/api/action/sleep", {}),
        ("DELETE", "/api/auth/session/current", None),
        ("POST", "/api/auth/tokens", {"name": "escalate"}),
        ("POST", "/api/auth/password", {"current_password": PASSWORD, "new_password": "x" * 12}),
    ):
        status, _, body = http(method, f"{api}{path}", ro, payload)
        assert status == 403, (path, body)
        assert body["error"] == "this token is read-only" and body.get("token_scope") == "read", body
    status, _, body = http("GET", f"{api}/api/auth/tokens", token=ro)
    assert status == 403, body
    # The backup carries secrets in the clear: the owner's, never a read token's.
    status, _, body = http("GET", f"{api}/api/config/export", token=ro)
    assert status == 403 and body.get("token_scope") == "read", body
    assert "export" in body["detail"] and POOL_SECRET not in json.dumps(body), body
    assert "[[pools]]" in export(stack, token)

    # MCP: read tools answer, control tools need the owner.
    from test_mcp import field, mcp_session  # the official MCP SDK client

    async def main():
        async with mcp_session(stack, ro) as (session, _):
            read = await session.call_tool("get_status", {})
            control = await session.call_tool("sleep", {})
            return read, control

    read, control = anyio.run(main)
    assert not field(read, "is_error", "isError"), read
    assert field(control, "is_error", "isError") is True, control

    status, _, listed = http("GET", f"{api}/api/auth/tokens", token=token)
    assert status == 200, listed
    [entry] = [t for t in listed["tokens"] if t["id"] == created["id"]]
    assert entry["name"] == "home-assistant" and "token" not in entry and entry["last_used_at"], entry

    # Password change: wrong current password refused, then changed; other sessions end.
    status, _, body = http("POST", f"{api}/api/auth/password", token, {"current_password": "not it at all", "new_password": NEW_PASSWORD})
    assert_envelope(status, body, 400, "current_password")
    status, _, body = http("POST", f"{api}/api/auth/password", token, {"current_password": PASSWORD, "new_password": "short"})
    assert status == 400, body
    status, _, body = http("POST", f"{api}/api/auth/password", token, {"current_password": PASSWORD, "new_password": NEW_PASSWORD})
    assert status == 200, body
    assert body["sessions_revoked"] >= 1, body
    try:
        wait_for(lambda: http("GET", f"{api}/api/status", token=other)[0] == 401, 10, "the other session revoked")
        assert http("GET", f"{api}/api/status", token=token)[0] == 200, "the caller's session stays"
        assert http("GET", f"{api}/api/status", token=ro)[0] == 200, "API tokens stay"
        assert login(stack, PASSWORD, source="127.0.0.218")[0] == 401
        assert login(stack, NEW_PASSWORD, source="127.0.0.218")[0] == 200
        status, _, audit = http("GET", f"{api}/api/audit-log", token=token)
        assert any(e["path"] == "/api/auth/password" and e["status"] == 200 for e in audit["entries"]), audit

        # Revoked: refused at once.
        status, _, body = http("DELETE", f"{api}/api/auth/tokens/{created['id']}", token)
        assert status == 200, body
        assert http("GET", f"{api}/api/status", token=ro)[0] == 401
        status, _, body = http("DELETE", f"{api}/api/auth/tokens/{created['id']}", token)
        assert status == 404, body
    finally:
        status, _, body = http("POST", f"{api}/api/auth/password", token, {"current_password": NEW_PASSWORD, "new_password": PASSWORD})
        assert status == 200, body
