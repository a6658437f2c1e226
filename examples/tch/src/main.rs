//! Trains a small convolutional network with tch (libtorch) on batches from imagefeed: two
//! 3×3 convolutions with ReLU and max-pooling, then a linear layer, on 32×32 images of the
//! 10-class corpus that `imagefeed corpus` writes, with random-resized-crop and flip for
//! training and the centre crop for the held-out fifth. Prints loss and held-out accuracy per
//! epoch (chance is 10%).
//!
//! `LIBTORCH_USE_PYTORCH=1 cargo run --release -- [LIST] [--epochs N] [--smoke]`

use imagefeed::{Batch, Images, Layout, Loader, Source, Transform};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

const CLASSES: i64 = imagefeed_testkit::corpus::CLASSES as i64;
const SIZE: u32 = 32;

/// A batch as tch tensors on `device`: the images (the batch's shape, dtype and layout) and
/// the labels (`int64`, as torch's losses take them). One copy of the images into a tensor
/// libtorch owns (then one more to a CUDA `device`); the batch can be dropped right after.
fn to_tch(batch: &Batch, device: Device) -> Result<(Tensor, Tensor), imagefeed::Error> {
    let shape: Vec<i64> = batch.shape().iter().map(|&d| d as i64).collect();
    let images = match batch.images() {
        Images::F32(v) => Tensor::from_slice(v),
        Images::F16(v) => Tensor::from_slice(v),
        Images::Bf16(v) => Tensor::from_slice(v),
        Images::U8(v) => Tensor::from_slice(v),
        _ => {
            return Err(imagefeed::Error::tensor(
                "a dtype this example does not know",
            ))
        }
    };
    if images.numel() != batch.shape().iter().product::<usize>() {
        return Err(imagefeed::Error::tensor(
            "the batch is in GPU memory only: see cuda_view below",
        ));
    }
    let labels: Vec<i64> = batch.labels().iter().map(|&l| i64::from(l)).collect();
    Ok((
        images.view(shape.as_slice()).to_device(device),
        Tensor::from_slice(&labels).to_device(device),
    ))
}

/// With imagefeed's `cuda` feature and a loader built with `Device::Cuda(n)`: a tch tensor
/// over the batch's device memory, without a copy (`from_blob`). The tensor borrows the
/// batch's slot, so the two travel together and the batch is dropped (its slot returned to
/// the loader's ring) only after the tensor. Waits for the batch's copy and normalization
/// to finish on the host first, so libtorch's stream sees finished data.
#[cfg(feature = "cuda")]
#[allow(dead_code)] // what a GPU training loop uses; this example trains on the host
pub struct CudaView {
    tensor: Tensor,
    _batch: Batch,
}

#[cfg(feature = "cuda")]
#[allow(dead_code)]
impl CudaView {
    pub fn new(batch: Batch, ordinal: usize) -> Result<CudaView, imagefeed::Error> {
        let gpu = batch
            .cuda()
            .ok_or_else(|| imagefeed::Error::tensor("not a GPU batch"))?;
        gpu.synchronize()?;
        let shape: Vec<i64> = gpu.shape().iter().map(|&d| d as i64).collect();
        let kind = match batch.dtype() {
            imagefeed::Dtype::F32 => Kind::Float,
            imagefeed::Dtype::F16 => Kind::Half,
            imagefeed::Dtype::Bf16 => Kind::BFloat16,
            _ => Kind::Uint8,
        };
        // SAFETY: the pointer is the batch's device buffer of `shape` elements of `kind`,
        // contiguous; `_batch` keeps it alive, and unchanged, until this view is dropped
        // (struct fields drop in order: the tensor first).
        let tensor = unsafe {
            Tensor::from_blob(
                gpu.device_ptr() as *const u8,
                &shape,
                &[],
                kind,
                Device::Cuda(ordinal),
            )
        };
        Ok(CudaView {
            tensor,
            _batch: batch,
        })
    }

    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
}

