//! The cache file format, and how records are read and written: with `pread` and `pwrite` on
//! a file descriptor, never through a memory map, so that a file another program truncates or
//! rewrites is an error naming the record, not a `SIGBUS` (see the module doc of `cache`).
//!
//! ```text
//! header (HEADER_LEN = 4096 bytes)
//!   magic "IMGFEED\0" | version u32 | header_len u32 | height u32 | width u32 | channels u32
//!   | dtype u8 (0 = u8) | resize mode u8 | EXIF u8 | DCT scaling u8 | decoder u8
//!   | decode flags u8 (bit 0 extension check, bit 1 accept JPEG warnings)
//!   | resize filter u8 | resampler u8 | max_pixels u64 | count u64 | record_len u64 | source fingerprint [u8; 16]
//!   | header checksum u64 (xxh3 of the bytes before it)
//!   | at 96: boot [u8; 16] (xxh3-128 of the kernel's boot id when the file was created; read
//!     only while the file fills, outside the checksum), zero padding to 4096
//! presence map (presence_len = count rounded up to 4096 bytes)
//!   byte i is 1 once record i is written in full (0: absent)
//! record i (for dataset index i) at HEADER_LEN + presence_len + i * record_len
//!   status u8 (0 absent, 1 pixels, 2 failed sample) | pad 3 | label u32 | index u32
//!   | payload_len u32 | checksum u64 (xxh3 of bytes 0..16 and the payload)
//!   | payload: height*width*3 u8 pixels (for resize mode 3, a random transform's base image:
//!     then 16 more bytes of sizes, see transform/base.rs), or the failure message (UTF-8)
//! footer (FOOTER_LEN = 32 bytes), written last
//!   "IMGFEED-COMPLETE" | count u64 | header checksum u64
//! ```
//!
//! All integers little-endian. A file is complete only with the footer and the exact length
//! `HEADER_LEN + presence_len + count * record_len + FOOTER_LEN`; every offset is computed with
//! checked arithmetic, and every read checks that it got every byte it asked for.

use std::fs::File;
use std::path::Path;

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::error::Error;

pub(crate) const MAGIC: &[u8; 8] = b"IMGFEED\0";
/// 2: the presence map between the header and the records (version 1 had none).
pub(crate) const VERSION: u32 = 2;
pub(crate) const HEADER_LEN: u64 = 4096;
pub(crate) const RECORD_HEADER_LEN: usize = 24;
pub(crate) const FOOTER_MAGIC: &[u8; 16] = b"IMGFEED-COMPLETE";
pub(crate) const FOOTER_LEN: u64 = 32;
/// The presence map is padded to whole pages, so records start page-aligned.
const PAGE: u64 = 4096;
/// Where a file that fills records the machine's boot (see `boot_stamp`).
const BOOT_AT: usize = 96;

/// Bytes after a base record's pixels (a random transform's base image): its full width and
/// height and the size of the fitted image in the record, u32 little-endian each (written and
/// read by `transform/base.rs`).
pub(crate) const BASE_TRAILER: usize = 16;

