//! Separable RGB8 resampling with a triangle filter, in 14-bit fixed point.
//!
//! Written for the shape of the work rather than borrowed from a general resizer (where the
//! time goes, and what each choice gained, is in docs/PERFORMANCE.md):
//!
//! - **Vertical pass first.** After DCT-scaled decoding the source is up to twice the output
//!   on each axis; filtering the rows first leaves only `dst_h` rows for the horizontal pass,
//!   which (three interleaved channels) is the dearer of the two per tap. The other order is
//!   used where it keeps the intermediate smaller than both the source and the output (a
//!   wide, short image), so the scratch never outgrows one of them.
//! - **Weights kept between images.** They depend only on the source length, the output length
//!   and the crop, and consecutive images in a dataset mostly share sizes. Where they do not
//!   (a corpus of many sizes rebuilds four sets an image), AVX2 builds them four outputs at a
//!   time, to the same integers as the portable build.
//! - **A planar horizontal pass.** With AVX2, each row of the intermediate is split into its
//!   three colour planes, filtered plane by plane with the taps of several outputs gathered by
//!   one `pshufb` (see [`Planar`]), and interleaved again on the way out (interleaved RGB leaves a
//!   quarter of every `madd` unused). Windows over 8 pixels use the interleaved kernel.
//! - **Kernels picked at run time**, one file each: `avx2.rs`, `avx512.rs` (a 64-byte vertical
//!   pass where [`simd::avx512_enabled`]) and `portable.rs`, which defines the integers the
//!   others compute (the tests check them equal on random images and sizes).
//!
//! The filter is Pillow's `BILINEAR` (a triangle widened by the scale factor when
//! downscaling, so every source pixel contributes), or with `antialias` off the plain two-tap
//! bilinear interpolation of `tf.image.resize`. Weights are rounded to 14 bits and sum to
//! exactly 1, so a flat image stays flat.

mod portable;

use super::grow;
use crate::simd;

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

/// Bytes of one row's colour planes kept between images (a row of 5,000-odd pixels); a wider
/// row's are freed after use.
const RETAIN_PLANES_BYTES: usize = 16 << 10;

/// The most a [`Resampler`] holds between images: its intermediate image, cached taps, row
/// offsets and one row's colour planes.
pub(crate) const RETAINED_BYTES: usize = RETAIN_SCRATCH_BYTES
    + CACHED_TAPS * MAX_CACHED_TAPS_BYTES
    + RETAIN_OFFSETS * std::mem::size_of::<usize>()
    + RETAIN_PLANES_BYTES;

/// Taps kept between images: a few sizes' worth for each axis (a dataset's images mostly
/// come in a handful of sizes, often both orientations of one). A JPEG decoded to planes
/// needs four (luma and chroma, both axes), and the odd sizes between the common ones evict
/// them: with 8, taps took 1.45% of a cold epoch's samples on the ImageNet-like corpus.
const CACHED_TAPS: usize = 24;

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
    /// The same weights as the AVX2 interleaved horizontal kernel multiplies by: per output
    /// and group of four taps, the pairs (w0, w1) four times then (w2, w3) four times, each
    /// pair packed into one `i32`. Built on first use by that kernel ([`Taps::ensure_pairs`]):
    /// a planes decode never needs them. Empty unless `width` is a multiple of 4.
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
    /// Scratch of the AVX2 build ([`avx2::build_taps`]): the outputs' centres, their windows'
    /// first and end source pixels (padded to a multiple of 4 outputs), and four outputs'
    /// rounded weights, tap by tap.
    centers: Vec<f64>,
    bounds: Vec<i32>,
    quant: Vec<i32>,
    /// How the AVX2 planar horizontal kernel gathers these taps (built for horizontal taps
    /// only, those with a padding multiple of 4).
    planar: Planar,
}

