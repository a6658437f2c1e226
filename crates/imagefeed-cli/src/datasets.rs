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

/// `imagefeed index`: writes a manifest of `source`'s shards.
pub(crate) fn index(
    source: &std::path::Path,
    out: Option<&std::path::Path>,
) -> Result<(), AnyError> {
    let start = Instant::now();
    let opened = Source::open(source)?;
    let opening = start.elapsed().as_secs_f64();
    // By default into the dataset's folder or prefix: a shard's folder, or the URL's prefix
    // when it names one object.
    let text = source.to_string_lossy();
    let default = if text.contains("://") {
        let named_object = text
            .rsplit('/')
            .next()
            .is_some_and(|n| n.contains('.') && !text.ends_with('/'));
        if named_object {
            std::path::PathBuf::from(text.rsplit_once('/').map_or(&*text, |(p, _)| p))
        } else {
            source.to_path_buf()
        }
    } else if source.is_dir() {
        source.to_path_buf()
    } else {
        source
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf()
    };
    let written = opened.write_manifest(out.unwrap_or(&default))?;
    println!(
        "wrote {} ({} samples of {}, {:?}; opening read the shards in {opening:.1} s)",
        written.display(),
        opened.len(),
        source.display(),
        opened.kind()
    );
    Ok(())
}
