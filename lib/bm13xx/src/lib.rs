//! BM13xx-class ASIC chain protocol: a pure codec with no I/O.
//!
//! Modelled on the public BM1397/BM1366 protocol (as documented by the open-source Bitaxe
//! firmware and cgminer drivers). Both sides of svcOS use this one crate: hw-agent encodes host
//! frames and decodes chip responses, hw-sim does the reverse, so the two can never disagree.
//!
//! # Host → chip frames (preamble `55 AA`)
//!
//! ```text
//! 55 AA | header | length | payload ... | CRC
//! ```
//! * `header` = type ([`TYPE_CMD`] or [`TYPE_JOB`]) | group ([`GROUP_SINGLE`] or [`GROUP_ALL`]) |
//!   command ([`CMD_SETADDRESS`], [`CMD_WRITE`], [`CMD_READ`], [`CMD_INACTIVE`]).
//! * `length` counts every byte after the preamble (header, length, payload and CRC).
//! * Command frames end in a CRC5 ([`crc5`]) byte over header, length and payload; job frames end
//!   in a big-endian CRC-16/CCITT-FALSE ([`crc16_ccitt_false`]) over the same span.
//!
//! | Command | Header | Payload |
//! |---|---|---|
//! | set address | `40` | new address, `00` |
//! | write register | `41` (one chip) / `51` (all) | chip address, register, value (4 bytes, big-endian) |
//! | read register | `42` (one chip) / `52` (all) | chip address, register |
//! | chain inactive | `53` | `00 00` |
//! | job | `21` | [`Job`]: 82 bytes, 88 on the wire |
//!
//! # Chip → host responses (preamble `AA 55`, always [`RESPONSE_LEN`] = 11 bytes)
//!
//! ```text
//! AA 55 | d0 d1 d2 d3 | chip | id | v0 v1 | flags+CRC5
//! ```
//! * Nonce response: `d0..d3` = the header nonce in header (little-endian) byte order, `chip` =
//!   address of the chip that found it, `id` = job id, `v0 v1` = rolled version bits
//!   (big-endian, version >> [`VERSION_SHIFT`]).
//! * Register response: `d0..d3` = register value (big-endian), `chip` = chip address, `id` =
//!   register address, `v0 v1` = 0.
//! * Last byte: bit 7 set for a nonce, clear for a register; bits 6..5 zero; bits 4..0 = CRC5 of
//!   bytes 2..=9.
//!
//! # Which chip found a nonce
//!
//! Addresses are assigned at an interval of `256 / chips` ([`address_interval`]); a chip with
//! address `a` scans exactly the nonces whose top byte lies in `a .. a + interval`. So the nonce
//! alone names its chip: [`chip_index_for_nonce`] is the one rule both sides use.
//!
//! # Deliberate differences from silicon
//!
//! * [`TicketMask`]: the register holds the number of leading zero bits a hash must have to be
//!   reported, so that the simulator (hashing real SHA-256d on a few percent of a CPU) can use
//!   ticket difficulties far below 1. Use the helpers, never the raw value.
//! * [`BaudDivider`]: the misc-control register holds a 13-bit divider and a clock-select bit
//!   (25 MHz reference or a 200 MHz fast-UART clock): `baud = clock / (8 × (divider + 1))`.

use std::fmt;

/// First two bytes of every host → chip frame.
pub const PREAMBLE_HOST: [u8; 2] = [0x55, 0xAA];
/// First two bytes of every chip → host response.
pub const PREAMBLE_RESPONSE: [u8; 2] = [0xAA, 0x55];

/// Header type bits: a job frame.
pub const TYPE_JOB: u8 = 0x20;
/// Header type bits: a command frame.
pub const TYPE_CMD: u8 = 0x40;
/// Header group bits: addressed to one chip.
pub const GROUP_SINGLE: u8 = 0x00;
/// Header group bits: broadcast to every chip.
pub const GROUP_ALL: u8 = 0x10;
/// Header command: assign the next unaddressed chip its address.
pub const CMD_SETADDRESS: u8 = 0x00;
/// Header command: write a register (also the command bits of a job frame).
pub const CMD_WRITE: u8 = 0x01;
/// Header command: read a register.
pub const CMD_READ: u8 = 0x02;
/// Header command: chain inactive (every chip forgets its address and stops relaying).
pub const CMD_INACTIVE: u8 = 0x03;

/// Header byte of a job frame.
pub const HEADER_JOB: u8 = TYPE_JOB | GROUP_SINGLE | CMD_WRITE;
/// Job payload bytes (job id .. version).
pub const JOB_PAYLOAD_LEN: usize = 82;
/// Whole job frame on the wire: preamble, header, length, payload, CRC16.
pub const JOB_FRAME_LEN: usize = 2 + 2 + JOB_PAYLOAD_LEN + 2;
/// Every chip response on the wire.
pub const RESPONSE_LEN: usize = 11;
/// Longest host frame; a decoder never needs more bytes than this to make progress.
pub const MAX_HOST_FRAME_LEN: usize = JOB_FRAME_LEN;

/// The PLL reference clock every chip runs from, MHz.
pub const REFERENCE_CLOCK_MHZ: f64 = 25.0;
/// The fast-UART clock selectable for the baud generator, Hz.
pub const FAST_UART_CLOCK_HZ: u32 = 200_000_000;
/// The reference clock as the baud generator sees it, Hz.
pub const REFERENCE_CLOCK_HZ: u32 = 25_000_000;
/// Baud rate every chain starts at after power-up or reset.
pub const DEFAULT_BAUD: u32 = 115_200;
/// Bits on the wire per byte (start, 8 data, stop): the wire time of `n` bytes is `n × 10 / baud`.
pub const BITS_PER_BYTE: u32 = 10;
/// Right shift from a block version to the 16 version bits of a response and the mask register.
pub const VERSION_SHIFT: u32 = 13;

/// Register addresses (8-bit) of a chip.
pub mod reg {
    /// Chip address / chip id (read-only): `model id << 16 | address`.
    pub const CHIP_ADDRESS: u8 = 0x00;
    /// PLL0 parameters: see [`crate::Pll`].
    pub const PLL0_PARAMETER: u8 = 0x08;
    /// Hash counting number (stored, no effect).
    pub const HASH_COUNTING_NUMBER: u8 = 0x10;
    /// Ticket mask: see [`crate::TicketMask`].
    pub const TICKET_MASK: u8 = 0x14;
    /// Misc control, holding the baud divider: see [`crate::BaudDivider`].
    pub const MISC_CONTROL: u8 = 0x18;
    /// Core register control (stored).
    pub const CORE_REGISTER_CONTROL: u8 = 0x3C;
    /// Core register value (read-only): the number of hash cores.
    pub const CORE_REGISTER_VALUE: u8 = 0x40;
    /// Version rolling mask: see [`crate::version_mask_register`].
    pub const VERSION_MASK: u8 = 0xA4;
    /// On-die PVT sensor, temperature (read-only): junction temperature in 0.01 C, two's
    /// complement (see [`crate::Pvt`]).
    pub const PVT_TEMPERATURE: u8 = 0xB0;
    /// On-die PVT sensor, voltage (read-only): the chip's core (domain) voltage in 0.1 mV.
    pub const PVT_VOLTAGE: u8 = 0xB4;
    /// On-die PVT sensor, process (read-only): the ring oscillator's frequency in kHz, a
    /// measure of how fast this die's silicon is.
    pub const PVT_PROCESS: u8 = 0xB8;
}

