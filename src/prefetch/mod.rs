//! The last stage: where finished batches are staged for the consumer.
//!
//! [`Staging::Host`] hands batches over in ordinary host memory through the prefetch queue.
//! With the `cuda` feature, [`Device::Cuda`] stages them through a **ring of slots** (see
//! `cuda/`); without it, asking for a GPU is
//! [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled), or a logged fallback to
//! the host with `fallback_to_host(true)`. `host.rs` runs the same ring with host memory only:
//! a testing aid that lets CPU-only CI drive the ring through the whole pipeline.
//!
//! # The slot ring
//!
//! A device loader owns `N = prefetch + 2` slots (one per batch in the prefetch queue, one being
//! filled by the batcher, one held by the consumer; with `autotune`, `prefetch` is the deepest
//! queue it may pick, 8). With `cuda`, a slot is a pinned (page-locked, write-combined) host
//! buffer for one batch, a device buffer for the copied bytes, a device buffer for the normalized
//! output, and events. A batch's life:
//!
//! 1. The batcher takes a free slot ([`SlotRing::acquire`]); slots are allocated lazily, so a
//!    fast consumer never makes the loader allocate all `N`.
//! 2. It writes the batch's `u8` samples straight into the slot's pinned buffer (no other host
//!    copy), queues an asynchronous host-to-device copy and the normalize kernel on the loader's
//!    own stream, and records the slot's events.
//! 3. The [`Batch`](crate::Batch) holds the slot ([`SlotLease`]) through the prefetch queue to the
//!    consumer. Dropping the batch returns the slot to the ring.
//!
//! A slot is reused only behind **two fences**:
//!
//! - **Fence 1, the copy is done.** Before the batcher writes into a slot's pinned buffer
//!   again, it waits on the slot's `copied` event (recorded after the host-to-device copy):
//!   the DMA engine may still be reading the buffer. [`SlotMemory::wait_copied`] is this wait.
//! - **Fence 2, the consumer is done.** A slot returns to the free list only when its
//!   [`Batch`](crate::Batch) is dropped ([`SlotLease`]'s `Drop`). Because the consumer's GPU work
//!   on the batch may still be queued when it drops the batch on the CPU, the slot's `released`
//!   event marks where that work ends: recorded on the consumer's stream when it calls
//!   `CudaBatch::release_after(stream)`, else, at the drop, on the context's legacy default
//!   stream ([`SlotMemory::on_release`]). The loader's stream waits on that event before it
//!   overwrites the slot's device buffers. cudarc's own read/write events add the same ordering
//!   for consumers that read the batch through cudarc views.
//!
//! **Memory bound.** Pinned host memory is at most `N ×` one staged batch (a `u8` batch when
//! the GPU normalizes: 64 × 160 × 160 × 3 B = 4.9 MB), device memory at most `N ×` (the `u8`
//! batch + the output batch). A slow consumer cannot raise this: the batcher waits for a free
//! slot, and everything upstream waits on its bounded channel.
//!
//! **The consumer may hold at most `N - 1` device batches while it asks for the next one.**
//! If it holds all `N`, the batcher can never get a slot and `next()` would wait forever;
//! the batcher logs a warning after [`STALL_WARNING`] of waiting. Raise `prefetch` to hold more.
//! Dropping the [`Batches`](crate::Batches) iterator never waits for slots: the batcher polls the
//! epoch's cancel flag while it waits, gives up, and every slot it and the prefetch queue held
//! returns to the ring when the epoch's threads are joined.

mod host;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use std::collections::VecDeque;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::batch::format::BatchFormat;
use crate::batch::format::OutputSettings;
use crate::batch::normalize::{BatchStorage, Dtype};
use crate::error::Error;
use crate::stats::StatsCell;

/// How often a batcher waiting for a free slot checks whether its epoch was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// After waiting this long for a free slot, the batcher warns that the consumer may be holding
/// every slot.
pub(crate) const STALL_WARNING: Duration = Duration::from_secs(10);

/// Where batches are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Device {
    /// Host memory. The default.
    #[default]
    Host,
    /// GPU `n`, through pinned host staging and asynchronous copies. Needs the `cuda` feature.
    Cuda(usize),
}

