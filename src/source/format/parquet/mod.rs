//! Parquet files in the Hugging Face `datasets` layout: an `image` column of
//! `struct<bytes: binary, path: string>` (or plain binary) holding each encoded image, and an
//! integer `label` column (`datasets`' `ClassLabel`, int64), as `datasets` and the Hub write
//! them (`data/train-00000-of-00004.parquet`, snappy compressed), through the Apache Arrow
//! project's `parquet` crate (its column readers only: no Arrow arrays are built).
//!
//! **Access pattern: row groups read whole.** A row is not readable alone: its image lies in a
//! page of several images (pyarrow cuts pages at 1 MiB, behind a dictionary page). Each row
//! group (`datasets` writes 100 images a group, 1,000 rows at most by default) is a unit of
//! the source: an epoch's reader reads a group's image and label columns whole when it first
//! reads a row of it (the pages stay decompressed, each image a slice of them), and keeps the
//! groups of its shuffle block (whole groups: as many as fit [`READER_BYTES`]). Rows are then
//! served in the order's permutation without reading a page twice.
//!
//! **Opening** reads each file's footer and its label column (8 bytes a row, a few pages a
//! row group) for the largest label, never the images, and keeps nothing per row. It refuses,
//! naming the file (and the row): a file that is not parquet or is cut short (its footer is
//! its last bytes), a missing image column or one of another type, a label column that is not
//! an integer, a null label and a label outside `0..=u32::MAX`, a codec this build does not
//! read (it reads uncompressed, snappy and gzip pages, what pyarrow and `datasets` write
//! unless told otherwise), and a repeated (list) column. Without a label column (and none
//! named) every label is 0, with a warning. A null image, or a page that fails to decode, is a
//! bad sample: a skippable error naming the row.
//!
//! **Memory**: the fetch stage's bound ([`ParquetOptions::max_bytes_in_flight`]) plus the
//! reader's row groups (the block's, at most [`READER_BYTES`], or one group larger than that;
//! a `datasets` row group of 100 ImageNet images is 11 MB).
//!
//! `index.rs` opens files; `read.rs` reads their row groups.

mod fields;
mod index;
mod read;

use std::sync::Arc;

use super::units::Units;
use crate::error::Error;
use crate::fields::FieldSpecs;
use crate::source::format::read::{Reader, Streamed};
use crate::source::kind::SourceKind;
#[cfg(feature = "unstable-tools")]
pub(crate) use index::index_bytes;
pub(crate) use index::{index_files_with, index_local};
pub(crate) use read::ParquetReader;

/// The row groups a reader keeps hold at most this many bytes of images (besides the one it
/// reads): a shuffle block of a parquet source spans what fits here.
pub(crate) const READER_BYTES: u64 = 64 << 20;

/// The columns and limits for parquet files (see [`Source::from_parquet_with`](crate::Source::from_parquet_with)).
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

/// What reading a file needs beyond its place: its image and label columns.
#[derive(Debug, Clone)]
pub(crate) struct PqFile {
    /// The image column's leaf (the struct's `bytes`, or the binary column).
    pub(crate) leaf: usize,
    /// The label column's leaf and its name, if the files are labelled.
    pub(crate) label: Option<(usize, String)>,
}

/// Parquet files: their units (one a row group) and what reading them needs.
#[derive(Debug)]
pub(crate) struct ParquetIndex {
    pub(crate) units: Units,
    /// Each file's columns, and for each unit its file's number here.
    pub(crate) files: Vec<PqFile>,
    pub(crate) file_of: Vec<u32>,
    /// The largest row group's image bytes.
    pub(crate) largest_group: u64,
    pub(crate) max_bytes_in_flight: u64,
}

impl Streamed for ParquetIndex {
    fn kind(&self) -> SourceKind {
        SourceKind::Parquet
    }

    fn units(&self) -> &Units {
        &self.units
    }

    fn with_units(&self, keep: &[usize]) -> Arc<dyn Streamed> {
        Arc::new(ParquetIndex {
            units: self.units.subset(keep),
            files: self.files.clone(),
            file_of: keep.iter().map(|&k| self.file_of[k]).collect(),
            largest_group: self.largest_group,
            max_bytes_in_flight: self.max_bytes_in_flight,
        })
    }

    fn byte_bound(&self) -> u64 {
        self.max_bytes_in_flight
    }

    fn reader(self: Arc<Self>, block: usize, fields: &FieldSpecs) -> Box<dyn Reader> {
        Box::new(ParquetReader::new(self, block, fields.clone()))
    }

    /// The row groups of a block, at most [`READER_BYTES`] (or one group larger than that).
    fn reader_bytes(&self, _block: usize) -> u64 {
        READER_BYTES.max(self.largest_group)
    }

    /// As many whole row groups as [`READER_BYTES`] holds (at least one), at most 4,096 rows.
    /// The order's blocks are whole units, so a reader holds one block's groups at a time.
    fn default_block(&self) -> Option<usize> {
        let groups = self.units.units.len().max(1) as u64;
        let rows = (self.units.len() / groups).max(1);
        let fits = (READER_BYTES / self.largest_group.max(1)).max(1);
        Some(fits.saturating_mul(rows).clamp(1, 4096) as usize)
    }

    /// The first file has a column for every field that is not optional (the others are
    /// checked as they are read).
    fn check_fields(&self, fields: &FieldSpecs) -> Result<(), Error> {
        let Some(unit) = self.units.units.first() else {
            return Ok(());
        };
        use parquet::file::reader::FileReader;
        let name = unit.file.path.to_string_lossy().into_owned();
        let reader = read::open_reader(&unit.file, &name)?;
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        for field in fields.iter().filter(|f| !f.is_optional()) {
            fields::resolve(&schema, field.name()).map_err(|why| Error::source(&name, why))?;
        }
        Ok(())
    }
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
