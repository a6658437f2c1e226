//! The decode stage: file bytes to pixels (interleaved RGB8, or a JPEG's own Y/Cb/Cr or grey
//! planes), then resized, converted to RGB and oriented into a `u8` sample.
//!
//! - The format comes from the file's magic bytes; a `.jpg`/`.jpeg` file must hold JPEG data
//!   and a `.png` file PNG data (a PNG or HTML page saved as `.jpg` is a broken file, not an
//!   image), unless [`check_extension(false)`](crate::LoaderBuilder::check_extension).
//! - The JPEG header is read first: an image over `max_pixels` is refused before any pixel
//!   buffer exists (decompression-bomb guard).
//! - JPEGs decode with libjpeg-turbo (feature `turbojpeg`, on by default) at the largest DCT
//!   scale (1/2, 1/4, 1/8) whose output still covers the target size on **both** axes, or with
//!   the pure-Rust zune-jpeg in strict mode. A truncated or corrupt JPEG is an error, never an
//!   image padded with grey rows.
//! - With DCT scaling on, a YCbCr or greyscale JPEG whose decoded frame is no smaller than the
//!   target and within 4× of it on each axis decodes to its planes (libjpeg-turbo skips its
//!   chroma upsampling and colour conversion), each plane is resized on its own and the
//!   target-sized result is converted to RGB, so colour conversion costs the output's pixels,
//!   not the frame's. Other JPEGs (CMYK, YCCK, RGB-coded, lossless, smaller than the target)
//!   decode to RGB.
//! - EXIF orientation is applied after the resize (it commutes with a stretch or a centre crop
//!   when the target axes are swapped), so transposing costs 160×160 pixels, not the full frame.
//!
//! Memory: a worker keeps its buffers between images up to [`RETAIN_BYTES`]; a decode whose
//! estimated working set is larger first enters the loader-wide [`LargeGate`], which admits
//! large decodes only while their estimates together fit in what one image at `max_pixels`
//! would hold (within the budget's `large_image_bytes`), however many threads there are.

pub(crate) mod header;

use std::io::Read;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{DecodeFailure, Error};
use crate::transform::{Geometry, Resizer};
use header::{Format, JpegInfo};

/// Buffers a worker keeps between images (file bytes, decoded pixels): larger ones are freed
/// after use.
pub(crate) const RETAIN_BYTES: u64 = 16 << 20;
/// A decode estimated to need more than this takes the [`LargeGate`] first.
pub(crate) const SMALL_DECODE_BYTES: u64 = 32 << 20;
/// Worst-case working set per source pixel of one large decode: a progressive 4:4:4 JPEG's
/// coefficient buffer (6 B) plus RGB output (3 B), or a 16-bit RGBA PNG (8 B) plus RGB (3 B).
pub(crate) const LARGE_BYTES_PER_PIXEL: u64 = 11;
/// What large decodes may hold together, per pixel of `max_pixels`: one progressive colour
/// JPEG at `max_pixels` keeps 6 bytes a pixel of coefficients, so large decodes side by side
/// never hold more than that one image would (a single larger decode still runs, alone).
const SHARED_LARGE_BYTES_PER_PIXEL: u64 = 6;
/// What the png crate may allocate for a PNG's ancillary chunks (text, ICC profile) besides
/// its row buffers: real ICC profiles are well under 1 MiB.
const PNG_METADATA_BYTES: u64 = 16 << 20;
/// libjpeg-turbo's guard against progressive files with absurd scan counts (real files have ~10).
const JPEG_SCAN_LIMIT: u32 = 500;

/// The JPEG decoder a build of imagefeed decodes with by default ([`JpegDecoder::Auto`]):
/// what [`decoder_info`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecoderInfo {
    /// `"libjpeg-turbo"` (the `turbojpeg` feature, on by default) or `"zune-jpeg"`.
    pub name: &'static str,
    /// The decoder's version.
    pub version: &'static str,
    /// Whether imagefeed's patch to libjpeg-turbo's Huffman decoders and 4x4 IDCT is in
    /// (bit-identical output, less decode time): `false` with the `stock-libjpeg-turbo`
    /// feature, and for zune-jpeg.
    pub patched: bool,
    /// Whether the decoder's SIMD code was built (for libjpeg-turbo on x86-64: whether `nasm`
    /// was found at build time).
    pub simd: bool,
}

