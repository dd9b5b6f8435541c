"""Stratum V2 job declaration through the REST API on a stack of its own.

The SV2 gate goes on and the test pool's SV2 port (which also serves the job-declaration server
and the template provider) is set with `POST /api/config`; the test pool is restarted to listen.
Bad input gets the error envelope and leaves config.toml as it was; the connection test reaches
both roles; once enabled, the simulated board mines declared jobs and stratum-agent reports
shares the pool accepted on the declared template.
"""

from __future__ import annotations

from pathlib import Path

from conftest import _free_port, http, own_stack, wait_for

# A valid base58check key that is not the test pool's (a wrong authority for the handshake).
IMPOSTOR_KEY = "9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan"


def _sv2_stack(sim, token) -> str:
    """Turn the SV2 gate and the test pool's SV2 port on; the pool's stratum2+tcp URL."""
    port = _free_port(sim.bind)
    status, _, body = http(
        "POST",
        f"{sim.api_url}/api/config",
        token,
        {"stratum": {"sv2_enabled": True}, "sim": {"pool_sv2_port": port}},
    )
    assert status == 200, body
    out = sim.ctl("restart", "test-pool")
    assert out.returncode == 0, out.stderr
    key_file = Path(sim.dir) / "state" / "test-pool" / "sv2-authority.pub"
    key = wait_for(
        lambda: key_file.exists() and key_file.read_text().strip(),
        60,
        "the test pool's SV2 authority key",
    )
    return f"stratum2+tcp://{sim.bind}:{port}/{key}"


def test_job_declaration_config_status_and_connection_test(tmp_path):
    with own_stack(tmp_path) as (sim, token):
        api = sim.api_url
        # Behind the SV2 gate: refused while [stratum].sv2_enabled is off.
        somewhere = f"stratum2+tcp://{sim.bind}:1/{IMPOSTOR_KEY}"
        on = {"enabled": True, "server": somewhere, "template_provider": somewhere}
        status, _, body = http("POST", f"{api}/api/jd/config", token, on)
        assert status == 400 and body["field"] == "stratum.jd.enabled", body
        status, _, body = http("POST", f"{api}/api/jd/test-connection", token, {})
        assert status == 409 and "sv2_enabled" in body["error"], body
        url = _sv2_stack(sim, token)

        for method, path in [
            ("GET", "/api/jd/status"),
            ("POST", "/api/jd/config"),
            ("POST", "/api/jd/test-connection"),
        ]:
            status, _, body = http(method, f"{api}{path}", None, {} if method == "POST" else None)
            assert status == 401, (path, body)

        config_path = Path(sim.dir) / "config.toml"
        before = config_path.read_text()
        for bad, field in [
            ({"enabled": True}, "stratum.jd.server"),
            (
                {"enabled": True, "server": "stratum2+tcp://10.0.0.1:1", "template_provider": url},
                "stratum.jd.server",
            ),
            ({"server": url, "template_provider": "http://x:1/k"}, "stratum.jd.template_provider"),
        ]:
            status, _, body = http("POST", f"{api}/api/jd/config", token, bad)
            assert status == 400, body
            assert body["code"] == "config_validation", body
            assert field in str(body), body
        status, _, body = http("POST", f"{api}/api/jd/config", token, {"enabled": "yes", "x": 1})
        assert status == 422, body
        assert "error" in body and "code" in body, body
        assert config_path.read_text() == before

        status, _, body = http("GET", f"{api}/api/jd/status", token)
        assert status == 200, body
        assert body["schema"] == "svcos.api.jd.status.v1"
        assert body["sv2_enabled"] is True
        assert body["enabled"] is False
        assert body["template_source"] in ("pool", "none"), body

        status, _, body = http(
            "POST",
            f"{api}/api/jd/test-connection",
            token,
            {"server": url, "template_provider": url},
            timeout=30,
        )
        assert status == 200, body
        assert body["schema"] == "svcos.api.jd.test_connection.v1"
        assert body["ok"] is True, body
        assert "token allocated" in body["server"]["detail"], body
        impostor = url.rsplit("/", 1)[0] + "/" + IMPOSTOR_KEY
        status, _, body = http(
            "POST",
            f"{api}/api/jd/test-connection",
            token,
            {"server": impostor, "template_provider": url},
            timeout=30,
        )
        assert status == 200, body
        assert body["ok"] is False and body["server"]["ok"] is False, body
        assert body["template_provider"]["ok"] is True, body

        status, _, body = http(
            "POST", f"{api}/api/pools", token, [{"url": url, "user": "py-jd", "password": "x"}]
        )
        assert status == 200, body
        status, _, body = http(
            "POST",
            f"{api}/api/jd/config",
            token,
            {"enabled": True, "server": url, "template_provider": url},
        )
        assert status == 200, body
        assert body["schema"] == "svcos.api.jd.config.v1"
        assert body["config"] == {"enabled": True, "server": url, "template_provider": url}
        assert "[stratum.jd]" in config_path.read_text()

        def declared_shares():
            status, _, body = http("GET", f"{api}/api/jd/status", token)
            return status == 200 and body["shares"]["accepted"] >= 1 and body

        body = wait_for(declared_shares, 120, "shares accepted on declared jobs")
        assert body["connected"] is True, body
        assert body["template_source"] == "jd", body
        assert body["fallback_reason"] is None, body
        job = body["last_declared_job"]
        assert job["tx_count"] == 3, body
        assert isinstance(job["pool_job_id"], int), body
        assert len(job["prev_hash"]) == 64, body
