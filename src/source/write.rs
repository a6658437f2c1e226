//! Writing a source as tar shards (`imagefeed shards`): [`write_shards`] reads the source's
//! samples in order and `format/tar/write.rs` writes them.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::format::read::Step;
use crate::source::format::tar::write::{write_samples, Read, ShardsWritten};
use crate::source::Source;

/// Writes `source` as tar shards in the WebDataset layout into `out_dir` (created if
/// missing): `shard-000000.tar`, `shard-000001.tar`, … of `shard_size` samples each, and a
/// manifest of them (`imagefeed-manifest.tsv`, see [`Source::write_manifest`]). Sample
/// `i` of the source (in a seeded random order when `shuffle_seed` is given, which a shuffle
/// buffer of a few shards then mixes well; in source order otherwise) becomes the members
/// `KKKKKKKKK.jpg` (the original bytes, with the original extension) and `KKKKKKKKK.cls` (its
/// label), where `KKKKKKKKK` is `i`, zero-padded: a key always leads back to the source's
/// sample. A tar source's other members (`KEY.txt`, `KEY.json`, …) are kept as
/// `KKKKKKKKK.txt`, …; [`write_shards_with`] writes other sources' fields too. The source's
/// [class names](Source::class_names) go into `imagefeed-classes.txt` beside the shards,
/// where opening them reads them back.
///
/// Each shard is written to `NAME.partial` and renamed when complete, so a shard file is
/// never half-written. Existing shards are never overwritten: `out_dir` must not hold any
/// `shard-*.tar` file.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{write_shards, Source};
/// let source = Source::from_dir("testdata/classes")?;
/// let out = tempfile::tempdir().unwrap();
/// let written = write_shards(&source, out.path(), 4, Some(0))?;
/// assert_eq!(written.samples as usize, source.len());
/// let shards = Source::open(out.path())?;
/// assert_eq!(shards.len(), source.len());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `shard_size` of 0,
/// [`ErrorKind::Source`](crate::ErrorKind::Source) if `out_dir` already holds shards, and the
/// error naming the sample or shard file when a sample cannot be read or a shard written (the
/// shard being written is removed; the complete ones stay).
pub fn write_shards(
    source: &Source,
    out_dir: impl AsRef<Path>,
    shard_size: usize,
    shuffle_seed: Option<u64>,
) -> Result<ShardsWritten, Error> {
    write_shards_with(source, out_dir, shard_size, shuffle_seed, &[])
}

/// [`write_shards`], with each sample's `fields` (a parquet column, a TFRecord feature, a TSV
/// list's column; see [`Field`](crate::Field)) written as the member `KKKKKKKKK.NAME`: text
/// and bytes as they are, numbers as text (`1 2 3`). A required field a sample lacks is an
/// error naming it; an [optional](crate::Field::optional) one is left out.
///
/// # Errors
/// As [`write_shards`], and [`ErrorKind::Field`](crate::ErrorKind::Field) naming the sample
/// and the field.
pub fn write_shards_with(
    source: &Source,
    out_dir: impl AsRef<Path>,
    shard_size: usize,
    shuffle_seed: Option<u64>,
    fields: &[crate::fields::Field],
) -> Result<ShardsWritten, Error> {
    let out_dir = out_dir.as_ref();
    let specs = crate::fields::FieldSpecs::new(fields, crate::fields::MAX_FIELD_LIMIT);
    specs.validate()?;
    source.check_fields(&specs)?;
    if shard_size == 0 {
        return Err(Error::config("shard_size", "must be at least 1"));
    }
    let n = source.len();
    let order: Vec<u32> = match shuffle_seed {
        Some(seed) => crate::rng::permutation(
            n as u32,
            &mut crate::rng::Rng::for_stage(seed, 0, crate::rng::STAGE_PERMUTATION),
        ),
        None => (0..n as u32).collect(),
    };
    let limit = 256u64 << 20;
    // One reader for the whole run: its shard tables are read once, not once a sample (the
    // tables of 64 shards at most are kept: shuffled, samples come from every shard).
    let mut reader = source.backing.reader(&source.index, 64 * 1000, &specs);
    let mut read = |i: usize| -> Result<Read, Error> {
        let Some(r) = reader.as_mut() else {
            let (sample, name) = source.read_sample_with(i, limit, &specs)?;
            return Ok((sample, name, Vec::new()));
        };
        let mut name = PathBuf::new();
        let sample = match r.read(i as u32, &mut name, limit) {
            Step::Done(s) => s?,
            #[cfg(feature = "remote")]
            Step::Pending(f) => match r.store() {
                Some((store, _)) => store.block_on(f)?,
                None => return Err(Error::io(&name, std::io::Error::other("no store"))),
            },
        };
        let others = r.other_members(i as u32)?;
        Ok((sample, name, others))
    };
    write_samples(
        out_dir,
        &order,
        shard_size,
        &mut read,
        &specs,
        source.class_names(),
    )
}