impl std::fmt::Display for DecoderInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        if self.name == "libjpeg-turbo" {
            f.write_str(if self.patched {
                " (imagefeed patch"
            } else {
                " (stock"
            })?;
            f.write_str(if self.simd {
                ", SIMD)"
            } else {
                ", no SIMD: slow)"
            })?;
        }
        Ok(())
    }
}

/// The JPEG decoder this build uses: libjpeg-turbo as the `imagefeed-jpeg` crate builds it
/// (with the `turbojpeg` feature, the default), else zune-jpeg.
///
/// ```
/// let info = imagefeed::decoder_info();
/// println!("decoding with {info}"); // "libjpeg-turbo 3.1.0 (imagefeed patch, SIMD)"
/// # #[cfg(feature = "turbojpeg")]
/// assert_eq!(info.name, "libjpeg-turbo");
/// ```
pub fn decoder_info() -> DecoderInfo {
    #[cfg(feature = "turbojpeg")]
    {
        let i = imagefeed_jpeg::info();
        DecoderInfo {
            name: i.name,
            version: i.version,
            patched: i.patched,
            simd: i.simd,
        }
    }
    #[cfg(not(feature = "turbojpeg"))]
    DecoderInfo {
        name: "zune-jpeg",
        version: "0.5",
        patched: false,
        // zune-jpeg's x86 feature (on by default): SIMD IDCT and colour conversion.
        simd: cfg!(any(target_arch = "x86_64", target_arch = "x86")),
    }
}

/// Which JPEG decoder to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JpegDecoder {
    /// libjpeg-turbo when the `turbojpeg` feature is on (the default), else zune-jpeg.
    #[default]
    Auto,
    /// libjpeg-turbo (SIMD, DCT-scaled decoding). Needs the `turbojpeg` feature.
    TurboJpeg,
    /// zune-jpeg, pure Rust, strict mode, no scaled decoding.
    Zune,
}

/// Decode settings, from the builder.
#[derive(Debug, Clone)]
pub(crate) struct DecodeSettings {
    pub(crate) max_pixels: u64,
    pub(crate) apply_exif: bool,
    pub(crate) check_extension: bool,
    pub(crate) dct_scaling: bool,
    pub(crate) jpeg_decoder: JpegDecoder,
    /// Decode YCbCr and grey JPEGs with libjpeg-turbo to planes, leaving upsampling and
    /// colour conversion to the resize (on the output's pixels, after resizing): the loader's
    /// way. Off: RGB from libjpeg-turbo (the decode floor, the PSNR reference).
    pub(crate) planes: bool,
    /// Deliver JPEGs whose entropy-coded data libjpeg-turbo reports as damaged but decodes to
    /// the end ([`TurboWarning::Data`]); truncated files stay errors.
    pub(crate) accept_jpeg_warnings: bool,
}

impl DecodeSettings {
    /// Most bytes a file may have: an uncompressed RGBA frame of `max_pixels` plus 16 MiB of
    /// metadata, and never more than 256 MiB (a 100-megapixel photo compresses far below it).
    pub(crate) fn max_file_bytes(&self) -> u64 {
        self.max_pixels
            .saturating_mul(4)
            .saturating_add(16 << 20)
            .min(256 << 20)
    }
}

/// Admits large decodes (those over [`SMALL_DECODE_BYTES`]) across all workers of a loader
/// while their estimated working sets together fit in `capacity` bytes, in arrival order: for
/// a loader, `max_pixels` × [`SHARED_LARGE_BYTES_PER_PIXEL`], what one progressive JPEG at
/// `max_pixels` holds (within the budget's `large_image_bytes`). A decode larger than the whole
/// capacity, or claiming it all ([`LargeGate::enter_alone`]), runs alone. So several
/// 6-megapixel progressive photos decode at once, never more memory than one image at the limit.
#[derive(Debug, Default)]
pub(crate) struct LargeGate {
    capacity: u64,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// Bytes claimed by the decodes inside.
    used: u64,
    /// Decodes inside.
    inside: usize,
    /// Tickets handed out, and the one admitted next (arrival order: a large decode waiting
    /// for room is not overtaken by smaller ones that would fit).
    next_ticket: u64,
    serving: u64,
}

