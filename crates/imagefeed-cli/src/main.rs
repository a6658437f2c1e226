//! The `imagefeed` command line: benchmark the loader, write a reproducible corpus, measure the
//! decode floor. With no arguments it benchmarks the loader on a corpus generated from the
//! photographs embedded in the crate.

mod args;
mod bench;
mod datasets;
mod fields;
mod floor;
mod gpu;
mod outputs;
mod plot;
mod sweep;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use args::{BenchArgs, DecoderArg, FilterArg};
use bench::{bench, default_benchmark};
use datasets::{corpus, index, shards, shuffle_quality};
use floor::{floor, stock_paths_then};
use gpu::{gpu_copy, gpu_info};
use sweep::sweep;

#[derive(Parser)]
#[command(
    name = "imagefeed",
    version,
    about = "Stream images into training loops with bounded, known memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark the loader on a dataset: a file list, class folders, tar shards, parquet or
    /// TFRecord files, a manifest, a mixture (--mix), or a URL (s3://bucket/prefix, with
    /// credentials and endpoint from AWS_*).
    Bench(Box<BenchArgs>),
    /// What the loader sees of the GPUs: driver, devices, free and total memory, pinned
    /// allocation, the normalize kernel. Exits 1 without the `cuda` feature, a driver or a GPU.
    GpuInfo,
    /// Host-to-device copy bandwidth for one batch in u8 and in f32: the loader's pinned path
    /// against pageable memory and a plain pinned copy (scripts/gpu-check.sh).
    #[command(hide = true)]
    GpuCopy {
        /// The GPU.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Batch size, channels, height, width.
        #[arg(long, num_args = 4, default_values_t = [64, 3, 160, 160])]
        shape: Vec<usize>,
    },
    /// Write a realistic synthetic JPEG corpus (class folders plus files.txt).
    Corpus {
        /// Output folder (created).
        out_dir: PathBuf,
        /// Number of images.
        #[arg(long, default_value_t = 5000)]
        count: usize,
        /// Seed (the same seed writes the same files).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Every image's long side, in pixels, drawn from MIN..=MAX (`--long-side 4000 4000`:
        /// 12-megapixel photos) [default: mostly 380-720, 5% 1000-2500].
        #[arg(long, num_args = 2, value_names = ["MIN", "MAX"])]
        long_side: Option<Vec<u32>>,
    },
    /// Write a source (list, class folders, URL) as WebDataset tar shards: shard-000000.tar, …
    /// with KEY.jpg and KEY.cls members (and a tar source's other members, and --field's),
    /// KEY being the source's sample index; the class names go to imagefeed-classes.txt.
    Shards {
        /// A file list, a folder of class folders, or a URL.
        source: PathBuf,
        /// Output folder (created; must not hold shards already).
        out_dir: PathBuf,
        /// Samples per shard.
        #[arg(long, default_value_t = 1000)]
        shard_size: usize,
        /// Seed of the order samples are written in.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write samples in source order (class folders stay grouped: a shuffle buffer then
        /// mixes poorly).
        #[arg(long)]
        no_shuffle: bool,
        /// Also write this field of each sample as the member KEY.NAME (repeatable): a parquet
        /// column, a TFRecord feature, a TSV list's column. A tar source's other members
        /// (KEY.txt, KEY.json, ...) are kept without it.
        #[arg(long = "field", value_name = "NAME")]
        fields: Vec<String>,
    },
    /// Write a manifest of a dataset's shards (tar shards, TFRecord or parquet files; local or
    /// in object storage): one small file listing each shard's samples, size and time, which
    /// opening then reads instead of every shard (`imagefeed shards` writes one already).
    Index {
        /// The dataset: a folder or file of shards, or a URL (`s3://bucket/data/`).
        source: PathBuf,
        /// Where to write it [default: `imagefeed-manifest.tsv` in the dataset's folder or
        /// prefix, where opening looks for it].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// How well an epoch's order mixes a dataset, computed without reading a sample: the
    /// loader's order against a full permutation and a shuffle buffer, with labels spread at
    /// random (pre-shuffled shards) and sorted by sample (class-sorted shards).
    ShuffleQuality {
        /// The dataset (its layout of shards is what matters).
        source: PathBuf,
        #[command(flatten)]
        args: QualityArgs,
    },
    /// Decode-only throughput of the loader's JPEG decoder: the floor the pipeline approaches.
    Floor {
        /// A file list or a folder of class folders.
        source: PathBuf,
        /// Decode threads (0: one per core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Output size the DCT scale must cover.
        #[arg(long, default_value_t = 160)]
        size: u32,
        /// Decode at most this many files.
        #[arg(long)]
        limit: Option<usize>,
        /// JPEG decoder.
        #[arg(long, value_enum, default_value_t = DecoderArg::Auto)]
        decoder: DecoderArg,
        /// Print one JSON object per measurement.
        #[arg(long)]
        json: bool,
        /// Also measure the quality cost of DCT scaling (PSNR against full decode + the same
        /// resize) and of the bilinear filter (against the antialiased one) on this many
        /// images (0: skip).
        #[arg(long, default_value_t = 500)]
        psnr_images: usize,
        /// The resize filter of the DCT-scaling quality check.
        #[arg(long, value_enum, default_value_t = FilterArg::Antialiased)]
        filter: FilterArg,
        /// Decode with libjpeg-turbo's stock Huffman decoders and one 4x4 IDCT block at a time
        /// (the patched decoder's own fallbacks, bit-identical): what the patch gains.
        #[arg(long)]
        stock_paths: bool,
    },
}

