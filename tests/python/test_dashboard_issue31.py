"""Issue 31 (items 5 and 6): each defect found in headless Chromium at 1366x900 and 390x844,
pinned by a test that drives the real dashboard against the real `svcos sim` (the same stack,
browser and helpers as test_dashboard.py) and fails on the code before its fix.

Every test that changes shared state (pools, tuner switch, mode, thermostat, price) puts it
back, so the order of the module's tests does not matter.
"""

import asyncio
import colorsys
import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import _free_port, http, login, start_sim, stop_sim, wait_for
from test_dashboard import (  # noqa: F401 - fixtures are used by name
    Browser,
    Page,
    assert_clean,
    browser,
    open_logged_in,
    proxy_up,
    ready,
    run_page,
    set_mode,
    wait_for_proxy,
)

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")

PHONE = dict(width=390, height=844, deviceScaleFactor=1, mobile=True)
DESKTOP = dict(width=1366, height=900, deviceScaleFactor=1, mobile=False)


async def at_size(page: Page, size: dict):
    await page.call("Emulation.setDeviceMetricsOverride", **size)


async def clear_size(page: Page):
    await page.call("Emulation.clearDeviceMetricsOverride")


def pools_of(sim, token):
    status, _, body = http("GET", f"{sim.api_url}/api/pools", token=token)
    assert status == 200, body
    return body


def pool_list_body(pools):
    """The POST /api/pools body that puts `pools` (as GET /api/pools lists them) back."""
    return {"pools": [{"url": p["url"], "user": p["user"], "password": p.get("password") or "",
                       "enabled": p.get("enabled", True) is not False, "priority": i, "quota": p.get("quota", 0)}
                      for i, p in enumerate(pools)]}


def restore_pools(sim, token, pools):
    status, _, body = http("POST", f"{sim.api_url}/api/pools", token=token, body=pool_list_body(pools))
    assert status == 200, body


def closed_port_url(sim) -> str:
    """A pool URL on the stack's own address where nothing listens (connection refused)."""
    return f"stratum+tcp://{sim.bind}:{_free_port(sim.bind)}"


def rgb(css: str):
    m = re.match(r"rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)", css)
    assert m, css
    return tuple(float(x) / 255 for x in m.groups())


def luminance(c):
    def lin(v):
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(v) for v in c)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(rgb(a)), luminance(rgb(b))), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def is_red(css: str) -> bool:
    h, _, s = colorsys.rgb_to_hls(*rgb(css))
    return s > 0.2 and (h * 360 < 20 or h * 360 > 340)


# ------------------------------------------------------------------------------- defect 2


def test_defect2_services_screen_fits_a_phone_with_its_restart_buttons_on_screen(sim, ready, browser):
    set_mode(sim, ready, "hacker")

    async def drive(page: Page):
        await at_size(page, PHONE)
        try:
            await open_logged_in(page, sim, ready, "services")
            await page.until("document.querySelectorAll('#services .restart').length >= 4", 60, "the services table")
            await asyncio.sleep(0.5)
            layout = await page.js("""({width: window.innerWidth, scroll: document.documentElement.scrollWidth,
                buttons: [...document.querySelectorAll('#services .restart')].map((b) => { const r = b.getBoundingClientRect(); return [r.left, r.right]; })})""")
        finally:
            await clear_size(page)
        return layout, page

    try:
        layout, page = run_page(browser, sim.http_url, drive)
    finally:
        set_mode(sim, ready, "standard")
    assert layout["scroll"] <= layout["width"], layout
    off = [b for b in layout["buttons"] if b[0] < 0 or b[1] > layout["width"]]
    assert not off, layout
    assert_clean(page)


# ------------------------------------------------------------------------------- defects 3, 4