/// One chip's on-die process/voltage/temperature readings, decoded from the `PVT_*` registers.
///
/// BM1366-class chips carry such a sensor block; its register map is not public, so these
/// three read-only registers are the svcOS board map's (hw-sim implements them, hw-agent reads
/// them). A chip without the block answers 0 in each, which decodes as "not reported".
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pvt {
    /// Junction temperature, C.
    pub temperature_c: Option<f64>,
    /// Core (domain) voltage, mV.
    pub voltage_mv: Option<f64>,
    /// Ring-oscillator frequency, MHz.
    pub ring_oscillator_mhz: Option<f64>,
}

impl Pvt {
    /// Encode a temperature for [`reg::PVT_TEMPERATURE`].
    pub fn encode_temperature(temp_c: f64) -> u32 {
        ((temp_c * 100.0).round() as i32) as u32
    }

    /// Encode a voltage for [`reg::PVT_VOLTAGE`].
    pub fn encode_voltage(mv: f64) -> u32 {
        (mv * 10.0).round().max(0.0) as u32
    }

    /// Encode a ring-oscillator frequency for [`reg::PVT_PROCESS`].
    pub fn encode_process(mhz: f64) -> u32 {
        (mhz * 1000.0).round().max(0.0) as u32
    }

    /// Decode the three register values (0 = not reported).
    pub fn decode(temperature: u32, voltage: u32, process: u32) -> Pvt {
        let nonzero = |raw: u32, f: &dyn Fn(u32) -> f64| (raw != 0).then(|| f(raw));
        Pvt {
            temperature_c: nonzero(temperature, &|r| f64::from(r as i32) / 100.0),
            voltage_mv: nonzero(voltage, &|r| f64::from(r) / 10.0),
            ring_oscillator_mhz: nonzero(process, &|r| f64::from(r) / 1000.0),
        }
    }
}

/// Why bytes or values could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodecError {
    /// The frame did not start with the expected preamble.
    #[error("bad preamble {0:02x} {1:02x}")]
    Preamble(u8, u8),
    /// Not enough bytes for the frame yet.
    #[error("truncated frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The header/length pair names no known frame.
    #[error("unknown frame header {header:02x} with length {length}")]
    UnknownFrame {
        /// Header byte.
        header: u8,
        /// Length byte.
        length: u8,
    },
    /// CRC5 mismatch.
    #[error("CRC5 mismatch: computed {computed:02x}, frame has {found:02x}")]
    Crc5 {
        /// CRC over the received bytes.
        computed: u8,
        /// CRC the frame carried.
        found: u8,
    },
    /// CRC16 mismatch.
    #[error("CRC16 mismatch: computed {computed:04x}, frame has {found:04x}")]
    Crc16 {
        /// CRC over the received bytes.
        computed: u16,
        /// CRC the frame carried.
        found: u16,
    },
    /// Reserved bits of a response's last byte were set.
    #[error("reserved response bits set: {0:02x}")]
    Reserved(u8),
    /// No PLL setting reaches the frequency.
    #[error("frequency {mhz} MHz out of PLL range")]
    Frequency {
        /// The asked frequency.
        mhz: f64,
    },
    /// A register value does not encode valid PLL dividers.
    #[error("PLL register {0:08x} has a zero divider")]
    PllRegister(u32),
    /// No divider reaches the baud rate within 3 %.
    #[error("baud rate {0} not reachable")]
    Baud(u32),
}

/// CRC-5 (poly 0x05, init 0x1f, MSB first, no reflection, no final xor) as the chips use it.
pub fn crc5(data: &[u8]) -> u8 {
    let mut crc: u8 = 0x1f;
    for byte in data {
        for bit in (0..8).rev() {
            let input = (byte >> bit) & 1;
            let feedback = input ^ ((crc >> 4) & 1);
            crc = (crc << 1) & 0x1f;
            if feedback == 1 {
                crc ^= 0x05;
            }
        }
    }
    crc
}

/// CRC-16/CCITT-FALSE (poly 0x1021, init 0xffff, no reflection, no final xor).
pub fn crc16_ccitt_false(data: &[u8]) -> u16 {
    let mut crc: u16 = 0xffff;
    for byte in data {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Wire time of `bytes` bytes at `baud`, in nanoseconds (10 bits per byte).
pub fn wire_time_ns(bytes: usize, baud: u32) -> u64 {
    (bytes as u64 * u64::from(BITS_PER_BYTE) * 1_000_000_000) / u64::from(baud.max(1))
}

/// Who a register command is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every chip on the chain (group ALL; the address byte is sent as 0).
    All,
    /// The chip with this address.
    Chip(u8),
}

/// A host → chip command frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The first chip without an address takes `address` and starts relaying to the next one.
    SetAddress {
        /// The address to assign.
        address: u8,
    },
    /// Write a 32-bit register.
    WriteRegister {
        /// One chip or all.
        target: Target,
        /// Register address ([`reg`]).
        register: u8,
        /// The value.
        value: u32,
    },
    /// Read a 32-bit register; every addressed chip answers with a register response.
    ReadRegister {
        /// One chip or all.
        target: Target,
        /// Register address ([`reg`]).
        register: u8,
    },
    /// Every chip forgets its address (back to 0) so addresses can be assigned in chain order.
    ChainInactive,
}

impl Command {
    /// The header byte and payload of this command.
    fn parts(&self) -> (u8, [u8; 6], usize) {
        let group = |t: &Target| match t {
            Target::All => (GROUP_ALL, 0),
            Target::Chip(a) => (GROUP_SINGLE, *a),
        };
        match self {
            Command::SetAddress { address } => (
                TYPE_CMD | GROUP_SINGLE | CMD_SETADDRESS,
                [*address, 0, 0, 0, 0, 0],
                2,
            ),
            Command::WriteRegister {
                target,
                register,
                value,
            } => {
                let (g, a) = group(target);
                let v = value.to_be_bytes();
                (
                    TYPE_CMD | g | CMD_WRITE,
                    [a, *register, v[0], v[1], v[2], v[3]],
                    6,
                )
            }
            Command::ReadRegister { target, register } => {
                let (g, a) = group(target);
                (TYPE_CMD | g | CMD_READ, [a, *register, 0, 0, 0, 0], 2)
            }
            Command::ChainInactive => (TYPE_CMD | GROUP_ALL | CMD_INACTIVE, [0; 6], 2),
        }
    }

    /// Append the wire bytes of this command to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let (header, payload, len) = self.parts();
        let start = out.len();
        out.extend_from_slice(&PREAMBLE_HOST);
        out.push(header);
        out.push((len + 3) as u8);
        out.extend_from_slice(&payload[..len]);
        let crc = crc5(&out[start + 2..]);
        out.push(crc);
    }

    /// The wire bytes of this command (7 or 11 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(11);
        self.encode_into(&mut out);
        out
    }
}

