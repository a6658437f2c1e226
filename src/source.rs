//! Sources: where samples come from. A file list, a folder of class folders, or a list the
//! caller builds; each becomes a compact index of `(path, label)` entries that the pipeline
//! visits in a seeded permutation every epoch.
//!
//! Tar shards in the WebDataset layout and objects in object storage (`s3://…`, with the
//! `remote` feature) are sources too: their samples are indexed the same way, plus where each
//! sample's bytes lie (shard, offset, length, 20 bytes a sample), and the pipeline reads them
//! through its fetch stage (`fetch.rs`) instead of opening one file per sample.
//!
//! The index stores every path as bytes in one buffer, relative to a base folder, plus an
//! 8-byte end offset and a 4-byte label per entry: about `path length + 12` bytes a sample
//! (ImageNet's 1.28 million paths of ~40 bytes take about 67 MB).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::shards::TarIndex;

/// Image file extensions (compared case-insensitively): the files a class-folder source picks
/// up and the members of a tar shard that are a sample's image.
pub(crate) const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png"];

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

/// How a source's samples are stored, as [`Source::kind`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceKind {
    /// One local file a sample (a file list, a folder of class folders, entries).
    Files,
    /// One object a sample in object storage (`s3://bucket/prefix` of images or a list there).
    Objects,
    /// Samples packed in tar shards (WebDataset layout), local or in object storage, each shard
    /// read as one sequential stream.
    TarShards,
}

/// Where the bytes of a source's samples are.
#[derive(Debug, Clone)]
pub(crate) enum Backing {
    /// Local files: the index paths.
    Files,
    /// Objects: index paths are keys relative to `prefix` in `store`.
    #[cfg(feature = "remote")]
    Objects(Arc<ObjectIndex>),
    /// Members of tar shards.
    Tar(Arc<TarIndex>),
}

/// Objects of a store, one a sample.
#[cfg(feature = "remote")]
#[derive(Debug)]
pub(crate) struct ObjectIndex {
    pub(crate) store: Arc<crate::remote::Store>,
    /// The key prefix the index's paths are relative to (`""` for the bucket root).
    pub(crate) prefix: String,
    /// Size and modification time of each sample's object, from the listing (for the cache
    /// fingerprint). `(0, 0)` for objects named by a list file (not listed): the fingerprint
    /// then asks the store (one HEAD request each, only for a loader with a cache).
    pub(crate) stamps: Vec<(u64, i64)>,
}

#[cfg(feature = "remote")]
impl ObjectIndex {
    pub(crate) fn key(&self, index: &FileIndex, i: usize) -> String {
        let rel = String::from_utf8_lossy(index.raw_path(i));
        join_key(&self.prefix, &rel)
    }
}

#[cfg(feature = "remote")]
pub(crate) fn join_key(prefix: &str, rel: &str) -> String {
    if prefix.is_empty() {
        rel.to_string()
    } else {
        format!("{prefix}/{rel}")
    }
}

/// Limits and retries for sources in object storage (see [`Source::from_url_with`]).
///
/// ```
/// use std::time::Duration;
/// let options = imagefeed::RemoteOptions::default()
///     .max_requests(32)
///     .max_bytes_in_flight(128 << 20)
///     .retry_timeout(Duration::from_secs(60));
/// assert_eq!(options.max_requests, 32);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteOptions {
    /// The most requests in flight at once (default 16).
    pub max_requests: usize,
    /// The most fetched bytes held at once, fetched and waiting to be decoded (default 64 MiB;
    /// one sample larger than this is still fetched, alone).
    pub max_bytes_in_flight: u64,
    /// How many times a request failing with a transient error (a 5xx answer, throttling, a
    /// dropped connection) is retried, with exponential backoff (default 5).
    pub retries: usize,
    /// No retry starts later than this after a request's first try (default 30 s): a store
    /// that stops answering ends the epoch with an error instead of a hang.
    pub retry_timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            max_requests: 16,
            max_bytes_in_flight: 64 << 20,
            retries: 5,
            retry_timeout: Duration::from_secs(30),
        }
    }
}

impl RemoteOptions {
    /// Sets [`RemoteOptions::max_requests`] (at least 1).
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n.max(1);
        self
    }
    /// Sets [`RemoteOptions::max_bytes_in_flight`].
    pub fn max_bytes_in_flight(mut self, bytes: u64) -> Self {
        self.max_bytes_in_flight = bytes;
        self
    }
    /// Sets [`RemoteOptions::retries`].
    pub fn retries(mut self, n: usize) -> Self {
        self.retries = n;
        self
    }
    /// Sets [`RemoteOptions::retry_timeout`].
    pub fn retry_timeout(mut self, t: Duration) -> Self {
        self.retry_timeout = t;
        self
    }
}

/// A compact list of `(path, label)` entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileIndex {
    /// What the entries came from (list file, folder, or `<entries>`), for messages.
    pub(crate) origin: PathBuf,
    /// Relative paths are joined to this folder.
    pub(crate) base: PathBuf,
    bytes: Vec<u8>,
    ends: Vec<u64>,
    labels: Vec<u32>,
    /// Class names by label, for class-folder sources.
    pub(crate) class_names: Option<Vec<String>>,
}

impl FileIndex {
    pub(crate) fn with_origin(origin: PathBuf, base: PathBuf) -> Self {
        FileIndex {
            origin,
            base,
            ..Default::default()
        }
    }

    pub(crate) fn push(&mut self, path: &[u8], label: u32) {
        self.bytes.extend_from_slice(path);
        self.ends.push(self.bytes.len() as u64);
        self.labels.push(label);
    }

    pub(crate) fn len(&self) -> usize {
        self.labels.len()
    }

    pub(crate) fn label(&self, i: usize) -> u32 {
        self.labels[i]
    }

