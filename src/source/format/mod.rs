//! [`Backing`]: where a source's samples' bytes are, and the one place that matches on the
//! kind of source. Each kind reads its bytes in a file of its own (`shards/` for tar shards,
//! `remote.rs` for objects, the decode threads themselves for local files); a new kind of
//! source is a new file in `source/` and an arm in each method here.

pub(crate) mod dir;
pub(crate) mod list;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
pub(crate) mod tar;
pub(crate) mod tfrecord;

use std::path::PathBuf;
use std::sync::Arc;

use crate::source::fetch::Fetch;
#[cfg(feature = "parquet")]
use parquet::ParquetIndex;
use tar::TarIndex;
use tfrecord::TfRecordIndex;
#[cfg(feature = "remote")]
use crate::source::ObjectIndex;
use crate::source::{regular_file, FileIndex, SourceKind};
use crate::error::Error;

/// Where the bytes of a source's samples are.
#[derive(Debug, Clone)]
pub(crate) enum Backing {
    /// Local files: the index paths.
    Files,
    /// Objects: index paths are keys relative to `prefix` in `store`.
    #[cfg(feature = "remote")]
    Objects(Arc<ObjectIndex>),
    /// Members of tar shards.
    Tar(Arc<TarIndex>),
    /// Records of TFRecord shards.
    TfRecord(Arc<TfRecordIndex>),
    /// Rows of parquet files.
    #[cfg(feature = "parquet")]
    Parquet(Arc<ParquetIndex>),
}

impl Backing {
    /// How the samples are stored.
    pub(crate) fn kind(&self) -> SourceKind {
        match self {
            Backing::Files => SourceKind::Files,
            #[cfg(feature = "remote")]
            Backing::Objects(_) => SourceKind::Objects,
            Backing::Tar(_) => SourceKind::TarShards,
            Backing::TfRecord(_) => SourceKind::TfRecord,
            #[cfg(feature = "parquet")]
            Backing::Parquet(_) => SourceKind::Parquet,
        }
    }

