//! JPEG: libjpeg-turbo (feature `turbojpeg`) at the DCT scale that still covers the target,
//! to planes or RGB, or zune-jpeg; the checks both decoders share (scan data, warnings) and
//! the working-set estimate of a decode.

use std::path::Path;

use super::gate::GateGuard;
use super::header::{self, JpegInfo};
use super::{fail, rgb_bytes, Decoder, Job, JpegDecoder};
use crate::error::Error;
use crate::image::{Decoded, Pixels, Planes, Rect};

impl Decoder {
    pub(super) fn decode_jpeg<'a, 'g>(
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
        let info =
            header::jpeg_info(bytes).map_err(|m| fail(path, format!("invalid JPEG: {m}")))?;
        self.check_pixels(path, info.width, info.height)?;
        check_scan_data(path, bytes, &info)?;
        let orientation = if self.settings.apply_exif {
            info.orientation
        } else {
            1
        };
        let use_turbo = match self.settings.jpeg_decoder {
            JpegDecoder::Zune => false,
            JpegDecoder::Auto | JpegDecoder::TurboJpeg => cfg!(feature = "turbojpeg"),
        };
        // A cropping transform's box, chosen from the header (display coordinates) and mapped
        // to the stored frame.
        let crop = super::stored_crop(geom, &draw, info.width, info.height, orientation);
        let scale = if use_turbo && self.settings.dct_scaling && !info.lossless {
            match crop {
                Some(c) => geom.dct_denominator_for_crop(info.width, info.height, c, orientation),
                None => geom.dct_denominator(info.width, info.height, orientation),
            }
        } else {
            1
        };
        let (sw, sh) = (info.width.div_ceil(scale), info.height.div_ceil(scale));
        // Only a crop's region is decoded (libjpeg-turbo; zune-jpeg decodes the whole frame).
        let (dw, dh) = decoded_dims(&info, scale, crop.filter(|_| use_turbo));
        let estimate = jpeg_working_set(&info, (dw, dh), use_turbo)
            .max(rgb_bytes(dw, dh) + super::resize_working_set(dw, dh, geom));
        // The file's bytes are held through the decode: they count against the thread's share.
        let estimate = estimate.saturating_add(bytes.len() as u64);
        if !gate_held && estimate > gate.small() {
            *guard = Some(gate.enter(estimate));
        }
        if use_turbo {
            let (tw, th) = if orientation >= 5 {
                (geom.height, geom.width)
            } else {
                (geom.width, geom.height)
            };
            // Planes where converting colour after the resize converts fewer pixels (the
            // decoded frame is no smaller than the target) and the planar kernels take the
            // taps (each axis within 4x the target after scaling). Without DCT scaling,
            // libjpeg-turbo's own RGB, as Pillow decodes. A crop decodes to RGB: libjpeg-turbo
            // crops only packed pixels.
            let planes = self.settings.planes
                && self.settings.dct_scaling
                && crop.is_none()
                && u64::from(sw) * u64::from(sh) >= u64::from(tw) * u64::from(th)
                && sw <= 4 * tw
                && sh <= 4 * th
                && matches!(info.components, 1 | 3)
                && !info.lossless;
            let (layout, crop) =
                self.decode_turbo(bytes, path, &info, scale, planes, crop, draw.index)?;
            let (width, height) = (layout.width as u32, layout.height as u32);
            return Ok(Decoded {
                pixels: layout.pixels(&self.rgb),
                width,
                height,
                orientation,
                crop,
                full: (info.width, info.height),
            });
        }
        let (width, height) = self.decode_zune(bytes, path, &info)?;
        Ok(Decoded {
            pixels: Pixels::Rgb(&self.rgb[..width as usize * height as usize * 3]),
            width,
            height,
            orientation,
            crop,
            full: (info.width, info.height),
        })
    }

