//! The decode floor: how fast the loader's JPEG decoder alone reads and decodes a source on
//! `threads` threads, at full size and at the DCT scale the pipeline would use. Nothing else
//! runs (no resize, no normalize, no batching), so this is the rate the pipeline can approach.
//! `imagefeed floor SOURCE --threads N` prints it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crate::decode::{DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::error::Error;
use crate::source::Source;
use crate::transform::{Geometry, ResizeMode};

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
/// [`ErrorKind::Spawn`](crate::ErrorKind::Spawn) if a thread cannot start.
pub fn decode_floor(
    source: &Source,
    threads: usize,
    scaled: bool,
    size_px: u32,
    decoder: JpegDecoder,
    limit: Option<usize>,
) -> Result<FloorReport, Error> {
    let n = limit.map_or(source.len(), |l| l.min(source.len()));
    let settings = DecodeSettings {
        max_pixels: 100_000_000,
        apply_exif: true,
        check_extension: true,
        dct_scaling: scaled,
        jpeg_decoder: decoder,
    };
    let geom = Geometry {
        width: size_px,
        height: size_px,
        mode: ResizeMode::Stretch,
    };
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let pixels = AtomicU64::new(0);
    let gate = LargeGate::default();
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
                        bytes.clear();
                        let ok = std::fs::File::open(&path)
                            .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes))
                            .is_ok();
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
