//! The AVX2 kernels of the resize: building filter taps four outputs at a time, the vertical
//! pass, and the horizontal pass interleaved or planar (`Planar`). Each computes the portable
//! kernels' integers (`portable.rs`); callers check AVX2 at run time first.

use std::arch::x86_64::*;

use super::{pack, window_start, Planar, Taps, BITS, HALF, ONE};

/// `pshufb` indices taking channel `ch` of 16 RGB pixels out of the `part`th 16 bytes of
/// their 48 (0x80: a byte from another part).
const fn deinterleave_mask(ch: usize, part: usize) -> [u8; 16] {
    let mut m = [0x80u8; 16];
    let mut i = 0;
    while i < 16 {
        let byte = 3 * i + ch;
        if byte / 16 == part {
            m[i] = (byte % 16) as u8;
        }
        i += 1;
    }
    m
}

/// `pshufb` indices putting channel `ch` of 16 pixels (one plane's 16 bytes) into the
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

/// [`interleave_mask`] (or with `split`, [`deinterleave_mask`]) for every channel (outer)
/// and part (inner).
const fn masks(split: bool) -> [[[u8; 16]; 3]; 3] {
    let mut t = [[[0u8; 16]; 3]; 3];
    let mut ch = 0;
    while ch < 3 {
        let mut part = 0;
        while part < 3 {
            t[ch][part] = if split {
                deinterleave_mask(ch, part)
            } else {
                interleave_mask(ch, part)
            };
            part += 1;
        }
        ch += 1;
    }
    t
}

static DEINTERLEAVE: [[[u8; 16]; 3]; 3] = masks(true);
static INTERLEAVE: [[[u8; 16]; 3]; 3] = masks(false);

#[inline]
#[target_feature(enable = "avx2")]
fn mask(m: &[u8; 16]) -> __m128i {
    // SAFETY: 16 readable bytes.
    unsafe { _mm_loadu_si128(m.as_ptr().cast()) }
}

/// Splits the first `n` RGB pixels of `src` into three planes of `stride` bytes each in
/// `planes`: R, then G, then B. Where `src` runs on past them (the next row, padding), the
/// last 16 pixels are split together, writing up to 15 bytes past `n` in each plane.
#[target_feature(enable = "avx2")]
pub(super) fn deinterleave(src: &[u8], n: usize, planes: &mut [u8], stride: usize) {
    if planes.len() < 3 * stride || stride < n + 16 || src.len() < 3 * n {
        return; // not called so; horizontal_planar then refuses the planes
    }
    let (r, rest) = planes.split_at_mut(stride);
    let (g, b) = rest.split_at_mut(stride);
    let mut i = 0;
    while i < n && 3 * i + 48 <= src.len() {
        // SAFETY: 3 * i + 48 <= src.len() bytes are read; i + 16 < n + 16 <= stride bytes
        // of each plane are written.
        unsafe {
            let p = src.as_ptr().add(3 * i);
            let v = [
                _mm_loadu_si128(p.cast()),
                _mm_loadu_si128(p.add(16).cast()),
                _mm_loadu_si128(p.add(32).cast()),
            ];
            for (ch, plane) in [&mut *r, &mut *g, &mut *b].into_iter().enumerate() {
                let t = &DEINTERLEAVE[ch];
                let x = _mm_or_si128(
                    _mm_or_si128(
                        _mm_shuffle_epi8(v[0], mask(&t[0])),
                        _mm_shuffle_epi8(v[1], mask(&t[1])),
                    ),
                    _mm_shuffle_epi8(v[2], mask(&t[2])),
                );
                _mm_storeu_si128(plane.as_mut_ptr().add(i).cast(), x);
            }
        }
        i += 16;
    }
    for i in i.min(n)..n {
        r[i] = src[3 * i];
        g[i] = src[3 * i + 1];
        b[i] = src[3 * i + 2];
    }
}

