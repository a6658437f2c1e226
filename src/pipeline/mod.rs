//! The wiring: threads, channels, their capacities, the memory bound they imply, and the
//! shutdown order. No other module knows the topology.
//!
//! ```text
//!  plan (position-addressable order of indices)
//!     │ claimed in order, at most `window` ahead of the batcher
//!     ▼
//!  decode ×T ──(seq, idx, u8 sample)──▶ batcher ──u8 Batch──▶ prefetch queue ──▶ normalize ──▶ consumer
//!  threads      bounded(window)          thread              bounded(prefetch-1)   thread   rendezvous
//!     ▲                                    │ reorder ring → u8 batch buffer                (Batches::next)
//!     └──────── sample buffers ◀───────────┘       u8 buffers ◀── drop      output buffers ◀── Batch::drop
//! ```
//!
//! (A `u8` loader, or a device loader, has no normalize thread: the batcher writes the batch in
//! its final form and the prefetch queue holds `prefetch` of them.)
//!
//! This file starts the threads and joins them; each runs a loop in a file of its own, and
//! they meet at the [`Window`] (`window.rs`), which hands out the positions of the epoch's plan
//! (`plan.rs`) in order, and at the hand-off ring (`handoff.rs`) between the decode threads
//! and the batcher. One sample's path: `plan.rs` gives its index a position; `readahead.rs`
//! hints its file to the kernel, or `fetch.rs` reads its bytes (tar shards, object storage);
//! `decode_loop.rs` claims the position (or takes the fetched bytes) and loads it
//! (`crate::decode` and `crate::transform`, or a record of `crate::cache`); `handoff.rs`
//! carries it to `batch_loop.rs`, which restores plan order and passes it through the shuffle
//! buffer (`crate::shuffle`) to the batcher (`crate::batch`); `crate::prefetch` stages the
//! batch and the consumer receives it.
//!
//! - **Readahead** (`imagefeed-readahead`, `readahead.rs`; the loader's, kept between epochs)
//!   walks the plan up to `readahead` positions past the next claim and asks the kernel to
//!   read those samples' local files, or their records in a complete cache the epoch reads, so
//!   that decode threads do not wait on the disk; it waits on the window like the decoders,
//!   and a cancelled or finished epoch ends its part.
//! - **Fetch** (`imagefeed-fetch`, `fetch.rs`; tar shards and object storage only) claims
//!   positions in order and reads their bytes (a shard as one stream, objects with bounded
//!   concurrency), within a byte budget, for the decode threads.
//! - **Decode threads** (`imagefeed-decode-N`, owned by the loader, one set per epoch) claim
//!   the next position of the epoch's plan from the [`Window`], which lets them run at most
//!   `window` positions ahead of the batcher. They read, decode, resize and orient into a `u8`
//!   sample buffer and send it, tagged with its position, to the batcher. A panic while loading
//!   a sample is caught and becomes an error naming the sample.
//! - **The batcher** (`imagefeed-batch`) puts samples back in plan order through a ring of
//!   `window` slots, so the output never depends on thread timing; applies the error policy
//!   (`batch_loop.rs`); and writes each sample into a batch buffer as it comes (`u8`), or
//!   normalized once when the batch is full (a device loader). Full batches go to the
//!   prefetch queue.
//! - **Normalize** (`imagefeed-normalize`, `normalize_loop.rs`; host loaders whose dtype is not
//!   `u8`) takes the next `u8` batch, normalizes it into the output dtype and waits to hand it
//!   over: batches wait as `u8` (a quarter of `f32`'s bytes), and the consumer still finds the
//!   next one ready.
//! - **Device staging** ([`Staging`], `prefetch/`): for a GPU loader the batch buffer is a slot
//!   of the device ring (`prefetch + 2` slots): the batcher waits for a free slot (polling the
//!   window's cancel flag, so a drop never hangs), copies the `u8` samples into its pinned
//!   buffer, and queues the copy to the GPU before sending the batch. The `Batch` returns the
//!   slot when dropped. `prefetch/mod.rs` has the two fences that guard reuse.
//! - **Memory**: `window + 2` samples (plus one batch's for a device loader), the batches of
//!   `Config::host_batches` (with a normalize thread: `prefetch + 1` `u8` ones and 3 in the
//!   output dtype), per-thread decode buffers, the fetch stage's byte bound and one large
//!   image at a time: [`MemoryBudget`](crate::MemoryBudget) adds them up.
//! - **Shutdown**: dropping [`Batches`](crate::Batches) cancels the window (waking waiting
//!   decoders) and drops the prefetch receiver (failing the batcher's send); decoders see the
//!   cancel or a closed channel and return; then every thread is joined. A closed channel means
//!   shut down, never an error.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::batch::OutputSettings;
use crate::batch::{Batch, BatchFormat, Dtype, Layout, Normalizer};
use crate::cache::{Cache, EpochCache};
use crate::config::Config;
use crate::decode::DecodeSettings;
use crate::decode::Geometry;
use crate::decode::{Decoder, LargeGate, VerifiedFiles};
use crate::error::Error;
use crate::error::OnError;
use crate::prefetch::{BatchParts, Staging};
use crate::source::Source;
use crate::stats::StatsCell;

