//! Objects in a store, one a sample (`s3://bucket/prefix` of images, or a list there): an
//! [`ObjectIndex`] and its reader, one ranged request a sample awaited beside the others.

use std::sync::Arc;

use crate::source::format::read::{Reader, Sample, Step};
use crate::source::storage::remote::{join_key, Store};

/// Objects of a store, one a sample.
#[derive(Debug)]
pub(crate) struct ObjectIndex {
    pub(crate) store: Arc<Store>,
    /// The key prefix the index's paths are relative to (`""` for the bucket root).
    pub(crate) prefix: String,
    /// Size and modification time of each sample's object, from the listing (for the cache
    /// fingerprint). `(0, 0)` for objects named by a list file (not listed): the fingerprint
    /// then asks the store (one HEAD request each, only for a loader with a cache).
    pub(crate) stamps: Vec<(u64, i64)>,
}

impl ObjectIndex {
    pub(crate) fn key(&self, index: &crate::source::index::FileIndex, i: usize) -> String {
        let rel = String::from_utf8_lossy(&index.raw_path_of(i)).into_owned();
        join_key(&self.prefix, &rel)
    }
}

/// The reader of a source of objects: one request a sample, awaited beside the others.
pub(crate) struct ObjectReader {
    objects: Arc<ObjectIndex>,
    index: crate::source::index::FileIndex,
}

impl ObjectIndex {
    /// A reader over `index`'s objects.
    pub(crate) fn reader(
        self: &Arc<Self>,
        index: &crate::source::index::FileIndex,
    ) -> ObjectReader {
        ObjectReader {
            objects: self.clone(),
            index: index.clone(),
        }
    }
}

/// Reserved for an object of unknown size (named by a list file, not listed).
const UNKNOWN_SIZE: u64 = 256 << 10;

impl Reader for ObjectReader {
    fn reserve(&mut self, i: u32) -> u64 {
        match self.objects.stamps[i as usize].0 {
            0 => UNKNOWN_SIZE,
            n => n,
        }
    }

    fn read(&mut self, i: u32, name: &mut std::path::PathBuf, limit: u64) -> Step {
        let key = self.objects.key(&self.index, i as usize);
        let store = self.objects.store.clone();
        *name = std::path::PathBuf::from(store.url_of(&key));
        let label = self.index.label(i as usize);
        Step::Pending(Box::pin(async move {
            let bytes = store.get_async(&key, limit).await?;
            Ok(Sample {
                bytes,
                label,
                fields: Default::default(),
            })
        }))
    }

    fn store(&self) -> Option<(Arc<Store>, usize)> {
        Some((
            self.objects.store.clone(),
            self.objects.store.limits.max_requests,
        ))
    }
}
