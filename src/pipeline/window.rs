//! The window: decode threads (and the fetch and readahead stages) claim plan positions in
//! order, at most `size` ahead of the batcher. It also carries the epoch's live settings,
//! which autotune changes while the epoch runs, and its cancel flag.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// What [`Window::try_claim`] found.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) enum TryClaim {
    Got(usize),
    /// The window is full: wait for the batcher.
    Full,
    /// The plan is done or the epoch cancelled.
    Done,
}

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
    pub(super) size: usize,
    total: usize,
    /// Positions the readahead thread hints ahead of the next claim (0: no readahead).
    readahead: usize,
    pub(super) prefetch: AtomicUsize,
}

#[derive(Debug)]
pub(super) struct WindowState {
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
    pub(super) fn new(
        size: usize,
        total: usize,
        active: usize,
        prefetch: usize,
        readahead: usize,
    ) -> Self {
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
    pub(super) fn claim_as(&self, thread: usize) -> Option<usize> {
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
    pub(super) fn take_next(&self, s: &mut WindowState) -> usize {
        s.next += 1;
        if s.next == self.total {
            self.wake_all();
        } else if s.hinter_waiting && s.hinted <= s.next + self.readahead / 2 {
            self.hint.notify_one();
        }
        s.next - 1
    }

    pub(super) fn wake_all(&self) {
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
    pub(super) fn wait_active(&self, thread: usize) -> bool {
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

    pub(super) fn release(&self, released: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::within_a_minute;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

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