/// The device stage's settings: where batches go, and how a GPU is used.
#[derive(Debug, Clone)]
pub(crate) struct DeviceSettings {
    pub(crate) device: Device,
    pub(crate) fallback_to_host: bool,
    pub(crate) gpu_memory_limit: Option<u64>,
    /// Whether a GPU normalizes the `u8` batch (the default) or the host does.
    pub(crate) gpu_normalize: bool,
    /// The stream a CUDA loader queues its copies and kernel on (`None`: one of its own).
    #[cfg(feature = "cuda")]
    pub(crate) cuda_stream: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
    /// A test hook: the device slot ring staged in host memory.
    pub(crate) simulate_device: bool,
}

impl Default for DeviceSettings {
    fn default() -> Self {
        DeviceSettings {
            device: Device::Host,
            fallback_to_host: false,
            gpu_memory_limit: None,
            gpu_normalize: true,
            #[cfg(feature = "cuda")]
            cuda_stream: None,
            simulate_device: false,
        }
    }
}

/// The memory of one slot, as the ring sees it.
pub(crate) trait SlotMemory: Send {
    /// Fence 1: waits until the last copy out of this slot's host buffer has completed, so that
    /// the host buffer may be written again.
    fn wait_copied(&mut self) -> Result<(), Error>;

    /// Called as the consumer releases the slot, before it rejoins the free list: records the
    /// device side of fence 2 (where the consumer's work on the batch ends).
    fn on_release(&mut self) {}
}

/// A fixed number of reusable slots, allocated lazily; see the module docs.
pub(crate) struct SlotRing<S> {
    state: Mutex<RingState<S>>,
    freed: Condvar,
    capacity: usize,
}

struct RingState<S> {
    /// Released slots, oldest release first (its copy is the most likely to be complete).
    free: VecDeque<S>,
    /// Slots that exist: free, being filled, queued or held by the consumer.
    created: usize,
}

impl<S> fmt::Debug for SlotRing<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("SlotRing")
            .field("capacity", &self.capacity)
            .field("created", &st.created)
            .field("free", &st.free.len())
            .finish()
    }
}

impl<S> SlotRing<S> {
    fn lock(&self) -> MutexGuard<'_, RingState<S>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most slots this ring will create.
    // What `Loader::device_slots` (a test hook) reports.
    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots created so far.
    // What `Loader::device_slots` (a test hook) reports.
    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn created(&self) -> usize {
        self.lock().created
    }

    /// Slots created and free (not being filled, queued or held by the consumer).
    // What `Loader::device_slots` (a test hook) reports.
    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn free(&self) -> usize {
        self.lock().free.len()
    }
}

impl<S: SlotMemory> SlotRing<S> {
    /// A ring of at most `capacity` slots (at least 1), none created yet.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(SlotRing {
            state: Mutex::new(RingState {
                free: VecDeque::with_capacity(capacity),
                created: 0,
            }),
            freed: Condvar::new(),
            capacity: capacity.max(1),
        })
    }

    /// Creates every slot now (a loader with a hard memory cap allocates up front).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn fill(&self, mut make: impl FnMut() -> Result<S, Error>) -> Result<(), Error> {
        loop {
            {
                let mut st = self.lock();
                if st.created >= self.capacity {
                    return Ok(());
                }
                st.created += 1;
            }
            match make() {
                Ok(slot) => self.lock().free.push_back(slot),
                Err(e) => {
                    self.lock().created -= 1;
                    return Err(e);
                }
            }
        }
    }

    /// A free slot whose last copy is complete (fence 1), creating one with `make` while fewer
    /// than `capacity` exist, else waiting for the consumer to release one (fence 2).
    /// `Ok(None)` when `cancelled()` turns true while waiting.
    ///
    /// # Errors
    /// What `make` or [`SlotMemory::wait_copied`] returns; the slot concerned is dropped.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        make: impl FnOnce() -> Result<S, Error>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<SlotLease<S>>, Error> {
        let started = Instant::now();
        let mut warned = false;
        let mut st = self.lock();
        loop {
            if let Some(mut slot) = st.free.pop_front() {
                drop(st);
                if let Err(e) = slot.wait_copied() {
                    self.lock().created -= 1;
                    return Err(e);
                }
                return Ok(Some(self.lease(slot)));
            }
            if st.created < self.capacity {
                st.created += 1;
                drop(st);
                return match make() {
                    Ok(slot) => Ok(Some(self.lease(slot))),
                    Err(e) => {
                        self.lock().created -= 1;
                        Err(e)
                    }
                };
            }
            if cancelled() {
                return Ok(None);
            }
            if !warned && started.elapsed() >= STALL_WARNING {
                warned = true;
                log::warn!(
                    "the batcher has waited {:?} for one of the {} device batch slots; if the \
                     consumer holds {} batches it must drop one before asking for the next \
                     (raise `prefetch` to hold more)",
                    started.elapsed(),
                    self.capacity,
                    self.capacity
                );
            }
            st = self
                .freed
                .wait_timeout(st, CANCEL_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn lease(self: &Arc<Self>, slot: S) -> SlotLease<S> {
        SlotLease {
            slot: Some(slot),
            ring: self.clone(),
        }
    }

    fn put_back(&self, slot: S) {
        self.lock().free.push_back(slot);
        self.freed.notify_one();
    }
}

/// One slot, taken from its ring; returns to the ring when dropped.
pub(crate) struct SlotLease<S: SlotMemory> {
    slot: Option<S>,
    ring: Arc<SlotRing<S>>,
}

impl<S: SlotMemory> Deref for SlotLease<S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.slot
            .as_ref()
            .expect("a lease holds its slot until dropped")
    }
}

