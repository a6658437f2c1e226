//! The `imagefeed` command line: benchmark the loader, write a reproducible corpus, measure the
//! decode floor. With no arguments it benchmarks the loader on a corpus generated from the
//! photographs embedded in the crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use imagefeed::{
    procinfo, Device, Dtype, JpegDecoder, Layout, Loader, LoaderState, OnError, ResizeFilter,
    ShardPadding, Source, SourceKind, Transform,
};
use std::io::Write as _;

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
    /// Benchmark the loader on a file list, a folder of class folders, tar shards (a folder of
    /// .tar files) or a URL (s3://bucket/prefix, with credentials and endpoint from AWS_*).
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
    /// with KEY.jpg and KEY.cls members, KEY being the source's sample index.
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

#[derive(Parser, Clone)]
struct BenchArgs {
    /// A file list (PATH<TAB>LABEL lines) or a folder of class folders.
    source: PathBuf,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Decode threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Bounded shuffle buffer, in samples (default: 0 for files, whose permutation already
    /// shuffles; 1000 for tar shards, read in order within each shard).
    #[arg(long)]
    shuffle_buffer: Option<usize>,
    /// Ready batches queued ahead of the consumer.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Samples hinted to the kernel ahead of the decode threads (their local files, or their
    /// records in a complete cache), so that data not in the page cache is read in the
    /// background (0: off).
    #[arg(long, default_value_t = 64)]
    readahead: usize,
    /// Adapt decode threads and prefetch depth every second while an epoch runs (the summary
    /// reports where each epoch ended).
    #[arg(long)]
    autotune: bool,
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Output height and width.
    #[arg(long, num_args = 2, value_names = ["H", "W"], default_values_t = [160, 160])]
    size: Vec<u32>,
    #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
    dtype: DtypeArg,
    #[arg(long, value_enum, default_value_t = LayoutArg::Nhwc)]
    layout: LayoutArg,
    #[arg(long, value_enum, default_value_t = OnErrorArg::Fail)]
    on_error: OnErrorArg,
    /// With --on-error skip: the most samples an epoch may skip.
    #[arg(long)]
    max_skipped: Option<u64>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep file order instead of a seeded permutation per epoch.
    #[arg(long)]
    no_shuffle: bool,
    /// JPEG decoder.
    #[arg(long, value_enum, default_value_t = DecoderArg::Auto)]
    decoder: DecoderArg,
    /// Resize filter: antialiased (Pillow's widened triangle) or bilinear (two taps within
    /// 2x, as tf.image.resize).
    #[arg(long, value_enum, default_value_t = FilterArg::Antialiased)]
    filter: FilterArg,
    /// Which box of each image becomes the sample: stretch (the whole image),
    /// shorter-side-center-crop, center-crop (evaluation: the shorter side resized to
    /// min(H, W) / --crop-fraction, then the centre) or random-resized-crop (training: a new
    /// box every epoch, see --crop-scale and --crop-ratio).
    #[arg(long, value_enum, default_value_t = TransformArg::Stretch)]
    transform: TransformArg,
    /// With random-resized-crop: the range of the box's area, as a fraction of the image's.
    #[arg(long, num_args = 2, value_names = ["MIN", "MAX"], default_values_t = [0.08, 1.0])]
    crop_scale: Vec<f64>,
    /// With random-resized-crop: the range of the box's aspect ratio (width / height).
    #[arg(long, num_args = 2, value_names = ["MIN", "MAX"], default_values_t = [0.75, 4.0 / 3.0])]
    crop_ratio: Vec<f64>,
    /// With center-crop: the fraction of the resized shorter side kept.
    #[arg(long, default_value_t = 0.875)]
    crop_fraction: f64,
    /// Probability of mirroring each sample left to right [default: 0.5 with
    /// random-resized-crop, else 0].
    #[arg(long)]
    flip: Option<f64>,
    /// With --cache and random-resized-crop: the longest side of the image the cache records
    /// for each sample, from which each epoch cuts its box [default: twice the output's
    /// longer side].
    #[arg(long)]
    cache_max_side: Option<u32>,
    /// Images over this many pixels are refused.
    #[arg(long)]
    max_pixels: Option<u64>,
    /// Deliver JPEGs that libjpeg-turbo decodes to the end while warning that their data is
    /// damaged or padded ("Corrupt JPEG data: ..."), as Pillow and tf.data do, logging each;
    /// by default they are errors. Truncated files are errors either way.
    #[arg(long)]
    accept_jpeg_warnings: bool,
    /// Fail before running if the memory budget's worst case exceeds this many bytes (suffixes K, M, G, T:
    /// powers of 1024) [default: the machine's or container's memory].
    #[arg(long, value_parser = parse_bytes)]
    host_memory_limit: Option<u64>,
    /// Cache decoded samples in this file (written by the first epoch, read by later ones).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// This process's rank (default: $RANK, else 0).
    #[arg(long)]
    rank: Option<usize>,
    /// Number of ranks sharing each epoch (default: $WORLD_SIZE, else 1).
    #[arg(long)]
    world_size: Option<usize>,
    /// How ranks get equal batch counts: equal-batches (every sample once, plus a repeated sample on a short rank only where batch counts would differ), repeat or drop.
    #[arg(long, value_enum, default_value_t = PaddingArg::EqualBatches)]
    shard_padding: PaddingArg,
    /// Write the dataset index of every delivered sample, one a line, in delivery order.
    #[arg(long)]
    indices_out: Option<PathBuf>,
    /// Stop after this many batches (of the first epoch run) and write the loader state to
    /// --state-out.
    #[arg(long)]
    max_batches: Option<u64>,
    /// Where --max-batches writes the loader state (one line).
    #[arg(long)]
    state_out: Option<PathBuf>,
    /// Resume from a loader state written by --state-out: finish that epoch, then run the
    /// following epochs up to --epochs in all.
    #[arg(long)]
    resume_from: Option<PathBuf>,
    /// Deliver batches to this device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Print one JSON object per epoch on stdout.
    #[arg(long)]
    json: bool,
    /// Run a grid of settings (batch size x threads x prefetch x shuffle buffer x dtype), one
    /// epoch each, and print images/s against peak RSS as a table and an SVG plot.
    #[arg(long)]
    sweep: bool,
    /// With --sweep: images per run (the first N of the source).
    #[arg(long, default_value_t = 1000)]
    sweep_images: usize,
    /// With --sweep: where to write the SVG plot.
    #[arg(long, default_value = "sweep.svg")]
    sweep_svg: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeArg {
    F32,
    F16,
    Bf16,
    U8,
}

#[derive(Clone, Copy, ValueEnum)]
enum LayoutArg {
    Nhwc,
    Nchw,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnErrorArg {
    Fail,
    Skip,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PaddingArg {
    EqualBatches,
    Repeat,
    Drop,
}

#[derive(Clone, Copy, ValueEnum)]
enum TransformArg {
    Stretch,
    ShorterSideCenterCrop,
    CenterCrop,
    RandomResizedCrop,
}

#[derive(Clone, Copy, ValueEnum)]
enum FilterArg {
    Antialiased,
    Bilinear,
}

impl FilterArg {
    fn get(self) -> ResizeFilter {
        match self {
            FilterArg::Bilinear => ResizeFilter::Bilinear,
            FilterArg::Antialiased => ResizeFilter::Antialiased,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DecoderArg {
    Auto,
    Turbojpeg,
    Zune,
}

impl DecoderArg {
    fn get(self) -> JpegDecoder {
        match self {
            DecoderArg::Auto => JpegDecoder::Auto,
            DecoderArg::Turbojpeg => JpegDecoder::TurboJpeg,
            DecoderArg::Zune => JpegDecoder::Zune,
        }
    }
}

fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" | "host" => Ok(Device::Host),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("unknown device `{s}`: use cpu, cuda or cuda:N")),
    }
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
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
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
        }) => shards(&source, &out_dir, shard_size, (!no_shuffle).then_some(seed)),
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
            eprintln!("imagefeed: error: {message}");
            ExitCode::FAILURE
        }
    }
}

type AnyError = Box<dyn std::error::Error>;

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// `cargo run --release` with no arguments: a corpus from the embedded photographs, then the
/// loader with default settings and the decode floor on it.
fn default_benchmark() -> Result<(), AnyError> {
    let count = 2000;
    let dir = tempfile::tempdir()?;
    eprintln!(
        "imagefeed: writing a {count}-image corpus from the embedded photographs to {} ...",
        dir.path().display()
    );
    let summary = imagefeed::corpus::generate(dir.path(), count, 0)?;
    eprintln!(
        "imagefeed: {} images, {:.1} MB of JPEG, {:.2} megapixels on average",
        summary.images,
        mb(summary.bytes),
        summary.mean_megapixels
    );
    let args = BenchArgs::parse_from([
        "bench",
        summary.list.to_str().ok_or("temporary path is not UTF-8")?,
        "--epochs",
        "2",
    ]);
    bench(&args)?;
    let source = Source::open(&summary.list)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let f = imagefeed::floor::decode_floor(&source, threads, true, 160, JpegDecoder::Auto, None)?;
    println!(
        "decode floor (decode only, DCT-scaled, {threads} threads): {:.0} images/s",
        f.images_per_sec
    );
    println!("reproduce: imagefeed corpus DIR --count {count} && imagefeed bench DIR/files.txt --epochs 2 && imagefeed floor DIR/files.txt");
    Ok(())
}

fn corpus(
    out_dir: &std::path::Path,
    count: usize,
    seed: u64,
    long_side: Option<(u32, u32)>,
) -> Result<(), AnyError> {
    let t = Instant::now();
    let s = imagefeed::corpus::generate_sized(out_dir, count, seed, long_side)?;
    println!(
        "wrote {} images ({:.1} MB, {:.2} megapixels on average) and {} in {:.1} s",
        s.images,
        mb(s.bytes),
        s.mean_megapixels,
        s.list.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `floor --stock-paths`: turns the patched decoder's fast paths off for this process.
fn stock_paths_then(stock: bool) -> Result<(), AnyError> {
    if !stock {
        return Ok(());
    }
    #[cfg(feature = "turbojpeg")]
    {
        if !imagefeed_jpeg::info().patched {
            return Err(
                "--stock-paths: this build's libjpeg-turbo is already the stock one".into(),
            );
        }
        imagefeed_jpeg::testing::disable_fast_paths(imagefeed_jpeg::testing::FastPaths {
            stock_huffman: true,
            no_idct_pair: true,
            no_pdep: true,
        });
        Ok(())
    }
    #[cfg(not(feature = "turbojpeg"))]
    Err("--stock-paths needs the turbojpeg feature".into())
}

fn floor(
    source: &std::path::Path,
    threads: usize,
    size: u32,
    limit: Option<usize>,
    decoder: JpegDecoder,
    json: bool,
    (psnr_images, filter): (usize, ResizeFilter),
) -> Result<(), AnyError> {
    let source = Source::open(source)?;
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    for scaled in [false, true] {
        let r = imagefeed::floor::decode_floor(&source, threads, scaled, size, decoder, limit)?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "scaled": scaled, "threads": threads, "images": r.images, "failed": r.failed,
                    "seconds": r.seconds, "images_per_sec": r.images_per_sec,
                    "mean_decoded_megapixels": r.mean_decoded_megapixels,
                })
            );
        } else {
            println!(
                "{:<24} {:>7} images  {:>3} failed  {:>6.2} s  {:>8.0} images/s  ({:.3} MP decoded per image, {threads} threads)",
                if scaled { "decode, DCT-scaled:" } else { "decode, full size:" },
                r.images,
                r.failed,
                r.seconds,
                r.images_per_sec,
                r.mean_decoded_megapixels
            );
        }
    }
    if psnr_images > 0 {
        let q = imagefeed::floor::dct_psnr(&source, size, filter, Some(psnr_images))?;
        let f = imagefeed::floor::filter_psnr(&source, size, Some(psnr_images))?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "psnr_images": q.images, "psnr_scaled_images": q.scaled_images,
                    "mean_psnr_db": q.mean_psnr_db, "mean_scaled_psnr_db": q.mean_scaled_psnr_db,
                    "min_psnr_db": q.min_psnr_db, "filter": format!("{filter:?}"),
                    "bilinear_vs_antialiased_mean_psnr_db": f.mean_scaled_psnr_db,
                    "bilinear_vs_antialiased_differing_images": f.scaled_images,
                    "bilinear_vs_antialiased_min_psnr_db": f.min_psnr_db,
                })
            );
        } else {
            println!(
                "DCT scaling quality: mean PSNR {:.1} dB over the {} of {} images whose output differs (lowest {:.1} dB; {:.1} dB counting identical ones as 99) against full decode + the same resize ({filter:?} filter)",
                q.mean_scaled_psnr_db, q.scaled_images, q.images, q.min_psnr_db, q.mean_psnr_db
            );
            println!(
                "resize filters: Bilinear against Antialiased (both DCT-scaled): mean PSNR {:.1} dB over the {} of {} images whose output differs (lowest {:.1} dB; beyond 2x Bilinear is Antialiased)",
                f.mean_scaled_psnr_db, f.scaled_images, f.images, f.min_psnr_db
            );
        }
    }
    Ok(())
}

