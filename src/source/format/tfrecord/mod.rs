//! TFRecord shards of `tf.train.Example`s, as TensorFlow's ImageNet build script and TFDS write
//! them: files named `*.tfrecord`, `*.tfrec`, or anything whose first record's framing checks
//! (`train-00000-of-01024`, TFDS's `imagenet2012-train.tfrecord-00000-of-01024`), plain, GZIP
//! or ZLIB compressed.
//!
//! A record is `length: u64 LE | masked CRC32C of length: u32 | payload | masked CRC32C of
//! payload: u32`, the payload a serialized `Example` (`example.rs` reads it).
//!
//! **Access pattern: counted on open, read at random by offset.** Opening walks every file
//! once, as DALI's `tfrecord2idx` does, checking each record's length CRC and reading the
//! `Example` for its label while seeking over the image bytes (about one 8 KiB read a record),
//! and keeps per file its record count and what the labels are like: nothing per record. An
//! epoch's reader walks a file again when it first reads from it (its *table*: each record's
//! offset, length and label), keeps the tables of its shuffle block's files, and reads each
//! record with one positioned read (one ranged request in object storage). A compressed file
//! cannot be read at an offset: its reader inflates it once, while walking it, into an unnamed
//! temporary file (in `TMPDIR`), and reads that.
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

use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use example::Wire;
pub(crate) use example::{pick, walk, Fault, Problem, Slice};

use super::units::{common_parent, in_parallel, Tally, Unit, Units};
use crate::error::Error;
use crate::fields::FieldSpecs;
use crate::source::format::read::{Opened, Reader, Streamed};
use crate::source::index::FileIndex;
use crate::source::kind::SourceKind;
use crate::source::storage::{Located, Place};

/// The feature keys and limits for TFRecord shards (see [`Source::from_tfrecords_with`](crate::Source::from_tfrecords_with)).
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

/// TFRecord files: their units (one a file) and what reading them needs.
#[derive(Debug)]
pub(crate) struct TfRecordSet {
    pub(crate) units: Units,
    /// Each unit's compression.
    pub(crate) compression: Vec<Compression>,
    pub(crate) image_keys: Vec<String>,
    pub(crate) label_keys: Vec<String>,
    pub(crate) max_bytes_in_flight: u64,
}

impl Streamed for TfRecordSet {
    fn kind(&self) -> SourceKind {
        SourceKind::TfRecord
    }

    fn units(&self) -> &Units {
        &self.units
    }

    fn with_units(&self, keep: &[usize]) -> Arc<dyn Streamed> {
        Arc::new(TfRecordSet {
            units: self.units.subset(keep),
            compression: keep.iter().map(|&k| self.compression[k]).collect(),
            image_keys: self.image_keys.clone(),
            label_keys: self.label_keys.clone(),
            max_bytes_in_flight: self.max_bytes_in_flight,
        })
    }

    fn byte_bound(&self) -> u64 {
        self.max_bytes_in_flight
    }

    fn reader(self: Arc<Self>, block: usize, fields: &FieldSpecs) -> Box<dyn Reader> {
        Box::new(read::TfRecordReader::new(self, block, fields.clone()))
    }

    /// The tables of the files of a block (about 40 bytes a record).
    fn reader_bytes(&self, block: usize) -> u64 {
        let mean = self.units.len() / (self.units.units.len() as u64).max(1);
        let tables = super::units::tables_for(block, mean) as u64;
        tables.saturating_mul(mean).saturating_mul(48)
    }
}

impl TfRecordSet {
    /// Unit `k`'s table: every record walked again (a compressed file inflated into a
    /// temporary file on the way), checked to hold the records opening counted.
    pub(crate) fn table(&self, k: usize) -> Result<read::Table, Error> {
        let unit = &self.units.units[k];
        let file = &unit.file;
        file.check_unchanged()?;
        let name = file.path.to_string_lossy().into_owned();
        let compression = self.compression[k];
        let (records, inflated) = walk_file(
            file,
            &name,
            compression,
            &self.image_keys,
            &self.label_keys,
            true,
        )?;
        if records.len() != unit.count as usize {
            return Err(Error::source(
                &name,
                format!(
                    "holds {} records, where {} were counted when the source was opened (or listed in its manifest): the file changed; open the source again",
                    records.len(),
                    unit.count
                ),
            ));
        }
        Ok(read::Table { records, inflated })
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

/// One record found while walking a file: frame offset, payload length, label, and why it is
/// a bad sample (if it is).
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) label: Option<u32>,
    pub(crate) bad: Option<String>,
}

