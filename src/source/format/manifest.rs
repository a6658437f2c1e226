//! Manifests: one small file that lists a dataset's units (tar shards, TFRecord files, parquet
//! row groups) with their sample counts, sizes and times, so that opening reads one file (one
//! GET in object storage) instead of every shard's headers (a listing and a read per shard).
//! `imagefeed shards` writes one beside the shards it writes, `imagefeed index SOURCE` (and
//! [`Source::write_manifest`](crate::Source::write_manifest)) for a dataset that exists.
//!
//! The format is text, a line a unit, its fields separated by tabs (spaces below), so that
//! other tools can read and write it:
//!
//! ```text
//! imagefeed-manifest-v1 tar units=2 samples=2000
//! shard-000000.tar 52428800 1733600000000000000 0 1000 1000 0..9 51200000
//! shard-000001.tar 52428800 1733600000000000000 0 1000 1000 0..9 51200000
//! ```
//!
//! Each unit's line: its file (relative to the manifest's folder or URL, or absolute), the
//! file's size in bytes and modification time in nanoseconds since the Unix epoch, the unit's
//! number within its file (a parquet row group's; 0 otherwise), its samples, how many carry a
//! label, the smallest and largest label (`MIN..MAX`, `-` for none), and its images' bytes.
//!
//! A manifest that disagrees with the files is an error naming the file: a local file's size
//! is checked at open, and every unit's sample count when a reader first reads it; an object's
//! size by the ranged requests that read it.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::kind::SourceKind;

/// The manifest's name in a dataset's folder or prefix.
pub(crate) const MANIFEST_NAME: &str = "imagefeed-manifest.tsv";

const MAGIC: &str = "imagefeed-manifest-v1";

/// One unit's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// The file, as written (relative to the manifest's folder, or absolute, or a URL).
    pub(crate) file: String,
    pub(crate) size: u64,
    pub(crate) mtime: u128,
    pub(crate) part: u32,
    pub(crate) samples: u32,
    pub(crate) labeled: u32,
    pub(crate) min_label: Option<u32>,
    pub(crate) max_label: Option<u32>,
    pub(crate) image_bytes: u64,
}

/// A parsed manifest.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    pub(crate) kind: SourceKind,
    pub(crate) lines: Vec<Line>,
}

fn kind_name(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::TfRecord => "tfrecord",
        SourceKind::Parquet => "parquet",
        _ => "tar",
    }
}

impl Manifest {
    /// The manifest that lists `units` (files relative to `base`, a folder or URL).
    pub(crate) fn of_units(
        units: &super::units::Units,
        kind: crate::source::kind::SourceKind,
        base: &Path,
    ) -> Manifest {
        let lines = units
            .units
            .iter()
            .map(|u| Line {
                file: relative_to(base, &u.file.path),
                size: u.file.size,
                mtime: u.file.mtime,
                part: u.part,
                samples: u.count,
                labeled: u.tally.labeled,
                min_label: u.tally.min_label,
                max_label: u.tally.max_label,
                image_bytes: u.tally.image_bytes,
            })
            .collect();
        Manifest { kind, lines }
    }

