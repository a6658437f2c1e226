//! Decode correctness: the loader's 160×160 `u8` output against Pillow's references
//! (`testdata/reference/`, see `testdata/README.md`), EXIF orientation, every odd-but-valid
//! file, the two JPEG decoders, and DCT-scaled decoding.

use std::path::Path;

#[cfg(feature = "turbojpeg")]
use imagefeed::{Dtype, Loader};
use imagefeed::{JpegDecoder, ResizeMode};

use crate::common::{self, mean_abs_diff, psnr};

/// Tolerances against Pillow for the default output (libjpeg-turbo, DCT-scaled where the
/// scaled image still covers 160×160, then the loader's antialiased resampler). Measured: mean abs
/// diff at most 1.07 and PSNR at least 42.1 dB (progressive.jpg, decoded at 1/2); the tests
/// print the figures.
const SCALED_MAX_MAD: f64 = 2.0;
const SCALED_MIN_PSNR: f64 = 38.0;
/// Tolerances for a full-size decode, which is what Pillow does: measured at most 0.20 and at
/// least 55.1 dB against the references, and at most 0.31 between zune-jpeg and libjpeg-turbo.
const FULL_MAX_MAD: f64 = 0.5;
const FULL_MIN_PSNR: f64 = 50.0;

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
        let (w, h, want) =
            common::read_png_rgb(&common::testdata(&format!("reference/{reference}")));
        assert_eq!((w, h), (160, 160));
        let got = decode_160(&common::testdata(input));
        let (mad, db) = (mean_abs_diff(&got, &want), psnr(&got, &want));
        // Without DCT scaling: the full decode, as Pillow does it.
        let full = common::load_one(&common::testdata(input), |b| b.dct_scaling(false)).unwrap();
        let (mad_full, db_full) = (mean_abs_diff(&full, &want), psnr(&full, &want));
        report.push(format!(
            "{input}: default mean abs diff {mad:.3}, PSNR {db:.2} dB; without DCT scaling {mad_full:.3}, {db_full:.2} dB"
        ));
        assert!(
            mad <= SCALED_MAX_MAD && db >= SCALED_MIN_PSNR,
            "{input} vs reference/{reference}: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        );
        assert!(
            mad_full <= FULL_MAX_MAD && db_full >= FULL_MIN_PSNR,
            "{input} (dct_scaling(false)) vs reference/{reference}: mean abs diff {mad_full:.3}, PSNR {db_full:.2} dB"
        );
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
        report.push(format!(
            "orient_{n}: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        ));
        assert!(
            mad <= SCALED_MAX_MAD && db >= SCALED_MIN_PSNR,
            "orient_{n}.jpg vs orient_upright.png: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        );
        // The rotation must be undone, not just the size: the Pillow reference of orient_6
        // agrees with every orientation.
        let mad = mean_abs_diff(&got, &reference);
        assert!(mad <= SCALED_MAX_MAD, "orient_{n} vs Pillow: {mad:.3}");
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
    for mode in [ResizeMode::Stretch, ResizeMode::ShorterSideCenterCrop] {
        let wide_upright =
            common::load_one(&common::testdata("valid/orient_upright.png"), move |b| {
                b.image_size_hw(40, 90).transform(mode.into())
            })
            .unwrap();
        for n in [1, 3, 5, 6, 7, 8] {
            let path = common::testdata(&format!("valid/orient_{n}.jpg"));
            let got = common::load_one(&path, move |b| {
                b.image_size_hw(40, 90).transform(mode.into())
            })
            .unwrap();
            let mad = mean_abs_diff(&got, &wide_upright);
            assert!(
                mad <= SCALED_MAX_MAD,
                "orient_{n} at 40x90, {mode:?}: {mad:.3}"
            );
        }
    }
}

/// `png` with an `eXIf` chunk holding EXIF orientation `o` inserted after its header.
fn png_with_orientation(png: &[u8], o: u8) -> Vec<u8> {
    let tiff = [
        b'I', b'I', 42, 0, 8, 0, 0, 0, // little-endian TIFF, IFD0 at 8
        1, 0, // one entry
        0x12, 0x01, 3, 0, 1, 0, 0, 0, o, 0, 0, 0, // Orientation, SHORT, 1 value
        0, 0, 0, 0, // no next IFD
    ];
    let mut chunk = (tiff.len() as u32).to_be_bytes().to_vec();
    chunk.extend_from_slice(b"eXIf");
    chunk.extend_from_slice(&tiff);
    let crc = common::crc32(&chunk[4..]);
    chunk.extend_from_slice(&crc.to_be_bytes());
    let ihdr_end = 8 + 4 + 4 + 13 + 4;
    [&png[..ihdr_end], &chunk[..], &png[ihdr_end..]].concat()
}

#[test]
fn png_exif_orientation_is_applied() {
    let (w, h, upright) = common::read_png_rgb(&common::testdata("valid/orient_upright.png"));
    assert_eq!((w, h), (240, 160));
    // Orientation 6 displays the stored pixels turned 90° clockwise, so store them turned 90°
    // counter-clockwise: stored (x, y) = upright (w - 1 - y, x), 160 wide and 240 tall.
    let (sw, sh) = (h as usize, w as usize);
    let mut stored = vec![0u8; upright.len()];
    for y in 0..sh {
        for x in 0..sw {
            let from = (x * w as usize + (w as usize - 1 - y)) * 3;
            stored[(y * sw + x) * 3..][..3].copy_from_slice(&upright[from..from + 3]);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rotated.png");
    let png = common::encode_png(&stored, sw as u32, sh as u32);
    std::fs::write(&p, png_with_orientation(&png, 6)).unwrap();
    let want = decode_160(&common::testdata("valid/orient_upright.png"));
    let got = decode_160(&p);
    let mad = mean_abs_diff(&got, &want);
    println!("PNG eXIf orientation 6: mean abs diff {mad:.3}");
    assert!(mad < 0.5, "PNG eXIf orientation: {mad:.3}");
    let raw = common::load_one(&p, |b| b.apply_exif_orientation(false)).unwrap();
    assert!(
        mean_abs_diff(&raw, &want) > 15.0,
        "apply_exif_orientation(false) rotated it"
    );
}

/// Every file of `testdata/valid/`.
const VALID: [&str; 29] = [
    "baseline_420.jpg",
    "dqt_dc255.jpg",
    "noninterleaved.jpg",
    "progressive_sa.jpg",
    "progressive_restart.jpg",
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
    "orient_7.jpg",
    "orient_8.jpg",
];

fn channel_spread(px: &[u8]) -> u8 {
    px.iter().max().unwrap() - px.iter().min().unwrap()
}

#[test]
fn every_valid_file_decodes() {
    let dir = common::testdata("valid");
    let n_files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        n_files,
        VALID.len(),
        "a file of testdata/valid/ is not listed here"
    );
    for name in VALID {
        if name == "noninterleaved.jpg" && !cfg!(feature = "turbojpeg") {
            continue; // zune-jpeg refuses it: see the test below
        }
        let px = decode_160(&dir.join(name));
        match name {
            "tiny_1x1.jpg" => {
                // One pixel stretched: every output pixel is that pixel.
                assert!(px.chunks_exact(3).all(|p| p == &px[..3]), "{name}");
            }
            "gray.jpg" | "gray.png" => {
                assert!(
                    px.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]),
                    "{name}"
                );
                assert!(channel_spread(&px) > 100, "{name} is flat");
            }
            _ => assert!(channel_spread(&px) > 50, "{name} decodes to a flat image"),
        }
    }
    // Both CMYK flavours decode to the same colours (Pillow: mean abs diff 2.1).
    let cmyk = decode_160(&dir.join("cmyk.jpg"));
    let ycck = decode_160(&dir.join("ycck.jpg"));
    let mad = mean_abs_diff(&cmyk, &ycck);
    println!("cmyk vs ycck: {mad:.3}");
    assert!(mad < 4.0, "cmyk vs ycck: {mad:.3}");
    // Without its Adobe APP14 marker (14 bytes after SOI) a CMYK file is still read as
    // Adobe's inverted CMYK, as Pillow and zune-jpeg read it (libjpeg-turbo's output came
    // out colour-inverted).
    let bytes = std::fs::read(dir.join("cmyk.jpg")).unwrap();
    assert_eq!(&bytes[2..4], [0xFF, 0xEE]);
    let tmp = tempfile::tempdir().unwrap();
    let stripped = tmp.path().join("cmyk_no_adobe.jpg");
    std::fs::write(&stripped, [&bytes[..2], &bytes[2 + 2 + 14..]].concat()).unwrap();
    for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
        let px = common::load_one(&stripped, move |b| b.jpeg_decoder(decoder)).unwrap();
        let mad = mean_abs_diff(&cmyk, &px);
        assert!(mad < 2.0, "{decoder:?}: stripped cmyk vs cmyk: {mad:.3}");
    }
    // The same crop in three subsamplings and with restart markers.
    let base = decode_160(&dir.join("baseline_420.jpg"));
    for other in ["s422.jpg", "s444.jpg", "restart.jpg"] {
        let mad = mean_abs_diff(&base, &decode_160(&dir.join(other)));
        println!("baseline_420 vs {other}: {mad:.3}");
        assert!(mad < SCALED_MAX_MAD, "baseline_420 vs {other}: {mad:.3}");
    }
}

/// `noninterleaved.jpg` holds `baseline_420.jpg`'s DCT coefficients with one scan per colour
/// component. libjpeg-turbo decodes it to the same pixels; zune-jpeg 0.5 decoded only its
/// first scan and returned wrong colours (6 dB PSNR), so it is refused, naming why.
#[test]
fn non_interleaved_sequential_jpeg_decodes_the_same_or_is_refused() {
    let dir = common::testdata("valid");
    let (ni, base) = (dir.join("noninterleaved.jpg"), dir.join("baseline_420.jpg"));
    #[cfg(feature = "turbojpeg")]
    for dct in [true, false] {
        let a = common::load_one(&ni, move |b| b.dct_scaling(dct)).unwrap();
        let b = common::load_one(&base, move |b| b.dct_scaling(dct)).unwrap();
        assert!(
            a == b,
            "dct_scaling({dct}): not the pixels of baseline_420.jpg"
        );
    }
    let Err(e) = common::load_one(&ni, |b| b.jpeg_decoder(JpegDecoder::Zune)) else {
        panic!("zune-jpeg decoded a non-interleaved sequential JPEG instead of refusing it");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("noninterleaved.jpg")
            && msg.contains("colour components in separate scans (non-interleaved)")
            && e.is_data_error(),
        "{msg}"
    );
    // Interleaved files are not refused by it: the rest of valid/ decodes with zune-jpeg.
    common::load_one(&base, |b| b.jpeg_decoder(JpegDecoder::Zune)).unwrap();
    // A lossless frame (SOF3) with separate scans is named as lossless, what it is first.
    let mut bytes = std::fs::read(&ni).unwrap();
    let at = (2..bytes.len() - 1)
        .find(|&i| bytes[i] == 0xFF && bytes[i + 1] == 0xC0)
        .unwrap();
    bytes[at + 1] = 0xC3;
    let tmp = tempfile::tempdir().unwrap();
    let lossless = tmp.path().join("lossless.jpg");
    std::fs::write(&lossless, bytes).unwrap();
    let Err(e) = common::load_one(&lossless, |b| b.jpeg_decoder(JpegDecoder::Zune)) else {
        panic!("zune-jpeg decoded a lossless JPEG");
    };
    assert!(
        e.to_string().contains("does not decode lossless JPEGs"),
        "{e}"
    );
}

/// `progressive_sa.jpg` and `progressive_restart.jpg` hold the DCT coefficients of
/// `baseline_420.jpg` and `s444.jpg` (lossless `jpegtran` transcodes): successive approximation
/// in split bands, and restart markers in every scan. Each decodes to its source's pixels, at
/// the DCT scale and at full size: the progressive decoder (refinement scans included) rebuilds
/// the same coefficients.
#[test]
fn progressive_transcodes_decode_to_their_sources_pixels() {
    let dir = common::testdata("valid");
    for (prog, base) in [
        ("progressive_sa.jpg", "baseline_420.jpg"),
        ("progressive_restart.jpg", "s444.jpg"),
    ] {
        for dct in [true, false] {
            let a = common::load_one(&dir.join(prog), move |b| b.dct_scaling(dct)).unwrap();
            let b = common::load_one(&dir.join(base), move |b| b.dct_scaling(dct)).unwrap();
            assert!(
                a == b,
                "{prog}, dct_scaling({dct}): not the pixels of {base}"
            );
        }
    }
}

#[test]
fn rgba_and_gray_png_channels() {
    // RGBA drops alpha (no premultiplication): the fully transparent corner keeps its colour.
    let (w, h, stored) = {
        let img = image::open(common::testdata("valid/rgba.png"))
            .unwrap()
            .to_rgba8();
        (img.width(), img.height(), img.into_raw())
    };
    assert_eq!((w, h), (256, 200));
    assert_eq!(stored[3], 0, "the corner of rgba.png is transparent");
    let got = common::load_one(&common::testdata("valid/rgba.png"), |b| {
        b.image_size_hw(200, 256)
    })
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
    // noninterleaved.jpg: zune-jpeg refuses it (its own test above). dqt_dc255.jpg: its
    // dequantized DC values overflow 16 bits, which libjpeg-turbo's SIMD IDCTs wrap or saturate;
    // zune-jpeg decodes it to another image (mean abs diff 36 at 160x160).
    for name in VALID
        .iter()
        .filter(|n| n.ends_with(".jpg") && **n != "noninterleaved.jpg" && **n != "dqt_dc255.jpg")
    {
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
            mad <= SCALED_MAX_MAD && db >= SCALED_MIN_PSNR,
            "{name}: zune vs default: mean abs diff {mad:.3}, PSNR {db:.2} dB"
        );
        assert!(
            mad_full <= FULL_MAX_MAD,
            "{name}: zune vs unscaled turbo {mad_full:.3}"
        );
    }
    println!("{}", report.join("\n"));
}

