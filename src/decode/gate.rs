//! The large-decode gate: decodes whose working set is over the loader's per-thread share
//! (`LargeGate::small`, at least [`SMALL_DECODE_BYTES`]) enter it, and it admits them only
//! while their estimates together fit in what one image at `max_pixels` would hold, however
//! many decode threads there are.

use std::sync::{Condvar, Mutex};

/// Buffers a worker keeps between images (file bytes, decoded pixels): larger ones are freed
/// after use. 2 MiB holds an ImageNet-sized file and its DCT-scaled pixels many times over; a
/// buffer kept at the largest image seen (up to 16 MiB each before) made each thread's memory
/// grow over the first epochs.
pub(crate) const RETAIN_BYTES: u64 = 2 << 20;

/// The least working set (file bytes included) a decode may have without entering the
/// [`LargeGate`]: an ImageNet-sized JPEG needs under 1 MB, a 4000x3000 baseline photo (a 3-6 MB
/// file, decoded at 1/8 scale) about 7 MB; a progressive one, whose coefficients are kept
/// whole, about 40 MB. A loader raises its share to the largest working set among a sample
/// of its source's images (`decode::typical_working_set`).
pub(crate) const SMALL_DECODE_BYTES: u64 = 8 << 20;

/// Worst-case working set per source pixel of one large decode: a progressive 4:4:4 JPEG's
/// coefficient buffer (6 B) plus RGB output (3 B), or a 16-bit RGBA PNG (8 B) plus RGB (3 B).
pub(crate) const LARGE_BYTES_PER_PIXEL: u64 = 11;

/// What large decodes may hold together at least: in the steady budget, so that the odd large
/// image of a corpus of small ones (a 2,500-pixel progressive 4:4:4 JPEG keeps 28 MB of
/// coefficients) stays within it. A loader whose decode threads' share is larger lets large
/// decodes hold that share together instead.
pub(crate) const LARGE_SHARED_BYTES: u64 = 32 << 20;

/// Admits large decodes (those over [`LargeGate::small`]) across all workers of a loader
/// while their estimated working sets together fit in `capacity` bytes, in arrival order: for
/// a loader, the budget's `large_shared_bytes` (part of the steady budget). A decode larger
/// than the whole capacity, or claiming it all ([`LargeGate::enter_alone`]), runs alone: what
/// it holds beyond the capacity is the worst case's large-decode reserve (one image at
/// `max_pixels`). So two 2-megapixel progressive photos decode at once, and a 100-megapixel
/// one waits for the others to finish and holds up everything larger than a thread's share
/// until it is done.
#[derive(Debug)]
pub(crate) struct LargeGate {
    capacity: u64,
    /// Decodes whose working set is over this enter the gate; under it they run on the
    /// thread's share of the steady budget.
    small: u64,
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Default for LargeGate {
    /// A gate admitting one large decode at a time, over [`SMALL_DECODE_BYTES`].
    fn default() -> Self {
        Self::new(0)
    }
}

#[derive(Debug, Default)]
struct GateState {
    /// Bytes claimed by the decodes inside.
    used: u64,
    /// Decodes inside.
    inside: usize,
    /// Tickets handed out, and the one admitted next (arrival order: a large decode waiting
    /// for room is not overtaken by smaller ones that would fit).
    next_ticket: u64,
    serving: u64,
}

pub(crate) struct GateGuard<'a> {
    gate: &'a LargeGate,
    bytes: u64,
}

impl LargeGate {
    /// A gate admitting decodes whose estimates add up to at most `capacity` bytes (with
    /// `0`, one at a time).
    pub(crate) fn new(capacity: u64) -> Self {
        LargeGate {
            capacity,
            small: SMALL_DECODE_BYTES,
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    /// The gate of a loader whose decodes up to `small` bytes (at least
    /// [`SMALL_DECODE_BYTES`]) run outside it, and whose large decodes run side by side while
    /// together they hold at most `shared` bytes.
    pub(crate) fn for_loader(small: u64, shared: u64) -> Self {
        LargeGate {
            small: small.max(SMALL_DECODE_BYTES),
            ..Self::new(shared)
        }
    }

    /// The most a decode may hold (file bytes included) without entering the gate.
    pub(crate) fn small(&self) -> u64 {
        self.small
    }

    /// Waits for room for a decode estimated at `bytes`, then holds it until the guard drops.
    pub(crate) fn enter(&self, bytes: u64) -> GateGuard<'_> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        while !(s.serving == ticket
            && (s.inside == 0 || s.used.saturating_add(bytes) <= self.capacity))
        {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.serving += 1;
        s.used = s.used.saturating_add(bytes);
        s.inside += 1;
        drop(s);
        // The next ticket may fit beside this one.
        self.changed.notify_all();
        GateGuard { gate: self, bytes }
    }

    /// Waits until nothing else is inside, then holds the whole gate (a file too large to
    /// estimate before it is read).
    pub(crate) fn enter_alone(&self) -> GateGuard<'_> {
        self.enter(u64::MAX)
    }
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        s.used = s.used.saturating_sub(self.bytes);
        s.inside -= 1;
        drop(s);
        self.gate.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_large_gate_admits_what_fits_together_in_arrival_order() {
        use std::sync::Arc;
        let gate = Arc::new(LargeGate::new(100));
        // `bytes` entering on a thread of its own, held until `release` says so.
        let enter = |bytes: u64| {
            let (gate, (tx, rx)) = (Arc::clone(&gate), crossbeam_channel::bounded::<()>(0));
            let (entered_tx, entered) = crossbeam_channel::bounded::<()>(1);
            let h = std::thread::spawn(move || {
                let _g = gate.enter(bytes);
                entered_tx.send(()).unwrap();
                let _ = rx.recv();
            });
            (h, entered, tx)
        };
        let inside = |e: &crossbeam_channel::Receiver<()>| {
            e.recv_timeout(Duration::from_millis(300)).is_ok()
        };
        // Two that fit together are both inside at once.
        let a = enter(40);
        assert!(inside(&a.1), "40 of 100 not admitted");
        let b = enter(60);
        assert!(inside(&b.1), "60 beside 40 not admitted (100 of 100)");
        // One more must wait for room: 40 freed is not room for 50.
        let c = enter(50);
        assert!(!inside(&c.1), "admitted past the capacity");
        drop(a.2);
        a.0.join().unwrap();
        assert!(!inside(&c.1), "50 admitted beside 60");
        // Arrival order: 10 would fit beside 60, but 50 came first and waits.
        let d = enter(10);
        assert!(
            !inside(&d.1),
            "a later, smaller decode overtook a waiting one"
        );
        drop(b.2);
        b.0.join().unwrap();
        assert!(
            inside(&c.1) && inside(&d.1),
            "50 then 10 not admitted once 60 left"
        );
        drop((c.2, d.2));
        c.0.join().unwrap();
        d.0.join().unwrap();
        // One larger than the whole capacity runs alone, and one claiming it all keeps
        // everything else out.
        let big = gate.enter(1_000);
        let s = gate.state.lock().unwrap();
        assert_eq!((s.inside, s.used), (1, 1_000));
        drop(s);
        drop(big);
        let alone = gate.enter_alone();
        let small = enter(1);
        assert!(
            !inside(&small.1),
            "admitted beside a decode that claims the gate"
        );
        drop(alone);
        assert!(inside(&small.1));
        drop(small.2);
        small.0.join().unwrap();
        let s = gate.state.lock().unwrap();
        assert_eq!((s.inside, s.used), (0, 0));
    }
}
