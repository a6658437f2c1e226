//! Resize and normalize, per image: 500×375 and 250×188 (a 500×375 JPEG at DCT scale 1/2) →
//! 160×160 with each filter (a fresh resizer per call, one kept between calls, and one kept
//! but fed a new size each call), the same antialiased resize with fast_image_resize as the
//! baseline, the horizontal flip of a 160×160 sample, and writing a 64-image batch in each dtype and layout, on one thread and on two.
//! `cargo bench --bench transform`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fast_image_resize as fir;
use imagefeed::tools::bench as fuzzing;
use imagefeed::{Dtype, Layout, ResizeFilter};
use std::hint::black_box;

fn transform(c: &mut Criterion) {
    let photo = image::open(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/photos/photo_0.jpg"
    ))
    .expect("testdata/photos/photo_0.jpg")
    .to_rgb8();
    let src =
        image::imageops::resize(&photo, 500, 375, image::imageops::FilterType::Triangle).into_raw();
    // What a 500x375 JPEG decodes to at DCT scale 1/2: the usual input of the resize.
    let half =
        image::imageops::resize(&photo, 250, 188, image::imageops::FilterType::Triangle).into_raw();
    let mut out = vec![0u8; 160 * 160 * 3];
    let mut g = c.benchmark_group("resize");
    g.throughput(Throughput::Elements(1));
    for filter in [ResizeFilter::Bilinear, ResizeFilter::Antialiased] {
        for (name, px, w, h) in [("500x375", &src, 500, 375), ("250x188", &half, 250, 188)] {
            let id = BenchmarkId::new(format!("{filter:?}"), format!("{name}_to_160"));
            g.bench_function(id, |b| {
                b.iter(|| black_box(fuzzing::resize(black_box(px), w, h, 160, filter, &mut out)))
            });
        }
    }
    // The same sizes with a resizer kept between calls, as a decode thread's is: the filter
    // taps of a size already seen are reused (the rows above rebuild them every call, as for
    // a dataset whose images never share a size).
    for (name, px, w, h) in [
        ("500x375", &src, 500u32, 375u32),
        ("250x188", &half, 250, 188),
    ] {
        let id = BenchmarkId::new("Antialiased_same_size", format!("{name}_to_160"));
        let mut resizer = fuzzing::BenchResizer::new();
        g.bench_function(id, |b| {
            b.iter(|| {
                black_box(resizer.resize(
                    black_box(px),
                    w,
                    h,
                    160,
                    ResizeFilter::Antialiased,
                    &mut out,
                ))
            })
        });
    }
    // A kept resizer over sources of 16 sizes in turn (250x188 down to 235x173): more sizes
    // than it keeps taps for, so every call rebuilds both axes' taps in place, as on a
    // dataset whose images all differ in size. Against `Antialiased_same_size`, the cost of
    // building taps.
    {
        let id = BenchmarkId::new("Antialiased_new_sizes", "250x188_to_160");
        let mut resizer = fuzzing::BenchResizer::new();
        let mut i = 0u32;
        g.bench_function(id, |b| {
            b.iter(|| {
                i = (i + 1) % 16;
                let (w, h) = (250 - i, 188 - i);
                let px = &half[..(w * h * 3) as usize];
                black_box(resizer.resize(
                    black_box(px),
                    w,
                    h,
                    160,
                    ResizeFilter::Antialiased,
                    &mut out,
                ))
            })
        });
    }
    // The same antialiased resize with fast_image_resize (AVX2), which imagefeed used
    // before its own resampler: the side-by-side baseline.
    for (name, px, w, h) in [
        ("500x375", &src, 500u32, 375u32),
        ("250x188", &half, 250, 188),
    ] {
        let id = BenchmarkId::new("fast_image_resize", format!("{name}_to_160"));
        let mut resizer = fir::Resizer::new();
        let opts = fir::ResizeOptions::new()
            .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Bilinear));
        g.bench_function(id, |b| {
            b.iter(|| {
                let s = fir::images::ImageRef::new(w, h, black_box(px), fir::PixelType::U8x3)
                    .expect("source");
                let mut d =
                    fir::images::Image::from_slice_u8(160, 160, &mut out, fir::PixelType::U8x3)
                        .expect("destination");
                black_box(resizer.resize(&s, &mut d, &opts).is_ok())
            })
        });
    }
    g.finish();

    // The horizontal flip of a 160x160 sample (half the samples of a training epoch).
    let mut g = c.benchmark_group("flip");
    g.throughput(Throughput::Elements(1));
    let mut flipped = out.clone();
    g.bench_function("160x160", |b| {
        b.iter(|| fuzzing::flip_horizontal(black_box(&mut flipped), 160))
    });
    g.finish();

    let sample = out.clone();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let mut g = c.benchmark_group("normalize_batch64");
    g.throughput(Throughput::Elements(64));
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::U8] {
        for layout in [Layout::Nhwc, Layout::Nchw] {
            for (threads, p) in [("1t", None), ("2t", Some(&pool))] {
                let id = BenchmarkId::new(format!("{}_{layout:?}", dtype.name()), threads);
                g.bench_function(id, |b| {
                    b.iter(|| black_box(fuzzing::normalize_batch(&sample, 64, dtype, layout, p)))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, transform);
criterion_main!(benches);