pub(crate) struct GateGuard<'a> {
    gate: &'a LargeGate,
    bytes: u64,
}

impl LargeGate {
    /// A gate admitting decodes whose estimates add up to at most `capacity` bytes (with
    /// `0`, one at a time).
    pub(crate) fn new(capacity: u64) -> Self {
        LargeGate {
            capacity,
            ..Self::default()
        }
    }

    /// The gate of a loader whose images have at most `max_pixels` pixels.
    pub(crate) fn for_max_pixels(max_pixels: u64) -> Self {
        Self::new(max_pixels.saturating_mul(SHARED_LARGE_BYTES_PER_PIXEL))
    }

    /// Waits for room for a decode estimated at `bytes`, then holds it until the guard drops.
    pub(crate) fn enter(&self, bytes: u64) -> GateGuard<'_> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        while !(s.serving == ticket
            && (s.inside == 0 || s.used.saturating_add(bytes) <= self.capacity))
        {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.serving += 1;
        s.used = s.used.saturating_add(bytes);
        s.inside += 1;
        drop(s);
        // The next ticket may fit beside this one.
        self.changed.notify_all();
        GateGuard { gate: self, bytes }
    }

    /// Waits until nothing else is inside, then holds the whole gate (a file too large to
    /// estimate before it is read).
    pub(crate) fn enter_alone(&self) -> GateGuard<'_> {
        self.enter(u64::MAX)
    }
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        s.used = s.used.saturating_sub(self.bytes);
        s.inside -= 1;
        drop(s);
        self.gate.changed.notify_all();
    }
}

/// A decoded image before resizing, borrowed from the decoder's buffer.
#[derive(Debug)]
pub(crate) struct Decoded<'a> {
    pub(crate) pixels: Pixels<'a>,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// EXIF orientation still to apply (1 = none).
    pub(crate) orientation: u8,
}

/// The pixels of a [`Decoded`] image.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pixels<'a> {
    /// RGB8, rows packed.
    Rgb(&'a [u8]),
    /// A JPEG's components as decoded, before upsampling and colour conversion (which the
    /// resize does after resizing, on the output's pixels).
    Planes(Planes<'a>),
}

/// The planes of a JPEG decoded without colour conversion: Y (grey), or Y, Cb and Cr.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planes<'a> {
    /// 1 (grey) or 3 (YCbCr).
    pub(crate) count: usize,
    pub(crate) data: [&'a [u8]; 3],
    /// Bytes a row.
    pub(crate) stride: [usize; 3],
    /// Samples of image data across and down (the rows may be padded past them).
    pub(crate) size: [(usize, usize); 3],
    /// Samples per image pixel across and down: 1 for Y, 1/2 for 4:2:0 chroma.
    pub(crate) ratio: [(f64, f64); 3],
}

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

/// Per-worker decoder: reusable buffers. Not shared between threads.
pub(crate) struct Decoder {
    settings: DecodeSettings,
    file: Vec<u8>,
    rgb: Vec<u8>,
    aux: Vec<u8>,
    resizer: Resizer,
    /// Time spent in each step since the last [`Decoder::take_times`].
    times: StageTimes,
}

/// Time a decoder spent reading, decoding and resizing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StageTimes {
    pub(crate) read: Duration,
    pub(crate) decode: Duration,
    pub(crate) resize: Duration,
}

/// What one decode works on: the bytes, the name its errors give, the target geometry, and
/// the gate of large decodes (`gate_held`: the caller already holds it, for a large file).
#[derive(Clone, Copy)]
struct Job<'j, 'g> {
    bytes: &'j [u8],
    path: &'j Path,
    geom: &'j Geometry,
    gate: &'g LargeGate,
    gate_held: bool,
}

fn fail(path: &Path, msg: impl Into<String>) -> Error {
    Error::decode(path, DecodeFailure(msg.into()))
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("file_capacity", &self.file.capacity())
            .field("rgb_capacity", &self.rgb.capacity())
            .finish_non_exhaustive()
    }
}

impl Decoder {
    pub(crate) fn new(settings: DecodeSettings) -> Self {
        Decoder {
            settings,
            file: Vec::new(),
            rgb: Vec::new(),
            aux: Vec::new(),
            resizer: Resizer::new(),
            times: StageTimes::default(),
        }
    }

