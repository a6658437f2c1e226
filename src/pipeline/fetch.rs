//! The fetch thread, for sources whose samples are not one local file each (tar shards, local
//! or remote, and objects in object storage): it claims plan positions in order from the
//! window and lets the source read their bytes (`source/fetch.rs`, where each kind's reading
//! is chosen), within a byte budget, for the decode threads. When the epoch reads a complete
//! cache, nothing is fetched: the decode threads read the cache, and the thread hands out
//! positions only.

use crossbeam_channel::Sender;

use super::window::Window;
use super::Epoch;
use crate::cache::EpochCache;
use crate::source::fetch::{ByteBudget, Claims, Fetch, Fetched, Positions, TryClaim};

impl Positions for super::Plan {
    fn at(&self, seq: usize) -> u32 {
        super::Plan::at(self, seq)
    }
    fn len(&self) -> usize {
        super::Plan::len(self)
    }
}

impl Claims for Window {
    fn claim(&self) -> Option<usize> {
        Window::claim(self)
    }
    fn try_claim(&self) -> TryClaim {
        Window::try_claim(self)
    }
    fn is_cancelled(&self) -> bool {
        Window::is_cancelled(self)
    }
}

/// The fetch thread's body.
pub(crate) fn fetch_loop(epoch: &Epoch, tx: &Sender<Fetched>, budget: &ByteBudget) {
    if matches!(epoch.cache_mode, EpochCache::Read(_)) {
        // Every sample comes from the cache: hand out positions only.
        while let Some(seq) = epoch.window.claim() {
            let index = epoch.plan.at(seq);
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
    epoch.source.backing.fetch(&Fetch {
        claims: &*epoch.window,
        plan: &epoch.plan,
        index: &epoch.source.index,
        budget,
        limit: epoch.max_file_bytes,
        tx,
    });
}
