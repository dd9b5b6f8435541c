"""POST /mcp driven by the official MCP Python SDK against the shared `svcos sim` stack.

The server is stateless Streamable HTTP with JSON answers, behind the gateway's bearer auth:
read-only tools for any authenticated agent, control tools for the owner session.
"""

import contextlib
import json
import urllib.request

import anyio
import pytest

from conftest import http, wait_for

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client import streamable_http  # noqa: E402

READ_TOOLS = {
    "get_status",
    "get_pools",
    "get_chains",
    "get_chips",
    "get_shares",
    "get_events",
    "get_services",
    "get_tuner_state",
    "get_thermal",
}
CONTROL_TOOLS = {
    "set_pool_enabled",
    "switch_pool",
    "sleep",
    "wake",
    "restart_service",
    "set_fan",
    "set_led",
}


def field(obj, *names):
    """An attribute under its current (snake_case) or older (camelCase) SDK name."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    raise AttributeError(f"{type(obj).__name__} has none of {names}")


@contextlib.asynccontextmanager
async def mcp_session(sim, token):
    """An initialised ClientSession on the sim's /mcp with the bearer token."""
    url = f"{sim.api_url}/mcp"
    headers = {"Authorization": f"Bearer {token}"}
    if hasattr(streamable_http, "streamable_http_client"):
        async with streamable_http.create_mcp_http_client(headers=headers) as client:
            async with streamable_http.streamable_http_client(url, http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    init = await session.initialize()
                    yield session, init
    else:  # SDK 1.x
        async with streamable_http.streamablehttp_client(url, headers=headers) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                init = await session.initialize()
                yield session, init


def run(sim, token, body):
    """Run `body(session, init)` in a fresh MCP session and return its result."""

    async def main():
        async with mcp_session(sim, token) as (session, init):
            return await body(session, init)

    return anyio.run(main)


def structured(result) -> dict:
    assert not field(result, "is_error", "isError"), result
    content = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if content is None:
        content = json.loads(result.content[0].text)
    return content


def test_initialize_reports_server_name_and_version(sim, token):
    async def body(session, init):
        return init

    init = run(sim, token, body)
    info = field(init, "server_info", "serverInfo")
    status, _, version = http("GET", f"{sim.api_url}/api/dashboard/version", token)
    assert status == 200, version
    assert info.name == "svcos"
    assert info.version == version["version"]
    assert init.capabilities.tools is not None


def test_tools_list_has_read_and_control_tools_with_schemas(sim, token):
    async def body(session, init):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in run(sim, token, body)}
    assert READ_TOOLS | CONTROL_TOOLS <= set(tools), sorted(tools)
    for name in READ_TOOLS | CONTROL_TOOLS:
        schema = field(tools[name], "input_schema", "inputSchema")
        assert schema["type"] == "object", (name, schema)
        hints = tools[name].annotations
        read_only = field(hints, "read_only_hint", "readOnlyHint")
        assert read_only is (name in READ_TOOLS), (name, hints)
    fan = field(tools["set_fan"], "input_schema", "inputSchema")
    assert "mode" in fan["required"], fan
    assert fan.get("additionalProperties") is False, fan
    assert {"mode", "pwm_percent", "target_temp_c"} <= set(fan["properties"]), fan
    pool = field(tools["set_pool_enabled"], "input_schema", "inputSchema")
    assert set(pool["required"]) == {"index", "enabled"}, pool


def test_get_status_is_the_rest_status(sim, token):
    def rest():
        status, _, body = http("GET", f"{sim.api_url}/api/status", token)
        assert status == 200, body
        return body

    async def body(session, init):
        # Telemetry changes every second: compare only when REST answered the same body right
        # before and right after the tool call (then the tool saw that snapshot too).
        for _ in range(50):
            before = await anyio.to_thread.run_sync(rest)
            result = await session.call_tool("get_status", {})
            after = await anyio.to_thread.run_sync(rest)
            if before == after:
                return before, structured(result)
        raise AssertionError("the status never held still across one tool call")

    before, tool = run(sim, token, body)
    assert tool == before
    assert tool["schema"] == "svcos.api.status.v1"
    assert tool["mining"]["hashrate_ghs"]["1m"] == before["mining"]["hashrate_ghs"]["1m"]


def test_read_tools_answer_with_live_data(sim, token):
    async def body(session, init):
        return {name: await session.call_tool(name, {}) for name in sorted(READ_TOOLS)}

    results = run(sim, token, body)
    chains = structured(results["get_chains"])
    status, _, rest = http("GET", f"{sim.api_url}/api/status", token)
    assert status == 200
    assert [c["chain_id"] for c in chains["chains"]] == [c["chain_id"] for c in rest["chains"]]
    assert all("findings" in c and "chips_detected" in c for c in chains["chains"]), chains
    pools = structured(results["get_pools"])
    assert pools["pools"][0]["password"] == "********"
    services = structured(results["get_services"])
    assert {"hw-agent", "stratum-agent", "gateway"} <= {s["name"] for s in services["services"]}
    events = structured(results["get_events"])
    assert any(e["event"] == "service_started" for e in events["events"]), events
    for name in READ_TOOLS:
        # Every read tool answers (mode gating aside: the sim runs in standard mode).
        assert not field(results[name], "is_error", "isError"), (name, results[name])


