//! Arbitrary bytes as a file list (`PATH<TAB>LABEL` / `PATH LABEL` lines).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = imagefeed::fuzzing::parse_list(data);
});
