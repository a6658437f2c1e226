//! The portable kernels of the resize, which define its integers: the AVX2 and AVX-512 kernels
//! compute the same (the tests check them equal on random images and sizes), and finish what a
//! vector kernel leaves over.

use super::{to_u8, Taps};

/// One output row of the vertical pass from output byte `from` on:
/// `out[i] = Σ_k w[k] · src[offsets[k] + i]`.
pub(super) fn vertical(src: &[u8], offsets: &[usize], w: &[i16], out: &mut [u8], from: usize) {
    for (i, o) in out.iter_mut().enumerate().skip(from) {
        let acc: i32 = offsets
            .iter()
            .zip(w)
            .map(|(&off, &w)| i32::from(w) * i32::from(src[off + i]))
            .sum();
        *o = to_u8(acc);
    }
}

/// One output row of the horizontal pass from output pixel `from` on, over `src` (pixels of
/// `channels` channels whose first is source column `first`).
pub(super) fn horizontal(
    src: &[u8],
    cols: &Taps,
    first: usize,
    out: &mut [u8],
    channels: usize,
    from: usize,
) {
    for (x, px) in out.chunks_exact_mut(channels).enumerate().skip(from) {
        let base = cols.starts[x] - first;
        let mut acc = [0i32; 3];
        for (k, &w) in cols.weights(x).iter().enumerate() {
            if w == 0 {
                continue; // a padding tap may lie past the source row
            }
            let p = &src[(base + k) * channels..(base + k + 1) * channels];
            for (a, &v) in acc.iter_mut().zip(p) {
                *a += i32::from(w) * i32::from(v);
            }
        }
        for (o, &a) in px.iter_mut().zip(&acc) {
            *o = to_u8(a);
        }
    }
}
