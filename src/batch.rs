//! The batcher: writes `u8` samples, normalized once, into recycled batch buffers, and the
//! [`Batch`] the consumer receives.

use crossbeam_channel::Sender;
use half::{bf16, f16};

use crate::transform::{BatchStorage, Dtype, Layout, Normalizer};

/// The reusable buffers of one batch.
#[derive(Debug)]
pub(crate) struct BatchParts {
    pub(crate) storage: BatchStorage,
    pub(crate) labels: Vec<u32>,
    pub(crate) indices: Vec<u64>,
}

impl BatchParts {
    pub(crate) fn new(dtype: Dtype, batch_size: usize, sample_len: usize) -> Self {
        BatchParts {
            storage: BatchStorage::new(dtype, batch_size * sample_len),
            labels: Vec::with_capacity(batch_size),
            indices: Vec::with_capacity(batch_size),
        }
    }
}

/// The shape and type of the batches of a loader.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFormat {
    pub(crate) batch_size: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) dtype: Dtype,
    pub(crate) layout: Layout,
}

/// Pure core of the batching stage: fills one batch at a time.
pub(crate) struct Batcher {
    format: BatchFormat,
    normalizer: Normalizer,
    current: Option<BatchParts>,
}

impl Batcher {
    pub(crate) fn new(format: BatchFormat, normalizer: Normalizer) -> Self {
        Batcher {
            format,
            normalizer,
            current: None,
        }
    }

    /// Adds a sample, taking a buffer from `fresh` when a batch starts. Returns the batch when
    /// it is full.
    pub(crate) fn add(
        &mut self,
        pixels: &[u8],
        label: u32,
        index: u64,
        fresh: impl FnOnce() -> BatchParts,
    ) -> Option<BatchParts> {
        let parts = self.current.get_or_insert_with(|| {
            let mut p = fresh();
            p.labels.clear();
            p.indices.clear();
            p
        });
        let slot = parts.labels.len();
        self.normalizer.write(pixels, &mut parts.storage, slot);
        parts.labels.push(label);
        parts.indices.push(index);
        if parts.labels.len() == self.format.batch_size {
            self.current.take()
        } else {
            None
        }
    }

    /// The partial batch at the end of an epoch, if any.
    pub(crate) fn finish(&mut self) -> Option<BatchParts> {
        self.current.take().filter(|p| !p.labels.is_empty())
    }
}