    /// The stored (possibly relative) path bytes of entry `i`.
    pub(crate) fn raw_path(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Writes the full path of entry `i` into `out`, reusing its allocation.
    pub(crate) fn path_into(&self, i: usize, out: &mut PathBuf) {
        out.as_mut_os_string().clear();
        out.push(&self.base);
        out.push(bytes_to_os(self.raw_path(i)));
    }

    /// The full path of entry `i`.
    pub(crate) fn path(&self, i: usize) -> PathBuf {
        let mut p = PathBuf::new();
        self.path_into(i, &mut p);
        p
    }

    /// Heap bytes held by the index.
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.bytes.capacity() + self.ends.capacity() * 8 + self.labels.capacity() * 4) as u64
    }

    pub(crate) fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.labels.shrink_to_fit();
    }
}

#[cfg(unix)]
fn bytes_to_os(b: &[u8]) -> &OsStr {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(b)
}

#[cfg(not(unix))]
fn bytes_to_os(b: &[u8]) -> &OsStr {
    // Paths that are not UTF-8 cannot be represented on this platform's OsStr from bytes; the
    // lossy form then fails to open with an error naming it.
    match std::str::from_utf8(b) {
        Ok(s) => OsStr::new(s),
        Err(_) => OsStr::new("\u{FFFD}"),
    }
}

#[cfg(unix)]
pub(crate) fn os_to_bytes(s: &OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
pub(crate) fn os_to_bytes(s: &OsStr) -> Vec<u8> {
    s.to_string_lossy().into_owned().into_bytes()
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
        regular_file(path)?;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        // Read a line at a time: the list is never held whole.
        let reader = std::io::BufReader::with_capacity(64 << 10, file);
        let index = parse_list_from(path, base, reader, len)?;
        Ok(Source::files(index))
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
        let dir = dir.as_ref();
        let mut classes: Vec<(String, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let p = entry.path();
            let name = entry.file_name();
            if is_hidden(&name) || !p.is_dir() {
                continue;
            }
            classes.push((name.to_string_lossy().into_owned(), p));
        }
        if classes.is_empty() {
            let compressed = compressed_tar_in(dir);
            return Err(Error::source(
                dir,
                match compressed {
                    Some(name) => format!(
                        "no class folders and no .tar shards, but compressed tar files \
                         (`{}`): decompress them to .tar shards, which are read a member at a \
                         time",
                        shown(name.as_encoded_bytes())
                    ),
                    None if has_loose_images(dir) => "no class folders, only images directly \
                         in it: a folder source needs one sub-folder per class (its name gives \
                         the label); for unlabeled images, write a file list with a label for \
                         each, e.g. `for f in DIR/*.jpg; do printf '%s\\t0\\n' \"$f\"; done > \
                         files.txt`"
                        .into(),
                    None => "no class folders: expected one sub-folder per class, each holding \
                             images"
                        .into(),
                },
            ));
        }
        classes.sort();
        let loose = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .flatten()
            .filter(|e| {
                !is_hidden(&e.file_name()) && has_image_extension(&e.path()) && e.path().is_file()
            })
            .count();
        if loose > 0 {
            log::warn!(
                "{}: {loose} image(s) directly in the source folder are not read: only images \
                 inside class folders have a label",
                dir.display()
            );
        }
        let mut index = FileIndex::with_origin(dir.to_path_buf(), dir.to_path_buf());
        let mut files = Walked {
            root: dir,
            bytes: Vec::new(),
            spans: Vec::new(),
        };
        let mut visited = Visited {
            ancestors: vec![std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?],
            seen: Default::default(),
            classes: classes.iter().map(|(n, _)| n.into()).collect(),
        };
        for (label, (_, class_dir)) in classes.iter().enumerate() {
            files.bytes.clear();
            files.spans.clear();
            collect_images(class_dir, &mut files, &mut visited)?;
            if files.spans.is_empty() {
                // Its label stays (labels are the sorted folder names), with no sample.
                log::warn!(
                    "{}: a class folder with no .jpg, .jpeg or .png file: label {label} has no sample",
                    class_dir.display()
                );
            }
            files.sort();
            for &span in &files.spans {
                index.push(files.get(span), label as u32);
            }
        }
        if index.len() == 0 {
            return Err(Error::source(
                dir,
                "the class folders hold no .jpg, .jpeg or .png file",
            ));
        }
        check_count(&index)?;
        index.class_names = Some(classes.into_iter().map(|(n, _)| n).collect());
        index.shrink();
        Ok(Source::files(index))
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
    /// - another folder: [`Source::from_dir`] (class folders);
    /// - another file: [`Source::from_list_file`].
    ///
    /// # Errors
    /// As the constructor chosen, and [`ErrorKind::Source`](crate::ErrorKind::Source) for a
    /// folder holding both `.tar` files and class folders of images (reading either kind
    /// would drop the other's samples or labels without a word).
    pub fn open(path: impl AsRef<Path>) -> Result<Source, Error> {
        let path = path.as_ref();
        if let Some(url) = path.to_str().filter(|s| crate::shards::looks_like_url(s)) {
            return Source::from_url(url);
        }
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            let shards = crate::shards::tar_files_in(path)?;
            if shards.is_empty() {
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
        } else if crate::shards::is_tar_name(&path.to_string_lossy()) {
            Source::from_tar_shards([path])
        } else {
            Source::from_list_file(path)
        }
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
        crate::shards::index_local(&paths)
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
    /// - another prefix: its images (`.jpg`, `.jpeg`, `.png`), labeled by class "folder" (the
    ///   first key component under the prefix, sorted, as [`Source::from_dir`]), or all label
    ///   0 when they sit directly under the prefix.
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
            crate::shards::open_remote(url, options)
        }
        #[cfg(not(feature = "remote"))]
        {
            let _ = (url, options);
            Err(Error::feature_disabled("remote"))
        }
    }

    /// How the samples are stored.
    pub fn kind(&self) -> SourceKind {
        match &self.backing {
            Backing::Files => SourceKind::Files,
            #[cfg(feature = "remote")]
            Backing::Objects(_) => SourceKind::Objects,
            Backing::Tar(_) => SourceKind::TarShards,
        }
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
        let fetched = if with_stamps {
            self.fetch_stamps()
        } else {
            None
        };
        hasher.write(&(self.len() as u64).to_le_bytes());
        let mut path = PathBuf::new();
        for i in 0..self.len() {
            self.index.path_into(i, &mut path);
            hasher.write(path.as_os_str().as_encoded_bytes());
            hasher.write(&[0]);
            if with_stamps {
                let (len, mtime) = match &fetched {
                    Some(stamps) => stamps[i],
                    None => self.stamp(i, &mut path),
                };
                hasher.write(&len.to_le_bytes());
                hasher.write(&mtime.to_le_bytes());
            }
            hasher.write(&self.index.label(i).to_le_bytes());
        }
    }

    /// Every sample's size and modification time, when the source itself does not know them:
    /// objects named by a list file (not listed, so stamped `(0, 0)`) are asked of the store, so
    /// that a cache over the list sees an object replaced under the same key. One HEAD request
    /// an object, 32 in flight; an object the store cannot describe is stamped `u64::MAX` (its
    /// read fails later, naming it). `None` where [`Source::stamp`] knows them all.
    fn fetch_stamps(&self) -> Option<Vec<(u64, u128)>> {
        #[cfg(feature = "remote")]
        if let Backing::Objects(o) = &self.backing {
            let missing: Vec<usize> = (0..o.stamps.len())
                .filter(|&i| o.stamps[i] == (0, 0))
                .collect();
            if missing.is_empty() {
                return None;
            }
            let keys = missing.iter().map(|&i| o.key(&self.index, i)).collect();
            let mut stamps: Vec<(u64, u128)> =
                o.stamps.iter().map(|&(s, m)| (s, m as u128)).collect();
            for (&i, got) in missing.iter().zip(o.store.head_many(keys)) {
                stamps[i] = got.map_or((u64::MAX, 0), |(s, m)| (s, m as u128));
            }
            return Some(stamps);
        }
        None
    }

    /// Size and modification time of sample `i`'s bytes, for the stamped fingerprint.
    fn stamp(&self, i: usize, scratch: &mut PathBuf) -> (u64, u128) {
        match &self.backing {
            Backing::Files => {
                self.index.path_into(i, scratch);
                match std::fs::metadata(&*scratch) {
                    Ok(m) => {
                        let t = m
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_nanos());
                        (m.len(), t)
                    }
                    Err(_) => (u64::MAX, 0),
                }
            }
            #[cfg(feature = "remote")]
            Backing::Objects(o) => {
                let (size, mtime) = o.stamps[i];
                (size, mtime as u128)
            }
            Backing::Tar(t) => t.stamp(i),
        }
    }

    /// The encoded bytes of sample `i` (random access; the pipeline streams instead). Used to
    /// write shards. Refuses more than `limit` bytes.
    pub(crate) fn read_sample(&self, i: usize, limit: u64) -> Result<Vec<u8>, Error> {
        match &self.backing {
            Backing::Files => {
                use std::io::Read;
                let path = self.index.path(i);
                regular_file(&path)?;
                let mut out = Vec::new();
                std::fs::File::open(&path)
                    .map_err(|e| Error::io(&path, e))?
                    .take(limit + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| Error::io(&path, e))?;
                if out.len() as u64 > limit {
                    return Err(Error::decode(
                        &path,
                        crate::error::DecodeFailure(format!("over the {limit}-byte limit")),
                    ));
                }
                Ok(out)
            }
            #[cfg(feature = "remote")]
            Backing::Objects(o) => o.store.get(&o.key(&self.index, i), limit),
            Backing::Tar(t) => t.read_member(i, self.index.label(i), &self.index.path(i), limit),
        }
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True if the source has no samples (never the case for a built source).
    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// The full path of sample `i` (`None` if out of range).
    pub fn path(&self, i: usize) -> Option<PathBuf> {
        (i < self.len()).then(|| self.index.path(i))
    }

    /// The label of sample `i` (`None` if out of range).
    pub fn label(&self, i: usize) -> Option<u32> {
        (i < self.len()).then(|| self.index.label(i))
    }

    /// Class names by label, for a class-folder source.
    pub fn class_names(&self) -> Option<&[String]> {
        self.index.class_names.as_deref()
    }

    /// The largest label plus one.
    pub fn num_classes(&self) -> u32 {
        self.index.labels.iter().max().map_or(0, |m| m + 1)
    }

    /// Heap bytes the index holds (counted in the loader's memory budget).
    pub fn heap_bytes(&self) -> u64 {
        self.index.heap_bytes()
            + match &self.backing {
                Backing::Files => 0,
                #[cfg(feature = "remote")]
                Backing::Objects(o) => (o.stamps.capacity() * 16) as u64,
                Backing::Tar(t) => t.heap_bytes(),
            }
    }
}

