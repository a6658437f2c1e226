//! The fetch stage, for sources whose samples are not one local file each: tar shards (local or
//! remote) and objects in object storage.
//!
//! One fetch thread (`imagefeed-fetch`) claims plan positions from the pipeline's window, in
//! order, gets each sample's encoded bytes and hands them to the decode threads through a
//! bounded channel:
//! - **tar shards** are read as streams: consecutive samples of one shard come from one open
//!   file or one ranged request, reading forward over the headers and members in between;
//! - **objects** are fetched with up to [`RemoteOptions::max_requests`] requests in flight
//!   (completing in any order; the batcher's reorder ring restores plan order).
//!
//! Fetched bytes are bounded by a [`ByteBudget`] ([`RemoteOptions::max_bytes_in_flight`], 64 MiB
//! by default for tar shards): the fetcher reserves a sample's length before reading it and a
//! decode thread releases it once decoded. A single sample larger than the budget is still
//! fetched, alone. When the epoch reads a complete cache, nothing is fetched: the decode
//! threads read the cache.
//!
//! [`RemoteOptions::max_requests`]: crate::RemoteOptions::max_requests
//! [`RemoteOptions::max_bytes_in_flight`]: crate::RemoteOptions::max_bytes_in_flight

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

#[cfg(feature = "remote")]
use super::window::TryClaim;
use super::EpochShared;
use crate::cache::EpochCache;
use crate::error::Error;
use crate::source::shards::{ShardCursor, TarIndex};
use crate::source::Backing;

/// Fetched bytes held at once for tar shards (objects use `RemoteOptions::max_bytes_in_flight`).
pub(crate) const TAR_BYTES_IN_FLIGHT: u64 = 64 << 20;

