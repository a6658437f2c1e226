//! Parquet files in the Hugging Face `datasets` layout: an `image` column of
//! `struct<bytes: binary, path: string>` (or plain binary) holding each encoded image, and an
//! integer `label` column (`datasets`' `ClassLabel`, int64), as `datasets` and the Hub write
//! them (`data/train-00000-of-00004.parquet`, snappy compressed), through the Apache Arrow
//! project's `parquet` crate (its column readers only: no Arrow arrays are built).
//!
//! **Access pattern: row groups read as streams.** A row is not readable alone: its image lies
//! in a page of several images (pyarrow cuts pages at 1 MiB, behind a dictionary page), so a
//! seeded permutation over rows would read and inflate every page about as many times as it
//! holds images. Instead each row group (`datasets` writes 100 images a group) is one of the
//! source's streams: each epoch visits the row groups of all files in a seeded order, reads
//! each front to back with one column reader (one page and the column's dictionary page in
//! memory at a time), and a shuffle buffer mixes samples (the command line's default: 1,000),
//! as for tar shards; with row groups of 100, a buffer of 1,000 mixes ten groups at least.
//! Sharding gives each rank a contiguous block of that order, and a state resumes at another
//! world size as for tar shards (`pipeline/plan.rs`).
//!
//! **Opening** reads each file's footer and its label column (8 bytes a row, a few pages a
//! row group), never the images: the labels are in the source's index before the first epoch,
//! like a file list's. It refuses, naming the file (and the row): a file that is not parquet
//! or is cut short (its footer is its last bytes), a missing image column or one of another
//! type, a label column that is not an integer, a null label and a label outside
//! `0..=u32::MAX`, a codec this build does not read (it reads uncompressed, snappy and gzip
//! pages, what pyarrow and `datasets` write unless told otherwise), and a repeated (list)
//! column. Without a label column (and none named) every label is 0, with a warning. A null
//! image, or a page that fails to decode, is a bad sample: a skippable error naming the row.
//!
//! **Memory**: the fetch stage's bound ([`ParquetOptions::max_bytes_in_flight`]) plus the
//! column reader's pages, at most two of the largest image column chunk (counted in the
//! budget's worst case; a `datasets` row group of 100 ImageNet images is 11 MB).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::tfrecord::{common_parent, in_parallel, relative};
use crate::error::{DecodeFailure, Error};
use crate::source::fetch::{Fetch, Fetched};
use crate::source::storage::{Located, Place};
use crate::source::{Backing, FileIndex, Source};

/// The columns and limits for parquet files (see [`Source::from_parquet_with`]).
///
/// ```
/// let options = imagefeed::ParquetOptions::default()
///     .image_column("img")
///     .label_column("fine_label"); // CIFAR-100 on the Hub
/// assert_eq!(options.label_column.as_deref(), Some("fine_label"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ParquetOptions {
    /// The column holding each image: a struct with a binary `bytes` field (`datasets`'
    /// `Image`), or binary. Default `image`.
    pub image_column: String,
    /// The integer column holding each label. `None` (the default): `label` if the files have
    /// one, else every label is 0 (with a warning). A column named here must exist.
    pub label_column: Option<String>,
    /// The most fetched image bytes held at once, read and waiting to be decoded (default
    /// 64 MiB; one image larger than this is still read, alone).
    pub max_bytes_in_flight: u64,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            image_column: "image".into(),
            label_column: None,
            max_bytes_in_flight: 64 << 20,
        }
    }
}

impl ParquetOptions {
    /// Sets [`ParquetOptions::image_column`].
    pub fn image_column(mut self, name: impl Into<String>) -> Self {
        self.image_column = name.into();
        self
    }
    /// Sets [`ParquetOptions::label_column`].
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.label_column = Some(name.into());
        self
    }
    /// Sets [`ParquetOptions::max_bytes_in_flight`].
    pub fn max_bytes_in_flight(mut self, bytes: u64) -> Self {
        self.max_bytes_in_flight = bytes;
        self
    }
}

