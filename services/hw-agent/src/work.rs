//! Work: pool job templates, the rolls hw-agent makes of them, and nonce verification.
//!
//! A template from stratum-agent becomes an [`ActiveJob`] (shared by every chain through an
//! `Arc`). Each chain rolls its own extranonce2 range (the chain index is in the top bits, so
//! two chains never hash the same header), rolls ntime forward with the wall clock, and leaves
//! the version bits the pool allows to the chips. Every job frame sent is remembered in a
//! [`WorkSlots`] ring under its chip job id, so a nonce that comes back can be turned into the
//! exact header again, verified with SHA-256d, checked for duplicates and for staleness.

use std::sync::Arc;

use bitcoin::TxMerkleNode;
use svcos_bm13xx::TicketMask;
use svcos_proto::stratum::v1::JobTemplate;
use svcos_work::{Job, header_bytes, header_hash};

/// Largest extranonce2 hw-agent rolls; pools use 4 to 8 bytes.
pub const MAX_EXTRANONCE2: usize = 8;
/// Bits of extranonce2 reserved for the chain index (up to 16 chains).
pub const CHAIN_BITS: u32 = 4;
/// How far ntime may run ahead of the pool's value, seconds (pools accept about two hours; a
/// job is replaced long before).
pub const MAX_NTIME_ROLL_S: u32 = 600;

/// Why a template cannot be mined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// A hash field had the wrong length.
    #[error("job {job_id}: {field} must be 32 bytes, got {got}")]
    HashLength {
        /// The pool's job id.
        job_id: String,
        /// Which field.
        field: &'static str,
        /// Its length.
        got: usize,
    },
    /// The pool wants more extranonce2 than hw-agent rolls.
    #[error("job {job_id}: extranonce2_size {size} is above {MAX_EXTRANONCE2}")]
    Extranonce2Size {
        /// The pool's job id.
        job_id: String,
        /// The size asked for.
        size: u32,
    },
}

/// A pool job as hw-agent mines it.
#[derive(Debug, Clone)]
pub struct ActiveJob {
    /// The pool's job id.
    pub job_id: String,
    /// stratum-agent's upstream session counter.
    pub pool_epoch: u64,
    /// Work that is invalidated together shares a generation; a clean job or a new epoch
    /// starts a new one, and nonces of an older generation are stale.
    pub generation: u64,
    /// Coinbase parts, merkle branch, header fields.
    pub job: Job,
    /// Extranonce2 length the pool expects.
    pub extranonce2_size: usize,
    /// Version bits the chips may roll.
    pub version_mask: u32,
    /// Pool share difficulty.
    pub share_difficulty: f64,
    /// Whether the pool said to drop earlier work.
    pub clean_jobs: bool,
    /// When stratum-agent read the notify, unix µs.
    pub received_at_us: i64,
    /// When hw-agent got the template, unix ms (ntime rolling and telemetry).
    pub arrived_unix_ms: i64,
    /// When hw-agent got the template, monotonic (latency probe).
    pub arrived: std::time::Instant,
}

impl ActiveJob {
    /// Build from a template; `generation` is decided by the caller's job book.
    pub fn from_template(
        t: &JobTemplate,
        generation: u64,
        arrived_unix_ms: i64,
    ) -> Result<Self, TemplateError> {
        let hash32 = |field: &'static str, v: &[u8]| -> Result<[u8; 32], TemplateError> {
            v.try_into().map_err(|_| TemplateError::HashLength {
                job_id: t.job_id.clone(),
                field,
                got: v.len(),
            })
        };
        if t.extranonce2_size as usize > MAX_EXTRANONCE2 {
            return Err(TemplateError::Extranonce2Size {
                job_id: t.job_id.clone(),
                size: t.extranonce2_size,
            });
        }
        let merkle_branch = t
            .merkle_branch
            .iter()
            .map(|b| hash32("merkle_branch", b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ActiveJob {
            job_id: t.job_id.clone(),
            pool_epoch: t.pool_epoch,
            generation,
            job: Job {
                prev_hash: hash32("prev_hash", &t.prev_hash)?,
                coinb1: t.coinb1.clone(),
                coinb2: t.coinb2.clone(),
                extranonce1: t.extranonce1.clone(),
                merkle_branch,
                version: t.version,
                nbits: t.nbits,
                ntime: t.ntime,
            },
            extranonce2_size: t.extranonce2_size as usize,
            version_mask: t.version_mask,
            share_difficulty: t.share_difficulty,
            clean_jobs: t.clean_jobs,
            received_at_us: t.received_at_us,
            arrived_unix_ms,
            arrived: std::time::Instant::now(),
        })
    }
}

