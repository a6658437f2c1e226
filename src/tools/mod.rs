//! Tools for imagefeed's own command line, benches and fuzz targets, behind the
//! `unstable-tools` feature: the decode floor, the entry points of the fuzz targets and the
//! criterion benches, the shuffle-quality measure and GPU diagnostics, which reach inside the
//! crate. They are not part of imagefeed's API: no semver promise, and a dependent should not
//! turn the feature on. The corpus generator and the process memory readings are in the
//! development kit (`crates/imagefeed-testkit`).

pub mod bench;
pub mod floor;
pub mod fuzz;
pub mod gpu;
pub mod shuffle;

pub use crate::memory_limit::memory_limit_bytes;
