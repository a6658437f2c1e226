//! The transform stage: resize a decoded image to the output size (`u8`), apply its EXIF
//! orientation, crop and flip it. The normalize to the output dtype and layout happens later,
//! once, when a batch is written (`batch/normalize.rs`).
//!
//! Much of the crate's `unsafe` is in this module: the AVX2 and AVX-512 kernels of the resize
//! (`resample/`) and the colour conversion (`color.rs`), each called
//! only after `simd.rs` has checked at run time that the CPU has the instructions, with a
//! `SAFETY` comment on every block.

mod augment;
mod base;
mod color;
mod resample;

use crate::image::{Decoded, Pixels, Planes, Rect};
pub use augment::Transform;
pub(crate) use augment::{crop_box, display_dims, flip_horizontal, to_stored, Draw};
pub(crate) use base::base_len;

/// How an image is fitted to the output size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResizeMode {
    /// Scale each axis to the output size, ignoring the aspect ratio: what
    /// `tf.image.resize(img, [160, 160])` does. The default.
    #[default]
    Stretch,
    /// Crop the largest centred region with the output's aspect ratio (for a square output,
    /// the centred square on the shorter side), then scale it to the output size.
    ShorterSideCenterCrop,
}

/// The resampling filter of the resize.
///
/// After DCT-scaled decoding, a JPEG is at most about twice the output size on each axis, so
/// the two filters differ only in how they treat detail finer than the output can hold.
/// `imagefeed floor` prints how far apart their outputs are on a source (mean PSNR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResizeFilter {
    /// A triangle filter widened by the scale factor, so every source pixel contributes
    /// (Pillow's `BILINEAR`, `tf.image.resize(..., antialias=True)`). The default.
    #[default]
    Antialiased,
    /// Bilinear interpolation between the two nearest source pixels on each axis, as
    /// `tf.image.resize(img, size)` (TensorFlow's default, `antialias=False`) and
    /// `torch.nn.functional.interpolate(mode="bilinear")` do, wherever the source region is
    /// at most twice the output on both axes. Beyond that (a PNG, or a JPEG too large for
    /// DCT scaling to bring within 2×) it falls back to [`ResizeFilter::Antialiased`], so a
    /// large image never aliases badly. A little cheaper per resize (34 µs against 40 µs
    /// for 250×188 → 160×160, `cargo bench --bench transform -- resize`), well under 1% of
    /// a cold epoch, where decoding dominates.
    Bilinear,
}

/// Output size, transform and filter: what the resize produces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Geometry {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) transform: Transform,
    pub(crate) filter: ResizeFilter,
    /// The probability of mirroring a sample left to right.
    pub(crate) flip: f64,
}