mod batch_loop;
mod decode_loop;
mod fetch;
mod handoff;
mod normalize_loop;
mod plan;
mod readahead;
mod window;

use batch_loop::batch_loop;
use decode_loop::decode_loop;
use fetch::{fetch_loop, ByteBudget, Fetched};
use handoff::handoff;
use normalize_loop::{normalize_loop, NormalizeJob};
#[cfg(any(feature = "__testing", feature = "unstable-tools"))]
pub(crate) use plan::global_order;
pub(crate) use plan::{end_position, plan_len, resplit, split_len, Plan, Split};
pub(crate) use window::Window;

/// What one epoch's threads share, in three parts: what every loop reads ([`Epoch`]), and
/// what only the decode threads ([`DecodeJob`]) or only the batcher ([`BatchJob`]) read. The
/// fetch and readahead threads read the [`Epoch`] alone.
pub(crate) struct EpochShared {
    pub(crate) epoch: Epoch,
    pub(crate) decode: DecodeJob,
    pub(crate) batch: BatchJob,
}

/// What every loop of one epoch reads: the epoch's number, its plan and the window that hands
/// out the plan's positions, the source, how the epoch uses the cache, and the counters.
pub(crate) struct Epoch {
    pub(crate) number: u64,
    pub(crate) plan: Plan,
    pub(crate) window: Arc<Window>,
    pub(crate) source: Arc<Source>,
    pub(crate) cache_mode: EpochCache,
    pub(crate) stats: Arc<StatsCell>,
    /// The largest file a sample may be (`DecodeSettings::max_file_bytes`).
    pub(crate) max_file_bytes: u64,
    /// Samples the order mixes at once: a reader keeps the tables of the shards they span.
    pub(crate) shuffle_block: usize,
    /// The per-sample fields read with each sample.
    pub(crate) fields: crate::fields::FieldSpecs,
}

/// The decode threads' settings and resources.
pub(crate) struct DecodeJob {
    pub(crate) settings: DecodeSettings,
    /// The output size, transform, filter and flip.
    pub(crate) geometry: Geometry,
    /// Seeds each sample's draw (with the epoch and the index).
    pub(crate) seed: u64,
    /// With a cache and a random transform, the side of the base images the cache records.
    pub(crate) base_side: Option<u32>,
    /// A test hook: panic on this dataset index.
    pub(crate) panic_on_index: Option<u64>,
    /// A test hook: samples whose read fails.
    pub(crate) failures: Option<crate::config::FailureHook>,
    pub(crate) gate: Arc<LargeGate>,
    pub(crate) cache: Option<Arc<Cache>>,
    /// `u8` sample buffers, recycled by the batcher.
    samples: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    decoders: Arc<Mutex<Vec<Decoder>>>,
    /// The files strict cropped decodes have read to their end (`decode/verified.rs`).
    pub(crate) verified: Option<Arc<VerifiedFiles>>,
}

