//! The decode floor: how fast the loader's JPEG decoder alone reads and decodes a source on
//! `threads` threads, at full size and at the DCT scale the pipeline would use. Nothing else
//! runs (no resize, no normalize, no batching), so this is the rate the pipeline can approach.
//! `imagefeed floor SOURCE --threads N` prints it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crate::decode::Geometry;
use crate::decode::{mean_squared_error, DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::error::Error;
use crate::source::Source;
use crate::ResizeFilter;

/// Reads the sample file at `path` into `bytes` as the pipeline does: a regular file (a FIFO
/// would block, a device never end) of at most `limit` bytes. `false` if it is not one or
/// cannot be read.
fn read_sample(path: &Path, limit: u64, bytes: &mut Vec<u8>) -> bool {
    use std::io::Read;
    bytes.clear();
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= limit)
        && std::fs::File::open(path)
            .and_then(|f| f.take(limit + 1).read_to_end(bytes))
            .is_ok()
        && bytes.len() as u64 <= limit
}

/// The largest output side the floor and its quality checks take: the checks hold two
/// `size_px`×`size_px` images (400 MB at this size).
pub const MAX_FLOOR_SIZE: u32 = 8192;

/// Refuses an output side of 0 or over [`MAX_FLOOR_SIZE`].
fn check_size(size_px: u32) -> Result<(), Error> {
    if size_px == 0 || size_px > MAX_FLOOR_SIZE {
        return Err(Error::config(
            "size",
            format!("{size_px} px: the floor's output side must be 1 to {MAX_FLOOR_SIZE} px"),
        ));
    }
    Ok(())
}

/// The result of [`decode_floor`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FloorReport {
    /// Images decoded.
    pub images: u64,
    /// Files that failed to decode (not counted in `images`).
    pub failed: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Decoded images per second.
    pub images_per_sec: f64,
    /// Whether DCT-scaled decoding was used.
    pub scaled: bool,
    /// Decoded megapixels per image, on average (after DCT scaling).
    pub mean_decoded_megapixels: f64,
}

/// Reads and decodes up to `limit` samples of `source` (in source order) on `threads`
/// threads. With `scaled`, each JPEG decodes at the largest DCT scale that still covers a
/// `size_px`×`size_px` stretch target on both axes, as the pipeline does.
///
/// # Errors
/// [`ErrorKind::Spawn`](crate::ErrorKind::Spawn) if a thread cannot start;
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `size_px` of 0 or over
/// [`MAX_FLOOR_SIZE`].
pub fn decode_floor(
    source: &Source,
    threads: usize,
    scaled: bool,
    size_px: u32,
    decoder: JpegDecoder,
    limit: Option<usize>,
) -> Result<FloorReport, Error> {
    check_size(size_px)?;
    let n = limit.map_or(source.len(), |l| l.min(source.len()));
    let settings = DecodeSettings {
        max_pixels: 100_000_000,
        apply_exif: true,
        check_extension: true,
        dct_scaling: scaled,
        accept_jpeg_warnings: false,
        jpeg_decoder: decoder,
        // The floor is libjpeg-turbo's whole decode, to RGB.
        planes: false,
    };
    let geom = Geometry {
        width: size_px,
        height: size_px,
        transform: crate::Transform::Stretch,
        flip: 0.0,
        filter: ResizeFilter::default(),
    };
    let limit = settings.max_file_bytes();
    // Large decodes share memory as in the loader.
    let share = crate::decode::typical_working_set(source, &settings, &geom);
    let gate = LargeGate::for_loader(share, share.max(crate::decode::LARGE_SHARED_BYTES));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let pixels = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Result<(), Error> {
        let mut handles = Vec::new();
        for t in 0..threads.max(1) {
            let h = std::thread::Builder::new()
                .name(format!("imagefeed-floor-{t}"))
                .spawn_scoped(s, || {
                    let mut dec = Decoder::new(settings.clone());
                    let mut path = PathBuf::new();
                    let mut bytes = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Relaxed);
                        if i >= n {
                            break;
                        }
                        source.index.path_into(i, &mut path);
                        let ok = read_sample(&path, limit, &mut bytes);
                        match ok.then(|| dec.decode(&bytes, &path, &geom, false, &gate)) {
                            Some(Ok(d)) => {
                                done.fetch_add(1, Relaxed);
                                pixels.fetch_add(u64::from(d.width) * u64::from(d.height), Relaxed);
                            }
                            _ => {
                                failed.fetch_add(1, Relaxed);
                            }
                        }
                    }
                })
                .map_err(Error::spawn)?;
            handles.push(h);
        }
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let images = done.load(Relaxed);
    Ok(FloorReport {
        images,
        failed: failed.load(Relaxed),
        seconds,
        images_per_sec: if seconds > 0.0 {
            images as f64 / seconds
        } else {
            0.0
        },
        scaled,
        mean_decoded_megapixels: if images > 0 {
            pixels.load(Relaxed) as f64 / images as f64 / 1e6
        } else {
            0.0
        },
    })
}

/// A quality comparison of two ways to produce the same output, from [`dct_psnr`] (DCT-scaled
/// against full decode) or [`filter_psnr`] (the two resize filters).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PsnrReport {
    /// Images compared (those that decode).
    pub images: u64,
    /// Images whose output differs from the reference (the others came out identical: for
    /// [`dct_psnr`], those decoded at full size anyway).
    pub scaled_images: u64,
    /// Mean over images of the PSNR (dB) of the output against the reference; identical
    /// outputs count as 99 dB.
    pub mean_psnr_db: f64,
    /// Mean PSNR (dB) over the images whose output differs (the honest figure: identical
    /// outputs would pull the mean up).
    pub mean_scaled_psnr_db: f64,
    /// The lowest per-image PSNR (dB).
    pub min_psnr_db: f64,
}

