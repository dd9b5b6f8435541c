// svcOS dashboard: setup wizard, login, and the three modes (Space Heater, Mining, Hacker).
//
// Written for the vendored Preact + htm build (global `htmPreact`), so there is no compile step.
// It talks only to its own origin's public REST API (/api/*, forwarded by the proxy) with the
// bearer token of the session, which lives in sessionStorage: it survives a reload, is gone when
// the tab closes, and is never sent anywhere but the miner. /ws lives on the API port (another
// origin), so live values come from polling REST; polling stops while the tab is hidden.
//
// Every value shown next to a `data-k` attribute is the member `data-k` of the answer of the
// route named by the nearest `data-src`, formatted by `FMT[data-f]` (the end-to-end tests compare
// them with the answers Chromium received).
"use strict";

(function () {
  const { html, render, useState, useEffect, useRef, useCallback } = window.htmPreact;

  const TOKEN_KEY = "svcos.token";
  const THEME_KEY = "svcos.theme";
  const BTC_KEY = "svcos.btc_price";
  const WIZARD_KEY = "svcos.wizard.step";
  const DISMISSED_KEY = "svcos.wizard.dismissed";
  const STATUS_POLL_MS = 5000;
  const SCREEN_POLL_MS = 10000;
  const MODE_LABEL = { home: "Space Heater", standard: "Mining", hacker: "Hacker" };
  const MODE_RANK = { home: 0, standard: 1, hacker: 2 };

  // ---------------------------------------------------------------- formatting (browser locale)

  const isNum = (v) => typeof v === "number" && isFinite(v);
  const nfCache = new Map();
  function nf(options) {
    const key = JSON.stringify(options);
    if (!nfCache.has(key)) nfCache.set(key, new Intl.NumberFormat(undefined, options));
    return nfCache.get(key);
  }
  const num = (v, d) => (isNum(v) ? nf({ maximumFractionDigits: d, minimumFractionDigits: d }).format(v) : "–");
  let currency = "USD";
  const STATE_WORDS = {
    mining: "mining", bringup: "starting the hashboards", chain_bringup: "starting the hashboards",
    starting_services: "starting", waiting_for_pool_client: "waiting for the pool client",
    waiting_for_work: "waiting for work from the pool", no_work: "waiting for work from the pool",
    sleeping: "asleep", overheat: "paused: too hot", overheat_pause: "paused: too hot", fault: "fault",
    alive: "connected", dead: "unreachable", connecting: "connecting", auth_failed: "worker or password refused",
    silent: "connected, but no work", disabled: "disabled", idle: "idle", running: "running", stopped: "stopped",
  };
  const FMT = {
    text: (v) => (v === null || v === undefined || v === "" ? "–" : String(v)),
    int: (v) => num(v, 0),
    num1: (v) => num(v, 1),
    num2: (v) => num(v, 2),
    watt: (v) => (isNum(v) ? num(v, 0) + " W" : "–"),
    celsius: (v) => (isNum(v) ? nf({ style: "unit", unit: "celsius", maximumFractionDigits: 1 }).format(v) : "–"),
    percent: (v) => (isNum(v) ? nf({ style: "percent", maximumFractionDigits: 1 }).format(v / 100) : "–"),
    rpm: (v) => (isNum(v) ? num(v, 0) + " rpm" : "–"),
    mhz: (v) => (isNum(v) ? num(v, 0) + " MHz" : "–"),
    // Chain and PSU voltages are volts to the owner ("8.80 V", not "8,800 mV").
    mv: (v) => (isNum(v) ? num(v / 1000, 2) + " V" : "–"),
    // A state code in words ("bringup" → "starting the hashboards").
    state: (v) => (v === null || v === undefined || v === "" ? "–" : STATE_WORDS[v] || String(v).replace(/_/g, " ")),
    // A number the API sent with float noise (243.09999999999968) at a sane precision.
    auto: (v) => (isNum(v) ? (Number.isInteger(v) ? num(v, 0) : nf({ maximumFractionDigits: Math.abs(v) < 10 ? 3 : 2 }).format(v)) : FMT.text(v)),
    ghs: (v) => {
      if (!isNum(v)) return "–";
      if (v >= 1000) return num(v / 1000, 2) + " TH/s";
      return num(v, 1) + " GH/s";
    },
    // Share difficulties span from 1e-5 (the sim's test pool) to 1e12 (mainnet).
    diff: (v) => (isNum(v) ? (Math.abs(v) < 1000 ? nf({ maximumSignificantDigits: 4 }).format(v) : nf({ notation: "compact", maximumFractionDigits: 2 }).format(v)) : "–"),
    jth: (v) => (isNum(v) ? num(v, 1) + " J/TH" : "–"),
    money: (v) => (isNum(v) ? nf({ style: "currency", currency }).format(v) : "–"),
    time: (v) => (isNum(v) && v > 0 ? new Date(v).toLocaleString() : "–"),
    duration: (v) => {
      if (!isNum(v)) return "–";
      const d = Math.floor(v / 86400), h = Math.floor((v % 86400) / 3600), m = Math.floor((v % 3600) / 60);
      return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : `${m} min ${Math.floor(v % 60)} s`;
    },
    bool: (v) => (v === true ? "yes" : v === false ? "no" : "–"),
    // Sizes from a few bytes (a wrong file) to the 1 GiB bundle limit, in the unit that shows them.
    bytes: (v) => {
      if (!isNum(v)) return "–";
      if (v < 1024) return num(v, 0) + " B";
      if (v < 1048576) return num(v / 1024, 1) + " KiB";
      if (v < 1073741824) return num(v / 1048576, 1) + " MiB";
      return num(v / 1073741824, 1) + " GiB";
    },
  };
  window.svcosFmt = FMT;

  function get(obj, path) {
    let cur = obj;
    for (const key of String(path).split(".")) {
      if (cur === null || cur === undefined || typeof cur !== "object") return undefined;
      cur = cur[key];
    }
    return cur;
  }

  // A displayed value the tests can check against the REST answer it came from.
  function V({ k, v, f = "text" }) {
    return html`<span data-k=${k} data-v=${JSON.stringify(v === undefined ? null : v)} data-f=${f}>${FMT[f](v)}</span>`;
  }

  // ---------------------------------------------------------------- API client

  // The envelope's field paths ("pools[0].url", "home.night_mode.start") in the owner's words.
  const FIELD_WORDS = { url: "URL", user: "worker", password: "password", quota: "quota", priority: "order" };
  function fieldLabel(path) {
    const pool = /^pools\[(\d+)\](?:\.(\w+))?$/.exec(path);
    if (pool) return `Pool ${Number(pool[1]) + 1}${pool[2] ? ` ${FIELD_WORDS[pool[2]] || pool[2].replace(/_/g, " ")}` : ""}`;
    const last = String(path).split(".").pop().replace(/\[\d+\]/g, "");
    return last.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());
  }

  class ApiError extends Error {
    constructor(status, body) {
      const b = body && typeof body === "object" ? body : {};
      let message;
      if (b.field && status >= 400 && status < 500) {
        // A field error names the form field; the envelope's suggestion ("fix the named field
        // and resend") is written for API clients, not for the owner at the form.
        message = `${fieldLabel(b.field)}: ${b.detail || "this value is not accepted"}.`;
      } else {
        message = b.error || (status ? `HTTP ${status}` : "The miner is not answering");
        if (b.detail) message += `: ${b.detail}`;
        if (b.suggestion && !/\/api\/|\bresend\b|Authorization/.test(b.suggestion)) message += ` — ${b.suggestion}`;
      }
      super(message);
      this.status = status;
      this.body = b;
    }
  }

  // The pool row (0-based) a field error of a pool list names, or null.
  const poolOfError = (e) => {
    const m = e && e.body && /^pools\[(\d+)\]/.exec(e.body.field || "");
    return m ? Number(m[1]) : null;
  };

  let sessionEnded = () => {};
  let modeChanged = () => {};
  const token = () => sessionStorage.getItem(TOKEN_KEY);

  async function api(method, path, body, opts = {}) {
    const headers = { Accept: "application/json" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (_) {
      throw new ApiError(0, null);
    }
    const type = r.headers.get("Content-Type") || "";
    let data = null;
    if (opts.blob && r.ok) data = await r.blob();
    else if (type.includes("json")) data = await r.json().catch(() => null);
    else data = await r.text();
    if (!r.ok) {
      const err = new ApiError(r.status, data);
      if (r.status === 401 && t && !opts.loginAttempt) sessionEnded();
      // The mode was changed elsewhere (another tab, MQTT, the API): re-read it so the
      // navigation and the gates follow.
      if (r.status === 403 && err.body.current_mode) modeChanged();
      throw err;
    }
    return data;
  }

  function retryWords(b) {
    const s = Number(b.retry_after_s ?? b.retry_after_secs ?? b.retry_after);
    if (isNum(s) && s > 0) return `Try again in ${s < 90 ? `${Math.ceil(s)} seconds` : `${Math.ceil(s / 60)} minutes`}.`;
    return b.suggestion || b.detail || "Wait a moment and try again.";
  }

  async function login(password) {
    let body;
    try {
      body = await api("POST", "/api/auth/session", { password }, { loginAttempt: true });
    } catch (e) {
      // The envelope speaks to API clients (which header to send); the owner at the form needs
      // to know only whether the password was wrong or they must wait.
      if (e.status === 401) throw new Error("Wrong password.");
      if (e.status === 429) throw new Error(`Too many login attempts. ${retryWords(e.body)}`);
      throw e;
    }
    if (!body || !body.token) throw new Error("the miner answered without a token");
    sessionStorage.setItem(TOKEN_KEY, body.token);
    return body;
  }

  // ---------------------------------------------------------------- hooks

  // Poll `fn` every `ms` (once when ms is 0) while the tab is visible.
  function usePoll(fn, ms, deps) {
    // Each answer is kept with the inputs it was asked for (the deps are strings and numbers).
    const key = JSON.stringify(deps || []);
    const [state, setState] = useState({ data: null, error: null, loaded: false, key });
    const run = useRef(null);
    useEffect(() => {
      // `again`: a reload asked for while a request is out. That request may predate a write, so
      // one more follows it at once; starting a second chain beside it would poll twice forever.
      let alive = true, timer = null, busy = false, again = false;
      setState((s) => (s.loaded || s.key !== key ? { data: null, error: null, loaded: false, key } : s));
      const tick = async () => {
        timer = null;
        if (!alive || document.hidden) return;
        if (busy) {
          again = true;
          return;
        }
        busy = true;
        try {
          const data = await fn();
          if (alive) setState({ data, error: null, loaded: true, key });
        } catch (e) {
          if (alive) setState((s) => ({ data: s.key === key ? s.data : null, error: e, loaded: true, key }));
        }
        busy = false;
        if (!alive) return;
        if (again) {
          again = false;
          tick();
        } else if (ms) timer = setTimeout(tick, ms);
      };
      const onVisible = () => {
        if (!document.hidden && timer === null) tick();
      };
      run.current = () => {
        if (timer !== null) clearTimeout(timer);
        timer = null;
        return tick();
      };
      document.addEventListener("visibilitychange", onVisible);
      tick();
      return () => {
        alive = false;
        if (timer !== null) clearTimeout(timer);
        document.removeEventListener("visibilitychange", onVisible);
      };
    }, deps || []);
    // New inputs (another range, another service): never show the old answer under them, not
    // even in the render that runs before the effect above has cleared it.
    const current = state.key === key ? state : { data: null, error: null, loaded: false, key };
    return { ...current, reload: () => run.current && run.current() };
  }

  // A write with busy/error/result state.
  function useAction() {
    const [state, setState] = useState({ busy: false, error: null, result: null });
    const runAction = useCallback(async (fn) => {
      setState({ busy: true, error: null, result: null });
      try {
        const result = await fn();
        setState({ busy: false, error: null, result });
        return result;
      } catch (e) {
        setState({ busy: false, error: e, result: null });
        return undefined;
      }
    }, []);
    return [state, runAction];
  }

  // ---------------------------------------------------------------- small components

  const Err = ({ error }) =>
    error ? html`<p class="error" role="alert">${error.message || String(error)}</p>` : null;

  const Field = ({ label, hint, children }) => html`
    <label class="field"><span>${label}</span>${children}${hint ? html`<small>${hint}</small>` : null}</label>`;

  const Card = ({ title, src, children, actions }) => html`
    <section class="card" data-src=${src}>
      ${title ? html`<div class="card-head"><h2>${title}</h2>${actions}</div>` : null}
      ${children}
    </section>`;

  const Tile = ({ label, children, sub }) => html`
    <div class="tile"><span class="label">${label}</span><span class="value">${children}</span>
      ${sub ? html`<span class="sub">${sub}</span>` : null}</div>`;

  function stateClass(s) {
    s = String(s || "").toLowerCase();
    if (["mining", "alive", "active", "ok", "running", "pass", "completed", "tuned", "connected"].includes(s)) return "s-ok";
    if (["fault", "overheat", "missing", "dead", "error", "failed", "fail", "disconnected"].includes(s)) return "s-bad";
    return "s-warn";
  }

  const Loading = ({ q }) =>
    q.error && !q.data ? html`<${Err} error=${q.error} />` : !q.loaded ? html`<p class="muted">Loading…</p>` : null;

  // A connection error as the OS or the pool client worded it ("Failed:connect … (os error
  // 111)"), in the owner's words, keeping the original for support.
  const ERROR_WORDS = [
    [/os error 111|connection refused/i, "the pool refused the connection (nothing listens at that address and port)"],
    [/os error 110|timed out|timeout/i, "no answer from the pool (timed out)"],
    [/os error 113|no route to host/i, "no route to the pool's host"],
    [/os error 101|network is unreachable/i, "the network is unreachable"],
    [/os error 104|connection reset/i, "the pool closed the connection"],
    [/failed to lookup|name or service not known|no such host|dns/i, "the pool's host name could not be found"],
    [/unauthori[sz]ed|auth/i, "the pool refused the worker name or password"],
  ];
  function plainError(e) {
    if (!e) return "";
    const hit = ERROR_WORDS.find(([re]) => re.test(e));
    return hit ? `${hit[1]} (${e.replace(/^\s*failed:\s*/i, "")})` : String(e).replace(/^\s*failed:\s*/i, "");
  }

  // A member's unit from its name's suffix: the label drops it and the value shows it.
  const KEY_UNITS = [[/_bytes$/, "bytes"], [/_mv$/, "mv"], [/_mhz$/, "mhz"], [/_watts?$/, "watt"], [/_c$/, "celsius"], [/_percent$/, "percent"], [/_rpm$/, "rpm"], [/_(s|secs)$/, "duration"], [/_at_ms$|_time_ms$/, "time"], [/_ghs$/, "ghs"]];
  function kvLabel(k) {
    const words = k.replace(/_(bytes|mv|mhz|watts?|c|percent|rpm|s|secs|ms|ghs)$/, "").replace(/_at$/, " at").replace(/_/g, " ");
    return words.charAt(0).toUpperCase() + words.slice(1);
  }
  function kvFormat(k, v) {
    if (typeof v === "boolean") return "bool";
    if (typeof v !== "number") return "text";
    const unit = KEY_UNITS.find(([re]) => re.test(k));
    return unit ? unit[1] : "auto";
  }

  // Key/value list of an object's scalar members, labelled in words with units in the values.
  function KV({ obj, src, skip = [] }) {
    if (!obj || typeof obj !== "object") return null;
    const rows = Object.entries(obj).filter(([k, v]) => !skip.includes(k) && k !== "schema" && (v === null || typeof v !== "object"));
    return html`<dl class="kv" data-src=${src}>${rows.map(([k, v]) => html`<dt>${kvLabel(k)}</dt><dd><${V} k=${k} v=${v} f=${kvFormat(k, v)} /></dd>`)}</dl>`;
  }

  // The confirmation dialog every dangerous write goes through (native <dialog>: focus trap,
  // Escape to cancel).
  let askConfirm = async () => false;
  function ConfirmHost() {
    const [ask, setAsk] = useState(null);
    const ref = useRef(null);
    askConfirm = (title, text, label = "Confirm") =>
      new Promise((resolve) => setAsk({ title, text, label, resolve }));
    useEffect(() => {
      if (ask && ref.current && !ref.current.open) ref.current.showModal();
    }, [ask]);
    const close = (answer) => {
      if (ref.current && ref.current.open) ref.current.close();
      if (ask) ask.resolve(answer);
      setAsk(null);
    };
    return html`<dialog ref=${ref} id="confirm" aria-labelledby="confirm-title" onCancel=${(e) => { e.preventDefault(); close(false); }}>
      ${ask ? html`<h2 id="confirm-title">${ask.title}</h2><p>${ask.text}</p>
        <div class="row end"><button type="button" id="confirm-cancel" class="secondary" onClick=${() => close(false)}>Cancel</button>
        <button type="button" id="confirm-ok" class="danger" onClick=${() => close(true)}>${ask.label}</button></div>` : null}
    </dialog>`;
  }

  // ---------------------------------------------------------------- charts (uPlot)

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // One time series chart; `series` = [{label, values, unit}], `times` in Unix seconds.
  function Chart({ id, title, times, series, hue = 0 }) {
    const box = useRef(null);
    const plot = useRef(null);
    useEffect(() => {
      if (!box.current || !window.uPlot) return undefined;
      const width = Math.max(260, box.current.clientWidth);
      const colors = [cssVar("--info"), cssVar("--accent"), cssVar("--bad")];
      const opts = {
        width,
        height: 180,
        series: [{}, ...series.map((s, i) => ({ label: `${s.label} (${s.unit})`, stroke: colors[(i + hue) % colors.length], width: 2, points: { show: times.length < 40 } }))],
        axes: [{ stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") } }, { stroke: cssVar("--muted"), grid: { stroke: cssVar("--line") } }],
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
      };
      const data = [times, ...series.map((s) => s.values)];
      if (plot.current) plot.current.destroy();
      plot.current = new window.uPlot(opts, data, box.current);
      const onResize = () => plot.current && plot.current.setSize({ width: Math.max(260, box.current.clientWidth), height: 180 });
      window.addEventListener("resize", onResize);
      return () => window.removeEventListener("resize", onResize);
    }, [times, series]);
    useEffect(() => () => plot.current && plot.current.destroy(), []);
    return html`<figure class="chart" id=${id} data-points=${times.length}>
      <figcaption>${title}</figcaption><div ref=${box} role="img" aria-label=${`${title}: ${times.length} points`}></div></figure>`;
  }

  // ---------------------------------------------------------------- screens: mode gating

  const SCREENS = [
    { id: "heater", label: "Heater", needs: "home", group: "home", view: () => HeaterScreen },
    { id: "mining", label: "Overview", needs: "standard", group: "standard", view: () => MiningScreen },
    { id: "chips", label: "Chips", needs: "standard", group: "standard", view: () => ChipsScreen },
    { id: "pools", label: "Pools", needs: "home", group: "home", view: () => PoolsScreen },
    { id: "tuner", label: "Tuner", needs: "standard", group: "standard", view: () => TunerScreen },
    { id: "shares", label: "Shares", needs: "standard", group: "standard", view: () => SharesScreen },
    { id: "diagnostics", label: "Diagnostics", needs: "hacker", group: "hacker", view: () => DiagnosticsScreen },
    { id: "services", label: "Services", needs: "hacker", group: "hacker", view: () => ServicesScreen },
    { id: "logs", label: "Logs", needs: "hacker", group: "hacker", view: () => LogsScreen },
    { id: "debug", label: "Debug", needs: "hacker", group: "hacker", view: () => DebugScreen },
    { id: "catalogues", label: "Catalogues", needs: "hacker", group: "hacker", view: () => CataloguesScreen },
    { id: "network", label: "Network", needs: "hacker", group: "hacker", view: () => NetworkScreen },
    { id: "settings", label: "Settings", needs: "home", group: "home", view: () => SettingsScreen },
    { id: "firmware", label: "Firmware", needs: "home", group: "home", view: () => FirmwareScreen },
  ];
  const HOME_SCREEN = { home: "heater", standard: "mining", hacker: "mining" };

  async function switchMode(mode) {
    return api("POST", "/api/config", { system: { mode } });
  }

  function Gate({ needs, mode, onModeChanged }) {
    const [act, run] = useAction();
    return html`<section class="card gate" id="gate" role="status">
      <h2>This screen needs ${MODE_LABEL[needs]} mode</h2>
      <p>The miner is in <strong>${MODE_LABEL[mode] || mode}</strong> mode (API mode <code>${mode}</code>);
        this screen uses routes the API allows only in <strong>${MODE_LABEL[needs]}</strong> mode
        (<code>${needs}</code>) or above.</p>
      <button type="button" disabled=${act.busy} onClick=${() => run(() => switchMode(needs).then(() => onModeChanged(needs)))}>
        Switch to ${MODE_LABEL[needs]} mode</button>
      <${Err} error=${act.error} />
    </section>`;
  }

  // ---------------------------------------------------------------- Space Heater

  function noiseWord(pwm) {
    if (!isNum(pwm)) return "–";
    if (pwm < 30) return "quiet";
    if (pwm < 60) return "moderate";
    return "loud";
  }

  // The price's one home is `[tuner].electricity_price_per_kwh` (the wizard's step writes it
  // there too); the wizard's record is only the answer it gave then.
  function useEconomics() {
    const q = usePoll(() => api("GET", "/api/config"), 0);
    const values = get(q.data, "config.tuner") || {};
    if (values.currency) currency = values.currency;
    return { price: values.electricity_price_per_kwh, currency: values.currency, reload: q.reload };
  }

  function satsPerDay(ghs, difficulty) {
    if (!isNum(ghs) || !isNum(difficulty) || difficulty <= 0) return undefined;
    return ((ghs * 1e9 * 86400) / (difficulty * 4294967296)) * 3.125 * 1e8;
  }

  // What the tuner's tuned levels say about a chosen heat level: its own measurement when the
  // level was tuned, a straight line between the two tuned levels around it, else the nearest
  // one's efficiency (said so). Power in, hashrate out; J/TH follows.
  function levelAt(levels, watt) {
    const ls = (levels || []).filter((l) => isNum(l.target_watt) && l.hashrate_ths > 0);
    if (!isNum(watt) || watt <= 0 || ls.length === 0) return null;
    const hit = ls.find((l) => Math.abs(l.target_watt - watt) < 1);
    if (hit) return { ths: hit.hashrate_ths, jth: hit.efficiency_j_per_th, how: `tuned at ${FMT.watt(hit.target_watt)}` };
    const lo = ls.filter((l) => l.target_watt < watt).pop(), hi = ls.find((l) => l.target_watt > watt);
    if (lo && hi) {
      const k = (watt - lo.target_watt) / (hi.target_watt - lo.target_watt);
      const ths = lo.hashrate_ths + k * (hi.hashrate_ths - lo.hashrate_ths);
      return { ths, jth: watt / ths, how: `between the tuned ${FMT.watt(lo.target_watt)} and ${FMT.watt(hi.target_watt)}` };
    }
    const near = lo || hi;
    return { ths: watt / near.efficiency_j_per_th, jth: near.efficiency_j_per_th, how: `nearest tuned level ${FMT.watt(near.target_watt)}` };
  }

  function HeaterScreen({ status, mode, refreshStatus }) {
    const home = usePoll(() => api("GET", "/api/home/status"), STATUS_POLL_MS);
    const night = usePoll(() => api("GET", "/api/home/night-mode"), 0);
    const config = usePoll(() => api("GET", "/api/config"), 0);
    const econ = useEconomics();
    const block = usePoll(() => (MODE_RANK[mode] >= 1 ? api("GET", "/api/network/block") : Promise.resolve(null)), 60000, [mode]);
    const [act, run] = useAction();
    const h = home.data || {};
    const cfg = get(config.data, "config") || {};
    const m = (status && status.mining) || {};
    // A Sleep or On the miner accepted shows at once: the status catches up within a poll, and
    // until then the last heat reading would claim heat a sleeping miner no longer makes.
    const [pending, setPending] = useState(null);
    useEffect(() => {
      if (pending && (h.sleeping === true) === (pending === "sleep")) setPending(null);
    }, [h.sleeping, pending]);
    const sleeping = pending ? pending === "sleep" : h.sleeping === true;
    const [level, setLevel] = useState(null);
    const [room, setRoom] = useState(null);
    const cap = get(status, "mining.power_target_watt");
    // Rounded down to the slider's step: the slider never offers more than the circuit allows.
    const circuit = get(cfg, "power.circuit_limit_watt");
    const maxLevel = isNum(circuit) && circuit > 0 ? Math.floor(circuit / 50) * 50 : 2000;
    const levelValue = level !== null ? level : get(cfg, "hardware.power_target_watt") || 0;
    const price = econ.price;
    const heatKwh = isNum(h.heat_output_watt) ? (h.heat_output_watt / 1000) * 24 : undefined;
    const costDay = isNum(heatKwh) && isNum(price) ? heatKwh * price : undefined;
    const sats = satsPerDay(h.hashrate_ghs_1m, get(block.data, "network_difficulty"));
    const btcPrice = parseFloat(localStorage.getItem(BTC_KEY) || "");
    const satsValue = isNum(sats) && isNum(btcPrice) ? (sats / 1e8) * btcPrice : undefined;
    const thermo = h.thermostat || null;
    const nm = get(night.data, "night_mode") || {};
    // At the chosen level: efficiency from the tuned levels (or the measurement now when no
    // level is set), and the heat bought per unit of currency net of what the hashing earns.
    const at = levelAt(h.tuned_levels, Number(levelValue)) ||
      (!(Number(levelValue) > 0) && isNum(h.efficiency_j_per_th) ? { ths: h.hashrate_ghs_1m / 1000, jth: h.efficiency_j_per_th, how: "measured now" } : null);
    const levelKwh = Number(levelValue) > 0 ? (Number(levelValue) / 1000) * 24 : heatKwh;
    const levelSats = at ? satsPerDay(at.ths * 1000, get(block.data, "network_difficulty")) : undefined;
    const levelEarned = isNum(levelSats) && isNum(btcPrice) ? (levelSats / 1e8) * btcPrice : undefined;
    const levelCost = isNum(levelKwh) && isNum(price) ? levelKwh * price : undefined;
    const netCost = isNum(levelCost) ? levelCost - (levelEarned || 0) : undefined;
    const heatPerMoney = isNum(netCost) && netCost > 0 ? levelKwh / netCost : undefined;

    const sleepWake = (what) => run(async () => {
      await api("POST", `/api/action/${what}`, {});
      setPending(what);
      setTimeout(() => setPending((p) => (p === what ? null : p)), 15000);
      await home.reload();
      refreshStatus();
    });
    const applyLevel = () => run(async () => {
      await api("POST", "/api/config", { hardware: { power_target_watt: Number(levelValue) } });
      await config.reload();
      refreshStatus();
    });
    const applyThermostat = (enabled) => run(async () => {
      const body = { enabled };
      const target = room !== null ? room : get(cfg, "home.target_room_c");
      if (isNum(Number(target))) body.target_room_c = Number(target);
      await api("POST", "/api/home/target", body);
      await Promise.all([config.reload(), home.reload()]);
    });

    return html`<div class="screen" id="screen-heater">
      <section class="card hero" data-src="/api/home/status">
        <div class="hero-state">
          <span class=${"big " + (sleeping ? "s-warn" : stateClass(h.state))}>${sleeping ? "Sleeping" : h.heating ? "Heating" : FMT.text(h.state)}</span>
          <span class="muted">the miner is <${V} k="state" v=${h.state} f="state" /></span>
        </div>
        <div class="power-toggle" role="group" aria-label="Heater power">
          <button type="button" id="heater-on" class=${sleeping ? "secondary" : ""} aria-pressed=${!sleeping} disabled=${act.busy} onClick=${() => sleepWake("wake")}>On</button>
          <button type="button" id="heater-sleep" class=${sleeping ? "" : "secondary"} aria-pressed=${sleeping} disabled=${act.busy} onClick=${() => sleepWake("sleep")}>Sleep (off)</button>
        </div>
        <div class="tiles">
          <${Tile} label="Heat output" sub=${sleeping ? "asleep: the hashboards are off" : ""}>${sleeping
            ? html`<span id="heat-output">0 W</span>` : html`<span id="heat-output"><${V} k="heat_output_watt" v=${h.heat_output_watt} f="watt" /></span>`}<//>
          <${Tile} label="Noise" sub=${html`fans <${V} k="fan_pwm_percent" v=${h.fan_pwm_percent} f="percent" />`}>${noiseWord(h.fan_pwm_percent)}<//>
          <${Tile} label="Hottest chip"><${V} k="temp_max_c" v=${h.temp_max_c} f="celsius" /><//>
          <${Tile} label="Room" sub=${thermo && thermo.target_room_c !== undefined ? `target ${FMT.celsius(thermo.target_room_c)}` : ""}>
            ${thermo && isNum(thermo.room_c) ? html`<${V} k="thermostat.room_c" v=${thermo.room_c} f="celsius" />` : "no sensor reading"}<//>
        </div>
        <${Loading} q=${home} /><${Err} error=${home.error && home.data ? home.error : null} />
      </section>

      <section class="card" data-src="/api/config">
        <h2>Heat level</h2>
        <p class="muted">The miner turns nearly all of its power into heat. The level is its power target;
          the circuit limit, quiet hours and the thermostat can hold it lower (in force now: ${FMT.watt(cap)}).</p>
        <div class="row">
          <input id="heat-level" type="range" min="0" max=${maxLevel} step="50" value=${levelValue}
            aria-label="Heat level in watts" onInput=${(e) => setLevel(Number(e.target.value))} />
          <output for="heat-level">${levelValue ? FMT.watt(levelValue) : "no limit"}</output>
          <button type="button" id="heat-apply" disabled=${act.busy} onClick=${applyLevel}>Apply</button>
        </div>
        <div class="tiles" id="level-economics" data-src="/api/home/status">
          <${Tile} label="Efficiency at this level" sub=${at ? at.how : "no tuned level yet: turn the tuner on in Mining mode"}>
            <span id="level-efficiency" data-jth=${at ? at.jth : ""}>${at ? FMT.jth(at.jth) : "–"}</span><//>
          <${Tile} label=${`Heat per ${currency || "currency unit"}`} sub=${!isNum(price) ? "set a price in Settings"
            : isNum(levelEarned) ? (netCost > 0 ? "net of the expected mining earnings" : "the mining earnings pay for the heat")
            : "electricity only (mining earnings need the BTC price and Mining mode's network figures)"}>
            <span id="heat-per-money" data-kwh=${isNum(heatPerMoney) ? heatPerMoney : ""}>${isNum(heatPerMoney) ? num(heatPerMoney, 2) + " kWh" : "–"}</span><//>
        </div>
        <h3>Thermostat</h3>
        <div class="row">
          <${Field} label="Room target (°C)"><input id="room-target" type="number" min="5" max="30" step="0.5"
            value=${room !== null ? room : get(cfg, "home.target_room_c") ?? ""} onInput=${(e) => setRoom(e.target.value)} /><//>
          <button type="button" disabled=${act.busy} onClick=${() => applyThermostat(true)}>Use thermostat</button>
          <button type="button" class="secondary" disabled=${act.busy} onClick=${() => applyThermostat(false)}>Turn thermostat off</button>
        </div>
        ${get(cfg, "home.thermostat_enabled") && thermo && !thermo.reading_fresh
          ? html`<p class="warning" role="alert" id="thermostat-state">Thermostat: on, but it has no recent room reading, so it cannot hold the room
              at its target: the miner heats at the level above (${FMT.watt(cap)}) until a reading arrives.</p>`
          : html`<p class="muted" id="thermostat-state">Thermostat: ${get(cfg, "home.thermostat_enabled") ? "on" : "off"}.</p>`}
        <p class="muted">Room readings come from <code>POST /api/home/room-temp</code> (for example a Home Assistant automation).</p>
        <${Err} error=${act.error} />
      </section>

      <${NightMode} night=${night} nm=${nm} />

      <section class="card" data-src="/api/home/status">
        <h2>Per day</h2>
        <div class="tiles">
          <${Tile} label="Heat delivered">${isNum(heatKwh) ? num(heatKwh, 1) + " kWh" : "–"}<//>
          <${Tile} label="Electricity cost" sub=${isNum(price) ? `at ${FMT.money(price)} per kWh` : "set a price in Settings"}>
            <span id="cost-day">${FMT.money(costDay)}</span><//>
          <${Tile} label="Sats earned (expected)" sub=${isNum(satsValue) ? `≈ ${FMT.money(satsValue)}` : MODE_RANK[mode] >= 1 ? "set a BTC price in Settings to convert" : "the network difficulty is readable in Mining mode"}>
            ${isNum(sats) ? num(sats, 0) + " sats" : "–"}<//>
        </div>
      </section>
    </div>`;
  }

  function NightMode({ night, nm }) {
    const [act, run] = useAction();
    const [form, setForm] = useState(null);
    const f = form || nm;
    const set = (k, v) => setForm({ ...f, [k]: v });
    const save = () => run(async () => {
      const body = { enabled: !!f.enabled, start: f.start, end: f.end, utc_offset_min: -new Date().getTimezoneOffset() };
      if (isNum(Number(f.power_cap_watt)) && f.power_cap_watt !== "" && f.power_cap_watt !== null) body.power_cap_watt = Number(f.power_cap_watt);
      if (isNum(Number(f.fan_max_percent)) && f.fan_max_percent !== "" && f.fan_max_percent !== null) body.fan_max_percent = Number(f.fan_max_percent);
      await api("POST", "/api/home/night-mode", body);
      setForm(null);
      await night.reload();
    });
    return html`<section class="card" data-src="/api/home/night-mode">
      <h2>Night mode and quiet hours</h2>
      <p>Now: <strong>${get(night.data, "active_now") ? "quiet hours in force" : "normal"}</strong> (times in ${get(night.data, "timezone") || "UTC"})</p>
      <div class="row wrap">
        <label class="check"><input type="checkbox" id="night-enabled" checked=${!!f.enabled} onChange=${(e) => set("enabled", e.target.checked)} /> Enabled</label>
        <${Field} label="From"><input type="time" id="night-start" value=${f.start || "22:00"} onInput=${(e) => set("start", e.target.value)} /><//>
        <${Field} label="Until"><input type="time" id="night-end" value=${f.end || "07:00"} onInput=${(e) => set("end", e.target.value)} /><//>
        <${Field} label="Power cap (W)"><input type="number" min="0" step="50" value=${f.power_cap_watt ?? ""} onInput=${(e) => set("power_cap_watt", e.target.value)} /><//>
        <${Field} label="Fan limit (%)"><input type="number" min="0" max="100" value=${f.fan_max_percent ?? ""} onInput=${(e) => set("fan_max_percent", e.target.value)} /><//>
      </div>
      <button type="button" disabled=${act.busy} onClick=${save}>Save quiet hours</button>
      <${Err} error=${act.error || night.error} />
    </section>`;
  }

  // ---------------------------------------------------------------- Mining: overview

  const RANGES = [
    { id: "15m", label: "15 min", src: "/api/metrics/rolling" },
    { id: "1h", label: "1 h", src: "/api/history", last_s: 3600 },
    { id: "24h", label: "24 h", src: "/api/history", last_s: 86400 },
    { id: "7d", label: "7 d", src: "/api/history", last_s: 7 * 86400 },
  ];

  function HistoryCharts() {
    const [range, setRange] = useState("15m");
    const r = RANGES.find((x) => x.id === range);
    // /api/history answers the last 24 h unless asked for more (the tuner keeps 30 days per minute).
    const q = usePoll(() => api("GET", r.last_s ? `${r.src}?from_ms=${Date.now() - r.last_s * 1000}` : r.src), range === "15m" ? 15000 : 60000, [range]);
    const samples = (get(q.data, "samples") || []).filter((s) => !r.last_s || s.t_ms >= Date.now() - r.last_s * 1000);
    const times = samples.map((s) => s.t_ms / 1000);
    const hashrate = { label: "Hashrate", unit: "TH/s", values: samples.map((s) => s.ghs_1m / 1000) };
    const power = { label: "Power", unit: "W", values: samples.map((s) => s.power_watt) };
    const temp = { label: "Hottest chip", unit: "°C", values: samples.map((s) => s.temp_max_c) };
    const oldest = samples.length ? samples[0].t_ms : null;
    return html`<section class="card" data-src=${r.src} id="charts">
      <div class="card-head"><h2>History</h2>
        <div role="radiogroup" aria-label="Time range" class="seg">
          ${RANGES.map((x) => html`<button type="button" role="radio" aria-checked=${x.id === range} class=${x.id === range ? "on" : ""} onClick=${() => setRange(x.id)}>${x.label}</button>`)}
        </div></div>
      <p class="muted">${samples.length} samples${oldest ? ` since ${FMT.time(oldest)}` : ""}; ${get(q.data, "since") || "kept by the tuner"}.</p>
      <${Loading} q=${q} />
      <div class="charts">
        <${Chart} id="chart-hashrate" title="Hashrate" times=${times} series=${[hashrate]} />
        <${Chart} id="chart-power" title="Power" times=${times} series=${[power]} hue=${1} />
        <${Chart} id="chart-temp" title="Temperature" times=${times} series=${[temp]} hue=${2} />
      </div>
    </section>`;
  }

  function MiningScreen({ status }) {
    const s = status || {};
    const m = s.mining || {};
    const hr = m.hashrate_ghs || {};
    const eff = isNum(m.power_watt) && isNum(hr["1m"]) && hr["1m"] > 0 ? m.power_watt / (hr["1m"] / 1000) : undefined;
    return html`<div class="screen" id="screen-mining">
      <section class="tiles" data-src="/api/status" data-seq=${m.telemetry_seq}>
        <${Tile} label="State" sub=${m.state_reason}><span class=${stateClass(m.state)}><${V} k="mining.state" v=${m.state} f="state" /></span><//>
        <${Tile} label="Hashrate (5 s)" sub=${html`1 min <${V} k="mining.hashrate_ghs.1m" v=${hr["1m"]} f="ghs" /> · 15 min <${V} k="mining.hashrate_ghs.15m" v=${hr["15m"]} f="ghs" />`}>
          <${V} k="mining.hashrate_ghs.5s" v=${hr["5s"]} f="ghs" /><//>
        <${Tile} label="Power" sub=${html`target <${V} k="mining.power_target_watt" v=${m.power_target_watt} f="watt" />`}><${V} k="mining.power_watt" v=${m.power_watt} f="watt" /><//>
        <${Tile} label="Efficiency" sub="power ÷ 1 min hashrate">${FMT.jth(eff)}<//>
        <${Tile} label="Hottest chip" sub=${html`target <${V} k="mining.temp_target_c" v=${m.temp_target_c} f="celsius" />`}><${V} k="mining.temp_max_c" v=${m.temp_max_c} f="celsius" /><//>
        <${Tile} label="Shares accepted" sub=${html`<${V} k="pools.rejected" v=${get(s, "pools.rejected")} f="int" /> rejected · <${V} k="pools.stale" v=${get(s, "pools.stale")} f="int" /> stale`}>
          <${V} k="pools.accepted" v=${get(s, "pools.accepted")} f="int" /><//>
      </section>
      <${MiningBasics} status=${s} />
      <${HistoryCharts} />
      <section class="card" data-src="/api/status" data-seq=${m.telemetry_seq}>
        <h2>Hashboards</h2>
        <div class="scroll"><table id="chains">
          <thead><tr><th scope="col">Chain</th><th scope="col">State</th><th scope="col">Chips</th><th scope="col">Hashrate (1 min)</th><th scope="col">Board</th><th scope="col">Chip</th><th scope="col">Frequency</th><th scope="col">Voltage</th><th scope="col">HW errors</th></tr></thead>
          <tbody>${(s.chains || []).map((c, i) => html`<tr>
            <td><${V} k=${`chains.${i}.chain_id`} v=${c.chain_id} /></td>
            <td class=${stateClass(c.state)}><${V} k=${`chains.${i}.state`} v=${c.state} f="state" /></td>
            <td><${V} k=${`chains.${i}.chips_detected`} v=${c.chips_detected} f="int" /> / <${V} k=${`chains.${i}.chips_expected`} v=${c.chips_expected} f="int" /></td>
            <td><${V} k=${`chains.${i}.hashrate_ghs.1m`} v=${get(c, "hashrate_ghs.1m")} f="ghs" /></td>
            <td><${V} k=${`chains.${i}.temp_board_c`} v=${c.temp_board_c} f="celsius" /></td>
            <td><${V} k=${`chains.${i}.temp_chip_c`} v=${c.temp_chip_c} f="celsius" /></td>
            <td><${V} k=${`chains.${i}.frequency_mhz`} v=${c.frequency_mhz} f="mhz" /></td>
            <td><${V} k=${`chains.${i}.voltage_mv`} v=${c.voltage_mv} f="mv" /></td>
            <td><${V} k=${`chains.${i}.hw_errors`} v=${c.hw_errors} f="int" /></td></tr>`)}</tbody>
        </table></div>
        ${(s.chains || []).length === 0 ? html`<p class="muted">${get(s, "sources.hw_agent.up") === false ? "hw-agent is restarting" : "no hashboards"}</p>` : null}
        <h2>Fans</h2>
        <div class="scroll"><table id="fans">
          <thead><tr><th scope="col">Fan</th><th scope="col">Speed</th><th scope="col">Duty</th><th scope="col">Status</th></tr></thead>
          <tbody>${(s.fans || []).map((f, i) => html`<tr><td><${V} k=${`fans.${i}.fan_id`} v=${f.fan_id} /></td>
            <td><${V} k=${`fans.${i}.rpm`} v=${f.rpm} f="rpm" /></td><td><${V} k=${`fans.${i}.pwm_percent`} v=${f.pwm_percent} f="percent" /></td>
            <td class=${f.stalled ? "s-bad" : "s-ok"}>${f.stalled ? "stalled" : "ok"}</td></tr>`)}</tbody>
        </table></div>
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Mining: chips heat map

  // Each cell shows its number in the unit the legend names (a unit in every 46 px cell was cut
  // to "GH/" on a phone); light tones with dark text keep the labels above 4.5:1.
  const CHIP_METRICS = {
    temp_c: { label: "Temperature", f: "num1", unit: "°C" },
    ghs_1m: { label: "Hashrate (1 min)", f: "num1", unit: "GH/s" },
    hw_errors: { label: "HW errors", f: "int", unit: "errors" },
  };
  const TONES = { ok: 120, warn: 40, bad: 0 };
  const toneColour = (tone) => `hsl(${TONES[tone]} 65% 72%)`;

  // A chip's tone against fixed references, never against the spread of today's values: a chip
  // below the temperature target is fine however much warmer than its neighbours, and a chip
  // within 10 % of the median chip's hashrate is fine however slightly it trails.
  function chipTone(metric, v, ref) {
    if (!isNum(v)) return null;
    if (metric === "temp_c") {
      if (isNum(ref.hot) && v >= ref.hot) return "bad";
      return isNum(ref.target) && v > ref.target ? "warn" : "ok";
    }
    if (metric === "ghs_1m") {
      if (!(ref.median > 0)) return "ok";
      const r = v / ref.median;
      return r >= 0.9 ? "ok" : r > 0.5 ? "warn" : "bad";
    }
    return v === 0 ? "ok" : v < 10 ? "warn" : "bad";
  }

  function chipLegend(metric, ref) {
    const c = (v) => FMT.celsius(v), g = (v) => FMT.ghs(v);
    if (metric === "temp_c") {
      return [["ok", `at or below the target ${c(ref.target)}`], ["warn", `above the target`], ["bad", `at or above ${c(ref.hot)} (hot)`]];
    }
    if (metric === "ghs_1m") {
      return [["ok", `within 10 % of the median chip (${g(ref.median)})`], ["warn", `10–50 % below it`], ["bad", `half of it or less`]];
    }
    return [["ok", "no errors"], ["warn", "1–9 errors"], ["bad", "10 or more"]];
  }

  function ChipsScreen({ status }) {
    const q = usePoll(() => api("GET", "/api/chips"), SCREEN_POLL_MS);
    const config = usePoll(() => api("GET", "/api/config"), 0);
    const [metric, setMetric] = useState("temp_c");
    const chains = get(q.data, "chains") || [];
    const m = CHIP_METRICS[metric];
    const rates = chains.flatMap((c) => (c.chips || []).filter((x) => x.alive).map((x) => x.ghs_1m)).filter(isNum).sort((a, b) => a - b);
    const ref = {
      target: get(status, "mining.temp_target_c") ?? get(config.data, "config.thermal.target_temp_c"),
      hot: get(config.data, "config.thermal.hot_temp_c"),
      median: rates.length ? rates[Math.floor(rates.length / 2)] : undefined,
    };
    const colour = (x) => {
      if (!x.alive) return "var(--dead)";
      const tone = chipTone(metric, x[metric], ref);
      return tone ? toneColour(tone) : "var(--line)";
    };
    return html`<div class="screen" id="screen-chips">
      <section class="card" data-src="/api/chips">
        <div class="card-head"><h2>Chips</h2>
          <${Field} label="Colour by"><select id="chip-metric" value=${metric} onChange=${(e) => setMetric(e.target.value)}>
            ${Object.entries(CHIP_METRICS).map(([k, x]) => html`<option value=${k}>${x.label}</option>`)}</select><//></div>
        <ul class="chip-legend" id="chip-legend" aria-label=${`${m.label} colours`}>
          ${chipLegend(metric, ref).map(([tone, words]) => html`<li data-tone=${tone}><span class="swatch" style=${{ background: toneColour(tone) }}></span>${words}</li>`)}
          <li><span class="swatch" style=${{ background: "var(--dead)" }}></span>dead</li>
        </ul>
        <p class="muted">Numbers in ${m.unit}.</p>
        <${Loading} q=${q} />
        ${chains.map((c, ci) => html`<h3>Chain <${V} k=${`chains.${ci}.chain_id`} v=${c.chain_id} /> · ${(c.chips || []).length} chips</h3>
          <div class="heatmap" role="list">
            ${(c.chips || []).map((x, i) => html`<div role="listitem" class=${"chip" + (x.alive ? "" : " dead")} tabindex="0" style=${{ background: colour(x) }}
              data-tone=${x.alive ? chipTone(metric, x[metric], ref) || "" : "dead"}
              title=${`chip ${x.index}: ${FMT.celsius(x.temp_c)}, ${FMT.ghs(x.ghs_1m)}, ${x.hw_errors} HW errors, ${FMT.mhz(x.frequency_mhz)}`}
              aria-label=${`chip ${x.index}: ${FMT[m.f](x[metric])} ${m.unit}${x.alive ? "" : ", dead"}`}>
              <${V} k=${`chains.${ci}.chips.${i}.${metric}`} v=${x[metric]} f=${m.f} /></div>`)}
          </div>`)}
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Pools

  function PoolsScreen() {
    const q = usePoll(() => api("GET", "/api/pools"), SCREEN_POLL_MS);
    const policy = usePoll(() => api("GET", "/api/pools/failover_policy"), 30000);
    const [draft, setDraft] = useState(null);
    const [tests, setTests] = useState({});
    const [act, run] = useAction();
    const pools = get(q.data, "pools") || [];
    const rows = draft || pools.map((p) => ({ url: p.url, user: p.user, password: p.password, enabled: p.enabled !== false, quota: p.quota || 0 }));
    const edit = (i, k, v) => setDraft(rows.map((r, j) => (j === i ? { ...r, [k]: v } : r)));
    const move = (i, d) => {
      const next = rows.slice();
      const [r] = next.splice(i, 1);
      next.splice(i + d, 0, r);
      setDraft(next);
    };
    const save = () => run(async () => {
      const body = { pools: rows.map((r, i) => ({ url: r.url.trim(), user: r.user.trim(), password: r.password || "", enabled: !!r.enabled, priority: i, quota: Number(r.quota) || 0 })) };
      await api("POST", "/api/pools", body);
      setDraft(null);
      // A new order can put the miner on another pool: the switch history shows it at once.
      await Promise.all([q.reload(), policy.reload()]);
      return "saved";
    });
    // A test's result belongs to the pool it tested (URL and worker), not to a row number: it
    // moves with the pool when the list is reordered and is gone once either is edited.
    const testKey = (r) => `${r.url.trim()}|${r.user.trim()}`;
    const test = async (i) => {
      const r = rows[i];
      const key = testKey(r);
      setTests((t) => ({ ...t, [key]: { busy: true } }));
      try {
        const body = { url: r.url.trim(), user: r.user.trim() };
        if (r.password && r.password !== "********") body.password = r.password;
        const res = await api("POST", "/api/pools/test", body);
        setTests((t) => ({ ...t, [key]: { res } }));
      } catch (e) {
        setTests((t) => ({ ...t, [key]: { error: e } }));
      }
    };
    const p = policy.data || {};
    return html`<div class="screen" id="screen-pools">
      <section class="card" data-src="/api/pools">
        <div class="card-head"><h2>Pools</h2><span class="muted">active: pool ${isNum(get(q.data, "active_index")) && q.data.active_index >= 0 ? q.data.active_index + 1 : "–"}</span></div>
        <${Loading} q=${q} />
        <ol class="pool-list">
          ${rows.map((r, i) => {
            const live = draft ? null : get(pools[i], "status");
            const t = tests[testKey(r)] || {};
            const rowError = poolOfError(act.error) === i ? act.error : null;
            return html`<li class="pool" data-index=${i}>
              <div class="row wrap">
                <${Field} label="URL"><input class="pool-url wide" value=${r.url} onInput=${(e) => edit(i, "url", e.target.value)} placeholder="stratum+tcp://host:3333" /><//>
                <${Field} label="Worker"><input class="pool-user" value=${r.user} onInput=${(e) => edit(i, "user", e.target.value)} /><//>
                <${Field} label="Password"><input class="pool-pass" type="password" autocomplete="off" value=${r.password} onInput=${(e) => edit(i, "password", e.target.value)} /><//>
                <label class="check"><input type="checkbox" class="pool-enabled" checked=${r.enabled} onChange=${(e) => edit(i, "enabled", e.target.checked)} /> Enabled</label>
              </div>
              ${live ? html`<p class="muted">State <span class=${stateClass(live.active ? "active" : live.state)}><${V} k=${`pools.${i}.status.state`} v=${live.state} f="state" /></span>${live.active ? " · active" : ""} ·
                accepted <${V} k=${`pools.${i}.status.accepted`} v=${live.accepted} f="int" /> · rejected <${V} k=${`pools.${i}.status.rejected`} v=${live.rejected} f="int" />
                ${live.last_error ? html` · last error: <span class="pool-last-error">${plainError(live.last_error)}</span>` : null}</p>` : null}
              <div class="row wrap">
                <button type="button" class="secondary" aria-label=${`Move pool ${i + 1} up`} disabled=${i === 0} onClick=${() => move(i, -1)}>↑</button>
                <button type="button" class="secondary" aria-label=${`Move pool ${i + 1} down`} disabled=${i === rows.length - 1} onClick=${() => move(i, 1)}>↓</button>
                <button type="button" class="secondary pool-test" disabled=${t.busy} onClick=${() => test(i)}>Test</button>
                <button type="button" class="secondary" onClick=${() => setDraft(rows.filter((_, j) => j !== i))}>Delete</button>
                ${t.busy ? html`<span class="muted">testing…</span>` : null}
                ${t.res ? html`<span class=${"pool-test-result " + (t.res.ok ? "s-ok" : "s-bad")} role="status">${t.res.ok ? "reachable: " : "failed: "}
                  ${(t.res.steps || []).map((s) => `${s.name} ${s.ok ? "ok" : "failed"} (${s.elapsed_ms} ms)`).join(", ")} ${plainError(t.res.error)}</span>` : null}
                <${Err} error=${t.error} />
              </div>
              ${rowError ? html`<p class="error pool-error" role="alert">${rowError.message}</p>` : null}
            </li>`;
          })}
        </ol>
        <div class="row">
          <button type="button" class="secondary" id="pool-add" onClick=${() => setDraft([...rows, { url: "", user: "", password: "", enabled: true, quota: 0 }])}>Add pool</button>
          <button type="button" id="pool-save" disabled=${!draft || act.busy} onClick=${save}>Save pools</button>
          ${draft ? html`<button type="button" class="secondary" onClick=${() => setDraft(null)}>Discard changes</button>` : null}
          ${act.result ? html`<span class="s-ok" role="status" id="pool-saved">Saved</span>` : null}
        </div>
        <${Err} error=${poolOfError(act.error) === null ? act.error : null} />
      </section>
      <section class="card" data-src="/api/pools/failover_policy">
        <h2>Failover</h2>
        <p>Strategy: <strong><${V} k="strategy" v=${p.strategy} /></strong></p>
        <h3>Recent switches</h3>
        ${(p.recent_switches || []).length === 0 ? html`<p class="muted">No pool switch since the pool client started.</p>` : html`<ul>
          ${(p.recent_switches || []).slice(-10).reverse().map((s) => html`<li class="pool-switch">${FMT.time(s.timestamp_ms)}: ${isNum(s.from_index) && s.from_index >= 0
            ? `pool ${s.from_index + 1} → pool ${s.to_index + 1}` : `started on pool ${s.to_index + 1}`}: ${s.reason}</li>`)}</ul>`}
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Tuner

  // J/TH against power of the tuned points: a small SVG (points sorted by power and joined), so
  // the screen needs no second chart library and stays readable with two points or twenty.
  function EfficiencyCurve({ profiles }) {
    const pts = profiles
      .map((p) => ({ id: p.id || p.name, w: get(p, "measured.power_watt"), j: get(p, "measured.efficiency_j_per_th") }))
      .filter((p) => isNum(p.w) && isNum(p.j) && p.w > 0 && p.j > 0)
      .sort((a, b) => a.w - b.w);
    if (pts.length === 0) return html`<p class="muted" id="tuner-efficiency-empty">No tuned point has a measurement yet.</p>`;
    const W = 320, H = 160, pad = 34;
    const span = (xs) => { const lo = Math.min(...xs), hi = Math.max(...xs); return hi > lo ? [lo, hi] : [lo * 0.9, hi * 1.1 || 1]; };
    const [w0, w1] = span(pts.map((p) => p.w)), [j0, j1] = span(pts.map((p) => p.j));
    const x = (w) => pad + ((w - w0) / (w1 - w0)) * (W - 2 * pad), y = (j) => H - pad + 10 - ((j - j0) / (j1 - j0)) * (H - 2 * pad);
    return html`<figure class="chart" id="tuner-efficiency" data-points=${pts.length}>
      <figcaption>Efficiency of the tuned points (J/TH against power; lower is better)</figcaption>
      <svg viewBox=${`0 0 ${W} ${H}`} role="img" aria-label=${`J/TH against power: ${pts.length} tuned points`} class="curve">
        <polyline fill="none" stroke="currentColor" stroke-width="1.5" points=${pts.map((p) => `${x(p.w)},${y(p.j)}`).join(" ")} />
        ${pts.map((p) => html`<circle cx=${x(p.w)} cy=${y(p.j)} r="3.5"><title>${`${p.id}: ${FMT.watt(p.w)}, ${FMT.jth(p.j)}`}</title></circle>`)}
        <text x=${pad} y=${H - 4}>${FMT.watt(w0)}</text><text x=${W - pad} y=${H - 4} text-anchor="end">${FMT.watt(w1)}</text>
        <text x="2" y=${y(j1) + 4}>${num(j1, 0)}</text><text x="2" y=${y(j0) + 4}>${num(j0, 0)}</text>
      </svg></figure>`;
  }

  // Each chip's frequency from /api/autotuner/visibility, coloured from the slowest (red) to the
  // fastest (green); dead chips grey; the tooltip carries the tuner's reason.
  function FrequencyMap({ vis }) {
    const chips = get(vis, "chips") || [];
    if (chips.length === 0) return html`<p class="muted" id="tuner-freq-empty">No chip measured since the last point change.</p>`;
    const lo = vis.frequency_min_mhz, hi = vis.frequency_max_mhz;
    const color = (c) => (!c.alive ? "var(--dead)" : `hsl(${Math.round(hi > lo ? (120 * (c.frequency_mhz - lo)) / (hi - lo) : 120)} 65% 38%)`);
    const chains = [...new Set(chips.map((c) => c.chain_id))];
    return html`<div id="tuner-freq-map" data-chips=${chips.length}>
      <p class="muted">${hi > lo ? `${FMT.mhz(lo)} (red) to ${FMT.mhz(hi)} (green), mean ${FMT.mhz(vis.frequency_mean_mhz)}` : `every chip at ${FMT.mhz(hi)}`}; ${vis.summary.ok} ok, ${vis.summary.weak} weak (outlined), ${vis.summary.dead} dead (grey).</p>
      ${chains.map((ch) => html`<h3>Chain ${ch}</h3><div class="heatmap" role="list">
        ${chips.filter((c) => c.chain_id === ch).map((c) => html`<div role="listitem" class=${c.verdict === "weak" ? "chip weak" : "chip"} tabindex="0" style=${{ background: color(c) }}
          title=${`chip ${c.chip}: ${FMT.mhz(c.frequency_mhz)}, ${c.verdict}: ${c.why}`} aria-label=${`chip ${c.chip}: ${FMT.mhz(c.frequency_mhz)}, ${c.verdict}`}>
          ${num(c.frequency_mhz, 0)}</div>`)}</div>`)}
    </div>`;
  }

  function TunerScreen() {
    // /status answers the full run state (active, mode, steps, transitions, profile); the
    // compact /state has none of them.
    const q = usePoll(() => api("GET", "/api/autotuner/status"), SCREEN_POLL_MS);
    const profiles = usePoll(() => api("GET", "/api/profiles"), 30000);
    const vis = usePoll(() => api("GET", "/api/autotuner/visibility"), SCREEN_POLL_MS);
    const [act, run] = useAction();
    const [name, setName] = useState("");
    const s = q.data || {};
    const write = (fn) => run(async () => {
      const r = await fn();
      await Promise.all([q.reload(), profiles.reload()]);
      return r;
    });
    const allProfiles = [...(get(profiles.data, "tuned") || []), ...(get(profiles.data, "saved") || [])];
    const inForce = s.profile || get(profiles.data, "active_profile") || null;
    return html`<div class="screen" id="screen-tuner">
      <section class="card" data-src="/api/autotuner/status">
        <div class="card-head"><h2>Autotuner</h2>
          <label class="check"><input type="checkbox" id="tuner-active" checked=${s.active === true} disabled=${act.busy || !q.data}
            onChange=${() => write(() => api("PUT", "/api/autotuner/active", { active: s.active !== true }))} /> Tuning on</label></div>
        <${Loading} q=${q} />
        <div class="tiles">
          <${Tile} label="State" sub=${html`<span id="tuner-reason"><${V} k="reason" v=${s.reason} /></span>`}><span class=${stateClass(s.state)}><${V} k="state" v=${s.state} f="state" /></span><//>
          <${Tile} label="Mode" sub=${html`profile <${V} k="profile" v=${s.profile} />`}><${V} k="mode" v=${s.mode} /><//>
          <${Tile} label="Power target"><${V} k="power_target_watt" v=${s.power_target_watt} f="watt" /><//>
          <${Tile} label="Steps taken" sub=${html`since ${FMT.time(s.since_ms)}`}><${V} k="steps" v=${s.steps} f="int" /><//>
          <${Tile} label="Voltage" sub=${html`measured <${V} k="efficiency_j_per_th" v=${s.efficiency_j_per_th} f="jth" />`}>${s.voltage_mv > 0 ? html`<${V} k="voltage_mv" v=${s.voltage_mv} f="mv" />` : "stock"}<//>
        </div>
        <div class="row wrap">
          <button type="button" class="secondary" disabled=${act.busy} onClick=${() => write(() => api("POST", "/api/autotuner/decrement_power_target", {}))}>Power target −</button>
          <button type="button" class="secondary" disabled=${act.busy} onClick=${() => write(() => api("POST", "/api/autotuner/increment_power_target", {}))}>Power target +</button>
          <button type="button" class="secondary" disabled=${act.busy} onClick=${() => write(() => api("POST", "/api/autotuner/decrement_hashrate_target", {}))}>Hashrate target −</button>
          <button type="button" class="secondary" disabled=${act.busy} onClick=${() => write(() => api("POST", "/api/autotuner/increment_hashrate_target", {}))}>Hashrate target +</button>
        </div>
        <${Err} error=${act.error || (q.data ? q.error : null)} />
        <h3>Recent transitions</h3>
        ${(s.transitions || []).length === 0 ? html`<p class="muted">${q.data ? "No state change yet." : ""}</p>` : html`<ul id="tuner-transitions">
          ${s.transitions.slice(-8).reverse().map((t) => html`<li>${FMT.time(t.at_ms)}: ${t.from || "start"} → ${t.to}${t.reason ? ` (${t.reason})` : ""}</li>`)}</ul>`}
      </section>
      <section class="card" data-src="/api/autotuner/visibility">
        <h2>Chip frequencies</h2>
        <${Loading} q=${vis} />
        ${vis.data ? html`<${FrequencyMap} vis=${vis.data} />` : null}
      </section>
      <section class="card" data-src="/api/profiles">
        <h2>Profiles</h2>
        <${EfficiencyCurve} profiles=${get(profiles.data, "tuned") || []} />
        ${allProfiles.length === 0 ? html`<p class="muted">No tuned or saved profile yet.</p>` : html`<ul>
          ${allProfiles.map((p) => html`<li class=${(p.id || p.name) === inForce ? "profile-active" : ""} aria-current=${(p.id || p.name) === inForce ? "true" : undefined}>
            ${(p.id || p.name) === inForce ? html`<strong>${p.id || p.name}</strong> (in force)` : p.id || p.name} ${p.mode ? `(${p.mode})` : ""}
            <button type="button" class="secondary small" disabled=${act.busy} onClick=${() => write(() => api("POST", "/api/profiles", { name: p.id || p.name, action: "apply" }))}>Apply</button></li>`)}</ul>`}
        <div class="row">
          <${Field} label="Save the current point as"><input value=${name} onInput=${(e) => setName(e.target.value)} maxlength="64" /><//>
          <button type="button" disabled=${!name || act.busy} onClick=${() => write(() => api("POST", "/api/profiles", { name, action: "save" }))}>Save profile</button>
        </div>
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Shares

  function SharesScreen() {
    const stats = usePoll(() => api("GET", "/api/stats"), SCREEN_POLL_MS);
    const hist = usePoll(() => api("GET", "/api/history/shares"), 60000);
    const sh = get(stats.data, "shares") || {};
    const samples = get(hist.data, "samples") || [];
    const times = samples.map((s) => s.t_ms / 1000);
    return html`<div class="screen" id="screen-shares">
      <section class="card" data-src="/api/stats">
        <h2>Shares</h2>
        <${Loading} q=${stats} />
        <div class="tiles">
          <${Tile} label="Accepted"><${V} k="shares.accepted" v=${sh.accepted} f="int" /><//>
          <${Tile} label="Rejected"><${V} k="shares.rejected" v=${sh.rejected} f="int" /><//>
          <${Tile} label="Stale"><${V} k="shares.stale" v=${sh.stale} f="int" /><//>
          <${Tile} label="Best share"><${V} k="shares.best_share" v=${sh.best_share} f="share" /><//>
        </div>
        <h3>Per pool and reject reasons</h3>
        <div class="scroll"><table>
          <thead><tr><th scope="col">Pool</th><th scope="col">Accepted</th><th scope="col">Rejected</th><th scope="col">Stale</th><th scope="col">Reject reasons</th></tr></thead>
          <tbody>${(sh.pools || []).map((p, i) => html`<tr><td class="url">${p.url}</td><td><${V} k=${`shares.pools.${i}.accepted`} v=${p.accepted} f="int" /></td>
            <td><${V} k=${`shares.pools.${i}.rejected`} v=${p.rejected} f="int" /></td><td>${FMT.int(p.stale)}</td>
            <td>${Object.entries(p.reject_reasons || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "none"}</td></tr>`)}</tbody>
        </table></div>
      </section>
      <section class="card" data-src="/api/history/shares">
        <h2>Shares per minute</h2>
        <${Chart} id="chart-shares" title="Shares per minute" times=${times}
          series=${[{ label: "Accepted", unit: "/min", values: samples.map((s) => s.accepted_delta) }, { label: "Rejected", unit: "/min", values: samples.map((s) => s.rejected_delta) }]} />
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Hacker: diagnostics

  const DIAG_KINDS = [
    { id: "board-health", label: "Board health", duration: 3 },
    { id: "chip-health", label: "Chip health", duration: 10 },
    { id: "hashreport", label: "Hash report", duration: 10 },
  ];

  function DiagnosticRun({ kind }) {
    const status = usePoll(() => api("GET", `/api/diagnostics/${kind.id}/status`), 2000);
    const [result, setResult] = useState(null);
    const [act, run] = useAction();
    const st = status.data || {};
    const running = st.state === "running";
    useEffect(() => {
      if (st.state && !running && st.run_id) {
        api("GET", `/api/diagnostics/${kind.id}/result`).then(setResult).catch(() => setResult(null));
      }
    }, [st.run_id, st.state]);
    const report = get(result, "report") || {};
    return html`<section class="card diag" id=${`diag-${kind.id}`} data-src=${`/api/diagnostics/${kind.id}/status`}>
      <div class="card-head"><h2>${kind.label}</h2>
        <button type="button" disabled=${running || act.busy} onClick=${() => run(async () => {
          await api("POST", `/api/diagnostics/${kind.id}/start`, { duration_s: kind.duration });
          await status.reload();
        })}>Run (${kind.duration} s)</button></div>
      <p>State: <span class=${stateClass(st.state)}><${V} k="state" v=${st.state} /></span>
        ${running ? html` <progress max="100" value=${st.progress_percent || 0} aria-label=${`${kind.label} progress`}></progress> ${FMT.int(st.progress_percent)} %` : null}</p>
      ${result ? html`<p>Verdict of the last run: <strong class=${stateClass(result.verdict)}>${result.verdict}</strong> (finished ${FMT.time(get(result, "run.finished_ms"))})</p>
        <div class="scroll"><table><thead><tr><th scope="col">Chain</th><th scope="col">Verdict</th><th scope="col">Details</th></tr></thead>
          <tbody>${(report.chains || []).map((c) => html`<tr><td>${c.chain_id}</td><td class=${stateClass(c.verdict)}>${c.verdict || c.state}</td>
            <td>${c.summary ? `ok ${c.summary.ok}, weak ${c.summary.weak}, dead ${c.summary.dead}` : isNum(c.percent) ? `${num(c.percent, 1)} % of nominal` : (c.checks || []).map((k) => `${k.check} ${k.verdict}`).join(", ")}</td></tr>`)}</tbody></table></div>` : null}
      <${Err} error=${act.error || st.error} />
    </section>`;
  }

  const DiagnosticsScreen = () => html`<div class="screen" id="screen-diagnostics">${DIAG_KINDS.map((k) => html`<${DiagnosticRun} kind=${k} />`)}</div>`;

  // ---------------------------------------------------------------- Hacker: services, logs

  function ServicesScreen() {
    const q = usePoll(() => api("GET", "/api/system/health"), 5000);
    const [act, run] = useAction();
    const restart = (name) => run(async () => {
      if (!(await askConfirm(`Restart ${name}?`, `The supervisor stops ${name} and starts it again. Mining pauses briefly if it is a mining service.`, "Restart"))) return null;
      const r = await api("POST", "/api/action/restart", { service: name });
      await q.reload();
      return r;
    });
    const services = get(q.data, "services") || [];
    return html`<div class="screen" id="screen-services">
      <section class="card" data-src="/api/system/health">
        <h2>Services</h2>
        <p>Healthy: <strong class=${q.data && q.data.healthy ? "s-ok" : "s-warn"}><${V} k="healthy" v=${get(q.data, "healthy")} f="bool" /></strong></p>
        <${Loading} q=${q} />
        <div class="scroll"><table id="services">
          <thead><tr><th scope="col">Service</th><th scope="col">State</th><th scope="col" class="wide-only">PID</th><th scope="col">Restarts</th><th scope="col" class="wide-only">Up for</th><th scope="col" class="wide-only">Last exit</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
          <tbody>${services.map((s, i) => html`<tr data-service=${s.name}>
            <td><${V} k=${`services.${i}.name`} v=${s.name} /></td><td class=${stateClass(s.state)}><${V} k=${`services.${i}.state`} v=${s.state} f="state" /></td>
            <td class="wide-only"><${V} k=${`services.${i}.pid`} v=${s.pid} /></td><td class="restarts"><${V} k=${`services.${i}.restarts`} v=${s.restarts} f="int" /></td>
            <td class="wide-only">${FMT.duration(s.uptime_s)}</td><td class="wide-only">${FMT.text(s.last_exit)}</td>
            <td><button type="button" class="secondary small restart" disabled=${act.busy} onClick=${() => restart(s.name)}>Restart</button></td></tr>`)}</tbody>
        </table></div>
        <${Err} error=${act.error} />
      </section>
    </div>`;
  }

  // The merged log (GET /api/logs): every service in time order, filtered by the miner. With
  // Follow on, new lines are fetched every LOG_FOLLOW_MS with `since` = the newest time shown
  // (the dashboard cannot reach /ws?topic=logs, which lives on the API port) and appended;
  // lines of that same millisecond already shown are skipped.
  const LOG_FOLLOW_MS = 2000;
  const LOG_KEEP = 2000;
  const LOG_LEVELS = ["trace", "debug", "info", "warn", "error"];
  const logKey = (e) => `${e.time_ms} ${e.service} ${e.message}`;

  function logQuery(f, extra) {
    const p = new URLSearchParams();
    if (f.service) p.set("service", f.service);
    p.set("level", f.level);
    if (f.q) p.set("q", f.q);
    for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
    return p.toString();
  }

  function LogsScreen() {
    const health = usePoll(() => api("GET", "/api/system/health"), 0);
    const [filter, setFilter] = useState({ service: "", level: "info", q: "" });
    const [text, setText] = useState("");
    const [follow, setFollow] = useState(true);
    const [view, setView] = useState({ entries: [], truncated: false, error: null, loaded: false });
    const [act, run] = useAction();
    const box = useRef(null);
    const atEnd = useRef(true);
    useEffect(() => {
      let alive = true, timer = null, entries = [];
      setView({ entries: [], truncated: false, error: null, loaded: false });
      const more = async (first) => {
        timer = null;
        if (!alive) return;
        try {
          const last = entries[entries.length - 1];
          const extra = first || !last ? { limit: 500 } : { since: last.time, limit: 5000 };
          const body = await api("GET", `/api/logs?${logQuery(filter, extra)}`);
          const seen = new Set(entries.filter((e) => last && e.time_ms === last.time_ms).map(logKey));
          const fresh = (body.entries || []).filter((e) => !seen.has(logKey(e)));
          entries = entries.concat(fresh).slice(-LOG_KEEP);
          if (alive) setView({ entries, truncated: first ? body.truncated : false, error: null, loaded: true });
        } catch (e) {
          if (alive) setView((v) => ({ ...v, error: e, loaded: true }));
        }
        if (alive && follow) timer = setTimeout(() => more(false), LOG_FOLLOW_MS);
      };
      more(true);
      return () => {
        alive = false;
        if (timer !== null) clearTimeout(timer);
      };
    }, [filter.service, filter.level, filter.q, follow]);
    useEffect(() => {
      if (box.current && follow && atEnd.current) box.current.scrollTop = box.current.scrollHeight;
    }, [view.entries]);
    const onScroll = (e) => {
      const el = e.currentTarget;
      atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
    };
    const names = (get(health.data, "services") || []).map((s) => s.name);
    const set = (k) => (e) => setFilter({ ...filter, [k]: e.target.value });
    const search = (e) => {
      e.preventDefault();
      setFilter({ ...filter, q: text.trim() });
    };
    const save = (format) => run(async () => {
      const blob = await api("GET", `/api/logs/download?${logQuery(filter, { format })}`, undefined, { blob: true });
      download(blob, `svcos-logs.${format === "ndjson" ? "ndjson" : "txt"}`);
      return true;
    });
    return html`<div class="screen" id="screen-logs">
      <section class="card" data-src="/api/logs">
        <div class="card-head"><h2>Logs</h2>
          <label class="check"><input type="checkbox" id="log-follow" checked=${follow} onChange=${(e) => setFollow(e.target.checked)} /> Follow live</label></div>
        <form class="log-filters" onSubmit=${search}>
          <${Field} label="Service"><select id="log-service" value=${filter.service} onChange=${set("service")}>
            <option value="">All services</option>
            ${names.map((n) => html`<option value=${n}>${n}</option>`)}</select><//>
          <${Field} label="Lowest level"><select id="log-level" value=${filter.level} onChange=${set("level")}>
            ${LOG_LEVELS.map((l) => html`<option value=${l}>${l}</option>`)}</select><//>
          <${Field} label="Search"><input id="log-search" type="search" value=${text} maxlength="200" onInput=${(e) => setText(e.target.value)} /><//>
          <div class="row"><button type="submit" class="secondary" id="log-search-go">Search</button>
            <button type="button" class="secondary" id="log-download-text" disabled=${act.busy} onClick=${() => save("text")}>Download text</button>
            <button type="button" class="secondary" id="log-download-ndjson" disabled=${act.busy} onClick=${() => save("ndjson")}>Download NDJSON</button></div>
        </form>
        <${Err} error=${view.error || act.error} />
        <div id="log-lines" class="log-view" ref=${box} onScroll=${onScroll} tabindex="0" role="log" aria-live=${follow ? "polite" : "off"} aria-label="Log lines of every service, oldest first">
          ${view.entries.map((e) => html`<div class=${`log-row lv-${e.level}`} data-service=${e.service} data-level=${e.level}>
            <time datetime=${e.time}>${e.time}</time> <span class="log-level">${e.level.toUpperCase()}</span> <span class="log-service">${e.service}</span> <span class="log-msg">${e.message}</span></div>`)}
          ${view.loaded && view.entries.length === 0 && !view.error ? html`<p class="muted" id="log-empty">No line matches.</p>` : null}
        </div>
        <p class="muted" id="log-count">${FMT.int(view.entries.length)} lines${view.truncated ? ", older ones left out" : ""}${follow ? ", following" : ""}. Times are UTC, when the supervisor read the line.</p>
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- Hacker: debug writes

  const DEBUG_WRITES = [
    { id: "pid", path: "/api/debug/pid-params", title: "Fan PID gains", fields: [["kp", "Kp", 2], ["ki", "Ki", 0.1], ["kd", "Kd", 0.5]] },
    { id: "psu", path: "/api/debug/psu/control", title: "PSU output voltage", fields: [["voltage_mv", "Voltage (mV)", 12000]] },
    { id: "freq", path: "/api/debug/chip/frequency", title: "Chain frequency", fields: [["chain_id", "Chain", 0], ["frequency_mhz", "Frequency (MHz)", 550]] },
    { id: "volt", path: "/api/debug/chip/voltage", title: "Chain voltage", fields: [["chain_id", "Chain", 0], ["voltage_mv", "Voltage (mV)", 8800]] },
    { id: "reg", path: "/api/debug/registers", title: "Write a chip register", fields: [["chain_id", "Chain", 0], ["chip", "Chip", 0], ["register", "Register", "0x18"], ["value", "Value", "0x00000000"]] },
  ];

  function DebugWrite({ spec }) {
    const [values, setValues] = useState(Object.fromEntries(spec.fields.map(([k, , d]) => [k, String(d)])));
    const [act, run] = useAction();
    const submit = (e) => {
      e.preventDefault();
      run(async () => {
        const body = { confirm: true };
        for (const [k] of spec.fields) {
          const raw = values[k].trim();
          body[k] = /^0x/i.test(raw) ? raw : Number(raw);
        }
        const detail = spec.fields.map(([k, label]) => `${label} = ${values[k]}`).join(", ");
        if (!(await askConfirm(`${spec.title}?`, `This writes to the hardware (${spec.path}: ${detail}). Wrong values can stop hashing or damage the board.`, "Write"))) return null;
        return api("POST", spec.path, body);
      });
    };
    return html`<form class="card debug-write" id=${`debug-${spec.id}`} onSubmit=${submit} data-src=${spec.path}>
      <h2>${spec.title}</h2>
      <div class="row wrap">${spec.fields.map(([k, label]) => html`<${Field} label=${label}><input name=${k} value=${values[k]} onInput=${(e) => setValues({ ...values, [k]: e.target.value })} required /><//>`)}</div>
      <button type="submit" class="danger" disabled=${act.busy}>Write…</button>
      ${act.result ? html`<div class="result" role="status"><${KV} obj=${act.result} src=${spec.path} />
        ${Object.entries(act.result).filter(([, v]) => v && typeof v === "object" && !Array.isArray(v)).map(([k, v]) => html`<h3>${kvLabel(k)}</h3><${KV} obj=${v} src=${spec.path} />`)}</div>` : null}
      <${Err} error=${act.error} />
    </form>`;
  }

  function DebugScreen() {
    const pid = usePoll(() => api("GET", "/api/debug/pid-state"), 5000);
    const [reg, setReg] = useState({ chain_id: "0", chip: "0", register: "0x00" });
    const [act, run] = useAction();
    return html`<div class="screen" id="screen-debug">
      <p class="warning" role="note">Hacker mode: these forms talk to the hardware directly. Every write asks for confirmation and is recorded in hw-agent's debug audit log.</p>
      <section class="card" data-src="/api/debug/pid-state"><h2>Fan controller</h2><${KV} obj=${pid.data} src="/api/debug/pid-state" /><${Err} error=${pid.error} /></section>
      <form class="card" onSubmit=${(e) => { e.preventDefault(); run(() => api("GET", `/api/debug/registers?chain_id=${encodeURIComponent(reg.chain_id)}&chip=${encodeURIComponent(reg.chip)}&register=${encodeURIComponent(reg.register)}`)); }}>
        <h2>Read a chip register</h2>
        <div class="row wrap">${["chain_id", "chip", "register"].map((k) => html`<${Field} label=${k.replace("_", " ")}><input value=${reg[k]} onInput=${(e) => setReg({ ...reg, [k]: e.target.value })} /><//>`)}</div>
        <button type="submit" disabled=${act.busy}>Read</button>
        ${act.result ? html`<${KV} obj=${act.result} src="/api/debug/registers" />` : null}<${Err} error=${act.error} />
      </form>
      ${DEBUG_WRITES.map((s) => html`<${DebugWrite} spec=${s} />`)}
    </div>`;
  }

  // ---------------------------------------------------------------- Hacker: catalogues, network

  // Catalogues outside /api/re/* (same `svcos.api.catalog.v1` shape).
  const FIRMWARE_CATALOGUES = ["fwa_architecture", "fwa_responses", "fwa_status_codes", "fwa_web_map", "proto_wire_types", "fwb_overlay", "fwb_schema"]
    .map((n) => `/api/firmware/${n}`).concat(["/api/cgminer/catalog", "/api/diagnostics/error_vocab"]);

  function CataloguesScreen() {
    const index = usePoll(() => api("GET", "/api/re/catalog/index"), 0);
    const [path, setPath] = useState("");
    const cat = usePoll(() => (path ? api("GET", path) : Promise.resolve(null)), 0, [path]);
    const entries = get(index.data, "entries") || [];
    const paths = entries.map((e) => e.path || e.route || (typeof e === "string" ? e : null))
      .filter((p) => typeof p === "string" && p.startsWith("/api/") && p !== "/api/re/catalog/index")
      .concat(FIRMWARE_CATALOGUES);
    const list = get(cat.data, "entries");
    return html`<div class="screen" id="screen-catalogues">
      <section class="card" data-src="/api/re/catalog/index">
        <h2>Reverse-engineering catalogues</h2>
        <p class="muted">Read-only constants; reading them touches no hardware.</p>
        <${Field} label="Catalogue"><select id="catalogue" value=${path} onChange=${(e) => setPath(e.target.value)}>
          <option value="">Choose…</option>${paths.map((p) => html`<option value=${p}>${p}</option>`)}</select><//>
        <${Err} error=${index.error || cat.error} />
        ${cat.data ? html`<h3>${cat.data.title || path}</h3><p class="muted">${cat.data.source || ""}</p>
          ${Array.isArray(list) && list.length && typeof list[0] === "object" ? html`<div class="scroll"><table><thead><tr>${Object.keys(list[0]).map((k) => html`<th scope="col">${k}</th>`)}</tr></thead>
            <tbody>${list.map((row) => html`<tr>${Object.keys(list[0]).map((k) => html`<td>${typeof row[k] === "object" ? JSON.stringify(row[k]) : FMT.text(row[k])}</td>`)}</tr>`)}</tbody></table></div>`
            : html`<pre>${JSON.stringify(list ?? cat.data, null, 1)}</pre>`}` : null}
      </section>
    </div>`;
  }

  function NetworkScreen({ refreshStatus }) {
    const q = usePoll(() => api("GET", "/api/network/info"), 0);
    const [name, setName] = useState(null);
    const [act, run] = useAction();
    return html`<div class="screen" id="screen-network">
      <section class="card" data-src="/api/network/info">
        <h2>Network</h2>
        <${Loading} q=${q} /><${KV} obj=${q.data} src="/api/network/info" />
        <form class="row" onSubmit=${(e) => { e.preventDefault(); run(async () => { await api("POST", "/api/network/hostname", { hostname: name }); setName(null); await q.reload(); refreshStatus(); return true; }); }}>
          <${Field} label="Hostname"><input id="hostname-input" value=${name ?? get(q.data, "hostname") ?? ""} onInput=${(e) => setName(e.target.value)} pattern="[A-Za-z0-9\\-]{1,63}" /><//>
          <button type="submit" disabled=${name === null || act.busy}>Rename</button>
        </form>
        <${Err} error=${act.error} />
        ${q.data ? html`<${LanInterfaces} info=${q.data} />` : null}
        ${get(q.data, "endpoints") ? html`<pre>${JSON.stringify(q.data.endpoints, null, 1)}</pre>` : null}
      </section>
    </div>`;
  }

  // ---------------------------------------------------------------- the basics (issue 31)
  // Uptime, addresses, expected hashrate, best share, reboot, restart mining, LAN settings and
  // the password: new components only, mounted by one line in the screens that show them.

  // SI prefixes, as miners print share difficulties ("1.23 G"): the locale's compact notation
  // would say "B" for 1e9.
  const SI = ["", " k", " M", " G", " T", " P", " E"];
  // A best share is a difficulty: the number of the pool's difficulty-1 targets it beat.
  FMT.share = (v) => {
    if (!isNum(v)) return "–";
    if (Math.abs(v) < 1000) return nf({ maximumSignificantDigits: 4 }).format(v) + " difficulty";
    const i = Math.min(SI.length - 1, Math.floor(Math.log10(Math.abs(v)) / 3));
    return num(v / 10 ** (3 * i), 2) + SI[i] + " difficulty";
  };
  FMT.list = (v) => (Array.isArray(v) && v.length ? v.join(", ") : "–");

  // Overview tiles: how long it has mined, what the chips should do, the best share.
  function MiningBasics({ status }) {
    const m = (status && status.mining) || {};
    const hr = m.hashrate_ghs || {};
    const ratio = isNum(hr.expected) && hr.expected > 0 && isNum(hr["1m"]) ? (100 * hr["1m"]) / hr.expected : undefined;
    return html`<section class="tiles" id="mining-basics" data-src="/api/status" data-seq=${m.telemetry_seq}>
      <${Tile} label="Mining for"><span id="mining-uptime"><${V} k="mining.uptime_s" v=${m.uptime_s} f="duration" /></span><//>
      <${Tile} label="Expected hashrate" sub=${isNum(ratio) ? `measured (1 min) ${FMT.percent(ratio)} of it` : "the chips' nominal figure at their frequency"}>
        <span id="expected-hashrate"><${V} k="mining.hashrate_ghs.expected" v=${hr.expected} f="ghs" /></span><//>
      <${Tile} label="Best share" sub="highest difficulty a share reached"><span id="best-share"><${V} k="pools.best_share" v=${get(status, "pools.best_share")} f="share" /></span><//>
    </section>`;
  }

  // Uptime, address and MAC, with reboot and (in Mining mode and above) restart mining.
  function SystemCard({ mode }) {
    const q = usePoll(() => api("GET", "/api/system/info"), SCREEN_POLL_MS);
    const [act, run] = useAction();
    const i = q.data || {};
    const reboot = () => run(async () => {
      if (!(await askConfirm("Reboot the miner?", "Every svcOS service stops and starts again; hashing pauses for about a minute and this page reconnects when the miner is back.", "Reboot"))) return null;
      await api("POST", "/api/system/restart", {});
      return "The miner is restarting; this page reconnects when it is back.";
    });
    const restart = () => run(async () => {
      if (!(await askConfirm("Restart mining?", "The pool client and the hashboard service restart; hashing pauses for a few seconds. The rest of the miner keeps running.", "Restart mining"))) return null;
      const r = await api("POST", "/api/action/restart", {});
      return `Restarted: ${(r.restarted || []).map((s) => s.name).join(", ") || "mining"}.`;
    });
    return html`<section class="card" id="system-card" data-src="/api/system/info">
      <h2>System</h2>
      <${Loading} q=${q} />
      <dl class="kv">
        <dt>IP address</dt><dd id="system-ip"><${V} k="ip_address" v=${i.ip_address} /></dd>
        <dt>MAC address</dt><dd id="system-mac"><${V} k="mac_address" v=${i.mac_address} /></dd>
        <dt>Up for</dt><dd id="system-uptime"><${V} k="system_uptime_s" v=${i.system_uptime_s} f="duration" /></dd>
        <dt>Mining for</dt><dd><${V} k="mining_uptime_s" v=${i.mining_uptime_s} f="duration" /></dd>
        <dt>Firmware</dt><dd><${V} k="version" v=${i.version} /></dd>
      </dl>
      <div class="row wrap">
        ${MODE_RANK[mode] >= 1 ? html`<button type="button" class="secondary" id="restart-mining" disabled=${act.busy} onClick=${restart}>Restart mining…</button>` : null}
        <button type="button" class="danger" id="reboot" disabled=${act.busy} onClick=${reboot}>Reboot…</button>
      </div>
      ${typeof act.result === "string" ? html`<p class="s-ok" role="status" id="system-action">${act.result}</p>` : null}
      <${Err} error=${act.error || (q.data ? q.error : null)} />
    </section>`;
  }

  // The interfaces as the kernel reports them now.
  function LanInterfaces({ info }) {
    const list = get(info, "interfaces") || [];
    return html`<div data-src="/api/network/info">
      <div class="scroll"><table id="lan-interfaces"><thead><tr><th scope="col">Interface</th><th scope="col">IPv4</th><th scope="col">MAC</th><th scope="col">Link</th></tr></thead>
        <tbody>${list.map((x, i) => html`<tr data-iface=${x.name}><td><${V} k=${`interfaces.${i}.name`} v=${x.name} /></td><td><${V} k=${`interfaces.${i}.ipv4`} v=${x.ipv4} f="list" /></td>
          <td><${V} k=${`interfaces.${i}.mac`} v=${x.mac} /></td><td class=${x.up ? "s-ok" : "s-warn"}>${x.up ? "up" : "down"}</td></tr>`)}</tbody></table></div>
      <p class="muted">Gateway <${V} k="gateway" v=${get(info, "gateway")} /> · DNS <${V} k="dns" v=${get(info, "dns")} f="list" /></p>
    </div>`;
  }

  const NET_WORDS = { method: "Method", address: "Address", gateway: "Gateway", dns: "DNS servers", hostname: "Hostname", interface: "Interface" };
  function netError(e) {
    const m = e && e.body && /^(\w+)(?:\[(\d+)\])?$/.exec(e.body.field || "");
    if (!m || !NET_WORDS[m[1]]) return e;
    return new Error(`${m[1] === "dns" && m[2] !== undefined ? `DNS server ${Number(m[2]) + 1}` : NET_WORDS[m[1]]}: ${e.body.detail || "not accepted"}.`);
  }

  // DHCP or a static address, gateway, DNS and hostname (Mining mode and above: the routes are).
  function NetworkSettingsCard({ mode }) {
    const allowed = MODE_RANK[mode] >= 1;
    const cfg = usePoll(() => (allowed ? api("GET", "/api/network/config") : Promise.resolve(null)), 0, [allowed]);
    const info = usePoll(() => (allowed ? api("GET", "/api/network/info") : Promise.resolve(null)), SCREEN_POLL_MS, [allowed]);
    const [form, setForm] = useState(null);
    const [act, run] = useAction();
    if (!allowed) return html`<section class="card" id="network-settings"><h2>Network</h2><p class="muted">The address, gateway and DNS settings are in Mining mode.</p></section>`;
    const c = cfg.data || {};
    const f = form || { method: c.method || "dhcp", address: c.address || "", gateway: c.gateway || "", dns: (c.dns || []).join(", "), hostname: c.hostname || "" };
    const set = (k, v) => setForm({ ...f, [k]: v });
    const save = (e) => {
      e.preventDefault();
      run(async () => {
        const body = { method: f.method, dns: f.dns.split(/[\s,]+/).filter(Boolean), hostname: f.hostname.trim() };
        if (c.interface) body.interface = c.interface;
        if (f.method === "static") Object.assign(body, { address: f.address.trim(), gateway: f.gateway.trim() });
        const where = f.method === "static" ? `the address ${body.address}` : "the address the DHCP server gives it";
        if (!(await askConfirm("Apply the network settings?", `The miner applies them at once and is then reachable at ${where}. A wrong address or gateway can take it off the network until it is reset.`, "Apply"))) return null;
        let r;
        try {
          r = await api("PUT", "/api/network/config", body);
        } catch (err) {
          throw netError(err);
        }
        setForm(null);
        await Promise.all([cfg.reload(), info.reload()]);
        return r;
      });
    };
    return html`<section class="card" id="network-settings" data-src="/api/network/config">
      <h2>Network</h2>
      <${Loading} q=${info} />
      ${info.data ? html`<${LanInterfaces} info=${info.data} />` : null}
      <form onSubmit=${save}>
        <div class="seg" role="radiogroup" aria-label="How the miner gets its address">
          ${[["dhcp", "DHCP"], ["static", "Static address"]].map(([m, label]) => html`<button type="button" role="radio" id=${`net-${m}`} aria-checked=${f.method === m} class=${f.method === m ? "on" : ""} onClick=${() => set("method", m)}>${label}</button>`)}
        </div>
        <div class="row wrap">
          ${f.method === "static" ? html`
            <${Field} label="Address / prefix"><input id="net-address" value=${f.address} placeholder="192.168.1.50/24" onInput=${(e) => set("address", e.target.value)} required /><//>
            <${Field} label="Gateway"><input id="net-gateway" value=${f.gateway} placeholder="192.168.1.1" onInput=${(e) => set("gateway", e.target.value)} required /><//>` : null}
          <${Field} label=${f.method === "static" ? "DNS servers" : "DNS servers (empty: the DHCP server's)"}><input id="net-dns" value=${f.dns} placeholder="192.168.1.1, 1.1.1.1" onInput=${(e) => set("dns", e.target.value)} /><//>
          <${Field} label="Hostname"><input id="net-hostname" value=${f.hostname} pattern="[A-Za-z0-9\\-]{1,63}" onInput=${(e) => set("hostname", e.target.value)} required /><//>
        </div>
        <button type="submit" id="net-save" disabled=${act.busy || !cfg.data}>Apply…</button>
      </form>
      ${act.result ? html`<p class="s-ok" role="status" id="network-saved">Saved and written for the network manager (${act.result.file_written ? "changed" : "unchanged"}).</p>` : null}
      <${Err} error=${act.error || cfg.error} />
      <p class="muted">${c.note || ""}</p>
    </section>`;
  }

  // Change the password with the current one; the miner signs every other session out.
  function PasswordCard() {
    const [v, setV] = useState({ current: "", next: "", again: "" });
    const [err, setErr] = useState(null);
    const [act, run] = useAction();
    const s = strength(v.next);
    const submit = (e) => {
      e.preventDefault();
      if (v.next !== v.again) return setErr(new Error("The two new passwords differ."));
      if (v.next.length < 8) return setErr(new Error("Use 8 characters at least."));
      setErr(null);
      return run(async () => {
        try {
          const r = await api("POST", "/api/auth/password", { current_password: v.current, new_password: v.next });
          setV({ current: "", next: "", again: "" });
          return r;
        } catch (e2) {
          if (e2.body && e2.body.field === "current_password") throw new Error("The current password is wrong.");
          if (e2.status === 429) throw new Error(`Too many attempts. ${retryWords(e2.body)}`);
          throw e2;
        }
      });
    };
    const n = act.result && act.result.sessions_revoked;
    return html`<form class="card" id="password-card" onSubmit=${submit}>
      <h2>Password</h2>
      <input type="text" name="username" value="admin" autocomplete="username" hidden />
      <div class="row wrap">
        <${Field} label="Current password"><input id="pw-current" type="password" autocomplete="current-password" value=${v.current} onInput=${(e) => setV({ ...v, current: e.target.value })} required /><//>
        <${Field} label="New password" hint=${html`Strength: <strong class=${s.score >= 4 ? "s-ok" : s.score >= 3 ? "s-warn" : "s-bad"}>${s.word}</strong>`}>
          <input id="pw-new" type="password" autocomplete="new-password" value=${v.next} onInput=${(e) => setV({ ...v, next: e.target.value })} required minlength="8" /><//>
        <${Field} label="Repeat the new password"><input id="pw-again" type="password" autocomplete="new-password" value=${v.again} onInput=${(e) => setV({ ...v, again: e.target.value })} required /><//>
      </div>
      <button type="submit" id="pw-save" disabled=${act.busy}>Change password</button>
      ${act.result ? html`<p class="s-ok" role="status" id="password-changed">Password changed. ${isNum(n) ? `${n} other ${n === 1 ? "session was" : "sessions were"} signed out; this one stays.` : ""}</p>` : null}
      <${Err} error=${err || act.error} />
    </form>`;
  }

  const SettingsBasics = ({ mode }) => html`<${SystemCard} mode=${mode} /><${NetworkSettingsCard} mode=${mode} /><${PasswordCard} />`;

  // ---------------------------------------------------------------- Settings

  function download(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  function SettingsScreen({ theme, setTheme, mode, onLogout }) {
    const econ = useEconomics();
    const donation = usePoll(() => api("GET", "/api/config/donation"), 0);
    const info = usePoll(() => api("GET", "/api/donation/info"), 0);
    const manifest = usePoll(() => api("GET", "/api/config/backup/manifest"), 0);
    const [price, setPrice] = useState(null);
    const [cur, setCur] = useState(null);
    const [btc, setBtc] = useState(localStorage.getItem(BTC_KEY) || "");
    const [don, setDon] = useState(null);
    const [act, run] = useAction();
    const [priceAct, runPrice] = useAction();
    const [donAct, runDon] = useAction();
    const d = don || get(donation.data, "config") || {};
    const currencies = Intl.supportedValuesOf ? Intl.supportedValuesOf("currency") : ["USD", "EUR", "GBP"];
    const importFile = (file) => run(async () => {
      const text = await file.text();
      if (!(await askConfirm("Import this configuration?", `${file.name} replaces the miner's configuration (pools, power, thermal, …). Settings that need a restart apply after it.`, "Import"))) return null;
      return api("POST", "/api/config/import", { toml: text });
    });
    return html`<div class="screen" id="screen-settings">
      <${SettingsBasics} mode=${mode} />
      <section class="card">
        <h2>Display</h2>
        <div class="row wrap">
          <${Field} label="Theme"><select id="theme" value=${theme} onChange=${(e) => setTheme(e.target.value)}>
            <option value="auto">Follow the system</option><option value="dark">Dark</option><option value="light">Light</option></select><//>
          <${Field} label="BTC price (for converting sats; stays in this browser)"><input type="number" min="0" value=${btc}
            onInput=${(e) => { setBtc(e.target.value); localStorage.setItem(BTC_KEY, e.target.value); }} /><//>
        </div>
      </section>
      <section class="card" data-src="/api/config">
        <h2>Electricity</h2>
        <form class="row wrap" onSubmit=${(e) => { e.preventDefault(); runPrice(async () => { await api("POST", "/api/setup/step-economics", { electricity_price_per_kwh: Number(price ?? econ.price ?? 0), currency: cur || econ.currency || "USD" }); await econ.reload(); return true; }); }}>
          <${Field} label="Price per kWh"><input id="price" type="number" min="0" max="10" step="0.001" value=${price ?? econ.price ?? ""} onInput=${(e) => setPrice(e.target.value)} /><//>
          <${Field} label="Currency"><select id="currency" value=${cur || econ.currency || "USD"} onChange=${(e) => setCur(e.target.value)}>
            ${currencies.map((c) => html`<option value=${c}>${c}</option>`)}</select><//>
          <button type="submit" id="price-save" disabled=${priceAct.busy}>Save</button>
          ${priceAct.result ? html`<span class="s-ok" role="status" id="price-saved">Saved</span>` : null}
        </form>
        <${Err} error=${priceAct.error} />
      </section>
      <section class="card" data-src="/api/config/donation">
        <h2>Donation (optional)</h2>
        <p>${get(info.data, "trust_model")}</p>
        <dl class="kv" data-src="/api/donation/info"><dt>Pool</dt><dd><${V} k="pool_url" v=${get(info.data, "pool_url")} /></dd>
          <dt>Payout address</dt><dd><${V} k="payout_address" v=${get(info.data, "payout_address")} /></dd>
          <dt>Explorer</dt><dd>${get(info.data, "explorer_url") || "–"}</dd></dl>
        <form class="row wrap" onSubmit=${(e) => { e.preventDefault(); runDon(async () => { await api("POST", "/api/config/donation", { enabled: !!d.enabled, percent: Number(d.percent) || 0 }); setDon(null); await donation.reload(); return true; }); }}>
          <label class="check"><input type="checkbox" id="donation-enabled" checked=${!!d.enabled} onChange=${(e) => setDon({ ...d, enabled: e.target.checked })} /> Donate</label>
          <${Field} label="Share of mining time (0–5 %)"><input id="donation-percent" type="number" min="0" max="5" step="0.1" value=${d.percent ?? 0} onInput=${(e) => setDon({ ...d, percent: e.target.value })} /><//>
          <button type="submit" id="donation-save" disabled=${donAct.busy}>Save</button>
          ${donAct.result ? html`<span class="s-ok" role="status" id="donation-saved">Saved</span>` : null}
        </form>
        <${Err} error=${donAct.error} />
        <p class="muted">${get(donation.data, "note")}</p>
      </section>
      <section class="card" data-src="/api/config/backup/manifest">
        <h2>Configuration backup</h2>
        <p class="muted">The export contains secrets: ${(get(manifest.data, "contains_secrets") || []).join(", ")}. ${(get(manifest.data, "excluded") || []).join(" ")}</p>
        <div class="row wrap">
          <button type="button" id="config-export" disabled=${act.busy} onClick=${() => run(async () => { download(await api("GET", "/api/config/export", undefined, { blob: true }), "svcos-config.toml"); return true; })}>Export config</button>
          <label class="button secondary">Import config…<input type="file" accept=".toml,text/plain" class="sr" onChange=${(e) => e.target.files[0] && importFile(e.target.files[0])} /></label>
          ${MODE_RANK[mode] >= 1 ? html`<button type="button" class="secondary" disabled=${act.busy} onClick=${() => run(async () => { download(await api("GET", "/api/log/backup", undefined, { blob: true }), "svcos-logs.tar.gz"); return true; })}>Download logs</button>` : null}
        </div>
      </section>
      <section class="card">
        <h2>Session</h2>
        <div class="row wrap"><a class="button secondary" href="#/setup">Run the setup wizard again</a>
          <button type="button" class="secondary" onClick=${onLogout}>Log out</button></div>
      </section>
      <${Err} error=${act.error} />
      ${act.result && act.result !== true ? html`<pre class="result" role="status">${JSON.stringify(act.result, null, 1)}</pre>` : null}
    </div>`;
  }

  // ---------------------------------------------------------------- Firmware

  // Show what a lifecycle route reports (read-only cards).
  function RouteState({ path, title }) {
    const q = usePoll(() => api("GET", path), 0);
    return html`<section class="card" data-src=${path}><h2>${title}</h2><p class="muted"><code>GET ${path}</code></p>
      ${q.error ? html`<p class=${q.error.status === 501 ? "muted" : "error"} role="status">${q.error.status === 501 ? "Not available on this build yet: " : ""}${q.error.message}</p>` : null}
      ${q.data ? html`<${KV} obj=${q.data} src=${path} />` : null}</section>`;
  }

  const UPDATE_UPLOAD = "/api/v1/firmware/update";
  const UPDATE_STATUS = "/api/v1/firmware/update/status";
  const RESTORE = "/api/system/restore-to-stock";
  const RESTORE_PREFLIGHT = "/api/system/restore-to-stock/preflight";
  // The success path of the updater's state machine, in order; rolled_back and failed end it early.
  const UPDATE_STEPS = ["receiving", "verifying", "installing", "pending_reboot", "booting_new_slot", "committed"];
  const PHASE_LABEL = {
    idle: "Idle", receiving: "Receiving", verifying: "Verifying", installing: "Installing",
    pending_reboot: "Pending reboot", booting_new_slot: "Booting the new slot", committed: "Committed",
    rolled_back: "Rolled back", failed: "Failed",
  };

  // fetch() cannot report upload progress; XHR streams the File from disk and can.
  function uploadBundle(file, force, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", UPDATE_UPLOAD + (force ? "?force=true" : ""));
      const t = token();
      if (t) xhr.setRequestHeader("Authorization", "Bearer " + t);
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
      xhr.onerror = () => reject(new ApiError(0, null));
      xhr.onload = () => {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch (_) { body = null; }
        if (xhr.status >= 200 && xhr.status < 300) return resolve(body);
        if (xhr.status === 401 && t) sessionEnded();
        reject(new ApiError(xhr.status, body));
      };
      xhr.send(file);
    });
  }

  function PhaseSteps({ phase }) {
    const ended = phase === "failed" || phase === "rolled_back";
    const at = UPDATE_STEPS.indexOf(phase);
    return html`<ol class="fw-steps" id="update-steps" aria-label="Update progress">
      ${UPDATE_STEPS.map((p, i) => html`<li class=${p === phase ? "s-ok current" : at > i ? "done" : "muted"} aria-current=${p === phase ? "step" : undefined}>${PHASE_LABEL[p]}</li>`)}
      ${ended ? html`<li class="s-bad current" aria-current="step">${PHASE_LABEL[phase]}</li>` : null}
    </ol>`;
  }

  function UpdateCard({ onRunningChanged }) {
    const st = usePoll(() => api("GET", UPDATE_STATUS), 3000);
    const [file, setFile] = useState(null);
    const [force, setForce] = useState(false);
    const [sent, setSent] = useState(null);
    const [act, run] = useAction();
    const s = st.data || {};
    const start = () => run(async () => {
      setSent({ name: file.name, loaded: 0, total: file.size });
      try {
        const done = await uploadBundle(file, force, (loaded, total) => setSent({ name: file.name, loaded, total: total || file.size }));
        setSent({ name: file.name, loaded: file.size, total: file.size });
        return done;
      } finally {
        st.reload();
      }
    });
    const pct = sent && sent.total ? (100 * sent.loaded) / sent.total : null;
    const refusal = act.error && act.error.body && act.error.body.refusal;
    // A refused upload installed nothing: the status keeps its phase and names the refusal,
    // which is no step of the install, so no ladder of install steps for it.
    const refused = !!s.refusal && !s.in_progress;
    // A new running version or a commit makes the other cards' versions old: they read again.
    useEffect(() => {
      if (s.running_version && onRunningChanged) onRunningChanged();
    }, [s.running_version, s.phase, s.booted_slot]);
    const target = get(act.result, "to.slot");
    const arrived = act.result && (s.phase === "committed" || (target && s.booted_slot === target && !s.in_progress));
    return html`<section class="card" id="fw-update" data-src=${UPDATE_STATUS}>
      <h2>Firmware update</h2>
      <dl class="kv"><dt>Running version</dt><dd><${V} k="running_version" v=${s.running_version} /></dd>
        <dt>Booted slot</dt><dd><${V} k="booted_slot" v=${s.booted_slot} /></dd>
        <dt>Primary slot</dt><dd><${V} k="primary_slot" v=${s.primary_slot} /></dd>
        <dt>State</dt><dd class=${stateClass(s.phase === "committed" ? "ok" : s.phase)}><${V} k="phase" v=${s.phase} />${refused ? html` <span id="update-refused">(the last upload was refused; nothing was installed${s.last_error ? `: ${s.last_error}` : ""})</span>` : null}</dd>
        <dt>Operation</dt><dd><${V} k="kind" v=${s.kind} /></dd>
        ${s.in_progress && s.progress ? html`<dt>Progress</dt><dd><${V} k="progress.percent" v=${s.progress.percent} f="percent" /> <${V} k="progress.message" v=${s.progress.message} /></dd>` : null}
        ${s.reason ? html`<dt>Reason</dt><dd id="update-reason"><${V} k="reason" v=${s.reason} /></dd>` : null}</dl>
      <${Err} error=${st.error} />
      ${s.phase && s.phase !== "idle" && !refused ? html`<${PhaseSteps} phase=${s.phase} />` : null}
      ${(s.history || []).length ? html`<details id="update-history"><summary>State history (${s.history.length})</summary>
        <ol>${s.history.slice().reverse().map((h) => html`<li><time>${FMT.time(h.at_ms)}</time> ${PHASE_LABEL[h.phase] || h.phase}${h.note ? `: ${h.note}` : ""}</li>`)}</ol></details>` : null}
      <form class="row wrap" onSubmit=${(e) => { e.preventDefault(); if (file) start(); }}>
        <${Field} label="Update bundle (.raucb)"><input id="update-file" type="file" accept=".raucb,application/octet-stream" onChange=${(e) => setFile(e.target.files[0] || null)} /><//>
        <label class="check"><input type="checkbox" id="update-force" checked=${force} onChange=${(e) => setForce(e.target.checked)} /> Allow a downgrade</label>
        <button type="submit" id="update-start" disabled=${!file || act.busy || s.in_progress}>Upload and install</button>
      </form>
      ${sent && act.error ? html`<p id="update-upload" role="status">${sent.name} (${FMT.bytes(sent.total)}) was not installed.</p>`
        : sent ? html`<p id="update-upload" role="status">${act.busy ? "Uploading" : "Uploaded"} ${FMT.bytes(sent.loaded)} of ${FMT.bytes(sent.total)}${" "}
        <progress max="100" value=${pct ?? 0} aria-label="Upload progress">${num(pct, 0)} %</progress></p>` : null}
      ${act.error ? html`<div id="update-error" role="alert"><p class="error"><strong>The miner refused the update.</strong> ${act.error.message}</p>${refusal ? html`<p class="muted">Refusal code: <code>${refusal}</code></p>` : null}</div>` : null}
      ${arrived ? html`<p id="update-result" role="status">The update is done: the miner runs version ${FMT.text(s.running_version)} from slot ${FMT.text(s.booted_slot)}${s.phase === "committed" ? " (committed)" : ""}.</p>`
        : act.result ? html`<p id="update-result" role="status">The bundle was installed; the miner now reboots into slot ${target || "–"}.</p>` : null}
      ${(s.slots || []).length ? html`<table class="slots"><thead><tr><th>Slot</th><th>Boot name</th><th>State</th><th>Boot status</th><th>Version</th></tr></thead>
        <tbody>${s.slots.map((sl, i) => html`<tr><td><${V} k=${`slots.${i}.name`} v=${sl.name} /></td><td><${V} k=${`slots.${i}.bootname`} v=${sl.bootname} /></td>
          <td><${V} k=${`slots.${i}.state`} v=${sl.state} /></td><td><${V} k=${`slots.${i}.boot_status`} v=${sl.boot_status} /></td><td><${V} k=${`slots.${i}.version`} v=${sl.version} /></td></tr>`)}</tbody></table>` : null}
    </section>`;
  }

  function RestoreCard() {
    const [pre, run] = useAction();
    const [act, runRestore] = useAction();
    const p = pre.result;
    const failed = p ? (p.checks || []).filter((c) => !c.passed).map((c) => c.id) : [];
    const restore = async () => {
      const lost = (p.will_be_lost || []).join("; ") || "nothing listed";
      const warn = failed.length ? ` The preflight did not pass (${failed.join(", ")}), so the miner will refuse.` : "";
      const ok = await askConfirm("Restore the stock firmware?", `This installs the stock firmware ${p.stock_version || ""} into the other slot and reboots into it. Lost: ${lost}.${warn}`, "Restore to stock");
      if (ok) runRestore(() => api("POST", RESTORE, { confirm: true }));
    };
    return html`<section class="card" id="fw-restore">
      <h2>Restore to stock</h2>
      <p class="muted">Checks first; the confirmation comes only after you have seen them.</p>
      <button type="button" id="restore-check" class="secondary" disabled=${pre.busy} onClick=${() => run(() => api("POST", RESTORE_PREFLIGHT))}>Run the preflight checks</button>
      <${Err} error=${pre.error} />
      ${p ? html`<div id="restore-preflight">
        <p>Stock version: ${p.stock_version || "–"}; ${p.ready ? html`<strong class="s-ok">ready</strong>` : html`<strong class="s-bad">not ready</strong>`}</p>
        <ul id="restore-checks">${(p.checks || []).map((c) => html`<li data-check=${c.id} data-passed=${String(!!c.passed)} class=${c.passed ? "s-ok" : "s-bad"}>
          <span aria-hidden="true">${c.passed ? "✓ " : "✗ "}</span><strong>${c.id.replace(/_/g, " ")}</strong> ${c.passed ? "passed" : "failed"}: ${c.detail}</li>`)}</ul>
        <h3>Will be lost</h3>
        <ul id="restore-lost">${(p.will_be_lost || []).map((l) => html`<li>${l}</li>`)}</ul>
        <button type="button" id="restore-start" class="danger" disabled=${act.busy} onClick=${restore}>Restore to stock…</button>
      </div>` : null}
      <${Err} error=${act.error} />
      ${act.result ? html`<p id="restore-result" role="status">Restore started: ${PHASE_LABEL[act.result.phase] || act.result.phase}. Follow it under Firmware update.</p>` : null}
    </section>`;
  }

  function FirmwareScreen() {
    const version = usePoll(() => api("GET", "/api/dashboard/version"), 0);
    const cap = usePoll(() => api("GET", "/api/system/update_capability"), 0);
    const reread = () => {
      version.reload();
      cap.reload();
    };
    return html`<div class="screen" id="screen-firmware">
      <section class="card" data-src="/api/dashboard/version"><h2>Firmware</h2><${Loading} q=${version} /><${KV} obj=${version.data} src="/api/dashboard/version" /></section>
      <${UpdateCard} onRunningChanged=${reread} />
      <${RestoreCard} />
      <section class="card" data-src="/api/system/update_capability"><h2>Update capability</h2><${Err} error=${cap.error} /><${KV} obj=${cap.data} src="/api/system/update_capability" />
        ${get(cap.data, "methods") ? html`<pre>${JSON.stringify(cap.data.methods, null, 1)}</pre>` : null}</section>
      <${RouteState} path="/api/system/update/metadata" title="Update metadata" />
    </div>`;
  }

  // ---------------------------------------------------------------- setup wizard

  const WIZARD_STEPS = [
    { id: "safety", title: "Safety" },
    { id: "password", title: "Password" },
    { id: "pool", title: "Pool" },
    { id: "mode", title: "Mode" },
    { id: "power", title: "Power" },
    { id: "economics", title: "Electricity" },
    { id: "quiet_hours", title: "Quiet hours" },
    { id: "summary", title: "Summary" },
  ];
  const MINER_STEP = { safety: "safety", password: "password", pool: "pool", power: "circuit", economics: "economics", quiet_hours: "quiet_hours" };

  function strength(pw) {
    let score = 0;
    if (pw.length >= 8) score++;
    if (pw.length >= 12) score++;
    if (pw.length >= 16) score++;
    if (/[a-z]/.test(pw) && /[A-Z]/.test(pw)) score++;
    if (/\d/.test(pw)) score++;
    if (/[^A-Za-z0-9]/.test(pw) || / /.test(pw)) score++;
    const words = ["too short", "weak", "weak", "fair", "good", "strong", "very strong"];
    return { score, word: pw.length < 8 ? "too short (8 characters at least)" : words[score] };
  }

  // Where to resume: right after the step the miner recorded last (or further, if this tab got
  // further), but never past a missing safety acknowledgement or password, which everything
  // else depends on.
  function resumeIndex(status) {
    const steps = Object.fromEntries((get(status, "steps") || []).map((s) => [s.step, s]));
    const pending = (id) => !steps[id] || steps[id].status === "pending";
    if (pending("safety")) return 0;
    if (!status.password_set || !token()) return 1;
    let idx = 2, newest = -1;
    WIZARD_STEPS.forEach((w, i) => {
      const rec = steps[MINER_STEP[w.id]];
      if (rec && rec.status !== "pending" && isNum(rec.at_ms) && rec.at_ms >= newest) {
        newest = rec.at_ms;
        idx = i + 1;
      }
    });
    const local = Number(sessionStorage.getItem(WIZARD_KEY) || 0);
    return Math.min(Math.max(idx, local), WIZARD_STEPS.length - 1);
  }

  function Wizard({ onDone, onLoggedIn }) {
    const q = usePoll(() => api("GET", "/api/setup/status"), 0);
    const [step, setStep] = useState(null);
    const [act, run] = useAction();
    const st = q.data;
    useEffect(() => {
      if (st && step === null) setStep(resumeIndex(st));
    }, [st]);
    const heading = useRef(null);
    useEffect(() => {
      if (heading.current) heading.current.focus();
    }, [step]);
    if (!st || step === null) return html`<section class="card narrow"><${Loading} q=${q} /></section>`;
    const go = (i) => {
      sessionStorage.setItem(WIZARD_KEY, String(i));
      setStep(i);
    };
    const next = () => go(step + 1);
    const doStep = (fn) => run(async () => {
      await fn();
      await q.reload();
      next();
      return true;
    });
    const w = WIZARD_STEPS[step];
    const props = { st, act, doStep, next, run, q, onLoggedIn, onDone };
    const View = { safety: WizSafety, password: WizPassword, pool: WizPool, mode: WizMode, power: WizPower, economics: WizEconomics, quiet_hours: WizQuiet, summary: WizSummary }[w.id];
    return html`<section class="card wizard" id="wizard" data-step=${w.id} aria-labelledby="wizard-title">
      <ol class="steps" aria-label="Setup steps">${WIZARD_STEPS.map((s, i) => html`<li class=${i === step ? "on" : i < step ? "past" : ""} aria-current=${i === step ? "step" : undefined}>${s.title}</li>`)}</ol>
      <h2 id="wizard-title" tabindex="-1" ref=${heading}>Step ${step + 1} of ${WIZARD_STEPS.length}: ${w.title}</h2>
      <${View} ...${props} />
      <${Err} error=${act.error} />
      <div class="row wizard-nav">
        ${step > 0 ? html`<button type="button" class="secondary" id="wizard-back" onClick=${() => go(step - 1)}>Back</button>` : null}
        ${token() && !(w.id === "summary") ? html`<button type="button" class="link" id="wizard-later" onClick=${() => { sessionStorage.setItem(DISMISSED_KEY, "1"); onDone(); }}>Finish setup later</button>` : null}
      </div>
    </section>`;
  }

  function Skip({ onClick, disabled, label = "Skip" }) {
    return html`<button type="button" class="secondary" id="wizard-skip" disabled=${disabled} onClick=${onClick}>${label}</button>`;
  }

  // What the miner draws while setup is open: held at the setup cap, or not held (a config that
  // already finished setup, after an update or a restore). `[power].setup_hold` decides; the
  // open status carries it as setup_hold_watt.
  function SetupHold({ st }) {
    const cap = st.setup_hold_watt;
    return isNum(cap)
      ? html`<p id="wizard-hold" class="s-warn" role="status">Until setup is finished, the miner is held at a conservative cap: it draws at most <strong>${FMT.int(cap)} W</strong>. Finishing the safety and circuit steps and pressing “Finish and start mining” lifts the cap.</p>`
      : html`<p id="wizard-hold" role="status">This miner is not held: its configuration already finished setup (an update or a restore), so it may draw its full power now, within the circuit cap you set.</p>`;
  }

  function WizSafety({ st, doStep, act }) {
    const warnings = usePoll(() => api("GET", "/api/safety/warnings"), 0);
    return html`<div>
      <${SetupHold} st=${st} />
      <p>Before the miner draws full power, read what it needs from your home:</p>
      ${warnings.loaded ? html`<ul id="safety-warnings">${(get(warnings.data, "warnings") || []).map((w) => html`<li class=${w.severity === "critical" ? "s-bad" : w.severity === "warning" ? "s-warn" : ""}><strong>${w.severity}</strong>: ${w.message}</li>`)}
        ${(get(warnings.data, "warnings") || []).length === 0 ? html`<li>The miner reports no warning for its current configuration.</li>` : null}</ul>` : html`<${Loading} q=${warnings} />`}
      <p>In any case: plug it into a circuit rated for its power (next steps ask for it), keep its air inlet and outlet free, and keep it away from anything that must not get warm.</p>
      <div class="row"><button type="button" id="wizard-next" disabled=${act.busy} onClick=${() => doStep(() => api("POST", "/api/setup/step1-safety", { accept: true }))}>I have read this</button>
        <${Skip} disabled=${act.busy} onClick=${() => doStep(() => api("POST", "/api/setup/skip-safety", { reason: "skipped in the dashboard" }))} /></div>
    </div>`;
  }

  function WizPassword({ st, doStep, act, run, next, onLoggedIn }) {
    const [pw, setPw] = useState("");
    const [again, setAgain] = useState("");
    const [err, setErr] = useState(null);
    const s = strength(pw);
    if (st.password_set && token()) {
      return html`<div><p>A password is already set on this miner.</p>
        <div class="row"><button type="button" id="wizard-next" disabled=${act.busy} onClick=${() => doStep(() => api("POST", "/api/setup/skip-password", {}))}>Keep the current password</button></div></div>`;
    }
    const submit = (e) => {
      e.preventDefault();
      if (pw !== again) return setErr(new Error("The two passwords differ."));
      if (pw.length < 8) return setErr(new Error("Use 8 characters at least."));
      setErr(null);
      return doStep(async () => {
        await api("POST", "/api/setup/step3-password", { password: pw });
        await login(pw);
        onLoggedIn();
      });
    };
    return html`<form onSubmit=${submit}>
      <p>Choose the miner's password. It is stored on the miner only (as an argon2id hash); a lost password is cleared only by holding the reset button for 15 seconds.</p>
      <input type="text" name="username" value="admin" autocomplete="username" hidden />
      <${Field} label="New password" hint=${html`Strength: <strong id="pw-strength" class=${s.score >= 4 ? "s-ok" : s.score >= 3 ? "s-warn" : "s-bad"}>${s.word}</strong>`}>
        <input id="wizard-password" type="password" autocomplete="new-password" value=${pw} onInput=${(e) => setPw(e.target.value)} required minlength="8" /><//>
      <${Field} label="Repeat it"><input id="wizard-password2" type="password" autocomplete="new-password" value=${again} onInput=${(e) => setAgain(e.target.value)} required /><//>
      <${Err} error=${err} />
      <div class="row"><button type="submit" id="wizard-next" disabled=${act.busy}>Set password</button>
        ${st.password_set ? html`<${Skip} onClick=${next} />` : null}</div>
      ${st.password_set ? null : html`<p class="muted">The password cannot be skipped on first boot: every later step needs it.</p>`}
    </form>`;
  }

  function WizPool({ doStep, act, next }) {
    const pools = usePoll(() => api("GET", "/api/pools"), 0);
    const existing = get(pools.data, "pools") || [];
    const first = existing[0] || {};
    const [f, setF] = useState(null);
    const v = f || { url: first.url || "", user: first.user || "", password: "" };
    const [test, setTest] = useState(null);
    const [testing, setTesting] = useState(false);
    const body = () => {
      const b = { url: v.url.trim(), user: v.user.trim() };
      if (v.password) b.password = v.password;
      return b;
    };
    const runTest = async () => {
      setTesting(true);
      try {
        setTest({ res: await api("POST", "/api/setup/test-pool", body()) });
      } catch (e) {
        setTest({ error: e });
      }
      setTesting(false);
    };
    const save = (e) => {
      e.preventDefault();
      const b = body();
      if (!b.password) b.password = first.url === b.url && first.password ? first.password : "";
      // The step sets the whole list: the first pool as edited here, every other pool as it is
      // (masked URLs and passwords go back masked; the miner restores the stored secrets).
      const rest = existing.slice(1).map((p, i) => ({ url: p.url, user: p.user, password: p.password ?? "", enabled: p.enabled !== false, priority: i + 1, quota: p.quota || 0 }));
      doStep(() => api("POST", "/api/setup/step5-pool", { pools: [{ ...b, enabled: first.enabled !== false, priority: 0, quota: first.quota || 0 }, ...rest] }));
    };
    return html`<form onSubmit=${save}>
      <p>Where should the miner send its work? ${existing.length > 1
        ? html`This sets pool 1; the other ${existing.length - 1 === 1 ? "pool stays" : `${existing.length - 1} pools stay`} as ${existing.length - 1 === 1 ? "it is" : "they are"} (<span id="wizard-pool-kept">${existing.slice(1).map((p) => p.url).join(", ")}</span>).`
        : "More pools can be added later on the Pools screen."}</p>
      <${Field} label="Pool URL"><input id="wizard-pool-url" class="wide" value=${v.url} required placeholder="stratum+tcp://pool.example:3333" onInput=${(e) => setF({ ...v, url: e.target.value })} /><//>
      <${Field} label="Worker (user name)"><input id="wizard-pool-user" value=${v.user} required onInput=${(e) => setF({ ...v, user: e.target.value })} /><//>
      <${Field} label="Pool password (often x or empty)"><input id="wizard-pool-pass" type="password" autocomplete="off" value=${v.password} onInput=${(e) => setF({ ...v, password: e.target.value })} /><//>
      <div class="row wrap">
        <button type="button" class="secondary" id="wizard-test-pool" disabled=${testing || !v.url} onClick=${runTest}>Test pool</button>
        ${testing ? html`<span class="muted">connecting…</span>` : null}
        ${test && test.res ? html`<span id="wizard-test-result" class=${test.res.ok ? "s-ok" : "s-bad"} role="status">${test.res.ok ? "The pool answered" : "Failed"}:
          ${(test.res.steps || []).map((s) => `${s.name} ${s.ok ? "ok" : "failed"}`).join(", ")} ${plainError(test.res.error)}</span>` : null}
        <${Err} error=${test && test.error} />
      </div>
      <div class="row"><button type="submit" id="wizard-next" disabled=${act.busy}>Save pool</button><${Skip} onClick=${next} /></div>
    </form>`;
  }

  function WizMode({ st, doStep, act, next }) {
    const choices = [
      ["home", "A quiet heater for a room: on/off, heat level, thermostat, night mode. Nothing that can hurt the hardware."],
      ["standard", "Everything about mining: charts, chips, pools, autotuner, shares."],
      ["hacker", "Everything, plus diagnostics, logs, services and direct hardware access."],
    ];
    return html`<div><fieldset class="modes"><legend>How will you use this miner?</legend>
      ${choices.map(([m, text]) => html`<button type="button" class=${"mode-card" + (st.mode === m ? " on" : "")} id=${`wizard-mode-${m}`} aria-pressed=${st.mode === m} disabled=${act.busy}
        onClick=${() => doStep(() => api("POST", "/api/setup/step4-mode", { mode: m }))}><strong>${MODE_LABEL[m]}</strong><span>${text}</span></button>`)}
      </fieldset><div class="row"><${Skip} onClick=${next} label="Keep the current mode" /></div></div>`;
  }

  function WizPower({ st, doStep, act, next }) {
    const us = /-(US|CA|MX)$/i.test(navigator.language || "");
    const circuit = (get(st, "steps") || []).find((s) => s.step === "circuit");
    const prev = (circuit && circuit.values) || {};
    const [v, setV] = useState({ voltage_v: prev.voltage_v || (us ? 120 : 230), breaker_a: prev.breaker_a || (us ? 15 : 16), target: "" });
    const cap = Math.floor(0.8 * Number(v.voltage_v) * Number(v.breaker_a));
    const home = st.mode === "home";
    const save = (e) => {
      e.preventDefault();
      doStep(async () => {
        await api("POST", "/api/setup/step2-circuit", { voltage_v: Number(v.voltage_v), breaker_a: Number(v.breaker_a) });
        if (v.target !== "") await api("POST", "/api/config", { hardware: { power_target_watt: Number(v.target) } });
      });
    };
    return html`<form onSubmit=${save}>
      <p>The miner never draws more than 80 % of the circuit it is plugged into (a continuous load).</p>
      <div class="row wrap">
        <${Field} label="Circuit voltage (V)"><input id="wizard-voltage" type="number" min="90" max="480" value=${v.voltage_v} onInput=${(e) => setV({ ...v, voltage_v: e.target.value })} required /><//>
        <${Field} label="Breaker rating (A)"><input id="wizard-breaker" type="number" min="5" max="100" value=${v.breaker_a} onInput=${(e) => setV({ ...v, breaker_a: e.target.value })} required /><//>
      </div>
      <p>Power limit from this circuit: <strong id="wizard-cap">${FMT.watt(cap)}</strong></p>
      <${Field} label=${home ? "Heat level (W, optional)" : "Power target (W, optional)"} hint="Empty keeps the board's own target.">
        <input id="wizard-target" type="number" min="100" max=${cap} step="50" value=${v.target} onInput=${(e) => setV({ ...v, target: e.target.value })} /><//>
      <div class="row"><button type="submit" id="wizard-next" disabled=${act.busy}>Save power</button><${Skip} onClick=${next} /></div>
      <p class="muted">The circuit is required to finish the wizard; skipping leaves it for later.</p>
    </form>`;
  }

  function WizEconomics({ st, doStep, act, next }) {
    const rec = (get(st, "steps") || []).find((s) => s.step === "economics");
    const prev = (rec && rec.values) || {};
    const [v, setV] = useState({ price: prev.electricity_price_per_kwh ?? "", currency: prev.currency || "USD" });
    const currencies = Intl.supportedValuesOf ? Intl.supportedValuesOf("currency") : ["USD", "EUR", "GBP"];
    return html`<form onSubmit=${(e) => { e.preventDefault(); doStep(() => api("POST", "/api/setup/step-economics", { electricity_price_per_kwh: Number(v.price), currency: v.currency })); }}>
      <p>With your electricity price the dashboard shows what the heat costs per day.</p>
      <div class="row wrap">
        <${Field} label="Price per kWh"><input id="wizard-price" type="number" min="0" max="10" step="0.001" value=${v.price} onInput=${(e) => setV({ ...v, price: e.target.value })} required /><//>
        <${Field} label="Currency"><select id="wizard-currency" value=${v.currency} onChange=${(e) => setV({ ...v, currency: e.target.value })}>
          ${currencies.map((c) => html`<option value=${c}>${c}</option>`)}</select><//>
      </div>
      <div class="row"><button type="submit" id="wizard-next" disabled=${act.busy}>Save price</button><${Skip} onClick=${next} /></div>
    </form>`;
  }

  function WizQuiet({ doStep, act, next }) {
    // The browser's IANA zone as the default: the miner reads the window in it, daylight saving included.
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
    const [v, setV] = useState({ enabled: true, start: "22:00", end: "07:00", power_cap_watt: "", fan_max_percent: "40", timezone: zone });
    const save = (e) => {
      e.preventDefault();
      const body = { enabled: v.enabled, start: v.start, end: v.end, timezone: v.timezone.trim() || "UTC" };
      if (v.power_cap_watt !== "") body.power_cap_watt = Number(v.power_cap_watt);
      if (v.fan_max_percent !== "") body.fan_max_percent = Number(v.fan_max_percent);
      doStep(() => api("POST", "/api/setup/quiet-hours", body));
    };
    return html`<form onSubmit=${save}>
      <p>During quiet hours the miner can hold its power and fan speed lower (for a bedroom, say).</p>
      <label class="check"><input type="checkbox" id="wizard-quiet-enabled" checked=${v.enabled} onChange=${(e) => setV({ ...v, enabled: e.target.checked })} /> Use quiet hours</label>
      <div class="row wrap">
        <${Field} label="From"><input id="wizard-quiet-start" type="time" value=${v.start} onInput=${(e) => setV({ ...v, start: e.target.value })} /><//>
        <${Field} label="Until"><input id="wizard-quiet-end" type="time" value=${v.end} onInput=${(e) => setV({ ...v, end: e.target.value })} /><//>
        <${Field} label="Time zone (IANA, e.g. Europe/Berlin)"><input id="wizard-quiet-zone" type="text" value=${v.timezone} onInput=${(e) => setV({ ...v, timezone: e.target.value })} /><//>
        <${Field} label="Power cap (W, optional)"><input id="wizard-quiet-cap" type="number" min="0" step="50" value=${v.power_cap_watt} onInput=${(e) => setV({ ...v, power_cap_watt: e.target.value })} /><//>
        <${Field} label="Fan limit (%)"><input id="wizard-quiet-fan" type="number" min="0" max="100" value=${v.fan_max_percent} onInput=${(e) => setV({ ...v, fan_max_percent: e.target.value })} /><//>
      </div>
      <div class="row"><button type="submit" id="wizard-next" disabled=${act.busy}>Save quiet hours</button><${Skip} onClick=${next} /></div>
    </form>`;
  }

  const STEP_STATUS_WORDS = { done: "done", skipped: "skipped", pending: "not done yet" };

  // What each recorded step set, in the owner's words (the record's keys are the API's).
  function summaryWords(step, pools) {
    const v = step.values || {};
    switch (step.step) {
      case "safety":
        return step.status === "skipped" ? `skipped${v.reason ? `: ${v.reason}` : ""}` : step.status === "done" ? "warnings read and accepted" : "";
      case "circuit":
        return step.status === "pending" ? "" : `${FMT.int(v.voltage_v)} V, ${FMT.int(v.breaker_a)} A breaker: ${FMT.watt(v.max_continuous_watt)} continuous${v.applied_as_cap ? ", applied as the power cap" : ", not applied as a cap"}`;
      case "password":
        return v.kept ? `kept the existing password${v.reason ? ` (${v.reason})` : ""}` : step.status === "done" ? "set" : "";
      case "economics":
        return isNum(v.electricity_price_per_kwh) ? `${nf({ style: "currency", currency: v.currency || currency, maximumFractionDigits: 3 }).format(v.electricity_price_per_kwh)} per kWh` : "";
      case "quiet_hours": {
        if (!v.start) return "";
        if (v.enabled === false) return "off";
        // A named zone says where the times are read; the fixed offset is only the fallback
        // for "UTC", so it is not shown beside a zone.
        const zone = v.timezone && v.timezone !== "UTC" ? v.timezone
          : isNum(v.utc_offset_min) && v.utc_offset_min !== 0 ? `UTC${v.utc_offset_min < 0 ? "−" : "+"}${String(Math.floor(Math.abs(v.utc_offset_min) / 60)).padStart(2, "0")}:${String(Math.abs(v.utc_offset_min) % 60).padStart(2, "0")}` : "UTC";
        const caps = [v.power_cap_watt > 0 ? `power at most ${FMT.watt(v.power_cap_watt)}` : null, v.fan_max_percent > 0 ? `fans at most ${FMT.percent(v.fan_max_percent)}` : null].filter(Boolean);
        return `${v.start}–${v.end} (${zone})${caps.length ? `: ${caps.join(", ")}` : ""}`;
      }
      case "mode":
        return MODE_LABEL[v.mode] || v.mode || "";
      case "pool": {
        const first = pools[0];
        if (!first) return "no pool yet";
        return `${first.url}${first.user ? ` as ${first.user}` : ""}${pools.length > 1 ? ` (and ${pools.length - 1} backup pool${pools.length > 2 ? "s" : ""})` : ""}`;
      }
      default:
        return Object.entries(v).map(([k, x]) => `${k.replace(/_/g, " ")}: ${typeof x === "object" ? JSON.stringify(x) : x}`).join(", ");
    }
  }

  function WizSummary({ st, run, act, onDone, q }) {
    const labels = { safety: "Safety", circuit: "Circuit", password: "Password", economics: "Electricity", quiet_hours: "Quiet hours", mode: "Mode", pool: "Pool" };
    const finish = () => run(async () => {
      await api("POST", "/api/setup/complete", {});
      sessionStorage.removeItem(WIZARD_KEY);
      await q.reload();
      onDone();
      return true;
    });
    const pools = usePoll(() => api("GET", "/api/pools"), 0);
    return html`<div data-src="/api/setup/status">
      <table id="wizard-summary"><thead><tr><th scope="col">Step</th><th scope="col">Status</th><th scope="col">Values</th></tr></thead>
        <tbody>${(st.steps || []).map((s) => html`<tr data-step=${s.step}><td>${labels[s.step] || s.step}</td><td class=${s.status === "pending" ? "s-warn" : "s-ok"}>${STEP_STATUS_WORDS[s.status] || s.status}</td>
          <td>${summaryWords(s, get(pools.data, "pools") || [])}</td></tr>`)}</tbody></table>
      ${st.can_complete ? null : html`<p class="s-warn" role="status">Still needed before finishing: ${(st.missing || []).join(", ")}. Use Back to reach them.</p>`}
      ${st.complete ? html`<p class="s-ok">The wizard was completed on ${FMT.time(st.completed_at_ms)}; finishing again keeps the settings above.</p>` : null}
      ${isNum(st.setup_hold_watt) ? html`<p id="wizard-lift">Finishing lifts the setup cap of ${FMT.int(st.setup_hold_watt)} W: the miner then draws up to its full power, within your circuit's cap.</p>` : null}
      <div class="row"><button type="button" id="wizard-finish" disabled=${!st.can_complete || act.busy} onClick=${finish}>Finish and start mining</button></div>
    </div>`;
  }

  // ---------------------------------------------------------------- login and the shell

  function Login({ message, onAttempt, onLoggedIn }) {
    const [pw, setPw] = useState("");
    const [act, run] = useAction();
    const input = useRef(null);
    useEffect(() => input.current && input.current.focus(), []);
    return html`<section class="card narrow" id="view-login">
      <h2>Log in</h2>
      ${message ? html`<p class="notice" role="status" id="login-message">${message}</p>` : null}
      <form id="login-form" onSubmit=${(e) => { e.preventDefault(); onAttempt(); run(async () => { await login(pw); setPw(""); onLoggedIn(); return true; }); }}>
        <input type="text" name="username" value="admin" autocomplete="username" hidden />
        <${Field} label="Password"><input id="login-password" ref=${input} type="password" autocomplete="current-password" value=${pw} onInput=${(e) => setPw(e.target.value)} required /><//>
        <button type="submit" disabled=${act.busy}>${act.busy ? "Checking…" : "Log in"}</button>
        <${Err} error=${act.error} />
      </form>
    </section>`;
  }

  function useHash() {
    const [hash, setHash] = useState(location.hash);
    useEffect(() => {
      const on = () => setHash(location.hash);
      window.addEventListener("hashchange", on);
      return () => window.removeEventListener("hashchange", on);
    }, []);
    return hash.replace(/^#\/?/, "");
  }

  function applyTheme(theme) {
    if (theme === "auto") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.setAttribute("data-theme", theme);
  }

  function App() {
    // phase: loading | wizard | login | app
    const [phase, setPhase] = useState("loading");
    const [message, setMessage] = useState("");
    const [fatal, setFatal] = useState(null);
    const [status, setStatus] = useState(null);
    const [statusError, setStatusError] = useState(null);
    const [theme, setThemeState] = useState(localStorage.getItem(THEME_KEY) || "auto");
    const route = useHash();
    const setTheme = (t) => {
      localStorage.setItem(THEME_KEY, t);
      applyTheme(t);
      setThemeState(t);
    };

    const boot = useCallback(async () => {
      try {
        const auth = await api("GET", "/api/auth/status");
        setFatal(null);
        if (auth.password_set === false) {
          sessionStorage.removeItem(TOKEN_KEY);
          setPhase("wizard");
        } else if (!token()) {
          setPhase("login");
        } else {
          const setup = await api("GET", "/api/setup/status");
          setPhase(setup.complete || sessionStorage.getItem(DISMISSED_KEY) ? "app" : "wizard");
        }
      } catch (e) {
        setFatal(e);
        setTimeout(boot, 3000);
      }
    }, []);

    useEffect(() => {
      sessionEnded = () => {
        sessionStorage.removeItem(TOKEN_KEY);
        setStatus(null);
        setMessage("Your session has ended (logged out or expired). Log in again to continue.");
        setPhase("login");
      };
      boot();
    }, []);

    // The one live poll every screen shares: /api/status.
    const refresh = useRef(() => {});
    // When the miner last answered the status poll: while it does not, every value on the page
    // is as old as that, and the page dims them (the banner says since when).
    const lastSeen = useRef(Date.now());
    // Bumped by a mode switch from this page: an answer to a poll sent before it carries the
    // old mode and must not bring back the old mode's screens (and their refused requests).
    const modeSeq = useRef(0);
    useEffect(() => {
      if (phase !== "app") return undefined;
      // One chain of requests at a time, as in usePoll: a refresh or a visibility change while a
      // request is out asks for one more right after it instead of starting a second loop.
      let alive = true, timer = null, busy = false, again = false;
      const tick = async () => {
        timer = null;
        if (!alive || document.hidden) return;
        if (busy) {
          again = true;
          return;
        }
        busy = true;
        const seq = modeSeq.current;
        try {
          const s = await api("GET", "/api/status");
          if (alive && seq === modeSeq.current) {
            lastSeen.current = Date.now();
            setStatus(s);
            setStatusError(null);
          }
        } catch (e) {
          if (alive) setStatusError(e);
        }
        busy = false;
        if (!alive) return;
        if (again) {
          again = false;
          tick();
        } else timer = setTimeout(tick, STATUS_POLL_MS);
      };
      refresh.current = () => {
        if (timer !== null) clearTimeout(timer);
        tick();
      };
      const onVisible = () => !document.hidden && timer === null && tick();
      document.addEventListener("visibilitychange", onVisible);
      tick();
      return () => {
        alive = false;
        if (timer !== null) clearTimeout(timer);
        document.removeEventListener("visibilitychange", onVisible);
      };
    }, [phase]);

    const logout = async () => {
      try {
        await api("DELETE", "/api/auth/session/current");
      } catch (_) {
        // Logging out locally is what matters; the session expires on the miner anyway.
      }
      sessionStorage.removeItem(TOKEN_KEY);
      setStatus(null);
      setMessage("You are logged out.");
      setPhase("login");
    };

    const mode = status && status.mode;
    modeChanged = () => refresh.current();
    // The miner accepted a new mode: the page takes it at once, before any screen of the new
    // mode mounts, so no screen asks for a route with the old mode's idea of what is allowed.
    const modeSwitched = (m) => {
      modeSeq.current += 1;
      if (m) setStatus((s) => (s ? { ...s, mode: m } : s));
      refresh.current();
    };
    useEffect(() => {
      if (status && status.hostname) document.title = `${status.hostname} · svcOS`;
    }, [status && status.hostname]);

    let body;
    if (fatal) body = html`<section class="card narrow"><${Err} error=${fatal} /><p class="muted">Retrying…</p></section>`;
    else if (phase === "loading") body = html`<section class="card narrow"><p>Connecting to the miner…</p></section>`;
    else if (phase === "login") body = html`<${Login} message=${message} onAttempt=${() => setMessage("")} onLoggedIn=${() => { setMessage(""); boot(); }} />`;
    else if (phase === "wizard" || route === "setup")
      body = html`<${Wizard} onLoggedIn=${() => {}} onDone=${() => { location.hash = "#/"; setPhase("app"); }} />`;
    else if (!status) body = statusError ? html`<section class="card"><${Err} error=${statusError} /></section>` : html`<section class="card narrow"><p>Loading…</p></section>`;
    else {
      const screen = SCREENS.find((s) => s.id === route) || SCREENS.find((s) => s.id === HOME_SCREEN[mode]) || SCREENS[0];
      const allowed = MODE_RANK[mode] >= MODE_RANK[screen.needs];
      const View = screen.view();
      body = allowed
        ? html`<${View} key=${screen.id} status=${status} mode=${mode} theme=${theme} setTheme=${setTheme} onLogout=${logout} refreshStatus=${() => refresh.current()} />`
        : html`<${Gate} needs=${screen.needs} mode=${mode} onModeChanged=${modeSwitched} />`;
    }

    const inApp = phase === "app" && status && route !== "setup";
    const current = inApp ? (SCREENS.find((s) => s.id === route) || SCREENS.find((s) => s.id === HOME_SCREEN[mode]) || SCREENS[0]).id : null;
    return html`
      <a class="skip" href="#main">Skip to content</a>
      <header>
        <h1><img src=${document.querySelector("link[rel=icon]").href} alt="" width="24" height="24" /> <span id="hostname">${(status && status.hostname) || "svcOS"}</span></h1>
        ${inApp ? html`<${ModeSwitch} mode=${mode} onChanged=${modeSwitched} />` : null}
        ${inApp ? html`<button type="button" id="logout" class="secondary" onClick=${logout}>Log out</button>` : null}
      </header>
      ${inApp ? html`<nav aria-label="Screens"><ul>
        ${SCREENS.filter((s) => MODE_RANK[s.group] <= MODE_RANK[mode]).map((s) => html`<li><a href=${`#/${s.id}`} id=${`nav-${s.id}`} aria-current=${s.id === current ? "page" : undefined}>${s.label}</a></li>`)}
      </ul>
      <label class="nav-select"><span>Screen</span><select id="nav-select" value=${current} onChange=${(e) => { location.hash = `#/${e.target.value}`; }}>
        ${SCREENS.filter((s) => MODE_RANK[s.group] <= MODE_RANK[mode]).map((s) => html`<option value=${s.id}>${s.label}</option>`)}</select></label></nav>` : null}
      ${statusError && status ? html`<div id="banner" role="alert">The miner is not answering (${statusError.message}); the values below are from ${new Date(lastSeen.current).toLocaleTimeString()} and are dimmed until it answers again.</div>` : null}
      <main id="main" tabindex="-1" class=${statusError && status ? "stale" : ""} data-stale=${statusError && status ? "true" : "false"}>${body}</main>
      <${ConfirmHost} />
      <footer>svcOS · local only, no cloud · Preact, htm and uPlot (MIT / Apache-2.0)</footer>`;
  }

  function ModeSwitch({ mode, onChanged }) {
    const [act, run] = useAction();
    return html`<div class="seg mode-switch" role="radiogroup" aria-label="Operating mode">
      ${["home", "standard", "hacker"].map((m) => html`<button type="button" role="radio" id=${`mode-${m}`} aria-checked=${m === mode} class=${m === mode ? "on" : ""} disabled=${act.busy}
        onClick=${() => m !== mode && run(async () => { await switchMode(m); onChanged(m); location.hash = `#/${HOME_SCREEN[m]}`; })}>${MODE_LABEL[m]}</button>`)}
      ${act.error ? html`<span class="error" role="alert">${act.error.message}</span>` : null}
    </div>`;
  }

  applyTheme(localStorage.getItem(THEME_KEY) || "auto");
  render(html`<${App} />`, document.getElementById("app"));
})();
