//! Normalize: how the batcher writes a `u8` sample into the batch buffer, once, in the output
//! dtype and layout ([`Dtype`], [`Layout`]): `f32` (`x / 255`, with a mean and standard deviation
//! per channel), `f16` and `bf16` (the `f32` values rounded), or `u8` as it is. The `f32` kernel
//! has AVX2 and AVX-512 variants, chosen at run time (`crate::simd`), each giving the portable
//! kernel's bits; a new dtype is an arm in [`Dtype`], [`BatchStorage`] and [`Normalizer::write`].

use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use crate::simd;

/// The element type of the batch images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dtype {
    /// 32-bit float, `x / 255` then `(x - mean) / std` per channel. The default.
    #[default]
    F32,
    /// IEEE half precision (half the memory of `F32`), same values rounded.
    F16,
    /// bfloat16 (half the memory of `F32`, `F32`'s range), same values rounded.
    Bf16,
    /// The raw `u8` pixels, no normalization (a quarter of `F32`'s memory).
    U8,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::U8 => 1,
        }
    }
    /// The lowercase name (`"f32"`, `"f16"`, `"bf16"`, `"u8"`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::U8 => "u8",
        }
    }
}

/// The memory layout of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Layout {
    /// `[batch, height, width, channels]`, as TensorFlow. The default.
    #[default]
    Nhwc,
    /// `[batch, channels, height, width]`, as PyTorch.
    Nchw,
}

/// Per-channel normalization: `x * scale[c] + bias[c]` with `scale = 1 / (255 * std)` and
/// `bias = -mean / std`, i.e. `(x / 255 - mean) / std` computed as one multiply and one add
/// (the CUDA kernel computes the same). `f16`/`bf16` values are the `f32` values rounded, read
/// from per-channel tables; `u8` is a copy.
#[derive(Debug, Clone)]
pub(crate) struct Normalizer {
    layout: Layout,
    scale: [f32; 3],
    bias: [f32; 3],
    /// `scale` and `bias` repeated over 48 elements (16 RGB pixels): one vectorizable block.
    scale48: [f32; 48],
    bias48: [f32; 48],
    lut_f16: [[f16; 256]; 3],
    lut_bf16: [[bf16; 256]; 3],
}

impl Normalizer {
    pub(crate) fn new(mean: [f32; 3], std: [f32; 3], layout: Layout) -> Self {
        let scale = std::array::from_fn(|c| 1.0 / (255.0 * std[c]));
        let bias = std::array::from_fn(|c| -mean[c] / std[c]);
        let value = |c: usize, v: usize| v as f32 * scale[c] + bias[c];
        let lut_f16 = std::array::from_fn(|c| std::array::from_fn(|v| f16::from_f32(value(c, v))));
        let lut_bf16 =
            std::array::from_fn(|c| std::array::from_fn(|v| bf16::from_f32(value(c, v))));
        Normalizer {
            layout,
            scale,
            bias,
            scale48: std::array::from_fn(|i| scale[i % 3]),
            bias48: std::array::from_fn(|i| bias[i % 3]),
            lut_f16,
            lut_bf16,
        }
    }

    /// Writes one `u8` HWC sample into image `slot` of a batch buffer.
    pub(crate) fn write(&self, sample: &[u8], out: &mut BatchStorage, slot: usize) {
        let n = sample.len();
        let range = slot * n..(slot + 1) * n;
        match out {
            BatchStorage::F32(v) => self.write_f32(sample, &mut v[range]),
            BatchStorage::F16(v) => self.write_lut(sample, &mut v[range], &self.lut_f16),
            BatchStorage::Bf16(v) => self.write_lut(sample, &mut v[range], &self.lut_bf16),
            BatchStorage::U8(v) => self.write_u8(sample, &mut v[range]),
        }
    }

    fn write_f32(&self, sample: &[u8], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if simd::avx512_enabled() {
                // SAFETY: AVX-512F is present (`avx512_enabled` checks it).
                return unsafe { self.write_f32_avx512(sample, out) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 is present (checked just above).
                return unsafe { self.write_f32_avx2(sample, out) };
            }
        }
        self.write_f32_portable(sample, out)
    }