/// Refuses a path that is not a regular file before it is opened: opening a FIFO blocks
/// until a writer comes, and a device such as `/dev/zero` never ends. The one check for
/// lists, sample files and cached-epoch rereads.
pub(crate) fn regular_file(path: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "is a directory, not a file"
    } else {
        "is not a regular file (a device, FIFO or socket)"
    };
    Err(Error::io(path, std::io::Error::other(what)))
}

/// Whether `dir` holds an image file directly (not in a sub-folder); stops at the first.
fn has_loose_images(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            !is_hidden(&e.file_name()) && has_image_extension(&e.path()) && e.path().is_file()
        })
    })
}

pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}

/// Image paths found by a folder walk, relative to the source's folder and packed in one
/// buffer (a `PathBuf` each took about twice the memory).
struct Walked<'a> {
    root: &'a Path,
    bytes: Vec<u8>,
    /// (start, length) in `bytes`, one per path.
    spans: Vec<(usize, usize)>,
}

impl Walked<'_> {
    fn push(&mut self, path: &Path) {
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&os_to_bytes(rel.as_os_str()));
        self.spans.push((start, self.bytes.len() - start));
    }

    fn get(&self, (start, len): (usize, usize)) -> &[u8] {
        &self.bytes[start..start + len]
    }

    /// Puts the paths in `Path` order (component by component), as sorting `PathBuf`s did.
    fn sort(&mut self) {
        let bytes = &self.bytes;
        let path =
            |(start, len): (usize, usize)| Path::new(bytes_to_os(&bytes[start..start + len]));
        self.spans.sort_by(|&a, &b| path(a).cmp(path(b)));
    }
}

