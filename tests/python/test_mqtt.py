"""MQTT integration against a real mosquitto broker, read back with paho-mqtt.

Two brokers are started by the test on free loopback ports: one anonymous, one with a password
file made by mosquitto_passwd. The miner is configured through REST only; what arrives at the
broker (Home Assistant discovery, state, availability, Last Will, events) is checked against
/api/status. The shared stack's [mqtt] section is switched off again at the end.
"""

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from conftest import _free_port, http, wait_for

MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None
)
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")

pytestmark = pytest.mark.skipif(
    MOSQUITTO is None or MOSQUITTO_PASSWD is None,
    reason="mosquitto not installed (tests/run installs the Debian packages mosquitto and "
    "mosquitto-clients when run as root)",
)

USER = "miner"
PASSWORD = "s3cret-mqtt-pw"
PREFIX = "svcos-e2e"


class Broker:
    def __init__(self, tmp: Path, auth: bool):
        self.port = _free_port("127.0.0.1")
        conf = tmp / f"mosquitto-{self.port}.conf"
        lines = [f"listener {self.port} 127.0.0.1", "persistence false"]
        if os.geteuid() == 0:
            # Otherwise mosquitto drops to its own user, which cannot read our temp directory.
            lines.append("user root")
        if auth:
            pwfile = tmp / "passwd"
            subprocess.run(
                [MOSQUITTO_PASSWD, "-b", "-c", str(pwfile), USER, PASSWORD], check=True
            )
            os.chmod(pwfile, 0o600)
            lines += ["allow_anonymous false", f"password_file {pwfile}"]
        else:
            lines += ["allow_anonymous true"]
        conf.write_text("\n".join(lines) + "\n")
        self.log = open(tmp / f"mosquitto-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(conf), "-v"], stdout=self.log, stderr=subprocess.STDOUT
        )
        self.auth = auth

        def up():
            assert self.proc.poll() is None, "mosquitto exited"
            c = Collector(self, topics=())
            try:
                return c.wait_connected(2)
            finally:
                c.close()

        wait_for(up, 30, "mosquitto to accept connections", interval=0.3)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Collector:
    """A paho subscriber that records every message it receives."""

    def __init__(self, broker: Broker, topics=("#",)):
        self.msgs = []
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=f"pytest-{uuid.uuid4().hex[:8]}"
        )
        if broker.auth:
            self.client.username_pw_set(USER, PASSWORD)

        def on_connect(client, _userdata, _flags, reason_code, _props):
            if not reason_code.is_failure:
                for t in topics:
                    client.subscribe(t, qos=1)
                self.connected.set()

        def on_message(_client, _userdata, m):
            with self.lock:
                self.msgs.append((m.topic, m.payload, bool(m.retain)))

        self.client.on_connect = on_connect
        self.client.on_message = on_message
        self.client.connect("127.0.0.1", broker.port, keepalive=30)
        self.client.loop_start()

    def wait_connected(self, timeout: float) -> bool:
        return self.connected.wait(timeout)

    def messages(self, topic=None):
        with self.lock:
            return [m for m in self.msgs if topic is None or m[0] == topic]

    def json_on(self, topic):
        return [json.loads(p) for t, p, _ in self.messages(topic) if p]

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture(scope="module")
def brokers():
    tmp = Path(tempfile.mkdtemp(prefix="svcos-mqtt-"))
    anon = Broker(tmp, auth=False)
    secured = Broker(tmp, auth=True)
    yield anon, secured
    anon.stop()
    secured.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture()
def restore_mqtt(sim, token):
    yield
    status, _, body = http(
        "POST",
        f"{sim.api_url}/api/config/mqtt",
        token,
        {"enabled": False, "host": "", "username": "", "password": "", "publish_interval_s": 10,
         "keep_alive_s": 30, "topic_prefix": "svcos"},
    )
    assert status == 200, body


def configure(sim, token, **mqtt):
    status, _, body = http("POST", f"{sim.api_url}/api/config/mqtt", token, mqtt)
    assert status == 200, body
    assert body["schema"] == "svcos.api.config.write.v1"
    assert not body["restart_required"], body
    return body


