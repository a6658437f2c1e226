//! The wiring: threads, channels, their capacities, the memory bound they imply, and the
//! shutdown order. No other module knows the topology.
//!
//! ```text
//!  plan (seeded permutation of indices)
//!     │ claimed in order, at most `window` ahead of the batcher
//!     ▼
//!  decode ×T ──(seq, idx, u8 sample)──▶ batcher ──Batch──▶ prefetch queue ──▶ consumer
//!  threads      bounded(window)          thread    bounded(prefetch)          (Batches::next)
//!     ▲                                    │ reorder ring → shuffle buffer → Batcher
//!     └──────── sample buffers ◀───────────┘          batch buffers ◀── Batch::drop
//!               bounded(window + shuffle + 2)         bounded(1)
//! ```
//!
//! - **Readahead** (`imagefeed-readahead`, `readahead.rs`; the loader's, kept between epochs)
//!   walks the plan up to `readahead` positions past the next claim and asks the kernel to
//!   read those samples' local files, or their records in a complete cache the epoch reads, so
//!   that decode threads do not wait on the disk; it waits on the window like the decoders,
//!   and a cancelled or finished epoch ends its part.
//! - **Decode threads** (`imagefeed-decode-N`, owned by the loader, one set per epoch) claim
//!   the next position of the epoch's plan from the [`Window`], which lets them run at most
//!   `window` positions ahead of the batcher. They read, decode, resize and orient into a `u8`
//!   sample buffer and send it, tagged with its position, to the batcher. A panic while loading
//!   a sample is caught and becomes an error naming the sample.
//! - **The batcher** (`imagefeed-batch`) puts samples back in plan order through a ring of
//!   `window` slots, so the output never depends on thread timing; applies the error policy;
//!   passes samples through the seeded shuffle buffer; and writes each, normalized once, into
//!   a batch buffer. Full batches go to the prefetch queue.
//! - **Device staging** ([`Staging`], `prefetch/`): for a GPU loader the batch buffer is a slot
//!   of the device ring (`prefetch + 2` slots): the batcher waits for a free slot (polling the
//!   window's cancel flag, so a drop never hangs), copies the `u8` samples into its pinned
//!   buffer, and queues the copy to the GPU before sending the batch. The `Batch` returns the
//!   slot when dropped. `prefetch/mod.rs` has the two fences that guard reuse.
//! - **Memory**: `window + shuffle_buffer + 2` samples (the shuffle buffer holds samples only
//!   for tar shards; for random-access sources it reorders the plan's indices), `prefetch + 3` batches (queue, one being
//!   filled, one spare, one held by the consumer), per-thread decode buffers and one large
//!   image at a time: [`MemoryBudget`](crate::MemoryBudget) adds them up.
//! - **Shutdown**: dropping [`Batches`](crate::Batches) cancels the window (waking waiting
//!   decoders) and drops the prefetch receiver (failing the batcher's send); decoders see the
//!   cancel or a closed channel and return; then every thread is joined. A closed channel means
//!   shut down, never an error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::batch::{Batch, Batcher};
use crate::cache::{Cache, CachedSample, EpochCache};
use crate::config::BatchFormat;
use crate::config::{CachePolicy, Config, ShardPadding};
use crate::decode::{Decoder, LargeGate};
use crate::error::{DecodeFailure, Error, ErrorKind, OnError};
use crate::fetch::{fetch_loop, ByteBudget, Fetched};
use crate::prefetch::BatchParts;
use crate::prefetch::Staging;
use crate::readahead;
use crate::rng::{self, Rng};
use crate::shuffle::ShuffleBuffer;
use crate::source::{Backing, Source};
use crate::stats::{add, StatsCell};
use crate::transform::Normalizer;

/// Lets decode threads claim plan positions in order, at most `size` ahead of the batcher.
///
/// It also carries the epoch's live settings, which autotune changes while the epoch runs:
/// how many of the decode threads work (the others wait here) and how many ready batches
/// the prefetch queue may hold.
#[derive(Debug)]
pub(crate) struct Window {
    state: Mutex<WindowState>,
    /// Signalled when a position is released (one waiter can claim it).
    room: Condvar,
    /// Signalled when the active thread count changes, the plan ends or the epoch is
    /// cancelled (every waiter rechecks).
    changed: Condvar,
    /// Signalled when the readahead thread waits and the decode threads have come within
    /// half its depth of the last position it hinted.
    hint: Condvar,
    size: usize,
    total: usize,
    /// Positions the readahead thread hints ahead of the next claim (0: no readahead).
    readahead: usize,
    prefetch: AtomicUsize,
}

#[derive(Debug)]
struct WindowState {
    next: usize,
    released: usize,
    cancelled: bool,
    /// Decode threads numbered below this work; the others wait.
    active: usize,
    /// Active threads waiting for room; the batcher wakes one per released position and no
    /// one (no system call) when this is 0.
    waiting_for_room: usize,
    /// Positions before this one have been hinted to the kernel (readahead).
    hinted: usize,
    /// The readahead thread waits for the decode threads to catch up.
    hinter_waiting: bool,
}

impl Window {
    fn new(size: usize, total: usize, active: usize, prefetch: usize, readahead: usize) -> Self {
        Window {
            state: Mutex::new(WindowState {
                next: 0,
                released: 0,
                cancelled: false,
                active,
                waiting_for_room: 0,
                hinted: 0,
                hinter_waiting: false,
            }),
            room: Condvar::new(),
            changed: Condvar::new(),
            hint: Condvar::new(),
            size,
            total,
            readahead,
            prefetch: AtomicUsize::new(prefetch),
        }
    }

    /// The next position to load, or `None` when the plan is done or the epoch cancelled.
    pub(crate) fn claim(&self) -> Option<usize> {
        self.claim_as(0)
    }

