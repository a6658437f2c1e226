//! A cache file being filled (`PATH.partial`): its presence map, the record writes, the check
//! of every record before the commit, and the commit itself (see the module doc of `cache/`
//! for the protocol).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::format::{self, identity, read_at, write_at, Header, Sample, HEADER_LEN};
use super::fs::with_suffix;
use crate::error::Error;

/// A cache file being filled (`PATH.partial`), open for reading and writing, with what this
/// process knows of its presence map. While it lives it holds a shared `flock` on the file, so
/// that a process with other settings can tell a file someone fills from a leftover.
#[derive(Debug)]
pub(crate) struct Filler {
    file: File,
    /// The file's identity when opened.
    pub(super) id: (u64, u64),
    partial: PathBuf,
    header: Header,
    /// A bit a record: present (read from the file's presence map, or written here).
    present: Vec<AtomicU64>,
    /// Records this process wrote.
    pub(super) wrote: AtomicU64,
    /// A write failed: the process goes on without writing (and never commits this file).
    pub(super) abandoned: AtomicBool,
}

/// Bytes of the presence map read at a time.
pub(super) const PRESENCE_CHUNK: usize = 1 << 16;

/// Bytes read at a time when every record is checked before the commit.
const VERIFY_CHUNK: u64 = 8 << 20;

/// What [`Filler::open`] found at `PATH.partial`.
pub(super) enum Found {
    /// A file being filled for this loader, in this boot.
    Filling(Filler),
    /// Nothing there.
    Missing,
    /// A file to replace, and why; with the header it was made with where that is the reason
    /// (another source or other settings).
    Replace(String, Option<Header>),
}

