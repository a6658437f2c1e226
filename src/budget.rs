//! [`MemoryBudget`]: the host memory a loader's settings imply, computed before it runs.

use std::fmt;

use crate::config::Config;
use crate::decode::{LARGE_SHARED_BYTES, SMALL_DECODE_BYTES};
use crate::prefetch::Device;
use crate::source::Source;

/// The host memory a loader may hold, computed from its settings before it runs: two numbers.
///
/// - [`steady`](Self::steady): everything the loader holds while its images are no larger
///   than a typical one, each decode thread working within its share (`decode_scratch_bytes`).
///   It is what a run's peak RSS comes to after the first batches (the batch buffers are all in
///   use from the first epoch on), and what to plan a job with.
/// - [`worst_case`](Self::worst_case): the steady budget plus the reserve for decodes larger
///   than a thread's share (`large_image_bytes`, sized by `max_pixels`): what one image at
///   `max_pixels` could add. [`total`](Self::total) is the worst case, and it is what
///   [`host_memory_limit`](crate::LoaderBuilder::host_memory_limit) (and, without one, the
///   machine's memory) is checked against in `build()`.
///
/// Every buffer the loader allocates is counted in one of the fields. They count the loader's
/// heap and its threads, not the process it runs in: the program's own code, libraries and
/// heap come on top (10 to 13 MB of RSS before a loader exists, for the `imagefeed` command
/// and the test binaries). What the allocator keeps of freed memory depends on its settings:
/// the budget allows 2 MiB a thread, which holds with the glibc settings the README gives
/// ("The allocator"); glibc's defaults keep more, and more epoch after epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryBudget {
    /// The source index (paths and labels), with a strict cropping transform the digests of the files read to their end (4 bytes
    /// a sample; see [`accept_jpeg_warnings`](crate::LoaderBuilder::accept_jpeg_warnings)), and
    /// with a cache that fills, a bit a sample of which records are present.
    pub index_bytes: u64,
    /// `u8` samples in flight between decode and batcher: the reorder window, and where the
    /// batcher collects a batch's samples before it writes them (a device loader, or `u8`
    /// NCHW batches), one batch's samples.
    pub in_flight_bytes: u64,
    /// The shuffle: each epoch's order is computed position by position and holds no sample;
    /// a source read as streams (tar, TFRecord, parquet) keeps a table of its streams, 32
    /// bytes each. Nothing for a source read at random.
    pub shuffle_buffer_bytes: u64,
    /// Decode threads × each one's share: what one decode may hold outside the large-decode
    /// gate (its file, pixels and the decoder's own allocations: at least 12 MiB, more for a
    /// source whose sampled images need more), the buffers it keeps between images, and the
    /// resize's intermediate image and filter taps.
    pub decode_scratch_bytes: u64,
    /// The loader's threads (decode threads, the batcher, the readahead or fetch thread, and
    /// the normalize thread where batches are normalized one ahead of the consumer):
    /// 2 MiB each for the stack pages a thread touches and what the allocator keeps for it
    /// (free memory it has not returned to the system yet).
    pub thread_bytes: u64,
    /// One decode thread's share (part of `decode_scratch_bytes`): the most one decode may
    /// hold, its file's bytes included, without entering the large-decode gate. At least
    /// 8 MiB; for local files, the largest working set among up to 32 of the source's images
    /// whose headers are read when the budget is computed (evenly spaced over the source).
    pub decode_share_bytes: u64,
    /// Decodes larger than a thread's share, side by side: they enter the large-decode gate,
    /// which lets them run together while they hold at most this (32 MiB, or a thread's share
    /// where that is more). One larger runs alone, in the worst case's `large_image_bytes`.
    pub large_shared_bytes: u64,
    /// One decode larger than `large_shared_bytes`, running alone: `max_pixels` × 11 bytes
    /// plus one file, the most one image at `max_pixels` can take. Counted in the worst case
    /// only. Lower `max_pixels` to lower it.
    pub large_image_bytes: u64,
    /// Batches. On the host, for every dtype but `u8`, batches wait in the prefetch queue as
    /// `u8` and are normalized one batch ahead of the consumer: `prefetch + 1` `u8` batches
    /// (`prefetch - 1` in the queue, the one being filled, the one being normalized) and 3 in
    /// the output dtype (the next one, ready, the consumer's, and a spare for a consumer that
    /// keeps the previous batch while it asks for the next). Otherwise `prefetch + 3` batches in the output dtype (the queue's,
    /// the one being filled, the consumer's, the spare). Both: one more the batcher holds back
    /// for an unsharded loader that skips samples and drops the epoch's remainder. For a GPU,
    /// also `prefetch + 2` pinned staging buffers of one batch each (`u8` when the GPU
    /// normalizes).
    pub batch_bytes: u64,
    /// Encoded bytes fetched ahead of the decoders, for tar shards and object storage (0 for
    /// local files, which each decode thread reads itself): the fetch stage's byte bound, or
    /// the reorder window's worth of typical samples where that is less (the bound is the
    /// worst case's).
    pub fetch_bytes: u64,
    /// The shards open at once (0 for a source read at random): a tar or TFRecord reader
    /// keeps the sample tables (offsets, labels, names: about 96 B a sample) of the shards one
    /// shuffle block spans, a parquet reader the row groups of its cache (64 MiB at most).
    /// With `index_bytes` (a few hundred bytes a shard), the whole of what a shard source
    /// holds of its shards.
    pub open_shard_bytes: u64,
    /// The fetch stage's byte bound where it is more than `fetch_bytes` (counted in the worst
    /// case only; 0 for local files).
    pub fetch_reserve_bytes: u64,
    /// The per-sample fields ([`Field`](crate::Field)) at their byte limits, for every sample
    /// that may hold them at once: fetched, in flight to the batcher, and in every batch
    /// buffer. Counted in the worst case only: captions and metadata are typically far below
    /// their limits (64 KiB by default). 0 without fields.
    pub field_bytes: u64,
}