    /// [`Window::claim`] for decode thread `thread`, which waits while it is not active.
    fn claim_as(&self, thread: usize) -> Option<usize> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if s.cancelled || s.next >= self.total {
                return None;
            }
            if thread >= s.active {
                s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            } else if s.next < s.released + self.size {
                return Some(self.take_next(&mut s));
            } else {
                s.waiting_for_room += 1;
                s = self.room.wait(s).unwrap_or_else(|e| e.into_inner());
                s.waiting_for_room -= 1;
            }
        }
    }

    /// Claims the next position (there is room): wakes the threads still waiting for room
    /// when it is the last one, and the readahead thread when it waits and the claims have
    /// come within half its depth of what it hinted.
    fn take_next(&self, s: &mut WindowState) -> usize {
        s.next += 1;
        if s.next == self.total {
            self.wake_all();
        } else if s.hinter_waiting && s.hinted <= s.next + self.readahead / 2 {
            self.hint.notify_one();
        }
        s.next - 1
    }

    fn wake_all(&self) {
        self.room.notify_all();
        self.changed.notify_all();
        self.hint.notify_all();
    }

    /// The next positions for the readahead thread to hint: from the last one it hinted (or
    /// the next claim, if the decode threads have passed it) up to `readahead` positions
    /// past the next claim, with the next claim. Waits while it is that far ahead; `None`
    /// once every position has been hinted or claimed, or the epoch is cancelled.
    pub(crate) fn to_hint(&self) -> Option<(std::ops::Range<usize>, usize)> {
        if self.readahead == 0 {
            return None;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let from = s.hinted.max(s.next);
            if s.cancelled || from >= self.total {
                return None;
            }
            let to = (s.next + self.readahead).min(self.total);
            if from < to {
                s.hinted = to;
                return Some((from..to, s.next));
            }
            s.hinter_waiting = true;
            s = self.hint.wait(s).unwrap_or_else(|e| e.into_inner());
            s.hinter_waiting = false;
        }
    }

    /// Waits while decode thread `thread` is not active; `false` once nothing is left to
    /// claim (or the epoch is cancelled).
    fn wait_active(&self, thread: usize) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if s.cancelled || s.next >= self.total {
                return thread < s.active && !s.cancelled;
            }
            if thread < s.active {
                return true;
            }
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The next position a decode thread will claim (the ones before it are claimed).
    pub(crate) fn claimed(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).next
    }

    /// Sets how many decode threads work (autotune).
    pub(crate) fn set_active(&self, threads: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).active = threads.max(1);
        self.wake_all();
    }

    /// Sets how many ready batches may wait for the consumer (autotune).
    pub(crate) fn set_prefetch(&self, batches: usize) {
        self.prefetch.store(batches.max(1), Ordering::Relaxed);
    }

    fn release(&self, released: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let freed = released.saturating_sub(s.released);
        s.released = released;
        let waiting = s.waiting_for_room;
        drop(s);
        // One waiter per freed position; the one woken that finds no room (another thread
        // claimed it first) waits again, so none is lost.
        for _ in 0..freed.min(waiting) {
            self.room.notify_one();
        }
    }

    /// Like [`Window::claim`] without waiting.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn try_claim(&self) -> TryClaim {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.cancelled || s.next >= self.total {
            TryClaim::Done
        } else if s.next < s.released + self.size {
            TryClaim::Got(self.take_next(&mut s))
        } else {
            TryClaim::Full
        }
    }

    pub(crate) fn cancel(&self) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled = true;
        self.wake_all();
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled
    }
}

/// Hands loaded samples from the decode threads to the batcher: a ring of `size` slots (the
/// reorder window) indexed by plan position. The batcher sleeps until the next `burst`
/// positions in plan order are all loaded (or the plan's last ones are, or every decode
/// thread has gone), then takes them together: one wake-up a burst instead of one a sample.
/// On two cores, where the batcher shares a core with a decode thread, a wake-up a sample
/// cost about 2.5% of the epoch in context switches (perf, `imagefeed bench`).
///
/// The window never lets a decode thread claim a position `size` or more past the batcher's
/// (`Window::release` follows it), so two loaded positions never share a slot.
struct Handoff {
    state: Mutex<HandoffState>,
    ready: Condvar,
    size: usize,
    total: usize,
    burst: usize,
}

struct HandoffState {
    ring: Vec<Option<Loaded>>,
    /// The first position the batcher has not taken.
    next: usize,
    /// How many positions from `next` on are loaded, in a row.
    run: usize,
    /// Live [`HandoffSender`]s.
    senders: usize,
    receiver_gone: bool,
    receiver_waiting: bool,
}

impl HandoffState {
    fn extend_run(&mut self, size: usize, total: usize) {
        while self.run < size
            && self.next + self.run < total
            && self.ring[(self.next + self.run) % size].is_some()
        {
            self.run += 1;
        }
    }
}

/// A decode thread's end of a [`Handoff`]; the last one dropped wakes the batcher.
struct HandoffSender(Arc<Handoff>);

/// The batcher's end of a [`Handoff`]; dropping it makes every later `put` fail.
struct HandoffReceiver(Arc<Handoff>);

/// Positions the batcher takes at once: a quarter of the smallest window, so the batcher still
/// runs well ahead of the window's end (and never more than a batch, so a small batch is not
/// held back waiting for samples it does not need).
const HANDOFF_BURST: usize = 16;

/// A hand-off through a ring of `size` slots for a plan of `total` positions, whose batcher
/// waits for at most `batch` positions at a time.
fn handoff(size: usize, total: usize, batch: usize) -> (HandoffSender, HandoffReceiver) {
    let size = size.max(1);
    let h = Arc::new(Handoff {
        state: Mutex::new(HandoffState {
            ring: (0..size).map(|_| None).collect(),
            next: 0,
            run: 0,
            senders: 1,
            receiver_gone: false,
            receiver_waiting: false,
        }),
        ready: Condvar::new(),
        size,
        total,
        burst: HANDOFF_BURST.min(size / 4).min(batch).max(1),
    });
    (HandoffSender(h.clone()), HandoffReceiver(h))
}

impl Handoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, HandoffState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the batcher, waiting from `s.next`, has what it waits for.
    fn enough(&self, s: &HandoffState) -> bool {
        s.run >= self.burst.min(self.total.saturating_sub(s.next)).max(1) || s.senders == 0
    }
}

impl HandoffSender {
    /// Puts a loaded sample in its slot. `false`: the batcher has stopped.
    fn put(&self, msg: Loaded) -> bool {
        let h = &*self.0;
        let mut s = h.lock();
        if s.receiver_gone {
            return false;
        }
        debug_assert!(msg.seq >= s.next && msg.seq < s.next + h.size);
        let slot = msg.seq % h.size;
        s.ring[slot] = Some(msg);
        s.extend_run(h.size, h.total);
        if s.receiver_waiting && h.enough(&s) {
            h.ready.notify_one();
        }
        true
    }
}

impl Clone for HandoffSender {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        HandoffSender(self.0.clone())
    }
}

impl Drop for HandoffSender {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.senders -= 1;
        if s.senders == 0 {
            self.0.ready.notify_one();
        }
    }
}

impl HandoffReceiver {
    /// How many positions [`HandoffReceiver::take`] waits for.
    fn burst(&self) -> usize {
        self.0.burst
    }

