//! The one fetch loop, for sources whose samples are not one local file each (tar shards,
//! TFRecord and parquet files, local or in object storage, and objects): it claims plan
//! positions in order from the window, reserves each sample's bytes in a [`ByteBudget`], has
//! the source's [`Reader`] read them (in object storage, up to the store's `max_requests`
//! requests in flight, completing in any order: the batcher's hand-off ring restores plan
//! order) and sends them to the decode threads, which release the bytes once decoded. When the
//! epoch reads a complete cache, nothing is fetched: the decode threads read the cache, and
//! this thread hands out positions only.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

#[cfg(feature = "remote")]
use super::window::TryClaim;
use super::Epoch;
use crate::cache::EpochCache;
use crate::error::Error;
#[cfg(feature = "remote")]
use crate::source::format::read::Reader;
use crate::source::format::read::{Sample, Step};

/// One sample's bytes on their way to a decode thread.
pub(crate) struct Fetched {
    pub(crate) seq: usize,
    pub(crate) index: u32,
    /// Its name in messages (`shard.tar[KEY.jpg]`, an object's URL).
    pub(crate) name: PathBuf,
    /// `None` when the epoch reads the cache and nothing was fetched.
    pub(crate) sample: Option<Result<Sample, Error>>,
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
    #[cfg_attr(not(any(feature = "remote", test)), allow(dead_code))]
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

/// A read started: its plan position, dataset index, name and reserved bytes.
struct Started {
    seq: usize,
    index: u32,
    name: PathBuf,
    reserved: u64,
}

/// The fetch thread's body.
pub(crate) fn fetch_loop(epoch: &Epoch, tx: &Sender<Fetched>, budget: &ByteBudget) {
    if matches!(epoch.cache_mode, EpochCache::Read(_)) && epoch.fields.is_empty() {
        // Every sample comes from the cache: hand out positions only. (With fields, the
        // samples are read for them; their images come from the cache, undecoded.)
        while let Some(seq) = epoch.window.claim() {
            let f = Fetched {
                seq,
                index: epoch.plan.at(seq),
                name: PathBuf::new(),
                sample: None,
                held: 0,
            };
            if tx.send(f).is_err() {
                return;
            }
        }
        return;
    }
    let Some(mut reader) =
        epoch
            .source
            .backing
            .reader(&epoch.source.index, epoch.shuffle_block, &epoch.fields)
    else {
        return;
    };
    let done = |started: Started, sample: Result<Sample, Error>| -> bool {
        let held = match &sample {
            Ok(s) => s.bytes.len() as u64,
            Err(_) => 0,
        };
        budget.adjust(started.reserved, held);
        let f = Fetched {
            seq: started.seq,
            index: started.index,
            name: started.name,
            sample: Some(sample),
            held,
        };
        tx.send(f).is_ok()
    };
    #[cfg(feature = "remote")]
    if let Some((store, requests)) = reader.store() {
        concurrent(epoch, &mut *reader, budget, &store, requests.max(1), &done);
        return;
    }
    let cancelled = || epoch.window.is_cancelled();
    while let Some(seq) = epoch.window.claim() {
        let index = epoch.plan.at(seq);
        let reserved = reader.reserve(index).min(epoch.max_file_bytes);
        if !budget.acquire(reserved, &cancelled) {
            return;
        }
        let mut name = PathBuf::new();
        // (One arm without the `remote` feature.)
        #[allow(clippy::infallible_destructuring_match)]
        let sample = match reader.read(index, &mut name, epoch.max_file_bytes) {
            Step::Done(r) => r,
            #[cfg(feature = "remote")]
            Step::Pending(_) => Err(Error::io(
                &name,
                std::io::Error::other("a request without a store to await it"),
            )),
        };
        let started = Started {
            seq,
            index,
            name,
            reserved,
        };
        if !done(started, sample) {
            return;
        }
    }
}

/// The loop for a reader in object storage: up to `requests` reads in flight at once.
#[cfg(feature = "remote")]
fn concurrent(
    epoch: &Epoch,
    reader: &mut dyn Reader,
    budget: &ByteBudget,
    store: &crate::source::storage::remote::Store,
    requests: usize,
    done: &dyn Fn(Started, Result<Sample, Error>) -> bool,
) {
    use futures_util::future::BoxFuture;
    use futures_util::stream::FuturesUnordered;
    use futures_util::StreamExt;

    type Flight = BoxFuture<'static, (Started, Result<Sample, Error>)>;
    let cancelled = || epoch.window.is_cancelled();
    let mut inflight: FuturesUnordered<Flight> = FuturesUnordered::new();
    // A position claimed whose bytes did not fit the budget yet.
    let mut waiting: Option<(usize, u32, u64)> = None;
    let mut finished = false;
    loop {
        // Start reads while there is room: positions in the window, requests, bytes.
        while !finished && inflight.len() < requests {
            let (seq, index, reserved) = match waiting.take() {
                Some(w) => w,
                None => {
                    let claim = if inflight.is_empty() {
                        epoch.window.claim()
                    } else {
                        match epoch.window.try_claim() {
                            TryClaim::Got(seq) => Some(seq),
                            TryClaim::Full => break,
                            TryClaim::Done => None,
                        }
                    };
                    let Some(seq) = claim else {
                        finished = true;
                        break;
                    };
                    let index = epoch.plan.at(seq);
                    (seq, index, reader.reserve(index).min(epoch.max_file_bytes))
                }
            };
            let reserved_now = if inflight.is_empty() {
                budget.acquire(reserved, &cancelled)
            } else {
                budget.try_acquire(reserved)
            };
            if !reserved_now {
                if inflight.is_empty() {
                    return; // cancelled
                }
                waiting = Some((seq, index, reserved));
                break;
            }
            let mut name = PathBuf::new();
            let step = reader.read(index, &mut name, epoch.max_file_bytes);
            let started = Started {
                seq,
                index,
                name,
                reserved,
            };
            match step {
                Step::Done(r) => {
                    if !done(started, r) {
                        return;
                    }
                }
                Step::Pending(f) => inflight.push(Box::pin(async move { (started, f.await) })),
            }
        }
        if inflight.is_empty() {
            if finished || cancelled() {
                return;
            }
            continue;
        }
        let Some((started, result)) = store.block_on(inflight.next()) else {
            continue;
        };
        if !done(started, result) {
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
