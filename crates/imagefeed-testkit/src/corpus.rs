//! A realistic synthetic JPEG corpus, made from the photographs embedded in the crate
//! (`testdata/photos/`), so anyone can reproduce a benchmark: random crops and rescales to
//! ImageNet-like sizes (mostly 380–720 px on the long side, 5% up to 2,500 px), JPEG quality
//! 70–95, 4:2:0 / 4:2:2 / 4:4:4 subsampling, some progressive, grayscale, CMYK (YCCK) and
//! EXIF-rotated files. `imagefeed corpus OUT_DIR --count N` calls [`generate`].
//!
//! Labels: class `c` holds crops of photo `c % 6`, colour-inverted when `c >= 6`, so a linear
//! classifier can learn them (see `examples/train_loop.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};

use fast_image_resize as fir;
use rayon::prelude::*;

use crate::Error;

/// The embedded photographs (see `testdata/README.md` for their origin and licence).
pub const PHOTOS: [&[u8]; 6] = [
    include_bytes!("../../../testdata/photos/photo_0.jpg"),
    include_bytes!("../../../testdata/photos/photo_1.jpg"),
    include_bytes!("../../../testdata/photos/photo_2.jpg"),
    include_bytes!("../../../testdata/photos/photo_3.jpg"),
    include_bytes!("../../../testdata/photos/photo_4.jpg"),
    include_bytes!("../../../testdata/photos/photo_5.jpg"),
];

/// The number of classes of a generated corpus.
pub const CLASSES: u32 = 10;

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CorpusSummary {
    /// Images written.
    pub images: usize,
    /// Total bytes of the JPEG files.
    pub bytes: u64,
    /// Mean megapixels per image.
    pub mean_megapixels: f64,
    /// The `files.txt` list (`class_XX/img_NNNNNN.jpg<TAB>label` lines).
    pub list: PathBuf,
}

struct Photo {
    rgb: Vec<u8>,
    width: u32,
    height: u32,
}

fn decode_photo(bytes: &[u8]) -> Result<Photo, Error> {
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Jpeg)
        .map_err(|e| Error::other(format!("an embedded photo: {e}")))?
        .to_rgb8();
    Ok(Photo {
        width: img.width(),
        height: img.height(),
        rgb: img.into_raw(),
    })
}

/// Writes `count` JPEGs into `out_dir/class_XX/` and a `files.txt` list, deterministically for
/// a seed. Uses all cores, in a thread pool of its own.
///
/// It replaces nothing: if `files.txt` or any image it would write already exists, it fails
/// before writing anything.
///
/// # Errors
/// An [`Error`] naming the file that could not be written, or that exists already.
pub fn generate(out_dir: &Path, count: usize, seed: u64) -> Result<CorpusSummary, Error> {
    generate_sized(out_dir, count, seed, None)
}

