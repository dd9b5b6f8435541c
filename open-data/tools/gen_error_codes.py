#!/usr/bin/env python3
"""Build open-data/datasets/error-codes/error-codes.v1.jsonl from public, licensed sources.

Reproducible and auditable: every record names its source (document or repository, path,
version, licence, retrieval date), and component, severity and DIY difficulty come from the
keyword rules below, with the rule that fired recorded per record (`classification`). Fields
no source gives stay null/empty: no part number, price or repair cost is ever made up.

Sources, in merge order (a code already present is never replaced by a later source):

1. `sources/curated-error-codes.jsonl`: svcOS's own vocabulary (each with the svcOS file that
   raises it) and stock-firmware codes transcribed from public repair guides.
2. pyasic (github.com/UpstreamData/pyasic, Apache-2.0), read from the installed package:
   `pyasic/data/error_codes/whatsminer.py` (BTMiner codes) and `innosilicon.py`.
   Whatsminer "Slot {n}" templates are expanded over slots 0-2 (the three hashboard slots of a
   Whatsminer, and the range the MicroBT tables and the guides show: 530/531/532), "Pool {n}"
   over pools 0-2 (BTMiner's three pool slots). Templates whose range no source states
   (per-chip codes 52x-56x, substandard levels L{n} of 85x) are not expanded.
3. `sources/cgminer-api-codes.tsv`: the error, warning and info status codes of cgminer's RPC
   API (api.c of github.com/ckolivas/cgminer, GPL-3.0), extracted with `extract-cgminer`.
   Success answers (SEVERITY_SUCC) are not fault or diagnostic codes and are left out.
3b. `sources/bfgminer-api-codes.tsv`: BFGMiner's (github.com/luke-jr/bfgminer, GPL-3.0) E/W/I
   status codes that cgminer's table lacks with the same meaning, extracted with `extract-bfgminer`.
4. `sources/documented-codes.json`: code tables transcribed from manufacturers' and
   firmware vendors' public documents and from open-source firmware and pool code, each table
   with its source (repository, path, commit, licence): Canaan's A10 manual, AMS and fms-core,
   the Bitcoin Wiki's Avalon6 page, Hiveon's knowledge base, ESP-Miner (TPS546 status bits,
   Wi-Fi disconnect reasons), the Stratum V2 spec, btcpool, ckpool, DATUM Gateway, cgminer's
   device/pool statuses, MicroBT's API document and Bitmain's S9 bmminer. A code may carry
   `code_suffix` when its native form has characters unfit for a URL key ("P:1" -> P1). Pool
   rejection answers are classified with the `pool-rejection` rule (classify text
   "pool rejected: ...").

Usage:
  gen_error_codes.py                 write the dataset file
  gen_error_codes.py --check         exit 1 if the committed file differs from a fresh build
  gen_error_codes.py extract-cgminer PATH/TO/api.c [COMMIT]   refresh the cgminer table
  gen_error_codes.py extract-bfgminer PATH/TO/api.c [COMMIT]  refresh the BFGMiner table (after cgminer's)
"""

import hashlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
OUT = HERE.parent / "datasets" / "error-codes" / "error-codes.v1.jsonl"
RETRIEVED = "2026-11-29"

PYASIC_REPO = "https://github.com/UpstreamData/pyasic"
# The installed 0.79.0 files are byte-identical to this commit of the repository (checked when
# the corpus was built); the generator records the installed version and each file's SHA-256.
PYASIC_COMMIT = "e2b9d35756dbcc40f40c3b1d86863e60e3d4ff13"

# Whatsminer hashboard slots and BTMiner pool slots the templates are expanded over.
WHATSMINER_SLOTS = range(3)
BTMINER_POOLS = range(3)

# ---------------------------------------------------------------------------------------------
# Classification rules. Applied to the source's own text (the code's message), lower-cased.
# First matching rule wins; each rule has an id that is written into the record.