impl<S: SlotMemory> DerefMut for SlotLease<S> {
    fn deref_mut(&mut self) -> &mut S {
        self.slot
            .as_mut()
            .expect("a lease holds its slot until dropped")
    }
}

impl<S: SlotMemory> Drop for SlotLease<S> {
    fn drop(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            slot.on_release();
            self.ring.put_back(slot);
        }
    }
}

impl<S: SlotMemory> fmt::Debug for SlotLease<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotLease").finish_non_exhaustive()
    }
}

/// What a batch being built or delivered holds besides its host buffers.
// At most `prefetch + 3` exist at a time: not worth a box (an allocation per batch).
/// The reusable buffers of one batch.
#[derive(Debug)]
pub(crate) struct BatchParts {
    pub(crate) storage: BatchStorage,
    pub(crate) labels: Vec<u32>,
    pub(crate) indices: Vec<u64>,
    /// Each image's source in a mixture (0 otherwise).
    pub(crate) sources: Vec<u32>,
    /// Whether each image is a padding copy (a stand-in for a skipped sample, or a repeat that
    /// evens out the ranks' shares).
    pub(crate) padded: Vec<bool>,
    /// The samples skipped in the positions this batch covers (path, reason): counted in the
    /// stats when the batch is delivered.
    pub(crate) skipped: Vec<(std::path::PathBuf, String)>,
    /// The device slot of a device loader's batch (never in the pool).
    pub(crate) staged: Option<Staged>,
    /// The loader's fields' names, and each one's column (empty without fields).
    pub(crate) field_names: std::sync::Arc<[String]>,
    pub(crate) fields: Vec<crate::fields::FieldStore>,
}

impl BatchParts {
    pub(crate) fn new(dtype: Dtype, batch_size: usize, sample_len: usize) -> Self {
        BatchParts {
            storage: BatchStorage::new(dtype, batch_size * sample_len),
            labels: Vec::with_capacity(batch_size),
            indices: Vec::with_capacity(batch_size),
            sources: Vec::with_capacity(batch_size),
            padded: Vec::with_capacity(batch_size),
            skipped: Vec::new(),
            staged: None,
            field_names: std::sync::Arc::from(Vec::new()),
            fields: Vec::new(),
        }
    }
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Staged {
    /// A slot of the simulated (host) device: the testing aid.
    Sim(SlotLease<host::SimSlot>),
    /// A slot of a GPU loader.
    #[cfg(feature = "cuda")]
    Cuda(SlotLease<cuda::CudaSlot>),
    /// No slot could be had; the batch was written to host memory and its submission fails
    /// with this error (in-band, in order).
    Failed(Error),
}

impl Staged {
    /// Where the batcher copies the batch's `u8` samples (image `k` at `k × sample_len`), when
    /// the device normalizes them. `None`: normalize into the host storage as usual.
    ///
    /// The buffer may be write-combined pinned memory: write it, never read it.
    pub(crate) fn u8_buffer(&mut self) -> Option<&mut [u8]> {
        match self {
            Staged::Sim(slot) => Some(slot.host_u8()),
            #[cfg(feature = "cuda")]
            Staged::Cuda(slot) => slot.host_u8(),
            Staged::Failed(_) => None,
        }
    }
}

/// How batches reach the consumer.
#[derive(Debug, Clone)]
pub(crate) enum Staging {
    /// Host memory, through the prefetch queue.
    Host,
    /// Host memory through the slot ring: a testing aid (`simulate_device_staging`).
    Simulated(Arc<host::SimStaging>),
    /// A GPU, through pinned slots and asynchronous copies.
    #[cfg(feature = "cuda")]
    Cuda(Arc<cuda::CudaStaging>),
}

impl Staging {
    pub(crate) fn open(
        device: &DeviceSettings,
        output: &OutputSettings,
        slots: usize,
    ) -> Result<Staging, Error> {
        match device.device {
            Device::Host if device.simulate_device => Ok(Staging::Simulated(Arc::new(
                host::SimStaging::new(output, slots),
            ))),
            Device::Host => Ok(Staging::Host),
            Device::Cuda(n) => match open_cuda(device, output, slots, n) {
                Ok(s) => Ok(s),
                Err(e) if device.fallback_to_host => {
                    log::warn!("CUDA device {n} unavailable ({e}); staging batches in host memory");
                    Ok(Staging::Host)
                }
                Err(e) => Err(e),
            },
        }
    }