def mqtt_status(sim, token):
    status, _, body = http("GET", f"{sim.api_url}/api/mqtt/status", token)
    assert status == 200, body
    assert body["schema"] == "svcos.api.mqtt.status.v1"
    return body


def topics(sim, token):
    status, _, body = http("GET", f"{sim.api_url}/api/config/mqtt", token)
    assert status == 200, body
    return body["topics"]


def test_state_discovery_availability_and_events_reach_the_broker(sim, token, brokers, restore_mqtt):
    anon, _ = brokers
    sub = Collector(anon)
    assert sub.wait_connected(10)
    configure(
        sim, token, enabled=True, host="127.0.0.1", port=anon.port, publish_interval_s=1,
        keep_alive_s=5, topic_prefix=PREFIX,
    )
    wait_for(lambda: mqtt_status(sim, token)["connected"], 30, "the MQTT session")
    st = mqtt_status(sim, token)
    assert st["enabled"] and st["broker"] == f"127.0.0.1:{anon.port}", st
    assert st["last_error"] is None, st
    t = topics(sim, token)
    assert t["base"].startswith(f"{PREFIX}/"), t
    node = t["base"].split("/", 1)[1]

    # Availability: retained "online" for a subscriber that arrives later.
    late = Collector(anon, topics=(t["availability"],))
    try:
        wait_for(lambda: late.messages(t["availability"]), 15, "retained availability")
        _, payload, retained = late.messages(t["availability"])[0]
        assert payload == b"online" and retained
    finally:
        late.close()

    # State messages agree with /api/status for the same telemetry snapshot.
    def matching_state():
        _, _, status = http("GET", f"{sim.api_url}/api/status", token)
        seq = status["mining"]["telemetry_seq"]
        for s in sub.json_on(t["state"]):
            if s.get("telemetry_seq") == seq:
                return s, status
        return None

    state, status = wait_for(matching_state, 60, "a state message with /api/status's telemetry_seq")
    assert state["schema"] == "svcos.mqtt.state.v1"
    assert state["hashrate_ghs"] == status["mining"]["hashrate_ghs"]["1m"]
    assert state["hashrate_ghs_5s"] == status["mining"]["hashrate_ghs"]["5s"]
    assert state["temp_max_c"] == status["mining"]["temp_max_c"]
    assert state["power_watt"] == status["mining"]["power_watt"]
    assert state["state"] == status["mining"]["state"]
    assert [c["temp_chip_c"] for c in state["chains"]] == [c["temp_chip_c"] for c in status["chains"]]
    assert [f["rpm"] for f in state["fans"]] == [f["rpm"] for f in status["fans"]]
    assert state["hashrate_ghs"] > 0, "the sim should be hashing"

    # Home Assistant discovery: retained config messages, one per sensor, pointing at the state.
    def discovery():
        found = {
            topic: json.loads(p) for topic, p, _ in sub.messages()
            if topic.startswith(f"homeassistant/sensor/{node}/") and topic.endswith("/config")
        }
        wanted = {"hashrate", "temp_max", "power", "state", "pool"} | {
            f"chain_{c['chain_id']}_temp" for c in status["chains"]
        } | {f"fan_{f['fan_id']}_rpm" for f in status["fans"]}
        have = {topic.split("/")[3] for topic in found}
        return found if wanted <= have else None

    found = wait_for(discovery, 30, "Home Assistant discovery configs")
    hashrate = found[f"homeassistant/sensor/{node}/hashrate/config"]
    assert hashrate["state_topic"] == t["state"]
    assert hashrate["availability_topic"] == t["availability"]
    assert hashrate["unique_id"] == f"svcos_{node}_hashrate"
    assert hashrate["unit_of_measurement"] == "GH/s"
    temp = found[f"homeassistant/sensor/{node}/temp_max/config"]
    assert temp["device_class"] == "temperature" and temp["unit_of_measurement"] == "°C"
    assert hashrate["device"]["identifiers"] == temp["device"]["identifiers"]

    # Events: sleep and wake through REST appear on the event topic.
    try:
        code, _, body = http("POST", f"{sim.api_url}/api/action/sleep", token)
        assert code == 200, body
        ev = wait_for(
            lambda: [e for e in sub.json_on(t["event"]) if e["event"] == "miner.sleep"],
            30, "a miner.sleep event",
        )[0]
        assert ev["schema"] == "svcos.event.v1" and ev["data"]["to"] == "sleeping", ev
    finally:
        code, _, body = http("POST", f"{sim.api_url}/api/action/wake", token)
        assert code == 200, body
    wait_for(
        lambda: [e for e in sub.json_on(t["event"]) if e["event"] == "miner.wake"],
        30, "a miner.wake event",
    )
    assert mqtt_status(sim, token)["messages_published"] > 3

    # Stop: switching MQTT off publishes "offline" (a clean disconnect suppresses the Will).
    configure(sim, token, enabled=False)
    wait_for(
        lambda: sub.messages(t["availability"]) and sub.messages(t["availability"])[-1][1] == b"offline",
        20, "availability offline after disabling",
    )
    st = wait_for(lambda: (s := mqtt_status(sim, token)) and not s["connected"] and s, 20, "disconnected")
    assert st["enabled"] is False
    sub.close()