    /// Waits for the next burst of loaded positions in plan order and appends them to `out`
    /// (it is left holding at least one). `false`: every decode thread has gone and nothing
    /// is left to take (the epoch was cancelled).
    fn take(&self, out: &mut Vec<Loaded>) -> bool {
        let h = &*self.0;
        let mut s = h.lock();
        while !h.enough(&s) {
            s.receiver_waiting = true;
            s = h.ready.wait(s).unwrap_or_else(|e| e.into_inner());
            s.receiver_waiting = false;
        }
        if s.run == 0 {
            return false;
        }
        for _ in 0..s.run {
            let slot = s.next % h.size;
            if let Some(msg) = s.ring[slot].take() {
                out.push(msg);
            }
            s.next += 1;
        }
        s.run = 0;
        s.extend_run(h.size, h.total);
        true
    }
}

impl Drop for HandoffReceiver {
    fn drop(&mut self) {
        self.0.lock().receiver_gone = true;
    }
}

/// What [`Window::try_claim`] found.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) enum TryClaim {
    Got(usize),
    /// The window is full: wait for the batcher.
    Full,
    /// The plan is done or the epoch cancelled.
    Done,
}

/// What one epoch's threads share.
pub(crate) struct EpochShared {
    pub(crate) cfg: Arc<Config>,
    pub(crate) source: Arc<Source>,
    pub(crate) stats: Arc<StatsCell>,
    pub(crate) gate: Arc<LargeGate>,
    pub(crate) epoch: u64,
    /// Threads that write normalized samples into batch buffers in parallel.
    normalize_pool: Option<Arc<rayon::ThreadPool>>,
    /// Where full batches go: host memory or a device's slot ring.
    staging: Staging,
    /// Plan positions already delivered before this run (resumption); with a sample shuffle
    /// buffer, its outputs already delivered.
    offset: usize,
    /// With a sample shuffle buffer, on resumption: the buffer's generator as it was at the cut
    /// (the plan then starts with the `refill` samples it held).
    buffer_rng: Mutex<Option<Rng>>,
    cache: Option<Arc<Cache>>,
    pub(crate) cache_mode: EpochCache,
    pub(crate) plan: Vec<u32>,
    pub(crate) window: Arc<Window>,
    samples: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    batch_pool: (Sender<BatchParts>, Receiver<BatchParts>),
    decoders: Arc<Mutex<Vec<Decoder>>>,
}

/// Buffers recycled across all epochs of a loader: `u8` sample buffers and batch buffers.
/// Keeping them in the loader (instead of one set per epoch) means later epochs allocate
/// nothing, and the process's memory stays flat over many epochs.
#[derive(Debug, Clone)]
pub(crate) struct Pools {
    samples: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    batches: (Sender<BatchParts>, Receiver<BatchParts>),
    /// Per-thread decoders (buffers, libjpeg-turbo handles) between epochs.
    decoders: Arc<Mutex<Vec<Decoder>>>,
    /// The readahead thread, kept between epochs.
    readahead: Arc<readahead::Worker>,
}

impl Pools {
    pub(crate) fn new(cfg: &Config) -> Self {
        Pools {
            // In flight, in the shuffle buffer, held by the batcher for one batch, plus slack.
            samples: bounded(
                cfg.reorder_window() + cfg.sample_shuffle_buffer() + cfg.batch_size + 2,
            ),
            // Room for every batch in circulation (queue, consumer, batcher), so a returned
            // batch is never freed and a new one never allocated in steady state.
            batches: bounded(cfg.max_prefetch() + 2),
            decoders: Arc::new(Mutex::new(Vec::new())),
            readahead: Arc::new(readahead::Worker::default()),
        }
    }
}

/// A loaded sample (or its error), tagged with its plan position.
struct Loaded {
    seq: usize,
    index: u32,
    result: Result<Vec<u8>, Error>,
}

