//! What [`Source::open`] makes of a parquet or TFRecord path: which files of a folder are
//! shards of which kind, and the checks that a folder holds one dataset (one kind of shard,
//! one set of `NAME-00000-of-00004` files).

use std::path::{Path, PathBuf};

use super::format::dir::{class_folder_with_images, is_parquet_name, parquet_files_in};
use super::format::tar as shards;
use super::format::tfrecord;
use super::{RemoteOptions, Source};
use crate::error::Error;

/// A file [`Source::open`] opens as parquet or TFRecord, by its name or (TFRecord) its first
/// record's framing; `None` for others (lists, tar shards).
pub(crate) fn open_file(path: &Path, options: &RemoteOptions) -> Option<Result<Source, Error>> {
    let name = path.file_name()?.to_string_lossy();
    if is_parquet_name(&name) {
        return Some(open_parquet(&[path.to_path_buf()], options));
    }
    if tfrecord::is_tfrecord_name(&name) || tfrecord::sniff(path).is_some() {
        return Some(Source::from_tfrecords_with(
            [path],
            options.tfrecord.clone(),
        ));
    }
    None
}

fn open_parquet(files: &[PathBuf], options: &RemoteOptions) -> Result<Source, Error> {
    #[cfg(feature = "parquet")]
    {
        Source::from_parquet_with(files, options.parquet.clone())
    }
    #[cfg(not(feature = "parquet"))]
    {
        let _ = options;
        Source::from_parquet(files)
    }
}

/// The source a set of files named by a pattern or a prefix holds (`origin` names them in
/// errors): tar shards, parquet or TFRecord files (parquet beside same-stem tars: the tars, as
/// img2dataset writes them), or a file list. Two kinds are an error naming both.
pub(crate) fn open_files(
    origin: &Path,
    files: Vec<PathBuf>,
    options: &RemoteOptions,
) -> Result<Source, Error> {
    let name = |p: &PathBuf| file_name(p);
    let tars: Vec<PathBuf> = files
        .iter()
        .filter(|f| shards::is_tar_name(&name(f)))
        .cloned()
        .collect();
    let mut parquets: Vec<PathBuf> = files
        .iter()
        .filter(|f| is_parquet_name(&name(f)))
        .cloned()
        .collect();
    if !parquets.is_empty() && beside_their_tars(&parquets, &tars) {
        parquets.clear();
    }
    let records: Vec<PathBuf> = files
        .iter()
        .filter(|f| !shards::is_tar_name(&name(f)) && !is_parquet_name(&name(f)))
        .filter(|f| tfrecord::is_tfrecord_name(&name(f)) || tfrecord::sniff(f).is_some())
        .cloned()
        .collect();
    let kinds = [
        ("tar shards", &tars),
        ("parquet files", &parquets),
        ("TFRecord files", &records),
    ];
    let mut present = kinds.iter().filter(|(_, v)| !v.is_empty());
    match (present.next(), present.next()) {
        (Some(a), Some(b)) => Err(both(origin, (a.0, &a.1[0]), (b.0, &b.1[0]))),
        (Some(("tar shards", _)), None) => Source::from_tar_shards(&tars),
        (Some(("parquet files", _)), None) => {
            one_set(origin, &parquets)?;
            open_parquet(&parquets, options)
        }
        (Some(_), None) => {
            one_set(origin, &records)?;
            Source::from_tfrecords_with(&records, options.tfrecord.clone())
        }
        (None, _) if files.len() == 1 => Source::from_list_file(&files[0]),
        (None, _) => Err(Error::source(
            origin,
            format!(
                "names {} files, none of them tar shards, parquet or TFRecord files (`{}`, …)",
                files.len(),
                files.first().map(name).unwrap_or_default()
            ),
        )),
    }
}

