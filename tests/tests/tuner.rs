//! The autotuner on the whole simulated stack: real hw-sim silicon (seeded quality, P ~ f V^2
//! plus leakage, errors past each chip's stable frequency, heat from power), real hw-agent, real
//! pool. The tuner sees the silicon only through telemetry and nonces, as on a miner.
//!
//! One test walks the story in order, because each step needs the previous one's state and a
//! sim start costs seconds: converge to a power target below stock while shares keep being
//! accepted; survive a SIGKILL by resuming the saved profile without a search; back off on an
//! injected overheat.

use std::path::Path;
use std::time::{Duration, Instant};

use svcos_common::ipc;
use svcos_e2e::{Sim, SimOptions};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{GetTelemetryRequest, MiningState, Telemetry};
use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use svcos_proto::hwsim::v1::{ClearFaultsRequest, InjectFaultRequest};
use svcos_proto::stratum::v1::GetPoolsRequest;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::tuner::v1::tuner_service_client::TunerServiceClient;
use svcos_proto::tuner::v1::{GetStateRequest, GetStateResponse};
use tonic::transport::Channel;

const TARGET_WATT: f64 = 1000.0;
/// Generous: the sim runs on a loaded 2-core machine; nothing here measures speed.
const DEADLINE: Duration = Duration::from_secs(900);

fn channel(path: &Path) -> Channel {
    ipc::channel_with_timeout(path.to_path_buf(), Duration::from_secs(10))
}

struct Clients {
    rt: tokio::runtime::Runtime,
    tuner: TunerServiceClient<Channel>,
    hw: HwAgentServiceClient<Channel>,
    sim: HwSimServiceClient<Channel>,
    stratum: StratumServiceClient<Channel>,
}

impl Clients {
    fn new(sim: &Sim) -> Clients {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _guard = rt.enter();
        Clients {
            tuner: TunerServiceClient::new(channel(&sim.socket("tuner"))),
            hw: HwAgentServiceClient::new(channel(&sim.socket("hw-agent"))),
            sim: HwSimServiceClient::new(channel(&sim.socket("hw-sim"))),
            stratum: StratumServiceClient::new(channel(&sim.socket("stratum-agent"))),
            rt,
        }
    }

    fn state(&self) -> Option<GetStateResponse> {
        let mut c = self.tuner.clone();
        self.rt
            .block_on(c.get_state(GetStateRequest {}))
            .ok()
            .map(|r| r.into_inner())
    }

    fn telemetry(&self) -> Telemetry {
        let mut c = self.hw.clone();
        self.rt
            .block_on(c.get_telemetry(GetTelemetryRequest {
                include_chips: false,
            }))
            .unwrap()
            .into_inner()
            .telemetry
            .unwrap()
    }

    fn accepted(&self) -> u64 {
        let mut c = self.stratum.clone();
        self.rt
            .block_on(c.get_pools(GetPoolsRequest {}))
            .unwrap()
            .into_inner()
            .accepted
    }