/// The folders of a class-folder walk.
struct Visited {
    /// Canonical paths of the folders being walked, the source's own folder first: a link
    /// back to one of them (a loop) is skipped with a warning.
    ancestors: Vec<PathBuf>,
    /// Every folder walked so far (canonical path → the path it was reached by): a folder
    /// reached twice through links would count its images twice, under two labels if in two
    /// class folders, and links reaching one folder many ways made the walk exponential.
    seen: std::collections::HashMap<PathBuf, PathBuf>,
    /// The class folders' names (a link to an image in one of them names a sample).
    classes: Vec<std::ffi::OsString>,
}

/// Adds the images under `dir` (recursively, following links to folders) to `out`.
fn collect_images(dir: &Path, out: &mut Walked<'_>, visited: &mut Visited) -> Result<(), Error> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    if visited.ancestors.contains(&canonical) {
        log::warn!(
            "{}: skipped, a link back to a folder it is inside ({})",
            dir.display(),
            canonical.display()
        );
        return Ok(());
    }
    if let Some(first) = visited.seen.get(&canonical) {
        return Err(Error::source(
            dir,
            format!(
                "the folder {} is reached twice, as {} and as {} (through a link): its images \
                 would be read twice, under two labels if in two class folders; remove one link",
                canonical.display(),
                first.display(),
                dir.display()
            ),
        ));
    }
    visited.seen.insert(canonical.clone(), dir.to_path_buf());
    visited.ancestors.push(canonical);
    let walked = collect_entries(dir, out, visited);
    visited.ancestors.pop();
    walked
}

fn collect_entries(dir: &Path, out: &mut Walked<'_>, visited: &mut Visited) -> Result<(), Error> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if is_hidden(&name) {
            continue;
        }
        let p = entry.path();
        let ft = entry.file_type().map_err(|e| Error::io(&p, e))?;
        if ft.is_dir() || (ft.is_symlink() && p.is_dir()) {
            collect_images(&p, out, visited)?;
        } else if has_image_extension(&p) {
            if ft.is_symlink() {
                check_file_link(&p, visited)?;
            }
            out.push(&p);
        }
    }
    Ok(())
}

/// Refuses a link to an image that is a sample of the walk itself (in a class folder of the
/// same source): the image would be read twice, under two labels if the link is in another
/// class folder, as with a folder reached twice. A link to an image outside the source
/// folder is that image's one sample. (Only links are checked: a hard link would need a
/// `stat` of every file.)
fn check_file_link(link: &Path, visited: &Visited) -> Result<(), Error> {
    let (Ok(target), Some(root)) = (std::fs::canonicalize(link), visited.ancestors.first()) else {
        return Ok(()); // a dangling link: reading it names it
    };
    let Ok(rel) = target.strip_prefix(root) else {
        return Ok(());
    };
    let parts: Vec<&OsStr> = rel.iter().collect();
    let walked = parts.len() >= 2
        && visited.classes.iter().any(|c| c.as_os_str() == parts[0])
        && !parts.iter().any(|c| is_hidden(c))
        && has_image_extension(&target);
    if !walked {
        return Ok(());
    }
    Err(Error::source(
        link,
        format!(
            "a link to {}, which is a sample of class `{}` itself: the image would be read \
             twice, under two labels if in two class folders; remove the link (or copy the file)",
            target.display(),
            parts[0].to_string_lossy()
        ),
    ))
}

/// The first visible sub-folder of `dir` that holds an image file directly, if any.
fn class_folder_with_images(dir: &Path) -> Result<Option<std::ffi::OsString>, Error> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if is_hidden(&name) || !entry.path().is_dir() {
            continue;
        }
        let Ok(inner) = std::fs::read_dir(entry.path()) else {
            continue;
        };
        for e in inner.flatten() {
            if !is_hidden(&e.file_name()) && has_image_extension(&e.path()) {
                return Ok(Some(name));
            }
        }
    }
    Ok(None)
}

pub(crate) fn has_image_extension(p: &Path) -> bool {
    p.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

pub(crate) fn check_count(index: &FileIndex) -> Result<(), Error> {
    if index.len() > u32::MAX as usize {
        return Err(Error::source(
            &index.origin,
            format!(
                "{} samples: at most {} are supported",
                index.len(),
                u32::MAX
            ),
        ));
    }
    Ok(())
}

/// Parses a list file's bytes (pure core of [`Source::from_list_file`]).
pub(crate) fn parse_list(list: &Path, base: PathBuf, data: &[u8]) -> Result<FileIndex, Error> {
    parse_list_from(list, base, data, data.len() as u64)
}

/// The longest list line kept in memory: a path at [`MAX_PATH_BYTES`], its label and room for
/// spacing. A longer line is refused (or, a comment, skipped) without being held.
const MAX_LINE_BYTES: usize = 16 << 10;

/// A compressed tar file (`x.tar.gz`, `x.tgz`, ...) directly in `dir`, if there is one.
fn compressed_tar_in(dir: &Path) -> Option<std::ffi::OsString> {
    const ENDINGS: [&str; 8] = [
        ".tar.gz",
        ".tgz",
        ".tar.zst",
        ".tar.zstd",
        ".tar.xz",
        ".txz",
        ".tar.bz2",
        ".tar.lz4",
    ];
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name())
        .find(|name| {
            let lower = name.to_string_lossy().to_ascii_lowercase();
            ENDINGS.iter().any(|end| lower.ends_with(end))
        })
}

