"""MQTT integration against a real mosquitto broker, read back with paho-mqtt.

Two brokers are started by the test on free loopback ports: one anonymous, one with a password
file made by mosquitto_passwd. The miner is configured through REST only; what arrives at the
broker (Home Assistant discovery, state, availability, Last Will, events) is checked against
/api/status. The shared stack's [mqtt] section is switched off again at the end.
"""

import json
import os
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