    /// The time spent in each step since the last call.
    pub(crate) fn take_times(&mut self) -> StageTimes {
        std::mem::take(&mut self.times)
    }

    /// Reads, decodes, resizes and orients the image at `path` into `out`
    /// (`geom.out_len()` bytes, RGB8 HWC).
    pub(crate) fn load_file(
        &mut self,
        path: &Path,
        geom: &Geometry,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let started = Instant::now();
        // Stat before opening: opening a FIFO would block until a writer appears, and a
        // device could be read forever.
        crate::source::regular_file(path)?;
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let limit = self.settings.max_file_bytes();
        if meta.len() > limit {
            return Err(fail(
                path,
                format!(
                    "file is {} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)",
                    meta.len()
                ),
            ));
        }
        let guard = (meta.len() > RETAIN_BYTES).then(|| gate.enter_alone());
        self.file.clear();
        // `take` bounds the read even if the file grows after the metadata call.
        let read = (&mut file)
            .take(limit + 1)
            .read_to_end(&mut self.file)
            .map_err(|e| Error::io(path, e));
        let mut file_bytes = std::mem::take(&mut self.file);
        self.times.read += started.elapsed();
        let result = read.and_then(|_| {
            if file_bytes.len() as u64 > limit {
                return Err(fail(path, "file grew past the size limit while being read"));
            }
            self.decode_resize(&file_bytes, path, geom, guard.is_some(), gate, out)
        });
        if file_bytes.capacity() as u64 > RETAIN_BYTES {
            file_bytes = Vec::new();
        }
        self.file = file_bytes;
        drop(guard);
        result
    }

    /// Decodes fetched bytes (a tar member, an object): as [`Decoder::load_file`] after the
    /// read. The fetch stage has already refused bytes over the size limit.
    pub(crate) fn load_bytes(
        &mut self,
        bytes: &[u8],
        name: &Path,
        geom: &Geometry,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let guard = (bytes.len() as u64 > RETAIN_BYTES).then(|| gate.enter_alone());
        let result = self.decode_resize(bytes, name, geom, guard.is_some(), gate, out);
        drop(guard);
        result
    }

    /// Decodes, resizes and orients in-memory image bytes into `out`. `path` names the sample
    /// in errors.
    pub(crate) fn decode_resize(
        &mut self,
        bytes: &[u8],
        path: &Path,
        geom: &Geometry,
        gate_held: bool,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let job = Job {
            bytes,
            path,
            geom,
            gate,
            gate_held,
        };
        // A large decode's gate guard is held through the resize and until its buffers are
        // freed: the resize's working set is part of its estimate.
        let mut guard = None;
        let result = {
            let mut resizer = std::mem::take(&mut self.resizer);
            let started = Instant::now();
            let mut decoded_at = None;
            let r = self.decode_held(job, &mut guard).and_then(|d| {
                decoded_at = Some(Instant::now());
                resizer
                    .resize_orient(&d, geom, out)
                    .map_err(|m| fail(path, m))
            });
            let done = Instant::now();
            let decoded_at = decoded_at.unwrap_or(done);
            self.times.decode += decoded_at - started;
            self.times.resize += done - decoded_at;
            self.resizer = resizer;
            r
        };
        for buf in [&mut self.rgb, &mut self.aux] {
            if buf.capacity() as u64 > RETAIN_BYTES {
                *buf = Vec::new();
            }
        }
        drop(guard);
        result
    }

