//! YCbCr (JFIF, full range) to RGB8, for JPEGs decoded to planes and resized plane by plane.
//!
//! Converting after the resize converts the output's pixels (160×160) instead of the decoded
//! frame's (about twice as many on each axis after DCT scaling), and lets libjpeg-turbo skip
//! its own upsampling and conversion. The arithmetic is 14-bit fixed point:
//!
//! ```text
//! R = Y + ((22970 Cr' + 8192) >> 14)                 1.402    = 22970 / 2^14
//! G = Y + ((-5638 Cb' - 11700 Cr' + 8192) >> 14)     0.344136 =  5638 / 2^14, 0.714136 = 11700 / 2^14
//! B = Y + ((29032 Cb' + 8192) >> 14)                 1.772    = 29032 / 2^14
//! ```
//!
//! with `Cb' = Cb - 128`, `Cr' = Cr - 128` and the sums clamped to 0..=255: within one level
//! of the exact formula (libjpeg rounds its 16-bit tables the same way). The AVX2 kernel and the
//! portable loop compute the same integers (a test checks them equal).

const R_CR: i32 = 22970;
const G_CB: i32 = -5638;
const G_CR: i32 = -11700;
const B_CB: i32 = 29032;
const ROUND: i32 = 1 << 13;

/// Writes the RGB8 pixels (interleaved, `3 * y.len()` bytes) of the YCbCr planes `y`, `cb`,
/// `cr` (of equal lengths) into `out`.
pub(crate) fn ycbcr_to_rgb(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
    let n = y.len().min(cb.len()).min(cr.len()).min(out.len() / 3);
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))] // set by the x86-64 kernels
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected at run time.
        done = unsafe { avx2::ycbcr_to_rgb(&y[..n], &cb[..n], &cr[..n], &mut out[..3 * n]) };
    }
    portable(
        &y[done..n],
        &cb[done..n],
        &cr[done..n],
        &mut out[3 * done..3 * n],
    );
}

/// The portable conversion (also the tail of the AVX2 one).
fn portable(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
    for (((px, &y), &cb), &cr) in out.chunks_exact_mut(3).zip(y).zip(cb).zip(cr) {
        let (y, cb, cr) = (i32::from(y), i32::from(cb) - 128, i32::from(cr) - 128);
        px[0] = (y + ((R_CR * cr + ROUND) >> 14)).clamp(0, 255) as u8;
        px[1] = (y + ((G_CB * cb + G_CR * cr + ROUND) >> 14)).clamp(0, 255) as u8;
        px[2] = (y + ((B_CB * cb + ROUND) >> 14)).clamp(0, 255) as u8;
    }
}