    fn wait_state(&self, what: &str, f: impl Fn(&GetStateResponse) -> bool) -> GetStateResponse {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < DEADLINE {
            if let Some(s) = self.state() {
                if f(&s) {
                    return s;
                }
                last = Some(s);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("tuner never reached {what}: last state {last:#?}");
    }

    /// Mean PSU power over a few telemetry seconds.
    fn mean_power(&self) -> f64 {
        let mut sum = 0.0;
        for _ in 0..5 {
            sum += self.telemetry().power_watt;
            std::thread::sleep(Duration::from_secs(1));
        }
        sum / 5.0
    }
}

#[test]
fn tuner_converges_keeps_mining_resumes_after_a_kill_and_backs_off_on_overheat() {
    let mut sim = Sim::start(SimOptions {
        config_patch: Some(format!(
            "[tuner]\nenabled = true\nmode = \"power\"\npower_target_watt = {TARGET_WATT}\n\
             step_interval_ms = 500\nsettle_s = 2\nwindow_s = 4\npower_tolerance_percent = 2.0\n\
             voltage_step_mv = 200.0\nmin_voltage_mv = 8200.0\n"
        )),
        ..Default::default()
    })
    .unwrap();
    let c = Clients::new(&sim);

    // Stock draws well above the target (the search has something to do).
    let tuning = c.wait_state("tuning", |s| s.state == "tuning");
    assert_eq!(tuning.power_target_watt, TARGET_WATT);
    let accepted_at_start = c.accepted();
    let start = Instant::now();
    let mut not_mining = Vec::new();
    let tuned = loop {
        assert!(
            start.elapsed() < DEADLINE,
            "no tuned state: {:#?}",
            c.state()
        );
        let t = c.telemetry();
        if t.state() != MiningState::Mining {
            not_mining.push((t.state(), t.state_reason.clone()));
        }
        if let Some(s) = c.state().filter(|s| s.state == "tuned") {
            break s;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        not_mining.is_empty(),
        "mining stopped while tuning: {not_mining:?}"
    );
    let power = c.mean_power();
    assert!(
        (power - TARGET_WATT).abs() <= TARGET_WATT * 0.05,
        "power {power:.0} W vs target {TARGET_WATT} W; {tuned:#?}"
    );
    println!(
        "tuned: {power:.0} W at {} mV, chains {:?}, after {:?}",
        tuned.voltage_mv,
        tuned
            .chains
            .iter()
            .map(|c| (c.frequency_mhz.round(), c.chips.len()))
            .collect::<Vec<_>>(),
        tuned
            .transitions
            .iter()
            .map(|t| (&t.to, &t.reason))
            .collect::<Vec<_>>()
    );
    assert!(tuned.voltage_mv >= 8200.0 && tuned.voltage_mv <= 8800.0 * 1.05);
    // Shares kept being accepted while the tuner moved frequencies and voltage.
    let deadline = Instant::now() + Duration::from_secs(120);
    while c.accepted() <= accepted_at_start {
        assert!(
            Instant::now() < deadline,
            "no share accepted since tuning began"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        sim.dir()
            .join("state/tuner/boards")
            .read_dir()
            .unwrap()
            .count()
            >= 1
    );

    // SIGKILL: the restarted tuner resumes the saved profile without a search.
    let point = (tuned.voltage_mv, tuned.chains.clone());
    sim.kill_service_and_wait("tuner").unwrap();
    let resumed = c.wait_state("tuned after the restart", |s| {
        s.state == "tuned" && s.board_serial == tuned.board_serial
    });
    assert!(resumed.resumed, "{resumed:#?}");
    assert!(resumed.reason.contains("resumed"), "{}", resumed.reason);
    assert!(
        !resumed.transitions.iter().any(|t| t.to == "tuning"),
        "searched again: {:#?}",
        resumed.transitions
    );
    assert_eq!((resumed.voltage_mv, resumed.chains.clone()), point);
    assert_eq!(resumed.profile, tuned.profile);

    // Overheat: a chain reads hotter than the tuner's limit (thermal.hot_temp_c - 5 = 85 C) but
    // below hw-agent's own cut-back (90 C): the tuner backs off and lowers its power target.
    let hottest = c.telemetry().temp_max_c;
    let degrees = (85.0 - hottest + 3.0).max(1.0);
    let mut hs = c.sim.clone();
    c.rt.block_on(hs.inject_fault(InjectFaultRequest {
        kind: "overheat".into(),
        chain_id: 0,
        value: degrees,
        ..Default::default()
    }))
    .unwrap();
    let backoff = c.wait_state("backoff", |s| {
        s.state == "backoff" || s.dps_reduction_watt > 0.0
    });
    let after = c.wait_state("a lowered power target", |s| {
        s.dps_reduction_watt > 0.0 && s.power_target_watt < TARGET_WATT
    });
    assert!(
        after.transitions.iter().any(|t| t.to == "backoff"),
        "{backoff:#?}"
    );
    c.rt.block_on(hs.clear_faults(ClearFaultsRequest {}))
        .unwrap();
}
