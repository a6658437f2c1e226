//! Files a strict cropped decode has already read to their end without a warning.
//!
//! A cropping transform decodes only the rows down to its box, but a bit error below the box
//! would then go unnoticed (a desynchronised Huffman decoder shows only where the data ends).
//! So by default (strict, no `accept_jpeg_warnings`) a cropped decode entropy-decodes the rest
//! of the data too, which costs 9–12% of a random-resized-crop epoch (docs/PERFORMANCE.md,
//! "Each file read to its end once"). The result of that check depends only on the file's
//! bytes: this table remembers, for each dataset index, a 32-bit digest of the bytes that last
//! read to their end cleanly, and a later epoch whose bytes have the same digest stops below
//! the box. A damaged file never gets an entry, so it fails in every epoch with every box, and
//! a file replaced by other bytes is read to its end again.
//!
//! Memory: 4 bytes a sample, counted in the budget's index (`Config::verifies_crops`).

use std::sync::atomic::{AtomicU32, Ordering};

/// One digest a dataset index (0: none yet), shared by every decode thread of a loader and
/// kept across its epochs.
#[derive(Debug)]
pub(crate) struct VerifiedFiles {
    digests: Box<[AtomicU32]>,
}

impl VerifiedFiles {
    /// A table for dataset indices `0..samples`.
    pub(crate) fn new(samples: usize) -> Self {
        VerifiedFiles {
            digests: std::iter::repeat_with(|| AtomicU32::new(0))
                .take(samples)
                .collect(),
        }
    }

    /// The bytes the table holds for `samples` samples.
    pub(crate) fn bytes(samples: u64) -> u64 {
        samples.saturating_mul(4)
    }

    /// Whether the sample at `index` last read to its end cleanly with bytes of `digest`.
    pub(crate) fn is_clean(&self, index: u64, digest: u32) -> bool {
        self.slot(index)
            .is_some_and(|d| d.load(Ordering::Relaxed) == digest)
    }

    /// Records that the sample at `index` read to its end cleanly with bytes of `digest`.
    pub(crate) fn record_clean(&self, index: u64, digest: u32) {
        if let Some(d) = self.slot(index) {
            d.store(digest, Ordering::Relaxed);
        }
    }

    /// Forgets the sample at `index` (its bytes no longer decode cleanly without the check).
    pub(crate) fn forget(&self, index: u64) {
        if let Some(d) = self.slot(index) {
            d.store(0, Ordering::Relaxed);
        }
    }

    fn slot(&self, index: u64) -> Option<&AtomicU32> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.digests.get(i))
    }
}

/// A 32-bit digest of `bytes`, never 0: four independent multiply-rotate lanes over 8-byte
/// words (each step a bijection of the lane for a given word, so bytes that differ in one word
/// always leave a lane different), the length and the tail mixed in, then folded: 2.7 µs for
/// 57 kB (21 GB/s, one core of the 2-core benchmark machine, release build), against the 470 µs
/// that file's cropped decode takes. Not meant to resist a file made to collide; it tells a file
/// replaced between epochs from the one that was checked.
pub(crate) fn digest(bytes: &[u8]) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes: [u64; 4] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let (blocks, tail) = bytes.as_chunks::<32>();
    for block in blocks {
        let (words, _) = block.as_chunks::<8>();
        for (lane, word) in lanes.iter_mut().zip(words) {
            *lane = (*lane ^ u64::from_le_bytes(*word))
                .wrapping_mul(K)
                .rotate_left(31);
        }
    }
    let (words, rest) = tail.as_chunks::<8>();
    for (lane, word) in lanes.iter_mut().zip(words) {
        *lane = (*lane ^ u64::from_le_bytes(*word))
            .wrapping_mul(K)
            .rotate_left(31);
    }
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    let mut h = (bytes.len() as u64) ^ u64::from_le_bytes(last).wrapping_mul(K);
    for lane in lanes {
        h = (h ^ fmix(lane)).wrapping_mul(K);
    }
    let h = fmix(h);
    match (h >> 32) as u32 ^ h as u32 {
        0 => 1,
        d => d,
    }
}

/// MurmurHash3's 64-bit finaliser: every input bit affects every output bit.
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_changed_byte_or_length_changes_the_digest() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let d = digest(&base);
        assert_ne!(d, 0);
        for i in 0..base.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = base.clone();
                b[i] ^= bit;
                assert_ne!(digest(&b), d, "flipping bit {bit:#x} of byte {i}");
            }
        }
        for len in 0..base.len() {
            assert_ne!(digest(&base[..len]), d, "the first {len} bytes");
        }
        // Trailing zeros are not the same as a shorter file.
        let mut padded = base.clone();
        padded.push(0);
        assert_ne!(digest(&padded), d);
        assert_eq!(digest(&base), d, "deterministic");
    }

    #[test]
    fn the_table_remembers_a_digest_per_index_and_ignores_indices_it_lacks() {
        let t = VerifiedFiles::new(3);
        assert!(!t.is_clean(1, 77));
        t.record_clean(1, 77);
        assert!(t.is_clean(1, 77));
        assert!(!t.is_clean(1, 78), "other bytes");
        assert!(!t.is_clean(0, 77) && !t.is_clean(2, 77), "other samples");
        t.forget(1);
        assert!(!t.is_clean(1, 77));
        t.record_clean(3, 5);
        assert!(!t.is_clean(3, 5) && !t.is_clean(u64::MAX, 5));
        assert_eq!(VerifiedFiles::bytes(1_281_167), 5_124_668);
    }
}
