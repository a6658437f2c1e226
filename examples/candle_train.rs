//! Trains a small convolutional network with candle on batches from imagefeed: two 3×3
//! convolutions with ReLU and max-pooling, then a linear layer, on 32×32 images of the
//! 10-class corpus that `imagefeed corpus` writes, with random-resized-crop and flip for
//! training and the centre crop for a held-out fifth (`Source::split`: a share of every class, or
//! whole shards). Prints loss and held-out accuracy per epoch, with chance for the dataset's
//! number of classes.
//!
//! `cargo run --release --features candle --example candle_train [LIST] [--epochs N] [--smoke]`
//! (default: a 1,000-image corpus generated into a temporary folder; `--smoke`: one epoch of
//! two batches, as CI runs it).

use candle_core::{DType, Device, Tensor, Var, D};
use imagefeed::{Layout, Loader, Source, Transform};

const SIZE: u32 = 32;

/// The network's weights, each a candle `Var` that backpropagation reaches.
struct Net {
    conv1: Var,
    conv2: Var,
    linear: Var,
    bias: Var,
}

impl Net {
    fn new(classes: usize, device: &Device) -> candle_core::Result<Net> {
        let init = |shape: &[usize], fan_in: usize| {
            let std = (2.0 / fan_in as f64).sqrt();
            Var::randn(0f32, std as f32, shape, device)
        };
        Ok(Net {
            conv1: init(&[16, 3, 3, 3], 27)?,
            conv2: init(&[32, 16, 3, 3], 144)?,
            linear: init(&[32 * 8 * 8, classes], 32 * 8 * 8)?,
            bias: Var::zeros(classes, DType::F32, device)?,
        })
    }

    fn vars(&self) -> [&Var; 4] {
        [&self.conv1, &self.conv2, &self.linear, &self.bias]
    }

    /// Logits of NCHW images.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.conv2d(&self.conv1, 1, 1, 1, 1)?.relu()?.max_pool2d(2)?;
        let x = x.conv2d(&self.conv2, 1, 1, 1, 1)?.relu()?.max_pool2d(2)?;
        x.flatten_from(1)?
            .matmul(&self.linear)?
            .broadcast_add(&self.bias)
    }
}

/// Mean cross-entropy of `logits` against `labels` (u32).
fn cross_entropy(logits: &Tensor, labels: &Tensor) -> candle_core::Result<Tensor> {
    let max = logits.max_keepdim(D::Minus1)?;
    let shifted = logits.broadcast_sub(&max)?;
    let log_z = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let log_p = shifted.broadcast_sub(&log_z)?;
    log_p.gather(&labels.unsqueeze(1)?, 1)?.mean_all()?.neg()
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
        None => {
            imagefeed_testkit::corpus::generate(tmp.path(), if smoke { 100 } else { 1000 }, 1)?.list
        }
    };
    // A fifth held out: a share of every class (class folders are sorted by class, so a
    // `slice` of the last fifth would hold out one or two classes), or whole shards.
    let all = Source::open(&list)?;
    let classes = all.num_classes() as usize;
    let (train_part, held_out_part) = all.split(0.2, 7)?;
    let common = |source: Source| {
        Loader::builder(source)
            .image_size(SIZE)
            .batch_size(32)
            .layout(Layout::Nchw)
            .normalize([0.5; 3], [0.25; 3])
            .seed(7)
    };
    let train = common(train_part)
        .transform(Transform::random_resized_crop())
        .build()?;
    let held_out = common(held_out_part)
        .transform(Transform::center_crop())
        .shuffle(false)
        .build()?;
    let device = Device::Cpu;
    let net = Net::new(classes, &device)?;
    let lr = 0.05;
    for epoch in 0..epochs {
        let (mut loss_sum, mut batches) = (0f64, 0usize);
        for batch in train.epoch(epoch).take(if smoke { 2 } else { usize::MAX }) {
            // The tensors own the batch's buffers: no copy.
            let (images, labels) = batch?.into_candle(&device)?;
            let loss = cross_entropy(&net.forward(&images)?, &labels)?;
            let grads = loss.backward()?;
            for var in net.vars() {
                if let Some(g) = grads.get(var) {
                    var.set(&var.as_tensor().sub(&(g * lr)?)?)?;
                }
            }
            loss_sum += f64::from(loss.to_scalar::<f32>()?);
            batches += 1;
        }
        let (mut correct, mut seen) = (0usize, 0usize);
        for batch in held_out.epoch(0) {
            let (images, labels) = batch?.to_candle(&device)?;
            let predicted = net.forward(&images)?.argmax(D::Minus1)?;
            let right = predicted.eq(&labels)?.to_dtype(DType::U32)?.sum_all()?;
            correct += right.to_scalar::<u32>()? as usize;
            seen += labels.dims()[0];
        }
        println!(
            "epoch {epoch}: training loss {:.3}, held-out accuracy {:.1}% ({seen} images; chance {:.0}%)",
            loss_sum / batches.max(1) as f64,
            100.0 * correct as f64 / seen.max(1) as f64,
            100.0 / classes.max(1) as f64
        );
    }
    Ok(())
}