    /// The manifest's text.
    pub(crate) fn to_text(&self) -> String {
        let samples: u64 = self.lines.iter().map(|l| u64::from(l.samples)).sum();
        let mut out = format!(
            "{MAGIC}\t{}\tunits={}\tsamples={samples}\n",
            kind_name(self.kind),
            self.lines.len()
        );
        for l in &self.lines {
            let labels = match (l.min_label, l.max_label) {
                (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
                _ => "-".to_string(),
            };
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{labels}\t{}\n",
                l.file, l.size, l.mtime, l.part, l.samples, l.labeled, l.image_bytes
            ));
        }
        out
    }

    /// Parses a manifest's text; `name` names it in errors.
    pub(crate) fn parse(text: &str, name: &Path) -> Result<Manifest, Error> {
        let bad = |line: usize, why: String| {
            Error::source(
                name,
                format!("line {line}: {why} (not an imagefeed manifest: write one with `imagefeed index`)"),
            )
        };
        let mut lines = text.lines();
        let head = lines.next().unwrap_or_default();
        let mut words = head.split('\t');
        if words.next() != Some(MAGIC) {
            return Err(bad(1, format!("does not start with `{MAGIC}`")));
        }
        let kind = match words.next() {
            Some("tar") => SourceKind::TarShards,
            Some("tfrecord") => SourceKind::TfRecord,
            Some("parquet") => SourceKind::Parquet,
            other => return Err(bad(1, format!("unknown kind {other:?}"))),
        };
        let field = |w: Option<&str>, key: &str| -> Result<u64, Error> {
            w.and_then(|w| w.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(1, format!("no `{key}` field")))
        };
        let units = field(words.next(), "units=")?;
        let samples = field(words.next(), "samples=")?;
        let mut out = Vec::new();
        for (n, line) in lines.enumerate() {
            let at = n + 2;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() != 8 {
                return Err(bad(at, format!("{} fields, not 8", cols.len())));
            }
            let num = |k: usize, what: &str| -> Result<u64, Error> {
                cols[k]
                    .parse()
                    .map_err(|_| bad(at, format!("`{}` is not a number ({what})", cols[k])))
            };
            let small = |k: usize, what: &str| -> Result<u32, Error> {
                u32::try_from(num(k, what)?).map_err(|_| bad(at, format!("{what} over 2^32")))
            };
            if cols[0].is_empty() {
                return Err(bad(at, "no file name".into()));
            }
            let labels = match cols[6] {
                "-" => None,
                range => {
                    let bad_range = || {
                        bad(
                            at,
                            format!("`{range}` is not a label range (MIN..MAX or -)"),
                        )
                    };
                    let (lo, hi) = range.split_once("..").ok_or_else(bad_range)?;
                    let (lo, hi): (u32, u32) = (
                        lo.parse().map_err(|_| bad_range())?,
                        hi.parse().map_err(|_| bad_range())?,
                    );
                    if lo > hi {
                        return Err(bad_range());
                    }
                    Some((lo, hi))
                }
            };
            out.push(Line {
                file: cols[0].to_string(),
                size: num(1, "size")?,
                mtime: cols[2]
                    .parse()
                    .map_err(|_| bad(at, format!("`{}` is not a time", cols[2])))?,
                part: small(3, "part")?,
                samples: small(4, "samples")?,
                labeled: small(5, "labeled samples")?,
                min_label: labels.map(|r| r.0),
                max_label: labels.map(|r| r.1),
                image_bytes: num(7, "image bytes")?,
            });
        }
        let counted: u64 = out.iter().map(|l| u64::from(l.samples)).sum();
        if out.len() as u64 != units || counted != samples {
            return Err(bad(
                1,
                format!(
                    "says {units} units and {samples} samples, its lines {} and {counted} (cut short?)",
                    out.len()
                ),
            ));
        }
        if out.is_empty() {
            return Err(bad(1, "lists no unit".into()));
        }
        Ok(Manifest { kind, lines: out })
    }

    /// A line's file: as written if absolute or a URL, else relative to `base` (the
    /// manifest's folder or URL).
    pub(crate) fn resolve(base: &str, file: &str) -> String {
        if file.contains("://") || Path::new(file).is_absolute() || base.is_empty() {
            file.to_string()
        } else {
            format!("{}/{file}", base.trim_end_matches('/'))
        }
    }
}

/// A file's name as a manifest at `base` writes it: relative where it lies below `base`.
pub(crate) fn relative_to(base: &Path, file: &Path) -> String {
    super::units::relative(file, base)
}

/// The manifest of a local folder, if it has one.
pub(crate) fn in_folder(dir: &Path) -> Option<PathBuf> {
    let p = dir.join(MANIFEST_NAME);
    p.is_file().then_some(p)
}

/// Whether `path` is a manifest file: by its name, or its first line.
pub(crate) fn is_manifest(path: &Path) -> bool {
    if path.file_name().is_some_and(|n| n == MANIFEST_NAME) {
        return true;
    }
    // Only a regular file is read (a FIFO would block, a device never end).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && head == MAGIC.as_bytes()
}

