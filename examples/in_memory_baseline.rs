//! What imagefeed replaces: decode every image, resize it and stack everything in one f32
//! array in RAM before training. Memory grows with the dataset (5,000 images at 160×160 are
//! 1.5 GB of f32 after the decoding peaks), and a large dataset does not fit at all.
//!
//! `cargo run --release --example in_memory_baseline -- LIST_OR_DIR [THREADS]`
//! prints images/s and peak RSS, to compare with `imagefeed bench LIST_OR_DIR`.

use std::time::Instant;

use image::imageops::FilterType;
use rayon::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: in_memory_baseline LIST_OR_DIR [THREADS]")?;
    let threads: usize = args.next().map(|t| t.parse()).transpose()?.unwrap_or(0);
    let source = imagefeed::Source::open(&path)?;
    let n = source.len();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let start = Instant::now();
    // The naive approach: decode all (the `image` crate), resize, then stack in one array.
    let decoded: Vec<Option<Vec<f32>>> = pool.install(|| {
        (0..n)
            .into_par_iter()
            .map(|i| {
                let p = source.path(i)?;
                let img = image::open(&p).ok()?.to_rgb8();
                let small = image::imageops::resize(&img, 160, 160, FilterType::Triangle);
                Some(
                    small
                        .into_raw()
                        .into_iter()
                        .map(|v| f32::from(v) / 255.0)
                        .collect(),
                )
            })
            .collect()
    });
    let mut all: Vec<f32> = Vec::with_capacity(n * 160 * 160 * 3);
    let mut labels = Vec::with_capacity(n);
    for (i, d) in decoded.into_iter().enumerate() {
        if let Some(px) = d {
            all.extend_from_slice(&px);
            labels.push(source.label(i).unwrap_or(0));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = imagefeed_testkit::procinfo::peak_rss_bytes().unwrap_or(0);
    println!(
        "in-memory baseline: {} images, {secs:.2} s, {:.0} images/s, array {:.1} MB, peak RSS {:.1} MB",
        labels.len(),
        labels.len() as f64 / secs,
        (all.len() * 4) as f64 / 1e6,
        peak as f64 / 1e6
    );
    std::hint::black_box((&all, &labels));
    Ok(())
}
