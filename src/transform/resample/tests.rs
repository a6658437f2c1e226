//! Tests of the resampler: every kernel against the portable one, and the filters against their definitions.

use super::*;
use proptest::prelude::*;

fn image(w: usize, h: usize, seed: u32) -> Vec<u8> {
    (0..w * h * 3)
        .map(|i| {
            let v = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            (v >> 24) as u8
        })
        .collect()
}

/// Resamples a `sw`×`sh` image to `dw`×`dh`, stretched or centre-cropped.
fn run(
    r: &mut Resampler,
    src: &[u8],
    (sw, sh): (usize, usize),
    crop: bool,
    (dw, dh): (usize, usize),
    aa: bool,
) -> Vec<u8> {
    let (x, y) = if crop {
        let side = sw.min(sh) as f64;
        (
            ((sw as f64 - side) / 2.0, side),
            ((sh as f64 - side) / 2.0, side),
        )
    } else {
        ((0.0, sw as f64), (0.0, sh as f64))
    };
    let s = Source::rgb(src, sw, sh, x, y);
    let mut out = vec![0u8; dw * dh * 3];
    r.resample(&s, dw, dh, aa, &mut out).expect("resample");
    out
}

/// Pillow's BILINEAR in floating point, one channel.
fn reference(src: &[u8], sw: usize, sh: usize, dw: usize, dh: usize, c: usize) -> Vec<f64> {
    let weights = |s: usize, d: usize| -> Vec<Vec<(usize, f64)>> {
        let scale = s as f64 / d as f64;
        let st = scale.max(1.0);
        (0..d)
            .map(|i| {
                let center = (i as f64 + 0.5) * scale;
                let mut w: Vec<(usize, f64)> = (0..s)
                    .map(|j| (j, (1.0 - ((j as f64 + 0.5 - center) / st).abs()).max(0.0)))
                    .filter(|&(_, w)| w > 0.0)
                    .collect();
                let t: f64 = w.iter().map(|p| p.1).sum();
                w.iter_mut().for_each(|p| p.1 /= t);
                w
            })
            .collect()
    };
    let (wx, wy) = (weights(sw, dw), weights(sh, dh));
    let mut out = Vec::with_capacity(dw * dh);
    for wy in &wy {
        for wx in &wx {
            let mut v = 0.0;
            for &(j, a) in wy {
                for &(i, b) in wx {
                    v += a * b * f64::from(src[(j * sw + i) * 3 + c]);
                }
            }
            out.push(v);
        }
    }
    out
}

#[test]
fn matches_the_floating_point_filter() {
    for &(sw, sh, dw, dh) in &[
        (250, 188, 160, 160),
        (161, 161, 160, 160),
        (100, 37, 160, 160),
        (640, 480, 64, 48),
        (3, 1, 7, 5),
    ] {
        let src = image(sw, sh, 7);
        let out = run(&mut Resampler::new(), &src, (sw, sh), false, (dw, dh), true);
        for c in 0..3 {
            let want = reference(&src, sw, sh, dw, dh, c);
            let worst = want
                .iter()
                .zip(out.iter().skip(c).step_by(3))
                .map(|(w, &g)| (w - f64::from(g)).abs())
                .fold(0.0, f64::max);
            // One rounding after each pass.
            assert!(worst <= 1.5, "{sw}x{sh} -> {dw}x{dh}: off by {worst}");
        }
    }
}

#[test]
fn flat_images_stay_flat() {
    let src = vec![201u8; 333 * 97 * 3];
    for aa in [true, false] {
        let out = run(&mut Resampler::new(), &src, (333, 97), true, (160, 160), aa);
        assert!(out.iter().all(|&v| v == 201));
    }
}

#[test]
fn weights_sum_to_one_and_windows_stay_inside() {
    for &(s, d, multiple) in &[
        (250, 160, 4),
        (188, 160, 2),
        (5, 160, 4),
        (1, 3, 4),
        (4000, 160, 2),
        (161, 160, 4),
    ] {
        for aa in [true, false] {
            let t = Taps::new((s, d, 0f64.to_bits(), (s as f64).to_bits(), aa, multiple));
            assert_eq!(t.width % multiple, 0);
            for i in 0..d {
                let w = t.weights(i);
                assert_eq!(
                    w.iter().map(|&w| i32::from(w)).sum::<i32>(),
                    ONE,
                    "{s}->{d} output {i}"
                );
                if s >= t.width {
                    assert!(t.starts[i] + t.width <= s);
                }
                for (k, &w) in w.iter().enumerate() {
                    assert!(w >= 0);
                    assert!(
                        w == 0 || t.starts[i] + k < s,
                        "{s}->{d}: weight outside the source"
                    );
                }
            }
        }
    }
}