/// Decides generations: which templates invalidate the work before them.
#[derive(Debug, Default, Clone)]
pub struct JobBook {
    generation: u64,
    epoch: Option<u64>,
}

impl JobBook {
    /// Continue from a saved generation and epoch (after a restart that re-attached).
    pub fn resume(generation: u64, epoch: Option<u64>) -> Self {
        JobBook { generation, epoch }
    }

    /// The generation a new template belongs to, and whether it invalidates earlier work
    /// (clean_jobs, or the first job of a new pool epoch).
    pub fn admit(&mut self, t: &JobTemplate) -> (u64, bool) {
        let new_epoch = self.epoch != Some(t.pool_epoch);
        let invalidates = t.clean_jobs || new_epoch;
        if invalidates {
            self.generation += 1;
        }
        self.epoch = Some(t.pool_epoch);
        (self.generation, invalidates)
    }

    /// The current pool epoch, once a job was seen.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }
}

/// Extranonce2 as bytes of the pool's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extranonce2 {
    bytes: [u8; MAX_EXTRANONCE2],
    len: u8,
}

impl Extranonce2 {
    /// The bytes to put in the coinbase and in `mining.submit`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Chain index in the top [`CHAIN_BITS`] bits, counter below, big-endian in `len` bytes.
    pub fn for_chain(chain_index: u32, counter: u64, len: usize) -> Self {
        let len = len.min(MAX_EXTRANONCE2);
        let bits = (len * 8) as u32;
        let value = if bits == 0 {
            0
        } else if bits <= CHAIN_BITS {
            u64::from(chain_index) & ((1u64 << bits) - 1)
        } else {
            let counter_bits = bits - CHAIN_BITS;
            let counter_mask = if counter_bits >= 64 {
                u64::MAX
            } else {
                (1u64 << counter_bits) - 1
            };
            (u64::from(chain_index & ((1 << CHAIN_BITS) - 1)) << counter_bits)
                | (counter & counter_mask)
        };
        let mut bytes = [0u8; MAX_EXTRANONCE2];
        let be = value.to_be_bytes();
        bytes[..len].copy_from_slice(&be[8 - len..]);
        Extranonce2 {
            bytes,
            len: len as u8,
        }
    }
}

/// One roll of a job: what a single job frame carries.
#[derive(Debug, Clone)]
pub struct Work {
    /// The job rolled.
    pub job: Arc<ActiveJob>,
    /// This roll's extranonce2.
    pub extranonce2: Extranonce2,
    /// Merkle root for that extranonce2.
    pub merkle_root: TxMerkleNode,
    /// Header time sent to the chips.
    pub ntime: u32,
}

impl Work {
    /// Roll `job` for chain `chain_index`, frame `counter`, `elapsed_s` after the job arrived.
    pub fn roll(job: &Arc<ActiveJob>, chain_index: u32, counter: u64, elapsed_s: u64) -> Self {
        let extranonce2 = Extranonce2::for_chain(chain_index, counter, job.extranonce2_size);
        let merkle_root = job.job.merkle_root(extranonce2.as_bytes());
        let roll = elapsed_s.min(u64::from(MAX_NTIME_ROLL_S)) as u32;
        Work {
            job: Arc::clone(job),
            extranonce2,
            merkle_root,
            ntime: job.job.ntime.wrapping_add(roll),
        }
    }

