//! Errors: every broken file is an error naming it (or a skip that never shifts labels), never
//! a panic or a hang (`decode.rs`, `skips.rs`); bad lists name their line (`lists.rs`); class
//! folders through links are errors, not second labels (`folders.rs`); settings that cannot
//! work fail in `build` naming the setting (`settings.rs`).

mod decode;
mod folders;
mod lists;
mod settings;
mod skips;

use std::path::{Path, PathBuf};

use imagefeed::{
    Device, Dtype, Error, ErrorKind, JpegDecoder, Loader, LoaderBuilder, OnError, Source,
};

use crate::common::{self, id_label, IdCorpus, SplitMix};

/// Loads `path` alone with `OnError::Fail` and checks the error is about that file: `path()`
/// is the file, the message names it and gives a reason, and it is a data error (not a caught
/// panic). Returns the error.
fn expect_file_error(
    path: &Path,
    tweak: impl FnOnce(LoaderBuilder) -> LoaderBuilder + Send + 'static,
) -> Error {
    let e = match common::load_one(path, tweak) {
        Ok(_) => panic!("{} decoded, but it is broken", path.display()),
        Err(e) => e,
    };
    check_names_file(&e, path);
    e
}

fn check_names_file(e: &Error, path: &Path) {
    assert_eq!(e.path(), Some(path), "{e}");
    assert!(e.is_data_error(), "not a data error: {e:?}");
    let msg = e.to_string();
    let shown = path.display().to_string();
    assert!(msg.starts_with(&shown), "{msg}");
    let reason = msg[shown.len()..].trim_start_matches(':').trim();
    assert!(reason.len() >= 5, "no reason given: {msg}");
}

/// Ok (a flip the decoder cannot see), or an error naming the file: never a panic or a hang.
fn decodes_or_names_file(path: &Path, decoder: JpegDecoder) -> bool {
    match common::load_one(path, move |b| b.jpeg_decoder(decoder)) {
        Ok(px) => {
            assert_eq!(px.len(), 160 * 160 * 3);
            true
        }
        Err(e) => {
            check_names_file(&e, path);
            false
        }
    }
}

fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(&needle.to_lowercase())
}