/// [`generate`], with every image's long side drawn from `long_side` (pixels, inclusive;
/// `None`: the ImageNet-like mix of [`generate`]). `Some((4000, 4000))` writes 12-megapixel
/// photos (4000×3000 where the crop is 4:3).
///
/// # Errors
/// As [`generate`], and for an empty range or a side under 16 or over 8192 pixels.
pub fn generate_sized(
    out_dir: &Path,
    count: usize,
    seed: u64,
    long_side: Option<(u32, u32)>,
) -> Result<CorpusSummary, Error> {
    if let Some((lo, hi)) = long_side {
        if lo < 16 || hi > 8192 || lo > hi {
            return Err(Error::other(format!(
                "long_side {lo}..={hi}: need 16 <= min <= max <= 8192"
            )));
        }
    }
    let list = out_dir.join("files.txt");
    let targets = (0..count).map(|i| out_dir.join(rel_path(i, (i as u32) % CLASSES)));
    for path in std::iter::once(list.clone()).chain(targets) {
        if path.symlink_metadata().is_ok() {
            return Err(Error::at(
                &path,
                "exists, and a corpus replaces nothing: write it into a new or empty folder",
            ));
        }
    }
    let photos = PHOTOS
        .iter()
        .map(|b| decode_photo(b))
        .collect::<Result<Vec<_>, _>>()?;
    for c in 0..CLASSES {
        let d = out_dir.join(format!("class_{c:02}"));
        std::fs::create_dir_all(&d).map_err(|e| Error::at(&d, e))?;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("imagefeed-corpus-{i}"))
        .build()
        .map_err(|e| Error::other(format!("cannot start the corpus threads: {e}")))?;
    let results: Vec<Result<(u64, u64), Error>> = pool.install(|| {
        (0..count)
            .into_par_iter()
            .map(|i| {
                let mut rng = Rng::for_stage(seed, i as u64, 0xC0);
                let label = (i as u32) % CLASSES;
                let (jpeg, pixels) = make_image(&photos, label, &mut rng, long_side)?;
                let path = out_dir.join(rel_path(i, label));
                create_new(&path, &jpeg)?;
                Ok((jpeg.len() as u64, pixels))
            })
            .collect()
    });
    let mut bytes = 0;
    let mut pixels = 0;
    for r in results {
        let (b, p) = r?;
        bytes += b;
        pixels += p;
    }
    let mut text = String::with_capacity(count * 32);
    for i in 0..count {
        let label = (i as u32) % CLASSES;
        text.push_str(&format!("{}\t{label}\n", rel_path(i, label)));
    }
    create_new(&list, text.as_bytes())?;
    Ok(CorpusSummary {
        images: count,
        bytes,
        mean_megapixels: if count > 0 {
            pixels as f64 / count as f64 / 1e6
        } else {
            0.0
        },
        list,
    })
}

/// Writes a file that must not exist yet (another writer may have made it since the check).
fn create_new(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| Error::at(path, e))
}

fn rel_path(i: usize, label: u32) -> String {
    format!("class_{label:02}/img_{i:06}.jpg")
}

fn uniform(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

/// One corpus image: returns the JPEG bytes and its pixel count.
fn make_image(
    photos: &[Photo],
    label: u32,
    rng: &mut Rng,
    long_side: Option<(u32, u32)>,
) -> Result<(Vec<u8>, u64), Error> {
    let photo = &photos[(label % 6) as usize];
    // Crop 40–100% of each side at a random position.
    let cw = uniform(rng, photo.width * 2 / 5, photo.width);
    let ch = uniform(rng, photo.height * 2 / 5, photo.height);
    let cx = uniform(rng, 0, photo.width - cw);
    let cy = uniform(rng, 0, photo.height - ch);
    // ImageNet-like sizes: mostly 380–720 px on the long side, 5% large (1000–2500 px).
    let long = match long_side {
        Some((lo, hi)) => uniform(rng, lo, hi),
        None if rng.below(100) < 5 => uniform(rng, 1000, 2500),
        None => uniform(rng, 380, 720),
    };
    let aspect = f64::from(cw) / f64::from(ch);
    let (w, h) = if aspect >= 1.0 {
        (long, ((f64::from(long) / aspect).round() as u32).max(16))
    } else {
        (((f64::from(long) * aspect).round() as u32).max(16), long)
    };
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let src =
            fir::images::ImageRef::new(photo.width, photo.height, &photo.rgb, fir::PixelType::U8x3)
                .map_err(|e| Error::other(format!("resizing: {e}")))?;
        let mut dst = fir::images::Image::from_slice_u8(w, h, &mut rgb, fir::PixelType::U8x3)
            .map_err(|e| Error::other(format!("resizing: {e}")))?;
        let opts = fir::ResizeOptions::new()
            .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Bilinear))
            .crop(f64::from(cx), f64::from(cy), f64::from(cw), f64::from(ch));
        fir::Resizer::new()
            .resize(&src, &mut dst, &opts)
            .map_err(|e| Error::other(format!("resizing: {e}")))?;
    }
    if label >= 6 {
        rgb.iter_mut().for_each(|v| *v = 255 - *v);
    }
    let quality = uniform(rng, 70, 95) as u8;
    let roll = rng.below(100);
    let kind = match roll {
        0 => Kind::Cmyk,
        1..=3 => Kind::Gray,
        _ => Kind::Color {
            subsampling: match rng.below(20) {
                0..=13 => 420,
                14..=16 => 422,
                _ => 444,
            },
            progressive: rng.below(100) < 15,
        },
    };
    // 5% carry an EXIF orientation; their pixels are stored so that applying it shows `rgb`.
    let orientation = if rng.below(100) < 5 {
        [3u8, 6, 8][rng.below(3) as usize]
    } else {
        1
    };
    let (stored, sw, sh) = if orientation == 1 {
        (rgb, w, h)
    } else {
        let inverse = match orientation {
            6 => 8,
            8 => 6,
            o => o,
        };
        let mut s = vec![0u8; rgb.len()];
        rotate(&rgb, w as usize, h as usize, inverse, &mut s);
        if orientation >= 5 {
            (s, h, w)
        } else {
            (s, w, h)
        }
    };
    let mut jpeg = encode(&stored, sw, sh, quality, kind)?;
    if orientation != 1 {
        jpeg = with_exif_orientation(&jpeg, orientation);
    }
    Ok((jpeg, u64::from(w) * u64::from(h)))
}