// DCT-scaled decoding and the TurboJpeg choice need libjpeg-turbo.
#[cfg(feature = "turbojpeg")]
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
    // Per image: (PSNR, squared error sum) of the DCT-scaled output against the full decode.
    let mut per_image = Vec::new();
    for (a, b) in scaled.iter().zip(&full) {
        assert_eq!(a.indices(), b.indices());
        let (a, b) = (a.as_u8().unwrap(), b.as_u8().unwrap());
        for (x, y) in a.chunks_exact(sample).zip(b.chunks_exact(sample)) {
            let se: f64 = x
                .iter()
                .zip(y)
                .map(|(&p, &q)| (f64::from(p) - f64::from(q)).powi(2))
                .sum();
            per_image.push((psnr(x, y), se));
        }
    }
    assert_eq!(per_image.len(), 50);
    // Images too small for any scale decode identically; judge the others.
    let changed: Vec<(f64, f64)> = per_image
        .into_iter()
        .filter(|(p, _)| p.is_finite())
        .collect();
    let n = changed.len();
    let mean = changed.iter().map(|(p, _)| p).sum::<f64>() / n as f64;
    let min = changed
        .iter()
        .map(|(p, _)| *p)
        .fold(f64::INFINITY, f64::min);
    let mse = changed.iter().map(|(_, se)| se).sum::<f64>() / (n * sample) as f64;
    let overall = 10.0 * (255.0f64 * 255.0 / mse).log10();
    println!(
        "DCT scaling vs full decode, {n} of 50 images scaled: PSNR over all their outputs {overall:.2} dB, mean per image {mean:.2} dB, min {min:.2} dB"
    );
    assert!(n >= 25, "DCT scaling applied to only {n} of 50 images");
    assert!(mean >= 38.0, "mean PSNR per scaled image {mean:.2} dB");
    // The worst case is a detailed 2114x1314 photo decoded at 1/8 (265x165, an 8x8 box filter)
    // for a 160x160 output: 26.4 dB here, and the same with Pillow's `draft` at 1/8.
    assert!(min >= 24.0, "min PSNR {min:.2} dB");
}