/// The batcher's settings and resources.
pub(crate) struct BatchJob {
    pub(crate) output: OutputSettings,
    pub(crate) on_error: OnError,
    /// Ranks share the epoch: a skipped sample is replaced so that batch counts stay equal.
    pub(crate) sharded: bool,
    /// Every plan position gives one slot of a batch (sharded, or no sample is skipped).
    pub(crate) exact_slots: bool,
    /// Autotune may change the prefetch depth while the epoch runs.
    pub(crate) autotune: bool,
    /// Threads that write normalized samples into batch buffers in parallel.
    normalize_pool: Option<Arc<rayon::ThreadPool>>,
    /// Where full batches go: host memory or a device's slot ring.
    staging: Staging,
    /// Whether the batches go to the normalize thread as `u8` (`normalize_loop.rs`).
    deferred: bool,
    /// Plan positions already delivered before this run (resumption).
    offset: usize,
    /// The position the run's last batch records (`plan::end_position`).
    end_position: u64,
    /// The cache, to commit at the end of the epoch.
    cache: Option<Arc<Cache>>,
    /// `u8` sample buffers, returned to the decode threads.
    samples: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    batch_pool: (Sender<BatchParts>, Receiver<BatchParts>),
}

impl BatchJob {
    /// The batches the batcher writes: the loader's, or `u8` NHWC ones for the normalize
    /// thread.
    pub(crate) fn batch_format(&self) -> BatchFormat {
        let mut format = self.output.format();
        if self.deferred {
            format.dtype = Dtype::U8;
            format.layout = Layout::Nhwc;
        }
        format
    }

    /// Whether the batcher copies each sample into its batch as it comes (see `Batcher`):
    /// host `u8` NHWC batches.
    pub(crate) fn writes_through(&self) -> bool {
        let format = self.batch_format();
        matches!(self.staging, Staging::Host)
            && format.dtype == Dtype::U8
            && format.layout == Layout::Nhwc
    }
}

/// Buffers recycled across all epochs of a loader: `u8` sample buffers and batch buffers.
/// Keeping them in the loader (instead of one set per epoch) means later epochs allocate
/// nothing, and the process's memory stays flat over many epochs.
#[derive(Debug, Clone)]
pub(crate) struct Pools {
    samples: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    /// The batcher's batch buffers (`u8` ones when a normalize thread follows).
    batches: (Sender<BatchParts>, Receiver<BatchParts>),
    /// The normalize thread's batch buffers, in the output dtype.
    normalized: (Sender<BatchParts>, Receiver<BatchParts>),
    /// Per-thread decoders (buffers, libjpeg-turbo handles) between epochs.
    decoders: Arc<Mutex<Vec<Decoder>>>,
    /// The readahead thread, kept between epochs.
    readahead: Arc<readahead::Worker>,
    /// Set once the batch pool has been filled (at the first epoch's start).
    batches_filled: Arc<std::sync::Once>,
    /// The files strict cropped decodes have read to their end cleanly, across epochs.
    verified: Option<Arc<VerifiedFiles>>,
}

impl Pools {
    /// The pools of a loader over `samples` samples.
    pub(crate) fn new(cfg: &Config, samples: usize) -> Self {
        Pools {
            // In flight, held by the batcher for one batch, plus slack.
            samples: bounded(cfg.tuning.reorder_window() + cfg.output.batch_size + 2),
            // Room for every batch in circulation (queue, consumer, batcher, and a spare for a
            // consumer that keeps the previous batch while asking for the next), so a returned
            // batch is never freed and a new one never allocated in steady state: the
            // `prefetch + 3` batches of the memory budget.
            batches: bounded(cfg.tuning.max_prefetch() + 3 + cfg.held_batches()),
            normalized: bounded(cfg.host_batches().1),
            decoders: Arc::new(Mutex::new(Vec::new())),
            readahead: Arc::new(readahead::Worker::default()),
            batches_filled: Arc::new(std::sync::Once::new()),
            verified: cfg
                .verifies_crops()
                .then(|| Arc::new(VerifiedFiles::new(samples))),
        }
    }

