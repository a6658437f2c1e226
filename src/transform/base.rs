//! The base image a cache records for a random transform: the image, oriented, fitted within
//! `side`×`side` (never enlarged), with its size and its full size. Every epoch cuts its own
//! box from it (drawn from the full size, as the uncached loader draws it), resizes it to the
//! output and flips it, so cached epochs stay random at the cost of one small resize.
//!
//! Record layout: `side`×`side`×3 bytes holding the `bw`×`bh` RGB8 image at the start, then
//! [`BASE_TRAILER`] bytes: full width, full height, `bw`, `bh` (u32 little-endian each).

use super::augment::{crop_box, display_dims, Draw, Transform};
use super::{Geometry, ResizeFilter, Resizer};
use crate::image::{Decoded, Pixels, Rect};

use crate::cache::format::BASE_TRAILER;

/// Bytes of a base record for `side`.
pub(crate) fn base_len(side: u32) -> usize {
    side as usize * side as usize * 3 + BASE_TRAILER
}

/// The size of a `w`×`h` image fitted within `side`×`side`, keeping its aspect ratio, never
/// enlarged, at least one pixel a side.
fn fit_within(w: u32, h: u32, side: u32) -> (u32, u32) {
    let long = w.max(h);
    if long <= side {
        return (w, h);
    }
    let k = f64::from(side) / f64::from(long);
    let f = |v: u32| ((f64::from(v) * k).round() as u32).clamp(1, side);
    (f(w), f(h))
}

impl Resizer {
    /// Writes the base record of decoded image `d` into `out` ([`base_len`]`(side)` bytes).
    pub(crate) fn write_base(
        &mut self,
        d: &Decoded<'_>,
        side: u32,
        filter: ResizeFilter,
        out: &mut [u8],
    ) -> Result<(), String> {
        if out.len() != base_len(side) {
            return Err(format!(
                "base buffer of {} bytes, expected {}",
                out.len(),
                base_len(side)
            ));
        }
        let (fw, fh) = display_dims(d.full.0, d.full.1, d.orientation);
        let (dw, dh) = display_dims(d.width, d.height, d.orientation);
        let (bw, bh) = fit_within(dw, dh, side);
        let g = Geometry {
            width: bw,
            height: bh,
            transform: Transform::Stretch,
            filter,
            flip: 0.0,
        };
        let (pixels, trailer) = out.split_at_mut(side as usize * side as usize * 3);
        self.resize_orient(d, &g, false, &mut pixels[..g.sample_len()])?;
        for (i, v) in [fw, fh, bw, bh].into_iter().enumerate() {
            trailer[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// Cuts the sample `draw` from a base record: the transform's box drawn from the image's
    /// full size, scaled to the base, resized to the output, flipped as drawn.
    pub(crate) fn sample_from_base(
        &mut self,
        base: &[u8],
        side: u32,
        geom: &Geometry,
        draw: Draw,
        out: &mut [u8],
    ) -> Result<(), String> {
        let pixels_len = side as usize * side as usize * 3;
        if base.len() != pixels_len + BASE_TRAILER {
            return Err(format!(
                "base record of {} bytes, expected {}",
                base.len(),
                base_len(side)
            ));
        }
        let at = |i: usize| {
            let b = &base[pixels_len + 4 * i..pixels_len + 4 * i + 4];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        };
        let (fw, fh, bw, bh) = (at(0), at(1), at(2), at(3));
        if fw == 0 || fh == 0 || bw == 0 || bh == 0 || bw > side || bh > side {
            return Err(format!(
                "base record with sizes {fw}x{fh} and {bw}x{bh} (side {side}): not a record this loader wrote"
            ));
        }
        let r = crop_box(&geom.transform, fw, fh, (geom.width, geom.height), &draw);
        let scaled = r.scaled(f64::from(bw) / f64::from(fw), f64::from(bh) / f64::from(fh));
        let crop = Rect {
            w: scaled.w.max(1e-3),
            h: scaled.h.max(1e-3),
            ..scaled
        };
        let d = Decoded {
            pixels: Pixels::Rgb(&base[..bw as usize * bh as usize * 3]),
            width: bw,
            height: bh,
            orientation: 1,
            crop: Some(crop),
            full: (bw, bh),
        };
        self.resize_orient(&d, geom, draw.flip(geom.flip), out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_keep_the_aspect_and_never_enlarge() {
        assert_eq!(fit_within(500, 375, 320), (320, 240));
        assert_eq!(fit_within(100, 50, 320), (100, 50));
        assert_eq!(fit_within(10_000, 1, 320), (320, 1));
    }

    #[test]
    fn a_base_round_trips_and_bad_sizes_are_refused() {
        let (w, h) = (64u32, 48u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let d = Decoded {
            pixels: Pixels::Rgb(&rgb),
            width: w,
            height: h,
            orientation: 6,
            crop: None,
            full: (640, 480),
        };
        let mut r = Resizer::new();
        let side = 40;
        let mut base = vec![0u8; base_len(side)];
        r.write_base(&d, side, ResizeFilter::Antialiased, &mut base)
            .unwrap();
        let geom = Geometry {
            width: 16,
            height: 16,
            transform: Transform::random_resized_crop(),
            filter: ResizeFilter::Antialiased,
            flip: 0.5,
        };
        let draw = Draw {
            seed: 1,
            epoch: 2,
            index: 3,
        };
        let (mut a, mut b) = (vec![0u8; 16 * 16 * 3], vec![0u8; 16 * 16 * 3]);
        r.sample_from_base(&base, side, &geom, draw, &mut a)
            .unwrap();
        r.sample_from_base(&base, side, &geom, draw, &mut b)
            .unwrap();
        assert_eq!(a, b);
        // Orientation 6 swaps the axes: the display image is 480x640, fitted as 30x40.
        let n = base.len();
        assert_eq!(&base[n - 16..n - 8], &[224, 1, 0, 0, 128, 2, 0, 0]);
        assert_eq!(&base[n - 8..], &[30, 0, 0, 0, 40, 0, 0, 0]);
        base[n - 4] = 200;
        assert!(r
            .sample_from_base(&base, side, &geom, draw, &mut a)
            .is_err());
    }
}
