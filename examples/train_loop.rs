//! Feeds imagefeed batches into a small training loop in plain Rust: a softmax (linear)
//! classifier on 32×32 images of the 10-class corpus that `imagefeed corpus` writes. The loss
//! goes down epoch after epoch while the loader streams from disk with bounded memory.
//!
//! `cargo run --release --example train_loop [LIST_OR_DIR]` (default: a 1,000-image corpus
//! generated into a temporary folder).

use imagefeed::{Loader, Source};

const CLASSES: usize = imagefeed_testkit::corpus::CLASSES as usize;
const SIZE: u32 = 32;
const FEATURES: usize = (SIZE * SIZE * 3) as usize;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let list = match std::env::args().nth(1) {
        Some(p) => p.into(),
        None => imagefeed_testkit::corpus::generate(tmp.path(), 1000, 1)?.list,
    };
    let loader = Loader::builder(Source::open(&list)?)
        .image_size(SIZE)
        .batch_size(32)
        .normalize([0.5; 3], [0.25; 3])
        .seed(7)
        .build()?;
    let mut w = vec![0f32; CLASSES * FEATURES];
    let mut b = [0f32; CLASSES];
    let lr = 0.002f32;
    for epoch in 0..5 {
        let (mut loss_sum, mut correct, mut seen) = (0f64, 0usize, 0usize);
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let x = batch.as_f32()?;
            let mut grad_w = vec![0f32; CLASSES * FEATURES];
            let mut grad_b = [0f32; CLASSES];
            for (xi, &label) in x.chunks_exact(FEATURES).zip(batch.labels()) {
                let mut logits = [0f32; CLASSES];
                for (c, l) in logits.iter_mut().enumerate() {
                    *l = b[c]
                        + w[c * FEATURES..(c + 1) * FEATURES]
                            .iter()
                            .zip(xi)
                            .map(|(a, v)| a * v)
                            .sum::<f32>();
                }
                let max = logits.iter().cloned().fold(f32::MIN, f32::max);
                let exp: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
                let z: f32 = exp.iter().sum();
                let label = label as usize;
                loss_sum += f64::from(-(exp[label] / z).ln());
                let predicted = (0..CLASSES)
                    .max_by(|&i, &j| logits[i].total_cmp(&logits[j]))
                    .unwrap_or(0);
                correct += usize::from(predicted == label);
                seen += 1;
                for c in 0..CLASSES {
                    let g = exp[c] / z - if c == label { 1.0 } else { 0.0 };
                    grad_b[c] += g;
                    for (gw, v) in grad_w[c * FEATURES..(c + 1) * FEATURES].iter_mut().zip(xi) {
                        *gw += g * v;
                    }
                }
            }
            let scale = lr / batch.len() as f32;
            w.iter_mut()
                .zip(&grad_w)
                .for_each(|(wi, g)| *wi -= scale * g);
            b.iter_mut()
                .zip(&grad_b)
                .for_each(|(bi, g)| *bi -= scale * g);
        }
        println!(
            "epoch {epoch}: loss {:.3}, train accuracy {:.1}% ({seen} images, peak RSS {:.0} MB)",
            loss_sum / seen.max(1) as f64,
            100.0 * correct as f64 / seen.max(1) as f64,
            imagefeed_testkit::procinfo::peak_rss_bytes().unwrap_or(0) as f64 / 1e6
        );
    }
    Ok(())
}
