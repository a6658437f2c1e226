//! `CudaBatch`: a batch in GPU memory, borrowed from a `Batch`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, DeviceRepr};
use half::{bf16, f16};

use super::driver::{drv, guarded};
use super::staging::CudaSlot;
use crate::batch::format::BatchFormat;
use crate::batch::normalize::{Dtype, Layout};
use crate::error::Error;

/// A batch in GPU memory, borrowed from a [`Batch`](crate::Batch) with
/// [`Batch::cuda`](crate::Batch::cuda). The device memory stays valid, and is not reused, until
/// the `Batch` is dropped.
///
/// The data is ready once [`ready_event`](Self::ready_event) completes: make your stream wait on
/// it ([`wait_on`](Self::wait_on)) or block the CPU ([`synchronize`](Self::synchronize)).
/// Reading it through cudarc views ([`as_f32`](Self::as_f32), …) on any stream of the same
/// context waits automatically (cudarc's event tracking).
///
/// **Releasing.** The loader overwrites the slot after the `Batch` is dropped, behind a GPU-side
/// fence: by default the end of the work queued on the context's legacy default stream when the
/// batch is dropped. If you read the raw pointer on another stream, call
/// [`release_after`](Self::release_after) with that stream after queueing the last read.
///
/// **Wrapping it** (no copy, valid while the `Batch` lives):
///
/// - tch: `Tensor::from_blob(batch.device_ptr() as *const u8, &shape, &strides, kind,
///   Device::Cuda(n))` with the contiguous strides of [`shape`](Self::shape), on the legacy
///   default stream (or call `release_after` with torch's current stream).
/// - candle (feature `candle-cuda`): `Batch::into_candle` makes the buffer the tensor's
///   storage; any cudarc user: [`Batch::into_cuda`](crate::Batch::into_cuda) takes it as a
///   `CudaSlice` on their stream. Both give the slot a new buffer, so nothing waits for them.
/// - any other framework: [`device_ptr`](Self::device_ptr), [`shape`](Self::shape),
///   [`dtype`](Self::dtype), and the event or stream to wait on.
///
/// ```
/// # #[cfg(feature = "cuda")]
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Device, Loader, Source};
/// let loader = match Loader::builder(Source::from_dir("testdata/classes")?)
///     .batch_size(4)
///     .device(Device::Cuda(0))
///     .build()
/// {
///     Ok(loader) => loader,
///     Err(e) => { eprintln!("no GPU here: {e}"); return Ok(()); }
/// };
/// for batch in loader.epoch(0) {
///     let batch = batch?;
///     let gpu = batch.cuda().expect("a CUDA loader delivers device batches");
///     let images = gpu.as_f32().expect("f32 is the default dtype"); // a cudarc view
///     gpu.synchronize()?; // or gpu.wait_on(&my_stream)?
///     assert_eq!(images.len(), batch.len() * 160 * 160 * 3);
/// }
/// # Ok(()) }
/// # #[cfg(not(feature = "cuda"))] fn main() {}
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug, Clone, Copy)]
pub struct CudaBatch<'a> {
    pub(super) slot: &'a CudaSlot,
    pub(super) shape: [usize; 4],
    pub(super) dtype: Dtype,
    pub(super) layout: Layout,
}

impl<'a> CudaBatch<'a> {
    pub(crate) fn new(slot: &'a CudaSlot, format: &BatchFormat) -> Self {
        let n = slot.images;
        let shape = match format.layout {
            Layout::Nhwc => [n, format.height, format.width, 3],
            Layout::Nchw => [n, 3, format.height, format.width],
        };
        CudaBatch {
            slot,
            shape,
            dtype: format.dtype,
            layout: format.layout,
        }
    }