def test_defect3_a_failed_pool_test_stays_with_its_pool_after_a_reorder(sim, ready, browser):
    before = pools_of(sim, ready)["pools"]
    bad_url = closed_port_url(sim)

    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "pools")
        await page.until("document.querySelectorAll('#screen-pools li.pool').length > 0", 60, "the pool editor")
        n = await page.js("document.querySelectorAll('#screen-pools li.pool').length")
        await page.click("#pool-add")
        await page.until(f"document.querySelectorAll('#screen-pools li.pool').length === {n + 1}", 10, "a new row")
        last = f"#screen-pools li.pool[data-index='{n}']"
        await page.type(f"{last} .pool-url", bad_url)
        await page.type(f"{last} .pool-user", "dash.defect3")
        await page.click(f"{last} .pool-test")
        await page.until(f"document.querySelector(\"{last} .pool-test-result\")?.textContent", 60, "the failed test")
        await page.click("#pool-save")
        await page.until("!!document.getElementById('pool-saved')", 60, "saved")
        await page.click(f"#screen-pools button[aria-label='Move pool {n + 1} up']")
        await page.until("!document.getElementById('pool-save').disabled", 10, "a draft")
        await page.click("#pool-save")
        await page.until("document.querySelectorAll('#screen-pools li.pool').length > 0 && !!document.getElementById('pool-saved')"
                         " && document.getElementById('pool-save').disabled", 60, "saved again")
        rows = await page.js("""[...document.querySelectorAll('#screen-pools li.pool')].map((li) => ({
            url: li.querySelector('.pool-url').value, result: li.querySelector('.pool-test-result')?.textContent || null,
            failed: !!li.querySelector('.pool-test-result.s-bad')}))""")
        return rows, page

    try:
        rows, page = run_page(browser, sim.http_url, drive)
    finally:
        restore_pools(sim, ready, before)
    failing = [r for r in rows if r["url"] == bad_url]
    others = [r for r in rows if r["url"] != bad_url]
    assert len(failing) == 1 and failing[0]["failed"], rows
    assert "refused" in failing[0]["result"], rows
    assert not any(r["failed"] for r in others), rows
    assert rows.index(failing[0]) == len(before) - 1, rows
    assert_clean(page)


def test_defect4_a_reorder_that_leaves_the_miner_on_pool_2_is_a_recorded_switch(sim, ready, browser):
    before = pools_of(sim, ready)
    healthy = before["pools"][0]
    assert healthy["status"]["state"] == "alive", healthy
    switches_before = http("GET", f"{sim.api_url}/api/pools/failover_policy", token=ready)[2]["recent_switches"]
    bad = {"url": closed_port_url(sim), "user": "dash.defect4", "password": "x", "enabled": True, "quota": 0}
    reordered = [bad, *before["pools"]]
    try:
        restore_pools(sim, ready, reordered)

        def switched():
            policy = http("GET", f"{sim.api_url}/api/pools/failover_policy", token=ready)[2]
            new = policy["recent_switches"][len(switches_before):] if len(policy["recent_switches"]) >= len(switches_before) else policy["recent_switches"]
            return [s for s in new if s["to_index"] == 1 and "reordered" in s["reason"]]

        recorded = wait_for(switched, 60, "the reorder in recent_switches")
        live = pools_of(sim, ready)
        assert live["active_index"] == 1, live

        async def drive(page: Page):
            await open_logged_in(page, sim, ready, "pools")
            shown = await page.until("[...document.querySelectorAll('.pool-switch')].map((li) => li.textContent).find((t) => t.includes('reordered'))",
                                     60, "the switch on the Pools screen")
            return shown, page

        shown, page = run_page(browser, sim.http_url, drive)
    finally:
        restore_pools(sim, ready, before["pools"])
    assert recorded[-1]["from_index"] == 0, recorded
    assert "pool 1 → pool 2" in shown and "pool 1" in recorded[-1]["reason"], (shown, recorded)
    assert_clean(page)


# ------------------------------------------------------------------------------- defect 5


