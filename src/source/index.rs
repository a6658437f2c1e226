//! The compact index of a source: every sample's path and label, the paths as bytes in one
//! buffer.

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::error::Error;

/// A compact list of `(path, label)` entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileIndex {
    /// What the entries came from (list file, folder, or `<entries>`), for messages.
    pub(crate) origin: PathBuf,
    /// Relative paths are joined to this folder.
    pub(crate) base: PathBuf,
    pub(super) bytes: Vec<u8>,
    pub(super) ends: Vec<u64>,
    pub(super) labels: Vec<u32>,
    /// Class names by label, for class-folder sources.
    pub(crate) class_names: Option<Vec<String>>,
}

impl FileIndex {
    pub(crate) fn with_origin(origin: PathBuf, base: PathBuf) -> Self {
        FileIndex {
            origin,
            base,
            ..Default::default()
        }
    }

    pub(crate) fn push(&mut self, path: &[u8], label: u32) {
        self.bytes.extend_from_slice(path);
        self.ends.push(self.bytes.len() as u64);
        self.labels.push(label);
    }

    pub(crate) fn len(&self) -> usize {
        self.labels.len()
    }

    pub(crate) fn label(&self, i: usize) -> u32 {
        self.labels[i]
    }

    /// The stored (possibly relative) path bytes of entry `i`.
    pub(crate) fn raw_path(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Writes the full path of entry `i` into `out`, reusing its allocation.
    pub(crate) fn path_into(&self, i: usize, out: &mut PathBuf) {
        out.as_mut_os_string().clear();
        out.push(&self.base);
        out.push(bytes_to_os(self.raw_path(i)));
    }

    /// The full path of entry `i`.
    pub(crate) fn path(&self, i: usize) -> PathBuf {
        let mut p = PathBuf::new();
        self.path_into(i, &mut p);
        p
    }

    /// Heap bytes held by the index.
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.bytes.capacity() + self.ends.capacity() * 8 + self.labels.capacity() * 4) as u64
    }

    pub(crate) fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.labels.shrink_to_fit();
    }
}

#[cfg(unix)]
pub(super) fn bytes_to_os(b: &[u8]) -> &OsStr {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(b)
}

#[cfg(not(unix))]
pub(super) fn bytes_to_os(b: &[u8]) -> &OsStr {
    // Paths that are not UTF-8 cannot be represented on this platform's OsStr from bytes; the
    // lossy form then fails to open with an error naming it.
    match std::str::from_utf8(b) {
        Ok(s) => OsStr::new(s),
        Err(_) => OsStr::new("\u{FFFD}"),
    }
}

#[cfg(unix)]
pub(crate) fn os_to_bytes(s: &OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
pub(crate) fn os_to_bytes(s: &OsStr) -> Vec<u8> {
    s.to_string_lossy().into_owned().into_bytes()
}

pub(crate) fn check_count(index: &FileIndex) -> Result<(), Error> {
    if index.len() > u32::MAX as usize {
        return Err(Error::source(
            &index.origin,
            format!(
                "{} samples: at most {} are supported",
                index.len(),
                u32::MAX
            ),
        ));
    }
    Ok(())
}
