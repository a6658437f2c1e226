//! One classification of what a set of files holds, for every place a source is opened from:
//! a local folder's files, the files a pattern or a name prefix names, the objects a prefix
//! lists. Each file is a tar shard, a parquet file or a TFRecord file ([`Kind`]) by its name,
//! or a TFRecord file by its first record's framing; parquet files beside tar shards of the
//! same stems are img2dataset's metadata (the tars are the dataset). Two kinds side by side,
//! data files beside class folders of images, or the shards of two sets are errors naming
//! them: reading all would mix them, or drop some, without a word.
//!
//! A new kind of dataset file is one [`Kind`] and its arms here; its format is a folder of
//! `format/`.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::format;
use crate::source::format::dir::is_parquet_name;
use crate::source::format::tar::is_tar_name;
use crate::source::format::tfrecord::is_tfrecord_name;
#[cfg(feature = "remote")]
use crate::source::storage::Located;
use crate::source::{OpenOptions, Source};

/// A kind of file a dataset is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Tar,
    Parquet,
    TfRecord,
}

impl Kind {
    /// Every kind, in the order messages name them.
    const ALL: [Kind; 3] = [Kind::Parquet, Kind::TfRecord, Kind::Tar];

    /// The files of this kind, in messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Kind::Tar => "tar shards",
            Kind::Parquet => "parquet files",
            Kind::TfRecord => "TFRecord files",
        }
    }

    /// The kind of a file by its name alone (`None`: another file, or a TFRecord file told only
    /// by its framing).
    pub(crate) fn of_name(name: &str) -> Option<Kind> {
        let name = name.rsplit('/').next().unwrap_or(name);
        if is_tar_name(name) {
            Some(Kind::Tar)
        } else if is_parquet_name(name) {
            Some(Kind::Parquet)
        } else if is_tfrecord_name(name) {
            Some(Kind::TfRecord)
        } else {
            None
        }
    }

    /// Opens `files` of this kind as one source: `origin` names it in messages, and samples
    /// are named relative to `base`. `max_bytes_in_flight` bounds a tar source's fetch stage
    /// (parquet and TFRecord take theirs from their options).
    #[cfg(feature = "remote")]
    pub(crate) fn open(
        self,
        files: Vec<Located>,
        origin: PathBuf,
        base: PathBuf,
        options: &OpenOptions,
        max_bytes_in_flight: u64,
    ) -> Result<Source, Error> {
        match self {
            Kind::Tar => format::tar::open_shards(
                files.into_iter().map(std::sync::Arc::new).collect(),
                origin,
                base,
                None,
                max_bytes_in_flight,
            )
            .map(Source::from),
            #[cfg(feature = "parquet")]
            Kind::Parquet => {
                format::parquet::index_files_with(files, origin, base, &options.parquet, None)
                    .map(Source::from)
            }
            #[cfg(not(feature = "parquet"))]
            Kind::Parquet => {
                let _ = (files, origin, base);
                Err(Error::feature_disabled("parquet"))
            }
            Kind::TfRecord => {
                format::tfrecord::index_files(files, origin, base, &options.tfrecord, None)
                    .map(Source::from)
            }
        }
    }
}

impl Kind {
    /// Opens local `files` of this kind as one source, named as the format names them.
    pub(crate) fn open_local(
        self,
        files: &[PathBuf],
        options: &OpenOptions,
    ) -> Result<Source, Error> {
        match self {
            Kind::Tar => Source::from_tar_shards(files),
            #[cfg(feature = "parquet")]
            Kind::Parquet => Source::from_parquet_with(files, options.parquet.clone()),
            #[cfg(not(feature = "parquet"))]
            Kind::Parquet => Source::from_parquet(files),
            Kind::TfRecord => Source::from_tfrecords_with(files, options.tfrecord.clone()),
        }
    }
}

/// Whether a file without a kind by its name is worth reading the head of, to tell a
/// TFRecord file by its framing: not a file of another known kind (labels, indexes, text,
/// images).
pub(crate) fn may_be_record(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    Kind::of_name(name).is_none()
        && ![".json", ".txt", ".idx", ".md", ".cls", ".tsv", ".csv"]
            .iter()
            .any(|x| lower.ends_with(x))
        && !format::dir::has_image_extension(Path::new(name))
}

/// Whether a name has a hidden component (`.git/…`, `.DS_Store`).
fn hidden(name: &str) -> bool {
    name.split('/').any(|c| c.starts_with('.'))
}

/// Where the files of a classification are: messages differ in their advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    /// A local folder, or files a pattern or prefix names.
    Local,
    /// Objects under a prefix of a store.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Store,
}

