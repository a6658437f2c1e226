//! Autotune, like tf.data's `AUTOTUNE` but visible: every second while an epoch runs (and at
//! its end, for the next one) the loader looks at where the time went since it last looked
//! and picks the decode threads and prefetch depth, within the memory budget (computed with
//! the largest depth and thread count it may pick) and the number of cores.
//! `Stats::decode_threads` and `Stats::prefetch` report the current settings, and each change
//! is logged at `info` level.
//!
//! - The consumer waited a lot (over 10% of the epoch) while the decode threads were busy: the
//!   pipeline is short of CPU — one more decode thread, up to the number of cores.
//! - The consumer waited a lot while the decode threads were often idle: the pipeline keeps up
//!   on average but stalls in bursts — one more prefetched batch, up to [`MAX_PREFETCH`].
//! - The consumer hardly waited (under 2%) and the decode threads idled half the time: the
//!   training step is the bottleneck — one thread fewer (CPU for the training step), and one
//!   prefetched batch fewer (memory), down to 1 each.

use crate::stats::Stats;

/// The deepest prefetch queue autotune picks; the memory budget assumes it.
pub(crate) const MAX_PREFETCH: usize = 8;

/// Reorder-window positions per decode thread. Decode times vary more than tenfold within a
/// corpus, and the window only moves on when its oldest sample is done, so a small window
/// leaves threads waiting behind one slow image; 32 kept waits under a few per cent at 8 and
/// 16 threads on ImageNet-sized JPEGs (docs/PERFORMANCE.md, "What made it fast"), for 2.5 MB
/// a thread (32 samples of 160x160 RGB, kept as `u8` until the batcher).
const WINDOW_PER_THREAD: usize = 32;
/// Files hinted ahead by default: enough to keep the disk busy under two decode threads, and
/// few enough that the hinted files are a few megabytes of page cache.
const DEFAULT_READAHEAD: usize = 64;
/// The deepest prefetch queue a user may ask for (each batch in it is memory).
pub(crate) const MAX_PREFETCH_SETTING: usize = 1024;
/// The most files a user may ask to hint ahead.
pub(crate) const MAX_READAHEAD: usize = 1 << 16;
/// The most decode threads a user may ask for.
pub(crate) const MAX_DECODE_THREADS: usize = 1024;

/// The tuning settings: decode threads, prefetch depth, readahead and autotune.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// Decode threads (0: one per core).
    pub(crate) decode_threads: usize,
    pub(crate) autotune: bool,
    pub(crate) prefetch: usize,
    pub(crate) readahead: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            decode_threads: 0,
            autotune: false,
            prefetch: 2,
            readahead: DEFAULT_READAHEAD,
        }
    }
}

impl Tuning {
    /// Checks the settings alone.
    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        use crate::Error;
        if self.prefetch == 0 {
            return Err(Error::config("prefetch", "must be at least 1"));
        }
        Error::at_most("prefetch", self.prefetch, MAX_PREFETCH_SETTING)?;
        Error::at_most("readahead", self.readahead, MAX_READAHEAD)?;
        Error::at_most("decode_threads", self.decode_threads, MAX_DECODE_THREADS)?;
        Ok(())
    }

    /// The deepest prefetch queue this loader may use.
    pub(crate) fn max_prefetch(&self) -> usize {
        if self.autotune {
            self.prefetch.max(MAX_PREFETCH)
        } else {
            self.prefetch
        }
    }

    /// The most decode threads this loader may use.
    pub(crate) fn max_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.autotune {
            self.threads().max(cores)
        } else {
            self.threads()
        }
    }

    /// Decode threads at the start of an epoch.
    pub(crate) fn threads(&self) -> usize {
        if self.decode_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.decode_threads
        }
    }

    /// Samples decoded ahead of the one the batcher waits for: lets threads pass a slow image
    /// without breaking the deterministic order.
    pub(crate) fn reorder_window(&self) -> usize {
        (self.max_threads() * WINDOW_PER_THREAD).max(2 * WINDOW_PER_THREAD)
    }
}

/// The settings of one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Knobs {
    pub(crate) threads: usize,
    pub(crate) prefetch: usize,
}

/// The next epoch's settings from this one's statistics (pure).
pub(crate) fn next(k: Knobs, s: &Stats, max_threads: usize) -> Knobs {
    if s.seconds <= 0.0 || s.images == 0 {
        return k;
    }
    let wait = s.consumer_wait_fraction();
    let thread_seconds = s.seconds * k.threads as f64;
    let busy = (s.decode_busy.as_secs_f64() / thread_seconds).min(1.0);
    let mut n = k;
    if wait > 0.10 {
        if busy > 0.85 && k.threads < max_threads {
            n.threads += 1;
        } else if busy <= 0.85 && k.prefetch < MAX_PREFETCH {
            n.prefetch += 1;
        }
    } else if wait < 0.02 && busy < 0.5 {
        n.threads = (k.threads - 1).max(1);
        n.prefetch = (k.prefetch - 1).max(1);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stats(seconds: f64, consumer_wait: f64, decode_busy: f64) -> Stats {
        Stats {
            images: 100,
            seconds,
            consumer_wait: Duration::from_secs_f64(consumer_wait),
            decode_busy: Duration::from_secs_f64(decode_busy),
            ..Stats::default()
        }
    }

    #[test]
    fn starved_consumer_with_busy_decoders_gets_a_thread() {
        let k = Knobs {
            threads: 1,
            prefetch: 2,
        };
        assert_eq!(
            next(k, &stats(10.0, 5.0, 9.5), 2),
            Knobs {
                threads: 2,
                prefetch: 2
            }
        );
        // No more cores: unchanged.
        let k = Knobs {
            threads: 2,
            prefetch: 2,
        };
        assert_eq!(next(k, &stats(10.0, 5.0, 19.5), 2), k);
    }

    #[test]
    fn bursty_stalls_get_a_deeper_queue() {
        let k = Knobs {
            threads: 2,
            prefetch: 2,
        };
        assert_eq!(
            next(k, &stats(10.0, 2.0, 10.0), 2),
            Knobs {
                threads: 2,
                prefetch: 3
            }
        );
        let k = Knobs {
            threads: 2,
            prefetch: MAX_PREFETCH,
        };
        assert_eq!(next(k, &stats(10.0, 2.0, 10.0), 2), k);
    }

    #[test]
    fn slow_consumer_gives_back_cpu_and_memory() {
        let k = Knobs {
            threads: 2,
            prefetch: 3,
        };
        assert_eq!(
            next(k, &stats(10.0, 0.1, 6.0), 2),
            Knobs {
                threads: 1,
                prefetch: 2
            }
        );
        let k = Knobs {
            threads: 1,
            prefetch: 1,
        };
        assert_eq!(next(k, &stats(10.0, 0.1, 1.0), 2), k);
        // In between: unchanged.
        let k = Knobs {
            threads: 2,
            prefetch: 2,
        };
        assert_eq!(next(k, &stats(10.0, 0.5, 15.0), 2), k);
    }
}