COMPONENT_RULES = [
    ("factory-data", r"serial #|product type|miner type|cooling type|power model|hash board struct|\bbin type", "configuration"),
    ("psu-fan", r"power supply fan|power fan", "psu"),
    ("fan", r"\bfan", "fan"),
    ("temperature-sensor", r"temp(erature)? sensor|humidity sensor|temperature reading", "temperature-sensor"),
    ("eeprom", r"eeprom", "eeprom"),
    ("pool", r"\bpool|asicboost|stratum", "pool"),
    ("network", r"network|mac address|wifi", "network"),
    ("power-setting", r"power rate|power mismatch|power version", "configuration"),
    ("restart-reason", r"restart", "control-board"),
    ("psu", r"power|\bpsu\b|\bvout\b|\biout\b|over.?current|input voltage", "psu"),
    ("cooling", r"temp|hot\b|overheat|water velocity|humidity", "cooling"),
    ("control-board", r"control board|rebooted|\bspi\b|memory", "control-board"),
    ("chip", r"\bchip|nonce|bist", "chip"),
    ("firmware", r"firmware|version|checksum|security|signature|virus|illegal|process error|btminer|cgminer|upgrade|software", "firmware"),
    ("hashboard", r"slot|hash ?board|board|hashrate|frequency|\bfreq\b|crc|voltage|plug|balance|factory test|data cables", "hashboard"),
]

SEVERITY_RULES = [
    ("informational", r"requested restart|power-on restart|does not support|not available|not enabled|tool version is too low|old firmware|substandard|^low freq|^low hashrate|empty level", "info"),
    ("factory-data", r"serial #|product type|power model|miner type|bin type|cooling type|hash board struct", "warning"),
    ("single-pool", r"pool \d connection failed|rejection rate|asicboost", "warning"),
    ("pool-rejection", r"^pool rejected", "warning"),
    ("stops-mining-or-protection", r"protect|not found|no power|stopped|environment temperature is too high|too low, mining stopped|over.?temp|overheat|over hot|over.?current|\bfault\b|damaged|exited with signal|illegal|virus|removed|not detected|\blost\b|failed|all pools are disabled|no pool information|blocked|do not match|not connected", "critical"),
    ("default-warning", r"", "warning"),
]

# DIY difficulty from the component (documented table), with a few keyword overrides.
DIY_OVERRIDES = [
    ("no-action", r"requested restart|power-on restart", "none"),
    ("factory-data", r"serial #|product type|power model|miner type|bin type|cooling type|hash board struct|pcb serial|power mismatch|power rate", "expert"),
    ("environment", r"environment|env temp", "easy"),
    ("software-update", r"please upgrade|please update|old firmware|restore factory settings", "easy"),
]
DIY_BY_COMPONENT = {
    "fan": "easy",
    "cooling": "easy",
    "network": "easy",
    "pool": "none",
    "configuration": "none",
    "service": "none",
    "firmware": "moderate",
    "psu": "moderate",
    "hashboard": "moderate",
    "control-board": "advanced",
    "eeprom": "advanced",
    "temperature-sensor": "advanced",
    "chip": "expert",
}


def classify(text: str) -> tuple[str, str, str, dict]:
    """(component, severity, diy_difficulty, classification) for a source message."""
    t = text.lower()
    comp, comp_rule = "firmware", "fallback-firmware"
    for rule, pat, value in COMPONENT_RULES:
        if re.search(pat, t):
            comp, comp_rule = value, rule
            break
    sev, sev_rule = "warning", "default-warning"
    for rule, pat, value in SEVERITY_RULES:
        if pat and re.search(pat, t):
            sev, sev_rule = value, rule
            break
    diy, diy_rule = DIY_BY_COMPONENT[comp], f"component-{comp}"
    for rule, pat, value in DIY_OVERRIDES:
        if re.search(pat, t):
            diy, diy_rule = value, rule
            break
    return comp, sev, diy, {"component": comp_rule, "severity": sev_rule, "diy_difficulty": diy_rule}


def record(code, native, manufacturer, slug, firmware, title, description, models, source, text=None):
    comp, sev, diy, rules = classify(text or title)
    return {
        "code": code,
        "native_code": native,
        "manufacturer": manufacturer,
        "manufacturer_slug": slug,
        "firmware": firmware,
        "title": title,
        "description": description,
        "component": comp,
        "severity": sev,
        "diy_difficulty": diy,
        "repair_cost_cad": None,
        "replacement_parts": [],
        "affected_models": models,
        "source": source,
        "classification": rules,
    }


def short_title(msg: str) -> str:
    t = msg.strip().rstrip(".").replace("  ", " ")
    t = t[0].upper() + t[1:]
    return t if len(t) <= 120 else t[:117] + "..."


