//! Per-epoch counters: images delivered, samples skipped (with paths and reasons), cache use,
//! and the time each stage spent working and waiting, so a user can tell whether decoding or
//! the consumer is the bottleneck.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most this many skipped samples are listed by path; the count is always exact.
pub(crate) const MAX_LISTED_SKIPS: usize = 10_000;

/// A snapshot of one epoch's counters, from [`Loader::stats`](crate::Loader::stats) or
/// [`Batches::stats`](crate::Batches::stats).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Stats {
    /// The epoch these counters describe.
    pub epoch: u64,
    /// Images delivered in batches.
    pub images: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Samples skipped under [`OnError::Skip`](crate::OnError::Skip).
    pub skipped: u64,
    /// The skipped samples' paths and reasons (the first 10,000).
    pub skipped_samples: Vec<(PathBuf, String)>,
    /// Copies of good samples delivered in place of skipped ones, so that every rank of a
    /// sharded loader delivers the same number of images (0 without sharding).
    pub padded: u64,
    /// Samples read from the on-disk cache instead of decoded.
    pub cache_hits: u64,
    /// Whether this epoch read its samples from a complete on-disk cache.
    pub from_cache: bool,
    /// Whether this epoch wrote the on-disk cache.
    pub wrote_cache: bool,
    /// Bytes of the complete cache file on disk, if there is one.
    pub cache_bytes: Option<u64>,
    /// Seconds since the epoch started (or its length, once it finished).
    pub seconds: f64,
    /// Decode threads working (with autotune, the latest setting: it changes while the
    /// epoch runs).
    pub decode_threads: usize,
    /// Prefetch depth (ready batches queued ahead of the consumer; with autotune, the latest
    /// setting).
    pub prefetch: usize,
    /// Summed time the decode threads spent reading, decoding and resizing.
    pub decode_busy: Duration,
    /// Summed time the decode threads waited (for the reorder window or the batcher).
    pub decode_wait: Duration,
    /// The part of `decode_busy` spent reading files (opening, checking and reading them;
    /// 0 for fetched bytes, which the fetch stage read).
    pub read: Duration,
    /// The part of `decode_busy` spent decoding (JPEG at its DCT scale, or PNG).
    pub decode: Duration,
    /// The part of `decode_busy` spent resizing and orienting.
    pub resize: Duration,
    /// Time the batcher spent writing samples into batches (the normalize to the output type
    /// and layout, on the normalize pool when there is one).
    pub batch_write: Duration,
    /// Time the batcher spent waiting for a full prefetch queue (the consumer is slower).
    pub batcher_wait_consumer: Duration,
    /// Time the consumer waited inside `next()` (the pipeline is slower).
    pub consumer_wait: Duration,
    /// Bytes copied from host to device whose copy time was measured ([`Device::Cuda`]
    /// loaders; 0 on the host). Measured when a slot is reused, so the last few batches of an
    /// epoch may be missing.
    ///
    /// [`Device::Cuda`]: crate::Device::Cuda
    pub h2d_bytes: u64,
    /// The GPU time those copies took (from events around each copy).
    pub h2d_busy: Duration,
}

