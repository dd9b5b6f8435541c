"""Dashboard cost figures for docs/PERFORMANCE.md (prints them; asserts nothing).

1. First paint and first meaningful paint of the Mining overview over loopback, in headless
   Chromium: navigation timing (`responseEnd`, `domContentLoadedEventEnd`), the paint timing
   entry `first-contentful-paint`, and the time the first screen with live values was drawn
   (polling `performance.now()` until the tiles show data), with a warm and a cold cache.
2. Bytes transferred by a cold first load (Network.loadingFinished encodedDataLength).
3. What an idle open tab costs the miner: CPU time (utime + stime from /proc) of the gateway
   and proxy processes over a window with the tab open on the overview, then with it closed.

    cargo build -p svcos && python3 bench/dashboard_perf.py [--window 60]
"""

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from conftest import PASSWORD, http, start_sim, stop_sim  # noqa: E402
from test_dashboard import Browser, finish_wizard_by_rest, run_page, wait_for_proxy  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def services_cpu(sim, names=("gateway", "proxy")) -> float:
    rows = sim.services()
    return sum(cpu_seconds(rows[n]["pid"]) for n in names)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=60.0, help="idle measurement window, s")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="svcos-dashperf-"))
    sim = start_sim(tmp)
    wait_for_proxy(sim)
    browser = Browser()
    try:
        http("POST", f"{sim.api_url}/api/auth/setup", body={"password": PASSWORD})
        token = http("POST", f"{sim.api_url}/api/auth/session", body={"password": PASSWORD})[2]["token"]
        finish_wizard_by_rest(sim, token)
        time.sleep(5)

        async def paint(page, cold: bool):
            if cold:
                await page.call("Network.clearBrowserCache")
            await page.goto(f"{sim.http_url}/#/mining")
            await page.until("location.hash === '#/mining' && document.readyState === 'complete'", 30, "page")
            await page.js(f"sessionStorage.setItem('svcos.token', {json.dumps(token)}); window.__r = 1")
            page.requests.clear()
            await page.call("Page.reload", ignoreCache=cold)
            # Poll inside the page so the reading is the page's own clock.
            meaningful = await page.until(
                "!window.__r && document.querySelector('[data-k=\"mining.hashrate_ghs.5s\"]')"
                " && JSON.parse(document.querySelector('[data-k=\"mining.hashrate_ghs.5s\"]').dataset.v) !== null"
                " && performance.now()", 60, "live values")
            timing = await page.js(
                "(() => { const n = performance.getEntriesByType('navigation')[0];"
                " const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');"
                " return {response_end: n.responseEnd, dom_content_loaded: n.domContentLoadedEventEnd,"
                " first_contentful_paint: p ? p.startTime : null}; })()")
            await asyncio.sleep(1)
            sizes = await page.js(
                "performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))"
                ".filter(e => !e.name.includes('/api/')).reduce((s, e) => s + e.transferSize, 0)")
            timing["first_meaningful_paint"] = meaningful
            timing["static_bytes_transferred"] = sizes
            return timing

        for label, cold in (("cold cache", True), ("warm cache", False), ("warm cache", False)):
            t = run_page(browser, sim.http_url, lambda p, c=cold: paint(p, c))
            print(f"{label}: " + ", ".join(f"{k} {v:.0f}" + ("" if k.endswith("bytes_transferred") else " ms")
                                           for k, v in t.items() if v is not None))

        async def hold(page):
            await page.goto(f"{sim.http_url}/#/mining")
            await page.until("!!document.getElementById('screen-mining')", 60, "the overview")
            start = services_cpu(sim)
            await asyncio.sleep(args.window)
            return services_cpu(sim) - start

        open_cpu = run_page(browser, sim.http_url, hold)
        browser.close()
        start = services_cpu(sim)
        time.sleep(args.window)
        closed_cpu = services_cpu(sim) - start
        per_core = lambda s: 100 * s / args.window  # noqa: E731
        print(f"gateway+proxy CPU over {args.window:.0f} s: tab open on the overview {open_cpu:.2f} s "
              f"({per_core(open_cpu):.2f} % of a core), no tab {closed_cpu:.2f} s "
              f"({per_core(closed_cpu):.2f} %); the open tab costs {per_core(open_cpu - closed_cpu):.2f} % of a core")
    finally:
        browser.close()
        stop_sim(sim)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
