"""While auth is down, a session auth confirmed before keeps reading from the gateway's memory
of confirmed tokens; writes, unknown tokens and new logins get 503 until auth is back."""

from conftest import PASSWORD, http, wait_for


def test_reads_go_on_while_auth_is_down(sim, token):
    api = sim.api_url
    status, _, body = http("GET", f"{api}/api/status", token)
    assert status == 200, body

    out = sim.ctl("stop", "auth")
    assert out.returncode == 0, out.stderr
    try:
        # A new login needs auth: 503 (with Retry-After) once it is gone.
        def login_refused():
            status, headers, _ = http("POST", f"{api}/api/auth/session",
                                      body={"password": PASSWORD}, timeout=15)
            return status == 503 and "retry-after" in headers
        wait_for(login_refused, 60, "logins refused with auth stopped", interval=0.5)

        # The token auth confirmed before still reads, again and again.
        for _ in range(3):
            status, _, body = http("GET", f"{api}/api/status", token, timeout=15)
            assert status == 200, body
            assert "mining" in body
        # A token auth never confirmed is not let in on the outage.
        status, _, body = http("GET", f"{api}/api/status", "f" * 64, timeout=15)
        assert status == 503, body
        # A write needs auth to confirm the session now: refused while it is down.
        status, _, body = http("POST", f"{api}/api/auth/ws-ticket", token, body={}, timeout=15)
        assert status == 503, body
    finally:
        out = sim.ctl("start", "auth")
        assert out.returncode == 0, out.stderr

    def login_works():
        status, _, _ = http("POST", f"{api}/api/auth/session", body={"password": PASSWORD},
                            timeout=15)
        return status == 200
    wait_for(login_works, 60, "logins back with auth")
    status, _, body = http("GET", f"{api}/api/status", token)
    assert status == 200, body