/// One indexed file.
#[derive(Debug)]
pub(crate) struct PqFile {
    /// Where it is, its size and modification time.
    file: Located,
    name: String,
    /// The image column's leaf (the struct's `bytes`, or the binary column).
    leaf: usize,
    /// Each row group's rows.
    group_rows: Vec<u64>,
}

/// One row group: a stream.
#[derive(Debug)]
struct Group {
    file: u32,
    /// The group's number in its file.
    group: u32,
    /// Its samples are `first..first + rows`.
    first: u32,
    rows: u32,
}

/// Where every row's image lies.
#[derive(Debug)]
pub(crate) struct ParquetIndex {
    files: Vec<PqFile>,
    groups: Vec<Group>,
    /// Image bytes of all rows (uncompressed column chunks), for the mean.
    image_bytes: u64,
    largest_chunk: u64,
    max_bytes_in_flight: u64,
}

impl ParquetIndex {
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.groups.capacity() * std::mem::size_of::<Group>()
            + self
                .files
                .iter()
                .map(|f| f.name.len() * 2 + f.group_rows.capacity() * 8 + 128)
                .sum::<usize>()) as u64
    }

    /// The group sample `i` is in.
    fn group_of(&self, i: u32) -> &Group {
        let k = self.groups.partition_point(|g| g.first + g.rows <= i);
        &self.groups[k.min(self.groups.len() - 1)]
    }

    pub(crate) fn mean_len(&self) -> Option<u64> {
        let rows: u64 = self.groups.iter().map(|g| u64::from(g.rows)).sum();
        self.image_bytes.checked_div(rows)
    }

    pub(crate) fn stamp(&self, i: usize) -> (u64, u128) {
        let g = self.group_of(i as u32);
        let f = &self.files[g.file as usize];
        (f.file.size ^ (i as u64).rotate_left(32), f.file.mtime)
    }

    /// The fetch bound: fetched bytes, and the column reader's two pages at most.
    pub(crate) fn byte_bound(&self) -> u64 {
        self.max_bytes_in_flight
            .saturating_add(self.largest_chunk.saturating_mul(2))
    }

    pub(crate) fn streams(&self) -> Vec<std::ops::Range<u32>> {
        self.groups
            .iter()
            .map(|g| g.first..g.first + g.rows)
            .collect()
    }
}

/// A parquet file's bytes for the `parquet` crate's reader: a local file, or an object read
/// with ranged requests (the footer, then each page's header and its bytes).
pub(crate) enum PqData {
    Local(File),
    Memory(bytes::Bytes),
    #[cfg(feature = "remote")]
    Remote {
        store: Arc<crate::source::storage::remote::Store>,
        key: String,
        size: u64,
    },
}

/// A remote page header is read through windows of this many bytes (a header is tens to
/// hundreds of bytes; the page's data is then asked for alone).
#[cfg(feature = "remote")]
const HEADER_WINDOW: u64 = 16 << 10;

impl parquet::file::reader::Length for PqData {
    fn len(&self) -> u64 {
        match self {
            PqData::Local(f) => parquet::file::reader::Length::len(f),
            PqData::Memory(b) => b.len() as u64,
            #[cfg(feature = "remote")]
            PqData::Remote { size, .. } => *size,
        }
    }
}

impl parquet::file::reader::ChunkReader for PqData {
    type T = Box<dyn std::io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            PqData::Local(f) => Ok(Box::new(f.get_read(start)?)),
            PqData::Memory(b) => Ok(Box::new(b.get_read(start)?)),
            #[cfg(feature = "remote")]
            PqData::Remote { store, key, size } => {
                Ok(Box::new(store.windows(key, start, *size, HEADER_WINDOW)))
            }
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            PqData::Local(f) => f.get_bytes(start, length),
            PqData::Memory(b) => b.get_bytes(start, length),
            #[cfg(feature = "remote")]
            PqData::Remote { store, key, .. } => store
                .get_range(key, start, start.saturating_add(length as u64))
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e))),
        }
    }
}

