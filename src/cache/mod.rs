//! The on-disk cache of decoded, resized `u8` samples: tf.data's `.cache(filename)` after the
//! map, filled by whichever processes decode the samples, and shared by the ranks of a node.
//!
//! ## Files
//!
//! - `PATH.partial`: the cache while it fills. One file, each sample's record at its dataset
//!   index's offset, and a presence map (a byte a record) after the header (`format.rs`).
//! - `PATH`: the complete cache, renamed from `PATH.partial` once every record is present.
//! - `PATH.lock`: held (`flock`, exclusive) only while a process creates or replaces
//!   `PATH.partial` (others wait for it), or commits it (others that find it taken go on: the
//!   holder is completing the file they fill).
//!
//! ## Filling: any process, any epoch
//!
//! - An epoch that finds no complete cache **fills**: it opens `PATH.partial` (creating it if
//!   missing) and reads the presence map. A present record is read instead of decoding the
//!   sample; an absent one is decoded and written.
//! - A record is written payload first, then its header (status, label, index, checksum),
//!   then its presence byte: a process killed at any point leaves the record absent or whole.
//!   A present record that fails its checksum while the file fills is marked absent (its
//!   presence byte cleared first), then decoded and written again.
//! - A sample whose bytes cannot be decoded (undecodable data, an unknown format, a size over
//!   the limits: [`Error::is_permanent`]) is recorded as a failure, so it is skipped the same
//!   way in every epoch. A sample that could not be *read* (any I/O error: a permission, a
//!   full table of open files, a stale NFS handle) is never recorded: the next epoch reads it
//!   again, and the cache completes once it has been read.
//! - **Concurrent writers** are the ranks of a node (or several jobs) given the same path.
//!   Their records are disjoint within an epoch (the ranks' shares are); where two processes
//!   write the same record (ranks in different epochs), they write the same bytes, because a
//!   record is a pure function of the source file and the settings in the header. Nothing but
//!   creation and the commit needs a lock. Presence bytes are one byte each, so writers never
//!   share a read-modify-write.
//! - A process that finds a record absent in the map it read at the epoch's start reads its
//!   presence byte again before decoding it: a record another process wrote since is read, not
//!   decoded again.
//! - **One sharded process alone** fills the cache over its epochs (each epoch's share is
//!   another part of the permutation) and meanwhile reads whatever is present.
//! - Stopping early (the consumer drops the epoch, the process is killed) keeps every record
//!   written: a restarted rank continues filling.
//!
//! ## Commit
//!
//! At the end of each epoch, and at the start of the next, a filling process reads the presence
//! map again. When every record is present it takes the lock and, if `PATH.partial` is still the
//! file it filled and still has every record: reads every record back and checks it (a record
//! that fails is marked absent and the commit waits for it to be written again), `fsync`s the
//! file, writes the completion footer, `fsync`s again and renames it to `PATH` (then `fsync`s
//! the folder). A crash or kill at any moment leaves no `PATH`, or the previous complete one,
//! or the new complete one. A commit that fails (an `fsync`, the footer or the rename) is
//! logged and tried again at the next epoch's start or end; the epoch it ends is not failed.
//! Other processes filling the same file keep reading it through their open descriptor (the
//! rename keeps the inode); at their next epoch they open `PATH`. A process that starts its
//! epoch while another commits looks for `PATH` again once it holds the lock, so it opens the
//! complete file instead of creating a second `PATH.partial` (or asking for the space of one).
//!
//! ## Reading a complete cache
//!
//! Later epochs and runs read records at random with `pread` (so the per-epoch permutation
//! still applies) straight into the sample buffer: one copy, as from a memory map, but a file
//! that another program truncates, replaces or rewrites in place can never raise `SIGBUS`. A
//! record cut short or failing its checksum is [`ErrorKind::CorruptCache`] naming the file and
//! the record ([`CachePolicy::Fail`]), or makes the loader drop the cache, decode that sample
//! from the source and rebuild the cache ([`CachePolicy::Rebuild`]). Each epoch checks that
//! `PATH` is still the file it opened, with the same length; if not it opens `PATH` again.
//! Normalization happens in the batcher as on the uncached path, so batches are
//! bit-identical; nothing is mapped, so the process's RSS does not grow by the file.
//!
//! ## Stale or unusable files
//!
//! The header records the sample shape, the transform settings and a fingerprint of the source
//! (every entry's path, size, modification time and label). A complete cache that does not
//! match, lacks its footer or has a wrong length is logged once and rebuilt. A `PATH.partial`
//! that does not match, or was created before the machine last booted (its presence bytes may
//! have reached the disk before the records they mark), is replaced by a new file renamed over
//! it, never truncated: other processes may still hold the old one, and their writes go to it
//! harmlessly. Every process filling `PATH.partial` holds a shared `flock` on it; a loader with
//! another source or other settings that finds it in use (the lock cannot be taken
//! exclusively) fails, naming both, instead of replacing the file every epoch while nothing
//! completes. A file no process holds is a leftover, and is replaced.
//!
//! ## Nodes and network file systems
//!
//! Processes on one host coordinate through the page cache and `flock`. On a network or
//! cluster file system (NFS, SMB/CIFS, Lustre, GPFS, CephFS, BeeGFS, AFS, 9p, and FUSE, which
//! GlusterFS, JuiceFS and ceph-fuse mount through: read from `statfs`, Linux) `flock` and the
//! page cache do not coordinate hosts, so the cache's files are per host there: `PATH.<hostname>` (with `.partial` and `.lock` beside it). Each node
//! builds and reads its own; ranks of one node share it.
//!
//! ## What it replaces
//!
//! Only a cache of its own. `PATH` or `PATH.partial` holding anything else (a file without the
//! cache header, a directory, a device, a FIFO) makes `build()` fail naming it; a symbolic link
//! at `PATH` is followed. Before a file is created, the free space of the cache's file system is
//! checked against the final size (`count × (76,800 + 24)` bytes at 160×160, plus a byte a
//! sample of presence map, a header and a footer).
//!
//! The policy lives here: [`Cache::begin_epoch`] chooses how each epoch uses the cache (read a
//! complete one, or fill), [`Cache::lookup`] answers a decode thread for one sample (hit,
//! recorded failure, or a corrupt record: fail or rebuild), [`EpochCache::record`] writes a
//! decoded sample, and [`Cache::end_epoch`] commits. The pipeline only calls them.
//!
//! [`ErrorKind::CorruptCache`]: crate::ErrorKind::CorruptCache
//! [`Error::is_permanent`]: crate::Error::is_permanent

