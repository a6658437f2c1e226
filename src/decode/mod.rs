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
//! Memory: a worker keeps its buffers between images up to [`RETAIN_BYTES`] each; a decode
//! whose estimated working set (its file's bytes included) is over the loader's per-thread
//! share ([`LargeGate::small`]) first enters the loader-wide [`LargeGate`], which admits
//! large decodes side by side only while their estimates together fit in the steady budget's
//! `large_shared_bytes`, and a larger one alone (the worst case's `large_image_bytes`),
//! however many threads there are.

//!
//! `jpeg.rs` and `png.rs` decode each format, `gate.rs` is the large-decode gate,
//! `header.rs` reads headers and signatures without decoding, and `verified.rs` remembers the
//! files a strict cropped decode has read to their end.

mod gate;
pub(crate) mod header;
mod jpeg;
mod png;
mod webp;
// Only libjpeg-turbo's cropped decodes read it; without `turbojpeg` no loader makes one
// (`Config::verifies_crops`).
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
mod verified;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{DecodeFailure, Error};
use crate::image::{Decoded, Rect};
// The decode stage produces samples: it decodes an image and hands it to the transforms
// (crop geometry, resize, orientation, flip). The rest of the crate reaches the transforms
// through these names, so that `transform/` has one caller.
pub(crate) use crate::transform::{
    base_len, crop_box, display_dims, flip_horizontal, resize_working_set, to_stored, Draw,
    Geometry, Resizer, RESIZE_RETAINED_BYTES,
};
pub(crate) use gate::{
    GateGuard, LargeGate, LARGE_BYTES_PER_PIXEL, LARGE_SHARED_BYTES, RETAIN_BYTES,
    SMALL_DECODE_BYTES,
};
use header::Format;
pub(crate) use verified::VerifiedFiles;

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

/// The decode stage's settings.
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
    /// the end (`TurboWarning::Data` in jpeg.rs); truncated files stay errors.
    pub(crate) accept_jpeg_warnings: bool,
}

impl Default for DecodeSettings {
    fn default() -> Self {
        DecodeSettings {
            max_pixels: 100_000_000,
            apply_exif: true,
            check_extension: true,
            dct_scaling: true,
            jpeg_decoder: JpegDecoder::Auto,
            planes: true,
            accept_jpeg_warnings: false,
        }
    }
}

impl DecodeSettings {
    /// Checks the settings alone.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.max_pixels == 0 {
            return Err(Error::config("max_pixels", "must be at least 1"));
        }
        if self.jpeg_decoder == JpegDecoder::TurboJpeg && !cfg!(feature = "turbojpeg") {
            return Err(Error::feature_disabled("turbojpeg"));
        }
        Ok(())
    }

    /// One decode larger than the shared large-decode budget, running alone: `max_pixels` ×
    /// [`LARGE_BYTES_PER_PIXEL`] plus one file, the most one image at `max_pixels` can take.
    pub(crate) fn large_image_bytes(&self) -> u64 {
        self.max_pixels
            .saturating_mul(LARGE_BYTES_PER_PIXEL)
            .saturating_add(self.max_file_bytes())
    }

    /// Most bytes a file may have: an uncompressed RGBA frame of `max_pixels` plus 16 MiB of
    /// metadata, and never more than 256 MiB (a 100-megapixel photo compresses far below it).
    pub(crate) fn max_file_bytes(&self) -> u64 {
        self.max_pixels
            .saturating_mul(4)
            .saturating_add(16 << 20)
            .min(256 << 20)
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
    /// libjpeg-turbo decodes only a cropping transform's region (on, always in a loader);
    /// off, it decodes the whole frame at the box's scale and the box is cut after, as
    /// decoders without region decoding do (`fuzzing::BenchDecoder`, to measure the saving).
    #[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
    pub(crate) crop_regions: bool,
    /// The loader's files already read to their end cleanly by a strict cropped decode
    /// (`verified.rs`): their later cropped decodes stop below the box. `None`: every strict
    /// cropped decode reads to the end.
    pub(crate) verified: Option<std::sync::Arc<VerifiedFiles>>,
}

/// What a decode writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// The sample `Draw` (`geom.sample_len()` bytes): the transform's box, resized, oriented
    /// and flipped as drawn for it.
    Sample(Draw),
    /// A cache's base image for a random transform (`transform::base_len(side)` bytes): the
    /// oriented image fitted within `side`×`side`, with its sizes.
    Base { side: u32 },
}

