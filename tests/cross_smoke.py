"""The ARM smoke of tests/cross.sh (issue 35): the whole stack from a cross-built `svcos`, run
under qemu-user through binfmt_misc, must mine.

Checks, each fatal: the binary is an ARM executable; `svcos sim` starts and its services run as
emulated processes; the test pool accepts shares; after a SIGKILL of hw-agent it is restarted
and accepted shares keep rising; `/api/status` and the cgminer API answer. Then prints the
stack's memory (PSS/RSS from smaps_rollup) as an indication only: under qemu-user each process
also carries the emulator and its translated code.

Needs SVCOS_BIN (the ARM binary) and QEMU_LD_PREFIX in the environment; tests/cross.sh sets both.
Reuses the end-to-end tests' helpers (tests/python/conftest.py), so it starts the stack exactly
as they do.
"""

import os
import signal
import sys
import tempfile
import shutil
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "python"))

from conftest import (  # noqa: E402 - the path above makes the helpers importable
    accepted_shares,
    cgminer,
    http,
    login,
    start_sim,
    stop_sim,
    svcos_bin,
    wait_for,
)

# e_machine of an ELF header: what the binary was built for.
ELF_MACHINES = {40: "ARM", 183: "AArch64", 62: "x86-64"}
# Emulated, the first share takes longer than natively (the sim calibrates its hashing to the
# emulated speed); generous bounds, they only matter when something is broken.
FIRST_SHARE_S = 300
MORE_SHARES_S = 180


def elf_machine(path: Path) -> str:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    machine = int.from_bytes(head[18:20], "little")
    return ELF_MACHINES.get(machine, f"e_machine {machine}")