def test_password_auth_wrong_password_test_endpoint_and_last_will(sim, token, brokers, restore_mqtt):
    _, secured = brokers
    sub = Collector(secured)
    assert sub.wait_connected(10)

    # A wrong password: the status says why, and the test endpoint reports the same step.
    configure(
        sim, token, enabled=True, host="127.0.0.1", port=secured.port, username=USER,
        password="wrong-password", publish_interval_s=1, keep_alive_s=5, topic_prefix=PREFIX,
    )
    st = wait_for(lambda: (s := mqtt_status(sim, token))["last_error"] and s, 30, "an MQTT error")
    assert not st["connected"]
    assert "refused" in st["last_error"] and (
        "password" in st["last_error"] or "authoris" in st["last_error"]
    ), st
    code, _, report = http("POST", f"{sim.api_url}/api/config/mqtt/test", token, {})
    assert code == 200, report
    assert report["schema"] == "svcos.api.mqtt_test.v1" and report["ok"] is False, report
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["resolve"]["ok"] and steps["tcp_connect"]["ok"], report
    assert not steps["mqtt_connect"]["ok"] and "refused" in steps["mqtt_connect"]["error"], report
    assert all(isinstance(s["elapsed_ms"], int) for s in report["steps"])

    # The right password in the test body (the saved one stays wrong): every step passes and
    # the test message reaches the broker.
    code, _, report = http(
        "POST", f"{sim.api_url}/api/config/mqtt/test", token, {"password": PASSWORD}
    )
    assert code == 200 and report["ok"], report
    assert [s["name"] for s in report["steps"]] == [
        "resolve", "tcp_connect", "mqtt_connect", "publish", "disconnect",
    ]
    wait_for(lambda: sub.messages(report["topic"]), 15, "the test message")

    # A closed port: a clear TCP error.
    code, _, report = http(
        "POST", f"{sim.api_url}/api/config/mqtt/test", token,
        {"host": "127.0.0.1", "port": _free_port("127.0.0.1")},
    )
    assert code == 200 and not report["ok"], report
    assert report["steps"][-1]["name"] == "tcp_connect" and "refused" in report["steps"][-1]["error"].lower(), report

    # The right password: connected; GET never shows it; a POST without it keeps it.
    configure(sim, token, password=PASSWORD)
    wait_for(lambda: mqtt_status(sim, token)["connected"], 30, "the authenticated MQTT session")
    for path in ("/api/config/mqtt", "/api/config"):
        code, _, body = http("GET", f"{sim.api_url}{path}", token)
        assert code == 200 and PASSWORD not in json.dumps(body), path
    code, _, body = http("GET", f"{sim.api_url}/api/config/mqtt", token)
    assert body["config"]["password"] == "********" and body["password_set"] is True, body
    configure(sim, token, publish_interval_s=2, password="********")
    saved = (sim.dir / "config.toml").read_text()
    assert PASSWORD in saved and "publish_interval_s = 2" in saved
    wait_for(lambda: mqtt_status(sim, token)["connected"], 30, "the session after a reconfigure")
    assert PASSWORD not in sim.log(), "the MQTT password leaked into the logs"

    # Last Will: the gateway dies without a DISCONNECT; the broker publishes "offline" itself,
    # then the restarted gateway says "online" again.
    t = topics(sim, token)
    avail = lambda: [p for _, p, _ in sub.messages(t["availability"])]  # noqa: E731
    wait_for(lambda: avail() and avail()[-1] == b"online", 20, "online before the kill")
    seen = len(avail())
    gateway = int(sim.services()["gateway"]["pid"])
    os.kill(gateway, signal.SIGKILL)
    wait_for(lambda: b"offline" in avail()[seen:], 30, "the Last Will 'offline'")
    wait_for(
        lambda: http("GET", f"{sim.api_url}/api/auth/status", timeout=2)[0] == 200,
        60, "the gateway to be restarted",
    )
    wait_for(lambda: avail()[-1] == b"online", 60, "online after the restart")
    sub.close()