mod filler;
pub(crate) mod format;
mod fs;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::Xxh3;

use crate::error::{DecodeFailure, Error};
use crate::source::Source;
use crate::stats::StatsCell;
use filler::{Filler, Found, PRESENCE_CHUNK};
use format::{identity, CacheFile, Header, Sample};
use fs::{
    allocated, check_replaceable, host_name, network_file_system, resolve_link, with_suffix,
    LockGuard,
};

/// What to do when the cache exists but does not match the loader, or a record fails its
/// checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CachePolicy {
    /// A corrupt record is an error naming the cache file and the record. The default.
    #[default]
    Fail,
    /// A corrupt record makes the loader delete the cache; it is rebuilt by the next epoch.
    Rebuild,
}

/// The cache stage's settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct CacheSettings {
    /// Where the cache is (`None`: no cache).
    pub(crate) path: Option<PathBuf>,
    /// The longest side of a random transform's cached base image (`None`: twice the
    /// output's longer side).
    pub(crate) max_side: Option<u32>,
    pub(crate) policy: CachePolicy,
    /// A test hook's free space for the cache's file system.
    pub(crate) free_space_override: Option<u64>,
    /// A test hook: this many commits fail (as an `fsync` or a rename can) before one succeeds.
    pub(crate) failing_commits: Option<Arc<AtomicU64>>,
}