/// A BM1366-style job: one block header minus its nonce; the chip rolls the nonce (and version
/// bits inside the version mask) itself.
///
/// Multi-byte integers travel little-endian and the two hashes in header byte order, so the
/// payload is the header's own bytes rearranged: [`Job::header_bytes`] rebuilds the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Job id echoed in every nonce response for this job.
    pub job_id: u8,
    /// Midstates the chip should use; 1 with in-chip version rolling.
    pub num_midstates: u8,
    /// Nonce the chips start from (the simulator starts each chip at its own sub-range).
    pub starting_nonce: u32,
    /// Compact target (header `bits`).
    pub nbits: u32,
    /// Header time.
    pub ntime: u32,
    /// Merkle root in header byte order.
    pub merkle_root: [u8; 32],
    /// Previous block hash in header byte order.
    pub prev_block_hash: [u8; 32],
    /// Base block version; bits inside the version mask are rolled by the chip.
    pub version: u32,
}

impl Job {
    /// A job from an 80-byte serialised header (its nonce is ignored).
    pub fn from_header_bytes(job_id: u8, header: &[u8; 80]) -> Job {
        let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        Job {
            job_id,
            num_midstates: 1,
            starting_nonce: 0,
            version: u32_at(0),
            prev_block_hash: header[4..36].try_into().expect("32 bytes"),
            merkle_root: header[36..68].try_into().expect("32 bytes"),
            ntime: u32_at(68),
            nbits: u32_at(72),
        }
    }

    /// The 80-byte header this job hashes for a rolled version and a nonce.
    pub fn header_bytes(&self, version: u32, nonce: u32) -> [u8; 80] {
        let mut h = [0u8; 80];
        h[0..4].copy_from_slice(&version.to_le_bytes());
        h[4..36].copy_from_slice(&self.prev_block_hash);
        h[36..68].copy_from_slice(&self.merkle_root);
        h[68..72].copy_from_slice(&self.ntime.to_le_bytes());
        h[72..76].copy_from_slice(&self.nbits.to_le_bytes());
        h[76..80].copy_from_slice(&nonce.to_le_bytes());
        h
    }

    /// The 88 wire bytes of this job frame.
    pub fn encode(&self) -> [u8; JOB_FRAME_LEN] {
        let mut f = [0u8; JOB_FRAME_LEN];
        f[0..2].copy_from_slice(&PREAMBLE_HOST);
        f[2] = HEADER_JOB;
        f[3] = (JOB_PAYLOAD_LEN + 4) as u8;
        f[4] = self.job_id;
        f[5] = self.num_midstates;
        f[6..10].copy_from_slice(&self.starting_nonce.to_le_bytes());
        f[10..14].copy_from_slice(&self.nbits.to_le_bytes());
        f[14..18].copy_from_slice(&self.ntime.to_le_bytes());
        f[18..50].copy_from_slice(&self.merkle_root);
        f[50..82].copy_from_slice(&self.prev_block_hash);
        f[82..86].copy_from_slice(&self.version.to_le_bytes());
        let crc = crc16_ccitt_false(&f[2..86]);
        f[86..88].copy_from_slice(&crc.to_be_bytes());
        f
    }

    fn from_payload(p: &[u8]) -> Job {
        let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
        Job {
            job_id: p[0],
            num_midstates: p[1],
            starting_nonce: u32_at(2),
            nbits: u32_at(6),
            ntime: u32_at(10),
            merkle_root: p[14..46].try_into().expect("32 bytes"),
            prev_block_hash: p[46..78].try_into().expect("32 bytes"),
            version: u32_at(78),
        }
    }
}

/// A decoded host → chip frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFrame {
    /// A command frame.
    Command(Command),
    /// A job frame.
    Job(Job),
}

impl HostFrame {
    /// Decode one frame at the start of `bytes`; on success also returns its length.
    pub fn decode(bytes: &[u8]) -> Result<(HostFrame, usize), CodecError> {
        if bytes.len() < 4 {
            return Err(CodecError::Truncated {
                need: 4,
                have: bytes.len(),
            });
        }
        if bytes[0..2] != PREAMBLE_HOST {
            return Err(CodecError::Preamble(bytes[0], bytes[1]));
        }
        let (header, length) = (bytes[2], bytes[3]);
        let total = usize::from(length) + 2;
        let known = match header {
            HEADER_JOB => total == JOB_FRAME_LEN,
            h if h & 0xe0 == TYPE_CMD => matches!(
                (h & 0x1f, length),
                (0x00, 5) | (0x01, 9) | (0x11, 9) | (0x02, 5) | (0x12, 5) | (0x13, 5)
            ),
            _ => false,
        };
        if !known {
            return Err(CodecError::UnknownFrame { header, length });
        }
        if bytes.len() < total {
            return Err(CodecError::Truncated {
                need: total,
                have: bytes.len(),
            });
        }
        let frame = &bytes[..total];
        if header == HEADER_JOB {
            let computed = crc16_ccitt_false(&frame[2..total - 2]);
            let found = u16::from_be_bytes([frame[total - 2], frame[total - 1]]);
            if computed != found {
                return Err(CodecError::Crc16 { computed, found });
            }
            return Ok((
                HostFrame::Job(Job::from_payload(&frame[4..total - 2])),
                total,
            ));
        }
        let computed = crc5(&frame[2..total - 1]);
        let found = frame[total - 1];
        if computed != found {
            return Err(CodecError::Crc5 { computed, found });
        }
        let p = &frame[4..total - 1];
        let target = |group_all: bool| {
            if group_all {
                Target::All
            } else {
                Target::Chip(p[0])
            }
        };
        let all = header & GROUP_ALL != 0;
        let command = match header & 0x0f {
            CMD_SETADDRESS => Command::SetAddress { address: p[0] },
            CMD_WRITE => Command::WriteRegister {
                target: target(all),
                register: p[1],
                value: u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            },
            CMD_READ => Command::ReadRegister {
                target: target(all),
                register: p[1],
            },
            _ => Command::ChainInactive,
        };
        Ok((HostFrame::Command(command), total))
    }
}

/// A nonce a chip found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonceResponse {
    /// The header nonce (as the u32 the header holds).
    pub nonce: u32,
    /// Address of the chip that sent it (informational: [`chip_index_for_nonce`] is the rule).
    pub chip_address: u8,
    /// The job id of the job it was found for.
    pub job_id: u8,
    /// Rolled version bits: `version >> VERSION_SHIFT`, see [`rolled_version`].
    pub version_bits: u16,
}

/// A register value a chip reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterResponse {
    /// The register value.
    pub value: u32,
    /// Address of the answering chip.
    pub chip_address: u8,
    /// Which register.
    pub register: u8,
}

/// A decoded chip → host response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// A nonce.
    Nonce(NonceResponse),
    /// A register read answer.
    Register(RegisterResponse),
}

