//! Solar-surplus and off-grid following: read a LAN JSON endpoint, decide run-at-N-watts or
//! sleep, and hand the decision to the power governor ([`super`]).
//!
//! The decision core ([`decide`]) is pure and time-injected. Hysteresis comes from two
//! thresholds (a sleeping miner needs `min_watt + wake_margin_watt` of solar surplus, or
//! `resume_soc_percent` of battery, to wake) plus a minimum dwell time between sleep/wake
//! changes. Two things override the dwell, because they protect equipment: a battery at its
//! stop threshold, and a source that failed [`FAIL_SAFE_ERRORS`] times in a row (we cannot know
//! what we are drawing, so we stop drawing).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use svcos_common::config::{Config, OffgridConfig, SolarConfig};
use svcos_common::net::is_lan;

/// Consecutive failed readings after which the follower sleeps the miner.
pub const FAIL_SAFE_ERRORS: u32 = 3;
/// Most decisions one verification-history request returns (the store keeps
/// [`crate::history::store::DECISION_CAP`]).
pub const HISTORY_LIMIT_MAX: u32 = 1000;
/// Deadline of one source reading (connect, request, body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest source body read, bytes.
const MAX_BODY: usize = 64 * 1024;

/// Which follower is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FollowerMode {
    /// `[energy.solar]`.
    Solar,
    /// `[energy.offgrid]`.
    Offgrid,
}

impl FollowerMode {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FollowerMode::Solar => "solar",
            FollowerMode::Offgrid => "offgrid",
        }
    }

    /// The enabled follower of a config.
    pub fn enabled(config: &Config) -> Option<Self> {
        if config.energy.solar.enabled {
            Some(FollowerMode::Solar)
        } else if config.energy.offgrid.enabled {
            Some(FollowerMode::Offgrid)
        } else {
            None
        }
    }
}

/// One reading of the energy source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Spare power for the miner, W.
    pub surplus_watt: Option<f64>,
    /// Battery state of charge, percent.
    pub soc_percent: Option<f64>,
    /// Battery voltage, V.
    pub voltage_v: Option<f64>,
}

/// The thresholds of one follower, whichever section they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Which follower.
    pub mode: FollowerMode,
    /// Sleep below this much spare power, W.
    pub min_watt: f64,
    /// Highest target, W (`f64::INFINITY` = none).
    pub max_watt: f64,
    /// Extra spare power needed to wake, W.
    pub wake_margin_watt: f64,
    /// Kept back for the house, W.
    pub reserve_watt: f64,
    /// Least time between sleep/wake changes, ms.
    pub min_dwell_ms: i64,
    /// Off-grid battery gates: (stop soc, resume soc, stop V, resume V); `None` for solar.
    pub battery: Option<(f64, f64, f64, f64)>,
    /// Source URL.
    pub url: String,
    /// Pointers: surplus, soc, voltage (empty = not read).
    pub pointers: [String; 3],
    /// Seconds between readings.
    pub poll_interval_s: u32,
}

impl Params {
    /// Thresholds of `[energy.solar]`.
    pub fn solar(s: &SolarConfig) -> Self {
        Params {
            mode: FollowerMode::Solar,
            min_watt: s.min_watt,
            max_watt: if s.max_watt > 0.0 {
                s.max_watt
            } else {
                f64::INFINITY
            },
            wake_margin_watt: s.wake_margin_watt,
            reserve_watt: s.reserve_watt,
            min_dwell_ms: i64::from(s.min_dwell_s) * 1000,
            battery: None,
            url: s.source_url.clone(),
            pointers: [s.surplus_watt_pointer.clone(), String::new(), String::new()],
            poll_interval_s: s.poll_interval_s,
        }
    }

    /// Thresholds of `[energy.offgrid]`.
    pub fn offgrid(o: &OffgridConfig) -> Self {
        Params {
            mode: FollowerMode::Offgrid,
            min_watt: o.min_watt,
            max_watt: o.max_watt,
            wake_margin_watt: 0.0,
            reserve_watt: 0.0,
            min_dwell_ms: i64::from(o.min_dwell_s) * 1000,
            battery: Some((
                o.stop_soc_percent,
                o.resume_soc_percent,
                o.stop_voltage_v,
                o.resume_voltage_v,
            )),
            url: o.source_url.clone(),
            pointers: [
                o.surplus_watt_pointer.clone(),
                o.soc_pointer.clone(),
                o.voltage_pointer.clone(),
            ],
            poll_interval_s: o.poll_interval_s,
        }
    }