impl CacheSettings {
    /// What a cache that fills holds in memory over `n` samples: a bit a record of what is
    /// present, and the presence map read 64 KiB at a time (0 without a cache).
    pub(crate) fn index_bytes(&self, n: u64) -> u64 {
        if self.path.is_some() {
            n.div_ceil(8) + PRESENCE_CHUNK as u64
        } else {
            0
        }
    }

    /// Checks the settings alone.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.max_side.is_some_and(|s| s == 0 || s > 16_384) {
            return Err(Error::config(
                "cache_max_side",
                "must be between 1 and 16384 pixels",
            ));
        }
        Ok(())
    }
}

/// What a cache's samples are made with, recorded in its header: a cache made otherwise is
/// stale. Records hold the sample before its flip, or for a random transform the base image of
/// `height`×`width` each epoch crops anew (`transform/base.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MadeWith {
    pub(crate) height: u32,
    pub(crate) width: u32,
    /// The transform's mode byte and parameters (`Transform::cache_key`).
    pub(crate) transform_key: [u8; 17],
    pub(crate) apply_exif: bool,
    pub(crate) dct_scaling: bool,
    /// The JPEG decoder, as a number.
    pub(crate) decoder: u8,
    pub(crate) check_extension: bool,
    pub(crate) accept_jpeg_warnings: bool,
    /// The resize filter, as a number.
    pub(crate) filter: u8,
    pub(crate) max_pixels: u64,
}

/// The cache of one loader.
#[derive(Debug)]
pub(crate) struct Cache {
    path: PathBuf,
    partial: PathBuf,
    lock_path: PathBuf,
    header: Header,
    policy: CachePolicy,
    /// The complete cache, once open.
    complete: Mutex<Option<Arc<CacheFile>>>,
    /// The file being filled, kept between epochs.
    filling: Mutex<Option<Arc<Filler>>>,
    free_space_override: Option<u64>,
    failing_commits: Option<Arc<AtomicU64>>,
    /// The last "will be rebuilt" reason logged: each epoch looks again, but says it once.
    last_stale: Mutex<Option<String>>,
}

/// How one epoch uses the cache.
#[derive(Debug, Clone)]
pub(crate) enum EpochCache {
    /// No cache.
    Off,
    /// A complete cache: every sample is read from it.
    Read(Arc<CacheFile>),
    /// A cache still filling: present records are read, absent ones decoded and written.
    Fill(Arc<Filler>),
}

impl EpochCache {
    /// Records a decoded sample (its pixels in `buf`, or why its bytes cannot be decoded) in a
    /// cache this epoch fills; nothing otherwise. A failure to read the bytes (any I/O error:
    /// a permission, a full table of open files, a network file system's stale handle) is not
    /// the sample's: it is never recorded, and the next epoch reads the sample again.
    pub(crate) fn record(&self, index: u32, label: u32, buf: &[u8], result: &Result<(), Error>) {
        if let EpochCache::Fill(filler) = self {
            match result {
                Ok(()) => filler.put_pixels(index, label, buf),
                Err(e) if e.is_permanent() => filler.put_failure(index, label, &e.reason()),
                Err(_) => {}
            }
        }
    }

    /// The code [`StatsCell`] keeps: 0 no cache, 1 read a complete one, 2 filled one.
    pub(crate) fn stats_code(&self) -> u64 {
        match self {
            EpochCache::Off => 0,
            EpochCache::Read(_) => 1,
            EpochCache::Fill(_) => 2,
        }
    }
}

/// Fingerprint of the source: every entry's path, size, modification time and label.
fn fingerprint(source: &Source) -> [u8; 16] {
    let mut h = Xxh3::new();
    source.fingerprint(&mut h, crate::source::Stamps::With);
    h.digest128().to_le_bytes()
}

