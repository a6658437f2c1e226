//! [`Loader`] (reused across epochs) and [`Batches`] (one epoch's iterator).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use crate::batch::Batch;
use crate::cache::Cache;
use crate::builder::{Config, Device, LoaderBuilder, MemoryBudget};
use crate::decode::LargeGate;
use crate::error::Error;
use crate::pipeline::{self, Running};
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
    staging: Staging,
    cache: Option<Arc<Cache>>,
}

impl Loader {
    /// Starts building a loader over `source`.
    pub fn builder(source: Source) -> LoaderBuilder {
        LoaderBuilder::new(source)
    }

    pub(crate) fn new(
        source: Arc<Source>,
        cfg: Arc<Config>,
        budget: MemoryBudget,
        staging: Staging,
        cache: Option<Arc<Cache>>,
    ) -> Self {
        Loader {
            source,
            cfg,
            budget,
            stats: Arc::new(StatsCell::default()),
            gate: Arc::new(LargeGate::default()),
            staging,
            cache,
        }
    }

    /// Starts epoch `epoch` and returns its batches. The epoch number seeds the permutation
    /// and the shuffle buffer, so epoch `k` yields the same batches in every run.
    ///
    /// Dropping the iterator, also partway through, stops and joins the epoch's threads.
    pub fn epoch(&self, epoch: u64) -> Batches {
        let started = pipeline::start(
            self.cfg.clone(),
            self.source.clone(),
            self.stats.clone(),
            self.gate.clone(),
            self.cache.clone(),
            epoch,
        );
        match started {
            Ok(running) => Batches {
                running: Some(running),
                pending: None,
                stats: self.stats.clone(),
            },
            Err(e) => Batches {
                running: None,
                pending: Some(e),
                stats: self.stats.clone(),
            },
        }
    }

    /// The host memory this loader may hold, computed from its settings.
    pub fn memory_budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The counters of the current (or last) epoch.
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// The number of samples in the source.
    pub fn len(&self) -> usize {
        self.source.len()
    }

    /// True if the source is empty (never the case for a built loader).
    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }

    /// Batches per epoch when no sample is skipped.
    pub fn batches_per_epoch(&self) -> usize {
        let n = self.len();
        if self.cfg.drop_remainder {
            n / self.cfg.batch_size
        } else {
            n.div_ceil(self.cfg.batch_size)
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
        self.cfg.threads()
    }
}

/// The batches of one epoch: an iterator of `Result<Batch, Error>`.
///
/// After an error (with [`OnError::Fail`](crate::OnError::Fail), or too many skips) the
/// iterator ends. Dropping it stops and joins the epoch's threads.
pub struct Batches {
    running: Option<Running>,
    pending: Option<Error>,
    stats: Arc<StatsCell>,
}

impl Batches {
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
        panicked
    }
}

impl Iterator for Batches {
    type Item = Result<Batch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        let running = self.running.as_ref()?;
        let waited = Instant::now();
        let received = running.rx.recv();
        add(&self.stats.consumer_wait_ns, waited.elapsed());
        match received {
            Ok(Ok(batch)) => {
                self.stats.images.fetch_add(batch.len() as u64, Relaxed);
                self.stats.batches.fetch_add(1, Relaxed);
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
                panicked.map(Err)
            }
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
