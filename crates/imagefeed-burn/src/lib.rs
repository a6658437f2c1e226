//! # imagefeed-burn
//!
//! burn's [`DataLoader`] over an [`imagefeed::Loader`], so that burn's `Learner`
//! (`SupervisedTraining::new(dir, train, valid)`) takes an imagefeed loader directly. Each call
//! to [`DataLoader::iter`] runs the loader's next epoch and yields [`ImageBatch`]es: the images
//! as a `Tensor<B, 4>` (in the loader's layout: ask for [`Layout::Nchw`](imagefeed::Layout) for
//! burn's convolutions) and the labels as a `Tensor<B, 1, Int>`.
//!
//! ```text
//!  imagefeed::Loader ──epoch(n)──▶ Batch ──into_owned──▶ Vec<f32> ──TensorData──▶ Tensor<B, 4>
//!   (decode threads,                        (no copy)       (no copy)   (from_data: at most
//!    shuffle, batcher)                                                   one copy, none on
//!                                                                        ndarray for f32)
//! ```
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use burn::backend::NdArray;
//! use burn::data::dataloader::DataLoader;
//! use imagefeed::{Layout, Loader, Source};
//! use imagefeed_burn::ImagefeedDataLoader;
//!
//! let source = Source::from_dir("../../testdata/classes")?;
//! let train = ImagefeedDataLoader::<NdArray>::new(
//!     source,
//!     |source| Loader::builder(source).image_size(32).batch_size(4).layout(Layout::Nchw),
//!     &Default::default(),
//! )?;
//! for batch in train.iter() {
//!     let [n, c, h, w] = batch.images.dims();
//!     assert_eq!((c, h, w), (3, 32, 32));
//!     assert_eq!(batch.targets.dims(), [n]);
//! }
//! // The epoch ended early only if the loader failed; the error is kept for the caller.
//! if let Some(e) = train.take_error() {
//!     return Err(e.into());
//! }
//! # Ok(()) }
//! ```
//!
//! ## Errors
//!
//! burn's iterators yield items, not `Result`s. When the loader fails (a corrupt file with
//! [`OnError::Fail`](imagefeed::OnError), the default; too many skips; a worker panic) or a
//! batch cannot become a tensor, the epoch's iterator logs the error (`log::error!`), ends the
//! epoch there, and keeps the error: [`ImagefeedDataLoader::take_error`] returns it, and a hook
//! set with [`ImagefeedDataLoader::on_error`] sees it at once (for example to stop the
//! `Learner` through its `Interrupter`). Nothing panics. The next `iter()` runs the next epoch.
//!
//! ## Slicing
//!
//! [`DataLoader::slice`] builds a new loader over the samples `start..end` of the source with
//! the same settings: the factory given to [`ImagefeedDataLoader::new`] is called again with a
//! [`Source::from_entries`](imagefeed::Source::from_entries) of that range. This works for
//! sources of local files (file lists, class folders, entries); for tar shards or object
//! storage the slice yields no batches and holds an [`Error::Slice`].

#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::any::TypeId;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use burn_core::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn_core::tensor::backend::Backend;
use burn_core::tensor::{Element, Int, Tensor, TensorData};
use imagefeed::{Batch, Batches, Loader, LoaderBuilder, OwnedImages, Source, SourceKind};

/// One batch as burn tensors.
#[derive(Debug, Clone)]
pub struct ImageBatch<B: Backend> {
    /// The images, `[n, 3, height, width]` for [`Layout::Nchw`](imagefeed::Layout) or
    /// `[n, height, width, 3]` for NHWC (imagefeed's default), as the backend's float type.
    pub images: Tensor<B, 4>,
    /// The label of each image, `[n]`.
    pub targets: Tensor<B, 1, Int>,
}

