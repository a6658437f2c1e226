//! Training and evaluation transforms: which box of each image becomes the sample, and
//! whether it is mirrored.
//!
//! Every random draw is a pure function of (seed, epoch, dataset index): a sample gets the
//! same crop and flip at any thread count, after a resume, on every rank of a sharded run, and
//! from a cached epoch, and another crop in the next epoch. The box is chosen in display
//! coordinates (after EXIF orientation) from the image's header dimensions, then mapped to the
//! stored frame, so the decoder can decode only that box (`decode/jpeg.rs`).

use crate::image::Rect;
use crate::rng::Rng;

/// Stage tags of the per-sample generators: the crop's draws and the flip's are independent.
const STAGE_CROP: u64 = crate::rng::STAGE_AUGMENT;
const STAGE_FLIP: u64 = crate::rng::STAGE_AUGMENT + 100;

/// Which part of each image becomes the sample, resized to the output size.
///
/// [`Stretch`](Transform::Stretch) and [`ShorterSideCenterCrop`](Transform::ShorterSideCenterCrop)
/// are the fixed fits of [`ResizeMode`](crate::ResizeMode);
/// [`RandomResizedCrop`](Transform::RandomResizedCrop) is the training transform and
/// [`CenterCrop`](Transform::CenterCrop) the matching evaluation transform of torchvision's
/// ImageNet recipe. With a cropping transform, libjpeg-turbo decodes only the crop's rows and
/// columns, at the smallest DCT scale that still covers the output.
///
/// ```
/// use imagefeed::Transform;
/// let train = Transform::random_resized_crop(); // scale (0.08, 1.0), ratio (3/4, 4/3)
/// let eval = Transform::center_crop(); // shorter side to size / 0.875, then the centre
/// assert!(train.is_random() && !eval.is_random());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Transform {
    /// The whole image, each axis scaled to the output size ([`ResizeMode::Stretch`]). The
    /// default.
    ///
    /// [`ResizeMode::Stretch`]: crate::ResizeMode::Stretch
    #[default]
    Stretch,
    /// The largest centred box with the output's aspect ratio
    /// ([`ResizeMode::ShorterSideCenterCrop`]).
    ///
    /// [`ResizeMode::ShorterSideCenterCrop`]: crate::ResizeMode::ShorterSideCenterCrop
    ShorterSideCenterCrop,
    /// The evaluation transform: resize the shorter side to `min(height, width) /
    /// crop_fraction` (rounded; 183 for 160 at the default 0.875), then take the centred
    /// output-sized box (torchvision's `Resize` then `CenterCrop`). Done as one resize of the
    /// box that maps onto the output. Where the box would overhang the image (a
    /// `crop_fraction` over 1, or an output more elongated than the image), it is cut to the
    /// image instead of padded.
    CenterCrop {
        /// The fraction of the resized shorter side the crop keeps, in `(0, 1]`.
        crop_fraction: f64,
    },
    /// torchvision's `RandomResizedCrop`: up to 10 tries at a box whose area is a uniform
    /// fraction in `scale` of the image's and whose aspect ratio (width / height) is
    /// log-uniform in `ratio`, placed uniformly; if none fits, the whole image cut to the
    /// nearest ratio in range, centred. The box is then resized to the output size.
    RandomResizedCrop {
        /// The range of the box's area as a fraction of the image's, within `(0, 1]`.
        scale: (f64, f64),
        /// The range of the box's aspect ratio (width / height), positive.
        ratio: (f64, f64),
    },
}

impl From<crate::ResizeMode> for Transform {
    fn from(mode: crate::ResizeMode) -> Self {
        match mode {
            crate::ResizeMode::Stretch => Transform::Stretch,
            crate::ResizeMode::ShorterSideCenterCrop => Transform::ShorterSideCenterCrop,
        }
    }
}