/// The horizontal pass over one row split into planes by [`deinterleave`] (`stride`
/// bytes a plane, from the plan's `origin`), written interleaved into `out` (whole RGB
/// pixels, at most as many as the plan has outputs). `false`, writing nothing, if the
/// plan and the planes do not fit each other.
#[target_feature(enable = "avx2")]
pub(super) fn horizontal_planar(
    planes: &[u8],
    stride: usize,
    plan: &Planar,
    out: &mut [u8],
) -> bool {
    if planes.len() < 3 * stride || plan.reach > stride {
        return false;
    }
    planar_dispatch::<3>(planes, stride, plan, out)
}

/// The horizontal pass over one plane's row (from the plan's `origin`, at least
/// `plan.reach` bytes), written into `out` (at most as many bytes as the plan has
/// outputs). `false`, writing nothing, if the plan and the row do not fit each other.
#[target_feature(enable = "avx2")]
pub(super) fn horizontal_plane(row: &[u8], plan: &Planar, out: &mut [u8]) -> bool {
    if plan.reach > row.len() {
        return false;
    }
    planar_dispatch::<1>(row, row.len(), plan, out)
}

#[target_feature(enable = "avx2")]
fn planar_dispatch<const CH: usize>(
    planes: &[u8],
    stride: usize,
    plan: &Planar,
    out: &mut [u8],
) -> bool {
    let fits = |regs: usize| {
        plan.bases.len() >= (out.len() / CH).div_ceil(16) * 2 * regs
            && plan.masks.len() == plan.bases.len() * 32
            && plan.weights.len() == plan.bases.len() * 16
    };
    match plan.p {
        2 if fits(1) => planar_n::<2, CH>(planes, stride, plan, out),
        4 if fits(2) => planar_n::<4, CH>(planes, stride, plan, out),
        8 if fits(4) => planar_n::<8, CH>(planes, stride, plan, out),
        _ => return false,
    }
    true
}