/// The gather plan of the AVX2 planar horizontal pass ([`avx2::horizontal_planar`]).
///
/// The pass works on one colour plane at a time, so every 16-bit lane of a `madd` holds a
/// useful product (interleaved RGB wastes a quarter of them), and one 16-byte load and one
/// `pshufb` gather the taps of several outputs at once. Each output gets `p` slots (2, 4 or
/// 8, at least its window of nonzero weights); a 256-bit register holds `16 / p` outputs'
/// slots, gathered from the 16 plane bytes at `bases[r]`. Outputs are padded with empty ones
/// to a multiple of 16 (one store of 16 bytes a plane).
#[derive(Debug, Clone, Default, PartialEq)]
struct Planar {
    /// Slots per output: 2, 4 or 8; 0 if the taps do not fit the plan (windows over 8
    /// pixels, or outputs too far apart for one load), and the interleaved kernel runs.
    p: usize,
    /// The first source pixel the plan reads: plane byte 0.
    origin: usize,
    /// Source pixels the plan reads from `origin`.
    len: usize,
    /// The plane bytes its loads reach: the last base + 16.
    reach: usize,
    /// Per register: the plane byte its 16-byte load starts at.
    bases: Vec<u32>,
    /// Per register: 32 `pshufb` indices (per 128-bit lane: 8 slots, each its byte in the
    /// load then 0x80 for a zero high byte).
    masks: Vec<u8>,
    /// Per register: the 16 weights of its slots.
    weights: Vec<i16>,
    /// Scratch of [`Planar::build`]: each output's first source pixel of nonzero weight.
    first: Vec<usize>,
}

impl Planar {
    /// Plans `taps` (a built [`Taps`]); leaves `p == 0` where they do not fit.
    fn build(&mut self, weights: &[i16], starts: &[usize], width: usize) {
        self.p = 0;
        self.bases.clear();
        self.masks.clear();
        self.weights.clear();
        self.first.clear();
        let dst = starts.len();
        if dst == 0 || width == 0 || weights.len() != dst * width {
            return;
        }
        // Each output's first nonzero source pixel, the longest run of nonzero weights, and
        // the span they cover.
        let mut extent = 1;
        let mut end = 0;
        for (w, &start) in weights.chunks_exact(width).zip(starts) {
            // The first and last nonzero weights (the window is never all zero).
            let (mut a, mut b) = (0, 0);
            while a < width && w[a] == 0 {
                a += 1;
            }
            if a == width {
                a = 0;
            } else {
                b = width - 1;
                while w[b] == 0 {
                    b -= 1;
                }
            }
            extent = extent.max(b + 1 - a);
            end = end.max(start + b + 1);
            self.first.push(start + a);
        }
        let origin = self.first.iter().copied().min().unwrap_or(0);
        let p = match extent {
            1..=2 => 2,
            3..=4 => 4,
            5..=8 => 8,
            _ => return,
        };
        let per_reg = 16 / p;
        let per_lane = per_reg / 2;
        let regs = dst.div_ceil(16) * 16 / per_reg;
        self.masks.resize(regs * 32, 0x80);
        self.weights.resize(regs * 16, 0);
        for r in 0..regs {
            let outputs = r * per_reg..((r + 1) * per_reg).min(dst);
            let base = self.first.get(outputs.clone()).and_then(|f| f.iter().min());
            let base = base.map_or(0, |&b| b - origin);
            for (i, x) in outputs.enumerate() {
                // Output i of the register: lane i / per_lane, slot (i % per_lane) * p
                // (i < 2 * per_lane; no division in this loop).
                let lane = usize::from(i >= per_lane);
                let slot = (i - lane * per_lane) * p;
                let a = self.first[x] - starts[x];
                for j in 0..p.min(width - a) {
                    let w = weights[x * width + a + j];
                    if w == 0 {
                        continue;
                    }
                    let byte = self.first[x] + j - origin - base;
                    if byte >= 16 {
                        // Outputs too far apart to share one load: not planned.
                        return;
                    }
                    self.masks[r * 32 + lane * 16 + 2 * (slot + j)] = byte as u8;
                    self.weights[r * 16 + lane * 8 + slot + j] = w;
                }
            }
            self.bases.push(base as u32);
        }
        self.p = p;
        self.origin = origin;
        self.len = end - origin;
        self.reach = self.bases.iter().max().map_or(0, |&b| b as usize + 16);
    }

