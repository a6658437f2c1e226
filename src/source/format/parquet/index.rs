//! Opening parquet files: each file's footer and columns checked, its row groups counted and
//! its labels read for the largest, nothing kept per row.

use std::path::PathBuf;
use std::sync::Arc;

use parquet::basic::{Compression, LogicalType, Type as Physical};
use parquet::file::reader::FileReader;

use super::read::{group_labels, open_reader};
use super::{guarded, ParquetIndex, ParquetOptions, PqFile};
use crate::error::Error;
use crate::source::format::read::Opened;
use crate::source::format::units::{common_parent, in_parallel, Tally, Unit, Units};
use crate::source::index::FileIndex;
use crate::source::storage::Located;

/// What one file holds: its columns, each row group's rows and image bytes, and its labels'
/// largest.
struct Indexed {
    file: PqFile,
    group_rows: Vec<u64>,
    chunks: Vec<u64>,
    /// Each row group's largest label.
    /// Each row group's smallest and largest label.
    label_ranges: Vec<(Option<u32>, Option<u32>)>,
    /// The label column's class names, from `datasets`' metadata.
    class_names: Option<Vec<String>>,
}

/// The column list of an error message: the first dozen, described.
fn listed(columns: &[parquet::schema::types::ColumnDescPtr]) -> String {
    columns
        .iter()
        .take(12)
        .map(|c| describe(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The leaf of image column `image`: a binary column, or a struct's binary `bytes` (the
/// `datasets` Image), one image a row.
fn image_leaf(
    columns: &[parquet::schema::types::ColumnDescPtr],
    image: &str,
    name: &str,
) -> Result<usize, Error> {
    let leaf = columns
        .iter()
        .position(|c| {
            let p = c.path().parts();
            (p.len() == 1 && p[0] == image) || (p.len() == 2 && p[0] == image && p[1] == "bytes")
        })
        .ok_or_else(|| {
            let any = columns.iter().find(|c| c.path().parts()[0] == image);
            Error::source(
                name,
                match any {
                    Some(c) => format!(
                        "column `{image}` is {}, not binary or a struct with binary `bytes` (datasets' Image)",
                        describe(c)
                    ),
                    None => format!(
                        "no column `{image}` (its columns: {}): set ParquetOptions::image_column",
                        listed(columns)
                    ),
                },
            )
        })?;
    let col = &columns[leaf];
    if col.physical_type() != Physical::BYTE_ARRAY {
        return Err(Error::source(
            name,
            format!("column `{image}` is {}, not binary", describe(col)),
        ));
    }
    if col.max_rep_level() > 0 {
        return Err(Error::source(
            name,
            format!(
                "column `{image}` is a list ({}), not one image a row",
                describe(col)
            ),
        ));
    }
    Ok(leaf)
}

/// The leaf of label column `label_name`, an integer column; `None` without one, unless the
/// user `named` it.
fn label_leaf(
    columns: &[parquet::schema::types::ColumnDescPtr],
    label_name: &str,
    named: bool,
    name: &str,
) -> Result<Option<usize>, Error> {
    let found = columns.iter().position(|c| {
        let p = c.path().parts();
        p.len() == 1 && p[0] == label_name
    });
    Ok(match found {
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
                    name,
                    format!(
                        "column `{label_name}` is {}, not an integer label",
                        describe(c)
                    ),
                ));
            }
            Some(k)
        }
        None if named => {
            return Err(Error::source(
                name,
                format!(
                    "no column `{label_name}` (its columns: {})",
                    listed(columns)
                ),
            ))
        }
        None => {
            // A column named after the struct's field under another name, such as CIFAR's
            // `fine_label`, is not guessed: it is named in the warning.
            None
        }
    })
}

/// A manifest's row groups of one file: (group, rows, what was counted).
pub(crate) type Known = Vec<(u32, u32, Tally)>;

fn index_file(
    file: &Located,
    options: &ParquetOptions,
    known: Option<&Known>,
) -> Result<Indexed, Error> {
    let name = file.path.to_string_lossy().into_owned();
    let reader = open_reader(file, &name)?;
    let metadata = reader.metadata();
    let schema = metadata.file_metadata().schema_descr();
    let columns: Vec<_> = (0..schema.num_columns())
        .map(|i| schema.column(i))
        .collect();
    let leaf = image_leaf(&columns, &options.image_column, &name)?;
    let label_name = options.label_column.as_deref().unwrap_or("label");
    let label_leaf = label_leaf(&columns, label_name, options.label_column.is_some(), &name)?;
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
    let mut label_ranges = vec![(None, None); group_rows.len()];
    match known {
        // A manifest's: its groups must be the file's (a group that changed is caught again
        // when it is read).
        Some(known) => {
            for &(g, rows, tally) in known {
                if group_rows.get(g as usize) != Some(&u64::from(rows)) {
                    return Err(Error::source(
                        &name,
                        format!(
                            "row group {g} does not hold the {rows} rows the manifest says: the file changed since the manifest was written; write it again (`imagefeed index`)"
                        ),
                    ));
                }
                label_ranges[g as usize] = (tally.min_label, tally.max_label);
            }
        }
        None => {
            if let Some(k) = label_leaf {
                for (g, &rows) in group_rows.iter().enumerate() {
                    let labels = group_labels(&reader, k, g, rows, &name, label_name)?;
                    label_ranges[g] = (labels.iter().copied().min(), labels.iter().copied().max());
                }
            }
        }
    }
    let class_names = label_leaf.and_then(|_| {
        let kv = metadata.file_metadata().key_value_metadata()?;
        let json = kv
            .iter()
            .find(|k| k.key == "huggingface")?
            .value
            .as_deref()?;
        class_label_names(json, label_name)
    });
    Ok(Indexed {
        class_names,
        file: PqFile {
            leaf,
            label: label_leaf.map(|k| (k, label_name.to_string())),
        },
        group_rows,
        chunks,
        label_ranges,
    })
}

