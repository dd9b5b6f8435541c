"""SSH keys through the API (docs/API-SHAPES.md "SSH"): a bad key line is refused with the
envelope naming the entry, a good list is stored atomically as dropbear's `authorized_keys`
(mode 0600) and read back, and `password_login` reaches the options file dropbear reads.
The sim has no dropbear: the API still writes the files and says where."""

import base64
import hashlib
import os
import shutil
import signal
import stat
import struct
import subprocess
import time
from pathlib import Path

from conftest import http, own_stack, wait_for


def wire(*fields: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


def ed25519_line(seed: int, comment: str = "") -> str:
    line = f"ssh-ed25519 {wire(b'ssh-ed25519', bytes([seed]) * 32)}"
    return f"{line} {comment}" if comment else line


def fingerprint(line: str) -> str:
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def put(sim, token, body):
    return http("PUT", f"{sim.api_url}/api/network/ssh", token, body)


def test_bad_keys_are_refused_naming_the_entry(sim, token):
    good = ed25519_line(1)
    for bad in [
        "ssh-ed25519 not*base64",
        f"command=\"/bin/sh\" {good}",
        f"ssh-dss {wire(b'ssh-dss', b'x' * 20)}",
        f"ssh-ed25519 {wire(b'ssh-ed25519', b'y' * 31)}",
        good,  # the same key twice
    ]:
        status, _, body = put(sim, token, {"authorized_keys": [good, bad]})
        assert status == 400, (bad, body)
        assert body["field"] == "authorized_keys[1]", body
        assert body["error"] == "invalid SSH public key"
        assert body["detail"], body
    # A body of the wrong shape is the gateway's usual 422.
    status, _, body = put(sim, token, {"authorized_keys": "ssh-ed25519 AAAA"})
    assert status == 422, body
    status, _, body = put(sim, None, {"authorized_keys": []})
    assert status == 401, body


def test_keys_are_stored_for_dropbear_and_read_back(sim, token):
    keys = [ed25519_line(2, "owner@laptop"), ed25519_line(3)]
    if shutil.which("ssh-keygen"):
        # A key OpenSSH made, with the fingerprint OpenSSH prints for it.
        tmp = sim.dir.parent / "sshkey"
        subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-N", "", "-C", "rsa key",
                        "-f", str(tmp)], check=True)
        keys.append(Path(f"{tmp}.pub").read_text().strip())
    status, _, body = put(sim, token, {"authorized_keys": keys})
    assert status == 200, body
    assert body["schema"] == "svcos.api.network.ssh.v1"
    assert body["port"] == 22
    assert body["password_login"] is False
    path = Path(body["authorized_keys_path"])
    assert path == sim.dir / "state" / "gateway" / "ssh" / "authorized_keys"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert path.read_text().splitlines() == keys
    assert [k["line"] for k in body["keys"]] == keys
    assert [k["fingerprint"] for k in body["keys"]] == [fingerprint(k) for k in keys]
    assert body["keys"][0]["comment"] == "owner@laptop"
    assert "comment" not in body["keys"][1]
    if len(keys) == 3:
        out = subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, text=True,
                             check=True)
        assert body["keys"][2]["fingerprint"] in out.stdout, out.stdout
        assert body["keys"][2]["key_type"] == "ssh-rsa"
    # Read back.
    status, _, again = http("GET", f"{sim.api_url}/api/network/ssh", token)
    assert status == 200 and again["keys"] == body["keys"], again
    # An empty list removes every key.
    status, _, body = put(sim, token, {"authorized_keys": []})
    assert status == 200 and body["keys"] == [], body
    assert path.read_text() == ""


def test_password_login_reaches_dropbears_options(sim, token):
    env = None
    try:
        status, _, body = put(sim, token, {"authorized_keys": [ed25519_line(4)],
                                           "password_login": True})
        assert status == 200 and body["password_login"] is True, body
        env = Path(body["authorized_keys_path"]).parent / "dropbear.env"
        assert 'DROPBEAR_ARGS=""' in env.read_text()
        status, _, cfg = http("GET", f"{sim.api_url}/api/config", token)
        assert status == 200, cfg
        assert cfg.get("config", cfg)["network"]["ssh"]["password_login"] is True, cfg
    finally:
        status, _, body = put(sim, token, {"authorized_keys": [], "password_login": False})
        assert status == 200 and body["password_login"] is False, body
    assert 'DROPBEAR_ARGS="-s"' in env.read_text()
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600


def press_button(sim, hold_ms: int):
    """hw-sim's PressButton (field 1: hold_ms), encoded by hand: one varint field."""
    import grpc

    payload, n = bytearray(b"\x08"), hold_ms
    while n >= 0x80:
        payload.append(n & 0x7F | 0x80)
        n >>= 7
    payload.append(n)
    with grpc.insecure_channel(f"unix:{sim.dir / 'run' / 'hw-sim.sock'}") as ch:
        call = ch.unary_unary("/svcos.hwsim.v1.HwSimService/PressButton",
                              request_serializer=bytes, response_deserializer=bytes)
        call(bytes(payload), timeout=10)


def test_the_physical_reset_takes_the_ssh_keys_with_the_password(tmp_path):
    """Whoever holds the miner after the 15 s button reset must not find the previous owner's
    root key: auth drops the password, the gateway empties the keys file. Also when the
    gateway was down during the reset: it empties the file when it starts."""
    with own_stack(tmp_path) as (s, tok):
        status, _, body = put(s, tok, {"authorized_keys": [ed25519_line(5, "old owner")]})
        assert status == 200, body
        path = Path(body["authorized_keys_path"])
        assert path.read_text().strip(), "the key is stored"
        # A short press is no reset: the key stays.
        press_button(s, 1_000)
        time.sleep(3)
        assert "old owner" in path.read_text()
        press_button(s, 16_000)
        wait_for(lambda: http("GET", f"{s.api_url}/api/auth/status")[2].get("password_set")
                 is False, 40, "the reset to clear the password")
        wait_for(lambda: path.read_text() == "", 10, "the keys file to be emptied")
        # The gateway down while a stale key appears (a reset it missed): its start empties it.
        gw = s.services()["gateway"]
        path.write_text(ed25519_line(6, "stale") + "\n")
        os.kill(int(gw["pid"]), signal.SIGKILL)
        wait_for(lambda: path.read_text() == "", 40, "the restarted gateway to empty the file")
