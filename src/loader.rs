//! [`Loader`] (reused across epochs) and [`Batches`] (one epoch's iterator).

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use crate::tune::Knobs;
use std::time::Instant;

use crate::batch::Batch;
use crate::budget::MemoryBudget;
use crate::cache::Cache;
use crate::config::Config;
use crate::decode::LargeGate;
use crate::error::Error;
use crate::pipeline::{self, Running, Split};
use crate::prefetch::Device;
use crate::prefetch::Staging;
use crate::source::Source;
use crate::stats::{add, Stats, StatsCell};

/// A configured loader. Build one with [`Loader::builder`], then call [`Loader::epoch`] once
/// per epoch; each call starts the pipeline's threads and returns an iterator of batches.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Loader, OnError, Source};
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?)
///     .batch_size(8)
///     .on_error(OnError::Skip { max: 10 })
///     .seed(42)
///     .build()?;
/// for epoch in 0..2 {
///     for batch in loader.epoch(epoch) {
///         let batch = batch?;
///         assert!(batch.len() <= 8);
///     }
///     assert_eq!(loader.stats().images as usize, loader.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Loader {
    source: Arc<Source>,
    cfg: Arc<Config>,
    budget: MemoryBudget,
    stats: Arc<StatsCell>,
    gate: Arc<LargeGate>,
    pub(crate) staging: Staging,
    cache: Option<Arc<Cache>>,
    normalize_pool: std::sync::OnceLock<Option<Arc<rayon::ThreadPool>>>,
    /// The fingerprints a [`LoaderState`] records (source, plan settings), made on first use.
    plan_fingerprints: std::sync::OnceLock<(u64, u64)>,
    knobs: Arc<Mutex<Knobs>>,
    pools: crate::pipeline::Pools,
}

impl Loader {
    // `Loader::builder` is in builder.rs.

    pub(crate) fn new(
        source: Arc<Source>,
        cfg: Arc<Config>,
        budget: MemoryBudget,
        staging: Staging,
        cache: Option<Arc<Cache>>,
    ) -> Self {
        let knobs = Arc::new(Mutex::new(Knobs {
            threads: cfg.tuning.threads(),
            prefetch: cfg.tuning.prefetch,
        }));
        let pools = crate::pipeline::Pools::new(&cfg, source.len());
        let gate = LargeGate::for_loader(budget.decode_share_bytes, budget.large_shared_bytes);
        Loader {
            source,
            cfg,
            budget,
            stats: Arc::new(StatsCell::default()),
            gate: Arc::new(gate),
            staging,
            cache,
            normalize_pool: std::sync::OnceLock::new(),
            plan_fingerprints: std::sync::OnceLock::new(),
            knobs,
            pools,
        }
    }

    /// Starts epoch `epoch` and returns its batches. The epoch number seeds the permutation
    /// and the shuffle buffer, so epoch `k` yields the same batches in every run.
    ///
    /// Dropping the iterator, also partway through, stops and joins the epoch's threads.
    pub fn epoch(&self, epoch: u64) -> Batches {
        self.start(epoch, Split::default(), 0)
    }