/// The `*.parquet` files directly in `dir`, sorted.
fn parquet_files_in(dir: &std::path::Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if crate::source::format::dir::is_hidden(&name)
            || !crate::source::format::dir::is_parquet_name(&name.to_string_lossy())
        {
            continue;
        }
        if entry.path().is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Opens parquet files (each path a file, or a folder of `*.parquet` files) into a source.
pub(crate) fn index_local(
    paths: &[std::path::PathBuf],
    options: &ParquetOptions,
) -> Result<Opened<ParquetIndex>, Error> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(parquet_files_in(p)?);
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

/// Opens parquet files, local or objects, into a source; `origin` names the dataset in
/// messages, and the samples' names are relative to `base`.
pub(crate) fn index_files(
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
    options: &ParquetOptions,
) -> Result<Opened<ParquetIndex>, Error> {
    index_files_with(files, origin, base, options, None)
}

/// [`index_files`], with each file's row groups as a manifest lists them (its labels are
/// then not read).
pub(crate) fn index_files_with(
    files: Vec<Located>,
    origin: PathBuf,
    base: PathBuf,
    options: &ParquetOptions,
    known: Option<Vec<Known>>,
) -> Result<Opened<ParquetIndex>, Error> {
    let indexed = in_parallel(files.len(), &origin, |k| {
        let file = &files[k];
        let known = known.as_ref().map(|k| &k[..]).and_then(|all| all.get(k));
        guarded(|| index_file(file, options, known)).unwrap_or_else(|why| {
            Err(Error::source(
                &file.path,
                format!("not a readable parquet file (damaged): {why}"),
            ))
        })
    })?;
    let labelled = indexed.iter().filter(|f| f.file.label.is_some()).count();
    if labelled > 0 && labelled < indexed.len() {
        let k = indexed
            .iter()
            .position(|f| f.file.label.is_none())
            .expect("one unlabelled");
        return Err(Error::source(
            &files[k].path,
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
    let (mut units, mut pq_files, mut file_of) = (Vec::new(), Vec::new(), Vec::new());
    let (mut image_bytes, mut largest_group) = (0u64, 0u64);
    let mut max_label = None;
    let mut first = 0u64;
    let mut class_names = None;
    for (k, (mut f, located)) in indexed.into_iter().zip(files).enumerate() {
        if class_names.is_none() {
            class_names = f.class_names.take();
        }
        let located = Arc::new(located);
        for (g, &rows) in f.group_rows.iter().enumerate() {
            if rows == 0 {
                continue;
            }
            if first + rows >= u64::from(u32::MAX) {
                return Err(Error::source(&origin, "more than 2^32-1 rows"));
            }
            let labeled = if f.file.label.is_some() { rows } else { 0 };
            units.push(Unit {
                file: located.clone(),
                first,
                count: rows as u32,
                part: g as u32,
                tally: Tally {
                    labeled: labeled as u32,
                    min_label: f.label_ranges[g].0,
                    max_label: f.label_ranges[g].1,
                    image_bytes: f.chunks[g],
                },
            });
            max_label = max_label.max(f.label_ranges[g].1);
            file_of.push(k as u32);
            first += rows;
            image_bytes = image_bytes.saturating_add(f.chunks[g]);
            largest_group = largest_group.max(f.chunks[g]);
        }
        pq_files.push(f.file);
    }
    if units.is_empty() {
        return Err(Error::source(&origin, "the parquet files hold no row"));
    }
    let units = Units {
        units,
        num_classes: max_label.map_or(1, |m| m.saturating_add(1)),
        mean_sample_bytes: Some(image_bytes / first),
    };
    let pq = ParquetIndex {
        units,
        files: pq_files,
        file_of,
        largest_group,
        max_bytes_in_flight: options.max_bytes_in_flight,
    };
    let mut index = FileIndex::with_origin(origin, base);
    index.class_names = class_names;
    Ok(Opened { index, set: pq })
}

/// The names of a `ClassLabel` feature `column` in the JSON `datasets` writes into a parquet
/// file's `huggingface` metadata (`{"info": {"features": {"label": {"names": [...], "_type":
/// "ClassLabel"}}}}`).
fn class_label_names(json: &str, column: &str) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let feature = &v["info"]["features"][column];
    if feature["_type"] != "ClassLabel" {
        return None;
    }
    feature["names"]
        .as_array()?
        .iter()
        .map(|n| n.as_str().map(str::to_string))
        .collect()
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

/// Opens an in-memory parquet file as opening one does (footer, columns, codecs, labels),
/// then reads every row as an epoch does (the `parquet` fuzz target): for each row, its
/// image's length or why it is a bad sample.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))]
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<Vec<Result<usize, Error>>, Error> {
    use crate::source::format::read::{Step, Streamed};
    let name = "fuzz.parquet";
    let opened = index_files(
        vec![Located::memory(name, bytes)],
        PathBuf::from(name),
        PathBuf::new(),
        &ParquetOptions::default(),
    )?;
    let pq = Arc::new(opened.set);
    let mut reader = pq.clone().reader(1, &Default::default());
    let mut path = PathBuf::new();
    let mut out = Vec::new();
    for i in 0..pq.units.len() {
        // (One arm without the `remote` feature.)
        #[allow(clippy::infallible_destructuring_match)]
        let read = match reader.read(i as u32, &mut path, 64 << 20) {
            Step::Done(r) => r,
            #[cfg(feature = "remote")]
            Step::Pending(_) => Err(Error::source(name, "an in-memory file read as a request")),
        };
        out.push(read.map(|s| s.bytes.len()));
    }
    Ok(out)
}
