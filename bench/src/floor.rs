//! The host's wake-up floor: how late a thread that sleeps to a deadline wakes on each CPU, with
//! nothing else of ours running (the method of `cyclictest`).
//!
//! Every hop of the share path is a wake-up: a thread blocked in `epoll`/`poll` that the kernel
//! makes runnable. If the machine itself wakes a real-time thread late by a millisecond several
//! times a second (a virtual CPU the hypervisor descheduled, an interrupt storm), no firmware can
//! hold a p99 below that on a path of several wake-ups. Measuring it before each run says
//! whether the run's tails are the firmware's or the host's.

use std::time::Duration;

use crate::Samples;

/// The SCHED_FIFO priority of the probe threads, as `cyclictest -p 90`: above every normal
/// thread, so only the kernel and the hypervisor can make them late.
const PROBE_PRIORITY: i32 = 90;

/// One CPU's wake-up lateness.
pub struct CpuFloor {
    pub cpu: usize,
    pub lateness: Samples,
}

/// The floor on every online CPU.
pub struct WakeFloor {
    pub cpus: Vec<CpuFloor>,
    /// The probe threads ran SCHED_FIFO (needs root or CAP_SYS_NICE); otherwise as normal
    /// threads, which the report says.
    pub fifo: bool,
    /// Each thread was pinned to its CPU.
    pub pinned: bool,
    pub period: Duration,
    pub wall: Duration,
}

fn monotonic_now() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

fn nanos(ts: &libc::timespec) -> i128 {
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn timespec(ns: i128) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Pin the calling thread to `cpu`; false if the kernel refused (an offline CPU, a cpuset).
fn pin(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Make the calling thread SCHED_FIFO at [`PROBE_PRIORITY`]; false without the privilege.
fn fifo() -> bool {
    let param = libc::sched_param {
        sched_priority: PROBE_PRIORITY,
    };
    // SAFETY: sched_setscheduler reads the param we own, for the calling thread (pid 0).
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Sleep to absolute deadlines `period` apart for `wall` on one CPU; each sample is how long
/// after its deadline the thread ran again.
fn probe(cpu: usize, period: Duration, wall: Duration) -> (Samples, bool, bool) {
    let pinned = pin(cpu);
    let fifo = fifo();
    let count = (wall.as_nanos() / period.as_nanos().max(1)) as usize;
    let mut lateness = Samples::with_capacity(count);
    let mut deadline = nanos(&monotonic_now());
    for _ in 0..count {
        deadline += period.as_nanos() as i128;
        let at = timespec(deadline);
        // SAFETY: clock_nanosleep reads the deadline we own; with TIMER_ABSTIME no remainder
        // is written. An interrupted sleep (EINTR) just yields an early sample of 0.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &at,
                std::ptr::null_mut(),
            )
        };
        let late = nanos(&monotonic_now()) - deadline;
        lateness.push(Duration::from_nanos(late.max(0) as u64));
    }
    (lateness, pinned, fifo)
}

/// Run one probe thread per online CPU for `wall`, all at once.
pub fn measure(wall: Duration, period: Duration) -> WakeFloor {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let threads: Vec<_> = (0..online)
        .map(|cpu| (cpu, std::thread::spawn(move || probe(cpu, period, wall))))
        .collect();
    let mut floor = WakeFloor {
        cpus: Vec::with_capacity(online),
        fifo: true,
        pinned: true,
        period,
        wall,
    };
    for (cpu, thread) in threads {
        let Ok((lateness, pinned, fifo)) = thread.join() else {
            continue;
        };
        floor.fifo &= fifo;
        floor.pinned &= pinned;
        floor.cpus.push(CpuFloor { cpu, lateness });
    }
    floor
}

/// Measure and print the floor for `seconds` (1 ms deadlines) unless it is 0; for the
/// benchmarks to run before they start their own load.
pub fn print_before_run(seconds: u64) {
    if seconds == 0 {
        return;
    }
    let mut floor = measure(Duration::from_secs(seconds), Duration::from_millis(1));
    println!("{}", floor.report());
}

impl WakeFloor {
    /// One line per CPU and a heading, in microseconds.
    pub fn report(&mut self) -> String {
        let how = match (self.fifo, self.pinned) {
            (true, true) => format!("SCHED_FIFO {PROBE_PRIORITY}, pinned"),
            (true, false) => format!("SCHED_FIFO {PROBE_PRIORITY}, not pinned"),
            (false, true) => "normal priority (no privilege for SCHED_FIFO), pinned".to_string(),
            (false, false) => "normal priority, not pinned".to_string(),
        };
        let secs = self.wall.as_secs_f64().max(1e-9);
        let mut out = format!(
            "host wake-up floor: a thread sleeping to a deadline every {} µs for {:.0} s on each CPU ({how}), lateness:",
            self.period.as_micros(),
            secs
        );
        for c in &mut self.cpus {
            let s = &mut c.lateness;
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            let (p50, p99, p999, max) = (
                s.percentile(50.0),
                s.percentile(99.0),
                s.percentile(99.9),
                s.percentile(100.0),
            );
            out.push_str(&format!(
                "\n  cpu {}: n={}, p50={:.0} us, p99={:.0} us, p99.9={:.0} us, max={:.0} us; late ≥ 0.5 ms {:.2}/s, ≥ 1 ms {:.2}/s",
                c.cpu,
                s.len(),
                us(p50),
                us(p99),
                us(p999),
                us(max),
                s.count_at_least(Duration::from_micros(500)) as f64 / secs,
                s.count_at_least(Duration::from_millis(1)) as f64 / secs,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_online_cpu_is_probed_and_every_deadline_counted() {
        let period = Duration::from_millis(2);
        let wall = Duration::from_millis(40);
        let mut floor = measure(wall, period);
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } as usize;
        assert_eq!(floor.cpus.len(), online);
        for c in &floor.cpus {
            assert_eq!(
                c.lateness.len(),
                20,
                "one sample per deadline on cpu {}",
                c.cpu
            );
        }
        let report = floor.report();
        assert!(report.starts_with("host wake-up floor"), "{report}");
        assert_eq!(report.lines().count(), 1 + online, "{report}");
    }

    #[test]
    fn deadline_arithmetic_round_trips() {
        let ns = 12_345_678_901_234_i128;
        assert_eq!(nanos(&timespec(ns)), ns);
    }
}
