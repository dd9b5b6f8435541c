//! The loop seam: the chain thread's real-time loop (poll, commands, frames, nonces,
//! housekeeping, snapshots and the saved state) and power handling.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::*;

impl Worker {
    /// The chain thread's life. It holds the worker's lock except while it sleeps in `poll`,
    /// so [`ChainHandle::job`] can write a new block's first frame from the caller's thread
    /// while this one sleeps, and otherwise queues the job for it.
    pub(super) fn run(shared: &Mutex<Worker>, start: Start) {
        let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
        let mut w = lock();
        w.start(start);
        loop {
            let mut due = w.next_housekeeping;
            if w.feeding() {
                due = due.min(w.next_frame_at);
            }
            let timeout = due.saturating_duration_since(Instant::now());
            w.sleeping_until = Some(due);
            let port_fd = w.port.as_ref().map(|p| p.poll_fd().as_raw_fd());
            let wake_fd = w.wake.as_raw_fd();
            drop(w);
            let (port_ready, wake_ready) = wait(port_fd, wake_fd, timeout);
            w = lock();
            w.sleeping_until = None;
            // A UART a caller let go of while this thread slept is closed here, after the poll
            // that watched it.
            w.lost_port = None;
            if !w.turn(port_ready, wake_ready) {
                break;
            }
        }
        w.save_state();
        w.publish();
    }

    fn start(&mut self, start: Start) {
        match start {
            Start::Reattach(r) => self.reattach(*r),
            Start::Cold(port) => {
                self.spare_port = port;
                self.cold_start();
            }
            Start::Disabled(saved) => {
                self.restore_counters(&saved);
                self.enabled = false;
                self.set_status(ChainStatus::Disabled);
                self.save_state();
            }
        }
        self.publish();
        self.next_housekeeping = Instant::now() + HOUSEKEEPING;
    }

    /// One turn after a wake-up; false on Stop.
    fn turn(&mut self, port_ready: bool, wake_ready: bool) -> bool {
        if port_ready {
            self.read_responses();
        }
        if wake_ready {
            let mut b = [0u8; 64];
            while self.wake.recv(&mut b).is_ok() {}
        }
        // Commands are drained every turn: a job must never wait behind a timeout.
        if !self.drain_commands() {
            return false;
        }
        let now = Instant::now();
        if self.feeding() && now >= self.next_frame_at {
            self.send_frame();
        }
        if now >= self.next_housekeeping {
            self.next_housekeeping = now + HOUSEKEEPING;
            self.housekeeping();
        }
        true
    }

    /// After a caller ran [`Worker::new_job`] while this thread slept: whether the thread must
    /// wake before the deadline it went to sleep with (a frame retry due sooner, a UART let go).
    pub(super) fn wants_wake(&self) -> bool {
        self.lost_port.is_some()
            || self
                .sleeping_until
                .is_some_and(|until| self.feeding() && self.next_frame_at < until)
    }

    pub(super) fn feeding(&self) -> bool {
        (self.status == ChainStatus::Mining || self.all_silent)
            && self.job.is_some()
            && self.port.is_some()
    }

    pub(super) fn set_status(&mut self, status: ChainStatus) {
        if self.status != status {
            tracing::info!(chain = self.chain(), ?status, "chain state");
            self.status = status;
            self.links.state_changed.notify_one();
            self.publish();
        }
    }

