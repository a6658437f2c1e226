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
