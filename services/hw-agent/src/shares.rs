//! The bounded queue of shares waiting for stratum-agent.
//!
//! Chain threads push every share here (through a channel); the submitter drains it. While
//! stratum-agent is down the queue holds shares, oldest dropped first when full (the oldest
//! are the likeliest to be stale anyway), and when a new pool epoch is seen every share of an
//! older epoch is dropped: the upstream session they belonged to is gone.

use std::collections::VecDeque;

use svcos_proto::stratum::v1::SubmitShareRequest;

/// Default capacity: at the sim's share rate this is minutes of outage; on real hardware at
/// pool difficulty, hours.
pub const DEFAULT_CAPACITY: usize = 1024;

/// A share on its way to stratum-agent.
#[derive(Debug, Clone)]
pub struct PendingShare {
    /// The request as it will be sent.
    pub request: SubmitShareRequest,
    /// Work generation it was found on (see `work::JobBook`).
    pub generation: u64,
    /// When its nonce bytes were read (latency probe).
    pub read_at: std::time::Instant,
}

/// Bounded FIFO of pending shares with epoch-based expiry.
#[derive(Debug)]
pub struct ShareQueue {
    items: VecDeque<PendingShare>,
    capacity: usize,
    /// Shares dropped because the queue was full.
    pub dropped_overflow: u64,
    /// Shares dropped because their pool epoch went away.
    pub dropped_stale: u64,
}

impl ShareQueue {
    /// An empty queue holding at most `capacity` shares.
    pub fn new(capacity: usize) -> Self {
        ShareQueue {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            dropped_overflow: 0,
            dropped_stale: 0,
        }
    }

    /// Add a share; drops the oldest when full.
    pub fn push(&mut self, share: PendingShare) {
        if self.items.len() >= self.capacity {
            self.items.pop_front();
            self.dropped_overflow += 1;
        }
        self.items.push_back(share);
    }

    /// Put a share back at the front after a failed delivery, keeping the order.
    pub fn push_front(&mut self, share: PendingShare) {
        if self.items.len() >= self.capacity {
            // The new arrivals are fresher; the retried one is the oldest.
            self.dropped_overflow += 1;
            return;
        }
        self.items.push_front(share);
    }

    /// The next share to deliver.
    pub fn pop(&mut self) -> Option<PendingShare> {
        self.items.pop_front()
    }

    /// Drop shares of any epoch but `epoch`; returns how many went.
    pub fn retain_epoch(&mut self, epoch: u64) -> usize {
        let before = self.items.len();
        self.items.retain(|s| s.request.pool_epoch == epoch);
        let dropped = before - self.items.len();
        self.dropped_stale += dropped as u64;
        dropped
    }

    /// Shares waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(nonce: u32, epoch: u64) -> PendingShare {
        PendingShare {
            request: SubmitShareRequest {
                nonce,
                pool_epoch: epoch,
                ..Default::default()
            },
            generation: 1,
            read_at: std::time::Instant::now(),
        }
    }

    #[test]
    fn fifo_and_bounded_dropping_oldest() {
        let mut q = ShareQueue::new(3);
        for n in 0..5 {
            q.push(share(n, 1));
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped_overflow, 2);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|s| s.request.nonce)).collect();
        assert_eq!(order, [2, 3, 4]);
        assert!(q.is_empty());
    }

    #[test]
    fn retried_share_goes_first_unless_full() {
        let mut q = ShareQueue::new(2);
        q.push(share(1, 1));
        q.push_front(share(0, 1));
        assert_eq!(q.pop().unwrap().request.nonce, 0);
        q.push(share(2, 1));
        q.push_front(share(9, 1)); // full: the retried one is dropped
        assert_eq!(q.dropped_overflow, 1);
        assert_eq!(q.pop().unwrap().request.nonce, 1);
    }

    #[test]
    fn new_epoch_drops_old_shares() {
        let mut q = ShareQueue::new(10);
        q.push(share(1, 1));
        q.push(share(2, 2));
        q.push(share(3, 1));
        assert_eq!(q.retain_epoch(2), 2);
        assert_eq!(q.dropped_stale, 2);
        assert_eq!(q.pop().unwrap().request.nonce, 2);
    }
}