/// A folder [`Source::open`] opens as parquet or TFRecord shards: `Ok(None)` if it holds
/// neither. A folder holding two kinds of dataset (these, tar shards, class folders of
/// images), or two sets of shards (`train-*-of-00004` and `test-*-of-00001`), is an error
/// naming them: reading all would mix them without a word.
pub(crate) fn open_dir(dir: &Path, options: &RemoteOptions) -> Result<Option<Source>, Error> {
    let mut parquet = parquet_files_in(dir)?;
    let tars = shards::tar_files_in(dir)?;
    if !parquet.is_empty() && beside_their_tars(&parquet, &tars) {
        // img2dataset's layout: the tar shards are the dataset.
        log::info!(
            "{}: reading the tar shards; the parquet files beside them ({}, ...) are their \
             metadata, as img2dataset writes it",
            dir.display(),
            file_name(&parquet[0])
        );
        parquet.clear();
    }
    let records = tfrecord::files_in(dir)?;
    let (kind, files) = match (parquet.is_empty(), records.is_empty()) {
        (true, true) => return Ok(None),
        (false, true) => ("parquet", parquet),
        (true, false) => ("TFRecord", records),
        (false, false) => {
            return Err(both(
                dir,
                ("parquet files", &parquet[0]),
                ("TFRecord files", &records[0]),
            ))
        }
    };
    if let Some(tar) = tars.first() {
        return Err(both(
            dir,
            (&format!("{kind} files"), &files[0]),
            ("tar shards", tar),
        ));
    }
    if let Some(class) = class_folder_with_images(dir)? {
        return Err(Error::source(
            dir,
            format!(
                "holds both {kind} files ({}) and class folders ({}/ holds images): move one \
                 kind out, or open the files with Source::from_{} or the folders with \
                 Source::from_dir",
                file_name(&files[0]),
                super::format::list::shown(class.as_encoded_bytes()),
                if kind == "parquet" {
                    "parquet"
                } else {
                    "tfrecords"
                }
            ),
        ));
    }
    one_set(dir, &files)?;
    Ok(Some(if kind == "parquet" {
        open_parquet(&files, options)?
    } else {
        Source::from_tfrecords_with(&files, options.tfrecord.clone())?
    }))
}

/// True when every parquet file has a tar shard of the same stem beside it (`00000.parquet`
/// beside `00000.tar`): img2dataset writes the samples' metadata so, next to the shards.
pub(crate) fn beside_their_tars<P: AsRef<Path>>(parquet: &[P], tars: &[P]) -> bool {
    let stem = |p: &P| {
        let name = p.as_ref().file_name().unwrap_or_default().to_string_lossy();
        name.rsplit_once('.').map(|(s, _)| s.to_string())
    };
    let tar_stems: std::collections::HashSet<String> = tars.iter().filter_map(stem).collect();
    !tar_stems.is_empty()
        && parquet
            .iter()
            .all(|p| stem(p).is_some_and(|s| tar_stems.contains(&s)))
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn both(dir: &Path, a: (&str, &PathBuf), b: (&str, &PathBuf)) -> Error {
    Error::source(
        dir,
        format!(
            "holds both {} ({}) and {} ({}): move one kind out, or open the files of one kind \
             explicitly (Source::from_parquet, Source::from_tfrecords, Source::from_tar_shards)",
            a.0,
            file_name(a.1),
            b.0,
            file_name(b.1)
        ),
    )
}

/// `("train", 4)` for `train-00001-of-00004.parquet` (also TFDS's
/// `imagenet2012-train.tfrecord-00001-of-01024`): the set a shard belongs to and its size.
pub(crate) fn set_of(name: &str) -> Option<(&str, u64)> {
    let stem = name.strip_suffix(".parquet").unwrap_or(name);
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    let (head, total) = stem.rsplit_once("-of-")?;
    let (set, index) = head.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(total) {
        return None;
    }
    Some((set, total.parse().ok()?))
}

/// Refuses shards of two sets in one folder, and warns about a set with shards missing.
pub(crate) fn one_set(dir: &Path, files: &[PathBuf]) -> Result<(), Error> {
    let names: Vec<String> = files.iter().map(|f| file_name(f)).collect();
    let sets: Vec<Option<(&str, u64)>> = names.iter().map(|n| set_of(n)).collect();
    let Some(Some(first)) = sets.first() else {
        return Ok(());
    };
    if let Some((k, _)) = sets
        .iter()
        .enumerate()
        .find(|(_, s)| s.is_none_or(|s| s != *first))
    {
        return Err(Error::source(
            dir,
            format!(
                "holds shards of more than one set (`{}` and `{}`: a split each, say): open one \
                 split by its name (Source::open_split(\"{}\", \"{set}\"); `--split {set}` on \
                 the command line), or by its name prefix (`{}-`)",
                names[0],
                names[k],
                dir.display(),
                dir.join(first.0).display(),
                set = first.0,
            ),
        ));
    }
    if (files.len() as u64) < first.1 {
        log::warn!(
            "{}: holds {} of the {} shards of `{}-*-of-{}`",
            dir.display(),
            files.len(),
            first.1,
            first.0,
            first.1
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_sets_are_told_by_their_names() {
        assert_eq!(set_of("train-00001-of-00004.parquet"), Some(("train", 4)));
        assert_eq!(set_of("train-00000-of-01024"), Some(("train", 1024)));
        assert_eq!(
            set_of("imagenet2012-train.tfrecord-00001-of-01024"),
            Some(("imagenet2012-train.tfrecord", 1024))
        );
        assert_eq!(set_of("part-0.parquet"), None);
        assert_eq!(set_of("x-of-3"), None);
    }
}
