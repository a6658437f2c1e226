//! The `imagefeed` command line: benchmark the loader, write a reproducible corpus, measure the
//! decode floor. With no arguments it benchmarks the loader on a corpus generated from the
//! photographs embedded in the crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use imagefeed::{
    procinfo, Device, Dtype, JpegDecoder, Layout, Loader, LoaderState, OnError, ShardPadding,
    Source,
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
    /// Benchmark the loader on a file list or a folder of class folders.
    Bench(BenchArgs),
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
    /// Bounded shuffle buffer, in samples (0: off; the permutation already shuffles).
    #[arg(long, default_value_t = 0)]
    shuffle_buffer: usize,
    /// Ready batches queued ahead of the consumer.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
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
    /// Images over this many pixels are refused.
    #[arg(long)]
    max_pixels: Option<u64>,
    /// Cache decoded samples in this file (written by the first epoch, read by later ones).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// This process's rank (default: $RANK, else 0).
    #[arg(long)]
    rank: Option<usize>,
    /// Number of ranks sharing each epoch (default: $WORLD_SIZE, else 1).
    #[arg(long)]
    world_size: Option<usize>,
    /// How ranks get equal batch counts: equal-batches (disjoint, complete), repeat or drop.
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

#[derive(Clone, Copy, ValueEnum)]
enum PaddingArg {
    EqualBatches,
    Repeat,
    Drop,
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

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        None => default_benchmark(),
        Some(Command::Bench(args)) => bench(&args).map(|_| ()),
        Some(Command::Corpus {
            out_dir,
            count,
            seed,
        }) => corpus(&out_dir, count, seed),
        Some(Command::Floor {
            source,
            threads,
            size,
            limit,
            decoder,
            json,
        }) => floor(&source, threads, size, limit, decoder.get(), json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("imagefeed: error: {e}");
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

fn corpus(out_dir: &std::path::Path, count: usize, seed: u64) -> Result<(), AnyError> {
    let t = Instant::now();
    let s = imagefeed::corpus::generate(out_dir, count, seed)?;
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

fn floor(
    source: &std::path::Path,
    threads: usize,
    size: u32,
    limit: Option<usize>,
    decoder: JpegDecoder,
    json: bool,
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
    Ok(())
}

fn bench(a: &BenchArgs) -> Result<Vec<serde_json::Value>, AnyError> {
    let source = Source::open(&a.source)?;
    let on_error = match a.on_error {
        OnErrorArg::Fail => OnError::Fail,
        OnErrorArg::Skip => OnError::Skip {
            max: a.max_skipped.unwrap_or(u64::MAX),
        },
    };
    let mut builder = Loader::builder(source)
        .batch_size(a.batch_size)
        .decode_threads(a.threads)
        .shuffle_buffer(a.shuffle_buffer)
        .shuffle(!a.no_shuffle)
        .prefetch(a.prefetch)
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
        .device(parse_device(&a.device)?);
    if let Some(p) = a.max_pixels {
        builder = builder.max_pixels(p);
    }
    if let Some(c) = &a.cache {
        builder = builder.cache(c);
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
            "imagefeed: {} samples, {} decode threads, batch {}, memory budget {budget}",
            loader.len(),
            loader.decode_threads(),
            a.batch_size
        );
    }
    let mut indices_out = match &a.indices_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => None,
    };
    let resume: Option<LoaderState> = match &a.resume_from {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .trim()
                .parse()?,
        ),
        None => None,
    };
    let first_epoch = resume.map_or(0, |s| s.epoch);
    let mut reports = Vec::new();
    for epoch in first_epoch..first_epoch.max(a.epochs) {
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
        while let Some(batch) = batches.next() {
            let batch = batch?;
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
        let report = serde_json::json!({
            "epoch": epoch,
            "images": s.images,
            "skipped": s.skipped,
            "seconds": s.seconds,
            "images_per_sec": s.images_per_sec(),
            "peak_rss_bytes": peak,
            "peak_anon_rss_bytes": peak_anon,
            "memory_budget_bytes": budget.total(),
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
        });
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
                "epoch {epoch}: {} images, {} skipped, {:.2} s, {:.0} images/s, peak RSS {:.1} MB (anonymous {:.1} MB), memory budget {:.1} MB, consumer waited {:.0}% of the time{cache_note}",
                s.images,
                s.skipped,
                s.seconds,
                s.images_per_sec(),
                mb(peak),
                mb(peak_anon),
                mb(budget.total()),
                100.0 * s.consumer_wait_fraction()
            );
            for (path, reason) in s.skipped_samples.iter().take(20) {
                eprintln!("  skipped {}: {reason}", path.display());
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
                    std::thread::sleep(std::time::Duration::from_millis(5));
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
