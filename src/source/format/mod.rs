//! Formats: how a source's samples are laid out, one module each — file lists (`list/`),
//! class folders (`dir.rs`), tar shards (`tar/`), TFRecord files (`tfrecord/`), parquet files
//! (`parquet/`), objects in a store (`objects.rs`) — and [`Backing`], which holds one.
//!
//! A format that is not one local file a sample gives the pipeline's fetch loop
//! (`pipeline/fetch.rs`) a [`Reader`] (`read.rs`): how many bytes to reserve for a sample, and
//! the sample's bytes and label. The loop owns the claiming, the byte budget and the channel to
//! the decoders; a reader owns only what stays open between samples (files, the sample tables
//! of the units being read). A format read as streams of units implements [`Streamed`] and is
//! held as `Backing::Streams`: adding one is a folder here and its `Kind` in
//! `open/classify.rs`, which tells its files and opens them.

pub(crate) mod dir;
pub(crate) mod list;
pub(crate) mod manifest;
#[cfg(feature = "remote")]
pub(crate) mod objects;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
pub(crate) mod read;
pub(crate) mod tar;
pub(crate) mod tfrecord;
pub(crate) mod units;

use std::path::PathBuf;
use std::sync::Arc;

use read::{Reader, Sample, Step, Streamed, DEFAULT_BLOCK};
use units::Units;

use crate::error::Error;
use crate::fields::FieldSpecs;
use crate::source::index::FileIndex;
use crate::source::kind::SourceKind;
use crate::source::storage::regular_file;
#[cfg(feature = "remote")]
use objects::ObjectIndex;

/// Where the bytes of a source's samples are, and how they are laid out.
#[derive(Debug, Clone)]
pub(crate) enum Backing {
    /// Local files: the index paths. The decode threads read them.
    Files,
    /// Objects: index paths are keys relative to `prefix` in `store`.
    #[cfg(feature = "remote")]
    Objects(Arc<ObjectIndex>),
    /// Samples in units read as streams: tar shards, TFRecord files, parquet row groups.
    Streams(Arc<dyn Streamed>),
    /// Several sources in set proportions.
    Mix(Arc<crate::source::mix::MixSet>),
}

impl<S: Streamed + 'static> From<S> for Backing {
    fn from(set: S) -> Backing {
        Backing::Streams(Arc::new(set))
    }
}

impl Backing {
    /// How the samples are stored.
    pub(crate) fn kind(&self) -> SourceKind {
        match self {
            Backing::Files => SourceKind::Files,
            #[cfg(feature = "remote")]
            Backing::Objects(_) => SourceKind::Objects,
            Backing::Streams(s) => s.kind(),
            Backing::Mix(m) => m.kind(),
        }
    }

    /// The units of a source read as streams; `None` for one read at random.
    pub(crate) fn units(&self) -> Option<&Units> {
        match self {
            Backing::Streams(s) => Some(s.units()),
            _ => None,
        }
    }

    /// The same kind of source over units `keep` only (in increasing order): a split by
    /// whole shards or row groups. `None` for sources without units.
    pub(crate) fn with_units(&self, keep: &[usize]) -> Option<Backing> {
        match self {
            Backing::Streams(s) => Some(Backing::Streams(s.with_units(keep))),
            _ => None,
        }
    }

    /// A reader for the fetch loop or for random reads; `None` for local files, which the
    /// decode threads read themselves.
    pub(crate) fn reader(
        &self,
        index: &FileIndex,
        block: usize,
        fields: &FieldSpecs,
    ) -> Option<Box<dyn Reader>> {
        #[cfg(not(feature = "remote"))]
        let _ = index;
        let reader: Box<dyn Reader> = match self {
            Backing::Files => return None,
            #[cfg(feature = "remote")]
            Backing::Objects(o) => Box::new(o.reader(index)),
            Backing::Streams(s) => s.clone().reader(block, fields),
            Backing::Mix(m) => Box::new(m.reader(fields)),
        };
        Some(reader)
    }

