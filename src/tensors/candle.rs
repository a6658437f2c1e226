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
    /// An error for a batch in GPU memory only (a loader built with `Device::Cuda`): build the
    /// loader for the host and let candle copy it to its device, or take the device buffer
    /// with `Batch::cuda`.
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

    /// As [`Batch::to_candle`], taking the batch's buffers ([`Batch::into_owned`]): on the CPU
    /// the tensors own them, without a copy, and the loader allocates new ones; on a CUDA
    /// device, one copy.
    pub fn into_candle(self, device: &Device) -> Result<(Tensor, Tensor), Error> {
        if !self.is_on_host() {
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

fn gpu_only() -> Error {
    Error::config(
        "device",
        "the batch is in GPU memory only: build the loader for the host (candle copies a host \
         batch to its device), or read the device buffer with Batch::cuda()",
    )
}

#[cfg(test)]
mod tests {
    use crate::{Dtype, Layout, Loader, Source};
    use candle_core::{DType, Device};

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
}
