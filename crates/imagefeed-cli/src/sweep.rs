//! `imagefeed bench --sweep`: the grid of settings, a table of images/s against peak RSS, and its plot.

use imagefeed::{Dtype, Loader, OnError, Source};
use imagefeed_testkit::procinfo;

use crate::args::{dtype_of, BenchArgs, DtypeArg};
use crate::bench::{sample_settings, transform_from_args, AnonSampler};
use crate::outputs::{replaceable, same_file, Output};
use crate::plot::{sweep_svg, SweepPoint};
use crate::{mb, AnyError};

/// `bench --sweep`: the grid, a table on stdout and an SVG of images/s against peak RSS.
pub(crate) fn sweep(a: &BenchArgs) -> Result<(), AnyError> {
    // The plot replaces only an earlier plot (or an empty file), never an input or a file of
    // the user's: checked before the sweep runs.
    let named = a.source.clone().unwrap_or_default();
    if same_file(&a.sweep_svg, &named) {
        return Err(format!(
            "{}: is also an input ({}); choose another --sweep-svg",
            a.sweep_svg.display(),
            named.display()
        )
        .into());
    }
    replaceable(&a.sweep_svg, Output::Svg)?;
    // The transform's options are checked (and warned about) before the table starts.
    let transform = transform_from_args(a)?;
    eprintln!(
        "imagefeed: the sweep sets batch size, threads, prefetch, shuffle buffer and dtype, runs \
         one uncached epoch a point on the CPU, and takes the sample options (size, layout, \
         decoder, filter, transform, flip, JPEG warnings, max pixels, seed); other run options \
         are not used"
    );
    let full = crate::bench::open_source(a)?;
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
                        let loader = sample_settings(a, transform, Loader::builder(source.clone()))
                            .batch_size(batch)
                            .decode_threads(threads)
                            .prefetch(prefetch)
                            .shuffle_buffer(shuffle)
                            .dtype(dtype_of(dtype))
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