    /// Decodes a JPEG with libjpeg-turbo at scale `1/scale` into `self.rgb`: as planes where
    /// `planes` is set and the file is YCbCr or grey with a subsampling libjpeg-turbo can
    /// write as planes, else as RGB. With a `crop` box (stored frame, full scale), only the
    /// rows and iMCU columns around it are decoded; returns the box in the decoded pixels.
    /// `index` is the sample's dataset index (for `self.verified`).
    #[cfg(feature = "turbojpeg")]
    #[allow(clippy::too_many_arguments)]
    fn decode_turbo(
        &mut self,
        bytes: &[u8],
        path: &Path,
        info: &JpegInfo,
        scale: u32,
        planes: bool,
        crop: Option<Rect>,
        index: u64,
    ) -> Result<(Layout, Option<Rect>), Error> {
        use imagefeed_jpeg::{Image, PixelFormat, ScalingFactor, YuvImage};
        let tj_err = |e: imagefeed_jpeg::Error| fail(path, format!("libjpeg-turbo: {e}"));
        // A fresh decompressor for every image (0.25 us): libjpeg keeps quantization and
        // Huffman tables between images on one decompressor (for abbreviated streams), so a
        // file missing its tables would otherwise decode with the previous image's.
        let mut tj = imagefeed_jpeg::Decompressor::new().map_err(tj_err)?;
        tj.set_scan_limit(JPEG_SCAN_LIMIT).map_err(tj_err)?;
        let factor = ScalingFactor::new(1, scale as usize);
        tj.set_scaling_factor(factor).map_err(tj_err)?;
        let w = factor.scale(info.width as usize);
        let h = factor.scale(info.height as usize);
        // The box in the scaled frame, and the region around it libjpeg-turbo decodes.
        let crop = crop.map(|c| {
            c.scaled(
                w as f64 / f64::from(info.width),
                h as f64 / f64::from(info.height),
            )
        });
        // A stock libjpeg-turbo cannot read a cropped decode's data to its end: strict, it
        // decodes the whole frame at the box's scale and cuts the box after.
        let region_reads_all = self.settings.accept_jpeg_warnings || imagefeed_jpeg::info().patched;
        let region = match crop {
            Some(c) if !info.lossless && self.crop_regions && region_reads_all => {
                crop_region(&mut tj, bytes, c, w, h)
            }
            _ => None,
        };
        let (w, h) = region.map_or((w, h), |r| (r.width, r.height));
        let crop = match (crop, region) {
            (Some(c), Some(r)) => Some(c.shifted(r.x as f64, r.y as f64)),
            (c, _) => c,
        };
        tj.set_cropping_region(region).map_err(tj_err)?;
        // Strict (the default): the data below the region is still entropy-decoded, so that a
        // damaged file fails in every epoch and with every box as its whole decode does, unless
        // this loader has already read these very bytes to their end cleanly (`verified.rs`).
        // With `accept_jpeg_warnings`, damage is delivered anyway, and decoding stops below the
        // box.
        let accept = self.settings.accept_jpeg_warnings;
        let digest = match (&self.verified, region) {
            (Some(_), Some(_)) if !accept => Some(super::verified::digest(bytes)),
            _ => None,
        };
        let known_clean =
            digest.is_some_and(|d| self.verified.as_ref().is_some_and(|v| v.is_clean(index, d)));
        tj.set_stop_below_crop(accept || known_clean);
        let cmyk = info.components == 4;
        // The layout of planes libjpeg-turbo would write (None: decode to RGB). A header it
        // cannot read is left to the RGB decode to report.
        let plan = if planes && !cmyk && region.is_none() {
            plane_layout(&mut tj, bytes, info, w, h)
        } else {
            None
        };
        let (format, bpp) = if cmyk {
            (PixelFormat::CMYK, 4)
        } else {
            (PixelFormat::RGB, 3)
        };
        let target = if cmyk { &mut self.aux } else { &mut self.rgb };
        // libjpeg-turbo writes every pixel: grow the buffer, never clear what it will overwrite.
        let len = plan.as_ref().map_or(w * h * bpp, |p| p.len);
        if target.len() < len {
            target.resize(len, 0);
        }
        let mut run = |tj: &mut imagefeed_jpeg::Decompressor, data: &[u8]| match &plan {
            Some(p) => tj.decompress_to_yuv(
                data,
                YuvImage {
                    pixels: &mut target[..len],
                    width: w,
                    align: 1,
                    height: h,
                    subsamp: p.subsamp,
                },
            ),
            None => {
                let image = Image {
                    pixels: &mut target[..len],
                    width: w,
                    pitch: w * bpp,
                    height: h,
                    format,
                };
                tj.decompress(data, image)
            }
        };
        // libjpeg-turbo reports a warning as a failure after finishing the image, with the
        // text of the first warning only (see `TurboWarning`).
        let mut decode = |tj: &mut imagefeed_jpeg::Decompressor| {
            let result = run(tj, bytes);
            if let Err(imagefeed_jpeg::Error::Library { message: msg, .. }) = &result {
                if turbo_warning(msg) == Some(TurboWarning::Metadata) {
                    // The first warning was about metadata: decode again without the JFIF and
                    // ICC segments (the pixels do not depend on them), so a later warning about
                    // the image data is not hidden behind it.
                    log::debug!("{}: libjpeg-turbo: {msg} (ignored)", path.display());
                    return run(tj, &header::without_segments(bytes, &[0xE0, 0xE2]));
                }
            }
            result
        };
        let mut result = decode(&mut tj);
        let mut read_to_end = !(accept || known_clean);
        let data_warning = |r: &Result<(), imagefeed_jpeg::Error>| {
            matches!(r, Err(imagefeed_jpeg::Error::Library { message, .. })
                if turbo_warning(message) == Some(TurboWarning::Data))
        };
        if known_clean && data_warning(&result) {
            // Bytes that read to their end cleanly warn when stopped below this box: judge
            // them as the strict check does, by reading to the end again.
            if let Some(v) = &self.verified {
                v.forget(index);
            }
            tj.set_stop_below_crop(false);
            result = decode(&mut tj);
            read_to_end = true;
        }
        judge(result, path, self.settings.accept_jpeg_warnings)?;
        if cmyk {
            if self.rgb.len() < w * h * 3 {
                self.rgb.resize(w * h * 3, 0);
            }
            cmyk_to_rgb(&self.aux[..len], &mut self.rgb[..w * h * 3]);
        }
        // A cropped decode stops after the region's last row and never reads the rest of the
        // data: a file cut short below it must still be refused, in every epoch alike.
        if region.is_some() && !header::has_eoi_after(bytes, info.scan_offset) {
            return Err(fail(
                path,
                "libjpeg-turbo: premature end of JPEG file (no end-of-image marker: truncated)",
            ));
        }
        if let (Some(v), Some(d), true) = (&self.verified, digest, read_to_end) {
            // Read to its end without a warning about its data (strict: one would have failed
            // it above): later epochs may stop below their boxes.
            v.record_clean(index, d);
        }
        Ok((plan.unwrap_or(Layout::rgb(w, h)), crop))
    }

