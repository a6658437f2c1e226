//! The cache file format, and its two `unsafe` blocks: the memory map and the release of its
//! pages (`madvise(DONTNEED)`) once records are copied out.
//!
//! ```text
//! header (HEADER_LEN = 4096 bytes)
//!   magic "IMGFEED\0" | version u32 | header_len u32 | height u32 | width u32 | channels u32
//!   | dtype u8 (0 = u8) | resize mode u8 | EXIF u8 | DCT scaling u8 | decoder u8
//!   | decode flags u8 (bit 0 extension check, bit 1 accept JPEG warnings)
//!   | resize filter u8 | resampler u8 | max_pixels u64 | count u64 | record_len u64 | source fingerprint [u8; 16]
//!   | header checksum u64 (xxh3 of the bytes before it), zero padding to 4096
//! record i (for dataset index i) at HEADER_LEN + i * record_len
//!   status u8 (0 absent, 1 pixels, 2 failed sample) | pad 3 | label u32 | index u32
//!   | payload_len u32 | checksum u64 (xxh3 of bytes 0..16 and the payload)
//!   | payload: height*width*3 u8 pixels (for resize mode 3, a random transform's base image:
//!     then 16 more bytes of sizes, see transform/base.rs), or the failure message (UTF-8)
//! footer (FOOTER_LEN = 32 bytes), written last
//!   "IMGFEED-COMPLETE" | count u64 | header checksum u64
//! ```
//!
//! All integers little-endian. A file is complete only with the footer and the exact length
//! `HEADER_LEN + count * record_len + FOOTER_LEN`; every offset is computed with checked
//! arithmetic before slicing.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::error::Error;

pub(crate) const MAGIC: &[u8; 8] = b"IMGFEED\0";
pub(crate) const VERSION: u32 = 1;
pub(crate) const HEADER_LEN: u64 = 4096;
pub(crate) const RECORD_HEADER_LEN: usize = 24;
pub(crate) const FOOTER_MAGIC: &[u8; 16] = b"IMGFEED-COMPLETE";
pub(crate) const FOOTER_LEN: u64 = 32;

/// The resize mode byte of a cache of base images (a random transform).
pub(crate) const BASE_MODE: u8 = 3;

pub(crate) const STATUS_PIXELS: u8 = 1;
pub(crate) const STATUS_FAILED: u8 = 2;

/// What a cache was made with; a cache is used only if all of it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) height: u32,
    pub(crate) width: u32,
    pub(crate) resize_mode: u8,
    pub(crate) apply_exif: u8,
    pub(crate) dct_scaling: u8,
    pub(crate) decoder: u8,
    /// Decode flags: bit 0 `check_extension`, bit 1 `accept_jpeg_warnings`.
    pub(crate) decode_flags: u8,
    /// The resize filter ([`ResizeFilter`](crate::ResizeFilter) as a number).
    pub(crate) resize_filter: u8,
    /// The version of the resize code that made the samples
    /// ([`RESAMPLER_VERSION`](crate::transform::RESAMPLER_VERSION)); 0 in caches written
    /// before it was recorded.
    pub(crate) resampler: u8,
    pub(crate) max_pixels: u64,
    pub(crate) count: u64,
    pub(crate) fingerprint: [u8; 16],
}

impl Header {
    /// Bytes of a record's pixels: a sample, or for a random transform (resize mode
    /// [`BASE_MODE`]) a base image with its sizes.
    pub(crate) fn sample_len(&self) -> usize {
        let trailer = if self.resize_mode == BASE_MODE {
            crate::transform::BASE_TRAILER
        } else {
            0
        };
        self.height as usize * self.width as usize * 3 + trailer
    }

    pub(crate) fn record_len(&self) -> u64 {
        (RECORD_HEADER_LEN + self.sample_len()) as u64
    }

    /// The length of a complete file, if it fits in a u64.
    pub(crate) fn file_len(&self) -> Option<u64> {
        self.count
            .checked_mul(self.record_len())?
            .checked_add(HEADER_LEN + FOOTER_LEN)
    }

