//! The bring-up seam: cold start (enumerate, address, ticket mask, PLL ramp, baud switch) and
//! the frequency changes that reuse the PLL ramp.

use super::*;

/// What a cold bring-up sets up once enumeration has answered, decided from the answers alone.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BringUpPlan {
    /// Chips that answered.
    pub(super) detected: u32,
    /// The model that answered (it wins over the configured one; unknown ids keep the config).
    pub(super) model: ChipModel,
    /// Their addresses in chain order, spread evenly over the address space.
    pub(super) addresses: Vec<u8>,
    /// One write: chain inactive, each address in turn, then the ticket mask.
    pub(super) setup_bytes: Vec<u8>,
}

/// The bring-up plan for the chip-id answers of an enumeration; `None` when no chip answered.
pub(super) fn plan_bring_up(
    answers: &[bm::RegisterResponse],
    configured: ChipModel,
    ticket: TicketMask,
) -> Option<BringUpPlan> {
    let detected = answers.len() as u32;
    if detected == 0 {
        return None;
    }
    let model = answers
        .first()
        .and_then(|r| ChipModel::from_chip_id((r.value >> 16) as u16))
        .unwrap_or(configured);
    let addresses: Vec<u8> = (0..detected)
        .map(|i| bm::chip_address(i, detected))
        .collect();
    let mut setup_bytes = Vec::new();
    Command::ChainInactive.encode_into(&mut setup_bytes);
    for &address in &addresses {
        Command::SetAddress { address }.encode_into(&mut setup_bytes);
    }
    Command::WriteRegister {
        target: Target::All,
        register: reg::TICKET_MASK,
        value: ticket.to_register(),
    }
    .encode_into(&mut setup_bytes);
    Some(BringUpPlan {
        detected,
        model,
        addresses,
        setup_bytes,
    })
}

/// Fresh accounting for `chips` chips that keeps the totals and the per-chip counters (by
/// index, as far as both have chips) of `old`: counters survive a power cycle of the chain, the
/// rate windows start again.
pub(super) fn carry_counters(old: &ChainAccounting, chips: usize, now_ms: u64) -> ChainAccounting {
    let mut acct = ChainAccounting::new(chips, now_ms);
    acct.nonces = old.nonces;
    acct.hw_errors = old.hw_errors;
    acct.duplicates = old.duplicates;
    acct.stale = old.stale;
    for (i, c) in acct.chips.iter_mut().enumerate() {
        if let Some(old) = old.chips.get(i) {
            c.nonces = old.nonces;
            c.hw_errors = old.hw_errors;
        }
    }
    acct
}

impl Worker {
    // ---- bring-up -------------------------------------------------------------------------

    pub(super) fn cold_start(&mut self) {
        self.all_silent = false;
        self.set_status(ChainStatus::Initializing);
        match self.bring_up() {
            Ok(()) => {
                self.retry_bring_up_at = None;
                self.bring_up_backoff.reset();
                self.set_status(ChainStatus::Mining);
                // Work that arrived during bring-up goes out first.
                if let Some(job) = self.job.clone() {
                    self.clean_pending = None;
                    self.job = None;
                    self.new_job(job);
                }
            }
            Err(ChainError::NoChips { .. }) => {
                let retry = self.schedule_bring_up_retry();
                tracing::warn!(chain = self.chain(), retry_in = ?retry, "no chips answered");
                self.park_port();
                self.set_status(ChainStatus::Missing);
            }
            Err(e) => {
                let retry = self.schedule_bring_up_retry();
                tracing::warn!(chain = self.chain(), error = %e, retry_in = ?retry, "bring-up failed");
                self.park_port();
                self.set_status(ChainStatus::Fault(e.to_string()));
            }
        }
        self.save_state();
    }

    pub(super) fn schedule_bring_up_retry(&mut self) -> Duration {
        let delay = self.bring_up_backoff.next_delay();
        self.retry_bring_up_at = Some(Instant::now() + delay);
        delay
    }

