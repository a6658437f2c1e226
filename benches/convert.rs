//! What a batch costs to turn into candle tensors on the CPU, against one `memcpy` of the same
//! batch: `to_candle` copies the images once (as `memcpy`), `into_candle` takes the batch's
//! buffers without a copy. `cargo bench --bench convert --features candle`
//! (burn's `ImageBatch::from_batch`: `cargo bench -p imagefeed-burn --bench convert`).
//!
//! A batch is 64 images of 160×160×3 in `f32` (19.7 MB) or `u8` (4.9 MB), from a loader over the
//! test photographs; making it (decoding) is outside the measured time.
//!
//! With `--features candle-cuda` on a GPU machine, the `candle_cuda` group does the same for a
//! `Device::Cuda` loader's batches against one device-to-device copy: `to_candle` copies once
//! on the GPU, `into_candle` wraps the batch's buffer (its cost is the slot's new buffer). Each
//! iteration waits for the GPU. Without a GPU the group prints why and measures nothing.

use std::hint::black_box;

use candle_core::Device;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use imagefeed::tools::bench::BatchFeed;
use imagefeed::Dtype;

fn convert(c: &mut Criterion) {
    let mut g = c.benchmark_group("candle_cpu");
    g.sample_size(30);
    for dtype in [Dtype::F32, Dtype::U8] {
        let mut feed = BatchFeed::photos(dtype).expect("a loader over the test photos");
        let batch = feed.next_batch().expect("a batch");
        g.throughput(Throughput::Bytes(batch.as_bytes().len() as u64));
        let name = format!("{dtype:?}").to_lowercase();
        // The baseline: one copy of the batch's bytes into a new buffer.
        g.bench_function(BenchmarkId::new("memcpy", &name), |b| {
            b.iter(|| black_box(batch.as_bytes().to_vec()))
        });
        g.bench_function(BenchmarkId::new("to_candle", &name), |b| {
            b.iter(|| black_box(batch.to_candle(&Device::Cpu).expect("tensors")))
        });
        g.bench_function(BenchmarkId::new("into_candle", &name), |b| {
            b.iter_batched(
                || feed.next_batch().expect("a batch"),
                |batch| black_box(batch.into_candle(&Device::Cpu).expect("tensors")),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

#[cfg(feature = "candle-cuda")]
fn convert_cuda(c: &mut Criterion) {
    if let Err(e) = imagefeed::tools::gpu::info() {
        println!("candle_cuda: skipped, no usable GPU ({e})");
        return;
    }
    let dev = Device::new_cuda(0).expect("candle's CUDA device 0");
    let Device::Cuda(cuda) = &dev else {
        unreachable!("new_cuda gives a CUDA device")
    };
    let stream = cuda.cuda_stream();
    let mut g = c.benchmark_group("candle_cuda");
    g.sample_size(30);
    for dtype in [Dtype::F32, Dtype::U8] {
        let mut feed = BatchFeed::photos_on(dtype, imagefeed::Device::Cuda(0))
            .expect("a GPU loader over the test photos");
        let batch = feed.next_batch().expect("a batch");
        let gpu = batch.cuda().expect("a device batch");
        gpu.synchronize().expect("the batch's copy");
        g.throughput(Throughput::Bytes(gpu.num_bytes() as u64));
        let name = format!("{dtype:?}").to_lowercase();
        // The baseline: one copy of the batch's bytes into a new device buffer.
        g.bench_function(BenchmarkId::new("dtod_copy", &name), |b| {
            b.iter(|| {
                let copy = stream.clone_dtod(&gpu.bytes()).expect("a device copy");
                stream.synchronize().expect("the copy");
                black_box(copy)
            })
        });
        g.bench_function(BenchmarkId::new("to_candle", &name), |b| {
            b.iter(|| {
                let t = batch.to_candle(&dev).expect("tensors");
                dev.synchronize().expect("the copy");
                black_box(t)
            })
        });
        g.bench_function(BenchmarkId::new("into_candle", &name), |b| {
            b.iter_batched(
                || feed.next_batch().expect("a batch"),
                |batch| {
                    let t = batch.into_candle(&dev).expect("tensors");
                    dev.synchronize().expect("the wait");
                    black_box(t)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

#[cfg(feature = "candle-cuda")]
criterion_group!(benches, convert, convert_cuda);
#[cfg(not(feature = "candle-cuda"))]
criterion_group!(benches, convert);
criterion_main!(benches);