    pub(crate) fn record_offset(&self, i: u64) -> Option<u64> {
        i.checked_mul(self.record_len())?.checked_add(HEADER_LEN)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN as usize);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b.extend_from_slice(&self.height.to_le_bytes());
        b.extend_from_slice(&self.width.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&[
            0,
            self.resize_mode,
            self.apply_exif,
            self.dct_scaling,
            self.decoder,
            self.decode_flags,
            self.resize_filter,
            self.resampler,
        ]);
        b.extend_from_slice(&self.max_pixels.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.record_len().to_le_bytes());
        b.extend_from_slice(&self.fingerprint);
        let sum = xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b.resize(HEADER_LEN as usize, 0);
        b
    }

    /// Parses a header; `Err` says what is wrong.
    pub(crate) fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < 96 {
            return Err("shorter than a header".into());
        }
        if &b[0..8] != MAGIC {
            return Err("not an imagefeed cache (bad magic)".into());
        }
        let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().expect("4 bytes"));
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "format version {version}, this build reads {VERSION}"
            ));
        }
        let body = 76;
        if u64_at(body) != xxh3_64(&b[..body]) {
            return Err("header checksum mismatch".into());
        }
        if u64::from(u32_at(12)) != HEADER_LEN || u32_at(24) != 3 || b[28] != 0 {
            return Err("unsupported header layout".into());
        }
        let h = Header {
            height: u32_at(16),
            width: u32_at(20),
            resize_mode: b[29],
            apply_exif: b[30],
            dct_scaling: b[31],
            decoder: b[32],
            decode_flags: b[33],
            resize_filter: b[34],
            resampler: b[35],
            max_pixels: u64_at(36),
            count: u64_at(44),
            fingerprint: b[60..76].try_into().expect("16 bytes"),
        };
        // Checked: a file with a valid checksum may still claim any height and width.
        let record_len = u64::from(h.height)
            .checked_mul(u64::from(h.width))
            .and_then(|p| p.checked_mul(3))
            .and_then(|s| {
                let trailer = if h.resize_mode == BASE_MODE {
                    crate::transform::BASE_TRAILER as u64
                } else {
                    0
                };
                s.checked_add(RECORD_HEADER_LEN as u64 + trailer)
            })
            .filter(|&r| usize::try_from(r).is_ok());
        if record_len != Some(u64_at(52)) {
            return Err("record length does not match the sample shape".into());
        }
        Ok(h)
    }

    pub(crate) fn checksum(&self) -> u64 {
        let enc = self.encode();
        u64::from_le_bytes(enc[76..84].try_into().expect("8 bytes"))
    }

    pub(crate) fn footer(&self) -> [u8; FOOTER_LEN as usize] {
        let mut f = [0u8; FOOTER_LEN as usize];
        f[..16].copy_from_slice(FOOTER_MAGIC);
        f[16..24].copy_from_slice(&self.count.to_le_bytes());
        f[24..32].copy_from_slice(&self.checksum().to_le_bytes());
        f
    }
}

/// Encodes a record header plus payload checksum into `out[..RECORD_HEADER_LEN]`.
pub(crate) fn encode_record_header(
    status: u8,
    label: u32,
    index: u32,
    payload: &[u8],
) -> [u8; RECORD_HEADER_LEN] {
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0] = status;
    h[4..8].copy_from_slice(&label.to_le_bytes());
    h[8..12].copy_from_slice(&index.to_le_bytes());
    h[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut hasher = Xxh3::new();
    hasher.update(&h[..16]);
    hasher.update(payload);
    h[16..24].copy_from_slice(&hasher.digest().to_le_bytes());
    h
}

/// A record read from a cache.
#[derive(Debug)]
pub(crate) enum Record<'a> {
    Pixels { label: u32, pixels: &'a [u8] },
    Failed { label: u32, message: &'a str },
}

/// Checks and decodes record bytes (`RECORD_HEADER_LEN + sample_len`). `Err` says what is
/// wrong, for a `CorruptCache` error.
pub(crate) fn decode_record(
    bytes: &[u8],
    index: u32,
    sample_len: usize,
) -> Result<Record<'_>, String> {
    if bytes.len() < RECORD_HEADER_LEN + sample_len {
        return Err("record shorter than its length".into());
    }
    let status = bytes[0];
    let label = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let stored_index = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    let sum = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if status != STATUS_PIXELS && status != STATUS_FAILED {
        return Err(format!("record {index} has no data (status {status})"));
    }
    if len > sample_len || (status == STATUS_PIXELS && len != sample_len) {
        return Err(format!("record {index} has an invalid length {len}"));
    }
    let payload = &bytes[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len];
    let mut hasher = Xxh3::new();
    hasher.update(&bytes[..16]);
    hasher.update(payload);
    if hasher.digest() != sum {
        return Err(format!("record {index} failed its checksum"));
    }
    if stored_index != index {
        return Err(format!("record {index} holds sample {stored_index}"));
    }
    if status == STATUS_PIXELS {
        Ok(Record::Pixels {
            label,
            pixels: payload,
        })
    } else {
        let message = std::str::from_utf8(payload)
            .map_err(|_| format!("record {index}: message is not UTF-8"))?;
        Ok(Record::Failed { label, message })
    }
}

