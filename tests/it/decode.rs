//! Decode correctness: the loader's 160×160 `u8` output against Pillow's references
//! (`testdata/reference/`, see `testdata/README.md`), EXIF orientation, every odd-but-valid
//! file, the two JPEG decoders, and DCT-scaled decoding.

use std::path::Path;

use imagefeed::{Dtype, JpegDecoder, Loader};

use crate::common::{self, mean_abs_diff, psnr};

/// Golden tolerances, set from what the default decoder (libjpeg-turbo, DCT-scaled where the
/// output still covers 160×160, fast_image_resize bilinear) achieves with some margin. The
/// measured figures are printed by the tests.
const MAX_MEAN_ABS_DIFF: f64 = 3.0;
const MIN_PSNR_DB: f64 = 30.0;

/// The loader's default output for one file: 160×160 RGB8.
fn decode_160(path: &Path) -> Vec<u8> {
    let px = common::load_one(path, |b| b)
        .unwrap_or_else(|e| panic!("{} does not decode: {e}", path.display()));
    assert_eq!(px.len(), 160 * 160 * 3);
    px
}

#[test]
fn golden_references_match_pillow() {
    let cases = [
        ("photos/photo_0.jpg", "photo_0_160.png"),
        ("valid/progressive.jpg", "progressive_160.png"),
        ("valid/gray.jpg", "gray_160.png"),
        ("valid/cmyk.jpg", "cmyk_160.png"),
        ("valid/s444.jpg", "s444_160.png"),
        ("valid/orient_6.jpg", "orient_6_160.png"),
    ];
    let mut report = Vec::new();
    for (input, reference) in cases {
        let (w, h, want) = common::read_png_rgb(&common::testdata(&format!("reference/{reference}")));
        assert_eq!((w, h), (160, 160));
        let got = decode_160(&common::testdata(input));
        let (mad, db) = (mean_abs_diff(&got, &want), psnr(&got, &want));
        // Without DCT scaling: the full decode, as Pillow does it.
        let full = common::load_one(&common::testdata(input), |b| b.dct_scaling(false)).unwrap();
        let (mad_full, db_full) = (mean_abs_diff(&full, &want), psnr(&full, &want));
        report.push(format!(
            "{input}: default mean abs diff {mad:.3}, PSNR {db:.2} dB; without DCT scaling {mad_full:.3}, {db_full:.2} dB"
        ));
        for (what, m, p) in [("default", mad, db), ("dct_scaling(false)", mad_full, db_full)] {
            assert!(
                m <= MAX_MEAN_ABS_DIFF && p >= MIN_PSNR_DB,
                "{input} ({what}) vs reference/{reference}: mean abs diff {m:.3}, PSNR {p:.2} dB"
            );
        }
    }
    println!("{}", report.join("\n"));
}