    /// Thresholds of a mode in a config.
    pub fn of(config: &Config, mode: FollowerMode) -> Self {
        match mode {
            FollowerMode::Solar => Params::solar(&config.energy.solar),
            FollowerMode::Offgrid => Params::offgrid(&config.energy.offgrid),
        }
    }
}

/// The follower's memory between readings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FollowerState {
    /// The mode this state belongs to (a mode change starts afresh).
    pub mode: Option<FollowerMode>,
    /// Whether the follower wants the miner asleep.
    pub sleeping: bool,
    /// Target while running, W.
    pub target_watt: Option<f64>,
    /// Last sleep/wake change, Unix ms (`None` = no decision yet).
    pub last_change_ms: Option<i64>,
    /// Last reading attempt, Unix ms.
    pub last_poll_ms: i64,
    /// Last good reading.
    pub last_reading: Option<Reading>,
    /// Last error reading the source.
    pub last_error: Option<String>,
    /// Failed readings in a row.
    pub consecutive_errors: u32,
    /// The last decision with its reading, so a status answer needs no history query.
    pub last_decision: Option<HistoryEntry>,
}

/// Where a follower stands, as its status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Enabled, but no sleep/wake decision has been made yet.
    WaitingForReading,
    /// The follower wants the miner asleep.
    Sleeping,
    /// The follower lets the miner run (at `target_watt`, if any).
    Running,
}

impl FollowerState {
    /// The phase of this state: no decision yet means waiting, whatever the last reading.
    pub fn phase(&self) -> Phase {
        match (self.last_change_ms, self.sleeping) {
            (None, _) => Phase::WaitingForReading,
            (Some(_), true) => Phase::Sleeping,
            (Some(_), false) => Phase::Running,
        }
    }
}

/// The outcome of one reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Sleep the miner.
    pub sleep: bool,
    /// Target while running, W.
    pub target_watt: Option<f64>,
    /// Why, for the history and status.
    pub reason: String,
    /// A wanted sleep/wake change waits for the dwell time.
    pub held_by_dwell: bool,
}

/// Decide what to do with a reading (or a failed one). Pure.
pub fn decide(
    p: &Params,
    st: &FollowerState,
    reading: Result<&Reading, &str>,
    now_ms: i64,
) -> Step {
    let cap = |w: f64| w.clamp(p.min_watt, p.max_watt.max(p.min_watt));
    let reading = match reading {
        Ok(r) => r,
        Err(e) => {
            let errors = st.consecutive_errors + 1;
            return if errors >= FAIL_SAFE_ERRORS {
                Step {
                    sleep: true,
                    target_watt: None,
                    reason: format!("source failed {errors} times in a row ({e}): fail-safe sleep"),
                    held_by_dwell: false,
                }
            } else {
                Step {
                    sleep: st.sleeping,
                    target_watt: st.target_watt,
                    reason: format!("source failed ({e}): holding the last decision"),
                    held_by_dwell: false,
                }
            };
        }
    };
    let available = match reading.surplus_watt {
        Some(s) => (s - p.reserve_watt).min(p.max_watt),
        None => p.max_watt,
    };
    // Battery gates (off-grid): below stop = must sleep now; resume = may wake.
    let (battery_stop, battery_resume) = match p.battery {
        None => (false, true),
        Some((stop_soc, resume_soc, stop_v, resume_v)) => {
            let soc = reading.soc_percent;
            let v = reading.voltage_v;
            let stop = soc.is_some_and(|s| s <= stop_soc)
                || (stop_v > 0.0 && v.is_some_and(|v| v <= stop_v));
            let resume = soc.is_none_or(|s| s >= resume_soc)
                && (stop_v <= 0.0 || v.is_none_or(|v| v >= resume_v));
            (stop, resume)
        }
    };
    if battery_stop {
        return Step {
            sleep: true,
            target_watt: None,
            reason: "battery at its stop threshold: sleep".into(),
            held_by_dwell: false,
        };
    }
    let want_run = if st.sleeping || st.last_change_ms.is_none() {
        let wake_at = p.min_watt
            + if st.last_change_ms.is_none() {
                0.0
            } else {
                p.wake_margin_watt
            };
        available >= wake_at && battery_resume
    } else {
        available >= p.min_watt
    };
    let running_now = st.last_change_ms.is_some() && !st.sleeping;
    let dwell_left = st
        .last_change_ms
        .map_or(0, |t| (t + p.min_dwell_ms - now_ms).max(0));
    if st.last_change_ms.is_some() && want_run != running_now && dwell_left > 0 {
        return Step {
            sleep: st.sleeping,
            target_watt: if st.sleeping {
                None
            } else {
                Some(cap(available))
            },
            reason: format!(
                "wants to {} but holds for the minimum dwell ({} s left)",
                if want_run { "wake" } else { "sleep" },
                (dwell_left + 999) / 1000
            ),
            held_by_dwell: true,
        };
    }
    if want_run {
        Step {
            sleep: false,
            target_watt: Some(cap(available)),
            reason: format!("{available:.0} W available: run at {:.0} W", cap(available)),
            held_by_dwell: false,
        }
    } else {
        Step {
            sleep: true,
            target_watt: None,
            reason: if st.sleeping {
                format!(
                    "{available:.0} W available, waking needs {:.0} W: stay asleep",
                    p.min_watt + p.wake_margin_watt
                )
            } else {
                format!(
                    "{available:.0} W available, below {:.0} W: sleep",
                    p.min_watt
                )
            },
            held_by_dwell: false,
        }
    }
}

