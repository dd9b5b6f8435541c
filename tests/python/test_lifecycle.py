"""Firmware lifecycle end to end on the sim, with real RAUC bundles and real processes.

One sim for the module, driven through its life in order: refusals (the running slot stays
untouched), an update built from the current build with a bumped version (the stack comes back on
slot B with the new version and mines again; busctl sees the slots and the progress), SIGKILL of
every process mid-install (the old slot boots), and a bundle whose binary exits at once (rolled
back automatically, with the reason). Then restore to stock: refused while no stock image is
on the data partition, and with a signed stock bundle in place the preflight passes and the same
state machine boots the stock slot and commits it.
"""

import asyncio
import hashlib
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import cgminer, http, login, start_sim, stop_sim, svcos_bin, wait_for

TOOLS = ("rauc", "openssl", "mksquashfs", "busctl", "dbus-daemon")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")

STATUS = "/api/v1/firmware/update/status"
UPLOAD = "/api/v1/firmware/update"
RESTORE = "/api/system/restore-to-stock"
PREFLIGHT_CHECKS = "/api/system/restore-to-stock/preflight-checks"
RESTORE_STATUS = "/api/system/restore-to-stock/status"
CHECK_IDS = {"slot_manager", "stock_image_present", "stock_image_verified", "model_compatible",
             "free_space", "power_stable"}
COMPATIBLE = "svcos-sim-s9"


def upload(sim, token, bundle: Path, force=False, timeout=600):
    data = bundle.read_bytes()
    url = f"{sim.api_url}{UPLOAD}" + ("?force=true" if force else "")
    req = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def status(sim, token, path=STATUS):
    code, _, body = http("GET", f"{sim.api_url}{path}", token=token, timeout=20)
    assert code == 200, body
    return body


def make_bundle(work: Path, name: str, payload: Path, version: str, key: Path, cert: Path,
                compatible=COMPATIBLE, link=False) -> Path:
    """A signed bundle of `payload`; with `link`, its image is a symbolic link to `payload`
    (`rauc bundle` signs the digest of the file it names, mksquashfs keeps the link)."""
    content = work / f"{name}.d"
    shutil.rmtree(content, ignore_errors=True)
    content.mkdir()
    if link:
        (content / "svcos").symlink_to(payload)
    else:
        shutil.copy(payload, content / "svcos")
        os.chmod(content / "svcos", 0o755)
    (content / "manifest.raucm").write_text(
        f"[update]\ncompatible={compatible}\nversion={version}\n\n"
        "[bundle]\nformat=plain\n\n[image.rootfs]\nfilename=svcos\n"
    )
    out = work / f"{name}.raucb"
    out.unlink(missing_ok=True)
    subprocess.run(
        ["rauc", "bundle", f"--cert={cert}", f"--key={key}", str(content), str(out)],
        check=True, capture_output=True,
    )
    return out


def make_bad_digest_bundle(work: Path, payload: Path, key: Path, cert: Path) -> Path:
    """A correctly signed bundle whose manifest promises another image digest (what a signer
    with a broken pipeline produces; RAUC's own `rauc bundle` would fix the digest)."""
    content = work / "digest.d"
    shutil.rmtree(content, ignore_errors=True)
    content.mkdir()
    shutil.copy(payload, content / "svcos")
    size = (content / "svcos").stat().st_size
    (content / "manifest.raucm").write_text(
        f"[update]\ncompatible={COMPATIBLE}\nversion=50.0.0\n\n[bundle]\nformat=plain\n\n"
        f"[image.rootfs]\nfilename=svcos\nsha256={'0' * 64}\nsize={size}\n"
    )
    squash = work / "digest.sqfs"
    squash.unlink(missing_ok=True)
    subprocess.run(["mksquashfs", str(content), str(squash), "-all-root", "-noappend", "-quiet"],
                   check=True, capture_output=True)
    sig = work / "digest.sig"
    subprocess.run(["openssl", "cms", "-sign", "-binary", "-nosmimecap", "-in", str(squash),
                    "-signer", str(cert), "-inkey", str(key), "-outform", "DER", "-out", str(sig)],
                   check=True, capture_output=True)
    out = work / "digest.raucb"
    sig_bytes = sig.read_bytes()
    out.write_bytes(squash.read_bytes() + sig_bytes + struct.pack(">Q", len(sig_bytes)))
    return out


