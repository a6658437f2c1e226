//! # imagefeed
//!
//! Stream images from local files or object storage into a training loop: a source (any
//! [`SourceKind`]) feeds a parallel JPEG/PNG/WebP decode, a resize to 160×160 (by default), a
//! shuffle computed per position, a batcher and a prefetch queue that normalizes, with a host
//! memory budget that is known before the loader runs and does not grow with the dataset.
//!
//! ```text
//!  Source         a file list, class folders, tar, TFRecord or parquet shards, or a URL:
//!                 indices and labels (source/: open/ tells what a path holds, format/ reads
//!                 each layout, storage/ reads local files and object stores)
//!    │ plan       a seeded order of the indices each epoch, this rank's share (pipeline/plan.rs)
//!    ▼
//!  readahead      asks the kernel for the next files ahead of the decoders (local files, cache)
//!  fetch          reads the bytes of tar shards and objects as streams, within a byte budget
//!    │                                             (pipeline/readahead.rs, pipeline/fetch.rs)
//!    ▼
//!  decode ×N      JPEG/PNG/WebP -> RGB8, DCT-scaled where it still covers the target, only the
//!  + transform    crop's rows and columns (decode/); the crop (random per seed, epoch and
//!                 index) resized to 160x160 u8, oriented, flipped (transform/)
//!    │                                                         (pipeline/decode_loop.rs)
//!    │ ◀─▶ cache  on disk: the first epoch writes every u8 sample (or, for a random crop,
//!    │            a base image each epoch crops anew), later epochs read them (cache/)
//!    ▼
//!  hand-off       a ring that restores plan order, whatever the threads' timing
//!    ▼                                                               (pipeline/handoff.rs)
//!  batcher        each u8 sample (and its fields) copied into a u8 batch; the order it
//!                 arrives in was computed per position, no sample held (shuffle.rs)
//!    │                                                            (pipeline/batch_loop.rs)
//!    ▼
//!  prefetch       a queue of ready u8 batches; a normalize thread writes the next one in the
//!                 output dtype and layout (batch/, pipeline/normalize_loop.rs); with `cuda`,
//!                 pinned slots copied to the GPU and normalized there           (prefetch/)
//!  Batches        the epoch's iterator of `Batch`es (loader.rs)
//! ```
//!
//! [`Loader::epoch`] starts the threads (`pipeline/mod.rs` wires them: threads, channels,
//! capacities, shutdown order); the settings every stage reads are in `config.rs`, the
//! builder that fills them in `builder.rs`, and the memory they imply in `budget.rs`.
//!
//! ```
//! # fn main() -> Result<(), imagefeed::Error> {
//! use imagefeed::{Loader, Source};
//!
//! let loader = Loader::builder(Source::from_dir("testdata/classes")?)
//!     .batch_size(4)
//!     .seed(42)
//!     .build()?;
//! println!("memory budget: {}", loader.memory_budget());
//! for epoch in 0..2 {
//!     for batch in loader.epoch(epoch) {
//!         let batch = batch?;
//!         let images: &[f32] = batch.as_f32()?; // [n, 160, 160, 3], values in 0..=1
//!         let labels: &[u32] = batch.labels();
//!         assert_eq!(images.len(), labels.len() * 160 * 160 * 3);
//!     }
//!     println!("{}", loader.stats());
//! }
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature     | default | what it adds |
//! |-------------|---------|--------------|
//! | `turbojpeg` | yes     | libjpeg-turbo 3.1.0 through the `imagefeed-jpeg` crate (built with the `cc` crate from C alone: its x86-64 SIMD code is C intrinsics, aarch64's Neon), with imagefeed's bit-identical faster Huffman decoder and DCT-scaled decoding; without it JPEGs decode with the pure-Rust zune-jpeg. [`decoder_info`] says which decoder a build has |
//! | `stock-libjpeg-turbo` | no | the same libjpeg-turbo without imagefeed's patch (upstream C only) |
//! | `remote`    | no      | sources in object storage (`s3://`, `gs://`, `az://`, `http(s)://`) through object_store and tokio; the command line turns it on |
//! | `cuda`      | no      | [`Device::Cuda`]: pinned staging, asynchronous copies and normalization on the GPU (cudarc, libcuda loaded at run time); `Batch::cuda`, `Batch::into_cuda` |
//! | `cuda-11040` | no     | builds cudarc for CUDA 11.4 with `cuda` (nothing without it); with `cuda`, name a CUDA version this way, with `CUDARC_CUDA_VERSION`, or through another crate's cudarc features (README, "GPU") |
//! | `candle`    | no      | `Batch::to_candle` / `Batch::into_candle`: a batch as candle-core 0.11 tensors |
//! | `candle-cuda` | no    | `candle` + `cuda` + candle-core's `cuda`: a GPU batch becomes a candle CUDA tensor without a copy (building needs nvcc) |
//! | `parquet`   | yes     | parquet sources ([`Source::from_parquet`], the Hugging Face `datasets` layout) through the `parquet` crate; TFRecord sources need no feature |
//!
//! ## Tuning
//!
//! - The consumer waits (high [`Stats::consumer_wait_fraction`]) and the CPU is busy: more
//!   `decode_threads`, or an on-disk [`cache`](LoaderBuilder::cache) for later epochs.
//! - Disk-bound (CPU idle, consumer waiting): a deeper
//!   [`readahead`](LoaderBuilder::readahead) (network file systems), the cache, or faster
//!   storage.
//! - Out of memory: a smaller `shuffle_buffer`, `prefetch`, `batch_size` or `max_pixels`, or a
//!   half-precision [`Dtype`]; [`Loader::memory_budget`] shows which part is large.
//! - Corrupt files stop the epoch: [`OnError::Skip`] skips them and lists them in
//!   [`Stats::skipped_samples`].