def test_bad_mqtt_settings_get_the_envelope(sim, token):
    for body, field in [
        ({"host": "mqtt://broker.local"}, "mqtt.host"),
        ({"host": "bad host"}, "mqtt.host"),
        ({"port": 0}, "mqtt.port"),
        ({"publish_interval_s": 0}, "mqtt.publish_interval_s"),
        ({"qos": 3}, "mqtt.qos"),
        ({"topic_prefix": "a/#"}, "mqtt.topic_prefix"),
        ({"enabled": True, "host": ""}, "mqtt.host"),
        ({"bogus": 1}, "mqtt.bogus"),
    ]:
        code, _, err = http("POST", f"{sim.api_url}/api/config/mqtt", token, body)
        assert code == 400, (body, err)
        assert err["code"] == "config_validation" and err["field"] == field, (body, err)
    code, _, body = http("GET", f"{sim.api_url}/api/config/mqtt", token)
    assert code == 200 and body["config"]["enabled"] is False, body


def publish(broker, topic, payload, retain=False):
    """Publish one message with QoS 1 and wait until the broker has it."""
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"pytest-pub-{uuid.uuid4().hex[:8]}")
    if broker.auth:
        c.username_pw_set(USER, PASSWORD)
    c.connect("127.0.0.1", broker.port, keepalive=30)
    c.loop_start()
    try:
        c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    finally:
        c.loop_stop()
        c.disconnect()


def get_config(sim, token):
    code, _, body = http("GET", f"{sim.api_url}/api/config", token)
    assert code == 200, body
    return body["config"]


def mining_state(sim, token):
    code, _, body = http("GET", f"{sim.api_url}/api/status", token)
    assert code == 200, body
    return body["mining"]["state"]


