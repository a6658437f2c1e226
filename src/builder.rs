//! [`LoaderBuilder`]: the setters of a loader's settings (the `Config` they fill in) and their
//! validation in [`LoaderBuilder::build`], which computes the memory budget and builds the loader.

use std::path::PathBuf;
use std::sync::Arc;

use crate::batch::{Dtype, Layout};
use crate::budget::MemoryBudget;
use crate::cache::Cache;
use crate::cache::CachePolicy;
use crate::config::Config;
use crate::decode::JpegDecoder;
use crate::error::{Error, OnError};
use crate::loader::Loader;
use crate::prefetch::Device;
use crate::rank::ShardPadding;
use crate::source::Source;
use crate::{ResizeFilter, ResizeMode, Transform};

/// Builds a [`Loader`]. Every setting has a documented default; [`build`](Self::build)
/// validates them all and starts no thread.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Dtype, Layout, Loader, Source};
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?)
///     .batch_size(4)
///     .image_size(96)
///     .dtype(Dtype::F16)
///     .layout(Layout::Nchw)
///     .seed(7)
///     .build()?;
/// println!("memory budget: {}", loader.memory_budget());
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Debug, Clone)]
pub struct LoaderBuilder {
    source: Source,
    pub(crate) cfg: Config,
}

// Beside the builder, so that the loader does not depend on how it is built.
impl Loader {
    /// Starts building a loader over `source`.
    pub fn builder(source: Source) -> LoaderBuilder {
        LoaderBuilder::new(source)
    }
}

impl LoaderBuilder {
    pub(crate) fn new(source: Source) -> Self {
        let mut cfg = Config::default();
        cfg.shuffle.streamed = source.backing.units().is_some();
        cfg.shuffle.default_block = source.backing.default_block();
        LoaderBuilder { source, cfg }
    }

    /// Delivers a per-sample field with each batch ([`Batch::field`](crate::Batch::field)): a
    /// caption, metadata, a target. `"txt"` for tar shards' `KEY.txt` members, a parquet
    /// column's or a TFRecord feature's name, a column of a file list's header; see
    /// [`Field`](crate::Field) for optional fields and byte limits. Call it once a field.
    ///
    /// # Errors (at `build()`)
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a field asked twice,
    /// or a source without fields (class folders, objects); a parquet column or list column
    /// that does not exist is [`ErrorKind::Source`](crate::ErrorKind::Source) naming it.
    pub fn field(mut self, field: impl Into<crate::fields::Field>) -> Self {
        self.cfg.field_list.push(field.into());
        self
    }

    /// [`field`](Self::field) for each of `fields`.
    pub fn fields<F: Into<crate::fields::Field>>(
        mut self,
        fields: impl IntoIterator<Item = F>,
    ) -> Self {
        self.cfg
            .field_list
            .extend(fields.into_iter().map(Into::into));
        self
    }

    /// The most bytes a field's value may hold, for fields without a limit of their own
    /// (default [`DEFAULT_FIELD_LIMIT`](crate::DEFAULT_FIELD_LIMIT), 64 KiB; at most 256 MiB).
    /// A larger value is an error naming the sample and the field. Memory: every field's limit
    /// for each sample in flight and in a batch, counted in
    /// [`MemoryBudget::field_bytes`](crate::MemoryBudget::field_bytes).
    pub fn field_limit(mut self, bytes: usize) -> Self {
        self.cfg.field_limit = Some(bytes);
        self
    }

