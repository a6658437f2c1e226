//! How a source's bytes reach the decode threads during an epoch, for sources whose samples
//! are not one local file each (local files are read by each decode thread itself).
//!
//! One fetch thread (the pipeline's `imagefeed-fetch`) claims plan positions in order through
//! [`Claims`] and calls [`Backing::fetch`], which hands each sample's encoded bytes to the
//! decode threads as a [`Fetched`], within a [`ByteBudget`]: the fetcher reserves a sample's
//! length before reading it and a decode thread releases it once decoded (a single sample
//! larger than the budget is still fetched, alone). Each kind of source reads its bytes in its
//! own file, and `backing.rs` is the one place that chooses among them:
//! - **tar shards** (`shards/read.rs`) are read as streams: consecutive samples of one shard
//!   come from one open file or one ranged request, reading forward over the headers and
//!   members in between;
//! - **objects** (`remote.rs`) are fetched with up to [`RemoteOptions::max_requests`] requests
//!   in flight (completing in any order; the batcher's reorder ring restores plan order).
//!
//! [`RemoteOptions::max_requests`]: crate::RemoteOptions::max_requests

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use super::FileIndex;
use crate::error::Error;

/// The plan positions a fetcher claims, in order, from the pipeline's window.
pub(crate) trait Claims {
    /// The next position, waiting while the window is full; `None` once the plan is done or
    /// the epoch cancelled.
    fn claim(&self) -> Option<usize>;
    /// The next position without waiting.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    fn try_claim(&self) -> TryClaim;
    /// Whether the epoch was cancelled (the consumer dropped it).
    fn is_cancelled(&self) -> bool;
}

/// What [`Claims::try_claim`] found.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) enum TryClaim {
    Got(usize),
    /// The window is full: wait for the batcher.
    Full,
    /// The plan is done or the epoch cancelled.
    Done,
}

/// The epoch's plan as a fetcher sees it: the dataset index at each position.
pub(crate) trait Positions: Sync {
    /// The dataset index at plan position `seq`.
    fn at(&self, seq: usize) -> u32;
    /// Positions in the plan.
    fn len(&self) -> usize;
}

/// What a fetcher works with: where it claims positions, the epoch's plan, the source's index,
/// the byte budget, the largest file it may read, and where the bytes go.
pub(crate) struct Fetch<'a> {
    pub(crate) claims: &'a dyn Claims,
    pub(crate) plan: &'a dyn Positions,
    pub(crate) index: &'a FileIndex,
    pub(crate) budget: &'a ByteBudget,
    pub(crate) limit: u64,
    pub(crate) tx: &'a Sender<Fetched>,
}

/// One sample's bytes on their way to a decode thread.
pub(crate) struct Fetched {
    pub(crate) seq: usize,
    pub(crate) index: u32,
    /// `None` when the epoch reads the cache and nothing was fetched.
    pub(crate) bytes: Option<Result<Vec<u8>, Error>>,
    /// Bytes reserved in the budget for this sample, released after decoding.
    pub(crate) held: u64,
}

/// A bound on fetched bytes not yet decoded.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: Mutex<u64>,
    freed: Condvar,
    max: u64,
}

impl ByteBudget {
    pub(crate) fn new(max: u64) -> Self {
        ByteBudget {
            used: Mutex::new(0),
            freed: Condvar::new(),
            max: max.max(1),
        }
    }

    /// Reserves `n` bytes if they fit (or if nothing is reserved: one large sample goes alone).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn try_acquire(&self, n: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if *used == 0 || *used + n <= self.max {
            *used += n;
            true
        } else {
            false
        }
    }

    /// Reserves `n` bytes, waiting for decoders to release some; `false` if `cancelled` first.
    pub(crate) fn acquire(&self, n: u64, cancelled: &dyn Fn() -> bool) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *used == 0 || *used + n <= self.max {
                *used += n;
                return true;
            }
            if cancelled() {
                return false;
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Changes a reservation of `from` bytes into one of `to` (the real size, once known).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn adjust(&self, from: u64, to: u64) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = (*used + to).saturating_sub(from);
        drop(used);
        self.freed.notify_all();
    }

    pub(crate) fn release(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(n);
        drop(used);
        self.freed.notify_all();
    }

    /// Bytes reserved now.
    #[cfg(test)]
    fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_budget_bounds_and_lets_one_large_sample_through() {
        let b = ByteBudget::new(100);
        assert!(b.try_acquire(60));
        assert!(!b.try_acquire(60));
        assert!(b.try_acquire(40));
        b.release(100);
        assert_eq!(b.used(), 0);
        assert!(b.try_acquire(1000), "alone, a sample over the budget goes");
        assert!(!b.acquire(1, &|| true), "cancelled while waiting");
        b.adjust(1000, 10);
        assert_eq!(b.used(), 10);
    }
}