def test_defect5_chip_map_colours_read_against_fixed_references_with_legible_labels(sim, ready, browser):
    target = http("GET", f"{sim.api_url}/api/status", token=ready)[2]["mining"]["temp_target_c"]
    hot = http("GET", f"{sim.api_url}/api/config", token=ready)[2]["config"]["thermal"]["hot_temp_c"]

    chips_js = """[...document.querySelectorAll('#screen-chips .chip')].map((c) => { const s = getComputedStyle(c);
        const v = c.querySelector('[data-k]'); return {tone: c.dataset.tone, bg: s.backgroundColor, fg: s.color,
        value: JSON.parse(v.dataset.v), fits: c.scrollWidth <= c.clientWidth, alive: !c.classList.contains('dead')}; })"""

    async def drive(page: Page):
        await at_size(page, PHONE)
        try:
            await open_logged_in(page, sim, ready, "chips")
            await page.until("document.querySelectorAll('#screen-chips .chip').length > 10", 60, "the chip map")
            await asyncio.sleep(0.5)
            temp = await page.js(chips_js)
            await page.type("#chip-metric", "ghs_1m")
            await page.until("document.querySelector('#screen-chips .chip [data-k]').dataset.k.endsWith('ghs_1m')", 10, "the hashrate view")
            await asyncio.sleep(0.3)
            rate = await page.js(chips_js)
            legend = await page.js("""[...document.querySelectorAll('#chip-legend li[data-tone]')].map((li) =>
                [li.dataset.tone, getComputedStyle(li.querySelector('.swatch')).backgroundColor, li.textContent])""")
        finally:
            await clear_size(page)
        return temp, rate, legend, page

    temp, rate, legend, page = run_page(browser, sim.http_url, drive)
    alive = [c for c in temp if c["alive"]]
    assert alive and all(c["value"] < hot for c in alive), (hot, alive[:3])
    # Red means hot (at or above `[thermal].hot_temp_c`), never "the warmest of today's chips";
    # a chip at or below the target wears the target's tone however warm its neighbours.
    assert not [c for c in alive if is_red(c["bg"])], [c for c in alive if is_red(c["bg"])][:5]
    tones = {c["tone"] for c in alive if c["value"] <= target}
    assert tones <= {"ok"}, (target, tones)
    rates = sorted(c["value"] for c in rate if c["alive"])
    median = rates[len(rates) // 2]
    near = [c for c in rate if c["alive"] and c["value"] >= 0.9 * median]
    assert not [c for c in near if is_red(c["bg"])], (median, [c for c in near if is_red(c["bg"])][:5])
    # Legend: each tone's swatch is the colour the chips of that tone wear.
    swatch = {tone: bg for tone, bg, _ in legend}
    assert set(swatch) == {"ok", "warn", "bad"}, legend
    for c in rate + temp:
        if c["alive"] and c["tone"]:
            assert c["bg"] == swatch[c["tone"]], (c, legend)
    # Labels: at least 4.5:1 against their tile, never cut at 390 px.
    for c in temp + rate:
        assert contrast(c["fg"], c["bg"]) >= 4.5, c
        assert c["fits"], c
    assert_clean(page)


# ------------------------------------------------------------------------------- defect 6


def test_defect6_applying_a_profile_turns_the_tuner_switch_on_in_the_config(sim, ready, browser):
    def enabled():
        return http("GET", f"{sim.api_url}/api/config", token=ready)[2]["config"]["tuner"]["enabled"]

    was = enabled()
    name = f"dash-defect6-{int(time.time()) % 10000}"
    status, _, body = http("PUT", f"{sim.api_url}/api/autotuner/active", token=ready, body={"active": True})
    assert status == 200, body
    # A profile saves the point in force (409 until the tuner has one).
    wait_for(lambda: http("POST", f"{sim.api_url}/api/profiles", token=ready,
                          body={"name": name, "action": "save"})[0] == 200, 240, "a point to save")
    status, _, body = http("PUT", f"{sim.api_url}/api/autotuner/active", token=ready, body={"active": False})
    assert status == 200, body
    assert enabled() is False

    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "tuner")
        await page.until("document.getElementById('tuner-active')?.checked === false && !document.getElementById('tuner-active').disabled",
                         60, "the switch off")
        await page.until(f"[...document.querySelectorAll('#screen-tuner li')].some((li) => li.textContent.includes({json.dumps(name)}))",
                         60, "the saved profile")
        await page.js(f"""[...document.querySelectorAll('#screen-tuner li')].find((li) => li.textContent.includes({json.dumps(name)}))
            .querySelector('button').click(); true""")
        await page.until("document.getElementById('tuner-active').checked === true", 60, "the switch on after Apply")
        return page

    try:
        page = run_page(browser, sim.http_url, drive)
        # The toggle says on: so does the switch's one home.
        assert enabled() is True
    finally:
        http("PUT", f"{sim.api_url}/api/autotuner/active", token=ready, body={"active": was})
    assert_clean(page)


