//! Arbitrary bytes as a WebDataset tar shard, indexed as `Source::from_tar_shards` does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::tools::fuzz::index_tar(data);
});
