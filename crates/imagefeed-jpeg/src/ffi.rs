//! The TurboJPEG 3 functions this crate calls, declared by hand from `libjpeg-turbo/src/turbojpeg.h`
//! (3.1.0). Enum values are the header's.

#![allow(non_camel_case_types, missing_docs)]

use std::os::raw::{c_char, c_int, c_uchar, c_void};

pub type tjhandle = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tjscalingfactor {
    pub num: c_int,
    pub denom: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tjregion {
    pub x: c_int,
    pub y: c_int,
    pub w: c_int,
    pub h: c_int,
}

// enum TJINIT
pub const TJINIT_COMPRESS: c_int = 0;
pub const TJINIT_DECOMPRESS: c_int = 1;

// enum TJERR
pub const TJERR_WARNING: c_int = 0;

// enum TJPARAM (in the header's order)
pub const TJPARAM_STOPONWARNING: c_int = 0;
pub const TJPARAM_BOTTOMUP: c_int = 1;
pub const TJPARAM_NOREALLOC: c_int = 2;
pub const TJPARAM_QUALITY: c_int = 3;
pub const TJPARAM_SUBSAMP: c_int = 4;
pub const TJPARAM_JPEGWIDTH: c_int = 5;
pub const TJPARAM_JPEGHEIGHT: c_int = 6;
pub const TJPARAM_PRECISION: c_int = 7;
pub const TJPARAM_COLORSPACE: c_int = 8;
pub const TJPARAM_FASTUPSAMPLE: c_int = 9;
pub const TJPARAM_FASTDCT: c_int = 10;
pub const TJPARAM_OPTIMIZE: c_int = 11;
pub const TJPARAM_PROGRESSIVE: c_int = 12;
pub const TJPARAM_SCANLIMIT: c_int = 13;
pub const TJPARAM_ARITHMETIC: c_int = 14;
pub const TJPARAM_LOSSLESS: c_int = 15;
pub const TJPARAM_RESTARTBLOCKS: c_int = 18;
pub const TJPARAM_RESTARTROWS: c_int = 19;
pub const TJPARAM_MAXMEMORY: c_int = 23;
pub const TJPARAM_MAXPIXELS: c_int = 24;

extern "C" {
    pub fn tj3Init(init_type: c_int) -> tjhandle;
    pub fn tj3Destroy(handle: tjhandle);
    pub fn tj3GetErrorStr(handle: tjhandle) -> *mut c_char;
    pub fn tj3GetErrorCode(handle: tjhandle) -> c_int;
    pub fn tj3Set(handle: tjhandle, param: c_int, value: c_int) -> c_int;
    pub fn tj3Get(handle: tjhandle, param: c_int) -> c_int;
    pub fn tj3Free(buffer: *mut c_void);
    pub fn tj3JPEGBufSize(width: c_int, height: c_int, subsamp: c_int) -> usize;
    pub fn tj3YUVBufSize(width: c_int, align: c_int, height: c_int, subsamp: c_int) -> usize;
    pub fn tj3YUVPlaneWidth(component: c_int, width: c_int, subsamp: c_int) -> c_int;
    pub fn tj3YUVPlaneHeight(component: c_int, height: c_int, subsamp: c_int) -> c_int;
    pub fn tj3Compress8(
        handle: tjhandle,
        src: *const c_uchar,
        width: c_int,
        pitch: c_int,
        height: c_int,
        pixel_format: c_int,
        jpeg_buf: *mut *mut c_uchar,
        jpeg_size: *mut usize,
    ) -> c_int;
    pub fn tj3DecompressHeader(handle: tjhandle, jpeg: *const c_uchar, size: usize) -> c_int;
    pub fn tj3SetScalingFactor(handle: tjhandle, factor: tjscalingfactor) -> c_int;
    pub fn tj3SetCroppingRegion(handle: tjhandle, region: tjregion) -> c_int;
    pub fn tj3Decompress8(
        handle: tjhandle,
        jpeg: *const c_uchar,
        size: usize,
        dst: *mut c_uchar,
        pitch: c_int,
        pixel_format: c_int,
    ) -> c_int;
    pub fn tj3DecompressToYUV8(
        handle: tjhandle,
        jpeg: *const c_uchar,
        size: usize,
        dst: *mut c_uchar,
        align: c_int,
    ) -> c_int;
}

#[cfg(not(feature = "stock-libjpeg-turbo"))]
extern "C" {
    pub fn imagefeed_jpeg_set_disabled_paths(bits: c_int);
    pub fn imagefeed_jpeg_disabled_paths() -> c_int;
    pub fn imagefeed_jpeg_set_row_limit(rows: std::ffi::c_uint);
    pub fn imagefeed_jpeg_set_read_to_end(on: c_int);
}