impl<B: Backend> ImageBatch<B> {
    /// Takes the batch's buffers by value ([`Batch::into_owned`], no copy) and makes tensors
    /// of them on `device` with `Tensor::from_data`: at most one copy of the images (none on
    /// the ndarray backend for `f32`; a conversion for `u8`, `f16` or `bf16` batches when the
    /// backend's float type differs). The labels are converted to the backend's int type.
    ///
    /// # Errors
    /// As [`Batch::into_owned`]: a batch in GPU memory only (a loader with
    /// [`Device::Cuda`](imagefeed::Device) and no host copy) is an error.
    pub fn from_batch(batch: Batch, device: &B::Device) -> Result<Self, imagefeed::Error> {
        let owned = batch.into_owned()?;
        let shape = owned.shape;
        // A buffer already in the backend's float type is taken as it is; any other is
        // converted here in one pass into that type (burn's own conversion of a `u8`
        // TensorData took 1.6× a copy of the result on ndarray: benches/convert.rs).
        fn to_float<B: Backend, E: Element>(v: Vec<E>, shape: [usize; 4]) -> TensorData {
            if TypeId::of::<E>() == TypeId::of::<B::FloatElem>() {
                return TensorData::new(v, shape);
            }
            let converted: Vec<B::FloatElem> = v.iter().map(|x| x.elem()).collect();
            TensorData::new(converted, shape)
        }
        let data = match owned.images {
            OwnedImages::F32(v) => to_float::<B, _>(v, shape),
            OwnedImages::F16(v) => to_float::<B, _>(v, shape),
            OwnedImages::Bf16(v) => to_float::<B, _>(v, shape),
            OwnedImages::U8(v) => to_float::<B, _>(v, shape),
            // `OwnedImages` is non-exhaustive; a dtype added later needs a case here.
            other => {
                return Err(imagefeed::Error::tensor(format!(
                    "imagefeed-burn cannot convert a batch of {other:?}"
                )))
            }
        };
        let n = owned.labels.len();
        let targets = TensorData::new(owned.labels, [n]);
        Ok(ImageBatch {
            images: Tensor::from_data(data, device),
            targets: Tensor::from_data(targets, device),
        })
    }
}

/// A field of numbers as a burn tensor ([`field_tensor`]): `f32` targets (multi-hot labels,
/// float vectors) as the backend's float type, integer lists as its int type.
#[derive(Debug, Clone)]
pub enum FieldTensor<B: Backend> {
    /// `[n, width]` floats.
    Float(Tensor<B, 2>),
    /// `[n, width]` integers.
    Int(Tensor<B, 2, Int>),
}

/// Field `name` of `batch` as a burn tensor on `device`, made as `target` says
/// ([`imagefeed::FieldColumn::target`]): a multi-hot matrix of class labels, integer lists
/// padded, or float vectors. Call it before [`ImageBatch::from_batch`] takes the batch.
///
/// ```
/// use burn::backend::NdArray;
/// use imagefeed::{Loader, Source, Target};
/// use imagefeed_burn::{field_tensor, FieldTensor};
/// # fn main() -> Result<(), imagefeed::Error> {
/// # let loader = Loader::builder(Source::from_dir("../../testdata/classes")?).build()?;
/// # let batch = loader.epoch(0).next().unwrap()?;
/// // A batch without a field `labels`: an error naming it.
/// let e = field_tensor::<NdArray>(&batch, "labels", Target::MultiHot { classes: 3 }, &Default::default());
/// assert!(e.unwrap_err().to_string().contains("`labels`"));
/// # Ok(()) }
/// ```
///
/// # Errors
/// A field the loader was not asked for, and as [`imagefeed::FieldColumn::target`].
pub fn field_tensor<B: Backend>(
    batch: &Batch,
    name: &str,
    target: imagefeed::Target,
    device: &B::Device,
) -> Result<FieldTensor<B>, imagefeed::Error> {
    let column = batch.field(name).ok_or_else(|| {
        imagefeed::Error::tensor(format!(
            "`{name}` is not one of the loader's fields (LoaderBuilder::field)"
        ))
    })?;
    let (values, shape) = column.target(target)?;
    Ok(match values {
        imagefeed::TargetValues::F32(v) => {
            FieldTensor::Float(Tensor::from_data(TensorData::new(v, shape), device))
        }
        imagefeed::TargetValues::I64(v) => {
            FieldTensor::Int(Tensor::from_data(TensorData::new(v, shape), device))
        }
        other => {
            return Err(imagefeed::Error::tensor(format!(
                "imagefeed-burn cannot convert {other:?}"
            )))
        }
    })
}

/// Why an epoch of an [`ImagefeedDataLoader`] ended early, or why a slice has no loader.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The loader failed (or a batch could not become a tensor, or building the loader of a
    /// slice failed).
    Imagefeed(imagefeed::Error),
    /// [`DataLoader::slice`] of a source that is not local files: it cannot be rebuilt from a
    /// range of its paths.
    Slice {
        /// The source's kind.
        kind: SourceKind,
        /// The range asked for.
        start: usize,
        /// The range's end (exclusive).
        end: usize,
    },
    /// A slice of a loader that is itself a slice that could not be built.
    Unbuilt,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Imagefeed(e) => e.fmt(f),
            Error::Slice { kind, start, end } => write!(
                f,
                "cannot slice samples {start}..{end} of a {kind:?} source: only sources of local \
                 files can be sliced"
            ),
            Error::Unbuilt => f.write_str("cannot slice a loader that could not be built"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Imagefeed(e) => Some(e),
            Error::Slice { .. } | Error::Unbuilt => None,
        }
    }
}

