//! The readahead stage: a thread of the loader's (`imagefeed-readahead`, kept between epochs:
//! see [`Worker`]) walks the epoch's plan a fixed number of positions ahead of the decode
//! threads and asks the kernel to start reading each sample's local file
//! (`posix_fadvise(POSIX_FADV_WILLNEED)`), so that a decode thread finds its file in the page
//! cache instead of waiting on the disk. In an epoch that reads a complete cache it hints the
//! samples' records in the mapped cache file instead (`madvise(WILLNEED)`), whatever the source.
//!
//! A decode thread reads one file at a time and cannot decode while it waits for it; on files
//! not in the page cache (the first epoch after a reboot, or any epoch of a dataset larger
//! than RAM) that wait is the disk's latency for every image. The hints are asynchronous: the
//! kernel reads the next [`LoaderBuilder::readahead`](crate::LoaderBuilder::readahead) files
//! in the background, several at once, while the decode threads work. Only the hinting thread
//! waits on metadata (opening each file), never a decode thread.
//!
//! Memory: none of the process's own. The hinted files go to the page cache, which the kernel
//! may evict: at most `readahead` files and [`READAHEAD_BYTES`] that the decode threads have not
//! yet claimed (a file that would pass that is not hinted; its decode thread reads it as
//! before). The thread sleeps while it is `readahead` positions ahead and wakes when the decode
//! threads have claimed half of them, so it costs a wake-up every `readahead / 2` images and a
//! few system calls an image (stat, open, fstat, fadvise, close).
//!
//! Nothing here can fail the epoch: a file that cannot be opened or is not a regular file is
//! skipped, and its decode thread reports it as before.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::{Epoch, EpochShared};
use crate::cache::EpochCache;
use crate::error::Error;

/// Whether this platform has the hint (`posix_fadvise`); elsewhere no thread starts.
pub(crate) const SUPPORTED: bool = cfg!(target_os = "linux");

/// The most bytes of hinted files not yet claimed by a decode thread: 64 ImageNet photos are
/// about 7 MB, 64 twelve-megapixel camera JPEGs about 300 MB, which would be seconds of work
/// ahead and page cache taken from everything else.
pub(crate) const READAHEAD_BYTES: u64 = 64 << 20;

/// The loader's readahead thread, kept between epochs: started by the first epoch that needs
/// it, it runs one epoch's hints at a time and waits for the next.
///
/// A thread of its own each epoch (as the decode threads are) took one of glibc's malloc arenas
/// for the length of the epoch and moved the other threads onto other arenas from epoch to
/// epoch: over 20 epochs of `scripts/soak.sh` peak RSS grew to 102-108 MB, against 89-92 MB
/// without readahead. Kept, it holds one arena throughout, and the soak stays flat.
///
/// An epoch that starts while another epoch's hints run (two `Batches` alive at once) gets a
/// thread of its own instead of waiting for this one: the other epoch may not end before it
/// does.
#[derive(Debug, Default)]
pub(crate) struct Worker {
    state: Mutex<WorkerState>,
}

#[derive(Debug, Default)]
struct WorkerState {
    jobs: Option<Sender<Job>>,
    handle: Option<JoinHandle<()>>,
    /// Running a job (set by `start`, cleared by the thread when the job ends).
    busy: Arc<AtomicBool>,
}

/// One epoch's hints.
struct Job {
    shared: Arc<EpochShared>,
    depth: usize,
    /// Dropped when the job ends: [`Started::wait`] returns.
    _done: Sender<()>,
}

/// An epoch's readahead, started.
#[derive(Debug)]
pub(crate) struct Started {
    done: Receiver<()>,
    /// The epoch's own thread, when the loader's was busy.
    own: Option<JoinHandle<()>>,
}

impl Started {
    /// Waits for the epoch's hints to end (cancel the epoch's window first) and joins the
    /// epoch's own thread if it had one; `Err` with the panic's payload if that thread panicked.
    pub(crate) fn wait(self) -> std::thread::Result<()> {
        let _ = self.done.recv();
        self.own.map_or(Ok(()), JoinHandle::join)
    }
}