    fn heap_bytes(&self) -> usize {
        self.bases.capacity() * 4
            + self.masks.capacity()
            + self.weights.capacity() * 2
            + self.first.capacity() * 8
    }
}

/// Source length, output length, the bits of the crop offset and length, antialiasing, and
/// the padding multiple.
type Key = (usize, usize, u64, u64, bool, usize);

impl Taps {
    /// Taps for resampling the `region` source pixels starting at `offset` (fractional, for a
    /// centre crop) out of `src_len` onto `dst_len` pixels, built the way a resampler on this
    /// CPU builds them, pairs included.
    #[cfg(test)]
    fn new(key: Key) -> Taps {
        Taps::built_with(key, kernels_supported() != Kernels::Portable)
    }

    /// [`Taps::new`] by the AVX2 build (where this CPU has it) or the portable one.
    #[cfg(test)]
    fn built_with(key: Key, simd: bool) -> Taps {
        let mut t = Taps::default();
        t.build(key, simd && kernels_supported() != Kernels::Portable);
        t.ensure_pairs();
        t
    }

    /// Recomputes the taps for `key`, reusing this value's vectors; with `simd` (AVX2 detected)
    /// four outputs at a time, to the same integers. Leaves [`Taps::pairs`] empty.
    fn build(&mut self, key: Key, simd: bool) {
        let (src_len, dst_len, offset, region, antialias, multiple) = key;
        let (offset, region) = (f64::from_bits(offset), f64::from_bits(region));
        let scale = region / dst_len as f64;
        // The filter's stretch: downscaling widens the triangle so no source pixel is skipped.
        let stretch = if antialias { scale.max(1.0) } else { 1.0 };
        let (support, inv) = (stretch, 1.0 / stretch);
        self.key = key;
        self.pairs.clear();
        // Every window bound the AVX2 build computes must fit an i32 lane.
        let small = |v: f64| v.is_finite() && v.abs() < f64::from(1 << 30);
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))] // set by the x86-64 kernels
        let mut done = false;
        #[cfg(target_arch = "x86_64")]
        if simd
            && src_len < 1 << 30
            && dst_len < 1 << 30
            && [offset, region, support, offset + region + support + 1.0]
                .into_iter()
                .all(small)
        {
            let f = avx2::Filter {
                offset,
                scale,
                support,
                inv,
            };
            // SAFETY: `simd` is only set where AVX2 was detected at run time.
            done = unsafe { avx2::build_taps(self, src_len, dst_len, multiple, f) };
        }
        let _ = (simd, small);
        if !done {
            self.build_portable(src_len, dst_len, multiple, offset, scale, support, inv);
        }
        if multiple == 4 {
            self.planar.build(&self.weights, &self.starts, self.width);
        } else {
            self.planar.build(&[], &[], 0);
        }
    }

    /// [`Taps::build`]'s weights, starts and width one output at a time.
    #[allow(clippy::too_many_arguments)]
    fn build_portable(
        &mut self,
        src_len: usize,
        dst_len: usize,
        multiple: usize,
        offset: f64,
        scale: f64,
        support: f64,
        inv: f64,
    ) {
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
        let width = self.reset(dst_len, longest, multiple);
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
            let start = window_start(lo, src_len, width);
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
    }

    /// Sets the width for windows of at most `longest` taps (rounded up to `multiple`), zeroes
    /// the weights of `dst_len` outputs and clears the starts; returns the width.
    fn reset(&mut self, dst_len: usize, longest: usize, multiple: usize) -> usize {
        let width = longest.div_ceil(multiple) * multiple;
        self.width = width;
        self.weights.clear();
        self.weights.resize(dst_len * width, 0);
        self.starts.clear();
        width
    }

    /// Builds [`Taps::pairs`] if they are missing (the AVX2 interleaved horizontal kernel
    /// reads them; without them it leaves the row to the portable loop).
    fn ensure_pairs(&mut self) {
        if !self.pairs.is_empty() || !self.width.is_multiple_of(4) {
            return;
        }
        self.pairs
            .extend(self.weights.chunks_exact(4).flat_map(|w| {
                let (a, b) = (pack(w[0], w[1]), pack(w[2], w[3]));
                [a, a, a, a, b, b, b, b]
            }));
    }

    fn heap_bytes(&self) -> usize {
        self.weights.capacity() * 2
            + self.pairs.capacity() * 4
            + self.starts.capacity() * 8
            + self.windows.capacity() * 24
            + self.scratch.capacity() * 8
            + self.centers.capacity() * 8
            + self.bounds.capacity() * 4
            + self.quant.capacity() * 4
            + self.planar.heap_bytes()
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

/// The first source pixel of an output's taps whose window starts at `lo`: `lo`, moved left
/// where `width` taps from it would pass the end of the source (zero weights then lead).
#[inline]
fn window_start(lo: usize, src_len: usize, width: usize) -> usize {
    if src_len >= width {
        lo.min(src_len - width)
    } else {
        0
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
    /// Boxed, so moving an entry to the front moves pointers, not the 400-odd bytes of each
    /// `Taps` (that memmove was 0.3% of a cold epoch on a corpus of many sizes).
    #[allow(clippy::vec_box)]
    cache: Vec<Box<Taps>>,
    tmp: Vec<u8>,
    row_offsets: Vec<usize>,
    /// One row as three colour planes, for the planar horizontal kernel.
    planes: Vec<u8>,
    kernels: Kernels,
}

/// The kernels a [`Resampler`] runs, picked from what the CPU has at run time. All three
/// compute the same integers (the tests check them equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernels {
    Portable,
    Avx2,
    /// AVX2, with the vertical pass 64 bytes a step (AVX-512BW).
    Avx512,
}

impl Default for Resampler {
    fn default() -> Self {
        Self::new()
    }
}

/// What to resample: a `width`×`height` image of `channels` interleaved 8-bit channels (3: RGB,
/// 1: one plane), `stride` bytes a row, and the part of it that maps onto the output (`x`,
/// `y`: offset and length along each axis, fractional for a centre crop).
pub(crate) struct Source<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) stride: usize,
    pub(crate) channels: usize,
    pub(crate) x: (f64, f64),
    pub(crate) y: (f64, f64),
}