# ---------------------------------------------------------------------------------------------
# pyasic

WHATSMINER_GROUPS = {
    # Error-type names as pyasic's own comments in whatsminer.py label them.
    1: "fan", 2: "power", 3: "temperature", 4: "EEPROM", 5: "hashboard", 6: "environment temperature",
    7: "control board", 8: "checksum", 9: "power rate", 20: "pool", 21: "factory test", 23: "hashrate",
    50: "water velocity/voltage", 51: "frequency", 80: "tool", 81: "chip data", 82: "version",
    83: "level", 84: "firmware", 86: "factory information", 87: "power", 90: "process", 99: "unknown",
    1000: "security", 1001: "security", 1100: "security",
}


def pyasic_source(module, title):
    import pyasic  # noqa: F401  (fails loudly when pyasic is not installed)

    version = importlib.metadata.version("pyasic")
    path = Path(module.__file__)
    rel = "pyasic/data/error_codes/" + path.name
    return {
        "title": title,
        "url": f"{PYASIC_REPO}/blob/{PYASIC_COMMIT}/{rel}",
        "repository": "github.com/UpstreamData/pyasic",
        "path": rel,
        "version": f"pyasic {version} (PyPI); file SHA-256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}",
        "license": "Apache-2.0",
        "retrieved": RETRIEVED,
    }


def whatsminer_rows():
    from pyasic.data.error_codes import whatsminer as wm

    src = pyasic_source(wm, "pyasic: Whatsminer (BTMiner) error-code table")
    models = ["Whatsminer (MicroBT BTMiner stock firmware)"]
    out = []

    def add(code: int, msg: str, etype: int, sub, val, slot_note: str = ""):
        # The decoder in pyasic's WhatsminerError must map the number back to this message:
        # this is how the displayed number is formed (type digits, subtype digit, value digit).
        decoded = wm.WhatsminerError(error_code=code).error_message
        assert decoded == msg, (code, decoded, msg)
        group = WHATSMINER_GROUPS.get(etype, "other")
        desc = (
            f"BTMiner reports error code {code}: \"{msg.strip()}\" "
            f"(error type {etype}, {group}; subtype {sub}; value {val}{slot_note}), as decoded by "
            "pyasic's WhatsminerError. No cause, remedy or repair cost is stated by the source."
        )
        out.append(record(f"WHATSMINER-{code}", str(code), "MicroBT", "microbt", "BTMiner",
                          short_title(msg), desc, models, src))

    for etype, subs in wm.ERROR_CODES.items():
        for sub, vals in subs.items():
            if sub == "n":
                continue  # per-chip (52x-56x) and level (85x) templates: range not stated
            for val, msg in vals.items():
                if val == "n":
                    rng = BTMINER_POOLS if etype == 20 else WHATSMINER_SLOTS
                    what = "pool" if etype == 20 else "slot"
                    for n in rng:
                        if n in vals:
                            continue  # an explicit entry for this value overrides the template
                        code = int(f"{etype}{sub}{n}")
                        add(code, msg.replace("{n}", str(n)), etype, sub, n, f", {what} {n}")
                else:
                    add(int(f"{etype}{sub}{val}"), msg, etype, sub, val)
    return out


def innosilicon_rows():
    from pyasic.data.error_codes import innosilicon as inno

    src = pyasic_source(inno, "pyasic: Innosilicon error-code table")
    models = ["Innosilicon (stock firmware)"]
    out = []
    for code, msg in inno.ERROR_CODES.items():
        assert inno.InnosiliconError(error_code=code).error_message == msg
        desc = (
            f"Innosilicon firmware reports error code {code}: \"{msg.strip()}\", as listed in "
            "pyasic's InnosiliconError table. No cause, remedy or repair cost is stated by the source."
        )
        out.append(record(f"INNOSILICON-{code}", str(code), "Innosilicon", "innosilicon",
                          "Innosilicon stock firmware", short_title(msg), desc, models, src))
    return out


# ---------------------------------------------------------------------------------------------
# cgminer RPC API status codes

CGMINER_TSV = SOURCES / "cgminer-api-codes.tsv"
BFGMINER_TSV = SOURCES / "bfgminer-api-codes.tsv"


