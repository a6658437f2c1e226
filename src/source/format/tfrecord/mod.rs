//! TFRecord shards of `tf.train.Example`s, as TensorFlow's ImageNet build script and TFDS write
//! them: files named `*.tfrecord`, `*.tfrec`, or anything whose first record's framing checks
//! (`train-00000-of-01024`, TFDS's `imagenet2012-train.tfrecord-00000-of-01024`), plain, GZIP
//! or ZLIB compressed.
//!
//! A record is `length: u64 LE | masked CRC32C of length: u32 | payload | masked CRC32C of
//! payload: u32`, the payload a serialized `Example` (`example.rs` reads it).
//!
//! **Access pattern: indexed on open, read as streams** (the tar shards' model). Opening walks
//! every shard once, as DALI's `tfrecord2idx` does, checking each record's length CRC and
//! reading the `Example` for its label while seeking over the image bytes: about one 8 KiB read
//! a record, not the dataset (ImageNet's 1.28 million records: 1.28 million small reads, and
//! 20 bytes a sample of index beside the path). The labels are therefore known before the
//! first epoch, in the source's index, like a file list's: the batcher, the cache records, the
//! fingerprint and `num_classes` read them there. A compressed shard cannot be seeked: opening
//! inflates it whole (one read of its bytes). Each epoch visits the shards in a seeded order
//! and reads each front to back as one stream, at most the fetch stage's byte bound ahead; a
//! shuffle buffer mixes samples (the command line's default: 1,000).
//!
//! **Checks.** Opening refuses, naming the shard and the record's byte offset: a length whose
//! CRC fails (damaged framing, or not a TFRecord file), a record cut short by the end of the
//! file, a label that is not one integer in `0..=u32::MAX`, labels on some records only, and a
//! dataset where no record has the image key (the keys found are named). A record whose
//! `Example` is malformed or lacks the image key is a bad sample: its epoch read is a
//! skippable error naming it. Every epoch read checks the length and payload CRCs (a bad
//! payload is a skippable error naming the shard and the record's offset) and that the record
//! still is what was indexed (its length and label); a length field is compared with the file
//! before anything is allocated for it.

pub(crate) mod example;
mod read;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use example::Wire;
pub(crate) use example::{pick, walk, Fault, Problem, Slice};

use crate::error::Error;
use crate::source::storage::{Located, Place};
use crate::source::{Backing, FileIndex, Source};

/// The feature keys and limits for TFRecord shards (see [`Source::from_tfrecords_with`]).
///
/// ```
/// let options = imagefeed::TfRecordOptions::default()
///     .image_key("jpeg")
///     .label_key("class");
/// assert_eq!(options.image_key.as_deref(), Some("jpeg"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TfRecordOptions {
    /// The `bytes` feature holding the encoded image. `None` (the default): TensorFlow's
    /// ImageNet script's `image/encoded`, or in a record without it TFDS's `image`.
    pub image_key: Option<String>,
    /// The `int64` feature holding the label. `None` (the default): `image/class/label`, or
    /// TFDS's `label`; a dataset with neither is unlabelled (every label 0, with a warning).
    /// A key set here must be in every record.
    pub label_key: Option<String>,
    /// The most fetched record bytes held at once, read and waiting to be decoded (default
    /// 64 MiB; one record larger than this is still read, alone).
    pub max_bytes_in_flight: u64,
}

impl Default for TfRecordOptions {
    fn default() -> Self {
        TfRecordOptions {
            image_key: None,
            label_key: None,
            max_bytes_in_flight: 64 << 20,
        }
    }
}

impl TfRecordOptions {
    /// Sets [`TfRecordOptions::image_key`].
    pub fn image_key(mut self, key: impl Into<String>) -> Self {
        self.image_key = Some(key.into());
        self
    }
    /// Sets [`TfRecordOptions::label_key`].
    pub fn label_key(mut self, key: impl Into<String>) -> Self {
        self.label_key = Some(key.into());
        self
    }
    /// Sets [`TfRecordOptions::max_bytes_in_flight`].
    pub fn max_bytes_in_flight(mut self, bytes: u64) -> Self {
        self.max_bytes_in_flight = bytes;
        self
    }