def busctl(sim, *args):
    out = subprocess.run(
        ["busctl", f"--address=unix:path={sim.dir}/run/dbus.sock", "--json=short", *args],
        capture_output=True, text=True, timeout=20,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def supervisor_pid(sim) -> int:
    return int((sim.dir / "run" / "pids" / "supervisor.pid").read_text().split()[0])


def wait_phase(sim, want: set, timeout=300, path=STATUS):
    """Poll the status (riding out the reboots) until its phase is one of `want`."""
    seen = []

    def check():
        tok = login(sim)
        s = status(sim, tok, path)
        if not seen or seen[-1] != s["phase"]:
            seen.append(s["phase"])
        return s if s["phase"] in want else None

    try:
        return wait_for(check, timeout, f"update phase in {want}", interval=0.5)
    finally:
        print("phases seen:", seen)


@pytest.fixture(scope="module")
def life():
    tmp = Path(tempfile.mkdtemp(prefix="svcos-lifecycle-"))
    sim = start_sim(tmp)
    state = {"sim": sim, "tmp": tmp, "work": tmp / "work"}
    state["work"].mkdir()
    # The sim makes its development key pair on first start: bundles signed with it install.
    key, cert = sim.dir / "rauc" / "dev-key.pem", sim.dir / "rauc" / "keyring.pem"
    wait_for(lambda: key.exists() and cert.exists(), 30, "the sim's development key")
    state["key"], state["cert"] = key, cert
    # The payload: the current build, stripped of debug info to keep bundles small.
    payload = state["work"] / "svcos"
    if shutil.which("strip"):
        subprocess.run(["strip", "-o", str(payload), str(svcos_bin())], check=True)
    else:
        shutil.copy(svcos_bin(), payload)
    state["payload"] = payload
    try:
        yield state
    finally:
        stop_sim(state["sim"])
        subprocess.run(["pkill", "-KILL", "-f", "--", f"--dir {sim.dir}"], check=False)
        if os.environ.get("SVCOS_KEEP_SIM") is None:
            shutil.rmtree(tmp, ignore_errors=True)


def test_refused_bundles_leave_the_running_slot_untouched(life):
    sim, work = life["sim"], life["work"]
    token = login(sim)
    small = work / "small"
    small.write_bytes(b"#!/bin/sh\nexit 0\n" + b"#" * 8192 + b"\n")
    other_key, other_cert = work / "other-key.pem", work / "other-cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=stranger",
                    "-keyout", str(other_key), "-out", str(other_cert)], check=True, capture_output=True)
    good = make_bundle(work, "good-small", small, "50.0.0", life["key"], life["cert"])
    truncated = work / "truncated.raucb"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    junk = work / "junk.raucb"
    junk.write_bytes(os.urandom(20 * 1024))
    cases = [
        ("not_a_bundle", 400, junk),
        ("wrong_key", 400, make_bundle(work, "stranger", small, "50.0.0", other_key, other_cert)),
        ("bad_digest", 400, make_bad_digest_bundle(work, small, life["key"], life["cert"])),
        ("truncated", 400, truncated),
        ("wrong_model", 409, make_bundle(work, "s19", small, "50.0.0", life["key"], life["cert"],
                                         compatible="svcos-s19")),
        ("downgrade", 409, make_bundle(work, "old", small, "0.0.1", life["key"], life["cert"])),
    ]
    before = status(sim, token)
    assert before["booted_slot"] == "A" and before["slot_manager_reachable"], before
    for refusal, code, bundle in cases:
        prev = status(sim, token)
        got, body = upload(sim, token, bundle)
        assert got == code, (refusal, got, body)
        assert body["refusal"] == refusal, body
        assert body["error"], body
        if refusal == "not_a_bundle":
            # Not "cut short … upload the complete file": re-sending the same file cannot help.
            assert "not a RAUC bundle" in body["error"], body
            assert "complete" not in body["suggestion"], body
        if refusal == "truncated":
            assert "complete .raucb" in body["suggestion"], body
        s = status(sim, token)
        assert s["refusal"] == refusal and s["last_error"] == body["error"], (s, body)
        if refusal == "bad_digest":
            # Found by the slot manager while installing (it checks each image's digest as it
            # extracts): an install ran and failed.
            assert s["phase"] == "failed", s
        else:
            # Refused while verifying, nothing installed: no operation ran, so the status still
            # shows the one before; the refusal and its message are beside it.
            assert s["phase"] == prev["phase"] and s["history"] == prev["history"], (refusal, s)
            assert s["operation_id"] == prev["operation_id"], s
        assert s["booted_slot"] == "A" and s["primary_slot"] == "A", s
        assert s["running_version"] == before["running_version"], s
        # Nothing was written to the inactive slot.
        assert not (sim.dir / "slots" / "B" / "svcos").exists(), refusal
    # A client that hangs up half-way: the gateway refuses what it did not fully receive.
    data = good.read_bytes()
    with socket.create_connection((sim.bind, sim.api_port), timeout=10) as s:
        s.sendall(
            f"POST {UPLOAD} HTTP/1.1\r\nHost: {sim.bind}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data[: len(data) // 3]
        )
        s.shutdown(socket.SHUT_WR)
        s.settimeout(30)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert b" 400 " in reply.split(b"\r\n")[0], reply[:200]
    assert b'"truncated"' in reply, reply[-300:]
    assert status(sim, token)["booted_slot"] == "A"