/// Bit 7 of a response's last byte: set for a nonce response.
const RESPONSE_NONCE_FLAG: u8 = 0x80;

impl Response {
    /// The 11 wire bytes of this response.
    pub fn encode(&self) -> [u8; RESPONSE_LEN] {
        let mut f = [0u8; RESPONSE_LEN];
        f[0..2].copy_from_slice(&PREAMBLE_RESPONSE);
        let flag = match self {
            Response::Nonce(n) => {
                f[2..6].copy_from_slice(&n.nonce.to_le_bytes());
                f[6] = n.chip_address;
                f[7] = n.job_id;
                f[8..10].copy_from_slice(&n.version_bits.to_be_bytes());
                RESPONSE_NONCE_FLAG
            }
            Response::Register(r) => {
                f[2..6].copy_from_slice(&r.value.to_be_bytes());
                f[6] = r.chip_address;
                f[7] = r.register;
                0
            }
        };
        f[10] = flag | crc5(&f[2..10]);
        f
    }

    /// Decode one response from exactly [`RESPONSE_LEN`] bytes.
    pub fn decode(f: &[u8; RESPONSE_LEN]) -> Result<Response, CodecError> {
        if f[0..2] != PREAMBLE_RESPONSE {
            return Err(CodecError::Preamble(f[0], f[1]));
        }
        let last = f[10];
        if last & 0x60 != 0 {
            return Err(CodecError::Reserved(last));
        }
        let computed = crc5(&f[2..10]);
        if computed != last & 0x1f {
            return Err(CodecError::Crc5 {
                computed,
                found: last & 0x1f,
            });
        }
        let d = [f[2], f[3], f[4], f[5]];
        Ok(if last & RESPONSE_NONCE_FLAG != 0 {
            Response::Nonce(NonceResponse {
                nonce: u32::from_le_bytes(d),
                chip_address: f[6],
                job_id: f[7],
                version_bits: u16::from_be_bytes([f[8], f[9]]),
            })
        } else {
            Response::Register(RegisterResponse {
                value: u32::from_be_bytes(d),
                chip_address: f[6],
                register: f[7],
            })
        })
    }
}

/// What a streaming decoder has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Frames decoded successfully.
    pub frames: u64,
    /// Frames that had a preamble but failed their CRC (or reserved bits / unknown header).
    pub crc_errors: u64,
    /// Bytes skipped while looking for a preamble (or after a bad frame).
    pub garbage_bytes: u64,
}

/// Buffer compaction threshold: consumed bytes are dropped once this many have accumulated.
const COMPACT_AT: usize = 4096;

/// Shared streaming machinery: a byte buffer, a read position and resync accounting.
#[derive(Debug, Default, Clone)]
struct Stream {
    buf: Vec<u8>,
    pos: usize,
    stats: DecoderStats,
}

impl Stream {
    fn push(&mut self, bytes: &[u8]) {
        if self.pos >= COMPACT_AT || (self.pos > 0 && self.pos == self.buf.len()) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Skip to the next occurrence of `preamble[0]` after the current position (a bad frame's
    /// bytes may hide the start of the next good one, so resync byte by byte, never frame by
    /// frame). Returns false when no candidate start is buffered.
    fn seek(&mut self, preamble: [u8; 2]) -> bool {
        loop {
            let rest = self.pending();
            match rest.iter().position(|b| *b == preamble[0]) {
                Some(i) => {
                    self.skip(i);
                    let rest = self.pending();
                    if rest.len() < 2 || rest[1] == preamble[1] {
                        return rest.len() >= 2;
                    }
                    self.skip(1);
                }
                None => {
                    let n = rest.len();
                    self.skip(n);
                    return false;
                }
            }
        }
    }

    fn skip(&mut self, n: usize) {
        self.pos += n;
        self.stats.garbage_bytes += n as u64;
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.stats.frames += 1;
    }

    fn reject(&mut self) {
        self.stats.crc_errors += 1;
        self.skip(1);
    }
}

/// Streaming decoder of chip → host bytes. Resynchronises on garbage and CRC errors (counting
/// them) so that UART noise never wedges the reader; memory stays bounded by what was pushed
/// but not yet decoded.
#[derive(Debug, Default, Clone)]
pub struct ResponseDecoder {
    stream: Stream,
}

impl ResponseDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append bytes read from the UART.
    pub fn push(&mut self, bytes: &[u8]) {
        self.stream.push(bytes);
    }

    /// The next complete, CRC-valid response, or `None` until more bytes are pushed.
    pub fn next_response(&mut self) -> Option<Response> {
        loop {
            if !self.stream.seek(PREAMBLE_RESPONSE) {
                return None;
            }
            let rest = self.stream.pending();
            if rest.len() < RESPONSE_LEN {
                return None;
            }
            let frame: [u8; RESPONSE_LEN] = rest[..RESPONSE_LEN].try_into().expect("length");
            match Response::decode(&frame) {
                Ok(r) => {
                    self.stream.consume(RESPONSE_LEN);
                    return Some(r);
                }
                Err(_) => self.stream.reject(),
            }
        }
    }

    /// Bytes buffered but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.stream.pending().len()
    }

    /// Counters since creation.
    pub fn stats(&self) -> DecoderStats {
        self.stream.stats
    }
}

impl Iterator for ResponseDecoder {
    type Item = Response;
    fn next(&mut self) -> Option<Response> {
        self.next_response()
    }
}

/// Streaming decoder of host → chip bytes (the chip side, used by the simulator), with the same
/// resynchronisation rules as [`ResponseDecoder`].
#[derive(Debug, Default, Clone)]
pub struct HostFrameDecoder {
    stream: Stream,
}

