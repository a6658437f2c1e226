//! Mixtures: several sources drawn from in set proportions ([`Mix`], [`Source::mix`]).
//!
//! ## What an epoch of a mixture is
//!
//! Each source is an endless stream of its samples: its samples in a seeded order (its own
//! shuffle: a permutation of a file list, blocks of shards for tar, parquet and TFRecord),
//! pass after pass, each pass shuffled anew. An epoch of the mixture takes the next `n_s`
//! samples of each source's stream, where the `n_s` are the epoch's size split in the
//! sources' proportions (largest remainders), and interleaves them: no sample of a source
//! repeats before the source has given all of its samples once, across epochs.
//!
//! The epoch's size is [`Mix::epoch_size`], or without it, as [`MixEnd`] says: the samples it
//! takes the first source to give all of its samples once ([`MixEnd::First`], the default:
//! no source repeats within an epoch), or the last ([`MixEnd::Last`]: the others repeat).
//! A source asked for more samples in an epoch than it has starts another pass
//! ([`Exhausted::Repeat`], the default) or gives no more that epoch ([`Exhausted::Drop`]: the
//! epoch is that much shorter).
//!
//! Sample `q` of epoch `e` is a pure function of the seed, `e` and `q`: the epoch's positions
//! are cut into blocks of about 64 positions (`shuffle.rs`, `MIX_BLOCK`), each holding its share of every
//! source (the cumulative counts floored), in a seeded order. Every rank of a sharded loader
//! computes the same order and takes its positions of it, so the proportions hold on every
//! rank, resume and elastic resume are exact, and nothing is held per sample.
//!
//! ## What a sample of a mixture says
//!
//! [`Batch::sources`](crate::Batch::sources) is each sample's source (numbered from 0 in the
//! order given) and [`Batch::indices`](crate::Batch::indices) its index in that source. Labels
//! are the sources' own ([`MixLabels::PerSource`], the default) or offset into one space
//! ([`MixLabels::Offset`]: source `s`'s labels follow the classes of the sources before it).

use std::path::PathBuf;
use std::sync::Arc;

use super::format::read::{Reader, Sample, Step};
use super::{Backing, FileIndex, Source, SourceKind};
use crate::error::Error;
use crate::fields::FieldSpecs;

/// When an epoch of a mixture without an [`epoch_size`](Mix::epoch_size) ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum MixEnd {
    /// When the first source has given all of its samples once (no source repeats within an
    /// epoch). The default.
    #[default]
    First,
    /// When the last source has given all of its samples once (the others repeat, or stop
    /// with [`Exhausted::Drop`]).
    Last,
}

/// What a source asked for more samples in an epoch than it holds does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum Exhausted {
    /// It starts another pass over its samples, shuffled anew. The default.
    #[default]
    Repeat,
    /// It gives no more samples that epoch: the epoch is shorter by what it lacked.
    Drop,
}

/// How a mixture labels its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum MixLabels {
    /// Each sample keeps its source's label (tell them apart by
    /// [`Batch::sources`](crate::Batch::sources)). The default.
    #[default]
    PerSource,
    /// Source `s`'s labels are offset by the classes of the sources before it
    /// ([`Source::num_classes`]), so that every class of every source has its own label.
    Offset,
}

/// A mixture of sources in set proportions: a [`Source`] whose epochs draw from each source in
/// proportion to its weight (see the module docs of `source/mix.rs`, in short: each source
/// sampled without replacement until it runs out, then repeated or dropped; an epoch of
/// [`epoch_size`](Self::epoch_size) samples, or until the first or last source runs out).
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Loader, Mix, MixLabels, Source};
/// let web = Source::from_dir("testdata/classes")?;
/// let curated = Source::from_entries([("testdata/photos/photo_0.jpg", 0)])?;
/// let mixed = Mix::new()
///     .source(web, 0.75)
///     .source(curated, 0.25)
///     .epoch_size(8)
///     .labels(MixLabels::Offset)
///     .build()?;
/// let loader = Loader::builder(mixed).batch_size(8).image_size(32).build()?;
/// let batch = loader.epoch(0).next().unwrap()?;
/// assert_eq!(batch.sources().iter().filter(|&&s| s == 1).count(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Mix {
    parts: Vec<(Source, f64)>,
    epoch_size: Option<usize>,
    end: MixEnd,
    exhausted: Exhausted,
    labels: MixLabels,
}

