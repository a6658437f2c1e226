//! Decode alone, per image: libjpeg-turbo at each DCT scale (chosen by varying the target size
//! on the same 900×599 photograph), full size, and zune-jpeg; and the training transforms:
//! random-resized-crop and the centre crop (crop-decoded) against the whole-image stretch, for
//! the same 160×160 output.
//! `cargo bench --bench decode`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use imagefeed::tools::bench::BenchDecoder;
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

/// One sample of each transform, cycling over 64 draws (64 random boxes) of the photograph:
/// what a decode thread does per image in a training or evaluation epoch.
fn transforms(c: &mut Criterion) {
    use imagefeed::Transform;
    let photo = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/photos/photo_0.jpg"
    ))
    .expect("testdata/photos/photo_0.jpg");
    let mut g = c.benchmark_group("transform_900x599_to_160");
    g.throughput(Throughput::Elements(1));
    let mut out = vec![0u8; 160 * 160 * 3];
    // `_whole_frame`: the same boxes (the same 64 draws), decoded as a whole frame at the
    // box's DCT scale and cut after: what decoding only the region saves.
    for (name, t, flip, regions) in [
        ("stretch", Transform::Stretch, 0.0, true),
        (
            "random_resized_crop_flip",
            Transform::random_resized_crop(),
            0.5,
            true,
        ),
        (
            "random_resized_crop_flip_whole_frame",
            Transform::random_resized_crop(),
            0.5,
            false,
        ),
        ("center_crop", Transform::center_crop(), 0.0, true),
        (
            "center_crop_whole_frame",
            Transform::center_crop(),
            0.0,
            false,
        ),
    ] {
        let mut d = BenchDecoder::new(160, true, false);
        d.set_transform(t, flip);
        d.set_crop_regions(regions);
        let mut i = 0u64;
        g.bench_function(BenchmarkId::new("decode_resize", name), |b| {
            b.iter(|| {
                i = (i + 1) % 64;
                black_box(d.decode_sample(black_box(&photo), 0, i, &mut out))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, decode, transforms);
criterion_main!(benches);
