//! Separable RGB8 resampling with a triangle filter, in 14-bit fixed point.
//!
//! The decode threads spend about a tenth of their time here, so this is written for the
//! shape of the work rather than borrowed from a general resizer:
//!
//! - **Vertical pass first.** After DCT-scaled decoding the source is up to twice the output
//!   on each axis; filtering the rows first leaves only `dst_h` rows for the horizontal pass,
//!   which (three interleaved channels) is the dearer of the two per tap. The other order is
//!   used where it keeps the intermediate smaller than both the source and the output (a
//!   wide, short image), so the scratch never outgrows one of them.
//! - **Weights kept between images.** They depend only on the source length, the output length
//!   and the crop, and consecutive images in a dataset mostly share sizes.
//! - **AVX2 kernels picked at run time**, and a portable kernel computing the same integers
//!   (the tests check them equal on random images and sizes).
//!
//! The filter is Pillow's `BILINEAR` (a triangle widened by the scale factor when
//! downscaling, so every source pixel contributes), or with `antialias` off the plain two-tap
//! bilinear interpolation of `tf.image.resize`. Weights are rounded to 14 bits and sum to
//! exactly 1, so a flat image stays flat.

/// Fraction bits of the fixed-point weights.
const BITS: u32 = 14;
const ONE: i32 = 1 << BITS;
const HALF: i32 = 1 << (BITS - 1);

/// Intermediate-image bytes a [`Resampler`] keeps between images; a larger intermediate
/// (from a very wide source) is freed after use.
const RETAIN_SCRATCH_BYTES: usize = 1 << 20;

/// Taps larger than this (a huge downscale) are not kept between images.
const MAX_CACHED_TAPS_BYTES: usize = 64 << 10;

/// Row offsets (one per vertical tap) kept between images; more (a huge downscale) are freed.
const RETAIN_OFFSETS: usize = 1024;

/// The most a [`Resampler`] holds between images: its intermediate image, cached taps and row
/// offsets.
pub(crate) const RETAINED_BYTES: usize = RETAIN_SCRATCH_BYTES
    + CACHED_TAPS * MAX_CACHED_TAPS_BYTES
    + RETAIN_OFFSETS * std::mem::size_of::<usize>();

/// Taps kept between images: a few sizes' worth for each axis (a dataset's images mostly
/// come in a handful of sizes, often both orientations of one).
const CACHED_TAPS: usize = 8;

/// Extra readable bytes after the intermediate image, so the horizontal kernel's 16-byte loads
/// never need a bounds fallback there.
const PAD: usize = 64;

/// One axis of a resize: the filter taps of every output pixel.
#[derive(Debug, Clone, Default, PartialEq)]
struct Taps {
    /// What the taps were computed for.
    key: Key,
    /// `width` weights per output pixel, zero where a window is shorter.
    weights: Vec<i16>,
    /// The same weights as the AVX2 horizontal kernel multiplies by: per output and group of
    /// four taps, the pairs (w0, w1) four times then (w2, w3) four times, each pair packed
    /// into one `i32`. Empty unless `width` is a multiple of 4.
    pairs: Vec<i32>,
    /// The first source index of each output's window, non-decreasing. Where the source has
    /// at least `width` pixels, `start + width <= src_len` (windows at the far edge are
    /// shifted left, with zero weights in front).
    starts: Vec<usize>,
    /// Taps per output: the longest window, rounded up to the padding multiple.
    width: usize,
    /// Scratch of [`Taps::build`]: each output's centre and window, one window's weights.
    windows: Vec<(f64, usize, usize)>,
    scratch: Vec<f64>,
}

/// Source length, output length, the bits of the crop offset and length, antialiasing, and
/// the padding multiple.
type Key = (usize, usize, u64, u64, bool, usize);

impl Taps {
    /// Taps for resampling the `region` source pixels starting at `offset` (fractional, for a
    /// centre crop) out of `src_len` onto `dst_len` pixels.
    #[cfg(test)]
    fn new(key: Key) -> Taps {
        let mut t = Taps::default();
        t.build(key);
        t
    }