impl Mix {
    /// An empty mixture.
    pub fn new() -> Self {
        Mix::default()
    }

    /// Adds `source` with `weight` (finite and above 0; weights need not sum to 1). Sources
    /// are numbered from 0 in the order added.
    pub fn source(mut self, source: Source, weight: f64) -> Self {
        self.parts.push((source, weight));
        self
    }

    /// Samples an epoch delivers (before sharding).
    pub fn epoch_size(mut self, samples: usize) -> Self {
        self.epoch_size = Some(samples);
        self
    }

    /// Without an epoch size, when an epoch ends (default [`MixEnd::First`]).
    pub fn ends_with(mut self, end: MixEnd) -> Self {
        self.end = end;
        self
    }

    /// What a source asked for more samples than it holds in an epoch does (default
    /// [`Exhausted::Repeat`]).
    pub fn when_exhausted(mut self, exhausted: Exhausted) -> Self {
        self.exhausted = exhausted;
        self
    }

    /// How samples are labelled (default [`MixLabels::PerSource`]).
    pub fn labels(mut self, labels: MixLabels) -> Self {
        self.labels = labels;
        self
    }

    /// The mixture as a source.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for no source, a weight
    /// that is not finite and above 0, a mixture inside a mixture, an epoch of no sample, or
    /// sources of more than 2^32-1 samples together.
    pub fn build(self) -> Result<Source, Error> {
        if self.parts.is_empty() {
            return Err(Error::config("mix", "a mixture needs at least one source"));
        }
        let mut parts = Vec::with_capacity(self.parts.len());
        let mut offset = 0u64;
        let mut label_offset = 0u64;
        for (s, (source, weight)) in self.parts.into_iter().enumerate() {
            if !(weight.is_finite() && weight > 0.0) {
                return Err(Error::config(
                    "mix",
                    format!("source {s}'s weight is {weight}; it must be finite and above 0"),
                ));
            }
            if matches!(source.backing, Backing::Mix(_)) {
                return Err(Error::config(
                    "mix",
                    format!("source {s} is a mixture; list its sources in this one instead"),
                ));
            }
            let len = source.len() as u64;
            let classes = u64::from(source.num_classes());
            parts.push(Part {
                source: Arc::new(source),
                offset,
                len,
                weight,
                label_offset: match self.labels {
                    MixLabels::PerSource => 0,
                    MixLabels::Offset => u32::try_from(label_offset).map_err(|_| {
                        Error::config("mix", "the sources' classes are more than 2^32 together")
                    })?,
                },
            });
            offset += len;
            label_offset += classes;
        }
        if offset > u64::from(u32::MAX) {
            return Err(Error::config(
                "mix",
                format!("the sources hold {offset} samples together, over 2^32-1"),
            ));
        }
        let total: f64 = parts.iter().map(|p| p.weight).sum();
        let share = |p: &Part| p.weight / total;
        let epoch = match self.epoch_size {
            Some(n) => n as u64,
            None => {
                let runs_out = parts.iter().map(|p| p.len as f64 / share(p));
                match self.end {
                    MixEnd::First => runs_out.fold(f64::INFINITY, f64::min).floor(),
                    MixEnd::Last => runs_out.fold(0.0, f64::max).ceil(),
                }
                .min(u64::MAX as f64) as u64
            }
        };
        let mut draws = largest_remainders(epoch, &parts.iter().map(share).collect::<Vec<_>>());
        if self.exhausted == Exhausted::Drop {
            for (d, p) in draws.iter_mut().zip(&parts) {
                *d = (*d).min(p.len);
            }
        }
        let epoch_len: u64 = draws.iter().sum();
        if epoch_len == 0 {
            return Err(Error::config(
                "mix",
                "an epoch of the mixture holds no sample (an epoch size of 0?)",
            ));
        }
        let set = MixSet {
            parts,
            draws,
            epoch_len,
            labels: self.labels,
            end: self.end,
            exhausted: self.exhausted,
        };
        let mut index = FileIndex::with_origin(
            PathBuf::from(format!("<mixture of {} sources>", set.parts.len())),
            PathBuf::new(),
        );
        index.class_names = set.class_names();
        Ok(Source {
            index,
            backing: Backing::Mix(Arc::new(set)),
        })
    }
}

