//! The smallest use: stream a file list or a class folder as batches of 160×160 f32 images.
//!
//! `cargo run --release --example basic [LIST_OR_DIR]` (default: `testdata/classes`).

use imagefeed::{Loader, Source};

fn main() -> Result<(), imagefeed::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "testdata/classes".into());
    let loader = Loader::builder(Source::open(&path)?)
        .batch_size(4)
        .seed(42)
        .build()?;
    println!(
        "{} samples; memory budget {}",
        loader.len(),
        loader.memory_budget()
    );
    for batch in loader.epoch(0) {
        let batch = batch?;
        let pixels = batch.as_f32().expect("f32 is the default dtype");
        let mean = pixels.iter().sum::<f32>() / pixels.len() as f32;
        println!(
            "batch of {} {:?}: labels {:?}, mean pixel {mean:.3}",
            batch.len(),
            batch.shape(),
            batch.labels()
        );
    }
    println!("{:?}", loader.stats());
    Ok(())
}