    /// Returns false on Stop.
    pub(super) fn drain_commands(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(ChainCommand::Stop) | Err(TryRecvError::Disconnected) => return false,
                Ok(cmd) => self.handle(cmd),
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    pub(super) fn handle(&mut self, cmd: ChainCommand) {
        match cmd {
            ChainCommand::Job(job) => self.new_job(job),
            ChainCommand::Power(on) => {
                self.powered = on;
                self.apply_power();
            }
            ChainCommand::Enable(on) => {
                self.enabled = on;
                self.apply_power();
            }
            ChainCommand::SetFrequency { chip, mhz, reply } => {
                let r = self.set_frequency(chip, mhz);
                let _ = reply.send(r);
            }
            ChainCommand::FrequencyScale(scale) => {
                if (scale - self.freq_scale).abs() > 1e-9 {
                    self.freq_scale = scale;
                    if let Err(e) = self.apply_scale() {
                        tracing::warn!(chain = self.chain(), error = %e, "frequency scale");
                    }
                }
            }
            ChainCommand::Register {
                chip,
                register,
                value,
                reply,
            } => {
                let r = self.debug_register(chip, register, value);
                let _ = reply.send(r);
            }
            ChainCommand::Raw {
                command,
                wait,
                reply,
            } => {
                let r = self.debug_raw(command, wait, None);
                let _ = reply.send(r);
            }
            ChainCommand::Stop => {}
        }
    }

    pub(super) fn apply_power(&mut self) {
        let want = self.powered && self.enabled;
        let brought_up = self.port.is_some() && !self.chips.is_empty();
        if want && !brought_up {
            // The board thread has switched the chain back on: the chips lost everything.
            self.cold_start();
        } else if !want && brought_up {
            // The board thread cuts the chain's power after this; stop feeding first.
            self.park_port();
            self.chips.clear();
            self.chip_version_mask = None;
            self.slots.clear();
            self.save_state();
        }
        if !want {
            self.all_silent = false;
            let status = if self.enabled {
                ChainStatus::Idle
            } else {
                ChainStatus::Disabled
            };
            self.set_status(status);
        }
    }

    pub(super) fn new_job(&mut self, job: Arc<ActiveJob>) {
        // A job queued for this thread while a later one was written directly (the thread was
        // busy, then asleep) comes out of the queue after it, and must not replace it. The
        // decode loop makes jobs one at a time, each well after the last nanosecond.
        if self
            .job
            .as_ref()
            .is_some_and(|cur| job.arrived < cur.arrived)
        {
            return;
        }
        let invalidates = self
            .job
            .as_ref()
            .is_none_or(|old| job.generation > old.generation);
        self.job = Some(job);
        if invalidates {
            // The new work goes out now, ahead of anything else queued for this chain.
            self.clean_pending = self.job.as_ref().map(|j| j.generation);
            self.clean_taken_ns = svcos_common::trace::stamp();
            self.next_frame_at = Instant::now();
            if self.feeding() {
                self.send_frame();
            }
        }
    }

    pub(super) fn frame_interval(&self, version_mask: u32) -> Duration {
        let alive = self.chips.iter().filter(|c| c.alive).count() as u32;
        let mhz = self.mean_mhz();
        let hs = self.setup.chip_model.nominal_hashrate(mhz) * f64::from(alive.max(1));
        // One frame covers 2^32 nonces times every version the chips may roll.
        let space = 2f64.powi(32 + version_mask.count_ones() as i32);
        let floor = Duration::from_nanos(2 * bm::wire_time_ns(bm::JOB_FRAME_LEN, self.baud()));
        Duration::from_secs_f64((space / hs.max(1.0)).min(MAX_FRAME_INTERVAL.as_secs_f64()))
            .max(floor)
    }

    pub(super) fn baud(&self) -> u32 {
        self.port.as_ref().map_or(bm::DEFAULT_BAUD, |p| p.baud())
    }

    pub(super) fn mean_mhz(&self) -> f64 {
        if self.chips.is_empty() {
            return 0.0;
        }
        self.chips.iter().map(|c| c.mhz).sum::<f64>() / self.chips.len() as f64
    }

    pub(super) fn send_frame(&mut self) {
        let Some(job) = self.job.clone() else { return };
        let mut out = Vec::with_capacity(bm::JOB_FRAME_LEN + 11);
        if self.chip_version_mask != Some(job.version_mask) {
            Command::WriteRegister {
                target: Target::All,
                register: reg::VERSION_MASK,
                value: bm::version_mask_register(job.version_mask),
            }
            .encode_into(&mut out);
            self.chip_version_mask = Some(job.version_mask);
        }
        let elapsed_s = (svcos_common::time::unix_ms() - job.arrived_unix_ms).max(0) as u64 / 1000;
        let counter = self.frame_counter;
        let work = Work::roll(&job, self.chain(), counter, elapsed_s);
        self.frame_counter = self.frame_counter.wrapping_add(1);
        let job_id = self.next_job_id;
        self.next_job_id = self.next_job_id.wrapping_add(1);
        let header = work.header_bytes(work.base_version(), 0);
        out.extend_from_slice(&bm::Job::from_header_bytes(job_id, &header).encode());
        let record = FrameRecord {
            job_id,
            counter,
            work: work.clone(),
        };
        self.slots.store(usize::from(job_id), work);
        let interval = self.frame_interval(job.version_mask);
        let Some(port) = self.port.as_mut() else {
            return;
        };
        // Share-path trace of a new block's first frame: built, then handed to the UART.
        let write_ns = if self.clean_pending == Some(job.generation) && self.clean_taken_ns != 0 {
            svcos_common::trace::mono_ns()
        } else {
            0
        };
        match port.write_all(&out) {
            Ok(()) => {
                self.frames_sent += 1;
                self.refusing = false;
                if self.clean_pending == Some(job.generation) {
                    self.clean_pending = None;
                    self.links
                        .probes
                        .clean_frame_written(job.generation, job.arrived.elapsed());
                    if write_ns != 0 {
                        svcos_common::trace::record(
                            "hw.frame",
                            format_args!(
                                "{} {} {} {write_ns} {}",
                                self.setup.chain_id,
                                hex::encode(job.job.prev_hash),
                                self.clean_taken_ns,
                                svcos_common::trace::mono_ns()
                            ),
                        );
                    }
                }
                // After the write, so the latency above never includes it.
                jobtable::push(&self.frames, record);
                self.links.saver.wake();
            }
            Err(e) if e.is_timeout() => {
                // The far end did not drain the line in time (a stalled UART, a starved sim).
                // A chip keeps hashing its last frame, so this frame is dropped and the next
                // one goes out soon; the chain stays up.
                self.frames_dropped += 1;
                self.refusing = true;
                // The version-mask write may have been in this frame: send it again.
                self.chip_version_mask = None;
                if self.frames_dropped.is_power_of_two() {
                    tracing::warn!(chain = self.chain(), dropped = self.frames_dropped, error = %e, "UART did not take a job frame in time; dropped it");
                }
                self.next_frame_at = Instant::now() + FRAME_RETRY;
                return;
            }
            Err(e) => {
                tracing::warn!(chain = self.chain(), error = %e, "job write failed");
                self.lose_uart(e.to_string());
            }
        }
        self.next_frame_at = Instant::now() + interval;
    }

    /// Let go of a UART that failed (unplugged adapter, hw-sim gone): the service ends so the
    /// supervisor starts it on a fresh discovery.
    fn lose_uart(&mut self, why: String) {
        // Not closed here: this may run on a caller's thread while the chain thread polls the
        // descriptor (see `wait`).
        self.lost_port = self.port.take();
        self.links.uarts.remove(self.setup.chain_id);
        self.links.uart_lost.notify_one();
        self.set_status(ChainStatus::Fault(why));
    }

    pub(super) fn read_responses(&mut self) {
        let Some(port) = self.port.as_mut() else {
            return;
        };
        let n = match port.read(&mut self.buf) {
            Ok(n) => n,
            Err(e) => {
                // A vanished UART (unplugged adapter, hw-sim gone) keeps polling readable with
                // an error: let go of it instead of spinning.
                tracing::warn!(chain = self.setup.chain_id, error = %e, "uart read failed");
                self.lose_uart(e.to_string());
                return;
            }
        };
        if n == 0 {
            // Readable yet nothing to read, again and again, is a hung-up line: under a
            // real-time priority it must not become a spin.
            self.empty_reads += 1;
            if self.empty_reads > MAX_EMPTY_READS {
                tracing::warn!(chain = self.setup.chain_id, "uart hung up");
                self.lose_uart("UART hung up".into());
            }
            return;
        }
        self.empty_reads = 0;
        let read_at = Instant::now();
        let read_at_us = svcos_common::time::unix_us();
        let read_ns = svcos_common::trace::stamp();
        self.decoder.push(&self.buf[..n]);
        while let Some(r) = self.decoder.next_response() {
            if let Response::Nonce(nonce) = r
                && self.on_nonce(nonce, read_at, read_at_us)
                && read_ns != 0
            {
                // Share-path trace: read from the UART, then validated and queued as a share.
                svcos_common::trace::record(
                    "hw.nonce",
                    format_args!(
                        "{} {:08x} {read_ns} {}",
                        self.setup.chain_id,
                        nonce.nonce,
                        svcos_common::trace::mono_ns()
                    ),
                );
            }
        }
    }

    /// Verify and account one nonce; true when it went out as a share.
    pub(super) fn on_nonce(
        &mut self,
        n: bm::NonceResponse,
        read_at: Instant,
        read_at_us: i64,
    ) -> bool {
        let now_ms = self.now_ms();
        let chips = self.chips.len() as u32;
        let chip = bm::chip_index_for_nonce(n.nonce, chips).map(|c| c as usize);
        let generation = self.links.generation.load(Ordering::Acquire);
        let verdict = self.slots.check(
            usize::from(n.job_id),
            n.nonce,
            n.version_bits,
            self.setup.ticket,
            generation,
        );
        match verdict {
            NonceVerdict::Valid {
                difficulty,
                version,
            } => {
                let hashes = self.setup.ticket.hashes_per_nonce() * self.setup.hashes_scale;
                self.acct.record_nonce(chip, now_ms, hashes);
                if let Some(c) = chip.and_then(|c| self.chips.get_mut(c))
                    && !c.alive
                {
                    c.alive = true;
                    self.links.state_changed.notify_one();
                }
                if self.all_silent {
                    tracing::info!(chain = self.chain(), "a chip finds nonces again");
                    self.all_silent = false;
                    self.retry_bring_up_at = None;
                    self.bring_up_backoff.reset();
                    self.set_status(ChainStatus::Mining);
                }
                let Some(work) = self.slots.get(usize::from(n.job_id)) else {
                    return false;
                };
                if difficulty >= work.job.share_difficulty {
                    let share = PendingShare {
                        request: SubmitShareRequest {
                            job_id: work.job.job_id.clone(),
                            pool_epoch: work.job.pool_epoch,
                            extranonce2: work.extranonce2.as_bytes().to_vec(),
                            ntime: work.ntime,
                            nonce: n.nonce,
                            version,
                            difficulty,
                            chain_id: self.setup.chain_id,
                            chip: chip.map_or(u32::MAX, |c| c as u32),
                            found_at_us: read_at_us,
                        },
                        generation: work.job.generation,
                        read_at,
                    };
                    if self.links.shares.try_send(share).is_err() {
                        self.links.shares_dropped.fetch_add(1, Ordering::Relaxed);
                        return false;
                    }
                    return true;
                }
            }
            NonceVerdict::HwError => self.acct.record_hw_error(chip),
            NonceVerdict::Duplicate => self.acct.duplicates += 1,
            NonceVerdict::Stale | NonceVerdict::Unknown => self.acct.stale += 1,
        }
        false
    }

    pub(super) fn housekeeping(&mut self) {
        self.retry_bring_up_if_due(Instant::now());
        let now_ms = self.now_ms();
        if self.status == ChainStatus::Mining {
            // A chip is dead when it has been silent for many of its expected nonce intervals.
            // Expected from the nominal rate, or from what its live neighbours really do over
            // the last minute when that is slower (a hot, throttled or starved board slows
            // every chip alike, which must not read as chips dying).
            let nominal_hs = self.setup.chip_model.nominal_hashrate(self.mean_mhz());
            let alive = self.chips.iter().filter(|c| c.alive).count().max(1) as f64;
            let measured_hs = self.acct.rates(now_ms).hs_1m / alive;
            let per_chip_hs = if measured_hs > 0.0 {
                nominal_hs.min(measured_hs)
            } else {
                nominal_hs
            } / self.setup.hashes_scale.max(1e-12);
            let interval_ms = self.setup.ticket.hashes_per_nonce() / per_chip_hs.max(1e-9) * 1e3;
            let silence =
                (interval_ms * DEAD_AFTER_INTERVALS).max(DEAD_AFTER_MIN.as_millis() as f64) as u64;
            let mut changed = false;
            for i in 0..self.chips.len() {
                let silent = self.acct.chip_silent(i, now_ms, silence);
                if silent && self.chips[i].alive {
                    tracing::warn!(
                        chain = self.chain(),
                        chip = i,
                        "chip stopped finding nonces"
                    );
                    self.chips[i].alive = false;
                    changed = true;
                }
            }
            if changed {
                self.links.state_changed.notify_one();
                if self.chips.iter().all(|c| !c.alive) {
                    // Not a final verdict: the chain stays fed, so chips that were only
                    // starved come back with their next nonce, and chips that really stopped
                    // get a bring-up (with backoff) as a reset would give them.
                    let retry = self.schedule_bring_up_retry();
                    tracing::warn!(chain = self.chain(), retry_in = ?retry, "no chip is hashing");
                    self.all_silent = true;
                    self.set_status(ChainStatus::Fault("no chip is hashing".into()));
                }
            }
        }
        self.publish();
        self.save_state();
    }

    pub(super) fn publish(&mut self) {
        let now_ms = self.now_ms();
        let rates = self.acct.rates(now_ms);
        let alive = self.chips.iter().filter(|c| c.alive).count() as u32;
        let mhz = self.mean_mhz();
        let chips = (0..self.chips.len())
            .map(|i| {
                let hs_1m = self.acct.chip_rate_1m(i, now_ms);
                let c = &self.chips[i];
                let stats = &self.acct.chips[i];
                ChipSnapshot {
                    address: c.address,
                    frequency_mhz: c.mhz,
                    nonces: stats.nonces,
                    hw_errors: stats.hw_errors,
                    hs_1m,
                    alive: c.alive,
                }
            })
            .collect();
        let snap = ChainSnapshot {
            chain_id: self.setup.chain_id,
            status: self.status.clone(),
            device: self.setup.device.clone(),
            baud: self.baud(),
            chip_model: self.setup.chip_model.name().to_string(),
            chips_expected: self.setup.chips_expected,
            chips,
            nonces: self.acct.nonces,
            hw_errors: self.acct.hw_errors,
            duplicates: self.acct.duplicates,
            stale: self.acct.stale,
            crc_errors: self.decoder.stats().crc_errors,
            rates,
            expected_hs: if self.status == ChainStatus::Mining {
                self.setup.chip_model.nominal_hashrate(mhz) * f64::from(alive)
            } else {
                0.0
            },
            frequency_mhz: mhz,
            ticket_difficulty: self.setup.ticket.difficulty(),
            frames_sent: self.frames_sent,
            enabled: self.enabled,
        };
        self.snap.send_replace(Arc::new(snap));
    }

    pub(super) fn save_state(&mut self) {
        // Only a chain we are attached to can be re-attached: without the port (powered down,
        // UART lost, bring-up failed) the chips' configuration is unknown, so save no chips.
        let attached = self.port.is_some();
        let s = SavedChain {
            chain_id: self.setup.chain_id,
            device: self.setup.device.clone(),
            baud: self.baud(),
            address_interval: bm::address_interval(self.chips.len() as u32),
            chip_addresses: if attached {
                self.chips.iter().map(|c| c.address).collect()
            } else {
                Vec::new()
            },
            chips_expected: self.setup.chips_expected,
            frequency_mhz: self.chips.iter().map(|c| c.mhz).collect(),
            ticket_difficulty: self.setup.ticket.difficulty(),
            enabled: self.enabled,
            nonces: self.acct.nonces,
            hw_errors: self.acct.hw_errors,
            duplicates: self.acct.duplicates,
            stale: self.acct.stale,
            chip_nonces: self.acct.chips.iter().map(|c| c.nonces).collect(),
            chip_hw_errors: self.acct.chips.iter().map(|c| c.hw_errors).collect(),
            // The saver fills these from the frame ring.
            frames: Vec::new(),
        };
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }
}

/// Sleep in `poll` on the UART (if any) and the wake-up socket, without the worker's lock.
fn wait(port: Option<RawFd>, wake: RawFd, timeout: Duration) -> (bool, bool) {
    let ms = timeout.as_millis().min(u128::from(u16::MAX)) as u16;
    // Sub-millisecond remainders round up so the loop does not spin.
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    // SAFETY: both descriptors belong to the worker, which the chain thread keeps alive (it
    // holds an `Arc`) and which no other thread drops while it lives. The wake socket is never
    // replaced. The port is only replaced or taken by the chain thread itself, except by
    // `lose_uart` on a caller's thread, which parks it in `lost_port` until the chain thread's
    // next turn, after this poll. So neither descriptor is closed while it is polled here.
    let wake = unsafe { BorrowedFd::borrow_raw(wake) };
    let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
    match port {
        Some(port) => {
            // SAFETY: as above.
            let port = unsafe { BorrowedFd::borrow_raw(port) };
            let mut fds = [
                PollFd::new(port, PollFlags::POLLIN),
                PollFd::new(wake, PollFlags::POLLIN),
            ];
            let _ = poll(&mut fds, PollTimeout::from(ms));
            (ready(&fds[0]), ready(&fds[1]))
        }
        None => {
            let mut fds = [PollFd::new(wake, PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(ms));
            (false, ready(&fds[0]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reattach::chips_from_saved;
    use super::super::testkit::{saved_chain, worker};
    use super::*;
    use crate::work::tests::{find_nonce, template};

    #[test]
    fn nonces_are_accounted_as_shares_duplicates_stale_or_errors() {
        let mut kit = worker(3);
        kit.worker.chips = chips_from_saved(&saved_chain(4), 400.0);
        kit.worker.acct = ChainAccounting::new(4, 0);
        let mut t = template("j", 7, true);
        t.share_difficulty = 1e-12;
        let job = Arc::new(ActiveJob::from_template(&t, 3, 0).unwrap());
        let work = Work::roll(&job, 1, 5, 0);
        kit.worker.slots.store(5, work.clone());
        let ticket = kit.worker.setup.ticket;
        let version = work.full_version(0);
        let good = find_nonce(&work, version, ticket);
        let bad = (0u32..)
            .find(|n| !ticket.accepts(&work.hash(version, *n)))
            .unwrap();
        let nonce = |nonce, job_id| bm::NonceResponse {
            nonce,
            chip_address: 0,
            job_id,
            version_bits: 0,
        };
        let at = Instant::now();
        assert!(kit.worker.on_nonce(nonce(good, 5), at, 0), "went out");
        let share = kit.shares.try_recv().expect("a share");
        assert_eq!((share.request.nonce, share.request.chain_id), (good, 1));
        assert_eq!(share.generation, 3);
        for (n, job_id) in [(good, 5), (good, 6), (bad, 5)] {
            assert!(
                !kit.worker.on_nonce(nonce(n, job_id), at, 0),
                "{n:x}/{job_id}"
            );
        }
        let a = &kit.worker.acct;
        assert_eq!((a.nonces, a.duplicates, a.stale, a.hw_errors), (1, 1, 1, 1));
        assert!(kit.shares.try_recv().is_err(), "only the first went out");
    }

    /// A worker mining job `j` on four chips behind a fake UART, its clock an hour old so
    /// that every chip has been silent for long enough to count as dead.
    fn mining_for_an_hour() -> (super::super::testkit::Kit, super::super::testkit::Chips) {
        let mut kit = worker(3);
        let (port, chips) = super::super::testkit::port();
        let w = &mut kit.worker;
        w.port = Some(port);
        w.chips = chips_from_saved(&saved_chain(4), 400.0);
        w.acct = ChainAccounting::new(4, 0);
        w.origin = Instant::now() - Duration::from_secs(3600);
        w.status = ChainStatus::Mining;
        let mut t = template("j", 7, true);
        t.share_difficulty = 1e-12;
        w.job = Some(Arc::new(ActiveJob::from_template(&t, 3, 0).unwrap()));
        (kit, chips)
    }

    #[test]
    fn a_chain_whose_chips_all_fall_silent_stays_fed_and_mines_again_on_the_next_nonce() {
        let (mut kit, chips) = mining_for_an_hour();
        kit.worker.housekeeping();
        let w = &mut kit.worker;
        assert_eq!(w.status, ChainStatus::Fault("no chip is hashing".into()));
        assert!(w.chips.iter().all(|c| !c.alive));
        assert!(
            w.retry_bring_up_at.is_some(),
            "a bring-up retry is due later"
        );
        // Still fed: a starved chip gets work to answer.
        assert!(w.feeding());
        w.send_frame();
        assert_eq!(
            chips.written().len(),
            bm::JOB_FRAME_LEN + 11,
            "version mask, then a job"
        );
        let work = w.slots.get(0).expect("frame 0 stored").clone();
        let nonce = find_nonce(&work, work.full_version(0), w.setup.ticket);
        let response = bm::NonceResponse {
            nonce,
            chip_address: 0,
            job_id: 0,
            version_bits: 0,
        };
        assert!(w.on_nonce(response, Instant::now(), 0));
        assert_eq!(w.status, ChainStatus::Mining);
        assert!(w.retry_bring_up_at.is_none());
        assert_eq!(w.chips.iter().filter(|c| c.alive).count(), 1);
    }

    #[test]
    fn chips_that_stay_silent_get_a_bring_up_on_the_uart_already_held() {
        let (mut kit, _chips) = mining_for_an_hour();
        kit.worker.housekeeping();
        let w = &mut kit.worker;
        w.retry_bring_up_at = Some(Instant::now());
        w.retry_bring_up_if_due(Instant::now());
        // Nobody answers the enumeration on the fake wire: the chain is missing, and its UART
        // is kept for the next try (opening the device again would fail here: "fake").
        assert_eq!(w.status, ChainStatus::Missing);
        assert!(w.spare_port.is_some());
        assert!(!w.all_silent);
        assert!(w.retry_bring_up_at.is_some());
    }

    #[test]
    fn a_frame_the_uart_does_not_take_in_time_is_dropped_and_a_dead_uart_is_let_go() {
        let (mut kit, chips) = mining_for_an_hour();
        let w = &mut kit.worker;
        chips.refuse_writes(Some(std::io::ErrorKind::TimedOut));
        let before = Instant::now();
        w.send_frame();
        assert_eq!(w.status, ChainStatus::Mining);
        assert_eq!(w.frames_dropped, 1);
        assert!(w.port.is_some());
        assert!(w.next_frame_at <= before + FRAME_RETRY + Duration::from_secs(1));
        chips.refuse_writes(None);
        w.send_frame();
        assert_eq!(
            chips.written().len(),
            bm::JOB_FRAME_LEN + 11,
            "the next frame went out, after the version mask the refused one carried"
        );
        chips.refuse_writes(Some(std::io::ErrorKind::BrokenPipe));
        w.send_frame();
        assert!(matches!(w.status, ChainStatus::Fault(_)), "{:?}", w.status);
        assert!(w.port.is_none());
    }

    fn job(id: &str, generation: u64, clean: bool) -> Arc<ActiveJob> {
        Arc::new(ActiveJob::from_template(&template(id, 7, clean), generation, 0).unwrap())
    }

    #[test]
    fn a_job_older_than_the_current_one_does_not_replace_it() {
        let (mut kit, chips) = mining_for_an_hour();
        let w = &mut kit.worker;
        // Made first, queued behind a later job that went out directly.
        let older = job("older", 4, true);
        std::thread::sleep(Duration::from_millis(1));
        let newer = job("newer", 4, true);
        w.new_job(newer);
        let written = chips.written().len();
        assert!(written >= bm::JOB_FRAME_LEN, "the new block went out");
        w.new_job(older);
        assert_eq!(w.job.as_ref().unwrap().job_id, "newer");
        assert_eq!(chips.written().len(), written, "no frame of the older job");
    }

    #[test]
    fn a_job_written_for_a_sleeping_thread_wakes_it_only_when_it_must_act_sooner() {
        let (mut kit, chips) = mining_for_an_hour();
        let w = &mut kit.worker;
        // Asleep until its next housekeeping.
        w.sleeping_until = Some(Instant::now() + HOUSEKEEPING);
        chips.refuse_writes(Some(std::io::ErrorKind::TimedOut));
        w.new_job(job("a", 4, true));
        assert_eq!(w.frames_dropped, 1);
        assert!(
            w.wants_wake(),
            "the retry is due before the thread would wake"
        );
        // A thread already due to wake is left alone.
        chips.refuse_writes(None);
        w.sleeping_until = Some(Instant::now());
        w.new_job(job("b", 5, true));
        assert!(!w.wants_wake());
        // A UART let go of on the caller's thread stays open until the thread's next turn.
        w.sleeping_until = Some(Instant::now() + HOUSEKEEPING);
        chips.refuse_writes(Some(std::io::ErrorKind::BrokenPipe));
        w.new_job(job("c", 6, true));
        assert!(w.port.is_none() && w.lost_port.is_some());
        assert!(w.wants_wake());
    }

    /// A chain thread re-attached to four chips behind a fake UART (no bring-up on the wire),
    /// once it reports mining.
    fn running_chain() -> (ChainHandle, super::super::testkit::Chips) {
        let (port, chips) = super::super::testkit::port();
        let (links, _shares) = super::super::testkit::links(3);
        let start = Start::Reattach(Box::new(Reattach {
            port,
            saved: saved_chain(4),
            frames: Vec::new(),
            decoder: ResponseDecoder::new(),
            early: Vec::new(),
        }));
        let handle = spawn(super::super::testkit::setup(), start, links).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while handle.snapshot.borrow().status != ChainStatus::Mining {
            assert!(Instant::now() < deadline, "the chain never mined");
            std::thread::sleep(Duration::from_millis(5));
        }
        (handle, chips)
    }

    #[test]
    fn a_new_block_goes_out_on_the_callers_thread_while_the_chain_thread_sleeps() {
        let (handle, chips) = running_chain();
        let (_, before) = until_taken_directly(&handle, &chips, 4);
        assert!(
            chips.written().len() >= before + bm::JOB_FRAME_LEN,
            "the frame is on the wire when the call returns"
        );
        assert_eq!(chips.last_writer(), Some(std::thread::current().id()));
        handle.stop();
        assert_eq!(handle.job(job("late", 99, true)), Delivery::Gone);
    }

    /// Hand the chain new blocks from `generation` on until one is taken directly (the
    /// thread asleep; it wakes for housekeeping every 250 ms, and a job that meets it awake is
    /// queued). Returns the next generation to use and how many bytes the chips had been sent
    /// before that call.
    fn until_taken_directly(
        handle: &ChainHandle,
        chips: &super::super::testkit::Chips,
        generation: u64,
    ) -> (u64, usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for g in generation.. {
            let before = chips.written().len();
            match handle.job(job("j", g, true)) {
                Delivery::Direct => return (g + 1, before),
                Delivery::Queued => assert!(Instant::now() < deadline, "never found it asleep"),
                Delivery::Gone => panic!("the chain thread is gone"),
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        unreachable!()
    }

    #[test]
    fn a_chain_whose_uart_refused_its_last_frame_gets_its_jobs_queued_until_one_goes_out() {
        let (handle, chips) = running_chain();
        chips.refuse_writes(Some(std::io::ErrorKind::TimedOut));
        let (mut generation, _) = until_taken_directly(&handle, &chips, 4);
        // The line is stalled: a write would block the caller for the serial timeout, so the
        // chain's own thread gets the jobs (and keeps retrying), asleep or not.
        for _ in 0..5 {
            assert_eq!(handle.job(job("j", generation, true)), Delivery::Queued);
            generation += 1;
            std::thread::sleep(Duration::from_millis(3));
        }
        // Once the chain thread's retry goes out, new blocks are taken directly again.
        chips.refuse_writes(None);
        until_taken_directly(&handle, &chips, generation);
        handle.stop();
    }

    #[test]
    fn a_job_that_meets_the_chain_thread_busy_is_written_by_that_thread() {
        let (handle, chips) = running_chain();
        let worker = handle.worker.upgrade().unwrap();
        let busy = worker.lock().unwrap();
        assert_eq!(handle.job(job("j", 4, true)), Delivery::Queued);
        drop(busy);
        drop(worker);
        let deadline = Instant::now() + Duration::from_secs(10);
        while chips.written().len() < bm::JOB_FRAME_LEN {
            assert!(Instant::now() < deadline, "the queued job never went out");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_ne!(chips.last_writer(), Some(std::thread::current().id()));
        handle.stop();
    }
}