impl<'a> Source<'a> {
    /// A whole RGB8 image, rows packed, to be resampled in its `x` and `y` regions.
    pub(crate) fn rgb(
        data: &'a [u8],
        width: usize,
        height: usize,
        x: (f64, f64),
        y: (f64, f64),
    ) -> Self {
        Source {
            data,
            width,
            height,
            stride: width * 3,
            channels: 3,
            x,
            y,
        }
    }
}

impl Resampler {
    pub(crate) fn new() -> Self {
        Resampler {
            cache: Vec::new(),
            tmp: Vec::new(),
            row_offsets: Vec::new(),
            planes: Vec::new(),
            kernels: kernels_available(),
        }
    }

    /// The same resampler computing with the portable kernels only (for tests and benches).
    #[cfg(test)]
    pub(crate) fn portable() -> Self {
        Self::with_kernels(Kernels::Portable)
    }

    /// The same resampler with `kernels`, or the best this CPU has if it lacks them (tests).
    #[cfg(test)]
    pub(crate) fn with_kernels(kernels: Kernels) -> Self {
        let best = kernels_supported();
        let rank = |k| match k {
            Kernels::Portable => 0,
            Kernels::Avx2 => 1,
            Kernels::Avx512 => 2,
        };
        Resampler {
            kernels: if rank(kernels) <= rank(best) {
                kernels
            } else {
                best
            },
            ..Self::new()
        }
    }