fn open_reader(file: &Located, name: &str) -> Result<SerializedFileReader<PqData>, Error> {
    let data = match &file.place {
        Place::Local(path) => PqData::Local(File::open(path).map_err(|e| Error::io(path, e))?),
        Place::Memory(bytes) => PqData::Memory(bytes::Bytes::copy_from_slice(bytes)),
        #[cfg(feature = "remote")]
        Place::Remote { store, key } => PqData::Remote {
            store: store.clone(),
            key: key.clone(),
            size: file.size,
        },
    };
    SerializedFileReader::new(data).map_err(|e| {
        Error::source(
            name,
            format!("not a readable parquet file (damaged, or cut short: its footer is its last bytes): {e}"),
        )
    })
}

/// Runs a call into the `parquet` crate, turning a panic of its into `Err` with the panic's
/// message. Some damaged files make the crate (60.2) panic instead of returning an error: a
/// page header whose data-page part is missing is unwrapped (`column/page.rs`), found by the
/// `parquet` fuzz target. A bad file must be an error naming it, never the end of a training
/// run. (Under `panic = "abort"` nothing can catch it.)
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the parquet reader panicked".into())
    })
}

/// A column's type, for messages.
fn describe(col: &parquet::schema::types::ColumnDescriptor) -> String {
    let path = col.path().string();
    match col.logical_type_ref() {
        Some(l) => format!("{path} ({:?}, {l:?})", col.physical_type()),
        None => format!("{path} ({:?})", col.physical_type()),
    }
}

fn check_codec(c: Compression, name: &str, what: &str) -> Result<(), Error> {
    match c {
        Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::GZIP(_) => Ok(()),
        other => Err(Error::source(
            name,
            format!(
                "its {what} column is compressed with {other:?}, which imagefeed does not read \
                 (it reads uncompressed, snappy and gzip parquet, what pyarrow and datasets \
                 write by default): rewrite it with pyarrow's compression='snappy'"
            ),
        )),
    }
}

/// What one file holds: its description, its labels (`None`: no label column) and each row
/// group's image chunk size.
struct Indexed {
    file: PqFile,
    labels: Option<Vec<u32>>,
    chunks: Vec<u64>,
}

