//! What a format gives the fetch loop: a [`Reader`] that reserves and reads one sample at a
//! time, and the [`Sample`] (or the pending request, [`Step`]) it makes of it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Error;
use crate::fields::FieldSpecs;
use crate::source::format::units::Units;
use crate::source::index::FileIndex;
use crate::source::kind::SourceKind;

/// What a format opened: the index of its samples' names and the format's own set (a tar
/// shard set, TFRecord files, parquet files), which `Backing` wraps.
#[derive(Debug)]
pub(crate) struct Opened<S> {
    pub(crate) index: FileIndex,
    pub(crate) set: S,
}

/// One sample read by a [`Reader`]: its encoded bytes, its label and its name in messages.
#[derive(Debug)]
pub(crate) struct Sample {
    pub(crate) bytes: Vec<u8>,
    pub(crate) label: u32,
    /// The loader's fields, in its order (empty when it asks for none).
    pub(crate) fields: crate::fields::SampleFields,
}

/// What a [`Reader`] made of one sample: read now, or a request to await beside others.
pub(crate) enum Step {
    Done(Result<Sample, Error>),
    #[cfg(feature = "remote")]
    Pending(futures_util::future::BoxFuture<'static, Result<Sample, Error>>),
}

/// A sample's other members: each one's extension and bytes.
pub(crate) type Members = Vec<(Box<str>, Vec<u8>)>;

/// A format's reader for one epoch's fetch loop, or for one random read.
pub(crate) trait Reader: Send {
    /// Bytes to reserve in the fetch budget before reading sample `i`: its size where the
    /// format knows it, else a typical size (the budget is corrected once it is read).
    fn reserve(&mut self, i: u32) -> u64;

    /// Reads sample `i` into a [`Sample`] (its name written into `name`, for messages),
    /// refusing one of more than `limit` bytes.
    fn read(&mut self, i: u32, name: &mut PathBuf, limit: u64) -> Step;

    /// Sample `i`'s members besides its image and label (a tar shard's `KEY.txt`, `KEY.json`,
    /// …): extension and bytes, for re-sharding. None for other formats.
    fn other_members(&mut self, i: u32) -> Result<Members, Error> {
        let _ = i;
        Ok(Vec::new())
    }

    /// The store whose runtime drives pending reads, and the most requests in flight.
    #[cfg(feature = "remote")]
    fn store(&self) -> Option<(Arc<crate::source::storage::remote::Store>, usize)> {
        None
    }
}

/// Samples mixed at once in a source read as streams when the user sets no block
/// ([`LoaderBuilder::shuffle_buffer`](crate::LoaderBuilder::shuffle_buffer)): about four tar
/// shards of 1,000 samples, or 40 row groups of `datasets`' 100. Costs no sample memory (the
/// order is computed); the shards of one block are read at random within them.
pub(crate) const DEFAULT_BLOCK: usize = 4096;

/// A format read as streams of units (tar shards, TFRecord files, parquet row groups): all
/// that the rest of the loader asks of it. A new streamed format is a folder that implements
/// this, and the arm in `open/` that recognises its files.
pub(crate) trait Streamed: std::fmt::Debug + Send + Sync {
    /// How the samples are stored.
    fn kind(&self) -> SourceKind;

    /// Its units, in the source's order.
    fn units(&self) -> &Units;

    /// The same set over units `keep` only (in increasing order): a split by whole units.
    fn with_units(&self, keep: &[usize]) -> Arc<dyn Streamed>;

    /// A reader whose tables cover a shuffle block of `block` samples.
    fn reader(self: Arc<Self>, block: usize, fields: &FieldSpecs) -> Box<dyn Reader>;

    /// What a reader holds at most besides the fetched bytes (the tables of one block's units,
    /// the format's own buffers).
    fn reader_bytes(&self, block: usize) -> u64;

    /// The fetch stage's byte bound.
    fn byte_bound(&self) -> u64;

    /// The shuffle block when the user sets none, where the format needs its own (parquet's
    /// row groups that fit its reader); `None` for [`DEFAULT_BLOCK`].
    fn default_block(&self) -> Option<usize> {
        None
    }

    /// Whether the format can deliver `fields` (checked by `build()`).
    fn check_fields(&self, fields: &FieldSpecs) -> Result<(), Error> {
        let _ = fields;
        Ok(())
    }
}
