//! The hashing thread: every chip's real SHA-256d, within a CPU budget.
//!
//! Real hashes are spent in proportion to each chip's nominal rate (frequency × hashes per
//! clock): chip `k` gets `nominal_k / virtual_per_real` real hashes per second, where the factor
//! is fixed at start from a calibration of this machine's speed and the configured budget. The
//! budget is enforced as a duty cycle on the thread's own CPU clock: it earns `budget × wall
//! time` of CPU and sleeps once that is spent, so a slow or contended machine falls behind rather
//! than burn more. Clocking chips above the preset raises the demand; beyond the headroom
//! the sim falls behind and the measured hashrate lags the nominal one.
//!
//! Each chip scans the nonces whose top byte lies in its address interval (see
//! `svcos_bm13xx::chip_index_for_nonce`), rolling up to four version values inside the version
//! mask for each nonce, over the midstates of its chain's job.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use svcos_bm13xx::{Job, NonceResponse, RESPONSE_LEN, Response, TicketMask};

use crate::state::Shared;
use crate::uart::ChainHandle;

/// Hashing tick.
const TICK: Duration = Duration::from_millis(10);
/// Share of the budget the steady rate targets: the loop's bookkeeping costs about a quarter of
/// the calibrated speed, and the rest absorbs jitter and chips clocked above the preset.
const BUDGET_HEADROOM: f64 = 0.6;
/// A chip accumulates at most this much unspent hashing time (after a stall, no burst).
const MAX_BACKLOG_S: f64 = 0.25;
/// Version values rolled per nonce (when the mask allows as many).
const MAX_ROLLS: u32 = 4;

/// CPU time the calling thread has used: the budget is CPU, not wall time, so a contended
/// machine neither shrinks the calibration nor lets the hasher overspend.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec owned by this frame, and
    // CLOCK_THREAD_CPUTIME_ID is a clock every Linux kernel provides.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Real hashes per CPU second one thread of this machine does, measured briefly.
pub fn calibrate() -> f64 {
    let job = Job::from_header_bytes(0, &[0x5a; 80]);
    let midstate = svcos_work::midstate(&job.header_bytes(job.version, 0));
    let mut tail = [0u8; 16];
    let cpu_start = thread_cpu_time();
    let wall_start = Instant::now();
    let mut n: u32 = 0;
    let mut sink = 0u8;
    // 30 ms of CPU averages out timer granularity without delaying start-up; the wall cap only
    // guards against a thread starved for seconds.
    loop {
        for _ in 0..256 {
            tail[12..16].copy_from_slice(&n.to_le_bytes());
            sink ^= svcos_work::hash_from_midstate(&midstate, &tail)[31];
            n = n.wrapping_add(1);
        }
        let cpu = thread_cpu_time().saturating_sub(cpu_start);
        if cpu >= Duration::from_millis(30) || wall_start.elapsed() >= Duration::from_secs(2) {
            std::hint::black_box(sink);
            let seconds = if cpu.is_zero() {
                wall_start.elapsed().as_secs_f64()
            } else {
                cpu.as_secs_f64()
            };
            return f64::from(n) / seconds.max(1e-6);
        }
    }
}

/// Deposit the low bits of `value` into the set bits of `mask`, lowest first.
fn deposit(mut value: u32, mask: u32) -> u32 {
    let mut out = 0;
    let mut m = mask;
    while m != 0 && value != 0 {
        let bit = m & m.wrapping_neg();
        if value & 1 != 0 {
            out |= bit;
        }
        value >>= 1;
        m &= m - 1;
    }
    out
}

/// A chain's job prepared for hashing: one midstate per rolled version.
struct PreparedJob {
    generation: u64,
    mask: u32,
    job: Job,
    rolls: Vec<(u32, [u8; 32])>,
    tail: [u8; 16],
}

impl PreparedJob {
    fn new(generation: u64, job: Job, mask: u32) -> PreparedJob {
        let rolls = if mask == 0 {
            1
        } else {
            MAX_ROLLS.min(1u32 << mask.count_ones().min(5))
        };
        let rolls = (0..rolls)
            .map(|i| {
                let version = job.version ^ deposit(i, mask);
                (version, svcos_work::midstate(&job.header_bytes(version, 0)))
            })
            .collect();
        let header = job.header_bytes(job.version, 0);
        let tail = header[64..80].try_into().expect("16 bytes");
        PreparedJob {
            generation,
            mask,
            job,
            rolls,
            tail,
        }
    }
}