fn index_file(file: &Located, options: &ParquetOptions) -> Result<Indexed, Error> {
    let name = file.path.to_string_lossy().into_owned();
    let reader = open_reader(file, &name)?;
    let metadata = reader.metadata();
    let schema = metadata.file_metadata().schema_descr();
    let columns: Vec<_> = (0..schema.num_columns())
        .map(|i| schema.column(i))
        .collect();
    let listed = || {
        columns
            .iter()
            .take(12)
            .map(|c| describe(c))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let image = &options.image_column;
    let leaf = columns
        .iter()
        .position(|c| {
            let p = c.path().parts();
            (p.len() == 1 && &p[0] == image) || (p.len() == 2 && &p[0] == image && p[1] == "bytes")
        })
        .ok_or_else(|| {
            let any = columns.iter().find(|c| &c.path().parts()[0] == image);
            Error::source(
                &name,
                match any {
                    Some(c) => format!(
                        "column `{image}` is {}, not binary or a struct with binary `bytes` (datasets' Image)",
                        describe(c)
                    ),
                    None => format!(
                        "no column `{image}` (its columns: {}): set ParquetOptions::image_column",
                        listed()
                    ),
                },
            )
        })?;
    let col = &columns[leaf];
    if col.physical_type() != Physical::BYTE_ARRAY {
        return Err(Error::source(
            &name,
            format!("column `{image}` is {}, not binary", describe(col)),
        ));
    }
    if col.max_rep_level() > 0 {
        return Err(Error::source(
            &name,
            format!(
                "column `{image}` is a list ({}), not one image a row",
                describe(col)
            ),
        ));
    }
    let label_name = options.label_column.as_deref().unwrap_or("label");
    let label_leaf = columns.iter().position(|c| {
        let p = c.path().parts();
        p.len() == 1 && p[0] == label_name
    });
    let label_leaf = match label_leaf {
        Some(k) => {
            let c = &columns[k];
            let integer = matches!(c.physical_type(), Physical::INT32 | Physical::INT64)
                && !matches!(
                    c.logical_type_ref(),
                    Some(
                        LogicalType::Date
                            | LogicalType::Time(_)
                            | LogicalType::Timestamp(_)
                            | LogicalType::Decimal(_)
                    )
                );
            if !integer || c.max_rep_level() > 0 {
                return Err(Error::source(
                    &name,
                    format!(
                        "column `{label_name}` is {}, not an integer label",
                        describe(c)
                    ),
                ));
            }
            Some(k)
        }
        None if options.label_column.is_some() => {
            return Err(Error::source(
                &name,
                format!("no column `{label_name}` (its columns: {})", listed()),
            ))
        }
        None => {
            // A column named after the struct's field under another name, such as CIFAR's
            // `fine_label`, is not guessed: it is named in the warning.
            None
        }
    };
    let mut group_rows = Vec::new();
    let mut chunks = Vec::new();
    for g in metadata.row_groups() {
        let rows = u64::try_from(g.num_rows()).unwrap_or(0);
        check_codec(g.column(leaf).compression(), &name, "image")?;
        if let Some(k) = label_leaf {
            check_codec(g.column(k).compression(), &name, "label")?;
        }
        group_rows.push(rows);
        chunks.push(u64::try_from(g.column(leaf).uncompressed_size()).unwrap_or(0));
    }
    let labels = match label_leaf {
        None => None,
        Some(k) => Some(read_labels(&reader, k, &group_rows, &name, label_name)?),
    };
    Ok(Indexed {
        file: PqFile {
            file: file.clone(),
            name,
            leaf,
            group_rows,
        },
        labels,
        chunks,
    })
}

/// Every row's label from column `k`: integers in `0..=u32::MAX`, none null.
fn read_labels(
    reader: &SerializedFileReader<PqData>,
    k: usize,
    group_rows: &[u64],
    name: &str,
    column: &str,
) -> Result<Vec<u32>, Error> {
    let desc = reader.metadata().file_metadata().schema_descr().column(k);
    let unsigned = matches!(
        desc.converted_type(),
        ConvertedType::UINT_32 | ConvertedType::UINT_64
    ) || matches!(desc.logical_type_ref(), Some(LogicalType::Integer(t)) if !t.is_signed);
    let max_def = desc.max_def_level();
    let total: u64 = group_rows.iter().sum();
    let mut out = Vec::new();
    out.try_reserve_exact(usize::try_from(total).unwrap_or(usize::MAX))
        .map_err(|_| Error::source(name, format!("{total} rows: too many to index")))?;
    let damaged = |e: parquet::errors::ParquetError| {
        Error::source(name, format!("its `{column}` column cannot be read: {e}"))
    };
    let mut defs = Vec::new();
    let mut row = 0u64;
    for (g, &rows) in group_rows.iter().enumerate() {
        let group = reader.get_row_group(g).map_err(damaged)?;
        let mut col = group.get_column_reader(k).map_err(damaged)?;
        let mut wide = Vec::new();
        let mut narrow = Vec::new();
        let mut left = rows;
        while left > 0 {
            let want = left.min(1 << 16) as usize;
            defs.clear();
            wide.clear();
            narrow.clear();
            let (records, _, _) = match &mut col {
                ColumnReader::Int64ColumnReader(r) => {
                    r.read_records(want, Some(&mut defs), None, &mut wide)
                }
                ColumnReader::Int32ColumnReader(r) => {
                    r.read_records(want, Some(&mut defs), None, &mut narrow)
                }
                _ => {
                    return Err(Error::source(
                        name,
                        format!("`{column}` is not an integer column"),
                    ))
                }
            }
            .map_err(damaged)?;
            if records == 0 {
                return Err(Error::source(
                    name,
                    format!(
                        "row group {g} ends after {} of its {rows} rows' labels",
                        rows - left
                    ),
                ));
            }
            let mut values = wide
                .iter()
                .map(|&v| {
                    if unsigned {
                        i128::from(v as u64)
                    } else {
                        i128::from(v)
                    }
                })
                .chain(narrow.iter().map(|&v| {
                    if unsigned {
                        i128::from(v as u32)
                    } else {
                        i128::from(v)
                    }
                }));
            for r in 0..records {
                let here = row + r as u64;
                let value = if max_def == 0 || defs.get(r) == Some(&max_def) {
                    values.next()
                } else {
                    None
                };
                let Some(v) = value else {
                    return Err(Error::source(
                        name,
                        format!("row {here}: the label (`{column}`) is null"),
                    ));
                };
                let label = u32::try_from(v).map_err(|_| {
                    Error::source(
                        name,
                        format!("row {here}: the label (`{column}`) is {v}, not a label (a non-negative integer below 2^32)"),
                    )
                })?;
                out.push(label);
            }
            row += records as u64;
            left -= records as u64;
        }
    }
    Ok(out)
}

/// Indexes parquet files (each path a file, or a folder of `*.parquet` files) into a source.
pub(crate) fn index_local(paths: &[PathBuf], options: &ParquetOptions) -> Result<Source, Error> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(crate::source::containers::parquet_files_in(p)?);
        } else {
            files.push(p.clone());
        }
    }
    let origin = match paths {
        [one] => one.clone(),
        _ => common_parent(&files),
    };
    if files.is_empty() {
        return Err(Error::source(&origin, "no parquet files"));
    }
    let base = common_parent(&files);
    let files = files
        .iter()
        .map(|p| Located::local(p, "a parquet file"))
        .collect::<Result<Vec<_>, _>>()?;
    index_files(files, origin, base, options)
}