// Without libjpeg-turbo the corpus cannot be encoded, and the colour settings go unread.
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
enum Kind {
    Color { subsampling: u32, progressive: bool },
    Gray,
    Cmyk,
}

#[cfg(feature = "turbojpeg")]
fn encode(rgb: &[u8], w: u32, h: u32, quality: u8, kind: Kind) -> Result<Vec<u8>, Error> {
    use imagefeed_jpeg::{Compressor, Image, PixelFormat, Subsamp};
    let e = |e: imagefeed_jpeg::Error| Error::other(format!("encoding: {e}"));
    let mut c = Compressor::new().map_err(e)?;
    c.set_quality(i32::from(quality)).map_err(e)?;
    let (w, h) = (w as usize, h as usize);
    match kind {
        Kind::Color {
            subsampling,
            progressive,
        } => {
            c.set_subsamp(match subsampling {
                444 => Subsamp::None,
                422 => Subsamp::Sub2x1,
                _ => Subsamp::Sub2x2,
            })
            .map_err(e)?;
            c.set_progressive(progressive).map_err(e)?;
            let img = Image {
                pixels: rgb,
                width: w,
                pitch: w * 3,
                height: h,
                format: PixelFormat::RGB,
            };
            c.compress_to_vec(img).map_err(e)
        }
        Kind::Gray => {
            c.set_subsamp(Subsamp::Gray).map_err(e)?;
            let gray: Vec<u8> = rgb
                .chunks_exact(3)
                .map(|p| {
                    ((u32::from(p[0]) * 299 + u32::from(p[1]) * 587 + u32::from(p[2]) * 114) / 1000)
                        as u8
                })
                .collect();
            let img = Image {
                pixels: &gray[..],
                width: w,
                pitch: w,
                height: h,
                format: PixelFormat::GRAY,
            };
            c.compress_to_vec(img).map_err(e)
        }
        Kind::Cmyk => {
            // Adobe (inverted) CMYK: r = c' * k' / 255 with k' = max(r, g, b). libjpeg writes
            // it as a YCCK JPEG with an Adobe marker.
            c.set_subsamp(Subsamp::None).map_err(e)?;
            let cmyk: Vec<u8> = rgb
                .chunks_exact(3)
                .flat_map(|p| {
                    let k = p[0].max(p[1]).max(p[2]);
                    let f = |v: u8| {
                        if k == 0 {
                            0
                        } else {
                            ((u32::from(v) * 255 + u32::from(k) / 2) / u32::from(k)).min(255) as u8
                        }
                    };
                    [f(p[0]), f(p[1]), f(p[2]), k]
                })
                .collect();
            let img = Image {
                pixels: &cmyk[..],
                width: w,
                pitch: w * 4,
                height: h,
                format: PixelFormat::CMYK,
            };
            c.compress_to_vec(img).map_err(e)
        }
    }
}