impl Geometry {
    /// Bytes of one `u8` RGB sample.
    pub(crate) fn sample_len(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

    /// The largest DCT scale denominator (8, 4, 2 or 1) at which a `w`×`h` JPEG (stored
    /// orientation) still covers the output size on both axes after cropping.
    pub(crate) fn dct_denominator(&self, w: u32, h: u32, orientation: u8) -> u32 {
        // The target in the stored frame's axes: orientations 5..8 swap width and height.
        let (tw, th) = if orientation >= 5 {
            (self.height, self.width)
        } else {
            (self.width, self.height)
        };
        for d in [8u32, 4, 2] {
            let (sw, sh) = (w.div_ceil(d), h.div_ceil(d));
            let (rw, rh) = self.covered_region(sw, sh, tw, th);
            if rw + 1e-9 >= f64::from(tw) && rh + 1e-9 >= f64::from(th) {
                return d;
            }
        }
        1
    }

    /// Bounds on the pixels a random-resized-crop's decode of a `w`×`h` JPEG (stored frame,
    /// EXIF orientation `orientation`) writes, whatever box it draws, with `pad` pixels of
    /// alignment and filter margin on each axis: the decode holds at most the largest of these
    /// regions. At the chosen scale `1/s` the box covers the output; if `s` < 8 it did not at
    /// `1/2s`, so one axis of the scaled box is under twice the output's, and the box's aspect
    /// ratio bounds the other. At `s` = 8 the region is within the frame at 1/8.
    pub(crate) fn crop_decode_bounds(
        &self,
        w: u32,
        h: u32,
        orientation: u8,
        pad: u32,
    ) -> [(u32, u32); 3] {
        let (mut tw, mut th) = (f64::from(self.width), f64::from(self.height));
        // The box's aspect ratio (width / height) in display coordinates.
        let (mut rmin, mut rmax) = match self.transform {
            Transform::RandomResizedCrop { ratio, .. } => {
                (ratio.0.min(ratio.1), ratio.0.max(ratio.1))
            }
            _ => (tw / th, tw / th),
        };
        if orientation >= 5 {
            (tw, th) = (th, tw);
            (rmin, rmax) = (1.0 / rmax, 1.0 / rmin);
        }
        let rmin = rmin.max(f64::MIN_POSITIVE);
        let dim = |v: f64, max: u32| {
            ((v.ceil().min(f64::from(u32::MAX)) as u32).saturating_add(pad)).min(max)
        };
        [
            (dim(2.0 * tw, w), dim(2.0 * tw / rmin, h)),
            (dim(2.0 * th * rmax, w), dim(2.0 * th, h)),
            (
                dim(f64::from(w.div_ceil(8)), w),
                dim(f64::from(h.div_ceil(8)), h),
            ),
        ]
    }

    /// The largest DCT scale denominator (8, 4, 2 or 1) at which the box `crop` of a `w`×`h`
    /// JPEG (both in the stored frame, at full scale) still covers the output on both axes.
    pub(crate) fn dct_denominator_for_crop(
        &self,
        w: u32,
        h: u32,
        crop: Rect,
        orientation: u8,
    ) -> u32 {
        let (tw, th) = if orientation >= 5 {
            (self.height, self.width)
        } else {
            (self.width, self.height)
        };
        for d in [8u32, 4, 2] {
            let (sx, sy) = (
                f64::from(w.div_ceil(d)) / f64::from(w),
                f64::from(h.div_ceil(d)) / f64::from(h),
            );
            if crop.w * sx + 1e-9 >= f64::from(tw) && crop.h * sy + 1e-9 >= f64::from(th) {
                return d;
            }
        }
        1
    }

    /// The region of a `w`×`h` source that the resize reads for a `tw`×`th` target, for the
    /// fits (a cropping transform's box comes with the decoded image).
    fn covered_region(&self, w: u32, h: u32, tw: u32, th: u32) -> (f64, f64) {
        let (w, h) = (f64::from(w), f64::from(h));
        match self.transform {
            Transform::ShorterSideCenterCrop => {
                let aspect = f64::from(tw) / f64::from(th);
                (w.min(h * aspect), h.min(w / aspect))
            }
            _ => (w, h),
        }
    }
}

pub(crate) use resample::RETAINED_BYTES as RESIZE_RETAINED_BYTES;

/// The augment stage's settings: how an image is fitted or cropped, whether it is mirrored,
/// and the resize filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AugmentSettings {
    pub(crate) transform: Transform,
    /// The flip probability the user set (`None`: 0.5 with a random transform, else 0).
    pub(crate) flip: Option<f64>,
    pub(crate) filter: ResizeFilter,
}

impl Default for AugmentSettings {
    fn default() -> Self {
        AugmentSettings {
            transform: Transform::Stretch,
            flip: None,
            filter: ResizeFilter::Antialiased,
        }
    }
}