/// Indexes parquet files, local or objects, into a source; `origin` names the dataset in
/// messages, and the samples' names are relative to `base`.
pub(crate) fn index_files(
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
    options: &ParquetOptions,
) -> Result<Source, Error> {
    let indexed = in_parallel(files.len(), |k| {
        let file = &files[k];
        guarded(|| index_file(file, options)).unwrap_or_else(|why| {
            Err(Error::source(
                &file.path,
                format!("not a readable parquet file (damaged): {why}"),
            ))
        })
    })?;
    let labelled = indexed.iter().filter(|f| f.labels.is_some()).count();
    if labelled > 0 && labelled < indexed.len() {
        let f = indexed
            .iter()
            .find(|f| f.labels.is_none())
            .expect("one unlabelled");
        return Err(Error::source(
            &f.file.name,
            format!(
                "has no `label` column, while {labelled} of {} files have one",
                indexed.len()
            ),
        ));
    }
    if labelled == 0 {
        log::warn!(
            "{}: no `label` column: every label is 0 (set ParquetOptions::label_column)",
            origin.display()
        );
    }
    let mut index = FileIndex::with_origin(origin.clone(), base.clone());
    let (mut out_files, mut groups) = (Vec::new(), Vec::new());
    let (mut image_bytes, mut largest_chunk) = (0u64, 0u64);
    let mut first = 0u64;
    for (k, f) in indexed.into_iter().enumerate() {
        let rel = relative(&f.file.file.path, &base);
        let mut row = 0u64;
        for (g, &rows) in f.file.group_rows.iter().enumerate() {
            if rows == 0 {
                continue;
            }
            if first + rows >= u64::from(u32::MAX) {
                return Err(Error::source(&origin, "more than 2^32-1 rows"));
            }
            groups.push(Group {
                file: k as u32,
                group: g as u32,
                first: first as u32,
                rows: rows as u32,
            });
            for r in 0..rows {
                let label = f.labels.as_ref().map_or(0, |l| l[(row + r) as usize]);
                index.push(format!("{rel}[row {}]", row + r).as_bytes(), label);
            }
            row += rows;
            first += rows;
            image_bytes = image_bytes.saturating_add(f.chunks[g]);
            largest_chunk = largest_chunk.max(f.chunks[g]);
        }
        out_files.push(f.file);
    }
    if groups.is_empty() {
        return Err(Error::source(&origin, "the parquet files hold no row"));
    }
    index.shrink();
    let pq = ParquetIndex {
        files: out_files,
        groups,
        image_bytes,
        largest_chunk,
        max_bytes_in_flight: options.max_bytes_in_flight,
    };
    Ok(Source {
        index,
        backing: Backing::Parquet(Arc::new(pq)),
    })
}