/// The running threads of one epoch, handed to [`Batches`](crate::Batches).
pub(crate) struct Running {
    pub(crate) rx: Receiver<Result<Batch, Error>>,
    pub(crate) handles: Vec<(&'static str, JoinHandle<()>)>,
    /// The epoch's readahead, if it has one: ends once the window is cancelled or done.
    pub(crate) hints: Option<readahead::Started>,
    pub(crate) window: Arc<Window>,
}

/// The order in which one rank visits the source in an epoch: a seeded permutation of the
/// whole source (or file order), of which rank `r` of `w` takes positions `r, r + w, r + 2w, …`
/// (as PyTorch's `DistributedSampler`), padded or cut per [`ShardPadding`] so that every rank
/// delivers the same number of batches.
///
/// Tar shards are read as streams, so their order is the shards in a seeded order (or in
/// order), each shard's samples in member order; rank `r` then takes a contiguous block of that
/// order (the same number of samples as the strided split), so that it reads about `1/w` of
/// the shards, front to back.
pub(crate) fn plan(cfg: &Config, source: &Source, epoch: u64) -> Vec<u32> {
    let len = source.len();
    let n = len as u32;
    let shuffled = |n: u32| {
        rng::permutation(
            n,
            &mut Rng::for_stage(cfg.seed, epoch, rng::STAGE_PERMUTATION),
        )
    };
    let (order, contiguous): (Vec<u32>, bool) = match &source.backing {
        Backing::Tar(tar) => {
            let shards: Vec<u32> = if cfg.shuffle {
                shuffled(tar.shards.len() as u32)
            } else {
                (0..tar.shards.len() as u32).collect()
            };
            let mut order = Vec::with_capacity(len);
            for k in shards {
                let s = &tar.shards[k as usize];
                order.extend(s.first..s.first + s.count);
            }
            (order, true)
        }
        _ if cfg.shuffle => (shuffled(n), false),
        _ => ((0..n).collect(), false),
    };
    let (rank, world) = (cfg.rank, cfg.world_size);
    let share = if world <= 1 || len == 0 {
        order
    } else {
        let count = share_len(cfg, len);
        let (start, step) = if contiguous {
            (rank * (len / world) + rank.min(len % world), 1)
        } else {
            (rank, world)
        };
        (0..count)
            .map(|k| order[(start + k * step) % len])
            .collect()
    };
    if contiguous || cfg.shuffle_buffer == 0 {
        return share;
    }
    // Random-access sources: the shuffle buffer reorders indices before decoding (tf.data's
    // `shuffle` before `map`), so it holds no sample.
    let mut buffer = ShuffleBuffer::new(
        cfg.shuffle_buffer,
        Rng::for_stage(cfg.seed, epoch, rng::STAGE_SHUFFLE_BUFFER),
    );
    let mut out = Vec::with_capacity(share.len());
    for i in share {
        out.extend(buffer.push(i));
    }
    while let Some(i) = buffer.drain_one() {
        out.push(i);
    }
    out
}

/// How many samples one rank's plan holds (see [`plan`]).
fn share_len(cfg: &Config, len: usize) -> usize {
    let (rank, world) = (cfg.rank, cfg.world_size);
    // This rank's disjoint share: positions rank, rank + world, ... below len (none for a rank
    // past the end of a source smaller than the world).
    let own = len.saturating_sub(rank).div_ceil(world);
    match cfg.shard_padding {
        ShardPadding::Repeat => len.div_ceil(world),
        ShardPadding::Drop => len / world,
        ShardPadding::EqualBatches => {
            let batches = |c: usize| {
                if cfg.drop_remainder {
                    c / cfg.batch_size
                } else {
                    c.div_ceil(cfg.batch_size)
                }
            };
            let most = len.div_ceil(world);
            if batches(own) < batches(most) {
                most
            } else {
                own
            }
        }
    }
}

/// With a sample shuffle buffer: its state after `emitted` outputs over `plan` (each plan
/// sample pushed once, failed ones as placeholders, so this does not depend on which failed):
/// the plan samples pushed, the samples held (slot order) and the generator.
fn replay_buffer(
    cfg: &Config,
    plan: &[u32],
    epoch: u64,
    emitted: usize,
) -> Result<(usize, Vec<u32>, Rng), Error> {
    let mut buffer = ShuffleBuffer::new(
        cfg.sample_shuffle_buffer(),
        Rng::for_stage(cfg.seed, epoch, rng::STAGE_SHUFFLE_BUFFER),
    );
    let (mut out, mut pushed) = (0usize, 0usize);
    while out < emitted {
        if pushed < plan.len() {
            out += usize::from(buffer.push(plan[pushed]).is_some());
            pushed += 1;
        } else if buffer.drain_one().is_some() {
            out += 1;
        } else {
            return Err(Error::config(
                "resume",
                format!(
                    "position {emitted} is past the epoch's {} samples",
                    plan.len()
                ),
            ));
        }
    }
    let (held, rng) = buffer.into_parts();
    Ok((pushed, held, rng))
}

/// The length of [`plan`] without building it.
pub(crate) fn plan_len(cfg: &Config, len: usize) -> usize {
    if cfg.world_size <= 1 || len == 0 {
        len
    } else {
        share_len(cfg, len)
    }
}

/// Starts the threads of one epoch.
#[allow(clippy::too_many_arguments)] // the loader's parts, each shared with the epoch's threads
pub(crate) fn start(
    cfg: Arc<Config>,
    source: Arc<Source>,
    stats: Arc<StatsCell>,
    gate: Arc<LargeGate>,
    cache: Option<Arc<Cache>>,
    normalize_pool: Option<Arc<rayon::ThreadPool>>,
    staging: Staging,
    pools: &Pools,
    knobs: crate::tune::Knobs,
    epoch: u64,
    start_at: usize,
) -> Result<Running, Error> {
    let threads = knobs.threads;
    let window_size = cfg.reorder_window();
    let cache_mode = match &cache {
        Some(c) => c.begin_epoch()?,
        None => EpochCache::Off,
    };
    let mut plan = plan(&cfg, &source, epoch);
    let mut buffer_rng = None;
    if cfg.sample_shuffle_buffer() > 0 && start_at > 0 {
        // The buffer's contents are not in the state: replay it over the plan's indices to
        // find what it held at the cut, and load those samples again first.
        let (pushed, held, rng) = replay_buffer(&cfg, &plan, epoch, start_at)?;
        let mut rest = held;
        rest.extend_from_slice(&plan[pushed..]);
        plan = rest;
        buffer_rng = Some(rng);
    } else {
        if start_at > plan.len() {
            return Err(Error::config(
                "resume",
                format!(
                    "position {start_at} is past the epoch's {} samples",
                    plan.len()
                ),
            ));
        }
        plan.drain(..start_at);
    }
    // With autotune every thread the loader may use starts, and the window says how many
    // work; the prefetch queue has room for the deepest setting, and the window says how
    // much of it to use.
    let (spawned_threads, queue) = if cfg.autotune {
        (
            cfg.max_threads().max(threads),
            cfg.max_prefetch().max(knobs.prefetch),
        )
    } else {
        (threads, knobs.prefetch)
    };
    // Local files, or the records of a complete cache the epoch reads (whatever the source),
    // are hinted to the kernel ahead of the decode threads where the platform has such hints.
    // Tar shards and objects are read ahead by the fetch stage.
    let readahead = match (&source.backing, &cache_mode) {
        (_, EpochCache::Read(_)) | (Backing::Files, _) if readahead::SUPPORTED => cfg.readahead,
        _ => 0,
    };
    let window = Arc::new(Window::new(
        window_size,
        plan.len(),
        threads,
        knobs.prefetch,
        readahead,
    ));
    let mode_code = match cache_mode {
        EpochCache::Off => 0,
        EpochCache::Read(_) => 1,
        EpochCache::Write(_) => 2,
    };
    stats.reset(epoch, threads, knobs.prefetch, mode_code);
    let cache_bytes = cache.as_ref().and_then(|c| c.size_on_disk());
    stats.cache_bytes_plus_one.store(
        cache_bytes.map_or(0, |b| b + 1),
        std::sync::atomic::Ordering::Relaxed,
    );
    let shared = Arc::new(EpochShared {
        // In flight, in the shuffle buffer, held by the batcher for one batch, plus slack.
        samples: pools.samples.clone(),
        batch_pool: pools.batches.clone(),
        decoders: pools.decoders.clone(),
        cfg: cfg.clone(),
        source,
        stats,
        gate,
        epoch,
        normalize_pool,
        staging,
        offset: start_at,
        buffer_rng: Mutex::new(buffer_rng),
        cache,
        cache_mode,
        plan,
        window: window.clone(),
    });
    // The window bounds what is in flight, so the ring never overflows.
    let (loaded_tx, loaded_rx) = handoff(window_size, shared.plan.len(), cfg.batch_size);
    // The prefetch queue: ready batches ahead of the consumer.
    let (batch_tx, batch_rx) = bounded(queue);
    let mut handles = Vec::with_capacity(spawned_threads + 2);
    let mut hints = None;
    // Tar shards and objects: a fetch thread reads bytes ahead for the decode threads.
    let fetch = crate::fetch::byte_bound(&shared.source).map(|bound| {
        let (tx, rx) = bounded::<Fetched>(window_size);
        (tx, rx, Arc::new(ByteBudget::new(bound)))
    });
    let spawn_all = || -> Result<(), Error> {
        if let Some((fetch_tx, _, budget)) = &fetch {
            let (shared, tx, budget) = (shared.clone(), fetch_tx.clone(), budget.clone());
            let h = std::thread::Builder::new()
                .name("imagefeed-fetch".into())
                .spawn(move || fetch_loop(&shared, &tx, &budget))
                .map_err(Error::spawn)?;
            handles.push(("fetch", h));
        }
        if readahead > 0 {
            hints = Some(pools.readahead.start(&shared, readahead)?);
        }
        for t in 0..spawned_threads {
            let shared = shared.clone();
            let tx = loaded_tx.clone();
            let from_fetch = fetch.as_ref().map(|(_, rx, b)| (rx.clone(), b.clone()));
            let h = std::thread::Builder::new()
                .name(format!("imagefeed-decode-{t}"))
                .spawn(move || decode_loop(&shared, &tx, from_fetch, t))
                .map_err(Error::spawn)?;
            handles.push(("decode", h));
        }
        let shared = shared.clone();
        let h = std::thread::Builder::new()
            .name("imagefeed-batch".into())
            .spawn(move || batch_loop(&shared, &loaded_rx, &batch_tx))
            .map_err(Error::spawn)?;
        handles.push(("batch", h));
        Ok(())
    };
    let spawned = spawn_all();
    drop(loaded_tx);
    drop(fetch);
    if let Err(e) = spawned {
        window.cancel();
        for (_, h) in handles {
            let _ = h.join();
        }
        if let Some(hints) = hints {
            let _ = hints.wait();
        }
        return Err(e);
    }
    Ok(Running {
        rx: batch_rx,
        handles,
        hints,
        window,
    })
}

/// Where a decode thread gets its work: claims from the window (local files), or fetched
/// bytes from the fetch thread (with the byte budget to release).
type FromFetch = Option<(Receiver<Fetched>, Arc<ByteBudget>)>;

/// Decode thread number `thread`: loads samples until the plan is done (waiting while
/// autotune has it inactive).
fn decode_loop(shared: &EpochShared, tx: &HandoffSender, from_fetch: FromFetch, thread: usize) {
    let cfg = &shared.cfg;
    let geom = cfg.geometry();
    // A decoder (with its grown buffers) from an earlier epoch, so later epochs allocate nothing.
    let mut decoder = shared
        .decoders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(|| Decoder::new(cfg.decode_settings()));
    let mut path = PathBuf::new();
    let sample_len = geom.sample_len();
    loop {
        let waited = Instant::now();
        let (seq, index, mut fetched, held) = match &from_fetch {
            None => match shared.window.claim_as(thread) {
                Some(seq) => (seq, shared.plan[seq], None, 0),
                None => break,
            },
            Some(_) if !shared.window.wait_active(thread) => break,
            Some((rx, _)) => match rx.recv() {
                Ok(f) => (f.seq, f.index, f.bytes, f.held),
                Err(_) => break, // the fetcher finished or stopped
            },
        };
        add(&shared.stats.decode_wait_ns, waited.elapsed());
        let mut buf = shared
            .samples
            .1
            .try_recv()
            .unwrap_or_else(|_| vec![0u8; sample_len]);
        let busy = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            shared.source.index.path_into(index as usize, &mut path);
            if shared.cfg.panic_on_index == Some(u64::from(index)) {
                panic!("injected panic (inject_panic_at_index)");
            }
            let mut load_from = |input| load(shared, &mut decoder, &path, index, input, &mut buf);
            match fetched.take() {
                None if from_fetch.is_none() => load_from(Input::File),
                None => load_from(Input::CacheOnly),
                Some(Ok(bytes)) => load_from(Input::Bytes(&bytes)),
                Some(Err(e)) => Err(e),
            }
        }));
        if let Some((_, budget)) = &from_fetch {
            budget.release(held);
        }
        add(&shared.stats.decode_busy_ns, busy.elapsed());
        let times = decoder.take_times();
        add(&shared.stats.read_ns, times.read);
        add(&shared.stats.decode_ns, times.decode);
        add(&shared.stats.resize_ns, times.resize);
        let result = match outcome {
            Ok(Ok(())) => Ok(buf),
            Ok(Err(e)) => Err(e),
            Err(payload) => {
                // The decoder's buffers may be mid-update: start afresh.
                decoder = Decoder::new(cfg.decode_settings());
                Err(Error::worker_panicked(
                    "decode",
                    Some(shared.source.index.path(index as usize)),
                    &*payload,
                ))
            }
        };
        if !tx.put(Loaded { seq, index, result }) {
            break; // the batcher stopped: shut down
        }
    }
    shared
        .decoders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(decoder);
}