impl AugmentSettings {
    /// Checks the settings alone.
    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        self.transform
            .check()
            .map_err(|m| crate::Error::config("transform", m))?;
        let p = self.flip_probability();
        if !p.is_finite() || !(0.0..=1.0).contains(&p) {
            return Err(crate::Error::config(
                "flip_horizontal",
                format!("probability {p} is outside [0, 1]"),
            ));
        }
        Ok(())
    }

    /// The probability of mirroring a sample.
    pub(crate) fn flip_probability(&self) -> f64 {
        self.flip
            .unwrap_or(if self.transform.is_random() { 0.5 } else { 0.0 })
    }

    /// What the resize produces for an output of `height`×`width`.
    pub(crate) fn geometry(&self, height: u32, width: u32) -> Geometry {
        Geometry {
            width,
            height,
            transform: self.transform,
            filter: self.filter,
            flip: self.flip_probability(),
        }
    }
}

/// A source axis longer than this (only a PNG can have one: JPEG sides stop at 65,535) is
/// first averaged down by whole boxes to 16 times the output, so the filter taps, which grow
/// with the source length (about 20 bytes a source pixel), stay small: a 100,000,000×1 PNG
/// needed 2 GB of them.
const BOX_ABOVE: u32 = 65_536;

/// A reduced image over this size is freed after use.
const RETAIN_REDUCED_BYTES: usize = 1 << 20;

/// An upper bound of the memory resizing a `w`×`h` decoded image to `geom` takes besides the
/// image itself: the resampler's intermediate (at most the larger of the source and the
/// output, and at most one output side's rows of either pass), the box-reduced copy of an
/// over-long source, the filter taps, the orientation copy and the resized planes of a JPEG
/// decoded to planes (one output each).
pub(crate) fn resize_working_set(w: u32, h: u32, geom: &Geometry) -> u64 {
    let (w, h) = (u64::from(w), u64::from(h));
    let side = u64::from(geom.width.max(geom.height));
    let src = w.saturating_mul(h).saturating_mul(3);
    let out = side * side * 3;
    let tmp = (3 * side * (w + h)).min(src.max(out));
    let reduced = if w > u64::from(BOX_ABOVE) || h > u64::from(BOX_ABOVE) {
        src / 2
    } else {
        0
    };
    // Taps: about 20 bytes a source pixel of each axis (weights, packed pairs, the planar
    // plan), the orientation copy and planes of one row.
    let taps = 20 * (w.min(u64::from(BOX_ABOVE)) + h.min(u64::from(BOX_ABOVE)));
    tmp.saturating_add(reduced)
        .saturating_add(taps)
        .saturating_add(2 * out)
}

/// A per-worker resizer with its scratch buffers.
#[derive(Default)]
pub(crate) struct Resizer {
    inner: resample::Resampler,
    tmp: Vec<u8>,
    /// The box-averaged copy of a source with an axis over [`BOX_ABOVE`].
    reduced: Vec<u8>,
    /// The resized planes of a JPEG decoded to planes, before colour conversion (one sample's
    /// bytes).
    planes: Vec<u8>,
}