impl Transform {
    /// torchvision's defaults: `scale (0.08, 1.0)`, `ratio (3/4, 4/3)`.
    pub const fn random_resized_crop() -> Transform {
        Transform::RandomResizedCrop {
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// The evaluation transform with the standard crop fraction, 0.875.
    pub const fn center_crop() -> Transform {
        Transform::CenterCrop {
            crop_fraction: 0.875,
        }
    }

    /// Whether the box is drawn at random (a new one every epoch).
    pub fn is_random(&self) -> bool {
        matches!(self, Transform::RandomResizedCrop { .. })
    }

    /// The command line's name: `stretch`, `shorter-side-center-crop`, `center-crop` or
    /// `random-resized-crop`.
    pub fn name(&self) -> &'static str {
        match self {
            Transform::Stretch => "stretch",
            Transform::ShorterSideCenterCrop => "shorter-side-center-crop",
            Transform::CenterCrop { .. } => "center-crop",
            Transform::RandomResizedCrop { .. } => "random-resized-crop",
        }
    }

    /// Whether the transform cuts a box of its own choosing (decoded as a crop), rather than
    /// fitting the whole image or its centre by the output's aspect ratio.
    pub(crate) fn crops(&self) -> bool {
        matches!(
            self,
            Transform::CenterCrop { .. } | Transform::RandomResizedCrop { .. }
        )
    }

    /// Checks the parameters; `Err` says which is out of range.
    pub(crate) fn check(&self) -> Result<(), String> {
        match *self {
            Transform::Stretch | Transform::ShorterSideCenterCrop => Ok(()),
            Transform::CenterCrop { crop_fraction } => {
                if crop_fraction.is_finite() && crop_fraction > 0.0 && crop_fraction <= 1.0 {
                    Ok(())
                } else {
                    Err(format!(
                        "center-crop fraction {crop_fraction} is outside (0, 1]"
                    ))
                }
            }
            Transform::RandomResizedCrop { scale, ratio } => {
                let (s0, s1) = scale;
                let (r0, r1) = ratio;
                if !(s0.is_finite() && s1.is_finite() && 0.0 < s0 && s0 <= s1 && s1 <= 1.0) {
                    Err(format!(
                        "random-resized-crop scale ({s0}, {s1}) must satisfy 0 < min <= max <= 1"
                    ))
                } else if !(r0.is_finite() && r1.is_finite() && 0.0 < r0 && r0 <= r1) {
                    Err(format!(
                        "random-resized-crop ratio ({r0}, {r1}) must satisfy 0 < min <= max"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The bytes a cache records of the transform: samples made with other bytes differ.
    pub(crate) fn cache_key(&self) -> [u8; 17] {
        let mut k = [0u8; 17];
        let (code, a, b) = match *self {
            Transform::Stretch => (0u8, 0.0, 0.0),
            Transform::ShorterSideCenterCrop => (1, 0.0, 0.0),
            Transform::CenterCrop { crop_fraction } => (2, crop_fraction, 0.0),
            // The box is drawn after the cache, from the recorded base image: only that a base
            // is recorded matters.
            Transform::RandomResizedCrop { .. } => (3, 0.0, 0.0),
        };
        k[0] = code;
        k[1..9].copy_from_slice(&a.to_le_bytes());
        k[9..17].copy_from_slice(&f64::to_le_bytes(b));
        k
    }
}

/// Which sample a draw is for: every random choice of the transforms derives from it alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Draw {
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    /// The sample's dataset index.
    pub(crate) index: u64,
}

impl Draw {
    /// Whether the sample is mirrored, with probability `p`.
    pub(crate) fn flip(&self, p: f64) -> bool {
        p > 0.0 && Rng::for_sample(self.seed, self.epoch, STAGE_FLIP, self.index).uniform() < p
    }
}

/// The dimensions of a `w`×`h` stored frame once EXIF orientation `o` is applied.
pub(crate) fn display_dims(w: u32, h: u32, o: u8) -> (u32, u32) {
    if o >= 5 {
        (h, w)
    } else {
        (w, h)
    }
}

/// The box of a `w`×`h` image (display coordinates) that `t` resizes to the `ow`×`oh` output,
/// for the sample `draw`.
pub(crate) fn crop_box(t: &Transform, w: u32, h: u32, (ow, oh): (u32, u32), draw: &Draw) -> Rect {
    let (fw, fh) = (f64::from(w), f64::from(h));
    let centred = |cw: f64, ch: f64| Rect {
        x: (fw - cw) / 2.0,
        y: (fh - ch) / 2.0,
        w: cw,
        h: ch,
    };
    match *t {
        Transform::Stretch => Rect::whole(w, h),
        Transform::ShorterSideCenterCrop => {
            let aspect = f64::from(ow) / f64::from(oh);
            centred(fw.min(fh * aspect), fh.min(fw / aspect))
        }
        Transform::CenterCrop { crop_fraction } => {
            // torchvision: Resize(round(min(oh, ow) / fraction)) makes the shorter side that
            // long; CenterCrop((oh, ow)) then keeps the centre. In the image's pixels that is
            // a centred box of the output's size divided by the resize's factor.
            let resized = (f64::from(ow.min(oh)) / crop_fraction).round().max(1.0);
            let k = resized / fw.min(fh);
            centred((f64::from(ow) / k).min(fw), (f64::from(oh) / k).min(fh))
        }
        Transform::RandomResizedCrop { scale, ratio } => {
            let mut rng = Rng::for_sample(draw.seed, draw.epoch, STAGE_CROP, draw.index);
            random_resized_crop(&mut rng, w, h, scale, ratio)
        }
    }
}

/// torchvision's `RandomResizedCrop.get_params`, with integer boxes as it draws them.
fn random_resized_crop(
    rng: &mut Rng,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Rect {
    let area = f64::from(width) * f64::from(height);
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * (scale.0 + (scale.1 - scale.0) * rng.uniform());
        let aspect = (lr0 + (lr1 - lr0) * rng.uniform()).exp();
        let w = (target * aspect).sqrt().round();
        let h = (target / aspect).sqrt().round();
        if w > 0.0 && w <= f64::from(width) && h > 0.0 && h <= f64::from(height) {
            let (w, h) = (w as u32, h as u32);
            let y = rng.below(u64::from(height - h) + 1) as u32;
            let x = rng.below(u64::from(width - w) + 1) as u32;
            return Rect {
                x: f64::from(x),
                y: f64::from(y),
                w: f64::from(w),
                h: f64::from(h),
            };
        }
    }
    // Fallback: the whole image, cut to the nearest ratio in range, centred.
    let in_ratio = f64::from(width) / f64::from(height);
    let (w, h) = if in_ratio < ratio.0 {
        (
            width,
            ((f64::from(width) / ratio.0).round() as u32).clamp(1, height),
        )
    } else if in_ratio > ratio.1 {
        (
            ((f64::from(height) * ratio.1).round() as u32).clamp(1, width),
            height,
        )
    } else {
        (width, height)
    };
    Rect {
        x: f64::from((width - w) / 2),
        y: f64::from((height - h) / 2),
        w: f64::from(w),
        h: f64::from(h),
    }
}

/// Maps a box of the displayed image (`dw`×`dh`, after EXIF orientation `o`) to the stored
/// frame the orientation is applied to.
pub(crate) fn to_stored(r: Rect, dw: f64, dh: f64, o: u8) -> Rect {
    // The stored frame's dimensions.
    let (w, h) = if o >= 5 { (dh, dw) } else { (dw, dh) };
    let (x0, x1, y0, y1) = (r.x, r.x + r.w, r.y, r.y + r.h);
    // Stored x and y ranges (see `orient`: which stored pixel each display pixel shows).
    let (sx, sy) = match o {
        2 => ((w - x1, w - x0), (y0, y1)),
        3 => ((w - x1, w - x0), (h - y1, h - y0)),
        4 => ((x0, x1), (h - y1, h - y0)),
        5 => ((y0, y1), (x0, x1)),
        6 => ((y0, y1), (h - x1, h - x0)),
        7 => ((w - y1, w - y0), (h - x1, h - x0)),
        8 => ((w - y1, w - y0), (x0, x1)),
        _ => ((x0, x1), (y0, y1)),
    };
    Rect {
        x: sx.0,
        y: sy.0,
        w: sx.1 - sx.0,
        h: sy.1 - sy.0,
    }
}

/// Mirrors a `w`×`h` RGB8 image left to right in place.
pub(crate) fn flip_horizontal(img: &mut [u8], w: usize) {
    if w < 2 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3.
        unsafe { flip_ssse3(img, w) };
        return;
    }
    for row in img.chunks_exact_mut(w * 3) {
        row.as_chunks_mut::<3>().0.reverse();
    }
}

/// [`flip_horizontal`] five pixels at a time from both ends of each row, with one `pshufb`
/// for each group of five: 3.1 µs for 160×160 against 14 µs for the portable loop
/// (`cargo bench --bench transform -- flip`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn flip_ssse3(img: &mut [u8], w: usize) {
    use std::arch::x86_64::*;
    /// Reverses the order of five pixels (15 bytes) of a 16-byte load that starts `offset`
    /// bytes before them; byte 15 comes out 0.
    const fn mask(offset: usize) -> [u8; 16] {
        let mut m = [0x80u8; 16];
        let mut k = 0;
        while k < 5 {
            let mut c = 0;
            while c < 3 {
                m[3 * k + c] = (3 * (4 - k) + c + offset) as u8;
                c += 1;
            }
            k += 1;
        }
        m
    }
    const FROM_START: [u8; 16] = mask(0);
    const FROM_BEFORE: [u8; 16] = mask(1);
    // SAFETY (whole body): every load and store stays within `row`: the left group's load
    // reads bytes 3x..3x+16 and the right group's 3(w-5-x)-1..3(w-x), both inside the row
    // while 2x + 10 <= w (then 3(w-5-x) >= 3x + 15 >= 15); each store writes exactly its
    // group's 15 bytes (8 at its start, 8 ending at its end).
    unsafe {
        let left_mask = _mm_loadu_si128(FROM_START.as_ptr().cast());
        let right_mask = _mm_loadu_si128(FROM_BEFORE.as_ptr().cast());
        for row in img.chunks_exact_mut(w * 3) {
            let p = row.as_mut_ptr();
            let mut x = 0;
            while 2 * x + 10 <= w {
                let l = p.add(3 * x);
                let r = p.add(3 * (w - 5 - x));
                let a = _mm_shuffle_epi8(_mm_loadu_si128(l.cast()), left_mask);
                let b = _mm_shuffle_epi8(_mm_loadu_si128(r.sub(1).cast()), right_mask);
                _mm_storel_epi64(l.cast(), b);
                _mm_storel_epi64(l.add(7).cast(), _mm_srli_si128(b, 7));
                _mm_storel_epi64(r.cast(), a);
                _mm_storel_epi64(r.add(7).cast(), _mm_srli_si128(a, 7));
                x += 5;
            }
            row[3 * x..3 * (w - x)].as_chunks_mut::<3>().0.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(index: u64) -> Draw {
        Draw {
            seed: 7,
            epoch: 3,
            index,
        }
    }

    #[test]
    fn random_crops_stay_inside_the_image_for_any_shape() {
        let t = Transform::random_resized_crop();
        for (w, h) in [
            (1, 1),
            (2, 1),
            (1, 400),
            (500, 375),
            (4000, 3000),
            (1200, 40),
            (7, 5),
        ] {
            for i in 0..2000 {
                let r = crop_box(&t, w, h, (160, 160), &draw(i));
                assert!(r.w >= 1.0 && r.h >= 1.0, "{w}x{h}: {r:?}");
                assert!(r.x >= 0.0 && r.y >= 0.0, "{w}x{h}: {r:?}");
                assert!(
                    r.x + r.w <= f64::from(w) && r.y + r.h <= f64::from(h),
                    "{w}x{h}: {r:?}"
                );
                assert_eq!(r.x.fract() + r.y.fract() + r.w.fract() + r.h.fract(), 0.0);
            }
        }
    }

    #[test]
    fn draws_depend_only_on_seed_epoch_and_index() {
        let t = Transform::random_resized_crop();
        let a = crop_box(&t, 640, 480, (160, 160), &draw(5));
        assert_eq!(a, crop_box(&t, 640, 480, (160, 160), &draw(5)));
        let other_epoch = Draw {
            epoch: 4,
            ..draw(5)
        };
        let other_seed = Draw { seed: 8, ..draw(5) };
        assert_ne!(a, crop_box(&t, 640, 480, (160, 160), &other_epoch));
        assert_ne!(a, crop_box(&t, 640, 480, (160, 160), &other_seed));
        assert_ne!(a, crop_box(&t, 640, 480, (160, 160), &draw(6)));
    }

    /// The area fractions are uniform in `scale` and the log aspect ratios uniform in
    /// `log(ratio)`, for an image large and square enough that the first try always fits:
    /// the mean and the quartiles of 20,000 draws against the distributions'.
    #[test]
    fn area_and_aspect_follow_the_parameters() {
        let (scale, ratio) = ((0.1, 0.5), (0.5, 2.0));
        let t = Transform::RandomResizedCrop { scale, ratio };
        let n = 20_000;
        let (mut areas, mut logs) = (Vec::new(), Vec::new());
        for i in 0..n {
            let r = crop_box(&t, 3000, 3000, (160, 160), &draw(i));
            areas.push(r.w * r.h / 9e6);
            logs.push((r.w / r.h).ln());
        }
        let check = |v: &mut Vec<f64>, lo: f64, hi: f64, what: &str| {
            v.sort_by(f64::total_cmp);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            assert!(
                (mean - (lo + hi) / 2.0).abs() < 0.01 * (hi - lo) + 1e-3,
                "{what} mean {mean}"
            );
            for q in [0.25, 0.5, 0.75] {
                let got = v[(q * v.len() as f64) as usize];
                let want = lo + q * (hi - lo);
                assert!(
                    (got - want).abs() < 0.02 * (hi - lo) + 2e-3,
                    "{what} q{q}: {got} vs {want}"
                );
            }
            assert!(
                v[0] >= lo - 2e-3 && v[v.len() - 1] <= hi + 2e-3,
                "{what} range"
            );
        };
        check(&mut areas, scale.0, scale.1, "area");
        check(&mut logs, ratio.0.ln(), ratio.1.ln(), "log ratio");
    }

    #[test]
    fn the_fallback_is_the_centred_image_cut_to_the_ratio() {
        // No box of area 90-100% with ratio 3/4..4/3 fits a 1200x40 strip.
        let t = Transform::RandomResizedCrop {
            scale: (0.9, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        };
        let r = crop_box(&t, 1200, 40, (160, 160), &draw(1));
        assert_eq!(
            r,
            Rect {
                x: 573.0,
                y: 0.0,
                w: 53.0,
                h: 40.0
            }
        );
    }

    #[test]
    fn flips_at_the_asked_rate() {
        let n = 20_000;
        for p in [0.0, 0.1, 0.5, 1.0] {
            let flips = (0..n).filter(|&i| draw(i).flip(p)).count() as f64 / n as f64;
            assert!((flips - p).abs() < 0.015, "p {p}: {flips}");
        }
        // Independent of the crop: the same index flips alike whatever the crop drew.
        assert_eq!(draw(9).flip(0.5), draw(9).flip(0.5));
    }

    #[test]
    fn center_crop_is_torchvisions_resize_then_center_crop() {
        let t = Transform::center_crop();
        // 500x375 -> shorter side 183 (k = 0.488), 160x160 centre: 327.9 px of the image.
        let r = crop_box(&t, 500, 375, (160, 160), &draw(0));
        let side = 160.0 * 375.0 / 183.0;
        assert!(
            (r.w - side).abs() < 1e-9 && (r.h - side).abs() < 1e-9,
            "{r:?}"
        );
        assert!((r.x - (500.0 - side) / 2.0).abs() < 1e-9);
        // A strip: the box is cut to the image.
        let r = crop_box(&t, 1200, 40, (160, 160), &draw(0));
        assert!(r.h <= 40.0 && r.w <= 1200.0);
    }

    /// A box mapped to the stored frame, cut there and oriented, shows the same pixels as the
    /// box cut from the oriented image.
    #[test]
    fn boxes_map_to_the_stored_frame_for_every_orientation() {
        let (w, h) = (7usize, 5usize);
        let stored: Vec<u8> = (0..w * h * 3).map(|i| (i / 3) as u8).collect();
        for o in 1..=8u8 {
            let (dw, dh) = display_dims(w as u32, h as u32, o);
            let mut display = vec![0u8; w * h * 3];
            super::super::orient(&stored, w, h, o.max(1), &mut display);
            if o == 1 {
                display.copy_from_slice(&stored);
            }
            let r = Rect {
                x: 1.0,
                y: 2.0,
                w: 3.0,
                h: 2.0,
            };
            let s = to_stored(r, f64::from(dw), f64::from(dh), o);
            // The set of pixel values in each box is the same.
            let mut a: Vec<u8> = Vec::new();
            for y in 2..4 {
                for x in 1..4 {
                    a.push(display[(y * dw as usize + x) * 3]);
                }
            }
            let mut b: Vec<u8> = Vec::new();
            for y in s.y as usize..(s.y + s.h) as usize {
                for x in s.x as usize..(s.x + s.w) as usize {
                    b.push(stored[(y * w + x) * 3]);
                }
            }
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "orientation {o}: {s:?}");
        }
    }

    #[test]
    fn flip_mirrors_every_width_like_the_pixel_by_pixel_loop() {
        for w in 1..70usize {
            for h in 1..4 {
                let img: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
                let mut want = img.clone();
                for row in want.chunks_exact_mut(w * 3) {
                    let px: Vec<[u8; 3]> =
                        row.chunks(3).rev().map(|c| [c[0], c[1], c[2]]).collect();
                    row.copy_from_slice(px.as_flattened());
                }
                let mut got = img.clone();
                flip_horizontal(&mut got, w);
                assert_eq!(got, want, "{w}x{h}");
                flip_horizontal(&mut got, w);
                assert_eq!(got, img, "{w}x{h} twice");
            }
        }
    }

    #[test]
    fn flip_mirrors_each_row() {
        let mut img = vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6];
        flip_horizontal(&mut img, 3);
        assert_eq!(
            img,
            vec![3, 3, 3, 2, 2, 2, 1, 1, 1, 6, 6, 6, 5, 5, 5, 4, 4, 4]
        );
    }
}