// DCT-scaled decoding and the TurboJpeg choice need libjpeg-turbo.
#[cfg(feature = "turbojpeg")]
#[test]
fn turbojpeg_decoder_is_available_by_default() {
    let p = common::testdata("valid/baseline_420.jpg");
    let a = common::load_one(&p, |b| b.jpeg_decoder(JpegDecoder::TurboJpeg)).unwrap();
    assert_eq!(
        a,
        decode_160(&p),
        "Auto is not libjpeg-turbo in a default build"
    );
}

#[test]
fn a_files_output_does_not_depend_on_what_its_thread_decoded_before() {
    // A decode thread keeps one decoder (buffers, resize taps) for its whole life. Whatever it
    // decoded before, each file must give what a fresh decoder gives: the same pixels, or an
    // error. Valid, corrupt and damaged files (bit flips, cuts, stripped tables), in a
    // seeded order, twice over, through both JPEG decoders, with and without DCT scaling.
    let mut files: Vec<Vec<u8>> = Vec::new();
    for dir in ["valid", "photos", "corrupt"] {
        let mut paths: Vec<_> = std::fs::read_dir(common::testdata(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        files.extend(paths.iter().map(|p| std::fs::read(p).unwrap()));
    }
    let mut rng = common::SplitMix(29);
    for name in [
        "photos/photo_1.jpg",
        "valid/progressive.jpg",
        "valid/s422.jpg",
    ] {
        let jpeg = std::fs::read(common::testdata(name)).unwrap();
        files.push(common::without_segments(&jpeg, 0xDB));
        files.push(common::without_segments(&jpeg, 0xC4));
        files.push(jpeg[..jpeg.len() * 2 / 3].to_vec());
        for _ in 0..4 {
            let mut flipped = jpeg.clone();
            let at = 2 + rng.below(flipped.len() - 2);
            flipped[at] ^= 1 << rng.below(8);
            files.push(flipped);
        }
    }
    let mut order: Vec<usize> = (0..files.len()).chain(0..files.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    for (dct, zune) in [(true, false), (false, false), (false, true)] {
        let mut shared = imagefeed::tools::bench::BenchDecoder::new(160, dct, zune);
        let (mut ok, mut failed) = (0, 0);
        for &i in &order {
            let mut a = vec![0u8; 160 * 160 * 3];
            let mut b = vec![0u8; 160 * 160 * 3];
            let after_others = shared.decode_resize(&files[i], &mut a);
            let fresh = imagefeed::tools::bench::BenchDecoder::new(160, dct, zune)
                .decode_resize(&files[i], &mut b);
            assert_eq!(
                after_others, fresh,
                "file {i} (dct {dct}, zune {zune}): decodes with a fresh decoder: {fresh}"
            );
            if fresh {
                assert!(a == b, "file {i} (dct {dct}, zune {zune}): other pixels");
                ok += 1;
            } else {
                failed += 1;
            }
        }
        println!("dct {dct}, zune {zune}: {ok} decoded, {failed} errors, all as a fresh decoder");
        assert!(ok > 40 && failed > 20, "{ok} decoded, {failed} errors");
    }
}

/// An indexed PNG of `w`×`h` pixels (`idx`, one index a pixel), `depth` bits an index,
/// through the png crate's encoder, or written here with Adam7 interlacing (which the
/// encoder does not write), in stored (uncompressed) deflate blocks.
fn indexed_png(
    w: u32,
    h: u32,
    depth: u8,
    palette: &[u8],
    trns: Option<&[u8]>,
    idx: &[u8],
    interlaced: bool,
) -> Vec<u8> {
    let bit_depth = match depth {
        1 => png::BitDepth::One,
        2 => png::BitDepth::Two,
        4 => png::BitDepth::Four,
        _ => png::BitDepth::Eight,
    };
    // Rows of packed indices, each after a filter byte (0: none).
    let rows = |xs: &[u32], ys: &[u32]| -> Vec<u8> {
        let mut out = Vec::new();
        if xs.is_empty() {
            return out;
        }
        for &y in ys {
            out.push(0);
            let mut row = vec![0u8; (xs.len() * depth as usize).div_ceil(8)];
            for (k, &x) in xs.iter().enumerate() {
                let bit = k * depth as usize;
                let i = idx[(y * w + x) as usize];
                row[bit / 8] |= i << (8 - depth as usize - bit % 8);
            }
            out.extend_from_slice(&row);
        }
        out
    };
    if !interlaced {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Indexed);
        enc.set_depth(bit_depth);
        enc.set_palette(palette.to_vec());
        if let Some(t) = trns {
            enc.set_trns(t.to_vec());
        }
        let mut writer = enc.write_header().unwrap();
        let packed: Vec<u8> = rows(&(0..w).collect::<Vec<_>>(), &(0..h).collect::<Vec<_>>())
            .chunks(1 + (w as usize * depth as usize).div_ceil(8))
            .flat_map(|r| r[1..].to_vec())
            .collect();
        writer.write_image_data(&packed).unwrap();
        writer.finish().unwrap();
        return out;
    }
    let mut raw = Vec::new();
    for (x0, y0, dx, dy) in [
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ] {
        let xs: Vec<u32> = (x0..w).step_by(dx).collect();
        let ys: Vec<u32> = (y0..h).step_by(dy).collect();
        raw.extend(rows(&xs, &ys));
    }
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (n, b) in blocks.iter().enumerate() {
        zlib.push(u8::from(n + 1 == blocks.len()));
        let len = b.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(b);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        c.extend_from_slice(kind);
        c.extend_from_slice(data);
        let crc = common::crc32(&c[4..]);
        c.extend_from_slice(&crc.to_be_bytes());
        c
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[depth, 3, 0, 0, 1]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(chunk(b"IHDR", &ihdr));
    out.extend(chunk(b"PLTE", palette));
    if let Some(t) = trns {
        out.extend(chunk(b"tRNS", t));
    }
    out.extend(chunk(b"IDAT", &zlib));
    out.extend(chunk(b"IEND", &[]));
    out
}

/// Deterministic pseudo-random bytes below `below`.
fn indices(n: usize, below: u32, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % below) as u8
        })
        .collect()
}