def test_home_assistant_commands(sim, token, brokers, restore_mqtt):
    """Command entities: discovery, a command changes the miner through the REST write it
    mirrors (validation, mode rules, audit), a bad payload is refused, logged and moves nothing."""
    anon, _ = brokers
    before = get_config(sim, token)
    sub = Collector(anon)
    assert sub.wait_connected(10)
    prefix = f"{PREFIX}-cmd"
    # An old retained OFF waits on the broker: it is replayed when the miner subscribes, and a
    # replay must never act.
    configure(sim, token, enabled=False, topic_prefix=prefix)
    publish(anon, topics(sim, token)["commands"]["mining"], "OFF", retain=True)
    configure(
        sim, token, enabled=True, host="127.0.0.1", port=anon.port, publish_interval_s=1,
        keep_alive_s=5, topic_prefix=prefix, commands=True,
    )
    wait_for(lambda: mqtt_status(sim, token)["connected"], 30, "the MQTT session")
    t = topics(sim, token)
    replay = wait_for(
        lambda: [r for r in sub.json_on(t["command_result"]) if r["entity"] == "mining"],
        30, "the verdict on the retained command",
    )[0]
    assert not replay["ok"] and replay["status"] == 400 and "retained" in replay["error"], replay
    # Clearing it from the broker (an empty retained message, Home Assistant's way) is not a
    # command: no result, no warning.
    log_mark = len(sim.log())
    publish(anon, t["commands"]["mining"], b"", retain=True)
    time.sleep(2)
    assert [r for r in sub.json_on(t["command_result"]) if r["entity"] == "mining"] == [replay]
    assert "MQTT command" not in sim.log()[log_mark:], sim.log()[log_mark:]
    assert mining_state(sim, token) == "mining"
    node = t["base"].split("/", 1)[1]
    cmd = t["commands"]
    assert cmd == {e: f"{t['base']}/{e}/set" for e in ("mining", "power_target", "mode", "restart")}, t
    results = t["command_result"]

    # Discovery: one config per command entity, with default_entity_id (object_id is
    # deprecated by Home Assistant and gone from every config, sensors included).
    want = {"switch": "mining", "number": "power_target", "select": "mode", "button": "restart"}

    def discovery():
        found = {}
        for topic, p, retained in sub.messages():
            parts = topic.split("/")
            if len(parts) == 5 and parts[0] == "homeassistant" and parts[2] == node and p:
                found[(parts[1], parts[3])] = (json.loads(p), retained)
        return found if all((c, o) in found for c, o in want.items()) else None

    found = wait_for(discovery, 30, "discovery of the command entities")
    for (component, obj), (config, _) in found.items():
        assert "object_id" not in config, config
        assert config["default_entity_id"] == f"{component}.{node}_{obj}", config
    for component, obj in want.items():
        config = found[(component, obj)][0]
        assert config["command_topic"] == cmd[obj], config
        assert config["availability_topic"] == t["availability"], config
    assert found[("number", "power_target")][0]["unit_of_measurement"] == "W"
    assert found[("select", "mode")][0]["options"] == ["home", "standard", "hacker"]
    assert found[("button", "restart")][0]["payload_press"] == "PRESS"

    def result_for(entity, payload, seen):
        def find():
            for r in sub.json_on(results)[seen:]:
                if r["entity"] == entity and r["payload"] == payload:
                    return r
            return None
        return wait_for(find, 60, f"the result of {entity}={payload!r}")

    def command(entity, payload, retain=False):
        seen = len(sub.json_on(results))
        publish(anon, cmd[entity], payload, retain=retain)
        r = result_for(entity, payload, seen)
        assert r["schema"] == "svcos.mqtt.command_result.v1", r
        return r

    def audit():
        code, _, body = http("GET", f"{sim.api_url}/api/audit-log", token)
        assert code == 200, body
        return body["entries"]

    try:
        # The switch: OFF puts the miner to sleep, ON wakes it (POST /api/action/sleep|wake).
        r = command("mining", "OFF")
        assert r["ok"] and r["status"] == 200 and r["route"] == "/api/action/sleep", r
        wait_for(lambda: mining_state(sim, token) == "sleeping", 30, "sleeping after OFF")
        wait_for(
            lambda: any(s.get("state") == "sleeping" for s in sub.json_on(t["state"])),
            30, "the state message to show sleeping",
        )
        r = command("mining", "ON")
        assert r["ok"] and r["route"] == "/api/action/wake", r
        wait_for(lambda: mining_state(sim, token) == "mining", 60, "mining after ON")
        entries = audit()
        assert any(
            e["path"] == "/api/action/sleep" and e["status"] == 200
            and e["session_id"] == "internal:mqtt" for e in entries
        ), entries[-5:]

        # The number: the power target goes through POST /api/config.
        r = command("power_target", "900")
        assert r["ok"] and r["route"] == "/api/config", r
        assert get_config(sim, token)["hardware"]["power_target_watt"] == 900

        # ...and reaches hw-agent through the governor: the applied target reads 900 W.
        def applied_target():
            code, _, body = http("GET", f"{sim.api_url}/api/status", token)
            return code == 200 and body["mining"]["power_target_watt"] == 900

        wait_for(applied_target, 30, "hw-agent to apply the 900 W target")

        # Bad payloads: refused, logged, audited; nothing else moves.
        settled = get_config(sim, token)
        # The audit list is the newest 256 entries: on a sim other tests have written to, its
        # length no longer grows, so what is new is told by time.
        since_ms = int(time.time() * 1000) - 1
        r = command("mining", "banana")
        assert not r["ok"] and r["status"] == 400 and r["route"] is None, r
        assert "ON or OFF" in r["error"], r
        r = command("power_target", "lots")
        assert not r["ok"] and r["status"] == 400 and r["route"] == "/api/config", r
        assert "hardware.power_target_watt" in r["error"], r
        r = command("power_target", "-5")
        assert not r["ok"] and r["status"] == 400 and "hardware.power_target_watt" in r["error"], r
        r = command("mode", "turbo")
        assert not r["ok"] and 400 <= r["status"] < 500 and r["route"] == "/api/setup/step4-mode", r
        r = command("restart", "now")
        assert not r["ok"] and r["status"] == 400 and "PRESS" in r["error"], r
        # Blank but not empty: a command (trimmed to ""), refused.
        seen = len(sub.json_on(results))
        publish(anon, cmd["mining"], " ")
        r = result_for("mining", "", seen)
        assert not r["ok"] and r["status"] == 400, r
        assert get_config(sim, token) == settled
        time.sleep(2)
        assert mining_state(sim, token) == "mining"
        new = [e for e in audit() if e["timestamp_ms"] >= since_ms]
        refused = [e for e in new if e["status"] >= 400]
        assert len(refused) >= 6, new
        assert all(e["session_id"] == "internal:mqtt" for e in refused), new
        assert {"method": "MQTT", "path": "mqtt:mining/set", "status": 400} in [
            {k: e[k] for k in ("method", "path", "status")} for e in refused
        ], refused
        wait_for(lambda: "MQTT command refused" in sim.log(), 20, "the refusal in the log")

        # Mode rules: in home mode the restart button is refused like POST /api/action/restart.
        r = command("mode", "home")
        assert r["ok"] and get_config(sim, token)["system"]["mode"] == "home", r
        wait_for(
            lambda: any(s.get("mode") == "home" for s in sub.json_on(t["state"])),
            30, "the state message to show the mode",
        )
        r = command("restart", "PRESS")
        assert not r["ok"] and r["status"] == 403, r
        r = command("mode", before["system"]["mode"])
        assert r["ok"], r

        # The button: restarts the mining services through the supervisor.
        restarts = {n: s["restarts"] for n, s in sim.services().items()}
        r = command("restart", "PRESS")
        assert r["ok"] and r["route"] == "/api/action/restart", r
        after = sim.services()
        assert after["stratum-agent"]["restarts"] == restarts["stratum-agent"] + 1, after
        assert after["hw-agent"]["restarts"] == restarts["hw-agent"] + 1, after
        wait_for(lambda: mining_state(sim, token) == "mining", 60, "mining after the restart")
    finally:
        http("POST", f"{sim.api_url}/api/action/wake", token)
        code, _, body = http(
            "POST", f"{sim.api_url}/api/config", token,
            {"system": {"mode": before["system"]["mode"]},
             "hardware": {"power_target_watt": before["hardware"]["power_target_watt"]},
             "mqtt": {"commands": False}},
        )
        assert code == 200, body
        sub.close()


