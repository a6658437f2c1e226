//! imagefeed's development kit, for its command line, benches, tests and examples: not part of
//! imagefeed, and not published.
//!
//! - [`corpus`]: a reproducible, realistic synthetic JPEG corpus made from the photographs in
//!   `testdata/photos/` (`imagefeed corpus DIR --count N` writes one);
//! - [`procinfo`]: this process's memory and threads, read from `/proc`.

pub mod corpus;
pub mod procinfo;

use std::path::{Path, PathBuf};

/// An error of the kit: what failed, and the file it names where there is one.
#[derive(Debug)]
pub struct Error {
    path: Option<PathBuf>,
    message: String,
}

impl Error {
    fn at(path: &Path, e: impl std::fmt::Display) -> Error {
        Error {
            path: Some(path.to_path_buf()),
            message: e.to_string(),
        }
    }

    fn other(e: impl std::fmt::Display) -> Error {
        Error {
            path: None,
            message: e.to_string(),
        }
    }

    /// The file the error names, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}: {}", p.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}