#[test]
fn both_pass_orders_agree_with_each_other() {
    // 1000x40 -> 160x160 upscales vertically: horizontal first. Its transpose runs
    // vertical first. Same filter, so the outputs must be transposes up to rounding.
    let (w, h) = (1000, 40);
    let src = image(w, h, 3);
    let a = run(&mut Resampler::new(), &src, (w, h), false, (160, 160), true);
    let mut t = vec![0u8; src.len()];
    for y in 0..h {
        for x in 0..w {
            t[(x * h + y) * 3..(x * h + y) * 3 + 3]
                .copy_from_slice(&src[(y * w + x) * 3..(y * w + x) * 3 + 3]);
        }
    }
    let b = run(&mut Resampler::new(), &t, (h, w), false, (160, 160), true);
    for y in 0..160 {
        for x in 0..160 {
            for c in 0..3 {
                let (p, q) = (a[(y * 160 + x) * 3 + c], b[(x * 160 + y) * 3 + c]);
                assert!(p.abs_diff(q) <= 1, "({x},{y}) {p} vs {q}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn simd_and_portable_kernels_agree(
        sw in 1usize..700, sh in 1usize..500, dw in 1usize..200, dh in 1usize..200,
        crop: bool, aa: bool, seed: u32,
    ) {
        let src = image(sw, sh, seed);
        let portable = run(&mut Resampler::portable(), &src, (sw, sh), crop, (dw, dh), aa);
        for k in [Kernels::Avx2, Kernels::Avx512] {
            let fast = run(&mut Resampler::with_kernels(k), &src, (sw, sh), crop, (dw, dh), aa);
            prop_assert_eq!(&fast, &portable, "{:?}", k);
        }
    }
}

/// The parts of two [`Taps`] the kernels read (not the builds' scratch).
fn same_taps(a: &Taps, b: &Taps) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.key, b.key);
    prop_assert_eq!(a.width, b.width);
    prop_assert_eq!(&a.starts, &b.starts);
    prop_assert_eq!(&a.weights, &b.weights);
    prop_assert_eq!(&a.pairs, &b.pairs);
    prop_assert_eq!(&a.planar, &b.planar);
    Ok(())
}

#[test]
fn simd_and_portable_taps_builds_agree_on_edge_cases() {
    if !simd_available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    let whole = |s: usize| (0.0f64, s as f64);
    let cases = [
        // (src, dst, crop offset and length, multiple)
        (250, 160, whole(250), 4),
        (188, 160, whole(188), 2),
        (125, 160, whole(125), 4),
        (1, 1, whole(1), 2),
        (1, 160, whole(1), 4),
        (3, 7, whole(3), 4),
        (160, 160, whole(160), 4),
        (161, 160, whole(161), 2),
        (60_000, 160, whole(60_000), 2),
        (4000, 3, whole(4000), 4),
        (500, 160, (62.5f64, 375.0f64), 4),
        (375, 160, (0.0, 375.0), 2),
        (333, 161, (0.25, 332.5), 4),
    ];
    for (src, dst, (offset, region), multiple) in cases {
        for aa in [true, false] {
            let key = (src, dst, offset.to_bits(), region.to_bits(), aa, multiple);
            let (fast, portable) = (Taps::built_with(key, true), Taps::built_with(key, false));
            same_taps(&fast, &portable).unwrap_or_else(|e| panic!("{key:?}: {e}"));
            // Rebuilt in place from other taps, as the cache does: still the same.
            let mut reused =
                Taps::built_with((997, 31, 0f64.to_bits(), 997f64.to_bits(), aa, 4), true);
            reused.build(key, true);
            reused.ensure_pairs();
            same_taps(&reused, &portable).unwrap_or_else(|e| panic!("{key:?} reused: {e}"));
        }
    }
}

#[test]
fn packed_pairs_are_built_for_rgb_and_only_for_rgb() {
    // The interleaved RGB kernel reads `pairs`; without them it quietly leaves every row to
    // the portable loop. A 1000-pixel row onto 160 has windows over 8 pixels, so no planar
    // plan: the interleaved kernel runs, and its taps must carry their pairs.
    if !simd_available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    let cols = |r: &Resampler| {
        let t = r.cache.iter().find(|t| t.key.0 == 1000 && t.key.5 == 4);
        t.map(|t| (t.planar.p, t.pairs.len())).expect("cached")
    };
    let src = image(1000, 40, 7);
    let mut plane = Resampler::new();
    run_plane(&mut plane, &src, (1000, 40), 0, 1000, (160, 160), true);
    assert_eq!(cols(&plane), (0, 0), "a plane resample builds no pairs");
    let mut rgb = Resampler::new();
    run(&mut rgb, &src, (1000, 40), false, (160, 160), true);
    let (p, pairs) = cols(&rgb);
    assert_eq!(p, 0, "1000 -> 160 is not planned");
    assert!(pairs > 0, "the RGB resample built its pairs");
    // The same cached taps, used by an RGB resample after a plane one, gain their pairs.
    run(&mut plane, &src, (1000, 40), false, (160, 160), true);
    assert!(cols(&plane).1 > 0, "pairs added to cached taps");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// The AVX2 taps build gives the portable build's integers, for any sizes and crops.
    #[test]
    fn simd_and_portable_taps_builds_agree(
        src in 1usize..5000, dst in 1usize..400, crop in 0.0f64..0.5, aa: bool, four: bool,
    ) {
        if simd_available() {
            let offset = src as f64 * crop / 2.0;
            let region = src as f64 - 2.0 * offset;
            let multiple = if four { 4 } else { 2 };
            let key = (src, dst, offset.to_bits(), region.to_bits(), aa, multiple);
            same_taps(&Taps::built_with(key, true), &Taps::built_with(key, false))?;
        }
    }
}

/// Resamples channel `c` of the RGB image `src` as one plane, `stride` bytes a row (the
/// bytes past each row's pixels are noise).
fn run_plane(
    r: &mut Resampler,
    src: &[u8],
    (sw, sh): (usize, usize),
    c: usize,
    stride: usize,
    (dw, dh): (usize, usize),
    aa: bool,
) -> Vec<u8> {
    let mut plane = image(stride, sh, 99)[..stride * sh].to_vec();
    for y in 0..sh {
        for x in 0..sw {
            plane[y * stride + x] = src[(y * sw + x) * 3 + c];
        }
    }
    let s = Source {
        data: &plane[..(sh - 1) * stride + sw],
        width: sw,
        height: sh,
        stride,
        channels: 1,
        x: (0.0, sw as f64),
        y: (0.0, sh as f64),
    };
    let mut out = vec![0u8; dw * dh];
    r.resample(&s, dw, dh, aa, &mut out).expect("resample");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// A plane resamples to exactly its channel of the RGB resample, with every kernel,
    /// whatever its row padding: the same taps, the same integers.
    #[test]
    fn a_plane_resamples_as_its_channel_of_rgb(
        sw in 1usize..700, sh in 1usize..400, dw in 1usize..200, dh in 1usize..200,
        pad in 0usize..40, c in 0usize..3, aa: bool, seed: u32,
    ) {
        let src = image(sw, sh, seed);
        let rgb = run(&mut Resampler::portable(), &src, (sw, sh), false, (dw, dh), aa);
        let want: Vec<u8> = rgb.chunks_exact(3).map(|p| p[c]).collect();
        for k in [Kernels::Portable, Kernels::Avx2, Kernels::Avx512] {
            let mut r = Resampler::with_kernels(k);
            let got = run_plane(&mut r, &src, (sw, sh), c, sw + pad, (dw, dh), aa);
            prop_assert_eq!(&got, &want, "{:?}", k);
        }
    }
}

#[test]
#[cfg_attr(not(target_arch = "x86_64"), allow(clippy::needless_return))]
fn the_one_plane_kernel_takes_the_usual_scales() {
    // As `simd_kernels_cover_whole_rows`, for the planes of a JPEG decoded to planes:
    // luma 250 -> 160 and 4:2:0 chroma 125 -> 160, a row at a time where it lies.
    if !simd_available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    #[cfg(target_arch = "x86_64")]
    for sw in [250, 125, 360] {
        let key = (sw, 160, 0f64.to_bits(), (sw as f64).to_bits(), true, 4);
        let cols = Taps::new(key);
        assert_ne!(cols.planar.p, 0, "{sw} -> 160 planned");
        let row = image(sw + 64, 1, 3);
        let mut out = vec![0u8; 160];
        // SAFETY: AVX2 is present (checked above).
        let done =
            unsafe { avx2::horizontal_plane(&row[cols.planar.origin..], &cols.planar, &mut out) };
        assert!(done, "{sw} -> 160 by the planar kernel");
    }
}

#[test]
#[cfg_attr(not(target_arch = "x86_64"), allow(clippy::needless_return))]
fn simd_kernels_cover_whole_rows() {
    // The portable loops only finish what the AVX2 kernels leave; on a typical resize
    // the kernels must do every row whole, or the speed quietly falls back.
    if !simd_available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (sw, sh) = (250, 188);
        let src = image(sw, sh, 5);
        let key = |s: usize, m| (s, 160, 0f64.to_bits(), (s as f64).to_bits(), true, m);
        let (cols, rows) = (Taps::new(key(sw, 4)), Taps::new(key(sh, 2)));
        // The planar horizontal kernel takes the usual scales after DCT scaling: 1.5x (4
        // slots an output), 2.25x (8 slots), nearly 1x and upscales (2 slots).
        assert_eq!(cols.planar.p, 4, "250 -> 160 planned");
        assert_eq!(Taps::new(key(360, 4)).planar.p, 8, "360 -> 160 planned");
        assert_eq!(Taps::new(key(100, 4)).planar.p, 2, "100 -> 160 planned");
        assert_eq!(Taps::new(key(161, 4)).planar.p, 2, "161 -> 160 planned");
        let mut offs = Vec::new();
        let mut tmp = vec![0u8; 160 * sw * 3 + PAD];
        for (y, row) in tmp.chunks_exact_mut(sw * 3).take(160).enumerate() {
            offsets(&mut offs, &rows, y, sh, sw * 3, 0);
            // SAFETY: AVX2 is present (checked above).
            let done = unsafe { avx2::vertical(&src, &offs, rows.weights(y), row) };
            assert_eq!(done, sw * 3, "vertical row {y}");
            if kernels_supported() == Kernels::Avx512 {
                let mut wide = vec![0u8; row.len()];
                // SAFETY: AVX-512BW is present (checked just above).
                let done = unsafe { avx512::vertical(&src, &offs, rows.weights(y), &mut wide) };
                assert_eq!(done, sw * 3, "AVX-512 vertical row {y}");
                assert_eq!(&wide[..], &row[..], "AVX-512 vertical row {y}");
            }
        }
        let mut out = vec![0u8; 160 * 3];
        for y in 0..160 {
            // SAFETY: as above.
            let done = unsafe { avx2::horizontal(&tmp[y * sw * 3..], &cols, 0, &mut out) };
            assert_eq!(done, 160, "horizontal row {y}");
        }
    }
}