fn shards(
    source: &std::path::Path,
    out_dir: &std::path::Path,
    shard_size: usize,
    seed: Option<u64>,
) -> Result<(), AnyError> {
    let source = Source::open(source)?;
    let start = Instant::now();
    let written = imagefeed::write_shards(&source, out_dir, shard_size, seed)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wrote {} samples ({:.1} MB of images) into {} shard(s) in {}, {:.1} s ({})",
        written.samples,
        written.bytes as f64 / 1e6,
        written.shards.len(),
        out_dir.display(),
        secs,
        match seed {
            Some(s) => format!("shuffled with seed {s}"),
            None => "source order".into(),
        }
    );
    Ok(())
}

fn bench(a: &BenchArgs) -> Result<Vec<serde_json::Value>, AnyError> {
    // Outputs never replace an input: `--indices-out files.txt` would truncate the list.
    let inputs = [Some(&a.source), a.resume_from.as_ref(), a.cache.as_ref()];
    let outputs = [a.indices_out.as_ref(), a.state_out.as_ref()];
    for out in outputs.into_iter().flatten() {
        if let Some(input) = inputs.into_iter().flatten().find(|i| same_file(out, i)) {
            return Err(format!(
                "{}: is also an input ({}); choose another output file",
                out.display(),
                input.display()
            )
            .into());
        }
    }
    // Nor any other file it did not write (a sample, a shard of the source): an existing
    // output must hold what that option writes.
    if let Some(p) = &a.indices_out {
        replaceable(p, Output::Indices)?;
    }
    if let Some(p) = &a.state_out {
        replaceable(p, Output::State)?;
    }

    let source = Source::open(&a.source)?;
    let default_shuffle_buffer = match source.kind() {
        SourceKind::TarShards => 1000,
        _ => 0,
    };
    let on_error = match a.on_error {
        OnErrorArg::Fail => OnError::Fail,
        OnErrorArg::Skip => OnError::Skip {
            max: a.max_skipped.unwrap_or(u64::MAX),
        },
    };
    let transform = match a.transform {
        TransformArg::Stretch => Transform::Stretch,
        TransformArg::ShorterSideCenterCrop => Transform::ShorterSideCenterCrop,
        TransformArg::CenterCrop => Transform::CenterCrop {
            crop_fraction: a.crop_fraction,
        },
        TransformArg::RandomResizedCrop => Transform::RandomResizedCrop {
            scale: (a.crop_scale[0], a.crop_scale[1]),
            ratio: (a.crop_ratio[0], a.crop_ratio[1]),
        },
    };
    let transform_name = transform.name();
    let mut builder = Loader::builder(source)
        .batch_size(a.batch_size)
        .decode_threads(a.threads)
        .shuffle_buffer(a.shuffle_buffer.unwrap_or(default_shuffle_buffer))
        .shuffle(!a.no_shuffle)
        .prefetch(a.prefetch)
        .readahead(a.readahead)
        .autotune(a.autotune)
        .image_size_hw(a.size[0], a.size[1])
        .dtype(match a.dtype {
            DtypeArg::F32 => Dtype::F32,
            DtypeArg::F16 => Dtype::F16,
            DtypeArg::Bf16 => Dtype::Bf16,
            DtypeArg::U8 => Dtype::U8,
        })
        .layout(match a.layout {
            LayoutArg::Nhwc => Layout::Nhwc,
            LayoutArg::Nchw => Layout::Nchw,
        })
        .on_error(on_error)
        .seed(a.seed)
        .jpeg_decoder(a.decoder.get())
        .resize_filter(a.filter.get())
        .transform(transform)
        .accept_jpeg_warnings(a.accept_jpeg_warnings)
        .device(parse_device(&a.device)?);
    if let Some(p) = a.max_pixels {
        builder = builder.max_pixels(p);
    }
    if let Some(l) = a.host_memory_limit {
        builder = builder.host_memory_limit(l);
    }
    if let Some(c) = &a.cache {
        builder = builder.cache(c);
    }
    if let Some(p) = a.flip {
        builder = builder.flip_horizontal(p);
    }
    if let Some(s) = a.cache_max_side {
        builder = builder.cache_max_side(s);
    }
    builder = builder.shard_from_env()?;
    if a.rank.is_some() || a.world_size.is_some() {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
        builder = builder.shard(
            a.rank.or_else(|| env("RANK")).unwrap_or(0),
            a.world_size.or_else(|| env("WORLD_SIZE")).unwrap_or(1),
        );
    }
    builder = builder.shard_padding(match a.shard_padding {
        PaddingArg::EqualBatches => ShardPadding::EqualBatches,
        PaddingArg::Repeat => ShardPadding::Repeat,
        PaddingArg::Drop => ShardPadding::Drop,
    });
    let loader = builder.build()?;
    let budget = loader.memory_budget();
    if !a.json {
        eprintln!(
            "imagefeed: {} samples, {} decode threads, batch {}, {}, {} resize/normalize kernels, memory budget {budget}",
            loader.len(),
            loader.decode_threads(),
            a.batch_size,
            imagefeed::decoder_info(),
            imagefeed::fuzzing::simd_kernels()
        );
    }
    let resume: Option<LoaderState> = match &a.resume_from {
        Some(p) => {
            // The state records the source's and the ordering settings' fingerprints: the
            // loader refuses it if either differs.
            Some(read_state(p)?)
        }
        None => None,
    };
    let mut indices_out = match &a.indices_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => None,
    };
    let first_epoch = resume.map_or(0, |s| s.epoch);
    // A resumed epoch is always finished, whatever --epochs says.
    let count = match resume {
        Some(_) => a.epochs.saturating_sub(first_epoch).max(1),
        None => a.epochs,
    };
    let mut reports = Vec::new();
    for epoch in (0..count).map(|i| first_epoch + i) {
        procinfo::reset_peak_rss();
        let bar = if a.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(loader.len() as u64)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "epoch {prefix} [{bar:30}] {pos}/{len} images {per_sec} eta {eta}",
            )?
            .progress_chars("=> "),
        );
        bar.set_prefix(epoch.to_string());
        let sampler = AnonSampler::start();
        let mut checksum = 0f64;
        let mut batches = match resume {
            Some(state) if state.epoch == epoch => loader.resume(&state),
            _ => loader.epoch(epoch),
        };
        let mut delivered = 0u64;
        let mut device_wait = std::time::Duration::ZERO;
        while let Some(batch) = batches.next() {
            let batch = batch?;
            // A GPU batch counts once it is in device memory.
            device_wait += imagefeed::gpu::wait_ready(&batch)?;
            if let Some(out) = indices_out.as_mut() {
                for i in batch.indices() {
                    writeln!(out, "{i}")?;
                }
            }
            delivered += 1;
            if a.max_batches == Some(delivered) {
                let state = batches.state();
                if let Some(p) = &a.state_out {
                    std::fs::write(p, format!("{state}\n"))
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                }
                eprintln!("imagefeed: stopped after {delivered} batches; state: {state}");
                drop(batches);
                if let Some(out) = indices_out.as_mut() {
                    out.flush()?;
                }
                return Ok(reports);
            }
            // Touch the batch as a training step would read it.
            checksum += f64::from(
                batch
                    .as_bytes()
                    .iter()
                    .step_by(4096)
                    .map(|&b| u32::from(b))
                    .sum::<u32>(),
            );
            bar.inc(batch.len() as u64);
        }
        drop(batches);
        bar.finish_and_clear();
        std::hint::black_box(checksum);
        let s = loader.stats();
        let peak = procinfo::peak_rss_bytes().unwrap_or(0);
        let peak_anon = sampler.stop();
        let mut report = serde_json::json!({
            "epoch": epoch,
            "images": s.images,
            "skipped": s.skipped,
            "seconds": s.seconds,
            "images_per_sec": s.images_per_sec(),
            "peak_rss_bytes": peak,
            "peak_anon_rss_bytes": peak_anon,
            "memory_budget_bytes": budget.steady(),
            "memory_budget_worst_case_bytes": budget.worst_case(),
            "decode_threads": s.decode_threads,
            "prefetch": s.prefetch,
            "batches": s.batches,
            "cache_hits": s.cache_hits,
            "from_cache": s.from_cache,
            "wrote_cache": s.wrote_cache,
            "cache_bytes": loader.cache_size_on_disk(),
            "consumer_wait_fraction": s.consumer_wait_fraction(),
            "decode_busy_seconds": s.decode_busy.as_secs_f64(),
            "decode_wait_seconds": s.decode_wait.as_secs_f64(),
            "read_seconds": s.read.as_secs_f64(),
            "decode_seconds": s.decode.as_secs_f64(),
            "resize_seconds": s.resize.as_secs_f64(),
            "batch_write_seconds": s.batch_write.as_secs_f64(),
            "kernels": imagefeed::fuzzing::simd_kernels(),
            "decoder": imagefeed::decoder_info().to_string(),
            "transform": transform_name,
        });
        if let Device::Cuda(n) = loader.device() {
            gpu_report(&mut report, n, &s, device_wait, a.json);
        }
        if a.json {
            println!("{report}");
        } else {
            let cache_note = match (s.from_cache, s.wrote_cache, loader.cache_size_on_disk()) {
                (true, _, Some(b)) => format!(", read from the cache ({:.1} MB on disk)", mb(b)),
                (_, true, Some(b)) => format!(", wrote the cache ({:.1} MB on disk)", mb(b)),
                (_, true, None) => ", wrote the cache (incomplete)".to_string(),
                _ if a.cache.is_some() => ", cache not used".to_string(),
                _ => String::new(),
            };
            println!(
                "epoch {epoch}: {} images, {} skipped, {:.2} s, {:.0} images/s, peak RSS {:.1} MB (anonymous {:.1} MB), steady memory budget {:.1} MB (worst case {:.1} MB), consumer waited {:.0}% of the time, {} decode threads, prefetch {}{cache_note}",
                s.images,
                s.skipped,
                s.seconds,
                s.images_per_sec(),
                mb(peak),
                mb(peak_anon),
                mb(budget.steady()),
                mb(budget.worst_case()),
                100.0 * s.consumer_wait_fraction(),
                s.decode_threads,
                s.prefetch
            );
            if s.images > 0 && !s.from_cache {
                let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / s.images as f64;
                println!(
                    "  per image (thread time): read {:.0} us, decode {:.0} us, resize {:.0} us, batch write {:.0} us; decode threads waited {:.0} us",
                    us(s.read),
                    us(s.decode),
                    us(s.resize),
                    us(s.batch_write),
                    us(s.decode_wait)
                );
            }
            // Each reason starts with the file's path.
            for (_, reason) in s.skipped_samples.iter().take(20) {
                eprintln!("  skipped {reason}");
            }
            if s.skipped_samples.len() > 20 {
                eprintln!("  ... and {} more skipped", s.skipped - 20);
            }
        }
        reports.push(report);
    }
    if let Some(out) = indices_out.as_mut() {
        out.flush()?;
    }
    Ok(reports)
}

