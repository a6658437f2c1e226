//! The batch stage: the [`Batch`] the consumer receives (and [`OwnedBatch`], taken by value),
//! the batcher that fills it (`batcher.rs`), and normalize (`normalize.rs`: [`Dtype`],
//! [`Layout`], the per-channel arithmetic and the batch buffer).

mod batcher;
pub(crate) mod format;
pub(crate) mod normalize;

pub(crate) use batcher::Batcher;
pub(crate) use format::{BatchFormat, OutputSettings};
pub(crate) use normalize::{BatchStorage, Normalizer};
pub use normalize::{Dtype, Layout};

use crossbeam_channel::Sender;
use half::{bf16, f16};

use crate::error::Error;
use crate::prefetch::BatchParts;
#[cfg(feature = "cuda")]
use crate::prefetch::Staged;

/// A batch's images taken by value ([`Batch::into_owned`]), in their dtype.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OwnedImages {
    /// `f32` values.
    F32(Vec<f32>),
    /// IEEE half-precision values.
    F16(Vec<f16>),
    /// bfloat16 values.
    Bf16(Vec<bf16>),
    /// Raw `u8` pixels.
    U8(Vec<u8>),
}

/// A batch's buffers taken by value ([`Batch::into_owned`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OwnedBatch {
    /// The images, `shape` in the batch's layout.
    pub images: OwnedImages,
    /// The label of each image.
    pub labels: Vec<u32>,
    /// The dataset index of each image.
    pub indices: Vec<u64>,
    /// Whether each image is a padding copy ([`Batch::padded`]).
    pub padded: Vec<bool>,
    /// Each image's source in a mixture ([`Batch::sources`]).
    pub sources: Vec<u32>,
    /// Each field's values ([`Batch::field`]), in the order the loader was asked for them.
    pub fields: Vec<crate::fields::OwnedField>,
    /// `[n, height, width, 3]` (NHWC) or `[n, 3, height, width]` (NCHW).
    pub shape: [usize; 4],
    /// The epoch.
    pub epoch: u64,
    /// The position a [`LoaderState`](crate::LoaderState) resumes from after this batch.
    pub position: u64,
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

    /// The buffers, for the stage that normalizes a `u8` batch into the consumer's dtype.
    pub(crate) fn parts_mut(&mut self) -> &mut BatchParts {
        self.parts.as_mut().expect("parts are present until drop")
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

    /// The dataset index (position in the source) of each image. A padding copy has the
    /// index of the image it copies ([`Batch::padded`] tells them apart).
    pub fn indices(&self) -> &[u64] {
        &self.parts().indices
    }

    /// Whether each image is a padding copy rather than a sample of this rank's own share: a
    /// copy standing in for a sample skipped under sharding ([`OnError::Skip`]), or a repeat
    /// that gives every rank the same number of batches ([`ShardPadding`]). Unsharded loaders
    /// deliver no padding. Counting the indices whose flag is `false` over every rank checks
    /// that each sample came exactly once (see docs/CONTRACT.md).
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, Source};
    /// let loader = Loader::builder(Source::from_dir("testdata/classes")?)
    ///     .batch_size(4)
    ///     .shard(0, 4)
    ///     .build()?;
    /// for batch in loader.epoch(0) {
    ///     let batch = batch?;
    ///     for (&index, &copy) in batch.indices().iter().zip(batch.padded()) {
    ///         if !copy {
    ///             println!("sample {index}");
    ///         }
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// [`OnError::Skip`]: crate::OnError::Skip
    /// [`ShardPadding`]: crate::ShardPadding
    pub fn padded(&self) -> &[bool] {
        &self.parts().padded
    }

    /// Each sample's source: in a mixture ([`Mix`](crate::Mix)), its number (from 0, in the
    /// order the sources were given), its index in that source being in
    /// [`indices`](Self::indices); 0 for a loader of one source.
    pub fn sources(&self) -> &[u32] {
        &self.parts().sources
    }

    /// The skipped samples this batch's positions covered (counted once it is delivered).
    pub(crate) fn take_skipped(&mut self) -> Vec<(std::path::PathBuf, String)> {
        self.parts
            .as_mut()
            .map(|p| std::mem::take(&mut p.skipped))
            .unwrap_or_default()
    }

    fn elems(&self) -> usize {
        self.len() * self.format.height * self.format.width * 3
    }

    /// The images in their dtype. Empty for a batch that a GPU loader delivered to device
    /// memory only (the default with [`Device::Cuda`](crate::Device::Cuda)): see `Batch::cuda`.
    pub fn images(&self) -> Images<'_> {
        let n = self.elems();
        match &self.parts().storage {
            BatchStorage::F32(v) => Images::F32(v.get(..n).unwrap_or_default()),
            BatchStorage::F16(v) => Images::F16(v.get(..n).unwrap_or_default()),
            BatchStorage::Bf16(v) => Images::Bf16(v.get(..n).unwrap_or_default()),
            BatchStorage::U8(v) => Images::U8(v.get(..n).unwrap_or_default()),
        }
    }

    /// Whether the images are in host memory (always, except for device-only GPU batches).
    pub fn is_on_host(&self) -> bool {
        self.parts().storage.as_bytes().len() >= self.elems() * self.format.dtype.size()
    }

    fn host_images(&self, want: &str) -> Result<Images<'_>, Error> {
        if self.is_on_host() {
            Ok(self.images())
        } else {
            Err(Error::config(
                "device",
                format!(
                    "the batch is in GPU memory only, not on the host: read it with Batch::cuda() \
                     (as_{want} reads host batches)"
                ),
            ))
        }
    }

    fn wrong_dtype(&self, want: &str) -> Error {
        let have = self.format.dtype.name();
        Error::config(
            "dtype",
            format!("the batch holds {have} images, not {want}: read it with as_{have}()"),
        )
    }

    /// The images as `f32`: an error naming the batch's dtype if it is another, or if the
    /// batch is in GPU memory only.
    pub fn as_f32(&self) -> Result<&[f32], Error> {
        match self.host_images("f32")? {
            Images::F32(v) => Ok(v),
            _ => Err(self.wrong_dtype("f32")),
        }
    }

    /// The images as `f16` (see [`Batch::as_f32`]).
    pub fn as_f16(&self) -> Result<&[f16], Error> {
        match self.host_images("f16")? {
            Images::F16(v) => Ok(v),
            _ => Err(self.wrong_dtype("f16")),
        }
    }

    /// The images as `bf16` (see [`Batch::as_f32`]).
    pub fn as_bf16(&self) -> Result<&[bf16], Error> {
        match self.host_images("bf16")? {
            Images::Bf16(v) => Ok(v),
            _ => Err(self.wrong_dtype("bf16")),
        }
    }

    /// The images as `u8` (see [`Batch::as_f32`]).
    pub fn as_u8(&self) -> Result<&[u8], Error> {
        match self.host_images("u8")? {
            Images::U8(v) => Ok(v),
            _ => Err(self.wrong_dtype("u8")),
        }
    }

    /// Takes the batch's buffers by value, without a copy: the images (exactly `len()` images,
    /// in the batch's dtype and layout), labels and indices. The loader allocates a new buffer
    /// in place of this one (a batch dropped instead goes back to its pool), so a training
    /// step may keep the images, for example as a tensor's storage
    /// (`Tensor::from_vec`), for as long as it likes; the memory it keeps is then its own, not
    /// in the loader's budget. An error if the batch is in GPU memory only.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, OwnedImages, Source};
    /// let loader = Loader::builder(Source::from_dir("testdata/classes")?).batch_size(4).build()?;
    /// for batch in loader.epoch(0) {
    ///     let owned = batch?.into_owned()?;
    ///     let OwnedImages::F32(pixels) = owned.images else { unreachable!("f32 is the default") };
    ///     assert_eq!(pixels.len(), owned.shape.iter().product::<usize>());
    ///     assert_eq!(owned.labels.len(), owned.shape[0]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_owned(mut self) -> Result<OwnedBatch, Error> {
        self.host_images(self.format.dtype.name())?;
        let shape = self.shape();
        let n = self.elems();
        let (epoch, position) = (self.epoch, self.position);
        // Taken, not returned to the pool: Drop finds nothing to give back.
        let Some(mut parts) = self.parts.take() else {
            return Err(Error::config(
                "batch",
                "the batch's buffers were already taken",
            ));
        };
        drop(parts.staged.take());
        let fields = parts
            .field_names
            .iter()
            .zip(&parts.fields)
            .map(|(name, store)| {
                let column = crate::fields::FieldColumn::new(name, store);
                crate::fields::OwnedField {
                    name: name.clone(),
                    values: (0..column.len())
                        .map(|i| column.get(i).map(Into::into))
                        .collect(),
                }
            })
            .collect();
        let images = match parts.storage {
            BatchStorage::F32(mut v) => {
                v.truncate(n);
                OwnedImages::F32(v)
            }
            BatchStorage::F16(mut v) => {
                v.truncate(n);
                OwnedImages::F16(v)
            }
            BatchStorage::Bf16(mut v) => {
                v.truncate(n);
                OwnedImages::Bf16(v)
            }
            BatchStorage::U8(mut v) => {
                v.truncate(n);
                OwnedImages::U8(v)
            }
        };
        Ok(OwnedBatch {
            images,
            labels: parts.labels,
            indices: parts.indices,
            padded: parts.padded,
            sources: parts.sources,
            fields,
            shape,
            epoch,
            position,
        })
    }

    /// The values of field `name` ([`LoaderBuilder::field`](crate::LoaderBuilder::field)),
    /// one a sample in the batch's order; `None` for a field the loader was not asked for.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, Source};
    /// let loader = Loader::builder(Source::open("shards/")?).field("txt").build()?;
    /// for batch in loader.epoch(0) {
    ///     let batch = batch?;
    ///     let captions = batch.field("txt").expect("the loader asks for it");
    ///     for (i, index) in batch.indices().iter().enumerate() {
    ///         println!("{index}: {}", captions.text(i).unwrap_or("<not text>"));
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn field(&self, name: &str) -> Option<crate::fields::FieldColumn<'_>> {
        let parts = self.parts();
        let k = parts.field_names.iter().position(|n| n == name)?;
        Some(crate::fields::FieldColumn::new(
            &parts.field_names[k],
            parts.fields.get(k)?,
        ))
    }

    /// Every field's values, in the order the loader was asked for them.
    pub fn fields(&self) -> impl Iterator<Item = crate::fields::FieldColumn<'_>> {
        let parts = self.parts();
        parts
            .field_names
            .iter()
            .zip(&parts.fields)
            .map(|(name, store)| crate::fields::FieldColumn::new(name, store))
    }

    /// The images' bytes in native byte order, whatever the dtype (empty for a device-only
    /// GPU batch).
    pub fn as_bytes(&self) -> &[u8] {
        let n = self.elems() * self.format.dtype.size();
        self.parts().storage.as_bytes().get(..n).unwrap_or_default()
    }
}

