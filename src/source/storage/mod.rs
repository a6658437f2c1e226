//! Where one file of a container source (a parquet file, a TFRecord shard) is: a local path,
//! or an object in a store (with `remote`). Its readers open a byte range of it as a stream;
//! an object is read with ranged requests, never downloaded whole ahead of use.

#[cfg(feature = "remote")]
pub(crate) mod remote;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;

/// A container file's place.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// A local file.
    Local(PathBuf),
    /// Bytes in memory (the fuzz targets').
    #[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))]
    Memory(Arc<[u8]>),
    /// Object `key` of `store`.
    #[cfg(feature = "remote")]
    Remote {
        store: Arc<crate::source::storage::remote::Store>,
        key: String,
    },
}

/// A container file to index: its place, its name in messages (the path, or the object's
/// URL), its size and its modification time (nanoseconds since the Unix epoch).
#[derive(Debug, Clone)]
pub(crate) struct Located {
    pub(crate) place: Place,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    pub(crate) mtime: u128,
}

impl Located {
    /// A local file, which must be a regular file (`what` names the kind expected).
    pub(crate) fn local(path: &Path, what: &str) -> Result<Located, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::io(
                path,
                std::io::Error::other(format!("is not a regular file (expected {what})")),
            ));
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Ok(Located {
            place: Place::Local(path.to_path_buf()),
            path: path.to_path_buf(),
            size: meta.len(),
            mtime,
        })
    }

    /// Bytes in memory, named `name`.
    #[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))]
    pub(crate) fn memory(name: &str, bytes: &[u8]) -> Located {
        Located {
            place: Place::Memory(bytes.into()),
            path: PathBuf::from(name),
            size: bytes.len() as u64,
            mtime: 0,
        }
    }

    /// Object `key` of `store`, as listed.
    #[cfg(feature = "remote")]
    pub(crate) fn object(
        store: &Arc<crate::source::storage::remote::Store>,
        key: String,
        size: u64,
        mtime: i64,
    ) -> Located {
        Located {
            path: PathBuf::from(store.url_of(&key)),
            place: Place::Remote {
                store: store.clone(),
                key,
            },
            size,
            mtime: u128::try_from(mtime).unwrap_or(0),
        }
    }

    /// An error naming the file if a local file's size or modification time is no longer what
    /// opening recorded (it was rewritten since): its samples would no longer be the ones the
    /// source was opened with. Nothing to check for bytes in memory; an object's size is
    /// checked by the ranged requests that read it.
    pub(crate) fn check_unchanged(&self) -> Result<(), Error> {
        let Place::Local(path) = &self.place else {
            return Ok(());
        };
        let now = Located::local(path, "the file opened")?;
        if (now.size, now.mtime) == (self.size, self.mtime) {
            return Ok(());
        }
        Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the file is not what was indexed: it changed since the source was opened ({} bytes, where {} were recorded, or another modification time); open the source again",
                    now.size, self.size
                ),
            ),
        ))
    }

    /// Bytes `start..end` as one stream (for an object: one request, streamed).
    pub(crate) fn open(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send>, Error> {
        match &self.place {
            Place::Local(path) => {
                let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
                if start > 0 {
                    file.seek(SeekFrom::Start(start))
                        .map_err(|e| Error::io(path, e))?;
                }
                Ok(Box::new(file.take(end.saturating_sub(start))))
            }
            Place::Memory(bytes) => {
                let len = bytes.len() as u64;
                let mut cursor = std::io::Cursor::new(bytes.clone());
                cursor.set_position(start.min(len));
                Ok(Box::new(cursor.take(end.min(len).saturating_sub(start))))
            }
            #[cfg(feature = "remote")]
            Place::Remote { store, key } => {
                if start >= end {
                    return Ok(Box::new(std::io::empty()));
                }
                Ok(Box::new(store.range_reader(key, start, end)?))
            }
        }
    }

    /// The first `n` bytes (fewer in a shorter file).
    pub(crate) fn head(&self, n: u64) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.open(0, n.min(self.size))?
            .read_to_end(&mut out)
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(out)
    }
}

/// A new temporary file with no name (removed as soon as it is created, on Unix), in the
/// system's temporary folder (`TMPDIR`): its space is given back when it is closed, however
/// the process ends.
pub(crate) fn unnamed_temp_file() -> std::io::Result<std::fs::File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    for _ in 0..100 {
        let path = dir.join(format!(
            "imagefeed-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                #[cfg(unix)]
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary file name"))
}

/// Refuses a path that is not a regular file before it is opened: opening a FIFO blocks
/// until a writer comes, and a device such as `/dev/zero` never ends. The one check for
/// lists, sample files and cached-epoch rereads.
pub(crate) fn regular_file(path: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "is a directory, not a file"
    } else {
        "is not a regular file (a device, FIFO or socket)"
    };
    Err(Error::io(path, std::io::Error::other(what)))
}