    #[cfg(not(feature = "turbojpeg"))]
    #[allow(clippy::too_many_arguments)]
    fn decode_turbo(
        &mut self,
        bytes: &[u8],
        path: &Path,
        info: &JpegInfo,
        _scale: u32,
        _planes: bool,
        crop: Option<Rect>,
        _index: u64,
    ) -> Result<(Layout, Option<Rect>), Error> {
        let (w, h) = self.decode_zune(bytes, path, info)?;
        Ok((Layout::rgb(w as usize, h as usize), crop))
    }

    fn decode_zune(
        &mut self,
        bytes: &[u8],
        path: &Path,
        info: &JpegInfo,
    ) -> Result<(u32, u32), Error> {
        use zune_core::bytestream::ZCursor;
        use zune_core::colorspace::ColorSpace;
        use zune_core::options::DecoderOptions;
        let opts = DecoderOptions::default()
            .set_strict_mode(!self.settings.accept_jpeg_warnings)
            .jpeg_set_out_colorspace(ColorSpace::RGB)
            .jpeg_set_max_scans(JPEG_SCAN_LIMIT as usize)
            .set_max_width(info.width as usize)
            .set_max_height(info.height as usize);
        // zune-jpeg decodes baseline and progressive Huffman-coded frames only, and says
        // "Number of components cannot be zero" of the others: name what the file is.
        let process = if info.arithmetic {
            Some("arithmetic-coded JPEGs")
        } else if info.lossless {
            Some("lossless JPEGs")
        } else if info.hierarchical {
            Some("hierarchical JPEGs")
        } else if !info.progressive && info.first_scan_components < info.components {
            // zune-jpeg 0.5 decodes only the first scan of such a file and returns the
            // image with the other components wrong (6 dB PSNR against libjpeg-turbo).
            Some(
                "sequential JPEGs with their colour components in separate scans (non-interleaved)",
            )
        } else {
            None
        };
        if let Some(process) = process {
            return Err(fail(
                path,
                format!(
                    "zune-jpeg does not decode {process}{}",
                    if info.hierarchical {
                        " (nor does libjpeg-turbo)"
                    } else {
                        " (libjpeg-turbo, the default decoder, may)"
                    }
                ),
            ));
        }
        let mut d = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), opts);
        let zerr = |e: zune_jpeg::errors::DecodeErrors| fail(path, format!("zune-jpeg: {e}"));
        d.decode_headers().map_err(zerr)?;
        let zi = d
            .info()
            .ok_or_else(|| fail(path, "zune-jpeg: no image info"))?;
        let (w, h) = (u32::from(zi.width), u32::from(zi.height));
        self.check_pixels(path, w, h)?;
        let size = w as usize * h as usize * 3;
        if d.output_buffer_size() != Some(size) {
            return Err(fail(path, "zune-jpeg: unexpected output size"));
        }
        self.rgb.clear();
        self.rgb.resize(size, 0);
        d.decode_into(&mut self.rgb).map_err(zerr)?;
        // zune-jpeg checks for missing data only at the start of each MCU row, so a file cut
        // in its last row (or just before its EOI) decodes, zero-filled; libjpeg-turbo rejects
        // it ("Premature end of JPEG file"). Make both decoders agree.
        if !header::has_eoi_after(bytes, info.scan_offset) {
            return Err(fail(
                path,
                "zune-jpeg: premature end of JPEG file (no end-of-image marker)",
            ));
        }
        Ok((w, h))
    }
}

