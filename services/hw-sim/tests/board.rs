//! hw-sim integration tests: start the production `run` on a socket in a temp dir, talk gRPC to
//! it and open its chain PTYs with the serialport crate, exactly as hw-agent does.
//!
//! Waits are "until a condition holds, within a generous deadline": no assertion depends on how
//! fast this machine is.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serialport::{SerialPort, TTYPort};
use svcos_bm13xx::{
    BaudDivider, ChipModel, Command, Job, NonceResponse, Pll, RegisterResponse, Response,
    ResponseDecoder, Target, TicketMask, reg,
};
use svcos_common::config::Config;
use svcos_common::entry::ServiceContext;
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::hwsim::v1 as pb;
use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use tonic::transport::Channel;

/// Generous upper bound for anything eventually-true (a slow, shared CI machine).
const DEADLINE: Duration = Duration::from_secs(60);

struct Harness {
    rt: tokio::runtime::Runtime,
    client: HwSimServiceClient<Channel>,
    shutdown: Shutdown,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn start(chips: u32, budget_percent: f64) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::sim(dir.path());
        let mut config = Config::default();
        config.hardware.chains = 2;
        config.hardware.chips_per_chain = chips;
        config.sim.cpu_budget_percent = budget_percent;
        config.sim.seed = 7;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = Shutdown::new();
        let socket = layout.socket(ServiceName::HwSim);
        let ctx = ServiceContext {
            name: ServiceName::HwSim,
            layout: layout.clone(),
            config,
        };
        let server = {
            // Binding a tokio listener needs the runtime's reactor.
            let _enter = rt.enter();
            let listener = svcos_common::ipc::bind(&socket).unwrap();
            rt.spawn(svcos_hw_sim::run(ctx, listener, shutdown.clone()))
        };
        let client = rt.block_on(async {
            let start = Instant::now();
            while !svcos_common::ipc::check_health(
                &layout,
                ServiceName::HwSim,
                Duration::from_secs(1),
            )
            .await
            {
                assert!(start.elapsed() < DEADLINE, "hw-sim never became healthy");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            HwSimServiceClient::new(svcos_common::ipc::channel_with_timeout(
                layout.socket(ServiceName::HwSim),
                Duration::from_secs(10),
            ))
        });
        Harness {
            rt,
            client,
            shutdown,
            server: Some(server),
            _dir: dir,
        }
    }

    fn board(&mut self) -> pb::GetBoardResponse {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.get_board(pb::GetBoardRequest {}))
            .unwrap()
            .into_inner()
    }

    fn truth(&mut self) -> pb::GetTruthResponse {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.get_truth(pb::GetTruthRequest {}))
            .unwrap()
            .into_inner()
    }

    fn inject(&mut self, kind: &str, chain_id: u32, chip: u32, fan_id: u32, value: f64) {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.inject_fault(pb::InjectFaultRequest {
                kind: kind.into(),
                chain_id,
                chip,
                fan_id,
                value,
                ..Default::default()
            }))
            .unwrap();
    }

    fn clear_faults(&mut self) {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.clear_faults(pb::ClearFaultsRequest {}))
            .unwrap();
    }

    fn i2c(&mut self, address: u32, write: &[u8], read_len: u32) -> Vec<u8> {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.i2c_transfer(pb::I2cTransferRequest {
                bus: 0,
                address,
                write: write.to_vec(),
                read_len,
            }))
            .unwrap()
            .into_inner()
            .read
    }

    fn set_fan(&mut self, fan_id: u32, pwm_percent: u32) {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.set_fan_pwm(pb::SetFanPwmRequest {
                fan_id,
                pwm_percent,
            }))
            .unwrap();
    }

    fn fans(&mut self) -> Vec<pb::FanReading> {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.read_fans(pb::ReadFansRequest {}))
            .unwrap()
            .into_inner()
            .fans
    }

    fn gpio(&mut self, line: &str) -> bool {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.read_gpio(pb::ReadGpioRequest { line: line.into() }))
            .unwrap()
            .into_inner()
            .value
    }

    fn set_gpio(&mut self, line: &str, value: bool) {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.set_gpio(pb::SetGpioRequest {
                line: line.into(),
                value,
            }))
            .unwrap();
    }

    fn press_button(&mut self, hold_ms: u64) {
        let mut c = self.client.clone();
        self.rt
            .block_on(c.press_button(pb::PressButtonRequest { hold_ms }))
            .unwrap();
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Some(server) = self.server.take() {
            let _ = self.rt.block_on(server);
        }
    }
}