    /// The image keys to look for, in order, then the label keys.
    fn keys(&self) -> (Vec<String>, Vec<String>) {
        let or = |set: &Option<String>, a: &str, b: &str| match set {
            Some(k) => vec![k.clone()],
            None => vec![a.to_string(), b.to_string()],
        };
        (
            or(&self.image_key, "image/encoded", "image"),
            or(&self.label_key, "image/class/label", "label"),
        )
    }
}

/// How a shard's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zlib,
}

/// One indexed shard.
#[derive(Debug)]
pub(crate) struct Shard {
    /// Where it is, its size and modification time.
    pub(crate) file: Located,
    pub(crate) name: String,
    pub(crate) compression: Compression,
    /// Its samples are `first..first + count`.
    pub(crate) first: u32,
    pub(crate) count: u32,
}

/// Where every record lies, and the keys read from them.
#[derive(Debug)]
pub(crate) struct TfRecordIndex {
    pub(crate) shards: Vec<Shard>,
    shard_of: Vec<u32>,
    /// The byte offset of each record's frame (in the inflated stream, for a compressed shard).
    offset: Vec<u64>,
    /// Each record's payload length.
    len: Vec<u64>,
    /// Records found malformed while indexing, with why: bad samples.
    bad: HashMap<u32, String>,
    image_keys: Vec<String>,
    label_keys: Vec<String>,
    max_bytes_in_flight: u64,
}

impl TfRecordIndex {
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.shard_of.capacity() * 4
            + self.offset.capacity() * 8
            + self.len.capacity() * 8
            + self.bad.len() * 64
            + self
                .shards
                .iter()
                .map(|s| s.name.len() * 2 + std::mem::size_of::<Shard>())
                .sum::<usize>()) as u64
    }

    /// `(shard, frame offset, payload length)` of record `i`.
    pub(crate) fn locate(&self, i: usize) -> (u32, u64, u64) {
        (self.shard_of[i], self.offset[i], self.len[i])
    }

    /// The mean payload length (`None` without records).
    pub(crate) fn mean_len(&self) -> Option<u64> {
        let total = self.len.iter().fold(0u64, |a, &l| a.saturating_add(l));
        total.checked_div(self.len.len() as u64)
    }

    pub(crate) fn stamp(&self, i: usize) -> (u64, u128) {
        let s = &self.shards[self.shard_of[i] as usize];
        (
            s.file.size ^ self.offset[i].rotate_left(32) ^ self.len[i],
            s.file.mtime,
        )
    }

    pub(crate) fn byte_bound(&self) -> u64 {
        self.max_bytes_in_flight
    }

    /// Each shard's samples, in order: the streams an epoch reads.
    pub(crate) fn streams(&self) -> Vec<std::ops::Range<u32>> {
        self.shards
            .iter()
            .map(|s| s.first..s.first + s.count)
            .collect()
    }
}

/// TFRecord's masked CRC32C.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// Whether a 12-byte frame header (length and its masked CRC) checks.
fn frame_checks(head: &[u8; 12]) -> bool {
    let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    masked_crc(&head[..8]) == crc
}

/// True for a name TFRecord files are given: `*.tfrecord`, `*.tfrecords`, `*.tfrec`, with
/// TFDS's `-00000-of-01024` after it or `.gz` (any case).
pub(crate) fn is_tfrecord_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".tfrecord", ".tfrecords", ".tfrec"].iter().any(|ext| {
        lower.ends_with(ext)
            || lower.ends_with(&format!("{ext}.gz"))
            || lower.contains(&format!("{ext}-"))
    })
}

/// The compression of a file whose first record's framing checks (plain, or inflated from
/// GZIP or ZLIB); `None` for a file that does not start with a TFRecord frame (or is empty).
pub(crate) fn sniff(path: &Path) -> Option<Compression> {
    let file = Located::local(path, "a TFRecord file").ok()?;
    sniff_head(&file.head(SNIFF_BYTES).ok()?)
}

/// The bytes of a file's start that [`sniff_head`] reads.
pub(crate) const SNIFF_BYTES: u64 = 4096;

/// The compression of a file whose first bytes (`SNIFF_BYTES` of them, or the whole file)
/// are `bytes`, if its first record's framing checks.
pub(crate) fn sniff_head(bytes: &[u8]) -> Option<Compression> {
    let head: [u8; 12] = bytes.get(..12)?.try_into().ok()?;
    if frame_checks(&head) {
        return Some(Compression::None);
    }
    let kind = if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head[0] & 0x0F == 8 && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0 {
        Compression::Zlib
    } else {
        return None;
    };
    let mut inflated = [0u8; 12];
    open_stream(Box::new(std::io::Cursor::new(bytes.to_vec())), kind)
        .read_exact(&mut inflated)
        .ok()?;
    frame_checks(&inflated).then_some(kind)
}

