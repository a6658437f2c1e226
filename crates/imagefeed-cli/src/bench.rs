//! `imagefeed bench` (one run of the loader, epoch by epoch, with its report) and the default benchmark `cargo run --release` runs.

use std::io::Write as _;

use clap::Parser;
use imagefeed::{
    Device, JpegDecoder, Layout, Loader, LoaderBuilder, LoaderState, OnError, ShardPadding, Source,
    Transform,
};
use imagefeed_testkit::procinfo;

use crate::args::{
    dtype_of, parse_device, BenchArgs, LayoutArg, OnErrorArg, PaddingArg, TransformArg,
};
use crate::outputs::{read_state, replaceable, same_file, Output};
use crate::{mb, AnyError};

/// `cargo run --release` with no arguments: a corpus from the embedded photographs, then the
/// loader with default settings and the decode floor on it.
pub(crate) fn default_benchmark() -> Result<(), AnyError> {
    let count = 2000;
    let dir = tempfile::tempdir()?;
    eprintln!(
        "imagefeed: writing a {count}-image corpus from the embedded photographs to {} ...",
        dir.path().display()
    );
    let summary = imagefeed_testkit::corpus::generate(dir.path(), count, 0)?;
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
    let f = imagefeed::tools::floor::decode_floor(
        &source,
        threads,
        true,
        160,
        JpegDecoder::Auto,
        None,
    )?;
    println!(
        "decode floor (decode only, DCT-scaled, {threads} threads): {:.0} images/s",
        f.images_per_sec
    );
    println!("reproduce: imagefeed corpus DIR --count {count} && imagefeed bench DIR/files.txt --epochs 2 && imagefeed floor DIR/files.txt");
    Ok(())
}

/// `--transform` and its parameters. A parameter of another transform than the one chosen gets
/// a warning on stderr: `--crop-scale` with the default stretch measures something else than the
/// user may think (a script passing the same options to every transform still runs).
pub(crate) fn transform_from_args(a: &BenchArgs) -> Result<Transform, AnyError> {
    let transform = match a.transform {
        TransformArg::Stretch => Transform::Stretch,
        TransformArg::ShorterSideCenterCrop => Transform::ShorterSideCenterCrop,
        TransformArg::CenterCrop => {
            let mut t = Transform::center_crop();
            if let (Transform::CenterCrop { crop_fraction }, Some(f)) = (&mut t, a.crop_fraction) {
                *crop_fraction = f;
            }
            t
        }
        TransformArg::RandomResizedCrop => {
            let mut t = Transform::random_resized_crop();
            if let Transform::RandomResizedCrop { scale, ratio } = &mut t {
                if let Some(&[lo, hi]) = a.crop_scale.as_deref() {
                    *scale = (lo, hi);
                }
                if let Some(&[lo, hi]) = a.crop_ratio.as_deref() {
                    *ratio = (lo, hi);
                }
            }
            t
        }
    };
    let rrc = matches!(a.transform, TransformArg::RandomResizedCrop);
    let center = matches!(a.transform, TransformArg::CenterCrop);
    for (given, option, needs, applies) in [
        (
            a.crop_scale.is_some(),
            "--crop-scale",
            "random-resized-crop",
            rrc,
        ),
        (
            a.crop_ratio.is_some(),
            "--crop-ratio",
            "random-resized-crop",
            rrc,
        ),
        (
            a.crop_fraction.is_some(),
            "--crop-fraction",
            "center-crop",
            center,
        ),
        (
            a.cache_max_side.is_some(),
            "--cache-max-side",
            "random-resized-crop",
            rrc,
        ),
    ] {
        if given && !applies {
            eprintln!(
                "imagefeed: warning: {option} applies to --transform {needs} only; ignored \
                 (this run's transform: {})",
                transform.name()
            );
        }
    }
    if a.cache_max_side.is_some() && a.cache.is_none() && rrc {
        eprintln!(
            "imagefeed: warning: --cache-max-side applies with --cache only (it sizes the images \
             a cache records); ignored"
        );
    }
    Ok(transform)
}

/// What each sample is, which `bench` and `bench --sweep` share: its size and layout, the
/// decoder, the transform and flip, the resize filter, the JPEG warning policy, `max_pixels`
/// and the seed.
pub(crate) fn sample_settings(
    a: &BenchArgs,
    transform: Transform,
    builder: LoaderBuilder,
) -> LoaderBuilder {
    let mut builder = builder
        .image_size_hw(a.size[0], a.size[1])
        .layout(match a.layout {
            LayoutArg::Nhwc => Layout::Nhwc,
            LayoutArg::Nchw => Layout::Nchw,
        })
        .seed(a.seed)
        .jpeg_decoder(a.decoder.get())
        .resize_filter(a.filter.get())
        .transform(transform)
        .accept_jpeg_warnings(a.accept_jpeg_warnings);
    if let Some(p) = a.max_pixels {
        builder = builder.max_pixels(p);
    }
    if let Some(p) = a.flip {
        builder = builder.flip_horizontal(p);
    }
    builder
}