    /// Continues an epoch from a saved [`LoaderState`] (from [`Batches::state`]): delivers
    /// exactly the samples of that epoch not yet delivered, then ends.
    ///
    /// The state may come from any rank, and this loader may have another rank or world size:
    /// ranks step together, so a state saved at a step boundary says what every rank has
    /// delivered. At the same world size every rank continues its own share, in the same
    /// order. At another world size (a job restarted on fewer or more GPUs) the samples no rank
    /// has delivered yet are split over the new ranks, each delivered once, with equal batch
    /// counts ([`shard_padding`](crate::LoaderBuilder::shard_padding)).
    ///
    /// A state saved after the epoch's last batch delivers nothing (every rank's state then
    /// records the epoch's end), at any world size; continue with `epoch(state.epoch + 1)`.
    ///
    /// The loader must have the same source and settings as the one that saved it: another
    /// seed, source (its paths and labels) or setting that orders the epoch (shuffle, shuffle
    /// block, shard padding) is an error yielded by the iterator, naming what changed, never a
    /// silently different plan. To check that every rank saved the same step, see
    /// [`LoaderState::agree`]. The whole contract — what each rank delivers, what a state means
    /// and what a resume delivers, for every setting — is in docs/CONTRACT.md, beside
    /// imagefeed's README.
    pub fn resume(&self, state: &LoaderState) -> Batches {
        let cfg = &self.cfg;
        let (source, settings) = self.plan_fingerprints();
        let split = state.split();
        let mut position = usize::try_from(state.position).ok();
        let mut resumed = split;
        let mismatch = if state.seed != cfg.seed {
            Some(format!(
                "the state has seed {}, the loader {}",
                state.seed, cfg.seed
            ))
        } else if state.world_size == 0 || state.rank >= state.world_size {
            Some(format!(
                "the state is for rank {} of {}, which no loader can be",
                state.rank, state.world_size
            ))
        } else if state.prior_world_size > 0 {
            Some(
                "the state was saved by an earlier imagefeed that resumed tar shards at another \
                 world size in blocks; this one cannot continue that epoch: start the next \
                 epoch instead"
                    .into(),
            )
        } else if state.source != 0 && state.source != source {
            Some(
                "the state was saved by a run over another source (another list of paths or \
                 labels): resuming it here would repeat and skip samples; resume with the \
                 source that saved it"
                    .into(),
            )
        } else if state.settings != 0 && state.settings != settings {
            Some(
                "the state was saved with other settings that order the epoch (shuffle, \
                 shuffle_buffer or shard_padding), or by an imagefeed that ordered epochs \
                 otherwise: resuming it here would repeat and skip samples; resume with the \
                 settings that saved it, or start the next epoch"
                    .into(),
            )
        } else if state.world_size != cfg.shard.world_size {
            resumed =
                crate::pipeline::resplit(&self.source, split, state.world_size, state.position);
            position = Some(0);
            log::info!(
                "resuming epoch {} saved by {} ranks at position {} on {} ranks: {} samples no rank has delivered",
                state.epoch,
                state.world_size,
                state.position,
                cfg.shard.world_size,
                crate::pipeline::split_len(&self.source, resumed)
            );
            None
        } else {
            None
        };
        match (mismatch, position) {
            (None, Some(position)) => self.start(state.epoch, resumed, position),
            (why, _) => Batches {
                running: None,
                tuner: None,
                pending: Some(Error::config(
                    "resume",
                    why.unwrap_or_else(|| "position out of range".into()),
                )),
                stats: self.stats.clone(),
                state: *state,
                remaining: 0,
                end: state.position,
            },
        }
    }

    /// Fingerprints of the source (its length, paths and labels) and of the settings that
    /// order an epoch besides the seed, rank and world size.
    fn plan_fingerprints(&self) -> (u64, u64) {
        *self.plan_fingerprints.get_or_init(|| {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            self.source
                .fingerprint(&mut h, crate::source::Stamps::Without);
            let cfg = &self.cfg;
            let settings = format!("{} padding={:?}", cfg.shuffle.describe(), cfg.shard.padding);
            // Never 0, which a state uses for "not recorded".
            (
                h.digest().max(1),
                xxhash_rust::xxh3::xxh3_64(settings.as_bytes()).max(1),
            )
        })
    }

    fn start(&self, epoch: u64, split: Split, position: usize) -> Batches {
        let (source, settings) = self.plan_fingerprints();
        // Batches still to come when none is skipped (positions fall on batch boundaries).
        let remaining = self
            .batches_of(crate::pipeline::split_len(&self.source, split))
            .saturating_sub(position / self.cfg.output.batch_size);
        let world_size = self.cfg.shard.world_size;
        let end = crate::pipeline::end_position(
            &self.cfg,
            crate::pipeline::split_len(&self.source, split),
        );
        let split = Split {
            order_world: if split.order_world == 0 {
                world_size
            } else {
                split.order_world
            },
            ..split
        };
        let state = LoaderState {
            seed: self.cfg.seed,
            epoch,
            position: position as u64,
            rank: self.cfg.shard.rank,
            world_size,
            source,
            settings,
            base: split.base,
            prior_world_size: 0,
            prior_position: 0,
            // 0 when it is the world size, as a parsed line gives it.
            order_world_size: if split.order_world == world_size {
                0
            } else {
                split.order_world
            },
        };
        let started = pipeline::start(pipeline::Start {
            cfg: self.cfg.clone(),
            source: self.source.clone(),
            stats: self.stats.clone(),
            gate: self.gate.clone(),
            cache: self.cache.clone(),
            normalize_pool: self.normalize_pool(),
            staging: self.staging.clone(),
            pools: &self.pools,
            knobs: *self.knobs.lock().unwrap_or_else(|e| e.into_inner()),
            epoch,
            split,
            start_at: position,
        });
        match started {
            Ok(running) => Batches {
                running: Some(running),
                tuner: self.cfg.tuning.autotune.then(|| {
                    Tuner::new(
                        self.knobs.clone(),
                        self.cfg.tuning.max_threads(),
                        &self.stats,
                    )
                }),
                pending: None,
                stats: self.stats.clone(),
                state,
                remaining,
                end,
            },
            Err(e) => Batches {
                running: None,
                tuner: None,
                pending: Some(e),
                stats: self.stats.clone(),
                state,
                remaining: 0,
                end,
            },
        }
    }