#[test]
fn exif_orientations_all_show_the_upright_image() {
    // The upright image through the same resize (a PNG has no orientation to apply).
    let upright = decode_160(&common::testdata("valid/orient_upright.png"));
    let (_, _, reference) = common::read_png_rgb(&common::testdata("reference/orient_6_160.png"));
    let mut report = Vec::new();
    for n in 1..=8 {
        let path = common::testdata(&format!("valid/orient_{n}.jpg"));
        let got = decode_160(&path);
        let (mad, db) = (mean_abs_diff(&got, &upright), psnr(&got, &upright));
        report.push(format!("orient_{n}: mean abs diff {mad:.3}, PSNR {db:.2} dB"));
        assert!(
            mad <= MAX_MEAN_ABS_DIFF && db >= MIN_PSNR_DB,
            "orient_{n}.jpg vs orient_upright.png: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        );
        // The rotation must be undone, not just the size: the Pillow reference of orient_6
        // agrees with every orientation.
        assert!(mean_abs_diff(&got, &reference) <= MAX_MEAN_ABS_DIFF, "orient_{n}");
    }
    println!("{}", report.join("\n"));
    // Without applying the tag, a rotated file shows its stored (rotated) pixels.
    for n in [3, 6, 8] {
        let path = common::testdata(&format!("valid/orient_{n}.jpg"));
        let raw = common::load_one(&path, |b| b.apply_exif_orientation(false)).unwrap();
        let mad = mean_abs_diff(&raw, &upright);
        assert!(
            mad > 15.0,
            "orient_{n}.jpg with apply_exif_orientation(false) still looks upright ({mad:.3})"
        );
    }
    // Orientation 1 and 2..8 also hold with a non-square output (axes swapped for 5..8).
    let wide_upright = common::load_one(&common::testdata("valid/orient_upright.png"), |b| {
        b.image_size_hw(40, 90)
    })
    .unwrap();
    for n in [1, 5, 6, 7, 8] {
        let path = common::testdata(&format!("valid/orient_{n}.jpg"));
        let got = common::load_one(&path, |b| b.image_size_hw(40, 90)).unwrap();
        let mad = mean_abs_diff(&got, &wide_upright);
        assert!(mad <= MAX_MEAN_ABS_DIFF, "orient_{n} at 40x90: {mad:.3}");
    }
}

/// Every file of `testdata/valid/` with its stored size.
const VALID: [&str; 23] = [
    "baseline_420.jpg",
    "s422.jpg",
    "s444.jpg",
    "restart.jpg",
    "progressive.jpg",
    "gray.jpg",
    "cmyk.jpg",
    "ycck.jpg",
    "icc.jpg",
    "exif.jpg",
    "tiny_1x1.jpg",
    "odd_7x5.jpg",
    "wide_1200x40.jpg",
    "rgb.png",
    "rgba.png",
    "gray.png",
    "orient_upright.png",
    "orient_1.jpg",
    "orient_2.jpg",
    "orient_3.jpg",
    "orient_4.jpg",
    "orient_5.jpg",
    "orient_6.jpg",
];

fn channel_spread(px: &[u8]) -> u8 {
    px.iter().max().unwrap() - px.iter().min().unwrap()
}

#[test]
fn every_valid_file_decodes() {
    let dir = common::testdata("valid");
    let n_files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(n_files, VALID.len() + 2, "a file of testdata/valid/ is not listed here");
    for name in VALID {
        let px = decode_160(&dir.join(name));
        match name {
            "tiny_1x1.jpg" => {
                // One pixel stretched: every output pixel is that pixel.
                assert!(px.chunks_exact(3).all(|p| p == &px[..3]), "{name}");
            }
            "gray.jpg" | "gray.png" => {
                assert!(px.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]), "{name}");
                assert!(channel_spread(&px) > 100, "{name} is flat");
            }
            _ => assert!(channel_spread(&px) > 50, "{name} decodes to a flat image"),
        }
    }
    // Both CMYK flavours decode to the same colours (Pillow: mean abs diff 2.1).
    let cmyk = decode_160(&dir.join("cmyk.jpg"));
    let ycck = decode_160(&dir.join("ycck.jpg"));
    let mad = mean_abs_diff(&cmyk, &ycck);
    assert!(mad < 4.0, "cmyk vs ycck: {mad:.3}");
    // The same crop in three subsamplings and with restart markers.
    let base = decode_160(&dir.join("baseline_420.jpg"));
    for other in ["s422.jpg", "s444.jpg", "restart.jpg"] {
        let mad = mean_abs_diff(&base, &decode_160(&dir.join(other)));
        assert!(mad < MAX_MEAN_ABS_DIFF, "baseline_420 vs {other}: {mad:.3}");
    }
}