    /// Called from housekeeping: bring a chain whose bring-up failed up again once its retry
    /// is due, as long as it is still meant to be on.
    pub(super) fn retry_bring_up_if_due(&mut self, now: Instant) {
        let Some(at) = self.retry_bring_up_at else {
            return;
        };
        if !(self.powered && self.enabled) {
            self.retry_bring_up_at = None;
            self.bring_up_backoff.reset();
            return;
        }
        if now >= at {
            tracing::info!(chain = self.chain(), "trying the bring-up again");
            // A chain whose chips fell silent still holds its UART: bring-up takes it from
            // the spare slot rather than opening the device a second time.
            self.park_port();
            self.cold_start();
        }
    }

    /// Keep the UART open but unused (powered down, or bring-up failed).
    pub(super) fn park_port(&mut self) {
        if let Some(p) = self.port.take() {
            self.spare_port = Some(p);
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<(), ChainError> {
        let chain = self.chain();
        let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
        port.write_all(bytes)
            .map_err(|source| ChainError::Driver { chain, source })
    }

    pub(super) fn command(&mut self, cmd: Command) -> Result<(), ChainError> {
        self.write(&cmd.encode())
    }

    /// Register responses until `deadline`, or until `quiet` passes without one after the
    /// first. Nonces that arrive meanwhile are handled as usual.
    pub(super) fn collect_registers(
        &mut self,
        register: u8,
        deadline: Instant,
        quiet: Duration,
    ) -> Result<Vec<bm::RegisterResponse>, ChainError> {
        let chain = self.chain();
        let mut out = Vec::new();
        let mut last = None::<Instant>;
        loop {
            let now = Instant::now();
            let mut until = deadline;
            if let Some(l) = last {
                until = until.min(l + quiet);
            }
            if now >= until {
                return Ok(out);
            }
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            if !wait_readable(port.as_ref(), until) {
                continue;
            }
            let n = port
                .read(&mut self.buf)
                .map_err(|source| ChainError::Driver { chain, source })?;
            self.decoder.push(&self.buf[..n]);
            let read_at = Instant::now();
            let read_at_us = svcos_common::time::unix_us();
            while let Some(r) = self.decoder.next_response() {
                match r {
                    Response::Register(r) if r.register == register => {
                        out.push(r);
                        last = Some(Instant::now());
                    }
                    Response::Register(_) => {}
                    Response::Nonce(n) => {
                        self.on_nonce(n, read_at, read_at_us);
                    }
                }
            }
        }
    }

    pub(super) fn bring_up(&mut self) -> Result<(), ChainError> {
        let chain = self.chain();
        let started = Instant::now();
        let mut port: Box<dyn ChainPort> = match self.spare_port.take() {
            Some(mut p) => {
                p.set_baud(bm::DEFAULT_BAUD)
                    .map_err(|source| ChainError::Driver { chain, source })?;
                p
            }
            None => Box::new(
                SerialChain::open(&self.setup.device, bm::DEFAULT_BAUD)
                    .map_err(|source| ChainError::Driver { chain, source })?,
            ),
        };
        port.clear_input()
            .map_err(|source| ChainError::Driver { chain, source })?;
        self.links
            .uarts
            .set(chain, &self.setup.device, port.poll_fd());
        self.port = Some(port);
        self.decoder = ResponseDecoder::new();
        self.slots.clear();
        self.chip_version_mask = None;

        // 1. Enumerate: every chip answers a broadcast chip-id read, one 11-byte response each.
        self.command(Command::ReadRegister {
            target: Target::All,
            register: reg::CHIP_ADDRESS,
        })?;
        let answer_time = Duration::from_nanos(bm::wire_time_ns(
            bm::RESPONSE_LEN * self.setup.chips_expected.max(1) as usize,
            bm::DEFAULT_BAUD,
        ));
        let ids = self.collect_registers(
            reg::CHIP_ADDRESS,
            Instant::now() + answer_time * 3 + Duration::from_millis(200),
            answer_time / 4 + Duration::from_millis(30),
        )?;
        let Some(plan) = plan_bring_up(&ids, self.setup.chip_model, self.setup.ticket) else {
            return Err(ChainError::NoChips {
                chain,
                device: self.setup.device.clone(),
            });
        };
        let detected = plan.detected;
        if plan.model != self.setup.chip_model {
            tracing::warn!(
                chain,
                configured = self.setup.chip_model.name(),
                found = plan.model.name(),
                "chip model differs from config; using what answered"
            );
            self.setup.chip_model = plan.model;
        }
        if detected < self.setup.chips_expected {
            tracing::warn!(
                chain,
                detected,
                expected = self.setup.chips_expected,
                "chips missing"
            );
        }

        // 2. Addresses in chain order at the interval for the chips present; 3. ticket mask
        // and version rolling before any work (one write, see [`plan_bring_up`]).
        self.write(&plan.setup_bytes)?;
        let start_mhz = POWER_ON_MHZ.min(self.setup.target_mhz);
        self.chips = plan
            .addresses
            .iter()
            .map(|&address| Chip {
                address,
                mhz: start_mhz,
                set_mhz: self.setup.target_mhz,
                alive: true,
            })
            .collect();
        let now = self.now_ms();
        self.acct = carry_counters(&self.acct, detected as usize, now);

        // 4. PLL ramp in steps to the target (scaled by any thermal cut-back).
        let target = self.setup.target_mhz * self.freq_scale;
        self.ramp_chip(None, target)?;

        // 5. Baud switch: chips first (the command goes out at the old speed), then the host.
        if self.setup.baud != bm::DEFAULT_BAUD {
            let divider = BaudDivider::for_baud(self.setup.baud)
                .map_err(|source| ChainError::Codec { chain, source })?;
            let first = self.chips[0].address;
            self.command(Command::ReadRegister {
                target: Target::Chip(first),
                register: reg::MISC_CONTROL,
            })?;
            let misc = self
                .collect_registers(
                    reg::MISC_CONTROL,
                    Instant::now() + Duration::from_millis(100),
                    Duration::from_millis(1),
                )?
                .first()
                .map_or(0, |r| r.value);
            self.command(Command::WriteRegister {
                target: Target::All,
                register: reg::MISC_CONTROL,
                value: divider.to_misc_control(misc),
            })?;
            let baud = self.setup.baud;
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            port.set_baud(baud)
                .map_err(|source| ChainError::Driver { chain, source })?;
            // Confirm the chips are listening at the new speed.
            self.command(Command::ReadRegister {
                target: Target::Chip(first),
                register: reg::CHIP_ADDRESS,
            })?;
            let ok = self.collect_registers(
                reg::CHIP_ADDRESS,
                Instant::now() + Duration::from_millis(200),
                Duration::from_millis(1),
            )?;
            if ok.is_empty() {
                return Err(ChainError::BaudSwitch { chain, baud });
            }
        }
        tracing::info!(
            chain,
            chips = detected,
            // To the PLL's 0.1 MHz, not the f64's 243.09999999999968.
            mhz = (target * 10.0).round() / 10.0,
            baud = self.baud(),
            ms = started.elapsed().as_millis() as u64,
            "chain brought up"
        );
        Ok(())
    }

    /// Ramp one chip (or all) to `mhz` in [`PLL_STEP_MHZ`] steps; returns the frequency reached.
    pub(super) fn ramp_chip(&mut self, chip: Option<usize>, mhz: f64) -> Result<f64, ChainError> {
        let chain = self.chain();
        let final_pll =
            Pll::for_frequency(mhz).map_err(|source| ChainError::Codec { chain, source })?;
        let indices: Vec<usize> = match chip {
            Some(i) => vec![i],
            None => (0..self.chips.len()).collect(),
        };
        let Some(&first) = indices.first() else {
            return Ok(mhz);
        };
        let mut current = self.chips[first].mhz;
        let target_mhz = final_pll.frequency_mhz();
        let target = match chip {
            Some(i) => Target::Chip(self.chips[i].address),
            None => Target::All,
        };
        while (target_mhz - current).abs() > 1e-6 {
            let step = (target_mhz - current).clamp(-PLL_STEP_MHZ, PLL_STEP_MHZ);
            let next = current + step;
            let pll = if (next - target_mhz).abs() < 1e-6 {
                final_pll
            } else {
                Pll::for_frequency(next).map_err(|source| ChainError::Codec { chain, source })?
            };
            self.command(Command::WriteRegister {
                target,
                register: reg::PLL0_PARAMETER,
                value: pll.to_register(),
            })?;
            current = if (next - target_mhz).abs() < 1e-6 {
                target_mhz
            } else {
                next
            };
            std::thread::sleep(PLL_STEP_PAUSE);
        }
        for i in indices {
            self.chips[i].mhz = target_mhz;
        }
        Ok(target_mhz)
    }

    /// Re-apply every chip's set frequency times the current scale: one broadcast ramp when
    /// the chips agree (the common case), chip by chip otherwise.
    pub(super) fn apply_scale(&mut self) -> Result<(), ChainError> {
        if self.port.is_none() || self.chips.is_empty() {
            return Ok(());
        }
        let same = |f: fn(&Chip) -> f64, chips: &[Chip]| {
            chips.windows(2).all(|w| (f(&w[0]) - f(&w[1])).abs() < 1e-6)
        };
        if same(|c| c.set_mhz, &self.chips) && same(|c| c.mhz, &self.chips) {
            let target = self.chips[0].set_mhz * self.freq_scale;
            self.ramp_chip(None, target)?;
        } else {
            for i in 0..self.chips.len() {
                let target = self.chips[i].set_mhz * self.freq_scale;
                self.ramp_chip(Some(i), target)?;
            }
        }
        self.publish();
        Ok(())
    }

    pub(super) fn set_frequency(&mut self, chip: Option<u32>, mhz: f64) -> Result<f64, ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        let scaled = mhz * self.freq_scale;
        match chip {
            Some(c) => {
                let i = c as usize;
                if i >= self.chips.len() {
                    return Err(ChainError::NoSuchChip { chain, chip: c });
                }
                self.chips[i].set_mhz = mhz;
                self.ramp_chip(Some(i), scaled)
            }
            None => {
                // Chips may differ after per-chip settings: ramp each from where it is, but
                // with broadcasts when they agree (the common case).
                let uniform = self
                    .chips
                    .windows(2)
                    .all(|w| (w[0].mhz - w[1].mhz).abs() < 1e-6);
                self.chips.iter_mut().for_each(|c| c.set_mhz = mhz);
                if uniform {
                    self.ramp_chip(None, scaled)
                } else {
                    let mut reached = scaled;
                    for i in 0..self.chips.len() {
                        reached = self.ramp_chip(Some(i), scaled)?;
                    }
                    Ok(reached)
                }
            }
        }
        .inspect(|_| {
            self.save_state();
            self.publish();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chip_ids(model: u16, n: u8) -> Vec<bm::RegisterResponse> {
        (0..n)
            .map(|i| bm::RegisterResponse {
                value: u32::from(model) << 16,
                chip_address: i,
                register: reg::CHIP_ADDRESS,
            })
            .collect()
    }

    #[test]
    fn the_plan_addresses_the_chips_that_answered_then_sets_the_ticket() {
        let ticket = TicketMask { zero_bits: 8 };
        let answers = chip_ids(ChipModel::Bm1366.chip_id(), 3);
        let plan = plan_bring_up(&answers, ChipModel::Bm1366, ticket).unwrap();
        assert_eq!(plan.detected, 3);
        assert_eq!(plan.model, ChipModel::Bm1366);
        let spread: Vec<u8> = (0..3).map(|i| bm::chip_address(i, 3)).collect();
        assert_eq!(plan.addresses, spread);
        assert!(
            plan.addresses.windows(2).all(|w| w[0] < w[1]),
            "chain order"
        );
        let mut want = Command::ChainInactive.encode();
        for &address in &spread {
            want.extend(Command::SetAddress { address }.encode());
        }
        want.extend(
            Command::WriteRegister {
                target: Target::All,
                register: reg::TICKET_MASK,
                value: ticket.to_register(),
            }
            .encode(),
        );
        assert_eq!(plan.setup_bytes, want);
    }

    #[test]
    fn the_model_that_answered_wins_and_no_answer_means_no_plan() {
        let ticket = TicketMask { zero_bits: 8 };
        let other = plan_bring_up(
            &chip_ids(ChipModel::Bm1397.chip_id(), 2),
            ChipModel::Bm1366,
            ticket,
        )
        .unwrap();
        assert_eq!(other.model, ChipModel::Bm1397);
        let unknown = plan_bring_up(&chip_ids(0xbeef, 2), ChipModel::Bm1366, ticket).unwrap();
        assert_eq!(
            unknown.model,
            ChipModel::Bm1366,
            "an unknown id keeps the config"
        );
        assert_eq!(plan_bring_up(&[], ChipModel::Bm1366, ticket), None);
    }

    #[test]
    fn counters_survive_a_power_cycle_with_fewer_or_more_chips() {
        let mut old = ChainAccounting::new(4, 0);
        old.nonces = 40;
        old.hw_errors = 4;
        old.duplicates = 2;
        old.stale = 1;
        for (i, c) in old.chips.iter_mut().enumerate() {
            c.nonces = 10 + i as u64;
            c.hw_errors = i as u64;
        }
        let fewer = carry_counters(&old, 2, 5_000);
        assert_eq!(
            (fewer.nonces, fewer.hw_errors, fewer.duplicates, fewer.stale),
            (40, 4, 2, 1)
        );
        assert_eq!(
            fewer.chips.iter().map(|c| c.nonces).collect::<Vec<_>>(),
            vec![10, 11]
        );
        let more = carry_counters(&old, 6, 5_000);
        assert_eq!(
            more.chips.iter().map(|c| c.hw_errors).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 0, 0]
        );
    }

    fn enumerations(written: &[u8]) -> usize {
        let probe = Command::ReadRegister {
            target: Target::All,
            register: reg::CHIP_ADDRESS,
        }
        .encode();
        written.windows(probe.len()).filter(|w| *w == probe).count()
    }

    #[test]
    fn a_failed_bring_up_is_tried_again_with_backoff_while_the_chain_is_meant_to_be_on() {
        let mut kit = super::super::testkit::worker(1);
        let (port, chips) = super::super::testkit::port();
        let w = &mut kit.worker;
        w.spare_port = Some(port);
        w.cold_start();
        assert_eq!(w.status, ChainStatus::Missing);
        assert_eq!(enumerations(&chips.written()), 1);
        let first = w.retry_bring_up_at.expect("a retry is scheduled");

        // Not yet due: nothing happens.
        w.retry_bring_up_if_due(first - Duration::from_millis(1));
        assert_eq!(enumerations(&chips.written()), 1);
        // Due: the chain is enumerated again, and the next retry waits longer.
        let tried = Instant::now();
        w.retry_bring_up_if_due(first);
        assert_eq!(enumerations(&chips.written()), 2);
        let second = w.retry_bring_up_at.expect("still failing, still scheduled");
        assert!(
            second.duration_since(tried) > BRING_UP_RETRY_FLOOR,
            "the delay doubled"
        );

        // Switched off meanwhile: no more attempts.
        w.enabled = false;
        w.retry_bring_up_if_due(second + BRING_UP_RETRY_CAP);
        assert_eq!(w.retry_bring_up_at, None);
        assert_eq!(enumerations(&chips.written()), 2);
    }
}
