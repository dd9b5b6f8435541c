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

/// The chips of a saved chain, each at its saved frequency (`default_mhz` where the file has
/// fewer frequencies than chips), all presumed alive until they go quiet.
pub(super) fn chips_from_saved(saved: &SavedChain, default_mhz: f64) -> Vec<Chip> {
    saved
        .chip_addresses
        .iter()
        .enumerate()
        .map(|(i, &address)| {
            let mhz = saved.frequency_mhz.get(i).copied().unwrap_or(default_mhz);
            Chip {
                address,
                mhz,
                set_mhz: mhz,
                alive: true,
            }
        })
        .collect()
}

/// Where the job-id ring and the frame counter continue after a restored job table (the next
/// id after the newest frame, the counter after the highest), so no id the chips still hash is
/// handed out again too soon and extranonce2 never repeats; `None` for an empty table.
pub(super) fn continue_after(frames: &[FrameRecord]) -> Option<(u8, u64)> {
    let last = frames.last()?;
    let counter = frames.iter().map(|f| f.counter).max().unwrap_or(0);
    Some((last.job_id.wrapping_add(1), counter.wrapping_add(1)))
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
        self.chips = chips_from_saved(&saved, self.setup.target_mhz);
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
        if let Some((job_id, counter)) = continue_after(&frames) {
            self.next_job_id = job_id;
            self.frame_counter = counter;
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

#[cfg(test)]
mod tests {
    use super::super::testkit::{port, saved_chain, worker};
    use super::*;
    use crate::work::tests::{find_nonce, template};

    fn ticket_answer(chip_address: u8, value: u32) -> Response {
        Response::Register(bm::RegisterResponse {
            value,
            chip_address,
            register: reg::TICKET_MASK,
        })
    }

    #[test]
    fn the_probe_accepts_our_ticket_mask_and_keeps_nonces_read_ahead() {
        let saved = saved_chain(4);
        let last = *saved.chip_addresses.last().unwrap();
        let ours = TicketMask::for_difficulty(saved.ticket_difficulty).to_register();
        let (p, mut chips) = port();
        let early = bm::NonceResponse {
            nonce: 0x1234_5678,
            chip_address: 0,
            job_id: 9,
            version_bits: 0,
        };
        chips.answer(&[Response::Nonce(early), ticket_answer(last, ours)]);
        let Ok((_, _, read_ahead)) = probe_reattach(&saved, p) else {
            panic!("a configured chain answers the probe");
        };
        assert_eq!(read_ahead, vec![early]);
        let probe = Command::ReadRegister {
            target: Target::Chip(last),
            register: reg::TICKET_MASK,
        };
        assert_eq!(
            chips.written(),
            probe.encode(),
            "one register read, no reset"
        );
    }

    #[test]
    fn the_probe_refuses_a_reset_or_silent_chain() {
        let saved = saved_chain(4);
        let last = *saved.chip_addresses.last().unwrap();
        // Power-on ticket mask: the chips lost their configuration.
        let (p, mut chips) = port();
        chips.answer(&[ticket_answer(
            last,
            TicketMask { zero_bits: 0 }.to_register(),
        )]);
        let r = probe_reattach(&saved, p).map(|_| ()).map_err(|(e, _)| e);
        assert!(matches!(r, Err(ChainError::NotRunning { .. })), "{r:?}");
        // Nobody answers at the saved baud.
        let (p, _chips) = port();
        let r = probe_reattach(&saved, p).map(|_| ()).map_err(|(e, _)| e);
        assert!(matches!(r, Err(ChainError::BaudSwitch { .. })), "{r:?}");
        // Nothing saved to probe.
        let mut none = saved_chain(4);
        none.chip_addresses.clear();
        let (p, _chips) = port();
        let r = probe_reattach(&none, p).map(|_| ()).map_err(|(e, _)| e);
        assert!(matches!(r, Err(ChainError::NotRunning { .. })), "{r:?}");
    }

    #[test]
    fn saved_chips_and_the_job_ring_continue_where_they_were() {
        let mut saved = saved_chain(3);
        saved.frequency_mhz = vec![410.0, 420.0];
        let chips = chips_from_saved(&saved, 400.0);
        assert_eq!(
            chips.iter().map(|c| (c.address, c.mhz)).collect::<Vec<_>>(),
            vec![
                (saved.chip_addresses[0], 410.0),
                (saved.chip_addresses[1], 420.0),
                (saved.chip_addresses[2], 400.0)
            ]
        );
        let job = Arc::new(ActiveJob::from_template(&template("j", 7, true), 3, 0).unwrap());
        let frames: Vec<FrameRecord> = [(254u8, 7u64), (255, 9), (0, 8)]
            .into_iter()
            .map(|(job_id, counter)| FrameRecord {
                job_id,
                counter,
                work: Work::roll(&job, 1, counter, 0),
            })
            .collect();
        assert_eq!(continue_after(&frames), Some((1, 10)));
        assert_eq!(continue_after(&[]), None);
    }

    #[test]
    fn a_reattach_submits_the_nonces_found_while_nobody_listened() {
        let mut kit = worker(3);
        let mut t = template("j", 7, true);
        t.share_difficulty = 1e-12;
        let job = Arc::new(ActiveJob::from_template(&t, 3, 0).unwrap());
        let work = Work::roll(&job, 1, 41, 0);
        let saved = saved_chain(4);
        let ticket = TicketMask::for_difficulty(saved.ticket_difficulty);
        let version = work.full_version(0);
        let nonce = find_nonce(&work, version, ticket);
        let frames = vec![FrameRecord {
            job_id: 17,
            counter: 41,
            work: work.clone(),
        }];
        let (p, _chips) = port();
        kit.worker.reattach(Reattach {
            port: p,
            saved: saved.clone(),
            frames,
            decoder: ResponseDecoder::new(),
            early: vec![bm::NonceResponse {
                nonce,
                chip_address: 0,
                job_id: 17,
                version_bits: 0,
            }],
        });
        let w = &kit.worker;
        assert_eq!(w.status, ChainStatus::Mining);
        assert_eq!(w.chips.len(), 4);
        assert_eq!((w.next_job_id, w.frame_counter), (18, 42));
        assert_eq!(w.acct.nonces, saved.nonces + 1, "counters carried on");
        assert_eq!(w.acct.stale, saved.stale);
        let share = kit
            .shares
            .try_recv()
            .expect("the buffered nonce became a share");
        assert_eq!(share.request.job_id, "j");
        assert_eq!(share.request.pool_epoch, 7);
        assert_eq!(share.request.nonce, nonce);
        assert_eq!(
            share.request.extranonce2,
            work.extranonce2.as_bytes().to_vec()
        );
    }
}
