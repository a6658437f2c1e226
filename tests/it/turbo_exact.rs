//! libjpeg-turbo as imagefeed builds it (`crates/imagefeed-jpeg`, with the Huffman decoder patch
//! `crates/imagefeed-jpeg/imagefeed.patch`) decodes bit for bit as the stock library does: every
//! JPEG in `testdata/`, and seeded damaged copies of some (bits flipped and bytes set to `FF` in
//! the image data, cut short, bytes changed in the Huffman tables, markers and runs of 1 bits
//! inserted, bytes deleted and inserted; in files of several scans, a scan repeated), at each
//! DCT scale, to RGB
//! and to planes, with the same result or error, against digests written with stock
//! libjpeg-turbo 3.1.0 (`testdata/reference/libjpeg-turbo-3.1.0.txt`).
//!
//! To write the digests again (after changing `testdata/`), with the stock library:
//! `IMAGEFEED_WRITE_TURBO_DIGESTS=1 cargo test -p imagefeed --features imagefeed-jpeg/stock-libjpeg-turbo --test it turbo_exact`.
//! With that feature the same test checks the stock build against the digests.
#![cfg(feature = "turbojpeg")]

use imagefeed_jpeg::testing::{disable_fast_paths, FastPaths};
use imagefeed_jpeg::{
    Colorspace, Decompressor, Image, PixelFormat, ScalingFactor, Subsamp, YuvImage,
};
use std::fmt::Write as _;
use xxhash_rust::xxh3::xxh3_64;

use crate::common::{testdata, SplitMix};

const DIGESTS: &str = "reference/libjpeg-turbo-3.1.0.txt";
/// Files that also get damaged copies: photographs and the common layouts.
const DAMAGED: &[&str] = &[
    "photos/photo_0.jpg",
    "photos/photo_1.jpg",
    "photos/photo_2.jpg",
    "photos/photo_3.jpg",
    "photos/photo_4.jpg",
    "photos/photo_5.jpg",
    "valid/baseline_420.jpg",
    "valid/s422.jpg",
    "valid/s444.jpg",
    "valid/gray.jpg",
    "valid/restart.jpg",
    "valid/progressive.jpg",
    "valid/progressive_sa.jpg",
    "valid/progressive_restart.jpg",
];
/// Damaged copies of each: 0-11 of the first four kinds below, 12-19 of the other four.
const COPIES: u64 = 20;

fn find(bytes: &[u8], marker: u8) -> Option<usize> {
    bytes.windows(2).position(|w| w == [0xFF, marker])
}

/// Damaged copy `copy` of `bytes`. Copies 0-11 rotate through bit flips in the image data,
/// bytes set to `FF` or `00` there, a cut, and changed bytes in the first Huffman table
/// segment; copies 12-19 through edits aimed at the bit buffer's refill and its markers: a
/// marker inserted in the image data (a restart marker where none belongs, or an end of
/// image), a run of `FF 00` (all 1 bits: codes longer than 16 bits), bytes deleted and bytes
/// inserted. Seeded, so the copies are the same on every machine.
fn damaged(bytes: &[u8], copy: u64) -> Vec<u8> {
    let mut rng = SplitMix(copy.wrapping_mul(0x1234_5678_9ABC_DEF1) ^ bytes.len() as u64);
    let mut b = bytes.to_vec();
    let scan = find(&b, 0xDA).map_or(2, |p| p + 12).min(b.len() - 1);
    let data = b.len().saturating_sub(scan + 2).max(1);
    if copy >= 12 {
        let at = scan + rng.below(data);
        match copy % 4 {
            0 => {
                let marker = if rng.below(4) == 0 {
                    0xD9
                } else {
                    0xD0 + rng.below(8) as u8
                };
                b.splice(at..at, [0xFF, marker]);
            }
            1 => {
                let run = [0xFF, 0x00].repeat(1 + rng.below(8));
                b.splice(at..at, run);
            }
            2 => {
                b.drain(at..(at + 1 + rng.below(16)).min(b.len()));
            }
            _ => {
                let junk: Vec<u8> = (0..1 + rng.below(16))
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                b.splice(at..at, junk);
            }
        }
        return b;
    }
    match copy % 4 {
        0 => {
            for _ in 0..1 + rng.below(6) {
                let i = scan + rng.below(data);
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            for _ in 0..1 + rng.below(3) {
                let i = scan + rng.below(data);
                b[i] = if rng.next_u64() & 1 == 0 { 0xFF } else { 0x00 };
            }
        }
        2 => b.truncate(scan + rng.below(data)),
        _ => {
            if let Some(dht) = find(&b, 0xC4) {
                let len = usize::from(u16::from_be_bytes([b[dht + 2], b[dht + 3]]));
                for _ in 0..1 + rng.below(2) {
                    let i = dht + 4 + rng.below(len.saturating_sub(2).max(1));
                    if i < b.len() {
                        b[i] = rng.next_u64() as u8;
                    }
                }
            }
        }
    }
    b
}

/// Where each scan of `bytes` lies: its SOS segment and the image data after it, up to the
/// next marker that is not a restart marker. Walks the marker segments from the start, so the
/// scan of a thumbnail inside an APP1 segment is not taken for one.
fn scans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 2; // after SOI
    while at + 4 <= bytes.len() && bytes[at] == 0xFF {
        let marker = bytes[at + 1];
        if marker == 0xD9 {
            break;
        }
        if marker == 0xFF {
            at += 1; // a fill byte
            continue;
        }
        let mut end = at + 2 + usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        if marker == 0xDA {
            while end + 1 < bytes.len()
                && !(bytes[end] == 0xFF
                    && bytes[end + 1] != 0
                    && !(0xD0..=0xD7).contains(&bytes[end + 1]))
            {
                end += 1;
            }
            end = end.min(bytes.len());
            out.push((at, end));
        }
        at = end;
    }
    out
}

