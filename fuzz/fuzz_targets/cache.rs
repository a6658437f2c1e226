//! Arbitrary bytes as a cache file: header, then every record it claims.
//!
//! Every input is read twice: as it is, and with its checksums recomputed (the header's xxh3,
//! the record length field, and each claimed record's xxh3), so that mutations get past the
//! checksums into the code behind them. The layout mirrors `src/cache/format.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

const HEADER_LEN: usize = 4096;
const HEADER_BODY: usize = 76;
const RECORD_HEADER_LEN: usize = 24;

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
    let sample_len = u64::from(u32_at(b, 16))
        .wrapping_mul(u64::from(u32_at(b, 20)))
        .wrapping_mul(3);
    let record_len = sample_len.wrapping_add(RECORD_HEADER_LEN as u64);
    b[52..60].copy_from_slice(&record_len.to_le_bytes());
    let sum = xxh3_64(&b[..HEADER_BODY]);
    b[HEADER_BODY..HEADER_BODY + 8].copy_from_slice(&sum.to_le_bytes());

    let count = u64_at(b, 44).min(1000);
    for i in 0..count {
        let Some(start) = i
            .checked_mul(record_len)
            .and_then(|o| o.checked_add(HEADER_LEN as u64))
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