    /// Resamples `src` onto `dst_w`×`dst_h` pixels of its channels in `out`
    /// (`dst_w * dst_h * src.channels` bytes, rows packed).
    pub(crate) fn resample(
        &mut self,
        src: &Source<'_>,
        dst_w: usize,
        dst_h: usize,
        antialias: bool,
        out: &mut [u8],
    ) -> Result<(), String> {
        let (sw, sh, ch) = (src.width, src.height, src.channels);
        if sw == 0 || sh == 0 || dst_w == 0 || dst_h == 0 {
            return Err(format!(
                "resize: cannot resize {sw}x{sh} to {dst_w}x{dst_h}"
            ));
        }
        if !matches!(ch, 1 | 3)
            || src.stride < sw * ch
            || src.data.len() < (sh - 1) * src.stride + sw * ch
            || out.len() != dst_w * dst_h * ch
        {
            return Err(format!(
                "resize: {} bytes ({} a row) for a {sw}x{sh} image of {ch} channels, {} for {dst_w}x{dst_h}",
                src.data.len(),
                src.stride,
                out.len()
            ));
        }
        let simd = self.kernels;
        let vector = simd != Kernels::Portable;
        let mut cols = taps(&mut self.cache, sw, dst_w, src.x, antialias, 4, vector);
        let rows = taps(&mut self.cache, sh, dst_h, src.y, antialias, 2, vector);
        if ch == 3 && vector {
            cols.ensure_pairs();
        }
        let (x0, x1) = cols.span(sw);
        let (y0, y1) = rows.span(sh);
        let (span_w, span_h) = (x1 - x0, y1 - y0);
        let mut tmp = std::mem::take(&mut self.tmp);
        // Vertical first, unless that intermediate would outgrow both the source span and the
        // output (upscaling a wide, short image): then horizontal first.
        if dst_h * span_w <= (span_h * span_w).max(dst_h * dst_w) {
            let stride = span_w * ch;
            // Every row is overwritten below: only grow (zeroing once), never clear.
            grow(&mut tmp, dst_h * stride + PAD);
            for (y, row) in tmp.chunks_exact_mut(stride).take(dst_h).enumerate() {
                offsets(&mut self.row_offsets, &rows, y, sh, src.stride, x0 * ch);
                vertical(src.data, &self.row_offsets, rows.weights(y), row, simd);
            }
            for (y, row) in out.chunks_exact_mut(dst_w * ch).enumerate() {
                let row_in = &tmp[y * stride..];
                horizontal(row_in, &cols, x0, row, simd, &mut self.planes, ch);
            }
        } else {
            let stride = dst_w * ch;
            grow(&mut tmp, span_h * stride);
            for (y, row) in tmp.chunks_exact_mut(stride).take(span_h).enumerate() {
                let row_in = &src.data[(y0 + y) * src.stride..];
                horizontal(row_in, &cols, 0, row, simd, &mut self.planes, ch);
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
        if self.planes.capacity() > RETAIN_PLANES_BYTES {
            self.planes = Vec::new();
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

/// The cached taps for this axis, taken out of the cache (the caller puts them back in
/// front), or new ones.
#[allow(clippy::vec_box)] // see Resampler::cache
fn taps(
    cache: &mut Vec<Box<Taps>>,
    src_len: usize,
    dst_len: usize,
    (offset, region): (f64, f64),
    antialias: bool,
    multiple: usize,
    simd: bool,
) -> Box<Taps> {
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
        Box::default()
    };
    t.build(key, simd);
    t
}

/// Byte offsets of the source rows output row `y` reads (`stride` bytes a row, from column
/// byte `col`); rows past the source repeat the last (their weights are zero).
fn offsets(out: &mut Vec<usize>, rows: &Taps, y: usize, src_h: usize, stride: usize, col: usize) {
    out.clear();
    let start = rows.starts[y];
    out.extend((0..rows.width).map(|k| (start + k).min(src_h - 1) * stride + col));
}

#[cfg(test)]
fn simd_available() -> bool {
    kernels_supported() != Kernels::Portable
}

/// The kernels a new [`Resampler`] runs: the best this CPU has, AVX-512 only where
/// [`simd::avx512_enabled`] (see there why not always).
fn kernels_available() -> Kernels {
    match kernels_supported() {
        Kernels::Avx512 if !simd::avx512_enabled() => Kernels::Avx2,
        k => k,
    }
}

/// The best kernels this CPU can run (the tests check each against the others).
fn kernels_supported() -> Kernels {
    if simd::avx512_supported() {
        Kernels::Avx512
    } else if simd::avx2_supported() {
        Kernels::Avx2
    } else {
        Kernels::Portable
    }
}

#[inline]
fn to_u8(acc: i32) -> u8 {
    ((acc + HALF) >> BITS).clamp(0, 255) as u8
}

/// One output row of the vertical pass: `out[i] = Σ_k w[k] · src[offsets[k] + i]`.
fn vertical(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8], kernels: Kernels) {
    let n = out.len();
    debug_assert!(offsets.iter().all(|&o| o + n <= src.len()));
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))] // set by the x86-64 kernels
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if kernels == Kernels::Avx512 {
            // SAFETY: `Avx512` is only chosen where AVX-512BW was detected at run time.
            done = unsafe { avx512::vertical(src, offsets, w, out) };
        }
        if done == 0 && kernels != Kernels::Portable {
            // SAFETY: `Avx2` and `Avx512` are only chosen where AVX2 was detected at run time.
            done = unsafe { avx2::vertical(src, offsets, w, out) };
        }
    }
    let _ = kernels;
    portable::vertical(src, offsets, w, out, done);
}