    /// Size and modification time of sample `i`'s bytes, for the stamped fingerprint.
    pub(crate) fn stamp(&self, index: &FileIndex, i: usize, scratch: &mut PathBuf) -> (u64, u128) {
        match self {
            Backing::Files => {
                index.path_into(i, scratch);
                match std::fs::metadata(&*scratch) {
                    Ok(m) => {
                        let t = m
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_nanos());
                        (m.len(), t)
                    }
                    Err(_) => (u64::MAX, 0),
                }
            }
            #[cfg(feature = "remote")]
            Backing::Objects(o) => {
                let (size, mtime) = o.stamps[i];
                (size, mtime as u128)
            }
            Backing::Tar(t) => t.stamp(i),
            Backing::TfRecord(t) => t.stamp(i),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.stamp(i),
        }
    }

    /// Every sample's size and modification time, when the source itself does not know them:
    /// objects named by a list file (not listed, so stamped `(0, 0)`) are asked of the store, so
    /// that a cache over the list sees an object replaced under the same key. One HEAD request
    /// an object, 32 in flight; an object the store cannot describe is stamped `u64::MAX` (its
    /// read fails later, naming it). `None` where [`Backing::stamp`] knows them all.
    pub(crate) fn fetch_stamps(&self, index: &FileIndex) -> Option<Vec<(u64, u128)>> {
        #[cfg(feature = "remote")]
        if let Backing::Objects(o) = self {
            let missing: Vec<usize> = (0..o.stamps.len())
                .filter(|&i| o.stamps[i] == (0, 0))
                .collect();
            if missing.is_empty() {
                return None;
            }
            let keys = missing.iter().map(|&i| o.key(index, i)).collect();
            let mut stamps: Vec<(u64, u128)> =
                o.stamps.iter().map(|&(s, m)| (s, m as u128)).collect();
            for (&i, got) in missing.iter().zip(o.store.head_many(keys)) {
                stamps[i] = got.map_or((u64::MAX, 0), |(s, m)| (s, m as u128));
            }
            return Some(stamps);
        }
        let _ = index;
        None
    }

    /// The encoded bytes of sample `i` (random access; the pipeline streams instead). Used to
    /// write shards, and to decode a sample again when a cache record fails. Refuses more
    /// than `limit` bytes.
    pub(crate) fn read_sample(
        &self,
        index: &FileIndex,
        i: usize,
        limit: u64,
    ) -> Result<Vec<u8>, Error> {
        match self {
            Backing::Files => {
                use std::io::Read;
                let path = index.path(i);
                regular_file(&path)?;
                let mut out = Vec::new();
                std::fs::File::open(&path)
                    .map_err(|e| Error::io(&path, e))?
                    .take(limit + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| Error::io(&path, e))?;
                if out.len() as u64 > limit {
                    return Err(Error::decode(
                        &path,
                        crate::error::DecodeFailure(format!("over the {limit}-byte limit")),
                    ));
                }
                Ok(out)
            }
            #[cfg(feature = "remote")]
            Backing::Objects(o) => o.store.get(&o.key(index, i), limit),
            Backing::Tar(t) => t.read_member(i, index.label(i), &index.path(i), limit),
            Backing::TfRecord(t) => t.read_one(i, index.label(i), &index.path(i), limit),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.read_one(i, &index.path(i), limit),
        }
    }

    /// The mean encoded size of a sample where the index knows every sample's size (tar
    /// shards); `None` for local files and objects.
    pub(crate) fn mean_sample_bytes(&self) -> Option<u64> {
        match self {
            Backing::Tar(t) => t.mean_len(),
            Backing::TfRecord(t) => t.mean_len(),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.mean_len(),
            _ => None,
        }
    }

    /// Heap bytes beyond the paths and labels (counted in the loader's memory budget).
    pub(crate) fn heap_bytes(&self) -> u64 {
        match self {
            Backing::Files => 0,
            #[cfg(feature = "remote")]
            Backing::Objects(o) => (o.stamps.capacity() * 16) as u64,
            Backing::Tar(t) => t.heap_bytes(),
            Backing::TfRecord(t) => t.heap_bytes(),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.heap_bytes(),
        }
    }

    /// The fetch stage's byte bound for this kind of source; `None` for local files (no fetch
    /// stage: each decode thread reads its file).
    pub(crate) fn byte_bound(&self) -> Option<u64> {
        match self {
            Backing::Files => None,
            Backing::Tar(t) => Some(t.byte_bound()),
            Backing::TfRecord(t) => Some(t.byte_bound()),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => Some(p.byte_bound()),
            #[cfg(feature = "remote")]
            Backing::Objects(o) => Some(o.store.options.max_bytes_in_flight),
        }
    }

    /// Whether each sample is a local file of its own, which the decode threads read
    /// themselves (and the readahead stage hints to the kernel).
    pub(crate) fn is_local_files(&self) -> bool {
        matches!(self, Backing::Files)
    }

    /// For a source read as streams (tar shards, TFRecord shards, parquet row groups): each stream's samples, as a range of
    /// consecutive dataset indices, in the source's order. `None` for random access.
    pub(crate) fn streams(&self) -> Option<Vec<std::ops::Range<u32>>> {
        match self {
            Backing::Tar(tar) => Some(
                tar.shards
                    .iter()
                    .map(|s| s.first..s.first + s.count)
                    .collect(),
            ),
            Backing::TfRecord(t) => Some(t.streams()),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => Some(p.streams()),
            Backing::Files => None,
            #[cfg(feature = "remote")]
            Backing::Objects(_) => None,
        }
    }

    /// Reads the bytes of the samples `f` claims and sends them on, until the plan is done,
    /// the epoch is cancelled or the decode threads are gone.
    pub(crate) fn fetch(&self, f: &Fetch<'_>) {
        match self {
            Backing::Files => {}
            Backing::Tar(tar) => tar.fetch(f),
            Backing::TfRecord(t) => t.fetch(f),
            #[cfg(feature = "parquet")]
            Backing::Parquet(p) => p.fetch(f),
            #[cfg(feature = "remote")]
            Backing::Objects(objects) => objects.fetch(f),
        }
    }
}
