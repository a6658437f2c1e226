//! PNG through the `png` and `image` crates: the header and data checks made before any
//! pixel buffer exists, and indexed PNGs read as palette indices.

use std::path::Path;

use super::gate::{GateGuard, LARGE_BYTES_PER_PIXEL, RETAIN_BYTES};
use super::header;
use super::{fail, rgb_bytes, Decoder, Job};
use crate::error::Error;
use crate::image::{Decoded, Pixels};

impl Decoder {
    pub(super) fn decode_png<'a, 'g>(
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
        use image::{ColorType, ImageDecoder};
        let perr = |e: image::ImageError| fail(path, format!("PNG: {e}"));
        let png_fail = |e: String| fail(path, format!("PNG: {e}"));
        // The png crate buffers ancillary chunks and inflates an ICC profile whole while it
        // reads the header, before any size check: bound what it may allocate to two rows
        // (16-bit RGBA) plus PNG_METADATA_BYTES, so a 1 MB file holding a 1 GB profile cannot
        // make it allocate 1 GB. (It drops a profile over the bound and decodes the image.)
        let be32 = |at: usize| {
            bytes
                .get(at..at + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        // Refuse an oversized image from its IHDR, before the png crate sees it (its own
        // limits would report a huge width as too much metadata).
        if bytes.get(12..16) == Some(b"IHDR".as_slice()) {
            self.check_pixels(path, be32(16), be32(20))?;
            if let Some(&[depth, colour]) = bytes.get(24..26) {
                check_png_data(path, bytes.len(), be32(16), be32(20), depth, colour)?;
            }
        }
        let width = u64::from(be32(16));
        let metadata_limit = PNG_METADATA_BYTES + 2 * (width * 8 + 1);
        let mut png = open_png(bytes, path, metadata_limit)?;
        let (w, h, color, total) = match &mut png {
            Png::Image(dec) => {
                let (w, h) = dec.dimensions();
                self.check_pixels(path, w, h)?;
                let mut limits = image::Limits::default();
                limits.max_alloc = Some(self.settings.max_pixels.saturating_mul(8));
                dec.set_limits(limits).map_err(perr)?;
                (w, h, Some(dec.color_type()), dec.total_bytes())
            }
            Png::Indexed(reader) => {
                let (w, h) = reader.info().size();
                self.check_pixels(path, w, h)?;
                let total = reader
                    .output_buffer_size()
                    .ok_or_else(|| fail(path, format!("PNG of {w}x{h} is too large to decode")))?;
                (w, h, None, total as u64)
            }
        };
        let px = w as usize * h as usize;
        let rgb = rgb_bytes(w, h);
        // RGB8 decodes straight into the RGB buffer; other types (and palette indices) into
        // `aux`, then converted (and `aux` freed before the resize if it is large).
        let staged = if color == Some(ColorType::Rgb8) {
            0
        } else {
            total
        };
        // The png crate also keeps two rows (the one it unfilters and the one before), which
        // only matter for very wide images: a 100,000,000×1 RGBA16 PNG's rows are 800 MB.
        let rows = 2 * (total / u64::from(h.max(1)) + 1);
        let decoding = staged + rows + rgb;
        // What the memory budget gives one large decode besides the file's bytes.
        let most = self
            .settings
            .max_pixels
            .saturating_mul(LARGE_BYTES_PER_PIXEL)
            .saturating_add(self.settings.max_file_bytes())
            .saturating_sub(bytes.len() as u64);
        if decoding > most {
            return Err(fail(
                path,
                format!(
                    "PNG of {w}x{h} needs about {:.0} MB to decode (its rows are {:.0} MB each), \
                     over the {:.0} MB the memory budget gives one large decode",
                    decoding as f64 / 1e6,
                    rows as f64 / 2e6,
                    most as f64 / 1e6
                ),
            ));
        }
        let estimate = decoding.max(rgb + super::resize_working_set(w, h, geom));
        // The file's bytes are held through the decode: they count against the thread's share.
        let estimate = estimate.saturating_add(bytes.len() as u64);
        if !gate_held && estimate > gate.small() {
            *guard = Some(gate.enter(estimate));
        }
        self.rgb.clear();
        match png {
            Png::Image(dec) if color == Some(ColorType::Rgb8) => {
                self.rgb.resize(px * 3, 0);
                dec.read_image(&mut self.rgb).map_err(perr)?;
            }
            Png::Image(dec) => {
                self.aux.clear();
                self.aux.resize(total as usize, 0);
                dec.read_image(&mut self.aux).map_err(perr)?;
                self.rgb.resize(px * 3, 0);
            }
            Png::Indexed(mut reader) => {
                self.aux.clear();
                self.aux.resize(total as usize, 0);
                reader
                    .next_frame(&mut self.aux)
                    .map_err(|e| png_fail(e.to_string()))?;
                self.rgb.resize(px * 3, 0);
                let info = reader.info();
                expand_indexed(
                    &self.aux,
                    (w as usize, h as usize),
                    info.bit_depth as u8,
                    info.palette.as_deref().unwrap_or_default(),
                    &mut self.rgb,
                )
                .map_err(png_fail)?;
            }
        }
        to_rgb(color, &self.aux, &mut self.rgb, path)?;
        if self.aux.capacity() as u64 > RETAIN_BYTES {
            self.aux = Vec::new();
        }
        let orientation = if self.settings.apply_exif {
            header::png_exif_orientation(bytes).unwrap_or(1)
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

/// Opens a PNG's header with at most `metadata_limit` bytes for its ancillary chunks: an
/// indexed PNG through the png crate (read as palette indices, expanded by [`expand_indexed`],
/// so that an index past the palette is an error: the png crate would deliver it black), any
/// other through the `image` crate.
fn open_png<'b>(bytes: &'b [u8], path: &Path, metadata_limit: u64) -> Result<Png<'b>, Error> {
    let perr = |e: image::ImageError| fail(path, format!("PNG: {e}"));
    let png_fail = |e: String| fail(path, format!("PNG: {e}"));
    let too_much_metadata = || {
        fail(
            path,
            format!(
                "PNG: its text or other ancillary chunks need more than the {} MiB allowed",
                PNG_METADATA_BYTES >> 20
            ),
        )
    };
    // An indexed PNG is read as its palette indices and expanded here, so that an index
    // past the palette is an error: the png crate would deliver such pixels black.
    let indexed = bytes.get(12..16) == Some(b"IHDR".as_slice()) && bytes.get(25) == Some(&3);
    Ok(if indexed {
        let mut dec = png::Decoder::new_with_limits(
            std::io::Cursor::new(bytes),
            png::Limits {
                bytes: usize::try_from(metadata_limit).unwrap_or(usize::MAX),
            },
        );
        // Text chunks are never read here: skip them rather than inflate them.
        dec.set_ignore_text_chunk(true);
        dec.set_transformations(png::Transformations::IDENTITY);
        let reader = dec.read_info().map_err(|e| match e {
            png::DecodingError::LimitsExceeded => too_much_metadata(),
            e => png_fail(e.to_string()),
        })?;
        Png::Indexed(reader)
    } else {
        let mut header_limits = image::Limits::default();
        header_limits.max_alloc = Some(metadata_limit);
        let dec =
            image::codecs::png::PngDecoder::with_limits(std::io::Cursor::new(bytes), header_limits)
                .map_err(|e| match e {
                    image::ImageError::Limits(_) => too_much_metadata(),
                    e => perr(e),
                })?;
        Png::Image(dec)
    })
}

/// Writes RGB8 of a decoded PNG of colour type `color` (`src`; `None`: palette indices
/// already expanded into `dst`, `Rgb8`: decoded into `dst` already) into `dst`.
fn to_rgb(
    color: Option<image::ColorType>,
    src: &[u8],
    dst: &mut [u8],
    path: &Path,
) -> Result<(), Error> {
    use image::ColorType;
    match color {
        None | Some(ColorType::Rgb8) => {}
        Some(ColorType::Rgba8) => expand(src, dst, 4, |p| [p[0], p[1], p[2]]),
        Some(ColorType::L8) => expand(src, dst, 1, |p| [p[0]; 3]),
        Some(ColorType::La8) => expand(src, dst, 2, |p| [p[0]; 3]),
        // 16-bit samples come in native byte order; keep the high byte.
        Some(ColorType::Rgb16) => expand(src, dst, 6, |p| [hi(p, 0), hi(p, 2), hi(p, 4)]),
        Some(ColorType::Rgba16) => expand(src, dst, 8, |p| [hi(p, 0), hi(p, 2), hi(p, 4)]),
        Some(ColorType::L16) => expand(src, dst, 2, |p| [hi(p, 0); 3]),
        Some(ColorType::La16) => expand(src, dst, 4, |p| [hi(p, 0); 3]),
        Some(other) => {
            return Err(fail(
                path,
                format!("PNG colour type {other:?} is not supported"),
            ))
        }
    }
    Ok(())
}

/// What the png crate may allocate for a PNG's ancillary chunks (text, ICC profile) besides
/// its row buffers: real ICC profiles are well under 1 MiB.
const PNG_METADATA_BYTES: u64 = 16 << 20;

/// Deflate codes at most 258 bytes in 2 bits (a length code and a distance code of 1 bit
/// each): no zlib stream inflates more than 1032 times its size.
const DEFLATE_MAX_RATIO: u64 = 1032;

/// Refuses a PNG whose file is too short for the pixels its IHDR claims (`depth` bits a
/// sample, `colour` type as in the IHDR), before any row buffer exists: its image data
/// inflates to at least `w × h × bits / 8` bytes, which needs at least 1/1032 of that in the
/// file. Without this check, a 69-byte file claiming 9000×9000 RGB raised peak RSS to 244 MB
/// before the decoder found the data missing.
fn check_png_data(
    path: &Path,
    file_len: usize,
    w: u32,
    h: u32,
    depth: u8,
    colour: u8,
) -> Result<(), Error> {
    let channels: u64 = match colour {
        0 | 3 => 1,
        4 => 2,
        2 => 3,
        6 => 4,
        // The png crate names what is wrong with the header.
        _ => return Ok(()),
    };
    let raw = (u64::from(w) * u64::from(h)).saturating_mul(channels * u64::from(depth)) / 8;
    let least = raw / DEFLATE_MAX_RATIO;
    if (file_len as u64) < least {
        return Err(fail(
            path,
            format!(
                "{file_len} bytes cannot hold the {w}x{h} pixels the PNG header claims \
                 ({raw} bytes of image data, which deflate cannot store in fewer than \
                 {least}): the file is truncated, or its header is not its data's"
            ),
        ));
    }
    Ok(())
}

fn hi(p: &[u8], at: usize) -> u8 {
    (u16::from_ne_bytes([p[at], p[at + 1]]) >> 8) as u8
}

fn expand(src: &[u8], dst: &mut [u8], bpp: usize, f: impl Fn(&[u8]) -> [u8; 3]) {
    for (s, d) in src.chunks_exact(bpp).zip(dst.chunks_exact_mut(3)) {
        d.copy_from_slice(&f(s));
    }
}

/// A PNG being read: through the `image` crate (every colour type but indexed), or as palette
/// indices straight from the png crate.
enum Png<'b> {
    Image(image::codecs::png::PngDecoder<std::io::Cursor<&'b [u8]>>),
    Indexed(png::Reader<std::io::Cursor<&'b [u8]>>),
}

/// Expands an indexed PNG's rows (`depth` bits an index, 1, 2, 4 or 8, each row starting on a
/// byte) into RGB through `palette` (RGB triplets). An index past the palette is an error, as
/// the PNG specification has it, naming the first such pixel.
fn expand_indexed(
    src: &[u8],
    (w, h): (usize, usize),
    depth: u8,
    palette: &[u8],
    dst: &mut [u8],
) -> Result<(), String> {
    let entries = palette.len() / 3;
    if entries == 0 {
        return Err("an indexed image without a palette (PLTE chunk)".into());
    }
    let depth = usize::from(depth);
    if !matches!(depth, 1 | 2 | 4 | 8) {
        return Err(format!("an indexed image of {depth} bits a pixel"));
    }
    let line = (w * depth).div_ceil(8);
    if src.len() < line * h || dst.len() < w * h * 3 {
        return Err(format!("{} bytes of indices for {w}x{h} pixels", src.len()));
    }
    let past = |x: usize, y: usize, i: usize| {
        format!(
            "pixel ({x}, {y}) has palette index {i}, past the palette's {entries} entries \
             (the file is damaged)"
        )
    };
    let rows = src
        .chunks_exact(line)
        .zip(dst.chunks_exact_mut(w * 3))
        .take(h);
    if depth == 8 {
        for (y, (row, out)) in rows.enumerate() {
            for (x, (&i, px)) in row.iter().zip(out.chunks_exact_mut(3)).enumerate() {
                let i = usize::from(i);
                match palette.get(i * 3..i * 3 + 3) {
                    Some(rgb) if i < entries => px.copy_from_slice(rgb),
                    _ => return Err(past(x, y, i)),
                }
            }
        }
        return Ok(());
    }
    let per_byte = 8 / depth;
    let mask = (1u8 << depth) - 1;
    for (y, (row, out)) in rows.enumerate() {
        for (x, px) in out.chunks_exact_mut(3).enumerate() {
            let shift = 8 - depth * (x % per_byte + 1);
            let i = usize::from((row[x / per_byte] >> shift) & mask);
            match palette.get(i * 3..i * 3 + 3) {
                Some(rgb) if i < entries => px.copy_from_slice(rgb),
                _ => return Err(past(x, y, i)),
            }
        }
    }
    Ok(())
}
