//! A contrastive image–caption step (CLIP-style) in candle, on batches of images with their
//! captions from imagefeed: a small convolutional image encoder and a bag-of-words text encoder
//! (captions tokenized by words hashed into 1,024 buckets: no tokenizer to download), both
//! projected to 64 dimensions, trained with the symmetric cross-entropy of the batch's
//! image-caption similarities. Prints the loss and the held-out image-to-caption top-1 accuracy
//! within a batch per epoch (chance is one in the batch size).
//!
//! `cargo run --release --features candle --example candle_clip [DATASET] [--field NAME]
//! [--epochs N] [--smoke]`
//!
//! DATASET is any source with a caption per image: tar shards with `KEY.txt` (img2dataset's
//! layout; `--field txt`, the default), parquet with a caption column, TFRecord with a bytes
//! feature, or a TSV list with a `path` header and a caption column. Without one, tar shards of a
//! generated 10-class corpus are written with a caption per image, which names its class in one
//! of several phrasings. `--smoke`: one epoch of two batches, as CI runs it.

use candle_core::{DType, Device, Tensor, Var, D};
use imagefeed::{Field, Layout, Loader, Source, Transform};

const SIZE: u32 = 32;
const BATCH: usize = 32;
/// Words are hashed into this many buckets (the text encoder's vocabulary).
const VOCAB: usize = 1024;
/// The shared embedding's width.
const DIM: usize = 64;

/// The two encoders' weights, each a candle `Var` that backpropagation reaches.
struct Clip {
    conv1: Var,
    conv2: Var,
    image_proj: Var,
    words: Var,
    text_proj: Var,
}

impl Clip {
    fn new(device: &Device) -> candle_core::Result<Clip> {
        let init = |shape: &[usize], fan_in: usize| {
            Var::randn(0f32, (2.0 / fan_in as f64).sqrt() as f32, shape, device)
        };
        Ok(Clip {
            conv1: init(&[16, 3, 3, 3], 27)?,
            conv2: init(&[32, 16, 3, 3], 144)?,
            image_proj: init(&[32 * 8 * 8, DIM], 32 * 8 * 8)?,
            words: init(&[VOCAB, DIM], DIM)?,
            text_proj: init(&[DIM, DIM], DIM)?,
        })
    }

    fn vars(&self) -> [&Var; 5] {
        [
            &self.conv1,
            &self.conv2,
            &self.image_proj,
            &self.words,
            &self.text_proj,
        ]
    }

    /// Unit-length embeddings of NCHW images.
    fn images(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.conv2d(&self.conv1, 1, 1, 1, 1)?.relu()?.max_pool2d(2)?;
        let x = x.conv2d(&self.conv2, 1, 1, 1, 1)?.relu()?.max_pool2d(2)?;
        unit(&x.flatten_from(1)?.matmul(&self.image_proj)?)
    }

    /// Unit-length embeddings of captions given as bags of words (`[n, VOCAB]`, rows summing
    /// to 1): the mean of their words' vectors, projected.
    fn texts(&self, bags: &Tensor) -> candle_core::Result<Tensor> {
        unit(&bags.matmul(&self.words)?.tanh()?.matmul(&self.text_proj)?)
    }
}

fn unit(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-6, f64::MAX)?;
    x.broadcast_div(&norm)
}

/// A caption as a bag of words: lower-cased words hashed (FNV-1a) into `VOCAB` buckets.
fn bag(caption: &str, row: &mut [f32]) {
    let words: Vec<String> = caption
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    for w in &words {
        let h = w.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        row[(h % VOCAB as u64) as usize] += 1.0 / words.len() as f32;
    }
}

/// Mean cross-entropy of `logits` (`[n, n]`) against the diagonal, both ways.
fn contrastive(logits: &Tensor) -> candle_core::Result<Tensor> {
    let n = logits.dims()[0];
    let diagonal = Tensor::arange(0u32, n as u32, logits.device())?;
    let one_way = |l: &Tensor| -> candle_core::Result<Tensor> {
        let max = l.max_keepdim(D::Minus1)?;
        let shifted = l.broadcast_sub(&max)?;
        let log_z = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
        let log_p = shifted.broadcast_sub(&log_z)?;
        log_p.gather(&diagonal.unsqueeze(1)?, 1)?.mean_all()?.neg()
    };
    (one_way(logits)? + one_way(&logits.t()?)?)? / 2.0
}

/// A batch's captions as a `[n, VOCAB]` tensor of bags of words. A sample without a caption is
/// an empty bag.
fn captions(
    batch: &imagefeed::Batch,
    field: &str,
    device: &Device,
) -> Result<Tensor, Box<dyn std::error::Error>> {
    let column = batch
        .field(field)
        .ok_or_else(|| format!("the loader delivers no field `{field}`"))?;
    let mut bags = vec![0f32; batch.len() * VOCAB];
    for (i, row) in bags.chunks_mut(VOCAB).enumerate() {
        // Text, or bytes holding UTF-8 (a TFRecord bytes feature).
        let text = column.text(i).map(str::to_string).or_else(|| {
            column
                .bytes(i)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        });
        bag(text.as_deref().unwrap_or(""), row);
    }
    Ok(Tensor::from_vec(bags, (batch.len(), VOCAB), device)?)
}