/// The source at `path`, with --split, --image-column and --label-column.
pub(crate) fn open_path(path: &std::path::Path, a: &BenchArgs) -> Result<Source, AnyError> {
    let mut options = imagefeed::OpenOptions::default();
    if let Some(column) = &a.image_column {
        options.parquet.image_column = column.clone();
    }
    if a.label_column.is_some() {
        options.parquet.label_column = a.label_column.clone();
    }
    Ok(match &a.split {
        Some(split) => Source::open_split_with(path, split, options)?,
        None => Source::open_with(path, options)?,
    })
}

/// The source a bench runs over: the one named, or the mixture of --mix.
pub(crate) fn open_source(a: &BenchArgs) -> Result<Source, AnyError> {
    use crate::args::{ExhaustedArg, MixEndArg, MixLabelsArg};
    if a.mix.is_empty() {
        let path = a
            .source
            .as_ref()
            .ok_or("name a source (or --mix WEIGHT SOURCE)")?;
        return open_path(path, a);
    }
    let mut mix = imagefeed::Mix::new()
        .ends_with(match a.mix_end {
            MixEndArg::First => imagefeed::MixEnd::First,
            MixEndArg::Last => imagefeed::MixEnd::Last,
        })
        .when_exhausted(match a.exhausted {
            ExhaustedArg::Repeat => imagefeed::Exhausted::Repeat,
            ExhaustedArg::Drop => imagefeed::Exhausted::Drop,
        })
        .labels(match a.mix_labels {
            MixLabelsArg::PerSource => imagefeed::MixLabels::PerSource,
            MixLabelsArg::Offset => imagefeed::MixLabels::Offset,
        });
    for pair in a.mix.chunks(2) {
        let weight: f64 = pair[0]
            .parse()
            .map_err(|_| format!("--mix {} {}: the weight is not a number", pair[0], pair[1]))?;
        mix = mix.source(open_path(std::path::Path::new(&pair[1]), a)?, weight);
    }
    if let Some(n) = a.epoch_size {
        mix = mix.epoch_size(n);
    }
    Ok(mix.build()?)
}

pub(crate) fn bench(a: &BenchArgs) -> Result<Vec<serde_json::Value>, AnyError> {
    check_outputs(a)?;
    let opening = std::time::Instant::now();
    let source = open_source(a)?;
    let open_seconds = opening.elapsed().as_secs_f64();
    let (loader, transform_name) = build_loader(a, source)?;
    let budget = loader.memory_budget();
    if !a.json {
        eprintln!(
            "imagefeed: {} samples, {} decode threads, batch {}, {}, {} resize/normalize kernels, memory budget {budget}",
            loader.len(),
            loader.decode_threads(),
            a.batch_size,
            imagefeed::decoder_info(),
            imagefeed::tools::bench::simd_kernels()
        );
    }
    // The state records the source's and the ordering settings' fingerprints: the loader
    // refuses it if either differs. Several states must describe one step.
    let resume: Option<LoaderState> = if a.resume_from.is_empty() {
        None
    } else {
        let states = a
            .resume_from
            .iter()
            .map(|p| read_state(p))
            .collect::<Result<Vec<_>, _>>()?;
        Some(LoaderState::agree(&states)?)
    };
    let create = |p: &std::path::PathBuf| -> Result<_, AnyError> {
        Ok(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        ))
    };
    let mut indices_out = a.indices_out.as_ref().map(create).transpose()?;
    let mut fields_out = a.fields_out.as_ref().map(create).transpose()?;
    let first_epoch = resume.map_or(0, |s| s.epoch);
    // A resumed epoch is always finished, whatever --epochs says.
    let count = match resume {
        Some(_) => a.epochs.saturating_sub(first_epoch).max(1),
        None => a.epochs,
    };
    let mut reports = Vec::new();
    for epoch in (0..count).map(|i| first_epoch + i) {
        let (report, stopped) = run_epoch(
            a,
            &loader,
            epoch,
            resume,
            Outputs {
                indices: indices_out.as_mut(),
                fields: fields_out.as_mut(),
            },
        )?;
        let mut report = report;
        if let Some(r) = report.as_object_mut() {
            r.insert("open_seconds".into(), open_seconds.into());
            r.insert("memory_budget_bytes".into(), budget.steady().into());
            r.insert(
                "memory_budget_worst_case_bytes".into(),
                budget.worst_case().into(),
            );
            r.insert("transform".into(), transform_name.into());
        }
        if a.json {
            println!("{report}");
        } else {
            print_summary(a, &loader, &report, budget);
        }
        reports.push(report);
        if stopped {
            break;
        }
    }
    if let Some(out) = indices_out.as_mut() {
        out.flush()?;
    }
    if let Some(out) = fields_out.as_mut() {
        out.flush()?;
    }
    Ok(reports)
}