    /// The shape: `[n, height, width, 3]` for NHWC, `[n, 3, height, width]` for NCHW.
    /// The data is contiguous (row-major) in this shape.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for a batch without images (never delivered by a loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size of the data in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len() * self.dtype.size()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.slot.stream.context().ordinal()
    }

    /// The raw device address of the first element (a `CUdeviceptr`), aligned to at least 256
    /// bytes, valid until the `Batch` is dropped. Wait on [`ready_event`](Self::ready_event)
    /// before reading it.
    pub fn device_ptr(&self) -> u64 {
        self.slot.data_ptr
    }

    /// The data's bytes as a cudarc view.
    pub fn bytes(&self) -> CudaView<'a, u8> {
        self.slot.data().slice(..self.num_bytes())
    }

    pub(super) fn typed<T>(&self, dtype: Dtype) -> Option<CudaView<'a, T>> {
        if self.dtype != dtype {
            return None;
        }
        // SAFETY: the buffer holds `len()` values of `dtype` (written by the kernel, or copied
        // from the host's values), `T` is that dtype's Rust type (every bit pattern valid), and
        // device allocations are aligned to at least 256 bytes. cudarc returns `None` if the
        // buffer were too small.
        unsafe { self.slot.data().transmute::<T>(self.len()) }
    }

    /// The images as `f32`, if that is the dtype.
    pub fn as_f32(&self) -> Option<CudaView<'a, f32>> {
        self.typed(Dtype::F32)
    }

    /// The images as `f16`, if that is the dtype.
    pub fn as_f16(&self) -> Option<CudaView<'a, f16>> {
        self.typed(Dtype::F16)
    }

    /// The images as `bf16`, if that is the dtype.
    pub fn as_bf16(&self) -> Option<CudaView<'a, bf16>> {
        self.typed(Dtype::Bf16)
    }

    /// The images as `u8`, if that is the dtype.
    pub fn as_u8(&self) -> Option<CudaView<'a, u8>> {
        self.typed(Dtype::U8)
    }

    /// The event recorded when the batch is in device memory (copy and normalization done).
    pub fn ready_event(&self) -> &'a CudaEvent {
        &self.slot.ready
    }

    /// The loader's stream, on which the copy and normalization run.
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        &self.slot.stream
    }

    /// The context (the device's primary context).
    pub fn context(&self) -> &'a Arc<CudaContext> {
        self.slot.stream.context()
    }

    /// Makes `stream` wait (on the GPU) until the batch is in device memory.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) from the driver.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<(), Error> {
        stream
            .wait(&self.slot.ready)
            .map_err(drv("cannot wait for a batch", self.ordinal()))
    }

    /// Blocks the calling thread until the batch is in device memory.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) if the copy or the kernel failed.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.slot.ready.synchronize().map_err(drv(
            "a batch's copy or normalization failed",
            self.ordinal(),
        ))
    }

    /// Marks the end of this batch's use on `stream`: once the `Batch` is dropped, the loader
    /// reuses its device memory only after `stream` has reached this point. Call it after
    /// queueing the last work that reads the batch, if that work is not on the legacy default
    /// stream; the last call wins.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) if `stream` belongs to another context.
    pub fn release_after(&self, stream: &CudaStream) -> Result<(), Error> {
        self.slot
            .released
            .record(stream)
            .map_err(drv("cannot record a release", self.ordinal()))?;
        self.slot.release_recorded.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// A batch's images in GPU memory, taken by value ([`Batch::into_cuda`](crate::Batch::into_cuda)):
/// cudarc buffers of the batch's dtype that the caller owns, on the stream it named.
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug)]
#[non_exhaustive]
pub enum OwnedCudaImages {
    /// `f32` values.
    F32(CudaSlice<f32>),
    /// IEEE half-precision values.
    F16(CudaSlice<f16>),
    /// bfloat16 values.
    Bf16(CudaSlice<bf16>),
    /// Raw `u8` pixels.
    U8(CudaSlice<u8>),
}

/// A GPU batch taken by value ([`Batch::into_cuda`](crate::Batch::into_cuda)): its device
/// buffer, now the caller's, and its labels and indices on the host.
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug)]
#[non_exhaustive]
pub struct OwnedCudaBatch {
    /// The images, `shape` in the batch's layout, contiguous.
    pub images: OwnedCudaImages,
    /// The label of each image.
    pub labels: Vec<u32>,
    /// The dataset index of each image.
    pub indices: Vec<u64>,
    /// Whether each image is a padding copy ([`Batch::padded`](crate::Batch::padded)).
    pub padded: Vec<bool>,
    /// `[n, height, width, 3]` (NHWC) or `[n, 3, height, width]` (NCHW).
    pub shape: [usize; 4],
    /// The epoch.
    pub epoch: u64,
    /// The position a [`LoaderState`](crate::LoaderState) resumes from after this batch.
    pub position: u64,
}