/// Copies of a file of several scans with one scan repeated before the end of the image, as
/// is and with a byte of its image data changed: libjpeg-turbo accepts a component's scan twice
/// and decodes it again into the same blocks, which the patch's pair tables must not touch
/// (they write a 0 after a block's last coefficient, harmless only in blocks decoded once).
fn repeated_scans(bytes: &[u8]) -> Vec<Vec<u8>> {
    let scans = scans(bytes);
    let Some(&(_, last)) = scans.last() else {
        return Vec::new();
    };
    if scans.len() < 2 {
        return Vec::new();
    }
    let mut copies = Vec::new();
    for &(start, end) in &scans {
        for changed in [false, true] {
            let mut scan = bytes[start..end].to_vec();
            if changed {
                let i = scan.len() - 1 - (scan.len() / 3);
                scan[i] ^= 0x10;
            }
            let mut b = bytes[..last].to_vec();
            b.extend_from_slice(&scan);
            b.extend_from_slice(&bytes[last..]);
            copies.push(b);
        }
    }
    copies
}

/// What decoding `bytes` gives, at every scale, to RGB and (for YCbCr and grey files) to
/// planes: each result's status (the error, if any) and the digest of the output buffer,
/// written or not (for planes, of the image's pixels: see [`planes_digest`]).
fn outcomes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for denom in [1, 2, 4, 8] {
        let mut tj = Decompressor::new().unwrap();
        let factor = ScalingFactor::new(1, denom);
        tj.set_scaling_factor(factor).unwrap();
        let header = match tj.read_header(bytes) {
            Ok(h) => h,
            Err(e) => {
                let _ = write!(out, "1/{denom} header: {}; ", Stable(&e));
                continue;
            }
        };
        let (w, h) = (factor.scale(header.width), factor.scale(header.height));
        if w * h > 50_000_000 {
            let _ = write!(out, "1/{denom} {w}x{h}: too large; ");
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
        let status = tj.decompress(bytes, image).err().map(Stable);
        let _ = write!(out, "1/{denom} rgb {status:?} {:016x}; ", xxh3_64(&rgb));
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
        let status = tj.decompress_to_yuv(bytes, image).err().map(Stable);
        let _ = write!(
            out,
            "1/{denom} planes {status:?} {:016x}; ",
            planes_digest(&planes, w, h, sub)
        );
    }
    out
}

/// An error written as the digests record it (`TurboJPEG error: MESSAGE`, and
/// `TurboJpegError("MESSAGE")` in debug form), so that the digests name libjpeg-turbo's
/// messages and not a wrapper's formatting.
struct Stable<E: std::borrow::Borrow<imagefeed_jpeg::Error>>(E);

impl<E: std::borrow::Borrow<imagefeed_jpeg::Error>> std::fmt::Display for Stable<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TurboJPEG error: {}", self.0.borrow().message())
    }
}

impl<E: std::borrow::Borrow<imagefeed_jpeg::Error>> std::fmt::Debug for Stable<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TurboJpegError({:?})", self.0.borrow().message())
    }
}

/// The digest of the image's pixels in each plane: libjpeg-turbo pads planes to whole MCUs
/// and fills the padding from its own uninitialized buffers (a 1×1 4:2:0 image at 1/8 scale
/// has a 2×2 luma plane, three bytes of it not the image's), so the padding is left out, as
/// the loader leaves it out (`Layout::planes` in `src/decode/jpeg.rs`).
fn planes_digest(planes: &[u8], w: usize, h: usize, sub: Subsamp) -> u64 {
    let mut real = Vec::new();
    let mut offset = 0;
    for i in 0..if sub == Subsamp::Gray { 1 } else { 3 } {
        let pw = imagefeed_jpeg::yuv_plane_width(i, w, sub).unwrap();
        let ph = imagefeed_jpeg::yuv_plane_height(i, h, sub).unwrap();
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
    assert_eq!(offset, planes.len());
    xxh3_64(&real)
}

fn jpegs() -> Vec<String> {
    let mut names = Vec::new();
    for dir in ["valid", "corrupt", "photos"] {
        for entry in std::fs::read_dir(testdata(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".jpg") {
                names.push(format!("{dir}/{name}"));
            }
        }
    }
    for class in std::fs::read_dir(testdata("classes")).unwrap() {
        let class = class.unwrap().file_name().into_string().unwrap();
        for entry in std::fs::read_dir(testdata("classes").join(&class)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".jpg") {
                names.push(format!("classes/{class}/{name}"));
            }
        }
    }
    names.sort();
    names
}