    /// [`Normalizer::write_f32_avx2`] with sixteen lanes: 48 values (16 pixels) a step, in
    /// three vectors whose channel pattern starts at the first 64-byte-aligned value; the
    /// same multiply then add, so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn write_f32_avx512(&self, sample: &[u8], out: &mut [f32]) {
        use std::arch::x86_64::*;
        if self.layout != Layout::Nhwc || sample.len() != out.len() {
            return self.write_f32_portable(sample, out);
        }
        let (s, b) = (&self.scale, &self.bias);
        let n = out.len();
        let head = out.as_ptr().align_offset(64).min(n);
        for i in 0..head {
            out[i] = f32::from(sample[i]) * s[i % 3] + b[i % 3];
        }
        let pattern = |v: &[f32; 3], k: usize| {
            let lanes: [f32; 16] = std::array::from_fn(|j| v[(head + 16 * k + j) % 3]);
            // SAFETY: `lanes` holds 16 f32.
            unsafe { _mm512_loadu_ps(lanes.as_ptr()) }
        };
        let scale = [pattern(s, 0), pattern(s, 1), pattern(s, 2)];
        let bias = [pattern(b, 0), pattern(b, 1), pattern(b, 2)];
        let mut i = head;
        while i + 48 <= n {
            for k in 0..3 {
                let at = i + 16 * k;
                // SAFETY: at + 16 <= n = sample.len() = out.len(); `out + at` is 64-byte
                // aligned (head aligns it, and each step is 192 bytes or 64).
                unsafe {
                    let px = _mm_loadu_si128(sample.as_ptr().add(at).cast());
                    let v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(px));
                    let v = _mm512_add_ps(_mm512_mul_ps(v, scale[k]), bias[k]);
                    _mm512_stream_ps(out.as_mut_ptr().add(at), v);
                }
            }
            i += 48;
        }
        for i in i..n {
            out[i] = f32::from(sample[i]) * s[i % 3] + b[i % 3];
        }
        // Streaming stores are weakly ordered: make them visible before the batch is handed on.
        _mm_sfence();
    }

    /// [`Normalizer::write_f32_portable`] with AVX2: eight lanes instead of SSE2's four, the
    /// same multiply then add per value (never fused), so the same bits. In NHWC the values
    /// go out with streaming stores: a batch (19.7 MB of f32 at 64×160×160×3) is far larger
    /// than the caches, so reading each line in before overwriting it would only add memory
    /// traffic.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn write_f32_avx2(&self, sample: &[u8], out: &mut [f32]) {
        use std::arch::x86_64::*;
        if self.layout != Layout::Nhwc || sample.len() != out.len() {
            return self.write_f32_portable(sample, out);
        }
        let (s, b) = (&self.scale, &self.bias);
        let n = out.len();
        // Scalar values up to the first 32-byte-aligned element.
        let head = out.as_ptr().align_offset(32).min(n);
        for i in 0..head {
            out[i] = f32::from(sample[i]) * s[i % 3] + b[i % 3];
        }
        // Then 24 values (8 pixels) a step: three vectors whose channel pattern starts at
        // `head`'s channel.
        let pattern = |v: &[f32; 3], k: usize| {
            let at = |j: usize| v[(head + 8 * k + j) % 3];
            _mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7))
        };
        let scale = [pattern(s, 0), pattern(s, 1), pattern(s, 2)];
        let bias = [pattern(b, 0), pattern(b, 1), pattern(b, 2)];
        let mut i = head;
        while i + 24 <= n {
            for k in 0..3 {
                let at = i + 8 * k;
                // SAFETY: at + 8 <= n = sample.len() = out.len(); `out + at` is 32-byte aligned
                // (head aligns it, and each step is 96 bytes or 32).
                unsafe {
                    let px = _mm_loadl_epi64(sample.as_ptr().add(at).cast());
                    let v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(px));
                    let v = _mm256_add_ps(_mm256_mul_ps(v, scale[k]), bias[k]);
                    _mm256_stream_ps(out.as_mut_ptr().add(at), v);
                }
            }
            i += 24;
        }
        for i in i..n {
            out[i] = f32::from(sample[i]) * s[i % 3] + b[i % 3];
        }
        // Streaming stores are weakly ordered: make them visible before the batch is handed on.
        _mm_sfence();
    }

    #[inline(always)]
    fn write_f32_portable(&self, sample: &[u8], out: &mut [f32]) {
        let (s, b) = (&self.scale, &self.bias);
        match self.layout {
            Layout::Nhwc => {
                let mut src = sample.chunks_exact(48);
                let mut dst = out.chunks_exact_mut(48);
                for (x, y) in (&mut src).zip(&mut dst) {
                    for i in 0..48 {
                        y[i] = f32::from(x[i]) * self.scale48[i] + self.bias48[i];
                    }
                }
                for (i, (x, y)) in src.remainder().iter().zip(dst.into_remainder()).enumerate() {
                    *y = f32::from(*x) * s[i % 3] + b[i % 3];
                }
            }
            Layout::Nchw => {
                let plane = sample.len() / 3;
                let (r, rest) = out.split_at_mut(plane);
                let (g, bl) = rest.split_at_mut(plane);
                for (i, p) in sample.chunks_exact(3).enumerate() {
                    r[i] = f32::from(p[0]) * s[0] + b[0];
                    g[i] = f32::from(p[1]) * s[1] + b[1];
                    bl[i] = f32::from(p[2]) * s[2] + b[2];
                }
            }
        }
    }

    fn write_lut<T: Copy>(&self, sample: &[u8], out: &mut [T], lut: &[[T; 256]; 3]) {
        match self.layout {
            Layout::Nhwc => {
                for (s, d) in sample.chunks_exact(3).zip(out.chunks_exact_mut(3)) {
                    d[0] = lut[0][usize::from(s[0])];
                    d[1] = lut[1][usize::from(s[1])];
                    d[2] = lut[2][usize::from(s[2])];
                }
            }
            Layout::Nchw => {
                let plane = sample.len() / 3;
                let (r, rest) = out.split_at_mut(plane);
                let (g, b) = rest.split_at_mut(plane);
                for (i, s) in sample.chunks_exact(3).enumerate() {
                    r[i] = lut[0][usize::from(s[0])];
                    g[i] = lut[1][usize::from(s[1])];
                    b[i] = lut[2][usize::from(s[2])];
                }
            }
        }
    }

    /// Writes `samples[k]` into image `k` of a batch buffer, in parallel on the current rayon
    /// pool.
    pub(crate) fn write_all_par(&self, samples: &[Vec<u8>], out: &mut BatchStorage) {
        use rayon::prelude::*;
        let Some(n) = samples.first().map(Vec::len) else {
            return;
        };
        self.write_par(samples.par_iter().map(Vec::as_slice), n, out);
    }

    /// Writes the `count` samples of `len` bytes each that `pixels` holds back to back into a
    /// batch buffer, in parallel on the current rayon pool.
    pub(crate) fn write_batch_par(
        &self,
        pixels: &[u8],
        len: usize,
        count: usize,
        out: &mut BatchStorage,
    ) {
        use rayon::prelude::*;
        if len == 0 {
            return;
        }
        let used = (len * count).min(pixels.len());
        self.write_par(pixels[..used].par_chunks_exact(len), len, out);
    }

    fn write_par<'a>(
        &self,
        samples: impl rayon::iter::IndexedParallelIterator<Item = &'a [u8]>,
        n: usize,
        out: &mut BatchStorage,
    ) {
        use rayon::prelude::*;
        let used = n * samples.len();
        match out {
            BatchStorage::F32(v) => v[..used]
                .par_chunks_mut(n)
                .zip(samples)
                .for_each(|(o, s)| self.write_f32(s, o)),
            BatchStorage::F16(v) => v[..used]
                .par_chunks_mut(n)
                .zip(samples)
                .for_each(|(o, s)| self.write_lut(s, o, &self.lut_f16)),
            BatchStorage::Bf16(v) => v[..used]
                .par_chunks_mut(n)
                .zip(samples)
                .for_each(|(o, s)| self.write_lut(s, o, &self.lut_bf16)),
            BatchStorage::U8(v) => v[..used]
                .par_chunks_mut(n)
                .zip(samples)
                .for_each(|(o, s)| self.write_u8(s, o)),
        }
    }

    fn write_u8(&self, sample: &[u8], out: &mut [u8]) {
        match self.layout {
            Layout::Nhwc => out.copy_from_slice(sample),
            Layout::Nchw => {
                let lut = [std::array::from_fn(|i| i as u8); 3];
                self.write_lut(sample, out, &lut)
            }
        }
    }

    /// True when writing into `out` is a plain copy (u8, NHWC).
    pub(crate) fn is_copy(&self, out: &BatchStorage) -> bool {
        matches!(out, BatchStorage::U8(_)) && self.layout == Layout::Nhwc
    }
}

