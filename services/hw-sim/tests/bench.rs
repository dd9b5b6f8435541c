//! hw-sim figures for docs/PERFORMANCE.md. Prints, never asserts speed:
//!
//! ```sh
//! cargo test -p svcos-hw-sim --test bench -- --ignored --nocapture
//! ```
//!
//! * real SHA-256d rate of the hashing thread and its measured CPU share, per % of budget, on the
//!   full S9 preset (3 × 63 chips) fed one job per chain;
//! * wire time of an 88-byte job frame at 1 Mbaud through the PTY, against the 0.88 ms floor.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serialport::SerialPort;
use svcos_bm13xx::{
    BaudDivider, Command, Job, Pll, Response, ResponseDecoder, Target, TicketMask, reg,
};
use svcos_common::config::Config;
use svcos_hw_sim::{BoardSpec, Sim};

/// CPU time (user + system) of this process's thread named `name`, in seconds.
fn thread_cpu_s(name: &str) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = entry.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(path.join("stat")).unwrap();
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            let fields: Vec<&str> = after.split_whitespace().collect();
            let utime: f64 = fields[11].parse().unwrap();
            let stime: f64 = fields[12].parse().unwrap();
            return (utime + stime) / tick;
        }
    }
    0.0
}

fn open(path: &str) -> serialport::TTYPort {
    serialport::new(path, 115_200)
        .timeout(Duration::from_millis(5))
        .open_native()
        .unwrap()
}

fn bring_up(port: &mut serialport::TTYPort, chips: u32, baud: u32) {
    let mut send = |c: Command| port.write_all(&c.encode()).unwrap();
    send(Command::ChainInactive);
    for i in 0..chips {
        send(Command::SetAddress {
            address: svcos_bm13xx::chip_address(i, chips),
        });
    }
    send(Command::WriteRegister {
        target: Target::All,
        register: reg::PLL0_PARAMETER,
        value: Pll::for_frequency(650.0).unwrap().to_register(),
    });
    send(Command::WriteRegister {
        target: Target::All,
        register: reg::TICKET_MASK,
        value: TicketMask::for_difficulty(2e-5).to_register(),
    });
    send(Command::WriteRegister {
        target: Target::All,
        register: reg::MISC_CONTROL,
        value: BaudDivider::for_baud(baud).unwrap().to_misc_control(0),
    });
    port.flush().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    port.set_baud_rate(baud).unwrap();
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
#[ignore = "benchmark: prints figures"]
fn bench_hash_rate_and_wire_time() {
    let config = Config::default();
    let spec = BoardSpec::from_config(&config);
    let budget = spec.cpu_budget_percent;
    let calibrated = svcos_hw_sim::hasher::calibrate();
    let sim = Sim::start(spec.clone()).unwrap();
    let paths = sim.tty_paths();
    let mut ports: Vec<_> = paths.iter().map(|p| open(p)).collect();
    for port in &mut ports {
        bring_up(port, spec.chips_per_chain, 1_000_000);
        let mut header = [0u8; 80];
        header[0] = 0x20;
        header[72..76].copy_from_slice(&0x1703_4219u32.to_le_bytes());
        port.write_all(&Job::from_header_bytes(1, &header).encode())
            .unwrap();
    }

    // Hash rate over a fixed window, with the hasher thread's own CPU time.
    let window = Duration::from_secs(10);
    let hashes = |sim: &Sim| -> u64 {
        let api = sim.api();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let truth = rt
            .block_on(
                <svcos_hw_sim::HwSimApi as svcos_proto::hwsim::v1::hw_sim_service_server::HwSimService>::get_truth(
                    &api,
                    tonic::Request::new(svcos_proto::hwsim::v1::GetTruthRequest {}),
                ),
            )
            .unwrap()
            .into_inner();
        truth.chips.iter().map(|c| c.hashes_done).sum()
    };
    std::thread::sleep(Duration::from_secs(1));
    let (h0, c0, t0) = (hashes(&sim), thread_cpu_s("hasher"), Instant::now());
    // Keep draining the nonces so the PTY buffers never fill.
    let mut buf = [0u8; 4096];
    while t0.elapsed() < window {
        for port in &mut ports {
            let _ = port.read(&mut buf);
        }
    }
    let (h1, c1, elapsed) = (hashes(&sim), thread_cpu_s("hasher"), t0.elapsed());
    let rate = (h1 - h0) as f64 / elapsed.as_secs_f64();
    let cpu_percent = (c1 - c0) / elapsed.as_secs_f64() * 100.0;
    println!("calibrated single-thread SHA-256d (midstate path): {calibrated:.0} H/s");
    println!(
        "S9 preset, budget {budget}%: real {rate:.0} H/s, hasher CPU {cpu_percent:.2}% of a core, \
         {:.0} H/s per 1% CPU, virtual/real factor {:.3e}",
        rate / cpu_percent.max(0.01),
        sim.virtual_hashes_per_real_hash()
    );

    // Wire time: a job frame then a one-chip register read; the read's answer can only come back
    // after the job's 88 bytes and the read's 7 went in and its 11 came out.
    let port = &mut ports[0];
    let mut decoder = ResponseDecoder::new();
    let read = Command::ReadRegister {
        target: Target::Chip(0),
        register: reg::TICKET_MASK,
    }
    .encode();
    let job = Job::from_header_bytes(2, &[0x42; 80]).encode();
    let mut with_job = Vec::new();
    let mut without_job = Vec::new();
    for round in 0..200 {
        let send_job = round % 2 == 0;
        let mut frame = Vec::new();
        if send_job {
            frame.extend_from_slice(&job);
        }
        frame.extend_from_slice(&read);
        // Drain what is in flight so the measurement starts on an idle line.
        std::thread::sleep(Duration::from_millis(3));
        while port.read(&mut buf).is_ok() {}
        decoder = ResponseDecoder::new();
        let start = Instant::now();
        port.write_all(&frame).unwrap();
        'wait: loop {
            if let Ok(n) = port.read(&mut buf) {
                decoder.push(&buf[..n]);
                for r in decoder.by_ref() {
                    if matches!(r, Response::Register(_)) {
                        break 'wait;
                    }
                }
            }
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        let us = start.elapsed().as_secs_f64() * 1e6;
        if send_job {
            with_job.push(us);
        } else {
            without_job.push(us);
        }
    }
    let _ = decoder;
    with_job.sort_by(f64::total_cmp);
    without_job.sort_by(f64::total_cmp);
    let floor_with = svcos_bm13xx::wire_time_ns(88 + 7 + 11, 1_000_000) as f64 / 1000.0;
    let floor_without = svcos_bm13xx::wire_time_ns(7 + 11, 1_000_000) as f64 / 1000.0;
    println!(
        "1 Mbaud round trip, read only: min {:.0} p50 {:.0} p99 {:.0} us (floor {floor_without:.0} us)",
        without_job[0],
        percentile(&without_job, 0.5),
        percentile(&without_job, 0.99)
    );
    println!(
        "1 Mbaud round trip, job + read: min {:.0} p50 {:.0} p99 {:.0} us (floor {floor_with:.0} us)",
        with_job[0],
        percentile(&with_job, 0.5),
        percentile(&with_job, 0.99)
    );
    // Scheduling noise hits both series alike; the difference is what the job frame added.
    println!(
        "=> job frame wire time through the PTY: min-diff {:.0} us, p50-diff {:.0} us (floor 880 us)",
        with_job[0] - without_job[0],
        percentile(&with_job, 0.5) - percentile(&without_job, 0.5)
    );
    drop(ports);
    sim.stop();
}