/// Adds the GPU figures of an epoch to its report (and prints them without `--json`): images/s
/// into GPU memory, host-to-device GB/s while copying, and the share of the epoch the consumer
/// waited for batches (in `next()` or for a batch's copy to finish).
fn gpu_report(
    report: &mut serde_json::Value,
    ordinal: usize,
    s: &imagefeed::Stats,
    device_wait: std::time::Duration,
    json: bool,
) {
    let waited = if s.seconds > 0.0 {
        ((s.consumer_wait + device_wait).as_secs_f64() / s.seconds).min(1.0)
    } else {
        0.0
    };
    let fields = serde_json::json!({
        "device": format!("cuda:{ordinal}"),
        "gpu_images_per_sec": s.images_per_sec(),
        "h2d_bytes": s.h2d_bytes,
        "h2d_gb_per_sec": s.h2d_gb_per_sec(),
        "device_wait_seconds": device_wait.as_secs_f64(),
        "gpu_consumer_wait_fraction": waited,
    });
    if let (Some(r), serde_json::Value::Object(f)) = (report.as_object_mut(), fields) {
        r.extend(f);
    }
    if !json {
        println!(
            "  cuda:{ordinal}: {:.0} images/s into GPU memory, host-to-device {:.1} GB/s while copying ({:.1} MB measured), consumer waited {:.0}% of the time (device copies {:.2} s)",
            s.images_per_sec(),
            s.h2d_gb_per_sec(),
            mb(s.h2d_bytes),
            100.0 * waited,
            device_wait.as_secs_f64()
        );
    }
}

