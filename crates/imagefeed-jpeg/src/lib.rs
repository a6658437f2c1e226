//! # imagefeed-jpeg
//!
//! The JPEG decoder of [imagefeed](https://crates.io/crates/imagefeed): libjpeg-turbo 3.1.0,
//! built from source with the `cc` crate (no CMake; its SIMD code, on x86-64 imagefeed's C
//! intrinsics and on aarch64 libjpeg-turbo's Neon code, needs no assembler), and a thin safe
//! wrapper over the TurboJPEG 3 calls imagefeed needs:
//! DCT-scaled decoding, a cropping region, decoding to planes, and compression (for test
//! corpora).
//!
//! By default the library carries imagefeed's patch to its Huffman decoders and 4x4 IDCT
//! (`imagefeed.patch`, see README.md): bit-identical output, about a fifth less decode time on
//! photographs. The `stock-libjpeg-turbo` feature builds the same version as released instead.
//! [`info`] says which one a program got.
//!
//! ```
//! use imagefeed_jpeg::{Compressor, Decompressor, Image, PixelFormat, ScalingFactor, Subsamp};
//!
//! // A 64x48 gradient, compressed and decoded again at half size.
//! let (w, h) = (64, 48);
//! let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
//! let mut c = Compressor::new()?;
//! c.set_quality(90)?;
//! c.set_subsamp(Subsamp::Sub2x2)?;
//! let jpeg = c.compress_to_vec(Image { pixels: &rgb[..], width: w, pitch: w * 3, height: h, format: PixelFormat::RGB })?;
//!
//! let mut d = Decompressor::new()?;
//! let header = d.read_header(&jpeg)?;
//! assert_eq!((header.width, header.height), (64, 48));
//! let half = ScalingFactor::new(1, 2);
//! d.set_scaling_factor(half)?;
//! let (sw, sh) = (half.scale(w), half.scale(h));
//! let mut out = vec![0u8; sw * sh * 3];
//! d.decompress(&jpeg, Image { pixels: &mut out[..], width: sw, pitch: sw * 3, height: sh, format: PixelFormat::RGB })?;
//! # Ok::<(), imagefeed_jpeg::Error>(())
//! ```

#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;

#[doc(hidden)]
pub mod ffi;

/// Which libjpeg-turbo a program was built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderInfo {
    /// `"libjpeg-turbo"`.
    pub name: &'static str,
    /// The libjpeg-turbo version, `"3.1.0"`.
    pub version: &'static str,
    /// Whether imagefeed's patch (faster Huffman decoding and 4x4 IDCT, bit-identical output) is
    /// in: `false` with the `stock-libjpeg-turbo` feature.
    pub patched: bool,
    /// Whether SIMD code was built: on x86-64 always (imagefeed's intrinsics; with the
    /// `stock-libjpeg-turbo` feature, libjpeg-turbo's nasm code where nasm was found), on
    /// aarch64 libjpeg-turbo's Neon code.
    pub simd: bool,
}

impl fmt::Display for DecoderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({}, {})",
            self.name,
            self.version,
            if self.patched {
                "imagefeed patch"
            } else {
                "stock"
            },
            if self.simd { "SIMD" } else { "no SIMD" }
        )
    }
}

/// The decoder this crate was built with.
pub fn info() -> DecoderInfo {
    DecoderInfo {
        name: "libjpeg-turbo",
        version: "3.1.0",
        patched: cfg!(not(feature = "stock-libjpeg-turbo")),
        simd: cfg!(imagefeed_jpeg_simd = "yes"),
    }
}

/// Hooks for tests and benchmarks that compare the patched code paths with the stock ones of
/// the same build. Not for production use: the switch is process-wide.
#[doc(hidden)]
pub mod testing {
    /// Patched code paths that can be turned off at run time.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FastPaths {
        /// The stock Huffman decoders (sequential and progressive refinement).
        pub stock_huffman: bool,
        /// One 4x4 IDCT block at a time instead of two per AVX2 pass.
        pub no_idct_pair: bool,
        /// No BMI2 PDEP in progressive refinement scans.
        pub no_pdep: bool,
        /// A cropped decode of a multi-scan (progressive) file decodes every scan to its end,
        /// rows below the crop included.
        pub whole_scans: bool,
    }

    /// Turns patched code paths off (or back on) for every decode that starts a scan after the
    /// call. Does nothing in a `stock-libjpeg-turbo` build, which has no such paths.
    pub fn disable_fast_paths(paths: FastPaths) {
        #[cfg(not(feature = "stock-libjpeg-turbo"))]
        {
            let bits = paths.stock_huffman as i32
                | (paths.no_idct_pair as i32) << 1
                | (paths.no_pdep as i32) << 2
                | (paths.whole_scans as i32) << 3;
            // SAFETY: stores one int atomically; no other state.
            unsafe { super::ffi::imagefeed_jpeg_set_disabled_paths(bits) }
        }
        #[cfg(feature = "stock-libjpeg-turbo")]
        let _ = paths;
    }

    /// The paths [`disable_fast_paths`] turned off.
    pub fn disabled_fast_paths() -> FastPaths {
        #[cfg(not(feature = "stock-libjpeg-turbo"))]
        // SAFETY: loads one int atomically.
        let bits = unsafe { super::ffi::imagefeed_jpeg_disabled_paths() };
        #[cfg(feature = "stock-libjpeg-turbo")]
        let bits = 0;
        FastPaths {
            stock_huffman: bits & 1 != 0,
            no_idct_pair: bits & 2 != 0,
            no_pdep: bits & 4 != 0,
            whole_scans: bits & 8 != 0,
        }
    }
}