    /// The loader's normalize pool (`decode_threads` threads, idle between batches), made on
    /// first use; `None` with one thread or if it cannot be started (then the batcher thread
    /// normalizes alone).
    fn normalize_pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        self.normalize_pool
            .get_or_init(|| {
                let threads = self.cfg.tuning.threads();
                if threads < 2 {
                    return None;
                }
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("imagefeed-normalize-{i}"))
                    .build()
                    .map_err(|e| log::warn!("no normalize pool ({e}); normalizing on one thread"))
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// The loader's settings.
    #[cfg(any(feature = "__testing", feature = "unstable-tools"))]
    pub(crate) fn config(&self) -> &Config {
        &self.cfg
    }

    /// The host memory this loader may hold, computed from its settings.
    pub fn memory_budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The counters of the current (or last) epoch.
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// The samples an epoch of the source holds (before sharding): the source's, or a
    /// mixture's epoch ([`Source::epoch_len`]).
    pub fn len(&self) -> usize {
        self.source.epoch_len()
    }

    /// True if the source is empty (never the case for a built loader).
    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }

    /// Samples this rank delivers per epoch (all of them without sharding; skipped samples
    /// are replaced by copies under sharding).
    pub fn samples_per_epoch(&self) -> usize {
        let (n, w) = (self.len(), self.cfg.shard.world_size);
        if w <= 1 {
            n
        } else {
            crate::pipeline::plan_len(&self.cfg, n)
        }
    }

    /// Batches per epoch when no sample is skipped (with sharding, on every rank, skipped or
    /// not).
    pub fn batches_per_epoch(&self) -> usize {
        self.batches_of(self.len())
    }

    /// This rank's batches over `positions` of an epoch's order (no sample skipped).
    fn batches_of(&self, positions: usize) -> usize {
        let n = crate::pipeline::plan_len(&self.cfg, positions);
        if self.cfg.output.drop_remainder {
            n / self.cfg.output.batch_size
        } else {
            n.div_ceil(self.cfg.output.batch_size)
        }
    }

    /// The source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Where batches are delivered (the host, after a fallback from an unusable GPU).
    pub fn device(&self) -> Device {
        self.staging.device()
    }

    /// Bytes of the complete on-disk cache, if the loader has one.
    pub fn cache_size_on_disk(&self) -> Option<u64> {
        self.cache.as_ref().and_then(|c| c.size_on_disk())
    }

    /// Decode threads per epoch.
    pub fn decode_threads(&self) -> usize {
        self.cfg.tuning.threads()
    }
}

/// The batches of one epoch: an iterator of `Result<Batch, Error>`.
///
/// After an error (with [`OnError::Fail`](crate::OnError::Fail), or too many skips) the
/// iterator ends. Dropping it stops and joins the epoch's threads.
pub struct Batches {
    running: Option<Running>,
    /// With autotune: retunes the running epoch every [`TUNE_EVERY`], and leaves its last
    /// settings for the next epoch.
    tuner: Option<Tuner>,
    pending: Option<Error>,
    stats: Arc<StatsCell>,
    state: LoaderState,
    /// Batches still to come if no sample is skipped.
    remaining: usize,
    /// The position of the epoch's end, which the state records once the epoch is over
    /// (even where its last samples failed and no batch followed them).
    end: u64,
}

impl Batches {
    /// The loader's position after the last batch this iterator delivered (once the iterator
    /// has ended, the end of the epoch): save it with a training checkpoint and pass it to
    /// [`Loader::resume`] to continue from there.
    pub fn state(&self) -> LoaderState {
        self.state
    }

