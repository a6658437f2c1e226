//! The epoch's order, per position: what computing it costs instead of holding it.
//! `cargo bench --bench shuffle_batch`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn order(c: &mut Criterion) {
    let mut g = c.benchmark_group("order");
    let n = 100_000u32;
    g.throughput(Throughput::Elements(u64::from(n)));
    g.bench_function(BenchmarkId::new("random", "whole"), |b| {
        b.iter(|| black_box(imagefeed::tools::bench::epoch_order(n, 0, 0, 7)))
    });
    for block in [1usize, 1000, 4096] {
        g.bench_function(BenchmarkId::new("streams_1000", block), |b| {
            b.iter(|| black_box(imagefeed::tools::bench::epoch_order(n, 1000, block, 7)))
        });
    }
    g.finish();
}

criterion_group!(benches, order);
criterion_main!(benches);