/// Decodes up to `limit` samples twice — at the DCT scale the pipeline uses and at full size —
/// resizes both to `size_px`×`size_px` (stretch, the default mode) with `filter` and compares
/// them: the quality cost of DCT scaling.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `size_px` of 0 or over
/// [`MAX_FLOOR_SIZE`]; files that fail to decode are left out.
pub fn dct_psnr(
    source: &Source,
    size_px: u32,
    filter: ResizeFilter,
    limit: Option<usize>,
) -> Result<PsnrReport, Error> {
    compare(source, size_px, (true, filter), (false, filter), limit)
}

/// Decodes up to `limit` samples at the DCT scale the pipeline uses, resizes each to
/// `size_px`×`size_px` with both filters and compares the two: how far the cheaper
/// [`ResizeFilter::Bilinear`] is from [`ResizeFilter::Antialiased`] (the reference).
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `size_px` of 0 or over
/// [`MAX_FLOOR_SIZE`]; files that fail to decode are left out.
pub fn filter_psnr(
    source: &Source,
    size_px: u32,
    limit: Option<usize>,
) -> Result<PsnrReport, Error> {
    compare(
        source,
        size_px,
        (true, ResizeFilter::Bilinear),
        (true, ResizeFilter::Antialiased),
        limit,
    )
}

/// PSNR of output `a` (DCT scaling on or off, filter) against reference `b`.
fn compare(
    source: &Source,
    size_px: u32,
    a: (bool, ResizeFilter),
    b: (bool, ResizeFilter),
    limit: Option<usize>,
) -> Result<PsnrReport, Error> {
    check_size(size_px)?;
    let n = limit.map_or(source.len(), |l| l.min(source.len()));
    // With DCT scaling, the pipeline's decode (YCbCr planes, converted after the resize); the
    // full-size reference decodes to RGB as libjpeg-turbo does by default.
    let settings = |dct| DecodeSettings {
        max_pixels: 100_000_000,
        apply_exif: true,
        check_extension: true,
        dct_scaling: dct,
        accept_jpeg_warnings: false,
        jpeg_decoder: JpegDecoder::Auto,
        planes: dct,
    };
    let geom = |filter| Geometry {
        width: size_px,
        height: size_px,
        transform: crate::Transform::Stretch,
        flip: 0.0,
        filter,
    };
    let limit = settings(true).max_file_bytes();
    let (geom_a, geom_b) = (geom(a.1), geom(b.1));
    let (mut scaled_dec, mut full_dec) = (Decoder::new(settings(a.0)), Decoder::new(settings(b.0)));
    let gate = LargeGate::default();
    let (mut a, mut b) = (
        vec![0u8; geom_a.sample_len()],
        vec![0u8; geom_b.sample_len()],
    );
    let (mut sum, mut min, mut images, mut scaled) = (0.0, f64::INFINITY, 0u64, 0u64);
    let mut scaled_sum = 0.0;
    let mut bytes = Vec::new();
    let mut path = PathBuf::new();
    for i in 0..n {
        source.index.path_into(i, &mut path);
        if !read_sample(&path, limit, &mut bytes) {
            continue;
        }
        if scaled_dec
            .decode_resize(
                &bytes,
                &path,
                &geom_a,
                crate::decode::Target::Sample(crate::decode::Draw::default()),
                false,
                &gate,
                &mut a,
            )
            .is_err()
            || full_dec
                .decode_resize(
                    &bytes,
                    &path,
                    &geom_b,
                    crate::decode::Target::Sample(crate::decode::Draw::default()),
                    false,
                    &gate,
                    &mut b,
                )
                .is_err()
        {
            continue;
        }
        let mse = mean_squared_error(&a, &b);
        let psnr = if mse == 0.0 {
            99.0
        } else {
            (10.0 * (255.0f64 * 255.0 / mse).log10()).min(99.0)
        };
        if mse > 0.0 {
            scaled += 1;
            scaled_sum += psnr;
        }
        sum += psnr;
        min = min.min(psnr);
        images += 1;
    }
    Ok(PsnrReport {
        images,
        scaled_images: scaled,
        mean_psnr_db: if images > 0 { sum / images as f64 } else { 0.0 },
        mean_scaled_psnr_db: if scaled > 0 {
            scaled_sum / scaled as f64
        } else {
            99.0
        },
        min_psnr_db: if images > 0 { min } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sides_out_of_range_are_refused_before_any_buffer() {
        // `--size 4294967295` panicked allocating two side x side images; 65535 asked for 24 GB.
        let source = Source::from_entries([("a.jpg", 0u32)]).unwrap();
        for size in [0, MAX_FLOOR_SIZE + 1, u32::MAX] {
            let e = dct_psnr(&source, size, ResizeFilter::default(), None).unwrap_err();
            assert!(e.to_string().contains("1 to 8192 px"), "{e}");
            assert!(filter_psnr(&source, size, None).is_err());
            assert!(decode_floor(&source, 1, true, size, JpegDecoder::Auto, None).is_err());
        }
    }
}