/// `imagefeed gpu-info`.
fn gpu_info() -> Result<(), AnyError> {
    match imagefeed::gpu::info() {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(e) => Err(format!("no usable GPU: {e}").into()),
    }
}

/// `imagefeed gpu-copy`: one line per copy size.
fn gpu_copy(device: usize, shape: &[usize]) -> Result<(), AnyError> {
    let elems: usize = shape.iter().product();
    for (name, bytes) in [("u8", elems), ("f32", elems * 4)] {
        let b = imagefeed::gpu::copy_bandwidth(device, bytes)?;
        println!(
            "h2d {name} batch {shape:?} ({:.1} MB): loader pinned {:.1} GB/s = {:.0}% of a plain pinned copy ({:.1} GB/s); pageable {:.1} GB/s",
            mb(bytes as u64),
            b.loader_pinned,
            100.0 * b.loader_pinned / b.plain_pinned,
            b.plain_pinned,
            b.pageable
        );
    }
    Ok(())
}

/// Samples the process's anonymous RSS (heap and stacks, not mapped cache files) every 5 ms:
/// the kernel keeps no peak for it.
struct AnonSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl AnonSampler {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("imagefeed-rss-sampler".into())
            .spawn(move || {
                let mut peak = 0;
                while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(procinfo::anon_rss_bytes().unwrap_or(0));
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                peak.max(procinfo::anon_rss_bytes().unwrap_or(0))
            })
            .ok();
        AnonSampler { stop, handle }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or(0)
    }
}