/// Pixels decoded around a crop box on each side, so the resize's filter reads the same
/// neighbours it would in a whole decode (its taps reach at most 2 pixels past the box after
/// DCT scaling, which leaves the box within 2x of the output).
#[cfg(feature = "turbojpeg")]
const CROP_MARGIN: f64 = 3.0;

/// The region of a `w`×`h` scaled frame to decode for the box `c`: the box with
/// [`CROP_MARGIN`], its left edge aligned down to the scaled iMCU width. `None` where that is
/// the whole frame, or where the header cannot be read (the decode then reports it).
#[cfg(feature = "turbojpeg")]
fn crop_region(
    tj: &mut imagefeed_jpeg::Decompressor,
    bytes: &[u8],
    c: Rect,
    w: usize,
    h: usize,
) -> Option<imagefeed_jpeg::Region> {
    let header = tj.read_header(bytes).ok()?;
    let align = tj.crop_x_alignment(&header);
    let clampf = |v: f64, hi: usize| (v.max(0.0) as usize).min(hi);
    let x0 = clampf((c.x - CROP_MARGIN).floor(), w) / align * align;
    let x1 = clampf((c.x + c.w + CROP_MARGIN).ceil(), w);
    let y0 = clampf((c.y - CROP_MARGIN).floor(), h);
    let y1 = clampf((c.y + c.h + CROP_MARGIN).ceil(), h);
    if x1 <= x0 || y1 <= y0 || (x0 == 0 && y0 == 0 && x1 == w && y1 == h) {
        return None;
    }
    Some(imagefeed_jpeg::Region {
        x: x0,
        y: y0,
        width: x1 - x0,
        height: y1 - y0,
    })
}

/// libjpeg-turbo's guard against progressive files with absurd scan counts (real files have ~10).
const JPEG_SCAN_LIMIT: u32 = 500;

/// Where a libjpeg-turbo decode leaves its pixels in the decoder's buffer: `width`×`height`
/// RGB8, or planes one after the other (`len` bytes in all).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
struct Layout {
    width: usize,
    height: usize,
    len: usize,
    planes: Option<PlaneLayout>,
    #[cfg(feature = "turbojpeg")]
    subsamp: imagefeed_jpeg::Subsamp,
}

#[derive(Debug, Clone, Copy)]
struct PlaneLayout {
    count: usize,
    offset: [usize; 3],
    stride: [usize; 3],
    size: [(usize, usize); 3],
    ratio: [(f64, f64); 3],
}

#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
impl Layout {
    fn rgb(width: usize, height: usize) -> Layout {
        Layout {
            width,
            height,
            len: width * height * 3,
            planes: None,
            #[cfg(feature = "turbojpeg")]
            subsamp: imagefeed_jpeg::Subsamp::None,
        }
    }

    /// The planes libjpeg-turbo writes for a `w`×`h` (scaled) image with subsampling `sub`
    /// and rows aligned to 1 byte (`tj3DecompressToYUV8`), or `None` where it would not
    /// write planes.
    #[cfg(feature = "turbojpeg")]
    fn planes(w: usize, h: usize, sub: imagefeed_jpeg::Subsamp) -> Option<Layout> {
        use imagefeed_jpeg::Subsamp;
        let count = if sub == Subsamp::Gray { 1 } else { 3 };
        let (sx, sy) = sub.factors();
        let mut p = PlaneLayout {
            count,
            offset: [0; 3],
            stride: [0; 3],
            size: [(0, 0); 3],
            ratio: [(1.0, 1.0); 3],
        };
        let mut len = 0usize;
        for i in 0..count {
            let pw = imagefeed_jpeg::yuv_plane_width(i, w, sub)?;
            let ph = imagefeed_jpeg::yuv_plane_height(i, h, sub)?;
            let (cw, ch) = if i == 0 {
                (w, h)
            } else {
                p.ratio[i] = (1.0 / sx as f64, 1.0 / sy as f64);
                (w.div_ceil(sx), h.div_ceil(sy))
            };
            if pw == 0 || ph == 0 || cw > pw || ch > ph {
                return None;
            }
            p.offset[i] = len;
            p.stride[i] = pw;
            p.size[i] = (cw, ch);
            len = len.checked_add(pw.checked_mul(ph)?)?;
        }
        // What the wrapper checks the buffer against.
        (imagefeed_jpeg::yuv_pixels_len(w, 1, h, sub).ok()? == len).then_some(Layout {
            width: w,
            height: h,
            len,
            planes: Some(p),
            subsamp: sub,
        })
    }

    /// The decoded pixels in `buf` (the buffer the decode wrote into).
    fn pixels<'a>(&self, buf: &'a [u8]) -> Pixels<'a> {
        match &self.planes {
            None => Pixels::Rgb(&buf[..self.len]),
            Some(p) => {
                let plane = |i: usize| {
                    if i < p.count {
                        &buf[p.offset[i]..p.offset[i] + p.stride[i] * p.size[i].1]
                    } else {
                        &buf[..0]
                    }
                };
                Pixels::Planes(Planes {
                    count: p.count,
                    data: [plane(0), plane(1), plane(2)],
                    stride: p.stride,
                    size: p.size,
                    ratio: p.ratio,
                })
            }
        }
    }
}

