//! Integration tests of imagefeed, in one binary (a promise across ranks and restarts is checked by a model: contract.rs): the pipeline end to end,
//! decode correctness against `testdata/reference/`, error handling on hostile files and
//! lists, and shutdown and robustness. Tests are named after the behaviour they check.

// A failed `unwrap` in a test is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod api;
mod cache;
mod cache_common;
mod cache_faults;
mod common;
mod contract;
mod decode;
mod elastic;
mod errors;
mod fields;
mod formats;
mod fuzz_seeds;
mod manifest;
mod mix;
mod pipeline;
mod prost_example;
mod shard;
mod shutdown;
mod staging;
mod transform;
mod tune;
mod turbo_exact;
mod webdataset;