    /// Recomputes the taps for `key`, reusing this value's vectors.
    fn build(&mut self, key: Key) {
        let (src_len, dst_len, offset, region, antialias, multiple) = key;
        let (offset, region) = (f64::from_bits(offset), f64::from_bits(region));
        let scale = region / dst_len as f64;
        // The filter's stretch: downscaling widens the triangle so no source pixel is skipped.
        let stretch = if antialias { scale.max(1.0) } else { 1.0 };
        let (support, inv) = (stretch, 1.0 / stretch);
        // Each output's centre and window [lo, hi) (Pillow's bounds). Casts truncate values
        // already clamped to be non-negative, i.e. they floor.
        self.windows.clear();
        self.windows.extend((0..dst_len).map(|i| {
            let center = offset + (i as f64 + 0.5) * scale;
            let lo = ((center - support + 0.5).max(0.0) as usize).min(src_len - 1);
            let hi = ((center + support + 0.5).max(0.0) as usize).clamp(lo + 1, src_len);
            (center, lo, hi)
        }));
        let longest = self.windows.iter().map(|w| w.2 - w.1).max().unwrap_or(1);
        let width = longest.div_ceil(multiple) * multiple;
        self.key = key;
        self.width = width;
        self.weights.clear();
        self.weights.resize(dst_len * width, 0);
        self.starts.clear();
        self.scratch.clear();
        self.scratch.resize(longest, 0.0);
        for (out, &(center, lo, hi)) in self.weights.chunks_exact_mut(width).zip(&self.windows) {
            let w = &mut self.scratch[..hi - lo];
            let mut total = 0.0;
            for (j, w) in w.iter_mut().enumerate() {
                let x = ((lo + j) as f64 + 0.5 - center) * inv;
                *w = (1.0 - x.abs()).max(0.0);
                total += *w;
            }
            if total <= 0.0 {
                // Only for a centre outside the source, which no caller asks for: nearest pixel.
                w.fill(0.0);
                w[0] = 1.0;
                total = 1.0;
            }
            let start = if src_len >= width {
                lo.min(src_len - width)
            } else {
                0
            };
            let shift = lo - start;
            let q = &mut out[shift..shift + w.len()];
            let unit = f64::from(ONE) / total;
            let mut sum = 0;
            let mut big = 0;
            for k in 0..q.len() {
                q[k] = (w[k] * unit + 0.5) as i16;
                sum += i32::from(q[k]);
                if q[k] > q[big] {
                    big = k;
                }
            }
            // Rounding may leave the sum off by a few units: give them to the largest weight.
            q[big] = (i32::from(q[big]) + ONE - sum) as i16;
            self.starts.push(start);
        }
        self.pairs.clear();
        if width % 4 == 0 {
            self.pairs
                .extend(self.weights.chunks_exact(4).flat_map(|w| {
                    let (a, b) = (pack(w[0], w[1]), pack(w[2], w[3]));
                    [a, a, a, a, b, b, b, b]
                }));
        }
    }

    fn heap_bytes(&self) -> usize {
        self.weights.capacity() * 2
            + self.pairs.capacity() * 4
            + self.starts.capacity() * 8
            + self.windows.capacity() * 24
            + self.scratch.capacity() * 8
    }

    fn weights(&self, i: usize) -> &[i16] {
        &self.weights[i * self.width..(i + 1) * self.width]
    }

    /// The source span every window together reads: `[first, end)`, clamped to the source.
    fn span(&self, src_len: usize) -> (usize, usize) {
        let first = self.starts.first().copied().unwrap_or(0);
        let end = self
            .starts
            .last()
            .map_or(0, |s| s + self.width)
            .min(src_len);
        (first, end)
    }
}

/// Two i16 weights as `madd` multiplies a pixel pair by: `a` in the low half.
#[inline]
fn pack(a: i16, b: i16) -> i32 {
    (i32::from(b) << 16) | i32::from(a as u16)
}

/// A reusable resampler: cached taps and the intermediate image.
#[derive(Debug)]
pub(crate) struct Resampler {
    /// Recently used taps, most recent first (both axes, at most [`CACHED_TAPS`]).
    cache: Vec<Taps>,
    tmp: Vec<u8>,
    row_offsets: Vec<usize>,
    simd: bool,
}

impl Default for Resampler {
    fn default() -> Self {
        Self::new()
    }
}

/// What to resample: a `width`×`height` RGB8 image and the part of it that maps onto the
/// output (`x`, `y`: offset and length along each axis, fractional for a centre crop).
pub(crate) struct Source<'a> {
    pub(crate) rgb: &'a [u8],
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) x: (f64, f64),
    pub(crate) y: (f64, f64),
}

