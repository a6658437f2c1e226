//! What [`Source::open`](crate::Source::open) makes of local files: a folder's files, the
//! files a pattern or a prefix names, or one file, classified by `classify.rs`.

use std::path::{Path, PathBuf};

use super::classify::{classify, may_be_record, Kind, Listed};
use crate::error::Error;
use crate::source::format::dir::class_folder_with_images;
use crate::source::format::list::shown;
use crate::source::format::tfrecord;
use crate::source::{OpenOptions, Source};

/// A file [`Source::open`](crate::Source::open) opens as data files of a [`Kind`], by its name
/// or (TFRecord) its first record's framing; `None` for others (lists).
pub(crate) fn open_file(path: &Path, options: &OpenOptions) -> Option<Result<Source, Error>> {
    let name = path.file_name()?.to_string_lossy();
    let kind = Kind::of_name(&name).or_else(|| {
        (may_be_record(&name) && tfrecord::sniff(path).is_some()).then_some(Kind::TfRecord)
    })?;
    Some(kind.open_local(&[path.to_path_buf()], options))
}

/// The source a set of files named by a pattern or a prefix holds (`origin` names them in
/// errors): one kind of data files, or a file list. Two kinds are an error naming both.
pub(crate) fn open_files(
    origin: &Path,
    files: Vec<PathBuf>,
    options: &OpenOptions,
) -> Result<Source, Error> {
    let names: Vec<String> = files.iter().map(|p| file_name(p)).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let records: Vec<bool> = refs
        .iter()
        .zip(&files)
        .map(|(n, f)| may_be_record(n) && tfrecord::sniff(f).is_some())
        .collect();
    match classify(origin, &refs, &records, None, Listed::Local)? {
        Some((kind, chosen)) => {
            let chosen: Vec<PathBuf> = chosen.into_iter().map(|i| files[i].clone()).collect();
            kind.open_local(&chosen, options)
        }
        None if files.len() == 1 => Source::from_list_file(&files[0]),
        None => Err(Error::source(
            origin,
            format!(
                "names {} files, none of them tar shards, parquet or TFRecord files (`{}`, …)",
                files.len(),
                refs.first().copied().unwrap_or_default()
            ),
        )),
    }
}

/// The data files directly in folder `dir` as one source: `Ok(None)` where it holds none. Data
/// files beside class folders of images, two kinds of them, or the shards of two sets are an
/// error naming them.
pub(crate) fn open_dir(dir: &Path, options: &OpenOptions) -> Result<Option<Source>, Error> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    let names: Vec<String> = files.iter().map(|p| file_name(p)).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let records: Vec<bool> = refs
        .iter()
        .zip(&files)
        .map(|(n, f)| !n.starts_with('.') && may_be_record(n) && tfrecord::sniff(f).is_some())
        .collect();
    let any = refs.iter().any(|n| Kind::of_name(n).is_some()) || records.contains(&true);
    if !any {
        return Ok(None);
    }
    let class = class_folder_with_images(dir)?.map(|c| format!("{}/", shown(c.as_encoded_bytes())));
    match classify(dir, &refs, &records, class.as_deref(), Listed::Local)? {
        Some((kind, chosen)) => {
            let chosen: Vec<PathBuf> = chosen.into_iter().map(|i| files[i].clone()).collect();
            kind.open_local(&chosen, options).map(Some)
        }
        None => Ok(None),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}