/// Apply a step to the state (records sleep/wake changes for the dwell).
pub fn advance(st: &mut FollowerState, step: &Step, reading: Result<&Reading, &str>, now_ms: i64) {
    let changed = st.last_change_ms.is_none() || step.sleep != st.sleeping;
    if changed {
        st.last_change_ms = Some(now_ms);
    }
    st.sleeping = step.sleep;
    st.target_watt = step.target_watt;
    st.last_poll_ms = now_ms;
    match reading {
        Ok(r) => {
            st.last_reading = Some(r.clone());
            st.last_error = None;
            st.consecutive_errors = 0;
        }
        Err(e) => {
            st.last_error = Some(e.to_string());
            st.consecutive_errors += 1;
        }
    }
}

/// One entry of the verification history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Unix ms.
    pub t_ms: i64,
    /// Which follower decided.
    pub mode: FollowerMode,
    /// The reading, when it succeeded.
    pub reading: Option<Reading>,
    /// The source error, when it failed.
    pub error: Option<String>,
    /// "run" or "sleep".
    pub decision: String,
    /// Chosen target, W.
    pub target_watt: Option<f64>,
    /// Why.
    pub reason: String,
    /// Input power measured when the decision was made (calibrated), W.
    pub actual_power_watt: Option<f64>,
    /// hw-agent's power target when the decision was made, W.
    pub hw_power_target_watt: Option<f64>,
    /// hw-agent's state when the decision was made.
    pub hw_state: Option<String>,
}

/// hyper-util's client for one request to `addr`, the LAN address the caller resolved and
/// checked: its resolver answers that address only, so the connection can never go to another
/// address a second lookup might return. No idle connection is kept between polls.
fn lan_client(
    addr: SocketAddr,
) -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector<VettedAddr>,
    http_body_util::Empty<Bytes>,
> {
    let connector =
        hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(VettedAddr(addr));
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
}

/// The resolver of [`lan_client`]: every name is the one vetted address.
#[derive(Clone, Copy)]
struct VettedAddr(SocketAddr);

impl tower::Service<hyper_util::client::legacy::connect::dns::Name> for VettedAddr {
    type Response = std::iter::Once<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        std::future::ready(Ok(std::iter::once(self.0)))
    }
}

/// GET a JSON document from a LAN `http://` URL (the host must resolve to a LAN address).
pub async fn fetch_json(url: &str) -> Result<Value, String> {
    tokio::time::timeout(FETCH_TIMEOUT, fetch_inner(url))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))
}