    /// The counters of this epoch so far.
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// Stops the threads and joins them; returns the first panic as an error.
    fn shut_down(&mut self) -> Option<Error> {
        let running = self.running.take()?;
        running.window.cancel();
        drop(running.rx);
        let mut panicked = None;
        for (stage, h) in running.handles {
            if let Err(payload) = h.join() {
                panicked.get_or_insert_with(|| Error::worker_panicked(stage, None, &*payload));
            }
        }
        if let Some(Err(payload)) = running.hints.map(|h| h.wait()) {
            panicked.get_or_insert_with(|| Error::worker_panicked("readahead", None, &*payload));
        }
        panicked
    }
}

impl Iterator for Batches {
    type Item = Result<Batch, Error>;

    /// At most the batches left of the epoch (plus an error that would end it); skipped
    /// samples or an error can end it sooner, so the lower bound is 0 (an error already
    /// waiting: exactly 1).
    fn size_hint(&self) -> (usize, Option<usize>) {
        match (&self.pending, &self.running) {
            (Some(_), _) => (1, Some(1)),
            (None, Some(_)) => (0, Some(self.remaining.saturating_add(1))),
            (None, None) => (0, Some(0)),
        }
    }

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        let running = self.running.as_ref()?;
        let waited = Instant::now();
        let received = running.rx.recv();
        add(&self.stats.consumer_wait_ns, waited.elapsed());
        match received {
            Ok(Ok(mut batch)) => {
                self.remaining = self.remaining.saturating_sub(1);
                self.state.position = batch.position();
                self.stats.images.fetch_add(batch.len() as u64, Relaxed);
                self.stats.batches.fetch_add(1, Relaxed);
                let padded = batch.padded().iter().filter(|&&p| p).count();
                self.stats.padded.fetch_add(padded as u64, Relaxed);
                for (path, reason) in batch.take_skipped() {
                    self.stats.record_skip(path, reason);
                }
                if let (Some(tuner), Some(running)) = (&mut self.tuner, &self.running) {
                    tuner.observe(&self.stats, &running.window);
                }
                Some(Ok(batch))
            }
            Ok(Err(e)) => {
                self.shut_down();
                self.stats.finish();
                Some(Err(e))
            }
            Err(_) => {
                // The batcher finished (or died): the epoch is over.
                let panicked = self.shut_down();
                self.stats.finish();
                if panicked.is_none() {
                    self.state.position = self.end;
                }
                if let (None, Some(mut tuner)) = (&panicked, self.tuner.take()) {
                    // The rest of the epoch since the last retune sets the next epoch off.
                    tuner.finish(&self.stats);
                }
                panicked.map(Err)
            }
        }
    }
}

/// How often autotune looks at where the time went while an epoch runs.
pub(crate) const TUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Autotune's view of the running epoch: the counters at the last retune.
struct Tuner {
    knobs: Arc<Mutex<Knobs>>,
    max_threads: usize,
    at: Instant,
    images: u64,
    consumer_wait_ns: u64,
    decode_busy_ns: u64,
}

impl Tuner {
    fn new(knobs: Arc<Mutex<Knobs>>, max_threads: usize, stats: &StatsCell) -> Self {
        Tuner {
            knobs,
            max_threads,
            at: Instant::now(),
            images: stats.images.load(Relaxed),
            consumer_wait_ns: stats.consumer_wait_ns.load(Relaxed),
            decode_busy_ns: stats.decode_busy_ns.load(Relaxed),
        }
    }

    /// The settings for the time since the last retune, as [`crate::tune::next`] decides
    /// them (`(before, after)` when they change). Not before [`TUNE_EVERY`] has passed;
    /// at the end of an epoch (`last`), over whatever is left of it if that is at least a
    /// quarter of that.
    fn retune(&mut self, stats: &StatsCell, last: bool) -> Option<(Knobs, Knobs)> {
        let elapsed = self.at.elapsed();
        let enough = if last { TUNE_EVERY / 4 } else { TUNE_EVERY };
        if elapsed < enough {
            return None;
        }
        let (images, wait, busy) = (
            stats.images.load(Relaxed),
            stats.consumer_wait_ns.load(Relaxed),
            stats.decode_busy_ns.load(Relaxed),
        );
        let window = Stats {
            images: images.saturating_sub(self.images),
            seconds: elapsed.as_secs_f64(),
            consumer_wait: std::time::Duration::from_nanos(
                wait.saturating_sub(self.consumer_wait_ns),
            ),
            decode_busy: std::time::Duration::from_nanos(busy.saturating_sub(self.decode_busy_ns)),
            ..Stats::default()
        };
        (self.at, self.images) = (Instant::now(), images);
        (self.consumer_wait_ns, self.decode_busy_ns) = (wait, busy);
        let mut k = self.knobs.lock().unwrap_or_else(|e| e.into_inner());
        let before = *k;
        *k = crate::tune::next(before, &window, self.max_threads);
        (*k != before).then_some((before, *k))
    }

