//! WebP, lossy (VP8) and lossless (VP8L), through the pure-Rust `image-webp` crate (the
//! `image` crate's WebP decoder): the frame size read from the header and checked against
//! `max_pixels` before any pixel buffer exists, alpha dropped, EXIF orientation applied, and
//! an animation's first frame. `header` reads the size a loader's budget samples.

use super::gate::{GateGuard, RETAIN_BYTES};
use super::header;
use super::{fail, rgb_bytes, Decoder, Job};
use crate::error::Error;
use crate::image::{Decoded, Pixels};

/// The width and height a WebP file's header gives (`VP8 `, `VP8L` or `VP8X` chunk), read
/// without decoding; `None` if `b` holds no readable header.
pub(super) fn dimensions(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() < 30 || &b[0..4] != b"RIFF" || &b[8..12] != b"WEBP" {
        return None;
    }
    let chunk = &b[12..16];
    let data = &b[20..];
    let le24 = |d: &[u8]| u32::from(d[0]) | u32::from(d[1]) << 8 | u32::from(d[2]) << 16;
    match chunk {
        b"VP8X" => Some((le24(&data[4..7]) + 1, le24(&data[7..10]) + 1)),
        b"VP8L" if data[0] == 0x2F => {
            let bits = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8 " if data[3..6] == [0x9D, 0x01, 0x2A] => {
            let w = u32::from(u16::from_le_bytes([data[6], data[7]]) & 0x3FFF);
            let h = u32::from(u16::from_le_bytes([data[8], data[9]]) & 0x3FFF);
            Some((w, h))
        }
        _ => None,
    }
}

/// What decoding a `w`×`h` WebP holds besides its file: the decoder's RGB or RGBA output and,
/// for RGBA, the RGB it is converted to.
pub(super) fn decode_bytes(w: u32, h: u32, alpha: bool) -> u64 {
    let px = u64::from(w) * u64::from(h);
    if alpha {
        px.saturating_mul(4).saturating_add(rgb_bytes(w, h))
    } else {
        rgb_bytes(w, h)
    }
}

impl Decoder {
    pub(super) fn decode_webp<'a, 'g>(
        &'a mut self,
        job: Job<'_, 'g>,
        guard: &mut Option<GateGuard<'g>>,
    ) -> Result<Decoded<'a>, Error> {
        let Job {
            bytes,
            path,
            geom,
            draw,
            gate,
            gate_held,
        } = job;
        let werr = |e: image_webp::DecodingError| fail(path, format!("WebP: {e}"));
        // The header's size first: the decoder's constructor reads chunks (VP8X metadata), not
        // pixels, but the check is made before it runs at all.
        if let Some((w, h)) = dimensions(bytes) {
            self.check_pixels(path, w, h)?;
        }
        let mut dec = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes)).map_err(werr)?;
        let (w, h) = dec.dimensions();
        self.check_pixels(path, w, h)?;
        let alpha = dec.has_alpha();
        let decoding = decode_bytes(w, h, alpha);
        // Its own allocations (an animation's canvas, lossless transforms) within the pixels'.
        dec.set_memory_limit(
            usize::try_from(decoding.saturating_mul(2) + (1 << 20)).unwrap_or(usize::MAX),
        );
        let total = dec
            .output_buffer_size()
            .ok_or_else(|| fail(path, format!("WebP of {w}x{h} is too large to decode")))?;
        let estimate = decoding
            .max(rgb_bytes(w, h) + super::resize_working_set(w, h, geom))
            .saturating_add(bytes.len() as u64);
        if !gate_held && estimate > gate.small() {
            *guard = Some(gate.enter(estimate));
        }
        let px = w as usize * h as usize;
        self.rgb.clear();
        if alpha {
            self.aux.clear();
            self.aux.resize(total, 0);
            dec.read_image(&mut self.aux).map_err(werr)?;
            self.rgb.resize(px * 3, 0);
            for (s, d) in self.aux.chunks_exact(4).zip(self.rgb.chunks_exact_mut(3)) {
                d.copy_from_slice(&s[..3]);
            }
            if self.aux.capacity() as u64 > RETAIN_BYTES {
                self.aux = Vec::new();
            }
        } else {
            self.rgb.resize(total, 0);
            dec.read_image(&mut self.rgb).map_err(werr)?;
        }
        let orientation = if self.settings.apply_exif {
            dec.exif_metadata()
                .ok()
                .flatten()
                .and_then(|exif| {
                    let tiff = exif.strip_prefix(b"Exif\0\0".as_slice()).unwrap_or(&exif);
                    header::exif_orientation(tiff)
                })
                .unwrap_or(1)
        } else {
            1
        };
        Ok(Decoded {
            pixels: Pixels::Rgb(&self.rgb[..px * 3]),
            width: w,
            height: h,
            orientation,
            crop: super::stored_crop(geom, &draw, w, h, orientation),
            full: (w, h),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sizes_of_each_kind() {
        for (name, size) in [("lossy.webp", (200, 150)), ("lossless.webp", (200, 150))] {
            let path = format!(
                "{}/testdata/formats/webp/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            let b = std::fs::read(&path).unwrap();
            let got = dimensions(&b).unwrap();
            let dec = image_webp::WebPDecoder::new(std::io::Cursor::new(&b)).unwrap();
            assert_eq!(got, dec.dimensions(), "{name}");
            assert_eq!(got, size, "{name}");
        }
        assert_eq!(dimensions(b"RIFF\0\0\0\0WEBPVP8 "), None);
    }
}