impl Cache {
    /// Prepares the cache at `path` for a loader: computes the source fingerprint (one `stat`
    /// per sample), opens a matching complete cache if there is one, and otherwise checks that
    /// a new one fits on its file system.
    pub(crate) fn new(
        path: &Path,
        settings: &CacheSettings,
        made_with: &MadeWith,
        source: &Source,
    ) -> Result<Cache, Error> {
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
        let key = made_with.transform_key;
        let mut fingerprint = fingerprint(source);
        // The crop fraction of a centre crop (0 for the other transforms, so caches of the
        // fits keep the fingerprint they always had).
        for (f, k) in fingerprint.iter_mut().zip(&key[1..9]) {
            *f ^= k;
        }
        let header = Header {
            height: made_with.height,
            width: made_with.width,
            resize_mode: key[0],
            apply_exif: u8::from(made_with.apply_exif),
            dct_scaling: u8::from(made_with.dct_scaling),
            decoder: made_with.decoder,
            // Bit 0: check_extension; bit 1: accept_jpeg_warnings (which decides which
            // samples are recorded as failures). Caches written before bit 1 read as 0 or 1.
            decode_flags: u8::from(made_with.check_extension)
                | (u8::from(made_with.accept_jpeg_warnings) << 1),
            resize_filter: made_with.filter,
            resampler: format::RESAMPLER_VERSION,
            max_pixels: made_with.max_pixels,
            count: source.len() as u64,
            fingerprint,
        };
        let (path, partial, lock_path) = match network_file_system(dir) {
            Some(fs) => {
                let host = host_name();
                let per_host = with_suffix(path, &format!(".{host}"));
                log::info!(
                    "cache {}: on a network file system ({fs}), where hosts cannot share one cache file; this host ({host}) uses {}",
                    path.display(),
                    per_host.display()
                );
                let partial = with_suffix(&per_host, ".partial");
                check_replaceable(&per_host)?;
                check_replaceable(&partial)?;
                let lock = with_suffix(&per_host, ".lock");
                (per_host, partial, lock)
            }
            None => (path.to_path_buf(), partial, with_suffix(path, ".lock")),
        };
        let cache = Cache {
            path,
            partial,
            lock_path,
            header,
            policy: settings.policy,
            complete: Mutex::new(None),
            filling: Mutex::new(None),
            free_space_override: settings.free_space_override,
            failing_commits: settings.failing_commits.clone(),
            last_stale: Mutex::new(None),
        };
        if cache.open_complete()?.is_none() {
            cache.check_space()?;
        }
        Ok(cache)
    }

    /// The complete cache, if `PATH` is one matching this loader: the one already open if
    /// `PATH` is still that file with its length, else `PATH` opened again. Logs why not.
    fn open_complete(&self) -> Result<Option<Arc<CacheFile>>, Error> {
        {
            let mut state = lock(&self.complete);
            if let Some(file) = state.as_ref() {
                let same = std::fs::metadata(&self.path).is_ok_and(|m| identity(&m) == file.id);
                if same && file.still_whole() {
                    return Ok(Some(file.clone()));
                }
                log::warn!(
                    "cache {} changed while in use (another program truncated or replaced it); it is opened again",
                    self.path.display()
                );
                *state = None;
            }
        }
        if !self.path.exists() {
            return Ok(None);
        }
        let why = match CacheFile::open(&self.path)? {
            Ok(file) if file.header == self.header => {
                let file = Arc::new(file);
                *lock(&self.complete) = Some(file.clone());
                return Ok(Some(file));
            }
            Ok(file) => self.stale_reason(&file.header),
            Err(why) => format!("unusable: {why}"),
        };
        self.say_stale(&why);
        Ok(None)
    }