    /// Puts the budget's host batch buffers in the pools when the first epoch starts (see
    /// `Config::host_batches`; the output dtype's spare is made only for a consumer that keeps
    /// a batch while asking for the next). The batcher takes them in turn (the pool is first
    /// in, first out), so all of them are in use within the first batches and the loader's
    /// memory is at its steady size from the first epoch on. Made on demand instead, they
    /// came one by one whenever a slow step let the queue fill (and one more than the pool
    /// held was freed, which moved glibc's mmap threshold up), and the peak RSS rose over the
    /// first epochs (c5k: by 20 to 30 MB). (Unwritten, the buffers cost address space only.)
    /// A device loader, whose host storage depends on where it normalizes, makes its own on
    /// demand.
    fn fill_batches(&self, cfg: &Config, staging: &Staging, deferred: bool) {
        if !matches!(staging, Staging::Host | Staging::Simulated(_)) {
            return;
        }
        self.batches_filled.call_once(|| {
            let format = cfg.output.format();
            let len = cfg.output.sample_len();
            let queue = cfg.tuning.prefetch + cfg.held_batches();
            let fill = |pool: &Sender<BatchParts>, n: usize, dtype: Dtype| {
                for _ in 0..n {
                    if pool
                        .try_send(BatchParts::new(dtype, format.batch_size, len))
                        .is_err()
                    {
                        break;
                    }
                }
            };
            if deferred {
                fill(&self.batches.0, queue + 1, Dtype::U8);
                fill(&self.normalized.0, 2, format.dtype);
            } else {
                fill(&self.batches.0, queue + 3, format.dtype);
            }
        });
    }
}

/// A loaded sample (or its error), tagged with its plan position, with its label.
struct Loaded {
    seq: usize,
    index: u32,
    label: u32,
    /// The sample's fields, in the loader's order (empty without fields).
    fields: crate::fields::SampleFields,
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

/// What starting an epoch takes: the loader's parts, each shared with the epoch's threads, and
/// where the epoch starts.
pub(crate) struct Start<'a> {
    pub(crate) cfg: Arc<Config>,
    pub(crate) source: Arc<Source>,
    pub(crate) stats: Arc<StatsCell>,
    pub(crate) gate: Arc<LargeGate>,
    pub(crate) cache: Option<Arc<Cache>>,
    pub(crate) normalize_pool: Option<Arc<rayon::ThreadPool>>,
    pub(crate) staging: Staging,
    pub(crate) pools: &'a Pools,
    pub(crate) knobs: crate::tune::Knobs,
    pub(crate) epoch: u64,
    pub(crate) split: Split,
    /// The plan position the epoch starts at (0, or a resumed state's).
    pub(crate) start_at: usize,
}