    /// Decodes image bytes to RGB8 at the scale that still covers `geom`'s target.
    pub(crate) fn decode<'a>(
        &'a mut self,
        bytes: &[u8],
        path: &Path,
        geom: &Geometry,
        gate_held: bool,
        gate: &LargeGate,
    ) -> Result<Decoded<'a>, Error> {
        let job = Job {
            bytes,
            path,
            geom,
            gate,
            gate_held,
        };
        self.decode_held(job, &mut None)
    }

    /// [`Decoder::decode`], leaving the gate guard of a large decode in `guard` for the caller
    /// to drop once it is done with the decoded image.
    fn decode_held<'a, 'g>(
        &'a mut self,
        job: Job<'_, 'g>,
        guard: &mut Option<GateGuard<'g>>,
    ) -> Result<Decoded<'a>, Error> {
        let Job { bytes, path, .. } = job;
        if bytes.is_empty() {
            return Err(fail(path, "empty file (0 bytes)"));
        }
        if let Some(cut) = header::cut_in_signature(bytes) {
            return Err(fail(
                path,
                format!(
                    "truncated {} file: {} byte{}, ending inside its signature",
                    cut.name(),
                    bytes.len(),
                    if bytes.len() == 1 { "" } else { "s" }
                ),
            ));
        }
        let format = header::sniff(bytes);
        if self.settings.check_extension {
            check_extension(path, format)?;
        }
        match format {
            Format::Jpeg => self.decode_jpeg(job, guard),
            Format::Png => self.decode_png(job, guard),
            other => Err(fail(
                path,
                format!(
                    "{} is not a supported image format (imagefeed reads JPEG and PNG)",
                    other.name()
                ),
            )),
        }
    }

    fn check_pixels(&self, path: &Path, w: u32, h: u32) -> Result<(), Error> {
        let px = u64::from(w) * u64::from(h);
        if px > self.settings.max_pixels {
            return Err(fail(
                path,
                format!(
                    "image is {w}x{h} ({:.1} megapixels), over max_pixels ({:.1} megapixels); refused before decoding",
                    px as f64 / 1e6,
                    self.settings.max_pixels as f64 / 1e6
                ),
            ));
        }
        Ok(())
    }

    fn decode_jpeg<'a, 'g>(
        &'a mut self,
        job: Job<'_, 'g>,
        guard: &mut Option<GateGuard<'g>>,
    ) -> Result<Decoded<'a>, Error> {
        let Job {
            bytes,
            path,
            geom,
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
        let scale = if use_turbo && self.settings.dct_scaling && !info.lossless {
            geom.dct_denominator(info.width, info.height, orientation)
        } else {
            1
        };
        let (sw, sh) = (info.width.div_ceil(scale), info.height.div_ceil(scale));
        let estimate = jpeg_working_set(&info, scale, use_turbo)
            .max(rgb_bytes(sw, sh) + crate::transform::resize_working_set(sw, sh, geom));
        if !gate_held && estimate > SMALL_DECODE_BYTES {
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
            // libjpeg-turbo's own RGB, as Pillow decodes.
            let planes = self.settings.planes
                && self.settings.dct_scaling
                && u64::from(sw) * u64::from(sh) >= u64::from(tw) * u64::from(th)
                && sw <= 4 * tw
                && sh <= 4 * th
                && matches!(info.components, 1 | 3)
                && !info.lossless;
            let layout = self.decode_turbo(bytes, path, &info, scale, planes)?;
            let (width, height) = (layout.width as u32, layout.height as u32);
            return Ok(Decoded {
                pixels: layout.pixels(&self.rgb),
                width,
                height,
                orientation,
            });
        }
        let (width, height) = self.decode_zune(bytes, path, &info)?;
        Ok(Decoded {
            pixels: Pixels::Rgb(&self.rgb[..width as usize * height as usize * 3]),
            width,
            height,
            orientation,
        })
    }

    /// Decodes a JPEG with libjpeg-turbo at scale `1/scale` into `self.rgb`: as planes where
    /// `planes` is set and the file is YCbCr or grey with a subsampling libjpeg-turbo can
    /// write as planes, else as RGB.
    #[cfg(feature = "turbojpeg")]
    fn decode_turbo(
        &mut self,
        bytes: &[u8],
        path: &Path,
        info: &JpegInfo,
        scale: u32,
        planes: bool,
    ) -> Result<Layout, Error> {
        use imagefeed_jpeg::{Colorspace, Image, PixelFormat, ScalingFactor, Subsamp, YuvImage};
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
        let cmyk = info.components == 4;
        // The layout of planes libjpeg-turbo would write (None: decode to RGB). A header it
        // cannot read is left to the RGB decode to report.
        let plan = if planes && !cmyk {
            // libjpeg-turbo fails a header read on a warning: one about metadata is read
            // again without it, as the decode below does.
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
        let mut run = |data: &[u8]| match &plan {
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
        let mut result = run(bytes);
        if let Err(imagefeed_jpeg::Error::Library { message: msg, .. }) = &result {
            if turbo_warning(msg) == Some(TurboWarning::Metadata) {
                // The first warning was about metadata: decode again without the JFIF and ICC
                // segments (the pixels do not depend on them), so a later warning about the
                // image data is not hidden behind it.
                log::debug!("{}: libjpeg-turbo: {msg} (ignored)", path.display());
                result = run(&header::without_segments(bytes, &[0xE0, 0xE2]));
            }
        }
        match result {
            Ok(()) => {}
            Err(imagefeed_jpeg::Error::Library { message: msg, .. }) => match turbo_warning(&msg) {
                Some(TurboWarning::Metadata) => {}
                Some(TurboWarning::Data) if self.settings.accept_jpeg_warnings => {
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
            Err(e) => return Err(tj_err(e)),
        }
        if cmyk {
            if self.rgb.len() < w * h * 3 {
                self.rgb.resize(w * h * 3, 0);
            }
            cmyk_to_rgb(&self.aux[..len], &mut self.rgb[..w * h * 3]);
        }
        Ok(plan.unwrap_or(Layout::rgb(w, h)))
    }

    #[cfg(not(feature = "turbojpeg"))]
    fn decode_turbo(
        &mut self,
        bytes: &[u8],
        path: &Path,
        info: &JpegInfo,
        _scale: u32,
        _planes: bool,
    ) -> Result<Layout, Error> {
        let (w, h) = self.decode_zune(bytes, path, info)?;
        Ok(Layout::rgb(w as usize, h as usize))
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

    fn decode_png<'a, 'g>(
        &'a mut self,
        job: Job<'_, 'g>,
        guard: &mut Option<GateGuard<'g>>,
    ) -> Result<Decoded<'a>, Error> {
        let Job {
            bytes,
            path,
            geom,
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
        let mut png = if indexed {
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
            let dec = image::codecs::png::PngDecoder::with_limits(
                std::io::Cursor::new(bytes),
                header_limits,
            )
            .map_err(|e| match e {
                image::ImageError::Limits(_) => too_much_metadata(),
                e => perr(e),
            })?;
            Png::Image(dec)
        };
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
        let estimate = decoding.max(rgb + crate::transform::resize_working_set(w, h, geom));
        if !gate_held && estimate > SMALL_DECODE_BYTES {
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
        let src = &self.aux;
        let dst = &mut self.rgb;
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
        })
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

/// Bytes of a `w`×`h` RGB8 image.
fn rgb_bytes(w: u32, h: u32) -> u64 {
    u64::from(w) * u64::from(h) * 3
}

/// Estimated peak bytes of decoding one JPEG at scale `1/scale`.
pub(crate) fn jpeg_working_set(info: &JpegInfo, scale: u32, turbo: bool) -> u64 {
    let (w, h) = (u64::from(info.width), u64::from(info.height));
    let s = u64::from(scale);
    let out_px = w.div_ceil(s) * h.div_ceil(s);
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

/// A `.jpg`/`.jpeg` file must hold JPEG data and a `.png` file PNG data.
fn check_extension(path: &Path, format: Format) -> Result<(), Error> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let is = |name: &str| ext.eq_ignore_ascii_case(name);
    let expected = if is("jpg") || is("jpeg") || is("jpe") || is("jfif") {
        Format::Jpeg
    } else if is("png") {
        Format::Png
    } else {
        return Ok(());
    };
    if format == expected {
        return Ok(());
    }
    let ext = ext.to_ascii_lowercase();
    Err(fail(
        path,
        if matches!(format, Format::Jpeg | Format::Png) {
            format!(
                "the file holds {} data but is named .{ext} (a mislabelled file; use check_extension(false) to accept it)",
                format.name()
            )
        } else {
            format!(
                "not a {} file: it holds {} (named .{ext})",
                expected.name(),
                format.name()
            )
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_large_gate_admits_what_fits_together_in_arrival_order() {
        use std::sync::Arc;
        let gate = Arc::new(LargeGate::new(100));
        // `bytes` entering on a thread of its own, held until `release` says so.
        let enter = |bytes: u64| {
            let (gate, (tx, rx)) = (Arc::clone(&gate), crossbeam_channel::bounded::<()>(0));
            let (entered_tx, entered) = crossbeam_channel::bounded::<()>(1);
            let h = std::thread::spawn(move || {
                let _g = gate.enter(bytes);
                entered_tx.send(()).unwrap();
                let _ = rx.recv();
            });
            (h, entered, tx)
        };
        let inside = |e: &crossbeam_channel::Receiver<()>| {
            e.recv_timeout(Duration::from_millis(300)).is_ok()
        };
        // Two that fit together are both inside at once.
        let a = enter(40);
        assert!(inside(&a.1), "40 of 100 not admitted");
        let b = enter(60);
        assert!(inside(&b.1), "60 beside 40 not admitted (100 of 100)");
        // One more must wait for room: 40 freed is not room for 50.
        let c = enter(50);
        assert!(!inside(&c.1), "admitted past the capacity");
        drop(a.2);
        a.0.join().unwrap();
        assert!(!inside(&c.1), "50 admitted beside 60");
        // Arrival order: 10 would fit beside 60, but 50 came first and waits.
        let d = enter(10);
        assert!(
            !inside(&d.1),
            "a later, smaller decode overtook a waiting one"
        );
        drop(b.2);
        b.0.join().unwrap();
        assert!(
            inside(&c.1) && inside(&d.1),
            "50 then 10 not admitted once 60 left"
        );
        drop((c.2, d.2));
        c.0.join().unwrap();
        d.0.join().unwrap();
        // One larger than the whole capacity runs alone, and one claiming it all keeps
        // everything else out.
        let big = gate.enter(1_000);
        let s = gate.state.lock().unwrap();
        assert_eq!((s.inside, s.used), (1, 1_000));
        drop(s);
        drop(big);
        let alone = gate.enter_alone();
        let small = enter(1);
        assert!(
            !inside(&small.1),
            "admitted beside a decode that claims the gate"
        );
        drop(alone);
        assert!(inside(&small.1));
        drop(small.2);
        small.0.join().unwrap();
        let s = gate.state.lock().unwrap();
        assert_eq!((s.inside, s.used), (0, 0));
    }

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
            mode: crate::ResizeMode::Stretch,
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
            with.decode_resize(&bytes, &path, &geom, false, &gate, &mut a)
                .unwrap();
            without
                .decode_resize(&bytes, &path, &geom, false, &gate, &mut b)
                .unwrap();
            let mse = crate::floor::mean_squared_error(&a, &b);
            let psnr = 10.0 * (255.0f64 * 255.0 / mse.max(1e-9)).log10();
            assert!(psnr >= 40.0, "{name}: planes against RGB {psnr:.1} dB");
        }
    }

    #[test]
    fn issue_6_fifo_and_device_are_errors_not_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.jpg");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        let geom = Geometry {
            width: 8,
            height: 8,
            mode: crate::ResizeMode::Stretch,
            filter: crate::ResizeFilter::default(),
        };
        let settings = DecodeSettings {
            max_pixels: 1 << 20,
            apply_exif: true,
            check_extension: true,
            dct_scaling: true,
            jpeg_decoder: JpegDecoder::Auto,
            planes: true,
            accept_jpeg_warnings: false,
        };
        let mut d = Decoder::new(settings);
        let gate = LargeGate::default();
        let mut out = vec![0u8; geom.sample_len()];
        if made.is_ok_and(|s| s.success()) {
            let e = d.load_file(&fifo, &geom, &gate, &mut out).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        let e = d
            .load_file(Path::new("/dev/zero"), &geom, &gate, &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
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
    fn extension_mismatch_is_named() {
        let e = check_extension(Path::new("a/x.jpg"), Format::Png).unwrap_err();
        assert!(e.to_string().contains("PNG data but is named .jpg"), "{e}");
        let e = check_extension(Path::new("a/x.JPG"), Format::Text).unwrap_err();
        assert!(e.to_string().contains("HTML"), "{e}");
        assert!(check_extension(Path::new("x.JPEG"), Format::Jpeg).is_ok());
        assert!(check_extension(Path::new("x"), Format::Png).is_ok());
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
        let base = jpeg_working_set(&i, 8, true);
        assert!(base < SMALL_DECODE_BYTES);
        i.progressive = true;
        assert!(jpeg_working_set(&i, 8, true) > SMALL_DECODE_BYTES);
    }
}