/// The fetch stage's byte bound for `source`; `None` for local files (no fetch stage).
pub(crate) fn byte_bound(source: &crate::Source) -> Option<u64> {
    match &source.backing {
        Backing::Files => None,
        #[cfg(feature = "remote")]
        Backing::Tar(t) if t.store.is_some() => {
            t.store.as_ref().map(|s| s.options.max_bytes_in_flight)
        }
        Backing::Tar(_) => Some(TAR_BYTES_IN_FLIGHT),
        #[cfg(feature = "remote")]
        Backing::Objects(o) => Some(o.store.options.max_bytes_in_flight),
    }
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
    fn try_acquire(&self, n: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if *used == 0 || *used + n <= self.max {
            *used += n;
            true
        } else {
            false
        }
    }

    /// Reserves `n` bytes, waiting for decoders to release some; `false` if `cancelled` first.
    fn acquire(&self, n: u64, cancelled: &dyn Fn() -> bool) -> bool {
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
    fn adjust(&self, from: u64, to: u64) {
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

/// The fetch thread's body.
pub(crate) fn fetch_loop(shared: &EpochShared, tx: &Sender<Fetched>, budget: &ByteBudget) {
    if matches!(shared.cache_mode, EpochCache::Read(_)) {
        // Every sample comes from the cache: hand out positions only.
        while let Some(seq) = shared.window.claim() {
            let index = shared.plan[seq];
            let f = Fetched {
                seq,
                index,
                bytes: None,
                held: 0,
            };
            if tx.send(f).is_err() {
                return;
            }
        }
        return;
    }
    match &shared.source.backing {
        Backing::Tar(tar) => fetch_tar(shared, tar, tx, budget),
        #[cfg(feature = "remote")]
        Backing::Objects(objects) => fetch_objects(shared, objects, tx, budget),
        Backing::Files => {}
    }
}

fn fetch_tar(shared: &EpochShared, tar: &TarIndex, tx: &Sender<Fetched>, budget: &ByteBudget) {
    let limit = shared.cfg.decode_settings().max_file_bytes();
    let cancelled = || shared.window.is_cancelled();
    let mut cursor = ShardCursor::default();
    // Where the current run of consecutive samples of one shard ends (plan position, byte).
    let mut run: Option<(usize, u64)> = None;
    while let Some(seq) = shared.window.claim() {
        let index = shared.plan[seq];
        let (_, _, len) = tar.locate(index as usize);
        let name = shared.source.index.path(index as usize);
        let bytes = if len > limit {
            Err(Error::decode(
                &name,
                crate::error::DecodeFailure(format!(
                    "member is {len} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)"
                )),
            ))
        } else {
            if !budget.acquire(len, &cancelled) {
                return;
            }
            let run_end = match run {
                Some((until, end)) if seq < until => end,
                _ => {
                    let (until, end) = run_of(shared, tar, seq);
                    run = Some((until, end));
                    end
                }
            };
            let mut out = Vec::new();
            let label = shared.source.index.label(index as usize);
            cursor
                .read(tar, index as usize, label, run_end, &name, &mut out)
                .map(|()| out)
        };
        let held = if bytes.is_ok() { len } else { 0 };
        if bytes.is_err() && len <= limit {
            budget.release(len);
        }
        let f = Fetched {
            seq,
            index,
            bytes: Some(bytes),
            held,
        };
        if tx.send(f).is_err() {
            return;
        }
    }
}

/// The run of plan positions from `seq` whose samples follow each other in one shard: returns
/// the position after the run and the byte where the run's last sample ends.
fn run_of(shared: &EpochShared, tar: &TarIndex, seq: usize) -> (usize, u64) {
    let plan = &shared.plan;
    let (shard, _, mut end) = tar.span(plan[seq] as usize);
    let mut k = seq + 1;
    while k < plan.len() && plan[k] == plan[k - 1].wrapping_add(1) {
        let (s, first, last) = tar.span(plan[k] as usize);
        if s != shard || first < end {
            break;
        }
        end = last;
        k += 1;
    }
    (k, end)
}

#[cfg(feature = "remote")]
fn fetch_objects(
    shared: &EpochShared,
    objects: &crate::source::ObjectIndex,
    tx: &Sender<Fetched>,
    budget: &ByteBudget,
) {
    use futures_util::stream::FuturesUnordered;
    use futures_util::StreamExt;
    use std::future::Future;
    use std::pin::Pin;

    /// Reserved for an object of unknown size (named by a list file, not listed).
    const UNKNOWN_SIZE: u64 = 256 << 10;
    type Done = (usize, u32, u64, Result<Vec<u8>, Error>);

    let store = &objects.store;
    let max_requests = store.options.max_requests.max(1);
    let limit = shared.cfg.decode_settings().max_file_bytes();
    let cancelled = || shared.window.is_cancelled();
    let mut inflight: FuturesUnordered<Pin<Box<dyn Future<Output = Done> + Send>>> =
        FuturesUnordered::new();
    let mut pending: Option<(usize, u64)> = None;
    let mut finished = false;
    loop {
        // Start requests while there is room: positions in the window, requests, bytes.
        while !finished && inflight.len() < max_requests {
            let (seq, size) = match pending.take() {
                Some(p) => p,
                None => {
                    let claim = if inflight.is_empty() {
                        shared.window.claim()
                    } else {
                        match shared.window.try_claim() {
                            TryClaim::Got(seq) => Some(seq),
                            TryClaim::Full => break,
                            TryClaim::Done => None,
                        }
                    };
                    let Some(seq) = claim else {
                        finished = true;
                        break;
                    };
                    let index = shared.plan[seq] as usize;
                    let size = match objects.stamps[index].0 {
                        0 => UNKNOWN_SIZE,
                        n => n.min(limit),
                    };
                    (seq, size)
                }
            };
            let reserved = if inflight.is_empty() {
                budget.acquire(size, &cancelled)
            } else {
                budget.try_acquire(size)
            };
            if !reserved {
                if inflight.is_empty() {
                    return; // cancelled
                }
                pending = Some((seq, size));
                break;
            }
            let index = shared.plan[seq];
            let key = objects.key(&shared.source.index, index as usize);
            let st = store.clone();
            inflight.push(Box::pin(async move {
                let r = st.get_async(&key, limit).await;
                (seq, index, size, r)
            }));
        }
        if inflight.is_empty() {
            if finished || cancelled() {
                return;
            }
            continue;
        }
        let Some((seq, index, reserved, result)) = store.block_on(inflight.next()) else {
            continue;
        };
        let held = match &result {
            Ok(bytes) => bytes.len() as u64,
            Err(_) => 0,
        };
        budget.adjust(reserved, held);
        let f = Fetched {
            seq,
            index,
            bytes: Some(result),
            held,
        };
        if tx.send(f).is_err() {
            return;
        }
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