/// A complete cache file, mapped read-only.
#[derive(Debug)]
pub(crate) struct CacheMap {
    map: Mmap,
    /// The mapped file, to notice it shrinking under the mapping.
    file: File,
    pub(crate) header: Header,
    /// Records released so far (see `release`).
    reads: std::sync::atomic::AtomicU64,
}

/// Records read between two releases of the whole mapping (`CacheMap::release`).
const RELEASE_ALL_EVERY: u64 = 64;

impl CacheMap {
    /// Maps a complete cache file and checks its header, length and footer. `Ok(Err(why))`: the
    /// file exists but is unusable (incomplete, another format); `Err`: it cannot be read.
    pub(crate) fn open(path: &Path) -> Result<Result<CacheMap, String>, Error> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < HEADER_LEN + FOOTER_LEN {
            return Ok(Err(format!("{len} bytes: too short to be complete")));
        }
        // SAFETY: a complete cache file is never modified after it is renamed into place: it is
        // only ever replaced by renaming a new file over it, which leaves this mapping on the
        // old inode. Every access below is bounds-checked against the mapping's length.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let header = match Header::decode(&map[..HEADER_LEN as usize]) {
            Ok(h) => h,
            Err(why) => return Ok(Err(why)),
        };
        if header.file_len() != Some(map.len() as u64) {
            return Ok(Err(format!(
                "{} bytes, but {} samples need {} bytes (incomplete or truncated)",
                map.len(),
                header.count,
                header
                    .file_len()
                    .map_or_else(|| "too many".into(), |l| l.to_string())
            )));
        }
        let footer = &map[map.len() - FOOTER_LEN as usize..];
        if footer != header.footer() {
            return Ok(Err(
                "no completion marker (the writer did not finish)".into()
            ));
        }
        #[cfg(unix)]
        {
            let _ = map.advise(memmap2::Advice::Random);
        }
        Ok(Ok(CacheMap {
            map,
            file,
            header,
            reads: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Whether the mapped file still holds every mapped byte. Another program truncating it
    /// (imagefeed only ever renames a new cache over an old one) would make reading the lost
    /// pages fault.
    pub(crate) fn still_whole(&self) -> bool {
        self.file
            .metadata()
            .is_ok_and(|m| m.len() >= self.map.len() as u64)
    }

    /// The bytes of record `i`, or `None` if out of range.
    pub(crate) fn record(&self, i: u64) -> Option<&[u8]> {
        self.map.get(self.span(i)?)
    }

    /// Where record `i` lies in the mapping, if it is in range.
    fn span(&self, i: u64) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(self.header.record_offset(i)?).ok()?;
        let end = start.checked_add(usize::try_from(self.header.record_len()).ok()?)?;
        (end <= self.map.len()).then_some(start..end)
    }

    /// Drops record `i`'s pages from this process's mapping once it has been copied out
    /// (`madvise(DONTNEED)`): the page cache keeps them, and a later read of the record faults
    /// them back in from it. Without this every record read stays resident in the process, and
    /// a cached epoch's RSS grows by the whole cache file (500 MB for c5k's 5,000 samples at
    /// 160x160) although the loader's heap does not. Best effort; nothing for a record out of
    /// range.
    pub(crate) fn release(&self, i: u64) {
        #[cfg(unix)]
        if let Some(span) = self.span(i) {
            // A page fault also maps the neighbouring pages already in the page cache (the
            // kernel's fault-around, 64 kB), parts of records read later or not at all this
            // epoch: every `RELEASE_ALL_EVERY` reads the whole mapping is dropped too, so they
            // stay few. (Measured on c5k's cache: 151 MB of it stayed resident otherwise.)
            let whole = self
                .reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                % RELEASE_ALL_EVERY
                == RELEASE_ALL_EVERY - 1;
            let span = if whole { 0..self.map.len() } else { span };
            // SAFETY: the mapping is a read-only shared mapping of a file that is never
            // modified (see `open`), so after DONTNEED a read of these pages faults in the same
            // bytes from the file. No reference into the range outlives this call's caller's
            // copy: `Cache::read` copies the record out before calling this, and pages another
            // thread is copying a record from (at a shared edge, or anywhere when the whole
            // mapping is dropped) read back the same bytes.
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    span.start,
                    span.len(),
                )
            };
        }
        #[cfg(not(unix))]
        let _ = i;
    }

    pub(crate) fn len_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    /// Asks the kernel to read record `i` into the page cache ahead of use (`madvise(WILLNEED)`:
    /// the mapping is advised random access, so a page fault reads only around itself, one
    /// record at a time). Best effort; nothing for a record out of range.
    pub(crate) fn will_need(&self, i: u64) {
        #[cfg(unix)]
        if let Some(span) = self.span(i) {
            let _ = self
                .map
                .advise_range(memmap2::Advice::WillNeed, span.start, span.len());
        }
        #[cfg(not(unix))]
        let _ = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            height: 4,
            width: 5,
            resize_mode: 0,
            apply_exif: 1,
            dct_scaling: 1,
            decoder: 0,
            decode_flags: 1,
            resize_filter: 0,
            resampler: 1,
            max_pixels: 1000,
            count: 3,
            fingerprint: [7; 16],
        }
    }

    #[test]
    fn header_round_trips_and_detects_changes() {
        let h = header();
        let enc = h.encode();
        assert_eq!(enc.len(), HEADER_LEN as usize);
        assert_eq!(Header::decode(&enc), Ok(h));
        for at in [0, 9, 17, 30, 45, 61, 76] {
            let mut bad = enc.clone();
            bad[at] ^= 1;
            assert!(Header::decode(&bad).is_err(), "flip at {at} not detected");
        }
        assert!(Header::decode(&enc[..50]).is_err());
    }

    /// Found by `fuzz/` (target `cache`): a header with a valid checksum whose height × width
    /// × 3 overflows panicked in `Header::decode` (debug builds) instead of being refused.
    #[test]
    fn issue_6_fuzz_cache_header_shape_overflow() {
        for (height, width) in [
            (u32::MAX, u32::MAX),
            (0xffff_effe, u32::MAX),
            (u32::MAX, 0x6000_0000), // overflows only when multiplied by 3
        ] {
            let mut enc = header().encode();
            enc[16..20].copy_from_slice(&height.to_le_bytes());
            enc[20..24].copy_from_slice(&width.to_le_bytes());
            let wrapped = u64::from(height)
                .wrapping_mul(u64::from(width))
                .wrapping_mul(3);
            enc[52..60]
                .copy_from_slice(&wrapped.wrapping_add(RECORD_HEADER_LEN as u64).to_le_bytes());
            let sum = xxh3_64(&enc[..76]);
            enc[76..84].copy_from_slice(&sum.to_le_bytes());
            assert_eq!(
                Header::decode(&enc),
                Err("record length does not match the sample shape".to_string()),
                "{height}x{width}"
            );
        }
    }

    #[test]
    fn records_round_trip_and_detect_flips() {
        let px: Vec<u8> = (0..60).collect();
        let mut rec = encode_record_header(STATUS_PIXELS, 9, 2, &px).to_vec();
        rec.extend_from_slice(&px);
        match decode_record(&rec, 2, 60) {
            Ok(Record::Pixels { label, pixels }) => assert_eq!((label, pixels), (9, &px[..])),
            other => panic!("{other:?}"),
        }
        for at in [0, 5, 9, 13, 17, 30, 83] {
            let mut bad = rec.clone();
            bad[at] ^= 0x10;
            assert!(
                decode_record(&bad, 2, 60).is_err(),
                "flip at {at} not detected"
            );
        }
        assert!(decode_record(&rec, 1, 60).is_err(), "wrong index accepted");
        let msg = b"x.jpg: truncated";
        let mut rec = encode_record_header(STATUS_FAILED, 1, 0, msg).to_vec();
        rec.extend_from_slice(msg);
        rec.resize(RECORD_HEADER_LEN + 60, 0);
        assert!(matches!(
            decode_record(&rec, 0, 60),
            Ok(Record::Failed {
                message: "x.jpg: truncated",
                ..
            })
        ));
    }
}