/// The open row group a cursor reads.
struct Open {
    group: usize,
    /// The next row of the group the reader gives.
    next: u64,
    reader: ColumnReaderImpl<ByteArrayType>,
    max_def: i16,
}

/// A forward-only reader over row groups: keeps the current group's column reader while the
/// rows asked for lie further on in it, and the current file's footer.
#[derive(Default)]
pub(crate) struct Cursor {
    file: Option<(usize, SerializedFileReader<PqData>)>,
    current: Option<Open>,
    values: Vec<ByteArray>,
    defs: Vec<i16>,
}

fn changed(name: &Path, why: String) -> Error {
    Error::io(
        name,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{why}: the file is not what was indexed (rewritten since it was opened)"),
        ),
    )
}

impl Cursor {
    /// Sample `i`'s image bytes (at most `limit`). `name` names it in errors.
    pub(crate) fn read(
        &mut self,
        pq: &ParquetIndex,
        i: u32,
        limit: u64,
        name: &Path,
    ) -> Result<Vec<u8>, Error> {
        let r = guarded(|| self.read_inner(pq, i, limit, name)).unwrap_or_else(|why| {
            // The reader's state is unknown after a panic: the file is opened again.
            self.file = None;
            Err(Error::decode(
                name,
                DecodeFailure(format!("parquet: a damaged page: {why}")),
            ))
        });
        if r.is_err() {
            self.current = None;
        }
        r
    }

    fn read_inner(
        &mut self,
        pq: &ParquetIndex,
        i: u32,
        limit: u64,
        name: &Path,
    ) -> Result<Vec<u8>, Error> {
        let k = pq.groups.partition_point(|g| g.first + g.rows <= i);
        let g = &pq.groups[k.min(pq.groups.len() - 1)];
        let row = u64::from(i - g.first);
        let file = &pq.files[g.file as usize];
        let fail = |e: parquet::errors::ParquetError| {
            Error::decode(name, DecodeFailure(format!("parquet: {e}")))
        };
        let reusable = self
            .current
            .as_ref()
            .is_some_and(|o| o.group == k && o.next <= row);
        if !reusable {
            self.current = None;
            if self
                .file
                .as_ref()
                .is_none_or(|(f, _)| *f != g.file as usize)
            {
                let reader = open_reader(&file.file, &file.name)?;
                let rows: Vec<u64> = reader
                    .metadata()
                    .row_groups()
                    .iter()
                    .map(|r| u64::try_from(r.num_rows()).unwrap_or(0))
                    .collect();
                if rows != file.group_rows {
                    return Err(changed(name, "its row groups differ".into()));
                }
                self.file = Some((g.file as usize, reader));
            }
            let Some((_, reader)) = &self.file else {
                return Err(Error::io(name, std::io::Error::other("no open file")));
            };
            let group = reader.get_row_group(g.group as usize).map_err(fail)?;
            let max_def = reader
                .metadata()
                .file_metadata()
                .schema_descr()
                .column(file.leaf)
                .max_def_level();
            let reader = match group.get_column_reader(file.leaf).map_err(fail)? {
                ColumnReader::ByteArrayColumnReader(r) => r,
                _ => return Err(changed(name, "its image column is not binary".into())),
            };
            self.current = Some(Open {
                group: k,
                next: 0,
                reader,
                max_def,
            });
        }
        let Some(o) = self.current.as_mut() else {
            return Err(Error::io(name, std::io::Error::other("no open row group")));
        };
        if row > o.next {
            let want = (row - o.next) as usize;
            let skipped = o.reader.skip_records(want).map_err(fail)?;
            o.next += skipped as u64;
            if skipped < want {
                return Err(changed(name, "its row group ends early".into()));
            }
        }
        self.values.clear();
        self.defs.clear();
        let (records, _, _) = o
            .reader
            .read_records(1, Some(&mut self.defs), None, &mut self.values)
            .map_err(fail)?;
        o.next += records as u64;
        if records == 0 {
            return Err(changed(name, "its row group ends early".into()));
        }
        if o.max_def > 0 && self.defs.first() != Some(&o.max_def) {
            return Err(Error::decode(
                name,
                DecodeFailure("the image is null".into()),
            ));
        }
        let Some(value) = self.values.first() else {
            return Err(Error::decode(
                name,
                DecodeFailure("the image is null".into()),
            ));
        };
        let data = value.data();
        if data.len() as u64 > limit {
            return Err(Error::decode(
                name,
                DecodeFailure(format!(
                    "the image is {} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)",
                    data.len()
                )),
            ));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(data.len())
            .map_err(|_| Error::io(name, std::io::Error::other("cannot allocate the image")))?;
        out.extend_from_slice(data);
        Ok(out)
    }
}

impl ParquetIndex {
    /// Row `i`'s image bytes by itself (its row group read up to it).
    pub(crate) fn read_one(&self, i: usize, name: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        Cursor::default().read(self, i as u32, limit, name)
    }