/// Where a sample's encoded bytes are.
enum Input<'a> {
    /// In the local file at the sample's path.
    File,
    /// Fetched.
    Bytes(&'a [u8]),
    /// Not fetched: the epoch reads a complete cache (read the bytes if the record fails and
    /// the cache is rebuilt).
    CacheOnly,
}

/// Loads one sample into `buf`: from a complete cache, or by decoding (and then recording it
/// in a cache being written).
fn load(
    shared: &EpochShared,
    decoder: &mut Decoder,
    path: &std::path::Path,
    index: u32,
    input: Input<'_>,
    buf: &mut [u8],
) -> Result<(), Error> {
    let stats = &shared.stats;
    if let (EpochCache::Read(map), Some(cache)) = (&shared.cache_mode, &shared.cache) {
        let expected = shared.source.index.label(index as usize);
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
                stats
                    .cache_hits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(());
            }
            Ok(CachedSample::Failed { message, .. }) => {
                stats
                    .cache_hits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(Error::decode(path, DecodeFailure(message)));
            }
            Err(why) => match cache.policy() {
                CachePolicy::Rebuild => cache.invalidate(&why),
                _ => {
                    return Err(Error::corrupt_cache(
                        cache.path(),
                        format!("{why} (sample {})", path.display()),
                    ))
                }
            },
        }
    }
    let geom = shared.cfg.geometry();
    let result = match input {
        Input::File => decoder.load_file(path, &geom, &shared.gate, buf),
        Input::Bytes(bytes) => decoder.load_bytes(bytes, path, &geom, &shared.gate, buf),
        Input::CacheOnly => shared
            .source
            .read_sample(
                index as usize,
                shared.cfg.decode_settings().max_file_bytes(),
            )
            .and_then(|bytes| decoder.load_bytes(&bytes, path, &geom, &shared.gate, buf)),
    };
    if let EpochCache::Write(writer) = &shared.cache_mode {
        let label = shared.source.index.label(index as usize);
        match &result {
            Ok(()) => writer.put_pixels(index, label, buf),
            Err(e) if e.is_data_error() => writer.put_failure(index, label, &e.reason()),
            Err(_) => {}
        }
    }
    result
}

