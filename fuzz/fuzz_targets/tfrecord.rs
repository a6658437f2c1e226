//! Arbitrary bytes as a TFRecord shard of `tf.train.Example`s: indexed as
//! `Source::from_tfrecords` does, then every record read as an epoch does (the two must agree).
//! Then each record the bytes frame, whatever its CRCs say, walked as an `Example` and decoded
//! by prost (tests/it/prost_example.rs): where prost decodes it, the walker must find the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/it/prost_example.rs"]
mod prost_example;

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::tools::fuzz::index_tfrecord(data);
    // The framing: an 8-byte length, its 4-byte CRC, the payload, the payload's CRC.
    let mut at = 0usize;
    while let Some(head) = data.get(at..at + 12) {
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let start = at + 12;
        let end = usize::try_from(len)
            .ok()
            .and_then(|n| start.checked_add(n))
            .map_or(data.len(), |e| e.min(data.len()));
        prost_example::compare(&data[start..end]);
        at = end + 4;
    }
});
