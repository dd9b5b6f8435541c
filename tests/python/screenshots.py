"""Refresh docs/screenshots/: phone (390 px) and desktop captures of the setup wizard and of the
screens of every mode, taken in headless Chromium against a fresh `svcos sim`.

    cargo build -p svcos && python3 tests/python/screenshots.py [--out docs/screenshots]
"""

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import PASSWORD, ROOT, http, start_sim, stop_sim, wait_for  # noqa: E402
from test_dashboard import Browser, run_page, wait_for_proxy  # noqa: E402

SIZES = {"desktop": (1366, 900, False), "phone": (390, 844, True)}
# (mode, screen) pairs: each mode's own screens.
SCREENS = [
    ("home", "heater"),
    ("standard", "mining"),
    ("standard", "chips"),
    ("standard", "pools"),
    ("standard", "tuner"),
    ("hacker", "services"),
    ("hacker", "diagnostics"),
    ("hacker", "debug"),
    ("standard", "firmware"),
]


async def capture(page, path: Path, size: str):
    width, height, mobile = SIZES[size]
    await page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                    deviceScaleFactor=1, mobile=mobile)
    await asyncio.sleep(1.5)
    page_height = await page.js("Math.min(document.documentElement.scrollHeight, 2400)")
    await page.call("Emulation.setDeviceMetricsOverride", width=width, height=int(page_height),
                    deviceScaleFactor=1, mobile=mobile)
    await asyncio.sleep(0.5)
    path.write_bytes(await page.screenshot())
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="svcos-shots-"))
    sim = start_sim(tmp)
    wait_for_proxy(sim)
    browser = Browser()
    try:
        async def wizard(page):
            await page.goto(f"{sim.http_url}/")
            await page.until("document.getElementById('wizard')?.dataset.step === 'safety'", 90, "the wizard")
            for size in SIZES:
                await capture(page, out / f"wizard-safety-{size}.png", size)
            await page.click("#wizard-next")
            await page.until("document.getElementById('wizard')?.dataset.step === 'password'", 60, "password step")
            await page.type("#wizard-password", PASSWORD)
            await page.type("#wizard-password2", PASSWORD)
            for size in SIZES:
                await capture(page, out / f"wizard-password-{size}.png", size)
            await page.click("#wizard-next")
            await page.until("document.getElementById('wizard')?.dataset.step === 'pool'", 120, "pool step")
            await page.click("#wizard-test-pool")
            await page.until("!!document.getElementById('wizard-test-result')", 60, "the pool test")
            for size in SIZES:
                await capture(page, out / f"wizard-pool-{size}.png", size)
            return await page.js("sessionStorage.getItem('svcos.token')")

        token = run_page(browser, sim.http_url, wizard)
        for path, body in (("/api/setup/step2-circuit", {"voltage_v": 230, "breaker_a": 16}),
                           ("/api/setup/step-economics", {"electricity_price_per_kwh": 0.3, "currency": "EUR"}),
                           ("/api/setup/complete", {})):
            assert http("POST", f"{sim.api_url}{path}", token=token, body=body)[0] == 200, path
        # Let some history accumulate so the charts have a line.
        wait_for(lambda: http("GET", f"{sim.api_url}/api/status", token=token)[2]["pools"]["accepted"] > 5,
                 120, "accepted shares")

        async def screens(page):
            for mode, screen in SCREENS:
                http("POST", f"{sim.api_url}/api/config", token=token, body={"system": {"mode": mode}})
                await page.goto(f"{sim.http_url}/#/{screen}")
                await page.js(f"sessionStorage.setItem('svcos.token', {json.dumps(token)}); window.__r = 1")
                await page.call("Page.reload")
                await page.until(f"!window.__r && !!document.getElementById('screen-{screen}')", 60, screen)
                await asyncio.sleep(3)
                for size in SIZES:
                    await capture(page, out / f"{mode}-{screen}-{size}.png", size)

        run_page(browser, sim.http_url, screens)
    finally:
        browser.close()
        stop_sim(sim)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