# ------------------------------------------------------------------------------- defect 7


def test_defect7_the_electricity_price_has_one_home_in_the_tuner_section(sim, ready, browser):
    def tuner_section():
        return http("GET", f"{sim.api_url}/api/config", token=ready)[2]["config"]["tuner"]

    before = tuner_section()

    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "settings")
        await page.until("!!document.getElementById('price-save')", 60, "the settings")
        await page.type("#price", "0.25")
        await page.type("#currency", "EUR")
        await page.click("#price-save")
        await page.until("document.getElementById('price-saved')?.textContent", 30, "Saved")
        saved = tuner_section()
        # Another surface changes the one home: the Settings screen shows that, not its own copy.
        status, _, body = http("POST", f"{sim.api_url}/api/config", token=ready,
                               body={"tuner": {"electricity_price_per_kwh": 0.4}})
        assert status == 200, body
        await open_logged_in(page, sim, ready, "settings")
        shown = await page.until("document.getElementById('price')?.value === '0.4' && document.getElementById('price').value",
                                 30, "the price from [tuner]")
        return saved, shown, page

    try:
        saved, shown, page = run_page(browser, sim.http_url, drive)
        # The tuner re-reads the config file at its next tick.
        profit = wait_for(lambda: (lambda r: r[0] == 200 and r[2]["inputs"]["electricity_price_per_kwh"] == 0.4 and r)(
            http("POST", f"{sim.api_url}/api/autotuner/profitability", token=ready,
                 body={"btc_price": 50000, "network_difficulty": 1e14})), 60, "the tuner reading the new price")
    finally:
        http("POST", f"{sim.api_url}/api/config", token=ready,
             body={"tuner": {"electricity_price_per_kwh": before["electricity_price_per_kwh"], "currency": before["currency"]}})
    assert saved["electricity_price_per_kwh"] == 0.25 and saved["currency"] == "EUR", saved
    assert shown == "0.4"
    # The tuner's own reader (profitability) takes the price from the same place.
    assert profit[0] == 200, profit
    assert profit[2]["inputs"]["electricity_price_per_kwh"] == 0.4 and profit[2]["currency"] == "EUR", profit[2]
    assert_clean(page)


# ------------------------------------------------------------------------------- defect 8