    /// Images per batch (default 64). Memory: each batch is `batch_size` × height × width × 3
    /// × the dtype's size (64 × 160 × 160 × 3 × 4 B = 19.7 MB for f32). At most 2^20.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.cfg.output.batch_size = n;
        self
    }

    /// A square output size in pixels (default 160).
    pub fn image_size(mut self, size_px: u32) -> Self {
        self.cfg.output.height = size_px;
        self.cfg.output.width = size_px;
        self
    }

    /// The output height and width in pixels (default 160 × 160).
    pub fn image_size_hw(mut self, height_px: u32, width_px: u32) -> Self {
        self.cfg.output.height = height_px;
        self.cfg.output.width = width_px;
        self
    }

    /// How images are fitted to the output size: the same as [`transform`](Self::transform)
    /// with the fit's [`Transform`] (`.transform(mode.into())`), which sets crops as well.
    #[deprecated(
        since = "0.1.0",
        note = "use `transform(mode.into())`: one setting decides the box of each image"
    )]
    pub fn resize_mode(mut self, mode: ResizeMode) -> Self {
        self.cfg.augment.transform = mode.into();
        self
    }

    /// Which box of each image becomes the sample (default [`Transform::Stretch`]): the
    /// training transform [`Transform::random_resized_crop`] (a new box every epoch, drawn
    /// from the seed, the epoch and the sample's index alone), the evaluation transform
    /// [`Transform::center_crop`], or a fit. A cropping transform decodes only the box's rows
    /// and columns of a JPEG. With a cache, a random transform's boxes are cut from an image
    /// recorded at [`cache_max_side`](Self::cache_max_side).
    ///
    /// ```no_run
    /// use imagefeed::{Loader, Source, Transform};
    /// let train = Loader::builder(Source::from_dir("data/train")?)
    ///     .transform(Transform::random_resized_crop()) // flips half the images by default
    ///     .build()?;
    /// let eval = Loader::builder(Source::from_dir("data/val")?)
    ///     .transform(Transform::center_crop())
    ///     .shuffle(false)
    ///     .build()?;
    /// # Ok::<(), imagefeed::Error>(())
    /// ```
    pub fn transform(mut self, transform: Transform) -> Self {
        self.cfg.augment.transform = transform;
        self
    }

    /// The probability of mirroring each sample left to right, in `[0, 1]` (default 0.5 with a
    /// random transform, else 0). Drawn, like the crop, from the seed, the epoch and the
    /// sample's index.
    pub fn flip_horizontal(mut self, probability: f64) -> Self {
        self.cfg.augment.flip = Some(probability);
        self
    }

    /// The resampling filter (default [`ResizeFilter::Antialiased`], Pillow's; or
    /// [`ResizeFilter::Bilinear`], TensorFlow's default resize, a little cheaper).
    pub fn resize_filter(mut self, filter: ResizeFilter) -> Self {
        self.cfg.augment.filter = filter;
        self
    }

    /// The element type of batch images (default [`Dtype::F32`]). `F16`/`Bf16` halve batch
    /// memory, `U8` quarters it.
    pub fn dtype(mut self, dtype: Dtype) -> Self {
        self.cfg.output.dtype = dtype;
        self
    }

    /// The batch layout (default [`Layout::Nhwc`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.cfg.output.layout = layout;
        self
    }

    /// Per-channel (R, G, B) normalization applied after scaling to 0..1:
    /// `(x / 255 - mean) / std` (default mean 0, std 1, i.e. `x / 255`). Ignored for
    /// [`Dtype::U8`]. ImageNet's are `[0.485, 0.456, 0.406]` and `[0.229, 0.224, 0.225]`.
    pub fn normalize(mut self, mean: [f32; 3], std: [f32; 3]) -> Self {
        self.cfg.output.mean = mean;
        self.cfg.output.std = std;
        self
    }

    /// Visit samples in a new seeded order every epoch (default `true`). `false` keeps the
    /// source's order (see [`shuffle_buffer`](Self::shuffle_buffer) for a local mix of it).
    ///
    /// A source read at random (files, class folders, objects) is visited in a pseudo-random
    /// permutation of all its samples; a source read as streams (tar shards, TFRecord files,
    /// parquet row groups) has its streams in a seeded order and its samples mixed within
    /// blocks of [`shuffle_buffer`](Self::shuffle_buffer) samples. Either order is computed
    /// position by position: it costs no memory per sample, and a resume from any position is
    /// exact (docs/CONTRACT.md).
    pub fn shuffle(mut self, on: bool) -> Self {
        self.cfg.shuffle.enabled = on;
        self
    }

    /// Samples mixed at once, as tf.data's `shuffle(n)` mixes `n` (default: 4,096 for a source
    /// read as streams, and nothing more for one read at random, whose permutation already
    /// mixes everything). The order is cut in consecutive blocks of `n` samples and each block
    /// is permuted. Memory: none per sample (the order is computed); a block's shards are read
    /// at random within them.
    ///
    /// - A source read as streams (tar shards, TFRecord, parquet): the block mixes the
    ///   samples of the shards it spans (about `n / samples a shard` of them). `0` or `1` keeps
    ///   each shard's samples in their order (the shards are still shuffled): the loader logs
    ///   that, since a class-sorted shard then gives single-class batches.
    /// - A source read at random with [`shuffle(false)`](Self::shuffle): the source's order,
    ///   mixed within blocks of `n`. With `shuffle(true)` the setting changes nothing.
    pub fn shuffle_buffer(mut self, n: usize) -> Self {
        self.cfg.shuffle.buffer = Some(n);
        self
    }

    /// The seed of every random choice (default 0). Same seed and source: bit-identical
    /// batches, whatever the number of threads.
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = seed;
        self
    }

    /// Decode threads the loader owns (default 0: one per core). Memory: about 40 MB of
    /// reusable buffers each, at most. At most 1024.
    pub fn decode_threads(mut self, n: usize) -> Self {
        self.cfg.tuning.decode_threads = n;
        self
    }

    /// Adapt `decode_threads` and `prefetch` to where the time goes, every second while an
    /// epoch runs (default `false`): more threads when the consumer waits on busy decoders, a
    /// deeper queue when it waits on bursts, fewer of both when the training step is the
    /// bottleneck. The settings given are the starting point, and each epoch starts where the
    /// last one ended; threads stay within the cores (all of them start, the ones not needed
    /// wait), prefetch within 1..=8 (the memory budget assumes the most of both).
    /// [`Stats`](crate::Stats) reports the current settings; the output does not depend on
    /// them.
    pub fn autotune(mut self, on: bool) -> Self {
        self.cfg.tuning.autotune = on;
        self
    }

    /// Ready batches queued ahead of the consumer (default 2, at least 1). At most 1024.
    /// Memory: on the host, for every dtype but `u8`, the next batch waits normalized and the
    /// others as `u8` (a quarter of an `f32` batch each), normalized one at a time as the
    /// consumer takes them; otherwise one batch each in the output dtype.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.cfg.tuning.prefetch = batches;
        self
    }

    /// Samples hinted to the kernel ahead of the decode threads (default 64; 0 turns it off; at
    /// most 65,536). A thread of the loader's asks the kernel to read that many samples past the
    /// next one to decode (Linux only): their local files (`posix_fadvise(WILLNEED)`) or, in an
    /// epoch that reads a complete [`cache`](Self::cache), their records (`madvise(WILLNEED)`).
    /// Data not in the page cache is then read from disk in the background, several reads at
    /// once, instead of one at a time by a decode thread that waits for each. It matters for the
    /// first epoch after a reboot and for datasets (or caches) larger than RAM; raise it for
    /// network file systems, whose latency is higher. Memory: none of the process's; the data
    /// goes to the page cache, which the kernel can evict, at most 64 MiB of it not yet claimed
    /// by a decode thread (further files wait their turn or are read by their decode thread).
    /// Tar shards and objects are read ahead by their fetch stage instead.
    pub fn readahead(mut self, samples: usize) -> Self {
        self.cfg.tuning.readahead = samples;
        self
    }

    /// Drop the last batch of an epoch if it is smaller than `batch_size` (default `false`).
    pub fn drop_remainder(mut self, on: bool) -> Self {
        self.cfg.output.drop_remainder = on;
        self
    }

    /// What to do with a sample that cannot be loaded (default [`OnError::Fail`]).
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.cfg.on_error = policy;
        self
    }

    /// Images with more pixels are refused from their header, before any pixel buffer exists
    /// (default 100,000,000). Memory: one such image at a time, about 11 bytes a pixel.
    pub fn max_pixels(mut self, pixels: u64) -> Self {
        self.cfg.decode.max_pixels = pixels;
        self
    }

    /// Apply the EXIF orientation tag (default `true`).
    pub fn apply_exif_orientation(mut self, on: bool) -> Self {
        self.cfg.decode.apply_exif = on;
        self
    }

    /// Require `.jpg`/`.jpeg` files to hold JPEG data and `.png` files PNG data (default
    /// `true`). `false` decodes whatever a supported file holds.
    pub fn check_extension(mut self, on: bool) -> Self {
        self.cfg.decode.check_extension = on;
        self
    }

    /// Decode JPEGs at the largest DCT scale (1/2, 1/4, 1/8) that still covers the output
    /// size on both axes (default `true`; needs the `turbojpeg` feature).
    ///
    /// With it, a YCbCr or grey JPEG is also decoded to its planes as stored (chroma at its
    /// subsampled size), each plane resized to the output and the result converted to RGB:
    /// the chroma upsampling and colour conversion happen on the output's pixels rather than
    /// the decoded frame's. `false` decodes every JPEG at full size to RGB with
    /// libjpeg-turbo's own upsampling and colour conversion, as Pillow does: the reference
    /// `imagefeed floor` measures the quality cost against.
    pub fn dct_scaling(mut self, on: bool) -> Self {
        self.cfg.decode.dct_scaling = on;
        self
    }

    /// Deliver JPEGs that libjpeg-turbo decodes to the end while warning that their
    /// entropy-coded data is damaged ("Corrupt JPEG data: N extraneous bytes before marker
    /// 0xd9", "bad Huffman code", "premature end of data segment"), as Pillow and tf.data do,
    /// logging each warning with the file's name. Default `false`: such a file is an error
    /// naming the file and the warning. Real datasets hold a few of them (images padded before
    /// their end marker by some cameras and editors, which decode intact), but so does data
    /// damaged in storage, whose pixels may be partly wrong.
    ///
    /// Either way a truncated file ("Premature end of JPEG file") is an error, and warnings
    /// about metadata the decoder ignores (an unknown JFIF version, a malformed ICC profile
    /// segment) are not errors.
    ///
    /// With a cropping [`Transform`](crate::Transform), the default reads a file's data to its
    /// end (entropy decoding only, below the box) the first time the loader decodes it, so
    /// that a damaged file fails with every box and in every epoch, as its whole decode does.
    /// The loader then keeps a 32-bit digest of each file that read to its end cleanly (4 bytes
    /// a sample, counted in [`MemoryBudget::index_bytes`](crate::MemoryBudget::index_bytes)),
    /// and later epochs over the same bytes stop after the box's last row (for every scan of a
    /// progressive file too). With `true`, decoding stops there from the first epoch, the way
    /// torchvision's and DALI's crops deliver damaged files: the first epoch runs 10–14% faster,
    /// later ones alike (docs/PERFORMANCE.md, "Each file read to its end once").
    pub fn accept_jpeg_warnings(mut self, on: bool) -> Self {
        self.cfg.decode.accept_jpeg_warnings = on;
        self
    }

    /// Which JPEG decoder to use (default [`JpegDecoder::Auto`]).
    pub fn jpeg_decoder(mut self, decoder: JpegDecoder) -> Self {
        self.cfg.decode.jpeg_decoder = decoder;
        self
    }

    /// Make [`build`](Self::build) fail if the [`MemoryBudget`] exceeds `bytes`. By default
    /// the limit is the memory of the machine, or of its container's cgroup where that is
    /// lower (Linux; no limit where neither can be read): settings that could never fit fail
    /// in `build` instead of in the out-of-memory killer. Set it higher to run anyway.
    pub fn host_memory_limit(mut self, bytes: u64) -> Self {
        self.cfg.host_memory_limit = Some(bytes);
        self
    }

    /// Cache decoded, resized `u8` samples in this file (default: no cache). The first epoch
    /// that visits every sample writes it; later epochs and runs read it through the page cache
    /// instead of decoding, with the same per-epoch permutation and bit-identical batches.
    /// Disk: `len × (height × width × 3 + 24)` bytes (98 GB for ImageNet at 160 × 160); no
    /// extra heap. `build()` computes a fingerprint of the source (one `stat` per file) and
    /// fails if a new cache would not fit on its file system, or if `path` (or `path.partial`)
    /// holds anything but an imagefeed cache: the loader never replaces a file it did not
    /// write. A symbolic link is followed. See the module docs of the cache for crash safety,
    /// staleness and sharing between processes.
    pub fn cache(mut self, path: impl Into<PathBuf>) -> Self {
        self.cfg.cache.path = Some(path.into());
        self
    }

    /// With a cache and a random [`transform`](Self::transform): the longest side, in pixels,
    /// of the image the cache records for each sample (default twice the output's longer
    /// side: 320 for 160). Each epoch cuts its own random box from that image, so cached
    /// epochs stay random; a small box is then cut from fewer pixels than a decode would
    /// give it (a box of 8% of the area holds about 90×90 of a 320-pixel image), and each
    /// record takes `side × side × 3` bytes on disk. Larger sides keep more detail for small
    /// boxes and cost disk and page cache. Without a cache, or with a transform that is not
    /// random, it has no effect (`build()` logs a warning).
    pub fn cache_max_side(mut self, side_px: u32) -> Self {
        self.cfg.cache.max_side = Some(side_px);
        self
    }

    /// What to do with a corrupt cache record (default [`CachePolicy::Fail`]).
    pub fn cache_policy(mut self, policy: CachePolicy) -> Self {
        self.cfg.cache.policy = policy;
        self
    }

    /// Where batches are delivered (default [`Device::Host`]).
    pub fn device(mut self, device: Device) -> Self {
        self.cfg.device.device = device;
        self
    }

    /// With a [`Device::Cuda`] that cannot be used, log one warning and deliver host batches
    /// instead of failing in `build` (default `false`).
    pub fn fallback_to_host(mut self, on: bool) -> Self {
        self.cfg.device.fallback_to_host = on;
        self
    }

    /// A hard cap, in bytes, on the device memory of a [`Device::Cuda`] loader's own buffers
    /// (default: none). The loader holds `prefetch + 2` slots of one `u8` batch plus one output
    /// batch each (4 × 24.6 MB = 98 MB for 64 f32 images of 160 × 160 and the default
    /// `prefetch`). Without a cap, slots are allocated as the pipeline needs them; with one, all
    /// are allocated in `build`, which fails if they exceed the cap. Either way `build` fails
    /// if they exceed the device's free memory. Ignored on the host.
    pub fn gpu_memory_limit(mut self, bytes: u64) -> Self {
        self.cfg.device.gpu_memory_limit = Some(bytes);
        self
    }

    /// With [`Device::Cuda`], copy `u8` batches and normalize them on the GPU (default
    /// `true`): a quarter of f32's bytes across PCIe and no normalization on the CPU. `false`
    /// normalizes on the host and copies the output dtype. Results match within rounding
    /// (f32: bit-identical). Ignored on the host.
    pub fn gpu_normalize(mut self, on: bool) -> Self {
        self.cfg.device.gpu_normalize = on;
        self
    }

    /// With [`Device::Cuda`], queue the batches' copies and normalization on `stream` (a
    /// stream of the same device, for example a training framework's: candle's
    /// `CudaDevice::cuda_stream()`) instead of a stream of the loader's own (the default).
    ///
    /// On a stream of its own the loader's copies overlap the training step's kernels, and a
    /// consumer's stream waits on each batch's ready event (GPU-side; [`CudaBatch::wait_on`],
    /// which [`Batch::into_cuda`](crate::Batch::into_cuda) and `Batch::into_candle` do). On the training stream
    /// nothing needs to wait (the stream's order is the synchronization) but the copies queue
    /// behind the step's work instead of overlapping it. `build` fails if the stream belongs
    /// to another device. Ignored on the host.
    ///
    /// [`CudaBatch::wait_on`]: crate::CudaBatch::wait_on
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn cuda_stream(mut self, stream: std::sync::Arc<cudarc::driver::CudaStream>) -> Self {
        self.cfg.device.cuda_stream = Some(stream);
        self
    }

    /// Read only this rank's share of every epoch (default: rank 0 of 1). Each epoch, all ranks
    /// take disjoint parts of the same seeded permutation (give every rank the same seed), their
    /// union is the whole source, and every rank delivers the same number of samples and
    /// batches ([`shard_padding`](Self::shard_padding)); a skipped sample is replaced by a copy
    /// of a good one so that counts stay equal (see [`Stats::padded`](crate::Stats::padded)).
    pub fn shard(mut self, rank: usize, world_size: usize) -> Self {
        self.cfg.shard.rank = rank;
        self.cfg.shard.world_size = world_size;
        self
    }

    /// [`shard`](Self::shard) with the rank and world size that the process's launcher set:
    /// torchrun, Open MPI's `mpirun`, MPICH or Intel MPI (PMI), or Slurm's `srun`, read in the
    /// order [`Launch::from_vars`](crate::Launch::from_vars) documents (rank 0 of 1 when none is
    /// set). [`Launch::from_env`](crate::Launch::from_env) gives the same rank and the local
    /// rank, to pick the process's GPU.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variables: a
    /// rank without its world size, a value that is not a number, or two launchers' variables
    /// that disagree.
    pub fn shard_from_env(self) -> Result<Self, Error> {
        let launch = crate::Launch::from_env()?;
        Ok(self.shard(launch.rank, launch.world_size))
    }

    /// How ranks get equal batch counts when the source does not divide evenly (default
    /// [`ShardPadding::EqualBatches`]).
    pub fn shard_padding(mut self, padding: ShardPadding) -> Self {
        self.cfg.shard.padding = padding;
        self
    }

    /// The memory budget of the current settings.
    pub fn memory_budget(&self) -> MemoryBudget {
        MemoryBudget::compute(&self.cfg, &self.source)
    }

    /// Validates the settings and builds the loader. Starts no thread.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the setting, for a
    /// zero batch size or image size, a zero or non-finite `std` (or a `mean`/`std` mapping
    /// pixels outside the dtype's finite range), a zero `prefetch` or `max_pixels`, a
    /// `batch_size` over 2^20, a `prefetch` or `decode_threads` over 1024, or a memory budget
    /// over [`host_memory_limit`](Self::host_memory_limit);
    /// [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled) or
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) for a device that cannot be used.
    pub fn build(mut self) -> Result<Loader, Error> {
        self.cfg.fields = self.cfg.field_specs();
        let cfg = &self.cfg;
        cfg.validate(self.source.epoch_len())?;
        self.source.check_fields(&cfg.fields)?;
        if cfg.shuffle.streamed && cfg.shuffle.block() <= 1 {
            log::info!(
                "the samples of each {} are delivered in their stored order ({}): a shard sorted by class gives batches of one class; shuffle_buffer(n) mixes n samples at a time",
                match self.source.kind() {
                    crate::SourceKind::Parquet => "parquet row group",
                    crate::SourceKind::TfRecord => "TFRecord file",
                    _ => "tar shard",
                },
                if cfg.shuffle.enabled {
                    "shuffle_buffer(0 or 1); the shards themselves are shuffled"
                } else {
                    "shuffle(false)"
                }
            );
        }
        if let (Some(units), true) = (self.source.backing.units(), cfg.shuffle.enabled) {
            if let Some(why) =
                crate::shuffle::sorted_by_class(units, cfg.shuffle.block(), cfg.output.batch_size)
            {
                log::warn!("{}: {why}", self.source.index.origin.display());
            }
        }
        let budget = MemoryBudget::compute(cfg, &self.source);
        // Without a limit of the user's, the machine's (or container's) memory is the limit:
        // settings that could never fit fail here, not in the out-of-memory killer.
        let limit = match cfg.host_memory_limit {
            Some(l) => Some((l, format!("the limit is {:.1} MB", l as f64 / 1e6), "")),
            None => crate::memory_limit::memory_limit_bytes().map(|m| {
                (
                    m,
                    format!("this machine has {:.1} MB of memory", m as f64 / 1e6),
                    ", or set `host_memory_limit` to run anyway",
                )
            }),
        };
        if let Some((limit, what, hint)) = limit {
            if budget.total() > limit {
                return Err(Error::config(
                    "host_memory_limit",
                    format!(
                        "the settings need up to {:.1} MB but {what}; {}{hint}. Budget: {budget}",
                        budget.total() as f64 / 1e6,
                        settings_that_fit(cfg, &self.source, limit)
                    ),
                ));
            }
        }
        let staging = crate::prefetch::Staging::open(&cfg.device, &cfg.output, cfg.device_slots())?;
        let cache = match &cfg.cache.path {
            Some(path) => Some(Arc::new(Cache::new(
                path,
                &cfg.cache,
                &cfg.cache_made_with(),
                &self.source,
            )?)),
            None => None,
        };
        Ok(Loader::new(
            Arc::new(self.source),
            Arc::new(self.cfg),
            budget,
            staging,
            cache,
        ))
    }
}