/// One line per file and copy: `NAME COPY DIGEST`, the digest of all its outcomes.
fn digests() -> Vec<String> {
    let mut lines = Vec::new();
    for name in jpegs() {
        let bytes = std::fs::read(testdata(&name)).unwrap();
        lines.push(format!(
            "{name} - {:016x}",
            xxh3_64(outcomes(&bytes).as_bytes())
        ));
        if DAMAGED.contains(&name.as_str()) {
            for copy in 0..COPIES {
                let d = outcomes(&damaged(&bytes, copy));
                lines.push(format!("{name} {copy} {:016x}", xxh3_64(d.as_bytes())));
            }
        }
        for (i, copy) in repeated_scans(&bytes).iter().enumerate() {
            let d = outcomes(copy);
            lines.push(format!("{name} r{i} {:016x}", xxh3_64(d.as_bytes())));
        }
    }
    lines
}

#[test]
fn libjpeg_turbo_decodes_bit_for_bit_as_the_stock_library() {
    check_digests();
}

/// The patched library's switch to the stock Huffman decoders (to measure what the patch
/// gains, `imagefeed floor --stock-paths`) decodes bit for bit the same too. Checked in a child
/// process, because the switch is process-wide and this process's test threads share it.
#[test]
fn the_stock_huffman_decoder_switch_decodes_the_same() {
    check_digests_with(
        "the_stock_huffman_decoder_switch_decodes_the_same",
        FastPaths {
            stock_huffman: true,
            ..FastPaths::default()
        },
    );
}

/// Without the BMI2 `PDEP` instruction the refinement-scan decoder finds the end of a run as
/// it does on CPUs without a fast one: on a CPU with one, this checks the other path (the test
/// above checks the path this CPU takes).
#[test]
fn the_refinement_decoder_without_pdep_decodes_the_same() {
    check_digests_with(
        "the_refinement_decoder_without_pdep_decodes_the_same",
        FastPaths {
            no_pdep: true,
            ..FastPaths::default()
        },
    );
}

/// The 4x4 IDCT (the 1/2 scale) one block at a time, as on CPUs without AVX2, instead of two
/// blocks in one AVX2 pass: on a CPU with AVX2 this checks the other path.
#[test]
fn the_single_block_idct_decodes_the_same() {
    check_digests_with(
        "the_single_block_idct_decodes_the_same",
        FastPaths {
            no_idct_pair: true,
            ..FastPaths::default()
        },
    );
}

/// The child process's marker: it turns `paths` off and checks the digests.
const CHILD: &str = "IMAGEFEED_TURBO_EXACT_CHILD";

/// Runs the test `name` again in a child process, where it turns `paths` off (the library's
/// test hook, process-wide) and checks the digests.
fn check_digests_with(name: &str, paths: FastPaths) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        disable_fast_paths(paths);
        check_digests();
        return;
    }
    if std::env::var_os("IMAGEFEED_WRITE_TURBO_DIGESTS").is_some() {
        return; // libjpeg_turbo_decodes_bit_for_bit_as_the_stock_library writes them
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("turbo_exact::{name}"),
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn check_digests() {
    let lines = digests();
    assert!(lines.len() > 150, "{} cases", lines.len());
    let path = testdata(DIGESTS);
    if std::env::var_os("IMAGEFEED_WRITE_TURBO_DIGESTS").is_some() {
        let mut text = String::from(
            "# Digests of stock libjpeg-turbo 3.1.0's decodes: tests/it/turbo_exact.rs\n",
        );
        for l in &lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        eprintln!("wrote {} digests to {}", lines.len(), path.display());
        return;
    }
    let expected: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let differ: Vec<(&String, Option<&String>)> = lines
        .iter()
        .enumerate()
        .filter(|(i, l)| expected.get(*i) != Some(l))
        .map(|(i, l)| (l, expected.get(i)))
        .collect();
    assert!(
        differ.is_empty() && expected.len() == lines.len(),
        "{} of {} decodes differ from stock libjpeg-turbo's ({} expected), first: {:?}",
        differ.len(),
        lines.len(),
        expected.len(),
        differ.first()
    );
}

#[test]
fn damaged_copies_are_damaged() {
    // The test above is only as good as its copies: each differs from its file.
    let bytes = std::fs::read(testdata("photos/photo_0.jpg")).unwrap();
    let mut outcomes_seen = std::collections::HashSet::new();
    for copy in 0..COPIES {
        let d = damaged(&bytes, copy);
        assert_ne!(d, bytes, "copy {copy}");
        outcomes_seen.insert(outcomes(&d));
    }
    assert!(outcomes_seen.len() >= 8, "{} distinct", outcomes_seen.len());
}