struct Sink<'a> {
    shared: &'a EpochShared,
    batcher: Batcher,
    format: BatchFormat,
    pool: (Sender<BatchParts>, Receiver<BatchParts>),
    out: &'a Sender<Result<Batch, Error>>,
    /// Plan position (counting resumed ones) after the last sample written.
    position: u64,
}

impl Sink<'_> {
    /// Adds a sample to the current batch; sends the batch when full. `false`: the consumer
    /// is gone.
    fn emit(&mut self, pixels: Vec<u8>, index: u32) -> bool {
        match self.write(pixels, index) {
            Some(parts) => self.send(parts),
            None => true,
        }
    }

    /// A batch buffer from the pool, or a new one; for a device, with a slot of its ring
    /// (waiting for one).
    fn fresh_parts(
        shared: &EpochShared,
        format: BatchFormat,
        pool: &Receiver<BatchParts>,
    ) -> BatchParts {
        let cancelled = || shared.window.is_cancelled();
        shared
            .staging
            .fresh_parts(format, pool, &cancelled, &shared.stats)
    }

    fn write(&mut self, pixels: Vec<u8>, index: u32) -> Option<BatchParts> {
        let label = self.shared.source.index.label(index as usize);
        self.timed(|batcher, fresh, recycle| {
            batcher.add(pixels, label, u64::from(index), fresh, recycle)
        })
    }

    /// Runs one batcher step (adding a sample, or flushing the last batch) with a source of
    /// fresh batch buffers and a pool for spent sample buffers, and counts its time as batch
    /// writing.
    fn timed(
        &mut self,
        step: impl FnOnce(
            &mut Batcher,
            &mut dyn FnMut() -> BatchParts,
            &mut dyn FnMut(Vec<u8>),
        ) -> Option<BatchParts>,
    ) -> Option<BatchParts> {
        let (format, pool_rx, samples) = (self.format, &self.pool.1, &self.shared.samples.0);
        let shared = self.shared;
        let started = Instant::now();
        // A full batch's time waiting for a buffer (or a device slot) is not writing time.
        let mut waited = std::time::Duration::ZERO;
        let full = step(
            &mut self.batcher,
            &mut || {
                let asked = Instant::now();
                let parts = Self::fresh_parts(shared, format, pool_rx);
                waited = asked.elapsed();
                parts
            },
            &mut |px| {
                let _ = samples.try_send(px);
            },
        );
        add(
            &shared.stats.batch_write_ns,
            started.elapsed().saturating_sub(waited),
        );
        full
    }

    /// Writes a copy of a sample in place of a skipped one (sharded epochs keep their size).
    fn pad(&mut self, pixels: &[u8], index: u32) -> bool {
        self.shared
            .stats
            .padded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut copy = self.shared.samples.1.try_recv().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(pixels);
        self.emit(copy, index)
    }

    /// Sends a full batch (queueing its copy to a device first). `false`: stop, the consumer
    /// is gone or has been sent an error.
    fn send(&mut self, parts: BatchParts) -> bool {
        let parts = match self.shared.staging.submit(parts, &self.shared.stats) {
            Ok(parts) => parts,
            Err(e) => {
                let _ = self.out.send(Err(e));
                return false;
            }
        };
        let batch = Batch::new(
            parts,
            self.format,
            self.shared.epoch,
            self.position,
            self.pool.0.clone(),
        );
        let waited = Instant::now();
        // Autotune may allow fewer ready batches than the queue holds. (Without it the
        // queue's own bound applies: `send` blocks.)
        let window = &self.shared.window;
        while self.shared.cfg.autotune && self.out.len() >= window.prefetch.load(Ordering::Relaxed)
        {
            if window.is_cancelled() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ok = self.out.send(Ok(batch)).is_ok();
        add(&self.shared.stats.batcher_wait_ns, waited.elapsed());
        ok
    }

    fn finish(&mut self) -> bool {
        if self.shared.cfg.drop_remainder {
            return true;
        }
        match self.timed(|batcher, fresh, recycle| batcher.finish(fresh, recycle)) {
            Some(parts) => self.send(parts),
            None => true,
        }
    }
}

fn remember(slot: &mut Option<(Vec<u8>, u32)>, pixels: &[u8], index: u32) {
    let (buf, i) = slot.get_or_insert_with(|| (Vec::with_capacity(pixels.len()), 0));
    buf.clear();
    buf.extend_from_slice(pixels);
    *i = index;
}

/// Writes one shuffle-buffer output (a sample, or a failed sample's placeholder: nothing) and
/// remembers it for sharded padding. `false`: the consumer is gone.
fn emit_output(
    sink: &mut Sink<'_>,
    out: Option<(Vec<u8>, u32)>,
    keep_size: bool,
    last_good: &mut Option<(Vec<u8>, u32)>,
) -> bool {
    let Some((px, idx)) = out else {
        return true;
    };
    if keep_size {
        remember(last_good, &px, idx);
    }
    sink.emit(px, idx)
}

fn batch_loop(shared: &EpochShared, rx: &HandoffReceiver, out: &Sender<Result<Batch, Error>>) {
    let stop = |e: Error| {
        shared.window.cancel();
        let _ = out.send(Err(e));
    };
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| batch_loop_inner(shared, rx, out)))
        .unwrap_or_else(|p| Err(Error::worker_panicked("batch", None, &*p)))
    {
        stop(e);
    }
    shared.window.cancel();
}