impl Source {
    /// A mixture of `sources` with their weights, with the defaults of [`Mix`]: an epoch ends
    /// when the first source has given all of its samples once, and labels stay each
    /// source's.
    ///
    /// # Errors
    /// As [`Mix::build`].
    pub fn mix(sources: impl IntoIterator<Item = (Source, f64)>) -> Result<Source, Error> {
        sources
            .into_iter()
            .fold(Mix::new(), |m, (s, w)| m.source(s, w))
            .build()
    }
}

/// `total` split in `shares` (summing to 1) by largest remainders: the counts sum to `total`.
fn largest_remainders(total: u64, shares: &[f64]) -> Vec<u64> {
    let ideal: Vec<f64> = shares.iter().map(|p| total as f64 * p).collect();
    let mut counts: Vec<u64> = ideal.iter().map(|x| x.floor() as u64).collect();
    let given: u64 = counts.iter().sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Largest fractional part first; ties to the earlier source.
    order.sort_by(|&a, &b| {
        let (fa, fb) = (ideal[a] - ideal[a].floor(), ideal[b] - ideal[b].floor());
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &s in order
        .iter()
        .cycle()
        .take(total.saturating_sub(given) as usize)
    {
        counts[s] += 1;
    }
    counts
}

/// One source of a mixture.
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) source: Arc<Source>,
    /// Its samples are the mixture's indices `offset..offset + len`.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) weight: f64,
    /// Added to its labels.
    pub(crate) label_offset: u32,
}

/// A mixture: its sources and how many samples an epoch draws from each.
#[derive(Debug)]
pub(crate) struct MixSet {
    pub(crate) parts: Vec<Part>,
    /// Samples an epoch draws from each source.
    pub(crate) draws: Vec<u64>,
    /// Their sum: the positions of an epoch.
    pub(crate) epoch_len: u64,
    pub(crate) labels: MixLabels,
    end: MixEnd,
    exhausted: Exhausted,
}

impl MixSet {
    /// The source holding mixture index `i`, and `i`'s index in it.
    pub(crate) fn part_of(&self, i: u64) -> (usize, u64) {
        let s = self
            .parts
            .partition_point(|p| p.offset <= i)
            .saturating_sub(1);
        (s, i - self.parts[s].offset)
    }

    /// The samples of all sources together.
    pub(crate) fn len(&self) -> u64 {
        self.parts.last().map_or(0, |p| p.offset + p.len)
    }

    pub(crate) fn num_classes(&self) -> u32 {
        match self.labels {
            MixLabels::PerSource => self
                .parts
                .iter()
                .map(|p| p.source.num_classes())
                .max()
                .unwrap_or(1),
            MixLabels::Offset => self
                .parts
                .iter()
                .map(|p| p.source.num_classes())
                .fold(0u32, u32::saturating_add),
        }
    }

    /// Class names: with offset labels, every source's in turn where each has them; with
    /// per-source labels, the sources' where they all agree.
    pub(crate) fn class_names(&self) -> Option<Vec<String>> {
        let names: Option<Vec<&[String]>> =
            self.parts.iter().map(|p| p.source.class_names()).collect();
        let names = names?;
        match self.labels {
            MixLabels::Offset => Some(names.concat()),
            MixLabels::PerSource => names
                .windows(2)
                .all(|w| w[0] == w[1])
                .then(|| names[0].to_vec()),
        }
    }

