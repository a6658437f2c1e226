//! [`Config`]: every setting of a loader, as one plain-data struct per stage. Each stage's
//! settings live with the stage (`batch::OutputSettings`, `transform::AugmentSettings`,
//! `decode::DecodeSettings`, `shuffle::ShuffleSettings`, `cache::CacheSettings`,
//! `prefetch::DeviceSettings`, `shard::ShardSettings`, `tune::Tuning`), check themselves and
//! say what they cost, so that a stage imports nothing above it and a new setting touches one
//! folder; this file puts them together, the builder fills them in, `build()` checks them in
//! turn and `budget.rs` adds up their memory.

use crate::batch::{Dtype, Layout, OutputSettings};
use crate::cache::{CacheSettings, MadeWith};
use crate::decode::{DecodeSettings, JpegDecoder};
use crate::error::{Error, OnError};
use crate::prefetch::DeviceSettings;
use crate::rank::ShardSettings;
use crate::shuffle::ShuffleSettings;
use crate::transform::{AugmentSettings, Geometry};
use crate::tune::Tuning;

/// All settings of a loader. Defaults live in each stage's `Default`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub(crate) output: OutputSettings,
    pub(crate) augment: AugmentSettings,
    pub(crate) decode: DecodeSettings,
    pub(crate) shuffle: ShuffleSettings,
    pub(crate) cache: CacheSettings,
    pub(crate) device: DeviceSettings,
    pub(crate) shard: ShardSettings,
    pub(crate) tuning: Tuning,
    /// Seeds every random choice: the permutation, the shuffle buffer, the transforms' draws.
    pub(crate) seed: u64,
    pub(crate) on_error: OnError,
    pub(crate) host_memory_limit: Option<u64>,
    /// A test hook: the decode thread panics on this dataset index.
    pub(crate) panic_on_index: Option<u64>,
    /// A test hook: which samples fail to read from the source, and how.
    pub(crate) failures: Option<FailureHook>,
    /// The per-sample fields asked for, in order, and the byte limit of those without one.
    pub(crate) field_list: Vec<crate::fields::Field>,
    pub(crate) field_limit: Option<usize>,
    /// `field_list` with each limit resolved (set by `build()`).
    pub(crate) fields: crate::fields::FieldSpecs,
}

/// A test hook (`LoaderBuilder::inject_failures`, behind `__testing`): for (epoch, dataset
/// index), `Some(true)` makes reading the sample from the source fail as undecodable bytes do,
/// `Some(false)` as a transient I/O error does.
#[derive(Clone)]
pub(crate) struct FailureHook(
    pub(crate) std::sync::Arc<dyn Fn(u64, u64) -> Option<bool> + Send + Sync>,
);

impl std::fmt::Debug for FailureHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureHook")
    }
}

impl Config {
    /// Checks every stage's settings, in the order a user reads them, for a source of `len`
    /// samples.
    pub(crate) fn validate(&self, len: usize) -> Result<(), Error> {
        self.output.validate()?;
        self.augment.validate()?;
        self.cache.validate()?;
        if self.cache.max_side.is_some() && self.cache_base_side().is_none() {
            // Not an error: a training script may set it for every loader it builds.
            log::warn!(
                "cache_max_side has no effect without a cache and a random transform \
                 (this loader: cache {}, transform {})",
                if self.cache.path.is_some() {
                    "on"
                } else {
                    "off"
                },
                self.augment.transform.name()
            );
        }
        self.tuning.validate()?;
        self.shard.validate(len)?;
        self.field_specs().validate()?;
        self.decode.validate()?;
        Ok(())
    }

    /// The fields asked for, each with its byte limit.
    pub(crate) fn field_specs(&self) -> crate::fields::FieldSpecs {
        crate::fields::FieldSpecs::new(
            &self.field_list,
            self.field_limit
                .unwrap_or(crate::fields::DEFAULT_FIELD_LIMIT),
        )
    }

    /// Batch buffers the batcher may hold beyond the one it fills: one where an unsharded
    /// loader that skips samples drops the epoch's remainder (it holds a full batch until the
    /// next one fills, to know which is the epoch's last; `pipeline/batch_loop.rs`).
    pub(crate) fn held_batches(&self) -> usize {
        usize::from(
            self.shard.world_size <= 1
                && matches!(self.on_error, OnError::Skip { .. })
                && self.output.drop_remainder,
        )
    }