#![deny(missing_docs)]
// A failed `unwrap` in a unit test is a failed test, with its location.
#![cfg_attr(test, allow(clippy::unwrap_used))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod budget;
mod builder;
mod cache;
mod config;
mod decode;
mod error;
mod fields;
mod image;
mod loader;
mod memory_limit;
mod pipeline;
mod prefetch;
mod rank;
mod rng;
mod shuffle;
mod simd;
mod source;
mod stats;
mod tensors;
#[cfg(feature = "__testing")]
mod testing;
#[cfg(feature = "unstable-tools")]
#[doc(hidden)]
pub mod tools;
mod transform;
mod tune;

pub use batch::{Batch, Dtype, Images, Layout, OwnedBatch, OwnedImages};
pub use budget::MemoryBudget;
pub use builder::LoaderBuilder;
pub use cache::CachePolicy;
pub use decode::{decoder_info, DecoderInfo, JpegDecoder};
pub use error::{BoxError, Error, ErrorKind, OnError};
pub use fields::{
    Field, FieldColumn, FieldKind, FieldValue, OwnedField, OwnedFieldValue, Target, TargetValues,
    DEFAULT_FIELD_LIMIT,
};
pub use loader::{Batches, Loader, LoaderState};
pub use prefetch::Device;
pub use rank::{Launch, Launcher, ShardPadding};
pub use source::format::tar::write::ShardsWritten;
pub use source::write::{write_shards, write_shards_with};
#[cfg(feature = "parquet")]
#[cfg_attr(docsrs, doc(cfg(feature = "parquet")))]
pub use source::ParquetOptions;
#[allow(deprecated)]
pub use source::RemoteOptions;
pub use source::{
    Exhausted, Mix, MixEnd, MixLabels, OpenOptions, Source, SourceKind, Stamps, TfRecordOptions,
};
pub use stats::Stats;
pub use transform::{ResizeFilter, ResizeMode, Transform};

/// The cudarc version imagefeed uses, for the types [`CudaBatch`] hands out.
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use cudarc;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use prefetch::cuda::{CudaBatch, OwnedCudaBatch, OwnedCudaImages};

// A loader is shared between threads; an epoch's iterator and its batches move to others
// (a training loop on another thread, a framework's data-loader adapter). Checked at compile
// time, with every feature set.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Loader>();
    send::<Batches>();
    send::<Batch>();
    send::<LoaderState>();
};

// README.md's Rust examples compile as doctests (`cargo test --doc`), so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