def test_defect8_heater_sleep_thermostat_without_a_reading(sim, ready, browser):
    set_mode(sim, ready, "home")
    home_before = http("GET", f"{sim.api_url}/api/config", token=ready)[2]["config"]["home"]

    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "heater")
        await page.until("!!document.getElementById('heater-sleep') && /\\d/.test(document.getElementById('heat-output')?.textContent || '')",
                         60, "the heater")
        await page.click("#heater-sleep")
        # Before the next status poll (5 s): no heat claimed, and only Sleep looks pressed.
        t0 = time.monotonic()
        await page.until("document.getElementById('heat-output').textContent === '0 W'", 3, "no heat while asleep")
        quick = time.monotonic() - t0
        styles = await page.js("""(() => { const bg = (id) => getComputedStyle(document.getElementById(id)).backgroundColor;
            return {on: bg('heater-on'), sleep: bg('heater-sleep'), onClass: document.getElementById('heater-on').className}; })()""")
        # Both buttons stay disabled until the sleep request is answered (slower right after a
        # gateway restart by an earlier test); only then can On be pressed.
        await page.until("!document.getElementById('heater-on').disabled", 30, "the sleep request answered")
        await page.click("#heater-on")
        await page.until("document.getElementById('heater-on').getAttribute('aria-pressed') === 'true'", 10, "awake")
        return quick, styles, page

    async def drive_thermostat(page: Page):
        await open_logged_in(page, sim, ready, "heater")
        await page.until("!!document.getElementById('thermostat-state')", 60, "the thermostat line")
        await page.js("[...document.querySelectorAll('#screen-heater button')].find((b) => b.textContent === 'Use thermostat').click(); true")
        warned = await page.until("document.getElementById('thermostat-state')?.classList.contains('warning') && document.getElementById('thermostat-state').textContent",
                                  30, "the warning")
        return warned, page

    try:
        quick, styles, page = run_page(browser, sim.http_url, drive)
        thermo = http("GET", f"{sim.api_url}/api/home/status", token=ready)[2]["thermostat"]
        warned, page2 = run_page(browser, sim.http_url, drive_thermostat) if not (thermo or {}).get("reading_fresh") else (None, None)
    finally:
        http("POST", f"{sim.api_url}/api/action/wake", token=ready, body={})
        http("POST", f"{sim.api_url}/api/home/target", token=ready, body={"enabled": bool(home_before.get("thermostat_enabled"))})
        set_mode(sim, ready, "standard")
    assert quick < 3
    assert "secondary" in styles["onClass"] and styles["on"] != styles["sleep"], styles
    assert styles["on"] in ("rgba(0, 0, 0, 0)", "transparent"), styles
    assert warned is not None, "the thermostat had a fresh reading; nothing to check"
    assert "no recent room reading" in warned, warned


# ------------------------------------------------------------------------------- defect 9


def test_defect9_per_pool_share_counters_survive_a_pools_save_with_an_edited_worker(sim, ready, browser):
    before = pools_of(sim, ready)["pools"]
    wait_for(lambda: (pools_of(sim, ready)["pools"][0].get("status") or {}).get("accepted", 0) > 0, 120, "accepted shares")
    counted = pools_of(sim, ready)["pools"][0]["status"]["accepted"]
    edited = [dict(p) for p in before]
    edited[0]["user"] = f"dash.defect9.{int(time.time()) % 1000}"
    try:
        restore_pools(sim, ready, edited)

        def mining_as_edited():
            p = pools_of(sim, ready)["pools"][0].get("status") or {}
            return p.get("user") == edited[0]["user"] and p.get("state") == "alive" and p

        live = wait_for(mining_as_edited, 60, "the edited worker mining")

        async def drive(page: Page):
            await open_logged_in(page, sim, ready, "shares")
            await page.until("document.querySelectorAll('#screen-shares .scroll tbody tr').length > 0", 60, "the per-pool table")
            await asyncio.sleep(0.5)
            values = await page.check_values("#screen-shares")
            shown = await page.js("""({total: JSON.parse(document.querySelector('#screen-shares [data-k="shares.accepted"]').dataset.v),
                pools: [...document.querySelectorAll('#screen-shares .scroll tbody tr')].map((tr) => JSON.parse(tr.querySelector('[data-k$=".accepted"]').dataset.v))})""")
            return values, shown, page

        values, shown, page = run_page(browser, sim.http_url, drive)
    finally:
        restore_pools(sim, ready, before)
    # The pool's count went on from where it was; the rows add up to the total.
    assert live["accepted"] >= counted, (live, counted)
    assert sum(shown["pools"]) == shown["total"], shown
    assert values > 4
    assert_clean(page)


# ------------------------------------------------------------------------------- defect 11


@pytest.fixture
def wizard_sim():
    tmp = Path(tempfile.mkdtemp(prefix="svcos-issue31-"))
    s = start_sim(tmp)
    try:
        wait_for_proxy(s)
        yield s, login(s)
    finally:
        stop_sim(s)
        shutil.rmtree(tmp, ignore_errors=True)