    /// What the resize produces.
    pub(crate) fn geometry(&self) -> Geometry {
        self.augment.geometry(self.output.height, self.output.width)
    }

    /// With a cache and a random transform, the side of the base images the cache records.
    pub(crate) fn cache_base_side(&self) -> Option<u32> {
        (self.cache.path.is_some() && self.augment.transform.is_random()).then(|| {
            self.cache
                .max_side
                .unwrap_or_else(|| self.output.width.max(self.output.height).saturating_mul(2))
        })
    }

    /// Whether strict cropped decodes remember the files they read to their end cleanly
    /// (`decode/verified.rs`, 4 bytes a sample in the index's budget): a cropping transform,
    /// decoded by the patched libjpeg-turbo (the stock one decodes a strict crop's whole
    /// frame), strict, without a cache (whose records spare later epochs the decode).
    pub(crate) fn verifies_crops(&self) -> bool {
        self.augment.transform.crops()
            && self.cache.path.is_none()
            && !self.decode.accept_jpeg_warnings
            && self.decode.jpeg_decoder != JpegDecoder::Zune
            && crate::decode::decoder_info().patched
    }

    /// What the cache's samples are made with (its header).
    pub(crate) fn cache_made_with(&self) -> MadeWith {
        let (height, width) = match self.cache_base_side() {
            Some(side) => (side, side),
            None => (self.output.height, self.output.width),
        };
        MadeWith {
            height,
            width,
            transform_key: self.augment.transform.cache_key(),
            apply_exif: self.decode.apply_exif,
            dct_scaling: self.decode.dct_scaling,
            decoder: self.decode.jpeg_decoder as u8,
            check_extension: self.decode.check_extension,
            accept_jpeg_warnings: self.decode.accept_jpeg_warnings,
            filter: self.augment.filter as u8,
            max_pixels: self.decode.max_pixels,
        }
    }

    /// Whether a host loader's batches wait in the prefetch queue as `u8` and are normalized
    /// one batch ahead of the consumer (every dtype but `u8`; `pipeline/normalize_loop.rs`).
    pub(crate) fn defers_normalize(&self) -> bool {
        self.device.device == crate::prefetch::Device::Host
            && !self.device.simulate_device
            && self.output.dtype != Dtype::U8
    }

    /// Whether the batcher copies each `u8` sample into its batch as it comes, instead of
    /// holding a batch's samples until the batch is full: host batches that are `u8` NHWC in
    /// the batcher (every dtype but `u8` NCHW).
    pub(crate) fn batcher_writes_through(&self) -> bool {
        self.device.device == crate::prefetch::Device::Host
            && !self.device.simulate_device
            && (self.output.dtype != Dtype::U8 || self.output.layout == Layout::Nhwc)
    }

    /// The host batch buffers a loader keeps, as `(u8 batches, batches in the output dtype)`.
    ///
    /// Normalizing in the batcher: `prefetch + 3` output batches (the queue's, the one being
    /// filled, the one the consumer holds, and a spare for a consumer that keeps the previous
    /// batch while it asks for the next), plus one held back (`held_batches`). Deferring the
    /// normalization, the `prefetch` batches ready ahead of the consumer are the normalized one
    /// waiting for it and `prefetch - 1` `u8` ones in the queue: `prefetch + 1` `u8` batches
    /// (the queue's, the one being filled, the one being normalized) plus the one held back,
    /// and 3 output batches (the next one, the consumer's, and the spare).
    pub(crate) fn host_batches(&self) -> (usize, usize) {
        let queue = self.tuning.max_prefetch() + self.held_batches();
        if self.defers_normalize() {
            (queue + 1, 3)
        } else {
            (0, queue + 3)
        }
    }

    /// Slots of a device loader's ring: one per batch in the (deepest) prefetch queue, one
    /// being filled, one held by the consumer (see `prefetch/mod.rs`).
    pub(crate) fn device_slots(&self) -> usize {
        self.tuning.max_prefetch() + 2
    }

    /// Bytes of one pinned staging buffer: a `u8` batch when the GPU normalizes, else a batch
    /// in the output dtype.
    pub(crate) fn staged_batch_bytes(&self) -> usize {
        let out = &self.output;
        let u8_only = out.dtype == Dtype::U8 && out.layout == Layout::Nhwc;
        if self.device.gpu_normalize || u8_only {
            out.batch_elems()
        } else {
            out.batch_elems() * out.dtype.size()
        }
    }
}
