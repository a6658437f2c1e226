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
    let s = imagefeed_testkit::corpus::generate_sized(out_dir, count, seed, long_side)?;
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
    fields: &[String],
) -> Result<(), AnyError> {
    let source = Source::open(source)?;
    let start = Instant::now();
    let fields: Vec<imagefeed::Field> = fields
        .iter()
        .map(|f| imagefeed::Field::new(f.as_str()).optional())
        .collect();
    let written = imagefeed::write_shards_with(&source, out_dir, shard_size, seed, &fields)?;
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

/// `imagefeed shuffle-quality`: how well the loader's order mixes `source` (its layout, with
/// labels spread at random and sorted), against a full permutation and a shuffle buffer.
pub(crate) fn shuffle_quality(
    source: &std::path::Path,
    q: &crate::QualityArgs,
) -> Result<(), AnyError> {
    let opened = Source::open(source)?;
    let mut builder = imagefeed::Loader::builder(opened)
        .batch_size(q.batch_size)
        .seed(q.seed);
    if let Some(b) = q.shuffle_buffer {
        builder = builder.shuffle_buffer(b);
    }
    let loader = builder.build()?;
    let rows = imagefeed::tools::shuffle::measure(&loader, q.classes, q.batch_size, q.buffer);
    if !q.json {
        println!(
            "{} samples, batches of {}, {} classes; label distance: a batch's labels from the \
             source's (total variation, mean); position correlation: with the source's order; \
             epoch displacement: a sample's move between two epochs, as a share of the epoch; \
             memory: what the order holds while it mixes (the loader's: the sample tables of a \
             block's shards; a buffer's: its samples' encoded bytes)",
            loader.len(),
            q.batch_size,
            q.classes
        );
        println!(
            "{:<14} {:<18} {:>14} {:>17} {:>20} {:>18} {:>10}",
            "labels",
            "order",
            "label distance",
            "classes a batch",
            "position correlation",
            "epoch displacement",
            "memory MB"
        );
    }
    for r in rows {
        if q.json {
            println!(
                "{}",
                serde_json::json!({
                    "labels": r.labels,
                    "order": r.order,
                    "samples": loader.len(),
                    "batch_size": q.batch_size,
                    "classes": q.classes,
                    "label_distance": r.label_distance,
                    "classes_per_batch": r.classes_per_batch,
                    "position_correlation": r.position_correlation,
                    "epoch_displacement": r.epoch_displacement,
                    "memory_bytes": r.memory_bytes,
                })
            );
        } else {
            println!(
                "{:<14} {:<18} {:>14.3} {:>17.1} {:>20.3} {:>18.3} {:>10.1}",
                r.labels,
                r.order,
                r.label_distance,
                r.classes_per_batch,
                r.position_correlation,
                r.epoch_displacement,
                r.memory_bytes as f64 / 1e6
            );
        }
    }
    Ok(())
}
