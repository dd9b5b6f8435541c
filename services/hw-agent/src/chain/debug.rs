//! The debug seam: register reads and writes and raw commands for the API's debug and
//! diagnostic calls, answered without interrupting mining.

use super::*;

impl Worker {
    pub(super) fn debug_register(
        &mut self,
        chip: u32,
        register: u8,
        value: Option<u32>,
    ) -> Result<(u8, Option<u32>), ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        let address = self
            .chips
            .get(chip as usize)
            .ok_or(ChainError::NoSuchChip { chain, chip })?
            .address;
        if let Some(value) = value {
            self.command(Command::WriteRegister {
                target: Target::Chip(address),
                register,
                value,
            })?;
        }
        let answers = self.debug_raw(
            Command::ReadRegister {
                target: Target::Chip(address),
                register,
            },
            DEBUG_REGISTER_WAIT,
            Some((address, register)),
        )?;
        let read = answers
            .iter()
            .find(|r| r.chip_address == address && r.register == register)
            .map(|r| r.value);
        Ok((address, read))
    }

    /// Send `command`, then collect register responses for `wait`, or until the one from
    /// `(chip address, register)` in `stop_at` arrives.
    pub(super) fn debug_raw(
        &mut self,
        command: Command,
        wait: Duration,
        stop_at: Option<(u8, u8)>,
    ) -> Result<Vec<bm::RegisterResponse>, ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        self.command(command)?;
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        // Nonces arriving meanwhile are accounted as usual: mining is not interrupted.
        while Instant::now() < deadline {
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            if !wait_readable(port.as_ref(), deadline) {
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
                    Response::Register(r) => out.push(r),
                    Response::Nonce(n) => {
                        self.on_nonce(n, read_at, read_at_us);
                    }
                }
            }
            if let Some((address, register)) = stop_at
                && out
                    .iter()
                    .any(|r| r.chip_address == address && r.register == register)
            {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::reattach::chips_from_saved;
    use super::super::testkit::{port, saved_chain, worker};
    use super::*;

    #[test]
    fn a_register_write_is_read_back_from_the_chip_addressed_by_index() {
        let mut kit = worker(1);
        let saved = saved_chain(4);
        kit.worker.chips = chips_from_saved(&saved, 400.0);
        let (p, mut chips) = port();
        kit.worker.port = Some(p);
        let address = saved.chip_addresses[2];
        chips.answer(&[
            // Another chip's answer first: ignored.
            Response::Register(bm::RegisterResponse {
                value: 1,
                chip_address: saved.chip_addresses[0],
                register: 0x14,
            }),
            Response::Register(bm::RegisterResponse {
                value: 0xdead,
                chip_address: address,
                register: 0x14,
            }),
        ]);
        let (a, read) = kit.worker.debug_register(2, 0x14, Some(0xdead)).unwrap();
        assert_eq!((a, read), (address, Some(0xdead)));
        let mut want = Command::WriteRegister {
            target: Target::Chip(address),
            register: 0x14,
            value: 0xdead,
        }
        .encode();
        want.extend(
            Command::ReadRegister {
                target: Target::Chip(address),
                register: 0x14,
            }
            .encode(),
        );
        assert_eq!(chips.written(), want);
        // A chip that does not answer reads as None after the wait.
        assert_eq!(kit.worker.debug_register(1, 0x14, None).unwrap().1, None);
    }

    #[test]
    fn debug_calls_need_a_brought_up_chain_and_a_real_chip() {
        let mut kit = worker(1);
        let r = kit.worker.debug_register(0, 0x14, None);
        assert!(matches!(r, Err(ChainError::NotRunning { .. })), "{r:?}");
        kit.worker.chips = chips_from_saved(&saved_chain(4), 400.0);
        let (p, _chips) = port();
        kit.worker.port = Some(p);
        let r = kit.worker.debug_register(9, 0x14, None);
        assert!(
            matches!(r, Err(ChainError::NoSuchChip { chip: 9, .. })),
            "{r:?}"
        );
    }
}