def upload_through_the_dashboard(sim, token, bundle: Path, version: str):
    """The update as an owner does it: the Firmware screen's file field and button, through the
    port-80 proxy, in headless Chromium, watched until the commit. Issue 31 defect 10: after the
    commit the Firmware card showed the old version beside the new running one, and "the miner
    now reboots into slot B" stayed. Returns the upload's status and answer as the page got them."""
    from urllib.parse import urlparse

    from test_dashboard import Browser, finish_wizard_by_rest, open_logged_in, run_page, wait_for_proxy

    wait_for_proxy(sim)
    finish_wizard_by_rest(sim, token)
    old = status(sim, token)["running_version"]
    card = "document.querySelector('#screen-firmware section[data-src=\"/api/dashboard/version\"]').textContent"

    async def drive(page):
        await open_logged_in(page, sim, token, "firmware")
        await page.until(f"{card}.includes({json.dumps(old)})", 60, "the running version on the Firmware card")
        field = await page.call("Runtime.evaluate", expression="document.getElementById('update-file')")
        await page.call("DOM.setFileInputFiles", files=[str(bundle)], objectId=field["result"]["objectId"])
        await page.until("!document.getElementById('update-start').disabled", 10, "the upload button")
        await page.click("#update-start")
        result = await page.until(
            "(document.getElementById('update-result')?.textContent || '').includes('(committed)')"
            " && document.getElementById('update-result').textContent", 400, "the commit on the page")
        await page.until(f"{card}.includes({json.dumps(version)})", 30, "the Firmware card read again")
        firmware_card = await page.js(card)
        uploads = []
        for _ in range(40):
            uploads = [r for r in page.requests.values()
                       if r["method"] == "POST" and urlparse(r["url"]).path == UPLOAD]
            if uploads and all("body" in r for r in uploads):
                break
            await asyncio.sleep(0.25)
        return result, firmware_card, uploads

    browser = Browser()
    try:
        result, firmware_card, uploads = run_page(browser, sim.http_url, drive)
    finally:
        browser.close()
    assert f"runs version {version} from slot B (committed)" in result, result
    assert "now reboots" not in result, result
    assert old not in firmware_card, firmware_card
    assert len(uploads) == 1, uploads
    return uploads[0]["status"], uploads[0].get("body")