fn batch_loop_inner(
    shared: &EpochShared,
    rx: &HandoffReceiver,
    out: &Sender<Result<Batch, Error>>,
) -> Result<(), Error> {
    let cfg = &shared.cfg;
    let format = cfg.batch_format();
    let mut sink = Sink {
        shared,
        batcher: Batcher::new(
            format,
            Normalizer::new(cfg.mean, cfg.std, cfg.layout),
            shared.normalize_pool.clone(),
        ),
        format,
        // Room for every batch in circulation (queue, consumer, batcher), so a returned batch
        // is never freed and a new one never allocated in steady state.
        pool: shared.batch_pool.clone(),
        out,
        position: shared.offset as u64,
    };
    // Sharded epochs must keep every rank's batch count equal, so a skipped sample is replaced
    // by a copy of the next (or, at the end, the last) good one; labels stay with their images.
    let keep_size = cfg.world_size > 1;
    let mut owed_padding = 0u64;
    let mut last_good: Option<(Vec<u8>, u32)> = None;
    let total = shared.plan.len();
    let mut burst = Vec::with_capacity(shared.window.size);
    let mut next = 0usize;
    // Samples, or placeholders for failed ones: the buffer's choices then depend on the plan
    // alone, so a resumed epoch can replay them (`replay_buffer`).
    let buffered = cfg.sample_shuffle_buffer() > 0;
    let rng = shared
        .buffer_rng
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| Rng::for_stage(cfg.seed, shared.epoch, rng::STAGE_SHUFFLE_BUFFER));
    let mut shuffle: ShuffleBuffer<Option<(Vec<u8>, u32)>> =
        ShuffleBuffer::new(cfg.sample_shuffle_buffer(), rng);
    // Buffer outputs so far, placeholders included (the resumable position when buffered).
    let mut outputs = shared.offset as u64;
    let mut skipped = 0u64;
    while next < total {
        if !rx.take(&mut burst) {
            return Ok(()); // cancelled: the decoders are gone
        }
        // More ready than a burst or two: the decode threads are ahead (reading a cache, or
        // waiting for a slow consumer) and have cores to spare for the normalize pool.
        sink.batcher.set_parallel(burst.len() > 2 * rx.burst());
        // Released one by one as they are processed, as the window's memory bound assumes.
        for msg in burst.drain(..) {
            next += 1;
            shared.window.release(next);
            match msg.result {
                Ok(pixels) => {
                    if keep_size {
                        while owed_padding > 0 {
                            owed_padding -= 1;
                            if !sink.pad(&pixels, msg.index) {
                                return Ok(());
                            }
                        }
                    }
                    if let Some(out) = shuffle.push(Some((pixels, msg.index))) {
                        outputs += 1;
                        sink.position = if buffered {
                            outputs
                        } else {
                            (shared.offset + next) as u64
                        };
                        if !emit_output(&mut sink, out, keep_size, &mut last_good) {
                            return Ok(());
                        }
                    }
                }
                Err(e) => match cfg.on_error {
                    OnError::Skip { max } if e.is_data_error() => {
                        skipped += 1;
                        let path = e.path().map(PathBuf::from).unwrap_or_default();
                        log::warn!("skipping sample {}: {e}", msg.index);
                        shared.stats.record_skip(path, e.to_string());
                        owed_padding += 1;
                        if buffered {
                            if let Some(out) = shuffle.push(None) {
                                outputs += 1;
                                sink.position = outputs;
                                if !emit_output(&mut sink, out, keep_size, &mut last_good) {
                                    return Ok(());
                                }
                            }
                        }
                        if skipped > max {
                            return Err(Error::new(ErrorKind::TooManyFailures {
                                skipped,
                                last: e,
                            }));
                        }
                    }
                    _ => return Err(e),
                },
            }
        }
    }
    sink.position = (shared.offset + total) as u64;
    while let Some(out) = shuffle.drain_one() {
        outputs += 1;
        if buffered {
            sink.position = outputs;
        }
        if !emit_output(&mut sink, out, keep_size, &mut last_good) {
            return Ok(());
        }
    }
    if keep_size && owed_padding > 0 {
        if let Some((px, idx)) = last_good.take() {
            for _ in 0..owed_padding {
                if !sink.pad(&px, idx) {
                    return Ok(());
                }
            }
        }
    }
    if !sink.finish() {
        return Ok(());
    }
    if let (EpochCache::Write(writer), Some(cache)) = (&shared.cache_mode, &shared.cache) {
        cache.commit(writer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Many threads claiming through a small window, with the releaser lagging: every position
    /// is claimed exactly once, in order, never more than `size` ahead, and every thread ends.
    /// Runs `f` on its own thread and fails if it takes more than 60 s (a lost wake-up leaves
    /// a decode thread waiting forever: the test must fail, not hang).
    fn within_a_minute(f: impl FnOnce() + Send + 'static) {
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let runner = std::thread::spawn(move || {
            f();
            let _ = done_tx.send(());
        });
        match done_rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(()) => runner.join().unwrap(),
            // The runner panicked (an assertion): report its panic.
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                std::panic::resume_unwind(runner.join().unwrap_err())
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                panic!("hung: a thread waiting at the window was never woken")
            }
        }
    }

    #[test]
    fn window_hands_out_each_position_once_and_wakes_every_waiter() {
        within_a_minute(window_scenarios);
    }

    fn window_scenarios() {
        for (threads, size, total) in [(16, 2, 5_000), (8, 16, 20_000), (3, 1, 2_000)] {
            let window = Arc::new(Window::new(size, total, threads, 1, 0));
            let claimed: Arc<Vec<AtomicU64>> =
                Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
            let (tx, rx) = crossbeam_channel::unbounded::<usize>();
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (window, claimed, tx) = (window.clone(), claimed.clone(), tx.clone());
                    std::thread::spawn(move || {
                        while let Some(seq) = window.claim_as(t) {
                            claimed[seq].fetch_add(1, Ordering::Relaxed);
                            tx.send(seq).unwrap();
                        }
                    })
                })
                .collect();
            drop(tx);
            // The batcher: releases positions in order as they arrive.
            let mut seen = vec![false; total];
            let mut next = 0;
            for seq in rx.iter() {
                assert!(
                    seq < next + size,
                    "position {seq} claimed {size}+ ahead of {next}"
                );
                seen[seq] = true;
                while next < total && seen[next] {
                    next += 1;
                    window.release(next);
                }
            }
            for w in workers {
                w.join().unwrap();
            }
            assert_eq!(next, total);
            assert!(claimed.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        }
    }

    fn loaded(seq: usize) -> Loaded {
        Loaded {
            seq,
            index: seq as u32,
            result: Ok(Vec::new()),
        }
    }

    /// Decode threads loading through the window out of order, the batcher taking bursts and
    /// releasing them one by one: every position arrives once, in plan order, whatever the
    /// window, burst and thread count, and the last (short) burst is not left waiting.
    #[test]
    fn handoff_delivers_every_position_in_plan_order() {
        within_a_minute(|| {
            for (threads, size, total) in
                [(2, 64, 5_003), (8, 4, 997), (3, 1, 300), (16, 256, 20_000)]
            {
                let window = Arc::new(Window::new(size, total, threads, 1, 0));
                let (tx, rx) = handoff(size, total, 64);
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let (window, tx) = (window.clone(), tx.clone());
                        std::thread::spawn(move || {
                            while let Some(seq) = window.claim_as(t) {
                                if seq % 7 == t % 7 {
                                    std::thread::yield_now(); // out of order
                                }
                                assert!(tx.put(loaded(seq)));
                            }
                        })
                    })
                    .collect();
                drop(tx);
                let mut burst = Vec::new();
                let mut next = 0;
                while next < total {
                    assert!(rx.take(&mut burst), "ended at {next} of {total}");
                    for msg in burst.drain(..) {
                        assert_eq!(msg.seq, next);
                        next += 1;
                        window.release(next);
                    }
                }
                for w in workers {
                    w.join().unwrap();
                }
                assert!(
                    !rx.take(&mut burst),
                    "nothing is left once the threads have gone"
                );
            }
        });
    }

    /// The batcher wakes for a whole burst, the plan's last positions, or the decode threads
    /// all gone, and not for less; a stopped batcher makes `put` fail.
    #[test]
    fn handoff_waits_for_a_burst_and_sees_shutdown() {
        let (tx, rx) = handoff(64, 20, 64);
        let h = rx.0.clone();
        assert_eq!(rx.burst(), 16);
        for seq in (1..16).rev() {
            assert!(tx.put(loaded(seq)));
        }
        assert!(!h.enough(&h.lock()), "position 0 is missing");
        assert!(tx.put(loaded(0)));
        assert!(h.enough(&h.lock()));
        let mut burst = Vec::new();
        assert!(rx.take(&mut burst));
        assert_eq!(
            burst.iter().map(|m| m.seq).collect::<Vec<_>>(),
            (0..16).collect::<Vec<_>>()
        );
        // The last 4 of 20: a short burst is enough.
        for seq in 16..19 {
            assert!(tx.put(loaded(seq)));
        }
        assert!(!h.enough(&h.lock()));
        assert!(tx.put(loaded(19)));
        assert!(h.enough(&h.lock()));
        burst.clear();
        assert!(rx.take(&mut burst));
        assert_eq!(burst.len(), 4);
        // Every sender gone: the batcher wakes and is told so.
        let (tx, rx) = handoff(64, 100, 64);
        let other = tx.clone();
        assert!(tx.put(loaded(0)));
        drop(tx);
        let h = rx.0.clone();
        assert!(!h.enough(&h.lock()), "a sender is left");
        let waiter = std::thread::spawn(move || {
            let mut burst = Vec::new();
            let first = rx.take(&mut burst);
            (first, burst.len(), rx.take(&mut burst))
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(other);
        assert_eq!(waiter.join().unwrap(), (true, 1, false));
        // A batch of 4: the batcher wakes for 4, not 16.
        let (tx, rx) = handoff(64, 100, 4);
        let h = rx.0.clone();
        for seq in 0..3 {
            assert!(tx.put(loaded(seq)));
        }
        assert!(!h.enough(&h.lock()));
        assert!(tx.put(loaded(3)));
        assert!(h.enough(&h.lock()), "a whole batch is there");
        // The batcher gone: the decode threads are told to stop.
        let (tx, rx) = handoff(8, 100, 64);
        drop(rx);
        assert!(!tx.put(loaded(0)));
    }

    /// The readahead thread's side of the window: it runs `readahead` positions ahead of the
    /// next claim and no further, hints each position at most once and in order, skips the
    /// ones already claimed, and ends with the plan or on cancel.
    #[test]
    fn window_paces_the_readahead_thread() {
        within_a_minute(readahead_scenarios);
    }

    fn readahead_scenarios() {
        // Nothing claimed: the first range is the depth, then it waits.
        let window = Arc::new(Window::new(8, 100, 1, 1, 10));
        assert_eq!(window.to_hint(), Some((0..10, 0)));
        let w = window.clone();
        let waiting = std::thread::spawn(move || w.to_hint());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !waiting.is_finished(),
            "hinted more than 10 ahead of the next claim"
        );
        // Four claims do not wake it (it waits for half the depth); the fifth does.
        for seq in 0..4 {
            assert_eq!(window.claim(), Some(seq));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !waiting.is_finished(),
            "woken before half the depth was claimed"
        );
        assert_eq!(window.claim(), Some(4));
        assert_eq!(waiting.join().unwrap(), Some((10..15, 5)));
        // Cancelling wakes a waiting hinter, which ends.
        let w = window.clone();
        let waiting = std::thread::spawn(move || w.to_hint());
        std::thread::sleep(std::time::Duration::from_millis(20));
        window.cancel();
        assert_eq!(waiting.join().unwrap(), None);
        // No readahead: nothing to hint, without waiting.
        assert_eq!(Window::new(8, 100, 1, 1, 0).to_hint(), None);

        // Claimers racing the hinter (a slow hinter falls behind): each position is hinted at
        // most once, in order, and a position is either hinted or claimed before the hinter got
        // to it; the hinter ends with the plan.
        for (threads, size, total, depth) in
            [(4, 8, 20_000, 16), (2, 64, 5_000, 1), (3, 2, 3_000, 64)]
        {
            let window = Arc::new(Window::new(size, total, threads, 1, depth));
            let w = window.clone();
            let hinter = std::thread::spawn(move || {
                let mut hinted = Vec::new();
                while let Some((r, claimed)) = w.to_hint() {
                    assert!(r.start < r.end && r.end - r.start <= depth && r.end <= total);
                    assert!(
                        r.start >= claimed && r.end <= claimed + depth,
                        "{r:?} {claimed}"
                    );
                    hinted.push(r);
                    if hinted.len() % 7 == 0 {
                        std::thread::yield_now();
                    }
                }
                hinted
            });
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let window = window.clone();
                    std::thread::spawn(move || {
                        let mut n = 0;
                        while window.claim_as(t).is_some() {
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            // Release as claims come in, so the claimers never stall for long.
            while workers.iter().any(|w| !w.is_finished()) {
                let next = window.state.lock().unwrap().next;
                window.release(next);
                std::thread::yield_now();
            }
            let claimed: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
            assert_eq!(claimed, total);
            let hinted = hinter.join().unwrap();
            for pair in hinted.windows(2) {
                assert!(
                    pair[0].end <= pair[1].start,
                    "hinted twice or out of order: {pair:?}"
                );
            }
        }
    }

    /// Threads made inactive wait without claiming, and wake when activated or cancelled.
    #[test]
    fn window_parks_inactive_threads_until_activated_or_cancelled() {
        within_a_minute(parking_scenario);
    }

    fn parking_scenario() {
        let window = Arc::new(Window::new(4, 100, 1, 1, 0));
        let w = window.clone();
        let parked = std::thread::spawn(move || w.claim_as(1));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!parked.is_finished(), "an inactive thread claimed");
        window.set_active(2);
        assert_eq!(parked.join().unwrap(), Some(0));
        let w = window.clone();
        let parked = std::thread::spawn(move || w.claim_as(3));
        std::thread::sleep(std::time::Duration::from_millis(20));
        window.cancel();
        assert_eq!(parked.join().unwrap(), None);
    }
}
