//! Arbitrary bytes as a TFRecord shard of `tf.train.Example`s: indexed as
//! `Source::from_tfrecords` does, then every record read as an epoch does (the two must agree).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::tools::fuzz::index_tfrecord(data);
});