/// Refuses a Huffman-coded JPEG whose file is too short for the pixels its header claims,
/// before any pixel or coefficient buffer exists. In a sequential scan every 8×8 block of the
/// full-resolution component takes at least 2 bits (a DC code and an end-of-block code, at
/// least 1 bit each); in a progressive file its first DC scan takes at least 1 bit a block. So
/// fewer bytes than blocks / 4 (sequential) or blocks / 8 (progressive) after the first scan
/// header cannot be the image the header describes. (zune-jpeg would fill the missing data with
/// zero bits and deliver grey rows; libjpeg-turbo would decode it to the end, after allocating
/// its output, or for a progressive file every coefficient of the full frame, and report only
/// a warning that `accept_jpeg_warnings` lets through.)
fn check_scan_data(path: &Path, bytes: &[u8], info: &JpegInfo) -> Result<(), Error> {
    if info.arithmetic || info.lossless {
        return Ok(());
    }
    let blocks = u64::from(info.width.div_ceil(8)) * u64::from(info.height.div_ceil(8));
    let (least, kind) = if info.progressive {
        (blocks / 8, "progressive")
    } else {
        (blocks / 4, "sequential")
    };
    let data = bytes.len().saturating_sub(info.scan_offset) as u64;
    if data < least {
        return Err(fail(
            path,
            format!(
                "{data} bytes of image data cannot hold the {}x{} pixels the header claims \
                 (a {kind} JPEG of that size has at least {least} bytes): the file is \
                 truncated, or its header is not its data's",
                info.width, info.height
            ),
        ));
    }
    Ok(())
}

/// What a libjpeg-turbo warning says about an image it decoded to the end.
///
/// libjpeg-turbo goes on after a warning and reports it once the image is done, as a failure
/// carrying the text of the first warning only. Some warnings concern metadata it ignores;
/// the others mean the entropy-coded data did not parse as written, so some pixels may be
/// wrong (or, for bytes before the end marker, that the file was padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurboWarning {
    /// An unknown JFIF version or a malformed ICC profile segment: the pixels are intact.
    Metadata,
    /// Damaged or padded image data ("Corrupt JPEG data: ...").
    Data,
}

/// Classifies a libjpeg-turbo message; `None` for an error, and for "Premature end of JPEG
/// file" (a truncated file: its missing part would be filled in grey).
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
fn turbo_warning(msg: &str) -> Option<TurboWarning> {
    // libjpeg-turbo's JWRN_JFIF_MAJOR and JWRN_BOGUS_ICC.
    const METADATA: [&str; 2] = [
        "unknown JFIF revision number",
        "Corrupt JPEG data: bad ICC marker",
    ];
    // JWRN_EXTRANEOUS_DATA, JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE, JWRN_ARITH_BAD_CODE,
    // JWRN_MUST_RESYNC, JWRN_BOGUS_PROGRESSION, JWRN_NOT_SEQUENTIAL.
    const DATA: [&str; 7] = [
        "extraneous bytes before marker",
        "Corrupt JPEG data: premature end of data segment",
        "Corrupt JPEG data: bad Huffman code",
        "Corrupt JPEG data: bad arithmetic code",
        "instead of RST",
        "Inconsistent progression sequence",
        "Invalid SOS parameters for sequential JPEG",
    ];
    if METADATA.iter().any(|m| msg.contains(m)) {
        Some(TurboWarning::Metadata)
    } else if DATA.iter().any(|m| msg.contains(m)) {
        Some(TurboWarning::Data)
    } else {
        None
    }
}

/// CMYK to RGB the way Pillow and most viewers do it without a colour profile. CMYK JPEGs
/// are read as Adobe's inverted CMYK (255 = no ink) whether or not they carry its APP14
/// marker, as Pillow ("assume adobe conventions") and zune-jpeg do: nearly every CMYK JPEG
/// is written so, and one stripped of its marker came out colour-inverted here.
// Only the libjpeg-turbo path converts CMYK here.
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
pub(crate) fn cmyk_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(3)) {
        let (c, m, y, k) = (s[0], s[1], s[2], s[3]);
        let k = u32::from(k);
        d[0] = ((u32::from(c) * k + 127) / 255) as u8;
        d[1] = ((u32::from(m) * k + 127) / 255) as u8;
        d[2] = ((u32::from(y) * k + 127) / 255) as u8;
    }
}