/// Poll `f` until it returns Some, within [`DEADLINE`].
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host side of one chain: a serial port plus a response decoder.
struct Link {
    port: TTYPort,
    decoder: ResponseDecoder,
}

impl Link {
    fn open(path: &str) -> Link {
        let port = serialport::new(path, 115_200)
            .timeout(Duration::from_millis(20))
            .open_native()
            .unwrap();
        Link {
            port,
            decoder: ResponseDecoder::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.port.write_all(bytes).unwrap();
    }

    fn command(&mut self, cmd: Command) {
        self.send(&cmd.encode());
    }

    /// Read for up to `window`, returning every decoded response.
    fn read_for(&mut self, window: Duration) -> Vec<Response> {
        let start = Instant::now();
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        while start.elapsed() < window {
            match self.port.read(&mut buf) {
                Ok(n) => self.decoder.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("read: {e}"),
            }
            out.extend(self.decoder.by_ref());
        }
        out
    }

    /// Read until `n` register responses arrived (within [`DEADLINE`]); nonces in between
    /// are skipped.
    fn registers(&mut self, n: usize) -> Vec<RegisterResponse> {
        let start = Instant::now();
        let mut out = Vec::new();
        while out.len() < n {
            assert!(
                start.elapsed() < DEADLINE,
                "got {} of {n} register responses",
                out.len()
            );
            out.extend(
                self.read_for(Duration::from_millis(20))
                    .into_iter()
                    .filter_map(|r| match r {
                        Response::Register(r) => Some(r),
                        Response::Nonce(_) => None,
                    }),
            );
        }
        out
    }

    fn read_chip_ids(&mut self, expect: usize) -> Vec<RegisterResponse> {
        self.command(Command::ReadRegister {
            target: Target::All,
            register: reg::CHIP_ADDRESS,
        });
        self.registers(expect)
    }

    fn write_all_chips(&mut self, register: u8, value: u32) {
        self.command(Command::WriteRegister {
            target: Target::All,
            register,
            value,
        });
    }

    /// Enumerate, assign addresses at 256 / chips, switch to `baud`, set the PLL, ticket mask
    /// and version mask: a bring-up as hw-agent does it.
    fn bring_up(&mut self, chips: u32, baud: u32, mhz: f64, ticket: TicketMask) {
        let ids = self.read_chip_ids(chips as usize);
        assert!(
            ids.iter()
                .all(|r| r.value >> 16 == u32::from(ChipModel::Bm1387.chip_id()))
        );
        self.command(Command::ChainInactive);
        for i in 0..chips {
            self.command(Command::SetAddress {
                address: svcos_bm13xx::chip_address(i, chips),
            });
        }
        let misc = BaudDivider::for_baud(baud).unwrap().to_misc_control(0);
        self.write_all_chips(reg::MISC_CONTROL, misc);
        // Let the command leave before the host switches its own side, as a real driver does.
        self.port.flush().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        self.port.set_baud_rate(baud).unwrap();
        self.write_all_chips(
            reg::PLL0_PARAMETER,
            Pll::for_frequency(mhz).unwrap().to_register(),
        );
        self.write_all_chips(reg::TICKET_MASK, ticket.to_register());
        self.write_all_chips(
            reg::VERSION_MASK,
            svcos_bm13xx::version_mask_register(VERSION_MASK),
        );
    }
}

const VERSION_MASK: u32 = 0x1fff_e000;

/// A synthetic Stratum-like template turned into a header with svcos-work.
fn synthetic_job(job_id: u8) -> (svcos_work::Job, Job) {
    let work = svcos_work::Job {
        prev_hash: [0x11; 32],
        coinb1: b"\x01\x00\x00\x00synthetic-coinbase-part-1".to_vec(),
        coinb2: b"part-2\xff\xff\xff\xff".to_vec(),
        extranonce1: vec![0xde, 0xad, 0xbe, 0xef],
        merkle_branch: vec![[0x22; 32], [0x33; 32]],
        version: 0x2000_0000,
        nbits: 0x1703_4219,
        ntime: 0x6740_0000,
    };
    let header = work.header(svcos_work::Roll {
        extranonce2: &[0, 0, 0, 1],
        ntime: work.ntime,
        version: work.version,
        nonce: 0,
    });
    let bytes = svcos_work::header_bytes(&header);
    (work, Job::from_header_bytes(job_id, &bytes))
}

#[test]
fn serialport_opens_every_chain_at_every_chain_speed() {
    let mut h = Harness::start(2, 3.0);
    let board = h.board();
    assert_eq!(board.chains.len(), 2);
    for chain in &board.chains {
        let mut port = serialport::new(&chain.tty_path, 115_200)
            .timeout(Duration::from_millis(20))
            .open_native()
            .unwrap();
        for baud in [115_200, 1_000_000, 1_562_500, 3_125_000] {
            port.set_baud_rate(baud).unwrap();
            assert_eq!(port.baud_rate().unwrap(), baud);
        }
    }
    assert!(board.virtual_hashes_per_real_hash > 1.0);
    assert_eq!(board.psu_address, 0x10);
    assert!(board.gpio_lines.contains(&"chain1_reset".to_string()));
}

#[test]
fn bring_up_then_real_job_yields_nonces_that_verify() {
    let chips = 4;
    let mut h = Harness::start(chips, 20.0);
    let board = h.board();
    let mut link = Link::open(&board.chains[0].tty_path);
    let ticket = TicketMask::for_difficulty(2f64.powi(-20));
    link.bring_up(chips, 1_000_000, 650.0, ticket);

    // Read back at the new speed: every chip answers with its assigned address.
    let ids = link.read_chip_ids(chips as usize);
    let addrs: Vec<u8> = ids.iter().map(|r| r.chip_address).collect();
    assert_eq!(addrs, vec![0, 64, 128, 192]);
    let truth = h.truth();
    assert_eq!(truth.chains[0].baud, 1_000_000);
    assert!(
        truth.chips[..4]
            .iter()
            .all(|c| (c.frequency_mhz - 650.0).abs() < 6.5)
    );

    let (work, job) = synthetic_job(0x28);
    link.send(&job.encode());
    let mut good = 0;
    let mut bad = 0;
    let mut rolled = 0;
    let mut chips_seen = std::collections::BTreeSet::new();
    let start = Instant::now();
    while good < 12 {
        assert!(start.elapsed() < DEADLINE, "only {good} good nonces");
        for r in link.read_for(Duration::from_millis(50)) {
            let Response::Nonce(NonceResponse {
                nonce,
                chip_address,
                job_id,
                version_bits,
            }) = r
            else {
                continue;
            };
            assert_eq!(job_id, 0x28);
            let version = svcos_bm13xx::rolled_version(job.version, VERSION_MASK, version_bits);
            let merkle = work.merkle_root(&[0, 0, 0, 1]);
            let header = work.header_with_root(merkle, job.ntime, version, nonce);
            let hash = svcos_work::header_hash(&header);
            let index = svcos_bm13xx::chip_index_for_nonce(nonce, chips).unwrap();
            assert_eq!(svcos_bm13xx::chip_address(index, chips), chip_address);
            if ticket.accepts(&hash) {
                assert!(svcos_work::hash_difficulty(&hash) >= ticket.difficulty() * 0.9999);
                good += 1;
                chips_seen.insert(index);
                if version != job.version {
                    rolled += 1;
                }
            } else {
                bad += 1;
            }
        }
    }
    assert!(rolled > 0, "version rolling never showed");
    assert!(chips_seen.len() > 1, "{chips_seen:?}");
    let truth = h.truth();
    let sent_bad: u64 = truth.chips.iter().map(|c| c.hw_errors_sent).sum();
    assert!(
        bad <= sent_bad,
        "{bad} bad nonces but the sim sent {sent_bad}"
    );
    assert!(
        truth.chips[..4]
            .iter()
            .all(|c| c.hashing && c.hashes_done > 0)
    );
    assert!(
        truth.chips[4..].iter().all(|c| !c.hashing),
        "chain 1 had no job"
    );
    assert_eq!(truth.chains[0].jobs_received, 1);

    // The host goes away (hw-agent killed): the chips keep hashing their last job, and a new
    // host re-attaches at the running baud with every address intact, without a bring-up.
    drop(link);
    let hashed = |t: &pb::GetTruthResponse| t.chips[..4].iter().map(|c| c.hashes_done).sum::<u64>();
    let before = hashed(&truth);
    eventually("hashing while detached", || {
        (hashed(&h.truth()) > before).then_some(())
    });
    let mut link = Link::open(&board.chains[0].tty_path);
    link.port.set_baud_rate(1_000_000).unwrap();
    let ids = link.read_chip_ids(chips as usize);
    let addrs: Vec<u8> = ids.iter().map(|r| r.chip_address).collect();
    assert_eq!(addrs, vec![0, 64, 128, 192]);
    assert!(h.truth().chips[..4].iter().all(|c| c.hashing));
}

#[test]
fn faults_change_what_the_wire_shows() {
    let chips = 4;
    let mut h = Harness::start(chips, 3.0);
    let board = h.board();
    let mut link = Link::open(&board.chains[1].tty_path);
    link.bring_up(chips, 1_000_000, 500.0, TicketMask::power_on());
    assert_eq!(link.read_chip_ids(4).len(), 4);

    // A dead chip stops answering.
    h.inject("dead_chip", 1, 2, 0, 0.0);
    let ids = link.read_chip_ids(3);
    assert_eq!(
        ids.iter().map(|r| r.chip_address).collect::<Vec<_>>(),
        vec![0, 64, 192]
    );
    assert!(!h.truth().chips[chips as usize + 2].alive);

    // CRC noise: responses arrive corrupted and the decoder counts and skips them.
    h.inject("crc_noise", 1, 0, 0, 0.2);
    let before = link.decoder.stats();
    eventually("CRC errors", || {
        link.read_chip_ids(0);
        link.read_for(Duration::from_millis(20));
        (link.decoder.stats().crc_errors > before.crc_errors).then_some(())
    });
    h.clear_faults();
    link.read_for(Duration::from_millis(100));

    // Unplugged: silence, whatever the host sends.
    h.inject("chain_unplugged", 1, 0, 0, 0.0);
    assert!(!h.truth().chains[1].powered);
    link.read_for(Duration::from_millis(50));
    link.command(Command::ReadRegister {
        target: Target::All,
        register: reg::CHIP_ADDRESS,
    });
    assert!(link.read_for(Duration::from_millis(300)).is_empty());

    // Plugged back in, the board has been power-cycled: 115200 and no addresses.
    h.clear_faults();
    link.port.set_baud_rate(115_200).unwrap();
    let ids = link.read_chip_ids(4);
    assert!(ids.iter().all(|r| r.chip_address == 0));
    assert_eq!(h.truth().chains[1].baud, 115_740);

    // Chain reset held: silent; released: chips at power-on.
    h.set_gpio("chain1_reset", true);
    assert!(h.gpio("chain1_reset"));
    link.read_for(Duration::from_millis(50));
    link.command(Command::ReadRegister {
        target: Target::All,
        register: reg::CHIP_ADDRESS,
    });
    assert!(link.read_for(Duration::from_millis(300)).is_empty());
    h.set_gpio("chain1_reset", false);
    assert_eq!(link.read_chip_ids(4).len(), 4);
}

#[test]
fn psu_fans_sensors_button_over_the_api() {
    let mut h = Harness::start(3, 3.0);
    let board = h.board();
    assert_eq!(board.fans, 2);

    // Fans: more PWM, more RPM; a stalled fan reads 0.
    let mut settled = Vec::new();
    for pwm in [20, 60, 100] {
        h.set_fan(0, pwm);
        let mut last = 0;
        let rpm = eventually("fan to settle", || {
            let rpm = h.fans()[0].rpm;
            let done = rpm > 0 && rpm.abs_diff(last) <= 1;
            last = rpm;
            std::thread::sleep(Duration::from_millis(100));
            done.then_some(rpm)
        });
        settled.push(rpm);
    }
    assert!(
        settled[0] < settled[1] && settled[1] < settled[2],
        "{settled:?}"
    );
    h.inject("fan_stall", 0, 0, 1, 0.0);
    eventually("stalled fan to read 0", || {
        (h.fans()[1].rpm == 0).then_some(())
    });
    assert_eq!(h.fans()[1].pwm_percent, 100);

    // PSU: the output follows the setpoint.
    h.i2c(0x10, &[0x21, 0x1c, 0x25], 0); // 9500 mV
    eventually("PSU output to reach 9500 mV", || {
        let r = h.i2c(0x10, &[0x8b], 2);
        (u16::from_le_bytes([r[0], r[1]]) == 9500).then_some(())
    });
    let model = h.i2c(0x10, &[0x9a], 7);
    assert_eq!(&model[1..7], b"APW3++");
    h.inject("psu_fault", 0, 0, 0, 0.0);
    let status = h.i2c(0x10, &[0x79], 2);
    let status = u16::from_le_bytes([status[0], status[1]]);
    assert_ne!(status & (1 << 6), 0, "OFF");
    assert_ne!(status & (1 << 4), 0, "IOUT_OC");
    assert!(!h.truth().psu_on);
    h.clear_faults();

    // Board sensor: an overheat fault adds its degrees.
    let read_temp = |h: &mut Harness, address| {
        let r = h.i2c(address, &[0x00], 2);
        f64::from((i16::from_be_bytes([r[0], r[1]])) >> 4) / 16.0
    };
    let before = read_temp(&mut h, 0x48);
    h.inject("overheat", 0, 0, 0, 40.0);
    let after = read_temp(&mut h, 0x48);
    assert!(after >= before + 35.0, "{before} -> {after}");
    assert!(h.truth().faults.iter().any(|f| f.contains("overheat")));

    // The button reads pressed while held.
    assert!(!h.gpio("button"));
    h.press_button(30_000);
    assert!(h.gpio("button"));
    h.press_button(0);
    eventually("button release", || (!h.gpio("button")).then_some(()));
}

#[test]
fn temperature_rises_with_frequency_on_a_hashing_chain() {
    let chips = 3;
    let mut h = Harness::start(chips, 3.0);
    let board = h.board();
    let mut link = Link::open(&board.chains[0].tty_path);
    link.bring_up(chips, 115_200, 800.0, TicketMask::power_on());
    link.send(&synthetic_job(1).1.encode());
    // Chain 0 hashes at 800 MHz, chain 1 idles at power-on frequency with no job: the chip-side
    // sensor of chain 0 must end up hotter.
    eventually("chain 0 hotter than chain 1", || {
        let hot = h.i2c(0x4c, &[0x00], 2);
        let cold = h.i2c(0x4d, &[0x00], 2);
        let hot = i16::from_be_bytes([hot[0], hot[1]]);
        let cold = i16::from_be_bytes([cold[0], cold[1]]);
        (hot > cold + 16 * 5).then_some(())
    });
    let truth = h.truth();
    assert!(truth.chips[0].power_watt > truth.chips[chips as usize].power_watt);
}
