//! The bounded shuffle buffer, per item (indices only: what it costs beyond the memory).
//! `cargo bench --bench shuffle_batch`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn shuffle(c: &mut Criterion) {
    let mut g = c.benchmark_group("shuffle_buffer");
    let n = 100_000u32;
    g.throughput(Throughput::Elements(u64::from(n)));
    for cap in [0usize, 1000, 8192] {
        g.bench_function(BenchmarkId::new("items", cap), |b| {
            b.iter(|| black_box(imagefeed::tools::bench::shuffle_buffer(n, cap, 7)))
        });
    }
    g.finish();
}

criterion_group!(benches, shuffle);
criterion_main!(benches);