API_SEVERITIES = {"ERR": "E", "WARN": "W", "INFO": "I"}


def api_table(api_c: Path) -> list[tuple[int, str, str, str]]:
    """(code, name, severity, message) of every status message in a cgminer-family api.c
    whose severity is an error, a warning or an informational diagnostic; success answers
    (SEVERITY_SUCC) are not fault or diagnostic codes and are left out."""
    text = api_c.read_text(errors="replace")
    numbers = {n: int(v, 0) for n, v in re.findall(r"^#define (MSG_[A-Z0-9]+)\s+(0x[0-9a-fA-F]+|\d+)\b", text, re.M)}
    rows = []
    for sev, name, msg in re.findall(
        r"\{\s*SEVERITY_(ERR|WARN|INFO),\s*(MSG_[A-Z0-9]+),\s*PARAM_[A-Z]+,\s*\"([^\"]*)\"\s*\}", text
    ):
        rows.append((numbers[name], name, sev, msg))
    # MSG_NODEVS' text is assembled by the preprocessor ("No " + the device kinds compiled in).
    if "MSG_NODEVS" in numbers and not any(r[1] == "MSG_NODEVS" for r in rows):
        rows.append((numbers["MSG_NODEVS"], "MSG_NODEVS", "ERR", "No GPUs/PGAs/ASCs (the device kinds compiled in)"))
    out, seen = [], set()
    for row in sorted(rows):
        if row[0] not in seen:
            seen.add(row[0])
            out.append(row)
    return out


def write_api_tsv(path: Path, header: list[str], rows) -> None:
    lines = header + ["code\tname\tseverity\tmessage"]
    lines += [f"{code}\t{name}\t{sev}\t{msg}" for code, name, sev, msg in rows]
    path.write_text("\n".join(lines) + "\n")


def extract_cgminer(api_c: Path, commit: str) -> None:
    """Write sources/cgminer-api-codes.tsv from cgminer's api.c (error, warning and info codes)."""
    write_api_tsv(CGMINER_TSV, [
        "# cgminer RPC API status codes of severity E (error), W (warning) and I (info).",
        f"# Extracted by gen_error_codes.py extract-cgminer from api.c of github.com/ckolivas/cgminer at {commit} (GPL-3.0).",
    ], api_table(api_c))


def extract_bfgminer(api_c: Path, commit: str) -> None:
    """Write sources/bfgminer-api-codes.tsv: the E/W/I status codes of BFGMiner's api.c that
    cgminer's table does not hold with the same meaning (new numbers, or a number BFGMiner
    gives to another message, e.g. its CPU codes 98-103). Same number and same MSG_ name is
    the same code (MSG_NODEVS' text differs only by the device kinds compiled in)."""
    cg = {(int(c), n) for c, n, _, _ in read_api_tsv(CGMINER_TSV)[1]}
    rows = [r for r in api_table(api_c) if (r[0], r[1]) not in cg]
    write_api_tsv(BFGMINER_TSV, [
        "# BFGMiner RPC API status codes of severity E, W and I that cgminer's table lacks (same number, same MSG_ name).",
        f"# Extracted by gen_error_codes.py extract-bfgminer from api.c of github.com/luke-jr/bfgminer at {commit} (GPL-3.0).",
    ], rows)


def read_api_tsv(path: Path) -> tuple[str, list[list[str]]]:
    lines = path.read_text().splitlines()
    commit = re.search(r"at ([0-9a-f]{40})", lines[1]).group(1)
    return commit, [l.split("\t") for l in lines[3:]]


def api_rows(path: Path, repo: str, program: str, prefix: str, maker: str, slug: str, api: str) -> list[dict]:
    commit, rows = read_api_tsv(path)
    src = {
        "title": f"{program} RPC API status codes (api.c)",
        "url": f"https://{repo}/blob/{commit}/api.c",
        "repository": repo,
        "path": "api.c",
        "version": f"commit {commit} ({api})",
        "license": "GPL-3.0-or-later",
        "retrieved": RETRIEVED,
    }
    models = [f"{program}-based firmware (RPC API, port 4028)"]
    out = []
    for code, name, sev, msg in rows:
        human = msg.replace("%d", "N").replace("%s", "X").replace("'X'", "X")
        letter = API_SEVERITIES[sev]
        kind = {
            "E": "It reports a rejected or failed API request, not a hardware fault.",
            "W": "It is a warning about the request (not supported or not possible yet), not a hardware fault.",
            "I": "It is a diagnostic notice about the request (nothing failed), not a hardware fault.",
        }[letter]
        desc = (
            f"{program}'s RPC API answers STATUS={letter}, Code={code} ({name}) with the message "
            f"\"{human}\". {kind}"
        )
        rec = record(f"{prefix}-{code}", code, maker, slug, f"{program} RPC API",
                     short_title(human), desc, models, src, text=human)
        out.append(as_api_status(rec, letter))
    return out