/// One point of a sweep.
struct SweepPoint {
    batch: usize,
    threads: usize,
    prefetch: usize,
    shuffle: usize,
    dtype: DtypeArg,
    images_per_sec: f64,
    peak_rss: u64,
    /// The steady memory budget.
    budget: u64,
    worst_case: u64,
}

fn dtype_of(d: DtypeArg) -> Dtype {
    match d {
        DtypeArg::F32 => Dtype::F32,
        DtypeArg::F16 => Dtype::F16,
        DtypeArg::Bf16 => Dtype::Bf16,
        DtypeArg::U8 => Dtype::U8,
    }
}

/// `bench --sweep`: the grid, a table on stdout and an SVG of images/s against peak RSS.
fn sweep(a: &BenchArgs) -> Result<(), AnyError> {
    // The plot replaces only an earlier plot (or an empty file), never an input or a file of
    // the user's: checked before the sweep runs.
    if same_file(&a.sweep_svg, &a.source) {
        return Err(format!(
            "{}: is also an input ({}); choose another --sweep-svg",
            a.sweep_svg.display(),
            a.source.display()
        )
        .into());
    }
    replaceable(&a.sweep_svg, Output::Svg)?;
    let full = Source::open(&a.source)?;
    let n = a.sweep_images.min(full.len()).max(1);
    let source =
        Source::from_entries((0..n).filter_map(|i| Some((full.path(i)?, full.label(i)?))))?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut threads_grid = vec![1, cores];
    threads_grid.dedup();
    // Warm the page cache so that the first point is not penalized by cold reads.
    let warm = Loader::builder(source.clone()).dtype(Dtype::U8).build()?;
    for b in warm.epoch(0) {
        b?;
    }
    let mut points = Vec::new();
    println!(
        "{:>6} {:>7} {:>8} {:>8} {:>5} {:>10} {:>13} {:>13} {:>13}",
        "batch",
        "threads",
        "prefetch",
        "shuffle",
        "dtype",
        "images/s",
        "peak RSS MB",
        "steady MB",
        "worst case MB"
    );
    for batch in [32usize, 64, 128] {
        for &threads in &threads_grid {
            for prefetch in [1usize, 2, 4] {
                for shuffle in [0usize, 1000] {
                    for dtype in [DtypeArg::F32, DtypeArg::F16, DtypeArg::U8] {
                        let loader = Loader::builder(source.clone())
                            .batch_size(batch)
                            .decode_threads(threads)
                            .prefetch(prefetch)
                            .shuffle_buffer(shuffle)
                            .dtype(dtype_of(dtype))
                            .image_size_hw(a.size[0], a.size[1])
                            .on_error(OnError::SKIP_ALL)
                            .build()?;
                        procinfo::reset_peak_rss();
                        let sampler = AnonSampler::start();
                        for b in loader.epoch(1) {
                            std::hint::black_box(b?.as_bytes().first().copied());
                        }
                        let anon = sampler.stop();
                        let s = loader.stats();
                        let p = SweepPoint {
                            batch,
                            threads,
                            prefetch,
                            shuffle,
                            dtype,
                            images_per_sec: s.images_per_sec(),
                            peak_rss: procinfo::peak_rss_bytes().unwrap_or(anon),
                            budget: loader.memory_budget().steady(),
                            worst_case: loader.memory_budget().worst_case(),
                        };
                        println!(
                            "{:>6} {:>7} {:>8} {:>8} {:>5} {:>10.0} {:>13.1} {:>13.1} {:>13.1}",
                            p.batch,
                            p.threads,
                            p.prefetch,
                            p.shuffle,
                            dtype_of(p.dtype).name(),
                            p.images_per_sec,
                            mb(p.peak_rss),
                            mb(p.budget),
                            mb(p.worst_case)
                        );
                        points.push(p);
                    }
                }
            }
        }
    }
    std::fs::write(&a.sweep_svg, sweep_svg(&points))?;
    println!(
        "(steady: the memory budget without the large-decode reserve, which the worst case adds; plot written to {})",
        a.sweep_svg.display()
    );
    Ok(())
}