def test_defect11_wizard_summary_in_words_and_the_pool_url_shown_whole(wizard_sim, browser):
    sim, token = wizard_sim
    for path, body in (("/api/setup/step1-safety", {"accept": True}),
                       ("/api/setup/step2-circuit", {"voltage_v": 230, "breaker_a": 16}),
                       ("/api/setup/step-economics", {"electricity_price_per_kwh": 0.3, "currency": "EUR"}),
                       ("/api/setup/quiet-hours", {"start": "03:00", "end": "03:01", "timezone": "Europe/Berlin"})):
        status, _, answer = http("POST", f"{sim.api_url}{path}", token=token, body=body)
        assert status == 200, (path, answer)
    pool_url = pools_of(sim, token)["pools"][0]["url"]

    async def drive(page: Page):
        await page.goto(f"{sim.http_url}/#/setup")
        await page.until("document.readyState === 'complete'", 30, "the page")
        await page.js(f"sessionStorage.setItem('svcos.token', {json.dumps(token)}); sessionStorage.setItem('svcos.wizard.step', '7'); true")
        await page.call("Page.reload")
        await page.until("document.getElementById('wizard')?.dataset.step === 'summary' && !!document.querySelector('#wizard-summary tr[data-step=pool]')", 60, "the summary")
        await page.until(f"document.querySelector('#wizard-summary tr[data-step=pool]').textContent.includes({json.dumps(pool_url)})", 30, "the pool row")
        rows = await page.js("Object.fromEntries([...document.querySelectorAll('#wizard-summary tr[data-step]')].map((tr) => [tr.dataset.step, tr.textContent]))")
        for _ in range(8):
            if await page.js("document.getElementById('wizard').dataset.step === 'pool'"):
                break
            await page.click("#wizard-back")
            await asyncio.sleep(0.2)
        await page.until("!!document.getElementById('wizard-pool-url')?.value", 30, "the pool step")
        out = {}
        for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
            await at_size(page, size)
            await asyncio.sleep(0.3)
            out[label] = await page.js("""(() => { const i = document.getElementById('wizard-pool-url');
                return {value: i.value, fits: i.scrollWidth <= i.clientWidth, width: i.clientWidth}; })()""")
        await clear_size(page)
        return out, rows, page

    out, rows, page = run_page(browser, sim.http_url, drive)
    for label in ("desktop", "phone"):
        assert out[label]["value"] == pool_url and out[label]["fits"], (label, out)
    text = " ".join(rows.values())
    for raw in ("set via", "step3-password", "utc offset", "_", "{"):
        assert raw not in text, (raw, rows)
    assert "Europe/Berlin" in rows["quiet_hours"] and "UTC" not in rows["quiet_hours"], rows
    assert pool_url in rows["pool"], rows
    assert "230 V" in rows["circuit"] and "per kWh" in rows["economics"], rows
    assert_clean(page)


def test_defect11_the_pools_screen_shows_each_pool_url_whole(sim, ready, browser):
    async def drive(page: Page):
        out = {}
        await open_logged_in(page, sim, ready, "pools")
        await page.until("!!document.querySelector('#screen-pools .pool-url')?.value", 60, "the pool editor")
        for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
            await at_size(page, size)
            await asyncio.sleep(0.3)
            out[label] = await page.js("""[...document.querySelectorAll('#screen-pools .pool-url')].map((i) =>
                ({value: i.value, fits: i.scrollWidth <= i.clientWidth, width: i.clientWidth}))""")
        await clear_size(page)
        return out, page

    out, page = run_page(browser, sim.http_url, drive)
    for label, fields in out.items():
        assert fields and all(f["fits"] for f in fields), (label, fields)
    assert_clean(page)


# ------------------------------------------------------------------------------- plain words, stale values, navigation