    /// Size and modification time of sample `i`'s bytes (at `path`), for the stamped
    /// fingerprint of a source read at random (sources read as streams stamp their units).
    pub(crate) fn stamp(&self, i: usize, path: &std::path::Path) -> (u64, u128) {
        let _ = i;
        match self {
            #[cfg(feature = "remote")]
            Backing::Objects(o) => {
                let (size, mtime) = o.stamps[i];
                (size, mtime as u128)
            }
            _ => match std::fs::metadata(path) {
                Ok(m) => {
                    let t = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos());
                    (m.len(), t)
                }
                Err(_) => (u64::MAX, 0),
            },
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

    /// Sample `i` read by itself (random access; an epoch's fetch loop reads in order
    /// instead): its bytes and label. Used to write shards, to decode a sample again when a
    /// cache record fails, and by `Source::label`. Refuses more than `limit` bytes.
    /// Its name in messages is written into `name`.
    pub(crate) fn read_sample(
        &self,
        index: &FileIndex,
        i: usize,
        limit: u64,
        name: &mut PathBuf,
        fields: &FieldSpecs,
    ) -> Result<Sample, Error> {
        match self.reader(index, 1, fields) {
            None => {
                use std::io::Read;
                let mut path = PathBuf::new();
                let (label, fields) = index.entry_fields_into(i, &mut path, fields)?;
                name.clone_from(&path);
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
                Ok(Sample {
                    bytes: out,
                    label,
                    fields,
                })
            }
            Some(mut reader) => match reader.read(i as u32, name, limit) {
                Step::Done(r) => r,
                #[cfg(feature = "remote")]
                Step::Pending(f) => match reader.store() {
                    Some((store, _)) => store.block_on(f),
                    None => Err(Error::io(
                        &*name,
                        std::io::Error::other("no store to read from"),
                    )),
                },
            },
        }
    }

    /// The mean encoded size of a sample where opening learned it; `None` for local files and
    /// objects.
    pub(crate) fn mean_sample_bytes(&self) -> Option<u64> {
        self.units().and_then(|u| u.mean_sample_bytes)
    }

    /// Heap bytes beyond the paths and labels (counted in the loader's memory budget).
    pub(crate) fn heap_bytes(&self) -> u64 {
        match self {
            Backing::Files => 0,
            #[cfg(feature = "remote")]
            Backing::Objects(o) => (o.stamps.capacity() * 16) as u64,
            Backing::Mix(m) => m.parts.iter().map(|p| p.source.heap_bytes()).sum(),
            _ => self.units().map_or(0, Units::heap_bytes),
        }
    }

    /// What a reader holds at most besides the fetched bytes: the sample tables of the units
    /// of one shuffle block of `block` samples, and the format's own buffers.
    pub(crate) fn reader_bytes(&self, block: usize) -> u64 {
        match self {
            Backing::Streams(s) => s.reader_bytes(block),
            Backing::Mix(m) => m.reader_bytes(),
            _ => 0,
        }
    }

    /// The shuffle block of this source when the user sets none: what a reader's tables hold
    /// well ([`DEFAULT_BLOCK`], or a parquet source's row groups that fit).
    pub(crate) fn default_block(&self) -> usize {
        match self {
            Backing::Streams(s) => s.default_block().unwrap_or(DEFAULT_BLOCK),
            _ => DEFAULT_BLOCK,
        }
    }

    /// The fetch stage's byte bound for this kind of source; `None` for local files (no fetch
    /// stage: each decode thread reads its file).
    pub(crate) fn byte_bound(&self) -> Option<u64> {
        match self {
            Backing::Files => None,
            Backing::Streams(s) => Some(s.byte_bound()),
            #[cfg(feature = "remote")]
            Backing::Objects(o) => Some(o.store.limits.max_bytes_in_flight),
            Backing::Mix(m) => Some(m.byte_bound()),
        }
    }

    /// Whether each sample is a local file of its own, which the decode threads read
    /// themselves (and the readahead stage hints to the kernel).
    pub(crate) fn is_local_files(&self) -> bool {
        matches!(self, Backing::Files)
    }

    /// For a source read as streams: each unit's samples, as a range of consecutive dataset
    /// indices, in the source's order. `None` for random access.
    pub(crate) fn streams(&self) -> Option<Vec<std::ops::Range<u32>>> {
        self.units().map(Units::streams)
    }
}