/// The compression of a file that is a TFRecord by its name: what its first bytes say
/// (an empty file is a shard of no records).
fn compression_by_magic(file: &Located) -> Result<Compression, Error> {
    let head = file.head(SNIFF_BYTES)?;
    Ok(match sniff_head(&head) {
        Some(c) => c,
        None if head.starts_with(&[0x1f, 0x8b]) => Compression::Gzip,
        None => Compression::None,
    })
}

/// A stream of a shard's (inflated) bytes from its start.
pub(crate) fn open_stream(
    file: Box<dyn Read + Send>,
    kind: Compression,
) -> Box<dyn BufRead + Send> {
    match kind {
        Compression::None => Box::new(BufReader::with_capacity(256 << 10, file)),
        // Several members, as `cat a.gz b.gz` makes, read as one stream (gzip's rule).
        Compression::Gzip => Box::new(BufReader::with_capacity(
            64 << 10,
            flate2::read::MultiGzDecoder::new(BufReader::with_capacity(64 << 10, file)),
        )),
        Compression::Zlib => Box::new(BufReader::with_capacity(
            64 << 10,
            flate2::read::ZlibDecoder::new(BufReader::with_capacity(64 << 10, file)),
        )),
    }
}

/// The TFRecord files directly in `dir` (by name or by their framing), sorted; hidden files
/// and TFDS's metadata (`*.json`, `*.txt`) are not looked at.
pub(crate) fn files_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        if crate::source::format::dir::is_hidden(&name) || !entry.path().is_file() {
            continue;
        }
        let lower = text.to_ascii_lowercase();
        if [".json", ".txt", ".tar", ".parquet", ".idx", ".md"]
            .iter()
            .any(|x| lower.ends_with(x))
        {
            continue;
        }
        if is_tfrecord_name(&text) || sniff(&entry.path()).is_some() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// What a plain shard is read from while indexing: a file, or bytes (the fuzz target).
trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// Reads a shard front to back, seeking over what the index does not need.
struct Walker {
    reader: Box<dyn BufRead + Send>,
    /// For a plain file: seek instead of reading to skip.
    file: Option<Box<dyn ReadSeek>>,
    pos: u64,
}

impl Walker {
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            let n = match &mut self.file {
                Some(f) => f.read(&mut buf[got..]),
                None => self.reader.read(&mut buf[got..]),
            };
            match n {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pos += got as u64;
        Ok(got)
    }
}

