//! Arbitrary bytes as a parquet file in the Hugging Face `datasets` layout: indexed as
//! `Source::from_parquet` does (footer, schema, codecs, labels), then every row's image read as
//! an epoch does.
//!
//! The `parquet` crate panics on some damaged files; imagefeed catches those panics and returns
//! an error (`source/parquet.rs`, `guarded`). libfuzzer-sys's panic hook aborts at every panic,
//! caught or not, so this target prints the panic instead: a panic that nothing catches still
//! ends the run (libfuzzer-sys aborts when one leaves the target), and is reported as a crash.
//! `FUZZ_SHOW_PANICS=1` prints the caught ones.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            if std::env::var_os("FUZZ_SHOW_PANICS").is_some() {
                eprintln!("{info}");
            }
        }));
        // The first panic allocates what the runtime keeps for later ones; made here, once,
        // so that LeakSanitizer does not take it for a leak of the input that first panics.
        let _ = std::panic::catch_unwind(|| panic!("warm-up"));
    });
    let _ = imagefeed::tools::fuzz::index_parquet(data);
});