def test_update_comes_back_on_the_new_version_and_mines(life):
    sim, work = life["sim"], life["work"]
    token = login(sim)
    bundle = make_bundle(work, "v60", life["payload"], "60.0.0", life["key"], life["cert"])
    old_pid = supervisor_pid(sim)
    # busctl watches the installer's Progress while the upload runs.
    progress = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                p = busctl(sim, "get-property", "de.pengutronix.rauc", "/",
                           "de.pengutronix.rauc.Installer", "Progress")
                progress.append(tuple(p["data"]))
            except Exception:  # noqa: BLE001 - the bus restarts with the reboot
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    if shutil.which("chromium"):
        code, body = upload_through_the_dashboard(sim, token, bundle, "60.0.0")
    else:
        code, body = upload(sim, token, bundle)
    assert code == 200, body
    # DevTools may not hand over the answer of a streamed upload; the page showed it (above).
    if body is not None:
        assert body["phase"] in ("pending_reboot", "booting_new_slot"), body
        assert body["to"] == {"version": "60.0.0", "slot": "B"}, body
    s = wait_phase(sim, {"committed", "rolled_back", "failed"})
    stop.set()
    watcher.join(5)
    assert s["phase"] == "committed", s
    assert s["running_version"] == "60.0.0" and s["booted_slot"] == "B", s
    phases = [h["phase"] for h in s["history"]]
    for p in ("verifying", "installing", "pending_reboot", "booting_new_slot", "committed"):
        assert p in phases, phases
    # The same process image was replaced by slot B's binary; every service runs from it.
    pid = supervisor_pid(sim)
    assert pid == old_pid
    assert os.readlink(f"/proc/{pid}/exe") == str(sim.dir / "slots" / "B" / "svcos")
    for name, svc in sim.services().items():
        assert "run" in str(svc["state"]).lower(), (name, svc)
        assert os.readlink(f"/proc/{svc['pid']}/exe") == str(sim.dir / "slots" / "B" / "svcos")
    # Percentages rose through the install as busctl saw them.
    percents = [p[0] for p in progress]
    assert any(0 < p < 100 for p in percents) or 100 in percents, progress[:20]
    # busctl sees the slot status: B booted and good with the new version.
    rows = busctl(sim, "call", "de.pengutronix.rauc", "/", "de.pengutronix.rauc.Installer",
                  "GetSlotStatus")["data"][0]
    by_name = {name: {k: v["data"] for k, v in attrs.items()} for name, attrs in rows}
    assert by_name["rootfs.1"]["state"] == "booted", by_name
    assert by_name["rootfs.1"]["boot-status"] == "good", by_name
    assert by_name["rootfs.1"]["bundle.version"] == "60.0.0", by_name
    boot = busctl(sim, "get-property", "de.pengutronix.rauc", "/",
                  "de.pengutronix.rauc.Installer", "BootSlot")
    assert boot["data"] == "B"
    # Open metadata and capabilities tell the new version.
    code, _, meta = http("GET", f"{sim.api_url}/api/system/update/metadata")
    assert code == 200 and meta["current_version"] == "60.0.0", meta
    code, _, caps = http("GET", f"{sim.api_url}/api/v1/capabilities", token=login(sim))
    assert code == 200 and caps["update"]["booted_slot"] == "B", caps
    # Mining resumed: the test pool accepts shares from the new stack.
    wait_for(lambda: cgminer(sim, "summary")["SUMMARY"][0]["Accepted"] > 0, 180, "accepted shares after the update", interval=1)


def test_sigkill_of_everything_mid_install_keeps_the_old_slot(life):
    sim, work = life["sim"], life["work"]
    token = login(sim)
    bundle = make_bundle(work, "v61", life["payload"], "61.0.0", life["key"], life["cert"])
    record = sim.dir / "state" / "supervisor" / "update" / "state.json"
    def send():
        try:
            upload(sim, token, bundle, timeout=120)
        except OSError:
            pass  # the gateway dies with everything else, mid-request

    t = threading.Thread(target=send, daemon=True)
    t.start()

    def mid_install():
        try:
            return json.loads(record.read_text())["phase"] in ("verifying", "installing")
        except (OSError, ValueError):
            return False

    wait_for(mid_install, 120, "the install to start", interval=0.02)
    # Power cut: every process of the instance at once.
    subprocess.run(["pkill", "-KILL", "-f", "--", f"--dir {sim.dir}"], check=False)
    subprocess.run(["pkill", "-KILL", "-f", "--", f"{sim.dir}/run/dbus.sock"], check=False)
    t.join(30)
    stop_sim(sim)
    # Boot again from the same directory.
    sim2 = start_sim(life["tmp"])
    life["sim"] = sim2
    s = wait_phase(sim2, {"failed", "committed", "rolled_back"}, timeout=120)
    assert s["phase"] == "failed", s
    assert "interrupted" in s["reason"], s
    assert s["booted_slot"] == "B" and s["running_version"] == "60.0.0", s
    assert os.readlink(f"/proc/{supervisor_pid(sim2)}/exe") == str(sim2.dir / "slots" / "B" / "svcos")