/// The images of one batch, in the output dtype.
#[derive(Debug)]
pub(crate) enum BatchStorage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    U8(Vec<u8>),
}

impl BatchStorage {
    pub(crate) fn new(dtype: Dtype, len: usize) -> Self {
        match dtype {
            Dtype::F32 => BatchStorage::F32(vec![0.0; len]),
            Dtype::F16 => BatchStorage::F16(vec![f16::ZERO; len]),
            Dtype::Bf16 => BatchStorage::Bf16(vec![bf16::ZERO; len]),
            Dtype::U8 => BatchStorage::U8(vec![0; len]),
        }
    }
    pub(crate) fn as_bytes(&self) -> &[u8] {
        fn bytes<T>(v: &[T]) -> &[u8] {
            // SAFETY: f32, f16, bf16 and u8 have no padding and every byte is initialized; the
            // returned slice covers exactly the same memory with u8's alignment of 1.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            BatchStorage::F32(v) => bytes(v),
            BatchStorage::F16(v) => bytes(v),
            BatchStorage::Bf16(v) => bytes(v),
            BatchStorage::U8(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_f32_fast_path_gives_the_portable_bits() {
        // A sample whose length is not a multiple of the vector step, written at offsets of
        // every alignment, against the portable loop.
        let sample: Vec<u8> = (0..37 * 41 * 3).map(|i| (i * 31 % 256) as u8).collect();
        for layout in [Layout::Nhwc, Layout::Nchw] {
            let n = Normalizer::new([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], layout);
            let mut want = vec![f32::NAN; sample.len()];
            n.write_f32_portable(&sample, &mut want);
            // Every kernel this CPU has, at every alignment of the output.
            type Kernel = fn(&Normalizer, &[u8], &mut [f32]);
            #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
            let mut kernels: Vec<(&str, Kernel)> = vec![("dispatch", Normalizer::write_f32)];
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 is present (checked just above).
                    kernels.push(("avx2", |n, s, o| unsafe { n.write_f32_avx2(s, o) }));
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512F is present (checked just above).
                    kernels.push(("avx512", |n, s, o| unsafe { n.write_f32_avx512(s, o) }));
                }
            }
            for (name, kernel) in kernels {
                for shift in 0..16 {
                    let mut fast = vec![f32::NAN; shift + sample.len()];
                    kernel(&n, &sample, &mut fast[shift..]);
                    let same = fast[shift..]
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{name}, {layout:?}, shift {shift}");
                }
            }
        }
    }

    #[test]
    fn normalize_layouts_and_dtypes() {
        let n = Normalizer::new([0.0; 3], [1.0; 3], Layout::Nhwc);
        let sample = [0u8, 51, 255, 255, 0, 102];
        let mut out = BatchStorage::new(Dtype::F32, 12);
        n.write(&sample, &mut out, 1);
        let BatchStorage::F32(v) = &out else {
            unreachable!()
        };
        let want = [0.0, 0.2, 1.0, 1.0, 0.0, 0.4];
        assert!(
            v[6..].iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{v:?}"
        );
        assert!(v[..6].iter().all(|&x| x == 0.0));
        let n = Normalizer::new([0.5; 3], [0.5; 3], Layout::Nchw);
        let mut out = BatchStorage::new(Dtype::F32, 6);
        n.write(&sample, &mut out, 0);
        let BatchStorage::F32(v) = &out else {
            unreachable!()
        };
        let want = [-1.0, 1.0, -0.6, -1.0, 1.0, -0.2];
        assert!(
            v.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{v:?}"
        );
        let mut out = BatchStorage::new(Dtype::Bf16, 6);
        n.write(&sample, &mut out, 0);
        let BatchStorage::Bf16(v) = &out else {
            unreachable!()
        };
        assert_eq!(v[1], bf16::from_f32(1.0));
        let mut out = BatchStorage::new(Dtype::U8, 6);
        n.write(&sample, &mut out, 0);
        assert_eq!(out.as_bytes(), &[0, 255, 51, 0, 255, 102]);
    }
}
