//! The re-attach seam: probing a chain that kept running, and taking it back with its saved
//! chips, counters and job table.

use super::*;

/// What a successful re-attach probe leaves: the port, the decoder holding what followed the
/// answer, and the nonces read ahead of it.
pub type Probed = (Box<dyn ChainPort>, ResponseDecoder, Vec<bm::NonceResponse>);

/// Check that a chain's last chip still answers at the saved baud on `port`: the whole
/// re-attach handshake, one register read, no enumeration and no reset. On failure the port is
/// handed back for a cold bring-up.
pub fn probe_reattach(
    saved: &SavedChain,
    mut port: Box<dyn ChainPort>,
) -> Result<Probed, (ChainError, Box<dyn ChainPort>)> {
    let chain = saved.chain_id;
    // The last chip: on a chain that lost its configuration every chip sits at address 0, so
    // only a configured chain answers at the last (non-zero) address; and its ticket mask must
    // be ours, not the power-on one (which also covers single-chip chains at address 0).
    let Some(&last) = saved.chip_addresses.last() else {
        return Err((ChainError::NotRunning { chain }, port));
    };
    let ticket = TicketMask::for_difficulty(saved.ticket_difficulty).to_register();
    let cmd = Command::ReadRegister {
        target: Target::Chip(last),
        register: reg::TICKET_MASK,
    };
    if let Err(source) = port.write_all(&cmd.encode()) {
        return Err((ChainError::Driver { chain, source }, port));
    }
    let mut decoder = ResponseDecoder::new();
    let mut early = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if !wait_readable(port.as_ref(), deadline) {
            break;
        }
        let n = match port.read(&mut buf) {
            Ok(n) => n,
            Err(source) => return Err((ChainError::Driver { chain, source }, port)),
        };
        decoder.push(&buf[..n]);
        // Nonces the chips found while nobody read the UART come first: keep them for the
        // restored job table.
        while let Some(r) = decoder.next_response() {
            match r {
                Response::Register(r)
                    if r.register == reg::TICKET_MASK && r.chip_address == last =>
                {
                    if r.value == ticket {
                        return Ok((port, decoder, early));
                    }
                    return Err((ChainError::NotRunning { chain }, port));
                }
                Response::Register(_) => {}
                Response::Nonce(n) => early.push(n),
            }
        }
    }
    Err((
        ChainError::BaudSwitch {
            chain,
            baud: saved.baud,
        },
        port,
    ))
}

impl Worker {
    pub(super) fn reattach(&mut self, r: Reattach) {
        let Reattach {
            port,
            saved,
            frames,
            decoder,
            early,
        } = r;
        let n = saved.chip_addresses.len();
        self.chips = saved
            .chip_addresses
            .iter()
            .enumerate()
            .map(|(i, &address)| {
                let mhz = saved
                    .frequency_mhz
                    .get(i)
                    .copied()
                    .unwrap_or(self.setup.target_mhz);
                Chip {
                    address,
                    mhz,
                    set_mhz: mhz,
                    alive: true,
                }
            })
            .collect();
        self.acct = ChainAccounting::new(n, self.now_ms());
        self.restore_counters(&saved);
        self.enabled = saved.enabled;
        // The chips still hold the old mask; write it again with the first job to be sure.
        self.chip_version_mask = None;
        self.links
            .uarts
            .set(self.setup.chain_id, &self.setup.device, port.poll_fd());
        self.port = Some(port);
        self.setup.ticket = TicketMask::for_difficulty(saved.ticket_difficulty);
        // The job table: the chips keep hashing these frames until our first new job, and the
        // nonces they found while nobody listened are verified against them like any other.
        let restored = frames.len();
        for f in &frames {
            self.slots.store(usize::from(f.job_id), f.work.clone());
        }
        if let Some(last) = frames.last() {
            self.next_job_id = last.job_id.wrapping_add(1);
            self.frame_counter = frames
                .iter()
                .map(|f| f.counter)
                .max()
                .unwrap_or(0)
                .wrapping_add(1);
        }
        *self.frames.lock().unwrap_or_else(|p| p.into_inner()) = frames.into();
        self.decoder = decoder;
        self.set_status(ChainStatus::Mining);
        let read_at = Instant::now();
        let read_at_us = svcos_common::time::unix_us();
        let buffered = early.len();
        for n in early {
            self.on_nonce(n, read_at, read_at_us);
        }
        while let Some(r) = self.decoder.next_response() {
            if let Response::Nonce(n) = r {
                self.on_nonce(n, read_at, read_at_us);
            }
        }
        tracing::info!(
            chain = self.chain(),
            frames = restored,
            buffered_nonces = buffered,
            "re-attached with the saved job table"
        );
        self.save_state();
    }

    /// Counters from the re-attach file (per chip by index, as far as both have chips).
    pub(super) fn restore_counters(&mut self, saved: &SavedChain) {
        self.acct.nonces = saved.nonces;
        self.acct.hw_errors = saved.hw_errors;
        self.acct.duplicates = saved.duplicates;
        self.acct.stale = saved.stale;
        for (i, c) in self.acct.chips.iter_mut().enumerate() {
            c.nonces = saved.chip_nonces.get(i).copied().unwrap_or(0);
            c.hw_errors = saved.chip_hw_errors.get(i).copied().unwrap_or(0);
        }
    }
}
