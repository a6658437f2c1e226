//! candle tensors of a batch (feature `candle`, candle-core 0.11).

use candle_core::{Device, Tensor};

use crate::batch::{Batch, Images, OwnedImages};
use crate::error::Error;

#[cfg_attr(docsrs, doc(cfg(feature = "candle")))]
impl Batch {
    /// The batch as candle tensors on `device`: the images (`shape()`, in the batch's dtype
    /// and layout: `f32`, `f16`, `bf16` or `u8`) and the labels (`u32`, one a sample). One
    /// copy of the images: into a new CPU tensor, or from host memory to a CUDA device. The
    /// batch stays the loader's (dropping it returns its buffer); see [`Batch::into_candle`]
    /// for a CPU tensor without a copy.
    ///
    /// A batch in GPU memory only (a loader built with `Device::Cuda`) on a candle CUDA device
    /// of the same GPU, with the feature `candle-cuda`: one copy on the device, into a tensor
    /// of candle's own (queued on candle's stream after the batch is ready); the slot is
    /// reused once that copy is done. [`Batch::into_candle`] takes the buffer without a copy.
    /// Without `candle-cuda`, such a batch is an error: build the loader for the host and
    /// let candle copy it, or read the device buffer with `Batch::cuda`.
    ///
    /// ```
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, Source};
    /// let loader = Loader::builder(Source::from_dir("testdata/classes")?).batch_size(4).build()?;
    /// for batch in loader.epoch(0) {
    ///     let (images, labels) = batch?.to_candle(&candle_core::Device::Cpu)?;
    ///     assert_eq!(images.dims()[1..], [160, 160, 3]); // NHWC by default
    ///     assert_eq!(labels.dims(), [images.dims()[0]]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn to_candle(&self, device: &Device) -> Result<(Tensor, Tensor), Error> {
        if !self.is_on_host() {
            #[cfg(feature = "candle-cuda")]
            if let (Device::Cuda(dev), Some(gpu)) = (device, self.cuda()) {
                let images = gpu.copy_on(&dev.cuda_stream())?;
                return cuda_tensors(images, gpu.shape(), self.labels().to_vec(), dev);
            }
            return Err(gpu_only());
        }
        let shape = self.shape();
        let images = match self.images() {
            Images::F32(v) => Tensor::from_slice(v, &shape, device),
            Images::F16(v) => Tensor::from_slice(v, &shape, device),
            Images::Bf16(v) => Tensor::from_slice(v, &shape, device),
            Images::U8(v) => Tensor::from_slice(v, &shape, device),
        }
        .map_err(Error::tensor)?;
        let labels =
            Tensor::from_slice(self.labels(), self.len(), device).map_err(Error::tensor)?;
        Ok((images, labels))
    }

    /// As [`Batch::to_candle`], taking the batch's buffers: no copy where the tensor can own
    /// them, and the loader allocates new ones in their place.
    ///
    /// - A host batch on the CPU: the tensors own its vectors ([`Batch::into_owned`]).
    /// - A host batch on a CUDA device: one copy, host to device.
    /// - A GPU batch (a `Device::Cuda` loader, feature `candle-cuda`) on a candle CUDA device
    ///   of the same GPU: the batch's device buffer becomes the image tensor's storage
    ///   ([`Batch::into_cuda`] on candle's stream, which waits for the batch on the GPU), with
    ///   no copy on the device. The tensor owns that memory; the loader's slot gets a new
    ///   buffer, so a training step may hold any number of these tensors without the loader
    ///   waiting, and each one it holds is device memory outside the loader's budget. Building
    ///   the loader with `.cuda_stream(dev.cuda_stream())` puts its copies on candle's stream
    ///   (no wait at all, but no overlap with the step's kernels either).
    pub fn into_candle(self, device: &Device) -> Result<(Tensor, Tensor), Error> {
        if !self.is_on_host() {
            #[cfg(feature = "candle-cuda")]
            if let Device::Cuda(dev) = device {
                let owned = self.into_cuda(&dev.cuda_stream())?;
                return cuda_tensors(owned.images, owned.shape, owned.labels, dev);
            }
            return Err(gpu_only());
        }
        let owned = self.into_owned()?;
        let shape = owned.shape;
        let images = match owned.images {
            OwnedImages::F32(v) => Tensor::from_vec(v, &shape, device),
            OwnedImages::F16(v) => Tensor::from_vec(v, &shape, device),
            OwnedImages::Bf16(v) => Tensor::from_vec(v, &shape, device),
            OwnedImages::U8(v) => Tensor::from_vec(v, &shape, device),
        }
        .map_err(Error::tensor)?;
        let n = owned.labels.len();
        let labels = Tensor::from_vec(owned.labels, n, device).map_err(Error::tensor)?;
        Ok((images, labels))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "candle")))]