    /// The version the chips start from (they roll the masked bits).
    pub fn base_version(&self) -> u32 {
        self.job.job.version
    }

    /// The full header version for the 16 version bits a chip reported.
    pub fn full_version(&self, version_bits: u16) -> u32 {
        svcos_bm13xx::rolled_version(self.job.job.version, self.job.version_mask, version_bits)
    }

    /// The 80 header bytes for a nonce and full version.
    pub fn header_bytes(&self, version: u32, nonce: u32) -> [u8; 80] {
        header_bytes(
            &self
                .job
                .job
                .header_with_root(self.merkle_root, self.ntime, version, nonce),
        )
    }

    /// SHA-256d of the header for a nonce and full version.
    pub fn hash(&self, version: u32, nonce: u32) -> [u8; 32] {
        header_hash(
            &self
                .job
                .job
                .header_with_root(self.merkle_root, self.ntime, version, nonce),
        )
    }
}

/// What a returned nonce turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum NonceVerdict {
    /// Verified against the ticket target; `difficulty` is what its hash achieved.
    Valid {
        /// Achieved share difficulty.
        difficulty: f64,
        /// Full header version.
        version: u32,
    },
    /// The hash does not meet the ticket target: a hardware error.
    HwError,
    /// Seen before for this work.
    Duplicate,
    /// The work was invalidated (clean job / new epoch) or its slot was reused.
    Stale,
    /// No work was ever sent under that job id (e.g. right after a re-attach).
    Unknown,
}

/// Remembered duplicates per slot; a slot's work lasts seconds, so this bounds memory only
/// against a chip that repeats itself.
const SEEN_PER_SLOT: usize = 256;

#[derive(Debug)]
struct Slot {
    work: Work,
    seen: Vec<(u32, u32)>,
}

/// The job-id ring of one chain: frame job id → the work it carried.
#[derive(Debug)]
pub struct WorkSlots {
    slots: Vec<Option<Slot>>,
    /// How many of the newest frames keep their work. The ids are a byte, but chips abandon a
    /// frame the moment the next one arrives, so only the last few can still answer; holding all
    /// 256 kept each slot's job and duplicate list alive for 21 minutes at the 5 s frame interval
    /// (hw-agent's heap grew ~95 KB/min until the ring wrapped). Counted in frames, not seconds,
    /// because the thread that sends frames also reads the nonces: a stalled thread sends
    /// nothing new either, so a late nonce still finds its work.
    keep: usize,
}

impl WorkSlots {
    /// A ring with `size` job ids of which the newest `keep` hold their work.
    pub fn new(size: usize, keep: usize) -> Self {
        let size = size.max(1);
        WorkSlots {
            slots: (0..size).map(|_| None).collect(),
            keep: keep.clamp(1, size),
        }
    }

    /// Remember `work` under slot `index` (replacing what was there) and let go of the frame
    /// `keep` ids older, which no chip is still working on. Ids are taken in order, so that
    /// slot is the oldest one still held.
    pub fn store(&mut self, index: usize, work: Work) {
        let n = self.slots.len();
        self.slots[index % n] = Some(Slot {
            work,
            seen: Vec::new(),
        });
        if self.keep < n {
            self.slots[(index % n + n - self.keep) % n] = None;
        }
    }

    /// How many slots hold work (bounded by `keep`).
    pub fn held(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Forget everything (after a re-attach the old ids mean nothing).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }

    /// The work under a slot, if any.
    pub fn get(&self, index: usize) -> Option<&Work> {
        let n = self.slots.len();
        self.slots[index % n].as_ref().map(|s| &s.work)
    }