def smaps_rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in KiB."""
    pss = rss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
    return pss, rss


def first_load_vaddr(path: Path) -> int:
    """p_vaddr of a 32-bit ELF's first PT_LOAD segment (where the kernel would map it)."""
    data = path.read_bytes()[:4096]
    phoff = int.from_bytes(data[28:32], "little")
    phentsize = int.from_bytes(data[42:44], "little")
    phnum = int.from_bytes(data[44:46], "little")
    for k in range(phnum):
        ph = data[phoff + k * phentsize: phoff + (k + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") == 1:  # PT_LOAD
            return int.from_bytes(ph[8:12], "little")
    raise AssertionError(f"{path}: no PT_LOAD segment")


def guest_pss(pid: int, binary: Path, load_vaddr: int) -> int:
    """PSS in KiB of what the ARM program itself maps, without the emulator's own memory.

    qemu-user gives a 32-bit guest a 4 GiB window of the host's address space at `guest_base`
    and maps every guest mapping inside it; the guest binary's first segment sits at
    guest_base + its p_vaddr. The window's PSS is what the process would map on an ARM kernel
    (same 4 KiB pages), except that the code is touched by the translator, not executed.
    """
    entries = []
    current = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            current = [start, end, head[-1] if len(head) >= 6 else "", int(head[2], 16), 0]
            entries.append(current)
        elif line.startswith("Pss:") and current is not None:
            current[4] = int(head[1])
    target = str(binary.resolve())
    starts = [e[0] for e in entries if e[2] == target and e[3] == 0]
    assert starts, f"{binary} is not mapped in pid {pid}"
    base = min(starts) - (load_vaddr & ~0xFFF)
    return sum(e[4] for e in entries if base <= e[0] < base + (1 << 32))


def parent_of(pid: int) -> int:
    # The field after the parenthesised command name; the name itself may hold spaces.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def step(what: str):
    print(f"-- {what}", flush=True)


def main() -> int:
    binary = svcos_bin()
    machine = elf_machine(binary)
    assert machine in ("ARM", "AArch64"), f"{binary} is {machine}, not an ARM build"
    assert os.environ.get("QEMU_LD_PREFIX"), "QEMU_LD_PREFIX is not set"
    step(f"{binary} ({machine}, {binary.stat().st_size} bytes)")

    tmp = Path(tempfile.mkdtemp(prefix="svcos-cross-"))
    started = time.monotonic()
    sim = start_sim(tmp)
    ok = False
    try:
        step(f"REST API up after {time.monotonic() - started:.1f} s (emulated)")
        token = login(sim)
        services = sim.services()
        hw_agent = services["hw-agent"]
        assert hw_agent["state"] == "running", hw_agent
        # Under binfmt_misc the process image is the qemu interpreter running the ARM binary.
        exe = os.readlink(f"/proc/{hw_agent['pid']}/exe")
        assert "qemu" in exe or "binfmt" in exe, f"hw-agent is not emulated: {exe}"
        step(f"services running as ARM processes under {exe}: {sorted(services)}")

        wait_for(lambda: accepted_shares(sim, token) > 0, FIRST_SHARE_S, "a first accepted share",
                 interval=2)
        first = accepted_shares(sim, token)
        step(f"accepted shares: {first} after {time.monotonic() - started:.0f} s")

        os.kill(int(hw_agent["pid"]), signal.SIGKILL)

        def restarted():
            svc = sim.services()["hw-agent"]
            return svc["state"] == "running" and svc["pid"] != hw_agent["pid"] and svc

        again = wait_for(restarted, 120, "hw-agent restarted after SIGKILL", interval=1)
        after_kill = accepted_shares(sim, token)
        wait_for(lambda: accepted_shares(sim, token) > after_kill, MORE_SHARES_S,
                 "accepted shares rising after the SIGKILL of hw-agent", interval=2)
        step(f"hw-agent SIGKILLed (pid {hw_agent['pid']}), back as pid {again['pid']}; "
             f"accepted shares {after_kill} -> {accepted_shares(sim, token)}")

        status, _, body = http("GET", f"{sim.api_url}/api/status", token, timeout=20)
        assert status == 200 and isinstance(body, dict) and body.get("pools"), (status, body)
        summary = cgminer(sim, "summary")
        assert summary["STATUS"][0]["STATUS"] == "S", summary
        assert summary["SUMMARY"][0]["Accepted"] > 0, summary
        step(f"/api/status 200 (pools accepted {body['pools']['accepted']}); cgminer summary "
             f"Accepted {summary['SUMMARY'][0]['Accepted']}")

        # Memory: the firmware's processes (supervisor and its services) apart from what only
        # the sim runs (the simulated board, the test pool), as on a miner.
        services = sim.services()
        supervisor = parent_of(int(services["hw-agent"]["pid"]))
        rows = [("supervisor", supervisor)] + [
            (name, int(svc["pid"])) for name, svc in sorted(services.items()) if svc.get("pid")
        ]
        # The guest's own share is separable only for a 32-bit guest (its 4 GiB window).
        load_vaddr = first_load_vaddr(binary) if machine == "ARM" else None
        firmware_pss = firmware_rss = firmware_guest = sim_pss = 0
        for name, pid in rows:
            pss, rss = smaps_rollup(pid)
            guest = guest_pss(pid, binary, load_vaddr) if load_vaddr is not None else 0
            only_sim = name in ("hw-sim", "test-pool")
            shown = f"{guest:>6} KiB" if load_vaddr is not None else "     n/a"
            print(f"   {name:<14} pid {pid:>7}  PSS {pss:>7} KiB  RSS {rss:>7} KiB  "
                  f"guest PSS {shown}{'  (sim only)' if only_sim else ''}")
            if only_sim:
                sim_pss += pss
            else:
                firmware_pss += pss
                firmware_rss += rss
                firmware_guest += guest
        own = (f"{firmware_guest} KiB ({firmware_guest / 1024:.1f} MiB)" if load_vaddr is not None
               else "not separable for a 64-bit guest")
        step(f"supervisor + {len(rows) - 3} services: PSS {firmware_pss} KiB, RSS sum "
             f"{firmware_rss} KiB, emulator included; the ARM programs' own PSS {own}; "
             f"sim-only processes PSS {sim_pss} KiB. Under qemu-user: an indication only")
        ok = True
    finally:
        stop_sim(sim)
        if not ok:
            print(sim.log()[-6000:], file=sys.stderr)
        if os.environ.get("SVCOS_KEEP_SIM") is None:
            shutil.rmtree(tmp, ignore_errors=True)
    step("smoke passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