/// [`planar_dispatch`] for `P` slots per output and `CH` planes (3: written interleaved,
/// 1: written as they are).
#[target_feature(enable = "avx2")]
fn planar_n<const P: usize, const CH: usize>(
    planes: &[u8],
    stride: usize,
    plan: &Planar,
    out: &mut [u8],
) {
    // Registers per group of 8 outputs.
    let regs = P / 2;
    let pixels = out.len() / CH;
    let chunks = pixels.div_ceil(16);
    let out = &mut out[..pixels * CH];
    let half = _mm256_set1_epi32(HALF);
    let planes_at: [*const u8; CH] = std::array::from_fn(|ch| planes[ch * stride..].as_ptr());
    // The 8 sums of group `g`, per channel, rounded (in the order the combine leaves).
    let group = |g: usize| {
        let mut acc = [[_mm256_setzero_si256(); 4]; CH];
        // `r` indexes both the plan and the accumulators.
        #[allow(clippy::needless_range_loop)]
        for r in 0..regs {
            let i = g * regs + r;
            // SAFETY: i < bases.len() (the caller checked it for every group of every
            // chunk); masks and weights hold 32 bytes per register; every load of 16
            // bytes from a base stays inside its plane (base + 16 <= reach <= stride).
            unsafe {
                let m = _mm256_loadu_si256(plan.masks.as_ptr().add(i * 32).cast());
                let w = _mm256_loadu_si256(plan.weights.as_ptr().add(i * 16).cast());
                let base = *plan.bases.get_unchecked(i) as usize;
                for ch in 0..CH {
                    let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        planes_at[ch].add(base).cast(),
                    ));
                    acc[ch][r] = _mm256_madd_epi16(_mm256_shuffle_epi8(v, m), w);
                }
            }
        }
        acc.map(|a| {
            let sums = match P {
                2 => a[0],
                // [o0 o1 o4 o5 | o2 o3 o6 o7]
                4 => _mm256_hadd_epi32(a[0], a[1]),
                // [o0 o2 o4 o6 | o1 o3 o5 o7]
                _ => {
                    _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]))
                }
            };
            _mm256_srai_epi32::<{ BITS as i32 }>(_mm256_add_epi32(sums, half))
        })
    };
    // 16 outputs of one channel as bytes, in order, from its two groups' sums.
    let bytes = |a: __m256i, b: __m256i| {
        let s = _mm256_packs_epi32(a, b);
        let (lo, hi) = match P {
            // As i16 pairs (dwords), P = 2 gives [a0-3 b0-3 | a4-7 b4-7], in order dwords
            // 0 1 4 5 2 3 6 7; P = 4 gives [a01 a45 b01 b45 | a23 a67 b23 b67], in order
            // 0 4 1 5 2 6 3 7.
            2 | 4 => {
                let order = if P == 2 {
                    _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7)
                } else {
                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)
                };
                let s = _mm256_permutevar8x32_epi32(s, order);
                (_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s))
            }
            // [a0 a2 a4 a6 b0 b2 b4 b6 | a1 a3 a5 a7 b1 b3 b5 b7]
            _ => {
                let (l, h) = (_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
                (_mm_unpacklo_epi16(l, h), _mm_unpackhi_epi16(l, h))
            }
        };
        _mm_packus_epi16(lo, hi)
    };
    if CH == 1 {
        for c in 0..chunks {
            let (g0, g1) = (group(2 * c), group(2 * c + 1));
            let v = bytes(g0[0], g1[0]);
            let dst = &mut out[c * 16..];
            if dst.len() >= 16 {
                // SAFETY: 16 bytes fit in dst.
                unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), v) };
            } else {
                let mut tmp = [0u8; 16];
                // SAFETY: tmp is 16 bytes.
                unsafe { _mm_storeu_si128(tmp.as_mut_ptr().cast(), v) };
                let n = dst.len();
                dst.copy_from_slice(&tmp[..n]);
            }
        }
        return;
    }
    for c in 0..chunks {
        let (g0, g1) = (group(2 * c), group(2 * c + 1));
        let px = [
            bytes(g0[0], g1[0]),
            bytes(g0[1], g1[1]),
            bytes(g0[2], g1[2]),
        ];
        let mut rgb = [_mm_setzero_si128(); 3];
        for (part, v) in rgb.iter_mut().enumerate() {
            let t = |ch: usize| mask(&INTERLEAVE[ch][part]);
            *v = _mm_or_si128(
                _mm_or_si128(_mm_shuffle_epi8(px[0], t(0)), _mm_shuffle_epi8(px[1], t(1))),
                _mm_shuffle_epi8(px[2], t(2)),
            );
        }
        let dst = &mut out[c * 48..];
        if dst.len() >= 48 {
            for (part, v) in rgb.iter().enumerate() {
                // SAFETY: 48 bytes fit in dst.
                unsafe { _mm_storeu_si128(dst.as_mut_ptr().add(part * 16).cast(), *v) };
            }
        } else {
            let mut tmp = [0u8; 48];
            for (part, v) in rgb.iter().enumerate() {
                // SAFETY: tmp is 48 bytes.
                unsafe { _mm_storeu_si128(tmp.as_mut_ptr().add(part * 16).cast(), *v) };
            }
            let n = dst.len();
            dst.copy_from_slice(&tmp[..n]);
        }
    }
}

/// The vertical pass over all of `out` when it holds at least 16 bytes (the last block
/// overlaps the one before); returns how many bytes it wrote. `w.len()` is even (taps
/// come in pairs).
#[target_feature(enable = "avx2")]
pub(super) fn vertical(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8]) -> usize {
    // Most resizes after DCT scaling need 2 to 6 taps: give those a fixed loop count.
    match w.len() {
        2 => vertical_n::<1>(src, offsets, w, out),
        4 => vertical_n::<2>(src, offsets, w, out),
        6 => vertical_n::<3>(src, offsets, w, out),
        _ => vertical_n::<0>(src, offsets, w, out),
    }
}