def announced_mac():
    """The MAC the firmware announces (svcos_common::net::primary_mac): the interface of the
    IPv4 default route, else the first other interface by name with a real address."""

    def mac_of(iface):
        try:
            mac = Path(f"/sys/class/net/{iface}/address").read_text().strip().lower()
        except OSError:
            return None
        real = re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", mac) and mac not in (
            "00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff")
        return mac if real else None

    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) >= 8 and cols[1] == "00000000" and cols[7] == "00000000":
                if mac := mac_of(cols[0]):
                    return mac
                break
    except OSError:
        pass
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        return None
    return next((m for n in names if n != "lo" and (m := mac_of(n))), None)


@functools.lru_cache(maxsize=None)
def compiled(template: str):
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined)
    return env.from_string(template)


def render(template: str, state: dict) -> str:
    """A discovery template rendered the way Home Assistant does (Jinja2, sandboxed), but with
    undefined values as hard errors, so a template that only works by luck fails here."""
    return compiled(template).render(value_json=state, value=json.dumps(state)).strip()


# Members of the state message that are null while their source service is down.
SOURCE_MEMBERS = (
    "telemetry_seq", "state", "state_reason", "model", "uptime_s", "hashrate_ghs",
    "hashrate_ghs_5s", "hashrate_ghs_15m", "hashrate_ghs_expected", "temp_max_c",
    "temp_target_c", "power_watt", "power_target_watt", "efficiency_j_per_th", "chains", "fans",
    "pool", "shares",
)