async fn fetch_inner(url: &str) -> Result<Value, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("bad URL: {e}"))?;
    if parsed.scheme() != "http" {
        return Err("only http:// sources on the LAN are read".into());
    }
    let port = parsed.port_or_known_default().unwrap_or(80);
    let host = match parsed.host() {
        Some(url::Host::Ipv6(v6)) => v6.to_string(),
        Some(host) => host.to_string(),
        None => return Err("URL has no host".into()),
    };
    let host = host.as_str();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let addr = addrs
        .iter()
        .copied()
        .find(|a| is_lan(a.ip()))
        .ok_or_else(|| format!("{host} is not a LAN address; svcOS reads local sources only"))?;
    let client = lan_client(addr);
    // Without the fragment, which never goes to a server.
    let req = http::Request::get(&parsed[..url::Position::AfterQuery])
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "svcOS-energy-follower")
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = client.request(req).await.map_err(|e| {
        let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), |c| c.to_string());
        if e.is_connect() {
            format!("cannot connect to {addr}: {cause}")
        } else {
            format!("request to {addr}: {cause}")
        }
    })?;
    if !resp.status().is_success() {
        return Err(format!("source answered HTTP {}", resp.status().as_u16()));
    }
    let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the body: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("source did not answer JSON: {e}"))
}

/// Pick the configured values out of a source document.
pub fn extract(doc: &Value, pointers: &[String; 3]) -> Result<Reading, String> {
    let get = |p: &String| -> Result<Option<f64>, String> {
        if p.is_empty() {
            return Ok(None);
        }
        let v = doc
            .pointer(p)
            .ok_or_else(|| format!("the source has nothing at {p}"))?;
        let n = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        n.filter(|n| n.is_finite())
            .map(Some)
            .ok_or_else(|| format!("{p} is not a number ({v})"))
    };
    Ok(Reading {
        surplus_watt: get(&pointers[0])?,
        soc_percent: get(&pointers[1])?,
        voltage_v: get(&pointers[2])?,
    })
}