/// What a decompression does below its cropping region.
#[cfg(not(feature = "stock-libjpeg-turbo"))]
enum CropEnd {
    /// No region.
    Whole,
    /// Stop below these output rows (a multi-scan file's scans too).
    StopBelow(usize),
    /// Read the data to its end.
    ReadToEnd,
}

/// The patch's per-thread settings for the decompression running on this thread; cleared when
/// dropped, so that no other call on the thread inherits them.
#[cfg(not(feature = "stock-libjpeg-turbo"))]
struct CropHooks;

#[cfg(not(feature = "stock-libjpeg-turbo"))]
impl CropHooks {
    fn set(end: CropEnd) -> CropHooks {
        let (rows, to_end) = match end {
            CropEnd::Whole => (0, false),
            CropEnd::StopBelow(rows) => (std::ffi::c_uint::try_from(rows).unwrap_or(0), false),
            CropEnd::ReadToEnd => (0, true),
        };
        // SAFETY: each stores one thread-local int; no other state.
        unsafe {
            ffi::imagefeed_jpeg_set_row_limit(rows);
            ffi::imagefeed_jpeg_set_read_to_end(c_int::from(to_end));
        }
        CropHooks
    }
}

#[cfg(not(feature = "stock-libjpeg-turbo"))]
impl Drop for CropHooks {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe {
            ffi::imagefeed_jpeg_set_row_limit(0);
            ffi::imagefeed_jpeg_set_read_to_end(0);
        }
    }
}

/// An error from libjpeg-turbo or from this wrapper's checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// libjpeg-turbo failed, or (with `warning`) finished the image but reported damaged or
    /// unusual data. `message` is its text, for example `Corrupt JPEG data: premature end of
    /// data segment`.
    Library {
        /// libjpeg-turbo's message.
        message: String,
        /// `true` for TurboJPEG's `TJERR_WARNING`: the output is complete but the data had a
        /// problem.
        warning: bool,
    },
    /// An argument this wrapper refused before calling libjpeg-turbo (a buffer too small, a
    /// size that does not fit in a C `int`).
    Argument(String),
}

impl Error {
    /// libjpeg-turbo's message, or the argument check's.
    pub fn message(&self) -> &str {
        match self {
            Error::Library { message, .. } | Error::Argument(message) => message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

/// This crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Pixel formats of decoded and compressed images (TurboJPEG's `TJPF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms)]
pub enum PixelFormat {
    /// Red, green, blue: 3 bytes a pixel.
    RGB = 0,
    /// Blue, green, red.
    BGR = 1,
    /// Red, green, blue, padding: 4 bytes a pixel.
    RGBX = 2,
    /// One grey byte a pixel.
    GRAY = 6,
    /// Red, green, blue, alpha.
    RGBA = 7,
    /// Cyan, magenta, yellow, key (as stored in Adobe CMYK JPEGs: inverted).
    CMYK = 11,
}

impl PixelFormat {
    /// Bytes a pixel.
    pub fn size(self) -> usize {
        match self {
            PixelFormat::RGB | PixelFormat::BGR => 3,
            PixelFormat::GRAY => 1,
            PixelFormat::RGBX | PixelFormat::RGBA | PixelFormat::CMYK => 4,
        }
    }
}

/// Chroma subsampling (TurboJPEG's `TJSAMP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subsamp {
    /// 4:4:4, no subsampling.
    None = 0,
    /// 4:2:2: chroma halved horizontally.
    Sub2x1 = 1,
    /// 4:2:0: chroma halved on both axes.
    Sub2x2 = 2,
    /// Greyscale: no chroma.
    Gray = 3,
    /// 4:4:0: chroma halved vertically.
    Sub1x2 = 4,
    /// 4:1:1: chroma quartered horizontally.
    Sub4x1 = 5,
    /// 4:4:1: chroma quartered vertically.
    Sub1x4 = 6,
    /// A layout TurboJPEG has no name for (it can still decode to RGB).
    Unknown = -1,
}

impl Subsamp {
    fn from_raw(v: c_int) -> Subsamp {
        match v {
            0 => Subsamp::None,
            1 => Subsamp::Sub2x1,
            2 => Subsamp::Sub2x2,
            3 => Subsamp::Gray,
            4 => Subsamp::Sub1x2,
            5 => Subsamp::Sub4x1,
            6 => Subsamp::Sub1x4,
            _ => Subsamp::Unknown,
        }
    }

    /// How many pixels share one chroma sample, across and down (2, 2 for 4:2:0; 1, 1 for
    /// 4:4:4 and greyscale).
    pub fn factors(self) -> (usize, usize) {
        let (w, h) = self.mcu_size();
        (w / 8, h / 8)
    }

    /// The width and height of an MCU (iMCU) in pixels at full scale (`tjMCUWidth`,
    /// `tjMCUHeight`); 8x8 for [`Subsamp::Unknown`].
    pub fn mcu_size(self) -> (usize, usize) {
        match self {
            Subsamp::None | Subsamp::Gray | Subsamp::Unknown => (8, 8),
            Subsamp::Sub2x1 => (16, 8),
            Subsamp::Sub2x2 => (16, 16),
            Subsamp::Sub1x2 => (8, 16),
            Subsamp::Sub4x1 => (32, 8),
            Subsamp::Sub1x4 => (8, 32),
        }
    }
}

/// The colour space of a JPEG's data (TurboJPEG's `TJCS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Colorspace {
    /// RGB stored as is.
    RGB = 0,
    /// YCbCr, the usual JPEG colour space.
    YCbCr = 1,
    /// One grey component.
    Gray = 2,
    /// CMYK stored as is.
    CMYK = 3,
    /// CMYK stored as YCbCr plus K.
    YCCK = 4,
}

impl Colorspace {
    fn from_raw(v: c_int) -> Option<Colorspace> {
        Some(match v {
            0 => Colorspace::RGB,
            1 => Colorspace::YCbCr,
            2 => Colorspace::Gray,
            3 => Colorspace::CMYK,
            4 => Colorspace::YCCK,
            _ => return None,
        })
    }
}

/// A scaling factor `num/denom` for DCT-scaled decoding: libjpeg-turbo decodes straight to
/// the smaller size, skipping most of the IDCT work. The factors it supports are `n/8` for `n`
/// in 1..=16 and their reduced forms (1/2, 1/4, 3/4, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScalingFactor {
    num: usize,
    denom: usize,
}