    /// Verify a nonce for slot `index` with the chip's rolled version bits against the ticket
    /// mask the chips were given, knowing the current generation.
    pub fn check(
        &mut self,
        index: usize,
        nonce: u32,
        version_bits: u16,
        ticket: TicketMask,
        current_generation: u64,
    ) -> NonceVerdict {
        let n = self.slots.len();
        let Some(slot) = self.slots[index % n].as_mut() else {
            return NonceVerdict::Unknown;
        };
        let version = slot.work.full_version(version_bits);
        let hash = slot.work.hash(version, nonce);
        // The chips' own rule (leading zero bits), not the pool's diff-1 target: the two differ
        // in the last 1/65536 of the range and a valid ticket must never count as an error.
        if !ticket.accepts(&hash) {
            return NonceVerdict::HwError;
        }
        if slot.seen.contains(&(nonce, version)) {
            return NonceVerdict::Duplicate;
        }
        if slot.seen.len() >= SEEN_PER_SLOT {
            slot.seen.remove(0);
        }
        slot.seen.push((nonce, version));
        if slot.work.job.generation < current_generation {
            return NonceVerdict::Stale;
        }
        NonceVerdict::Valid {
            difficulty: svcos_work::hash_difficulty(&hash),
            version,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn template(job_id: &str, epoch: u64, clean: bool) -> JobTemplate {
        JobTemplate {
            job_id: job_id.into(),
            pool_epoch: epoch,
            prev_hash: vec![0x11; 32],
            coinb1: vec![1, 2, 3],
            coinb2: vec![4, 5],
            extranonce1: vec![0xaa, 0xbb],
            extranonce2_size: 4,
            merkle_branch: vec![vec![0x22; 32]],
            version: 0x2000_0000,
            version_mask: 0x1fff_e000,
            nbits: 0x1d00_ffff,
            ntime: 1_700_000_000,
            clean_jobs: clean,
            share_difficulty: 0.001,
            ..Default::default()
        }
    }

    #[test]
    fn extranonce2_partitions_chains_and_keeps_length() {
        let a = Extranonce2::for_chain(0, 7, 4);
        let b = Extranonce2::for_chain(1, 7, 4);
        assert_eq!(a.as_bytes(), &[0x00, 0x00, 0x00, 0x07]);
        assert_eq!(b.as_bytes(), &[0x10, 0x00, 0x00, 0x07]);
        // The counter wraps inside its bits and never touches the chain nibble.
        let c = Extranonce2::for_chain(2, u64::MAX, 2);
        assert_eq!(c.as_bytes(), &[0x2f, 0xff]);
        assert_eq!(Extranonce2::for_chain(3, 9, 0).as_bytes(), &[] as &[u8]);
        assert_eq!(Extranonce2::for_chain(5, 9, 8).as_bytes().len(), 8);
    }

    #[test]
    fn template_validation() {
        let mut t = template("j", 1, true);
        assert!(ActiveJob::from_template(&t, 1, 0).is_ok());
        t.prev_hash = vec![0; 31];
        assert!(matches!(
            ActiveJob::from_template(&t, 1, 0),
            Err(TemplateError::HashLength {
                field: "prev_hash",
                ..
            })
        ));
        let mut t = template("j", 1, true);
        t.extranonce2_size = 9;
        assert!(ActiveJob::from_template(&t, 1, 0).is_err());
    }

    #[test]
    fn job_book_generations() {
        let mut b = JobBook::default();
        assert_eq!(b.admit(&template("a", 1, false)), (1, true)); // first of an epoch
        assert_eq!(b.admit(&template("b", 1, false)), (1, false));
        assert_eq!(b.admit(&template("c", 1, true)), (2, true));
        assert_eq!(b.admit(&template("d", 2, false)), (3, true)); // new epoch
        assert_eq!(b.epoch(), Some(2));
    }

    #[test]
    fn roll_versions_and_ntime() {
        let job = Arc::new(ActiveJob::from_template(&template("j", 1, true), 1, 0).unwrap());
        let w = Work::roll(&job, 1, 3, 5);
        assert_eq!(w.ntime, 1_700_000_005);
        assert_eq!(Work::roll(&job, 1, 3, 100_000).ntime, 1_700_000_600);
        assert_eq!(w.full_version(0x0001), 0x2000_2000);
        // Only bits inside the mask can change (0x1fffe000 is all 16 response bits).
        assert_eq!(w.full_version(0xffff), 0x3fff_e000);
        // Different chains, different merkle roots.
        assert_ne!(Work::roll(&job, 0, 3, 5).merkle_root, w.merkle_root);
    }

    /// Find a nonce the ticket accepts by brute force (a low mask keeps it fast).
    pub(crate) fn find_nonce(work: &Work, version: u32, ticket: TicketMask) -> u32 {
        (0u32..)
            .find(|n| ticket.accepts(&work.hash(version, *n)))
            .unwrap()
    }

    #[test]
    fn slots_verify_duplicate_stale_and_unknown() {
        let ticket = TicketMask { zero_bits: 12 };
        let job = Arc::new(ActiveJob::from_template(&template("j", 1, true), 1, 0).unwrap());
        let w = Work::roll(&job, 0, 1, 0);
        let nonce = find_nonce(&w, 0x2000_0000, ticket);
        let mut slots = WorkSlots::new(16, 16);
        assert_eq!(slots.check(3, nonce, 0, ticket, 1), NonceVerdict::Unknown);
        slots.store(3, w.clone());
        assert!(matches!(
            slots.check(3, nonce, 0, ticket, 1),
            NonceVerdict::Valid { version: 0x2000_0000, difficulty } if difficulty >= ticket.difficulty() * 0.99
        ));
        assert_eq!(slots.check(3, nonce, 0, ticket, 1), NonceVerdict::Duplicate);
        // A nonce that does not hash below the ticket target is a hardware error.
        let bad = (0u32..)
            .find(|n| !ticket.accepts(&w.hash(0x2000_0000, *n)))
            .unwrap();
        assert_eq!(slots.check(3, bad, 0, ticket, 1), NonceVerdict::HwError);
        // After a clean job the same work is stale.
        slots.store(4, w.clone());
        assert_eq!(slots.check(4, nonce, 0, ticket, 2), NonceVerdict::Stale);
        // Verification matches the midstate path chips use.
        let bytes = w.header_bytes(0x2000_0000, nonce);
        let tail: [u8; 16] = bytes[64..].try_into().unwrap();
        assert_eq!(
            svcos_work::hash_from_midstate(&svcos_work::midstate(&bytes), &tail),
            w.hash(0x2000_0000, nonce)
        );
    }

    #[test]
    fn slots_let_go_of_frames_no_chip_still_works_on() {
        let ticket = TicketMask { zero_bits: 8 };
        let job = Arc::new(ActiveJob::from_template(&template("j", 1, true), 1, 0).unwrap());
        let mut slots = WorkSlots::new(256, 4);
        let works: Vec<Work> = (0..600u64).map(|c| Work::roll(&job, 0, c, 0)).collect();
        // Ids wrap at the ring's size, as the byte-wide frame ids do.
        for (i, w) in works.iter().enumerate() {
            slots.store(i % 256, w.clone());
            assert!(slots.held() <= 4, "frame {i}: {} slots held", slots.held());
        }
        let last = 599 % 256;
        for back in 0..4 {
            let id = (last + 256 - back) % 256;
            let w = &works[599 - back];
            let nonce = find_nonce(w, 0x2000_0000, ticket);
            assert!(
                matches!(
                    slots.check(id, nonce, 0, ticket, 1),
                    NonceVerdict::Valid { .. }
                ),
                "frame {back} back still verifies"
            );
        }
        let old = (last + 256 - 4) % 256;
        let nonce = find_nonce(&works[595], 0x2000_0000, ticket);
        assert_eq!(slots.check(old, nonce, 0, ticket, 1), NonceVerdict::Unknown);
    }
}