/// Pixels a cropped decode adds around its box on each axis, at most: the filter's margin on
/// both sides ([`CROP_MARGIN`]) and the left edge aligned down to the scaled iMCU (at most 32
/// pixels, 4:1:1 at full scale).
pub(crate) const CROP_PAD: u32 = 40;

/// The pixels a decode at scale `1/scale` writes: the scaled frame, or with a `crop` box
/// (stored frame, full scale) the box's rows and iMCU columns around it.
pub(crate) fn decoded_dims(info: &JpegInfo, scale: u32, crop: Option<Rect>) -> (u32, u32) {
    let (sw, sh) = (info.width.div_ceil(scale), info.height.div_ceil(scale));
    match crop {
        None => (sw, sh),
        Some(c) => {
            let s = f64::from(scale);
            let side =
                |len: f64, max: u32| ((len / s).ceil() as u32).saturating_add(CROP_PAD).min(max);
            (side(c.w, sw), side(c.h, sh))
        }
    }
}

/// Estimated peak bytes of decoding one JPEG into `decoded` (width, height) pixels: the
/// scaled frame, or a crop's region of it (see [`decoded_dims`]).
pub(crate) fn jpeg_working_set(info: &JpegInfo, decoded: (u32, u32), turbo: bool) -> u64 {
    let (w, h) = (u64::from(info.width), u64::from(info.height));
    let out_px = u64::from(decoded.0) * u64::from(decoded.1);
    let out = out_px * if info.components == 4 { 7 } else { 3 };
    let comps = u64::from(info.components);
    // Progressive files keep every coefficient (2 bytes each) of the whole frame.
    let coefficients = if info.progressive {
        w * h * comps * 2
    } else {
        w * 16 * comps * 4
    };
    let zune_extra = if turbo { 0 } else { w * h * comps };
    out + coefficients + zune_extra
}

/// The layout of planes libjpeg-turbo would write a YCbCr or grey JPEG in at `w`×`h` (None:
/// decode to RGB). A header it cannot read is left to the RGB decode to report.
#[cfg(feature = "turbojpeg")]
fn plane_layout(
    tj: &mut imagefeed_jpeg::Decompressor,
    bytes: &[u8],
    info: &JpegInfo,
    w: usize,
    h: usize,
) -> Option<Layout> {
    use imagefeed_jpeg::{Colorspace, Subsamp};
    // libjpeg-turbo fails a header read on a warning: one about metadata is read again
    // without it, as the decode does.
    let hdr = tj.read_header(bytes).or_else(|e| match &e {
        imagefeed_jpeg::Error::Library { message: msg, .. }
            if turbo_warning(msg) == Some(TurboWarning::Metadata) =>
        {
            tj.read_header(&header::without_segments(bytes, &[0xE0, 0xE2]))
        }
        _ => Err(e),
    });
    hdr.ok().and_then(|hdr| {
        let sub = match (hdr.colorspace, hdr.subsamp) {
            (Colorspace::Gray, Subsamp::Gray) => Subsamp::Gray,
            (Colorspace::YCbCr, Subsamp::Gray | Subsamp::Unknown) => return None,
            (Colorspace::YCbCr, sub) => sub,
            _ => return None,
        };
        (hdr.width == info.width as usize && hdr.height == info.height as usize)
            .then(|| Layout::planes(w, h, sub))
            .flatten()
    })
}