impl Resizer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Resizes `src` to the output size, applies its orientation and mirrors it if `flip`,
    /// writing RGB8 HWC into `out` (`geom.sample_len()` bytes).
    pub(crate) fn resize_orient(
        &mut self,
        src: &Decoded<'_>,
        geom: &Geometry,
        flip: bool,
        out: &mut [u8],
    ) -> Result<(), String> {
        self.resize_orient_unflipped(src, geom, out)?;
        if flip {
            augment::flip_horizontal(out, geom.width as usize);
        }
        Ok(())
    }

    fn resize_orient_unflipped(
        &mut self,
        src: &Decoded<'_>,
        geom: &Geometry,
        out: &mut [u8],
    ) -> Result<(), String> {
        if out.len() != geom.sample_len() {
            return Err(format!(
                "output buffer of {} bytes, expected {}",
                out.len(),
                geom.sample_len()
            ));
        }
        let o = src.orientation;
        // Resize in the stored frame's axes, then orient the small result.
        let (rw, rh) = if o >= 5 {
            (geom.height, geom.width)
        } else {
            (geom.width, geom.height)
        };
        if o <= 1 {
            return self.resize(src, rw, rh, geom, out);
        }
        let mut tmp = std::mem::take(&mut self.tmp);
        tmp.resize(geom.sample_len(), 0);
        let r = self.resize(src, rw, rh, geom, &mut tmp);
        if r.is_ok() {
            orient(&tmp, rw as usize, rh as usize, o, out);
        }
        self.tmp = tmp;
        r
    }

    fn resize(
        &mut self,
        src: &Decoded<'_>,
        w: u32,
        h: u32,
        geom: &Geometry,
        out: &mut [u8],
    ) -> Result<(), String> {
        let (sw, sh) = (src.width, src.height);
        let crop = src.crop.unwrap_or_else(|| {
            let region = geom.covered_region(sw, sh, w, h);
            Rect {
                x: (f64::from(sw) - region.0) / 2.0,
                y: (f64::from(sh) - region.1) / 2.0,
                w: region.0,
                h: region.1,
            }
        });
        let region = (crop.w, crop.h);
        let within_2x = region.0 <= 2.0 * f64::from(w) && region.1 <= 2.0 * f64::from(h);
        let antialias = geom.filter == ResizeFilter::Antialiased || !within_2x;
        let rgb = match src.pixels {
            Pixels::Rgb(rgb) => rgb,
            Pixels::Planes(planes) => {
                return self.resize_planes(&planes, crop, (w, h), antialias, out)
            }
        };
        if src.crop.is_none() && src.width == w && src.height == h {
            out.copy_from_slice(rgb);
            return Ok(());
        }
        // Whole boxes to average an over-long axis by (1: none).
        let factor = |len: u32, region: f64, out: u32| {
            if len > BOX_ABOVE && region > 16.0 * f64::from(out) {
                (region / (16.0 * f64::from(out))).floor().max(1.0) as usize
            } else {
                1
            }
        };
        let (fx, fy) = (factor(sw, region.0, w), factor(sh, region.1, h));
        let mut reduced = std::mem::take(&mut self.reduced);
        let (rgb, rw, rh) = if fx > 1 || fy > 1 {
            let (rw, rh) = box_reduce(rgb, sw as usize, sh as usize, fx, fy, &mut reduced);
            (&reduced[..], rw, rh)
        } else {
            (rgb, sw as usize, sh as usize)
        };
        let (fxf, fyf) = (fx as f64, fy as f64);
        let source = resample::Source::rgb(
            rgb,
            rw,
            rh,
            (crop.x / fxf, region.0 / fxf),
            (crop.y / fyf, region.1 / fyf),
        );
        let r = self
            .inner
            .resample(&source, w as usize, h as usize, antialias, out);
        if reduced.capacity() > RETAIN_REDUCED_BYTES {
            reduced = Vec::new();
        }
        self.reduced = reduced;
        r
    }

    /// Resizes the box `crop` of each plane of a JPEG decoded to planes onto `w`×`h`, then
    /// converts the result to RGB8 in `out`. Chroma samples sit at the centre of the pixels
    /// they cover (JFIF), so a plane with `ratio` samples a pixel maps the same box scaled by
    /// `ratio`.
    fn resize_planes(
        &mut self,
        planes: &Planes<'_>,
        crop: Rect,
        (w, h): (u32, u32),
        antialias: bool,
        out: &mut [u8],
    ) -> Result<(), String> {
        let (w, h) = (w as usize, h as usize);
        let n = w * h;
        let mut planar = std::mem::take(&mut self.planes);
        grow(&mut planar, 3 * n);
        let mut r = Ok(());
        for (i, plane_out) in planar.chunks_exact_mut(n).take(planes.count).enumerate() {
            let (rx, ry) = planes.ratio[i];
            let (pw, ph) = planes.size[i];
            let source = resample::Source {
                data: planes.data[i],
                width: pw,
                height: ph,
                stride: planes.stride[i],
                channels: 1,
                x: (crop.x * rx, crop.w * rx),
                y: (crop.y * ry, crop.h * ry),
            };
            r = self.inner.resample(&source, w, h, antialias, plane_out);
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            if planes.count == 3 {
                let (y, rest) = planar.split_at(n);
                let (cb, cr) = rest.split_at(n);
                color::ycbcr_to_rgb(y, cb, &cr[..n], out);
            } else {
                color::gray_to_rgb(&planar[..n], out);
            }
        }
        self.planes = planar;
        r
    }
}

