//! The hand-off from the decode threads to the batcher: a ring of loaded samples indexed by
//! plan position, which the batcher empties a burst at a time, in plan order.

use std::sync::{Arc, Condvar, Mutex};

use super::Loaded;

/// Hands loaded samples from the decode threads to the batcher: a ring of `size` slots (the
/// reorder window) indexed by plan position. The batcher sleeps until the next `burst`
/// positions in plan order are all loaded (or the plan's last ones are, or every decode
/// thread has gone), then takes them together: one wake-up a burst instead of one a sample.
/// On two cores, where the batcher shares a core with a decode thread, a wake-up a sample
/// cost about 2.5% of the epoch in context switches (perf, `imagefeed bench`).
///
/// The window never lets a decode thread claim a position `size` or more past the batcher's
/// (`Window::release` follows it), so two loaded positions never share a slot.
pub(super) struct Handoff {
    state: Mutex<HandoffState>,
    ready: Condvar,
    size: usize,
    total: usize,
    burst: usize,
}

pub(super) struct HandoffState {
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
    pub(super) fn extend_run(&mut self, size: usize, total: usize) {
        while self.run < size
            && self.next + self.run < total
            && self.ring[(self.next + self.run) % size].is_some()
        {
            self.run += 1;
        }
    }
}

/// A decode thread's end of a [`Handoff`]; the last one dropped wakes the batcher.
pub(super) struct HandoffSender(Arc<Handoff>);

/// The batcher's end of a [`Handoff`]; dropping it makes every later `put` fail.
pub(super) struct HandoffReceiver(Arc<Handoff>);

/// Positions the batcher takes at once: a quarter of the smallest window, so the batcher still
/// runs well ahead of the window's end (and never more than a batch, so a small batch is not
/// held back waiting for samples it does not need).
pub(super) const HANDOFF_BURST: usize = 16;

/// A hand-off through a ring of `size` slots for a plan of `total` positions, whose batcher
/// waits for at most `batch` positions at a time.
pub(super) fn handoff(size: usize, total: usize, batch: usize) -> (HandoffSender, HandoffReceiver) {
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
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HandoffState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the batcher, waiting from `s.next`, has what it waits for.
    pub(super) fn enough(&self, s: &HandoffState) -> bool {
        s.run >= self.burst.min(self.total.saturating_sub(s.next)).max(1) || s.senders == 0
    }
}

impl HandoffSender {
    /// Puts a loaded sample in its slot. `false`: the batcher has stopped.
    pub(super) fn put(&self, msg: Loaded) -> bool {
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
    pub(super) fn burst(&self) -> usize {
        self.0.burst
    }

    /// Waits for the next burst of loaded positions in plan order and appends them to `out`
    /// (it is left holding at least one). `false`: every decode thread has gone and nothing
    /// is left to take (the epoch was cancelled).
    pub(super) fn take(&self, out: &mut Vec<Loaded>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::within_a_minute;
    use crate::pipeline::window::Window;

    fn loaded(seq: usize) -> Loaded {
        Loaded {
            seq,
            index: seq as u32,
            label: 0,
            fields: Default::default(),
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
}