impl HostFrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append bytes received from the host.
    pub fn push(&mut self, bytes: &[u8]) {
        self.stream.push(bytes);
    }

    /// The next complete, CRC-valid frame, or `None` until more bytes are pushed.
    pub fn next_frame(&mut self) -> Option<HostFrame> {
        loop {
            if !self.stream.seek(PREAMBLE_HOST) {
                return None;
            }
            match HostFrame::decode(self.stream.pending()) {
                Ok((frame, len)) => {
                    self.stream.consume(len);
                    return Some(frame);
                }
                Err(CodecError::Truncated { .. }) => return None,
                Err(_) => self.stream.reject(),
            }
        }
    }

    /// Bytes buffered but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.stream.pending().len()
    }

    /// How many more bytes complete the frame at the head of the buffer (at least 1): lets a
    /// paced reader sleep until exactly the byte that finishes a frame has arrived.
    pub fn wanted(&self) -> usize {
        let rest = self.stream.pending();
        if rest.len() >= 4 && rest[0..2] == PREAMBLE_HOST {
            (usize::from(rest[3]) + 2).saturating_sub(rest.len()).max(1)
        } else {
            1
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> DecoderStats {
        self.stream.stats
    }
}

/// Distance between consecutive chip addresses on a chain of `chips` chips: `256 / chips`
/// (at least 1). Also the number of nonce top-byte values each chip scans.
pub fn address_interval(chips: u32) -> u32 {
    (256 / chips.clamp(1, 256)).max(1)
}

/// The address of the chip at `index` (0 = nearest the host) on a chain of `chips` chips.
pub fn chip_address(index: u32, chips: u32) -> u8 {
    (index * address_interval(chips)).min(255) as u8
}

/// Which chip (index in chain order) scans `nonce` on a chain of `chips` chips, or `None` when
/// the nonce lies in the unassigned top of the range (then it cannot be genuine).
pub fn chip_index_for_nonce(nonce: u32, chips: u32) -> Option<u32> {
    let index = (nonce >> 24) / address_interval(chips);
    (index < chips).then_some(index)
}

/// The nonces the chip at `index` scans: `(first nonce, count)`.
pub fn chip_nonce_range(index: u32, chips: u32) -> (u32, u64) {
    let interval = address_interval(chips);
    (
        u32::from(chip_address(index, chips)) << 24,
        u64::from(interval) << 24,
    )
}

/// The version-rolling mask register value for a block-version mask (BIP 320 mask
/// `0x1fffe000` → `0x9000ffff`; bit 31 enables rolling).
pub fn version_mask_register(mask: u32) -> u32 {
    0x9000_0000 | ((mask >> VERSION_SHIFT) & 0xffff)
}

/// The block-version mask a version-mask register value enables (0 when rolling is off).
pub fn version_mask_from_register(value: u32) -> u32 {
    if value & 0x8000_0000 == 0 {
        0
    } else {
        (value & 0xffff) << VERSION_SHIFT
    }
}

/// The 16 version bits a nonce response carries for a rolled version.
pub fn version_bits(rolled_version: u32, mask: u32) -> u16 {
    ((rolled_version & mask) >> VERSION_SHIFT) as u16
}

/// The full rolled version from the job's base version, the mask and a response's version bits.
pub fn rolled_version(base_version: u32, mask: u32, version_bits: u16) -> u32 {
    (base_version & !mask) | ((u32::from(version_bits) << VERSION_SHIFT) & mask)
}

/// PLL dividers: `f = 25 MHz × fbdiv / (refdiv × postdiv1 × postdiv2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pll {
    /// Feedback divider (VCO multiplier).
    pub fbdiv: u8,
    /// Reference divider.
    pub refdiv: u8,
    /// First post divider (1..=7), not smaller than `postdiv2`.
    pub postdiv1: u8,
    /// Second post divider (1..=7).
    pub postdiv2: u8,
}

/// VCO frequency at and above which the PLL register's range flag is set, MHz.
const PLL_VCO_HIGH_MHZ: f64 = 2400.0;

impl Pll {
    /// The output frequency, MHz.
    pub fn frequency_mhz(&self) -> f64 {
        REFERENCE_CLOCK_MHZ * f64::from(self.fbdiv)
            / (f64::from(self.refdiv) * f64::from(self.postdiv1) * f64::from(self.postdiv2))
    }

    /// The VCO frequency, MHz.
    pub fn vco_mhz(&self) -> f64 {
        REFERENCE_CLOCK_MHZ * f64::from(self.fbdiv) / f64::from(self.refdiv)
    }

    /// The closest setting to `mhz` with the VCO in 1600..=3200 MHz and fbdiv in 144..=235
    /// (the ranges the public drivers search); errors when the best is more than 2 % off.
    pub fn for_frequency(mhz: f64) -> Result<Pll, CodecError> {
        let mut best: Option<(f64, Pll)> = None;
        for refdiv in [1u8, 2] {
            for postdiv1 in 1u8..=7 {
                for postdiv2 in 1u8..=postdiv1 {
                    for fbdiv in 144u8..=235 {
                        let pll = Pll {
                            fbdiv,
                            refdiv,
                            postdiv1,
                            postdiv2,
                        };
                        if !(1600.0..=3200.0).contains(&pll.vco_mhz()) {
                            continue;
                        }
                        let err = (pll.frequency_mhz() - mhz).abs();
                        if best.is_none_or(|(e, _)| err < e) {
                            best = Some((err, pll));
                        }
                    }
                }
            }
        }
        match best {
            Some((err, pll)) if mhz > 0.0 && err <= mhz * 0.02 => Ok(pll),
            _ => Err(CodecError::Frequency { mhz }),
        }
    }

    /// The PLL0 register value: `[range flag, fbdiv, refdiv, (postdiv1-1) << 4 | (postdiv2-1)]`,
    /// range flag `0x50` when the VCO runs at 2400 MHz or more, else `0x40`.
    pub fn to_register(&self) -> u32 {
        let flag: u8 = if self.vco_mhz() >= PLL_VCO_HIGH_MHZ {
            0x50
        } else {
            0x40
        };
        u32::from_be_bytes([
            flag,
            self.fbdiv,
            self.refdiv,
            ((self.postdiv1.saturating_sub(1) & 0x7) << 4)
                | (self.postdiv2.saturating_sub(1) & 0x7),
        ])
    }

    /// Parse a PLL0 register value.
    pub fn from_register(value: u32) -> Result<Pll, CodecError> {
        let [_, fbdiv, refdiv, post] = value.to_be_bytes();
        if fbdiv == 0 || refdiv == 0 {
            return Err(CodecError::PllRegister(value));
        }
        Ok(Pll {
            fbdiv,
            refdiv,
            postdiv1: ((post >> 4) & 0x7) + 1,
            postdiv2: (post & 0x7) + 1,
        })
    }
}

/// The UART baud generator: `baud = clock / (8 × (divider + 1))`, clock 25 MHz or 200 MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaudDivider {
    /// Use the 200 MHz fast-UART clock instead of the 25 MHz reference.
    pub fast_clock: bool,
    /// Divider (13 bits).
    pub divider: u16,
}

/// Misc-control bit selecting the fast-UART clock.
const MISC_FAST_CLOCK: u32 = 1 << 16;
/// Misc-control bits holding the baud divider.
const MISC_DIVIDER_MASK: u32 = 0x1fff;

impl BaudDivider {
    /// The baud rate this setting produces.
    pub fn baud(&self) -> u32 {
        let clock = if self.fast_clock {
            FAST_UART_CLOCK_HZ
        } else {
            REFERENCE_CLOCK_HZ
        };
        clock / (8 * (u32::from(self.divider) + 1))
    }

    /// The setting closest to `baud` (either clock); errors beyond 3 % (a UART's tolerance).
    pub fn for_baud(baud: u32) -> Result<BaudDivider, CodecError> {
        let mut best: Option<(u64, BaudDivider)> = None;
        for fast_clock in [false, true] {
            let clock = if fast_clock {
                FAST_UART_CLOCK_HZ
            } else {
                REFERENCE_CLOCK_HZ
            };
            let ideal = (f64::from(clock) / (8.0 * f64::from(baud.max(1))) - 1.0).round();
            let divider = ideal.clamp(0.0, f64::from(MISC_DIVIDER_MASK)) as u16;
            let candidate = BaudDivider {
                fast_clock,
                divider,
            };
            let err = u64::from(candidate.baud().abs_diff(baud));
            if best.is_none_or(|(e, _)| err < e) {
                best = Some((err, candidate));
            }
        }
        match best {
            Some((err, d)) if err * 100 <= u64::from(baud) * 3 => Ok(d),
            _ => Err(CodecError::Baud(baud)),
        }
    }