impl Wire for Walker {
    fn byte(&mut self) -> Result<u8, Fault> {
        let mut b = [0u8];
        if self.read_some(&mut b)? == 1 {
            Ok(b[0])
        } else {
            Err(Fault::Io(std::io::ErrorKind::UnexpectedEof.into()))
        }
    }
    fn take(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), Fault> {
        out.clear();
        out.resize(n, 0);
        if self.read_some(out)? == n {
            Ok(())
        } else {
            Err(Fault::Io(std::io::ErrorKind::UnexpectedEof.into()))
        }
    }
    fn skip(&mut self, n: u64) -> Result<(), Fault> {
        match &mut self.file {
            Some(f) => {
                let step = i64::try_from(n).map_err(|_| Fault::Bad("a length over 2^63".into()))?;
                f.seek_relative(step)?;
                self.pos += n;
            }
            None => {
                let got = std::io::copy(&mut (&mut self.reader).take(n), &mut std::io::sink())?;
                self.pos += got;
                if got < n {
                    return Err(Fault::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
        Ok(())
    }
    fn pos(&self) -> u64 {
        self.pos
    }
}

/// One record found while indexing: frame offset, payload length, label, and why it is a bad
/// sample (if it is).
struct Found {
    offset: u64,
    len: u64,
    label: Option<u32>,
    bad: Option<String>,
}

/// Indexes one shard's records.
fn index_shard(
    shard: &Shard,
    image_keys: &[String],
    label_keys: &[String],
) -> Result<Vec<Found>, Error> {
    let (file, path) = (&shard.file, &shard.file.path);
    let w = match (&file.place, shard.compression) {
        // Small reads: a record's features are a few hundred bytes around its image.
        (Place::Local(p), Compression::None) => Walker {
            reader: Box::new(std::io::empty()),
            file: Some(Box::new(BufReader::with_capacity(
                8 << 10,
                std::fs::File::open(p).map_err(|e| Error::io(p, e))?,
            ))),
            pos: 0,
        },
        // A compressed shard, or an object: one stream of the whole (seeking over each image
        // in an object would cost a request a record, more than the image's bytes).
        _ => Walker {
            reader: open_stream(file.open(0, file.size)?, shard.compression),
            file: None,
            pos: 0,
        },
    };
    walk_shard(
        w,
        path,
        &shard.name,
        file.size,
        shard.compression,
        image_keys,
        label_keys,
    )
}

/// Indexes the records `w` reads (a shard of `size` bytes, as stored).
fn walk_shard(
    mut w: Walker,
    path: &Path,
    name: &str,
    size: u64,
    kind: Compression,
    image_keys: &[String],
    label_keys: &[String],
) -> Result<Vec<Found>, Error> {
    let damaged = |what: String| Error::source(name, what);
    let keys: Vec<&str> = image_keys
        .iter()
        .chain(label_keys)
        .map(String::as_str)
        .collect();
    let mut out = Vec::new();
    loop {
        let at = w.pos;
        let n = out.len();
        let mut head = [0u8; 12];
        let got = w.read_some(&mut head).map_err(|e| Error::io(path, e))?;
        if got == 0 {
            break;
        }
        if got < 12 {
            return Err(damaged(format!(
                "truncated: the file ends {got} bytes into record {n}'s header, at byte {at}"
            )));
        }
        if !frame_checks(&head) {
            return Err(damaged(format!(
                "record {n} at byte {at}: its length fails its CRC (damaged, or not a TFRecord file)"
            )));
        }
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let end = at.checked_add(16).and_then(|e| e.checked_add(len));
        if kind == Compression::None && end.is_none_or(|e| e > size) {
            return Err(damaged(format!(
                "truncated: record {n} at byte {at} holds {len} bytes, but the file ends at byte {size}"
            )));
        }
        let start = w.pos;
        let truncated = || {
            damaged(format!(
                "truncated: record {n} at byte {at} holds {len} bytes, but the stream ends before them"
            ))
        };
        let (label, bad) = match walk(&mut w, len, &keys) {
            Ok(walked) => match pick(
                &walked,
                &keys[..image_keys.len()],
                &keys[image_keys.len()..],
            ) {
                Ok(s) => (s.label, None),
                Err(Problem::Record(why)) => (None, Some(why)),
                Err(Problem::Label(why)) => {
                    return Err(damaged(format!("record {n} at byte {at}: {why}")));
                }
            },
            Err(Fault::Bad(why)) => (None, Some(format!("not a tf.train.Example: {why}"))),
            Err(Fault::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(truncated())
            }
            Err(Fault::Io(e)) => return Err(Error::io(path, e)),
        };
        // To the payload's end (a malformed one stopped early), and over its CRC.
        let rest = (start + len).saturating_sub(w.pos) + 4;
        match w.skip(rest) {
            Ok(()) => {}
            Err(Fault::Io(e)) if e.kind() != std::io::ErrorKind::UnexpectedEof => {
                return Err(Error::io(path, e))
            }
            Err(_) => return Err(truncated()),
        }
        out.push(Found {
            offset: at,
            len,
            label,
            bad,
        });
    }
    if kind != Compression::None || w.pos == size {
        Ok(out)
    } else {
        Err(damaged(format!(
            "the file ends at byte {size}, after its last record's end at byte {}",
            w.pos
        )))
    }
}

/// Indexes TFRecord shards (each path a file, or a folder of them) into a source.
pub(crate) fn index_local(paths: &[PathBuf], options: &TfRecordOptions) -> Result<Source, Error> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(files_in(p)?);
        } else {
            files.push(p.clone());
        }
    }
    let origin = match paths {
        [one] => one.clone(),
        _ => common_parent(&files),
    };
    if files.is_empty() {
        return Err(Error::source(&origin, "no TFRecord files"));
    }
    let base = common_parent(&files);
    let files = files
        .iter()
        .map(|p| Located::local(p, "a TFRecord file"))
        .collect::<Result<Vec<_>, _>>()?;
    index_files(files, origin, base, options)
}

/// Indexes TFRecord shards, local or objects, into a source; `origin` names the dataset in
/// messages, and the samples' names are relative to `base`.
pub(crate) fn index_files(
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
    options: &TfRecordOptions,
) -> Result<Source, Error> {
    let compressions = in_parallel(files.len(), |k| compression_by_magic(&files[k]))?;
    let mut shards: Vec<Shard> = files
        .into_iter()
        .zip(compressions)
        .map(|(file, compression)| Shard {
            name: file.path.to_string_lossy().into_owned(),
            file,
            compression,
            first: 0,
            count: 0,
        })
        .collect();
    let (image_keys, label_keys) = options.keys();
    let found = in_parallel(shards.len(), |k| {
        index_shard(&shards[k], &image_keys, &label_keys)
    })?;
    let mut index = FileIndex::with_origin(origin.clone(), base.clone());
    let (mut shard_of, mut offset, mut len) = (Vec::new(), Vec::new(), Vec::new());
    let mut bad = HashMap::new();
    let mut labels: Vec<Option<u32>> = Vec::new();
    let mut unlabelled: Option<(usize, u32)> = None;
    for (k, records) in found.into_iter().enumerate() {
        shards[k].first = u32::try_from(shard_of.len())
            .map_err(|_| Error::source(&origin, "more than 2^32-1 records"))?;
        let rel = relative(&shards[k].file.path, &base);
        for (n, f) in records.into_iter().enumerate() {
            let i = u32::try_from(shard_of.len())
                .ok()
                .filter(|&i| i < u32::MAX)
                .ok_or_else(|| Error::source(&origin, "more than 2^32-1 records"))?;
            index.push(
                format!("{rel}[record {n} at byte {}]", f.offset).as_bytes(),
                0,
            );
            shard_of.push(k as u32);
            offset.push(f.offset);
            len.push(f.len);
            if let Some(why) = f.bad {
                bad.insert(i, why);
            } else if f.label.is_none() && unlabelled.is_none() {
                unlabelled = Some((k, n as u32));
            }
            labels.push(f.label);
        }
        shards[k].count = shard_of.len() as u32 - shards[k].first;
    }
    if shard_of.is_empty() {
        return Err(Error::source(&origin, "the TFRecord files hold no record"));
    }
    if bad.len() == shard_of.len() {
        // Every record is a bad sample: a layout the keys do not match, most likely.
        let (i, why) = bad.iter().min_by_key(|(i, _)| **i).expect("not empty");
        let s = &shards[shard_of[*i as usize] as usize];
        return Err(Error::source(
            &s.name,
            format!(
                "no record holds an image: record 0 at byte {}: {why}{}",
                offset[*i as usize],
                if options.image_key.is_none() {
                    " (set TfRecordOptions::image_key)"
                } else {
                    ""
                }
            ),
        ));
    }
    let labelled = labels.iter().filter(|l| l.is_some()).count();
    if labelled == 0 {
        if let Some(key) = &options.label_key {
            return Err(Error::source(
                &origin,
                format!("no record has the label key `{key}`"),
            ));
        }
        log::warn!(
            "{}: no record has `image/class/label` or `label`: every label is 0",
            origin.display()
        );
    } else if let Some((k, n)) = unlabelled {
        let i = (shards[k].first + n) as usize;
        return Err(Error::source(
            &shards[k].name,
            format!(
                "record {n} at byte {} has no `{}` label, while {labelled} of {} records have one",
                offset[i],
                label_keys.join("` or `"),
                labels.len()
            ),
        ));
    }
    for (i, l) in labels.iter().enumerate() {
        index.labels[i] = l.unwrap_or(0);
    }
    index.shrink();
    shard_of.shrink_to_fit();
    offset.shrink_to_fit();
    len.shrink_to_fit();
    let tf = TfRecordIndex {
        shards,
        shard_of,
        offset,
        len,
        bad,
        image_keys,
        label_keys,
        max_bytes_in_flight: options.max_bytes_in_flight,
    };
    Ok(Source {
        index,
        backing: Backing::TfRecord(Arc::new(tf)),
    })
}

/// The folder all `files` are in, or none.
pub(crate) fn common_parent(files: &[PathBuf]) -> PathBuf {
    let parent = |p: &PathBuf| p.parent().map(Path::to_path_buf).unwrap_or_default();
    match files.first() {
        Some(first) if files.iter().all(|p| parent(p) == parent(first)) => parent(first),
        _ => PathBuf::new(),
    }
}

/// `path` relative to `base` (as text), or whole.
pub(crate) fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Runs `one(k)` for `k` in `0..n` on up to 8 threads; the first error (by `k`) wins.
pub(crate) fn in_parallel<T: Send>(
    n: usize,
    one: impl Fn(usize) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    if n == 1 {
        // One file: on the caller's thread.
        return Ok(vec![one(0)?]);
    }
    type Slot<T> = Mutex<Option<Result<T, Error>>>;
    let results: Vec<Slot<T>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8.min(n) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    break;
                }
                let r = one(k);
                let failed = r.is_err();
                *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                if failed {
                    next.store(n, Ordering::Relaxed);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(n);
    for slot in results {
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(r) => out.push(r?),
            None => break, // an earlier one failed and returned above
        }
    }
    Ok(out)
}