#[test]
fn rgba_and_gray_png_channels() {
    // RGBA drops alpha (no premultiplication): the fully transparent corner keeps its colour.
    let (w, h, stored) = {
        let img = image::open(common::testdata("valid/rgba.png")).unwrap().to_rgba8();
        (img.width(), img.height(), img.into_raw())
    };
    assert_eq!((w, h), (256, 200));
    assert_eq!(stored[3], 0, "the corner of rgba.png is transparent");
    let got = common::load_one(&common::testdata("valid/rgba.png"), |b| b.image_size_hw(200, 256))
        .unwrap();
    let rgb: Vec<u8> = stored
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    assert_eq!(got, rgb, "a same-size RGBA PNG is not its RGB channels");
}

#[test]
fn zune_and_default_decoders_agree() {
    let dir = common::testdata("valid");
    let mut report = Vec::new();
    for name in VALID.iter().filter(|n| n.ends_with(".jpg")) {
        let p = dir.join(name);
        let default = decode_160(&p);
        let zune = common::load_one(&p, |b| b.jpeg_decoder(JpegDecoder::Zune))
            .unwrap_or_else(|e| panic!("zune-jpeg fails on {name}: {e}"));
        let turbo_full = common::load_one(&p, |b| {
            b.jpeg_decoder(JpegDecoder::TurboJpeg).dct_scaling(false)
        })
        .unwrap();
        let (mad, db) = (mean_abs_diff(&zune, &default), psnr(&zune, &default));
        let mad_full = mean_abs_diff(&zune, &turbo_full);
        report.push(format!(
            "{name}: zune vs default {mad:.3} ({db:.1} dB); vs unscaled libjpeg-turbo {mad_full:.3}"
        ));
        assert!(
            mad <= MAX_MEAN_ABS_DIFF && db >= MIN_PSNR_DB,
            "{name}: zune vs default: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        );
        assert!(mad_full <= MAX_MEAN_ABS_DIFF, "{name}: zune vs unscaled turbo {mad_full:.3}");
    }
    println!("{}", report.join("\n"));
}

#[test]
fn dct_scaling_keeps_psnr_on_a_corpus() {
    let source = common::subset(&common::corpus_source(), 50);
    let run = |dct: bool| {
        let loader = Loader::builder(source.clone())
            .batch_size(10)
            .shuffle(false)
            .dtype(Dtype::U8)
            .dct_scaling(dct)
            .build()
            .unwrap();
        common::collect_ok(loader.epoch(0))
    };
    let (scaled, full) = (run(true), run(false));
    let sample = 160 * 160 * 3;
    let mut values = Vec::new();
    for (a, b) in scaled.iter().zip(&full) {
        assert_eq!(a.indices(), b.indices());
        let (a, b) = (a.as_u8().unwrap(), b.as_u8().unwrap());
        for k in 0..a.len() / sample {
            values.push(psnr(&a[k * sample..(k + 1) * sample], &b[k * sample..(k + 1) * sample]));
            println!("DIAG {} {:.2}", source.path(values.len() - 1).unwrap().display(), values.last().unwrap());
        }
    }
    assert_eq!(values.len(), 50);
    // Identical images (no scale applies) count as 99 dB rather than infinity in the mean.
    let finite: Vec<f64> = values.iter().map(|v| v.min(99.0)).collect();
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let scaled_count = values.iter().filter(|v| v.is_finite()).count();
    println!(
        "DCT scaling vs full decode over 50 images: mean PSNR {mean:.2} dB, min {min:.2} dB, {scaled_count} images scaled"
    );
    assert!(scaled_count >= 25, "DCT scaling applied to only {scaled_count} of 50 images");
    assert!(mean >= 38.0, "mean PSNR {mean:.2} dB");
    assert!(min >= 32.0, "min PSNR {min:.2} dB");
}

#[test]
fn turbojpeg_decoder_is_available_by_default() {
    let p = common::testdata("valid/baseline_420.jpg");
    let a = common::load_one(&p, |b| b.jpeg_decoder(JpegDecoder::TurboJpeg)).unwrap();
    assert_eq!(a, decode_160(&p), "Auto is not libjpeg-turbo in a default build");
}