    /// Feeds `hasher` what identifies the mixture's samples and labels.
    pub(crate) fn fingerprint(&self, hasher: &mut impl std::hash::Hasher, stamps: bool) {
        use std::hash::Hash;
        hasher.write(b"mix-v1");
        hasher.write(&(self.parts.len() as u64).to_le_bytes());
        for (p, &n) in self.parts.iter().zip(&self.draws) {
            p.source.fingerprint(hasher, stamps);
            hasher.write(&p.weight.to_bits().to_le_bytes());
            hasher.write(&n.to_le_bytes());
            hasher.write(&p.label_offset.to_le_bytes());
        }
        self.end.hash(hasher);
        self.exhausted.hash(hasher);
    }

    /// A reader of the mixture's samples: each source's own reader, or its files read whole.
    pub(crate) fn reader(self: &Arc<Self>, fields: &FieldSpecs) -> MixReader {
        MixReader {
            readers: self
                .parts
                .iter()
                .map(|p| {
                    let block = p.source.backing.default_block();
                    p.source.backing.reader(&p.source.index, block, fields)
                })
                .collect(),
            set: self.clone(),
            fields: fields.clone(),
        }
    }

    /// What the sources' readers hold.
    pub(crate) fn reader_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| {
                let b = &p.source.backing;
                b.reader_bytes(b.default_block())
            })
            .sum()
    }

    /// The largest fetch bound of the sources (64 MiB where none has one).
    pub(crate) fn byte_bound(&self) -> u64 {
        self.parts
            .iter()
            .filter_map(|p| p.source.backing.byte_bound())
            .max()
            .unwrap_or(64 << 20)
    }

    /// The kind the mixture reports.
    pub(crate) fn kind(&self) -> SourceKind {
        SourceKind::Mixture
    }
}

/// Reads a mixture's samples through its sources' readers.
pub(crate) struct MixReader {
    set: Arc<MixSet>,
    readers: Vec<Option<Box<dyn Reader>>>,
    fields: FieldSpecs,
}

impl Reader for MixReader {
    fn reserve(&mut self, i: u32) -> u64 {
        let (s, j) = self.set.part_of(u64::from(i));
        match &mut self.readers[s] {
            Some(r) => r.reserve(j as u32),
            // A local file's size, read when it is opened; a typical image until then.
            None => 256 << 10,
        }
    }

    fn read(&mut self, i: u32, name: &mut PathBuf, limit: u64) -> Step {
        let (s, j) = self.set.part_of(u64::from(i));
        let offset = self.set.parts[s].label_offset;
        let relabel = move |r: Result<Sample, Error>| {
            r.map(|mut sample| {
                sample.label = sample.label.saturating_add(offset);
                sample
            })
        };
        match &mut self.readers[s] {
            Some(r) => match r.read(j as u32, name, limit) {
                Step::Done(r) => Step::Done(relabel(r)),
                #[cfg(feature = "remote")]
                Step::Pending(f) => Step::Pending(Box::pin(async move { relabel(f.await) })),
            },
            None => {
                let part = &self.set.parts[s].source;
                let read =
                    part.backing
                        .read_sample(&part.index, j as usize, limit, name, &self.fields);
                Step::Done(relabel(read))
            }
        }
    }

    #[cfg(feature = "remote")]
    fn store(&self) -> Option<(Arc<crate::source::storage::remote::Store>, usize)> {
        self.readers.iter().flatten().find_map(|r| r.store())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_remainders_sum_to_the_total() {
        assert_eq!(largest_remainders(8000, &[0.75, 0.25]), vec![6000, 2000]);
        assert_eq!(largest_remainders(10, &[1.0 / 3.0; 3]), vec![4, 3, 3]);
        assert_eq!(largest_remainders(1, &[0.5, 0.5]), vec![1, 0]);
        assert_eq!(largest_remainders(0, &[0.2, 0.8]), vec![0, 0]);
    }
}