def test_a_slot_that_exits_at_once_is_rolled_back(life):
    sim, work = life["sim"], life["work"]
    token = login(sim)
    broken = work / "broken"
    broken.write_bytes(b"#!/bin/sh\necho 'broken build' >&2\nexit 3\n" + b"#" * 8192 + b"\n")
    bundle = make_bundle(work, "v62", broken, "62.0.0", life["key"], life["cert"])
    code, body = upload(sim, token, bundle)
    assert code == 200, body
    assert body["to"]["slot"] == "A", body
    s = wait_phase(sim, {"rolled_back", "committed"}, timeout=400)
    assert s["phase"] == "rolled_back", s
    assert "exited before the slot was marked good" in s["reason"], s
    assert s["booted_slot"] == "B" and s["running_version"] == "60.0.0", s
    slot_a = next(x for x in s["slots"] if x["bootname"] == "A")
    assert slot_a["boot_status"] == "bad", s
    for name, svc in sim.services().items():
        assert "run" in str(svc["state"]).lower(), (name, svc)


def slots_tree(sim) -> dict:
    """Every entry under the sim's slots, links not followed: path -> (mode, sha256 of the content
    or the link's target). The installer's staging directory is left out (a killed install may
    have left one; the next install replaces it)."""
    root = sim.dir / "slots"
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) != root / ".staging"]
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(p).encode()
            elif stat.S_ISREG(st.st_mode):
                body = p.read_bytes()
            else:
                body = b""
            out[str(p.relative_to(root))] = (st.st_mode, hashlib.sha256(body).hexdigest())
    return out


def test_a_signed_bundle_cannot_smuggle_a_file_in_through_a_link(life):
    """Issue 33: a correctly signed bundle whose image is a symbolic link to a file on the unit
    (a 0600 file standing in for auth's password hash) made the installer copy that file into the
    other slot. It is refused while the images are checked; no slot changes."""
    sim, work = life["sim"], life["work"]
    token = login(sim)
    secret = work / "password-hash"
    secret_body = b"$argon2id$v=19$m=65536,t=3,p=4$" + os.urandom(8192).hex().encode() + b"\n"
    secret.write_bytes(secret_body)
    os.chmod(secret, 0o600)
    bundle = make_bundle(work, "smuggle", secret, "63.0.0", life["key"], life["cert"], link=True)
    before = status(sim, token)
    target = "A" if before["booted_slot"] == "B" else "B"
    tree_before = slots_tree(sim)
    got, body = upload(sim, token, bundle)
    assert got == 400, body
    assert body["refusal"] == "unsafe_image", body
    assert "is a symbolic link" in body["error"] and "not followed" in body["error"], body
    assert "a link is never followed" in body["suggestion"], body
    s = status(sim, token)
    assert s["refusal"] == "unsafe_image" and s["last_error"] == body["error"], s
    # Found by the slot manager after extracting: an install ran and failed, before it wrote.
    assert s["phase"] == "failed", s
    assert "Copying" not in s["progress"]["message"], s
    assert s["booted_slot"] == before["booted_slot"], s
    assert s["primary_slot"] == before["primary_slot"], s
    assert s["running_version"] == before["running_version"], s
    slot = next(x for x in s["slots"] if x["bootname"] == target)
    slot_before = next(x for x in before["slots"] if x["bootname"] == target)
    for k in ("version", "sha256", "boot_status", "installed_at"):
        assert slot[k] == slot_before[k], (k, slot_before, slot)
    # The other slot keeps its content and modes, byte for byte; so does everything else.
    assert slots_tree(sim) == tree_before
    assert not (sim.dir / "slots" / ".staging").exists()
    # No copy of the secret anywhere under the slots, and no link to it left behind.
    for dirpath, _, filenames in os.walk(sim.dir / "slots"):
        for name in filenames:
            p = Path(dirpath, name)
            if p.is_symlink():
                assert Path(os.readlink(p)) != secret, p
            elif p.is_file():
                assert p.read_bytes() != secret_body, p
    assert stat.S_IMODE(secret.lstat().st_mode) == 0o600