def test_home_assistant_across_a_gateway_kill(sim, token, brokers, restore_mqtt):
    """What Home Assistant sees when the gateway is SIGKILLed and the supervisor restarts it,
    with the miner asleep: no state with null or zero counters (a `total_increasing` sensor
    reading 0 counts a reset and adds everything again), the mining switch never ON, discovery
    sent once after the restart and with the right model in every config ever seen, an energy
    meter that never goes back, and an empty retained command that is silently ignored."""
    anon, _ = brokers
    sub = Collector(anon)
    assert sub.wait_connected(10)
    configure(
        sim, token, enabled=True, host="127.0.0.1", port=anon.port, publish_interval_s=1,
        keep_alive_s=5, topic_prefix=f"{PREFIX}-ha", commands=True,
    )
    wait_for(lambda: mqtt_status(sim, token)["connected"], 30, "the MQTT session")
    t = topics(sim, token)
    node = t["base"].split("/", 1)[1]

    def states(since=0):
        return [json.loads(p) for topic, p, _ in sub.messages()[since:] if topic == t["state"] and p]

    def configs(since=0):
        found = []
        for topic, p, _ in sub.messages()[since:]:
            parts = topic.split("/")
            if len(parts) == 5 and parts[0] == "homeassistant" and parts[2] == node and p:
                found.append((topic, json.loads(p)))
        return found

    code, _, status = http("GET", f"{sim.api_url}/api/status", token)
    assert code == 200, status
    wanted = {f"homeassistant/sensor/{node}/{o}/config" for o in (
        "state", "hashrate", "temp_max", "power", "energy", "efficiency", "pool",
        "shares_accepted", "shares_rejected")}
    wanted |= {f"homeassistant/sensor/{node}/chain_{c['chain_id']}_{k}/config"
               for c in status["chains"] for k in ("temp", "hashrate")}
    wanted |= {f"homeassistant/sensor/{node}/fan_{f['fan_id']}_rpm/config" for f in status["fans"]}
    wanted |= {f"homeassistant/{c}/{node}/{o}/config" for c, o in (
        ("switch", "mining"), ("number", "power_target"), ("select", "mode"), ("button", "restart"))}
    wait_for(lambda: wanted <= {topic for topic, _ in configs()}, 30, "every discovery config")
    # The meter shows only what it has saved (every 30 s), and the pool must have counted.
    wait_for(
        lambda: (s := states()) and s[-1]["energy_kwh"] > 0 and s[-1]["shares"]["accepted"] > 0,
        75, "a state with energy and accepted shares",
    )

    log_mark = len(sim.log())
    try:
        code, _, body = http("POST", f"{sim.api_url}/api/action/sleep", token)
        assert code == 200, body
        wait_for(lambda: states()[-1]["state"] == "sleeping", 30, "a state showing sleeping")
        last = states()[-1]
        accepted = last["shares"]["accepted"]

        before = len(sub.messages())
        avail = lambda since: [p for topic, p, _ in sub.messages()[since:] if topic == t["availability"]]  # noqa: E731
        os.kill(int(sim.services()["gateway"]["pid"]), signal.SIGKILL)
        wait_for(lambda: b"offline" in avail(before), 30, "the Last Will")
        wait_for(lambda: avail(before)[-1] == b"online", 60, "online after the restart")
        restart = next(
            i for i, (topic, p, _) in enumerate(sub.messages())
            if i >= before and topic == t["availability"] and p == b"online"
        )
        wait_for(lambda: len(states(restart)) >= 4, 30, "state messages after the restart")
        wait_for(lambda: wanted <= {topic for topic, _ in configs(restart)}, 30,
                 "the discovery configs after the restart")

        # A subscriber arriving now gets the retained state: real data too.
        late = Collector(anon, topics=(t["state"],))
        try:
            wait_for(lambda: late.json_on(t["state"]), 15, "the retained state")
            retained = late.json_on(t["state"])[0]
        finally:
            late.close()

        switch = next(c for topic, c in configs() if topic.startswith("homeassistant/switch/"))
        for st in [retained, *states(restart)]:
            assert st["hw_agent_up"] and st["stratum_agent_up"], st
            for member in SOURCE_MEMBERS:
                if member not in ("pool", "efficiency_j_per_th"):
                    assert st[member] is not None, (member, st)
            assert st["shares"]["accepted"] >= accepted, (accepted, st)
            assert st["state"] == "sleeping", st
            assert render(switch["value_template"], st) == "OFF", st

        # Discovery: once after the restart, the right model in every config ever seen.
        after = [topic for topic, _ in configs(restart)]
        twice = {topic for topic in after if after.count(topic) > 1}
        assert not twice, f"sent more than once after the restart: {sorted(twice)}"
        model = last["model"]
        assert model, last
        mac = announced_mac()
        for topic, config in configs():
            device = config["device"]
            assert device["model"] == model, (topic, device)
            assert device["configuration_url"] == f"http://{sim.bind}:{sim.http_port}/", device
            if mac:
                assert device["connections"] == [["mac", mac]], device
            else:
                assert "connections" not in device, device
            assert config["origin"]["name"] == "svcOS", config
            assert config["origin"]["sw_version"] == device["sw_version"], config
        energy = dict(configs())[f"homeassistant/sensor/{node}/energy/config"]
        assert (energy["device_class"], energy["state_class"], energy["unit_of_measurement"]) == (
            "energy", "total_increasing", "kWh"), energy

        # The meter never goes back, across the kill included.
        readings = [s["energy_kwh"] for s in states()]
        assert all(b >= a for a, b in zip(readings, readings[1:])), readings

        # Every template renders on every state seen, and on a state whose sources are all
        # down it yields None (Home Assistant: unknown), never 0 and never an error.
        down = {**last, "hw_agent_up": False, "stratum_agent_up": False,
                **{m: None for m in SOURCE_MEMBERS}}
        for topic, config in configs():
            template = config.get("value_template")
            if not template:
                continue
            for st in states():
                render(template, st)
            if topic.endswith("/mode/config"):
                continue
            rendered = render(template, down)
            expected = str(down["energy_kwh"]) if topic.endswith("/energy/config") else "None"
            assert rendered == expected, (topic, template, rendered)
        for c in status["chains"]:
            chain = dict(configs())[f"homeassistant/sensor/{node}/chain_{c['chain_id']}_temp/config"]
            assert render(chain["value_template"], last) == str(
                next(x for x in last["chains"] if x["chain_id"] == c["chain_id"])["temp_chip_c"])

        # Clearing a retained command: no result, no warning.
        results = len(sub.json_on(t["command_result"]))
        publish(anon, t["commands"]["mining"], b"", retain=True)
        time.sleep(2)
        assert len(sub.json_on(t["command_result"])) == results
        assert "MQTT command" not in sim.log()[log_mark:], sim.log()[log_mark:]
    finally:
        http("POST", f"{sim.api_url}/api/action/wake", token)
        configure(sim, token, commands=False)
        sub.close()
    wait_for(lambda: mining_state(sim, token) == "mining", 60, "mining after waking")