/// What a libjpeg-turbo decode's result means: a warning about metadata is no error; one
/// about the data is one, unless `accept` (`accept_jpeg_warnings`); a failure names the file.
#[cfg(feature = "turbojpeg")]
fn judge(
    result: Result<(), imagefeed_jpeg::Error>,
    path: &Path,
    accept: bool,
) -> Result<(), Error> {
    match result {
        Ok(()) => {}
        Err(imagefeed_jpeg::Error::Library { message: msg, .. }) => match turbo_warning(&msg) {
            Some(TurboWarning::Metadata) => {}
            Some(TurboWarning::Data) if accept => {
                log::warn!(
                    "{}: libjpeg-turbo: {msg}; delivered anyway (accept_jpeg_warnings)",
                    path.display()
                );
            }
            Some(TurboWarning::Data) => {
                return Err(fail(
                    path,
                    format!(
                        "libjpeg-turbo: {msg} (the image decoded to its end, but its data \
                             is damaged or padded; accept_jpeg_warnings(true) delivers such \
                             images, as Pillow and tf.data do)"
                    ),
                ))
            }
            None if msg.contains("Premature end of JPEG file") => {
                return Err(fail(
                    path,
                    format!("libjpeg-turbo: {msg} (the file is cut short: truncated)"),
                ))
            }
            None => return Err(fail(path, format!("libjpeg-turbo: {msg}"))),
        },
        Err(e) => return Err(fail(path, format!("libjpeg-turbo: {e}"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::DecodeSettings;
    use crate::decode::Geometry;
    use crate::decode::{LargeGate, SMALL_DECODE_BYTES};

    #[cfg(unix)]
    /// Which JPEGs decode to planes, and that their samples stay close to libjpeg-turbo's
    /// RGB decode through the same resize.
    #[cfg(feature = "turbojpeg")]
    #[test]
    fn ycbcr_and_grey_jpegs_decode_to_planes_that_resize_as_their_rgb() {
        let settings = |planes| DecodeSettings {
            max_pixels: 1 << 26,
            apply_exif: true,
            check_extension: true,
            dct_scaling: true,
            jpeg_decoder: JpegDecoder::Auto,
            planes,
            accept_jpeg_warnings: false,
        };
        let geom = Geometry {
            width: 160,
            height: 160,
            transform: crate::Transform::Stretch,
            flip: 0.0,
            filter: crate::ResizeFilter::default(),
        };
        let gate = LargeGate::default();
        let (mut with, mut without) = (Decoder::new(settings(true)), Decoder::new(settings(false)));
        // (file, planes: None for RGB, else the count and the first chroma plane's ratio)
        type Want = Option<(usize, (f64, f64))>;
        let cases: [(&str, Want); 9] = [
            ("photos/photo_0.jpg", Some((3, (0.5, 0.5)))),
            ("valid/baseline_420.jpg", Some((3, (0.5, 0.5)))),
            ("valid/progressive.jpg", Some((3, (0.5, 0.5)))),
            ("valid/s422.jpg", Some((3, (0.5, 1.0)))),
            ("valid/s444.jpg", Some((3, (1.0, 1.0)))),
            ("valid/orient_6.jpg", Some((3, (1.0, 1.0)))),
            ("valid/gray.jpg", Some((1, (1.0, 1.0)))),
            // CMYK; smaller than the output (more pixels to convert after); a side over 4x.
            ("valid/cmyk.jpg", None),
            ("valid/odd_7x5.jpg", None),
        ];
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
        for (name, want) in cases.into_iter().chain([("valid/wide_1200x40.jpg", None)]) {
            let path = root.join(name);
            let bytes = std::fs::read(&path).unwrap();
            let d = with.decode(&bytes, &path, &geom, false, &gate).unwrap();
            match (d.pixels, want) {
                (Pixels::Planes(p), Some((count, ratio))) => {
                    assert_eq!(p.count, count, "{name}");
                    let r = if count == 3 { p.ratio[1] } else { p.ratio[0] };
                    assert_eq!(r, ratio, "{name}");
                    assert_eq!(p.size[0], (d.width as usize, d.height as usize), "{name}");
                }
                (Pixels::Rgb(_), None) => {}
                (_, want) => panic!("{name}: expected planes {want:?}"),
            }
            let mut a = vec![0u8; geom.sample_len()];
            let mut b = vec![0u8; geom.sample_len()];
            with.decode_resize(
                &bytes,
                &path,
                &geom,
                crate::decode::Target::Sample(crate::decode::Draw::default()),
                false,
                &gate,
                &mut a,
            )
            .unwrap();
            without
                .decode_resize(
                    &bytes,
                    &path,
                    &geom,
                    crate::decode::Target::Sample(crate::decode::Draw::default()),
                    false,
                    &gate,
                    &mut b,
                )
                .unwrap();
            let mse = crate::decode::mean_squared_error(&a, &b);
            let psnr = 10.0 * (255.0f64 * 255.0 / mse.max(1e-9)).log10();
            assert!(psnr >= 40.0, "{name}: planes against RGB {psnr:.1} dB");
        }
    }

    /// Crop-decoded samples against the reference: the same box cut from a full-resolution
    /// RGB decode and resized with the same filter. At full scale the crop decode gives the
    /// reference's pixels (within rounding at 4:2:0 chroma edges); DCT scaling differs
    /// slightly, as for whole images (`imagefeed floor` reports that PSNR).
    #[cfg(feature = "turbojpeg")]
    #[test]
    fn crop_decodes_match_a_full_decode_cut_to_the_same_box() {
        use crate::decode::{Draw, Resizer};
        use crate::Transform;
        let settings = |dct| DecodeSettings {
            max_pixels: 1 << 26,
            apply_exif: true,
            check_extension: true,
            dct_scaling: dct,
            jpeg_decoder: JpegDecoder::Auto,
            planes: dct,
            accept_jpeg_warnings: false,
        };
        let fit = Geometry {
            width: 64,
            height: 64,
            transform: Transform::Stretch,
            filter: crate::ResizeFilter::default(),
            flip: 0.0,
        };
        let gate = LargeGate::default();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
        let mut files: Vec<_> = ["valid", "photos"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
            .collect();
        files.sort();
        let (mut scaled, mut full, mut reference) = (
            Decoder::new(settings(true)),
            Decoder::new(settings(false)),
            Decoder::new(settings(false)),
        );
        let mut resizer = Resizer::new();
        let (mut worst_full, mut worst_scaled, mut sum_scaled, mut n) = (99.0f64, 99.0f64, 0.0, 0);
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            for (t, index) in [
                (Transform::random_resized_crop(), 0u64),
                (Transform::random_resized_crop(), 1),
                (Transform::random_resized_crop(), 2),
                (Transform::center_crop(), 0),
            ] {
                let geom = Geometry {
                    transform: t,
                    ..fit
                };
                let draw = Draw {
                    seed: 5,
                    epoch: 0,
                    index,
                };
                let sample = |d: &mut Decoder| {
                    let mut out = vec![0u8; geom.sample_len()];
                    d.decode_resize(
                        &bytes,
                        path,
                        &geom,
                        super::super::Target::Sample(draw),
                        false,
                        &gate,
                        &mut out,
                    )
                    .unwrap();
                    out
                };
                let (a, b) = (sample(&mut scaled), sample(&mut full));
                let mut want = vec![0u8; geom.sample_len()];
                let mut d = reference.decode(&bytes, path, &fit, false, &gate).unwrap();
                d.crop = super::super::stored_crop(&geom, &draw, d.width, d.height, d.orientation);
                resizer.resize_orient(&d, &geom, false, &mut want).unwrap();
                let psnr = |x: &[u8]| {
                    let mse = crate::decode::mean_squared_error(x, &want);
                    10.0 * (255.0f64 * 255.0 / mse.max(1e-9)).log10()
                };
                let name = path.file_name().unwrap().to_string_lossy();
                let (pf, ps) = (psnr(&b), psnr(&a));
                assert!(
                    pf >= 40.0,
                    "{name} {t:?} #{index}: full-scale crop decode {pf:.1} dB"
                );
                worst_full = worst_full.min(pf);
                // A synthetic file with a DC quantizer of 255: scaled decoding reconstructs it
                // from far coarser data than the full decode (checked at full scale only).
                if name == "dqt_dc255.jpg" {
                    continue;
                }
                assert!(
                    ps >= 25.0,
                    "{name} {t:?} #{index}: DCT-scaled crop decode {ps:.1} dB"
                );
                worst_scaled = worst_scaled.min(ps);
                sum_scaled += ps.min(60.0);
                n += 1;
            }
        }
        let mean = sum_scaled / f64::from(n);
        println!(
            "crop decode against full decode + crop, {n} boxes of {} files: full scale lowest {worst_full:.1} dB; DCT-scaled mean {mean:.1} dB (capped at 60), lowest {worst_scaled:.1} dB",
            files.len()
        );
        assert!(mean >= 32.0, "DCT-scaled crops: mean {mean:.1} dB");
    }

    #[test]
    fn libjpeg_warnings_are_sorted_by_what_they_say_about_the_pixels() {
        use TurboWarning::{Data, Metadata};
        for (msg, want) in [
            ("Warning: unknown JFIF revision number 2.01", Some(Metadata)),
            ("Corrupt JPEG data: bad ICC marker", Some(Metadata)),
            (
                "Corrupt JPEG data: 95 extraneous bytes before marker 0xd9",
                Some(Data),
            ),
            (
                "Corrupt JPEG data: premature end of data segment",
                Some(Data),
            ),
            ("Corrupt JPEG data: bad Huffman code", Some(Data)),
            (
                "Corrupt JPEG data: found marker 0xd9 instead of RST3",
                Some(Data),
            ),
            ("Premature end of JPEG file", None),
            ("Quantization table 0x07 was not defined", None),
            ("Bogus marker length", None),
        ] {
            assert_eq!(turbo_warning(msg), want, "{msg}");
        }
    }

    #[test]
    fn cmyk_conversion() {
        let mut d = [0u8; 3];
        // Inverted CMYK: 255 is no ink.
        cmyk_to_rgb(&[255, 255, 255, 255], &mut d);
        assert_eq!(d, [255, 255, 255]);
        cmyk_to_rgb(&[0, 0, 0, 255], &mut d);
        assert_eq!(d, [0, 0, 0]);
        cmyk_to_rgb(&[255, 0, 255, 255], &mut d);
        assert_eq!(d, [255, 0, 255]);
    }

    #[test]
    fn working_set_grows_with_progressive() {
        let mut i = JpegInfo {
            width: 4000,
            height: 3000,
            components: 3,
            progressive: false,
            arithmetic: false,
            lossless: false,
            hierarchical: false,
            orientation: 1,
            scan_offset: 0,
            first_scan_components: 3,
        };
        let base = jpeg_working_set(&i, decoded_dims(&i, 8, None), true);
        assert!(base < SMALL_DECODE_BYTES);
        i.progressive = true;
        assert!(jpeg_working_set(&i, decoded_dims(&i, 8, None), true) > SMALL_DECODE_BYTES);
    }
}
