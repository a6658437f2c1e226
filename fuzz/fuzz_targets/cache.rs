//! Arbitrary bytes as a cache file: header, then every record it claims.
//!
//! Every input is read twice: as it is, and with its checksums recomputed (the header's xxh3,
//! the record length field, and each claimed record's xxh3), so that mutations get past the
//! checksums into the code behind them. The layout mirrors `src/cache/format.rs` (version 2:
//! a presence map of `count` bytes, rounded up to 4096, between the header and the records; a
//! base-image record, resize mode 3, holds 16 bytes of sizes after its pixels).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

const HEADER_LEN: usize = 4096;
const HEADER_BODY: usize = 76;
const RECORD_HEADER_LEN: usize = 24;
const PAGE: u64 = 4096;
/// The resize mode of a cache of base images, and the sizes each of its records ends with.
const BASE_MODE: u8 = 3;
const BASE_TRAILER: u64 = 16;

fn u32_at(b: &[u8], p: usize) -> u32 {
    u32::from_le_bytes(b[p..p + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], p: usize) -> u64 {
    u64::from_le_bytes(b[p..p + 8].try_into().unwrap())
}

/// Rewrites the record length (from height × width, wrapping as a release build would) and
/// every checksum so that they match the bytes.
fn fix_checksums(b: &mut [u8]) {
    if b.len() < HEADER_BODY + 8 {
        return;
    }
    let trailer = if b[29] == BASE_MODE { BASE_TRAILER } else { 0 };
    let sample_len = u64::from(u32_at(b, 16))
        .wrapping_mul(u64::from(u32_at(b, 20)))
        .wrapping_mul(3)
        .wrapping_add(trailer);
    let record_len = sample_len.wrapping_add(RECORD_HEADER_LEN as u64);
    b[52..60].copy_from_slice(&record_len.to_le_bytes());
    let sum = xxh3_64(&b[..HEADER_BODY]);
    b[HEADER_BODY..HEADER_BODY + 8].copy_from_slice(&sum.to_le_bytes());

    let claimed = u64_at(b, 44);
    let Some(records_start) = claimed
        .checked_next_multiple_of(PAGE)
        .and_then(|p| p.checked_add(HEADER_LEN as u64))
    else {
        return;
    };
    for i in 0..claimed.min(1000) {
        let Some(start) = i
            .checked_mul(record_len)
            .and_then(|o| o.checked_add(records_start))
            .and_then(|s| usize::try_from(s).ok())
        else {
            return;
        };
        if start
            .checked_add(RECORD_HEADER_LEN)
            .is_none_or(|e| e > b.len())
        {
            return;
        }
        let len = u32_at(b, start + 12) as usize;
        let payload_end = (start + RECORD_HEADER_LEN).saturating_add(len).min(b.len());
        let mut hasher = Xxh3::new();
        hasher.update(&b[start..start + 16]);
        hasher.update(&b[start + RECORD_HEADER_LEN..payload_end]);
        b[start + 16..start + 24].copy_from_slice(&hasher.digest().to_le_bytes());
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::tools::fuzz::read_cache(data);
    let mut fixed = data.to_vec();
    fix_checksums(&mut fixed);
    let _ = imagefeed::tools::fuzz::read_cache(&fixed);
});
