//! The decoded-image types every stage passes on: a decoded image ([`Decoded`]) as RGB8 or as
//! a JPEG's planes before colour conversion, and a pixel rectangle ([`Rect`]).

/// A decoded image before resizing, borrowed from the decoder's buffer.
#[derive(Debug)]
pub(crate) struct Decoded<'a> {
    pub(crate) pixels: Pixels<'a>,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// EXIF orientation still to apply (1 = none).
    pub(crate) orientation: u8,
    /// The box of these pixels (stored frame) a cropping transform resizes; `None` for the
    /// fits, whose region follows from the output size.
    pub(crate) crop: Option<Rect>,
    /// The stored frame's size at full scale (before DCT scaling or cropping).
    pub(crate) full: (u32, u32),
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

/// A box in pixel coordinates: `[x, x + w) × [y, y + h)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
    pub(crate) h: f64,
}

impl Rect {
    pub(crate) fn whole(w: u32, h: u32) -> Rect {
        Rect {
            x: 0.0,
            y: 0.0,
            w: f64::from(w),
            h: f64::from(h),
        }
    }

    /// The box scaled by `sx` horizontally and `sy` vertically.
    pub(crate) fn scaled(self, sx: f64, sy: f64) -> Rect {
        Rect {
            x: self.x * sx,
            y: self.y * sy,
            w: self.w * sx,
            h: self.h * sy,
        }
    }

    /// The box moved by `(-dx, -dy)`.
    #[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
    pub(crate) fn shifted(self, dx: f64, dy: f64) -> Rect {
        Rect {
            x: self.x - dx,
            y: self.y - dy,
            ..self
        }
    }
}
