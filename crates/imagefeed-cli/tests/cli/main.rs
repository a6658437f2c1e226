//! The `imagefeed` command line as a user runs it, in one binary: what it adds to the library
//! (its benchmark's report, its options and outputs), and the library's promises kept through
//! it (resume, sharded ranks sharing a cache, shards, manifests, mixtures, fields).

// A failed `unwrap` in a test is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod basics;
mod cache;
// The cache tests' helpers, shared with the library's suite.
#[allow(dead_code)]
#[path = "../../../../tests/it/cache_common.rs"]
mod cache_common;
mod cluster;
// The library's test helpers (corpora, id-coded images, skips), shared with its suite.
#[allow(dead_code)]
#[path = "../../../../tests/it/common.rs"]
mod common;
mod options;

use std::path::PathBuf;

/// The `imagefeed` binary cargo built for these tests.
pub(crate) fn imagefeed_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_imagefeed"))
}