    /// Retunes the running epoch if it is time: the window's live settings and the stats.
    fn observe(&mut self, stats: &StatsCell, window: &crate::pipeline::Window) {
        if let Some((before, after)) = self.retune(stats, false) {
            log::info!(
                "autotune: decode threads {} -> {}, prefetch {} -> {}",
                before.threads,
                after.threads,
                before.prefetch,
                after.prefetch
            );
            window.set_active(after.threads);
            window.set_prefetch(after.prefetch);
            stats.threads.store(after.threads as u64, Relaxed);
            stats.prefetch.store(after.prefetch as u64, Relaxed);
        }
    }

    /// At the end of an epoch: the settings the next one starts with.
    fn finish(&mut self, stats: &StatsCell) {
        if let Some((before, after)) = self.retune(stats, true) {
            log::info!(
                "autotune (next epoch): decode threads {} -> {}, prefetch {} -> {}",
                before.threads,
                after.threads,
                before.prefetch,
                after.prefetch
            );
        }
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("running", &self.running.is_some())
            .finish()
    }
}

/// Where a loader is in its epochs: a few numbers a training checkpoint can save (its
/// `Display` form is one line, which `parse` reads back). A loader with the same source and
/// settings resumes from it with exactly the samples not yet delivered
/// ([`Loader::resume`](crate::Loader::resume)); the fingerprints let it refuse a state saved
/// over another source or with other ordering settings.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Loader, LoaderState, Source};
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?).batch_size(2).build()?;
/// let mut batches = loader.epoch(0);
/// batches.next().transpose()?;
/// let saved = batches.state().to_string(); // into the checkpoint
/// drop(batches);
/// let state: LoaderState = saved.parse()?;
/// let rest: usize = loader.resume(&state).map(|b| b.map(|b| b.len())).sum::<Result<_, _>>()?;
/// assert_eq!(rest + 2, loader.len());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoaderState {
    /// The loader's seed.
    pub seed: u64,
    /// The epoch.
    pub epoch: u64,
    /// Positions of this rank's epoch plan consumed (skipped samples included). Under
    /// sharding every rank's position is the same at each step (`steps × batch_size`), and
    /// after the epoch's last batch it is the end of the epoch, `⌈samples left / world_size⌉`,
    /// from which a resume delivers nothing (docs/CONTRACT.md).
    pub position: u64,
    /// The rank.
    pub rank: usize,
    /// The world size.
    pub world_size: usize,
    /// A fingerprint of the source's paths and labels (0: not recorded, not checked).
    pub source: u64,
    /// A fingerprint of the settings that order an epoch besides the seed, rank and world
    /// size: shuffle, shuffle buffer, shard padding (0: not recorded, not checked).
    pub settings: u64,
    /// After a resume at another world size: positions of the epoch's order that ranks
    /// delivered before (0 otherwise).
    pub base: u64,
    /// Always 0. (Set by earlier versions of imagefeed, which resumed tar shards at another
    /// world size in blocks; [`Loader::resume`] refuses such a state by name.)
    pub prior_world_size: usize,
    /// Always 0 (see `prior_world_size`).
    pub prior_position: u64,
    /// The world size the epoch's order was laid out for: the world size its epoch started
    /// with, which a source read as streams cuts its shards by (0: `world_size`).
    pub order_world_size: usize,
}

impl LoaderState {
    /// The part of the epoch this state's ranks were splitting.
    fn split(&self) -> Split {
        Split {
            base: self.base,
            order_world: if self.order_world_size == 0 {
                self.world_size
            } else {
                self.order_world_size
            },
        }
    }