/// What `names` (files relative to `origin`) hold: one kind of data file and which of the
/// names are its files, in order, or `None` where none is. `records[i]`: file `i`, of no kind
/// by its name, starts with a TFRecord frame. `class_image`: an image in a class folder beside
/// the files, if any.
pub(crate) fn classify(
    origin: &Path,
    names: &[&str],
    records: &[bool],
    class_image: Option<&str>,
    listed: Listed,
) -> Result<Option<(Kind, Vec<usize>)>, Error> {
    let mut of_kind: [Vec<usize>; 3] = Default::default();
    for (i, name) in names.iter().enumerate() {
        if hidden(name) {
            continue;
        }
        let kind = Kind::of_name(name).or_else(|| records[i].then_some(Kind::TfRecord));
        if let Some(kind) = kind {
            of_kind[kind as usize].push(i);
        }
    }
    let (tars, parquet) = (
        &of_kind[Kind::Tar as usize],
        &of_kind[Kind::Parquet as usize],
    );
    if !parquet.is_empty() {
        let pick = |v: &[usize]| v.iter().map(|&i| names[i]).collect::<Vec<_>>();
        if beside_their_tars(&pick(parquet), &pick(tars)) {
            log::info!(
                "{}: reading the tar shards; the parquet files beside them ({}, ...) are their \
                 metadata, as img2dataset writes it",
                origin.display(),
                names[parquet[0]]
            );
            of_kind[Kind::Parquet as usize].clear();
        }
    }
    let mut present = Kind::ALL
        .into_iter()
        .filter(|&k| !of_kind[k as usize].is_empty());
    let Some(kind) = present.next() else {
        return Ok(None);
    };
    let first = |k: Kind| names[of_kind[k as usize][0]];
    if let Some(other) = present.next() {
        let advice = match listed {
            Listed::Local => {
                "move one kind out, or open the files of one kind explicitly \
                 (Source::from_parquet, Source::from_tfrecords, Source::from_tar_shards)"
            }
            Listed::Store => "move one kind to another prefix",
        };
        return Err(Error::source(
            origin,
            format!(
                "holds both {} ({}) and {} ({}): {advice}",
                kind.what(),
                first(kind),
                other.what(),
                first(other)
            ),
        ));
    }
    let files = std::mem::take(&mut of_kind[kind as usize]);
    if let Some(image) = class_image {
        let more = if files.len() > 1 { ", ..." } else { "" };
        let advice = match (listed, kind) {
            (Listed::Store, _) => "move one kind to another prefix".to_string(),
            (Listed::Local, Kind::Tar) => {
                "move one kind out, or open them explicitly with Source::from_tar_shards or \
                 Source::from_dir"
                    .to_string()
            }
            (Listed::Local, _) => format!(
                "move one kind out, or open the files with Source::from_{} or the folders with \
                 Source::from_dir",
                if kind == Kind::Parquet {
                    "parquet"
                } else {
                    "tfrecords"
                }
            ),
        };
        return Err(Error::source(
            origin,
            format!(
                "holds both {} ({}{more}) and class folders of images ({image}): {advice}",
                kind.what(),
                names[files[0]],
            ),
        ));
    }
    if kind != Kind::Tar {
        let chosen: Vec<&str> = files.iter().map(|&i| names[i]).collect();
        one_set(origin, &chosen)?;
    }
    Ok(Some((kind, files)))
}

/// True when every parquet file has a tar shard of the same stem beside it (`00000.parquet`
/// beside `00000.tar`): img2dataset writes the samples' metadata so, next to the shards.
pub(crate) fn beside_their_tars(parquet: &[&str], tars: &[&str]) -> bool {
    let stem = |name: &&str| name.rsplit_once('.').map(|(s, _)| s.to_string());
    let tar_stems: std::collections::HashSet<String> = tars.iter().filter_map(stem).collect();
    !tar_stems.is_empty()
        && parquet
            .iter()
            .all(|p| stem(p).is_some_and(|s| tar_stems.contains(&s)))
}

/// `("train", 4)` for `train-00001-of-00004.parquet` (also TFDS's
/// `imagenet2012-train.tfrecord-00001-of-01024`): the set a shard belongs to and its size.
pub(crate) fn set_of(name: &str) -> Option<(&str, u64)> {
    let name = name.rsplit('/').next().unwrap_or(name);
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

/// Refuses shards of two sets side by side, and warns about a set with shards missing.
fn one_set(dir: &Path, names: &[&str]) -> Result<(), Error> {
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
    if (names.len() as u64) < first.1 {
        log::warn!(
            "{}: holds {} of the {} shards of `{}-*-of-{}`",
            dir.display(),
            names.len(),
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

    #[test]
    fn one_kind_is_chosen_and_two_are_named() {
        let none = [false; 4];
        let names = ["a.tar", "b.tar", "notes.txt", ".hidden.parquet"];
        let found = classify(Path::new("d"), &names, &none, None, Listed::Local).unwrap();
        assert_eq!(found, Some((Kind::Tar, vec![0, 1])));
        let names = ["a.tar", "b.parquet", "c.txt", "d"];
        let e = classify(Path::new("d"), &names, &none, None, Listed::Store).unwrap_err();
        assert!(e
            .to_string()
            .contains("parquet files (b.parquet) and tar shards (a.tar)"));
        // img2dataset: parquet metadata beside the tars.
        let names = ["00000.tar", "00000.parquet", "00001.tar", "00001.parquet"];
        let found = classify(Path::new("d"), &names, &none, None, Listed::Local).unwrap();
        assert_eq!(found, Some((Kind::Tar, vec![0, 2])));
        // A TFRecord file told by its framing.
        let names = ["train-00000-of-00001", "readme.md"];
        let found = classify(Path::new("d"), &names, &[true, false], None, Listed::Local).unwrap();
        assert_eq!(found, Some((Kind::TfRecord, vec![0])));
        assert!(may_be_record("train-00000-of-00001") && !may_be_record("readme.md"));
    }
}
