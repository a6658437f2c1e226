//! The index of a source of one file (or object) a sample: every sample's path and label.
//!
//! Two forms. Built in memory (entries, class folders, a list in object storage): the paths as
//! bytes in one buffer, about `path length + 12` bytes a sample. Over a local list file
//! ([`ListIndex`]): the byte offset of every 64th entry's line and nothing else, 1/4 byte a
//! sample; a sample's path and label are read back from the list (one positioned read of at
//! most 64 lines) when it is loaded. The list stays open, so a list replaced on disk while the
//! loader runs is still read as it was opened.

use std::ffi::OsStr;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The paths and labels of a source's samples.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileIndex {
    /// What the entries came from (list file, folder, or `<entries>`), for messages.
    pub(crate) origin: PathBuf,
    /// Relative paths are joined to this folder.
    pub(crate) base: PathBuf,
    entries: Entries,
    /// Class names by label, for class-folder sources.
    pub(crate) class_names: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
enum Entries {
    InMemory {
        bytes: Vec<u8>,
        ends: Vec<u64>,
        labels: Vec<u32>,
    },
    List(std::sync::Arc<ListIndex>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::InMemory {
            bytes: Vec::new(),
            ends: Vec::new(),
            labels: Vec::new(),
        }
    }
}

/// Entries a checkpoint of a [`ListIndex`] covers.
const EVERY: u64 = 64;

/// The compact index of a local list file: where every 64th entry's line starts.
#[derive(Debug)]
pub(crate) struct ListIndex {
    file: File,
    /// (byte offset, the number of the line before it) of entries 0, 64, 128, …
    checkpoints: Vec<(u64, u64)>,
    len: usize,
    num_classes: u32,
    /// A TSV list's header (its columns' names), read when the list was opened.
    pub(crate) header: Option<std::sync::Arc<super::format::list::lines::Header>>,
}

/// A reader at a byte offset of a file, by positioned reads (the file is shared by threads).
pub(crate) struct At<'a> {
    pub(crate) file: &'a File,
    pub(crate) pos: u64,
}

impl std::io::Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.pos)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_read(self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl ListIndex {
    pub(crate) fn new(
        file: File,
        checkpoints: Vec<(u64, u64)>,
        len: usize,
        num_classes: u32,
    ) -> Self {
        ListIndex {
            file,
            checkpoints,
            len,
            num_classes,
            header: None,
        }
    }

    /// Entry `i` (`i < len`), read from the list `list`: its path bytes into `path` (cleared
    /// first) and its label.
    fn entry(&self, list: &Path, i: usize, path: &mut Vec<u8>) -> Result<u32, Error> {
        self.entry_with(list, i, path, |_| Ok(()))
    }

    /// [`entry`](Self::entry), and `also` called with the entry's line.
    fn entry_with(
        &self,
        list: &Path,
        i: usize,
        path: &mut Vec<u8>,
        also: impl FnOnce(&[u8]) -> Result<(), Error>,
    ) -> Result<u32, Error> {
        let (offset, line) = self.checkpoints[(i as u64 / EVERY) as usize];
        let reader = BufReader::with_capacity(
            8 << 10,
            At {
                file: &self.file,
                pos: offset,
            },
        );
        let mut lines = super::format::list::lines::Lines::new(list, reader, line, offset)?
            .with_header(self.header.clone());
        for _ in 0..i as u64 % EVERY {
            lines.next_entry()?;
        }
        match lines.next_entry()? {
            Some(e) => {
                path.clear();
                path.extend_from_slice(e.path);
                also(e.text)?;
                Ok(e.label)
            }
            None => Err(Error::io(
                list,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("entry {i} is gone: the list was cut short since it was opened"),
                ),
            )),
        }
    }
}

impl FileIndex {
    /// The line of the list file this index was read from that lists entry `i`, for an
    /// error's message: found again in the list (from the nearest checkpoint of a list read
    /// in place, else from its start). `None` for an index not read from a list, or a list
    /// changed since.
    pub(crate) fn line_of(&self, i: usize) -> Option<u64> {
        if i >= self.len() {
            return None;
        }
        let (offset, line, skip) = match &self.entries {
            Entries::List(l) => {
                let (offset, line) = l.checkpoints[(i as u64 / EVERY) as usize];
                (offset, line, i as u64 % EVERY)
            }
            Entries::InMemory { .. } => (0, 0, i as u64),
        };
        let file = File::open(&self.origin).ok()?;
        if !file.metadata().ok()?.is_file() {
            return None; // a folder of class folders
        }
        let reader = BufReader::with_capacity(
            64 << 10,
            At {
                file: &file,
                pos: offset,
            },
        );
        let header = match &self.entries {
            Entries::List(l) => l.header.clone(),
            Entries::InMemory { .. } => None,
        };
        let mut lines = super::format::list::lines::Lines::new(&self.origin, reader, line, offset)
            .ok()?
            .with_header(header);
        for _ in 0..skip {
            lines.next_entry().ok()??;
        }
        let entry = lines.next_entry().ok()??;
        // The line must list the entry's path still (a list rewritten since says nothing).
        (entry.path == &*self.raw_path_of(i)).then_some(entry.line)
    }