/// What a file starting with `head` holds, if it is plainly not a text list.
fn binary_kind(head: &[u8]) -> Option<String> {
    const KINDS: [(&[u8], &str); 5] = [
        (b"\xff\xfe", "UTF-16 text: save it as UTF-8"),
        (b"\xfe\xff", "UTF-16 text: save it as UTF-8"),
        (b"PK\x03\x04", "a zip archive: unpack it"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"\x89PNG", "a PNG image"),
    ];
    if let Some((_, kind)) = KINDS.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some(kind.to_string());
    }
    if let Some((kind, tool)) = crate::shards::compression_of(head) {
        return Some(format!("{kind}-compressed data: decompress it (`{tool}`)"));
    }
    // `BZh9` then the block magic (a list's first path may well start with "BZh").
    if head.len() >= 10 && head.starts_with(b"BZh") && &head[4..10] == b"1AY&SY" {
        return Some("bzip2-compressed data: decompress it (`bunzip2`)".into());
    }
    (head.get(257..262) == Some(b"ustar"))
        .then(|| "a tar archive: open it as tar shards (name it .tar)".into())
}

/// Parses a file list read line by line from `reader`, holding one line at a time, so the
/// memory it takes is the index it builds plus 24 bytes an entry while it runs (for duplicate
/// detection), whatever the list's size or content. `size_hint`: the list's length in bytes,
/// if known (an upper bound of the index's path bytes, reserved up front).
pub(crate) fn parse_list_from(
    list: &Path,
    base: PathBuf,
    mut reader: impl std::io::BufRead,
    size_hint: u64,
) -> Result<FileIndex, Error> {
    use std::io::{BufRead as _, Read as _};
    let mut index = FileIndex::with_origin(list.to_path_buf(), base);
    // Reserved, not touched: pages are only used as paths are written.
    let _ = index
        .bytes
        .try_reserve(usize::try_from(size_hint).unwrap_or(0));
    // Per entry, its path's hash and its line: duplicates are found by sorting these after
    // the last line (24 bytes an entry, freed when parsing ends).
    let mut keyed: Vec<(u64, u32)> = Vec::new();
    let mut lines: Vec<u64> = Vec::new();
    // Paths are compared as absolute paths under the list's folder (see `list_key`).
    // (A list named by a bare file name has an empty folder: the current one.)
    let folder = if index.base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        index.base.as_path()
    };
    let anchor = std::fs::canonicalize(folder).unwrap_or_else(|_| index.base.clone());
    let anchor = os_to_bytes(anchor.as_os_str());
    let mut key = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    let mut line_no = 0u64;
    // A file that is not a text list at all (a shard, an image, a compressed list) fails on
    // its first "line" with a label made of binary bytes: say what it is instead.
    if let Some(kind) = binary_kind(reader.fill_buf().map_err(|e| Error::io(list, e))?) {
        return Err(Error::source(
            list,
            format!("is not a file list of `PATH<TAB>LABEL` lines: it holds {kind}"),
        ));
    }
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(list, e))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            let total =
                buf.len() as u64 + skip_line(&mut reader).map_err(|e| Error::io(list, e))?;
            if trim(&buf).first() == Some(&b'#') {
                continue; // a long comment
            }
            let start: String = String::from_utf8_lossy(&buf[..480])
                .chars()
                .take(120)
                .collect();
            return Err(Error::list(
                list,
                line_no as usize,
                format!(
                    "the line is {total} bytes long, over the {MAX_LINE_BYTES}-byte limit of list lines (paths are at most {MAX_PATH_BYTES} bytes): `{start}...`"
                ),
            ));
        }
        let mut raw: &[u8] = &buf;
        if line_no == 1 {
            raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
        }
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = trim(raw);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let at = line_no as usize;
        if line.contains(&b'\r') {
            // Lines ended by a bare CR (classic Mac OS, some exporters) read as one line whose
            // "path" runs over many entries, and whose last label would be taken.
            return Err(Error::list(
                list,
                at,
                "a carriage return (CR) inside the line: the list's lines seem to end in bare \
                 CRs; end them in LF (or CRLF)",
            ));
        }
        let (path, label) = split_line(line).ok_or_else(|| {
            Error::list(
                list,
                at,
                format!(
                    "expected `PATH<TAB>LABEL` or `PATH LABEL`, found `{}` (no label)",
                    shown(line)
                ),
            )
        })?;
        let label = parse_label(label).map_err(|reason| Error::list(list, at, reason))?;
        // `a.jpg<TAB>3<TAB>7`: a list with more columns than PATH and LABEL, whose path would
        // otherwise be `a.jpg<TAB>3` and fail to open far from here.
        if let Some(tab) = path.iter().rposition(|&b| b == b'\t') {
            let field = trim(&path[tab + 1..]);
            if !field.is_empty() && parse_label(field).is_ok() {
                return Err(Error::list(
                    list,
                    at,
                    format!(
                        "more than two tab-separated fields (`{}`): expected `PATH<TAB>LABEL`",
                        shown(line)
                    ),
                ));
            }
        }
        if path.contains(&0) {
            return Err(Error::list(list, at, "the path contains a NUL byte"));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(Error::list(
                list,
                at,
                format!(
                    "the path is {} bytes long, over the {MAX_PATH_BYTES}-byte limit of paths (`{}`)",
                    path.len(),
                    shown(path)
                ),
            ));
        }
        if index.len() >= u32::MAX as usize {
            return Err(Error::list(list, at, "more than 2^32-1 entries"));
        }
        list_key(&anchor, path, &mut key);
        keyed.push((xxhash_rust::xxh3::xxh3_64(&key), index.len() as u32));
        lines.push(line_no);
        index.push(path, label);
    }
    drop(buf);
    if index.len() == 0 {
        return Err(Error::source(list, "the list has no entries"));
    }
    let duplicates = check_duplicates(list, &index, &anchor, keyed, &lines)?;
    if duplicates > 0 {
        log::warn!(
            "{}: {duplicates} path(s) listed more than once; each listing is a sample",
            list.display()
        );
    }
    index.shrink();
    Ok(index)
}