#[derive(Default, Clone)]
struct Engine {
    generation: u64,
    cursor: u64,
    credit: f64,
}

/// One chip's work this tick.
struct Item {
    chain: usize,
    chip: usize,
    address: u8,
    ticket: TicketMask,
    error_rate: f64,
}

/// The hashing thread's state.
pub(crate) struct Hasher {
    shared: Arc<Shared>,
    chains: Vec<ChainHandle>,
    virtual_per_real: f64,
    budget: f64,
    rng: StdRng,
}

impl Hasher {
    /// A hasher over `chains` (one handle per chain, in order).
    pub fn new(
        shared: Arc<Shared>,
        chains: Vec<ChainHandle>,
        virtual_per_real: f64,
        budget_fraction: f64,
        seed: u64,
    ) -> Hasher {
        Hasher {
            shared,
            chains,
            virtual_per_real,
            budget: budget_fraction,
            rng: StdRng::seed_from_u64(seed ^ 0x4841_5348),
        }
    }

    /// The steady real rate and the factor for a board: `(real H/s, virtual per real)`.
    pub fn plan(nominal_hashrate: f64, speed: f64, budget_fraction: f64) -> (f64, f64) {
        let real = (speed * budget_fraction * BUDGET_HEADROOM).max(1.0);
        (real, (nominal_hashrate / real).max(1.0))
    }

    /// Run until the stop flag is set.
    pub fn run(mut self) {
        let (n_chains, chips_per_chain, interval) = {
            let b = self.shared.lock();
            let chips = b.spec.chips_per_chain;
            (
                b.chains.len(),
                chips as usize,
                svcos_bm13xx::address_interval(chips),
            )
        };
        let mut engines = vec![vec![Engine::default(); chips_per_chain]; n_chains];
        let mut jobs: Vec<Option<PreparedJob>> = (0..n_chains).map(|_| None).collect();
        let mut last = Instant::now();
        let mut cpu_credit = 0.0f64;
        let mut cpu_mark = thread_cpu_time();
        let mut rotate = 0usize;
        let range_len = u64::from(interval) << 24;

        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let dt = now.duration_since(last).as_secs_f64().min(1.0);
            last = now;
            // Every CPU second of the thread counts against the budget, bookkeeping included.
            let cpu_now = thread_cpu_time();
            cpu_credit -= cpu_now.saturating_sub(cpu_mark).as_secs_f64();
            cpu_mark = cpu_now;
            cpu_credit =
                (cpu_credit + dt * self.budget).min(4.0 * TICK.as_secs_f64() * self.budget);

            // Snapshot the work under the lock; hash outside it.
            let mut items = Vec::new();
            {
                let b = self.shared.lock();
                let model = b.spec.chip_model;
                for (ci, chain) in b.chains.iter().enumerate() {
                    let mask = chain
                        .chips
                        .iter()
                        .find(|c| !c.dead)
                        .map_or(0, |c| c.version_mask());
                    match &chain.job {
                        Some(job) => {
                            let stale = jobs[ci].as_ref().is_none_or(|p| {
                                p.generation != chain.job_generation || p.mask != mask
                            });
                            if stale {
                                jobs[ci] = Some(PreparedJob::new(chain.job_generation, *job, mask));
                            }
                        }
                        None => jobs[ci] = None,
                    }
                    for (k, chip) in chain.chips.iter().enumerate() {
                        let engine = &mut engines[ci][k];
                        if engine.generation != chain.job_generation {
                            // New work: scan from the start of the range again.
                            engine.generation = chain.job_generation;
                            engine.cursor = 0;
                        }
                        if !b.chip_hashing(ci, k) {
                            engine.credit = 0.0;
                            continue;
                        }
                        let rate =
                            model.nominal_hashrate(chip.frequency_mhz) / self.virtual_per_real;
                        engine.credit = (engine.credit + rate * dt).min(rate * MAX_BACKLOG_S + 1.0);
                        items.push(Item {
                            chain: ci,
                            chip: k,
                            address: chip.address,
                            ticket: chip.ticket,
                            error_rate: chip.error_rate,
                        });
                    }
                }
            }

            let mut done: Vec<(usize, usize, u64, u64, u64)> = Vec::new();
            let mut out: Vec<Vec<[u8; RESPONSE_LEN]>> = vec![Vec::new(); n_chains];
            if cpu_credit > 0.0 && !items.is_empty() {
                let t0 = thread_cpu_time();
                let deadline = t0 + Duration::from_secs_f64(cpu_credit);
                // Start at a different chip each tick so a budget cut never starves the same ones.
                rotate = (rotate + 1) % items.len();
                let mut since_check = 0u32;
                'chips: for idx in 0..items.len() {
                    let item = &items[(idx + rotate) % items.len()];
                    let Some(prepared) = jobs[item.chain].as_ref() else {
                        continue;
                    };
                    let engine = &mut engines[item.chain][item.chip];
                    let want = engine.credit.floor() as u64;
                    let start = u32::from(item.address) << 24;
                    let rolls = prepared.rolls.len() as u64;
                    let mut tail = prepared.tail;
                    let (mut hashed, mut good, mut bad) = (0u64, 0u64, 0u64);
                    let mut out_of_time = false;
                    while hashed < want {
                        // Reading the CPU clock is a syscall: look every 256 hashes, counted
                        // across chips (most chips do only a few hashes per tick).
                        since_check += 1;
                        if since_check >= 256 {
                            since_check = 0;
                            if thread_cpu_time() >= deadline {
                                out_of_time = true;
                                break;
                            }
                        }
                        let c = engine.cursor;
                        engine.cursor = engine.cursor.wrapping_add(1);
                        let roll = (c % rolls) as usize;
                        let nonce = start.wrapping_add(((c / rolls) % range_len) as u32);
                        tail[12..16].copy_from_slice(&nonce.to_le_bytes());
                        let (version, midstate) = &prepared.rolls[roll];
                        let hash = svcos_work::hash_from_midstate(midstate, &tail);
                        hashed += 1;
                        if item.ticket.accepts(&hash) {
                            let mut reported = nonce;
                            if self.rng.random::<f64>() < item.error_rate {
                                // A faulty core: flip low bits, staying in this chip's range.
                                reported ^= self.rng.random_range(1..=0xffffu32);
                                bad += 1;
                            } else {
                                good += 1;
                            }
                            out[item.chain].push(
                                Response::Nonce(NonceResponse {
                                    nonce: reported,
                                    chip_address: item.address,
                                    job_id: prepared.job.job_id,
                                    version_bits: svcos_bm13xx::version_bits(
                                        *version,
                                        prepared.mask,
                                    ),
                                })
                                .encode(),
                            );
                        }
                    }
                    engine.credit -= hashed as f64;
                    done.push((item.chain, item.chip, hashed, good, bad));
                    if out_of_time {
                        break 'chips;
                    }
                }
            }