/// The settings of `imagefeed shuffle-quality`.
#[derive(clap::Args)]
pub(crate) struct QualityArgs {
    /// Samples a batch.
    #[arg(long, default_value_t = 256)]
    pub(crate) batch_size: usize,
    /// Labels of the synthetic labelings.
    #[arg(long, default_value_t = 1000)]
    pub(crate) classes: u32,
    /// The loader's shuffle block (`shuffle_buffer`) [default: the source's].
    #[arg(long)]
    pub(crate) shuffle_buffer: Option<usize>,
    /// The WebDataset-style buffer compared with, in samples (0: none; shard sources only).
    #[arg(long, default_value_t = 1000)]
    pub(crate) buffer: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// One JSON object a row.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Sets glibc's malloc as a training binary should for a loader that runs many epochs (the
/// README's "The allocator"); the library itself never changes a dependent's allocator. Two
/// arenas instead of eight a core, and fixed thresholds: by default glibc raises its mmap
/// threshold to the size of each large block freed (libjpeg-turbo's per-image buffers, up to
/// 32 MiB), after which such blocks come from the arenas and stay resident once freed, and the
/// peak RSS grew over the first epochs (c5k, 10 epochs: 95 to 132 MB). A fixed mmap threshold
/// alone (1 MiB) kept the peak flat but cost 9% of the images/s in page faults: the trim
/// threshold, which glibc then stops adjusting, stays at 128 KiB and every image's blocks went
/// back to the system and were faulted in again. 4 MiB for both keeps it flat at 3-4% under
/// the defaults' images/s (a 32 MiB trim threshold: the defaults' speed, but 10 MB more RSS
/// kept free in the arenas). A setting made in the environment (`MALLOC_ARENA_MAX`,
/// `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) is left as it is.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_allocator() {
    for (env, param, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 2),
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 4 << 20),
        ("MALLOC_TRIM_THRESHOLD_", libc::M_TRIM_THRESHOLD, 4 << 20),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: mallopt only sets a parameter of glibc's malloc, which takes its own
            // lock; it is called before any thread of this program starts.
            unsafe { libc::mallopt(param, value) };
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

fn main() -> ExitCode {
    tune_allocator();
    // Warnings, and what opening a large dataset says of its progress.
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,imagefeed::source=info"),
    )
    .format_timestamp(None)
    .init();
    let cli = Cli::parse();
    let on_error_is_fail = matches!(&cli.command, Some(Command::Bench(a)) if matches!(a.on_error, args::OnErrorArg::Fail));
    let result = match cli.command {
        None => default_benchmark(),
        Some(Command::Bench(args)) if args.sweep => sweep(&args),
        Some(Command::Bench(args)) => bench(&args).map(|_| ()),
        Some(Command::GpuInfo) => gpu_info(),
        Some(Command::GpuCopy { device, shape }) => gpu_copy(device, &shape),
        Some(Command::Corpus {
            out_dir,
            count,
            seed,
            long_side,
        }) => corpus(&out_dir, count, seed, long_side.map(|v| (v[0], v[1]))),
        Some(Command::Shards {
            source,
            out_dir,
            shard_size,
            seed,
            no_shuffle,
            fields,
        }) => shards(
            &source,
            &out_dir,
            shard_size,
            (!no_shuffle).then_some(seed),
            &fields,
        ),
        Some(Command::Index { source, out }) => index(&source, out.as_deref()),
        Some(Command::ShuffleQuality { source, args }) => shuffle_quality(&source, &args),
        Some(Command::Floor {
            source,
            threads,
            size,
            limit,
            decoder,
            json,
            psnr_images,
            filter,
            stock_paths,
        }) => stock_paths_then(stock_paths).and_then(|()| {
            floor(
                &source,
                threads,
                size,
                limit,
                decoder.get(),
                json,
                (psnr_images, filter.get()),
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain: imagefeed's errors leave to `source()` only what their own text
            // does not say (the failure behind `TooManyFailures`, a cause's cause).
            let mut message = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                message.push_str(": ");
                message.push_str(&c.to_string());
                cause = c.source();
            }
            let lib = e.downcast_ref::<imagefeed::Error>();
            if let Some(imagefeed::ErrorKind::InvalidConfig { .. }) = lib.map(|e| e.kind()) {
                message = with_flag_names(&message);
            }
            eprintln!("imagefeed: error: {message}");
            if lib.is_some_and(|e| e.is_data_error())
                && on_error_is_fail
                && EPOCH_FAILED.load(std::sync::atomic::Ordering::Relaxed)
            {
                eprintln!(
                    "imagefeed: hint: --on-error skip goes on past files that cannot be read or \
                     decoded (logging each; --max-skipped caps how many)"
                );
            }
            ExitCode::FAILURE
        }
    }
}

pub(crate) type AnyError = Box<dyn std::error::Error>;

/// Set by bench when an epoch yields an error: a data error there is one sample's, which
/// `--on-error skip` would skip (an error opening the source is not).
pub(crate) static EPOCH_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The library's setting names, as a settings error writes them (`batch_size`), with the
/// command line's flags instead, so that its advice can be followed here as written.
fn with_flag_names(message: &str) -> String {
    const FLAGS: [(&str, &str); 12] = [
        ("max_pixels", "--max-pixels"),
        ("batch_size", "--batch-size"),
        ("prefetch", "--prefetch"),
        ("decode_threads", "--threads"),
        ("dtype", "--dtype"),
        ("host_memory_limit", "--host-memory-limit"),
        ("shuffle_buffer", "--shuffle-buffer"),
        ("field_limit", "--field-limit"),
        ("image_size", "--size"),
        ("readahead", "--readahead"),
        ("max_skipped", "--max-skipped"),
        ("epoch_size", "--epoch-size"),
    ];
    let mut out = message.to_string();
    for (name, flag) in FLAGS {
        out = out.replace(&format!("`{name}`"), &format!("`{flag}`"));
    }
    out
}

pub(crate) fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}
