//! Opening a dataset from its manifest (`format/manifest.rs` reads and writes the file).

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::format::manifest::{Line, Manifest};
use crate::source::Source;

/// Where a manifest's files are: a local folder, or a prefix of a store.
pub(crate) enum Base<'a> {
    Local(&'a Path),
    #[cfg(feature = "remote")]
    Remote {
        store: &'a std::sync::Arc<crate::source::storage::remote::Store>,
        /// The key prefix the manifest is under (`""` for the bucket's root).
        prefix: &'a str,
    },
}

/// Opens the dataset `manifest` lists (read from `name`), its files relative to `base`. A
/// local file whose size is not the manifest's is an error naming it; a unit's sample count
/// is checked when it is first read.
pub(crate) fn open(
    manifest: Manifest,
    name: &Path,
    base: Base<'_>,
    tfrecord: &crate::source::TfRecordOptions,
    #[cfg(feature = "parquet")] parquet: &crate::source::ParquetOptions,
) -> Result<Source, Error> {
    use std::sync::Arc;

    use crate::source::format::units::Tally;
    use crate::source::storage::Located;

    // One place per file: consecutive lines of one file (parquet row groups) share it.
    let mut files: Vec<(Arc<Located>, Vec<&Line>)> = Vec::new();
    for line in &manifest.lines {
        if let Some((_, lines)) = files
            .last_mut()
            .filter(|(_, lines)| lines[0].file == line.file)
        {
            lines.push(line);
            continue;
        }
        let located = match &base {
            Base::Local(dir) => {
                let path = PathBuf::from(Manifest::resolve(&dir.to_string_lossy(), &line.file));
                let found = Located::local(&path, "a file the manifest lists")?;
                if found.size != line.size {
                    return Err(Error::source(
                        &path,
                        format!(
                            "is {} bytes, where the manifest {} says {}: the dataset changed since the manifest was written; write it again (`imagefeed index`)",
                            found.size,
                            name.display(),
                            line.size
                        ),
                    ));
                }
                found
            }
            #[cfg(feature = "remote")]
            Base::Remote { store, prefix } => {
                let key = Manifest::resolve(prefix, &line.file);
                Located::object(store, key, line.size, line.mtime as i64)
            }
        };
        files.push((Arc::new(located), vec![line]));
    }
    let origin = name.parent().map(Path::to_path_buf).unwrap_or_default();
    let base_path = match &base {
        Base::Local(dir) => dir.to_path_buf(),
        #[cfg(feature = "remote")]
        Base::Remote { store, prefix } => PathBuf::from(store.url_of(prefix)),
    };
    let tally = |l: &Line| Tally {
        labeled: l.labeled,
        min_label: l.min_label,
        max_label: l.max_label,
        image_bytes: l.image_bytes,
    };
    match manifest.kind {
        crate::source::kind::SourceKind::TfRecord => {
            let counted = files
                .iter()
                .map(|(_, lines)| {
                    let l = lines[0];
                    crate::source::format::tfrecord::Counted::from_manifest(l.samples, tally(l))
                })
                .collect();
            let files = files.into_iter().map(|(f, _)| (*f).clone()).collect();
            crate::source::format::tfrecord::index_files(
                files,
                origin,
                base_path,
                tfrecord,
                Some(counted),
            )
            .map(Source::from)
        }
        #[cfg(feature = "parquet")]
        crate::source::kind::SourceKind::Parquet => {
            let tallies = files
                .iter()
                .map(|(_, lines)| {
                    lines
                        .iter()
                        .map(|l| (l.part, l.samples, tally(l)))
                        .collect()
                })
                .collect();
            let files = files.into_iter().map(|(f, _)| (*f).clone()).collect();
            crate::source::format::parquet::index_files_with(
                files,
                origin,
                base_path,
                parquet,
                Some(tallies),
            )
            .map(Source::from)
        }
        #[cfg(not(feature = "parquet"))]
        crate::source::kind::SourceKind::Parquet => Err(Error::feature_disabled("parquet")),
        _ => {
            let counted = files
                .iter()
                .map(|(_, lines)| {
                    crate::source::format::tar::Counted::from_manifest(
                        lines[0].samples,
                        tally(lines[0]),
                    )
                })
                .collect();
            let max_bytes = match &base {
                Base::Local(_) => crate::source::format::tar::TAR_BYTES_IN_FLIGHT,
                #[cfg(feature = "remote")]
                Base::Remote { store, .. } => store.limits.max_bytes_in_flight,
            };
            let files = files.into_iter().map(|(f, _)| f).collect();
            crate::source::format::tar::open_shards(
                files,
                origin,
                base_path,
                Some(counted),
                max_bytes,
            )
            .map(Source::from)
        }
    }
}