impl Stats {
    /// Images delivered per second of the epoch.
    pub fn images_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.images as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Host-to-device copy bandwidth while copying, in GB/s (10^9 bytes a second); 0 without
    /// measured copies.
    pub fn h2d_gb_per_sec(&self) -> f64 {
        let s = self.h2d_busy.as_secs_f64();
        if s > 0.0 {
            self.h2d_bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }

    /// The share of the epoch the consumer spent waiting for batches (0..1). Near 1: the input
    /// pipeline is the bottleneck (add decode threads or use the cache); near 0: the consumer
    /// is.
    pub fn consumer_wait_fraction(&self) -> f64 {
        if self.seconds > 0.0 {
            (self.consumer_wait.as_secs_f64() / self.seconds).min(1.0)
        } else {
            0.0
        }
    }
}

/// The epoch's summary in a few lines, as the command line prints it: images, batches, time and
/// rate; skips and padding; decode threads, prefetch and how long the consumer waited; the time
/// per image in each stage; the cache. The alternate form (`{:#}`) adds a line per skipped
/// sample (path and reason), which the loader has also logged at `warn` level.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Loader, Source};
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?).batch_size(4).build()?;
/// for batch in loader.epoch(0) {
///     batch?;
/// }
/// let summary = loader.stats().to_string();
/// assert!(summary.starts_with("epoch 0: 11 images in 3 batches"), "{summary}");
/// println!("{summary}");
/// # Ok(()) }
/// ```
impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "epoch {}: {} images in {} batches, {:.2} s, {:.0} images/s",
            self.epoch,
            self.images,
            self.batches,
            self.seconds,
            self.images_per_sec()
        )?;
        if self.skipped > 0 || self.padded > 0 {
            write!(
                f,
                "; {} skipped, {} padding copies",
                self.skipped, self.padded
            )?;
        }
        write!(
            f,
            "\n  {} decode threads, prefetch {}; the consumer waited {:.0}% of the time",
            self.decode_threads,
            self.prefetch,
            100.0 * self.consumer_wait_fraction()
        )?;
        let decoded = self.images.saturating_sub(self.cache_hits);
        if decoded > 0 && !self.from_cache {
            let us = |d: Duration| d.as_secs_f64() * 1e6 / decoded as f64;
            write!(
                f,
                "\n  per image (thread time): read {:.0} us, decode {:.0} us, resize {:.0} us, \
                 batch write {:.0} us; decode threads waited {:.0} us",
                us(self.read),
                us(self.decode),
                us(self.resize),
                us(self.batch_write),
                us(self.decode_wait)
            )?;
        }
        let size = |b: Option<u64>| {
            b.map_or(String::new(), |b| {
                format!(" ({:.1} MB on disk)", b as f64 / 1e6)
            })
        };
        if self.from_cache {
            write!(
                f,
                "\n  read from the on-disk cache{}",
                size(self.cache_bytes)
            )?;
        } else if self.wrote_cache {
            match self.cache_bytes {
                Some(_) => write!(f, "\n  wrote the on-disk cache{}", size(self.cache_bytes))?,
                None => write!(f, "\n  wrote the on-disk cache (not complete)")?,
            }
        }
        if self.h2d_bytes > 0 {
            write!(
                f,
                "\n  host to device: {:.1} GB/s while copying",
                self.h2d_gb_per_sec()
            )?;
        }
        if f.alternate() {
            for (path, reason) in &self.skipped_samples {
                // A reason is an error's text, which names the file already.
                if reason.starts_with(&*path.to_string_lossy()) {
                    write!(f, "\n  skipped {reason}")?;
                } else {
                    write!(f, "\n  skipped {}: {reason}", path.display())?;
                }
            }
            if self.skipped > self.skipped_samples.len() as u64 {
                write!(
                    f,
                    "\n  … and {} more skipped",
                    self.skipped - self.skipped_samples.len() as u64
                )?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
pub(crate) struct StatsCell {
    pub(crate) epoch: AtomicU64,
    pub(crate) images: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) padded: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) decode_busy_ns: AtomicU64,
    pub(crate) decode_wait_ns: AtomicU64,
    pub(crate) read_ns: AtomicU64,
    pub(crate) decode_ns: AtomicU64,
    pub(crate) resize_ns: AtomicU64,
    pub(crate) batch_write_ns: AtomicU64,
    pub(crate) batcher_wait_ns: AtomicU64,
    pub(crate) consumer_wait_ns: AtomicU64,
    pub(crate) h2d_bytes: AtomicU64,
    pub(crate) h2d_ns: AtomicU64,
    pub(crate) threads: AtomicU64,
    pub(crate) prefetch: AtomicU64,
    pub(crate) skipped_samples: Mutex<Vec<(PathBuf, String)>>,
    /// 0: no cache, 1: read from it, 2: wrote it.
    pub(crate) cache_mode: AtomicU64,
    /// Size of the complete cache file plus one (0: none).
    pub(crate) cache_bytes_plus_one: AtomicU64,
    pub(crate) timing: Mutex<(Option<Instant>, Option<Duration>)>,
}

pub(crate) fn add(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(d.as_nanos() as u64, Relaxed);
}

impl StatsCell {
    pub(crate) fn reset(&self, epoch: u64, threads: usize, prefetch: usize, cache_mode: u64) {
        self.cache_mode.store(cache_mode, Relaxed);
        self.epoch.store(epoch, Relaxed);
        for c in [
            &self.images,
            &self.batches,
            &self.skipped,
            &self.padded,
            &self.cache_hits,
            &self.decode_busy_ns,
            &self.decode_wait_ns,
            &self.read_ns,
            &self.decode_ns,
            &self.resize_ns,
            &self.batch_write_ns,
            &self.batcher_wait_ns,
            &self.consumer_wait_ns,
            &self.h2d_bytes,
            &self.h2d_ns,
        ] {
            c.store(0, Relaxed);
        }
        self.threads.store(threads as u64, Relaxed);
        self.prefetch.store(prefetch as u64, Relaxed);
        self.skipped_samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *self.timing.lock().unwrap_or_else(|e| e.into_inner()) = (Some(Instant::now()), None);
    }

    pub(crate) fn finish(&self) {
        let mut t = self.timing.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(start), None) = *t {
            t.1 = Some(start.elapsed());
        }
    }

    pub(crate) fn record_skip(&self, path: PathBuf, reason: String) {
        self.skipped.fetch_add(1, Relaxed);
        let mut list = self
            .skipped_samples
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if list.len() < MAX_LISTED_SKIPS {
            list.push((path, reason));
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let ns = |c: &AtomicU64| Duration::from_nanos(c.load(Relaxed));
        let (start, done) = *self.timing.lock().unwrap_or_else(|e| e.into_inner());
        let seconds = done
            .or_else(|| start.map(|s| s.elapsed()))
            .map_or(0.0, |d| d.as_secs_f64());
        Stats {
            epoch: self.epoch.load(Relaxed),
            images: self.images.load(Relaxed),
            batches: self.batches.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            padded: self.padded.load(Relaxed),
            skipped_samples: self
                .skipped_samples
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            cache_hits: self.cache_hits.load(Relaxed),
            from_cache: self.cache_mode.load(Relaxed) == 1,
            wrote_cache: self.cache_mode.load(Relaxed) == 2,
            cache_bytes: self.cache_bytes_plus_one.load(Relaxed).checked_sub(1),
            seconds,
            decode_threads: self.threads.load(Relaxed) as usize,
            prefetch: self.prefetch.load(Relaxed) as usize,
            decode_busy: ns(&self.decode_busy_ns),
            decode_wait: ns(&self.decode_wait_ns),
            read: ns(&self.read_ns),
            decode: ns(&self.decode_ns),
            resize: ns(&self.resize_ns),
            batch_write: ns(&self.batch_write_ns),
            batcher_wait_consumer: ns(&self.batcher_wait_ns),
            consumer_wait: ns(&self.consumer_wait_ns),
            h2d_bytes: self.h2d_bytes.load(Relaxed),
            h2d_busy: ns(&self.h2d_ns),
        }
    }
}
