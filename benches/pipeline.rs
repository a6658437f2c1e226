//! The whole pipeline, images/s: a 256-image corpus from `imagefeed_testkit::corpus`, f32 160×160
//! batches of 64, with 1 and 2 decode threads, and from a warm on-disk cache.
//! `cargo bench --bench pipeline`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use imagefeed::{Loader, Source};
use std::hint::black_box;

const IMAGES: usize = 256;

fn run(loader: &Loader, epoch: u64) -> usize {
    loader.epoch(epoch).map(|b| b.expect("batch").len()).sum()
}

fn pipeline(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = imagefeed_testkit::corpus::generate(dir.path(), IMAGES, 0).expect("corpus");
    let source = Source::from_list_file(&corpus.list).expect("list");
    let mut g = c.benchmark_group("pipeline_f32_160");
    g.sample_size(10);
    g.throughput(Throughput::Elements(IMAGES as u64));
    for threads in [1usize, 2] {
        let loader = Loader::builder(source.clone())
            .decode_threads(threads)
            .build()
            .expect("loader");
        let mut epoch = 0;
        g.bench_function(BenchmarkId::new("decode", format!("{threads}t")), |b| {
            b.iter(|| {
                epoch += 1;
                black_box(run(&loader, epoch))
            })
        });
    }
    let cached = Loader::builder(source)
        .decode_threads(2)
        .cache(dir.path().join("bench.cache"))
        .build()
        .expect("loader");
    run(&cached, 0); // cold: writes the cache
    let mut epoch = 0;
    g.bench_function(BenchmarkId::new("cached", "2t"), |b| {
        b.iter(|| {
            epoch += 1;
            black_box(run(&cached, epoch))
        })
    });
    g.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