#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
impl Batch {
    /// The batch in GPU memory, for a loader built with [`Device::Cuda`](crate::Device::Cuda)
    /// (`None` for a host batch, also after a fallback to the host). The device memory is the
    /// batch's until it is dropped; see [`CudaBatch`](crate::CudaBatch) for synchronization
    /// and for wrapping it in a framework's tensor.
    pub fn cuda(&self) -> Option<crate::CudaBatch<'_>> {
        match self.parts().staged.as_ref()? {
            Staged::Cuda(slot) => Some(crate::CudaBatch::new(slot, &self.format)),
            _ => None,
        }
    }

    /// Takes a GPU batch's device buffer by value, without a copy, as a cudarc buffer on
    /// `stream` (for example a framework's, to wrap as a tensor's storage): `stream` first
    /// waits, on the GPU, for the batch's copy and normalization, and frees the buffer when it
    /// is dropped. The loader's slot gets a new buffer of the same size (stream-ordered, from
    /// the driver's memory pool), so the ring never waits for buffers you keep: each one you
    /// hold is device memory of your own, outside `gpu_memory_limit`. Labels and indices are
    /// copied to new vectors; the batch's host buffers go back to the pool.
    ///
    /// # Errors
    /// A host batch ([`Batch::into_owned`] takes those), a stream of another device, or the
    /// driver's error allocating the replacement buffer.
    ///
    /// ```
    /// # #[cfg(feature = "cuda")]
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Device, Loader, OwnedCudaImages, Source};
    /// let loader = match Loader::builder(Source::from_dir("testdata/classes")?)
    ///     .batch_size(4)
    ///     .device(Device::Cuda(0))
    ///     .build()
    /// {
    ///     Ok(loader) => loader,
    ///     Err(e) => { eprintln!("no GPU here: {e}"); return Ok(()); }
    /// };
    /// let stream = imagefeed::cudarc::driver::CudaContext::new(0).unwrap().new_stream().unwrap();
    /// for batch in loader.epoch(0) {
    ///     let owned = batch?.into_cuda(&stream)?;
    ///     let OwnedCudaImages::F32(images) = owned.images else { unreachable!("f32 is the default") };
    ///     assert_eq!(images.len(), owned.shape.iter().product::<usize>());
    ///     // `images` is a CudaSlice<f32> on `stream`, ordered after the loader's writes.
    /// }
    /// # Ok(()) }
    /// # #[cfg(not(feature = "cuda"))] fn main() {}
    /// ```
    pub fn into_cuda(
        mut self,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<crate::OwnedCudaBatch, Error> {
        let (epoch, position) = (self.epoch, self.position);
        let Some(parts) = self.parts.as_mut() else {
            return Err(Error::config(
                "batch",
                "the batch's buffers were already taken",
            ));
        };
        let Some(Staged::Cuda(slot)) = parts.staged.as_mut() else {
            return Err(Error::config(
                "device",
                "the batch is in host memory: take it with Batch::into_owned (Batch::cuda and \
                 into_cuda are for batches of a Device::Cuda loader)",
            ));
        };
        let (images, shape) = crate::prefetch::cuda::take_images(slot, &self.format, stream)?;
        Ok(crate::OwnedCudaBatch {
            images,
            labels: parts.labels.clone(),
            indices: parts.indices.clone(),
            padded: parts.padded.clone(),
            shape,
            epoch,
            position,
        })
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let (Some(mut parts), Some(pool)) = (self.parts.take(), self.pool.take()) {
            // The device slot goes back to its ring (fence 2); only host buffers are pooled.
            drop(parts.staged.take());
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
        fn batcher_keeps_every_item(n in 0usize..300, bs in 1usize..40, through: bool) {
            let pool = std::sync::Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
            let mut b = Batcher::new(
                format(bs),
                Normalizer::new([0.0; 3], [1.0; 3], Layout::Nhwc),
                (n % 2 == 0).then_some(pool),
                through,
            );
            let mut batches = Vec::new();
            let mut recycled = 0;
            for i in 0..n {
                let px = vec![(i % 256) as u8; 3];
                if let Some(p) = b.add(px, (i as u32, (0, i as u64), false), &Default::default(), || BatchParts::new(Dtype::U8, bs, 3), |_| recycled += 1) {
                    batches.push(p);
                }
            }
            let full = batches.len();
            prop_assert_eq!(full, n / bs);
            // Writing through hands every sample back as it comes.
            prop_assert_eq!(recycled, if through { n } else { full * bs });
            if let Some(p) = b.finish(|| BatchParts::new(Dtype::U8, bs, 3), |_| ()) {
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
