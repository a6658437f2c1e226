//! Writing samples as tar shards: the shards, their sidecar indexes, their manifest and class
//! names (`imagefeed shards`, [`write_shards`](crate::write_shards)).

use std::path::{Path, PathBuf};

use super::sidecar::write_sidecar;
use super::{is_tar_name, Found};
use crate::error::Error;
use crate::source::format::dir::IMAGE_EXTENSIONS;

/// What [`write_shards`](crate::write_shards) wrote.
#[derive(Debug, Clone)]
pub struct ShardsWritten {
    /// The shard files, in order.
    pub shards: Vec<PathBuf>,
    /// Samples written.
    pub samples: u64,
    /// Image bytes written (without tar headers and labels).
    pub bytes: u64,
}

/// Writes the samples `order` (dataset indices, read by `read`) into `out_dir` as shards of
/// `shard_size` samples, with each shard's sidecar index, their manifest, and `class_names`
/// beside them ([`write_shards_with`](crate::write_shards_with) reads them from a source).
pub(crate) fn write_samples(
    out_dir: &Path,
    order: &[u32],
    shard_size: usize,
    read: &mut impl FnMut(usize) -> Result<Read, Error>,
    specs: &crate::fields::FieldSpecs,
    class_names: Option<&[String]>,
) -> Result<ShardsWritten, Error> {
    check_out_dir(out_dir)?;
    // Each shard's manifest line, written beside the shards at the end.
    let mut lines = Vec::new();
    let mut written = ShardsWritten {
        shards: Vec::new(),
        samples: 0,
        bytes: 0,
    };
    for (k, chunk) in order.chunks(shard_size).enumerate() {
        let final_path = out_dir.join(format!("shard-{k:06}.tar"));
        let partial = out_dir.join(format!("shard-{k:06}.tar.partial"));
        let result = write_shard(&partial, chunk, read, specs);
        match result {
            Ok((bytes, found)) => {
                std::fs::rename(&partial, &final_path).map_err(|e| Error::io(&final_path, e))?;
                write_sidecar(&final_path, &found)?;
                let file = crate::source::storage::Located::local(&final_path, "a shard")?;
                let counted = super::Counted::of(&found);
                lines.push(crate::source::format::manifest::Line {
                    file: format!("shard-{k:06}.tar"),
                    size: file.size,
                    mtime: file.mtime,
                    part: 0,
                    samples: counted.count,
                    labeled: counted.labeled,
                    min_label: counted.min_label,
                    max_label: counted.max_label,
                    image_bytes: counted.bytes,
                });
                written.samples += chunk.len() as u64;
                written.bytes += bytes;
                written.shards.push(final_path);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        }
    }
    let manifest = crate::source::format::manifest::Manifest {
        kind: crate::source::kind::SourceKind::TarShards,
        lines,
    };
    let path = out_dir.join(crate::source::format::manifest::MANIFEST_NAME);
    std::fs::write(&path, manifest.to_text()).map_err(|e| Error::io(&path, e))?;
    if let Some(names) = class_names {
        let path = out_dir.join(CLASSES_NAME);
        let text: String = names.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    }
    Ok(written)
}

/// Refuses an output folder that already holds shards (or a manifest): nothing the user has
/// is overwritten. Creates it where it is missing.
fn check_out_dir(out_dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    for entry in std::fs::read_dir(out_dir).map_err(|e| Error::io(out_dir, e))? {
        let entry = entry.map_err(|e| Error::io(out_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = is_tar_name(&name)
            || [".tar.partial", ".tar.idx", ".tar.idx.partial"]
                .iter()
                .any(|suffix| name.ends_with(suffix));
        if (name.starts_with("shard-") && ours)
            || name == crate::source::format::manifest::MANIFEST_NAME
        {
            return Err(Error::source(
                out_dir,
                format!("already holds shards (`{name}`); choose an empty folder"),
            ));
        }
    }
    Ok(())
}

/// A sample read for re-sharding: its image and label (and fields), its name, and its other
/// members.
pub(crate) type Read = (
    crate::source::format::read::Sample,
    PathBuf,
    crate::source::format::read::Members,
);

/// Writes the samples `chunk` (dataset indices, read by `read`) into the shard `partial`, each
/// as `KEY.EXT` (its image), `KEY.cls`, its other members and its fields; returns the image
/// bytes and the shard's table.
fn write_shard(
    partial: &Path,
    chunk: &[u32],
    read: &mut impl FnMut(usize) -> Result<Read, Error>,
    specs: &crate::fields::FieldSpecs,
) -> Result<(u64, Vec<Found>), Error> {
    let partial = partial.to_path_buf();
    let file = std::fs::File::create(&partial).map_err(|e| Error::io(&partial, e))?;
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    let mut bytes = 0u64;
    // Where each image's data lands: one 512-byte ustar header, then the data padded
    // to 512 bytes (names are short: no extension headers).
    let mut at = 0u64;
    let mut found = Vec::with_capacity(chunk.len());
    let block = |n: u64| n.div_ceil(512) * 512;
    for &i in chunk {
        let i = i as usize;
        let (sample, name, others) = read(i)?;
        let data = sample.bytes;
        let ext = sample_extension(&name, &data);
        let key = format!("{i:09}");
        let member = format!("{key}.{ext}");
        append(&mut builder, &member, &data, &partial)?;
        let label = sample.label;
        let text = label.to_string();
        let image_at = at + 512;
        at += 512 + block(data.len() as u64);
        found.push(Found {
            member,
            offset: image_at,
            len: data.len() as u64,
            label: Some(label),
            label_at: Some((at + 512, text.len() as u64)),
            others: Vec::new(),
        });
        append(
            &mut builder,
            &format!("{key}.cls"),
            text.as_bytes(),
            &partial,
        )?;
        at += 512 + block(text.len() as u64);
        // The sample's other members, then its fields, each as `KEY.EXT`.
        let mut kept = Vec::new();
        for (ext, bytes) in others {
            append(&mut builder, &format!("{key}.{ext}"), &bytes, &partial)?;
            kept.push(super::Other {
                ext,
                offset: at + 512,
                len: bytes.len() as u64,
            });
            at += 512 + block(bytes.len() as u64);
        }
        for (field, value) in specs.iter().zip(&sample.fields.0) {
            let Some(bytes) = member_bytes(value) else {
                continue;
            };
            append(
                &mut builder,
                &format!("{key}.{}", field.name()),
                &bytes,
                &partial,
            )?;
            kept.push(super::Other {
                ext: field.name().into(),
                offset: at + 512,
                len: bytes.len() as u64,
            });
            at += 512 + block(bytes.len() as u64);
        }
        if let Some(last) = found.last_mut() {
            last.others = kept;
        }
        bytes += data.len() as u64;
    }
    let inner = builder.into_inner().map_err(|e| Error::io(&partial, e))?;
    let file = inner
        .into_inner()
        .map_err(|e| Error::io(&partial, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(&partial, e))?;
    Ok((bytes, found))
}

/// The class names beside shards `imagefeed shards` wrote: one a line, by label.
pub(crate) const CLASSES_NAME: &str = "imagefeed-classes.txt";

/// The class names in `dir`'s `imagefeed-classes.txt`, if it has one (a name may not hold a
/// line break; an unreadable or non-UTF-8 file is ignored with a warning).
pub(crate) fn class_names_in(dir: &Path) -> Option<Vec<String>> {
    let path = dir.join(CLASSES_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text.lines().map(str::to_string).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::warn!("{}: not read ({e}); no class names", path.display());
            None
        }
    }
}

/// A field's value as a member's bytes: text and bytes as they are, numbers as text.
fn member_bytes(value: &crate::fields::FieldData) -> Option<Vec<u8>> {
    use crate::fields::FieldData;
    let join = |v: Vec<String>| v.join(" ").into_bytes();
    match value {
        FieldData::Missing => None,
        FieldData::Text(b) | FieldData::Bytes(b) => Some(b.clone()),
        FieldData::Ints(v) => Some(join(v.iter().map(ToString::to_string).collect())),
        FieldData::Floats(v) => Some(join(v.iter().map(ToString::to_string).collect())),
    }
}

fn append<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    name: &str,
    data: &[u8],
    shard: &Path,
) -> Result<(), Error> {
    let mut header = tar::Header::new_ustar();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    builder
        .append_data(&mut header, name, data)
        .map_err(|e| Error::io(shard, e))
}

/// The extension a sample's image member gets: its name's (lower-cased, a sample of a shard
/// named `shard.tar[KEY.png]`) if it is an image extension, else from the bytes' signature.
fn sample_extension(name: &Path, data: &[u8]) -> &'static str {
    let raw = name.to_string_lossy().to_ascii_lowercase();
    let raw = raw.trim_end_matches(']');
    for &ext in IMAGE_EXTENSIONS {
        if raw.ends_with(&format!(".{ext}")) {
            return ext;
        }
    }
    if data.starts_with(b"\x89PNG") {
        "png"
    } else {
        "jpg"
    }
}