def slots_snapshot(sim) -> dict:
    """Every file under the sim's slot directories with its size and mtime."""
    root = sim.dir / "slots"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def checks_by_id(pre) -> dict:
    assert pre["schema"] == "svcos.api.restore_to_stock.preflight.v1", pre
    by_id = {c["id"]: c for c in pre["checks"]}
    assert set(by_id) == CHECK_IDS, pre
    return by_id


def test_restore_to_stock_is_refused_without_a_stock_image(life):
    sim = life["sim"]
    token = login(sim)
    assert not (sim.dir / "state" / "stock" / "stock.raucb").exists()
    before = status(sim, token)
    pid = supervisor_pid(sim)
    exe = os.readlink(f"/proc/{pid}/exe")
    slots_before = slots_snapshot(sim)
    code, _, pre = http("GET", f"{sim.api_url}{PREFLIGHT_CHECKS}", token=token, timeout=60)
    assert code == 200, pre
    by_id = checks_by_id(pre)
    assert pre["ready"] is False, pre
    assert by_id["stock_image_present"]["passed"] is False, pre
    assert "no stock image" in by_id["stock_image_present"]["detail"], pre
    assert by_id["stock_image_verified"]["passed"] is False, pre
    assert by_id["stock_image_verified"]["detail"], pre
    assert by_id["slot_manager"]["passed"] is True, pre
    code, _, body = http("POST", f"{sim.api_url}{RESTORE}", token=token, body={"confirm": True},
                         timeout=120)
    assert code == 409, body
    assert body["refusal"] == "preflight_failed", body
    assert "stock_image_present" in body["error"], body
    assert body["suggestion"], body
    after = status(sim, token, RESTORE_STATUS)
    for k in ("phase", "operation_id", "booted_slot", "primary_slot", "running_version"):
        assert after[k] == before[k], (k, before, after)
    # No reboot happened and nothing was written to the other slot.
    assert supervisor_pid(sim) == pid and os.readlink(f"/proc/{pid}/exe") == exe
    assert slots_snapshot(sim) == slots_before


def test_restore_to_stock_boots_the_stock_slot(life):
    sim, work = life["sim"], life["work"]
    token = login(sim)
    # The stock image on the sim: a signed bundle of the current build, with an older version
    # than the running one (a restore is allowed to go back).
    stock = sim.dir / "state" / "stock" / "stock.raucb"
    stock.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(make_bundle(work, "stock", life["payload"], "1.0.0", life["key"], life["cert"]),
                stock)
    before = status(sim, token)
    target = "A" if before["booted_slot"] == "B" else "B"

    def ready():
        code, _, pre = http("GET", f"{sim.api_url}{PREFLIGHT_CHECKS}", token=login(sim),
                            timeout=60)
        assert code == 200, pre
        return pre if pre["ready"] else None

    # Power is judged from live telemetry: wait until the PSU reads steady.
    got = wait_for(ready, 60, "a ready restore preflight", interval=1)
    by_id = checks_by_id(got)
    assert all(c["passed"] and c["detail"] for c in by_id.values()), got
    assert got["stock_version"] == "1.0.0", got
    assert "1.0.0" in by_id["stock_image_verified"]["detail"], got
    assert COMPATIBLE in by_id["model_compatible"]["detail"], got
    lost = got["will_be_lost"]
    assert any("configuration" in x for x in lost) and any("password" in x for x in lost), lost
    code, _, ran = http("POST", f"{sim.api_url}{RESTORE}/preflight", token=token, timeout=60)
    assert code == 200, ran
    assert ran["ready"] is True and ran["stock_version"] == got["stock_version"], ran
    assert ran["will_be_lost"] == lost, ran
    assert {c["id"]: c["passed"] for c in ran["checks"]} == {
        c["id"]: c["passed"] for c in got["checks"]}, (ran, got)
    # Without an explicit confirmation nothing happens.
    for bad in ({}, {"confirm": False}):
        code, _, body = http("POST", f"{sim.api_url}{RESTORE}", token=token, body=bad)
        assert code == 400, (bad, body)
        assert body["field"] == "confirm" and body["error"], body
    assert status(sim, token)["operation_id"] == before["operation_id"]
    old_pid = supervisor_pid(sim)
    code, _, body = http("POST", f"{sim.api_url}{RESTORE}", token=token, body={"confirm": True},
                         timeout=300)
    assert code == 200, body
    assert body["kind"] == "restore", body
    assert body["phase"] in ("pending_reboot", "booting_new_slot"), body
    assert body["to"] == {"version": "1.0.0", "slot": target}, body
    assert body["operation_id"] > before["operation_id"], body
    s = wait_phase(sim, {"committed", "rolled_back", "failed"}, timeout=300, path=RESTORE_STATUS)
    assert s["phase"] == "committed", s
    assert s["kind"] == "restore" and s["operation_id"] == body["operation_id"], s
    assert s["booted_slot"] == target and s["primary_slot"] == target, s
    assert s["running_version"] == "1.0.0", s
    phases = [h["phase"] for h in s["history"]]
    # The history starts with this operation: every step, in order.
    order = ["verifying", "installing", "pending_reboot", "booting_new_slot", "committed"]
    assert all(p in phases for p in order), phases
    assert [phases.index(p) for p in order] == sorted(phases.index(p) for p in order), phases
    assert phases[0] == "verifying" and phases[-1] == "committed", phases
    slot = next(x for x in s["slots"] if x["bootname"] == target)
    assert slot["boot_status"] == "good" and slot["version"] == "1.0.0", s
    # The stock slot's binary runs the whole stack (same pid, exec-based reboot).
    pid = supervisor_pid(sim)
    assert pid == old_pid
    assert os.readlink(f"/proc/{pid}/exe") == str(sim.dir / "slots" / target / "svcos")
    for name, svc in sim.services().items():
        assert "run" in str(svc["state"]).lower(), (name, svc)
    # The stock image stays on the data partition for another restore.
    assert stock.exists()