impl From<imagefeed::Error> for Error {
    fn from(e: imagefeed::Error) -> Self {
        Error::Imagefeed(e)
    }
}

/// Makes a loader's settings for a source: called by [`ImagefeedDataLoader::new`] and again
/// by every [`DataLoader::slice`].
type Factory = dyn Fn(Source) -> LoaderBuilder + Send + Sync;
type ErrorHook = dyn Fn(&Error) + Send + Sync;

/// What a loader and the copies [`DataLoader::to_device`] makes of it share: one imagefeed
/// loader, one epoch counter, one error slot.
struct Shared {
    /// `None` for a slice that could not be built (its error is in `error`).
    loader: Option<Loader>,
    factory: Arc<Factory>,
    next_epoch: AtomicU64,
    error: Mutex<Option<Error>>,
    hook: Mutex<Option<Arc<ErrorHook>>>,
}

impl Shared {
    fn hook_slot(&self) -> MutexGuard<'_, Option<Arc<ErrorHook>>> {
        self.hook
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn error_slot(&self) -> MutexGuard<'_, Option<Error>> {
        // A panic elsewhere while holding the lock leaves a valid `Option`: keep using it.
        self.error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fail(&self, e: Error) {
        log::error!("imagefeed-burn: the epoch ends early: {e}");
        // Cloned out so that the hook runs without the lock held.
        let hook = self.hook_slot().clone();
        if let Some(hook) = hook {
            hook(&e);
        }
        *self.error_slot() = Some(e);
    }
}

/// burn's [`DataLoader`] over an imagefeed [`Loader`]: each [`iter`](DataLoader::iter) runs the
/// next epoch (0, 1, 2, ... ; see [`set_next_epoch`](Self::set_next_epoch)), and yields
/// [`ImageBatch`]es on the loader's device. See the [crate docs](crate) for errors and slices.
pub struct ImagefeedDataLoader<B: Backend> {
    shared: Arc<Shared>,
    device: B::Device,
}

impl<B: Backend> ImagefeedDataLoader<B> {
    /// Builds the imagefeed loader `factory(source).build()` and wraps it. `factory` sets
    /// everything but the source (batch size, image size, layout, transform, seed, ...); it is
    /// called again, with a part of the source, by [`DataLoader::slice`].
    ///
    /// # Errors
    /// The loader's [`build`](LoaderBuilder::build) error.
    pub fn new<F>(source: Source, factory: F, device: &B::Device) -> Result<Self, Error>
    where
        F: Fn(Source) -> LoaderBuilder + Send + Sync + 'static,
    {
        let loader = factory(source).build()?;
        Ok(Self::from_parts(
            Some(loader),
            Arc::new(factory),
            None,
            None,
            device,
        ))
    }

    fn from_parts(
        loader: Option<Loader>,
        factory: Arc<Factory>,
        error: Option<Error>,
        hook: Option<Arc<ErrorHook>>,
        device: &B::Device,
    ) -> Self {
        ImagefeedDataLoader {
            shared: Arc::new(Shared {
                loader,
                factory,
                next_epoch: AtomicU64::new(0),
                error: Mutex::new(error),
                hook: Mutex::new(hook),
            }),
            device: device.clone(),
        }
    }

    /// Calls `hook` with each error that ends an epoch, as it happens (besides keeping it for
    /// [`take_error`](Self::take_error)): for example `move |_| interrupter.stop(None)` with
    /// the `Interrupter` of burn's `SupervisedTraining` stops the training. The copies
    /// [`to_device`](DataLoader::to_device) makes share the hook, and slices made later keep it.
    #[must_use]
    pub fn on_error(self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        *self.shared.hook_slot() = Some(Arc::new(hook));
        self
    }

    /// The imagefeed loader (`None` for a slice that could not be built).
    pub fn loader(&self) -> Option<&Loader> {
        self.shared.loader.as_ref()
    }

    /// The device batches are delivered to.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The epoch the next [`iter`](DataLoader::iter) runs.
    pub fn next_epoch(&self) -> u64 {
        self.shared.next_epoch.load(Ordering::Relaxed)
    }