/// Skips the rest of a line; returns how many bytes it held (not counting its newline).
fn skip_line(reader: &mut impl std::io::BufRead) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped);
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(i + 1);
            return Ok(skipped + i as u64);
        }
        let n = buf.len();
        reader.consume(n);
        skipped += n as u64;
    }
}

/// The key under which the duplicate check compares a listed path: joined to `anchor` (the
/// list's folder, made absolute) unless absolute, with `.` components, repeated slashes and
/// `..` (with what it cancels) removed, so `a.jpg`, `./a.jpg`, `sub/../a.jpg` and the file's
/// absolute path are one path. (Through a symbolic link `sub/..` need not lead back; two
/// such spellings of different files would then be taken for one, and two labels for them
/// refused. Symbolic and hard links to one file under two names are not looked for: that
/// would take a `stat` of every listed file.)
fn list_key(anchor: &[u8], path: &[u8], out: &mut Vec<u8>) {
    let absolute = path.starts_with(b"/");
    let mut parts: Vec<&[u8]> = Vec::new();
    let joined = [if absolute { &b""[..] } else { anchor }, b"/", path];
    let rooted = joined[0].starts_with(b"/") || absolute;
    for part in joined.iter().flat_map(|p| p.split(|&b| b == b'/')) {
        match part {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|p| *p != b"..") => {
                parts.pop();
            }
            b".." if rooted => {}
            p => parts.push(p),
        }
    }
    out.clear();
    if rooted {
        out.push(b'/');
    }
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(p);
    }
}

/// Finds paths listed more than once (`keyed`: each entry's path hash and number; `lines`:
/// each entry's line). The same path with the same label is a duplicate (counted); with
/// another label it is an error naming the first such line in the file and the path's first
/// listing.
fn check_duplicates(
    list: &Path,
    index: &FileIndex,
    anchor: &[u8],
    mut keyed: Vec<(u64, u32)>,
    lines: &[u64],
) -> Result<u64, Error> {
    keyed.sort_unstable();
    let mut duplicates = 0u64;
    // (later entry, its path's first entry) of the earliest conflict.
    let mut conflict: Option<(u32, u32)> = None;
    let mut group: Vec<u32> = Vec::new();
    for same_hash in keyed.chunk_by(|a, b| a.0 == b.0) {
        if same_hash.len() < 2 {
            continue;
        }
        // By path, then entry: each path's first listing leads its run.
        group.clear();
        group.extend(same_hash.iter().map(|k| k.1));
        let key = |i: u32| {
            let mut k = Vec::new();
            list_key(anchor, index.raw_path(i as usize), &mut k);
            k
        };
        group.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)).then(a.cmp(&b)));
        for run in group.chunk_by(|&a, &b| key(a) == key(b)) {
            let first = run[0];
            for &later in &run[1..] {
                if index.label(later as usize) == index.label(first as usize) {
                    duplicates += 1;
                } else if conflict.is_none_or(|(c, _)| later < c) {
                    conflict = Some((later, first));
                }
            }
        }
    }
    match conflict {
        None => Ok(duplicates),
        Some((later, first)) => Err(Error::list(
            list,
            lines[later as usize] as usize,
            format!(
                "`{}` is listed again with label {}, but line {} gives it label {}",
                shown(index.raw_path(later as usize)),
                index.label(later as usize),
                lines[first as usize],
                index.label(first as usize)
            ),
        )),
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// Splits a trimmed line into (path, label field) at its last run of whitespace.
fn split_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let cut = line.iter().rposition(|b| b.is_ascii_whitespace())?;
    let label = &line[cut + 1..];
    let path = trim(&line[..cut]);
    if path.is_empty() || label.is_empty() {
        return None;
    }
    Some((path, label))
}

/// Linux's PATH_MAX: no longer path can be opened.
const MAX_PATH_BYTES: usize = 4096;

/// Bytes from a list line (or a tar member name) as text for an error message: lossily decoded and cut to about 120
/// characters (a binary file or a megabyte-long line would otherwise flood the terminal).
pub(crate) fn shown(bytes: &[u8]) -> String {
    const KEEP: usize = 120;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(KEEP * 4)]);
    // Control characters escaped: a message never drives the terminal it is printed on.
    let escape = |t: &str| -> String {
        t.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    if bytes.len() <= KEEP * 4 && text.chars().count() <= KEEP {
        return escape(&text);
    }
    let cut: String = text.chars().take(KEEP).collect();
    format!("{}... ({} bytes in all)", escape(&cut), bytes.len())
}