    /// The setting after power-up: closest to [`DEFAULT_BAUD`] on the 25 MHz clock.
    pub fn power_on() -> BaudDivider {
        BaudDivider {
            fast_clock: false,
            divider: 26,
        }
    }

    /// `misc_control` with this setting's bits replaced (other bits kept).
    pub fn to_misc_control(&self, misc_control: u32) -> u32 {
        let base = misc_control & !(MISC_FAST_CLOCK | MISC_DIVIDER_MASK);
        base | if self.fast_clock { MISC_FAST_CLOCK } else { 0 } | u32::from(self.divider)
    }

    /// The setting a misc-control value holds.
    pub fn from_misc_control(misc_control: u32) -> BaudDivider {
        BaudDivider {
            fast_clock: misc_control & MISC_FAST_CLOCK != 0,
            divider: (misc_control & MISC_DIVIDER_MASK) as u16,
        }
    }
}

/// How hard a hash must be for a chip to report it: at least `zero_bits` leading zero bits of
/// SHA-256d (read as a 256-bit little-endian number, as Bitcoin compares hashes).
///
/// Ticket difficulty `2^(zero_bits - 32)` in pool units; one reported nonce stands for
/// `2^zero_bits` hashes on average ([`TicketMask::hashes_per_nonce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TicketMask {
    /// Leading zero bits required (0..=255).
    pub zero_bits: u8,
}

impl fmt::Display for TicketMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} zero bits (difficulty {:.3e})",
            self.zero_bits,
            self.difficulty()
        )
    }
}

impl TicketMask {
    /// The strictest mask that still reports every hash meeting pool difficulty `difficulty`:
    /// `floor(32 + log2(difficulty))`, clamped to 0..=255.
    pub fn for_difficulty(difficulty: f64) -> TicketMask {
        let bits = if difficulty > 0.0 {
            (32.0 + difficulty.log2()).floor().clamp(0.0, 255.0)
        } else {
            0.0
        };
        TicketMask {
            zero_bits: bits as u8,
        }
    }

    /// The mask after power-up: difficulty 1 (32 zero bits), as silicon.
    pub fn power_on() -> TicketMask {
        TicketMask { zero_bits: 32 }
    }

    /// Nominal ticket difficulty in pool units: `2^(zero_bits - 32)`.
    pub fn difficulty(&self) -> f64 {
        2f64.powi(i32::from(self.zero_bits) - 32)
    }

    /// Average hashes behind one reported nonce: `2^zero_bits`.
    pub fn hashes_per_nonce(&self) -> f64 {
        2f64.powi(i32::from(self.zero_bits))
    }

    /// Whether a chip reports `hash` (SHA-256d output bytes).
    pub fn accepts(&self, hash: &[u8; 32]) -> bool {
        leading_zero_bits(hash) >= u32::from(self.zero_bits)
    }

    /// The ticket-mask register value.
    pub fn to_register(&self) -> u32 {
        u32::from(self.zero_bits)
    }

    /// The mask a register value holds (values above 255 saturate).
    pub fn from_register(value: u32) -> TicketMask {
        TicketMask {
            zero_bits: value.min(255) as u8,
        }
    }
}