/// Writes `units`' manifest to `path` (into it, if a folder), or to the URL `path` names in
/// the units' store. Returns where it wrote.
pub(crate) fn write(
    units: &super::units::Units,
    kind: SourceKind,
    path: &Path,
) -> Result<PathBuf, Error> {
    let text = path.to_string_lossy();
    if text.contains("://") {
        #[cfg(feature = "remote")]
        {
            let store = units.units.iter().find_map(|u| match &u.file.place {
                crate::source::storage::Place::Remote { store, .. } => Some(store.clone()),
                _ => None,
            });
            let Some(store) = store else {
                return Err(Error::source(
                    path,
                    "a manifest is written to a store only for a source in that store",
                ));
            };
            let url = if text.ends_with('/') || !text.ends_with(".tsv") {
                format!("{}/{MANIFEST_NAME}", text.trim_end_matches('/'))
            } else {
                text.into_owned()
            };
            let Some(key) = url
                .strip_prefix(&store.url)
                .map(|k| k.trim_start_matches('/').to_string())
            else {
                return Err(Error::source(
                    path,
                    format!("not in the source's store ({})", store.url),
                ));
            };
            let base = Path::new(&url).parent().unwrap_or(Path::new(""));
            let manifest = Manifest::of_units(units, kind, base);
            store.put(&key, manifest.to_text().into_bytes())?;
            return Ok(PathBuf::from(url));
        }
        #[cfg(not(feature = "remote"))]
        return Err(Error::feature_disabled("remote"));
    }
    let target = if path.is_dir() {
        path.join(MANIFEST_NAME)
    } else {
        path.to_path_buf()
    };
    if target.exists() && !is_manifest(&target) {
        return Err(Error::source(
            &target,
            "exists and is not a manifest: imagefeed does not replace it (give a folder, or another file name)",
        ));
    }
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty());
    let manifest = Manifest::of_units(units, kind, dir.unwrap_or(Path::new("")));
    // A manifest of other files is someone's dataset: written again only over itself.
    if let Ok(old) = std::fs::read_to_string(&target) {
        let files = |m: &Manifest| -> Vec<String> {
            let mut f: Vec<String> = m.lines.iter().map(|l| l.file.clone()).collect();
            f.dedup();
            f
        };
        if let Ok(old) = Manifest::parse(&old, &target) {
            if files(&old) != files(&manifest) {
                return Err(Error::source(
                    &target,
                    format!(
                        "is a manifest of other files ({} of them, the first `{}`): imagefeed does not replace it; write this one elsewhere",
                        files(&old).len(),
                        old.lines[0].file
                    ),
                ));
            }
        }
    }
    let partial = PathBuf::from(format!("{}.partial", target.display()));
    let written = std::fs::write(&partial, manifest.to_text())
        .and_then(|()| std::fs::rename(&partial, &target));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        Error::io(&target, e)
    })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(file: &str, samples: u32) -> Line {
        Line {
            file: file.into(),
            size: 1000,
            mtime: 1_733_600_000_000_000_000,
            part: 0,
            samples,
            labeled: samples,
            min_label: Some(2),
            max_label: Some(9),
            image_bytes: 900,
        }
    }

    #[test]
    fn a_manifest_reads_back_what_was_written() {
        let m = Manifest {
            kind: SourceKind::TarShards,
            lines: vec![line("a.tar", 3), line("sub/b.tar", 4)],
        };
        let text = m.to_text();
        let back = Manifest::parse(&text, Path::new("m")).unwrap();
        assert_eq!(back.lines, m.lines);
        assert_eq!(back.kind, SourceKind::TarShards);
    }

    #[test]
    fn a_damaged_manifest_is_an_error_naming_the_line() {
        let m = Manifest {
            kind: SourceKind::Parquet,
            lines: vec![line("a.parquet", 3), line("b.parquet", 4)],
        };
        let text = m.to_text();
        let cut: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
        let e = Manifest::parse(&cut, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short"), "{e}");
        let bad = text.replace("\t3\t3\t", "\tx\t3\t");
        let e = Manifest::parse(&bad, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("`x`"), "{e}");
        assert!(Manifest::parse("hello", Path::new("m")).is_err());
    }

    #[test]
    fn files_resolve_against_the_manifest_folder() {
        assert_eq!(Manifest::resolve("/d", "a.tar"), "/d/a.tar");
        assert_eq!(Manifest::resolve("s3://b/p/", "a.tar"), "s3://b/p/a.tar");
        assert_eq!(Manifest::resolve("/d", "/e/a.tar"), "/e/a.tar");
    }
}
