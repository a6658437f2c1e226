//! The differential harness: decodes JPEGs and seeded damaged copies of them every way imagefeed
//! decodes (DCT scales 1, 1/2, 1/4 and 1/8 to RGB, to planes, and a cropping region), and
//! prints one digest line per file and copy. `diff.sh` (beside this crate's Cargo.toml) builds
//! it twice, with the patched and with the stock libjpeg-turbo, under AddressSanitizer and
//! UndefinedBehaviorSanitizer, and compares the two outputs line by line.
//!
//! ```text
//! cargo run -p imagefeed-jpeg --example diffcheck -- COPIES FILE...
//! ```
//!
//! The copies are the same on every machine (a seeded generator per file and copy): bits
//! flipped, bytes set to `FF` or `00`, the file cut short, bytes changed in the Huffman and
//! quantization tables and the frame header, markers inserted in the image data, runs of
//! `FF 00`, bytes deleted, inserted and duplicated, and a scan repeated.
//!
//! The patched build stops a cropped multi-scan (progressive) decode's scans below the crop,
//! which the stock library does not: its compared lines decode every scan whole, and each crop
//! is decoded again with the early end, which must give the same pixels wherever the whole-scan
//! decode succeeded (any difference fails the run). Damaged copies whose whole frame fails but
//! whose crop decodes are counted, single-scan and multi-scan apart, by whether the crop holds
//! the undamaged file's pixels. Each crop is also decoded reading the data to its end
//! (`set_stop_below_crop(false)`), which must report what the whole frame's decode reports.

use std::fmt::Write as _;

use imagefeed_jpeg::{
    Colorspace, Decompressor, Image, PixelFormat, Region, ScalingFactor, Subsamp, YuvImage,
};

/// Images larger than this are not decoded (libjpeg-turbo refuses them, the same in both builds).
const MAX_PIXELS: usize = 25_000_000;

/// SplitMix64: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// FNV-1a, 64 bits.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn find(bytes: &[u8], marker: u8) -> Option<usize> {
    bytes.windows(2).position(|w| w == [0xFF, marker])
}

