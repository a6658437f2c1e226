//! Decode alone, per image: libjpeg-turbo at each DCT scale (chosen by varying the target size
//! on the same 900×599 photograph), full size, and zune-jpeg.
//! `cargo bench --bench decode`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use imagefeed::fuzzing::BenchDecoder;
use std::hint::black_box;

fn decode(c: &mut Criterion) {
    let photo = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/photos/photo_0.jpg"
    ))
    .expect("testdata/photos/photo_0.jpg");
    let mut g = c.benchmark_group("decode_900x599_q85");
    g.throughput(Throughput::Elements(1));
    // The target size that makes the pipeline pick each scale for a 900x599 image.
    for (scale, size) in [("1/8", 70u32), ("1/4", 140), ("1/2", 280), ("1/1", 600)] {
        let mut d = BenchDecoder::new(size, true, false);
        assert!(d.decode(&photo).is_some());
        g.bench_function(BenchmarkId::new("turbojpeg", scale), |b| {
            b.iter(|| black_box(d.decode(black_box(&photo))))
        });
    }
    let mut d = BenchDecoder::new(160, false, true);
    g.bench_function(BenchmarkId::new("zune", "1/1"), |b| {
        b.iter(|| black_box(d.decode(black_box(&photo))))
    });
    let mut out = vec![0u8; 160 * 160 * 3];
    for (name, dct, zune) in [
        ("turbojpeg_dct", true, false),
        ("turbojpeg_full", false, false),
        ("zune", false, true),
    ] {
        let mut d = BenchDecoder::new(160, dct, zune);
        g.bench_function(BenchmarkId::new("decode_resize_160", name), |b| {
            b.iter(|| black_box(d.decode_resize(black_box(&photo), &mut out)))
        });
    }
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
