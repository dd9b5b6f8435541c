//! Latency probes on the real paths: clean job → first frame on every chain, and nonce bytes
//! read → share answered on the `SubmitShares` stream. Always on (a lock and a push per event, at most a few per second),
//! bounded, and read by the benchmark; production code never looks at them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// Samples kept per series: a benchmark run of a few minutes gives a few hundred. The rings are
/// claimed at start: at one share a second, 4 096 growing ones filled over 70 minutes, and
/// hw-agent's memory crept by 3 KB a minute all that while.
const KEEP: usize = 1024;

/// Latency samples and one-off timings of one hw-agent instance.
#[derive(Debug, Default)]
pub struct Probes {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    chains: usize,
    /// generation → (chains reported, slowest so far)
    pending: BTreeMap<u64, (usize, Duration)>,
    clean_job: VecDeque<Duration>,
    nonce_submit: VecDeque<Duration>,
    nonce_dispatch: VecDeque<Duration>,
    bring_up: Option<Duration>,
    reattach: Option<Duration>,
}

impl Default for Inner {
    fn default() -> Self {
        let ring = || svcos_common::alloc::claimed_ring(KEEP, Duration::ZERO);
        Inner {
            chains: 0,
            pending: BTreeMap::new(),
            clean_job: ring(),
            nonce_submit: ring(),
            nonce_dispatch: ring(),
            bring_up: None,
            reattach: None,
        }
    }
}

fn push(q: &mut VecDeque<Duration>, d: Duration) {
    if q.len() >= KEEP {
        q.pop_front();
    }
    q.push_back(d);
}

impl Probes {
    /// How many chains must report before a clean job counts as delivered.
    pub fn set_chains(&self, chains: usize) {
        self.lock().chains = chains;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A chain wrote the first frame of a clean job `after` the job arrived.
    pub fn clean_frame_written(&self, generation: u64, after: Duration) {
        let mut inner = self.lock();
        let chains = inner.chains.max(1);
        let entry = inner.pending.entry(generation).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(after);
        if entry.0 >= chains {
            let slowest = entry.1;
            inner.pending.remove(&generation);
            push(&mut inner.clean_job, slowest);
        }
        // A chain that was idle never reports; do not let its generations pile up.
        while inner.pending.len() > 16 {
            inner.pending.pop_first();
        }
    }

    /// stratum-agent answered a share `after` its nonce bytes were read.
    pub fn share_submitted(&self, after: Duration) {
        push(&mut self.lock().nonce_submit, after);
    }

    /// A share went into the `SubmitShares` stream `after` its nonce bytes were read (the part
    /// of the path inside hw-agent).
    pub fn share_dispatched(&self, after: Duration) {
        push(&mut self.lock().nonce_dispatch, after);
    }

    /// Nonce read → share in the `SubmitShares` stream.
    pub fn nonce_dispatch_samples(&self) -> Vec<Duration> {
        self.lock().nonce_dispatch.iter().copied().collect()
    }

    /// Cold bring-up of every chain took `d`.
    pub fn bring_up(&self, d: Duration) {
        self.lock().bring_up = Some(d);
    }

    /// Re-attach took `d`.
    pub fn reattach(&self, d: Duration) {
        self.lock().reattach = Some(d);
    }

    /// Clean job → every chain, slowest chain per job.
    pub fn clean_job_samples(&self) -> Vec<Duration> {
        self.lock().clean_job.iter().copied().collect()
    }

    /// Nonce read → share answered by stratum-agent.
    pub fn nonce_submit_samples(&self) -> Vec<Duration> {
        self.lock().nonce_submit.iter().copied().collect()
    }

    /// Cold bring-up time, once done.
    pub fn bring_up_time(&self) -> Option<Duration> {
        self.lock().bring_up
    }

    /// Re-attach time, once done.
    pub fn reattach_time(&self) -> Option<Duration> {
        self.lock().reattach
    }
}

/// The `p`-th percentile (0..=100) of samples, nearest-rank.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_job_counts_slowest_chain_once_all_reported() {
        let p = Probes::default();
        p.set_chains(3);
        p.clean_frame_written(1, Duration::from_micros(100));
        p.clean_frame_written(1, Duration::from_micros(300));
        assert!(p.clean_job_samples().is_empty());
        p.clean_frame_written(1, Duration::from_micros(200));
        assert_eq!(p.clean_job_samples(), vec![Duration::from_micros(300)]);
    }

    #[test]
    fn series_keep_their_last_samples_in_rings_claimed_at_start() {
        let p = Probes::default();
        let cap = p.lock().nonce_submit.capacity();
        assert!(cap >= KEEP);
        for i in 0..KEEP as u64 + 100 {
            p.share_submitted(Duration::from_micros(i));
        }
        let inner = p.lock();
        assert_eq!(inner.nonce_submit.len(), KEEP);
        assert_eq!(inner.nonce_submit.capacity(), cap);
        assert_eq!(
            inner.nonce_submit.front(),
            Some(&Duration::from_micros(100))
        );
    }

    #[test]
    fn percentile_nearest_rank() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&s, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