#[cfg(not(feature = "turbojpeg"))]
fn encode(rgb: &[u8], w: u32, h: u32, quality: u8, _kind: Kind) -> Result<Vec<u8>, Error> {
    // Without libjpeg-turbo: baseline 4:2:0 colour JPEGs only.
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality)
        .encode(rgb, w, h, image::ExtendedColorType::Rgb8)
        .map_err(|e| Error::other(format!("encoding: {e}")))?;
    Ok(out)
}

/// Inserts an APP1 EXIF segment holding only an orientation tag after the SOI marker.
pub fn with_exif_orientation(jpeg: &[u8], orientation: u8) -> Vec<u8> {
    let tiff: [u8; 26] = [
        b'M',
        b'M',
        0,
        42,
        0,
        0,
        0,
        8, // big-endian TIFF header, IFD0 at 8
        0,
        1, // one entry
        0x01,
        0x12,
        0,
        3,
        0,
        0,
        0,
        1,
        0,
        orientation,
        0,
        0, // Orientation, SHORT, 1, value
        0,
        0,
        0,
        0, // no next IFD
    ];
    let len = (2 + 6 + tiff.len()) as u16;
    let mut out = Vec::with_capacity(jpeg.len() + len as usize + 2);
    out.extend_from_slice(&jpeg[..2]);
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(b"Exif\0\0");
    out.extend_from_slice(&tiff);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// `src` (`w`×`h` RGB) turned as EXIF orientation `o` turns it (3: 180°, 6: 90° clockwise, 8:
/// 90° counter-clockwise), into `dst`.
fn rotate(src: &[u8], w: usize, h: usize, o: u8, dst: &mut [u8]) {
    for y in 0..h {
        for x in 0..w {
            let (dx, dy, dw) = match o {
                3 => (w - 1 - x, h - 1 - y, w),
                6 => (h - 1 - y, x, h),
                8 => (y, w - 1 - x, h),
                _ => (x, y, w),
            };
            let (s, d) = ((y * w + x) * 3, (dy * dw + dx) * 3);
            dst[d..d + 3].copy_from_slice(&src[s..s + 3]);
        }
    }
}

/// SplitMix64, seeded as imagefeed seeds its stages: the same corpus for a seed on every
/// platform and in every version.
struct Rng(u64);

impl Rng {
    fn for_stage(seed: u64, epoch: u64, stage: u64) -> Self {
        let mut r = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
        let a = r.next_u64();
        let mut r = Rng(a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let b = r.next_u64();
        Rng(b ^ stage.wrapping_mul(0xAEF1_7502_108E_F2D9))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias (Lemire's method).
    fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imagefeed_corpus_replaces_nothing() {
        // `imagefeed corpus DIR` over a folder holding files of the same names used to overwrite
        // them; it now fails before writing anything.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("class_01")).unwrap();
        let mine = d.join("class_01/img_000001.jpg");
        std::fs::write(&mine, b"my photo").unwrap();
        let e = generate(d, 4, 0).unwrap_err();
        assert_eq!(e.path(), Some(mine.as_path()), "{e}");
        assert!(e.to_string().contains("exists"), "{e}");
        assert_eq!(std::fs::read(&mine).unwrap(), b"my photo");
        assert!(!d.join("files.txt").exists(), "wrote files.txt anyway");
        assert!(
            !d.join("class_00/img_000000.jpg").exists(),
            "wrote an image anyway"
        );
        // Into a new folder it writes, and a second run into the same folder is refused.
        let fresh = d.join("fresh");
        let summary = generate(&fresh, 4, 0).unwrap();
        assert_eq!(summary.images, 4);
        let list = std::fs::read(fresh.join("files.txt")).unwrap();
        assert!(generate(&fresh, 4, 1).is_err());
        assert_eq!(std::fs::read(fresh.join("files.txt")).unwrap(), list);
    }
}
