//! [`Config`]: every setting of a loader as plain data, with its default, and the enums of
//! the settings that are not numbers. The builder fills it in; every stage reads it.

use std::path::PathBuf;

use crate::batch::{Dtype, Layout};
use crate::decode::{DecodeSettings, JpegDecoder};
use crate::error::OnError;
use crate::transform::{Geometry, ResizeFilter, Transform};

/// Reorder-window positions per decode thread. Decode times vary more than tenfold within a
/// corpus (~7 ms for a photo large enough for 1/8 scale, ~0.3 ms for one too small to scale),
/// and the window only moves on when its oldest sample is done, so a small window leaves
/// threads waiting behind one slow image. Measured with `imagefeed bench` on 5,000
/// ImageNet-sized JPEGs (16-core Xeon, medians of 4 runs): 8 per thread gave 7,280 images/s at
/// 16 threads and 4,560 at 8 (decode threads waiting 27-31% and 16-17% of their time); 32
/// gives 9,940 and 5,860 (3-8% and under 1%) for 2.5 MB more memory per thread (32 samples of
/// 160x160 RGB, 77 kB each, kept as `u8` until the batcher).
const WINDOW_PER_THREAD: usize = 32;
/// Files hinted ahead by default. Enough to keep the disk busy under two decode threads (a
/// first epoch on 5,000 photo crops not in the page cache: see `pipeline/readahead.rs`), and
/// few enough that the hinted files are a few megabytes of page cache.
const DEFAULT_READAHEAD: usize = 64;

/// Where batches are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Device {
    /// Host memory. The default.
    #[default]
    Host,
    /// GPU `n`, through pinned host staging and asynchronous copies. Needs the `cuda` feature.
    Cuda(usize),
}

/// What to do when the cache exists but does not match the loader, or a record fails its
/// checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CachePolicy {
    /// A corrupt record is an error naming the cache file and the record. The default.
    #[default]
    Fail,
    /// A corrupt record makes the loader delete the cache; it is rebuilt by the next epoch.
    Rebuild,
}

/// How a sharded loader makes every rank's share the same size when the source does not
/// divide evenly by the world size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShardPadding {
    /// Ranks take disjoint samples whose union is the whole source (`floor` or `ceil` of
    /// `n / world_size` each); only when that would give ranks different batch counts does a
    /// short rank repeat one sample from the start of the epoch's permutation. The default.
    #[default]
    EqualBatches,
    /// Repeat samples from the start of the epoch's permutation so that every rank gets
    /// `ceil(n / world_size)` samples (PyTorch's `DistributedSampler` default).
    Repeat,
    /// Drop the tail so that every rank gets `floor(n / world_size)` samples.
    Drop,
}

/// All settings of a loader. Defaults live in `Default`.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) batch_size: usize,
    pub(crate) height: u32,
    pub(crate) width: u32,
    pub(crate) transform: Transform,
    /// The flip probability the user set (`None`: 0.5 with a random transform, else 0).
    pub(crate) flip: Option<f64>,
    pub(crate) resize_filter: ResizeFilter,
    pub(crate) dtype: Dtype,
    pub(crate) layout: Layout,
    pub(crate) mean: [f32; 3],
    pub(crate) std: [f32; 3],
    pub(crate) shuffle: bool,
    pub(crate) shuffle_buffer: usize,
    /// The source is read in order (tar shards): the shuffle buffer holds decoded samples.
    /// Otherwise it shuffles sample indices before decoding.
    pub(crate) sequential_source: bool,
    /// Samples in the source (`usize::MAX` where a test builds a `Config` without one).
    pub(crate) source_len: usize,
    pub(crate) seed: u64,
    pub(crate) decode_threads: usize,
    pub(crate) autotune: bool,
    pub(crate) prefetch: usize,
    pub(crate) readahead: usize,
    pub(crate) drop_remainder: bool,
    pub(crate) on_error: OnError,
    pub(crate) max_pixels: u64,
    pub(crate) apply_exif: bool,
    pub(crate) check_extension: bool,
    pub(crate) dct_scaling: bool,
    pub(crate) accept_jpeg_warnings: bool,
    pub(crate) jpeg_decoder: JpegDecoder,
    pub(crate) host_memory_limit: Option<u64>,
    pub(crate) cache: Option<PathBuf>,
    /// The longest side of a random transform's cached base image (`None`: twice the
    /// output's longer side).
    pub(crate) cache_max_side: Option<u32>,
    pub(crate) cache_policy: CachePolicy,
    pub(crate) device: Device,
    pub(crate) fallback_to_host: bool,
    pub(crate) gpu_memory_limit: Option<u64>,
    pub(crate) gpu_normalize: bool,
    /// The stream a CUDA loader queues its copies and kernel on (`None`: one of its own).
    #[cfg(feature = "cuda")]
    pub(crate) cuda_stream: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
    pub(crate) simulate_device: bool,
    pub(crate) panic_on_index: Option<u64>,
    pub(crate) cache_free_space_override: Option<u64>,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) shard_padding: ShardPadding,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batch_size: 64,
            height: 160,
            width: 160,
            transform: Transform::Stretch,
            flip: None,
            resize_filter: ResizeFilter::Antialiased,
            dtype: Dtype::F32,
            layout: Layout::Nhwc,
            mean: [0.0; 3],
            std: [1.0; 3],
            shuffle: true,
            shuffle_buffer: 0,
            sequential_source: false,
            source_len: usize::MAX,
            seed: 0,
            decode_threads: 0,
            autotune: false,
            prefetch: 2,
            readahead: DEFAULT_READAHEAD,
            drop_remainder: false,
            on_error: OnError::Fail,
            max_pixels: 100_000_000,
            apply_exif: true,
            check_extension: true,
            dct_scaling: true,
            accept_jpeg_warnings: false,
            jpeg_decoder: JpegDecoder::Auto,
            host_memory_limit: None,
            cache: None,
            cache_max_side: None,
            cache_policy: CachePolicy::Fail,
            device: Device::Host,
            fallback_to_host: false,
            gpu_memory_limit: None,
            gpu_normalize: true,
            #[cfg(feature = "cuda")]
            cuda_stream: None,
            simulate_device: false,
            panic_on_index: None,
            cache_free_space_override: None,
            rank: 0,
            world_size: 1,
            shard_padding: ShardPadding::EqualBatches,
        }
    }
}

