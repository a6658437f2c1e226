//! Tar shards in the WebDataset layout: opening them (local or in object storage), reading
//! their members, and writing them (`imagefeed shards`).
//!
//! A shard is a plain tar file; a sample is a run of consecutive members sharing a key (the
//! member path up to the first `.` of its file name): one image (`KEY.jpg`, `KEY.jpeg`,
//! `KEY.png`, `KEY.webp`) and its label as decimal text (`KEY.cls`).
//!
//! **Opening** learns each shard's sample count and nothing per sample: from a manifest
//! (`format/manifest.rs`: one small file listing every shard), or by reading every member
//! header once (seeking over the data; for a shard in object storage, its `.tar.idx`
//! sidecar, or the shard streamed once). The source keeps a few dozen bytes a shard.
//!
//! **Reading**: an epoch's reader loads a shard's *table* — where each sample's image and
//! label members lie, and the label — when it first reads from that shard (from the headers
//! again, or the sidecar), keeps the tables of the shards of its shuffle block, and reads each
//! member with one positioned read (one ranged request in object storage), checking its tar
//! header and label against the table: a shard rewritten since it was opened is an error
//! naming the sample, never an image served under another label.
//!
//! `index.rs` reads a shard's headers into a table, `read.rs` is the reader, `write.rs`
//! writes shards and `sidecar.rs` reads and writes the `.tar.idx` sidecars.

mod index;
mod read;
mod sidecar;
pub(crate) mod write;

use std::path::Path;
use std::sync::Arc;

use super::list::parse_label;
use super::units::Units;
use crate::error::{DecodeFailure, Error};
use crate::fields::FieldSpecs;
use crate::source::format::read::{Reader, Streamed};
use crate::source::kind::SourceKind;

#[cfg(feature = "unstable-tools")]
pub(crate) use index::index_bytes;
pub(crate) use index::{index_local, open_shards, scan_shard, Counted};
pub(crate) use read::TarReader;
#[cfg(feature = "remote")]
pub(crate) use sidecar::{parse_sidecar, sidecar_name};
pub(crate) use write::class_names_in;

/// The largest `.cls` member read (a label is a short decimal number).
const MAX_CLS_BYTES: u64 = 64;

/// Fetched bytes held at once for local tar shards (remote ones use
/// `OpenOptions::max_bytes_in_flight`).
pub(crate) const TAR_BYTES_IN_FLIGHT: u64 = 64 << 20;

/// True for a name ending in `.tar` (any case).
pub(crate) fn is_tar_name(name: &str) -> bool {
    // Bytes, not a `str` slice: the cut may fall inside a character (`说明`).
    let b = name.as_bytes();
    b.len() > 4 && b[b.len() - 4..].eq_ignore_ascii_case(b".tar")
}

/// True if `s` is a URL (`scheme://…`) rather than a local path.
pub(crate) fn looks_like_url(s: &str) -> bool {
    match s.split_once("://") {
        Some((scheme, _)) => {
            scheme.len() > 1
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+')
        }
        None => false,
    }
}

/// Tar shards: their units (one a shard) and what reading them needs.
#[derive(Debug)]
pub(crate) struct TarSet {
    pub(crate) units: Units,
    /// The fetch stage's byte bound.
    pub(crate) max_bytes_in_flight: u64,
}

/// One sample of a shard's table: where its image and label members lie.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) member: String,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) label: Option<u32>,
    /// Where its `.cls` member's data lies (offset, length).
    pub(crate) label_at: Option<(u64, u64)>,
    /// Its other members (`KEY.txt`, `KEY.json`, …): extension, data offset, length.
    pub(crate) others: Vec<Other>,
}

/// A sample's member that is neither its image nor its label: a field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Other {
    pub(crate) ext: Box<str>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Found {
    /// Where the member of field `name` lies: an other member of that extension, or the
    /// `.cls` member for `cls`.
    pub(crate) fn member_of(&self, name: &str) -> Option<(u64, u64)> {
        if let Some(o) = self.others.iter().find(|o| &*o.ext == name) {
            return Some((o.offset, o.len));
        }
        if name == "cls" {
            return self.label_at;
        }
        None
    }
}

impl Streamed for TarSet {
    fn kind(&self) -> SourceKind {
        SourceKind::TarShards
    }

    fn units(&self) -> &Units {
        &self.units
    }

    fn with_units(&self, keep: &[usize]) -> Arc<dyn Streamed> {
        Arc::new(TarSet {
            units: self.units.subset(keep),
            max_bytes_in_flight: self.max_bytes_in_flight,
        })
    }

    fn byte_bound(&self) -> u64 {
        self.max_bytes_in_flight
    }

    fn reader(self: Arc<Self>, block: usize, fields: &FieldSpecs) -> Box<dyn Reader> {
        Box::new(TarReader::new(self, block, fields.clone()))
    }

    /// The tables of the shards of a block (about 64 bytes a sample).
    fn reader_bytes(&self, block: usize) -> u64 {
        let units = &self.units;
        let mean = units.len() / (units.units.len() as u64).max(1);
        let tables = super::units::tables_for(block, mean) as u64;
        tables.saturating_mul(mean).saturating_mul(96)
    }
}

/// The label a `.cls` member's data holds: a list's label (`parse_label`) with white space
/// around it allowed (`echo 3 > a.cls` writes `3\n`).
fn cls_label(data: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(data).ok()?.trim();
    parse_label(text.as_bytes()).ok()
}

/// A tar block: headers are one block, data is padded to whole blocks.
const BLOCK: u64 = 512;

/// `("dir/KEY", "ext")` for `dir/KEY.ext`: the key is the path up to the first `.` of the
/// file name (WebDataset's rule), the extension the rest.
fn split_member(member: &str) -> (&str, &str) {
    let name_start = member.rfind('/').map_or(0, |i| i + 1);
    match member[name_start..].find('.') {
        Some(dot) => (&member[..name_start + dot], &member[name_start + dot + 1..]),
        None => (member, ""),
    }
}

fn too_large(name: &Path, len: u64, limit: u64) -> Error {
    Error::decode(
        name,
        DecodeFailure(format!(
            "member is {len} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_names_are_told_by_their_bytes() {
        assert!(is_tar_name("a.TAR") && is_tar_name("数据.tar"));
        // Cutting `len - 4` bytes inside a character panicked on names like these.
        for name in ["说明", "猫咪", "x说", ".tar", "tar"] {
            assert!(!is_tar_name(name), "{name}");
        }
    }

    #[test]
    fn member_keys_follow_webdataset() {
        assert_eq!(split_member("a/b/000012.jpg"), ("a/b/000012", "jpg"));
        assert_eq!(split_member("x.seg.png"), ("x", "seg.png"));
        assert_eq!(split_member("dir.v2/k.cls"), ("dir.v2/k", "cls"));
        assert_eq!(split_member("noext"), ("noext", ""));
    }

    #[test]
    fn urls_and_tar_names() {
        assert!(looks_like_url("s3://b/p"));
        assert!(looks_like_url("https://h/x"));
        assert!(!looks_like_url("data/train.txt"));
        assert!(!looks_like_url("/x://y"));
        assert!(is_tar_name("a/shard-0.TAR"));
        assert!(!is_tar_name(".tar"));
        assert!(!is_tar_name("x.tar.gz"));
    }
}