/// Read the source of `p` once.
pub async fn read_source(p: &Params) -> Result<Reading, String> {
    let doc = fetch_json(&p.url).await?;
    extract(&doc, &p.pointers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-shot HTTP server on loopback answering `status` and `body`; returns its URL and
    /// the request it received.
    async fn serve_once(
        status: &'static str,
        body: &'static str,
    ) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap()
        });
        (format!("http://127.0.0.1:{port}/api/live?x=1"), served)
    }

    #[tokio::test]
    async fn a_lan_source_is_read_with_one_get() {
        let (url, served) = serve_once("200 OK", r#"{"soc": 71}"#).await;
        let doc = fetch_json(&url).await.unwrap();
        assert_eq!(doc["soc"], 71);
        let request = served.await.unwrap().to_ascii_lowercase();
        assert!(
            request.starts_with("get /api/live?x=1 http/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("\r\nhost: 127.0.0.1:"), "{request}");
        assert!(
            request.contains("\r\nuser-agent: svcos-energy-follower\r\n"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn source_failures_say_what_failed() {
        let (url, served) = serve_once("500 Internal Server Error", "{}").await;
        assert_eq!(
            fetch_json(&url).await.unwrap_err(),
            "source answered HTTP 500"
        );
        served.await.unwrap();
        let (url, served) = serve_once("200 OK", "not json").await;
        let err = fetch_json(&url).await.unwrap_err();
        assert!(err.starts_with("source did not answer JSON"), "{err}");
        served.await.unwrap();
        // Nobody listens on port 9 of loopback.
        let err = fetch_json("http://127.0.0.1:9/").await.unwrap_err();
        assert!(err.starts_with("cannot connect to 127.0.0.1:9: "), "{err}");
        let err = fetch_json("http://8.8.8.8/").await.unwrap_err();
        assert!(err.contains("not a LAN address"), "{err}");
        let err = fetch_json("https://127.0.0.1/").await.unwrap_err();
        assert!(err.contains("only http://"), "{err}");
    }

    fn solar() -> Params {
        Params::solar(&SolarConfig {
            enabled: true,
            min_watt: 300.0,
            max_watt: 1200.0,
            wake_margin_watt: 200.0,
            min_dwell_s: 60,
            ..Default::default()
        })
    }

    fn run(p: &Params, st: &mut FollowerState, r: Result<Reading, &str>, t: i64) -> Step {
        let step = decide(p, st, r.as_ref().map_err(|e| *e), t);
        advance(st, &step, r.as_ref().map_err(|e| *e), t);
        step
    }

    fn surplus(w: f64) -> Result<Reading, &'static str> {
        Ok(Reading {
            surplus_watt: Some(w),
            ..Default::default()
        })
    }

    #[test]
    fn phase_waits_for_the_first_decision_then_follows_sleep() {
        let mut st = FollowerState::default();
        assert_eq!(st.phase(), Phase::WaitingForReading);
        // A sleeping flag without a decision time is not a decision yet.
        st.sleeping = true;
        assert_eq!(st.phase(), Phase::WaitingForReading);
        st.last_change_ms = Some(1_000);
        assert_eq!(st.phase(), Phase::Sleeping);
        st.sleeping = false;
        assert_eq!(st.phase(), Phase::Running);
    }

    #[test]
    fn state_files_without_a_last_decision_still_load() {
        // follower.json written before `last_decision` existed: the member defaults to none.
        let old = r#"{"mode":"solar","sleeping":false,"target_watt":750.0,"last_change_ms":5}"#;
        let st: FollowerState = serde_json::from_str(old).expect("old state file");
        assert_eq!(st.last_decision, None);
        assert_eq!(st.phase(), Phase::Running);
    }

    #[test]
    fn solar_follows_with_hysteresis_and_dwell() {
        let p = solar();
        let mut st = FollowerState::default();
        let s = run(&p, &mut st, surplus(800.0), 0);
        assert_eq!((s.sleep, s.target_watt), (false, Some(800.0)));
        let s = run(&p, &mut st, surplus(5000.0), 1_000);
        assert_eq!(s.target_watt, Some(1200.0), "clamped to max");
        // Too little, but inside the dwell: hold running at the floor.
        let s = run(&p, &mut st, surplus(100.0), 2_000);
        assert!(!s.sleep && s.held_by_dwell, "{s:?}");
        assert_eq!(s.target_watt, Some(300.0));
        let s = run(&p, &mut st, surplus(100.0), 61_000);
        assert!(s.sleep, "{s:?}");
        // After the dwell, 400 W is above min but below min + margin: stay asleep.
        let s = run(&p, &mut st, surplus(400.0), 200_000);
        assert!(s.sleep, "{s:?}");
        let s = run(&p, &mut st, surplus(600.0), 201_000);
        assert_eq!((s.sleep, s.target_watt), (false, Some(600.0)));
    }

    #[test]
    fn offgrid_battery_gates_and_fail_safe() {
        let p = Params::offgrid(&OffgridConfig {
            enabled: true,
            source_url: "http://10.0.0.2/".into(),
            min_dwell_s: 600,
            ..Default::default()
        });
        let soc = |s: f64| {
            Ok(Reading {
                soc_percent: Some(s),
                ..Default::default()
            })
        };
        let mut st = FollowerState::default();
        assert_eq!(run(&p, &mut st, soc(90.0), 0).target_watt, Some(1000.0));
        // Battery protection overrides the dwell.
        assert!(run(&p, &mut st, soc(35.0), 1_000).sleep);
        assert!(
            run(&p, &mut st, soc(60.0), 700_000).sleep,
            "between stop and resume"
        );
        assert!(!run(&p, &mut st, soc(85.0), 800_000).sleep);
        assert!(!run(&p, &mut st, Err("down"), 801_000).sleep);
        assert!(!run(&p, &mut st, Err("down"), 802_000).sleep);
        assert!(run(&p, &mut st, Err("down"), 803_000).sleep, "fail-safe");
    }

    #[test]
    fn extract_reads_pointers_and_names_what_is_missing() {
        let doc = serde_json::json!({"pv": {"spare": "812.5"}, "bat": {"soc": 77}});
        let r = extract(
            &doc,
            &["/pv/spare".into(), "/bat/soc".into(), String::new()],
        )
        .unwrap();
        assert_eq!(r.surplus_watt, Some(812.5));
        assert_eq!(r.soc_percent, Some(77.0));
        let e = extract(&doc, &["/nope".into(), String::new(), String::new()]).unwrap_err();
        assert!(e.contains("/nope"), "{e}");
    }
}