/// One output row of the horizontal pass over `src` (a row of pixels of `channels` channels,
/// 3 or 1, whose first is source column `first`; the slice may run on past the row). `planes`
/// is scratch for the planar kernel.
fn horizontal(
    src: &[u8],
    cols: &Taps,
    first: usize,
    out: &mut [u8],
    kernels: Kernels,
    planes: &mut Vec<u8>,
    channels: usize,
) {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))] // set by the x86-64 kernels
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if kernels != Kernels::Portable {
        let plan = &cols.planar;
        let from = plan.origin.wrapping_sub(first);
        if channels == 1 {
            if plan.p != 0 && plan.origin >= first && from + plan.len <= src.len() {
                // One plane already: the kernel reads it where it lies, or from a padded copy
                // where its last loads would pass the end of `src`.
                let row = if from + plan.reach <= src.len() {
                    &src[from..]
                } else {
                    grow(planes, plan.reach.max(plan.len));
                    planes[..plan.len].copy_from_slice(&src[from..from + plan.len]);
                    &planes[..]
                };
                // SAFETY: SIMD kernels are only chosen where AVX2 was detected at run time.
                if unsafe { avx2::horizontal_plane(row, plan, out) } {
                    return;
                }
            }
        } else if plan.p != 0 && plan.origin >= first && (from + plan.len) * 3 <= src.len() {
            // Three planes of the pixels the taps read, each padded so that every 16-byte
            // load stays inside it.
            let stride = plan.len + 32;
            grow(planes, 3 * stride);
            // SAFETY: SIMD kernels are only chosen where AVX2 was detected at run time.
            let planned = unsafe {
                avx2::deinterleave(&src[from * 3..], plan.len, planes, stride);
                avx2::horizontal_planar(planes, stride, plan, out)
            };
            if planned {
                return;
            }
        }
        if channels == 3 {
            // SAFETY: SIMD kernels are only chosen where AVX2 was detected at run time.
            done = unsafe { avx2::horizontal(src, cols, first, out) };
        }
    }
    let _ = (kernels, planes);
    portable::horizontal(src, cols, first, out, channels, done);
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(test)]
mod tests;