    /// Logs that `PATH` (or `PATH.partial`) will be rebuilt, once a reason.
    fn say_stale(&self, why: &str) {
        let mut last = lock(&self.last_stale);
        if last.as_deref() != Some(why) {
            log::warn!("cache {} will be rebuilt: {why}", self.path.display());
            *last = Some(why.to_owned());
        }
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
        // The records already written to a partial file of ours count as written.
        let reusable = std::fs::metadata(&self.partial).map_or(0, |m| allocated(&m));
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

    /// Takes the exclusive lock on `PATH.lock`, waiting for another process's creation or
    /// commit (which take a moment) if `wait`; `None` if it is taken and not `wait`.
    fn lock_file(&self, wait: bool) -> Result<Option<LockGuard>, Error> {
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .map_err(|e| Error::io(&self.lock_path, e))?;
        if wait {
            fs4::FileExt::lock(&file).map_err(|e| Error::io(&self.lock_path, e))?;
        } else {
            match fs4::FileExt::try_lock(&file) {
                Ok(()) => {}
                Err(fs4::TryLockError::WouldBlock) => return Ok(None),
                Err(fs4::TryLockError::Error(e)) => return Err(Error::io(&self.lock_path, e)),
            }
        }
        Ok(Some(LockGuard(file)))
    }

    /// Decides how the next epoch uses the cache: reads a complete one, or fills `PATH.partial`
    /// (committing it first if it already has every record).
    pub(crate) fn begin_epoch(&self) -> Result<EpochCache, Error> {
        if let Some(file) = self.open_complete()? {
            return Ok(EpochCache::Read(file));
        }
        let filler = match self.filler()? {
            Err(file) => return Ok(EpochCache::Read(file)),
            Ok(filler) => filler,
        };
        filler.refresh();
        if filler.all_present() {
            if let Some(file) = self.try_commit(&filler) {
                return Ok(EpochCache::Read(file));
            }
        }
        Ok(EpochCache::Fill(filler))
    }

    /// The file this process fills: the one kept from the last epoch if `PATH.partial` is still
    /// that file, else `PATH.partial` opened (or created, or replaced if it does not match)
    /// under the lock; or (`Err`) the complete cache, when another process committed it
    /// since this one looked (a late start racing a commit opens no second file).
    fn filler(&self) -> Result<Result<Arc<Filler>, Arc<CacheFile>>, Error> {
        if let Some(kept) = lock(&self.filling).clone() {
            let same = std::fs::metadata(&self.partial).is_ok_and(|m| identity(&m) == kept.id);
            if same && !kept.abandoned.load(Relaxed) {
                return Ok(Ok(kept));
            }
        }
        let _guard = self.lock_file(true)?;
        // Looked for outside the lock: another process may have committed it since.
        if let Some(file) = self.open_complete()? {
            return Ok(Err(file));
        }
        let filler = match Filler::open(&self.partial, &self.header)? {
            Found::Filling(f) => f,
            Found::Missing => {
                self.check_space()?;
                Filler::create(&self.partial, &self.header)?
            }
            Found::Replace(why, theirs) => {
                if let Some(theirs) = theirs.filter(|_| Filler::in_use(&self.partial)) {
                    return Err(Error::config(
                        "cache",
                        format!(
                            "{} is being filled by another process for another source or other settings ({}); this loader's differ ({}): two loaders that differ need two cache paths (ranks of one job must give the same source and settings)",
                            self.partial.display(),
                            describe(&theirs),
                            describe(&self.header)
                        ),
                    ));
                }
                log::warn!(
                    "cache {}: {} is replaced: {why}",
                    self.path.display(),
                    self.partial.display()
                );
                self.check_space()?;
                Filler::create(&self.partial, &self.header)?
            }
        };
        let filler = Arc::new(filler);
        *lock(&self.filling) = Some(filler.clone());
        Ok(Ok(filler))
    }

    /// Called when an epoch has ended: a filled cache with every record present is committed.
    /// A commit that fails is logged and tried again at the next epoch: the epoch does not
    /// fail for it (its batches were all delivered).
    pub(crate) fn end_epoch(&self, mode: &EpochCache) -> Result<(), Error> {
        if let EpochCache::Fill(filler) = mode {
            filler.refresh();
            if filler.all_present() {
                self.try_commit(filler);
            } else {
                log::info!(
                    "cache {}: {} of {} records present ({} written by this process); it completes once every sample has been loaded",
                    self.path.display(),
                    filler.present(),
                    self.header.count,
                    filler.wrote.load(Relaxed)
                );
            }
        }
        Ok(())
    }

    /// [`Cache::commit`], with a failure logged (the next epoch tries again).
    fn try_commit(&self, filler: &Filler) -> Option<Arc<CacheFile>> {
        match self.commit(filler) {
            Ok(file) => file,
            Err(e) => {
                log::warn!(
                    "cache {}: cannot complete it ({e}); the epoch goes on, and the next one tries again",
                    self.path.display()
                );
                None
            }
        }
    }

    /// Makes `filler`'s file the complete cache if it is still `PATH.partial` and has every
    /// record, each of which passes its checks (under the lock, if no other process holds it;
    /// see the module doc), or finds that another process did. Returns the complete cache.
    fn commit(&self, filler: &Filler) -> Result<Option<Arc<CacheFile>>, Error> {
        // Taken: another process is committing this file (or replacing it); either way there
        // is nothing to do here, and a process stopped while holding it never stalls this one.
        let Some(_guard) = self.lock_file(false)? else {
            return Ok(None);
        };
        if let Some(file) = self.open_complete()? {
            return Ok(Some(file));
        }
        let ours = std::fs::metadata(&self.partial).is_ok_and(|m| identity(&m) == filler.id);
        filler.refresh();
        if !ours || !filler.all_present() || filler.abandoned.load(Relaxed) {
            return Ok(None);
        }
        if filler
            .verify_all()
            .map_err(|e| Error::io(&self.partial, e))?
            > 0
        {
            return Ok(None);
        }
        if let Some(n) = &self.failing_commits {
            if n.fetch_update(Relaxed, Relaxed, |k| k.checked_sub(1))
                .is_ok()
            {
                return Err(Error::io(
                    &self.partial,
                    std::io::Error::other("injected: the commit's fsync failed"),
                ));
            }
        }
        filler.commit(&self.partial, &self.path)?;
        log::info!(
            "cache {} complete: {} samples, {:.1} MB",
            self.path.display(),
            self.header.count,
            self.final_len() as f64 / 1e6
        );
        *lock(&self.filling) = None;
        self.open_complete()
    }

    /// Drops a cache found corrupt (policy `Rebuild`): later epochs rebuild it.
    fn invalidate(&self, why: &str) {
        let mut state = lock(&self.complete);
        if let Some(file) = state.take() {
            log::warn!(
                "cache {} is corrupt ({why}); it will be rebuilt",
                self.path.display()
            );
            // Only if `PATH` is still the file found corrupt (another process may have
            // rebuilt it already).
            if std::fs::metadata(&self.path).is_ok_and(|m| identity(&m) == file.id) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the complete cache file, if there is one.
    pub(crate) fn size_on_disk(&self) -> Option<u64> {
        lock(&self.complete).as_ref().map(|m| m.len_bytes())
    }

    /// The cache's answer for sample `index` (whose label the source says is `expected`, where
    /// the epoch read the source; the record's label is written there otherwise) in an epoch
    /// that uses it (`mode`): `Some` with the pixels written into `buf` (a hit), with
    /// the failure recorded for the sample, or, for a corrupt record of a complete cache under
    /// [`CachePolicy::Fail`], an error naming the cache file and the record. `None` when the
    /// sample must be decoded: no cache, a record not yet present in a filling one, or a
    /// corrupt record under [`CachePolicy::Rebuild`], which drops the cache so that it is
    /// rebuilt.
    pub(crate) fn lookup(
        &self,
        mode: &EpochCache,
        index: u32,
        expected: &mut Option<u32>,
        path: &Path,
        buf: &mut [u8],
        stats: &StatsCell,
    ) -> Option<Result<(), Error>> {
        let want = *expected;
        let checked = |sample: Result<Sample, String>| {
            sample.and_then(|sample| match (sample, want) {
                (Sample::Pixels { label } | Sample::Failed { label, .. }, Some(want))
                    if label != want =>
                {
                    Err(format!(
                        "record {index} has label {label}, the source says {want}"
                    ))
                }
                (other, _) => Ok(other),
            })
        };
        let mut found = |sample: Sample| {
            stats.cache_hits.fetch_add(1, Relaxed);
            match sample {
                Sample::Pixels { label } => {
                    *expected = Some(label);
                    Ok(())
                }
                Sample::Failed { message, label } => {
                    *expected = Some(label);
                    Err(Error::decode(path, DecodeFailure(message)))
                }
            }
        };
        match mode {
            EpochCache::Off => None,
            EpochCache::Fill(filler) => {
                if !filler.is_present(index) {
                    return None;
                }
                match checked(filler.read(index, buf)) {
                    Ok(sample) => Some(found(sample)),
                    Err(why) => {
                        // A record of a file still filling (a disk error, another program):
                        // absent first, then decoded and written again.
                        log::debug!("cache {}: {why}; decoding it again", self.partial.display());
                        filler.clear(index);
                        None
                    }
                }
            }
            EpochCache::Read(file) => match checked(file.read(index, buf)) {
                Ok(sample) => Some(found(sample)),
                Err(why) => match self.policy {
                    CachePolicy::Rebuild => {
                        self.invalidate(&why);
                        None
                    }
                    _ => Some(Err(Error::corrupt_cache(
                        self.path(),
                        format!("{why} (sample {})", path.display()),
                    ))),
                },
            },
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cache header in words, for an error that names two.
fn describe(h: &Header) -> String {
    format!(
        "{} samples of {}x{}, source fingerprint {:016x}",
        h.count,
        h.width,
        h.height,
        u64::from_le_bytes(h.fingerprint[..8].try_into().unwrap_or([0; 8]))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// Two caches of one loader's settings on one path, as two processes hold them.
    fn two(dir: &Path, n: usize) -> (Cache, Cache) {
        let jpeg = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/valid/odd_7x5.jpg");
        let source = Source::from_entries((0..n).map(|i| (jpeg.clone(), i as u32))).unwrap();
        let mut cfg = Config::default();
        cfg.cache.path = Some(dir.join("c.cache"));
        let made = cfg.cache_made_with();
        let open = || Cache::new(&dir.join("c.cache"), &cfg.cache, &made, &source).unwrap();
        (open(), open())
    }

    #[test]
    fn a_late_start_racing_a_commit_opens_the_complete_file_not_a_second_one() {
        let dir = tempfile::tempdir().unwrap();
        let (first, late) = two(dir.path(), 3);
        let Ok(EpochCache::Fill(filler)) = first.begin_epoch() else {
            panic!("the first cache fills");
        };
        let pixels = vec![7u8; first.header.sample_len()];
        for i in 0..3 {
            filler.put_pixels(i, i, &pixels);
        }
        // The late one looked for the complete file before the commit (none was there)...
        assert!(late.open_complete().unwrap().is_none());
        first.end_epoch(&EpochCache::Fill(filler)).unwrap();
        assert!(first.path.exists() && !first.partial.exists());
        // ...and, once it holds the lock, finds it instead of creating a second file (and
        // asking for the space of one).
        assert!(matches!(late.filler(), Ok(Err(_))));
        assert!(!late.partial.exists(), "a second PATH.partial was created");
        assert!(matches!(late.begin_epoch(), Ok(EpochCache::Read(_))));
    }
}
