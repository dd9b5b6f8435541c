"""Open Mining Data API (`svcos-open-data`), end to end over HTTP against the real binary.

One server per module, with fake upstreams run by the test: a Bitcoin Core-style JSON-RPC
(getblockcount, getdifficulty, getblockstats in batches, Basic auth) and a BTC price source.
Covers schemathesis against the live /v1/openapi.json, every filter and pagination edge, CORS
preflight, ETag/304, HEAD, 405 + Allow, compression, hashprice against hand-computed vectors
(including a failing upstream: stale flag, last good value), the export mirrors' records
byte-equal to the API's, and a bad dataset row stopping the service with file:line.
"""

import base64
import csv
import gzip
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import _free_port

ROOT = Path(__file__).resolve().parents[2]
RPC_USER, RPC_PASS = "rpcuser", "s3cret-pw"
HEIGHT = 900_000
DIFFICULTY = 1.0e14
FEES = {HEIGHT: 4_000_000, HEIGHT - 1: 5_000_000, HEIGHT - 2: 6_000_000}
USD, CAD = 100_000.0, 140_000.0


def open_data_bin() -> Path:
    if os.environ.get("OPEN_DATA_BIN"):
        return Path(os.environ["OPEN_DATA_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "svcos-open-data"
        if p.exists():
            return p
    raise RuntimeError("svcos-open-data not built: run `cargo build -p svcos-open-data` first")


def free_port() -> int:
    return _free_port("127.0.0.1")


class Upstreams:
    """Fake chain (JSON-RPC) and price sources; `failing` makes both answer 503."""

    def __init__(self):
        self.failing = False
        self.calls = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if outer.failing:
                    return self._send(503, {"error": "down"})
                if self.path == "/price":
                    return self._send(200, {"time": 1, "USD": USD, "CAD": CAD, "EUR": 1.0})
                self._send(404, {})

            def do_POST(self):
                if outer.failing:
                    return self._send(503, {"error": "down"})
                want = "Basic " + base64.b64encode(f"{RPC_USER}:{RPC_PASS}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    return self._send(401, {})
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                out = []
                for call in req:
                    outer.calls.append(call["method"])
                    m, p = call["method"], call["params"]
                    if m == "getblockcount":
                        res = HEIGHT
                    elif m == "getdifficulty":
                        res = DIFFICULTY
                    elif m == "getblockstats":
                        res = {"totalfee": FEES[p[0]], "height": p[0]}
                    else:
                        out.append({"id": call["id"], "result": None, "error": {"code": -32601, "message": "no"}})
                        continue
                    out.append({"id": call["id"], "result": res, "error": None})
                self._send(200, out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def request(method, url, headers=None, timeout=10.0):
    """(status, lower-cased headers, raw body); no redirects followed, no decoding."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        path = u.path + ("?" + u.query if u.query else "")
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_json(url, **kw):
    status, headers, body = request("GET", url, **kw)
    return status, headers, json.loads(body)


def wait_for(what, cond, timeout=60.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = cond()
            if last:
                return last
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout}s: {last!r}")


class Server:
    def __init__(self, tmp: Path, upstreams: Upstreams, interval_s: int = 1, extra=()):
        self.tmp = tmp
        self.db = tmp / "open-data.sqlite"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "server.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                str(open_data_bin()),
                "serve",
                "--bind", f"127.0.0.1:{self.port}",
                "--db", str(self.db),
                "--bitcoind-rpc", f"http://{RPC_USER}:{RPC_PASS}@127.0.0.1:{upstreams.port}",
                "--price-url", f"http://127.0.0.1:{upstreams.port}/price",
                "--hashprice-interval-s", str(interval_s),
                "--fee-blocks", "3",
                "--workers", "2",
                *extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for("server answering", lambda: request("GET", self.url + "/v1/catalog", timeout=2)[0] == 200)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def upstreams():
    u = Upstreams()
    yield u
    u.close()


@pytest.fixture(scope="module")
def server(upstreams):
    tmp = Path(tempfile.mkdtemp(prefix="open-data-"))
    s = Server(tmp, upstreams)
    yield s
    s.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def records(server, path):
    """Every record an answer holds: a paginated answer (error-codes) is followed page by
    page, so a test never mistakes the first page for the whole result set."""
    status, _, body = get_json(server.url + path)
    assert status == 200, body
    out = body["records"]
    pagination = body["meta"].get("pagination")
    while pagination and pagination["next_page"] is not None:
        sep = "&" if "?" in path else "?"
        status, _, body = get_json(f"{server.url}{path}{sep}page={pagination['next_page']}")
        assert status == 200, body
        assert body["meta"]["pagination"]["page"] == pagination["next_page"]
        out += body["records"]
        pagination = body["meta"]["pagination"]
    return out


# ---------------------------------------------------------------- catalogue, OpenAPI, index


def test_catalog_openapi_and_index_come_from_one_registry(server):
    status, headers, cat = get_json(server.url + "/v1/catalog")
    assert status == 200
    assert cat["meta"]["license"] == "CC BY 4.0"
    for k in ("title", "description", "source", "generated_at", "schema"):
        assert cat["meta"][k], k
    names = {r["dataset"] for r in cat["records"]}
    assert names == {"miners", "power-profiles", "error-codes", "reliability", "price-index", "hashprice"}
    status, headers, doc = get_json(server.url + "/v1/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    assert headers["access-control-allow-origin"] == "*"
    routes = set(doc["paths"])
    for r in cat["records"]:
        assert set(r["routes"]) <= routes, r
    assert {"/v1/miners/{slug}", "/v1/error-codes/{code}", "/v1/power-profiles/{model}",
            "/v1/reliability/{model}", "/v1/hashprice/history", "/v1/", "/data/", "/data/{file}",
            "/data/api/", "/llms.txt", "/methodology"} <= routes
    params = {p["name"]: p["schema"] for p in doc["paths"]["/v1/error-codes"]["get"]["parameters"]}
    assert params["per_page"]["maximum"] == 500 and params["page"]["minimum"] == 1
    for index in ("/v1/", "/data/api/"):
        status, headers, html = request("GET", server.url + index)
        assert status == 200 and headers["content-type"].startswith("text/html")
        for path in routes:
            assert path.encode() in html, (index, path)
    status, headers, _ = request("GET", server.url + "/")
    assert status == 308 and headers["location"] == "/v1/"


# ---------------------------------------------------------------- datasets and filters


def test_miners_and_filters(server):
    miners = records(server, "/v1/miners")
    assert len(miners) >= 30
    for m in miners:
        assert m["source"]["url"].startswith("https://"), m
        assert m["algorithm"] == "sha256"
        assert abs(m["power_w"] / m["hashrate_ths"] - m["efficiency_j_per_th"]) <= m["efficiency_j_per_th"] * 0.03
        assert m["btu_per_h"] == round(m["power_w"] * 3.412142)
        assert 0 <= m["home_score"] <= 100
    makers = {m["manufacturer_slug"] for m in miners}
    assert {"bitmain", "microbt", "canaan", "bitaxe"} <= makers
    bitmain = records(server, "/v1/miners?manufacturer=bitmain")
    assert bitmain and all(m["manufacturer_slug"] == "bitmain" for m in bitmain)
    assert len(records(server, "/v1/miners?algorithm=sha256&manufacturer=canaan")) == sum(
        m["manufacturer_slug"] == "canaan" for m in miners
    )
    assert records(server, "/v1/miners?manufacturer=nobody") == []
    status, _, body = get_json(server.url + "/v1/miners?manufacturer=Bitmain")
    assert status == 400 and body["error"]["parameter"] == "manufacturer"
    status, _, body = get_json(server.url + "/v1/miners/antminer-s9")
    assert status == 200 and body["record"]["power_w"] == 1323 and body["record"]["hashrate_ths"] == 13.5
    status, _, body = get_json(server.url + "/v1/miners/no-such-model")
    assert status == 404 and body["error"]["code"] == "not_found" and "meta" in body


def test_error_code_pagination_edges(server):
    base = server.url + "/v1/error-codes"
    full = all_error_codes(server)
    total = len(full)
    assert total >= 50
    status, _, first = get_json(base)
    pages = -(-total // 100)
    assert first["meta"]["pagination"] == {
        "page": 1, "per_page": 100, "total": total, "total_pages": pages,
        "next_page": 2 if pages > 1 else None, "prev_page": None,
    }
    seen = []
    page = 1
    while True:
        status, _, body = get_json(f"{base}?per_page=7&page={page}")
        assert status == 200
        p = body["meta"]["pagination"]
        assert p["total_pages"] == -(-total // 7) and body["meta"]["count"] == len(body["records"])
        seen += [r["code"] for r in body["records"]]
        if p["next_page"] is None:
            break
        assert p["next_page"] == page + 1
        page += 1
    assert seen == [r["code"] for r in full]
    status, _, past = get_json(f"{base}?per_page=7&page={page + 5}")
    assert status == 200 and past["records"] == [] and past["meta"]["pagination"]["next_page"] is None
    for query, param in [
        ("page=0", "page"),
        ("page=-1", "page"),
        ("per_page=0", "per_page"),
        ("per_page=501", "per_page"),
        ("page=abc", "page"),
        ("per_page=2.5", "per_page"),
        ("page=", "page"),
        ("page=1&page=2", "page"),
        ("component=flux", "component"),
        ("colour=red", "colour"),
        ("search=" + "x" * 101, "search"),
    ]:
        status, headers, body = get_json(f"{base}?{query}")
        assert status == 400, (query, body)
        assert body["error"]["parameter"] == param, (query, body)
        assert body["error"]["code"] in ("invalid_parameter", "unknown_parameter")
        assert body["meta"]["license"] == "CC BY 4.0"
        assert headers["access-control-allow-origin"] == "*"
    status, _, body = get_json(base + "?per_page=500")
    assert status == 200


def test_error_code_filters(server):
    base = server.url + "/v1/error-codes?per_page=500"
    fans = records(server, "/v1/error-codes?per_page=500&component=fan")
    assert fans and all(r["component"] == "fan" for r in fans)
    wm = records(server, "/v1/error-codes?per_page=500&manufacturer=micro")
    assert wm and all(r["manufacturer_slug"] == "microbt" for r in wm)
    assert [r["code"] for r in records(server, "/v1/error-codes?code=530")] == ["WHATSMINER-530"]
    hits = records(server, "/v1/error-codes?search=fan%20STALLED")
    assert [r["code"] for r in hits] == ["SVCOS-HW-FAN-STALL"]
    by_model = records(server, "/v1/error-codes?per_page=500&search=antminer+s21")
    assert by_model and all(any("s21" in m.lower() for m in r["affected_models"]) for r in by_model)
    both = records(server, "/v1/error-codes?per_page=500&component=fan&manufacturer=svcos")
    assert [r["code"] for r in both] == ["SVCOS-HW-FAN-STALL"]
    for r in all_error_codes(server):
        assert r["source"].get("url") or r["source"].get("path"), r
    status, _, one = get_json(server.url + "/v1/error-codes/WHATSMINER-530")
    assert status == 200 and one["record"]["native_code"] == "530"
    status, _, body = get_json(server.url + "/v1/error-codes/NOPE-1")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _, body = get_json(base + "&manufacturer=")
    assert status == 400 and body["error"]["parameter"] == "manufacturer"


def all_error_codes(server):
    """Every error-code record, followed page by page. At the default 100 a page the corpus
    spans several pages, so this also exercises the pagination links; the largest page size
    must give the same records in the same order."""
    paged = records(server, "/v1/error-codes")
    assert len(paged) > 100
    assert [r["code"] for r in records(server, "/v1/error-codes?per_page=500")] == [r["code"] for r in paged]
    return paged


def test_error_code_corpus_is_sourced_and_served(server):
    """The corpus as served: every record the dataset file holds, each with its source
    (url, or repository + path), licence and retrieval date, the rule ids that classified it,
    and no repair cost or part number that no source states."""
    served = all_error_codes(server)
    path = ROOT / "open-data" / "datasets" / "error-codes" / "error-codes.v1.jsonl"
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert [r["code"] for r in served] == [r["code"] for r in rows]
    assert len(served) >= 650 and len({r["code"] for r in served}) == len(served)
    # More records than one page holds: the corpus is only complete when paging works.
    assert len(served) > 100
    for r in served:
        src = r["source"]
        assert src.get("url") or (src.get("repository") and src.get("path")), r["code"]
        assert src["license"] and len(src["retrieved"]) == 10, r["code"]
        assert set(r["classification"]) == {"component", "severity", "diy_difficulty"}, r["code"]
        assert r["repair_cost_cad"] is None or r["repair_cost_cad"]["source_url"].startswith("https://")
        assert r["replacement_parts"] == [], r["code"]
    makers = {r["manufacturer_slug"] for r in served}
    assert {"svcos", "microbt", "innosilicon", "cgminer", "canaan", "bitmain", "bitaxe", "ckpool",
            "datum-gateway", "btcpool", "stratum-v2"} <= makers
    # ESP-Miner's Wi-Fi reason table with ESP-IDF's numbers: 15 is the 4-way handshake timeout,
    # which AxeOS shows as a wrong password.
    status, _, one = get_json(server.url + "/v1/error-codes/BITAXE-WIFI-15")
    assert status == 200 and one["record"]["title"] == "Wi-Fi disconnected: Incorrect password entered"
    assert one["record"]["source"]["repository"] == "github.com/bitaxeorg/ESP-Miner"
    # svcOS's own codes name the file that raises them: it must exist in this repository.
    for r in served:
        if r["manufacturer_slug"] == "svcos":
            assert (ROOT / r["source"]["path"]).is_file(), (r["code"], r["source"]["path"])
    # pyasic's table, expanded over Whatsminer slots 0-2 the way its decoder numbers them.
    status, _, one = get_json(server.url + "/v1/error-codes/WHATSMINER-5051")
    assert status == 200 and one["record"]["title"] == "Slot 1 stopped hashing, chips temperature protecting"
    assert one["record"]["source"]["license"] == "Apache-2.0"
    assert one["record"]["source"]["path"] == "pyasic/data/error_codes/whatsminer.py"
    status, _, _ = get_json(server.url + "/v1/error-codes/WHATSMINER-5053")
    assert status == 404
    inno = records(server, "/v1/error-codes?per_page=500&manufacturer=innosilicon")
    assert len(inno) == 20 and all(r["code"].startswith("INNOSILICON-") for r in inno)
    psu = records(server, "/v1/error-codes?per_page=500&component=psu&manufacturer=canaan")
    assert {r["native_code"] for r in psu} >= {"1", "16", "2048"}


def test_the_committed_corpus_is_what_the_generator_builds():
    """open-data/tools/gen_error_codes.py --check: the dataset file is reproducible from its
    sources (pyasic read from the installed package)."""
    pytest.importorskip("pyasic")
    res = subprocess.run(
        [sys.executable, str(ROOT / "open-data" / "tools" / "gen_error_codes.py"), "--check"],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr


def test_other_dataset_filters(server):
    s9 = records(server, "/v1/power-profiles?model=antminer-s9")
    assert s9 and all(r["model_slug"] == "antminer-s9" for r in s9)
    assert any(r["kind"] == "published" and r["profile"] == "stock" for r in s9)
    sim = [r for r in s9 if r["kind"] == "simulated"]
    assert sim and all(r["step"] < 0 and r["measured_on"] and r["source"]["path"] for r in sim)
    for r in sim:
        assert r["efficiency_j_per_th"] == round(r["power_w"] / r["hashrate_ths"], 2)
    tuned = [r for r in s9 if r["kind"] == "tuned"]
    assert tuned and all(r["source"]["url"].startswith("https://") and "measured_on" not in r for r in tuned)
    assert records(server, "/v1/power-profiles?model=no-such") == []
    rel = records(server, "/v1/reliability")
    assert rel and all(r["grade"] in "ABC" and r["source"]["url"].startswith("https://") for r in rel)
    m30s = records(server, "/v1/reliability?model=whatsminer-m30s")
    assert m30s and all("whatsminer-m30s" in r["model_slugs"] for r in m30s)
    by_name = records(server, "/v1/reliability?model=whatsminer-m50s")
    assert by_name
    status, _, body = get_json(server.url + "/v1/reliability?model=Whatsminer+M30S")
    assert status == 400 and body["error"]["parameter"] == "model"


def test_price_index_is_a_labelled_sample(server):
    status, _, body = get_json(server.url + "/v1/price-index")
    assert status == 200
    assert body["meta"]["sample"] is True and "NOT live prices" in body["meta"]["notice"]
    prices = sorted(r["price_cad"] for r in body["records"])
    n = len(prices)
    median = prices[n // 2] if n % 2 else (prices[n // 2 - 1] + prices[n // 2]) / 2
    assert body["summary"] == {"count": n, "min_cad": prices[0], "median_cad": median, "max_cad": prices[-1]}
    new = records(server, "/v1/price-index?condition=new")
    assert new and all(r["condition"] == "new" for r in new)
    oh = records(server, "/v1/price-index?category=open-hardware-miners&condition=refurbished")
    assert oh and all(r["category"] == "open-hardware-miners" and r["condition"] == "refurbished" for r in oh)
    for q, param in [("condition=used", "condition"), ("category=gpus", "category")]:
        status, _, err = get_json(server.url + "/v1/price-index?" + q)
        assert status == 400 and err["error"]["parameter"] == param
    # The linked product of a miner carries the sample flag too.
    status, _, s21 = get_json(server.url + "/v1/miners/antminer-s21")
    assert s21["record"]["product"]["sample"] is True and s21["record"]["status"] == "in_stock"


# ---------------------------------------------------------------- HTTP behaviour


def test_cache_headers_etag_304_and_head(server):
    status, h, body = request("GET", server.url + "/v1/miners")
    assert status == 200
    assert "max-age=86400" in h["cache-control"] and "stale-while-revalidate" in h["cache-control"]
    assert h["x-svc-api"] and h["access-control-allow-origin"] == "*"
    assert h["vary"] == "Accept-Encoding"
    etag = h["etag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    status, h2, body2 = request("GET", server.url + "/v1/miners", headers={"If-None-Match": etag})
    assert status == 304 and body2 == b"" and h2["etag"] == etag
    status, _, _ = request("GET", server.url + "/v1/miners", headers={"If-None-Match": '"other"'})
    assert status == 200
    # The same query spelled differently is the same representation.
    _, ha, _ = request("GET", server.url + "/v1/error-codes?page=1")
    _, hb, _ = request("GET", server.url + "/v1/error-codes?per_page=100")
    assert ha["etag"] == hb["etag"]
    status, hh, hbody = request("HEAD", server.url + "/v1/miners")
    assert status == 200 and hbody == b""
    assert hh["etag"] == etag and int(hh["content-length"]) == len(body)
    _, hp, _ = request("GET", server.url + "/v1/hashprice")
    assert "max-age=60" in hp["cache-control"] and "stale-while-revalidate" in hp["cache-control"]


def test_compression(server):
    _, _, plain = request("GET", server.url + "/v1/error-codes?per_page=500")
    status, h, gz = request("GET", server.url + "/v1/error-codes?per_page=500", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and h["content-encoding"] == "gzip" and h["vary"] == "Accept-Encoding"
    assert gzip.decompress(gz) == plain and len(gz) < len(plain)
    status, h, br = request("GET", server.url + "/v1/error-codes?per_page=500", headers={"Accept-Encoding": "gzip, br"})
    assert status == 200 and h["content-encoding"] == "br" and len(br) < len(plain)
    import requests  # decodes br when the brotli module is there; otherwise check the length only

    r = requests.get(server.url + "/v1/error-codes?per_page=500", headers={"Accept-Encoding": "br"}, timeout=10)
    try:
        import brotli  # noqa: F401

        assert r.content == plain
    except ImportError:
        assert len(r.content) == len(br)
    status, h, same = request("GET", server.url + "/v1/error-codes?per_page=500", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in h and same == plain


def test_cors_preflight_405_and_404(server):
    status, h, body = request(
        "OPTIONS",
        server.url + "/v1/miners",
        headers={"Origin": "https://example.org", "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "if-none-match"},
    )
    assert status == 204 and body == b""
    assert h["access-control-allow-origin"] == "*"
    assert "GET" in h["access-control-allow-methods"]
    assert "if-none-match" in h["access-control-allow-headers"].lower()
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, h, body = request(method, server.url + "/v1/miners")
        assert status == 405, method
        assert h["allow"] == "GET, HEAD, OPTIONS"
        err = json.loads(body)["error"]
        assert err["code"] == "method_not_allowed" and err["status"] == 405
    status, h, body = request("GET", server.url + "/v1/nothing/here")
    err = json.loads(body)
    assert status == 404 and err["error"]["code"] == "not_found" and err["meta"]["schema"] == "svcos.opendata.error.v1"
    assert h["access-control-allow-origin"] == "*"


def test_per_record_routes(server):
    s9 = records(server, "/v1/power-profiles/antminer-s9")
    assert s9 == records(server, "/v1/power-profiles?model=antminer-s9") and len(s9) >= 2
    claims = records(server, "/v1/reliability/whatsminer-m30s")
    assert claims == records(server, "/v1/reliability?model=whatsminer-m30s") and claims
    assert records(server, "/v1/reliability/whatsminer-m50s")  # a model name a source uses
    for path in ("/v1/power-profiles/no-such-model", "/v1/reliability/no-such-model",
                 "/v1/miners/no-such-model", "/v1/error-codes/NOPE-1"):
        status, h, body = get_json(server.url + path)
        assert status == 404 and body["error"]["code"] == "not_found", path
        assert body["meta"]["schema"] == "svcos.opendata.error.v1" and h["access-control-allow-origin"] == "*"
    status, _, body = get_json(server.url + "/v1/power-profiles/Antminer-S9")
    assert status == 400 and body["error"]["parameter"] == "model"


def test_site_routes(server):
    status, h, html = request("GET", server.url + "/data/")
    assert status == 200 and h["content-type"].startswith("text/html")
    links = [l.split('"', 1)[0] for l in html.decode().split('href="')[1:]]
    mirrors = [l for l in links if l.startswith("/data/") and l.endswith((".csv", ".json"))]
    assert len(mirrors) == 12, mirrors  # JSON and CSV of five datasets and the hashprice history
    for link in mirrors:
        status, h, body = request("GET", server.url + link)
        assert status == 200 and h["etag"], link
        if link.endswith(".csv"):
            assert h["content-type"].startswith("text/csv")
            header = next(csv.reader(body.decode().splitlines()))
            assert len(header) >= 3, (link, header)
        else:
            doc = json.loads(body)
            assert doc["meta"]["license"] == "CC BY 4.0" and isinstance(doc["records"], list)
    status, h, llms = request("GET", server.url + "/llms.txt")
    assert status == 200 and h["content-type"].startswith("text/plain")
    text = llms.decode()
    assert text.startswith("# svcOS Open Mining Data\n\n> ") and "CC BY 4.0" in text
    for link in mirrors:
        assert link in text, link
    status, h, page = request("GET", server.url + "/methodology")
    assert status == 200 and h["content-type"].startswith("text/html")
    for name in ("miners", "power-profiles", "error-codes", "reliability", "price-index", "hashprice"):
        assert f'id="{name}"'.encode() in page, name
    assert b"3 %" in page and b"https://" in page
    status, _, body = get_json(server.url + "/data/nothing.csv")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, h, _ = request("POST", server.url + "/llms.txt")
    assert status == 405 and h["allow"] == "GET, HEAD, OPTIONS"


# ---------------------------------------------------------------- hashprice


def expected_hashprice():
    per_th = 86400e12 / (DIFFICULTY * 2**32)
    subsidy = 3.125  # height 900 001: fourth halving era
    fees = sum(FEES.values()) / len(FEES) / 1e8
    return {
        ("usd", "per_th_day", "subsidy_only"): per_th * subsidy * USD,
        ("usd", "per_th_day", "fee_inclusive"): per_th * (subsidy + fees) * USD,
        ("usd", "per_ph_day", "subsidy_only"): per_th * subsidy * USD * 1000,
        ("usd", "per_ph_day", "fee_inclusive"): per_th * (subsidy + fees) * USD * 1000,
        ("cad", "per_th_day", "subsidy_only"): per_th * subsidy * CAD,
        ("cad", "per_th_day", "fee_inclusive"): per_th * (subsidy + fees) * CAD,
        ("cad", "per_ph_day", "subsidy_only"): per_th * subsidy * CAD * 1000,
        ("cad", "per_ph_day", "fee_inclusive"): per_th * (subsidy + fees) * CAD * 1000,
    }


def hashprice(server):
    status, _, body = get_json(server.url + "/v1/hashprice")
    assert status == 200
    return body


def test_hashprice_vectors_and_stale_upstream(server, upstreams):
    body = wait_for("a fresh hashprice", lambda: (b := hashprice(server))["record"] and not b["status"]["stale"] and b)
    rec = body["record"]
    for (cur, unit, kind), want in expected_hashprice().items():
        got = rec[cur][unit][kind]
        assert abs(got - want) <= max(1e-6, want * 1e-9), (cur, unit, kind, got, want)
    assert rec["network"] == {
        **rec["network"],
        "height": HEIGHT,
        "difficulty": DIFFICULTY,
        "next_retarget_height": 901_152,
        "blocks_to_retarget": 1_152,
        "next_halving_height": 1_050_000,
        "blocks_to_halving": 150_000,
    }
    assert rec["block"]["subsidy_btc"] == 3.125 and rec["block"]["avg_fees_btc"] == 0.05
    assert rec["block"]["fee_window_blocks"] == 3
    assert rec["price"] == {"usd": USD, "cad": CAD}
    assert RPC_PASS not in json.dumps(body)
    assert "getblockstats" in upstreams.calls

    upstreams.failing = True
    try:
        stale = wait_for("stale flag", lambda: (b := hashprice(server))["status"]["stale"] and b)
        assert stale["record"] is not None and stale["meta"]["stale"] is True
        assert "HTTP 503" in stale["status"]["stale_reason"]
        last_good = stale["record"]
        for (cur, unit, kind), want in expected_hashprice().items():
            assert abs(last_good[cur][unit][kind] - want) <= max(1e-6, want * 1e-9)
        time.sleep(2.5)
        again = hashprice(server)
        assert again["status"]["stale"] and again["record"]["refreshed_at"] == last_good["refreshed_at"]
    finally:
        upstreams.failing = False
    wait_for("fresh again", lambda: not hashprice(server)["status"]["stale"])
    hist = records(server, "/v1/hashprice/history?limit=5000")
    assert len(hist) >= 2 and hist[0]["refreshed_at"] >= hist[-1]["refreshed_at"]
    assert len(records(server, "/v1/hashprice/history?limit=1")) == 1
    assert RPC_PASS.encode() not in server.log_path.read_bytes()


def test_hashprice_recovers_within_a_minute_and_restarts_with_the_last_good_value(tmp_path):
    """Default retry schedule (5 s doubling, at most 60 s), a 15-minute interval: an upstream
    down at start is used within a minute of coming back, not after the interval. The last
    good value is persisted: a restart with the upstream down serves it at once, stale."""
    up = Upstreams()
    up.failing = True
    srv = Server(tmp_path, up, interval_s=900)
    try:
        first = wait_for("a failed attempt", lambda: (b := hashprice(srv))["status"]["last_attempt_at"] and b)
        assert first["status"]["stale"] and first["record"] is None
        assert "HTTP 503" in first["status"]["stale_reason"]
        time.sleep(6)  # at least one retry has failed too: the backoff is under way
        up.failing = False
        back = time.time()
        fresh = wait_for("hashprice after the upstream came back",
                         lambda: (b := hashprice(srv))["record"] and not b["status"]["stale"] and b, timeout=75)
        took = time.time() - back
        assert took <= 62, took
        assert fresh["record"]["network"]["height"] == HEIGHT
    finally:
        srv.stop()
    up.failing = True
    again = Server(tmp_path, up, interval_s=900)
    try:
        body = hashprice(again)
        assert body["record"] == fresh["record"]
        assert body["status"]["stale"] is True and body["meta"]["stale"] is True
    finally:
        again.stop()
        up.close()


def test_offline_serves_without_any_upstream(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [str(open_data_bin()), "serve", "--offline", "--bind", f"127.0.0.1:{port}",
         "--db", str(tmp_path / "db.sqlite")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        body = wait_for("offline hashprice", lambda: (b := get_json(url + "/v1/hashprice", timeout=2)[2])["status"]["last_attempt_at"] and b)
        assert body["record"] is None and "offline" in body["status"]["stale_reason"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    res = subprocess.run([str(open_data_bin()), "serve", "--offline", "--price-url", "http://x/", "--db", "x"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "cannot be used with" in res.stderr, res.stderr


# ---------------------------------------------------------------- scaling out


def test_two_instances_behind_nginx_share_one_snapshot(tmp_path):
    """Issue 32 item 7: a sealed read-only snapshot, two `serve --read-only` instances over the
    one file, nginx (from the distribution) balancing between them: every answer's ETag is the
    same whichever instance made it, so a validator from one revalidates at the other, and the
    snapshot file is never written."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        pytest.skip("nginx is not installed (tests/run installs it as root)")
    snap = tmp_path / "snapshot.sqlite"
    res = subprocess.run([str(open_data_bin()), "snapshot", "--db", str(snap)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    os.chmod(snap, 0o444)
    before = snap.read_bytes()
    procs, ports = [], []
    ngx = None
    try:
        for i in range(2):
            port = free_port()
            ports.append(port)
            log = open(tmp_path / f"instance{i}.log", "wb")
            procs.append(subprocess.Popen(
                [str(open_data_bin()), "serve", "--read-only", "--offline", "--bind", f"127.0.0.1:{port}",
                 "--db", str(snap), "--workers", "1"],
                stdout=log, stderr=subprocess.STDOUT,
            ))
        for port in ports:
            wait_for("instance up", lambda: request("GET", f"http://127.0.0.1:{port}/v1/catalog", timeout=2)[0] == 200)
        ngx_port = free_port()
        conf = tmp_path / "nginx.conf"
        (tmp_path / "logs").mkdir()
        conf.write_text(f"""
worker_processes 1;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {tmp_path}/logs/access.log;
  client_body_temp_path {tmp_path}/body;
  proxy_temp_path {tmp_path}/proxy;
  fastcgi_temp_path {tmp_path}/fastcgi;
  uwsgi_temp_path {tmp_path}/uwsgi;
  scgi_temp_path {tmp_path}/scgi;
  upstream open_data {{
    server 127.0.0.1:{ports[0]};
    server 127.0.0.1:{ports[1]};
    keepalive 8;
  }}
  server {{
    listen 127.0.0.1:{ngx_port};
    location / {{
      proxy_pass http://open_data;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      # No temp files: nginx's workers run as nobody and cannot write into the test's tmp.
      proxy_buffering off;
      add_header X-Upstream $upstream_addr always;
    }}
  }}
}}
""")
        ngx = subprocess.Popen([nginx, "-e", str(tmp_path / "logs" / "error.log"), "-p", str(tmp_path),
                                "-c", str(conf), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        front = f"http://127.0.0.1:{ngx_port}"
        wait_for("nginx up", lambda: request("GET", front + "/v1/catalog", timeout=2)[0] == 200)
        paths = ["/v1/catalog", "/v1/openapi.json", "/v1/miners", "/v1/miners/antminer-s9",
                 "/v1/error-codes?per_page=7&page=2", "/v1/power-profiles/antminer-s9",
                 "/v1/reliability/whatsminer-m30s", "/v1/price-index", "/v1/hashprice/history",
                 "/data/", "/data/miners.csv", "/data/error-codes.json", "/data/api/", "/llms.txt",
                 "/methodology"]
        for path in paths:
            direct = [request("GET", f"http://127.0.0.1:{p}{path}") for p in ports]
            assert direct[0][0] == direct[1][0] == 200, path
            assert direct[0][1]["etag"] == direct[1][1]["etag"], path
            assert direct[0][2] == direct[1][2], path
            seen = set()
            for _ in range(4):
                status, h, body = request("GET", front + path)
                assert status == 200 and h["etag"] == direct[0][1]["etag"] and body == direct[0][2], path
                seen.add(h["x-upstream"])
                status, h, _ = request("GET", front + path, headers={"If-None-Match": direct[0][1]["etag"]})
                assert status == 304, path
                seen.add(h["x-upstream"])
            assert len(seen) == 2, (path, seen)  # both instances answered
        assert snap.read_bytes() == before
        assert not (tmp_path / "snapshot.sqlite-wal").exists()
    finally:
        if ngx:
            ngx.terminate()
            ngx.wait(timeout=10)
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


# ---------------------------------------------------------------- export and dataset validation


def records_region(body: bytes) -> bytes:
    start = body.index(b'"records":[') + len(b'"records":')
    end = body.index(b'],"summary":') + 1 if b'],"summary":' in body else body.rindex(b"]") + 1
    return body[start:end]


def test_export_mirrors_equal_the_api(server):
    out = server.tmp / "mirror"
    res = subprocess.run(
        [str(open_data_bin()), "export", "--db", str(server.db), "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    for dataset, path in [
        ("miners", "/v1/miners"),
        ("power-profiles", "/v1/power-profiles"),
        ("error-codes", None),
        ("reliability", "/v1/reliability"),
        ("price-index", "/v1/price-index"),
    ]:
        mirror = (out / "data" / f"{dataset}.json").read_bytes()
        if path:
            _, _, api = request("GET", server.url + path)
            assert records_region(api) == records_region(mirror), dataset
            n = len(json.loads(api)["records"])
        else:
            # Paginated: the mirror holds every page's records, in order.
            api_records = all_error_codes(server)
            assert json.loads(mirror)["records"] == api_records
            n = len(api_records)
        with open(out / "data" / f"{dataset}.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert len(rows) == 1 + n, dataset
        # The service answers the same files at the same paths (one code path, one snapshot).
        for ext in ("json", "csv"):
            status, _, served = request("GET", f"{server.url}/data/{dataset}.{ext}")
            assert status == 200 and served == (out / "data" / f"{dataset}.{ext}").read_bytes(), (dataset, ext)
    for page, file in [("/llms.txt", "llms.txt"), ("/data/api/", "data/api/index.html")]:
        status, _, served = request("GET", server.url + page)
        assert status == 200 and served == (out / file).read_bytes(), page
    assert (out / "data" / "index.html").is_file() and (out / "methodology" / "index.html").is_file()
    hist = json.loads((out / "data" / "hashprice-history.json").read_text())
    assert hist["meta"]["license"] == "CC BY 4.0" and isinstance(hist["records"], list)
    # The CSV mirror of the history has its header row even with no records yet, so a CSV
    # reader (pandas, Python's csv) finds the columns of a hashprice record.
    with open(out / "data" / "hashprice-history.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    columns = set(reader.fieldnames or [])
    assert {"refreshed_at", "network.height", "usd.per_th_day.fee_inclusive"} <= columns, columns
    assert len(rows) == len(hist["records"])


def test_a_bad_row_stops_the_service_with_file_and_line(tmp_path):
    data = tmp_path / "datasets"
    shutil.copytree(ROOT / "open-data" / "datasets", data)
    codes = data / "error-codes" / "error-codes.v1.jsonl"
    lines = codes.read_text().split("\n")
    idx = next(i for i, l in enumerate(lines) if '"SVCOS-HW-OVERHEAT"' in l)
    row = json.loads(lines[idx])
    row["severity"] = "catastrophic"
    lines[idx] = json.dumps(row)
    codes.write_text("\n".join(lines))
    res = subprocess.run(
        [str(open_data_bin()), "serve", "--offline", "--bind", f"127.0.0.1:{free_port()}",
         "--db", str(tmp_path / "db.sqlite"), "--datasets", str(data)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 78, res.stderr
    assert f"error-codes.v1.jsonl:{idx + 1}: $.severity:" in res.stderr, res.stderr


# ---------------------------------------------------------------- schemathesis


def test_schemathesis_live_openapi(server):
    """The real schemathesis CLI with every check (status codes, content types, response
    schemas, negative data rejected, positive data accepted, unsupported methods get 405 +
    Allow, ...) over every operation of the live document."""
    res = subprocess.run(
        [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
         "run", server.url + "/v1/openapi.json", "--checks", "all", "--max-examples", "10",
         "--request-timeout", "15", "--no-color"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "No issues found" in res.stdout, res.stdout[-3000:]


# ---------------------------------------------------------------- Esplora upstream


BITS = 0x17034219


def bits_difficulty(bits):
    exp, mant = bits >> 24, bits & 0xFFFFFF
    return (0xFFFF * 256 ** (0x1D - 3)) / (mant * 256 ** (exp - 3))


def test_hashprice_from_an_esplora_source(tmp_path, upstreams):
    class Esplora(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            p = self.path
            if p == "/api/blocks/tip/height":
                body = HEIGHT
            elif p.startswith("/api/blocks/"):
                top = int(p.rsplit("/", 1)[1])
                body = [{"id": f"{h:064x}", "height": h, "bits": BITS} for h in range(top, max(top - 10, -1), -1)]
            elif p.startswith("/api/block/") and p.endswith("/txs/0"):
                h = int(p.split("/")[3], 16)
                body = [{"vout": [{"value": 312_500_000 + FEES.get(h, 0) - 1000}, {"value": 1000}]}]
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Esplora)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = free_port()
    log = open(tmp_path / "esplora-server.log", "wb")
    proc = subprocess.Popen(
        [str(open_data_bin()), "serve", "--bind", f"127.0.0.1:{port}", "--db", str(tmp_path / "db.sqlite"),
         "--esplora-url", f"http://127.0.0.1:{httpd.server_address[1]}/api",
         "--price-url", f"http://127.0.0.1:{upstreams.port}/price",
         "--hashprice-interval-s", "1", "--fee-blocks", "3"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/hashprice"

        def fresh():
            status, _, body = get_json(url, timeout=2)
            return status == 200 and body["record"] and not body["status"]["stale"] and body

        body = wait_for("hashprice from esplora", fresh)
        rec = body["record"]
        diff = bits_difficulty(BITS)
        assert abs(rec["network"]["difficulty"] - diff) <= diff * 1e-12
        assert rec["network"]["height"] == HEIGHT and rec["block"]["avg_fees_btc"] == 0.05
        assert rec["upstreams"]["chain"].startswith("esplora ")
        per_th = 86400e12 / (diff * 2**32)
        want = per_th * (3.125 + 0.05) * USD
        assert abs(rec["usd"]["per_th_day"]["fee_inclusive"] - want) <= max(1e-8, want * 1e-9)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        httpd.shutdown()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_returns_after_a_flood(server):
    """Issue 33: 400 idle connections and 32 clients pulling the largest answers (plain and
    gzip) for a few seconds; once they are gone the server's memory returns to about where
    it was (the allocator trimmer gives freed pages back)."""
    paths = ["/v1/miners", "/v1/error-codes?per_page=500", "/v1/power-profiles", "/v1/reliability"]
    for p in paths:  # every dataset's answer built once before the baseline
        assert request("GET", server.url + p)[0] == 200
    time.sleep(2)
    before = rss_kib(server.proc.pid)
    idle = []
    for _ in range(400):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        idle.append(s)
    peak = [before]
    stop = time.time() + 6
    errors = []

    def pull(i):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            n = 0
            while time.time() < stop:
                headers = {"Accept-Encoding": "gzip"} if n % 2 else {}
                conn.request("GET", paths[(i + n) % len(paths)], headers=headers)
                r = conn.getresponse()
                r.read()
                if r.status not in (200, 503):
                    errors.append(r.status)
                n += 1
                if i == 0 and n % 10 == 0:
                    peak[0] = max(peak[0], rss_kib(server.proc.pid))
        except (OSError, http.client.HTTPException) as e:
            # Under 432 connections (far below its cap) the server drops no client.
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak[0] = max(peak[0], rss_kib(server.proc.pid))
    for s in idle:
        s.close()
    assert not errors, errors[:10]
    # The trimmer runs on its own period; give it a few.
    limit = before + 2048
    deadline = time.time() + 60
    after = rss_kib(server.proc.pid)
    while after > limit and time.time() < deadline:
        time.sleep(1)
        after = rss_kib(server.proc.pid)
    assert after <= limit, f"RSS {before} KiB before, peak {peak[0]} KiB, {after} KiB a minute after"
    # Still serving.
    assert request("GET", server.url + "/v1/catalog")[0] == 200
