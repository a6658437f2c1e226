//! The vertical pass with AVX-512BW: the AVX2 kernel's arithmetic (`avx2.rs`) on 64 bytes a
//! step (the same unpacks, `madd`s and packs, each within its 128-bit lane, so the same bytes in
//! the same order). It runs where `simd::avx512_enabled` says (AMD CPUs by default: why, with
//! the measurements, is in docs/PERFORMANCE.md, "What made it fast").

use std::arch::x86_64::*;

use super::{pack, BITS, HALF};

/// The vertical pass over all of `out` when it holds at least 64 bytes (the last block
/// overlaps the one before); returns how many bytes it wrote (0: the caller falls back).
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn vertical(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8]) -> usize {
    match w.len() {
        2 => vertical_n::<1>(src, offsets, w, out),
        4 => vertical_n::<2>(src, offsets, w, out),
        6 => vertical_n::<3>(src, offsets, w, out),
        _ => vertical_n::<0>(src, offsets, w, out),
    }
}

/// [`vertical`] for `P` pairs of taps (`P == 0`: as many as `w` holds).
#[target_feature(enable = "avx512f,avx512bw")]
fn vertical_n<const P: usize>(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8]) -> usize {
    let len = out.len();
    let pairs = if P == 0 { w.len() / 2 } else { P };
    if len < 64
        || w.len() != 2 * pairs
        || offsets.len() != w.len()
        || offsets.iter().any(|&o| o + len > src.len())
    {
        return 0;
    }
    let half = _mm512_set1_epi32(HALF);
    let zero = _mm512_setzero_si512();
    let round = |v: __m512i| _mm512_srai_epi32::<BITS>(_mm512_add_epi32(v, half));
    // 64 output bytes from `i`.
    let block = |i: usize| {
        let mut acc = [zero; 4];
        for p in 0..pairs {
            let (oa, ob) = (offsets[2 * p], offsets[2 * p + 1]);
            // SAFETY: o + i + 64 <= o + len <= src.len() for every offset (checked above).
            let (a, b) = unsafe {
                (
                    _mm512_loadu_si512(src.as_ptr().add(oa + i).cast()),
                    _mm512_loadu_si512(src.as_ptr().add(ob + i).cast()),
                )
            };
            let (lo, hi) = (_mm512_unpacklo_epi8(a, b), _mm512_unpackhi_epi8(a, b));
            let pair = _mm512_set1_epi32(pack(w[2 * p], w[2 * p + 1]));
            let parts = [
                _mm512_unpacklo_epi8(lo, zero),
                _mm512_unpackhi_epi8(lo, zero),
                _mm512_unpacklo_epi8(hi, zero),
                _mm512_unpackhi_epi8(hi, zero),
            ];
            for (acc, part) in acc.iter_mut().zip(parts) {
                *acc = _mm512_add_epi32(*acc, _mm512_madd_epi16(part, pair));
            }
        }
        // Per 128-bit lane, the packs put its 16 bytes back in order (as in AVX2).
        let a = _mm512_packs_epi32(round(acc[0]), round(acc[1]));
        let b = _mm512_packs_epi32(round(acc[2]), round(acc[3]));
        _mm512_packus_epi16(a, b)
    };
    let mut i = 0;
    while i < len {
        // The last block ends at `len`, recomputing a few bytes the one before wrote.
        let at = i.min(len - 64);
        let v = block(at);
        // SAFETY: at + 64 <= len = out.len().
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(at).cast(), v) };
        i += 64;
    }
    len
}
