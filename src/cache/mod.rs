//! The on-disk cache of decoded, resized `u8` samples: tf.data's `.cache(filename)` after the
//! map, without its pitfalls.
//!
//! - **First epoch**: samples decode as usual, and each is also written (with its label,
//!   dataset index and an xxh3 checksum) at its own record position in `PATH.partial`, under an
//!   exclusive lock on `PATH.lock`. Samples that fail to load are recorded as failures, so a
//!   skipped sample is skipped the same way in every epoch.
//! - **Completion**: when the epoch has visited every sample, the file is flushed, the
//!   completion footer is written and flushed, and the file is renamed to `PATH`. A crash or
//!   kill at any moment leaves either no `PATH` or the previous complete one.
//! - **Partial epochs** (the consumer stops early, or the epoch fails): `PATH.partial` is not a
//!   cache. The next epoch or run that writes the cache **starts again** from an empty
//!   `PATH.partial`; nothing from a partial epoch is ever read.
//! - **Later epochs and runs** map `PATH` read-only (memmap2) and read records at random, so
//!   the per-epoch permutation still applies; normalization happens in the batcher as on the
//!   uncached path, so batches are bit-identical. Pixels come through the page cache: the
//!   loader's own heap stays at its budget, and each record's pages leave the process's
//!   mapping once copied out (`madvise(DONTNEED)`), so its RSS does not grow by the file.
//! - **Stale or unusable caches**: the header records the sample shape, the transform settings
//!   and a fingerprint of the source (every entry's path, size, modification time and label).
//!   A mismatch, a missing footer or a wrong length makes the loader log one line saying why and
//!   rebuild. A record failing its checksum is [`ErrorKind::CorruptCache`] naming the file and
//!   the record ([`CachePolicy::Fail`]), or makes the loader drop the cache, decode that sample
//!   from the source and rebuild the cache in the next epoch ([`CachePolicy::Rebuild`]).
//! - **Several processes**: readers share a complete cache freely. Only the holder of the
//!   lock writes; another process that finds the lock taken reads uncached for that epoch.
//! - **What it replaces**: only a cache of its own. `PATH` or `PATH.partial` holding anything
//!   else (a file without the cache header, a directory, a device, a FIFO) makes `build()` fail
//!   naming it; a symbolic link at `PATH` is followed.
//! - **Space**: before writing, the free space of the cache's file system is checked against
//!   the final size (`count × (76,800 + 24)` bytes at 160×160 plus 4 kB).
//!
//! The policy lives here: [`Cache::begin_epoch`] chooses how each epoch uses the cache (read
//! a complete one, write a new one, or neither), [`Cache::lookup`] answers a decode thread
//! for one sample (hit, recorded failure, or a corrupt record: fail or rebuild), and
//! [`EpochCache::record`] writes a decoded sample. The pipeline only calls them.
//!
//! [`ErrorKind::CorruptCache`]: crate::ErrorKind::CorruptCache

pub(crate) mod format;

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::Xxh3;

use crate::config::{CachePolicy, Config};
use crate::error::{DecodeFailure, Error};
use crate::source::Source;
use crate::stats::StatsCell;
use format::{CacheMap, Header, Record, FOOTER_LEN, HEADER_LEN, RECORD_HEADER_LEN};

/// The cache of one loader.
#[derive(Debug)]
pub(crate) struct Cache {
    path: PathBuf,
    partial: PathBuf,
    lock_path: PathBuf,
    header: Header,
    policy: CachePolicy,
    state: Mutex<Option<Arc<CacheMap>>>,
    free_space_override: Option<u64>,
    /// The last "will be rebuilt" reason logged: each epoch looks again, but says it once.
    last_stale: Mutex<Option<String>>,
}

/// How one epoch uses the cache.
#[derive(Debug, Clone)]
pub(crate) enum EpochCache {
    Off,
    Read(Arc<CacheMap>),
    Write(Arc<Writer>),
}

