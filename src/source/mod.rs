//! Sources: where samples come from. A [`Source`] is an index of its samples' names and labels
//! plus where their bytes are ([`Backing`]): local files, objects in a store, or units read as
//! streams (tar shards, TFRecord files, parquet row groups), or a mixture of sources.
//!
//! - `open/`: what a path or URL holds, classified once (`classify.rs`) for local folders,
//!   patterns, prefixes and store listings, and the constructors ([`Source::open`] and the
//!   `from_*` family);
//! - `format/`: one module a layout: file lists (`list/`), class folders (`dir.rs`), tar
//!   (`tar/`), TFRecord (`tfrecord/`), parquet (`parquet/`), objects (`objects.rs`), manifests,
//!   and what a format gives the fetch loop (`read.rs`: a `Reader`, and the `Streamed` trait a
//!   streamed format implements);
//! - `storage/`: where a file lives (`Place`: local, in memory, or in a store) and the object
//!   store client (`remote.rs`);
//! - `index.rs` (the compact index: path bytes in one buffer plus an end offset and a label a
//!   sample), `kind.rs`, `options.rs` ([`OpenOptions`]), `mix.rs` (mixtures), `write.rs`
//!   (writing any source as tar shards).

pub(crate) mod format;
pub(crate) mod index;
pub(crate) mod kind;
pub(crate) mod mix;
mod open;
mod options;
pub(crate) mod storage;
pub(crate) mod write;

use std::path::{Path, PathBuf};

use crate::error::Error;
#[cfg(feature = "parquet")]
pub use format::parquet::ParquetOptions;
pub use format::tfrecord::TfRecordOptions;
pub(crate) use format::Backing;
pub(crate) use index::FileIndex;
pub use kind::SourceKind;
pub use mix::{Exhausted, Mix, MixEnd, MixLabels};
#[allow(deprecated)]
pub use options::{OpenOptions, RemoteOptions};

/// Whether a [`Source::fingerprint`] covers the sizes and modification times of the samples'
/// bytes (a `bool` converts: `true` is [`Stamps::With`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stamps {
    /// The samples' number, paths (or units) and labels only: what a saved loader state is
    /// checked against.
    Without,
    /// Also each file's (or object's, or unit's) size and modification time: what the cache
    /// is checked against.
    With,
}

impl From<bool> for Stamps {
    fn from(with: bool) -> Stamps {
        if with {
            Stamps::With
        } else {
            Stamps::Without
        }
    }
}

/// Where the samples come from. Build one with [`Source::from_list_file`],
/// [`Source::from_dir`], [`Source::from_entries`] or [`Source::open`], then hand it to
/// [`Loader::builder`](crate::Loader::builder).
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::Source;
/// let source = Source::from_entries([("testdata/photos/photo_0.jpg", 0), ("testdata/photos/photo_1.jpg", 1)])?;
/// assert_eq!(source.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Source {
    pub(crate) index: FileIndex,
    pub(crate) backing: Backing,
}

impl<S: Into<Backing>> From<format::read::Opened<S>> for Source {
    fn from(opened: format::read::Opened<S>) -> Source {
        Source {
            index: opened.index,
            backing: opened.set.into(),
        }
    }
}

impl Source {
    pub(crate) fn files(index: FileIndex) -> Source {
        Source {
            index,
            backing: Backing::Files,
        }
    }

