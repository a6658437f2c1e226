//! A simulated device: the slot ring of `cuda/` with host memory only, so that CPU-only CI
//! runs the ring through the whole pipeline (batcher writes `u8` into a slot, submission,
//! delivery, release on drop, shutdown mid-epoch). Enabled by the hidden builder setting
//! `simulate_device_staging(true)`; the loader still reports [`Device::Host`](crate::Device).
//!
//! A slot is one `u8` batch buffer (the "pinned" buffer). Submitting a batch "copies" it by
//! normalizing it into the batch's host storage with the same [`Normalizer`] as the host path,
//! so a simulated loader delivers exactly the host loader's batches. The copy is synchronous:
//! fence 1 is always passed (the ring's unit tests cover asynchronous copies).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::{SlotLease, SlotMemory, SlotRing};
use crate::batch::format::OutputSettings;
use crate::batch::normalize::{BatchStorage, Normalizer};
use crate::error::Error;
use crate::stats::StatsCell;

/// One simulated slot: a host buffer for one `u8` batch.
#[derive(Debug)]
pub(crate) struct SimSlot {
    host: Vec<u8>,
}

impl SlotMemory for SimSlot {
    fn wait_copied(&mut self) -> Result<(), Error> {
        Ok(()) // the simulated copy completes inside `submit`
    }
}

impl SimSlot {
    pub(crate) fn host_u8(&mut self) -> &mut [u8] {
        &mut self.host
    }
}

/// The simulated device of one loader.
#[derive(Debug)]
pub(crate) struct SimStaging {
    ring: Arc<SlotRing<SimSlot>>,
    normalizer: Normalizer,
    batch_bytes: usize,
    sample_len: usize,
}

impl SimStaging {
    pub(crate) fn new(output: &OutputSettings, slots: usize) -> Self {
        SimStaging {
            ring: SlotRing::new(slots),
            normalizer: Normalizer::new(output.mean, output.std, output.layout),
            batch_bytes: output.batch_elems(),
            sample_len: output.sample_len(),
        }
    }

    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn ring(&self) -> &SlotRing<SimSlot> {
        &self.ring
    }

    pub(crate) fn acquire(
        &self,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<SlotLease<SimSlot>>, Error> {
        let bytes = self.batch_bytes;
        self.ring.acquire(
            || {
                Ok(SimSlot {
                    host: vec![0; bytes],
                })
            },
            cancelled,
        )
    }

    /// "Copies" the slot's first `images` samples to the device: normalizes them into
    /// `storage`.
    pub(crate) fn submit(
        &self,
        slot: &mut SlotLease<SimSlot>,
        storage: &mut BatchStorage,
        images: usize,
        stats: &StatsCell,
    ) {
        let len = self.sample_len;
        for (k, sample) in slot.host.chunks_exact(len).take(images).enumerate() {
            self.normalizer.write(sample, storage, k);
        }
        stats.h2d_bytes.fetch_add((images * len) as u64, Relaxed);
    }
}