impl Resampler {
    pub(crate) fn new() -> Self {
        Resampler {
            cache: Vec::new(),
            tmp: Vec::new(),
            row_offsets: Vec::new(),
            simd: simd_available(),
        }
    }

    /// The same resampler computing with the portable kernels only (for tests and benches).
    #[cfg(test)]
    pub(crate) fn portable() -> Self {
        Resampler {
            simd: false,
            ..Self::new()
        }
    }

    /// Resamples `src` onto `dst_w`×`dst_h` RGB8 pixels in `out` (`dst_w * dst_h * 3` bytes).
    pub(crate) fn resample(
        &mut self,
        src: &Source<'_>,
        dst_w: usize,
        dst_h: usize,
        antialias: bool,
        out: &mut [u8],
    ) -> Result<(), String> {
        let (sw, sh) = (src.width, src.height);
        if sw == 0 || sh == 0 || dst_w == 0 || dst_h == 0 {
            return Err(format!(
                "resize: cannot resize {sw}x{sh} to {dst_w}x{dst_h}"
            ));
        }
        if src.rgb.len() < sw * sh * 3 || out.len() != dst_w * dst_h * 3 {
            return Err(format!(
                "resize: {} bytes for a {sw}x{sh} image, {} for {dst_w}x{dst_h}",
                src.rgb.len(),
                out.len()
            ));
        }
        let cols = taps(&mut self.cache, sw, dst_w, src.x, antialias, 4);
        let rows = taps(&mut self.cache, sh, dst_h, src.y, antialias, 2);
        let (x0, x1) = cols.span(sw);
        let (y0, y1) = rows.span(sh);
        let (span_w, span_h) = (x1 - x0, y1 - y0);
        let simd = self.simd;
        let mut tmp = std::mem::take(&mut self.tmp);
        // Vertical first, unless that intermediate would outgrow both the source span and the
        // output (upscaling a wide, short image): then horizontal first.
        if dst_h * span_w <= (span_h * span_w).max(dst_h * dst_w) {
            let stride = span_w * 3;
            // Every row is overwritten below: only grow (zeroing once), never clear.
            grow(&mut tmp, dst_h * stride + PAD);
            for (y, row) in tmp.chunks_exact_mut(stride).take(dst_h).enumerate() {
                offsets(&mut self.row_offsets, &rows, y, sh, sw * 3, x0 * 3);
                vertical(src.rgb, &self.row_offsets, rows.weights(y), row, simd);
            }
            for (y, row) in out.chunks_exact_mut(dst_w * 3).enumerate() {
                horizontal(&tmp[y * stride..], &cols, x0, row, simd);
            }
        } else {
            let stride = dst_w * 3;
            grow(&mut tmp, span_h * stride);
            for (y, row) in tmp.chunks_exact_mut(stride).take(span_h).enumerate() {
                horizontal(&src.rgb[(y0 + y) * sw * 3..], &cols, 0, row, simd);
            }
            for (y, row) in out.chunks_exact_mut(stride).enumerate() {
                offsets(&mut self.row_offsets, &rows, y, sh, stride, 0);
                for o in &mut self.row_offsets {
                    *o -= y0 * stride;
                }
                vertical(&tmp, &self.row_offsets, rows.weights(y), row, simd);
            }
        }
        if tmp.capacity() > RETAIN_SCRATCH_BYTES {
            tmp = Vec::new();
        }
        if self.row_offsets.capacity() > RETAIN_OFFSETS {
            self.row_offsets = Vec::new();
        }
        self.tmp = tmp;
        for t in [rows, cols] {
            if t.heap_bytes() <= MAX_CACHED_TAPS_BYTES {
                self.cache.insert(0, t);
            }
        }
        self.cache.truncate(CACHED_TAPS);
        Ok(())
    }
}