    /// Samples `range` of a source of local files, as a new source with the same paths and
    /// labels (the range is cut to the source): one part of a dataset. Class names are not
    /// carried over. A source of class folders is sorted by class, so a range of it holds few
    /// classes: for a held-out set, [`split`](Self::split) takes a share of every class.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// let all = imagefeed::Source::from_dir("testdata/classes")?;
    /// let split = all.len() * 4 / 5;
    /// let (train, held_out) = (all.slice(0..split)?, all.slice(split..all.len())?);
    /// assert_eq!(train.len() + held_out.len(), all.len());
    /// assert_eq!(held_out.path(0), all.path(split));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) for an empty range, or for tar shards
    /// and object storage, whose samples cannot be read apart from their shard or store.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Result<Source, Error> {
        if self.kind() != SourceKind::Files {
            return Err(Error::source(
                self.index.origin.clone(),
                "only a source of local files can be sliced (tar shards and objects are read as a whole)",
            ));
        }
        let range = range.start.min(self.len())..range.end.min(self.len());
        Source::from_entries(range.filter_map(|i| Some((self.path(i)?, self.label(i)?))))
    }

    /// Splits the source in two, seeded and deterministic: `(train, held_out)`, with about
    /// `fraction` of the samples held out. Unlike a [`slice`](Self::slice) of a source sorted
    /// by class (class folders are), it never holds out one class by accident:
    /// - a source of local files is split per class: each class gives the same share of its
    ///   samples (at least one to each part where it has two), chosen by `seed`; the parts
    ///   keep the class names;
    /// - tar shards, TFRecord files and parquet files are split by whole shards (parquet: row
    ///   groups), chosen by `seed`, since their samples are read as streams: hold out at least
    ///   a few shards' worth for a split that mixes classes.
    ///
    /// The same source, fraction and seed give the same split on every rank and every run.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// let all = imagefeed::Source::from_dir("testdata/classes")?; // sorted by class
    /// let (train, held_out) = all.split(0.3, 7)?;
    /// assert_eq!(train.len() + held_out.len(), all.len());
    /// // Every class is in both parts.
    /// let classes = |s: &imagefeed::Source| {
    ///     let mut c: Vec<u32> = (0..s.len()).filter_map(|i| s.label(i)).collect();
    ///     c.dedup();
    ///     c
    /// };
    /// assert_eq!(classes(&held_out), [0, 1, 2]);
    /// assert_eq!(classes(&train), [0, 1, 2]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `fraction` outside
    /// `(0, 1)`; [`ErrorKind::Source`](crate::ErrorKind::Source) for a source with fewer than
    /// two samples (or shards), a mixture (split its sources), or objects in a store.
    pub fn split(&self, fraction: f64, seed: u64) -> Result<(Source, Source), Error> {
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(Error::config(
                "split",
                format!("the held-out fraction must be between 0 and 1, not {fraction}"),
            ));
        }
        // A seeded order of `0..n` (a sort by a hash of each number).
        let order = |n: usize, salt: u64| {
            let mut v: Vec<usize> = (0..n).collect();
            v.sort_by_key(|&i| splitmix(seed ^ splitmix(salt) ^ splitmix(i as u64 + 1)));
            v
        };
        let origin = self.index.origin.clone();
        if self.kind() == SourceKind::Files {
            let mut by_class: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            self.index
                .for_each(|i, _, label| by_class.entry(label).or_default().push(i));
            let mut held = vec![false; self.len()];
            for (&label, members) in &by_class {
                let n = members.len();
                let share = (n as f64 * fraction).round() as usize;
                let want = if n >= 2 {
                    share.clamp(1, n - 1)
                } else {
                    share.min(n)
                };
                for k in order(n, u64::from(label)).into_iter().take(want) {
                    held[members[k]] = true;
                }
            }
            if held.iter().all(|&h| h) || !held.iter().any(|&h| h) {
                return Err(Error::source(
                    origin,
                    format!("{} samples cannot be split in two", self.len()),
                ));
            }
            let part = |keep: bool| -> Result<Source, Error> {
                let mut s = Source::from_entries(
                    (0..self.len())
                        .filter(|&i| held[i] == keep)
                        .filter_map(|i| Some((self.path(i)?, self.label(i)?))),
                )?;
                s.index.class_names = self.index.class_names.clone();
                s.index.origin = origin.clone();
                Ok(s)
            };
            return Ok((part(false)?, part(true)?));
        }
        let Some(units) = self.backing.units() else {
            return Err(Error::source(
                origin,
                "only local files, tar shards, TFRecord and parquet files can be split (a \
                 mixture: split each of its sources; objects in a store: list them in a file)",
            ));
        };
        let n = units.units.len();
        if n < 2 {
            return Err(Error::source(
                origin,
                "one shard (or parquet row group) cannot be split: its samples are read as one \
                 stream; write more, smaller shards (imagefeed shards)",
            ));
        }
        let total = units.len() as f64;
        let mut held = Vec::new();
        let mut count = 0u64;
        for k in order(n, u64::MAX) {
            if held.len() + 1 == n || (count as f64) >= fraction * total {
                break;
            }
            // The unit that brings the held-out share nearest the fraction, and at least one.
            let c = u64::from(units.units[k].count);
            let before = (count as f64 - fraction * total).abs();
            let after = ((count + c) as f64 - fraction * total).abs();
            if held.is_empty() || after <= before {
                held.push(k);
                count += c;
            }
        }
        held.sort_unstable();
        let train: Vec<usize> = (0..n).filter(|k| held.binary_search(k).is_err()).collect();
        let part = |keep: &[usize]| -> Result<Source, Error> {
            let backing = self.backing.with_units(keep).ok_or_else(|| {
                Error::source(origin.clone(), "this source cannot be split by its shards")
            })?;
            Ok(Source {
                index: self.index.clone(),
                backing,
            })
        };
        Ok((part(&train)?, part(&held)?))
    }

    /// Writes a manifest of this source's shards (tar shards, TFRecord files or parquet row
    /// groups, with their sample counts, sizes and times) to `path`, or into `path` when it is
    /// a folder (`imagefeed-manifest.tsv`; the name [`Source::open`] looks for in a folder or
    /// prefix). Opening the dataset then reads that one file, instead of every shard's headers
    /// (or in object storage, a listing and a read a shard). `path` may be a URL in the
    /// source's store (`s3://bucket/data/`), for a source opened there. Files are written
    /// relative to the manifest's folder where they lie below it. Returns where it wrote.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{write_shards, Source};
    /// let dir = tempfile::tempdir().unwrap();
    /// write_shards(&Source::from_dir("testdata/classes")?, dir.path(), 4, Some(0))?;
    /// let shards = Source::open(dir.path())?; // the manifest `write_shards` wrote beside them
    /// let again = shards.write_manifest(dir.path())?;
    /// assert!(again.ends_with("imagefeed-manifest.tsv"));
    /// assert_eq!(Source::open(dir.path())?.len(), shards.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) for a source of one file or object a
    /// sample (a manifest lists shards), and the error of writing it, naming the file.
    pub fn write_manifest(&self, path: impl AsRef<Path>) -> Result<PathBuf, Error> {
        let path = path.as_ref();
        let Some(units) = self.backing.units() else {
            return Err(Error::source(
                &self.index.origin,
                "a manifest lists shards (tar, TFRecord, parquet); this source is one file or object a sample",
            ));
        };
        format::manifest::write(units, self.kind(), path)
    }

    /// How the samples are stored.
    pub fn kind(&self) -> SourceKind {
        self.backing.kind()
    }

    /// Feeds `hasher` what identifies this source's samples: their number, then in index
    /// order each sample's path and label, and with [`Stamps::With`] also the size and
    /// modification time of its bytes (one `stat` a file; a HEAD request for each object whose
    /// listing did not give them). Two sources that feed the same bytes deliver the same
    /// samples under the same labels at the same indices, and with stamps, from files of the
    /// same size and time.
    ///
    /// The on-disk [cache](crate::LoaderBuilder::cache) checks the stamped form before reusing
    /// decoded images; the command line keeps the plain form in a saved
    /// [`LoaderState`](crate::LoaderState) and checks it before resuming, since a state resumed
    /// over other samples would repeat some and skip others.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use std::hash::{DefaultHasher, Hasher};
    /// use imagefeed::Stamps;
    /// let source = imagefeed::Source::from_dir("testdata/classes")?;
    /// let mut h = DefaultHasher::new();
    /// source.fingerprint(&mut h, Stamps::Without);
    /// let mut again = DefaultHasher::new();
    /// imagefeed::Source::from_dir("testdata/classes")?.fingerprint(&mut again, Stamps::Without);
    /// assert_eq!(h.finish(), again.finish());
    /// # Ok(()) }
    /// ```
    pub fn fingerprint(&self, hasher: &mut impl std::hash::Hasher, stamps: impl Into<Stamps>) {
        let with_stamps = stamps.into() == Stamps::With;
        if let Backing::Mix(m) = &self.backing {
            m.fingerprint(hasher, with_stamps);
            return;
        }
        if let Some(units) = self.backing.units() {
            // A source read as streams: what identifies its samples is its units' names,
            // counts and (stamped) sizes and times; its labels live in the units' bytes.
            units.fingerprint(hasher, with_stamps);
            return;
        }
        let fetched = if with_stamps {
            self.fetch_stamps()
        } else {
            None
        };
        hasher.write(&(self.len() as u64).to_le_bytes());
        // In order, a list file read once through.
        self.index.for_each(|i, path, label| {
            hasher.write(path.as_os_str().as_encoded_bytes());
            hasher.write(&[0]);
            if with_stamps {
                let (len, mtime) = match &fetched {
                    Some(stamps) => stamps[i],
                    None => self.backing.stamp(i, path),
                };
                hasher.write(&len.to_le_bytes());
                hasher.write(&mtime.to_le_bytes());
            }
            hasher.write(&label.to_le_bytes());
        });
    }

    /// Every sample's size and modification time, when the source itself does not know them:
    /// objects named by a list file (not listed, so stamped `(0, 0)`) are asked of the store, so
    /// that a cache over the list sees an object replaced under the same key. One HEAD request
    /// an object, 32 in flight; an object the store cannot describe is stamped `u64::MAX` (its
    /// read fails later, naming it). `None` where [`Source::stamp`] knows them all.
    fn fetch_stamps(&self) -> Option<Vec<(u64, u128)>> {
        self.backing.fetch_stamps(&self.index)
    }

    /// The encoded bytes and label of sample `i`, read by itself (random access; an epoch
    /// reads in order instead), with its name in messages. Refuses more than `limit` bytes.
    pub(crate) fn read_sample(
        &self,
        i: usize,
        limit: u64,
    ) -> Result<(format::read::Sample, PathBuf), Error> {
        self.read_sample_with(i, limit, &crate::fields::FieldSpecs::default())
    }

    /// [`read_sample`](Self::read_sample) with the sample's `fields`.
    pub(crate) fn read_sample_with(
        &self,
        i: usize,
        limit: u64,
        fields: &crate::fields::FieldSpecs,
    ) -> Result<(format::read::Sample, PathBuf), Error> {
        let mut name = PathBuf::new();
        let sample = self
            .backing
            .read_sample(&self.index, i, limit, &mut name, fields)?;
        Ok((sample, name))
    }

    /// The name of sample `i` in messages, and its label, read from its unit (for a source
    /// read as streams: a few milliseconds a call for tar, TFRecord and parquet).
    fn sample_of(&self, i: usize) -> Option<(PathBuf, u32)> {
        let mut name = PathBuf::new();
        let label = self
            .backing
            .read_sample(&self.index, i, u64::MAX, &mut name, &Default::default())
            .ok()
            .map(|s| s.label);
        Some((name, label.unwrap_or(0)))
    }

    /// The number of samples: a mixture's, those of its sources together (an epoch of it
    /// delivers [`epoch_len`](Self::epoch_len)).
    pub fn len(&self) -> usize {
        if let Backing::Mix(m) = &self.backing {
            return m.len() as usize;
        }
        match self.backing.units() {
            Some(units) => units.len() as usize,
            None => self.index.len(),
        }
    }

    /// Samples an epoch of this source delivers (before sharding): [`len`](Self::len), or a
    /// mixture's epoch ([`Mix`]).
    pub fn epoch_len(&self) -> usize {
        match &self.backing {
            Backing::Mix(m) => usize::try_from(m.epoch_len).unwrap_or(usize::MAX),
            _ => self.len(),
        }
    }

    /// A sample's I/O or decode error, saying which line of the file list listed the sample
    /// (a missing file is then found in the list at once); other errors and sources as they
    /// are. Reads the list again: for an error that ends the epoch, not for each skip.
    pub(crate) fn with_list_line(&self, e: Error, index: u32) -> Error {
        if self.kind() != SourceKind::Files || !e.is_data_error() {
            return e;
        }
        match self.index.line_of(index as usize) {
            Some(line) => e.listed_at(&self.index.origin, line),
            None => e,
        }
    }

    /// For a mixture, the source of index `i` (numbered from 0) and `i`'s index in it; else
    /// `(0, i)`.
    pub(crate) fn split_index(&self, i: u64) -> (u32, u64) {
        match &self.backing {
            Backing::Mix(m) => {
                let (s, j) = m.part_of(i);
                (s as u32, j)
            }
            _ => (0, i),
        }
    }

    /// True if the source has no samples (never the case for a built source).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The full path of sample `i` (`None` if out of range): for a sample of a tar shard,
    /// TFRecord or parquet file, its name in messages (`shard-000003.tar[KEY.jpg]`), read from
    /// its file.
    pub fn path(&self, i: usize) -> Option<PathBuf> {
        if i >= self.len() {
            return None;
        }
        if let Backing::Mix(m) = &self.backing {
            let (s, j) = m.part_of(i as u64);
            return m.parts[s].source.path(j as usize);
        }
        if self.backing.units().is_some() {
            return self.sample_of(i).map(|(name, _)| name);
        }
        Some(self.index.path(i))
    }

    /// The label of sample `i` (`None` if out of range). For a sample of a tar shard,
    /// TFRecord or parquet file the sample is read (its file's table and its bytes).
    pub fn label(&self, i: usize) -> Option<u32> {
        if i >= self.len() {
            return None;
        }
        if let Backing::Mix(m) = &self.backing {
            let (s, j) = m.part_of(i as u64);
            let part = &m.parts[s];
            return part
                .source
                .label(j as usize)
                .map(|l| l.saturating_add(part.label_offset));
        }
        if self.backing.units().is_some() {
            return self.sample_of(i).map(|(_, label)| label);
        }
        Some(self.index.label(i))
    }

    /// Class names by label: a class-folder source's folders, a parquet `ClassLabel`'s names
    /// (from the `huggingface` metadata `datasets` writes), the names `imagefeed shards` wrote
    /// beside its shards (`imagefeed-classes.txt`), a mixture's (see [`Mix`]).
    pub fn class_names(&self) -> Option<&[String]> {
        self.index.class_names.as_deref()
    }

    /// The largest label plus one.
    pub fn num_classes(&self) -> u32 {
        if let Backing::Mix(m) = &self.backing {
            return m.num_classes();
        }
        match self.backing.units() {
            Some(units) => units.num_classes,
            None => self.index.num_classes(),
        }
    }

    /// The mean encoded size of a sample where the index knows every sample's size (tar
    /// shards); `None` for local files and objects.
    pub(crate) fn mean_sample_bytes(&self) -> Option<u64> {
        self.backing.mean_sample_bytes()
    }

    /// Whether this source can deliver `fields` (checked by `build()`): tar shards, TFRecord
    /// and parquet files (whose columns must exist), and local lists with a header naming
    /// them.
    pub(crate) fn check_fields(&self, fields: &crate::fields::FieldSpecs) -> Result<(), Error> {
        if fields.is_empty() {
            return Ok(());
        }
        match &self.backing {
            Backing::Streams(s) => s.check_fields(fields),
            Backing::Files => self.index.check_fields(fields),
            #[cfg(feature = "remote")]
            Backing::Objects(_) => Err(Error::config(
                "field",
                "objects in object storage carry no per-sample fields; pack them as tar shards \
                 (`imagefeed shards`) with the fields as members",
            )),
            Backing::Mix(m) => {
                for p in &m.parts {
                    p.source.check_fields(fields)?;
                }
                Ok(())
            }
        }
    }

    /// Heap bytes the index holds (counted in the loader's memory budget): for a source read
    /// as streams a few dozen bytes a shard, nothing per sample.
    pub fn heap_bytes(&self) -> u64 {
        self.index.heap_bytes() + self.backing.heap_bytes()
    }
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