/// Time a decoder spent reading, decoding and resizing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StageTimes {
    pub(crate) read: Duration,
    pub(crate) decode: Duration,
    pub(crate) resize: Duration,
}

/// What one decode works on: the bytes, the name its errors give, the target geometry, which
/// sample it is (for a random transform's draws), and the gate of large decodes
/// (`gate_held`: the caller already holds it, for a large file).
#[derive(Clone, Copy)]
struct Job<'j, 'g> {
    bytes: &'j [u8],
    path: &'j Path,
    geom: &'j Geometry,
    draw: Draw,
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
            crop_regions: true,
            verified: None,
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
        target: Target,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let started = Instant::now();
        // Stat before opening: opening a FIFO would block until a writer appears, and a
        // device could be read forever.
        crate::source::storage::regular_file(path)?;
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
        // A file over the thread's share is read under the whole gate: its decode's estimate is
        // not known before it is read.
        let guard = (meta.len() > gate.small()).then(|| gate.enter_alone());
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
            self.decode_resize(&file_bytes, path, geom, target, guard.is_some(), gate, out)
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
        target: Target,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let guard = (bytes.len() as u64 > gate.small()).then(|| gate.enter_alone());
        let result = self.decode_resize(bytes, name, geom, target, guard.is_some(), gate, out);
        drop(guard);
        result
    }

    /// Decodes in-memory image bytes into `out`: the sample (cropped, resized, oriented and
    /// flipped as the transform of `geom` chooses for it) or a cache's base image, as `target`
    /// says. `path` names the sample in errors.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_resize(
        &mut self,
        bytes: &[u8],
        path: &Path,
        geom: &Geometry,
        target: Target,
        gate_held: bool,
        gate: &LargeGate,
        out: &mut [u8],
    ) -> Result<(), Error> {
        // A base image is decoded whole, at the scale that covers `side` on both axes.
        let (job_geom, draw) = match target {
            Target::Sample(draw) => (*geom, draw),
            Target::Base { side } => (
                Geometry {
                    width: side,
                    height: side,
                    transform: crate::Transform::Stretch,
                    filter: geom.filter,
                    flip: 0.0,
                },
                Draw::default(),
            ),
        };
        let job = Job {
            bytes,
            path,
            geom: &job_geom,
            draw,
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
                match target {
                    Target::Sample(draw) => {
                        resizer.resize_orient(&d, geom, draw.flip(geom.flip), out)
                    }
                    Target::Base { side } => resizer.write_base(&d, side, geom.filter, out),
                }
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

    /// Cuts the sample `draw` from a cache's base image (see `transform/base.rs`).
    pub(crate) fn sample_from_base(
        &mut self,
        base: &[u8],
        side: u32,
        geom: &Geometry,
        draw: Draw,
        path: &Path,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let started = Instant::now();
        let r = self.resizer.sample_from_base(base, side, geom, draw, out);
        self.times.resize += started.elapsed();
        r.map_err(|m| fail(path, m))
    }

    /// Decodes image bytes to RGB8 at the scale that still covers `geom`'s target.
    #[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
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
            draw: Draw::default(),
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
            Format::WebP => self.decode_webp(job, guard),
            other => Err(fail(
                path,
                format!(
                    "{} is not a supported image format (imagefeed reads JPEG, PNG and WebP)",
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
}

/// The box of a `w`×`h` stored frame with EXIF orientation `o` that a cropping transform cuts
/// for sample `draw` (stored frame, full scale), or `None` for the fits.
fn stored_crop(geom: &Geometry, draw: &Draw, w: u32, h: u32, o: u8) -> Option<Rect> {
    if !geom.transform.crops() {
        return None;
    }
    let (dw, dh) = display_dims(w, h, o);
    let r = crop_box(&geom.transform, dw, dh, (geom.width, geom.height), draw);
    Some(to_stored(r, f64::from(dw), f64::from(dh), o))
}

/// Images whose headers [`typical_working_set`] reads.
const SAMPLED_IMAGES: usize = 32;

/// The bytes of each sampled file read for its header: enough for EXIF and ICC segments
/// before the frame header.
const SAMPLED_HEAD_BYTES: u64 = 256 << 10;

/// A decode thread's memory besides the images it decodes: its `share` of what one decode may
/// hold, a buffer kept from an earlier image that this one does not reuse, the orientation copy
/// and the resized planes of a JPEG decoded to planes (`sample_len` each), the resizer's
/// retained scratch, and a random transform's cached base image (`base_side`).
pub(crate) fn thread_bytes(share: u64, sample_len: u64, base_side: Option<u32>) -> u64 {
    share
        .saturating_add(RETAIN_BYTES)
        .saturating_add(2 * sample_len)
        .saturating_add(RESIZE_RETAINED_BYTES as u64)
        .saturating_add(base_side.map_or(0, |s| base_len(s) as u64))
}

/// The largest working set (file bytes included, as the decoder estimates it before decoding)
/// among up to [`SAMPLED_IMAGES`] images evenly spaced over a source of local files, read from
/// their headers: a loader's typical image, which its decode threads' share of the steady
/// budget must hold. 0 for other sources, and for images that cannot be read or are over
/// `max_pixels` (they are errors or large decodes, not typical ones).
pub(crate) fn typical_working_set(
    source: &crate::Source,
    settings: &DecodeSettings,
    geom: &Geometry,
) -> u64 {
    if !source.backing.is_local_files() {
        return 0;
    }
    let n = source.len();
    let picks = n.min(SAMPLED_IMAGES);
    let mut head = Vec::new();
    (0..picks)
        .filter_map(|k| {
            let path = source.index.path(k * n / picks);
            // Only regular files: opening a FIFO listed as a sample would block `build()`
            // (the decoder refuses it by name when its turn comes).
            let len = std::fs::metadata(&path).ok().filter(|m| m.is_file())?.len();
            let file = std::fs::File::open(&path).ok()?;
            head.clear();
            file.take(SAMPLED_HEAD_BYTES).read_to_end(&mut head).ok()?;
            working_set(&head, len, settings, geom)
        })
        .max()
        .unwrap_or(0)
}

/// The working set of decoding the image whose file starts with `head` and has `len` bytes,
/// as `decode_jpeg` and `decode_png` estimate it; `None` if `head` holds no readable header or
/// the image is over `max_pixels`.
fn working_set(head: &[u8], len: u64, settings: &DecodeSettings, geom: &Geometry) -> Option<u64> {
    let (w, h, decoding) = match header::sniff(head) {
        Format::Jpeg => {
            let info = header::jpeg_info(head).ok()?;
            let turbo = cfg!(feature = "turbojpeg") && settings.jpeg_decoder != JpegDecoder::Zune;
            let orientation = if settings.apply_exif {
                info.orientation
            } else {
                1
            };
            let estimate = |d: (u32, u32)| {
                jpeg::jpeg_working_set(&info, d, turbo)
                    .max(rgb_bytes(d.0, d.1) + resize_working_set(d.0, d.1, geom))
            };
            let scaling = turbo && settings.dct_scaling && !info.lossless;
            let set = if !scaling {
                // Whole frames at full scale (a crop too: its box may be the whole image).
                estimate((info.width, info.height))
            } else if geom.transform.is_random() {
                // The box is drawn per sample: the largest region any box decodes.
                geom.crop_decode_bounds(info.width, info.height, orientation, jpeg::CROP_PAD)
                    .into_iter()
                    .map(estimate)
                    .max()
                    .unwrap_or(0)
            } else if let Some(c) =
                stored_crop(geom, &Draw::default(), info.width, info.height, orientation)
            {
                // A fixed box (the centre crop).
                let scale = geom.dct_denominator_for_crop(info.width, info.height, c, orientation);
                estimate(jpeg::decoded_dims(&info, scale, Some(c)))
            } else {
                let scale = geom.dct_denominator(info.width, info.height, orientation);
                estimate(jpeg::decoded_dims(&info, scale, None))
            };
            (info.width, info.height, set)
        }
        Format::Png => {
            let be32 = |at: usize| {
                head.get(at..at + 4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            };
            let (w, h) = (be32(16)?, be32(20)?);
            let (depth, colour) = (*head.get(24)?, *head.get(25)?);
            let channels = match colour {
                0 | 3 => 1,
                4 => 2,
                2 => 3,
                _ => 4,
            };
            let px = u64::from(w) * u64::from(h);
            if px > settings.max_pixels {
                return None;
            }
            let staged = if colour == 2 && depth == 8 {
                0
            } else {
                px.saturating_mul(channels * u64::from(depth.max(8) / 8))
            };
            let set = staged
                .saturating_add(rgb_bytes(w, h))
                .max(rgb_bytes(w, h).saturating_add(resize_working_set(w, h, geom)));
            (w, h, set)
        }
        Format::WebP => {
            let (w, h) = webp::dimensions(head)?;
            // Alpha is in the VP8X flags or a VP8L header; counted as RGBA either way.
            let set = webp::decode_bytes(w, h, true)
                .max(rgb_bytes(w, h).saturating_add(resize_working_set(w, h, geom)));
            (w, h, set)
        }
        _ => return None,
    };
    (u64::from(w) * u64::from(h) <= settings.max_pixels).then(|| decoding.saturating_add(len))
}

/// The mean squared difference of two equally long `u8` buffers (the PSNR of `imagefeed floor`
/// and of the decode tests).
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn mean_squared_error(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64
}

/// Bytes of a `w`×`h` RGB8 image.
fn rgb_bytes(w: u32, h: u32) -> u64 {
    (u64::from(w) * u64::from(h)).saturating_mul(3)
}

/// A `.jpg`/`.jpeg` file must hold JPEG data and a `.png` file PNG data.
fn check_extension(path: &Path, format: Format) -> Result<(), Error> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let is = |name: &str| ext.eq_ignore_ascii_case(name);
    let expected = if is("jpg") || is("jpeg") || is("jpe") || is("jfif") {
        Format::Jpeg
    } else if is("png") {
        Format::Png
    } else if is("webp") {
        Format::WebP
    } else {
        return Ok(());
    };
    if format == expected {
        return Ok(());
    }
    let ext = ext.to_ascii_lowercase();
    Err(fail(
        path,
        if matches!(format, Format::Jpeg | Format::Png | Format::WebP) {
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
    fn fifo_and_device_are_errors_not_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.jpg");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        let geom = Geometry {
            width: 8,
            height: 8,
            transform: crate::Transform::Stretch,
            flip: 0.0,
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
            let e = d
                .load_file(
                    &fifo,
                    &geom,
                    Target::Sample(Draw::default()),
                    &gate,
                    &mut out,
                )
                .unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        let e = d
            .load_file(
                Path::new("/dev/zero"),
                &geom,
                Target::Sample(Draw::default()),
                &gate,
                &mut out,
            )
            .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
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
}

#[cfg(test)]
mod crop_bound_tests {
    use super::*;
    use crate::ResizeFilter;

    #[test]
    fn a_cropped_decode_stays_within_the_bounds_the_budget_counts() {
        // Every box the transforms draw, decoded at the scale the decoder picks, writes a
        // region within one of `crop_decode_bounds`: the typical working set (and so the
        // steady budget) counts no less than a crop decode holds.
        let transforms = [
            crate::Transform::random_resized_crop(),
            crate::Transform::RandomResizedCrop {
                scale: (0.01, 1.0),
                ratio: (0.2, 5.0),
            },
        ];
        let sizes = [
            (4000, 3000),
            (500, 375),
            (3000, 4000),
            (161, 2000),
            (100, 100),
            (8000, 90),
        ];
        for transform in transforms {
            for (ow, oh) in [(160, 160), (224, 160)] {
                let geom = Geometry {
                    width: ow,
                    height: oh,
                    transform,
                    filter: ResizeFilter::default(),
                    flip: 0.0,
                };
                for (w, h) in sizes {
                    for o in [1u8, 6] {
                        let info = header::JpegInfo {
                            width: w as u32,
                            height: h as u32,
                            components: 3,
                            progressive: false,
                            arithmetic: false,
                            lossless: false,
                            hierarchical: false,
                            orientation: o,
                            scan_offset: 0,
                            first_scan_components: 3,
                        };
                        let bounds = geom.crop_decode_bounds(w as u32, h as u32, o, jpeg::CROP_PAD);
                        for index in 0..500 {
                            let draw = Draw {
                                seed: 7,
                                epoch: 0,
                                index,
                            };
                            let c = stored_crop(&geom, &draw, w as u32, h as u32, o).unwrap();
                            let scale = geom.dct_denominator_for_crop(w as u32, h as u32, c, o);
                            let d = jpeg::decoded_dims(&info, scale, Some(c));
                            assert!(
                                bounds.iter().any(|b| b.0 >= d.0 && b.1 >= d.1),
                                "{transform:?} {ow}x{oh}, {w}x{h} o{o}: box {c:?} at 1/{scale} decodes {d:?}, over {bounds:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