/// The loader state in a `--state-out` file: one short line (a larger file is not one).
fn read_state(path: &std::path::Path) -> Result<LoaderState, AnyError> {
    use std::io::Read;
    let named = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(named)?;
    if text.len() >= 4096 {
        return Err(format!(
            "{}: not a loader state (a state is one short line)",
            path.display()
        )
        .into());
    }
    Ok(text.trim().parse()?)
}

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&t[..t.len() - 1], 10),
        Some(b'M') => (&t[..t.len() - 1], 20),
        Some(b'G') => (&t[..t.len() - 1], 30),
        Some(b'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{text}` is not a byte count such as 8G, 512M or 1000000"))
}

/// What an output option writes.
#[derive(Clone, Copy)]
enum Output {
    /// `--indices-out`: one sample index a line.
    Indices,
    /// `--state-out`: one loader state line.
    State,
    /// `--sweep-svg`: the sweep's plot.
    Svg,
}

/// Refuses to let an output option replace a file it did not write: `path` may be missing,
/// empty, a stream (a pipe, a character device such as `/dev/null`), or a regular file holding
/// what that option writes. Anything else (an image, a shard, a list) is left alone.
fn replaceable(path: &std::path::Path, kind: Output) -> Result<(), AnyError> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let t = meta.file_type();
    if t.is_fifo() || t.is_char_device() || (t.is_file() && meta.len() == 0) {
        return Ok(());
    }
    let (option, what) = match kind {
        Output::Indices => ("--indices-out", "one sample index a line"),
        Output::State => ("--state-out", "a loader state"),
        Output::Svg => ("--sweep-svg", "a sweep plot"),
    };
    let refuse = || -> AnyError {
        format!(
            "{}: exists and does not hold what {option} writes ({what}); imagefeed does not \
             replace files it did not write: remove it or choose another file",
            path.display()
        )
        .into()
    };
    if !t.is_file() {
        return Err(refuse());
    }
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ours = match kind {
        Output::Indices => {
            // Read through, stopping at the first byte an index file cannot hold.
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) if buf[..n].iter().all(|b| b.is_ascii_digit() || *b == b'\n') => {}
                    Ok(_) => break false,
                    Err(e) => return Err(format!("{}: {e}", path.display()).into()),
                }
            }
        }
        Output::State => read_state(path).is_ok(),
        Output::Svg => {
            let mut head = Vec::new();
            file.take(1024)
                .read_to_end(&mut head)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            String::from_utf8_lossy(&head).contains("imagefeed bench --sweep")
        }
    };
    if ours {
        Ok(())
    } else {
        Err(refuse())
    }
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A scatter plot of images/s (y) against peak RSS (x), one colour per dtype, written by hand:
/// a few hundred lines of SVG need no plotting crate.
fn sweep_svg(points: &[SweepPoint]) -> String {
    let (w, h, m) = (900.0, 560.0, 70.0);
    let max_x = points.iter().map(|p| mb(p.peak_rss)).fold(1.0, f64::max) * 1.05;
    let max_y = points.iter().map(|p| p.images_per_sec).fold(1.0, f64::max) * 1.05;
    let x = |v: f64| m + v / max_x * (w - 2.0 * m);
    let y = |v: f64| h - m - v / max_y * (h - 2.0 * m);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">imagefeed bench --sweep: images/s against peak RSS</text>\n<line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak RSS (MB)</text>\n<text x=\"18\" y=\"{}\" transform=\"rotate(-90 18 {})\" text-anchor=\"middle\">images/s</text>\n",
        w / 2.0, h - m, w - m, h - m, h - m, w / 2.0, h - 20.0, h / 2.0, h / 2.0
    );
    for k in 0..=5 {
        let (vx, vy) = (max_x * f64::from(k) / 5.0, max_y * f64::from(k) / 5.0);
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{vx:.0}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{vy:.0}</text>\n",
            x(vx), h - m + 16.0, m - 6.0, y(vy) + 4.0
        );
    }
    let colour = |d: DtypeArg| match d {
        DtypeArg::F32 => "#d62728",
        DtypeArg::F16 | DtypeArg::Bf16 => "#1f77b4",
        DtypeArg::U8 => "#2ca02c",
    };
    for p in points {
        s += &format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.7\"><title>batch {} threads {} prefetch {} shuffle {} {}: {:.0} images/s, {:.1} MB</title></circle>\n",
            x(mb(p.peak_rss)), y(p.images_per_sec), 3 + p.batch / 32, colour(p.dtype),
            p.batch, p.threads, p.prefetch, p.shuffle, dtype_of(p.dtype).name(), p.images_per_sec, mb(p.peak_rss)
        );
    }
    for (i, (name, d)) in [
        ("f32", DtypeArg::F32),
        ("f16", DtypeArg::F16),
        ("u8", DtypeArg::U8),
    ]
    .iter()
    .enumerate()
    {
        let ly = m + 18.0 * i as f64;
        s += &format!(
            "<circle cx=\"{}\" cy=\"{ly}\" r=\"5\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{name}</text>\n",
            w - m - 60.0, colour(*d), w - m - 50.0, ly + 4.0
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\">circle size: batch size</text>\n</svg>\n",
        w - m - 160.0,
        m + 60.0
    );
    s
}
