//! The rare kinds of JPEG in `testdata/rare/` (arithmetic-coded, 12-bit, 4:1:1, 4:4:0,
//! lossless; `testdata/rare/README.md`): what this crate does with each, at every DCT scale, to
//! RGB, to planes and through a cropping region, against `testdata/rare/expected.txt`, which
//! the stock library wrote. Each line is a decode's result: the pixels' digest where it
//! delivers them, or libjpeg-turbo's message where it refuses the file.
//!
//! To write the expected outcomes again (after changing `testdata/rare/`), with the stock
//! library: `IMAGEFEED_WRITE_RARE_OUTCOMES=1 cargo test -p imagefeed-jpeg --features
//! stock-libjpeg-turbo --test rare`. With that feature the same test checks the stock build.

use std::fmt::Write as _;
use std::path::PathBuf;

use imagefeed_jpeg::{
    Colorspace, Decompressor, Image, PixelFormat, Region, ScalingFactor, Subsamp, YuvImage,
};

/// The folder, in the repository (the published crate does not carry testdata/).
fn rare_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rare");
    dir.is_dir().then_some(dir)
}

/// FNV-1a, 64 bits.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn result(r: imagefeed_jpeg::Result<()>, pixels: &[u8]) -> String {
    match r {
        Ok(()) => format!("delivered {:016x}", fnv(pixels)),
        Err(e) => format!("refused: {}", e.message()),
    }
}

/// One line per decode of `bytes`: `NAME HOW RESULT`.
fn outcomes(name: &str, bytes: &[u8]) -> Vec<String> {
    let mut lines = Vec::new();
    for denom in [1usize, 2, 4, 8] {
        let mut line =
            |how: &str, what: String| lines.push(format!("{name} 1/{denom} {how} {what}"));
        let mut tj = Decompressor::new().expect("a decompressor");
        let factor = ScalingFactor::new(1, denom);
        if let Err(e) = tj.set_scaling_factor(factor) {
            line("scale", format!("refused: {}", e.message()));
            continue;
        }
        let header = match tj.read_header(bytes) {
            Ok(h) => h,
            Err(e) => {
                line("header", format!("refused: {}", e.message()));
                continue;
            }
        };
        if denom == 1 {
            line(
                "header",
                format!(
                    "{}x{} {:?} {:?} precision {} lossless {}",
                    header.width,
                    header.height,
                    header.subsamp,
                    header.colorspace,
                    header.precision,
                    header.lossless
                ),
            );
        }
        let (w, h) = (factor.scale(header.width), factor.scale(header.height));
        let mut rgb = vec![0u8; w * h * 3];
        let r = tj.decompress(
            bytes,
            Image {
                pixels: &mut rgb[..],
                width: w,
                pitch: w * 3,
                height: h,
                format: PixelFormat::RGB,
            },
        );
        line("rgb", result(r, &rgb));

        // A cropping region as the training transforms decode one: the middle half.
        let align = tj.crop_x_alignment(&header);
        let region = Region {
            x: (w / 4) / align * align,
            y: h / 4,
            width: (w / 2).max(1),
            height: (h / 2).max(1),
        };
        match tj.set_cropping_region(Some(region)) {
            Ok(()) => {
                let mut crop = vec![0u8; region.width * region.height * 3];
                let r = tj.decompress(
                    bytes,
                    Image {
                        pixels: &mut crop[..],
                        width: region.width,
                        pitch: region.width * 3,
                        height: region.height,
                        format: PixelFormat::RGB,
                    },
                );
                line("crop", result(r, &crop));
            }
            Err(e) => line("crop", format!("refused: {}", e.message())),
        }
        let _ = tj.set_cropping_region(None);

        let sub = match (header.colorspace, header.subsamp) {
            (Colorspace::YCbCr | Colorspace::Gray, sub) if sub != Subsamp::Unknown => sub,
            _ => continue,
        };
        let Ok(len) = imagefeed_jpeg::yuv_pixels_len(w, 1, h, sub) else {
            continue;
        };
        let mut planes = vec![0u8; len];
        let r = tj.decompress_to_yuv(
            bytes,
            YuvImage {
                pixels: &mut planes[..],
                width: w,
                align: 1,
                height: h,
                subsamp: sub,
            },
        );
        // The planes' MCU padding is libjpeg-turbo's uninitialized memory: only the image's
        // own rows and columns are compared.
        let mut real = Vec::new();
        let mut offset = 0;
        for i in 0..if sub == Subsamp::Gray { 1 } else { 3 } {
            let pw = imagefeed_jpeg::yuv_plane_width(i, w, sub).expect("plane width");
            let ph = imagefeed_jpeg::yuv_plane_height(i, h, sub).expect("plane height");
            let (sx, sy) = sub.factors();
            let (cw, ch) = if i == 0 {
                (w, h)
            } else {
                (w.div_ceil(sx), h.div_ceil(sy))
            };
            for row in 0..ch {
                let start = offset + row * pw;
                real.extend_from_slice(&planes[start..start + cw]);
            }
            offset += pw * ph;
        }
        line("planes", result(r, &real));
    }
    lines
}

#[test]
fn rare_jpeg_kinds_decode_or_are_refused_as_the_stock_library_does() {
    let Some(dir) = rare_dir() else {
        eprintln!("testdata/rare is not here (the published crate): nothing to check");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read testdata/rare")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".jpg"))
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    let mut text = String::new();
    for name in &names {
        let bytes = std::fs::read(dir.join(name)).expect("read a rare file");
        for line in outcomes(name, &bytes) {
            let _ = writeln!(text, "{line}");
        }
    }
    let path = dir.join("expected.txt");
    if std::env::var_os("IMAGEFEED_WRITE_RARE_OUTCOMES").is_some() {
        assert!(
            !imagefeed_jpeg::info().patched,
            "write the expected outcomes with the stock library (--features stock-libjpeg-turbo)"
        );
        std::fs::write(&path, &text).expect("write expected.txt");
        return;
    }
    let expected = std::fs::read_to_string(&path).expect("read testdata/rare/expected.txt");
    let differ: Vec<(&str, &str)> = text
        .lines()
        .zip(expected.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(
        differ.is_empty() && text.lines().count() == expected.lines().count(),
        "{} decodes differ from the stock library's ({} lines, {} expected), first (got, expected): {:?}",
        differ.len(),
        text.lines().count(),
        expected.lines().count(),
        differ.first()
    );
}