def test_sleep_and_wake_change_the_mining_state(sim, token):
    def mining_state():
        status, _, body = http("GET", f"{sim.api_url}/api/status", token)
        return body["mining"]["state"] if status == 200 else None

    wait_for(lambda: mining_state() == "mining", 120, "the sim to mine")

    async def call(session, name):
        return structured(await session.call_tool(name, {}))

    try:
        slept = run(sim, token, lambda s, _: call(s, "sleep"))
        assert slept["action"] == "sleep", slept
        wait_for(lambda: mining_state() == "sleeping", 60, "mining state sleeping")
    finally:
        woke = run(sim, token, lambda s, _: call(s, "wake"))
    assert woke["action"] == "wake", woke
    wait_for(lambda: mining_state() == "mining", 120, "mining again after wake")


def test_set_pool_enabled_is_saved_and_restored(sim, token):
    def pool0_enabled():
        status, _, body = http("GET", f"{sim.api_url}/api/pools", token)
        assert status == 200, body
        return body["pools"][0]["enabled"]

    assert pool0_enabled() is True

    async def set_enabled(session, enabled):
        return await session.call_tool("set_pool_enabled", {"index": 0, "enabled": enabled})

    try:
        report = structured(run(sim, token, lambda s, _: set_enabled(s, False)))
        assert report["saved"] is True, report
        assert pool0_enabled() is False
    finally:
        report = structured(run(sim, token, lambda s, _: set_enabled(s, True)))
    assert report["saved"] is True, report
    assert pool0_enabled() is True


def test_bad_arguments_are_tool_errors_not_crashes(sim, token):
    async def body(session, init):
        wrong_type = await session.call_tool("set_fan", {"mode": "sideways"})
        rest_check = await session.call_tool("set_fan", {"mode": "manual"})
        no_pool = await session.call_tool("set_pool_enabled", {"index": 99, "enabled": False})
        still_up = await session.call_tool("get_status", {})
        return wrong_type, rest_check, no_pool, still_up

    wrong_type, rest_check, no_pool, still_up = run(sim, token, body)
    for r in (wrong_type, rest_check, no_pool):
        assert field(r, "is_error", "isError") is True, r
    # The REST route's own validation, with the envelope's message.
    assert "pwm_percent" in rest_check.content[0].text, rest_check
    envelope = field(rest_check, "structured_content", "structuredContent")
    assert envelope["field"] == "pwm_percent", envelope
    assert "no pool 99" in no_pool.content[0].text, no_pool
    assert structured(still_up)["schema"] == "svcos.api.status.v1"


def test_no_token_gets_401_envelope_and_no_mcp_answer(sim):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    for auth in (None, "Bearer not-a-session"):
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if auth:
            headers["Authorization"] = auth
        req = urllib.request.Request(
            f"{sim.api_url}/mcp", data=json.dumps(init).encode(), method="POST", headers=headers
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req, timeout=10)
        err = caught.value
        assert err.code == 401
        assert err.headers["WWW-Authenticate"].startswith("Bearer")
        body = json.loads(err.read())
        assert isinstance(body["error"], str) and body["error"]
        assert "jsonrpc" not in body and "result" not in body


def test_a_ws_ticket_is_not_a_session_at_mcp(sim, token):
    """A /ws ticket is single-use and only for /ws: at /mcp it is no bearer session."""
    status, _, before = http("GET", f"{sim.api_url}/api/auth/status")
    assert status == 200, before
    enabled = before["websocket_tickets"]
    try:
        if not enabled:
            status, _, body = http(
                "POST", f"{sim.api_url}/api/config", token, {"api": {"websocket_tickets": True}}
            )
            assert status == 200, body
        status, _, body = http("POST", f"{sim.api_url}/api/auth/ws-ticket", token)
        assert status == 200, body
        status, _, body = http("POST", f"{sim.api_url}/mcp", body["ticket"], {"jsonrpc": "2.0"})
        assert status == 401, body
        assert "jsonrpc" not in body
    finally:
        if not enabled:
            status, _, body = http(
                "POST", f"{sim.api_url}/api/config", token, {"api": {"websocket_tickets": False}}
            )
            assert status == 200, body


def test_mcp_sdk_without_a_valid_token_cannot_initialize(sim):
    async def main():
        with anyio.fail_after(60):
            async with mcp_session(sim, "wrong") as _:
                pass

    with pytest.raises(BaseException) as caught:  # noqa: B017 - the SDK wraps the 401 in groups
        anyio.run(main)
    assert not isinstance(caught.value, TimeoutError), caught.value
    # The SDK surfaces the HTTP 401 as its own MCP error ("Server returned an error response").
    assert "mcperror" in repr(caught.value).lower(), caught.value