    /// The device batches are delivered to.
    pub(crate) fn device(&self) -> Device {
        match self {
            Staging::Host | Staging::Simulated(_) => Device::Host,
            #[cfg(feature = "cuda")]
            Staging::Cuda(c) => Device::Cuda(c.ordinal()),
        }
    }

    /// Slots the ring may create (0 without a ring).
    // What `Loader::device_slots` (a test hook) reports.
    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn slots(&self) -> usize {
        match self {
            Staging::Host => 0,
            Staging::Simulated(s) => s.ring().capacity(),
            #[cfg(feature = "cuda")]
            Staging::Cuda(c) => c.ring().capacity(),
        }
    }

    /// Slots created so far and slots free now (`(0, 0)` without a ring).
    // What `Loader::device_slots` (a test hook) reports.
    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn slot_use(&self) -> (usize, usize) {
        match self {
            Staging::Host => (0, 0),
            Staging::Simulated(s) => (s.ring().created(), s.ring().free()),
            #[cfg(feature = "cuda")]
            Staging::Cuda(c) => (c.ring().created(), c.ring().free()),
        }
    }

    /// The buffers of the next batch: host buffers from `pool` (or new ones) and, for a device,
    /// a slot. Waits for a free slot; gives up when `cancelled()` turns true. A failure to get
    /// a slot is not returned here but recorded in the parts ([`Staged::Failed`]), so that
    /// [`Staging::submit`] reports it in order.
    pub(crate) fn fresh_parts(
        &self,
        format: BatchFormat,
        pool: &Receiver<BatchParts>,
        cancelled: &dyn Fn() -> bool,
        stats: &StatsCell,
    ) -> BatchParts {
        #[cfg(not(feature = "cuda"))]
        let _ = stats; // only a GPU measures its copies when a slot is taken
        let sample_len = format.height * format.width * 3;
        let host = || {
            pool.try_recv()
                .unwrap_or_else(|_| BatchParts::new(format.dtype, format.batch_size, sample_len))
        };
        let cancelled_error = || Error::device("the epoch was stopped while waiting for a slot");
        match self {
            Staging::Host => host(),
            Staging::Simulated(s) => {
                let mut parts = host();
                parts.staged = Some(match s.acquire(cancelled) {
                    Ok(Some(slot)) => Staged::Sim(slot),
                    Ok(None) => Staged::Failed(cancelled_error()),
                    Err(e) => Staged::Failed(e),
                });
                parts
            }
            #[cfg(feature = "cuda")]
            Staging::Cuda(c) => {
                let staged = match c.acquire(cancelled, stats) {
                    Ok(Some(slot)) => Staged::Cuda(slot),
                    Ok(None) => Staged::Failed(cancelled_error()),
                    Err(e) => Staged::Failed(e),
                };
                // With GPU normalization the host storage stays empty (the samples go to the
                // pinned buffer, and an empty storage tells `Batch` the images are not on the
                // host); a batch that got no slot is written to host memory instead.
                let on_host = c.normalizes_on_host() || matches!(staged, Staged::Failed(_));
                let elems = if on_host {
                    format.batch_size * sample_len
                } else {
                    0
                };
                let mut parts = pool
                    .try_recv()
                    .unwrap_or_else(|_| BatchParts::new(format.dtype, format.batch_size, 0));
                if parts.storage.as_bytes().len() != elems * format.dtype.size() {
                    parts.storage = BatchStorage::new(format.dtype, elems);
                }
                parts.staged = Some(staged);
                parts
            }
        }
    }