/// Walks one file's records; with `keep` and a compressed file, its inflated bytes are kept in
/// an unnamed temporary file, returned beside them.
fn walk_file(
    file: &Located,
    name: &str,
    compression: Compression,
    image_keys: &[String],
    label_keys: &[String],
    keep: bool,
) -> Result<(Vec<Found>, Option<std::fs::File>), Error> {
    let path = &file.path;
    let mut inflated = None;
    let w = match (&file.place, compression) {
        // Small reads: a record's features are a few hundred bytes around its image.
        (Place::Local(p), Compression::None) => Walker {
            reader: Box::new(std::io::empty()),
            file: Some(Box::new(BufReader::with_capacity(
                8 << 10,
                std::fs::File::open(p).map_err(|e| Error::io(p, e))?,
            ))),
            pos: 0,
        },
        (Place::Memory(bytes), Compression::None) => Walker {
            reader: Box::new(std::io::empty()),
            file: Some(Box::new(std::io::Cursor::new(bytes.clone()))),
            pos: 0,
        },
        // A compressed file, or an object: one stream of the whole (seeking over each image
        // in an object would cost a request a record, more than the image's bytes).
        _ => {
            let stream = open_stream(file.open(0, file.size)?, compression);
            let reader: Box<dyn BufRead + Send> = if keep && compression != Compression::None {
                let tmp =
                    crate::source::storage::unnamed_temp_file().map_err(|e| Error::io(path, e))?;
                let copy = tmp.try_clone().map_err(|e| Error::io(path, e))?;
                inflated = Some(tmp);
                Box::new(BufReader::with_capacity(
                    64 << 10,
                    Tee {
                        inner: stream,
                        copy,
                    },
                ))
            } else {
                stream
            };
            Walker {
                reader,
                file: None,
                pos: 0,
            }
        }
    };
    let found = walk_shard(
        w,
        path,
        name,
        file.size,
        compression,
        image_keys,
        label_keys,
    )?;
    Ok((found, inflated))
}

/// A reader that writes what it reads into a file (a compressed shard's inflated bytes).
struct Tee {
    inner: Box<dyn BufRead + Send>,
    copy: std::fs::File,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        std::io::Write::write_all(&mut self.copy, &buf[..n])?;
        Ok(n)
    }
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
pub(crate) fn index_local(
    paths: &[PathBuf],
    options: &TfRecordOptions,
) -> Result<Opened<TfRecordSet>, Error> {
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
    index_files(files, origin, base, options, None)
}

/// What opening learns of a file: its record count, how many carry a label, the largest
/// label, the payloads' bytes, and the first bad and first unlabelled record (for messages).
#[derive(Debug, Clone, Default)]
pub(crate) struct Counted {
    pub(crate) count: u32,
    pub(crate) labeled: u32,
    pub(crate) min_label: Option<u32>,
    pub(crate) max_label: Option<u32>,
    pub(crate) bytes: u64,
    pub(crate) bad: u32,
    first_bad: Option<(u64, String)>,
    first_unlabelled: Option<(u32, u64)>,
}

impl Counted {
    fn of(found: &[Found]) -> Counted {
        let good = || found.iter().filter(|f| f.bad.is_none());
        Counted {
            count: found.len() as u32,
            labeled: good().filter(|f| f.label.is_some()).count() as u32,
            min_label: found.iter().filter_map(|f| f.label).min(),
            max_label: found.iter().filter_map(|f| f.label).max(),
            bytes: found.iter().map(|f| f.len).sum(),
            bad: found.iter().filter(|f| f.bad.is_some()).count() as u32,
            first_bad: found
                .iter()
                .find_map(|f| f.bad.as_ref().map(|why| (f.offset, why.clone()))),
            first_unlabelled: found
                .iter()
                .enumerate()
                .find(|(_, f)| f.bad.is_none() && f.label.is_none())
                .map(|(n, f)| (n as u32, f.offset)),
        }
    }