/// Makes `buf` at least `len` bytes long, keeping what it holds (stale bytes are fine: the
/// caller overwrites what it reads, or reads them with zero weights).
fn grow(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// The cached taps for this axis, taken out of the cache (the caller puts them back in
/// front), or new ones.
fn taps(
    cache: &mut Vec<Taps>,
    src_len: usize,
    dst_len: usize,
    (offset, region): (f64, f64),
    antialias: bool,
    multiple: usize,
) -> Taps {
    let key = (
        src_len,
        dst_len,
        offset.to_bits(),
        region.to_bits(),
        antialias,
        multiple,
    );
    if let Some(i) = cache.iter().position(|t| t.key == key) {
        return cache.remove(i);
    }
    // Rebuild the least recently used taps in place once the cache is full, so a dataset of
    // many sizes allocates nothing per image either. (Both axes go back in front after use.)
    let mut t = if cache.len() + 1 >= CACHED_TAPS {
        cache.pop().unwrap_or_default()
    } else {
        Taps::default()
    };
    t.build(key);
    t
}

/// Byte offsets of the source rows output row `y` reads (`stride` bytes a row, from column
/// byte `col`); rows past the source repeat the last (their weights are zero).
fn offsets(out: &mut Vec<usize>, rows: &Taps, y: usize, src_h: usize, stride: usize, col: usize) {
    out.clear();
    let start = rows.starts[y];
    out.extend((0..rows.width).map(|k| (start + k).min(src_h - 1) * stride + col));
}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline]
fn to_u8(acc: i32) -> u8 {
    ((acc + HALF) >> BITS).clamp(0, 255) as u8
}

/// One output row of the vertical pass: `out[i] = Σ_k w[k] · src[offsets[k] + i]`.
fn vertical(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8], simd: bool) {
    let n = out.len();
    debug_assert!(offsets.iter().all(|&o| o + n <= src.len()));
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true where AVX2 was detected at run time.
        done = unsafe { avx2::vertical(src, offsets, w, out) };
    }
    let _ = simd;
    for (i, o) in out.iter_mut().enumerate().skip(done) {
        let acc: i32 = offsets
            .iter()
            .zip(w)
            .map(|(&off, &w)| i32::from(w) * i32::from(src[off + i]))
            .sum();
        *o = to_u8(acc);
    }
}

/// One output row of the horizontal pass over `src` (a row of pixels whose first is source
/// column `first`; the slice may run on past the row).
fn horizontal(src: &[u8], cols: &Taps, first: usize, out: &mut [u8], simd: bool) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true where AVX2 was detected at run time.
        done = unsafe { avx2::horizontal(src, cols, first, out) };
    }
    let _ = simd;
    for (x, px) in out.chunks_exact_mut(3).enumerate().skip(done) {
        let base = cols.starts[x] - first;
        let mut acc = [0i32; 3];
        for (k, &w) in cols.weights(x).iter().enumerate() {
            if w == 0 {
                continue; // a padding tap may lie past the source row
            }
            let p = &src[(base + k) * 3..(base + k) * 3 + 3];
            for c in 0..3 {
                acc[c] += i32::from(w) * i32::from(p[c]);
            }
        }
        for c in 0..3 {
            px[c] = to_u8(acc[c]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{pack, Taps, BITS, HALF};

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
    fn vertical_n<const P: usize>(
        src: &[u8],
        offsets: &[usize],
        w: &[i16],
        out: &mut [u8],
    ) -> usize {
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
    fn horizontal_n<const Q: usize>(
        src: &[u8],
        cols: &Taps,
        first: usize,
        out: &mut [u8],
    ) -> usize {
        let width = cols.width;
        let quads = if Q == 0 { width / 4 } else { Q };
        let pixels = out.len() / 3;
        if width % 4 != 0
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
            let abcd =
                _mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256::<1>(u));
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
}

#[cfg(test)]
mod tests {
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
        let s = Source {
            rgb: src,
            width: sw,
            height: sh,
            x,
            y,
        };
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
            let fast = run(&mut Resampler::new(), &src, (sw, sh), crop, (dw, dh), aa);
            let portable = run(&mut Resampler::portable(), &src, (sw, sh), crop, (dw, dh), aa);
            prop_assert_eq!(fast, portable);
        }
    }

    #[test]
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
            let mut offs = Vec::new();
            let mut tmp = vec![0u8; 160 * sw * 3 + PAD];
            for (y, row) in tmp.chunks_exact_mut(sw * 3).take(160).enumerate() {
                offsets(&mut offs, &rows, y, sh, sw * 3, 0);
                // SAFETY: AVX2 is present (checked above).
                let done = unsafe { avx2::vertical(&src, &offs, rows.weights(y), row) };
                assert_eq!(done, sw * 3, "vertical row {y}");
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
}