/// The version of the resize's arithmetic (`transform/resample.rs`), recorded in caches: bump it
/// whenever the same image and settings would give other `u8` samples, so caches of the old samples are rebuilt.
/// (0: caches from before it was recorded, whose samples fast_image_resize made; 1: JPEGs
/// resized as RGB after libjpeg-turbo's upsampling and colour conversion.)
pub(crate) const RESAMPLER_VERSION: u8 = 2;

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
    /// ([`RESAMPLER_VERSION`](RESAMPLER_VERSION)); 0 in caches written
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
            BASE_TRAILER
        } else {
            0
        };
        self.height as usize * self.width as usize * 3 + trailer
    }

    pub(crate) fn record_len(&self) -> u64 {
        (RECORD_HEADER_LEN + self.sample_len()) as u64
    }

    /// Bytes of the presence map: a byte a record, rounded up to whole pages.
    pub(crate) fn presence_len(&self) -> Option<u64> {
        self.count.checked_next_multiple_of(PAGE)
    }

    /// Where the first record starts.
    fn records_start(&self) -> Option<u64> {
        self.presence_len()?.checked_add(HEADER_LEN)
    }

    /// The length of a complete file, if it fits in a u64.
    pub(crate) fn file_len(&self) -> Option<u64> {
        self.count
            .checked_mul(self.record_len())?
            .checked_add(self.records_start()?)?
            .checked_add(FOOTER_LEN)
    }

    /// The length of a file still filling: everything but the footer.
    pub(crate) fn partial_len(&self) -> Option<u64> {
        Some(self.file_len()? - FOOTER_LEN)
    }

    /// Where record `i` starts, if `i` is a record of this file.
    pub(crate) fn record_offset(&self, i: u64) -> Option<u64> {
        if i >= self.count {
            return None;
        }
        i.checked_mul(self.record_len())?
            .checked_add(self.records_start()?)
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
                    BASE_TRAILER as u64
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

/// Checks and decodes record bytes (`RECORD_HEADER_LEN + sample_len`), as [`read_record`]
/// checks what it reads. `Err` says what is wrong, for a `CorruptCache` error.
pub(crate) fn decode_record(bytes: &[u8], index: u32, sample_len: usize) -> Result<Sample, String> {
    if bytes.len() < RECORD_HEADER_LEN + sample_len {
        return Err("record shorter than its length".into());
    }
    let head: &[u8; RECORD_HEADER_LEN] = bytes[..RECORD_HEADER_LEN]
        .try_into()
        .expect("RECORD_HEADER_LEN bytes");
    let (status, label, len) = check_record_header(head, index, sample_len)?;
    check_payload(
        head,
        &bytes[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len],
        index,
        status,
        label,
    )
}

/// A stamp of the machine's current boot: xxh3-128 of `/proc/sys/kernel/random/boot_id`, or
/// where that cannot be read, of the boot time in `/proc/stat` (`btime`). A file still filling
/// records the boot it was created in: after a machine crash, its presence bytes may have
/// reached the disk while the records they mark did not (only the commit's `fsync` orders
/// them), so a file from another boot is started afresh. Where neither can be read (not
/// Linux), the guard is off, and the loader says so once.
pub(crate) fn boot_stamp() -> [u8; 16] {
    static STAMP: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
    *STAMP.get_or_init(|| {
        let id = std::fs::read("/proc/sys/kernel/random/boot_id")
            .ok()
            .filter(|id| !id.is_empty())
            .or_else(|| {
                let stat = std::fs::read_to_string("/proc/stat").ok()?;
                let line = stat.lines().find(|l| l.starts_with("btime "))?;
                Some(line.as_bytes().to_vec())
            });
        match id {
            Some(id) => xxhash_rust::xxh3::xxh3_128(&id).to_le_bytes(),
            None => {
                log::warn!(
                    "imagefeed cannot tell this boot from the last (no /proc/sys/kernel/random/boot_id or /proc/stat): a cache file left filling by a machine crash is not detected; delete PATH.partial after a crash"
                );
                [0; 16]
            }
        }
    })
}

/// The boot stamp recorded in a header page.
pub(crate) fn recorded_boot(head: &[u8]) -> [u8; 16] {
    head.get(BOOT_AT..BOOT_AT + 16)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; 16])
}

/// A header page for a new file that fills: the header and this boot's stamp.
pub(crate) fn header_page(header: &Header) -> Vec<u8> {
    let mut page = header.encode();
    page[BOOT_AT..BOOT_AT + 16].copy_from_slice(&boot_stamp());
    page
}

/// Reads exactly `buf.len()` bytes at `at`; a file that ends first is `UnexpectedEof`.
#[cfg(unix)]
pub(crate) fn read_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

#[cfg(windows)]
pub(crate) fn read_at(file: &File, mut buf: &mut [u8], mut at: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, at)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

/// Writes all of `buf` at `at`.
#[cfg(unix)]
pub(crate) fn write_at(file: &File, buf: &[u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, at)
}

#[cfg(windows)]
pub(crate) fn write_at(file: &File, mut buf: &[u8], mut at: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, buf, at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        at += n as u64;
    }
    Ok(())
}

/// A sample as a record holds it, its pixels copied into the caller's buffer.
#[derive(Debug)]
pub(crate) enum Sample {
    Pixels { label: u32 },
    Failed { label: u32, message: String },
}

/// Reads record `i` of `file` (laid out as `header` says) into `out` (`header.sample_len()`
/// bytes): two `pread`s, the record's header and then its payload straight into `out`, and the
/// checksum over both. `Err` says what is wrong, naming the record: absent (never written),
/// cut short (the file ends inside it: truncated by another program), or failing its checks.
pub(crate) fn read_record(
    file: &File,
    header: &Header,
    i: u32,
    out: &mut [u8],
) -> Result<Sample, String> {
    let at = header
        .record_offset(u64::from(i))
        .ok_or_else(|| format!("record {i} is out of range"))?;
    let cut = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            let len = file
                .metadata()
                .map_or_else(|_| "?".into(), |m| m.len().to_string());
            format!("record {i} is cut short: the file ends at {len} bytes (truncated by another program?)")
        } else {
            format!("record {i} cannot be read: {e}")
        }
    };
    let mut head = [0u8; RECORD_HEADER_LEN];
    read_at(file, &mut head, at).map_err(cut)?;
    let (status, label, len) = check_record_header(&head, i, out.len())?;
    let payload = &mut out[..len];
    read_at(file, payload, at + RECORD_HEADER_LEN as u64).map_err(cut)?;
    let sample = check_payload(&head, payload, i, status, label)?;
    Ok(sample)
}