/// `stream` must be on the slot's device (and so in its primary context, where cudarc and
/// candle open every device).
fn check_stream(slot: &CudaSlot, stream: &CudaStream) -> Result<usize, Error> {
    let n = slot.stream.context().ordinal();
    let theirs = stream.context();
    if theirs.ordinal() != n || theirs.cu_ctx() != slot.stream.context().cu_ctx() {
        return Err(Error::config(
            "stream",
            format!(
                "the batch is on CUDA device {n} and the stream on CUDA device {} (or in another \
                 context of it): name a stream of the loader's device",
                theirs.ordinal()
            ),
        ));
    }
    Ok(n)
}

/// Takes the batch's device buffer as `OwnedCudaImages` on `stream`, which first waits (on the
/// GPU) for the batch to be ready; the slot keeps a new buffer. No copy.
pub(crate) fn take_images(
    slot: &mut CudaSlot,
    format: &BatchFormat,
    stream: &Arc<CudaStream>,
) -> Result<(OwnedCudaImages, [usize; 4]), Error> {
    let n = check_stream(slot, stream)?;
    let view = CudaBatch::new(slot, format);
    let (shape, elems, dtype) = (view.shape(), view.len(), view.dtype());
    if view.num_bytes() > slot.data().len() {
        return Err(Error::device(format!(
            "CUDA device {n}: a batch of {} bytes does not fit its {} byte buffer",
            view.num_bytes(),
            slot.data().len()
        )));
    }
    guarded(n, || {
        // Everything `stream` queues from now on (the framework's reads, and the free when
        // the buffer is dropped) comes after the copy and the kernel that wrote it.
        stream
            .wait(&slot.ready)
            .map_err(drv("cannot wait for a batch", n))?;
        let ptr = slot.take_data()?.leak();
        /// The allocation as `len` values of `T` on `stream`, which frees it when dropped.
        fn upgrade<T: DeviceRepr>(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> CudaSlice<T> {
            // SAFETY: `ptr` is a live device allocation of this context (leaked above, so
            // nothing else frees it) of at least `len × size_of::<T>()` bytes (checked above),
            // aligned to 256 bytes; it holds `len` values of the batch's dtype, whose Rust type
            // `T` is (the match below), every bit pattern of which is valid. The stream waited
            // for the writes.
            unsafe { stream.upgrade_device_ptr(ptr, len) }
        }
        let images = match dtype {
            Dtype::F32 => OwnedCudaImages::F32(upgrade(stream, ptr, elems)),
            Dtype::F16 => OwnedCudaImages::F16(upgrade(stream, ptr, elems)),
            Dtype::Bf16 => OwnedCudaImages::Bf16(upgrade(stream, ptr, elems)),
            Dtype::U8 => OwnedCudaImages::U8(upgrade(stream, ptr, elems)),
        };
        Ok((images, shape))
    })
}

impl CudaBatch<'_> {
    /// A copy of the images in a new buffer on `stream` (one device-to-device copy, queued
    /// after the batch is ready); the slot is released after the copy.
    #[cfg_attr(not(feature = "candle-cuda"), allow(dead_code))]
    pub(crate) fn copy_on(&self, stream: &Arc<CudaStream>) -> Result<OwnedCudaImages, Error> {
        let n = check_stream(self.slot, stream)?;
        self.wait_on(stream)?;
        let images = guarded(n, || {
            let copy = |e| drv("cannot copy a batch on the device", n)(e);
            let missing =
                || Error::device(format!("CUDA device {n}: the batch's buffer is too small"));
            Ok(match self.dtype {
                Dtype::F32 => OwnedCudaImages::F32(
                    stream
                        .clone_dtod(&self.as_f32().ok_or_else(missing)?)
                        .map_err(copy)?,
                ),
                Dtype::F16 => OwnedCudaImages::F16(
                    stream
                        .clone_dtod(&self.as_f16().ok_or_else(missing)?)
                        .map_err(copy)?,
                ),
                Dtype::Bf16 => OwnedCudaImages::Bf16(
                    stream
                        .clone_dtod(&self.as_bf16().ok_or_else(missing)?)
                        .map_err(copy)?,
                ),
                Dtype::U8 => OwnedCudaImages::U8(
                    stream
                        .clone_dtod(&self.as_u8().ok_or_else(missing)?)
                        .map_err(copy)?,
                ),
            })
        })?;
        self.release_after(stream)?;
        Ok(images)
    }
}