impl Batch {
    /// Field `name` as a candle tensor of `[n, width]` on `device`, made as `target` says
    /// ([`FieldColumn::target`](crate::FieldColumn::target)): a multi-hot `f32` matrix of
    /// class labels, integer lists padded (`i64`), or float vectors (`f32`). One copy.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, Source, Target};
    /// let loader = Loader::builder(Source::open("train.tfrecord")?).field("labels").build()?;
    /// for batch in loader.epoch(0) {
    ///     let batch = batch?;
    ///     let (images, _) = batch.to_candle(&candle_core::Device::Cpu)?;
    ///     let targets = batch.field_to_candle(
    ///         "labels",
    ///         Target::MultiHot { classes: 80 },
    ///         &candle_core::Device::Cpu,
    ///     )?; // [n, 80] f32
    ///     # let _ = (images, targets);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A field the loader was not asked for, and as
    /// [`FieldColumn::target`](crate::FieldColumn::target).
    pub fn field_to_candle(
        &self,
        name: &str,
        target: crate::Target,
        device: &Device,
    ) -> Result<Tensor, Error> {
        let column = self.field(name).ok_or_else(|| {
            Error::config(
                "field",
                format!("`{name}` is not one of the loader's fields (LoaderBuilder::field)"),
            )
        })?;
        let (values, shape) = column.target(target)?;
        match values {
            crate::TargetValues::F32(v) => Tensor::from_vec(v, &shape, device),
            crate::TargetValues::I64(v) => Tensor::from_vec(v, &shape, device),
        }
        .map_err(Error::tensor)
    }
}

fn gpu_only() -> Error {
    Error::config(
        "device",
        if cfg!(feature = "candle-cuda") {
            "the batch is in GPU memory only and the tensor's device is not a CUDA device: name \
             candle's CUDA device of the loader's GPU, or build the loader for the host"
        } else {
            "the batch is in GPU memory only: turn on imagefeed's `candle-cuda` feature (candle \
             wraps the device buffer), build the loader for the host (candle copies a host \
             batch to its device), or read the device buffer with Batch::cuda()"
        },
    )
}