/// Makes `buf` at least `len` bytes long, keeping what it holds. Stale bytes are fine: every
/// caller writes a byte before reading it, or reads it with a zero weight.
fn grow(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// Averages `src` (`w`×`h` RGB8) over boxes of `fx`×`fy` pixels into `out` (the last boxes
/// of a row or column hold what is left); returns the reduced size.
fn box_reduce(
    src: &[u8],
    w: usize,
    h: usize,
    fx: usize,
    fy: usize,
    out: &mut Vec<u8>,
) -> (usize, usize) {
    let (rw, rh) = (w.div_ceil(fx), h.div_ceil(fy));
    out.clear();
    out.reserve(rw * rh * 3);
    let mut sums = vec![0u64; rw * 3];
    for by in 0..rh {
        sums.fill(0);
        let rows = by * fy..((by + 1) * fy).min(h);
        let n_rows = rows.len();
        for y in rows {
            let row = &src[y * w * 3..(y + 1) * w * 3];
            for (x, px) in row.chunks_exact(3).enumerate() {
                let s = &mut sums[x / fx * 3..x / fx * 3 + 3];
                for c in 0..3 {
                    s[c] += u64::from(px[c]);
                }
            }
        }
        for bx in 0..rw {
            let n = (((bx + 1) * fx).min(w) - bx * fx) * n_rows;
            let n = n as u64;
            for c in 0..3 {
                out.push(((sums[bx * 3 + c] + n / 2) / n) as u8);
            }
        }
    }
    (rw, rh)
}

/// Applies EXIF orientation `o` (2..=8) to a `w`×`h` RGB8 image. For 5..=8 the output is
/// `h`×`w`.
pub(crate) fn orient(src: &[u8], w: usize, h: usize, o: u8, dst: &mut [u8]) {
    let (dw, dh) = if o >= 5 { (h, w) } else { (w, h) };
    for y in 0..dh {
        for x in 0..dw {
            let (sx, sy) = match o {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (y, h - 1 - x),
                7 => (w - 1 - y, h - 1 - x),
                8 => (w - 1 - y, x),
                _ => (x, y),
            };
            let s = (sy * w + sx) * 3;
            let d = (y * dw + x) * 3;
            dst[d..d + 3].copy_from_slice(&src[s..s + 3]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn box_reduce_averages_whole_boxes_and_what_is_left() {
        // 5x3 pixels in boxes of 2x2: the last column and row are partial boxes.
        let src: Vec<u8> = (0..5 * 3 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = Vec::new();
        assert_eq!(box_reduce(&src, 5, 3, 2, 2, &mut out), (3, 2));
        for (by, bx, c) in
            (0..2).flat_map(|y| (0..3).flat_map(move |x| (0..3).map(move |c| (y, x, c))))
        {
            let mut sum = 0u32;
            let mut n = 0u32;
            for y in by * 2..(by * 2 + 2).min(3) {
                for x in bx * 2..(bx * 2 + 2).min(5) {
                    sum += u32::from(src[(y * 5 + x) * 3 + c]);
                    n += 1;
                }
            }
            assert_eq!(u32::from(out[(by * 3 + bx) * 3 + c]), (sum + n / 2) / n);
        }
    }

    #[test]
    fn a_source_axis_over_the_box_limit_resizes_through_a_box_reduction() {
        // 70,000x2 -> 160x160: boxes of 27 columns first (70,000 / (16 x 160)). On a gradient
        // it matches the direct resample (taps over all 70,000 columns) within a level.
        let (w, h) = (70_000u32, 2u32);
        let rgb: Vec<u8> = (0..h as usize)
            .flat_map(|_| (0..w as usize).flat_map(|x| [(x * 255 / 69_999) as u8, 7, 200]))
            .collect();
        let d = Decoded {
            pixels: Pixels::Rgb(&rgb),
            width: w,
            height: h,
            orientation: 1,
            crop: None,
            full: (w, h),
        };
        let g = geom(160, 160, ResizeMode::Stretch);
        let mut r = Resizer::new();
        let mut out = vec![0u8; g.sample_len()];
        r.resize_orient(&d, &g, false, &mut out).unwrap();
        let direct = resample::Source::rgb(
            &rgb,
            w as usize,
            h as usize,
            (0.0, f64::from(w)),
            (0.0, f64::from(h)),
        );
        let mut want = vec![0u8; g.sample_len()];
        resample::Resampler::new()
            .resample(&direct, 160, 160, true, &mut want)
            .unwrap();
        assert!(out.iter().zip(&want).all(|(a, b)| a.abs_diff(*b) <= 1));
        assert!(r.reduced.capacity() > 0, "reduced by boxes");
        assert!(r.reduced.capacity() <= RETAIN_REDUCED_BYTES);
        assert!(resize_working_set(w, h, &g) < 20_000_000);
    }

    fn geom(w: u32, h: u32, mode: ResizeMode) -> Geometry {
        Geometry {
            width: w,
            height: h,
            transform: mode.into(),
            filter: ResizeFilter::default(),
            flip: 0.0,
        }
    }

    #[test]
    fn dct_scale_checks_both_axes() {
        let g = geom(160, 160, ResizeMode::Stretch);
        assert_eq!(g.dct_denominator(1280, 1280, 1), 8);
        assert_eq!(g.dct_denominator(500, 375, 1), 2);
        // A wide image: the short axis decides (jpeg-decoder's one-axis rule would pick 1/8).
        assert_eq!(g.dct_denominator(2000, 300, 1), 1);
        assert_eq!(g.dct_denominator(100, 100, 1), 1);
        // Crop mode covers only the centred square.
        let c = geom(160, 160, ResizeMode::ShorterSideCenterCrop);
        assert_eq!(c.dct_denominator(2000, 640, 1), 4);
        // Non-square output with a rotated image.
        let r = geom(320, 80, ResizeMode::Stretch);
        assert_eq!(r.dct_denominator(320, 640, 6), 2);
        assert_eq!(r.dct_denominator(320, 640, 1), 1);
    }

    proptest! {
        #[test]
        fn dct_scale_always_covers_target(w in 1u32..5000, h in 1u32..5000, tw in 1u32..400, th in 1u32..400, o in 1u8..=8, crop: bool) {
            let mode = if crop { ResizeMode::ShorterSideCenterCrop } else { ResizeMode::Stretch };
            let g = geom(tw, th, mode);
            let d = g.dct_denominator(w, h, o);
            prop_assert!(matches!(d, 1 | 2 | 4 | 8));
            if d > 1 {
                let (tw, th) = if o >= 5 { (th, tw) } else { (tw, th) };
                let (rw, rh) = g.covered_region(w.div_ceil(d), h.div_ceil(d), tw, th);
                prop_assert!(rw + 1e-9 >= f64::from(tw) && rh + 1e-9 >= f64::from(th));
            }
        }
    }

    /// Two-tap bilinear interpolation with half-pixel centres (`tf.image.resize`'s definition),
    /// one channel, in floating point.
    fn reference_bilinear(src: &[u8], sw: usize, sh: usize, dw: usize, dh: usize) -> Vec<f64> {
        let taps = |d: usize, s: usize, n: usize| {
            let x = ((d as f64 + 0.5) * s as f64 / n as f64 - 0.5).clamp(0.0, (s - 1) as f64);
            let lo = x.floor() as usize;
            (lo, (lo + 1).min(s - 1), x - lo as f64)
        };
        let mut out = Vec::with_capacity(dw * dh);
        for y in 0..dh {
            let (y0, y1, fy) = taps(y, sh, dh);
            for x in 0..dw {
                let (x0, x1, fx) = taps(x, sw, dw);
                let p = |x: usize, y: usize| f64::from(src[(y * sw + x) * 3]);
                let top = p(x0, y0) * (1.0 - fx) + p(x1, y0) * fx;
                let bottom = p(x0, y1) * (1.0 - fx) + p(x1, y1) * fx;
                out.push(top * (1.0 - fy) + bottom * fy);
            }
        }
        out
    }

    fn resize_with(src: &[u8], sw: u32, sh: u32, size: u32, filter: ResizeFilter) -> Vec<u8> {
        let mut g = geom(size, size, ResizeMode::Stretch);
        g.filter = filter;
        let decoded = Decoded {
            pixels: Pixels::Rgb(src),
            width: sw,
            height: sh,
            orientation: 1,
            crop: None,
            full: (sw, sh),
        };
        let mut out = vec![0u8; g.sample_len()];
        Resizer::new()
            .resize_orient(&decoded, &g, false, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn bilinear_filter_is_two_tap_interpolation_within_2x() {
        // Smooth gradients plus a checkerboard: the checkerboard is what the filters treat
        // differently.
        let (sw, sh) = (250usize, 188usize);
        let src: Vec<u8> = (0..sh)
            .flat_map(|y| {
                (0..sw).flat_map(move |x| {
                    let v = (x * 255 / sw + y * 64 / sh) as u8 / 2
                        + if (x + y) % 2 == 0 { 60 } else { 0 };
                    [v; 3]
                })
            })
            .collect();
        let bilinear = resize_with(&src, sw as u32, sh as u32, 160, ResizeFilter::Bilinear);
        let reference = reference_bilinear(&src, sw, sh, 160, 160);
        let worst = bilinear
            .chunks_exact(3)
            .zip(&reference)
            .map(|(px, r)| (f64::from(px[0]) - r).abs())
            .fold(0.0, f64::max);
        assert!(
            worst <= 1.5,
            "bilinear output differs from tf's definition by {worst}"
        );
        let antialiased = resize_with(&src, sw as u32, sh as u32, 160, ResizeFilter::Antialiased);
        assert_ne!(
            bilinear, antialiased,
            "the filters must differ on a checkerboard"
        );
    }

    #[test]
    fn bilinear_filter_falls_back_to_antialiased_beyond_2x() {
        let (sw, sh) = (400u32, 330u32);
        let src: Vec<u8> = (0..sw * sh * 3).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(
            resize_with(&src, sw, sh, 160, ResizeFilter::Bilinear),
            resize_with(&src, sw, sh, 160, ResizeFilter::Antialiased)
        );
    }

    #[test]
    fn orientations_match_their_definitions() {
        // 3x2 image with distinct pixels p(x, y) = 10*y + x.
        let (w, h) = (3usize, 2usize);
        let src: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| [(10 * y + x) as u8; 3]))
            .collect();
        let px = |img: &[u8], dw: usize, x: usize, y: usize| img[(y * dw + x) * 3];
        let mut dst = vec![0u8; w * h * 3];
        orient(&src, w, h, 6, &mut dst); // rotate 90° clockwise: 2x3
        assert_eq!(px(&dst, 2, 0, 0), 10); // bottom-left goes to top-left
        assert_eq!(px(&dst, 2, 1, 0), 0);
        assert_eq!(px(&dst, 2, 1, 2), 2);
        orient(&src, w, h, 8, &mut dst); // rotate 90° counter-clockwise
        assert_eq!(px(&dst, 2, 0, 0), 2); // top-right goes to top-left
        orient(&src, w, h, 3, &mut dst);
        assert_eq!(px(&dst, 3, 0, 0), 12);
        orient(&src, w, h, 2, &mut dst);
        assert_eq!(px(&dst, 3, 0, 0), 2);
        orient(&src, w, h, 5, &mut dst);
        assert_eq!(px(&dst, 2, 1, 0), 10);
        orient(&src, w, h, 7, &mut dst);
        assert_eq!(px(&dst, 2, 0, 0), 12);
    }
}
