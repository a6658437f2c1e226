//! Sources: where samples come from. A file list, a folder of class folders, or a list the
//! caller builds; each becomes a compact index of `(path, label)` entries that the pipeline
//! visits in a seeded permutation every epoch.
//!
//! Tar shards in the WebDataset layout and objects in object storage (`s3://…`, with the
//! `remote` feature) are sources too: their samples are indexed the same way, plus where each
//! sample's bytes lie (shard, offset, length, 20 bytes a sample), and their bytes are read by
//! one fetch thread ahead of the decoders (`fetch.rs`) instead of one file per sample.
//!
//! The index stores every path as bytes in one buffer, relative to a base folder, plus an
//! 8-byte end offset and a 4-byte label per entry: about `path length + 12` bytes a sample
//! (ImageNet's 1.28 million paths of ~40 bytes take about 67 MB).
//!
//! This file is the API ([`Source`] and its constructors); the rest is in its children:
//! `index.rs` (the compact index), `list.rs` (file lists and the label rule), `walk.rs`
//! (class folders), `shards/` (tar shards: index, read, write, sidecar), and with the
//! `remote` feature `remote.rs` (the object store client) and `url.rs` (opening a URL).

mod containers;
pub(crate) mod format;
pub(crate) mod index;
pub(crate) mod kind;
pub(crate) mod mix;
mod options;
mod pattern;
pub(crate) mod storage;
#[cfg(feature = "remote")]
mod url;

use std::path::{Path, PathBuf};

use crate::error::Error;
use format::dir::class_folder_with_images;
use format::list::shown;
#[cfg(feature = "parquet")]
pub use format::parquet::ParquetOptions;
pub use format::tfrecord::TfRecordOptions;
pub(crate) use format::Backing;
use format::{dir as walk, tar as shards};
pub(crate) use index::{check_count, os_to_bytes, FileIndex};
pub use kind::SourceKind;
pub use mix::{Exhausted, Mix, MixEnd, MixLabels};
pub use options::RemoteOptions;
#[cfg(feature = "remote")]
pub(crate) use storage::remote::{join_key, ObjectIndex};

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

impl Source {
    pub(crate) fn files(index: FileIndex) -> Source {
        Source {
            index,
            backing: Backing::Files,
        }
    }