    /// Reads the claimed rows as streams, a run of one row group's rows through one column
    /// reader (see `source/fetch.rs`).
    pub(crate) fn fetch(&self, f: &Fetch<'_>) {
        let cancelled = || f.claims.is_cancelled();
        let mut cursor = Cursor::default();
        let mut name = PathBuf::new();
        let mean = self.mean_len().unwrap_or(0).max(1);
        while let Some(seq) = f.claims.claim() {
            let index = f.plan.at(seq);
            f.index.path_into(index as usize, &mut name);
            // The size is known once read: reserve the mean, then the real size.
            if !f.budget.acquire(mean, &cancelled) {
                return;
            }
            let bytes = cursor.read(self, index, f.limit, &name);
            let held = match &bytes {
                Ok(b) => {
                    f.budget.adjust(mean, b.len() as u64);
                    b.len() as u64
                }
                Err(_) => {
                    f.budget.release(mean);
                    0
                }
            };
            let sent = Fetched {
                seq,
                index,
                bytes: Some(bytes),
                held,
            };
            if f.tx.send(sent).is_err() {
                return;
            }
        }
    }
}

impl Source {
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
    pub fn from_parquet_with<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
        options: ParquetOptions,
    ) -> Result<Source, Error> {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        index_local(&paths, &options)
    }
}

/// Indexes an in-memory parquet file as opening one does (footer, columns, codecs, labels),
/// then reads every row as an epoch does (the `parquet` fuzz target): for each row, its
/// image's length or why it is a bad sample.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))]
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<Vec<Result<usize, Error>>, Error> {
    let name = "fuzz.parquet";
    let source = index_files(
        vec![Located::memory(name, bytes)],
        PathBuf::from(name),
        PathBuf::new(),
        &ParquetOptions::default(),
    )?;
    let Backing::Parquet(pq) = &source.backing else {
        return Err(Error::source(name, "not indexed as parquet"));
    };
    let mut cursor = Cursor::default();
    let mut path = PathBuf::new();
    let mut out = Vec::new();
    for i in 0..source.len() {
        source.index.path_into(i, &mut path);
        out.push(cursor.read(pq, i as u32, 64 << 20, &path).map(|b| b.len()));
    }
    Ok(out)
}