impl Config {
    pub(crate) fn geometry(&self) -> Geometry {
        Geometry {
            width: self.width,
            height: self.height,
            transform: self.transform,
            filter: self.resize_filter,
            flip: self.flip_probability(),
        }
    }
    /// With a cache and a random transform, the side of the base images the cache records.
    pub(crate) fn cache_base_side(&self) -> Option<u32> {
        (self.cache.is_some() && self.transform.is_random()).then(|| {
            self.cache_max_side
                .unwrap_or_else(|| self.width.max(self.height).saturating_mul(2))
        })
    }
    /// Whether strict cropped decodes remember the files they read to their end cleanly
    /// (`decode/verified.rs`, 4 bytes a sample in the index's budget): a cropping transform,
    /// decoded by the patched libjpeg-turbo (the stock one decodes a strict crop's whole
    /// frame), strict, without a cache (whose records spare later epochs the decode).
    pub(crate) fn verifies_crops(&self) -> bool {
        self.transform.crops()
            && self.cache.is_none()
            && !self.accept_jpeg_warnings
            && self.jpeg_decoder != JpegDecoder::Zune
            && crate::decode::decoder_info().patched
    }
    /// The probability of mirroring a sample.
    pub(crate) fn flip_probability(&self) -> f64 {
        self.flip
            .unwrap_or(if self.transform.is_random() { 0.5 } else { 0.0 })
    }
    pub(crate) fn decode_settings(&self) -> DecodeSettings {
        DecodeSettings {
            max_pixels: self.max_pixels,
            apply_exif: self.apply_exif,
            check_extension: self.check_extension,
            dct_scaling: self.dct_scaling,
            accept_jpeg_warnings: self.accept_jpeg_warnings,
            jpeg_decoder: self.jpeg_decoder,
            planes: true,
        }
    }
    /// The deepest prefetch queue this loader may use.
    pub(crate) fn max_prefetch(&self) -> usize {
        if self.autotune {
            self.prefetch.max(crate::tune::MAX_PREFETCH)
        } else {
            self.prefetch
        }
    }
    /// The most decode threads this loader may use.
    pub(crate) fn max_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.autotune {
            self.threads().max(cores)
        } else {
            self.threads()
        }
    }
    pub(crate) fn threads(&self) -> usize {
        if self.decode_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.decode_threads
        }
    }
    /// Decoded samples the shuffle buffer holds: `shuffle_buffer` for a source read in order,
    /// 0 for the others (their buffer shuffles indices before decoding).
    ///
    /// A buffer larger than the source never fills, so it behaves as one of `len + 1` slots:
    /// that is what it is sized as (a `shuffle_buffer(usize::MAX)` must not size a channel).
    pub(crate) fn sample_shuffle_buffer(&self) -> usize {
        if self.sequential_source {
            self.shuffle_buffer.min(self.source_len.saturating_add(1))
        } else {
            0
        }
    }
    /// Samples decoded ahead of the one the batcher waits for: lets threads pass a slow image
    /// without breaking the deterministic order.
    pub(crate) fn reorder_window(&self) -> usize {
        (self.max_threads() * WINDOW_PER_THREAD).max(2 * WINDOW_PER_THREAD)
    }
    /// The shape and type of this loader's batches.
    pub(crate) fn batch_format(&self) -> BatchFormat {
        BatchFormat {
            batch_size: self.batch_size,
            height: self.height as usize,
            width: self.width as usize,
            dtype: self.dtype,
            layout: self.layout,
        }
    }
    pub(crate) fn sample_len(&self) -> usize {
        self.geometry().sample_len()
    }
    /// Elements of one batch, saturating (an absurd `batch_size` fails `build`'s checks
    /// instead of wrapping around to a small number).
    pub(crate) fn batch_elems(&self) -> usize {
        self.batch_size.saturating_mul(self.sample_len())
    }
    /// Slots of a device loader's ring: one per batch in the (deepest) prefetch queue, one
    /// being filled, one held by the consumer (see `prefetch/mod.rs`).
    pub(crate) fn device_slots(&self) -> usize {
        self.max_prefetch() + 2
    }
    /// Bytes of one pinned staging buffer: a `u8` batch when the GPU normalizes, else a batch
    /// in the output dtype.
    pub(crate) fn staged_batch_bytes(&self) -> usize {
        let u8_only = self.dtype == Dtype::U8 && self.layout == Layout::Nhwc;
        if self.gpu_normalize || u8_only {
            self.batch_elems()
        } else {
            self.batch_elems() * self.dtype.size()
        }
    }
}

/// The shape and type of the batches of a loader.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFormat {
    pub(crate) batch_size: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) dtype: Dtype,
    pub(crate) layout: Layout,
}