/// Refuses outputs that would replace an input, or a file that option did not write.
fn check_outputs(a: &BenchArgs) -> Result<(), AnyError> {
    // Outputs never replace an input: `--indices-out files.txt` would truncate the list.
    let mixed: Vec<std::path::PathBuf> = a.mix.chunks(2).map(|p| p[1].clone().into()).collect();
    let inputs: Vec<&std::path::PathBuf> = [a.source.as_ref(), a.cache.as_ref()]
        .into_iter()
        .flatten()
        .chain(&mixed)
        .chain(&a.resume_from)
        .collect();
    let outputs = [
        a.indices_out.as_ref(),
        a.state_out.as_ref(),
        a.fields_out.as_ref(),
    ];
    for out in outputs.into_iter().flatten() {
        if let Some(input) = inputs.iter().find(|i| same_file(out, i)) {
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
    if let Some(p) = &a.fields_out {
        replaceable(p, Output::Fields)?;
    }
    if let Some(p) = &a.state_out {
        replaceable(p, Output::State)?;
    }
    Ok(())
}

/// The loader the arguments describe over `source`, and its transform's name.
fn build_loader(a: &BenchArgs, source: Source) -> Result<(Loader, &'static str), AnyError> {
    if a.max_skipped.is_some() && matches!(a.on_error, OnErrorArg::Fail) {
        eprintln!(
            "imagefeed: warning: --max-skipped applies with --on-error skip only; ignored (with \
             fail, the first bad sample ends the run)"
        );
    }
    let on_error = match a.on_error {
        OnErrorArg::Fail => OnError::Fail,
        OnErrorArg::Skip => OnError::Skip {
            max: a.max_skipped.unwrap_or(u64::MAX),
        },
    };
    let transform = transform_from_args(a)?;
    let transform_name = transform.name();
    let mut builder = sample_settings(a, transform, Loader::builder(source))
        .batch_size(a.batch_size)
        .decode_threads(a.threads)
        .shuffle(!a.no_shuffle)
        .prefetch(a.prefetch)
        .readahead(a.readahead)
        .autotune(a.autotune)
        .dtype(dtype_of(a.dtype))
        .on_error(on_error)
        .device(parse_device(&a.device)?);
    if let Some(n) = a.shuffle_buffer {
        builder = builder.shuffle_buffer(n);
    }
    builder = builder.fields(a.fields.iter().map(String::as_str));
    if let Some(l) = a.field_limit {
        builder = builder.field_limit(usize::try_from(l).unwrap_or(usize::MAX));
    }
    if let Some(l) = a.host_memory_limit {
        builder = builder.host_memory_limit(l);
    }
    if let Some(c) = &a.cache {
        builder = builder.cache(c);
    }
    if let (Some(s), true) = (a.cache_max_side, transform.is_random() && a.cache.is_some()) {
        // Where it does not apply, `transform_from_args` has said so once already.
        builder = builder.cache_max_side(s);
    }
    // The rank: --rank and --world-size, else the launcher's variables (torchrun, Open MPI,
    // PMI, Slurm), said on stderr so that a job's log shows which rank read what.
    builder = match (a.rank, a.world_size) {
        (Some(r), Some(w)) => builder.shard(r, w),
        (given_rank, given_world) => {
            let launch = imagefeed::Launch::from_env()?;
            let (r, w) = (
                given_rank.unwrap_or(launch.rank),
                given_world.unwrap_or(launch.world_size),
            );
            if launch.launcher != imagefeed::Launcher::None {
                if (r, w) == (launch.rank, launch.world_size) {
                    eprintln!("imagefeed: {launch}");
                } else {
                    eprintln!("imagefeed: rank {r} of {w} (--rank/--world-size over {launch})");
                }
            }
            builder.shard(r, w)
        }
    };
    builder = builder.shard_padding(match a.shard_padding {
        PaddingArg::EqualBatches => ShardPadding::EqualBatches,
        PaddingArg::Repeat => ShardPadding::Repeat,
        PaddingArg::Drop => ShardPadding::Drop,
    });
    Ok((builder.build()?, transform_name))
}

/// Where an epoch writes its delivered indices and fields, if asked.
struct Outputs<'a> {
    indices: Option<&'a mut std::io::BufWriter<std::fs::File>>,
    fields: Option<&'a mut std::io::BufWriter<std::fs::File>>,
}

/// Runs epoch `epoch` (resuming `resume` where it is that epoch's state): its report, and
/// whether `--max-batches` stopped it.
fn run_epoch(
    a: &BenchArgs,
    loader: &Loader,
    epoch: u64,
    resume: Option<LoaderState>,
    mut outputs: Outputs<'_>,
) -> Result<(serde_json::Value, bool), AnyError> {
    {
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
        let mut stopped = false;
        let mut field_sizes = crate::fields::Sizes::new(&a.fields);
        let mut device_wait = std::time::Duration::ZERO;
        while let Some(batch) = batches.next() {
            let batch = batch.inspect_err(|_| {
                crate::EPOCH_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
            })?;
            // A GPU batch counts once it is in device memory.
            device_wait += imagefeed::tools::gpu::wait_ready(&batch)?;
            if let Some(out) = outputs.indices.as_mut() {
                let mixture = !a.mix.is_empty();
                for ((i, &copy), s) in batch
                    .indices()
                    .iter()
                    .zip(batch.padded())
                    .zip(batch.sources())
                {
                    match (mixture, copy) {
                        (true, true) => writeln!(out, "{s} {i} padded")?,
                        (true, false) => writeln!(out, "{s} {i}")?,
                        (false, true) => writeln!(out, "{i} padded")?,
                        (false, false) => writeln!(out, "{i}")?,
                    }
                }
            }
            field_sizes.add(&batch);
            if let Some(out) = outputs.fields.as_mut() {
                crate::fields::write_lines(out, &batch)?;
            }
            delivered += 1;
            if a.max_batches == Some(delivered) {
                let state = batches.state();
                if let Some(p) = &a.state_out {
                    std::fs::write(p, format!("{state}\n"))
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                }
                eprintln!("imagefeed: stopped after {delivered} batches; state: {state}");
                stopped = true;
                break;
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
            "stopped": stopped,
            "images": s.images,
            "skipped": s.skipped,
            "padded": s.padded,
            "seconds": s.seconds,
            "images_per_sec": s.images_per_sec(),
            "peak_rss_bytes": peak,
            "peak_anon_rss_bytes": peak_anon,
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
            "kernels": imagefeed::tools::bench::simd_kernels(),
            "decoder": imagefeed::decoder_info().to_string(),
        });
        if !a.fields.is_empty() {
            if let Some(r) = report.as_object_mut() {
                r.insert("fields".into(), field_sizes.to_json());
            }
        }
        if let Device::Cuda(n) = loader.device() {
            gpu_report(&mut report, n, &s, device_wait, a.json);
        }
        Ok((report, stopped))
    }
}

/// Prints an epoch's summary without `--json`: the library's, and the memory figures. The
/// loader logged each skipped file (one line each) as it happened, so only their count is
/// repeated here.
fn print_summary(
    a: &BenchArgs,
    loader: &Loader,
    report: &serde_json::Value,
    budget: imagefeed::MemoryBudget,
) {
    let s = loader.stats();
    println!("{s}");
    let cache_note = if a.cache.is_some() && !s.from_cache && !s.wrote_cache {
        "; the cache was not used"
    } else {
        ""
    };
    let bytes = |k: &str| report[k].as_u64().unwrap_or(0);
    println!(
        "  memory: peak RSS {:.1} MB (anonymous {:.1} MB), steady budget {:.1} MB (worst case {:.1} MB){cache_note}",
        mb(bytes("peak_rss_bytes")),
        mb(bytes("peak_anon_rss_bytes")),
        mb(budget.steady()),
        mb(budget.worst_case()),
    );
}

/// Adds the GPU figures of an epoch to its report (and prints them without `--json`): images/s
/// into GPU memory, host-to-device GB/s while copying, and the share of the epoch the consumer
/// waited for batches (in `next()` or for a batch's copy to finish).
pub(crate) fn gpu_report(
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

/// Samples the process's anonymous RSS (heap and stacks, not mapped cache files) every 5 ms:
/// the kernel keeps no peak for it.
pub(crate) struct AnonSampler {
    pub(crate) stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) handle: Option<std::thread::JoinHandle<u64>>,
}

impl AnonSampler {
    pub(crate) fn start() -> Self {
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

    pub(crate) fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or(0)
    }
}