/// One record as an epoch reads it: its image's length and label, or why it is a bad sample.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // the fuzz target's
pub(crate) type RecordRead = Result<(usize, u32), Error>;

/// Indexes an in-memory TFRecord file as opening a plain shard does, then reads each record
/// as an epoch does (the `tfrecord` fuzz target): the number of records, and for each, its
/// image's length and label (or why it is a bad sample). Panics if the two disagree on a
/// record whose CRCs check.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // the fuzz target's
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<Vec<RecordRead>, Error> {
    let (image_keys, label_keys) = TfRecordOptions::default().keys();
    let name = "fuzz.tfrecord";
    let kind = sniff_head(&bytes[..bytes.len().min(SNIFF_BYTES as usize)]);
    if let Some(kind @ (Compression::Gzip | Compression::Zlib)) = kind {
        // A compressed shard: walked as a stream, as opening one does; then its inflated
        // bytes (at most 64 MiB of them) as a plain shard, so that the epoch's reads are
        // checked against the index too.
        let stream = || open_stream(Box::new(std::io::Cursor::new(bytes.to_vec())), kind);
        let w = Walker {
            reader: stream(),
            file: None,
            pos: 0,
        };
        let (path, size) = (Path::new(name), u64::MAX);
        let _ = walk_shard(w, path, name, size, kind, &image_keys, &label_keys);
        let mut inflated = Vec::new();
        let _ = stream().take(64 << 20).read_to_end(&mut inflated);
        return index_plain(&inflated, &image_keys, &label_keys);
    }
    index_plain(bytes, &image_keys, &label_keys)
}