/// [`vertical`] for `P` pairs of taps (`P == 0`: as many as `w` holds).
#[target_feature(enable = "avx2")]
fn vertical_n<const P: usize>(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8]) -> usize {
    let len = out.len();
    let pairs = if P == 0 { w.len() / 2 } else { P };
    if len < 16
        || w.len() != 2 * pairs
        || offsets.len() != w.len()
        || offsets.iter().any(|&o| o + len > src.len())
    {
        return 0;
    }
    let half = _mm256_set1_epi32(HALF);
    let zero = _mm256_setzero_si256();
    let round = |v: __m256i| _mm256_srai_epi32::<{ BITS as i32 }>(_mm256_add_epi32(v, half));
    // 32 output bytes from `i`.
    let block32 = |i: usize| {
        let mut acc = [_mm256_setzero_si256(); 4];
        for p in 0..pairs {
            let (oa, ob) = (offsets[2 * p], offsets[2 * p + 1]);
            // SAFETY: o + i + 32 <= o + len <= src.len() for every offset (checked above).
            let (a, b) = unsafe {
                (
                    _mm256_loadu_si256(src.as_ptr().add(oa + i).cast()),
                    _mm256_loadu_si256(src.as_ptr().add(ob + i).cast()),
                )
            };
            // Byte j of both rows side by side, then as i16 pairs (a_j, b_j); in-lane, so
            // the four vectors hold bytes 0-3|16-19, 4-7|20-23, 8-11|24-27, 12-15|28-31.
            let (lo, hi) = (_mm256_unpacklo_epi8(a, b), _mm256_unpackhi_epi8(a, b));
            let pair = _mm256_set1_epi32(pack(w[2 * p], w[2 * p + 1]));
            let parts = [
                _mm256_unpacklo_epi8(lo, zero),
                _mm256_unpackhi_epi8(lo, zero),
                _mm256_unpacklo_epi8(hi, zero),
                _mm256_unpackhi_epi8(hi, zero),
            ];
            for (acc, part) in acc.iter_mut().zip(parts) {
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(part, pair));
            }
        }
        // The in-lane packs put the bytes back in order: 0-15 in the low lane, 16-31 high.
        let a = _mm256_packs_epi32(round(acc[0]), round(acc[1]));
        let b = _mm256_packs_epi32(round(acc[2]), round(acc[3]));
        _mm256_packus_epi16(a, b)
    };
    // 16 output bytes from `i`, for a row shorter than 32.
    let block16 = |i: usize| {
        let mut lo = _mm256_setzero_si256();
        let mut hi = _mm256_setzero_si256();
        for p in 0..pairs {
            let (oa, ob) = (offsets[2 * p], offsets[2 * p + 1]);
            // SAFETY: o + i + 16 <= o + len <= src.len() for every offset (checked above).
            let (a, b) = unsafe {
                (
                    _mm_loadu_si128(src.as_ptr().add(oa + i).cast()),
                    _mm_loadu_si128(src.as_ptr().add(ob + i).cast()),
                )
            };
            let a = _mm256_cvtepu8_epi16(a);
            let b = _mm256_cvtepu8_epi16(b);
            let pair = _mm256_set1_epi32(pack(w[2 * p], w[2 * p + 1]));
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), pair));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), pair));
        }
        // In-lane packs undo the in-lane unpacks: bytes 0..8 in the low lane, 8..16 high.
        let s = _mm256_packs_epi32(round(lo), round(hi));
        let u = _mm256_packus_epi16(s, s);
        _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(u))
    };
    if len < 32 {
        for at in [0, len - 16] {
            let v = block16(at);
            // SAFETY: at + 16 <= len = out.len().
            unsafe { _mm_storeu_si128(out.as_mut_ptr().add(at).cast(), v) };
        }
        return len;
    }
    let mut i = 0;
    while i < len {
        // The last block ends at `len`, recomputing a few bytes the one before wrote.
        let at = i.min(len - 32);
        let v = block32(at);
        // SAFETY: at + 32 <= len = out.len().
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(at).cast(), v) };
        i += 32;
    }
    len
}