    /// What a manifest records of a file: its count, labels and bytes (its bad records are
    /// found again when it is read).
    pub(crate) fn from_manifest(count: u32, tally: super::units::Tally) -> Self {
        Counted {
            count,
            labeled: tally.labeled,
            min_label: tally.min_label,
            max_label: tally.max_label,
            bytes: tally.image_bytes,
            ..Counted::default()
        }
    }
}

/// Opens TFRecord files, local or objects, into a source: each file's records counted (from
/// `counted`, a manifest's, or by walking it), nothing kept per record. `origin` names the
/// dataset in messages, and the samples' names are relative to `base`.
pub(crate) fn index_files(
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
    options: &TfRecordOptions,
    counted: Option<Vec<Counted>>,
) -> Result<Opened<TfRecordSet>, Error> {
    let compression = in_parallel(files.len(), &origin, |k| compression_by_magic(&files[k]))?;
    let (image_keys, label_keys) = options.keys();
    let counted = match counted {
        Some(c) => c,
        None => in_parallel(files.len(), &origin, |k| {
            let name = files[k].path.to_string_lossy();
            walk_file(
                &files[k],
                &name,
                compression[k],
                &image_keys,
                &label_keys,
                false,
            )
            .map(|(found, _)| Counted::of(&found))
        })?,
    };
    let total: u64 = counted.iter().map(|c| u64::from(c.count)).sum();
    if total == 0 {
        return Err(Error::source(&origin, "the TFRecord files hold no record"));
    }
    if total >= u64::from(u32::MAX) {
        return Err(Error::source(&origin, "more than 2^32-1 records"));
    }
    let bad: u64 = counted.iter().map(|c| u64::from(c.bad)).sum();
    if bad == total {
        // Every record is a bad sample: a layout the keys do not match, most likely.
        let (k, (at, why)) = counted
            .iter()
            .enumerate()
            .find_map(|(k, c)| c.first_bad.clone().map(|b| (k, b)))
            .expect("a bad record");
        return Err(Error::source(
            &files[k].path,
            format!(
                "no record holds an image: record 0 at byte {at}: {why}{}",
                if options.image_key.is_none() {
                    " (set TfRecordOptions::image_key)"
                } else {
                    ""
                }
            ),
        ));
    }
    let labelled: u64 = counted.iter().map(|c| u64::from(c.labeled)).sum();
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
    } else if let Some((k, (n, at))) = counted
        .iter()
        .enumerate()
        .find_map(|(k, c)| c.first_unlabelled.map(|u| (k, u)))
    {
        return Err(Error::source(
            &files[k].path,
            format!(
                "record {n} at byte {at} has no `{}` label, while {labelled} of {total} records have one",
                label_keys.join("` or `"),
            ),
        ));
    }
    let mut units = Vec::with_capacity(files.len());
    let mut first = 0u64;
    for (file, c) in files.into_iter().zip(&counted) {
        units.push(Unit {
            file: Arc::new(file),
            first,
            count: c.count,
            part: 0,
            tally: Tally {
                labeled: c.labeled,
                min_label: c.min_label,
                max_label: c.max_label,
                image_bytes: c.bytes,
            },
        });
        first += u64::from(c.count);
    }
    let bytes: u64 = counted.iter().map(|c| c.bytes).sum();
    let units = Units {
        units,
        num_classes: counted
            .iter()
            .filter_map(|c| c.max_label)
            .max()
            .map_or(1, |m| m.saturating_add(1)),
        mean_sample_bytes: Some(bytes / total),
    };
    let set = TfRecordSet {
        units,
        compression,
        image_keys,
        label_keys,
        max_bytes_in_flight: options.max_bytes_in_flight,
    };
    Ok(Opened {
        index: FileIndex::with_origin(origin, base),
        set,
    })
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
            &Default::default(),
        );
        if let (Ok((_, label, _)), None) = (&read, &f.bad) {
            assert_eq!(
                *label,
                f.label.unwrap_or(0),
                "the index and the epoch read disagree"
            );
        }
        if f.bad.is_some() && masked_crc(&bytes[at + 12..end]) == crc {
            assert!(read.is_err(), "a record the index found bad was read");
        }
        out.push(read.map(|(image, label, _)| (image.len(), label)));
    }
    Ok(out)
}