            if !done.is_empty() {
                let mut b = self.shared.lock();
                for (ci, k, hashed, good, bad) in done {
                    let chip = &mut b.chains[ci].chips[k];
                    chip.hashes_done += hashed;
                    chip.nonces_found += good;
                    chip.hw_errors_sent += bad;
                }
            }
            for (ci, responses) in out.into_iter().enumerate() {
                if responses.is_empty() {
                    continue;
                }
                for r in responses {
                    self.chains[ci].send(r);
                }
                self.chains[ci].notify();
            }

            let elapsed = now.elapsed();
            if elapsed < TICK {
                std::thread::sleep(TICK - elapsed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deposit_spreads_bits_into_mask() {
        let mask = 0x1fff_e000;
        assert_eq!(deposit(0, mask), 0);
        assert_eq!(deposit(1, mask), 0x2000);
        assert_eq!(deposit(2, mask), 0x4000);
        assert_eq!(deposit(3, mask), 0x6000);
        assert_eq!(deposit(3, 0x0001_0100), 0x0001_0100);
        assert_eq!(deposit(7, 0x0000_0100), 0x0000_0100);
    }

    #[test]
    fn prepared_job_rolls_versions_inside_the_mask() {
        let job = Job::from_header_bytes(3, &[7; 80]);
        let p = PreparedJob::new(1, job, 0x1fff_e000);
        assert_eq!(p.rolls.len(), 4);
        for (v, _) in &p.rolls {
            assert_eq!(v & !0x1fff_e000, job.version & !0x1fff_e000);
        }
        let versions: std::collections::BTreeSet<_> = p.rolls.iter().map(|r| r.0).collect();
        assert_eq!(versions.len(), 4);
        assert_eq!(PreparedJob::new(1, job, 0).rolls.len(), 1);
    }

    #[test]
    fn plan_scales_virtual_to_real() {
        let (real, factor) = Hasher::plan(13.5e12, 1e6, 0.03);
        assert!((real - 18_000.0).abs() < 1.0);
        assert!((factor * real - 13.5e12).abs() < 1e6);
    }
}