    /// Hands a full batch to the device: queues its copy (and normalization) on a GPU. A no-op
    /// on the host.
    ///
    /// # Errors
    /// The error recorded when no slot could be had, or a device error while queueing.
    pub(crate) fn submit(
        &self,
        mut parts: BatchParts,
        stats: &StatsCell,
    ) -> Result<BatchParts, Error> {
        let images = parts.labels.len();
        match parts.staged.take() {
            None => Ok(parts),
            Some(Staged::Failed(e)) => Err(e),
            Some(Staged::Sim(mut slot)) => {
                if let Staging::Simulated(s) = self {
                    s.submit(&mut slot, &mut parts.storage, images, stats);
                }
                parts.staged = Some(Staged::Sim(slot));
                Ok(parts)
            }
            #[cfg(feature = "cuda")]
            Some(Staged::Cuda(mut slot)) => {
                if let Staging::Cuda(c) = self {
                    c.submit(&mut slot, &parts.storage, images, stats)?;
                }
                parts.staged = Some(Staged::Cuda(slot));
                Ok(parts)
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(
    device: &DeviceSettings,
    output: &OutputSettings,
    slots: usize,
    ordinal: usize,
) -> Result<Staging, Error> {
    cuda::CudaStaging::open(device, output, slots, ordinal).map(|s| Staging::Cuda(Arc::new(s)))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(
    _device: &DeviceSettings,
    _output: &OutputSettings,
    _slots: usize,
    _ordinal: usize,
) -> Result<Staging, Error> {
    Err(Error::feature_disabled("cuda"))
}

#[cfg(test)]
// A failed `unwrap` in a test is a failed test, with its location.
#[allow(clippy::unwrap_used)]
mod tests {
    //! The ring with a host implementation whose "copy done" events are flags that a test (or
    //! a fake DMA thread) sets.

    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A fake slot: `copied` is the copy-done event, `id` tells slots apart.
    struct FakeSlot {
        id: usize,
        copied: Arc<(Mutex<bool>, Condvar)>,
        releases: Arc<AtomicUsize>,
    }

    impl FakeSlot {
        fn start_copy(&self) {
            *self.copied.0.lock().unwrap() = false;
        }
    }

    fn complete(copied: &Arc<(Mutex<bool>, Condvar)>) {
        *copied.0.lock().unwrap() = true;
        copied.1.notify_all();
    }

    impl SlotMemory for FakeSlot {
        fn wait_copied(&mut self) -> Result<(), Error> {
            let (m, c) = &*self.copied;
            let mut done = m.lock().unwrap();
            while !*done {
                done = c.wait(done).unwrap();
            }
            Ok(())
        }
        fn on_release(&mut self) {
            self.releases.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Maker {
        next: AtomicUsize,
        releases: Arc<AtomicUsize>,
    }

    impl Maker {
        fn new() -> Self {
            Maker {
                next: AtomicUsize::new(0),
                releases: Arc::new(AtomicUsize::new(0)),
            }
        }
        fn make(&self) -> Result<FakeSlot, Error> {
            Ok(FakeSlot {
                id: self.next.fetch_add(1, Ordering::SeqCst),
                copied: Arc::new((Mutex::new(true), Condvar::new())),
                releases: self.releases.clone(),
            })
        }
    }

    const NEVER: &dyn Fn() -> bool = &|| false;

    #[test]
    fn slots_are_created_lazily_up_to_capacity() {
        let ring = SlotRing::new(3);
        let m = Maker::new();
        assert_eq!(ring.created(), 0);
        let a = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        assert_eq!((ring.created(), a.id), (1, 0));
        drop(a);
        // A released slot is reused before a new one is made.
        let a = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        assert_eq!((ring.created(), a.id), (1, 0));
        let b = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        let c = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        assert_eq!((ring.created(), b.id, c.id), (3, 1, 2));
        drop((a, b, c));
        assert_eq!((ring.created(), ring.free()), (3, 3));
        assert_eq!(m.releases.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn a_slot_is_reused_only_after_the_consumer_releases_it() {
        let ring = SlotRing::new(2);
        let m = Arc::new(Maker::new());
        let a = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        let _b = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        let got = Arc::new(AtomicUsize::new(usize::MAX));
        let waiter = {
            let (ring, m, got) = (ring.clone(), m.clone(), got.clone());
            std::thread::spawn(move || {
                let s = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
                got.store(s.id, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(got.load(Ordering::SeqCst), usize::MAX, "took a slot in use");
        assert_eq!(ring.created(), 2, "made a slot over capacity");
        let id = a.id;
        drop(a); // the consumer releases batch `a`
        waiter.join().unwrap();
        assert_eq!(got.load(Ordering::SeqCst), id);
    }

    #[test]
    fn a_slot_is_reused_only_after_its_copy_completed() {
        let ring = SlotRing::new(1);
        let m = Maker::new();
        let a = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        a.start_copy(); // an asynchronous copy out of the host buffer is in flight
        let copied = a.copied.clone();
        drop(a); // the consumer is done before the copy is
        let done = Arc::new(AtomicBool::new(false));
        let dma = {
            let (copied, done) = (copied.clone(), done.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                done.store(true, Ordering::SeqCst);
                complete(&copied);
            })
        };
        let again = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
        assert!(
            done.load(Ordering::SeqCst),
            "the host buffer was handed out while its copy was in flight"
        );
        assert_eq!(again.id, 0);
        dma.join().unwrap();
    }

    #[test]
    fn a_slow_consumer_bounds_the_slots() {
        // Producer: takes a slot, "copies" (completes on a DMA thread), queues it; consumer:
        // slow, holds one batch at a time. Slots in use never exceed the capacity.
        let capacity = 4;
        let ring = SlotRing::new(capacity);
        let m = Arc::new(Maker::new());
        let in_use = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = crossbeam_channel::bounded::<SlotLease<FakeSlot>>(2);
        let producer = {
            let (ring, m, in_use, most) = (ring.clone(), m.clone(), in_use.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..40 {
                    let slot = ring.acquire(|| m.make(), NEVER).unwrap().unwrap();
                    let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    slot.start_copy();
                    let copied = slot.copied.clone();
                    std::thread::spawn(move || complete(&copied));
                    if tx.send(slot).is_err() {
                        return;
                    }
                }
            })
        };
        for slot in rx {
            std::thread::sleep(Duration::from_millis(2));
            in_use.fetch_sub(1, Ordering::SeqCst);
            drop(slot);
        }
        producer.join().unwrap();
        assert!(ring.created() <= capacity);
        assert!(most.load(Ordering::SeqCst) <= capacity, "{most:?}");
        assert_eq!(ring.free(), ring.created());
    }

    #[test]
    fn cancelling_wakes_a_waiting_producer_and_every_slot_comes_back() {
        let ring = SlotRing::new(2);
        let m = Arc::new(Maker::new());
        let held: Vec<_> = (0..2)
            .map(|_| ring.acquire(|| m.make(), NEVER).unwrap().unwrap())
            .collect();
        let cancel = Arc::new(AtomicBool::new(false));
        let producer = {
            let (ring, m, cancel) = (ring.clone(), m.clone(), cancel.clone());
            std::thread::spawn(move || {
                let stop = || cancel.load(Ordering::SeqCst);
                ring.acquire(|| m.make(), &stop).unwrap().is_none()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        cancel.store(true, Ordering::SeqCst); // the consumer dropped `Batches`
        assert!(
            producer.join().unwrap(),
            "a cancelled acquire returned a slot"
        );
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        drop(held);
        assert_eq!((ring.created(), ring.free()), (2, 2));
    }

    #[test]
    fn a_failed_allocation_is_returned_and_not_counted() {
        let ring: Arc<SlotRing<FakeSlot>> = SlotRing::new(2);
        let e = ring
            .acquire(|| Err(Error::device("out of memory")), NEVER)
            .unwrap_err();
        assert!(e.to_string().contains("out of memory"));
        assert_eq!(ring.created(), 0);
        let m = Maker::new();
        ring.fill(|| m.make()).unwrap();
        assert_eq!((ring.created(), ring.free()), (2, 2));
    }
}
