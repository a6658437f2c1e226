//! Reading parquet row groups for an epoch's fetch loop: a group's image and label columns
//! read whole on first use (each image a slice of its decompressed page), the groups of the
//! shuffle block kept within [`READER_BYTES`](super::READER_BYTES).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{ConvertedType, LogicalType};
use parquet::column::reader::ColumnReader;
use parquet::data_type::ByteArray;
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::{guarded, ParquetIndex, READER_BYTES};
use crate::error::{DecodeFailure, Error};
use crate::fields::{FieldData, FieldSpecs};
use crate::source::format::read::{Reader, Sample, Step};
use crate::source::storage::{Located, Place};

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

pub(crate) fn open_reader(
    file: &Located,
    name: &str,
) -> Result<SerializedFileReader<PqData>, Error> {
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

/// The labels of row group `g` (of `rows` rows) from column `k`: integers in
/// `0..=u32::MAX`, none null.
pub(crate) fn group_labels(
    reader: &SerializedFileReader<PqData>,
    k: usize,
    g: usize,
    rows: u64,
    name: &str,
    column: &str,
) -> Result<Vec<u32>, Error> {
    let group_rows = [rows];
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
    for &rows in &group_rows {
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

/// One row group read whole: each row's image (`None`: null) and label, and each field's
/// values (or why the file has none).
pub(crate) struct Group {
    images: Vec<Option<ByteArray>>,
    /// The image column's `path` per row, read where some row's `bytes` are null (the
    /// `datasets` layout of images stored as files beside the parquet).
    paths: Vec<FieldData>,
    labels: Vec<u32>,
    fields: Vec<Result<Vec<FieldData>, String>>,
    bytes: u64,
}

/// Reads rows of parquet files in any order (see the module doc of `parquet/`).
pub(crate) struct ParquetReader {
    pq: Arc<ParquetIndex>,
    fields: FieldSpecs,
    /// Row groups held, most recently used first, with their unit number.
    groups: Vec<(usize, Arc<Group>)>,
    /// The open file (its footer parsed) of the last group read.
    file: Option<(u32, SerializedFileReader<PqData>)>,
    /// The last row group that could not be read, and why: its other rows fail the same way
    /// at once.
    failed: Option<(usize, Error)>,
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

impl ParquetReader {
    pub(crate) fn new(pq: Arc<ParquetIndex>, _block: usize, fields: FieldSpecs) -> Self {
        ParquetReader {
            pq,
            fields,
            groups: Vec::new(),
            file: None,
            failed: None,
        }
    }

    /// Unit `k`'s row group, read whole if it is not held.
    fn group(&mut self, k: usize, name: &Path) -> Result<Arc<Group>, Error> {
        if let Some(at) = self.groups.iter().position(|(u, _)| *u == k) {
            let entry = self.groups.remove(at);
            let group = entry.1.clone();
            self.groups.insert(0, entry);
            return Ok(group);
        }
        if let Some((_, e)) = self.failed.as_ref().filter(|(u, _)| *u == k) {
            return Err(e.again());
        }
        // Room first: the groups held and the one read now stay within the reader's bytes
        // (the newest kept; all dropped if this one alone fills it).
        let coming = self.pq.units.units[k].tally.image_bytes;
        let mut held = coming;
        let keep = self
            .groups
            .iter()
            .take_while(|(_, g)| {
                held = held.saturating_add(g.bytes);
                held <= READER_BYTES
            })
            .count();
        self.groups.truncate(keep);
        let read = match guarded(|| self.read_group(k, name)) {
            Ok(r) => r,
            Err(why) => {
                // The reader's state is unknown after a panic: the file is opened again.
                self.file = None;
                Err(Error::decode(
                    name,
                    DecodeFailure(format!("parquet: a damaged page: {why}")),
                ))
            }
        };
        let group = match read {
            Ok(g) => g,
            Err(e) => {
                self.failed = Some((k, e.again()));
                return Err(e);
            }
        };
        let group = Arc::new(group);
        self.groups.insert(0, (k, group.clone()));
        Ok(group)
    }

    fn read_group(&mut self, k: usize, name: &Path) -> Result<Group, Error> {
        let pq = &self.pq;
        let unit = &pq.units.units[k];
        let f = pq.file_of[k];
        let columns = &pq.files[f as usize];
        let located: &Located = &unit.file;
        let file_name = located.path.to_string_lossy().into_owned();
        let fail = |e: parquet::errors::ParquetError| {
            Error::decode(name, DecodeFailure(format!("parquet: {e}")))
        };
        if self.file.as_ref().is_none_or(|(open, _)| *open != f) {
            self.file = None;
            located.check_unchanged()?;
            let reader = open_reader(located, &file_name)?;
            self.file = Some((f, reader));
        }
        let Some((_, reader)) = &self.file else {
            return Err(Error::io(name, std::io::Error::other("no open file")));
        };
        let g = unit.part as usize;
        let rows = reader
            .metadata()
            .row_groups()
            .get(g)
            .map(|r| u64::try_from(r.num_rows()).unwrap_or(0));
        if rows != Some(u64::from(unit.count)) {
            return Err(changed(name, "its row groups differ".into()));
        }
        let max_def = reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .column(columns.leaf)
            .max_def_level();
        let group = reader.get_row_group(g).map_err(fail)?;
        let ColumnReader::ByteArrayColumnReader(mut column) =
            group.get_column_reader(columns.leaf).map_err(fail)?
        else {
            return Err(changed(name, "its image column is not binary".into()));
        };
        let (mut values, mut defs) = (Vec::new(), Vec::new());
        let want = unit.count as usize;
        let (records, _, _) = column
            .read_records(want, Some(&mut defs), None, &mut values)
            .map_err(fail)?;
        if records < want {
            return Err(changed(name, "its row group ends early".into()));
        }
        let mut images = Vec::with_capacity(want);
        let mut values = values.into_iter();
        for r in 0..want {
            let present = max_def == 0 || defs.get(r) == Some(&max_def);
            images.push(if present { values.next() } else { None });
        }
        let mut bytes: u64 = images.iter().flatten().map(|v| v.len() as u64).sum();
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let paths = match images.iter().any(Option::is_none) {
            true => {
                let image = schema.column(columns.leaf).path().parts()[0].clone();
                match super::fields::image_path_leaf(&schema, &image) {
                    Some(leaf) => super::fields::read(&*group, &leaf, want).map_err(fail)?,
                    None => Vec::new(),
                }
            }
            false => Vec::new(),
        };
        let labels = match &columns.label {
            Some((leaf, column)) => {
                group_labels(reader, *leaf, g, u64::from(unit.count), &file_name, column)?
            }
            None => vec![0; want],
        };
        let mut fields = Vec::with_capacity(self.fields.len());
        for field in self.fields.iter() {
            fields.push(match super::fields::resolve(&schema, field.name()) {
                Ok(leaf) => {
                    let values = super::fields::read(&*group, &leaf, want).map_err(fail)?;
                    bytes += values.iter().map(|v| v.bytes() as u64).sum::<u64>();
                    Ok(values)
                }
                Err(why) => Err(why),
            });
        }
        Ok(Group {
            images,
            paths,
            labels,
            fields,
            bytes,
        })
    }
}

impl Reader for ParquetReader {
    fn reserve(&mut self, _: u32) -> u64 {
        self.pq.units.mean_sample_bytes.unwrap_or(0).max(1)
    }

    fn read(&mut self, i: u32, name: &mut PathBuf, limit: u64) -> Step {
        let (k, j) = self.pq.units.find(u64::from(i));
        let unit = &self.pq.units.units[k];
        // The row's number in its file: the rows of the file's earlier groups before it.
        let before: u64 = self.pq.units.units[..k]
            .iter()
            .rev()
            .take_while(|u| Arc::ptr_eq(&u.file, &unit.file))
            .map(|u| u64::from(u.count))
            .sum();
        *name = PathBuf::from(format!(
            "{}[row {}]",
            self.pq.units.unit_name(k),
            before + u64::from(j)
        ));
        let group = match self.group(k, name) {
            Ok(g) => g,
            Err(e) => return Step::Done(Err(e)),
        };
        let label = group.labels[j as usize];
        let from_path;
        let data = match &group.images[j as usize] {
            Some(value) => value.data(),
            None => match image_from_path(
                group.paths.get(j as usize),
                &self.pq.units.units[k].file,
                name,
                limit,
            ) {
                Ok(bytes) => {
                    from_path = bytes;
                    &from_path[..]
                }
                Err(e) => return Step::Done(Err(e)),
            },
        };
        if data.len() as u64 > limit {
            return Step::Done(Err(Error::decode(
                &*name,
                DecodeFailure(format!(
                    "the image is {} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)",
                    data.len()
                )),
            )));
        }
        let mut bytes = Vec::new();
        if bytes.try_reserve_exact(data.len()).is_err() {
            return Step::Done(Err(Error::io(
                &*name,
                std::io::Error::other("cannot allocate the image"),
            )));
        }
        bytes.extend_from_slice(data);
        let row = j as usize;
        let fields = self
            .fields
            .collect(name, |k, field| match &group.fields[k] {
                Ok(values) => Ok(values[row].clone()),
                Err(_) if field.is_optional() => Ok(FieldData::Missing),
                Err(why) => Err(Error::field(&*name, field.name(), why.clone())),
            });
        Step::Done(fields.map(|fields| Sample {
            bytes,
            label,
            fields,
        }))
    }
}

/// The image of a row whose `bytes` are null, read from its `path` (relative to the parquet
/// file's folder, as `datasets` writes it), at most `limit` bytes; an error naming the row and
/// the path otherwise.
fn image_from_path(
    path: Option<&FieldData>,
    file: &Located,
    name: &Path,
    limit: u64,
) -> Result<Vec<u8>, Error> {
    let Some(FieldData::Text(path)) =
        path.filter(|p| !matches!(p, FieldData::Text(t) if t.is_empty()))
    else {
        return Err(Error::decode(
            name,
            DecodeFailure("the image is null, and so is its path".into()),
        ));
    };
    let path = String::from_utf8_lossy(path);
    let crate::source::storage::Place::Local(parquet) = &file.place else {
        return Err(Error::decode(
            name,
            DecodeFailure(format!(
                "the image's bytes are null and its path `{path}` is not read from object \
                 storage: store the bytes in the parquet file"
            )),
        ));
    };
    let at = parquet.parent().unwrap_or(Path::new("")).join(&*path);
    let named = |e: std::io::Error| {
        Error::io(
            name,
            std::io::Error::new(
                e.kind(),
                format!("the image's path `{}`: {e}", at.display()),
            ),
        )
    };
    let f = std::fs::File::open(&at).map_err(named)?;
    let size = f.metadata().map_err(named)?.len();
    if size > limit {
        return Err(Error::decode(
            name,
            DecodeFailure(format!(
                "the image at `{}` is {size} bytes, over the {limit}-byte limit",
                at.display()
            )),
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, limit + 1), &mut bytes)
        .map_err(named)?;
    Ok(bytes)
}