    /// The one state that the states of a job's ranks, saved at the same step, describe:
    /// checks that they come from one run (seed, epoch, world size, source, settings) and one
    /// step (the same position), with no rank twice. Resuming needs only one rank's state
    /// ([`Loader::resume`]); this catches ranks that stopped at different steps, which no
    /// resume can make exact.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the two ranks
    /// that differ and how, or saying that `states` is empty.
    pub fn agree(states: &[LoaderState]) -> Result<LoaderState, Error> {
        let first = states
            .first()
            .ok_or_else(|| Error::config("resume", "no state given"))?;
        let mut seen = std::collections::HashSet::new();
        for s in states {
            let differs = if (s.seed, s.source, s.settings)
                != (first.seed, first.source, first.settings)
            {
                Some("come from different runs (seed, source or settings)".to_string())
            } else if s.epoch != first.epoch {
                Some(format!(
                    "stopped in different epochs ({} and {})",
                    first.epoch, s.epoch
                ))
            } else if s.world_size != first.world_size || s.split() != first.split() {
                Some(format!(
                    "were saved at different world sizes ({} and {})",
                    first.world_size, s.world_size
                ))
            } else if s.position != first.position {
                Some(format!(
                    "stopped at different positions ({} and {}): the ranks were not at the same step, so the samples delivered are not known exactly; resume from states saved at the same step",
                    first.position, s.position
                ))
            } else if !seen.insert(s.rank) {
                Some(format!("are both rank {}", s.rank))
            } else {
                None
            };
            if let Some(how) = differs {
                return Err(Error::config(
                    "resume",
                    format!(
                        "the states of rank {} and rank {} {how}",
                        first.rank, s.rank
                    ),
                ));
            }
        }
        Ok(*first)
    }
}

impl std::fmt::Display for LoaderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "imagefeed-state-v1 seed={} epoch={} position={} rank={} world_size={} source={:016x} settings={:016x}",
            self.seed, self.epoch, self.position, self.rank, self.world_size, self.source, self.settings
        )?;
        // Only after a resume at another world size, so other lines read as they always did.
        if self.base > 0 {
            write!(f, " base={}", self.base)?;
        }
        if self.prior_world_size > 0 {
            write!(
                f,
                " prior={}x{}",
                self.prior_world_size, self.prior_position
            )?;
        }
        if self.order_world_size != 0 && self.order_world_size != self.world_size {
            write!(f, " order={}", self.order_world_size)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LoaderState {
    type Err = Error;
    /// Parses the form [`Display`](std::fmt::Display) writes (a line without the
    /// fingerprints, as written before they were recorded, parses with them unchecked).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::config("resume", format!("`{s}` is not an imagefeed-state-v1 line"));
        let mut words = s.split_whitespace();
        if words.next() != Some("imagefeed-state-v1") {
            return Err(bad());
        }
        let mut get = |key: &str| -> Result<u64, Error> {
            words
                .next()
                .and_then(|w| w.strip_prefix(key))
                .and_then(|w| w.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .ok_or_else(bad)
        };
        let (seed, epoch, position) = (get("seed")?, get("epoch")?, get("position")?);
        let (rank, world_size) = (get("rank")? as usize, get("world_size")? as usize);
        // The fingerprints; `plan=` (the command line's own fingerprint, written before the
        // state had these) is ignored.
        let (mut source, mut settings) = (0, 0);
        let (mut base, mut prior_world_size, mut prior_position) = (0, 0, 0);
        let mut order_world_size = 0;
        for w in words {
            let (key, value) = w.split_once('=').ok_or_else(bad)?;
            let hex = || u64::from_str_radix(value, 16).map_err(|_| bad());
            match key {
                "source" => source = hex()?,
                "settings" => settings = hex()?,
                "plan" => {}
                "base" => base = value.parse().map_err(|_| bad())?,
                "order" => order_world_size = value.parse().map_err(|_| bad())?,
                "prior" => {
                    let (w, p) = value.split_once('x').ok_or_else(bad)?;
                    prior_world_size = w.parse().map_err(|_| bad())?;
                    prior_position = p.parse().map_err(|_| bad())?;
                }
                _ => return Err(bad()),
            }
        }
        Ok(LoaderState {
            seed,
            epoch,
            position,
            rank,
            world_size,
            source,
            settings,
            base,
            prior_world_size,
            prior_position,
            order_world_size,
        })
    }
}