def test_a_200_mb_bundle_sent_at_5_mb_s_through_port_80_installs(life):
    """Issue 31: through the dashboard's port a bundle that took longer to send than the proxy's
    30 s response timeout got 504 and was discarded. A 200 MB bundle sent at 5 MB/s (40 s) to
    the port-80 proxy is received whole, installed and committed. Runs last: it leaves the
    stack on whichever slot it installed into."""
    sim, work = life["sim"], life["work"]
    token = login(sim)
    big = work / "svcos-200mb"
    shutil.copy(life["payload"], big)
    # Random bytes after the ELF image: it still runs, and squashfs cannot shrink them.
    with open(big, "ab") as f:
        for _ in range(200):
            f.write(os.urandom(1 << 20))
    bundle = make_bundle(work, "v70", big, "70.0.0", life["key"], life["cert"])
    big.unlink()
    size = bundle.stat().st_size
    assert size >= 200 * 10**6, size
    proxy = urllib.parse.urlparse(sim.http_url)
    rate, chunk = 5 * 10**6, 256 * 1024
    started = time.monotonic()
    with socket.create_connection((proxy.hostname, proxy.port), timeout=120) as s, \
            open(bundle, "rb") as f:
        s.sendall(
            f"POST {UPLOAD} HTTP/1.1\r\nHost: {proxy.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n"
            "Connection: close\r\n\r\n".encode())
        sent = 0
        while data := f.read(chunk):
            s.sendall(data)
            sent += len(data)
            # Paced to 5 MB/s: never ahead of the schedule.
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        sent_in = time.monotonic() - started
        reply = b""
        while part := s.recv(65536):
            reply += part
    assert sent_in > 35, sent_in
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"200", reply[:400]
    if b"transfer-encoding: chunked" in head.lower():
        whole = b""
        while body:
            n, _, rest = body.partition(b"\r\n")
            n = int(n, 16)
            whole, body = whole + rest[:n], rest[n + 2:]
            if n == 0:
                break
        body = whole
    answer = json.loads(body)
    assert answer["to"]["version"] == "70.0.0", answer
    s = wait_phase(sim, {"committed", "rolled_back", "failed"}, timeout=600)
    assert s["phase"] == "committed" and s["running_version"] == "70.0.0", s
    bundle.unlink()
