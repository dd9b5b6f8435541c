// svcOS dashboard: first-boot password setup, login, then live status from /api/status.
// Dependency-free; talks only to its own origin. The bearer token lives in sessionStorage, so
// closing the tab logs this browser out locally (the session itself expires on the miner).
// Field names follow the gateway's schema svcos.api.status.v1, read tolerantly: a missing
// member shows as "–" instead of breaking the page.
"use strict";

(function () {
  const TOKEN_KEY = "svcos.token";
  const POLL_MS = 2000;
  const MODE_LABELS = { home: "Space Heater", standard: "Mining", hacker: "Hacker" };

  let pollTimer = null;

  const $ = (id) => document.getElementById(id);

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function show(view) {
    for (const v of ["loading", "setup", "login", "status"]) {
      $("view-" + v).hidden = v !== view;
    }
    $("logout").hidden = view !== "status";
  }

  function banner(text) {
    const b = $("banner");
    b.textContent = text || "";
    b.hidden = !text;
  }

  function showError(id, text) {
    const e = $(id);
    e.textContent = text || "";
    e.hidden = !text;
  }

  // Read a nested member tolerantly: get(obj, "a.b.c").
  function get(obj, path) {
    let cur = obj;
    for (const key of path.split(".")) {
      if (cur === null || cur === undefined || typeof cur !== "object") return undefined;
      cur = cur[key];
    }
    return cur;
  }

  function num(v) {
    return typeof v === "number" && isFinite(v) ? v : undefined;
  }

  function fmt(v, digits, unit) {
    const n = num(v);
    if (n === undefined) return "–";
    return n.toFixed(digits) + (unit ? " " + unit : "");
  }

  function fmtHashrate(ghs) {
    const n = num(ghs);
    if (n === undefined) return "–";
    if (n >= 1000) return (n / 1000).toFixed(2) + " TH/s";
    return n.toFixed(1) + " GH/s";
  }

  // The error envelope {error, detail?, code?, suggestion?} as one line.
  async function describe(response) {
    let text = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      if (body && body.error) {
        text = body.error;
        if (body.suggestion) text += " — " + body.suggestion;
      }
    } catch (_) {
      // Not JSON: keep the status line.
    }
    const retry = response.headers.get("Retry-After");
    if (response.status === 429 && retry) text += " (retry in " + retry + " s)";
    return text;
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init);
  }

  async function start() {
    show("loading");
    let response;
    try {
      response = await api("GET", "/api/auth/status");
    } catch (e) {
      banner("The miner is not answering; retrying…");
      setTimeout(start, POLL_MS);
      return;
    }
    if (!response.ok) {
      banner(await describe(response) + "; retrying…");
      setTimeout(start, POLL_MS);
      return;
    }
    banner("");
    const status = await response.json();
    if (status.password_set === false) {
      sessionStorage.removeItem(TOKEN_KEY);
      show("setup");
      $("setup-password").focus();
    } else if (token()) {
      showDashboard();
    } else {
      show("login");
      $("login-password").focus();
    }
  }

  async function login(password) {
    const response = await api("POST", "/api/auth/session", { password });
    if (!response.ok) throw new Error(await describe(response));
    const body = await response.json();
    const t = body.token || body.access_token;
    if (!t) throw new Error("the miner answered without a token");
    sessionStorage.setItem(TOKEN_KEY, t);
  }

  async function onSetup(event) {
    event.preventDefault();
    const password = $("setup-password").value;
    if (password !== $("setup-confirm").value) {
      showError("setup-error", "The two passwords differ.");
      return;
    }
    const button = event.target.querySelector("button");
    button.disabled = true;
    showError("setup-error", "");
    try {
      const response = await api("POST", "/api/auth/setup", { password });
      if (!response.ok) throw new Error(await describe(response));
      await login(password);
      event.target.reset();
      showDashboard();
    } catch (e) {
      showError("setup-error", e.message);
    } finally {
      button.disabled = false;
    }
  }

  async function onLogin(event) {
    event.preventDefault();
    const button = event.target.querySelector("button");
    button.disabled = true;
    showError("login-error", "");
    try {
      await login($("login-password").value);
      event.target.reset();
      showDashboard();
    } catch (e) {
      showError("login-error", e.message);
    } finally {
      button.disabled = false;
    }
  }

  async function onLogout() {
    stopPolling();
    try {
      await api("DELETE", "/api/auth/session/current");
    } catch (_) {
      // Logging out locally is what matters; the session expires on its own.
    }
    sessionStorage.removeItem(TOKEN_KEY);
    show("login");
  }

  function stopPolling() {
    if (pollTimer !== null) clearTimeout(pollTimer);
    pollTimer = null;
  }

  function showDashboard() {
    show("status");
    stopPolling();
    poll();
  }

  async function poll() {
    pollTimer = null;
    let response;
    try {
      response = await api("GET", "/api/status");
    } catch (_) {
      banner("The miner is not answering; retrying…");
      pollTimer = setTimeout(poll, POLL_MS);
      return;
    }
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      banner("Your session ended; please log in again.");
      start();
      return;
    }
    if (!response.ok) {
      banner(await describe(response) + "; retrying…");
      pollTimer = setTimeout(poll, POLL_MS);
      return;
    }
    try {
      render(await response.json());
      banner("");
    } catch (e) {
      banner("Unexpected status body: " + e.message);
    }
    pollTimer = setTimeout(poll, POLL_MS);
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text === undefined || text === null || text === "" ? "–" : String(text);
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function fillTable(id, items, addRow, emptyText) {
    const body = $(id).querySelector("tbody");
    body.replaceChildren();
    if (!Array.isArray(items) || items.length === 0) {
      const row = document.createElement("tr");
      const td = cell(row, emptyText);
      td.colSpan = $(id).querySelectorAll("th").length;
      body.appendChild(row);
      return;
    }
    for (const item of items) {
      const row = document.createElement("tr");
      addRow(row, item || {});
      body.appendChild(row);
    }
  }

  function stateClass(state) {
    const s = String(state || "").toLowerCase();
    if (s === "mining" || s === "alive" || s === "active" || s === "ok") return "s-ok";
    if (s === "fault" || s === "overheat" || s === "missing" || s === "dead" || s === "error") return "s-bad";
    return "s-warn";
  }

  function render(s) {
    if (s.hostname) {
      $("hostname").textContent = s.hostname;
      document.title = s.hostname + " · svcOS";
    }
    const mode = String(s.mode || "").toLowerCase();
    $("mode").hidden = !mode;
    $("mode").textContent = (MODE_LABELS[mode] || mode) + " mode";

    const m = s.mining || {};
    $("state").textContent = m.state || (s.degraded ? "hw-agent restarting" : "–");
    $("state").className = "value " + stateClass(m.state);
    $("state-reason").textContent = m.state_reason || "";
    const hr = m.hashrate_ghs || {};
    $("hashrate").textContent = fmtHashrate(hr["5s"]);
    $("hashrate-avg").textContent = "1 m " + fmtHashrate(hr["1m"]) + " · 15 m " + fmtHashrate(hr["15m"]);
    $("power").textContent = fmt(m.power_watt, 0, "W");
    const ths = num(hr["1m"]) !== undefined ? hr["1m"] / 1000 : undefined;
    $("efficiency").textContent =
      num(m.power_watt) && ths ? (m.power_watt / ths).toFixed(1) + " J/TH" : "";
    $("temp-max").textContent = fmt(m.temp_max_c, 1, "°C");
    $("temp-target").textContent = num(m.temp_target_c) ? "target " + fmt(m.temp_target_c, 0, "°C") : "";

    const pools = s.pools || {};
    $("shares").textContent = num(pools.accepted) !== undefined ? String(pools.accepted) : "–";
    $("shares-rejected").textContent =
      num(pools.rejected) !== undefined ? pools.rejected + " rejected · " + (pools.stale || 0) + " stale" : "";

    fillTable("chains", s.chains, (row, c) => {
      cell(row, c.chain_id);
      cell(row, c.state, stateClass(c.state));
      cell(row, (c.chips_detected ?? "–") + " / " + (c.chips_expected ?? "–"));
      cell(row, fmtHashrate(get(c, "hashrate_ghs.1m")));
      cell(row, fmt(c.temp_board_c, 1, "°C"));
      cell(row, fmt(c.temp_chip_c, 1, "°C"));
      cell(row, fmt(c.frequency_mhz, 0, "MHz"));
    }, get(s, "sources.hw_agent.up") === false ? "hw-agent restarting" : "no hashboards");

    fillTable("fans", s.fans, (row, f) => {
      cell(row, f.fan_id);
      cell(row, num(f.rpm) !== undefined ? f.rpm + " rpm" : "–");
      cell(row, num(f.pwm_percent) !== undefined ? f.pwm_percent + " %" : "–");
      cell(row, f.stalled ? "stalled" : "ok", f.stalled ? "s-bad" : "s-ok");
    }, get(s, "sources.hw_agent.up") === false ? "hw-agent restarting" : "no fans reported");

    const list = Array.isArray(pools.list) ? pools.list : Array.isArray(s.pools) ? s.pools : [];
    fillTable("pools", list, (row, p) => {
      cell(row, (p.index ?? "") + (p.active ? " ★" : ""));
      cell(row, p.url, "url");
      cell(row, p.user);
      cell(row, p.state, stateClass(p.active ? "active" : p.state));
      cell(row, p.accepted);
      cell(row, p.rejected);
      cell(row, p.stale);
    }, get(s, "sources.stratum_agent.up") === false ? "pool client restarting" : "no pools configured");

    $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("setup-form").addEventListener("submit", onSetup);
    $("login-form").addEventListener("submit", onLogin);
    $("logout").addEventListener("click", onLogout);
    start();
  });
})();