/// The horizontal pass for the leading output pixels whose 16-byte loads stay inside
/// `src`, four at a time; returns how many pixels it wrote. `cols.width` is a multiple
/// of 4.
#[target_feature(enable = "avx2")]
pub(super) fn horizontal(src: &[u8], cols: &Taps, first: usize, out: &mut [u8]) -> usize {
    // Most resizes after DCT scaling need 4 or 8 taps: give those a fixed loop count.
    match cols.width {
        4 => horizontal_n::<1>(src, cols, first, out),
        8 => horizontal_n::<2>(src, cols, first, out),
        _ => horizontal_n::<0>(src, cols, first, out),
    }
}

/// [`horizontal`] for `Q` groups of four taps per pixel (`Q == 0`: as many as `cols`
/// says).
#[target_feature(enable = "avx2")]
fn horizontal_n<const Q: usize>(src: &[u8], cols: &Taps, first: usize, out: &mut [u8]) -> usize {
    let width = cols.width;
    let quads = if Q == 0 { width / 4 } else { Q };
    let pixels = out.len() / 3;
    if !width.is_multiple_of(4)
        || quads * 4 != width
        || cols.pairs.len() != cols.starts.len() * quads * 8
        || cols.starts.len() < pixels
    {
        return 0;
    }
    // Pixels p0,p1 of a 16-byte load as i16 pairs (r0 r1 g0 g1 b0 b1 0 0) in the low lane,
    // p2,p3 in the high lane.
    let spread = _mm256_setr_epi8(
        0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, //
        6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,
    );
    // Four pixels' [r g b 0] bytes to 12 packed bytes.
    let compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    let half = _mm256_set1_epi32(HALF);
    let pairs = cols.pairs.as_ptr();
    // One output pixel's [R G B 0] sums in both lanes (lane sums still to add).
    let pixel = |x: usize| {
        let base = cols.starts[x] - first;
        let mut acc = _mm256_setzero_si256();
        for q in 0..quads {
            // SAFETY: the caller checked (base + width) * 3 + 4 <= src.len() for this pixel,
            // and (base + 4q) * 3 + 16 <= that; pairs has quads * 8 entries per pixel.
            let (v, w) = unsafe {
                (
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        src.as_ptr().add((base + 4 * q) * 3).cast(),
                    )),
                    _mm256_loadu_si256(pairs.add((x * quads + q) * 8).cast()),
                )
            };
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, spread), w));
        }
        acc
    };
    let mut x = 0;
    while x + 4 <= pixels {
        // Starts never decrease, so the group's last pixel reads furthest.
        if (cols.starts[x + 3] - first + width) * 3 + 4 > src.len() {
            break;
        }
        let (a, b, c, d) = (pixel(x), pixel(x + 1), pixel(x + 2), pixel(x + 3));
        // [a | b] and [c | d], lane sums added.
        let ab = _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(a, b),
            _mm256_permute2x128_si256::<0x31>(a, b),
        );
        let cd = _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(c, d),
            _mm256_permute2x128_si256::<0x31>(c, d),
        );
        let ab = _mm256_srai_epi32::<{ BITS as i32 }>(_mm256_add_epi32(ab, half));
        let cd = _mm256_srai_epi32::<{ BITS as i32 }>(_mm256_add_epi32(cd, half));
        // In-lane packs: low lane [a c], high lane [b d] as i16; then bytes a c a c | b d b d.
        let s = _mm256_packs_epi32(ab, cd);
        let u = _mm256_packus_epi16(s, s);
        // Low lane's first 8 bytes are a, c; high lane's b, d: interleave as a b c d.
        let abcd = _mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256::<1>(u));
        // abcd is [a b c d] as i32 after the unpack: a, b from (lo[0], hi[0]), c, d from
        // (lo[1], hi[1]).
        let packed = _mm_shuffle_epi8(abcd, compact);
        let dst = &mut out[x * 3..];
        if dst.len() >= 16 {
            // SAFETY: 16 bytes fit in dst; the 4 beyond the 12 written here belong to the
            // next pixel, which is written after.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), packed) };
        } else {
            let mut tmp = [0u8; 16];
            // SAFETY: tmp is 16 bytes.
            unsafe { _mm_storeu_si128(tmp.as_mut_ptr().cast(), packed) };
            dst[..12].copy_from_slice(&tmp[..12]);
        }
        x += 4;
    }
    x
}