/// The images of a batch, borrowed in their dtype.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Images<'a> {
    /// `f32` values.
    F32(&'a [f32]),
    /// IEEE half-precision values.
    F16(&'a [f16]),
    /// bfloat16 values.
    Bf16(&'a [bf16]),
    /// Raw `u8` pixels.
    U8(&'a [u8]),
}

/// One batch: the images as one contiguous buffer in the loader's dtype and layout, their
/// labels, and their dataset indices. Dropping it returns its buffer to the loader's pool.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Loader, Source};
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?).batch_size(4).build()?;
/// for batch in loader.epoch(0) {
///     let batch = batch?;
///     let [n, h, w, c] = batch.shape(); // NHWC by default
///     assert_eq!((h, w, c), (160, 160, 3));
///     let pixels: &[f32] = batch.as_f32().expect("f32 is the default dtype");
///     assert_eq!(pixels.len(), n * h * w * c);
///     assert_eq!(batch.labels().len(), n);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Batch {
    parts: Option<BatchParts>,
    format: BatchFormat,
    epoch: u64,
    position: u64,
    pool: Option<Sender<BatchParts>>,
}

impl Batch {
    pub(crate) fn new(
        parts: BatchParts,
        format: BatchFormat,
        epoch: u64,
        position: u64,
        pool: Sender<BatchParts>,
    ) -> Self {
        Batch {
            parts: Some(parts),
            format,
            epoch,
            position,
            pool: Some(pool),
        }
    }

    fn parts(&self) -> &BatchParts {
        self.parts.as_ref().expect("parts are present until drop")
    }

    /// The number of images (`batch_size`, or fewer in an epoch's last batch).
    pub fn len(&self) -> usize {
        self.parts().labels.len()
    }

    /// True for a batch without images (never delivered by a loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape: `[n, height, width, 3]` for NHWC, `[n, 3, height, width]` for NCHW.
    pub fn shape(&self) -> [usize; 4] {
        let f = &self.format;
        match f.layout {
            Layout::Nhwc => [self.len(), f.height, f.width, 3],
            Layout::Nchw => [self.len(), 3, f.height, f.width],
        }
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.format.dtype
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.format.layout
    }

    /// The epoch this batch belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many samples of this rank's epoch plan are consumed once this batch is delivered:
    /// the position a [`LoaderState`](crate::LoaderState) resumes from.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The label of each image.
    pub fn labels(&self) -> &[u32] {
        &self.parts().labels
    }

    /// The dataset index (position in the source) of each image.
    pub fn indices(&self) -> &[u64] {
        &self.parts().indices
    }

    fn elems(&self) -> usize {
        self.len() * self.format.height * self.format.width * 3
    }

    /// The images in their dtype.
    pub fn images(&self) -> Images<'_> {
        let n = self.elems();
        match &self.parts().storage {
            BatchStorage::F32(v) => Images::F32(&v[..n]),
            BatchStorage::F16(v) => Images::F16(&v[..n]),
            BatchStorage::Bf16(v) => Images::Bf16(&v[..n]),
            BatchStorage::U8(v) => Images::U8(&v[..n]),
        }
    }

    /// The images as `f32`, if that is the dtype.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self.images() {
            Images::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The images as `f16`, if that is the dtype.
    pub fn as_f16(&self) -> Option<&[f16]> {
        match self.images() {
            Images::F16(v) => Some(v),
            _ => None,
        }
    }

    /// The images as `bf16`, if that is the dtype.
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match self.images() {
            Images::Bf16(v) => Some(v),
            _ => None,
        }
    }

    /// The images as `u8`, if that is the dtype.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match self.images() {
            Images::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The images' bytes in native byte order, whatever the dtype.
    pub fn as_bytes(&self) -> &[u8] {
        &self.parts().storage.as_bytes()[..self.elems() * self.format.dtype.size()]
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let (Some(parts), Some(pool)) = (self.parts.take(), self.pool.take()) {
            // A full pool or a finished epoch just frees the buffer.
            let _ = pool.try_send(parts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn format(batch_size: usize) -> BatchFormat {
        BatchFormat {
            batch_size,
            height: 1,
            width: 1,
            dtype: Dtype::U8,
            layout: Layout::Nhwc,
        }
    }

    proptest! {
        #[test]
        fn batcher_keeps_every_item(n in 0usize..300, bs in 1usize..40) {
            let mut b = Batcher::new(format(bs), Normalizer::new([0.0; 3], [1.0; 3], Layout::Nhwc));
            let mut batches = Vec::new();
            for i in 0..n {
                let px = [(i % 256) as u8; 3];
                if let Some(p) = b.add(&px, i as u32, i as u64, || BatchParts::new(Dtype::U8, bs, 3)) {
                    batches.push(p);
                }
            }
            let full = batches.len();
            prop_assert_eq!(full, n / bs);
            if let Some(p) = b.finish() {
                prop_assert!(p.labels.len() < bs);
                batches.push(p);
            }
            let all: Vec<u64> = batches.iter().flat_map(|p| p.indices.clone()).collect();
            prop_assert_eq!(all, (0..n as u64).collect::<Vec<_>>());
            for p in &batches {
                for (k, &i) in p.indices.iter().enumerate() {
                    prop_assert_eq!(p.storage.as_bytes()[k * 3], (i % 256) as u8);
                    prop_assert_eq!(p.labels[k] as u64, i);
                }
            }
        }
    }
}