#[test]
fn indexed_pngs_decode_as_their_rgb() {
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (37u32, 23u32);
    let mut n = 0;
    for depth in [1u8, 2, 4, 8] {
        // A palette of every index the depth allows, and one of fewer entries (used only).
        for entries in [1u32 << depth, (1u32 << depth).min(5) - 1] {
            let palette = indices(entries as usize * 3, 256, u32::from(depth) * 31 + entries);
            let idx = indices((w * h) as usize, entries, u32::from(depth));
            let rgb: Vec<u8> = idx
                .iter()
                .flat_map(|&i| palette[i as usize * 3..i as usize * 3 + 3].to_vec())
                .collect();
            let want_path = dir.path().join(format!("rgb_{depth}_{entries}.png"));
            std::fs::write(&want_path, common::encode_png(&rgb, w, h)).unwrap();
            let want = decode_160(&want_path);
            let trns = [0u8, 128];
            for (trns, interlaced) in [(None, false), (Some(&trns[..]), false), (None, true)] {
                let png = indexed_png(w, h, depth, &palette, trns, &idx, interlaced);
                let p = dir.path().join(format!("indexed_{n}.png"));
                n += 1;
                std::fs::write(&p, png).unwrap();
                // The png crate's own reading of the file gives the same colours.
                let img = image::open(&p).unwrap().to_rgb8();
                assert_eq!(img.as_raw(), &rgb, "depth {depth}, {entries} entries, {trns:?}, interlaced {interlaced}: test file");
                assert_eq!(
                    decode_160(&p),
                    want,
                    "depth {depth}, {entries} entries, tRNS {trns:?}, interlaced {interlaced}"
                );
            }
        }
    }
}

#[test]
fn a_palette_index_past_the_palette_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (16u32, 9u32);
    for (depth, interlaced) in [(8u8, false), (4, false), (2, true), (1, false), (8, true)] {
        // A palette of `entries` colours, and pixel (5, 3) reading index `entries`, past it
        // (black, in the png crate's expansion).
        let entries = (1u32 << depth).min(5) - 1;
        let palette = indices(entries as usize * 3, 256, 7);
        let mut idx = indices((w * h) as usize, entries, u32::from(depth));
        idx[(3 * w + 5) as usize] = entries as u8;
        let name = format!("damaged_{depth}_{interlaced}.png");
        let p = dir.path().join(&name);
        std::fs::write(
            &p,
            indexed_png(w, h, depth, &palette, None, &idx, interlaced),
        )
        .unwrap();
        let e = match common::load_one(&p, |b| b) {
            Ok(_) => panic!("{name}: decoded"),
            Err(e) => e.to_string(),
        };
        let want = format!(
            "pixel (5, 3) has palette index {entries}, past the palette's {entries} entries"
        );
        assert!(e.contains(&name) && e.contains(&want), "{e}");
    }
}
