//! What `ImageBatch::from_batch` costs on burn's ndarray backend, against one `memcpy` of the
//! same batch: `f32` batches become tensors without a copy (the batch's buffer is taken), `u8`
//! batches are converted to the backend's float type (one pass). `cargo bench -p imagefeed-burn
//! --bench convert`
//!
//! A batch is 64 images of 160×160×3 in `f32` (19.7 MB) or `u8` (4.9 MB), from a loader over the
//! test photographs; making it (decoding) is outside the measured time.

use std::hint::black_box;

use burn::backend::NdArray;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use imagefeed::tools::bench::BatchFeed;
use imagefeed::Dtype;
use imagefeed_burn::ImageBatch;

fn convert(c: &mut Criterion) {
    let mut g = c.benchmark_group("burn_ndarray");
    g.sample_size(30);
    let device = Default::default();
    for dtype in [Dtype::F32, Dtype::U8] {
        let mut feed = BatchFeed::photos(dtype).expect("a loader over the test photos");
        let batch = feed.next_batch().expect("a batch");
        g.throughput(Throughput::Bytes(batch.as_bytes().len() as u64));
        let name = format!("{dtype:?}").to_lowercase();
        // The baseline: one copy of the batch's bytes into a new buffer.
        g.bench_function(BenchmarkId::new("memcpy", &name), |b| {
            b.iter(|| black_box(batch.as_bytes().to_vec()))
        });
        g.bench_function(BenchmarkId::new("from_batch", &name), |b| {
            b.iter_batched(
                || feed.next_batch().expect("a batch"),
                |batch| {
                    black_box(ImageBatch::<NdArray>::from_batch(batch, &device).expect("tensors"))
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, convert);
criterion_main!(benches);
