//! Arbitrary bytes as a file list (`PATH<TAB>LABEL` / `PATH LABEL` lines).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::tools::fuzz::parse_list(data);
});