impl ScalingFactor {
    /// Full size.
    pub const ONE: ScalingFactor = ScalingFactor { num: 1, denom: 1 };

    /// `num/denom`. Whether libjpeg-turbo supports it is checked by
    /// [`Decompressor::set_scaling_factor`].
    pub fn new(num: usize, denom: usize) -> ScalingFactor {
        ScalingFactor { num, denom }
    }

    /// The numerator.
    pub fn num(self) -> usize {
        self.num
    }

    /// The denominator.
    pub fn denom(self) -> usize {
        self.denom
    }

    /// A dimension scaled as libjpeg-turbo scales it (`TJSCALED`: rounded up).
    pub fn scale(self, dimension: usize) -> usize {
        (dimension * self.num).div_ceil(self.denom.max(1))
    }
}

/// A cropping region of the *scaled* image for [`Decompressor::set_cropping_region`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// Left edge: a multiple of the scaled iMCU width
    /// ([`Decompressor::crop_x_alignment`]).
    pub x: usize,
    /// Top edge (any row).
    pub y: usize,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
}

/// What [`Decompressor::read_header`] finds in a JPEG's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Width in pixels, at full scale.
    pub width: usize,
    /// Height in pixels, at full scale.
    pub height: usize,
    /// The chroma subsampling.
    pub subsamp: Subsamp,
    /// The colour space of the data.
    pub colorspace: Colorspace,
    /// Whether the file is lossless JPEG (no scaling, no cropping).
    pub lossless: bool,
    /// Bits a sample: 8, 12 or 16.
    pub precision: usize,
}

/// An image buffer: `height` rows of `width` pixels of `format`, `pitch` bytes apart.
#[derive(Debug)]
pub struct Image<T> {
    /// The pixels.
    pub pixels: T,
    /// Width in pixels.
    pub width: usize,
    /// Bytes from the start of one row to the next (at least `width * format.size()`).
    pub pitch: usize,
    /// Height in pixels.
    pub height: usize,
    /// The pixel format.
    pub format: PixelFormat,
}

/// A buffer of planes (Y, then Cb and Cr unless grey) as `tj3DecompressToYUV8` writes them.
#[derive(Debug)]
pub struct YuvImage<T> {
    /// The planes, one after the other.
    pub pixels: T,
    /// Width of the image in pixels.
    pub width: usize,
    /// Row alignment of each plane in bytes (a power of two; 1: no padding).
    pub align: usize,
    /// Height of the image in pixels.
    pub height: usize,
    /// The subsampling of the planes.
    pub subsamp: Subsamp,
}

/// The size in bytes of planes of a `width`x`height` image (`tj3YUVBufSize`).
pub fn yuv_pixels_len(
    width: usize,
    align: usize,
    height: usize,
    subsamp: Subsamp,
) -> Result<usize> {
    let (w, a, h) = (
        int(width, "width")?,
        int(align, "align")?,
        int(height, "height")?,
    );
    // SAFETY: a pure function of its arguments.
    let n = unsafe { ffi::tj3YUVBufSize(w, a, h, subsamp as c_int) };
    if n == 0 {
        return Err(Error::Argument(format!(
            "no plane layout for {width}x{height}, align {align}, {subsamp:?}"
        )));
    }
    Ok(n)
}

