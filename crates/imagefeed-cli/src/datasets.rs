//! `imagefeed corpus` and `imagefeed shards`: the commands that write a dataset.

use std::time::Instant;

use imagefeed::Source;

use crate::{mb, AnyError};

pub(crate) fn corpus(
    out_dir: &std::path::Path,
    count: usize,
    seed: u64,
    long_side: Option<(u32, u32)>,
) -> Result<(), AnyError> {
    let t = Instant::now();
    let s = imagefeed::tools::corpus::generate_sized(out_dir, count, seed, long_side)?;
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

pub(crate) fn shards(
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