/// A label: a decimal number from 0 to `u32::MAX`, leading zeros and a `+` allowed; the error
/// quotes the field. The one rule for list lines and tar shards' `.cls` members.
pub(crate) fn parse_label(field: &[u8]) -> Result<u32, String> {
    let text = shown(field);
    let digits = field.strip_prefix(b"+").unwrap_or(field);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        if field.first() == Some(&b'-')
            && field[1..].iter().all(u8::is_ascii_digit)
            && field.len() > 1
        {
            return Err(format!(
                "label `{text}` is out of range: labels must be 0 or more"
            ));
        }
        return Err(format!("label `{text}` is not an integer"));
    }
    // Leading zeros are fine; anything beyond u32 is out of range.
    let mut v: u64 = 0;
    for &d in digits {
        v = v * 10 + u64::from(d - b'0');
        if v > u64::from(u32::MAX) {
            return Err(format!(
                "label `{text}` is out of range (at most {})",
                u32::MAX
            ));
        }
    }
    Ok(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<FileIndex, Error> {
        parse_list(Path::new("list.txt"), PathBuf::from("/data"), s)
    }

    #[test]
    fn parses_tab_and_space_forms_comments_blank_lines() {
        let idx = parse(b"# header\na.jpg\t3\n\n  b c.jpg 4  \r\n/abs/d.png\t0\n").unwrap();
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.raw_path(0), b"a.jpg");
        assert_eq!(idx.label(0), 3);
        assert_eq!(idx.raw_path(1), b"b c.jpg");
        assert_eq!(idx.label(1), 4);
        assert_eq!(idx.path(0), PathBuf::from("/data/a.jpg"));
        assert_eq!(idx.path(2), PathBuf::from("/abs/d.png"));
        // A third column is an error at its line, not a path `a.jpg<TAB>3` that fails to
        // open later; a tab inside a file name is still a path.
        let err = parse(b"a.jpg\t3\nb.jpg\t3\nc.jpg\t1\t7\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("list.txt:3: more than two tab-separated fields"),
            "{msg}"
        );
        let idx = parse(b"odd\tname.jpg\t2\n").unwrap();
        assert_eq!((idx.raw_path(0), idx.label(0)), (&b"odd\tname.jpg"[..], 2));
    }

    #[test]
    fn bom_and_crlf() {
        let idx = parse(b"\xEF\xBB\xBFa.jpg 1\r\nb.jpg 2\r\n").unwrap();
        assert_eq!(idx.raw_path(0), b"a.jpg");
        assert_eq!(idx.label(1), 2);
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let err = parse(b"a.jpg 1\nonly_a_path.jpg\n").unwrap_err();
        assert_eq!(err.to_string().split(':').nth(1), Some("2"));
        assert!(err.to_string().contains("no label"), "{err}");
        let err = parse(b"a.jpg x\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("list.txt:1: label `x` is not an integer"),
            "{err}"
        );
        let err = parse(b"a.jpg -1\n").unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let err = parse(b"a.jpg 99999999999\n").unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let err = parse(b"a.jpg 1.5\n").unwrap_err();
        assert!(err.to_string().contains("not an integer"), "{err}");
    }

    #[test]
    fn long_lines_and_binary_lists_give_short_errors() {
        // A 5 MB path: refused by its line's length, named by line, and the message stays
        // short.
        let mut list = b"a.jpg 1\n".to_vec();
        list.extend(std::iter::repeat_n(b'p', 5_000_000));
        list.extend_from_slice(b" 2\n");
        let msg = parse(&list).unwrap_err().to_string();
        assert!(
            msg.starts_with(
                "list.txt:2: the line is 5000002 bytes long, over the 16384-byte limit"
            ),
            "{msg:.300}"
        );
        assert!(msg.len() < 400, "{} bytes of message", msg.len());
        // A path over the limit on a line under it: the path's own message.
        let mut list = vec![b'q'; MAX_PATH_BYTES + 1];
        list.extend_from_slice(b" 0\n");
        let msg = parse(&list).unwrap_err().to_string();
        assert!(
            msg.starts_with("list.txt:1: the path is 4097 bytes long, over the 4096-byte limit"),
            "{msg:.300}"
        );
        // A path at the limit is fine, and so is a line at its limit.
        let mut list = vec![b'q'; MAX_PATH_BYTES];
        list.extend_from_slice(b" 0\n");
        assert_eq!(parse(&list).unwrap().raw_path(0).len(), MAX_PATH_BYTES);
        let mut list = vec![b'q'; MAX_PATH_BYTES];
        list.resize(MAX_LINE_BYTES - 2, b' ');
        list.extend_from_slice(b" 7\nb.jpg 1\n");
        let idx = parse(&list).unwrap();
        assert_eq!((idx.len(), idx.label(0), idx.label(1)), (2, 7, 1));
        let mut list = vec![b'q'; MAX_PATH_BYTES];
        list.resize(MAX_LINE_BYTES - 1, b' ');
        list.extend_from_slice(b" 7\n");
        assert!(parse(&list).is_err());
        // Binary data given as a list: an error about line 1, not a screenful of bytes.
        let binary: Vec<u8> = (0..1_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let msg = parse(&binary).unwrap_err().to_string();
        assert!(msg.starts_with("list.txt:"), "{msg:.300}");
        assert!(msg.len() < 700, "{} bytes of message", msg.len());
        // Long labels and lines without a label are cut too.
        let mut list = b"a.jpg ".to_vec();
        list.extend(std::iter::repeat_n(b'x', 10_000));
        let msg = parse(&list).unwrap_err().to_string();
        assert!(
            msg.contains("is not an integer") && msg.contains("10000 bytes in all"),
            "{msg:.300}"
        );
        assert_eq!(shown("é".repeat(100).as_bytes()), "é".repeat(100));
    }

    /// A list read through a tiny buffer, so lines and the skipped rest of a long one cross
    /// buffer boundaries.
    fn parse_slowly(s: &[u8]) -> Result<FileIndex, Error> {
        let reader = std::io::BufReader::with_capacity(7, s);
        parse_list_from(Path::new("list.txt"), PathBuf::from("/data"), reader, 0)
    }

    #[test]
    fn lists_are_read_a_line_at_a_time() {
        let mut list = b"\xEF\xBB\xBFa.jpg\t0\r\n".to_vec();
        // A long comment is skipped, however long.
        list.extend_from_slice(b"  # ");
        list.extend(std::iter::repeat_n(b'c', 100_000));
        list.extend_from_slice(b"\nsub dir/b c.jpg 12\n\n#x\nlast.png 3");
        for idx in [parse(&list).unwrap(), parse_slowly(&list).unwrap()] {
            assert_eq!(idx.len(), 3);
            assert_eq!(idx.raw_path(0), b"a.jpg");
            assert_eq!(
                (idx.raw_path(1), idx.label(1)),
                (&b"sub dir/b c.jpg"[..], 12)
            );
            assert_eq!((idx.raw_path(2), idx.label(2)), (&b"last.png"[..], 3));
        }
        // A long line's length is counted to its end, and the next line is not read.
        let mut list = b"a.jpg 0\n".to_vec();
        list.extend(std::iter::repeat_n(b'z', 50_000));
        list.extend_from_slice(b" 1\nthis line is bad\n");
        let msg = parse_slowly(&list).unwrap_err().to_string();
        assert!(
            msg.starts_with("list.txt:2: the line is 50002 bytes long"),
            "{msg:.200}"
        );
        // The byte-order mark is only skipped at the start of the list.
        let idx = parse(b"a.jpg 0\n\xEF\xBB\xBFb.jpg 1\n").unwrap();
        assert_eq!(idx.raw_path(1), b"\xEF\xBB\xBFb.jpg");
    }

    #[test]
    fn empty_list_is_an_error() {
        assert!(parse(b"").is_err());
        assert!(parse(b"# only a comment\n\n").is_err());
    }

    #[test]
    fn duplicates_same_label_kept_conflicting_label_rejected() {
        let idx = parse(b"a.jpg 1\na.jpg 1\n").unwrap();
        assert_eq!(idx.len(), 2);
        let err = parse(b"a.jpg 1\nb.jpg 0\na.jpg 2\n").unwrap_err();
        assert!(err.to_string().contains("list.txt:3:"), "{err}");
        assert!(err.to_string().contains("line 1"), "{err}");
        // Several conflicts: the first in the file is reported, against the path's first
        // listing (not a later duplicate of it).
        let list = b"z.jpg 5\na.jpg 1\nz.jpg 5\nq.jpg 0\na.jpg 1\nz.jpg 6\na.jpg 9\n";
        let err = parse(list).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "list.txt:6: `z.jpg` is listed again with label 6, but line 1 gives it label 5"
            ),
            "{err}"
        );
        // Spellings of one path that differ only by `.` components or doubled slashes are
        // the same path: two labels for it are a conflict too.
        let err = parse(b"img0.jpg 1\n./img0.jpg 2\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("list.txt:2: `./img0.jpg` is listed again"),
            "{err}"
        );
        assert!(parse(b"d//a.jpg 1\nd/./a.jpg 1\n../d/a.jpg 2\n").is_ok());
        let err = parse(b"a.jpg 1\nsub/../a.jpg 2\n").unwrap_err().to_string();
        assert!(err.contains("listed again"), "{err}");
        // A list named by a bare file name lives in the current folder: its relative paths
        // and their absolute spellings are one path too.
        let cwd = std::env::current_dir().unwrap();
        let text = format!("a.jpg 1\n{}/a.jpg 2\n", cwd.display());
        let err = parse_list(Path::new("list.txt"), PathBuf::new(), text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("listed again"), "{err}");
        let k = |anchor: &[u8], p: &[u8]| {
            let mut out = Vec::new();
            list_key(anchor, p, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(k(b"/data", b"./d//./a.jpg"), "/data/d/a.jpg");
        assert_eq!(k(b"/data", b"sub/../a.jpg"), "/data/a.jpg");
        assert_eq!(k(b"/data", b"/data/a.jpg"), "/data/a.jpg");
        assert_eq!(k(b"/data", b"/x/./y/"), "/x/y");
        assert_eq!(k(b"/data", b"../../../a.jpg"), "/a.jpg");
        assert_eq!(k(b"rel", b"../../a.jpg"), "../a.jpg");
        assert_eq!(k(b"", b"a.jpg"), "a.jpg");
        // Many listings of one path stay cheap, and all count.
        let many = b"p.jpg 3\n".repeat(100_000);
        let idx = parse(&many).unwrap();
        assert_eq!(idx.len(), 100_000);
    }

    #[test]
    fn class_folders_list_their_images_in_path_order() {
        // Component order, as sorting `PathBuf`s gives (`a/b.jpg` before `a-b.jpg`, which byte
        // order would swap), nested folders included, hidden and other files left out.
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "x/a-b.jpg",
            "x/a/b.jpg",
            "x/a.jpg",
            "x/B.PNG",
            "x/a/a/z.jpeg",
            "x/ab.jpg",
            "y/2.jpg",
            "y/10.jpg",
            "y/.hidden.jpg",
            "y/notes.txt",
        ];
        for n in names {
            let p = dir.path().join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        let src = Source::from_dir(dir.path()).unwrap();
        let got: Vec<(PathBuf, u32)> = (0..src.len())
            .map(|i| (src.path(i).unwrap(), src.label(i).unwrap()))
            .collect();
        let mut want: Vec<(PathBuf, u32)> = names[..6]
            .iter()
            .map(|n| (dir.path().join(n), 0))
            .chain(names[6..8].iter().map(|n| (dir.path().join(n), 1)))
            .collect();
        want.sort();
        assert_eq!(got, want);
        // `B.PNG` (upper case sorts first), then the two inside `a/`, then `a-b.jpg`.
        assert!(got[1..3]
            .iter()
            .all(|(p, _)| p.starts_with(dir.path().join("x/a"))));
        assert_eq!(got[3].0, dir.path().join("x/a-b.jpg"));
    }

    #[test]
    fn a_folder_of_images_without_class_folders_says_how_to_read_them() {
        let dir = tempfile::tempdir().unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders: expected one sub-folder"),
            "{e}"
        );
        // Hidden images and other files do not count as images lying in the folder.
        std::fs::write(dir.path().join(".x.jpg"), b"").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders: expected one sub-folder"),
            "{e}"
        );
        std::fs::write(dir.path().join("a.JPG"), b"").unwrap();
        let e = Source::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no class folders, only images directly in it")
                && e.contains("write a file list with a label for each"),
            "{e}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_survive() {
        let idx = parse(b"caf\xE9.jpg 0\n").unwrap();
        assert_eq!(idx.raw_path(0), b"caf\xE9.jpg");
    }

    #[test]
    fn index_is_compact() {
        let mut list = Vec::new();
        for i in 0..10_000 {
            list.extend_from_slice(
                format!("train/n01440764/n01440764_{i:05}.JPEG\t{}\n", i % 1000).as_bytes(),
            );
        }
        let idx = parse(&list).unwrap();
        // 35-byte paths + 12 bytes of offset and label.
        assert!(idx.heap_bytes() <= 10_000 * 48, "{}", idx.heap_bytes());
    }
}