impl Filler {
    fn new(file: File, partial: &Path, header: &Header) -> Result<Filler, Error> {
        let meta = file.metadata().map_err(|e| Error::io(partial, e))?;
        // Shared: every process filling this file holds it; one with other settings takes it
        // exclusively, without waiting, before it replaces the file.
        match fs4::FileExt::try_lock_shared(&file) {
            Ok(()) | Err(fs4::TryLockError::WouldBlock) => {}
            Err(fs4::TryLockError::Error(e)) => {
                log::debug!("cache {}: no shared lock ({e})", partial.display())
            }
        }
        let words = usize::try_from(header.count.div_ceil(64)).unwrap_or(usize::MAX);
        Ok(Filler {
            file,
            id: identity(&meta),
            partial: partial.to_path_buf(),
            header: *header,
            present: (0..words).map(|_| AtomicU64::new(0)).collect(),
            wrote: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Opens `partial` if it is a file being filled for `header` in this boot, or says why not.
    pub(super) fn open(partial: &Path, header: &Header) -> Result<Found, Error> {
        let file = match OpenOptions::new().read(true).write(true).open(partial) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(Error::io(partial, e)),
        };
        let len = file.metadata().map_err(|e| Error::io(partial, e))?.len();
        let mut head = vec![0u8; HEADER_LEN as usize];
        if len < HEADER_LEN || read_at(&file, &mut head, 0).is_err() {
            return Ok(Found::Replace(
                format!("{len} bytes, shorter than a header"),
                None,
            ));
        }
        let (why, theirs) = match Header::decode(&head) {
            Err(why) => (why, None),
            Ok(h) if h != *header => ("made with other settings or another source".into(), Some(h)),
            Ok(_) if format::recorded_boot(&head) != format::boot_stamp() => (
                "filled before the machine last restarted (records may not have reached the disk)"
                    .into(),
                None,
            ),
            // A commit stopped between its footer and its rename leaves the whole length.
            Ok(_) if Some(len) != header.partial_len() && Some(len) != header.file_len() => {
                (format!("{len} bytes, not the length of this cache"), None)
            }
            Ok(_) => return Filler::new(file, partial, header).map(Found::Filling),
        };
        Ok(Found::Replace(why, theirs))
    }

    /// Whether a live process fills `partial` (holds its shared lock). Only asked of a file
    /// made for other settings, before replacing it.
    pub(super) fn in_use(partial: &Path) -> bool {
        let Ok(file) = File::open(partial) else {
            return false;
        };
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => {
                let _ = fs4::FileExt::unlock(&file);
                false
            }
            Err(fs4::TryLockError::WouldBlock) => true,
            Err(fs4::TryLockError::Error(_)) => false,
        }
    }

    /// Creates a new file being filled for `header` under a temporary name and renames it to
    /// `partial`: a file others may still have open is replaced, never truncated.
    pub(super) fn create(partial: &Path, header: &Header) -> Result<Filler, Error> {
        let tmp = with_suffix(partial, &format!(".{}.tmp", std::process::id()));
        let made = (|| {
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&tmp)?;
            // The header first, then sparse until written; the footer goes at the end only on
            // commit.
            write_at(&file, &format::header_page(header), 0)?;
            file.set_len(header.partial_len().unwrap_or(HEADER_LEN))?;
            std::fs::rename(&tmp, partial)?;
            Ok(file)
        })();
        let file = made.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(partial, e)
        })?;
        log::info!(
            "cache {}: filling {} records",
            partial.display(),
            header.count
        );
        Filler::new(file, partial, header)
    }

    fn bit(&self, i: u32) -> (usize, u64) {
        (i as usize / 64, 1u64 << (i % 64))
    }

    fn mark(&self, i: u32) {
        let (w, b) = self.bit(i);
        if let Some(word) = self.present.get(w) {
            word.fetch_or(b, Relaxed);
        }
    }

    /// Marks record `i` absent, in the file first: a record found damaged is absent before it
    /// is written again, so that a crash during the rewrite never leaves it present.
    pub(super) fn clear(&self, i: u32) {
        let _ = write_at(&self.file, &[0], HEADER_LEN + u64::from(i));
        let (w, b) = self.bit(i);
        if let Some(word) = self.present.get(w) {
            word.fetch_and(!b, Relaxed);
        }
    }

    /// Reads the file's presence map into what this process knows.
    pub(super) fn refresh(&self) {
        let mut buf = vec![0u8; PRESENCE_CHUNK];
        let count = self.header.count;
        let mut at = 0u64;
        while at < count {
            let n = (count - at).min(PRESENCE_CHUNK as u64) as usize;
            if read_at(&self.file, &mut buf[..n], HEADER_LEN + at).is_err() {
                return;
            }
            for (k, &byte) in buf[..n].iter().enumerate() {
                if byte == 1 {
                    self.mark((at + k as u64) as u32);
                }
            }
            at += n as u64;
        }
    }

    /// Records known present.
    pub(super) fn present(&self) -> u64 {
        self.present
            .iter()
            .map(|w| u64::from(w.load(Relaxed).count_ones()))
            .sum()
    }

    pub(super) fn all_present(&self) -> bool {
        self.present() == self.header.count
    }

    /// Whether record `i` is present: known here, or its presence byte in the file says so
    /// (another process wrote it since the map was read).
    pub(super) fn is_present(&self, i: u32) -> bool {
        let (w, b) = self.bit(i);
        if self
            .present
            .get(w)
            .is_some_and(|word| word.load(Relaxed) & b != 0)
        {
            return true;
        }
        let mut byte = [0u8];
        let there =
            read_at(&self.file, &mut byte, HEADER_LEN + u64::from(i)).is_ok() && byte[0] == 1;
        if there {
            self.mark(i);
        }
        there
    }

    pub(super) fn read(&self, i: u32, out: &mut [u8]) -> Result<Sample, String> {
        format::read_record(&self.file, &self.header, i, out)
    }

    /// Records a sample's pixels.
    pub(super) fn put_pixels(&self, index: u32, label: u32, pixels: &[u8]) {
        self.put(format::STATUS_PIXELS, index, label, pixels);
    }

    /// Records a sample whose bytes cannot be decoded, with the reason.
    pub(super) fn put_failure(&self, index: u32, label: u32, reason: &str) {
        let max = self.header.sample_len();
        let mut end = reason.len().min(max);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        self.put(
            format::STATUS_FAILED,
            index,
            label,
            &reason.as_bytes()[..end],
        );
    }

    /// Writes a record: payload, then header, then presence byte (see the module doc).
    fn put(&self, status: u8, index: u32, label: u32, payload: &[u8]) {
        if self.abandoned.load(Relaxed) {
            return;
        }
        let Some(at) = self.header.record_offset(u64::from(index)) else {
            return;
        };
        let head = format::encode_record_header(status, label, index, payload);
        let r = write_at(&self.file, payload, at + format::RECORD_HEADER_LEN as u64)
            .and_then(|()| write_at(&self.file, &head, at))
            .and_then(|()| write_at(&self.file, &[1], HEADER_LEN + u64::from(index)));
        match r {
            Ok(()) => {
                self.mark(index);
                self.wrote.fetch_add(1, Relaxed);
            }
            Err(e) => {
                if !self.abandoned.swap(true, Relaxed) {
                    log::warn!(
                        "cache {}: cannot write ({e}); continuing without writing the cache",
                        self.partial.display()
                    );
                }
            }
        }
    }

    /// Reads every record back and checks it (header, checksum, index), a few megabytes at a
    /// time; a record that fails is marked absent, to be decoded and written again. Returns how
    /// many failed. `Err`: the file could not be read.
    pub(super) fn verify_all(&self) -> std::io::Result<u64> {
        let record = self.header.record_len();
        let per_chunk = (VERIFY_CHUNK / record.max(1)).max(1);
        let sample_len = self.header.sample_len();
        let mut buf = Vec::new();
        let mut bad = 0;
        let mut i = 0u64;
        while i < self.header.count {
            let n = per_chunk.min(self.header.count - i);
            let Some(at) = self.header.record_offset(i) else {
                return Err(std::io::Error::other("record offset out of range"));
            };
            buf.resize((n * record) as usize, 0);
            read_at(&self.file, &mut buf, at)?;
            for (k, bytes) in buf.chunks_exact(record as usize).enumerate() {
                let index = (i + k as u64) as u32;
                if let Err(why) = format::decode_record(bytes, index, sample_len) {
                    log::warn!(
                        "cache {}: record {index} fails its check before the commit ({why}); it is decoded again",
                        self.partial.display()
                    );
                    self.clear(index);
                    bad += 1;
                }
            }
            i += n;
        }
        Ok(bad)
    }

    /// Makes the file complete: data to disk, the footer, to disk again, renamed to `path`.
    pub(super) fn commit(&self, partial: &Path, path: &Path) -> Result<(), Error> {
        let io = |e| Error::io(partial, e);
        self.file.sync_data().map_err(io)?;
        let end = self.header.partial_len().unwrap_or(0);
        write_at(&self.file, &self.header.footer(), end).map_err(io)?;
        self.file.sync_all().map_err(io)?;
        std::fs::rename(partial, path).map_err(io)?;
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}