/// Starts the threads of one epoch.
pub(crate) fn start(s: Start<'_>) -> Result<Running, Error> {
    let (cfg, knobs, pools) = (s.cfg.clone(), s.knobs, s.pools);
    let threads = knobs.threads;
    let window_size = cfg.tuning.reorder_window();
    let cache_mode = match &s.cache {
        Some(c) => c.begin_epoch()?,
        None => EpochCache::Off,
    };
    let plan = Plan::new(&cfg, &s.source, s.epoch, s.split).starting_at(s.start_at)?;
    // With autotune every thread the loader may use starts, and the window says how many
    // work; the prefetch queue has room for the deepest setting, and the window says how
    // much of it to use.
    let (spawned_threads, queue) = if cfg.tuning.autotune {
        (
            cfg.tuning.max_threads().max(threads),
            cfg.tuning.max_prefetch().max(knobs.prefetch),
        )
    } else {
        (threads, knobs.prefetch)
    };
    // Local files, or the records of a complete cache the epoch reads (whatever the source),
    // are hinted to the kernel ahead of the decode threads where the platform has such hints.
    // Tar shards and objects are read ahead by the fetch stage.
    let readahead = match &cache_mode {
        EpochCache::Read(_) if readahead::SUPPORTED => cfg.tuning.readahead,
        _ if s.source.backing.is_local_files() && readahead::SUPPORTED => cfg.tuning.readahead,
        _ => 0,
    };
    let window = Arc::new(Window::new(
        window_size,
        plan.len(),
        threads,
        knobs.prefetch,
        readahead,
    ));
    s.stats
        .reset(s.epoch, threads, knobs.prefetch, cache_mode.stats_code());
    let deferred = cfg.defers_normalize() && matches!(s.staging, Staging::Host);
    pools.fill_batches(&cfg, &s.staging, deferred);
    let normalize = deferred.then(|| NormalizeJob {
        format: cfg.output.format(),
        normalizer: Normalizer::new(cfg.output.mean, cfg.output.std, cfg.output.layout),
        pool: pools.normalized.clone(),
        normalize_pool: s.normalize_pool.clone(),
    });
    let cache_bytes = s.cache.as_ref().and_then(|c| c.size_on_disk());
    s.stats.cache_bytes_plus_one.store(
        cache_bytes.map_or(0, |b| b + 1),
        std::sync::atomic::Ordering::Relaxed,
    );
    let shared = epoch_shared(s, plan, window.clone(), cache_mode, deferred);
    // The prefetch queue: ready batches ahead of the consumer (deferring the normalization,
    // the normalize thread's ready batch, handed over as the consumer asks for it, and
    // `prefetch - 1` `u8` ones).
    let (batch_tx, batch_rx) = bounded(queue - usize::from(deferred));
    let (normalize, out_rx) = match normalize {
        Some(job) => {
            let (out_tx, out_rx) = bounded(0);
            (Some((job, batch_rx, out_tx)), out_rx)
        }
        None => (None, batch_rx),
    };
    let queues = Queues {
        window_size,
        batch_size: cfg.output.batch_size,
        decode_threads: spawned_threads,
        readahead,
        normalize,
        batch_tx,
    };
    let (handles, hints) = spawn(&shared, pools, queues)?;
    Ok(Running {
        rx: out_rx,
        handles,
        hints,
        window,
    })
}

/// The state an epoch's threads share, made of the loader's parts.
fn epoch_shared(
    s: Start<'_>,
    plan: Plan,
    window: Arc<Window>,
    cache_mode: EpochCache,
    deferred: bool,
) -> Arc<EpochShared> {
    let (cfg, pools) = (s.cfg, s.pools);
    let offset = plan.offset();
    let end_position = end_position(&cfg, split_len(&s.source, s.split));
    Arc::new(EpochShared {
        epoch: Epoch {
            number: s.epoch,
            plan,
            window,
            source: s.source,
            cache_mode,
            stats: s.stats,
            max_file_bytes: cfg.decode.max_file_bytes(),
            shuffle_block: cfg.shuffle.block(),
            fields: cfg.fields.clone(),
        },
        decode: DecodeJob {
            settings: cfg.decode.clone(),
            geometry: cfg.geometry(),
            seed: cfg.seed,
            base_side: cfg.cache_base_side(),
            panic_on_index: cfg.panic_on_index,
            failures: cfg.failures.clone(),
            gate: s.gate,
            cache: s.cache.clone(),
            samples: pools.samples.clone(),
            decoders: pools.decoders.clone(),
            verified: pools.verified.clone(),
        },
        batch: BatchJob {
            output: cfg.output.clone(),
            on_error: cfg.on_error,
            sharded: cfg.shard.world_size > 1,
            exact_slots: cfg.shard.world_size > 1 || !matches!(cfg.on_error, OnError::Skip { .. }),
            autotune: cfg.tuning.autotune,
            normalize_pool: s.normalize_pool,
            staging: s.staging,
            deferred,
            offset,
            end_position,
            cache: s.cache,
            samples: pools.samples.clone(),
            batch_pool: pools.batches.clone(),
        },
    })
}