impl MemoryBudget {
    /// The steady budget: every part but the large-decode reserve (saturating: settings too
    /// large to count sum to `u64::MAX`).
    pub fn steady(&self) -> u64 {
        [
            self.index_bytes,
            self.in_flight_bytes,
            self.shuffle_buffer_bytes,
            self.decode_scratch_bytes,
            self.thread_bytes,
            self.large_shared_bytes,
            self.batch_bytes,
            self.fetch_bytes,
            self.open_shard_bytes,
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }

    /// The worst case: the steady budget plus the reserve for decodes larger than a thread's
    /// share, up to one image at `max_pixels`, and the fetch stage's full byte bound.
    pub fn worst_case(&self) -> u64 {
        self.steady()
            .saturating_add(self.large_image_bytes)
            .saturating_add(self.fetch_reserve_bytes)
            .saturating_add(self.field_bytes)
    }

    /// The worst case ([`worst_case`](Self::worst_case)): the number `build()` checks against
    /// [`host_memory_limit`](crate::LoaderBuilder::host_memory_limit).
    pub fn total(&self) -> u64 {
        self.worst_case()
    }

    pub(crate) fn compute(cfg: &Config, source: &Source) -> MemoryBudget {
        // Saturating throughout: a shuffle buffer of 2^62 samples must fail the memory check,
        // not wrap around to a few kilobytes and pass it.
        let sample = cfg.output.sample_len() as u64;
        let threads = cfg.tuning.max_threads() as u64;
        let n = source.len() as u64;
        let batch = cfg.output.batch_bytes();
        let share = crate::decode::typical_working_set(source, &cfg.decode, &cfg.geometry())
            .max(SMALL_DECODE_BYTES);
        // The fetch stage holds at most the reorder window's samples (its channel and the
        // window bound them) and at most its byte bound: typically the window's worth of
        // average samples (with half again for the spread of sizes), the bound at worst.
        // (And the reader's tables of the shards of one shuffle block, or a parquet reader's
        // row groups: held whatever the samples' sizes.)
        let reader = source.backing.reader_bytes(cfg.shuffle.block());
        let fetch_bound = source.backing.byte_bound().unwrap_or(0);
        let fetch_typical = match source.mean_sample_bytes() {
            Some(mean) => ((cfg.tuning.reorder_window() as u64).saturating_add(threads))
                .saturating_mul(mean.saturating_add(mean / 2))
                .min(fetch_bound),
            None => fetch_bound,
        };
        // The epoch's order is computed per position: a source read as streams holds a table
        // of its streams (16 bytes each, twice while the next epoch's is made), nothing per
        // sample.
        let order = source
            .backing
            .streams()
            .map_or(0, |s| (s.len() as u64 + 1).saturating_mul(32));
        MemoryBudget {
            // The source's index, and with a strict cropping transform the digests of the
            // files read to their end (decode/verified.rs).
            index_bytes: source
                .heap_bytes()
                .saturating_add(if cfg.verifies_crops() {
                    crate::decode::VerifiedFiles::bytes(n)
                } else {
                    0
                })
                // A cache that fills: a bit a record of what is present, and the presence
                // map read 64 KiB at a time.
                .saturating_add(cfg.cache.index_bytes(n)),
            in_flight_bytes: ((cfg.tuning.reorder_window() as u64)
                .saturating_add(if cfg.batcher_writes_through() {
                    0
                } else {
                    cfg.output.batch_size as u64
                })
                .saturating_add(2))
            .saturating_mul(sample),
            shuffle_buffer_bytes: order,
            decode_scratch_bytes: threads.saturating_mul(crate::decode::thread_bytes(
                share,
                sample,
                cfg.cache_base_side(),
            )),
            thread_bytes: threads
                .saturating_add(2 + u64::from(cfg.defers_normalize()))
                .saturating_mul(THREAD_BYTES),
            decode_share_bytes: share,
            large_shared_bytes: share.max(LARGE_SHARED_BYTES),
            large_image_bytes: cfg.decode.large_image_bytes(),
            batch_bytes: {
                let (u8_batches, batches) = cfg.host_batches();
                (u8_batches as u64)
                    .saturating_mul(cfg.output.u8_batch_bytes())
                    .saturating_add((batches as u64).saturating_mul(batch))
                    .saturating_add(pinned_bytes(cfg))
            },
            fetch_bytes: fetch_typical,
            open_shard_bytes: reader,
            field_bytes: {
                let (u8_batches, batches) = cfg.host_batches();
                let in_batches =
                    ((u8_batches + batches) as u64).saturating_mul(cfg.output.batch_size as u64);
                // Fetched, in flight, held by the batcher for a stand-in, and in batches.
                let slots = (cfg.tuning.reorder_window() as u64)
                    .saturating_mul(2)
                    .saturating_add(4)
                    .saturating_add(in_batches);
                slots.saturating_mul(cfg.field_specs().bytes_per_sample())
            },
            fetch_reserve_bytes: fetch_bound - fetch_typical,
        }
    }
}

/// Stack and allocator memory a loader thread is counted for (`thread_bytes`).
const THREAD_BYTES: u64 = 2 << 20;

/// Pinned host staging of a device loader (0 on the host).
fn pinned_bytes(cfg: &Config) -> u64 {
    match cfg.device.device {
        Device::Host => 0,
        Device::Cuda(_) => (cfg.device_slots() * cfg.staged_batch_bytes()) as u64,
    }
}

impl fmt::Display for MemoryBudget {
    /// `steady 149.4 MB (batches 73.7 + ...), worst case 1517.8 MB (+ one large decode 1368.4)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "steady {:.1} MB (batches {:.1} + order {:.1} + in-flight samples {:.1} + decode scratch {:.1} + threads {:.1} + large decodes side by side {:.1} + index {:.1}",
            mb(self.steady()),
            mb(self.batch_bytes),
            mb(self.shuffle_buffer_bytes),
            mb(self.in_flight_bytes),
            mb(self.decode_scratch_bytes),
            mb(self.thread_bytes),
            mb(self.large_shared_bytes),
            mb(self.index_bytes)
        )?;
        if self.fetch_bytes > 0 {
            write!(f, " + fetched bytes {:.1}", mb(self.fetch_bytes))?;
        }
        if self.open_shard_bytes > 0 {
            write!(f, " + open shards {:.1}", mb(self.open_shard_bytes))?;
        }
        write!(
            f,
            "), worst case {:.1} MB (+ one large decode {:.1}",
            mb(self.worst_case()),
            mb(self.large_image_bytes)
        )?;
        if self.fetch_reserve_bytes > 0 {
            write!(f, " + fetch bound {:.1}", mb(self.fetch_reserve_bytes))?;
        }
        if self.field_bytes > 0 {
            write!(f, " + fields at their limits {:.1}", mb(self.field_bytes))?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use crate::{LoaderBuilder, Source};

    fn source() -> Source {
        Source::from_entries([("a.jpg", 0), ("b.jpg", 1)]).unwrap()
    }

    #[test]
    fn steady_and_worst_case() {
        let b = LoaderBuilder::new(source()).memory_budget();
        assert_eq!(b.total(), b.worst_case());
        assert_eq!(
            b.worst_case() - b.steady(),
            b.large_image_bytes + b.fetch_reserve_bytes
        );
        // The reserve for one image at the default 100 megapixels is in the worst case only.
        assert!(b.steady() < 400_000_000, "{b}");
        assert!(b.worst_case() > 1_000_000_000, "{b}");
        // Unreadable files leave the decode share at its floor.
        assert_eq!(b.decode_share_bytes, crate::decode::SMALL_DECODE_BYTES);
        // host_memory_limit guards the worst case.
        let limited = |bytes| {
            LoaderBuilder::new(source())
                .host_memory_limit(bytes)
                .build()
        };
        assert!(limited(b.steady()).is_err());
        assert!(limited(b.worst_case()).is_ok());
        let text = b.to_string();
        assert!(
            text.starts_with("steady ") && text.contains("worst case"),
            "{text}"
        );
    }

    #[cfg(all(feature = "unstable-tools", feature = "turbojpeg"))]
    #[test]
    fn a_source_of_large_photos_raises_the_decode_share() {
        let dir = tempfile::tempdir().unwrap();
        let corpus =
            imagefeed_testkit::corpus::generate_sized(dir.path(), 4, 1, Some((3000, 3000)))
                .unwrap();
        let photos = Source::from_list_file(&corpus.list).unwrap();
        // Decoded whole, a 3000-pixel photo needs far more than the floor a thread's share
        // starts at.
        let small = LoaderBuilder::new(source())
            .dct_scaling(false)
            .memory_budget();
        let large = LoaderBuilder::new(photos.clone())
            .dct_scaling(false)
            .memory_budget();
        assert_eq!(small.decode_share_bytes, crate::decode::SMALL_DECODE_BYTES);
        assert!(
            large.decode_share_bytes > small.decode_share_bytes,
            "{} <= {}",
            large.decode_share_bytes,
            small.decode_share_bytes
        );
        assert!(
            large.decode_share_bytes >= 3000 * 2000 * 3,
            "{}",
            large.decode_share_bytes
        );
        // DCT-scaled (the default) to 1/8 for 160x160, the same photos stay within the floor.
        let scaled = LoaderBuilder::new(photos).memory_budget();
        assert_eq!(scaled.decode_share_bytes, crate::decode::SMALL_DECODE_BYTES);
        assert_eq!(
            large.worst_case() - large.steady(),
            small.worst_case() - small.steady()
        );
    }
}