    /// Reads a file list: one sample a line, `PATH<TAB>LABEL` or `PATH LABEL`.
    ///
    /// The last whitespace-separated field is the label, a non-negative integer; the path is
    /// everything before it (so a path may contain spaces) and is relative to the list file's
    /// folder unless absolute. Blank lines and lines starting with `#` are ignored; CRLF line
    /// ends and a UTF-8 byte-order mark are accepted; paths may hold any bytes but NUL.
    /// A path listed twice with the same label is kept twice (oversampling), with a warning; a
    /// path listed twice with different labels is an error (`a.jpg`, `./a.jpg`, `sub/../a.jpg`
    /// and its absolute path are one path). A line with a third
    /// tab-separated field (`a.jpg<TAB>3<TAB>7`) is an error, not a path `a.jpg<TAB>3`.
    ///
    /// The list is read a line at a time, never whole: building the source takes the index it
    /// keeps ([`Source::heap_bytes`]) plus 24 bytes an entry while it runs. A line over 16 KiB
    /// (a path is at most 4,096 bytes) is an error naming it, read no further than its end; a
    /// comment that long is skipped.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if the list cannot be read,
    /// [`ErrorKind::List`](crate::ErrorKind::List) naming the line for a malformed line, and
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) for a list with no entries.
    pub fn from_list_file(path: impl AsRef<Path>) -> Result<Source, Error> {
        let path = path.as_ref();
        storage::regular_file(path)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        // Read a line at a time, and kept as where every 64th entry starts: the list is never
        // held whole.
        Ok(Source::files(format::list::scan_list(path, base)?))
    }

    /// Reads a folder with one sub-folder per class, like torchvision's `ImageFolder`: the
    /// sorted sub-folder names get labels `0..k`, and every `.jpg`, `.jpeg` or `.png` file
    /// below a class folder (recursively, sorted by path) is a sample of that class. Hidden
    /// files and other extensions are ignored.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if a folder cannot be read, and
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) if there is no class folder or no image.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Source, Error> {
        Ok(Source::files(walk::class_folders(dir.as_ref())?))
    }

    /// A source from `(path, label)` pairs built by the caller. Relative paths are relative
    /// to the current directory.
    ///
    /// # Errors
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) if there are no entries.
    pub fn from_entries<P: AsRef<Path>>(
        entries: impl IntoIterator<Item = (P, u32)>,
    ) -> Result<Source, Error> {
        let mut index = FileIndex::with_origin(PathBuf::from("<entries>"), PathBuf::new());
        for (p, label) in entries {
            index.push(&os_to_bytes(p.as_ref().as_os_str()), label);
        }
        if index.len() == 0 {
            return Err(Error::source("<entries>", "no entries"));
        }
        check_count(&index)?;
        index.shrink();
        Ok(Source::files(index))
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

    /// Opens whatever `path` names:
    /// - a URL (`s3://bucket/prefix`, `gs://…`, `az://…`, `http(s)://…`): [`Source::from_url`];
    /// - a `.tar` file, or a folder holding `.tar` files: [`Source::from_tar_shards`] (the
    ///   folder's `*.tar` files, sorted by name);
    /// - a `.parquet` file, or a folder holding them: [`Source::from_parquet`];
    /// - a TFRecord file (`*.tfrecord`, `*.tfrec`, or any file whose first record's framing
    ///   checks, such as `train-00000-of-01024`), or a folder holding them:
    ///   [`Source::from_tfrecords`];
    /// - another folder: [`Source::from_dir`] (class folders);
    /// - another file: [`Source::from_list_file`].
    ///
    /// # Errors
    /// As the constructor chosen, and [`ErrorKind::Source`](crate::ErrorKind::Source) for a
    /// folder holding two kinds of dataset (tar, parquet or TFRecord shards, class folders of
    /// images), or shards of two sets (`train-*-of-00004` beside `test-*-of-00001`): reading
    /// all would drop some samples or labels, or mix splits, without a word.
    pub fn open(path: impl AsRef<Path>) -> Result<Source, Error> {
        Source::open_with(path, RemoteOptions::default())
    }

    /// [`Source::open`], with the options of the formats it may find: the parquet columns
    /// ([`RemoteOptions::parquet`]: `--image-column`, `--label-column` on the command line),
    /// the TFRecord keys ([`RemoteOptions::tfrecord`]) and, for a URL, the store's settings.
    ///
    /// # Errors
    /// As [`Source::open`].
    pub fn open_with(path: impl AsRef<Path>, options: RemoteOptions) -> Result<Source, Error> {
        let path = path.as_ref();
        let mut source = Self::open_as_is(path, &options)?;
        // Shards `imagefeed shards` wrote keep their source's class names beside them.
        if source.index.class_names.is_none() && source.kind() == SourceKind::TarShards {
            let folder = if path.is_dir() {
                Some(path)
            } else {
                path.parent()
            };
            source.index.class_names = folder.and_then(shards::class_names_in);
        }
        Ok(source)
    }

    fn open_as_is(path: &Path, options: &RemoteOptions) -> Result<Source, Error> {
        if let Some(url) = path.to_str().filter(|s| shards::looks_like_url(s)) {
            return Source::from_url_with(url, options.clone());
        }
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            // `shards/train-{000..099}.tar`, `data/*.parquet`, or a name prefix (`data/train-`).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                if pattern::is_pattern(&name) {
                    return containers::open_files(path, pattern::expand(path)?, options);
                }
                // A prefix ends where a name goes on (`train-`, `train_`): a plain name that
                // is missing stays an error, never another file that starts like it.
                let files = if name.ends_with(['-', '_']) {
                    pattern::with_prefix(path)
                } else {
                    Vec::new()
                };
                if files.is_empty() {
                    return Err(Error::io(path, e));
                }
                return containers::open_files(path, files, options);
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        if meta.is_dir() {
            if let Some(manifest) = format::manifest::in_folder(path) {
                return Source::from_manifest_file(&manifest);
            }
            if let Some(source) = containers::open_dir(path, options)? {
                return Ok(source);
            }
            let shards = shards::tar_files_in(path)?;
            if shards.is_empty() {
                // A dataset repository's root (the Hub's): its files are in `data/`.
                let data = path.join("data");
                if data.is_dir() && class_folder_with_images(path)?.is_none() {
                    log::info!("{}: reading its data/ folder", path.display());
                    return Source::open_as_is(&data, options);
                }
                return Source::from_dir(path);
            }
            // Shards beside class folders (the archive the folders came from, say): reading
            // either would drop the other's samples, or their labels, without a word.
            if let Some(class) = class_folder_with_images(path)? {
                let shard = shards[0].file_name().unwrap_or_default().to_string_lossy();
                return Err(Error::source(
                    path,
                    format!(
                        "holds both tar shards ({shard}{}) and class folders ({}/ holds images): \
                         move one kind out, or open them explicitly with Source::from_tar_shards \
                         or Source::from_dir",
                        if shards.len() > 1 { ", ..." } else { "" },
                        shown(class.as_encoded_bytes())
                    ),
                ));
            }
            Source::from_tar_shards(shards)
        } else if format::manifest::is_manifest(path) {
            Source::from_manifest_file(path)
        } else if shards::is_tar_name(&path.to_string_lossy()) {
            Source::from_tar_shards([path])
        } else if let Some(source) = containers::open_file(path, options) {
            source
        } else {
            Source::from_list_file(path)
        }
    }

    /// Opens split `name` (`train`, `test`, `validation`…) of the dataset at `path`: the
    /// folder `path/name` or `path/data/name`, else the files of `path` (or `path/data`, a
    /// dataset repository's layout) whose names start with `name-`, `name_` or `name.`
    /// (`train-00000-of-00004.parquet`). A URL opens its prefix `name-`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// // A Hub repository: data/train-0000{0..3}-of-00004.parquet, data/test-….parquet
    /// let train = imagefeed::Source::open_split("cifar10", "train")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) where no folder or file is of that
    /// split, and as [`Source::open`].
    pub fn open_split(path: impl AsRef<Path>, name: &str) -> Result<Source, Error> {
        Source::open_split_with(path, name, RemoteOptions::default())
    }

    /// [`Source::open_split`], with [`Source::open_with`]'s options.
    ///
    /// # Errors
    /// As [`Source::open_split`].
    pub fn open_split_with(
        path: impl AsRef<Path>,
        name: &str,
        options: RemoteOptions,
    ) -> Result<Source, Error> {
        let path = path.as_ref();
        if let Some(url) = path.to_str().filter(|s| shards::looks_like_url(s)) {
            return Source::open_with(format!("{}/{name}-", url.trim_end_matches('/')), options);
        }
        for base in [path.to_path_buf(), path.join("data")] {
            if base.join(name).is_dir() {
                return Source::open_with(base.join(name), options);
            }
            let files: Vec<PathBuf> = [format!("{name}-"), format!("{name}_"), format!("{name}.")]
                .iter()
                .flat_map(|prefix| pattern::with_prefix(&base.join(prefix)))
                .collect();
            if !files.is_empty() {
                let mut files = files;
                files.sort();
                return containers::open_files(&base.join(name), files, &options);
            }
        }
        Err(Error::source(
            path,
            format!(
                "no split `{name}`: no folder `{name}` and no file named `{name}-…` here or in \
                 its data/ folder"
            ),
        ))
    }

    /// The dataset a local manifest lists (see [`Source::write_manifest`]).
    fn from_manifest_file(path: &Path) -> Result<Source, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let manifest = format::manifest::Manifest::parse(&text, path)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        format::manifest::open(
            manifest,
            path,
            format::manifest::Base::Local(dir),
            &TfRecordOptions::default(),
            #[cfg(feature = "parquet")]
            &ParquetOptions::default(),
        )
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

    /// Tar shards in the WebDataset layout: each sample is a group of consecutive members
    /// sharing a key (the member path up to the first `.` of its file name), with one image
    /// (`KEY.jpg`, `KEY.jpeg` or `KEY.png`) and its label as decimal text in `KEY.cls`. Other
    /// members (`KEY.json`, …) are ignored. Sample `i` is the `i`-th sample in shard order,
    /// then member order.
    ///
    /// Opening reads every member header once (seeking over the data) to index where each
    /// image lies; the pipeline then reads each shard as one sequential stream, visits the
    /// shards in a seeded order each epoch and mixes samples through the shuffle buffer.
    ///
    /// If no sample has a `.cls` member, every label is 0 (an unlabeled dataset).
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if a shard cannot be read, and
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) naming the shard for a damaged or
    /// truncated archive, a malformed `.cls`, a sample without a label among labeled ones, or
    /// shards with no image at all.
    pub fn from_tar_shards<P: AsRef<Path>>(
        shards: impl IntoIterator<Item = P>,
    ) -> Result<Source, Error> {
        let paths: Vec<PathBuf> = shards
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        shards::index_local(&paths)
    }

    /// TFRecord shards of `tf.train.Example`s, with [`TfRecordOptions::default`] (the keys of
    /// TensorFlow's ImageNet script, `image/encoded` and `image/class/label`, or TFDS's `image`
    /// and `label`): see [`Source::from_tfrecords_with`].
    ///
    /// # Errors
    /// As [`Source::from_tfrecords_with`].
    pub fn from_tfrecords<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Source, Error> {
        Source::from_tfrecords_with(paths, TfRecordOptions::default())
    }

    /// TFRecord shards (each path a file, plain or GZIP/ZLIB compressed, or a folder of them)
    /// whose records are `tf.train.Example`s holding an encoded image (a `bytes` feature) and
    /// its label (an `int64` feature), under the keys `options` names. Sample `i` is the
    /// `i`-th record in file order (files sorted within a folder), named
    /// `FILE[record N at byte B]`.
    ///
    /// Opening indexes every record (its framing and label, seeking over the image; a
    /// compressed file is inflated once); each epoch visits the files in a seeded order and
    /// reads each as one stream, checking every record's CRCs. A dataset with no label key is
    /// unlabelled (every label 0, with a warning).
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// let source = imagefeed::Source::from_tfrecords(["testdata/formats/tfrecord"])?;
    /// assert_eq!(source.kind(), imagefeed::SourceKind::TfRecord);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if a file cannot be read, and
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) naming the file and the record's byte
    /// offset for damaged framing, a file cut inside a record, a label that is not an integer
    /// in `0..=u32::MAX`, labels on some records only, or files where no record holds the image
    /// key. A record with a bad payload CRC, or without the image key, is a bad sample: its
    /// read is a skippable [`ErrorKind::Decode`](crate::ErrorKind::Decode) naming it.
    pub fn from_tfrecords_with<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
        options: TfRecordOptions,
    ) -> Result<Source, Error> {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        format::tfrecord::index_local(&paths, &options)
    }

    /// Parquet files with [`ParquetOptions::default`] (the Hugging Face `datasets` layout: an
    /// `image` column of `struct<bytes, path>` and an integer `label` column): see
    /// [`Source::from_parquet_with`].
    ///
    /// # Errors
    /// As [`Source::from_parquet_with`].
    pub fn from_parquet<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Source, Error> {
        #[cfg(feature = "parquet")]
        {
            Source::from_parquet_with(paths, ParquetOptions::default())
        }
        #[cfg(not(feature = "parquet"))]
        {
            let _ = paths.into_iter().count();
            Err(Error::feature_disabled("parquet"))
        }
    }

    /// A source in object storage, with [`RemoteOptions::default`]: see
    /// [`Source::from_url_with`].
    ///
    /// # Errors
    /// As [`Source::from_url_with`].
    pub fn from_url(url: &str) -> Result<Source, Error> {
        Source::from_url_with(url, RemoteOptions::default())
    }

    /// A source in object storage, through the `object_store` crate: `s3://bucket/prefix`,
    /// `gs://bucket/prefix`, `az://container/prefix` or `http(s)://host/prefix`. Credentials,
    /// region and endpoint come from the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP=true` for a
    /// plain-http endpoint, and the `GOOGLE_*` / `AZURE_*` equivalents).
    ///
    /// What the URL names decides the layout, as [`Source::open`] does for local paths:
    /// - a `.tar` object, or a prefix holding `.tar` objects: tar shards
    ///   ([`Source::from_tar_shards`]), each read with one streamed request;
    /// - a `.txt` object: a file list whose relative paths are keys next to it;
    /// - a `.parquet` object, or a prefix holding them (at any depth, as the Hub's `data/`):
    ///   parquet files ([`Source::from_parquet_with`], with [`RemoteOptions::parquet`]); each
    ///   file's footer and label column are read on opening, its row groups' pages by ranged
    ///   requests as epochs read them;
    /// - a TFRecord object (by its name, `*.tfrecord`, `*.tfrec`, or a shard name
    ///   `NAME-00000-of-01024` whose first record's framing checks), or a prefix holding them:
    ///   TFRecord shards ([`Source::from_tfrecords_with`], with [`RemoteOptions::tfrecord`]).
    ///   Opening reads each shard once, as one stream (seeking over each image would cost a
    ///   request a record); an epoch reads each shard as one streamed request;
    /// - another prefix: its images (`.jpg`, `.jpeg`, `.png`, `.webp`), labeled by class
    ///   "folder" (the first key component under the prefix, sorted, as [`Source::from_dir`]),
    ///   or all label 0 when they sit directly under the prefix.
    ///
    /// A URL whose last part names no object and no "folder" is a name prefix:
    /// `s3://bucket/data/train-` opens the objects of `data/` whose names start with `train-`
    /// (one split of a Hub dataset, say). A prefix holding two kinds of dataset, or shards of
    /// two sets (`train-*-of-00004` beside `test-*-of-00001`), is an error naming them.
    ///
    /// Requests run at most [`RemoteOptions::max_requests`] at a time, hold at most
    /// [`RemoteOptions::max_bytes_in_flight`], and are retried on transient errors.
    ///
    /// # Errors
    /// [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled) without the `remote`
    /// feature; [`ErrorKind::Source`](crate::ErrorKind::Source) for a malformed URL or an empty
    /// prefix; [`ErrorKind::Io`](crate::ErrorKind::Io) naming the object for a missing object,
    /// denied access or an unreachable store.
    pub fn from_url_with(url: &str, options: RemoteOptions) -> Result<Source, Error> {
        #[cfg(feature = "remote")]
        {
            url::open_remote(url, options)
        }
        #[cfg(not(feature = "remote"))]
        {
            let _ = (url, options);
            Err(Error::feature_disabled("remote"))
        }
    }

    /// How the samples are stored.
    pub fn kind(&self) -> SourceKind {
        self.backing.kind()
    }

    /// Feeds `hasher` what identifies this source's samples: their number, then in index
    /// order each sample's path and label, and with `with_stamps` also the size and
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
    /// let source = imagefeed::Source::from_dir("testdata/classes")?;
    /// let mut h = DefaultHasher::new();
    /// source.fingerprint(&mut h, false);
    /// let mut again = DefaultHasher::new();
    /// imagefeed::Source::from_dir("testdata/classes")?.fingerprint(&mut again, false);
    /// assert_eq!(h.finish(), again.finish());
    /// # Ok(()) }
    /// ```
    pub fn fingerprint(&self, hasher: &mut impl std::hash::Hasher, with_stamps: bool) {
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
            Backing::Tar(_) | Backing::TfRecord(_) => Ok(()),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.check_fields(fields),
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