/// The width in bytes of plane `component` (0 = Y) of a `width`-pixel image, or `None` where
/// TurboJPEG has none (`tj3YUVPlaneWidth`).
pub fn yuv_plane_width(component: usize, width: usize, subsamp: Subsamp) -> Option<usize> {
    let (c, w) = (
        c_int::try_from(component).ok()?,
        c_int::try_from(width).ok()?,
    );
    // SAFETY: a pure function of its arguments.
    let n = unsafe { ffi::tj3YUVPlaneWidth(c, w, subsamp as c_int) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// The height in rows of plane `component` (0 = Y) of a `height`-row image, or `None`
/// (`tj3YUVPlaneHeight`).
pub fn yuv_plane_height(component: usize, height: usize, subsamp: Subsamp) -> Option<usize> {
    let (c, h) = (
        c_int::try_from(component).ok()?,
        c_int::try_from(height).ok()?,
    );
    // SAFETY: a pure function of its arguments.
    let n = unsafe { ffi::tj3YUVPlaneHeight(c, h, subsamp as c_int) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

fn int(v: usize, what: &str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error::Argument(format!("{what} {v} does not fit in a C int")))
}

/// An owned TurboJPEG instance.
struct Handle(ffi::tjhandle);

// SAFETY: a TurboJPEG instance has no thread affinity; `&mut self` methods keep it to one
// thread at a time.
unsafe impl Send for Handle {}

impl Handle {
    fn new(init: c_int) -> Result<Handle> {
        // SAFETY: tj3Init returns a fresh instance or null.
        let h = unsafe { ffi::tj3Init(init) };
        if h.is_null() {
            // SAFETY: with a null handle, tj3GetErrorStr returns the global error text.
            return Err(Error::Library {
                message: unsafe { error_text(h) },
                warning: false,
            });
        }
        Ok(Handle(h))
    }

    fn error(&self) -> Error {
        // SAFETY: self.0 is a live instance.
        let code = unsafe { ffi::tj3GetErrorCode(self.0) };
        // SAFETY: as above.
        let message = unsafe { error_text(self.0) };
        Error::Library {
            message,
            warning: code == ffi::TJERR_WARNING,
        }
    }

    fn check(&self, rc: c_int) -> Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn set(&mut self, param: c_int, value: c_int) -> Result<()> {
        // SAFETY: self.0 is a live instance.
        let rc = unsafe { ffi::tj3Set(self.0, param, value) };
        self.check(rc)
    }

    fn get(&self, param: c_int) -> c_int {
        // SAFETY: self.0 is a live instance.
        unsafe { ffi::tj3Get(self.0, param) }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: self.0 is a live instance, destroyed once.
        unsafe { ffi::tj3Destroy(self.0) }
    }
}

/// # Safety
/// `h` is null or a live instance.
unsafe fn error_text(h: ffi::tjhandle) -> String {
    // SAFETY: tj3GetErrorStr returns a NUL-terminated string owned by the instance (or static).
    let p = unsafe { ffi::tj3GetErrorStr(h) };
    if p.is_null() {
        return "unknown libjpeg-turbo error".into();
    }
    // SAFETY: as above; copied before the instance changes.
    unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim_end()
        .to_string()
}

/// Decodes JPEGs. One instance keeps libjpeg's state (quantization and Huffman tables) from one
/// image to the next; make a fresh one per image where a file that lacks its tables must not
/// decode with the previous image's.
pub struct Decompressor {
    handle: Handle,
    scaling: ScalingFactor,
    crop: Option<Region>,
    stop_below_crop: bool,
}

impl Decompressor {
    /// A new decompressor (full scale, no cropping, no scan limit).
    pub fn new() -> Result<Decompressor> {
        Ok(Decompressor {
            handle: Handle::new(ffi::TJINIT_DECOMPRESS)?,
            scaling: ScalingFactor::ONE,
            crop: None,
            stop_below_crop: true,
        })
    }

    /// With a cropping region, whether decoding stops below it (the default) or reads the file
    /// to its end. Stopping saves the entropy decoding of the rows below the region (and, in
    /// this patched build, of every scan of a progressive file), but damage there is never
    /// seen, and a bit error above it, which a decoder notices only where the data ends early
    /// or late, can pass as wrong pixels. Reading to the end decodes the rest of the data
    /// without its IDCT or colour conversion, so that [`decompress`](Self::decompress) reports
    /// what a whole decode reports. A `stock-libjpeg-turbo` build always stops below a
    /// single-scan file's region and reads every scan of a progressive one.
    pub fn set_stop_below_crop(&mut self, stop: bool) {
        self.stop_below_crop = stop;
    }

    /// Fails progressive files with more than `limit` scans (0: no limit), a guard against
    /// files crafted to take minutes.
    pub fn set_scan_limit(&mut self, limit: u32) -> Result<()> {
        self.handle
            .set(ffi::TJPARAM_SCANLIMIT, int(limit as usize, "scan limit")?)
    }

    /// Fails images of more than `pixels` pixels before decoding them (0: no limit).
    pub fn set_max_pixels(&mut self, pixels: usize) -> Result<()> {
        self.handle
            .set(ffi::TJPARAM_MAXPIXELS, int(pixels, "max pixels")?)
    }

    /// Decodes at `factor` from the next call on. Fails for a factor libjpeg-turbo lacks.
    pub fn set_scaling_factor(&mut self, factor: ScalingFactor) -> Result<()> {
        let f = ffi::tjscalingfactor {
            num: int(factor.num, "scaling numerator")?,
            denom: int(factor.denom, "scaling denominator")?,
        };
        // SAFETY: a live instance.
        let rc = unsafe { ffi::tj3SetScalingFactor(self.handle.0, f) };
        self.handle.check(rc)?;
        self.scaling = factor;
        Ok(())
    }

    /// libjpeg-turbo decodes a lossless JPEG at full size whatever the scaling factor (its
    /// `jinit_master_decompress` turns IDCT scaling off), so the scaled size the buffers are
    /// checked against would be wrong: a lossless file takes 1/1 only.
    fn check_lossless_scale(&self, header: &Header) -> Result<()> {
        if header.lossless && self.scaling.num != self.scaling.denom {
            return Err(Error::Argument(format!(
                "a lossless JPEG is decoded at full size only, not at the scaling factor {}/{}",
                self.scaling.num, self.scaling.denom
            )));
        }
        Ok(())
    }

    /// The scaling factor in use.
    pub fn scaling_factor(&self) -> ScalingFactor {
        self.scaling
    }

    /// Reads a JPEG's header. Needed before [`set_cropping_region`](Self::set_cropping_region).
    pub fn read_header(&mut self, jpeg: &[u8]) -> Result<Header> {
        // SAFETY: a live instance; the pointer and length describe `jpeg`.
        let rc = unsafe { ffi::tj3DecompressHeader(self.handle.0, jpeg.as_ptr(), jpeg.len()) };
        self.handle.check(rc)?;
        let g = |p| self.handle.get(p);
        let colorspace = Colorspace::from_raw(g(ffi::TJPARAM_COLORSPACE))
            .ok_or_else(|| Error::Argument("libjpeg-turbo found no colour space".into()))?;
        Ok(Header {
            width: usize::try_from(g(ffi::TJPARAM_JPEGWIDTH)).unwrap_or(0),
            height: usize::try_from(g(ffi::TJPARAM_JPEGHEIGHT)).unwrap_or(0),
            subsamp: Subsamp::from_raw(g(ffi::TJPARAM_SUBSAMP)),
            colorspace,
            lossless: g(ffi::TJPARAM_LOSSLESS) == 1,
            precision: usize::try_from(g(ffi::TJPARAM_PRECISION)).unwrap_or(8),
        })
    }

    /// The left edge of a cropping region must be a multiple of this: the scaled iMCU width
    /// of the JPEG whose header was read last, at the current scaling factor.
    pub fn crop_x_alignment(&self, header: &Header) -> usize {
        self.scaling.scale(header.subsamp.mcu_size().0).max(1)
    }

    /// Decodes only `region` of the scaled image (libjpeg's `jpeg_crop_scanline` and
    /// `jpeg_skip_scanlines`: columns outside the iMCU columns the region touches are not
    /// decoded, and decoding stops after its last row), or the whole image for `None`. Call
    /// after [`read_header`](Self::read_header) and
    /// [`set_scaling_factor`](Self::set_scaling_factor) for the image it applies to; `x` must
    /// be a multiple of [`crop_x_alignment`](Self::crop_x_alignment). Applies to
    /// [`decompress`](Self::decompress), not to planes.
    pub fn set_cropping_region(&mut self, region: Option<Region>) -> Result<()> {
        let r = match region {
            Some(r) => ffi::tjregion {
                x: int(r.x, "crop x")?,
                y: int(r.y, "crop y")?,
                w: int(r.width, "crop width")?,
                h: int(r.height, "crop height")?,
            },
            None => ffi::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        if region.is_some_and(|r| r.width == 0 || r.height == 0) {
            return Err(Error::Argument("an empty cropping region".into()));
        }
        // SAFETY: a live instance.
        let rc = unsafe { ffi::tj3SetCroppingRegion(self.handle.0, r) };
        self.handle.check(rc)?;
        self.crop = region;
        Ok(())
    }

    /// Decodes `jpeg` into `output`, whose size must be the scaled image's (or the cropping
    /// region's). An `Err` with `warning: true` means the image was decoded to its end but
    /// libjpeg-turbo reported a problem with the data.
    pub fn decompress(&mut self, jpeg: &[u8], output: Image<&mut [u8]>) -> Result<()> {
        let header = self.read_header(jpeg)?;
        self.check_lossless_scale(&header)?;
        let (w, h) = match self.crop {
            Some(r) => (r.width, r.height),
            None => (
                self.scaling.scale(header.width),
                self.scaling.scale(header.height),
            ),
        };
        if output.width != w || output.height != h {
            return Err(Error::Argument(format!(
                "output is {}x{}, the {} image is {w}x{h}",
                output.width,
                output.height,
                if self.crop.is_some() {
                    "cropped"
                } else {
                    "scaled"
                }
            )));
        }
        let row = w * output.format.size();
        if output.pitch < row {
            return Err(Error::Argument(format!(
                "pitch {} is less than a row of {row} bytes",
                output.pitch
            )));
        }
        let need = output.pitch * (h.max(1) - 1) + row;
        if output.pixels.len() < need {
            return Err(Error::Argument(format!(
                "output holds {} bytes, the image needs {need}",
                output.pixels.len()
            )));
        }
        let pitch = int(output.pitch, "pitch")?;
        // Below a cropping region, a multi-scan file's scans stop (the patch's jdcoefct.c), or
        // a single-scan file's data is read to its end (jdapistd.c); for this call on this
        // thread only.
        #[cfg(not(feature = "stock-libjpeg-turbo"))]
        let _hooks = CropHooks::set(match self.crop {
            Some(r) if self.stop_below_crop => CropEnd::StopBelow(r.y.saturating_add(r.height)),
            Some(_) => CropEnd::ReadToEnd,
            None => CropEnd::Whole,
        });
        // SAFETY: a live instance; `jpeg` is read only; the output holds `h` rows of `row`
        // bytes `pitch` apart, which is what libjpeg-turbo writes for this header, scaling and
        // cropping region (checked above).
        let rc = unsafe {
            ffi::tj3Decompress8(
                self.handle.0,
                jpeg.as_ptr(),
                jpeg.len(),
                output.pixels.as_mut_ptr(),
                pitch,
                output.format as c_int,
            )
        };
        self.handle.check(rc)
    }

    /// Decodes `jpeg` into planes (Y, Cb, Cr; or Y alone for greyscale) at the scaling factor
    /// in use, without colour conversion or chroma upsampling. The cropping region does not
    /// apply: it is an error to have one set.
    pub fn decompress_to_yuv(&mut self, jpeg: &[u8], output: YuvImage<&mut [u8]>) -> Result<()> {
        if self.crop.is_some() {
            return Err(Error::Argument(
                "a cropping region applies to decompress, not to planes".into(),
            ));
        }
        let header = self.read_header(jpeg)?;
        self.check_lossless_scale(&header)?;
        let (w, h) = (
            self.scaling.scale(header.width),
            self.scaling.scale(header.height),
        );
        if output.width != w || output.height != h {
            return Err(Error::Argument(format!(
                "output is {}x{}, the scaled image is {w}x{h}",
                output.width, output.height
            )));
        }
        if header.subsamp != output.subsamp {
            return Err(Error::Argument(format!(
                "output planes are {:?}, the image is {:?}",
                output.subsamp, header.subsamp
            )));
        }
        let need = yuv_pixels_len(w, output.align, h, header.subsamp)?;
        if output.pixels.len() < need {
            return Err(Error::Argument(format!(
                "output holds {} bytes, the planes need {need}",
                output.pixels.len()
            )));
        }
        let align = int(output.align, "align")?;
        // SAFETY: a live instance; the output holds the planes' size for this header, scale,
        // subsampling and alignment (tj3YUVBufSize, checked above).
        let rc = unsafe {
            ffi::tj3DecompressToYUV8(
                self.handle.0,
                jpeg.as_ptr(),
                jpeg.len(),
                output.pixels.as_mut_ptr(),
                align,
            )
        };
        self.handle.check(rc)
    }
}

/// Compresses images to JPEG (for corpora and tests).
pub struct Compressor {
    handle: Handle,
}

impl Compressor {
    /// A compressor at libjpeg-turbo's defaults, quality 95 and 4:2:0.
    pub fn new() -> Result<Compressor> {
        let mut c = Compressor {
            handle: Handle::new(ffi::TJINIT_COMPRESS)?,
        };
        c.set_quality(95)?;
        c.set_subsamp(Subsamp::Sub2x2)?;
        Ok(c)
    }

    /// Quality, 1-100.
    pub fn set_quality(&mut self, quality: i32) -> Result<()> {
        self.handle.set(ffi::TJPARAM_QUALITY, quality)
    }

    /// Chroma subsampling.
    pub fn set_subsamp(&mut self, subsamp: Subsamp) -> Result<()> {
        self.handle.set(ffi::TJPARAM_SUBSAMP, subsamp as c_int)
    }

    /// Progressive JPEG.
    pub fn set_progressive(&mut self, on: bool) -> Result<()> {
        self.handle.set(ffi::TJPARAM_PROGRESSIVE, on as c_int)
    }

    /// Optimized Huffman tables.
    pub fn set_optimize(&mut self, on: bool) -> Result<()> {
        self.handle.set(ffi::TJPARAM_OPTIMIZE, on as c_int)
    }

    /// A restart marker every `rows` MCU rows (0: none).
    pub fn set_restart_rows(&mut self, rows: i32) -> Result<()> {
        self.handle.set(ffi::TJPARAM_RESTARTROWS, rows)
    }

    /// Compresses `image` into a new buffer.
    pub fn compress_to_vec(&mut self, image: Image<&[u8]>) -> Result<Vec<u8>> {
        let row = image.width * image.format.size();
        if image.pitch < row
            || image.pixels.len() < image.pitch * image.height.max(1).saturating_sub(1) + row
        {
            return Err(Error::Argument(format!(
                "{} bytes do not hold a {}x{} image of pitch {}",
                image.pixels.len(),
                image.width,
                image.height,
                image.pitch
            )));
        }
        let (w, p, h) = (
            int(image.width, "width")?,
            int(image.pitch, "pitch")?,
            int(image.height, "height")?,
        );
        let mut buf: *mut u8 = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: a live instance; the source holds the image (checked above); libjpeg-turbo
        // allocates `buf`, freed below with tj3Free.
        let rc = unsafe {
            ffi::tj3Compress8(
                self.handle.0,
                image.pixels.as_ptr(),
                w,
                p,
                h,
                image.format as c_int,
                &mut buf,
                &mut size,
            )
        };
        let result = self.handle.check(rc).map(|()| {
            if buf.is_null() {
                Vec::new()
            } else {
                // SAFETY: libjpeg-turbo wrote `size` bytes at `buf`.
                unsafe { std::slice::from_raw_parts(buf, size) }.to_vec()
            }
        });
        if !buf.is_null() {
            // SAFETY: allocated by libjpeg-turbo, freed once.
            unsafe { ffi::tj3Free(buf.cast()) };
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(w: usize, h: usize, sub: Subsamp) -> Vec<u8> {
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| ((i * 7) % 256) as u8).collect();
        let mut c = Compressor::new().unwrap();
        c.set_subsamp(sub).unwrap();
        c.compress_to_vec(Image {
            pixels: &rgb[..],
            width: w,
            pitch: w * 3,
            height: h,
            format: PixelFormat::RGB,
        })
        .unwrap()
    }

    #[test]
    fn header_and_parameters_round_trip() {
        let jpeg = sample(33, 17, Subsamp::Sub2x1);
        let mut d = Decompressor::new().unwrap();
        let h = d.read_header(&jpeg).unwrap();
        assert_eq!(
            (
                h.width,
                h.height,
                h.subsamp,
                h.colorspace,
                h.lossless,
                h.precision
            ),
            (33, 17, Subsamp::Sub2x1, Colorspace::YCbCr, false, 8)
        );
        d.set_scan_limit(7).unwrap();
        assert_eq!(d.handle.get(ffi::TJPARAM_SCANLIMIT), 7);
    }

    /// A cropped decode against the same box of a full decode: identical without chroma
    /// subsampling; with 4:2:0, libjpeg's upsampler sees the crop's edges as the image's, so
    /// pixels there may differ a little.
    fn crop_against_full(sub: Subsamp) -> u8 {
        let jpeg = sample(64, 48, sub);
        let mut d = Decompressor::new().unwrap();
        let mut full = vec![0u8; 64 * 48 * 3];
        d.decompress(
            &jpeg,
            Image {
                pixels: &mut full[..],
                width: 64,
                pitch: 64 * 3,
                height: 48,
                format: PixelFormat::RGB,
            },
        )
        .unwrap();
        let header = d.read_header(&jpeg).unwrap();
        let align = d.crop_x_alignment(&header);
        assert_eq!(align, sub.mcu_size().0);
        let r = Region {
            x: align,
            y: 5,
            width: 20,
            height: 30,
        };
        d.set_cropping_region(Some(r)).unwrap();
        let mut part = vec![0u8; 20 * 30 * 3];
        d.decompress(
            &jpeg,
            Image {
                pixels: &mut part[..],
                width: 20,
                pitch: 60,
                height: 30,
                format: PixelFormat::RGB,
            },
        )
        .unwrap();
        let mut worst = 0;
        for y in 0..30 {
            let a = &full[((y + 5) * 64 + align) * 3..][..60];
            let b = &part[y * 60..][..60];
            worst = a
                .iter()
                .zip(b)
                .map(|(p, q)| p.abs_diff(*q))
                .fold(worst, u8::max);
        }
        // Unaligned x is refused with libjpeg-turbo's message.
        let err = d
            .set_cropping_region(Some(Region { x: 3, ..r }))
            .unwrap_err();
        assert!(err.message().contains("divisible"), "{err}");
        worst
    }

    #[test]
    fn crop_matches_the_same_box_of_a_full_decode() {
        assert_eq!(crop_against_full(Subsamp::None), 0);
        let d = crop_against_full(Subsamp::Sub2x2);
        assert!(d <= 48, "4:2:0 crop differs by {d}");
    }

    /// A textured `w`x`h` JPEG (smooth gradients and noise, so that every scan of a
    /// progressive file carries data in every row).
    fn textured(w: usize, h: usize, sub: Subsamp, progressive: bool, restart_rows: i32) -> Vec<u8> {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let rgb: Vec<u8> = (0..w * h * 3)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let (x, y, c) = ((i / 3) % w, (i / 3) / w, i % 3);
                ((x * (c + 1) + y * 2) as u64 + (seed & 31)) as u8
            })
            .collect();
        let mut c = Compressor::new().unwrap();
        c.set_subsamp(sub).unwrap();
        c.set_quality(90).unwrap();
        c.set_progressive(progressive).unwrap();
        c.set_restart_rows(restart_rows).unwrap();
        c.compress_to_vec(Image {
            pixels: &rgb[..],
            width: w,
            pitch: w * 3,
            height: h,
            format: PixelFormat::RGB,
        })
        .unwrap()
    }

    /// Decodes `jpeg` at 1/`denom` whole, or only `rows` (whole rows, y..y+h) of it.
    fn decode_rows(jpeg: &[u8], denom: usize, rows: Option<(usize, usize)>) -> Result<Vec<u8>> {
        decode_rows_to(jpeg, denom, rows, true)
    }

    /// [`decode_rows`], stopping below the rows (`stop`, the default) or reading to the end.
    fn decode_rows_to(
        jpeg: &[u8],
        denom: usize,
        rows: Option<(usize, usize)>,
        stop: bool,
    ) -> Result<Vec<u8>> {
        let mut d = Decompressor::new()?;
        d.set_stop_below_crop(stop);
        d.set_scaling_factor(ScalingFactor::new(1, denom))?;
        let header = d.read_header(jpeg)?;
        let w = d.scaling_factor().scale(header.width);
        let h = match rows {
            Some((y, height)) => {
                d.set_cropping_region(Some(Region {
                    x: 0,
                    y,
                    width: w,
                    height,
                }))?;
                height
            }
            None => d.scaling_factor().scale(header.height),
        };
        let mut out = vec![0u8; w * h * 3];
        d.decompress(
            jpeg,
            Image {
                pixels: &mut out[..],
                width: w,
                pitch: w * 3,
                height: h,
                format: PixelFormat::RGB,
            },
        )?;
        Ok(out)
    }

    /// The rows of a cropped decode of a progressive file are those of the whole frame, bit for
    /// bit, wherever the crop ends: its scans stop below the crop (the patch's jdcoefct.c), and
    /// the rows it outputs do not see it.
    #[test]
    fn cropped_progressive_rows_are_the_whole_frames() {
        for (sub, restart) in [
            (Subsamp::Sub2x2, 0),
            (Subsamp::Sub2x1, 0),
            (Subsamp::None, 0),
            (Subsamp::Gray, 0),
            (Subsamp::Sub2x2, 2),
        ] {
            let jpeg = textured(72, 200, sub, true, restart);
            for denom in [1, 2, 4, 8] {
                let full = decode_rows(&jpeg, denom, None).unwrap();
                let (w, h) = (72usize.div_ceil(denom), 200usize.div_ceil(denom));
                let row = w * 3;
                for (y, height) in [
                    (0, 1),
                    (0, h / 3),
                    (h / 4, h / 4),
                    (h / 2, 3),
                    (1, h - 1),
                    (h - 2, 2),
                ] {
                    let height = height.max(1);
                    let part = decode_rows(&jpeg, denom, Some((y, height))).unwrap();
                    assert!(
                        part == full[y * row..(y + height) * row],
                        "{sub:?} restart {restart} 1/{denom}: rows {y}..{} differ",
                        y + height
                    );
                }
            }
        }
    }

    /// Where every scan of a progressive file is damaged in its last rows, a whole decode fails
    /// and a crop above the damage decodes as the undamaged file's: the rows below a crop are
    /// never decoded. (With the stock library, the crop fails too.)
    #[test]
    fn a_cropped_progressive_decode_stops_above_damage_below_the_crop() {
        let jpeg = textured(64, 1024, Subsamp::Sub2x2, true, 0);
        // Each scan's entropy-coded data: from the end of its SOS segment to the next marker
        // that is not a restart marker.
        let mut scans = Vec::new();
        let mut i = 2;
        while i + 4 <= jpeg.len() {
            let (marker, len) = (
                jpeg[i + 1],
                usize::from(jpeg[i + 2]) << 8 | usize::from(jpeg[i + 3]),
            );
            if marker == 0xD9 {
                break;
            }
            i += 2 + len;
            if marker == 0xDA {
                let data = i;
                while jpeg[i] != 0xFF || matches!(jpeg[i + 1], 0x00 | 0xD0..=0xD7) {
                    i += 1;
                }
                scans.push(data..i);
            }
        }
        assert!(scans.len() > 5, "{} scans", scans.len());
        // A restart marker where none belongs, nine tenths into every scan's data (the crop
        // below reads the first 16 of 1,024 rows, and its scans stop after 48).
        let mut damaged = jpeg.clone();
        for scan in scans.iter().rev() {
            let at = scan.start + scan.len() * 9 / 10;
            let at = (at..scan.end).find(|&i| jpeg[i - 1] != 0xFF).unwrap();
            damaged.splice(at..at, [0xFF, 0xD3]);
        }
        let whole = decode_rows(&damaged, 1, None);
        assert!(whole.is_err(), "the damage must be seen by a whole decode");
        let want = decode_rows(&jpeg, 1, Some((0, 16))).unwrap();
        let got = decode_rows(&damaged, 1, Some((0, 16)));
        if cfg!(feature = "stock-libjpeg-turbo") {
            assert!(got.is_err(), "the stock library decodes every scan whole");
        } else {
            assert!(got.unwrap() == want, "the crop above the damage differs");
        }
        // Read to the end, the crop reports the damage as the whole decode does.
        let to_end = decode_rows_to(&damaged, 1, Some((0, 16)), false);
        assert_eq!(to_end.unwrap_err(), whole.unwrap_err());
    }

    /// A single-scan file damaged below a crop: the crop stops above the damage and decodes as
    /// the undamaged file's; read to the end (the patched build), it reports what the whole
    /// decode reports.
    #[test]
    fn a_cropped_decode_read_to_the_end_reports_damage_below_the_crop() {
        for restart in [0, 4] {
            let jpeg = textured(64, 1024, Subsamp::Sub2x2, false, restart);
            let sos = jpeg.windows(2).position(|m| m == [0xFF, 0xDA]).unwrap();
            let end = jpeg.len() - 2;
            let at = sos + (end - sos) * 9 / 10;
            let at = (at..end)
                .find(|&i| jpeg[i - 1] != 0xFF && jpeg[i] != 0xFF)
                .unwrap();
            let mut damaged = jpeg.clone();
            damaged.splice(at..at, [0x00, 0xFF, 0xC8, 0x12]);
            let whole = decode_rows(&damaged, 2, None).unwrap_err();
            let want = decode_rows(&jpeg, 2, Some((3, 20))).unwrap();
            assert!(decode_rows(&damaged, 2, Some((3, 20))).unwrap() == want);
            let to_end = decode_rows_to(&damaged, 2, Some((3, 20)), false);
            if cfg!(feature = "stock-libjpeg-turbo") {
                assert!(
                    to_end.unwrap() == want,
                    "the stock library stops below the crop"
                );
            } else {
                assert_eq!(to_end.unwrap_err(), whole, "restart {restart}");
            }
            // An undamaged file decodes the same either way.
            assert!(decode_rows_to(&jpeg, 2, Some((3, 20)), false).unwrap() == want);
        }
    }

    #[test]
    fn small_buffers_and_bad_data_are_errors() {
        let jpeg = sample(16, 16, Subsamp::None);
        let mut d = Decompressor::new().unwrap();
        let mut out = [0u8; 10];
        let e = d
            .decompress(
                &jpeg,
                Image {
                    pixels: &mut out[..],
                    width: 16,
                    pitch: 48,
                    height: 16,
                    format: PixelFormat::RGB,
                },
            )
            .unwrap_err();
        assert!(matches!(e, Error::Argument(_)), "{e:?}");
        let e = d.read_header(b"not a jpeg").unwrap_err();
        assert!(matches!(e, Error::Library { .. }), "{e:?}");
        assert!(d.set_scaling_factor(ScalingFactor::new(1, 3)).is_err());
    }

    #[test]
    fn planes_have_the_documented_size() {
        let jpeg = sample(40, 24, Subsamp::Sub2x2);
        let mut d = Decompressor::new().unwrap();
        let len = yuv_pixels_len(40, 1, 24, Subsamp::Sub2x2).unwrap();
        assert_eq!(len, 40 * 24 + 2 * 20 * 12);
        let mut out = vec![0u8; len];
        d.decompress_to_yuv(
            &jpeg,
            YuvImage {
                pixels: &mut out[..],
                width: 40,
                align: 1,
                height: 24,
                subsamp: Subsamp::Sub2x2,
            },
        )
        .unwrap();
        assert_eq!(yuv_plane_width(1, 40, Subsamp::Sub2x2), Some(20));
        assert_eq!(yuv_plane_height(1, 24, Subsamp::Sub2x2), Some(12));
    }

    #[test]
    fn info_names_the_build() {
        let i = info();
        assert_eq!((i.name, i.version), ("libjpeg-turbo", "3.1.0"));
        assert_eq!(i.patched, cfg!(not(feature = "stock-libjpeg-turbo")));
        testing::disable_fast_paths(testing::FastPaths {
            stock_huffman: true,
            ..Default::default()
        });
        assert_eq!(testing::disabled_fast_paths().stock_huffman, i.patched);
        testing::disable_fast_paths(testing::FastPaths::default());
    }
}