/// Settings that would fit the budget under `limit`, with values: each alone where one does
/// (the value nearest the user's), else the fewest changes together, else what the smallest
/// settings still need. Setting names are written `like_this` (the command line swaps in its
/// flags).
fn settings_that_fit(cfg: &Config, source: &Source, limit: u64) -> String {
    type Set = fn(&mut Config, u64);
    let fits = |c: &Config| MemoryBudget::compute(c, source).total() <= limit;
    // (name, current value, smallest value, how to set it); each lowers the budget as it falls.
    let mut knobs: Vec<(&str, u64, u64, Set)> = vec![
        (
            "max_pixels",
            cfg.decode.max_pixels,
            1_000_000.min(cfg.decode.max_pixels),
            |c, v| c.decode.max_pixels = v,
        ),
        ("batch_size", cfg.output.batch_size as u64, 1, |c, v| {
            c.output.batch_size = v as usize
        }),
        ("prefetch", cfg.tuning.prefetch as u64, 1, |c, v| {
            c.tuning.prefetch = v as usize
        }),
    ];
    if !cfg.tuning.autotune {
        knobs.push(("decode_threads", cfg.tuning.threads() as u64, 1, |c, v| {
            c.tuning.decode_threads = v as usize
        }));
    }
    // The largest value in lo..=hi that fits, with `base` otherwise as it is.
    let best = |base: &Config, set: Set, lo: u64, hi: u64| -> Option<u64> {
        let at = |v: u64| {
            let mut c = base.clone();
            set(&mut c, v);
            fits(&c)
        };
        if !at(lo) {
            return None;
        }
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if at(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    };
    let round = |name: &str, v: u64| {
        if name == "max_pixels" && v >= 1_000_000 {
            v / 100_000 * 100_000 // a round figure, still under the limit
        } else {
            v
        }
    };
    let mut alone = Vec::new();
    for &(name, now, lo, set) in &knobs {
        if now > lo {
            if let Some(v) = best(cfg, set, lo, now - 1) {
                alone.push(format!("`{name}` {}", round(name, v)));
            }
        }
    }
    if cfg.output.dtype == crate::Dtype::F32 {
        let mut c = cfg.clone();
        c.output.dtype = crate::Dtype::U8;
        if fits(&c) {
            alone.push("`dtype` u8 (or f16, bf16)".into());
        }
    }
    if !alone.is_empty() {
        return format!("any one of these fits: {}", alone.join("; "));
    }
    // Together: batch_size kept nearest the user's, then max_pixels, decode_threads and
    // prefetch, each as high as the ones after it at their smallest allow.
    let rank = |name: &str| {
        ["batch_size", "max_pixels", "decode_threads", "prefetch"]
            .iter()
            .position(|n| *n == name)
    };
    knobs.sort_by_key(|k| rank(k.0));
    let mut c = cfg.clone();
    let mut together = Vec::new();
    for (k, &(name, now, lo, set)) in knobs.iter().enumerate() {
        let mut rest = c.clone();
        for &(_, _, lo, set) in &knobs[k + 1..] {
            set(&mut rest, lo);
        }
        let v = best(&rest, set, lo, now).unwrap_or(lo);
        set(&mut c, v);
        if v != now {
            together.push(format!("`{name}` {}", round(name, v)));
        }
        if fits(&c) {
            return format!("these fit together: {}", together.join(", "));
        }
    }
    format!(
        "even {} need {:.1} MB: raise the limit",
        together.join(", "),
        MemoryBudget::compute(&c, source).total() as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::format::MAX_BATCH_SIZE;
    use crate::tune::{MAX_DECODE_THREADS, MAX_PREFETCH_SETTING};

    fn source() -> Source {
        Source::from_entries([("a.jpg", 0u32), ("b.jpg", 1)]).unwrap()
    }

    #[test]
    fn defaults_match_the_docs() {
        let c = Config::default();
        assert_eq!(
            (
                c.output.batch_size,
                c.output.height,
                c.output.width,
                c.tuning.prefetch
            ),
            (64, 160, 160, 2)
        );
        assert_eq!(c.decode.max_pixels, 100_000_000);
        assert_eq!(c.on_error, OnError::Fail);
    }

    #[test]
    fn invalid_settings_name_the_setting() {
        let e = LoaderBuilder::new(source())
            .batch_size(0)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("batch_size"), "{e}");
        let e = LoaderBuilder::new(source())
            .image_size(0)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("image_size"), "{e}");
        let e = LoaderBuilder::new(source())
            .normalize([0.0; 3], [0.0, 1.0, 1.0])
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("normalize"), "{e}");
        let e = LoaderBuilder::new(source())
            .prefetch(0)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("prefetch"), "{e}");
    }

    /// Settings whose sizes a memory limit of `u64::MAX` would let through still fail in
    /// `build`: they aborted the process allocating channels (`prefetch(1 << 40)`: 132 TB;
    /// `batch_size(240191980126428)`, whose bytes wrapped to 0), or hung starting 2^59
    /// threads, or made every pixel infinite (`std` 1e-45).
    #[test]
    fn absurd_settings_fail_in_build_even_without_a_memory_limit() {
        let build = |f: fn(LoaderBuilder) -> LoaderBuilder| {
            f(LoaderBuilder::new(source()).host_memory_limit(u64::MAX))
                .build()
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        type Edit = fn(LoaderBuilder) -> LoaderBuilder;
        let cases: [(Edit, &str); 7] = [
            (|b| b.batch_size(240_191_980_126_428), "batch_size"),
            (|b| b.batch_size(MAX_BATCH_SIZE + 1), "batch_size"),
            (|b| b.prefetch(1 << 40), "prefetch"),
            (|b| b.decode_threads(1 << 59), "decode_threads"),
            (|b| b.normalize([0.0; 3], [1e-45; 3]), "normalize"),
            (|b| b.normalize([0.0; 3], [1e-39, 1.0, 1.0]), "channel 0"),
            (
                |b| b.normalize([0.0; 3], [1e-5; 3]).dtype(crate::Dtype::F16),
                "f16",
            ),
        ];
        for (f, want) in cases {
            let e = build(f).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        // At the caps, and with a std that f32 holds but f16 does not, it builds.
        build(|b| b.batch_size(MAX_BATCH_SIZE).dtype(crate::Dtype::U8)).unwrap();
        build(|b| {
            b.prefetch(MAX_PREFETCH_SETTING)
                .decode_threads(MAX_DECODE_THREADS)
        })
        .unwrap();
        build(|b| b.normalize([0.0; 3], [1e-5; 3])).unwrap();
        build(|b| {
            b.normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
                .dtype(crate::Dtype::F16)
        })
        .unwrap();
    }

    #[test]
    fn budgets_of_absurd_settings_saturate_instead_of_wrapping() {
        // 240191980126427 samples x 76,800 bytes wrapped to 41,984 bytes and passed the
        // memory check; the tar loader then asked for 7.7 PB.
        let mut cfg = Config::default();
        cfg.output.batch_size = 240_191_980_126_427;
        let b = MemoryBudget::compute(&cfg, &source());
        assert_eq!(b.total(), u64::MAX);
        // A shuffle block of any size holds no sample.
        let mut cfg = Config::default();
        cfg.shuffle.buffer = Some(usize::MAX);
        let b = MemoryBudget::compute(&cfg, &source());
        assert_eq!(b.shuffle_buffer_bytes, 0);
        assert!(b.total() < u64::MAX);
    }

    /// The value the advice of a memory-limit error gives setting `name`.
    fn value_in(e: &str, name: &str) -> Option<u64> {
        let at = e.find(&format!("`{name}` "))? + name.len() + 3;
        e[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    }

    #[test]
    fn memory_limit_names_what_to_lower() {
        let e = LoaderBuilder::new(source())
            .host_memory_limit(10_000_000)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("max_pixels"), "{e}");
        // Each setting named fits: the advice can be followed as written.
        let budget = LoaderBuilder::new(source()).batch_size(256).memory_budget();
        let limit = budget.total() - budget.large_image_bytes / 2;
        let e = LoaderBuilder::new(source())
            .batch_size(256)
            .host_memory_limit(limit)
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("any one of these fits: `max_pixels` "), "{e}");
        let mp = value_in(&e, "max_pixels").unwrap();
        assert!(LoaderBuilder::new(source())
            .batch_size(256)
            .max_pixels(mp)
            .host_memory_limit(limit)
            .build()
            .is_ok());
        // Under the steady budget no max_pixels fits: settings together, which fit.
        let steady = LoaderBuilder::new(source())
            .batch_size(256)
            .memory_budget()
            .steady();
        let limit = steady * 3 / 4;
        let e = LoaderBuilder::new(source())
            .batch_size(256)
            .host_memory_limit(limit)
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("these fit together: "), "{e}");
        let value = |name: &str| value_in(&e, name);
        let mut b = LoaderBuilder::new(source())
            .batch_size(256)
            .host_memory_limit(limit);
        if let Some(v) = value("batch_size") {
            b = b.batch_size(v as usize);
        }
        if let Some(v) = value("max_pixels") {
            b = b.max_pixels(v);
        }
        if let Some(v) = value("decode_threads") {
            b = b.decode_threads(v as usize);
        }
        if let Some(v) = value("prefetch") {
            b = b.prefetch(v as usize);
        }
        assert!(b.build().is_ok(), "{e}");
        let b = LoaderBuilder::new(source())
            .max_pixels(1_000_000)
            .batch_size(512)
            .memory_budget();
        let e = LoaderBuilder::new(source())
            .max_pixels(1_000_000)
            .batch_size(512)
            .host_memory_limit(b.total() - 1)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("batch_size"), "{e}");
        assert!(LoaderBuilder::new(source())
            .max_pixels(1_000_000)
            .batch_size(512)
            .host_memory_limit(b.total())
            .build()
            .is_ok());
    }

    #[test]
    fn budget_grows_with_the_settings_that_cost_memory() {
        let base = LoaderBuilder::new(source()).memory_budget();
        let more = LoaderBuilder::new(source())
            .shuffle_buffer(1000)
            .memory_budget();
        // The shuffle is computed: no sample is held, whatever the block.
        assert_eq!(more.shuffle_buffer_bytes, base.shuffle_buffer_bytes);
        let half = LoaderBuilder::new(source())
            .dtype(Dtype::F16)
            .memory_budget();
        // The three batches in the output dtype (the ready one, the consumer's, the spare)
        // halve; the `u8` ones of the queue stay.
        let elems = 64 * 160 * 160 * 3;
        assert_eq!(base.batch_bytes - half.batch_bytes, 3 * elems * 2);
        let u8_batches = LoaderBuilder::new(source())
            .dtype(Dtype::U8)
            .memory_budget();
        assert!(u8_batches.batch_bytes < half.batch_bytes);
    }
}