def test_plain_words_units_and_rounding(sim, ready, browser):
    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "mining")
        await page.until("document.querySelectorAll('#chains [data-k]').length > 4", 60, "the chains")
        await asyncio.sleep(0.5)
        chains = await page.js("[...document.querySelectorAll('#chains tbody tr')].map((tr) => tr.textContent)")
        state = await page.js("document.querySelector('#screen-mining [data-k=\"mining.state\"]').textContent")
        values = await page.check_values("#screen-mining")
        fmt = await page.js("""({mv: svcosFmt.mv(8800), noise: svcosFmt.auto(243.09999999999968), bytes: svcosFmt.bytes(1073741824),
            bringup: svcosFmt.state('bringup'), chain: svcosFmt.state('chain_bringup')})""")
        return chains, state, values, fmt, page

    chains, state, values, fmt, page = run_page(browser, sim.http_url, drive)
    assert values > 4
    assert all(" V" in row and "mV" not in row for row in chains), chains
    assert "_" not in state, state
    assert fmt["mv"] == "8.80 V" and fmt["noise"] == "243.1" and fmt["bytes"] == "1.0 GiB", fmt
    assert fmt["bringup"] == fmt["chain"] == "starting the hashboards", fmt
    assert_clean(page)


def test_values_dim_while_the_connection_is_down(sim, ready, browser):
    async def drive(page: Page):
        await open_logged_in(page, sim, ready, "mining")
        await page.until("document.querySelectorAll('#screen-mining [data-k]').length > 4", 60, "the overview")
        opacity = "Number(getComputedStyle(document.querySelector('#screen-mining .tile [data-k]')).opacity)"
        fresh = await page.js(opacity)
        await page.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        try:
            await page.until("document.getElementById('main').dataset.stale === 'true'", 30, "the stale mark")
            await asyncio.sleep(0.5)
            dimmed = await page.js(opacity)
            banner = await page.js("document.getElementById('banner')?.textContent")
        finally:
            await page.call("Network.emulateNetworkConditions", offline=False, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        await page.until("document.getElementById('main').dataset.stale === 'false'", 30, "fresh again")
        await asyncio.sleep(0.5)
        again = await page.js(opacity)
        return fresh, dimmed, banner, again

    fresh, dimmed, banner, again = run_page(browser, sim.http_url, drive)
    assert fresh == 1 and again == 1, (fresh, again)
    assert dimmed < 0.6, dimmed
    assert banner and "dimmed" in banner, banner


def test_navigation_one_line_on_a_desktop_and_a_select_on_a_phone(sim, ready, browser):
    set_mode(sim, ready, "hacker")

    async def drive(page: Page):
        await at_size(page, DESKTOP)
        try:
            await open_logged_in(page, sim, ready, "mining")
            await page.until("document.querySelectorAll('nav a').length >= 14", 60, "every screen")
            desk = await page.js("""({tops: [...new Set([...document.querySelectorAll('nav a')].map((a) => Math.round(a.getBoundingClientRect().top)))],
                count: document.querySelectorAll('nav a').length,
                select: getComputedStyle(document.querySelector('.nav-select')).display})""")
            await at_size(page, PHONE)
            await asyncio.sleep(0.3)
            phone = await page.js("""({links: [...document.querySelectorAll('nav a')].filter((a) => a.getBoundingClientRect().height > 0).length,
                options: [...document.querySelectorAll('#nav-select option')].map((o) => o.value),
                nav: document.querySelector('nav').getBoundingClientRect().height,
                scroll: document.documentElement.scrollWidth, width: window.innerWidth})""")
            await page.type("#nav-select", "services")
            await page.until("location.hash === '#/services' && !!document.getElementById('screen-services')", 30, "the services screen")
        finally:
            await clear_size(page)
        return desk, phone, page

    try:
        desk, phone, page = run_page(browser, sim.http_url, drive)
    finally:
        set_mode(sim, ready, "standard")
    assert desk["count"] >= 14 and len(desk["tops"]) == 1 and desk["select"] == "none", desk
    assert phone["links"] == 0 and len(phone["options"]) >= 14 and "services" in phone["options"], phone
    assert phone["nav"] <= 60 and phone["scroll"] <= phone["width"], phone
    assert_clean(page)