/// Writes each byte of `y` three times (grey to RGB8) into `out` (`3 * y.len()` bytes).
pub(crate) fn gray_to_rgb(y: &[u8], out: &mut [u8]) {
    for (px, &v) in out.chunks_exact_mut(3).zip(y) {
        px.fill(v);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{B_CB, G_CB, G_CR, ROUND, R_CR};

    /// `pshufb` indices putting channel `ch` of 16 pixels (16 bytes of one channel) into the
    /// `part`th 16 bytes of their 48 interleaved RGB bytes.
    const fn interleave_mask(ch: usize, part: usize) -> [u8; 16] {
        let mut m = [0x80u8; 16];
        let mut q = 0;
        while q < 16 {
            let byte = 16 * part + q;
            if byte % 3 == ch {
                m[q] = (byte / 3) as u8;
            }
            q += 1;
        }
        m
    }

    const fn masks() -> [[[u8; 16]; 3]; 3] {
        let mut t = [[[0u8; 16]; 3]; 3];
        let mut ch = 0;
        while ch < 3 {
            let mut part = 0;
            while part < 3 {
                t[ch][part] = interleave_mask(ch, part);
                part += 1;
            }
            ch += 1;
        }
        t
    }

    static INTERLEAVE: [[[u8; 16]; 3]; 3] = masks();

    /// Two i16 weights as `madd` multiplies a (Cb', Cr') pair by.
    #[inline]
    fn pair(cb: i32, cr: i32) -> i32 {
        (cr << 16) | (cb & 0xFFFF)
    }

    /// Converts 16 pixels at a time; returns how many it converted (a multiple of 16).
    #[target_feature(enable = "avx2")]
    pub(super) fn ycbcr_to_rgb(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) -> usize {
        let n = y.len();
        if cb.len() < n || cr.len() < n || out.len() < 3 * n {
            return 0;
        }
        let w_r = _mm256_set1_epi32(pair(0, R_CR));
        let w_g = _mm256_set1_epi32(pair(G_CB, G_CR));
        let w_b = _mm256_set1_epi32(pair(B_CB, 0));
        let round = _mm256_set1_epi32(ROUND);
        let c128 = _mm256_set1_epi16(128);
        // SAFETY (loads): 16 masks of 16 bytes.
        let m = |ch: usize, part: usize| unsafe {
            _mm_loadu_si128(INTERLEAVE[ch][part].as_ptr().cast())
        };
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n bytes of each plane are read; 3 * (i + 16) <= out.len() bytes
            // are written.
            unsafe {
                let yv = _mm256_cvtepu8_epi16(_mm_loadu_si128(y.as_ptr().add(i).cast()));
                let cbv = _mm256_sub_epi16(
                    _mm256_cvtepu8_epi16(_mm_loadu_si128(cb.as_ptr().add(i).cast())),
                    c128,
                );
                let crv = _mm256_sub_epi16(
                    _mm256_cvtepu8_epi16(_mm_loadu_si128(cr.as_ptr().add(i).cast())),
                    c128,
                );
                // (Cb', Cr') pairs: pixels 0-3 | 8-11 and 4-7 | 12-15; the packs below undo
                // the in-lane split, leaving pixels 0-7 | 8-15 in order.
                let (lo, hi) = (
                    _mm256_unpacklo_epi16(cbv, crv),
                    _mm256_unpackhi_epi16(cbv, crv),
                );
                let term = |w: __m256i| {
                    let a =
                        _mm256_srai_epi32::<14>(_mm256_add_epi32(_mm256_madd_epi16(lo, w), round));
                    let b =
                        _mm256_srai_epi32::<14>(_mm256_add_epi32(_mm256_madd_epi16(hi, w), round));
                    _mm256_adds_epi16(yv, _mm256_packs_epi32(a, b))
                };
                let (r, g, b) = (term(w_r), term(w_g), term(w_b));
                // To bytes: [r0-7 g0-7 | r8-15 g8-15] and [b0-7 b0-7 | b8-15 b8-15].
                let rg = _mm256_packus_epi16(r, g);
                let bb = _mm256_packus_epi16(b, b);
                let rg = _mm256_permute4x64_epi64::<0b11_01_10_00>(rg); // r0-15 | g0-15
                let bb = _mm256_permute4x64_epi64::<0b00_00_10_00>(bb); // b0-15 | ...
                let px = [
                    _mm256_castsi256_si128(rg),
                    _mm256_extracti128_si256::<1>(rg),
                    _mm256_castsi256_si128(bb),
                ];
                let dst = out.as_mut_ptr().add(3 * i);
                for part in 0..3 {
                    let v = _mm_or_si128(
                        _mm_or_si128(
                            _mm_shuffle_epi8(px[0], m(0, part)),
                            _mm_shuffle_epi8(px[1], m(1, part)),
                        ),
                        _mm_shuffle_epi8(px[2], m(2, part)),
                    );
                    _mm_storeu_si128(dst.add(16 * part).cast(), v);
                }
            }
            i += 16;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(y: u8, cb: u8, cr: u8) -> [f64; 3] {
        let (y, cb, cr) = (f64::from(y), f64::from(cb) - 128.0, f64::from(cr) - 128.0);
        [
            y + 1.402 * cr,
            y - 0.344136 * cb - 0.714136 * cr,
            y + 1.772 * cb,
        ]
        .map(|v| v.clamp(0.0, 255.0))
    }

    /// Every (Cb, Cr) pair with a spread of Y, in an order the 16-pixel blocks do not align to.
    fn planes() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let mut y = Vec::new();
        let (mut cb, mut cr) = (Vec::new(), Vec::new());
        for b in 0..=255u8 {
            for r in 0..=255u8 {
                cb.push(b);
                cr.push(r);
                y.push((u32::from(b) * 7 + u32::from(r) * 13) as u8);
            }
        }
        y.push(255);
        cb.push(0);
        cr.push(255);
        (y, cb, cr)
    }

    #[test]
    fn conversion_is_within_a_level_of_the_exact_formula() {
        let (y, cb, cr) = planes();
        let mut out = vec![0u8; 3 * y.len()];
        ycbcr_to_rgb(&y, &cb, &cr, &mut out);
        for (i, px) in out.chunks_exact(3).enumerate() {
            let want = exact(y[i], cb[i], cr[i]);
            for c in 0..3 {
                let d = (f64::from(px[c]) - want[c]).abs();
                assert!(
                    d <= 1.0,
                    "pixel {i} channel {c}: {} against {}",
                    px[c],
                    want[c]
                );
            }
        }
        // Grey stays grey.
        let mut px = [0u8; 3];
        ycbcr_to_rgb(&[77], &[128], &[128], &mut px);
        assert_eq!(px, [77; 3]);
    }

    #[test]
    fn simd_and_portable_conversions_agree() {
        let (y, cb, cr) = planes();
        let mut fast = vec![0u8; 3 * y.len()];
        let mut slow = vec![1u8; 3 * y.len()];
        ycbcr_to_rgb(&y, &cb, &cr, &mut fast);
        portable(&y, &cb, &cr, &mut slow);
        assert_eq!(fast, slow);
        // Every length up to two blocks, so the tail after the last whole block is covered.
        for n in 0..40 {
            let mut a = vec![0u8; 3 * n];
            let mut b = vec![0u8; 3 * n];
            ycbcr_to_rgb(&y[..n], &cb[1000..1000 + n], &cr[..n], &mut a);
            portable(&y[..n], &cb[1000..1000 + n], &cr[..n], &mut b);
            assert_eq!(a, b, "{n} pixels");
        }
    }

    #[test]
    fn grey_is_repeated_into_each_channel() {
        let mut out = [0u8; 6];
        gray_to_rgb(&[3, 250], &mut out);
        assert_eq!(out, [3, 3, 3, 250, 250, 250]);
    }
}