/// The status, label and payload length of a record header, checked against a sample of
/// `sample_len` bytes and the record's index.
fn check_record_header(
    head: &[u8; RECORD_HEADER_LEN],
    index: u32,
    sample_len: usize,
) -> Result<(u8, u32, usize), String> {
    let status = head[0];
    let label = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as usize;
    if status != STATUS_PIXELS && status != STATUS_FAILED {
        return Err(format!("record {index} has no data (status {status})"));
    }
    if len > sample_len || (status == STATUS_PIXELS && len != sample_len) {
        return Err(format!("record {index} has an invalid length {len}"));
    }
    Ok((status, label, len))
}

/// Checks a payload against its record header (checksum, index) and says what it holds.
fn check_payload(
    head: &[u8; RECORD_HEADER_LEN],
    payload: &[u8],
    index: u32,
    status: u8,
    label: u32,
) -> Result<Sample, String> {
    let sum = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    let mut hasher = Xxh3::new();
    hasher.update(&head[..16]);
    hasher.update(payload);
    if hasher.digest() != sum {
        return Err(format!("record {index} failed its checksum"));
    }
    let stored_index = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if stored_index != index {
        return Err(format!("record {index} holds sample {stored_index}"));
    }
    if status == STATUS_PIXELS {
        Ok(Sample::Pixels { label })
    } else {
        let message = std::str::from_utf8(payload)
            .map_err(|_| format!("record {index}: message is not UTF-8"))?;
        Ok(Sample::Failed {
            label,
            message: message.to_owned(),
        })
    }
}

/// A file's identity (device and inode on Unix): whether a path still names the file a loader
/// opened, or another program (or a rebuild) put another file there.
pub(crate) fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        (meta.len(), 0)
    }
}

/// A complete cache file, open for reading.
#[derive(Debug)]
pub(crate) struct CacheFile {
    file: File,
    pub(crate) header: Header,
    /// The file's identity when opened.
    pub(crate) id: (u64, u64),
    len: u64,
}

impl CacheFile {
    /// Opens a complete cache file and checks its header, length and footer. `Ok(Err(why))`: the
    /// file exists but is unusable (incomplete, another format); `Err`: it cannot be read.
    pub(crate) fn open(path: &Path) -> Result<Result<CacheFile, String>, Error> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let len = meta.len();
        if len < HEADER_LEN + FOOTER_LEN {
            return Ok(Err(format!("{len} bytes: too short to be complete")));
        }
        let mut head = vec![0u8; HEADER_LEN as usize];
        read_at(&file, &mut head, 0).map_err(|e| Error::io(path, e))?;
        let header = match Header::decode(&head) {
            Ok(h) => h,
            Err(why) => return Ok(Err(why)),
        };
        if header.file_len() != Some(len) {
            return Ok(Err(format!(
                "{len} bytes, but {} samples need {} bytes (incomplete or truncated)",
                header.count,
                header
                    .file_len()
                    .map_or_else(|| "too many".into(), |l| l.to_string())
            )));
        }
        let mut footer = [0u8; FOOTER_LEN as usize];
        read_at(&file, &mut footer, len - FOOTER_LEN).map_err(|e| Error::io(path, e))?;
        if footer != header.footer() {
            return Ok(Err(
                "no completion marker (the writer did not finish)".into()
            ));
        }
        Ok(Ok(CacheFile {
            id: identity(&meta),
            file,
            header,
            len,
        }))
    }

    /// Reads record `i` into `out` (see [`read_record`]).
    pub(crate) fn read(&self, i: u32, out: &mut [u8]) -> Result<Sample, String> {
        read_record(&self.file, &self.header, i, out)
    }

    /// Whether the file still has the length it had when opened (another program may have
    /// truncated it: imagefeed only ever renames a new cache over an old one).
    pub(crate) fn still_whole(&self) -> bool {
        self.file.metadata().is_ok_and(|m| m.len() == self.len)
    }

    pub(crate) fn len_bytes(&self) -> u64 {
        self.len
    }

    /// Asks the kernel to read record `i` into the page cache ahead of use
    /// (`posix_fadvise(WILLNEED)`, Linux). Best effort; nothing for a record out of range.
    pub(crate) fn will_need(&self, i: u64) {
        #[cfg(target_os = "linux")]
        if let Some(at) = self.header.record_offset(i) {
            let _ = rustix::fs::fadvise(
                &self.file,
                at,
                std::num::NonZeroU64::new(self.header.record_len()),
                rustix::fs::Advice::WillNeed,
            );
        }
        #[cfg(not(target_os = "linux"))]
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
    fn fuzz_cache_header_shape_overflow() {
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
            Ok(Sample::Pixels { label }) => assert_eq!(label, 9),
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
            Ok(Sample::Failed { message, .. }) if message == "x.jpg: truncated"
        ));
    }
}
