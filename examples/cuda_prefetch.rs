//! Batches delivered into GPU memory: pinned staging, asynchronous copies on the loader's own
//! stream, normalization on the GPU, and a training stream that waits for each batch without
//! blocking the CPU. Falls back to host batches (and says so) where there is no usable GPU.
//!
//! `cargo run --release --features cuda --example cuda_prefetch [LIST_OR_DIR]`
//! (default: `testdata/classes`).

use imagefeed::{Device, Layout, Loader, Source};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "testdata/classes".into());
    let loader = Loader::builder(Source::open(&path)?)
        .batch_size(8)
        .layout(Layout::Nchw)
        .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        .device(Device::Cuda(0))
        .fallback_to_host(true) // logs one warning and delivers host batches without a GPU
        .seed(42)
        .build()?;
    println!("delivering to {:?}", loader.device());
    let mut train_stream = None;
    for batch in loader.epoch(0) {
        let batch = batch?;
        match batch.cuda() {
            Some(gpu) => {
                // The training step's stream (here a new one; a framework would give its own).
                let stream = match &train_stream {
                    Some(s) => s,
                    None => train_stream.insert(gpu.context().new_stream()?),
                };
                // Queue the step after the batch's copy and normalization, on the GPU.
                gpu.wait_on(stream)?;
                let images = gpu.as_f32().expect("f32 is the default dtype");
                // ... launch kernels reading `images` (or `gpu.device_ptr()`) on `stream` ...
                let first = stream.clone_dtoh(&images.slice(..4))?;
                // The loader may reuse this memory once `stream` passes this point and the
                // batch is dropped.
                gpu.release_after(stream)?;
                println!(
                    "batch of {} {:?} {:?} at {:#x} on cuda:{}: first values {first:?}",
                    batch.len(),
                    gpu.shape(),
                    gpu.dtype(),
                    gpu.device_ptr(),
                    gpu.ordinal()
                );
            }
            None => {
                let pixels = batch.as_f32().expect("f32 is the default dtype");
                println!(
                    "host batch of {} {:?}: first values {:?}",
                    batch.len(),
                    batch.shape(),
                    &pixels[..4]
                );
            }
        }
    }
    let s = loader.stats();
    println!(
        "{} images at {:.0} images/s; host-to-device {:.1} GB/s while copying",
        s.images,
        s.images_per_sec(),
        s.h2d_gb_per_sec()
    );
    Ok(())
}