    /// Makes the next [`iter`](DataLoader::iter) run epoch `epoch` (when resuming a training
    /// from a checkpoint: epoch `k` yields the same batches in every run).
    pub fn set_next_epoch(&self, epoch: u64) {
        self.shared.next_epoch.store(epoch, Ordering::Relaxed);
    }

    /// Takes the error that ended the last failed epoch (or made a slice unusable), if any.
    /// A later error replaces one not taken (both are logged).
    pub fn take_error(&self) -> Option<Error> {
        self.shared.error_slot().take()
    }
}

impl<B: Backend> fmt::Debug for ImagefeedDataLoader<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImagefeedDataLoader")
            .field("loader", &self.shared.loader)
            .field("next_epoch", &self.next_epoch())
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> DataLoader<B, ImageBatch<B>> for ImagefeedDataLoader<B> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<ImageBatch<B>> + 'a> {
        let epoch = self.shared.next_epoch.fetch_add(1, Ordering::Relaxed);
        let (batches, total) = match &self.shared.loader {
            Some(loader) => (Some(loader.epoch(epoch)), loader.samples_per_epoch()),
            None => (None, 0),
        };
        Box::new(EpochIter {
            shared: &self.shared,
            device: &self.device,
            batches,
            processed: 0,
            total,
        })
    }

    /// [`Loader::samples_per_epoch`]: all samples, or this rank's share with sharding. With
    /// `drop_remainder` or skipped samples an epoch delivers fewer.
    fn num_items(&self) -> usize {
        self.shared
            .loader
            .as_ref()
            .map_or(0, Loader::samples_per_epoch)
    }

    /// The same imagefeed loader, epoch counter and error slot, delivering to `device`.
    fn to_device(&self, device: &B::Device) -> Arc<dyn DataLoader<B, ImageBatch<B>>> {
        Arc::new(ImagefeedDataLoader::<B> {
            shared: self.shared.clone(),
            device: device.clone(),
        })
    }

    /// A new loader over samples `start..end` of the source (clamped to its length), built by
    /// the factory with the same settings, starting at epoch 0. See the [crate docs](crate).
    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<B, ImageBatch<B>>> {
        let shared = &self.shared;
        let built = match &shared.loader {
            None => Err(Error::Unbuilt),
            Some(loader) => slice_source(loader.source(), start, end)
                .and_then(|source| Ok((shared.factory)(source).build()?)),
        };
        let (loader, error) = match built {
            Ok(loader) => (Some(loader), None),
            Err(e) => {
                log::error!("imagefeed-burn: slice {start}..{end}: {e}");
                (None, Some(e))
            }
        };
        Arc::new(Self::from_parts(
            loader,
            shared.factory.clone(),
            error,
            shared.hook_slot().clone(),
            &self.device,
        ))
    }
}

/// Samples `start..end` (clamped) of a source of local files, as a new source.
fn slice_source(source: &Source, start: usize, end: usize) -> Result<Source, Error> {
    let kind = source.kind();
    if kind != SourceKind::Files {
        return Err(Error::Slice { kind, start, end });
    }
    // Cut to the source; an empty range is an error naming the source.
    Ok(source.slice(start..end)?)
}

/// One epoch of an [`ImagefeedDataLoader`].
struct EpochIter<'a, B: Backend> {
    shared: &'a Shared,
    device: &'a B::Device,
    /// `None` once the epoch has ended (dropping `Batches` joins the epoch's threads).
    batches: Option<Batches>,
    processed: usize,
    total: usize,
}

impl<B: Backend> Iterator for EpochIter<'_, B> {
    type Item = ImageBatch<B>;

    fn next(&mut self) -> Option<ImageBatch<B>> {
        let batches = self.batches.as_mut()?;
        let converted = match batches.next() {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(batch)) => {
                let n = batch.len();
                ImageBatch::from_batch(batch, self.device).map(|b| Some((n, b)))
            }
        };
        match converted {
            Ok(Some((n, batch))) => {
                self.processed += n;
                Some(batch)
            }
            Ok(None) => {
                self.batches = None;
                None
            }
            Err(e) => {
                self.batches = None;
                self.shared.fail(Error::Imagefeed(e));
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.batches {
            Some(b) => (0, b.size_hint().1),
            None => (0, Some(0)),
        }
    }
}

impl<B: Backend> DataLoaderIterator<ImageBatch<B>> for EpochIter<'_, B> {
    /// Images delivered so far in this epoch, of [`Loader::samples_per_epoch`].
    fn progress(&self) -> Progress {
        Progress::new(self.processed, self.total)
    }
}