impl EpochCache {
    /// Records a decoded sample (its pixels in `buf`, or its data error) in a cache this epoch
    /// writes; nothing otherwise.
    pub(crate) fn record(&self, index: u32, label: u32, buf: &[u8], result: &Result<(), Error>) {
        if let EpochCache::Write(writer) = self {
            match result {
                Ok(()) => writer.put_pixels(index, label, buf),
                Err(e) if e.is_data_error() => writer.put_failure(index, label, &e.reason()),
                Err(_) => {}
            }
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `path`, or where it points if it is a symbolic link (so that writing replaces the target,
/// not the link).
fn resolve_link(path: &Path) -> Result<PathBuf, Error> {
    let mut at = path.to_path_buf();
    // A link to a cache not written yet does not canonicalize: follow it by hand (a few
    // levels, like the kernel's loop limit).
    for _ in 0..8 {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&at).map_err(|e| Error::io(&at, e))?;
                at = match at.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(Error::config(
        "cache",
        format!("{}: too many levels of symbolic links", path.display()),
    ))
}

/// Refuses to use `path` (the cache or its `.partial` file) if it holds anything but an
/// imagefeed cache: writing the cache replaces that file, and the loader never replaces what
/// the user keeps there. Missing and empty files are fine.
fn check_replaceable(path: &Path) -> Result<(), Error> {
    let refuse = |found: String| {
        Err(Error::config(
            "cache",
            format!(
                "{} {found}, not an imagefeed cache: the loader will not replace it (choose another cache path, or move it away)",
                path.display()
            ),
        ))
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    };
    if meta.is_dir() {
        return refuse("is a directory".into());
    }
    if !meta.is_file() {
        return refuse("is a device, FIFO or socket".into());
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let mut head = Vec::with_capacity(8);
    File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 8), &mut head))
        .map_err(|e| Error::io(path, e))?;
    // A stopped writer leaves an empty `.partial` or one that starts with the header (it is
    // written before the file is sized), so a file of zeros is somebody else's (a disk image).
    if head == format::MAGIC {
        return Ok(());
    }
    refuse(format!(
        "holds {} bytes that do not start with imagefeed's cache header",
        meta.len()
    ))
}

/// Fingerprint of the source: every entry's path, size, modification time and label.
fn fingerprint(source: &Source) -> [u8; 16] {
    let mut h = Xxh3::new();
    source.fingerprint(&mut h, true);
    h.digest128().to_le_bytes()
}

impl Cache {
    /// Prepares the cache at `path` for a loader: computes the source fingerprint (one `stat`
    /// per sample), opens a matching complete cache if there is one, and otherwise checks that
    /// a new one fits on its file system.
    pub(crate) fn new(path: &Path, cfg: &Config, source: &Source) -> Result<Cache, Error> {
        // Writing renames PATH.partial over PATH: follow a symbolic link to where the cache
        // really lives, and refuse to replace anything that is not a cache of ours.
        let given = path;
        // An empty path would write `.partial` and `.lock` into the current folder; one that
        // ends in a separator names a folder, not the cache file in it.
        let text = path.as_os_str();
        if text.is_empty() {
            return Err(Error::config("cache", "the cache path is empty"));
        }
        if text
            .as_encoded_bytes()
            .last()
            .is_some_and(|b| std::path::is_separator(char::from(*b)))
            || path.file_name().is_none()
        {
            return Err(Error::config(
                "cache",
                format!(
                    "{} names a folder, not a cache file: give the file's path (for example {})",
                    path.display(),
                    path.join("imagefeed.cache").display()
                ),
            ));
        }
        let path = &resolve_link(path)?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            let via = if path == given {
                String::new()
            } else {
                format!(" (where the link {} points)", given.display())
            };
            return Err(Error::config(
                "cache",
                format!(
                    "the folder of the cache {}{via} does not exist or is not a folder: create {} or choose another cache path",
                    path.display(),
                    dir.display()
                ),
            ));
        }
        let partial = with_suffix(path, ".partial");
        check_replaceable(path)?;
        check_replaceable(&partial)?;
        // A random transform records base images of `side`×`side` (see transform/base.rs); the
        // other transforms record the sample before its flip.
        let (height, width) = match cfg.cache_base_side() {
            Some(side) => (side, side),
            None => (cfg.height, cfg.width),
        };
        let key = cfg.transform.cache_key();
        let mut fingerprint = fingerprint(source);
        // The crop fraction of a centre crop (0 for the other transforms, so caches of the
        // fits keep the fingerprint they always had).
        for (f, k) in fingerprint.iter_mut().zip(&key[1..9]) {
            *f ^= k;
        }
        let header = Header {
            height,
            width,
            resize_mode: key[0],
            apply_exif: u8::from(cfg.apply_exif),
            dct_scaling: u8::from(cfg.dct_scaling),
            decoder: cfg.jpeg_decoder as u8,
            // Bit 0: check_extension; bit 1: accept_jpeg_warnings (which decides which
            // samples are recorded as failures). Caches written before bit 1 read as 0 or 1.
            decode_flags: u8::from(cfg.check_extension) | (u8::from(cfg.accept_jpeg_warnings) << 1),
            resize_filter: cfg.resize_filter as u8,
            resampler: crate::transform::RESAMPLER_VERSION,
            max_pixels: cfg.max_pixels,
            count: source.len() as u64,
            fingerprint,
        };
        let cache = Cache {
            path: path.to_path_buf(),
            partial,
            lock_path: with_suffix(path, ".lock"),
            header,
            policy: cfg.cache_policy,
            state: Mutex::new(None),
            free_space_override: cfg.cache_free_space_override,
            last_stale: Mutex::new(None),
        };
        if cache.open_complete()?.is_none() {
            cache.check_space()?;
        }
        Ok(cache)
    }

    /// Opens `PATH` if it is a complete cache matching this loader; logs why not otherwise.
    fn open_complete(&self) -> Result<Option<Arc<CacheMap>>, Error> {
        {
            let mut state = self.lock_state();
            match state.as_ref() {
                Some(map) if map.still_whole() => return Ok(Some(map.clone())),
                Some(_) => {
                    log::warn!(
                        "cache {} shrank while in use (another program truncated it); it is read again",
                        self.path.display()
                    );
                    *state = None;
                }
                None => {}
            }
        }
        if !self.path.exists() {
            return Ok(None);
        }
        let why = match CacheMap::open(&self.path)? {
            Ok(map) if map.header == self.header => {
                let map = Arc::new(map);
                *self.lock_state() = Some(map.clone());
                return Ok(Some(map));
            }
            Ok(map) => self.stale_reason(&map.header),
            Err(why) => format!("unusable: {why}"),
        };
        let mut last = self.last_stale.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(why.as_str()) {
            log::warn!("cache {} will be rebuilt: {why}", self.path.display());
            *last = Some(why);
        }
        Ok(None)
    }

    fn stale_reason(&self, found: &Header) -> String {
        let want = &self.header;
        if found.resize_mode != want.resize_mode {
            "stale: made with another transform".into()
        } else if found.fingerprint != want.fingerprint || found.count != want.count {
            "stale: the source changed (a file's size, modification time or label, or the list), or the centre crop's fraction did"
                .into()
        } else if (found.height, found.width) != (want.height, want.width) {
            format!(
                "stale: made for {}x{} samples, the loader wants {}x{}",
                found.height, found.width, want.height, want.width
            )
        } else if found.resampler != want.resampler {
            format!(
                "stale: made by resize code version {}, this build's is {} (its samples differ slightly)",
                found.resampler, want.resampler
            )
        } else {
            "stale: made with other transform settings (resize mode or filter, EXIF, decoder, extension check, accept_jpeg_warnings, max_pixels)"
                .into()
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, Option<Arc<CacheMap>>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The final size of the cache file.
    pub(crate) fn final_len(&self) -> u64 {
        self.header.file_len().unwrap_or(u64::MAX)
    }

    fn check_space(&self) -> Result<(), Error> {
        let need = self.final_len();
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let free = match self.free_space_override {
            Some(f) => f,
            None => fs4::available_space(dir).map_err(|e| Error::io(dir, e))?,
        };
        // An existing partial file of ours will be overwritten: its space counts as free.
        let reusable = std::fs::metadata(&self.partial).map_or(0, |m| m.len());
        if need > free.saturating_add(reusable) {
            return Err(Error::config(
                "cache",
                format!(
                    "the cache {} needs {:.2} GB ({} samples of {} bytes) but its file system has {:.2} GB free; free space, choose another path, or use a smaller image size",
                    self.path.display(),
                    need as f64 / 1e9,
                    self.header.count,
                    self.header.record_len(),
                    free as f64 / 1e9
                ),
            ));
        }
        Ok(())
    }

    /// Decides how the next epoch uses the cache.
    pub(crate) fn begin_epoch(&self) -> Result<EpochCache, Error> {
        if let Some(map) = self.open_complete()? {
            return Ok(EpochCache::Read(map));
        }
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .map_err(|e| Error::io(&self.lock_path, e))?;
        match fs4::FileExt::try_lock(&lock) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                log::warn!(
                    "cache {}: another process is writing it; this epoch reads uncached",
                    self.path.display()
                );
                return Ok(EpochCache::Off);
            }
            Err(fs4::TryLockError::Error(e)) => return Err(Error::io(&self.lock_path, e)),
        }
        // Another process may have finished the cache while we waited for the lock.
        if let Some(map) = self.open_complete()? {
            return Ok(EpochCache::Read(map));
        }
        self.check_space()?;
        let writer = Writer::create(&self.partial, &self.path, self.header, lock)?;
        Ok(EpochCache::Write(Arc::new(writer)))
    }

    /// Called when an epoch that wrote the cache has visited every sample: makes it complete.
    pub(crate) fn commit(&self, writer: &Writer) -> Result<(), Error> {
        if writer.abandoned.load(Relaxed) {
            return Ok(());
        }
        let written = writer.written.load(Relaxed);
        if written != self.header.count {
            log::warn!(
                "cache {}: {written} of {} samples written; not completing it",
                self.path.display(),
                self.header.count
            );
            return Ok(());
        }
        writer.commit()?;
        let _ = self.open_complete()?;
        Ok(())
    }

    /// Drops a cache found corrupt (policy `Rebuild`): later epochs rebuild it.
    fn invalidate(&self, why: &str) {
        let mut state = self.lock_state();
        if state.take().is_some() {
            log::warn!(
                "cache {} is corrupt ({why}); it will be rebuilt",
                self.path.display()
            );
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn policy(&self) -> CachePolicy {
        self.policy
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the complete cache file, if there is one.
    pub(crate) fn size_on_disk(&self) -> Option<u64> {
        self.lock_state().as_ref().map(|m| m.len_bytes())
    }

    /// The cache's answer for sample `index` (whose label the source says is `expected`) in an
    /// epoch that reads it (`mode`): `Some` with the pixels written into `buf` (a hit), with
    /// the failure recorded for the sample, or, for a corrupt record under
    /// [`CachePolicy::Fail`], an error naming the cache file. `None` when the sample must be
    /// decoded: the epoch does not read the cache, or the record was corrupt under
    /// [`CachePolicy::Rebuild`], which drops the cache so that a later epoch rebuilds it.
    pub(crate) fn lookup(
        &self,
        mode: &EpochCache,
        index: u32,
        expected: u32,
        path: &Path,
        buf: &mut [u8],
        stats: &StatsCell,
    ) -> Option<Result<(), Error>> {
        let EpochCache::Read(map) = mode else {
            return None;
        };
        let read = Cache::read(map, index, buf).and_then(|sample| match sample {
            CachedSample::Pixels { label } | CachedSample::Failed { label, .. }
                if label != expected =>
            {
                Err(format!(
                    "record {index} has label {label}, the source says {expected}"
                ))
            }
            other => Ok(other),
        });
        match read {
            Ok(CachedSample::Pixels { .. }) => {
                stats.cache_hits.fetch_add(1, Relaxed);
                Some(Ok(()))
            }
            Ok(CachedSample::Failed { message, .. }) => {
                stats.cache_hits.fetch_add(1, Relaxed);
                Some(Err(Error::decode(path, DecodeFailure(message))))
            }
            Err(why) => match self.policy() {
                CachePolicy::Rebuild => {
                    self.invalidate(&why);
                    None
                }
                _ => Some(Err(Error::corrupt_cache(
                    self.path(),
                    format!("{why} (sample {})", path.display()),
                ))),
            },
        }
    }

    /// Reads sample `index` from a complete cache into `out`.
    fn read(map: &CacheMap, index: u32, out: &mut [u8]) -> Result<CachedSample, String> {
        let bytes = map
            .record(u64::from(index))
            .ok_or_else(|| format!("record {index} is out of range"))?;
        let sample = match format::decode_record(bytes, index, out.len())? {
            Record::Pixels { label, pixels } => {
                out.copy_from_slice(pixels);
                CachedSample::Pixels { label }
            }
            Record::Failed { label, message } => CachedSample::Failed {
                label,
                message: message.to_owned(),
            },
        };
        // Copied out: the mapped pages need not stay in the process (see `CacheMap::release`).
        map.release(u64::from(index));
        Ok(sample)
    }
}

/// A sample as the cache recorded it.
#[derive(Debug)]
enum CachedSample {
    Pixels { label: u32 },
    Failed { label: u32, message: String },
}

/// Writes records into `PATH.partial` while holding the cache lock.
#[derive(Debug)]
pub(crate) struct Writer {
    file: File,
    _lock: File,
    partial: PathBuf,
    path: PathBuf,
    header: Header,
    written: AtomicU64,
    abandoned: AtomicBool,
}

impl Writer {
    fn create(partial: &Path, path: &Path, header: Header, lock: File) -> Result<Writer, Error> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(partial)
            .map_err(|e| Error::io(partial, e))?;
        // The header first, so a writer stopped at any point leaves an empty file or one that
        // starts with it (never a file of zeros, which could be anybody's); then sparse until
        // written; the footer goes at the end only on commit.
        write_at(&file, &header.encode(), 0).map_err(|e| Error::io(partial, e))?;
        file.set_len(header.file_len().unwrap_or(0) - FOOTER_LEN)
            .map_err(|e| Error::io(partial, e))?;
        log::info!("cache {}: writing {} samples", path.display(), header.count);
        Ok(Writer {
            file,
            _lock: lock,
            partial: partial.to_path_buf(),
            path: path.to_path_buf(),
            header,
            written: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Records a sample's pixels.
    pub(crate) fn put_pixels(&self, index: u32, label: u32, pixels: &[u8]) {
        self.put(format::STATUS_PIXELS, index, label, pixels);
    }

    /// Records a sample that failed to load, with the reason.
    pub(crate) fn put_failure(&self, index: u32, label: u32, reason: &str) {
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

    fn put(&self, status: u8, index: u32, label: u32, payload: &[u8]) {
        if self.abandoned.load(Relaxed) {
            return;
        }
        let Some(at) = self.header.record_offset(u64::from(index)) else {
            return;
        };
        let head = format::encode_record_header(status, label, index, payload);
        let r = write_at(&self.file, &head, at)
            .and_then(|()| write_at(&self.file, payload, at + RECORD_HEADER_LEN as u64));
        match r {
            Ok(()) => {
                self.written.fetch_add(1, Relaxed);
            }
            Err(e) => {
                if !self.abandoned.swap(true, Relaxed) {
                    log::warn!(
                        "cache {}: cannot write ({e}); continuing without the cache",
                        self.partial.display()
                    );
                }
            }
        }
    }

    fn commit(&self) -> Result<(), Error> {
        let io = |e| Error::io(&self.partial, e);
        self.file.sync_data().map_err(io)?;
        let end = self.header.file_len().unwrap_or(0) - FOOTER_LEN;
        write_at(&self.file, &self.header.footer(), end).map_err(io)?;
        self.file.sync_all().map_err(io)?;
        std::fs::rename(&self.partial, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        log::info!(
            "cache {} complete: {} samples, {:.1} MB",
            self.path.display(),
            self.header.count,
            (HEADER_LEN + self.header.count * self.header.record_len()) as f64 / 1e6
        );
        Ok(())
    }
}

#[cfg(unix)]
fn write_at(file: &File, buf: &[u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, at)
}

#[cfg(windows)]
fn write_at(file: &File, mut buf: &[u8], mut at: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, buf, at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        at += n as u64;
    }
    Ok(())
}
