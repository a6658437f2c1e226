//! A folder with one sub-folder per class, like torchvision's `ImageFolder`: class names are
//! sorted and numbered 0..k. Skips broken files instead of failing, and lists them.
//!
//! `cargo run --release --example from_dir [DIR]` (default: `testdata/classes`).

use imagefeed::{Dtype, Layout, Loader, OnError, Source};

fn main() -> Result<(), imagefeed::Error> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "testdata/classes".into());
    let source = Source::from_dir(&dir)?;
    println!("classes: {:?}", source.class_names().unwrap_or_default());
    let loader = Loader::builder(source)
        .batch_size(8)
        .dtype(Dtype::F16) // half the batch memory of f32
        .layout(Layout::Nchw) // as PyTorch expects
        .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        .on_error(OnError::Skip { max: 100 })
        .build()?;
    for epoch in 0..2 {
        let mut images = 0;
        for batch in loader.epoch(epoch) {
            images += batch?.len();
        }
        let stats = loader.stats();
        println!("epoch {epoch}: {images} images, {} skipped", stats.skipped);
        for (path, reason) in &stats.skipped_samples {
            println!("  skipped {}: {reason}", path.display());
        }
    }
    Ok(())
}