/// The filter of one axis, as [`Taps::build`] derives it from the key.
pub(super) struct Filter {
    pub(super) offset: f64,
    pub(super) scale: f64,
    pub(super) support: f64,
    pub(super) inv: f64,
}

/// [`Taps::build_portable`] four outputs at a time: each lane does that function's f64
/// operations in the same order (taps past a window add +0.0 to its total, which leaves
/// it unchanged), so the weights, starts and width are the same integers. The caller
/// checked every bound fits an `i32`. Returns false, having set nothing the portable
/// build does not set again, where a window has no weight (a centre outside the source,
/// which the portable build handles).
#[target_feature(enable = "avx2")]
pub(super) fn build_taps(
    t: &mut Taps,
    src_len: usize,
    dst_len: usize,
    multiple: usize,
    f: Filter,
) -> bool {
    let n = dst_len.div_ceil(4) * 4;
    t.centers.clear();
    t.centers.resize(n, 0.0);
    t.bounds.clear();
    t.bounds.resize(2 * n, 0);
    let (offset, scale) = (_mm256_set1_pd(f.offset), _mm256_set1_pd(f.scale));
    let (support, inv) = (_mm256_set1_pd(f.support), _mm256_set1_pd(f.inv));
    let (half, zero, one) = (
        _mm256_set1_pd(0.5),
        _mm256_setzero_pd(),
        _mm256_set1_pd(1.0),
    );
    let last = _mm_set1_epi32(src_len as i32 - 1);
    let end = _mm_set1_epi32(src_len as i32);
    let outputs = _mm_set1_epi32(dst_len as i32);
    let lanes = _mm_setr_epi32(0, 1, 2, 3);
    let mut longest = _mm_set1_epi32(1);
    // Each output's centre and window [lo, hi), as the portable build computes them.
    for g in (0..n).step_by(4) {
        let i = _mm_add_epi32(_mm_set1_epi32(g as i32), lanes);
        let c = _mm256_add_pd(
            offset,
            _mm256_mul_pd(_mm256_add_pd(_mm256_cvtepi32_pd(i), half), scale),
        );
        let a = _mm256_max_pd(_mm256_add_pd(_mm256_sub_pd(c, support), half), zero);
        let lo = _mm_min_epi32(_mm256_cvttpd_epi32(a), last);
        let b = _mm256_max_pd(_mm256_add_pd(_mm256_add_pd(c, support), half), zero);
        let hi = _mm_max_epi32(_mm256_cvttpd_epi32(b), _mm_add_epi32(lo, _mm_set1_epi32(1)));
        let hi = _mm_min_epi32(hi, end);
        // Outputs past dst_len (padding lanes) do not count towards the width.
        let real = _mm_cmpgt_epi32(outputs, i);
        longest = _mm_max_epi32(longest, _mm_and_si128(_mm_sub_epi32(hi, lo), real));
        // SAFETY: g + 4 <= n, the length of centers and of each half of bounds.
        unsafe {
            _mm256_storeu_pd(t.centers.as_mut_ptr().add(g), c);
            _mm_storeu_si128(t.bounds.as_mut_ptr().add(g).cast(), lo);
            _mm_storeu_si128(t.bounds.as_mut_ptr().add(n + g).cast(), hi);
        }
    }
    let mut most = [0i32; 4];
    // SAFETY: most is 16 bytes.
    unsafe { _mm_storeu_si128(most.as_mut_ptr().cast(), longest) };
    let longest = most.into_iter().max().unwrap_or(1) as usize;
    let width = t.reset(dst_len, longest, multiple);
    t.quant.clear();
    t.quant.resize(4 * longest, 0);
    let unit_one = _mm256_set1_pd(f64::from(ONE));
    let sign = _mm256_set1_pd(-0.0);
    for g in (0..n).step_by(4) {
        // SAFETY: as above.
        let (c, lo, hi) = unsafe {
            (
                _mm256_loadu_pd(t.centers.as_ptr().add(g)),
                _mm_loadu_si128(t.bounds.as_ptr().add(g).cast()),
                _mm_loadu_si128(t.bounds.as_ptr().add(n + g).cast()),
            )
        };
        let lens = _mm_sub_epi32(hi, lo);
        let (lo_f, lens_f) = (_mm256_cvtepi32_pd(lo), _mm256_cvtepi32_pd(lens));
        let (mut lo_a, mut len_a) = ([0i32; 4], [0i32; 4]);
        // SAFETY: both arrays are 16 bytes.
        unsafe {
            _mm_storeu_si128(lo_a.as_mut_ptr().cast(), lo);
            _mm_storeu_si128(len_a.as_mut_ptr().cast(), lens);
        }
        let real = (dst_len - g).min(4);
        let taps = len_a[..real].iter().copied().max().unwrap_or(1) as usize;
        // Tap j's weight in each lane, zero past the lane's window.
        let weight = |j: usize| {
            let jf = _mm256_set1_pd(j as f64);
            let x = _mm256_mul_pd(
                _mm256_sub_pd(_mm256_add_pd(_mm256_add_pd(lo_f, jf), half), c),
                inv,
            );
            let w = _mm256_max_pd(_mm256_sub_pd(one, _mm256_andnot_pd(sign, x)), zero);
            _mm256_and_pd(w, _mm256_cmp_pd::<_CMP_LT_OQ>(jf, lens_f))
        };
        let mut total = zero;
        for j in 0..taps {
            total = _mm256_add_pd(total, weight(j));
        }
        let mut totals = [0f64; 4];
        // SAFETY: totals is 32 bytes.
        unsafe { _mm256_storeu_pd(totals.as_mut_ptr(), total) };
        if totals[..real].iter().any(|&v| v <= 0.0) {
            return false;
        }
        let unit = _mm256_div_pd(unit_one, total);
        let (mut sum, mut best, mut big) = (
            _mm_setzero_si128(),
            _mm_setzero_si128(),
            _mm_setzero_si128(),
        );
        for j in 0..taps {
            // Lanes past their window round 0.5 down to 0: no change to the sum or the
            // largest weight (the first largest wins ties, as in the portable loop).
            let q = _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_mul_pd(weight(j), unit), half));
            sum = _mm_add_epi32(sum, q);
            let more = _mm_cmpgt_epi32(q, best);
            best = _mm_max_epi32(best, q);
            big = _mm_blendv_epi8(big, _mm_set1_epi32(j as i32), more);
            // SAFETY: 4 * j + 4 <= 4 * longest, quant's length.
            unsafe { _mm_storeu_si128(t.quant.as_mut_ptr().add(4 * j).cast(), q) };
        }
        let (mut sum_a, mut big_a) = ([0i32; 4], [0i32; 4]);
        // SAFETY: both arrays are 16 bytes.
        unsafe {
            _mm_storeu_si128(sum_a.as_mut_ptr().cast(), sum);
            _mm_storeu_si128(big_a.as_mut_ptr().cast(), big);
        }
        for l in 0..real {
            let (lo, len) = (lo_a[l] as usize, len_a[l] as usize);
            let start = window_start(lo, src_len, width);
            let shift = lo - start;
            let out = &mut t.weights[(g + l) * width + shift..][..len];
            for (j, w) in out.iter_mut().enumerate() {
                *w = t.quant[4 * j + l] as i16;
            }
            // Rounding may leave the sum off by a few units: the largest weight takes them.
            let b = big_a[l] as usize;
            out[b] = (i32::from(out[b]) + ONE - sum_a[l]) as i16;
            t.starts.push(start);
        }
    }
    true
}