#[test]
fn what_is_kept_between_images_stays_within_its_budget() {
    // A wide image (a 1.9 MB intermediate) and a very tall one (1,251 vertical taps):
    // after each, the resampler holds no more than `RETAINED_BYTES`.
    let mut r = Resampler::new();
    for (w, h) in [(4000, 200), (1, 100_000), (250, 188)] {
        run(&mut r, &image(w, h, 9), (w, h), false, (160, 160), true);
        // Each part within its share of `RETAINED_BYTES`.
        assert!(
            r.tmp.capacity() <= RETAIN_SCRATCH_BYTES,
            "{w}x{h}: intermediate kept"
        );
        assert!(r.cache.len() <= CACHED_TAPS);
        assert!(r
            .cache
            .iter()
            .all(|t| t.heap_bytes() <= MAX_CACHED_TAPS_BYTES));
        assert!(
            r.row_offsets.capacity() <= RETAIN_OFFSETS,
            "{w}x{h}: offsets kept"
        );
    }
    assert!(r.tmp.capacity() > 0, "the usual size keeps its scratch");
}

#[test]
fn cached_taps_follow_the_size() {
    let mut r = Resampler::new();
    let a = image(300, 200, 1);
    let b = image(200, 300, 2);
    let first = run(&mut r, &a, (300, 200), false, (160, 160), true);
    run(&mut r, &b, (200, 300), false, (160, 160), true);
    assert_eq!(run(&mut r, &a, (300, 200), false, (160, 160), true), first);
    assert_eq!(
        run(
            &mut Resampler::new(),
            &a,
            (300, 200),
            false,
            (160, 160),
            true
        ),
        first
    );
}
