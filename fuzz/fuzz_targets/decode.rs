//! Arbitrary bytes through decode + EXIF orientation + resize + normalize.
//!
//! The first byte selects the variant, the rest is the file:
//! - `sel % 3`: the file name, `x.jpg`, `x.png` or `x` (the extension check matters);
//! - `(sel / 3) % 2`: the JPEG decoder, 0 = auto (libjpeg-turbo), 1 = zune-jpeg;
//! - `sel / 6`: the output size, `1 + 5 * (sel / 6)` (1..=211), odd and even in turn: an odd
//!   size accepts JPEG warnings, an even one is strict (a strict cropped decode reads the data
//!   to its end, then decodes again through the table of files read to their end).
//!
//! `decode_transform` picks the transform from the file's length (`len % 4`: stretch,
//! shorter side center crop, center crop, random resized crop) and the filter from `len % 3`
//! (0: antialiased). Seeds are real files with a selector byte in front (`seeds/decode/`,
//! made by `make_seeds.py`).
#![no_main]

use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 3] = ["x.jpg", "x.png", "x"];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let name = NAMES[usize::from(sel % 3)];
    let zune = (sel / 3) % 2 == 1;
    let size = 1 + 5 * u32::from(sel / 6);
    let _ = imagefeed::tools::fuzz::decode_transform(bytes, name, size, zune);
});