impl Worker {
    /// Starts hinting `shared`'s plan, `depth` files ahead: on the loader's thread if it is
    /// idle (starting it if need be), else on a thread for this epoch.
    pub(crate) fn start(&self, shared: &Arc<EpochShared>, depth: usize) -> Result<Started, Error> {
        let (done_tx, done) = bounded(0);
        let mut job = Job {
            shared: shared.clone(),
            depth,
            _done: done_tx,
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !st.busy.swap(true, Ordering::AcqRel) {
            let jobs = match &st.jobs {
                Some(jobs) => jobs.clone(),
                None => match spawn_worker(st.busy.clone()) {
                    Ok((jobs, handle)) => {
                        st.jobs = Some(jobs.clone());
                        st.handle = Some(handle);
                        jobs
                    }
                    Err(e) => {
                        st.busy.store(false, Ordering::Release);
                        return Err(e);
                    }
                },
            };
            match jobs.send(job) {
                Ok(()) => return Ok(Started { done, own: None }),
                // The thread is gone (it can only have panicked): this epoch gets its own, and
                // the next one a new loader thread.
                Err(crossbeam_channel::SendError(j)) => {
                    job = j;
                    st.jobs = None;
                    if let Some(h) = st.handle.take() {
                        let _ = h.join();
                    }
                    st.busy = Arc::new(AtomicBool::new(false));
                }
            }
        }
        drop(st);
        let own = std::thread::Builder::new()
            .name("imagefeed-readahead".into())
            .spawn(move || {
                run(&job.shared.epoch, job.depth, &mut Scratch::default());
                drop(job);
            })
            .map_err(Error::spawn)?;
        Ok(Started {
            done,
            own: Some(own),
        })
    }
}

/// Starts the loader's readahead thread: it runs the jobs sent to it, one at a time, and clears
/// `busy` at the end of each.
fn spawn_worker(busy: Arc<AtomicBool>) -> Result<(Sender<Job>, JoinHandle<()>), Error> {
    let (jobs, rx) = unbounded::<Job>();
    let handle = std::thread::Builder::new()
        .name("imagefeed-readahead".into())
        .spawn(move || {
            let mut scratch = Scratch::default();
            for job in rx {
                run(&job.shared.epoch, job.depth, &mut scratch);
                // Idle before the job's end is signalled, so that the next epoch, started
                // right after this one ended, finds the thread free.
                busy.store(false, Ordering::Release);
                drop(job);
            }
        })
        .map_err(Error::spawn)?;
    Ok((jobs, handle))
}

impl Drop for Worker {
    /// Ends the thread: joined if idle; if an epoch's hints still run (its `Batches` outlives
    /// the loader), it ends by itself when that epoch does.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        st.jobs = None;
        if !st.busy.load(Ordering::Acquire) {
            if let Some(h) = st.handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// The readahead thread's buffers, kept between its jobs.
#[derive(Debug, Default)]
struct Scratch {
    path: PathBuf,
    ahead: Ahead,
}

/// Hints `shared`'s plan `depth` samples ahead of its decode threads until every position is
/// hinted or claimed, or the epoch is cancelled: the samples' files, or their records when the
/// epoch reads a complete cache.
fn run(epoch: &Epoch, depth: usize, scratch: &mut Scratch) {
    let Scratch { path, ahead } = scratch;
    ahead.start(READAHEAD_BYTES, depth);
    let limit = epoch.max_file_bytes;
    let cache = match &epoch.cache_mode {
        EpochCache::Read(map) => Some(map),
        _ => None,
    };
    while let Some((positions, claimed)) = epoch.window.to_hint() {
        ahead.let_go(claimed);
        for seq in positions {
            // A cancelled epoch waits for this thread: stop within a few files.
            if seq % 16 == 0 && epoch.window.is_cancelled() {
                return;
            }
            let index = epoch.plan.at(seq);
            let mut admit = |len| ahead.admit(seq, len, || epoch.window.claimed());
            match cache {
                Some(map) => {
                    if admit(map.header.record_len()) {
                        map.will_need(u64::from(index));
                    }
                }
                None => {
                    epoch.source.index.path_into(index as usize, path);
                    hint(path, limit, admit);
                }
            }
        }
    }
}

/// The bytes of hinted files that the decode threads have not claimed yet, by plan position.
#[derive(Debug, Default)]
struct Ahead {
    held: VecDeque<(usize, u64)>,
    bytes: u64,
    max: u64,
}

impl Ahead {
    /// Empty, for at most `max` bytes and a readahead of `depth` files. The files held are those
    /// from the next claim to the last one hinted, never more than `depth`: the queue is sized
    /// for that once, and does not grow during an epoch.
    fn start(&mut self, max: u64, depth: usize) {
        self.held.clear();
        self.held.reserve(depth + 1);
        self.bytes = 0;
        self.max = max;
    }

    /// Forgets the files at positions before `claimed` (the decode threads have them).
    fn let_go(&mut self, claimed: usize) {
        while let Some(&(seq, len)) = self.held.front() {
            if seq >= claimed {
                break;
            }
            self.bytes -= len;
            self.held.pop_front();
        }
    }

    /// Whether the file at `seq`, `len` bytes, may be hinted: it fits beside the files hinted
    /// and not yet claimed (asking `claimed` for the next claim only when it would not fit).
    fn admit(&mut self, seq: usize, len: u64, claimed: impl FnOnce() -> usize) -> bool {
        if self.bytes.saturating_add(len) > self.max {
            self.let_go(claimed());
        }
        if self.bytes.saturating_add(len) > self.max {
            return false;
        }
        self.bytes += len;
        self.held.push_back((seq, len));
        true
    }
}

/// Asks the kernel to read the file at `path` into the page cache, if it is a regular file
/// of at most `limit` bytes and `admit` accepts its length. Best effort: every failure is
/// ignored.
#[cfg(target_os = "linux")]
pub(crate) fn hint(path: &Path, limit: u64, admit: impl FnOnce(u64) -> bool) {
    use std::os::unix::fs::OpenOptionsExt;
    // Stat first, as a decode thread does: opening a device can have effects of its own.
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        _ => return,
    }
    // Non-blocking: if a FIFO replaced the file since the stat, opening it must not wait for
    // a writer.
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
    else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if !meta.is_file() || meta.len() > limit {
        return;
    }
    if let Some(len) = std::num::NonZeroU64::new(meta.len()) {
        if admit(len.get()) {
            let _ = rustix::fs::fadvise(&file, 0, Some(len), rustix::fs::Advice::WillNeed);
        }
    }
}

/// No hint on this platform.
#[cfg(not(target_os = "linux"))]
pub(crate) fn hint(_path: &Path, _limit: u64, _admit: impl FnOnce(u64) -> bool) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hinting_skips_what_is_not_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jpg");
        std::fs::write(&file, vec![7u8; 10_000]).unwrap();
        // A regular file, one over the limit, an empty one, a folder, a missing path: none
        // fails or blocks, and the file's bytes are untouched.
        let asked = std::cell::RefCell::new(Vec::new());
        let admit = |len| {
            asked.borrow_mut().push(len);
            true
        };
        hint(&file, 1 << 20, admit);
        hint(&file, 100, admit);
        let empty = dir.path().join("empty.jpg");
        std::fs::write(&empty, b"").unwrap();
        hint(&empty, 1 << 20, admit);
        hint(dir.path(), 1 << 20, admit);
        hint(&dir.path().join("missing.jpg"), 1 << 20, admit);
        assert_eq!(std::fs::read(&file).unwrap(), vec![7u8; 10_000]);
        // Only the regular file under the limit got as far as the byte budget.
        if SUPPORTED {
            assert_eq!(*asked.borrow(), [10_000]);
        }
    }

    #[test]
    fn hinted_bytes_not_yet_claimed_stay_within_the_budget() {
        let mut ahead = Ahead::default();
        ahead.start(100, 4);
        let never = || -> usize { panic!("asked for the claim position with room left") };
        assert!(ahead.admit(0, 40, never));
        assert!(ahead.admit(1, 60, never));
        // Full: nothing claimed yet, so 2 is refused, and one larger than the budget always is.
        assert!(!ahead.admit(2, 1, || 0));
        assert!(!ahead.admit(3, 101, || 0));
        // Position 0 claimed: its 40 bytes are free again.
        assert!(ahead.admit(4, 40, || 1));
        assert_eq!(ahead.bytes, 100);
        // Everything claimed: all of it is let go.
        ahead.let_go(5);
        assert_eq!((ahead.bytes, ahead.held.len()), (0, 0));
        assert!(ahead.admit(5, 100, never));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn hinting_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.jpg");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo is not available");
            return;
        }
        // Opening a FIFO for reading without O_NONBLOCK waits for a writer; the stat skips it
        // before the open, and the open would not wait either.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            hint(&fifo, 1 << 20, |_| true);
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("hinting a FIFO returned");
    }
}