fn net(vs: &nn::Path) -> impl ModuleT {
    nn::seq_t()
        .add(nn::conv2d(
            vs / "c1",
            3,
            16,
            3,
            nn::ConvConfig {
                padding: 1,
                ..Default::default()
            },
        ))
        .add_fn(|x| x.relu().max_pool2d_default(2))
        .add(nn::conv2d(
            vs / "c2",
            16,
            32,
            3,
            nn::ConvConfig {
                padding: 1,
                ..Default::default()
            },
        ))
        .add_fn(|x| x.relu().max_pool2d_default(2).flatten(1, -1))
        .add(nn::linear(
            vs / "fc",
            32 * 8 * 8,
            CLASSES,
            Default::default(),
        ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let epochs: u64 = match args.iter().position(|a| a == "--epochs") {
        Some(i) => args.get(i + 1).ok_or("--epochs needs a number")?.parse()?,
        None if smoke => 1,
        None => 8,
    };
    let tmp = tempfile::tempdir()?;
    let list = match args
        .iter()
        .find(|a| !a.starts_with("--") && a.parse::<u64>().is_err())
    {
        Some(p) => p.into(),
        None => imagefeed_testkit::corpus::generate(tmp.path(), if smoke { 100 } else { 1000 }, 1)?.list,
    };
    let all = Source::open(&list)?;
    let split = all.len() * 4 / 5;
    let common = |source: Source| {
        Loader::builder(source)
            .image_size(SIZE)
            .batch_size(32)
            .layout(Layout::Nchw)
            .normalize([0.5; 3], [0.25; 3])
            .seed(7)
    };
    let train = common(all.slice(0..split)?)
        .transform(Transform::random_resized_crop())
        .build()?;
    let held_out = common(all.slice(split..all.len())?)
        .transform(Transform::center_crop())
        .shuffle(false)
        .build()?;
    let device = Device::cuda_if_available();
    let vs = nn::VarStore::new(device);
    let model = net(&vs.root());
    let mut opt = nn::Adam::default().build(&vs, 1e-3)?;
    for epoch in 0..epochs {
        let (mut loss_sum, mut batches) = (0f64, 0usize);
        for batch in train.epoch(epoch).take(if smoke { 2 } else { usize::MAX }) {
            let (images, labels) = to_tch(&batch?, device)?;
            let loss = model
                .forward_t(&images, true)
                .cross_entropy_for_logits(&labels);
            opt.backward_step(&loss);
            loss_sum += loss.double_value(&[]);
            batches += 1;
        }
        let (mut correct, mut seen) = (0i64, 0i64);
        tch::no_grad(|| -> Result<(), imagefeed::Error> {
            for batch in held_out.epoch(0) {
                let (images, labels) = to_tch(&batch?, device)?;
                let predicted = model.forward_t(&images, false).argmax(-1, false);
                correct += predicted
                    .eq_tensor(&labels)
                    .sum(Kind::Int64)
                    .int64_value(&[]);
                seen += labels.size()[0];
            }
            Ok(())
        })?;
        println!(
            "epoch {epoch}: training loss {:.3}, held-out accuracy {:.1}% ({seen} images; chance {:.0}%)",
            loss_sum / batches.max(1) as f64,
            100.0 * correct as f64 / seen.max(1) as f64,
            100.0 / CLASSES as f64
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tensors hold `Batch::as_f32()`'s values and the labels, bit for bit.
    #[test]
    fn tensors_hold_the_batch_bit_for_bit() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/classes");
        let loader = Loader::builder(Source::from_dir(root).unwrap())
            .batch_size(3)
            .image_size(20)
            .layout(Layout::Nchw)
            .build()
            .unwrap();
        for batch in loader.epoch(0) {
            let batch = batch.unwrap();
            let (images, labels) = to_tch(&batch, Device::Cpu).unwrap();
            let shape: Vec<i64> = batch.shape().iter().map(|&d| d as i64).collect();
            assert_eq!(images.size(), shape);
            let got = Vec::<f32>::try_from(images.flatten(0, -1)).unwrap();
            let want = batch.as_f32().unwrap();
            assert!(got
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            assert_eq!(got.len(), want.len());
            let got = Vec::<i64>::try_from(labels).unwrap();
            let want: Vec<i64> = batch.labels().iter().map(|&l| i64::from(l)).collect();
            assert_eq!(got, want);
        }
    }
}