def cgminer_rows():
    return api_rows(CGMINER_TSV, "github.com/ckolivas/cgminer", "cgminer", "CGMINER-API",
                    "cgminer (open source)", "cgminer", "API 3.7")


def bfgminer_rows():
    return api_rows(BFGMINER_TSV, "github.com/luke-jr/bfgminer", "BFGMiner", "BFGMINER-API",
                    "BFGMiner (open source)", "bfgminer", "API 3.1")


def as_api_status(rec: dict, letter: str | None) -> dict:
    """An API status code is about the request, not the hardware: component `service` (or
    `pool` when the message names a pool), DIY `none`; severity from the API's own status
    letter where the source gives one (E = the request failed: warning, the miner keeps
    mining; W = not supported or not possible yet, I = a diagnostic notice: info), else from the severity rules."""
    if rec["component"] != "pool":
        rec["component"] = "service"
        rec["classification"]["component"] = "api-status"
    if letter:
        rec["severity"] = "warning" if letter == "E" else "info"
        rec["classification"]["severity"] = f"api-status-{letter}"
    rec["diy_difficulty"] = "none"
    rec["classification"]["diy_difficulty"] = "api-status-none"
    return rec


# ---------------------------------------------------------------------------------------------
# Small documented tables

def documented_rows():
    doc = json.loads((SOURCES / "documented-codes.json").read_text())
    out = []
    for table in doc["tables"]:
        src = dict(table["source"])
        for c in table["codes"]:
            text = c.get("classify_text", c["title"])
            rec = record(
                f"{table['prefix']}-{c.get('code_suffix', c['native_code'])}", c["native_code"], table["manufacturer"],
                table["manufacturer_slug"], table["firmware"], c["title"], c["description"],
                c.get("affected_models", table["affected_models"]), src, text=text,
            )
            if table.get("api_status"):
                rec = as_api_status(rec, c.get("status_letter"))
            out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------

def curated_rows():
    rows = []
    for line in (SOURCES / "curated-error-codes.jsonl").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        r = json.loads(line)
        if r["manufacturer_slug"] == "svcos":
            r["classification"] = {
                "component": "svcos-own", "severity": "svcos-own", "diy_difficulty": "svcos-own",
            }
        else:
            r["classification"] = {
                "component": "curated-guide", "severity": "curated-guide", "diy_difficulty": "curated-guide",
            }
        rows.append(r)
    return rows


def build() -> list[dict]:
    merged: dict[str, dict] = {}
    for rows in (curated_rows(), whatsminer_rows(), innosilicon_rows(), cgminer_rows(), bfgminer_rows(), documented_rows()):
        for r in rows:
            merged.setdefault(r["code"], r)
    return list(merged.values())


HEADER = """# Error-code corpus. GENERATED by open-data/tools/gen_error_codes.py: do not edit by hand.
# Every record names its source (url, or repository + path), version, licence and retrieval date.
# component/severity/diy_difficulty come from the rules in the generator (rule ids in classification).
# repair_cost_cad is null and replacement_parts empty wherever no public source states them.
"""


def render(rows: list[dict]) -> str:
    return HEADER + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str]) -> int:
    if argv[:1] == ["extract-cgminer"]:
        extract_cgminer(Path(argv[1]), argv[2] if len(argv) > 2 else "unknown")
        return 0
    if argv[:1] == ["extract-bfgminer"]:
        extract_bfgminer(Path(argv[1]), argv[2] if len(argv) > 2 else "unknown")
        return 0
    text = render(build())
    if argv[:1] == ["--check"]:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"{OUT}: {text.count(chr(10)) - HEADER.count(chr(10))} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
