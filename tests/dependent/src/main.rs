//! Streams epochs of a folder of class folders (default: imagefeed's `testdata/classes`) through
//! imagefeed as a user's program would, and checks what it got:
//!
//! ```text
//! imagefeed-dependent [--expect patched|stock|zune] [DIR] [--epochs N]
//! ```
//!
//! It prints the decoder, the images, the rate and the memory budget, and fails if the decoder is
//! not the one `--expect` names or if an epoch yields no image.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use imagefeed::{Loader, Source};

fn main() -> ExitCode {
    let mut expect = None;
    let mut epochs = 1u64;
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/classes");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--expect" => expect = args.next(),
            "--epochs" => epochs = args.next().and_then(|n| n.parse().ok()).unwrap_or(1),
            _ => dir = PathBuf::from(a),
        }
    }
    let info = imagefeed::decoder_info();
    println!("decoder: {info}");
    let got = match (info.name, info.patched) {
        ("libjpeg-turbo", true) => "patched",
        ("libjpeg-turbo", false) => "stock",
        _ => "zune",
    };
    if let Some(want) = expect.as_deref() {
        if want != got {
            eprintln!("expected the {want} decoder, got {got} ({info})");
            return ExitCode::FAILURE;
        }
    }
    match run(&dir, epochs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(dir: &std::path::Path, epochs: u64) -> Result<(), Box<dyn std::error::Error>> {
    let loader = Loader::builder(Source::from_dir(dir)?)
        .batch_size(8)
        .seed(7)
        .build()?;
    println!("memory budget: {}", loader.memory_budget());
    for epoch in 0..epochs {
        let start = Instant::now();
        let (mut images, mut batches) = (0usize, 0usize);
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let pixels = batch.as_f32()?;
            if pixels.len() != batch.labels().len() * 160 * 160 * 3 {
                return Err("a batch's pixels do not match its labels".into());
            }
            images += batch.labels().len();
            batches += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        if images == 0 {
            return Err(format!("epoch {epoch} yielded no image").into());
        }
        println!(
            "epoch {epoch}: {images} images in {batches} batches, {:.0} images/s",
            images as f64 / secs
        );
    }
    Ok(())
}
