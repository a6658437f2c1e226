//! Opening a source: what a path or URL holds (a file list, class folders, tar shards,
//! TFRecord or parquet files, a manifest, a pattern of names), classified once, and the
//! [`Source`](crate::Source) constructors that open each.

mod classify;
mod containers;
mod manifest;
mod pattern;
#[cfg(feature = "remote")]
mod url;

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::format;
use crate::source::format::dir::class_folder_with_images;
#[cfg(feature = "parquet")]
use crate::source::format::parquet::ParquetOptions;
use crate::source::format::tfrecord::TfRecordOptions;
use crate::source::index::{check_count, os_to_bytes, FileIndex};
use crate::source::kind::SourceKind;
use crate::source::{OpenOptions, Source};

impl Source {
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
        crate::source::storage::regular_file(path)?;
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
        Ok(Source::files(format::dir::class_folders(dir.as_ref())?))
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
        Source::open_with(path, OpenOptions::default())
    }

    /// [`Source::open`], with the options of the formats it may find: the parquet columns
    /// ([`OpenOptions::parquet`]: `--image-column`, `--label-column` on the command line),
    /// the TFRecord keys ([`OpenOptions::tfrecord`]) and, for a URL, the store's settings.
    ///
    /// # Errors
    /// As [`Source::open`].
    pub fn open_with(path: impl AsRef<Path>, options: OpenOptions) -> Result<Source, Error> {
        let path = path.as_ref();
        let mut source = Self::open_as_is(path, &options)?;
        // Shards `imagefeed shards` wrote keep their source's class names beside them.
        if source.index.class_names.is_none() && source.kind() == SourceKind::TarShards {
            let folder = if path.is_dir() {
                Some(path)
            } else {
                path.parent()
            };
            source.index.class_names = folder.and_then(format::tar::class_names_in);
        }
        Ok(source)
    }

    fn open_as_is(path: &Path, options: &OpenOptions) -> Result<Source, Error> {
        if let Some(url) = path.to_str().filter(|s| format::tar::looks_like_url(s)) {
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
            // A dataset repository's root (the Hub's): its files are in `data/`.
            let data = path.join("data");
            if data.is_dir() && class_folder_with_images(path)?.is_none() {
                log::info!("{}: reading its data/ folder", path.display());
                return Source::open_as_is(&data, options);
            }
            Source::from_dir(path)
        } else if format::manifest::is_manifest(path) {
            Source::from_manifest_file(path)
        } else if format::tar::is_tar_name(&path.to_string_lossy()) {
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
        Source::open_split_with(path, name, OpenOptions::default())
    }

    /// [`Source::open_split`], with [`Source::open_with`]'s options.
    ///
    /// # Errors
    /// As [`Source::open_split`].
    pub fn open_split_with(
        path: impl AsRef<Path>,
        name: &str,
        options: OpenOptions,
    ) -> Result<Source, Error> {
        let path = path.as_ref();
        if let Some(url) = path.to_str().filter(|s| format::tar::looks_like_url(s)) {
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
        manifest::open(
            manifest,
            path,
            manifest::Base::Local(dir),
            &TfRecordOptions::default(),
            #[cfg(feature = "parquet")]
            &ParquetOptions::default(),
        )
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
        format::tar::index_local(&paths).map(Source::from)
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
        format::tfrecord::index_local(&paths, &options).map(Source::from)
    }

    /// Parquet files (each path a file, or a folder of `*.parquet` files, sorted by name)
    /// whose rows are images and labels, in the columns `options` names (by default the
    /// Hugging Face `datasets` layout: `image` as `struct<bytes, path>`, `label` an integer).
    /// Sample `i` is the `i`-th row in file order, named `FILE[row N]`.
    ///
    /// Opening reads each file's footer and label column (never the images); each epoch visits
    /// the row groups in a seeded order and reads each as one stream (see the module
    /// documentation in `source/parquet.rs` for why, and for the memory it holds).
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// let source = imagefeed::Source::from_parquet(["testdata/formats/parquet"])?;
    /// assert_eq!(source.kind(), imagefeed::SourceKind::Parquet);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if a file cannot be read, and
    /// [`ErrorKind::Source`](crate::ErrorKind::Source) naming the file (and row) for a file
    /// that is not parquet or is truncated, a missing column or one of the wrong type, a null
    /// label or one outside `0..=u32::MAX`, or an unsupported codec. A null image is a bad
    /// sample: its read is a skippable [`ErrorKind::Decode`](crate::ErrorKind::Decode).
    #[cfg(feature = "parquet")]
    #[cfg_attr(docsrs, doc(cfg(feature = "parquet")))]
    pub fn from_parquet_with<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
        options: ParquetOptions,
    ) -> Result<Source, Error> {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        format::parquet::index_local(&paths, &options).map(Source::from)
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

    /// A source in object storage, with [`OpenOptions::default`]: see
    /// [`Source::from_url_with`].
    ///
    /// # Errors
    /// As [`Source::from_url_with`].
    pub fn from_url(url: &str) -> Result<Source, Error> {
        Source::from_url_with(url, OpenOptions::default())
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
    ///   parquet files ([`Source::from_parquet_with`], with [`OpenOptions::parquet`]); each
    ///   file's footer and label column are read on opening, its row groups' pages by ranged
    ///   requests as epochs read them;
    /// - a TFRecord object (by its name, `*.tfrecord`, `*.tfrec`, or a shard name
    ///   `NAME-00000-of-01024` whose first record's framing checks), or a prefix holding them:
    ///   TFRecord shards ([`Source::from_tfrecords_with`], with [`OpenOptions::tfrecord`]).
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
    /// Requests run at most [`OpenOptions::max_requests`] at a time, hold at most
    /// [`OpenOptions::max_bytes_in_flight`], and are retried on transient errors.
    ///
    /// # Errors
    /// [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled) without the `remote`
    /// feature; [`ErrorKind::Source`](crate::ErrorKind::Source) for a malformed URL or an empty
    /// prefix; [`ErrorKind::Io`](crate::ErrorKind::Io) naming the object for a missing object,
    /// denied access or an unreachable store.
    pub fn from_url_with(url: &str, options: OpenOptions) -> Result<Source, Error> {
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
}