/// The images as a tensor over `images` (no copy), the labels copied to the device.
#[cfg(feature = "candle-cuda")]
fn cuda_tensors(
    images: crate::OwnedCudaImages,
    shape: [usize; 4],
    labels: Vec<u32>,
    dev: &candle_core::CudaDevice,
) -> Result<(Tensor, Tensor), Error> {
    use crate::OwnedCudaImages as I;
    use candle_core::{op::BackpropOp, CudaStorage, Storage};
    let storage = match images {
        I::F32(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
        I::F16(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
        I::Bf16(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
        I::U8(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
    };
    // The storage holds exactly `shape`'s elements, contiguous (`Batch::into_cuda`).
    let images = Tensor::from_storage(Storage::Cuda(storage), &shape, BackpropOp::none(), false);
    let n = labels.len();
    let labels = Tensor::from_vec(labels, n, &Device::Cuda(dev.clone())).map_err(Error::tensor)?;
    Ok((images, labels))
}

#[cfg(test)]
mod tests {
    use crate::{Dtype, Layout, Loader, Source};
    use candle_core::{DType, Device};

    /// A field of label lists as a multi-hot `f32` tensor and as padded `i64`, equal to
    /// `FieldColumn::target`'s values; a field the loader was not asked for is an error.
    #[test]
    fn a_field_is_a_target_tensor() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/classes");
        let dir = tempfile::tempdir().unwrap();
        let mut list = String::from("path\tlabel\tlabels\n");
        for (k, (f, l)) in [
            ("cat/cat_0.jpg", "0 2"),
            ("dog/dog_0.jpg", "1"),
            ("fish/fish_0.jpg", "2,0,1"),
        ]
        .iter()
        .enumerate()
        {
            list.push_str(&format!("{}\t{k}\t{l}\n", root.join(f).display()));
        }
        std::fs::write(dir.path().join("list.tsv"), list).unwrap();
        let loader = Loader::builder(Source::open(dir.path().join("list.tsv")).unwrap())
            .batch_size(3)
            .image_size(12)
            .field("labels")
            .build()
            .unwrap();
        let batch = loader.epoch(0).next().unwrap().unwrap();
        let column = batch.field("labels").unwrap();
        let hot = batch
            .field_to_candle(
                "labels",
                crate::Target::MultiHot { classes: 3 },
                &Device::Cpu,
            )
            .unwrap();
        assert_eq!((hot.dims(), hot.dtype()), (&[3, 3][..], DType::F32));
        let crate::TargetValues::F32(want) = column
            .target(crate::Target::MultiHot { classes: 3 })
            .unwrap()
            .0
        else {
            unreachable!()
        };
        assert_eq!(hot.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
        let padded = batch
            .field_to_candle("labels", crate::Target::Padded { pad: -1.0 }, &Device::Cpu)
            .unwrap();
        assert_eq!((padded.dims(), padded.dtype()), (&[3, 3][..], DType::I64));
        let e = batch
            .field_to_candle("caption", crate::Target::Dense, &Device::Cpu)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("`caption` is not one of the loader's fields"),
            "{e}"
        );
    }

    /// The tensors hold the batch's values bit for bit, in every dtype and layout, whether
    /// copied or taken.
    #[test]
    fn tensors_hold_the_batch_bit_for_bit() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/classes");
        for (dtype, want, layout) in [
            (Dtype::F32, DType::F32, Layout::Nhwc),
            (Dtype::F16, DType::F16, Layout::Nchw),
            (Dtype::Bf16, DType::BF16, Layout::Nhwc),
            (Dtype::U8, DType::U8, Layout::Nchw),
        ] {
            let loader = Loader::builder(Source::from_dir(&root).unwrap())
                .batch_size(3)
                .image_size(12)
                .dtype(dtype)
                .layout(layout)
                .build()
                .unwrap();
            let copied: Vec<_> = loader.epoch(0).map(|b| b.unwrap()).collect();
            let taken: Vec<_> = loader
                .epoch(0)
                .map(|b| b.unwrap().into_candle(&Device::Cpu).unwrap())
                .collect();
            for (b, (ti, tl)) in copied.iter().zip(&taken) {
                let (ci, cl) = b.to_candle(&Device::Cpu).unwrap();
                assert_eq!(ci.dtype(), want);
                assert_eq!(ci.dims(), b.shape());
                let bytes = |t: &candle_core::Tensor| match t.dtype() {
                    DType::F32 => t
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap()
                        .iter()
                        .flat_map(|v| v.to_ne_bytes())
                        .collect::<Vec<u8>>(),
                    DType::F16 => t
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<half::f16>()
                        .unwrap()
                        .iter()
                        .flat_map(|v| v.to_ne_bytes())
                        .collect(),
                    DType::BF16 => t
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<half::bf16>()
                        .unwrap()
                        .iter()
                        .flat_map(|v| v.to_ne_bytes())
                        .collect(),
                    _ => t.flatten_all().unwrap().to_vec1::<u8>().unwrap(),
                };
                assert_eq!(bytes(&ci), b.as_bytes());
                assert_eq!(bytes(ti), b.as_bytes());
                assert_eq!(cl.to_vec1::<u32>().unwrap(), b.labels());
                assert_eq!(tl.to_vec1::<u32>().unwrap(), b.labels());
            }
        }
    }

    /// With `candle-cuda` on a GPU machine: a GPU batch becomes a candle CUDA tensor over its
    /// own device buffer (`into_candle`) or a copy (`to_candle`), with the host loader's
    /// values bit for bit (f32: the kernel rounds as the host does). A binary built with
    /// candle's `cuda` links libcuda, so without a driver this test does not start at all:
    /// CI builds it only.
    #[cfg(feature = "candle-cuda")]
    #[test]
    fn gpu_batches_become_candle_cuda_tensors_over_their_device_buffer() {
        use crate::Device as Where;
        use candle_core::Storage;
        use cudarc::driver::DevicePtr;
        if let Err(e) = crate::tools::gpu::info() {
            println!("skipped: no usable GPU ({e})");
            return;
        }
        let dev = Device::new_cuda(0).unwrap();
        let Device::Cuda(cuda) = &dev else {
            unreachable!("new_cuda gives a CUDA device")
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/classes");
        let loader = |to: Where, stream: bool| {
            let b = Loader::builder(Source::from_dir(&root).unwrap())
                .batch_size(3)
                .image_size(24)
                .layout(Layout::Nchw)
                .device(to);
            let b = if stream {
                b.cuda_stream(cuda.cuda_stream())
            } else {
                b
            };
            b.build().unwrap()
        };
        let host: Vec<_> = loader(Where::Host, false)
            .epoch(0)
            .map(|b| b.unwrap())
            .collect();
        for on_candles_stream in [false, true] {
            let gpu = loader(Where::Cuda(0), on_candles_stream);
            let mut taken = 0;
            for (b, h) in gpu.epoch(0).zip(&host) {
                let b = b.unwrap();
                let (copied, _) = b.to_candle(&dev).unwrap();
                let ptr = b.cuda().unwrap().device_ptr();
                let (t, labels) = b.into_candle(&dev).unwrap();
                let (storage, _) = t.storage_and_layout();
                let Storage::Cuda(cs) = &*storage else {
                    panic!("a CUDA tensor")
                };
                let slice = cs.as_cuda_slice::<f32>().unwrap();
                assert_eq!(slice.device_ptr(slice.stream()).0, ptr, "taken, not copied");
                drop(storage);
                assert_eq!(t.dims(), h.shape());
                let want: Vec<u32> = h.as_f32().unwrap().iter().map(|v| v.to_bits()).collect();
                for t in [&t, &copied] {
                    let got = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want);
                }
                assert_eq!(labels.to_vec1::<u32>().unwrap(), h.labels());
                taken += 1;
            }
            assert_eq!(taken, host.len());
        }
    }
}