/// [`index_bytes`] of a plain (inflated) shard.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // the fuzz target's
fn index_plain(
    bytes: &[u8],
    image_keys: &[String],
    label_keys: &[String],
) -> Result<Vec<RecordRead>, Error> {
    let name = "fuzz.tfrecord";
    let w = Walker {
        reader: Box::new(std::io::empty()),
        file: Some(Box::new(std::io::Cursor::new(bytes.to_vec()))),
        pos: 0,
    };
    let found = walk_shard(
        w,
        Path::new(name),
        name,
        bytes.len() as u64,
        Compression::None,
        image_keys,
        label_keys,
    )?;
    let keys: Vec<&str> = image_keys
        .iter()
        .chain(label_keys)
        .map(String::as_str)
        .collect();
    let mut out = Vec::new();
    for f in found {
        let at = f.offset as usize;
        let head: [u8; 12] = bytes[at..at + 12].try_into().expect("indexed");
        let len = read::check_frame(&head, name, f.offset)? as usize;
        let end = at + 12 + len;
        let crc = u32::from_le_bytes(bytes[end..end + 4].try_into().expect("indexed"));
        let read = read::extract(
            bytes[at + 12..end].to_vec(),
            crc,
            &keys,
            image_keys.len(),
            Path::new(name),
        );
        if let (Ok((_, label)), None) = (&read, &f.bad) {
            assert_eq!(
                *label,
                f.label.unwrap_or(0),
                "the index and the epoch read disagree"
            );
        }
        if f.bad.is_some() && masked_crc(&bytes[at + 12..end]) == crc {
            assert!(read.is_err(), "a record the index found bad was read");
        }
        out.push(read.map(|(image, label)| (image.len(), label)));
    }
    Ok(out)
}