    pub(crate) fn with_origin(origin: PathBuf, base: PathBuf) -> Self {
        FileIndex {
            origin,
            base,
            ..Default::default()
        }
    }

    /// An index over a local list file's entries, read back from it (see [`ListIndex`]).
    pub(crate) fn of_list(origin: PathBuf, base: PathBuf, list: ListIndex) -> Self {
        FileIndex {
            origin,
            base,
            entries: Entries::List(std::sync::Arc::new(list)),
            class_names: None,
        }
    }

    /// Appends an entry (an index built in memory).
    pub(crate) fn push(&mut self, path: &[u8], label: u32) {
        if let Entries::InMemory {
            bytes,
            ends,
            labels,
        } = &mut self.entries
        {
            bytes.extend_from_slice(path);
            ends.push(bytes.len() as u64);
            labels.push(label);
        }
    }

    /// Reserves room for `n` bytes of paths (an index built in memory).
    pub(crate) fn reserve_path_bytes(&mut self, n: usize) {
        if let Entries::InMemory { bytes, .. } = &mut self.entries {
            let _ = bytes.try_reserve(n);
        }
    }

    pub(crate) fn len(&self) -> usize {
        match &self.entries {
            Entries::InMemory { labels, .. } => labels.len(),
            Entries::List(l) => l.len,
        }
    }

    /// The label of entry `i`. Over a list file, read from it (0 if it cannot be read: the
    /// sample's read fails and says why).
    pub(crate) fn label(&self, i: usize) -> u32 {
        match &self.entries {
            Entries::InMemory { labels, .. } => labels[i],
            Entries::List(l) => l.entry(&self.origin, i, &mut Vec::new()).unwrap_or(0),
        }
    }

    /// The largest label plus one (0 without entries).
    pub(crate) fn num_classes(&self) -> u32 {
        match &self.entries {
            Entries::InMemory { labels, .. } => {
                labels.iter().max().map_or(0, |m| m.saturating_add(1))
            }
            Entries::List(l) => l.num_classes,
        }
    }

