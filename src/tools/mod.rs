//! Tools for imagefeed's own command line, benches, examples and fuzz targets, behind the
//! `unstable-tools` feature: the synthetic benchmark corpus, the decode floor, the entry points
//! of the fuzz targets and the criterion benches, GPU diagnostics and process memory readings.
//! They are not part of imagefeed's API: no semver promise, and a dependent should not turn the
//! feature on.

pub mod bench;
pub mod corpus;
pub mod floor;
pub mod fuzz;
pub mod gpu;
pub mod procinfo;
pub mod shuffle;