/// Damaged copy `copy` of `bytes`: one to three edits of a kind chosen by the copy number.
fn damaged(bytes: &[u8], seed: u64, copy: u64) -> Vec<u8> {
    let mut rng = Rng(seed ^ copy.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut b = bytes.to_vec();
    if b.len() < 4 {
        return b;
    }
    let scan = find(&b, 0xDA).map_or(2, |p| p + 2).min(b.len() - 1);
    let data = |b: &Vec<u8>, rng: &mut Rng| scan + rng.below(b.len().saturating_sub(scan).max(1));
    for _ in 0..1 + rng.below(3) {
        match copy % 12 {
            0 => {
                let at = data(&b, &mut rng).min(b.len() - 1);
                b[at] ^= 1 << rng.below(8);
            }
            1 => {
                let at = data(&b, &mut rng).min(b.len() - 1);
                b[at] = if rng.below(2) == 0 { 0xFF } else { 0x00 };
            }
            2 => {
                let at = data(&b, &mut rng).min(b.len());
                b.truncate(at.max(2));
                break;
            }
            3 => {
                let seg = find(&b, 0xC4).or_else(|| find(&b, 0xDB)).unwrap_or(2);
                let at = (seg + 4 + rng.below(40)).min(b.len() - 1);
                b[at] = rng.next() as u8;
            }
            4 => {
                let seg = find(&b, 0xC0).or_else(|| find(&b, 0xC2)).unwrap_or(2);
                let at = (seg + 4 + rng.below(15)).min(b.len() - 1);
                b[at] = rng.next() as u8;
            }
            5 => {
                let at = data(&b, &mut rng).min(b.len());
                let m = [0xD0 + rng.below(8) as u8, 0xD9, 0xDA, 0xC4][rng.below(4)];
                b.splice(at..at, [0xFF, m]);
            }
            6 => {
                let at = data(&b, &mut rng).min(b.len());
                let run: Vec<u8> = [0xFF, 0x00].repeat(1 + rng.below(24));
                b.splice(at..at, run);
            }
            7 => {
                let at = data(&b, &mut rng).min(b.len() - 1);
                let n = (1 + rng.below(64)).min(b.len() - at);
                b.drain(at..at + n);
            }
            8 => {
                let at = data(&b, &mut rng).min(b.len());
                let junk: Vec<u8> = (0..1 + rng.below(32)).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
            9 => {
                let at = data(&b, &mut rng).min(b.len() - 1);
                let n = (1 + rng.below(256)).min(b.len() - at);
                let copy: Vec<u8> = b[at..at + n].to_vec();
                b.splice(at..at, copy);
            }
            10 => {
                // A scan repeated: everything from the last SOS to the end, again.
                if let Some(sos) = b.windows(2).rposition(|w| w == [0xFF, 0xDA]) {
                    let end = b.len().saturating_sub(2).max(sos);
                    let scan: Vec<u8> = b[sos..end].to_vec();
                    b.splice(end..end, scan);
                }
                let at = data(&b, &mut rng).min(b.len() - 1);
                b[at] ^= 1 << rng.below(8);
            }
            _ => {
                for _ in 0..1 + rng.below(16) {
                    let at = data(&b, &mut rng).min(b.len() - 1);
                    b[at] = rng.next() as u8;
                }
            }
        }
    }
    b
}

/// Every decode of `bytes`, written as text: results (with libjpeg-turbo's messages) and
/// digests of the pixels.
/// What the patched build's early end of cropped multi-scan decodes did.
#[derive(Default)]
struct Checks {
    /// Crops that decoded whole-scan without a warning but give other pixels (or an error)
    /// with the early end: each is a bug.
    differ: usize,
    /// Crops that decoded whole-scan without a warning and with the early end to the same
    /// pixels, with a warning (damaged files only).
    warned: usize,
    /// Damaged copies whose whole frame fails to decode but whose crop decodes, [single-scan,
    /// multi-scan] files: [other pixels than the undamaged file's crop (damage above or within
    /// the crop that a decode notices only at the scan's end, which a crop never reaches), the
    /// undamaged file's pixels (damage below the crop, never read)].
    damaged: [[usize; 2]; 2],
    /// Crops read to the end of the data (`set_stop_below_crop(false)`) that report otherwise
    /// than the whole frame's decode, or give other pixels than the crop: each is a bug.
    to_end_differ: usize,
}

/// Whether `bytes` is a progressive (multi-scan) JPEG: an SOF2 marker before the first scan.
fn multi_scan(bytes: &[u8]) -> bool {
    let sos = find(bytes, 0xDA).unwrap_or(bytes.len());
    find(&bytes[..sos], 0xC2).is_some()
}

/// A cropped decode (the region set on `tj`) of `cw`x`ch`: its error and digest, with every
/// scan decoded whole (`whole_scans`) or stopped below the crop.
fn crop_decode(
    tj: &mut Decompressor,
    bytes: &[u8],
    cw: usize,
    ch: usize,
    whole_scans: bool,
) -> (Option<imagefeed_jpeg::Error>, u64) {
    use imagefeed_jpeg::testing::{disable_fast_paths, disabled_fast_paths, FastPaths};
    disable_fast_paths(FastPaths {
        whole_scans,
        ..disabled_fast_paths()
    });
    let mut crop = vec![0u8; cw * ch * 3];
    let image = Image {
        pixels: &mut crop[..],
        width: cw,
        pitch: cw * 3,
        height: ch,
        format: PixelFormat::RGB,
    };
    let status = tj.decompress(bytes, image).err();
    disable_fast_paths(FastPaths {
        whole_scans: false,
        ..disabled_fast_paths()
    });
    (status, fnv(&crop))
}

fn outcomes(
    label: &str,
    bytes: &[u8],
    original: &[u8],
    rng: &mut Rng,
    checks: &mut Checks,
) -> String {
    let mut out = String::new();
    for denom in [1usize, 2, 4, 8] {
        let Ok(mut tj) = Decompressor::new() else {
            out.push_str("no decompressor; ");
            continue;
        };
        let _ = tj.set_scan_limit(500);
        // As imagefeed's `max_pixels` gate: a damaged header can claim 65,535 x 65,535 pixels,
        // and a progressive file's coefficients are held whole, whatever the scale.
        let _ = tj.set_max_pixels(MAX_PIXELS);
        let factor = ScalingFactor::new(1, denom);
        let _ = tj.set_scaling_factor(factor);
        let header = match tj.read_header(bytes) {
            Ok(h) => h,
            Err(e) => {
                let _ = write!(out, "1/{denom} header: {e}; ");
                continue;
            }
        };
        let (w, h) = (factor.scale(header.width), factor.scale(header.height));
        if header.width * header.height > MAX_PIXELS || header.lossless {
            let _ = write!(out, "1/{denom} {w}x{h} skipped; ");
            continue;
        }
        let mut rgb = vec![0u8; w * h * 3];
        let image = Image {
            pixels: &mut rgb[..],
            width: w,
            pitch: w * 3,
            height: h,
            format: PixelFormat::RGB,
        };
        let frame = tj.decompress(bytes, image).err();
        let _ = write!(out, "1/{denom} rgb {frame:?} {:016x}; ", fnv(&rgb));

        // A cropping region, as the training transforms decode one.
        let align = tj.crop_x_alignment(&header);
        if w > align && h > 1 && header.subsamp != Subsamp::Unknown {
            let x = rng.below(w / align) * align;
            let y = rng.below(h - 1);
            let cw = 1 + rng.below(w - x);
            let ch = 1 + rng.below(h - y);
            let region = Region {
                x,
                y,
                width: cw,
                height: ch,
            };
            match tj.set_cropping_region(Some(region)) {
                Ok(()) => {
                    // The line compared with the stock build's decodes every scan whole, as the
                    // stock library does; the patched one's early end of a multi-scan file's
                    // scans below the crop is checked against it here.
                    let (status, digest) = crop_decode(&mut tj, bytes, cw, ch, true);
                    let _ = write!(out, "1/{denom} crop {region:?} {status:?} {digest:016x}; ");
                    if imagefeed_jpeg::info().patched {
                        let (early, early_digest) = crop_decode(&mut tj, bytes, cw, ch, false);
                        // Where every scan whole decodes without a warning, stopping them
                        // must give the same pixels, without an error. A warning is tolerated
                        // (counted): on a damaged file, the marker the early end moves to can
                        // differ from where a damaged scan's decoding ended.
                        if status.is_none() {
                            let warned = matches!(
                                early,
                                Some(imagefeed_jpeg::Error::Library { warning: true, .. })
                            );
                            if early_digest != digest || (early.is_some() && !warned) {
                                checks.differ += 1;
                                eprintln!(
                                    "diffcheck: {label} 1/{denom} crop {region:?}: stopping the scans below the crop gives {early:?} {early_digest:016x}, every scan whole {digest:016x}"
                                );
                            } else if warned {
                                checks.warned += 1;
                            }
                        }
                        // A damaged copy whose whole frame fails but whose crop decodes (with
                        // the early end, as every single-scan crop stops after its rows).
                        if frame.is_some() && early.is_none() {
                            let (orig, orig_digest) = crop_decode(&mut tj, original, cw, ch, false);
                            let same = orig.is_none() && orig_digest == early_digest;
                            let kind = &mut checks.damaged[usize::from(multi_scan(bytes))];
                            kind[usize::from(same)] += 1;
                        }
                        // Read to its end, a crop reports what the whole frame reports, with the
                        // pixels of the crop where both succeed.
                        tj.set_stop_below_crop(false);
                        let (to_end, to_end_digest) = crop_decode(&mut tj, bytes, cw, ch, false);
                        tj.set_stop_below_crop(true);
                        let agree = match (&frame, &to_end) {
                            (None, None) => status.is_some() || to_end_digest == digest,
                            (Some(a), Some(b)) => a == b,
                            _ => false,
                        };
                        if !agree {
                            checks.to_end_differ += 1;
                            eprintln!(
                                "diffcheck: {label} 1/{denom} crop {region:?} read to the end gives {to_end:?} {to_end_digest:016x}, the whole frame {frame:?}, the crop {status:?} {digest:016x}"
                            );
                        }
                    }
                }
                Err(e) => {
                    let _ = write!(out, "1/{denom} crop {region:?} refused: {e}; ");
                }
            }
            let _ = tj.set_cropping_region(None);
        }

        let sub = match (header.colorspace, header.subsamp) {
            (Colorspace::YCbCr | Colorspace::Gray, Subsamp::Unknown) => continue,
            (Colorspace::YCbCr | Colorspace::Gray, sub) => sub,
            _ => continue,
        };
        let Ok(len) = imagefeed_jpeg::yuv_pixels_len(w, 1, h, sub) else {
            continue;
        };
        let mut planes = vec![0u8; len];
        let image = YuvImage {
            pixels: &mut planes[..],
            width: w,
            align: 1,
            height: h,
            subsamp: sub,
        };
        let status = tj.decompress_to_yuv(bytes, image).err();
        let _ = write!(
            out,
            "1/{denom} planes {status:?} {:016x}; ",
            planes_digest(&planes, w, h, sub)
        );
    }
    out
}

/// The digest of the image's own pixels in each plane (libjpeg-turbo pads planes to whole MCUs
/// and leaves the padding as its buffers held it).
fn planes_digest(planes: &[u8], w: usize, h: usize, sub: Subsamp) -> u64 {
    let (sx, sy) = sub.factors();
    let mut real = Vec::new();
    let mut offset = 0;
    for i in 0..if sub == Subsamp::Gray { 1 } else { 3 } {
        let (Some(pw), Some(ph)) = (
            imagefeed_jpeg::yuv_plane_width(i, w, sub),
            imagefeed_jpeg::yuv_plane_height(i, h, sub),
        ) else {
            return 0;
        };
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
    fnv(&real)
}

fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // `--write-copies DIR COPIES FILE...`: writes the inputs (each file and its damaged copies)
    // to DIR instead of decoding them, for a harness on another machine (cross/aarch64.sh).
    let write_to = if args.first().map(String::as_str) == Some("--write-copies") && args.len() > 1 {
        let dir = args[1].clone();
        args.drain(..2);
        Some(std::path::PathBuf::from(dir))
    } else {
        None
    };
    let Some((copies, files)) = args.split_first() else {
        eprintln!("usage: diffcheck [--write-copies DIR] COPIES FILE...");
        return std::process::ExitCode::from(2);
    };
    let Ok(copies) = copies.parse::<u64>() else {
        eprintln!("diffcheck: COPIES must be a number, not {copies:?}");
        return std::process::ExitCode::from(2);
    };
    eprintln!("diffcheck: {}", imagefeed_jpeg::info());
    let mut lines = 0usize;
    let mut checks = Checks::default();
    for file in files {
        let bytes = match std::fs::read(file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("diffcheck: {file}: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        let seed = fnv(file.as_bytes());
        for copy in 0..=copies {
            let input = if copy == 0 {
                bytes.clone()
            } else {
                damaged(&bytes, seed, copy)
            };
            if let Some(dir) = &write_to {
                let name = std::path::Path::new(file)
                    .file_name()
                    .map_or_else(|| "input".into(), |n| n.to_string_lossy().into_owned());
                let path = dir.join(format!("{lines:06}-{copy:03}-{name}"));
                if let Err(e) = std::fs::write(&path, &input) {
                    eprintln!("diffcheck: {}: {e}", path.display());
                    return std::process::ExitCode::from(2);
                }
                lines += 1;
                continue;
            }
            let mut rng = Rng(seed ^ copy);
            let label = format!("{file} copy {copy}");
            let text = outcomes(&label, &input, &bytes, &mut rng, &mut checks);
            println!("{file} {copy} {:016x} {}", fnv(text.as_bytes()), text.len());
            lines += 1;
        }
    }
    if write_to.is_some() {
        eprintln!("diffcheck: wrote {lines} inputs from {} files", files.len());
        return std::process::ExitCode::SUCCESS;
    }
    eprintln!("diffcheck: {lines} decodes of {} files", files.len());
    if imagefeed_jpeg::info().patched {
        let [single, multi] = checks.damaged;
        eprintln!(
            "diffcheck: cropped decodes with the scans stopped below the crop: {} differ from whole-scan decodes ({} the same pixels with a warning); damaged copies whose frame fails but whose crop decodes: single-scan {} as the undamaged file, {} otherwise; multi-scan {} as the undamaged file, {} otherwise; crops read to the end that report otherwise than the whole frame: {}",
            checks.differ,
            checks.warned,
            single[1],
            single[0],
            multi[1],
            multi[0],
            checks.to_end_differ
        );
        if checks.differ + checks.to_end_differ > 0 {
            return std::process::ExitCode::FAILURE;
        }
    }
    std::process::ExitCode::SUCCESS
}
