//! [`MemoryBudget`]: the host memory a loader's settings imply, computed before it runs.

use std::fmt;

use crate::config::{Config, Device};
use crate::decode::{LARGE_BYTES_PER_PIXEL, RETAIN_BYTES, SMALL_DECODE_BYTES};
use crate::source::Source;

/// The host memory a loader may hold, computed from its settings before it runs. Every buffer
/// the loader allocates is counted in one of these fields; the sum is an upper bound on the
/// loader's heap (the process adds its own code, stack and allocator overhead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryBudget {
    /// The source index (paths and labels) and the epoch's permutation.
    pub index_bytes: u64,
    /// `u8` samples in flight between decode and batcher: the reorder window and one batch's
    /// samples waiting to be normalized.
    pub in_flight_bytes: u64,
    /// The shuffle buffer: `shuffle_buffer` × one `u8` sample for a source read in order (tar
    /// shards); for random-access sources, which shuffle indices before decoding, 4 bytes an
    /// index and never more indices than the source has.
    pub shuffle_buffer_bytes: u64,
    /// Per-thread decode buffers kept between images (file bytes, pixels, the resize's
    /// intermediate image and filter taps).
    pub decode_scratch_bytes: u64,
    /// Decodes too large for the per-thread working set: `max_pixels` × 11 bytes plus one
    /// file, the most one image at `max_pixels` can take (several smaller large decodes run
    /// side by side only while together they hold no more than one such image's
    /// coefficients). Lower `max_pixels` to lower it.
    pub large_image_bytes: u64,
    /// Batches: the prefetch queue, the one being filled, one spare in the pool and the one the
    /// consumer holds; for a GPU, also `prefetch + 2` pinned staging buffers of one batch each
    /// (`u8` when the GPU normalizes).
    pub batch_bytes: u64,
    /// Encoded bytes fetched ahead of the decoders, for tar shards and object storage (0 for
    /// local files, which each decode thread reads itself): the fetch stage's byte bound.
    pub fetch_bytes: u64,
}

impl MemoryBudget {
    /// The sum of all parts (saturating: settings too large to count sum to `u64::MAX`).
    pub fn total(&self) -> u64 {
        [
            self.index_bytes,
            self.in_flight_bytes,
            self.shuffle_buffer_bytes,
            self.decode_scratch_bytes,
            self.large_image_bytes,
            self.batch_bytes,
            self.fetch_bytes,
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }

    pub(crate) fn compute(cfg: &Config, source: &Source) -> MemoryBudget {
        // Saturating throughout: a shuffle buffer of 2^62 samples must fail the memory check,
        // not wrap around to a few kilobytes and pass it.
        let sample = cfg.sample_len() as u64;
        let threads = cfg.max_threads() as u64;
        let n = source.len() as u64;
        let batch = ((cfg.batch_elems() as u64).saturating_mul(cfg.dtype.size() as u64))
            .saturating_add((cfg.batch_size as u64).saturating_mul(4 + 8));
        // A random-access source's shuffle buffer holds sample indices (4 bytes), never more
        // than the source has.
        let shuffle_buffer_bytes = if cfg.sample_shuffle_buffer() > 0 {
            (cfg.sample_shuffle_buffer() as u64).saturating_mul(sample)
        } else {
            (cfg.shuffle_buffer as u64).min(n) * 4
        };
        MemoryBudget {
            index_bytes: source.heap_bytes() + n * 4,
            in_flight_bytes: ((cfg.reorder_window() as u64)
                .saturating_add(cfg.batch_size as u64)
                .saturating_add(2))
            .saturating_mul(sample),
            shuffle_buffer_bytes,
            decode_scratch_bytes: threads.saturating_mul(
                RETAIN_BYTES
                    + SMALL_DECODE_BYTES
                    // The orientation copy and the resized planes of a JPEG decoded to planes.
                    + 2 * sample
                    + crate::transform::RESIZE_RETAINED_BYTES as u64
                    // A random transform's base image read from or written to a cache.
                    + cfg
                        .cache_base_side()
                        .map_or(0, |s| crate::transform::base_len(s) as u64),
            ),
            large_image_bytes: cfg
                .max_pixels
                .saturating_mul(LARGE_BYTES_PER_PIXEL)
                .saturating_add(cfg.decode_settings().max_file_bytes()),
            batch_bytes: (cfg.max_prefetch() as u64)
                .saturating_add(3)
                .saturating_mul(batch)
                .saturating_add(pinned_bytes(cfg)),
            fetch_bytes: crate::pipeline::fetch::byte_bound(source).unwrap_or(0),
        }
    }
}

/// Pinned host staging of a device loader (0 on the host).
fn pinned_bytes(cfg: &Config) -> u64 {
    match cfg.device {
        Device::Host => 0,
        Device::Cuda(_) => (cfg.device_slots() * cfg.staged_batch_bytes()) as u64,
    }
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "{:.1} MB = batches {:.1} + shuffle buffer {:.1} + in-flight samples {:.1} + decode scratch {:.1} + large decodes {:.1} + index {:.1}",
            mb(self.total()),
            mb(self.batch_bytes),
            mb(self.shuffle_buffer_bytes),
            mb(self.in_flight_bytes),
            mb(self.decode_scratch_bytes),
            mb(self.large_image_bytes),
            mb(self.index_bytes)
        )?;
        if self.fetch_bytes > 0 {
            write!(f, " + fetched bytes {:.1}", mb(self.fetch_bytes))?;
        }
        Ok(())
    }
}