    /// The stored (possibly relative) path bytes of entry `i` (over a list file, read from
    /// it: empty if it cannot be read).
    pub(crate) fn raw_path_of(&self, i: usize) -> std::borrow::Cow<'_, [u8]> {
        match &self.entries {
            Entries::InMemory { bytes, ends, .. } => {
                let start = if i == 0 { 0 } else { ends[i - 1] as usize };
                std::borrow::Cow::Borrowed(&bytes[start..ends[i] as usize])
            }
            Entries::List(l) => {
                let mut out = Vec::new();
                let _ = l.entry(&self.origin, i, &mut out);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// The stored path bytes of entry `i`, owned (tests).
    #[cfg(test)]
    pub(crate) fn raw_path(&self, i: usize) -> Vec<u8> {
        self.raw_path_of(i).into_owned()
    }

    /// Entry `i`: its full path into `out` (reusing its allocation) and its label; over a list
    /// file, an error if the list no longer holds it.
    pub(crate) fn entry_into(&self, i: usize, out: &mut PathBuf) -> Result<u32, Error> {
        out.as_mut_os_string().clear();
        out.push(&self.base);
        match &self.entries {
            Entries::InMemory { .. } => {
                out.push(bytes_to_os(&self.raw_path_of(i)));
                Ok(self.label(i))
            }
            Entries::List(l) => {
                let mut raw = Vec::new();
                let label = l.entry(&self.origin, i, &mut raw)?;
                out.push(bytes_to_os(&raw));
                Ok(label)
            }
        }
    }

    /// Entry `i` as [`entry_into`](Self::entry_into), with its `fields` read from its line (a
    /// TSV list's columns); `name` names the sample in errors.
    pub(crate) fn entry_fields_into(
        &self,
        i: usize,
        out: &mut PathBuf,
        fields: &crate::fields::FieldSpecs,
    ) -> Result<(u32, crate::fields::SampleFields), Error> {
        if fields.is_empty() {
            return Ok((self.entry_into(i, out)?, Default::default()));
        }
        let Entries::List(l) = &self.entries else {
            return Err(self.no_fields());
        };
        let Some(header) = &l.header else {
            return Err(self.no_fields());
        };
        out.as_mut_os_string().clear();
        out.push(&self.base);
        let mut raw = Vec::new();
        let mut found = Default::default();
        let origin = self.origin.clone();
        let label = l.entry_with(&self.origin, i, &mut raw, |line| {
            let name = origin.join(format!("[line of entry {i}]"));
            found = fields.collect(&name, |_, field| {
                Ok(match header.column(field.name()) {
                    Some(k) => {
                        let v = header.value(line, k).unwrap_or_default();
                        match std::str::from_utf8(v) {
                            Ok(_) => crate::fields::FieldData::Text(v.to_vec()),
                            Err(_) => crate::fields::FieldData::Bytes(v.to_vec()),
                        }
                    }
                    None => crate::fields::FieldData::Missing,
                })
            })?;
            Ok(())
        })?;
        out.push(bytes_to_os(&raw));
        Ok((label, found))
    }

    fn no_fields(&self) -> Error {
        Error::config(
            "field",
            format!(
                "{} has no fields: a local file list with a header line naming its columns \
                 (`path<TAB>label<TAB>caption`) has them",
                self.origin.display()
            ),
        )
    }

    /// Checks that a list delivers `fields`: a local TSV list whose header names them.
    pub(crate) fn check_fields(&self, fields: &crate::fields::FieldSpecs) -> Result<(), Error> {
        let Entries::List(l) = &self.entries else {
            return Err(self.no_fields());
        };
        let Some(header) = &l.header else {
            return Err(self.no_fields());
        };
        for name in fields.names() {
            if header.column(name).is_none()
                || [Some(header.path), header.label].contains(&header.column(name))
            {
                return Err(Error::source(
                    &self.origin,
                    format!(
                        "has no column `{name}` for a field (its columns: {})",
                        header.names.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Calls `f` with every entry's number, full path and label, in order: a list file read
    /// once through (an entry it no longer holds ends the walk early, the fingerprint then
    /// differing from the source's).
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, &Path, u32)) {
        let mut path = PathBuf::new();
        match &self.entries {
            Entries::InMemory { .. } => {
                for i in 0..self.len() {
                    if let Ok(label) = self.entry_into(i, &mut path) {
                        f(i, &path, label);
                    }
                }
            }
            Entries::List(l) => {
                let reader = BufReader::with_capacity(
                    64 << 10,
                    At {
                        file: &l.file,
                        pos: 0,
                    },
                );
                let Ok(mut lines) =
                    super::format::list::lines::Lines::new(&self.origin, reader, 0, 0)
                else {
                    return;
                };
                let mut i = 0;
                while let Ok(Some(e)) = lines.next_entry() {
                    if i >= l.len {
                        break;
                    }
                    path.as_mut_os_string().clear();
                    path.push(&self.base);
                    path.push(bytes_to_os(e.path));
                    f(i, &path, e.label);
                    i += 1;
                }
            }
        }
    }

    /// Writes the full path of entry `i` into `out`, reusing its allocation.
    pub(crate) fn path_into(&self, i: usize, out: &mut PathBuf) {
        let _ = self.entry_into(i, out);
    }

    /// The full path of entry `i`.
    pub(crate) fn path(&self, i: usize) -> PathBuf {
        let mut p = PathBuf::new();
        self.path_into(i, &mut p);
        p
    }

    /// Heap bytes held by the index.
    pub(crate) fn heap_bytes(&self) -> u64 {
        match &self.entries {
            Entries::InMemory {
                bytes,
                ends,
                labels,
            } => (bytes.capacity() + ends.capacity() * 8 + labels.capacity() * 4) as u64,
            Entries::List(l) => (l.checkpoints.capacity() * 16) as u64,
        }
    }

    pub(crate) fn shrink(&mut self) {
        if let Entries::InMemory {
            bytes,
            ends,
            labels,
        } = &mut self.entries
        {
            bytes.shrink_to_fit();
            ends.shrink_to_fit();
            labels.shrink_to_fit();
        }
    }
}

#[cfg(unix)]
pub(crate) fn bytes_to_os(b: &[u8]) -> &OsStr {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(b)
}

#[cfg(not(unix))]
pub(crate) fn bytes_to_os(b: &[u8]) -> &OsStr {
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
