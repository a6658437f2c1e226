//! Tar shards in the WebDataset layout: indexing them (local or in object storage), reading
//! their members as sequential streams, and writing them (`imagefeed shards`).
//!
//! A shard is a plain tar file; a sample is a run of consecutive members sharing a key (the
//! member path up to the first `.` of its file name): one image (`KEY.jpg`, `KEY.jpeg`,
//! `KEY.png`) and its label as decimal text (`KEY.cls`). Opening a shard source reads every
//! member header once and records, per sample, the shard, the byte offset and length of the
//! image's data and of its label's (29 bytes a sample). Epochs then read each shard front to
//! back with one stream (one request for object storage), skipping other members, and check
//! each image's tar header and each label member against the index as they go: a shard
//! rewritten since it was indexed (or a stale `.tar.idx` sidecar) is an error naming the
//! sample, never an image served under another label.

//!
//! Names and the index are here; `index.rs` indexes shards, `read.rs` reads their members,
//! `write.rs` writes them and `sidecar.rs` reads and writes the `.tar.idx` sidecar indexes.

mod index;
mod read;
mod sidecar;
mod write;

use std::path::{Path, PathBuf};

use super::list::parse_label;
use crate::error::{DecodeFailure, Error};
#[cfg(feature = "unstable-tools")]
pub(crate) use index::index_bytes;
pub(crate) use index::index_local;
#[cfg(feature = "remote")]
pub(crate) use index::{assemble, index_shard, Head};
pub(crate) use read::ShardCursor;
#[cfg(feature = "remote")]
pub(crate) use sidecar::{parse_sidecar, sidecar_name};
pub use write::{write_shards, ShardsWritten};

/// The largest `.cls` member read (a label is a short decimal number).
const MAX_CLS_BYTES: u64 = 64;
/// [`TarIndex::label_offset`] of a sample without a `.cls` member.
const NO_LABEL_MEMBER: u64 = u64::MAX;
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

/// The `*.tar` files directly in `dir`, sorted.
pub(crate) fn tar_files_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if crate::source::format::dir::is_hidden(&name) || !is_tar_name(&name.to_string_lossy()) {
            continue;
        }
        if entry.path().is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Where a shard is.
#[derive(Debug)]
pub(crate) enum ShardLocation {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Remote(String),
}

/// One indexed shard.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) location: ShardLocation,
    /// The shard's name in messages (its path or URL).
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) mtime: u128,
    /// Its samples are `first..first + count`.
    pub(crate) first: u32,
    pub(crate) count: u32,
}

/// Where every sample's image lies.
#[derive(Debug)]
pub(crate) struct TarIndex {
    pub(crate) shards: Vec<Shard>,
    shard_of: Vec<u32>,
    offset: Vec<u64>,
    len: Vec<u64>,
    /// The data offset of each sample's `.cls` member, [`NO_LABEL_MEMBER`] for none.
    label_offset: Vec<u64>,
    /// The data length of each sample's `.cls` member (at most [`MAX_CLS_BYTES`]).
    label_len: Vec<u8>,
    #[cfg(feature = "remote")]
    pub(crate) store: Option<std::sync::Arc<crate::source::storage::remote::Store>>,
}

impl TarIndex {
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.shard_of.capacity() * 4
            + self.offset.capacity() * 8
            + self.len.capacity() * 8
            + self.label_offset.capacity() * 8
            + self.label_len.capacity()
            + self
                .shards
                .iter()
                .map(|s| s.name.len() + std::mem::size_of::<Shard>() + 64)
                .sum::<usize>()) as u64
    }

    /// `(shard, data offset, data length)` of sample `i`'s image.
    /// The mean member length (`None` without members).
    pub(crate) fn mean_len(&self) -> Option<u64> {
        let total: u64 = self.len.iter().fold(0u64, |a, &l| a.saturating_add(l));
        total.checked_div(self.len.len() as u64)
    }

    pub(crate) fn locate(&self, i: usize) -> (u32, u64, u64) {
        (self.shard_of[i], self.offset[i], self.len[i])
    }

    /// `(data offset, data length)` of sample `i`'s `.cls` member, if it has one.
    fn label_member(&self, i: usize) -> Option<(u64, u64)> {
        let at = self.label_offset[i];
        (at != NO_LABEL_MEMBER).then(|| (at, u64::from(self.label_len[i])))
    }

    /// `(shard, first byte, end)` of the data of sample `i`'s members (image and label),
    /// headers not included.
    pub(crate) fn span(&self, i: usize) -> (u32, u64, u64) {
        let (shard, offset, len) = self.locate(i);
        match self.label_member(i) {
            Some((at, n)) => (shard, offset.min(at), (offset + len).max(at + n)),
            None => (shard, offset, offset + len),
        }
    }

    pub(crate) fn stamp(&self, i: usize) -> (u64, u128) {
        let s = &self.shards[self.shard_of[i] as usize];
        (
            s.size ^ self.offset[i].rotate_left(32) ^ self.len[i],
            s.mtime,
        )
    }

    /// Reads sample `i`'s image bytes with one seek (or ranged request), checking its label
    /// member holds `label`. `name` names it in errors.
    pub(crate) fn read_member(
        &self,
        i: usize,
        label: u32,
        name: &Path,
        limit: u64,
    ) -> Result<Vec<u8>, Error> {
        let (_, _, len) = self.locate(i);
        if len > limit {
            return Err(too_large(name, len, limit));
        }
        let mut cursor = ShardCursor::default();
        let mut out = Vec::new();
        cursor.read(self, i, label, 0, name, &mut out)?;
        Ok(out)
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

/// One sample found while indexing a shard.
#[derive(Debug)]
pub(crate) struct Found {
    member: String,
    offset: u64,
    len: u64,
    label: Option<u32>,
    /// Where its `.cls` member's data lies (offset, length).
    label_at: Option<(u64, u64)>,
}

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
