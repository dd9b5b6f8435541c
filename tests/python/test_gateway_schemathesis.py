"""schemathesis against the generated docs/openapi.json on a running `svcos sim`, with a valid token.

Checks: no 5xx (operations marked `x-svc-support: planned` may answer 501, always with the
envelope), every non-2xx body is the error envelope {error, detail?, code?, suggestion?}, and
every 2xx body of an operation marked `x-svc-response-schema: derived` conforms to its 200 schema
(derived from the gateway's response types, svcos-api-types), and one marked `media` comes in a
media type its 200 lists (its JSON alternative, if any, conforming too).

Only the reads (GET) are generated here: the stack is shared with every other module, and the
write bodies are typed, so generated writes are valid and really change it (they once switched the
autotuner on with a raised hashrate target, and later modules found the sim in `overheat`). Every
write (POST/PUT/DELETE) is generated against a disposable stack of its own, with the same checks,
in test_gateway_schemathesis_writes.py.
"""

import json
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import response_schema_conformance

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "openapi.json"
DOC = json.loads(DOC_PATH.read_text())

CODES = {
    "config_validation",
    "pool_validation",
    "pool_config_write_failed",
    "config_conflict",
    "error_body_unavailable",
    "legacy_error",
    "unclassified_error",
}

DERIVED = {
    (method.upper(), path)
    for path, item in DOC["paths"].items()
    for method, op in item.items()
    if op.get("x-svc-response-schema") == "derived"
}

MEDIA = {
    (method.upper(), path): set(op["responses"]["200"]["content"])
    for path, item in DOC["paths"].items()
    for method, op in item.items()
    if op.get("x-svc-response-schema") == "media"
}

PLANNED = {
    (method.upper(), path)
    for path, item in DOC["paths"].items()
    for method, op in item.items()
    if op.get("x-svc-support") == "planned"
}


def header(resp, name):
    """A response header as one string (schemathesis keeps lists of values)."""
    for k, v in resp.headers.items():
        if k.lower() == name:
            return v[0] if isinstance(v, list) else v
    return ""


def assert_envelope(resp):
    assert header(resp, "content-type").startswith("application/json"), resp.text
    body = resp.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    for k in ("detail", "code", "suggestion"):
        if k in body:
            assert isinstance(body[k], str) and body[k], (k, body)
    if "code" in body:
        assert body["code"] in CODES, body


schema = schemathesis.openapi.from_path(str(DOC_PATH)).include(method=["GET"])


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx_and_every_error_is_the_envelope(case, sim, token):
    key = (case.operation.method.upper(), case.operation.path)
    resp = case.call(base_url=sim.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=15)
    if key in PLANNED and resp.status_code == 501:
        assert_envelope(resp)
        return
    assert resp.status_code < 500, f"{key}: {resp.status_code} {resp.text}"
    if resp.status_code >= 400:
        assert_envelope(resp)
    elif key in DERIVED:
        case.validate_response(resp, checks=[response_schema_conformance])
    elif key in MEDIA and resp.status_code == 200:
        sent = header(resp, "content-type")
        assert sent in MEDIA[key], (key, sent, MEDIA[key])
        if sent.startswith("application/json"):
            case.validate_response(resp, checks=[response_schema_conformance])


def test_derived_response_schemas_hold_on_a_mining_sim(sim, token):
    """Every GET with a derived 200 schema, once the sim mines (chains, pools and shares filled):
    the body conforms, and the schema cannot be vacuous (it names required members)."""
    import time
    import urllib.request

    import jsonschema

    import urllib.error

    def get(path):
        req = urllib.request.Request(sim.api_url + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def refused(path):
        """Derived GETs this stack may refuse: the debug reads need Hacker mode and query
        parameters, a run's result needs a finished run (their POST twins and the Hacker-mode
        stack of test_gateway_schemathesis_writes.py reach them)."""
        try:
            get(path)
            return None
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            assert isinstance(body.get("error"), str) and body["error"], (path, body)
            return e.code

    deadline = time.time() + 120
    while time.time() < deadline:
        status = get("/api/status")
        if status["pools"] and status["chains"] and (status["mining"] or {}).get("state") == "mining":
            break
        time.sleep(1)
    assert (status["mining"] or {}).get("state") == "mining", status
    gets = sorted(p for m, p in DERIVED if m == "GET" and "{" not in p)
    assert "/api/status" in gets and "/api/pools" in gets, gets
    checked = 0
    for path in gets:
        if path.startswith("/api/debug/") or path.endswith("/result"):
            code = refused(path)
            if code is not None:
                assert code in (400, 403, 404), (path, code)
                continue
        checked += 1
        schema = DOC["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        root = {**schema, "components": DOC["components"]}
        name = schema["$ref"].rsplit("/", 1)[1]
        assert DOC["components"]["schemas"][name]["required"], name
        body = get(path)
        jsonschema.validate(body, root, cls=jsonschema.Draft202012Validator)
        # A member the types do not know would mean the schema and the answer drifted apart.
        assert set(body) == set(DOC["components"]["schemas"][name]["properties"]), (path, set(body))
    assert checked >= 10, (checked, gets)


def test_unknown_paths_and_methods_get_the_envelope(sim, token):
    import urllib.request

    for method, path in [("GET", "/api/no/such/route"), ("DELETE", "/api/status"), ("PUT", "/api/pools")]:
        req = urllib.request.Request(
            sim.api_url + path, method=method, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            urllib.request.urlopen(req, timeout=5)
            raise AssertionError(f"{method} {path} succeeded")
        except urllib.error.HTTPError as e:
            assert e.code in (404, 405), (method, path, e.code)
            body = json.loads(e.read())
            assert isinstance(body["error"], str)
            assert body.get("code") in CODES