/// Leading zero bits of a SHA-256d hash read as a little-endian 256-bit number.
pub fn leading_zero_bits(hash: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for byte in hash.iter().rev() {
        if *byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// The chip families the protocol covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChipModel {
    /// Antminer S9 class.
    Bm1387,
    /// Antminer S17 class.
    Bm1397,
    /// Antminer S19 class.
    Bm1398,
    /// Bitaxe Ultra / S19 XP class.
    Bm1366,
}

impl ChipModel {
    /// Every model.
    pub const ALL: [ChipModel; 4] = [
        ChipModel::Bm1387,
        ChipModel::Bm1397,
        ChipModel::Bm1398,
        ChipModel::Bm1366,
    ];

    /// The id in the top 16 bits of the chip-address register.
    pub fn chip_id(self) -> u16 {
        match self {
            ChipModel::Bm1387 => 0x1387,
            ChipModel::Bm1397 => 0x1397,
            ChipModel::Bm1398 => 0x1398,
            ChipModel::Bm1366 => 0x1366,
        }
    }

    /// The model with a chip id.
    pub fn from_chip_id(id: u16) -> Option<ChipModel> {
        Self::ALL.into_iter().find(|m| m.chip_id() == id)
    }

    /// Marketing name, e.g. "BM1387".
    pub fn name(self) -> &'static str {
        match self {
            ChipModel::Bm1387 => "BM1387",
            ChipModel::Bm1397 => "BM1397",
            ChipModel::Bm1398 => "BM1398",
            ChipModel::Bm1366 => "BM1366",
        }
    }

    /// The model with a name (case-insensitive).
    pub fn from_name(name: &str) -> Option<ChipModel> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// Effective hashes per clock cycle: nominal hashrate = frequency × this. Calibrated to
    /// the boards' published figures (S9: 189 chips at 650 MHz ≈ 13.5 TH/s; S19: 228 chips at
    /// 675 MHz ≈ 95 TH/s; BM1366: 894 small cores; BM1397: 672 small cores).
    pub fn hashes_per_clock(self) -> u32 {
        match self {
            ChipModel::Bm1387 => 110,
            ChipModel::Bm1397 => 672,
            ChipModel::Bm1398 => 617,
            ChipModel::Bm1366 => 894,
        }
    }

    /// Nominal hashrate at a frequency, hashes per second.
    pub fn nominal_hashrate(self, frequency_mhz: f64) -> f64 {
        frequency_mhz * 1e6 * f64::from(self.hashes_per_clock())
    }

    /// The chip-address register value of a chip of this model at `address`.
    pub fn chip_address_register(self, address: u8) -> u32 {
        (u32::from(self.chip_id()) << 16) | u32::from(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pvt_registers_round_trip_and_zero_is_not_reported() {
        let p = Pvt::decode(
            Pvt::encode_temperature(71.237),
            Pvt::encode_voltage(419.04),
            Pvt::encode_process(612.5),
        );
        assert_eq!(p.temperature_c, Some(71.24));
        assert_eq!(p.voltage_mv, Some(419.0));
        assert_eq!(p.ring_oscillator_mhz, Some(612.5));
        // Below freezing stays negative (two's complement).
        assert_eq!(
            Pvt::decode(Pvt::encode_temperature(-5.5), 1, 1).temperature_c,
            Some(-5.5)
        );
        assert_eq!(Pvt::decode(0, 0, 0), Pvt::default());
    }

    #[test]
    fn crc16_check_value() {
        // The catalogued check value of CRC-16/CCITT-FALSE for "123456789".
        assert_eq!(crc16_ccitt_false(b"123456789"), 0x29b1);
        assert_eq!(crc16_ccitt_false(b""), 0xffff);
    }

    #[test]
    fn published_command_frames_and_crc5() {
        // Frames from the public BM1397/BM1366 drivers, with their known CRC5 bytes.
        let table: [(Command, &[u8]); 7] = [
            (
                Command::SetAddress { address: 0x08 },
                &[0x55, 0xaa, 0x40, 0x05, 0x08, 0x00, 0x07],
            ),
            (
                Command::SetAddress { address: 0x02 },
                &[0x55, 0xaa, 0x40, 0x05, 0x02, 0x00, 0x01],
            ),
            (
                Command::WriteRegister {
                    target: Target::All,
                    register: reg::CORE_REGISTER_CONTROL,
                    value: 0x8000_8b00,
                },
                &[
                    0x55, 0xaa, 0x51, 0x09, 0x00, 0x3c, 0x80, 0x00, 0x8b, 0x00, 0x12,
                ],
            ),
            (
                Command::ChainInactive,
                &[0x55, 0xaa, 0x53, 0x05, 0x00, 0x00, 0x03],
            ),
            (
                Command::ReadRegister {
                    target: Target::All,
                    register: reg::CHIP_ADDRESS,
                },
                &[0x55, 0xaa, 0x52, 0x05, 0x00, 0x00, 0x0a],
            ),
            (
                Command::WriteRegister {
                    target: Target::All,
                    register: reg::VERSION_MASK,
                    value: 0x9000_ffff,
                },
                &[
                    0x55, 0xaa, 0x51, 0x09, 0x00, 0xa4, 0x90, 0x00, 0xff, 0xff, 0x1c,
                ],
            ),
            (
                Command::SetAddress { address: 0x00 },
                &[0x55, 0xaa, 0x40, 0x05, 0x00, 0x00, 0x1c],
            ),
        ];
        for (cmd, wire) in table {
            assert_eq!(cmd.encode(), wire, "{cmd:?}");
            let (decoded, len) = HostFrame::decode(wire).unwrap();
            assert_eq!(decoded, HostFrame::Command(cmd));
            assert_eq!(len, wire.len());
        }
    }

    fn sample_job() -> Job {
        let mut header = [0u8; 80];
        for (i, b) in header.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        Job::from_header_bytes(0x28, &header)
    }

    #[test]
    fn job_frame_round_trip_is_88_bytes() {
        let job = sample_job();
        let wire = job.encode();
        assert_eq!(wire.len(), 88);
        assert_eq!(&wire[..4], &[0x55, 0xaa, 0x21, 0x56]);
        let (decoded, len) = HostFrame::decode(&wire).unwrap();
        assert_eq!(len, 88);
        assert_eq!(decoded, HostFrame::Job(job));
        // The header comes back byte for byte (nonce aside).
        let mut header = [0u8; 80];
        for (i, b) in header.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let nonce = u32::from_le_bytes(header[76..80].try_into().unwrap());
        assert_eq!(job.header_bytes(job.version, nonce), header);
    }

    #[test]
    fn job_frame_crc16_detects_corruption() {
        let mut wire = sample_job().encode();
        wire[40] ^= 0x01;
        assert!(matches!(
            HostFrame::decode(&wire),
            Err(CodecError::Crc16 { .. })
        ));
    }

    #[test]
    fn command_round_trips() {
        let cmds = [
            Command::SetAddress { address: 0xfc },
            Command::WriteRegister {
                target: Target::Chip(0x04),
                register: reg::PLL0_PARAMETER,
                value: 0x40a0_0225,
            },
            Command::ReadRegister {
                target: Target::Chip(0x08),
                register: reg::TICKET_MASK,
            },
            Command::ChainInactive,
        ];
        for cmd in cmds {
            let wire = cmd.encode();
            assert_eq!(
                HostFrame::decode(&wire).unwrap(),
                (HostFrame::Command(cmd), wire.len())
            );
        }
    }

    #[test]
    fn response_round_trips_and_flags() {
        let nonce = Response::Nonce(NonceResponse {
            nonce: 0xdead_beef,
            chip_address: 0x10,
            job_id: 0x28,
            version_bits: 0x1234,
        });
        let reg = Response::Register(RegisterResponse {
            value: ChipModel::Bm1387.chip_address_register(0x04),
            chip_address: 0x04,
            register: reg::CHIP_ADDRESS,
        });
        for r in [nonce, reg] {
            let wire = r.encode();
            assert_eq!(wire.len(), RESPONSE_LEN);
            assert_eq!(&wire[..2], &[0xaa, 0x55]);
            assert_eq!(Response::decode(&wire).unwrap(), r);
        }
        assert_eq!(nonce.encode()[10] & 0x80, 0x80);
        assert_eq!(reg.encode()[10] & 0x80, 0);
        assert_eq!(&reg.encode()[2..6], &[0x13, 0x87, 0x00, 0x04]);
        assert_eq!(&nonce.encode()[2..6], &[0xef, 0xbe, 0xad, 0xde]);
    }

    #[test]
    fn response_decode_rejects_bad_crc_and_reserved_bits() {
        let r = Response::Nonce(NonceResponse {
            nonce: 1,
            chip_address: 0,
            job_id: 0,
            version_bits: 0,
        });
        let mut wire = r.encode();
        wire[3] ^= 0x40;
        assert!(matches!(
            Response::decode(&wire),
            Err(CodecError::Crc5 { .. })
        ));
        let mut wire = r.encode();
        wire[10] |= 0x20;
        assert!(matches!(
            Response::decode(&wire),
            Err(CodecError::Reserved(_))
        ));
    }

    fn nonce_response(nonce: u32) -> Response {
        Response::Nonce(NonceResponse {
            nonce,
            chip_address: 0,
            job_id: 1,
            version_bits: 0,
        })
    }

    #[test]
    fn decoder_resyncs_after_garbage_and_crc_errors() {
        let mut dec = ResponseDecoder::new();
        let mut bytes = vec![0x00, 0xaa, 0x13, 0xaa];
        bytes.extend_from_slice(&nonce_response(7).encode());
        let mut bad = nonce_response(8).encode();
        bad[5] ^= 0xff;
        bytes.extend_from_slice(&bad);
        bytes.extend_from_slice(&nonce_response(9).encode());
        // Feed one byte at a time: frames split across reads must still decode.
        let mut got = Vec::new();
        for b in &bytes {
            dec.push(std::slice::from_ref(b));
            got.extend(dec.by_ref());
        }
        assert_eq!(got, vec![nonce_response(7), nonce_response(9)]);
        let stats = dec.stats();
        assert_eq!(stats.frames, 2);
        assert_eq!(stats.crc_errors, 1);
        assert_eq!(stats.garbage_bytes, 4 + 11);
        assert_eq!(dec.buffered(), 0);
    }

    #[test]
    fn decoder_finds_frame_hidden_inside_a_corrupt_one() {
        // A truncated response (its tail lost on the wire) followed by a good one: the good one's
        // preamble sits inside the 11-byte window of the bad one and must not be skipped.
        let good = nonce_response(0x0102_0304).encode();
        let mut bytes = nonce_response(5).encode()[..6].to_vec();
        bytes.extend_from_slice(&good);
        let mut dec = ResponseDecoder::new();
        dec.push(&bytes);
        assert_eq!(dec.next_response(), Some(nonce_response(0x0102_0304)));
        assert_eq!(dec.next_response(), None);
    }

    #[test]
    fn decoder_memory_stays_bounded_under_noise() {
        let mut dec = ResponseDecoder::new();
        let mut x: u32 = 12345;
        for _ in 0..100_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            dec.push(&[(x >> 16) as u8]);
            while dec.next_response().is_some() {}
            assert!(dec.buffered() <= RESPONSE_LEN);
        }
        dec.push(&nonce_response(3).encode());
        assert_eq!(dec.by_ref().last(), Some(nonce_response(3)));
    }

    #[test]
    fn host_decoder_resyncs_and_waits_for_truncated_frames() {
        let job = sample_job();
        let mut dec = HostFrameDecoder::new();
        let mut bytes = vec![0x55, 0x55, 0xaa, 0x99, 0x05];
        let mut bad = Command::ChainInactive.encode();
        bad[6] ^= 1;
        bytes.extend_from_slice(&bad);
        bytes.extend_from_slice(&job.encode());
        dec.push(&bytes[..bytes.len() - 1]);
        assert_eq!(dec.next_frame(), None);
        assert_eq!(dec.wanted(), 1);
        dec.push(&bytes[bytes.len() - 1..]);
        assert_eq!(dec.next_frame(), Some(HostFrame::Job(job)));
        assert_eq!(dec.stats().frames, 1);
        assert!(dec.stats().crc_errors >= 2);
    }

    #[test]
    fn nonce_attribution_by_top_byte() {
        // S9 chain: 63 chips at interval 4.
        assert_eq!(address_interval(63), 4);
        assert_eq!(chip_address(62, 63), 248);
        assert_eq!(chip_index_for_nonce(0x0000_0000, 63), Some(0));
        assert_eq!(chip_index_for_nonce(0x07ff_ffff, 63), Some(1));
        assert_eq!(chip_index_for_nonce(0xfbff_ffff, 63), Some(62));
        assert_eq!(chip_index_for_nonce(0xfc00_0000, 63), None);
        assert_eq!(address_interval(1), 256);
        assert_eq!(chip_index_for_nonce(0xffff_ffff, 1), Some(0));
        for chips in [1, 2, 3, 63, 76, 128, 200, 256] {
            for index in 0..chips {
                let (first, count) = chip_nonce_range(index, chips);
                let last = (u64::from(first) + count - 1) as u32;
                assert_eq!(chip_index_for_nonce(first, chips), Some(index));
                assert_eq!(chip_index_for_nonce(last, chips), Some(index));
            }
        }
    }

    #[test]
    fn version_rolling_helpers() {
        let mask = 0x1fff_e000;
        assert_eq!(version_mask_register(mask), 0x9000_ffff);
        assert_eq!(version_mask_from_register(0x9000_ffff), mask);
        assert_eq!(version_mask_from_register(0x0000_ffff), 0);
        let base = 0x2000_0000;
        let rolled = base | (0x0123 << 13);
        let bits = version_bits(rolled, mask);
        assert_eq!(rolled_version(base, mask, bits), rolled);
        // Bits outside the mask never leak in from the response.
        assert_eq!(rolled_version(base, 0x0000_e000, 0xffff), base | 0xe000);
    }

    #[test]
    fn pll_round_trips_and_hits_frequencies() {
        for mhz in [50.0, 100.0, 200.0, 400.0, 485.0, 525.0, 650.0, 675.0, 800.0] {
            let pll = Pll::for_frequency(mhz).unwrap();
            assert!(
                (pll.frequency_mhz() - mhz).abs() <= mhz * 0.01,
                "{mhz}: {pll:?}"
            );
            assert_eq!(Pll::from_register(pll.to_register()).unwrap(), pll);
            assert!(pll.postdiv1 >= pll.postdiv2);
        }
        // The public driver's 200 MHz example: fbdiv 0xa0, refdiv 2, postdivs 1 and 0 (+1).
        let pll = Pll::from_register(0x40a0_0210).unwrap();
        assert_eq!(pll.frequency_mhz(), 25.0 * 160.0 / (2.0 * 2.0 * 1.0));
        assert!(Pll::for_frequency(5000.0).is_err());
        assert!(Pll::from_register(0x4000_0000).is_err());
    }

    #[test]
    fn baud_dividers_for_chain_speeds() {
        for baud in [115_200, 1_000_000, 1_562_500, 3_125_000] {
            let d = BaudDivider::for_baud(baud).unwrap();
            let err = d.baud().abs_diff(baud);
            assert!(err * 100 <= baud, "{baud}: {d:?} gives {}", d.baud());
            let misc = d.to_misc_control(0xabc0_0000);
            assert_eq!(BaudDivider::from_misc_control(misc), d);
            assert_eq!(misc & 0xffc0_0000, 0xabc0_0000);
        }
        assert_eq!(BaudDivider::for_baud(1_000_000).unwrap().baud(), 1_000_000);
        assert_eq!(BaudDivider::power_on().baud(), 115_740);
        assert!(BaudDivider::for_baud(50_000_000).is_err());
    }

    #[test]
    fn ticket_mask_difficulty_helpers() {
        let t = TicketMask::for_difficulty(1.0);
        assert_eq!(t.zero_bits, 32);
        assert_eq!(t.difficulty(), 1.0);
        assert_eq!(TicketMask::for_difficulty(0.00002).zero_bits, 16);
        assert_eq!(TicketMask::for_difficulty(256.0).zero_bits, 40);
        assert_eq!(TicketMask::for_difficulty(300.0).zero_bits, 40);
        assert_eq!(TicketMask::from_register(t.to_register()), t);
        // A ticket difficulty never exceeds the asked difficulty: every share is reported.
        for d in [1e-6, 1e-5, 2e-5, 0.3, 1.0, 1000.0] {
            assert!(TicketMask::for_difficulty(d).difficulty() <= d);
        }
        let mut hash = [0xffu8; 32];
        hash[31] = 0;
        hash[30] = 0x0f;
        assert_eq!(leading_zero_bits(&hash), 12);
        assert!(TicketMask { zero_bits: 12 }.accepts(&hash));
        assert!(!TicketMask { zero_bits: 13 }.accepts(&hash));
        assert_eq!(leading_zero_bits(&[0; 32]), 256);
    }

    #[test]
    fn chip_models_and_nominal_rates() {
        let s9 = ChipModel::Bm1387.nominal_hashrate(650.0) * 189.0;
        assert!((13.4e12..13.6e12).contains(&s9), "{s9}");
        for m in ChipModel::ALL {
            assert_eq!(ChipModel::from_chip_id(m.chip_id()), Some(m));
            assert_eq!(ChipModel::from_name(&m.name().to_lowercase()), Some(m));
        }
    }

    #[test]
    fn wire_time_of_a_job_at_1_mbaud() {
        assert_eq!(wire_time_ns(JOB_FRAME_LEN, 1_000_000), 880_000);
    }
}