/// The sizes and channels [`spawn`] wires the threads with.
struct Queues {
    window_size: usize,
    batch_size: usize,
    decode_threads: usize,
    readahead: usize,
    /// With the normalization deferred: its job, the `u8` queue it reads and its hand-over.
    normalize: Option<(NormalizeJob, Receiver<BatchResult>, Sender<BatchResult>)>,
    batch_tx: Sender<BatchResult>,
}

type BatchResult = Result<Batch, Error>;
type Handles = Vec<(&'static str, JoinHandle<()>)>;

/// Starts the epoch's threads: fetch (for sources read as streams), readahead, the decode
/// threads, normalize (where deferred) and the batcher. If one cannot start, those started
/// are stopped and joined, and the error returned.
fn spawn(
    shared: &Arc<EpochShared>,
    pools: &Pools,
    q: Queues,
) -> Result<(Handles, Option<readahead::Started>), Error> {
    // The window bounds what is in flight, so the ring never overflows.
    let (loaded_tx, loaded_rx) = handoff(q.window_size, shared.epoch.plan.len(), q.batch_size);
    let mut handles = Vec::with_capacity(q.decode_threads + 3);
    let mut hints = None;
    // Tar shards and objects: a fetch thread reads bytes ahead for the decode threads.
    let fetch = shared.epoch.source.backing.byte_bound().map(|bound| {
        let (tx, rx) = bounded::<Fetched>(q.window_size);
        (tx, rx, Arc::new(ByteBudget::new(bound)))
    });
    let (normalize, batch_tx) = (q.normalize, q.batch_tx);
    let spawn_all = || -> Result<(), Error> {
        if let Some((fetch_tx, _, budget)) = &fetch {
            let (shared, tx, budget) = (shared.clone(), fetch_tx.clone(), budget.clone());
            let h = std::thread::Builder::new()
                .name("imagefeed-fetch".into())
                .spawn(move || fetch_loop(&shared.epoch, &tx, &budget))
                .map_err(Error::spawn)?;
            handles.push(("fetch", h));
        }
        if q.readahead > 0 {
            hints = Some(pools.readahead.start(shared, q.readahead)?);
        }
        for t in 0..q.decode_threads {
            let shared = shared.clone();
            let tx = loaded_tx.clone();
            let from_fetch = fetch.as_ref().map(|(_, rx, b)| (rx.clone(), b.clone()));
            let h = std::thread::Builder::new()
                .name(format!("imagefeed-decode-{t}"))
                .spawn(move || decode_loop(&shared.epoch, &shared.decode, &tx, from_fetch, t))
                .map_err(Error::spawn)?;
            handles.push(("decode", h));
        }
        if let Some((job, rx, out)) = normalize {
            let shared = shared.clone();
            let h = std::thread::Builder::new()
                .name("imagefeed-normalize".into())
                .spawn(move || normalize_loop(&shared.epoch, &job, &rx, &out))
                .map_err(Error::spawn)?;
            handles.push(("normalize", h));
        }
        let shared = shared.clone();
        let h = std::thread::Builder::new()
            .name("imagefeed-batch".into())
            .spawn(move || batch_loop(&shared.epoch, &shared.batch, &loaded_rx, &batch_tx))
            .map_err(Error::spawn)?;
        handles.push(("batch", h));
        Ok(())
    };
    let spawned = spawn_all();
    drop(loaded_tx);
    drop(fetch);
    if let Err(e) = spawned {
        shared.epoch.window.cancel();
        for (_, h) in handles {
            let _ = h.join();
        }
        if let Some(hints) = hints {
            let _ = hints.wait();
        }
        return Err(e);
    }
    Ok((handles, hints))
}

#[cfg(test)]
mod tests {
    /// Many threads claiming through a small window, with the releaser lagging: every position
    /// is claimed exactly once, in order, never more than `size` ahead, and every thread ends.
    /// Runs `f` on its own thread and fails if it takes more than 60 s (a lost wake-up leaves
    /// a decode thread waiting forever: the test must fail, not hang).
    pub(super) fn within_a_minute(f: impl FnOnce() + Send + 'static) {
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
}