/// Tar shards of a generated corpus, each image with a caption naming its class.
fn captioned_corpus(
    dir: &std::path::Path,
    count: usize,
) -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    const NAMES: [&str; 10] = [
        "apple", "boat", "cloud", "desert", "engine", "forest", "garden", "harbor", "island",
        "jungle",
    ];
    const PHRASES: [&str; 4] = [
        "a photo of a {}",
        "the {} at noon",
        "{} seen from afar",
        "my {}",
    ];
    let corpus = imagefeed_testkit::corpus::generate(&dir.join("images"), count, 1)?;
    let images = Source::open(&corpus.list)?;
    let mut tsv = String::from("path\tlabel\ttxt\n");
    for i in 0..images.len() {
        let (path, label) = (
            images.path(i).ok_or("no path")?,
            images.label(i).ok_or("no label")?,
        );
        let name = NAMES[label as usize % NAMES.len()];
        let caption = PHRASES[i % PHRASES.len()].replace("{}", name);
        tsv.push_str(&format!("{}\t{label}\t{caption}\n", path.display()));
    }
    let list = dir.join("captions.tsv");
    std::fs::write(&list, tsv)?;
    let shards = dir.join("shards");
    imagefeed::write_shards_with(
        &Source::open(&list)?,
        &shards,
        50,
        Some(0),
        &[Field::new("txt")],
    )?;
    Ok(shards)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let epochs: u64 = match value("--epochs") {
        Some(n) => n.parse()?,
        None if smoke => 1,
        None => 10,
    };
    let field = value("--field").cloned().unwrap_or_else(|| "txt".into());
    let tmp = tempfile::tempdir()?;
    let dataset = match args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || !args[i - 1].starts_with("--")))
    {
        Some((_, p)) => p.into(),
        None => captioned_corpus(tmp.path(), if smoke { 96 } else { 2000 })?,
    };
    // A tenth held out: a share of every class, or whole shards.
    let (train, held_out) = Source::open(&dataset)?.split(0.1, 7)?;
    let common = |source: Source| {
        Loader::builder(source)
            .image_size(SIZE)
            .batch_size(BATCH)
            .layout(Layout::Nchw)
            .normalize([0.5; 3], [0.25; 3])
            .field(field.as_str())
            .seed(7)
    };
    let train = common(train)
        .transform(Transform::random_resized_crop())
        .drop_remainder(true)
        .build()?;
    let held_out = common(held_out)
        .transform(Transform::center_crop())
        .shuffle(false)
        .build()?;
    let device = Device::Cpu;
    let clip = Clip::new(&device)?;
    let (lr, temperature) = (0.1, 10.0);
    for epoch in 0..epochs {
        let (mut loss_sum, mut batches) = (0f64, 0usize);
        for batch in train.epoch(epoch).take(if smoke { 2 } else { usize::MAX }) {
            let batch = batch?;
            let texts = captions(&batch, &field, &device)?;
            let (images, _) = batch.into_candle(&device)?;
            let logits = (clip.images(&images)?.matmul(&clip.texts(&texts)?.t()?)? * temperature)?;
            let loss = contrastive(&logits)?;
            let grads = loss.backward()?;
            for var in clip.vars() {
                if let Some(g) = grads.get(var) {
                    var.set(&var.as_tensor().sub(&(g * lr)?)?)?;
                }
            }
            loss_sum += f64::from(loss.to_scalar::<f32>()?);
            batches += 1;
        }
        // Held out: does each image pick its own caption among the batch's?
        let (mut right, mut seen, mut chance) = (0usize, 0usize, 0f64);
        for batch in held_out.epoch(0) {
            let batch = batch?;
            let texts = captions(&batch, &field, &device)?;
            let (images, _) = batch.to_candle(&device)?;
            let n = batch.len();
            let picked = clip
                .images(&images)?
                .matmul(&clip.texts(&texts)?.t()?)?
                .argmax(D::Minus1)?;
            let own = Tensor::arange(0u32, n as u32, &device)?;
            right += picked
                .eq(&own)?
                .to_dtype(DType::U32)?
                .sum_all()?
                .to_scalar::<u32>()? as usize;
            seen += n;
            chance += 1.0; // one in n for each of the n images
        }
        println!(
            "epoch {epoch}: contrastive loss {:.3}, held-out image-to-caption top-1 {:.1}% ({seen} images; chance {:.1}%)",
            loss_sum / batches.max(1) as f64,
            100.0 * right as f64 / seen.max(1) as f64,
            100.0 * chance / seen.max(1) as f64
        );
    }
    Ok(())
}
