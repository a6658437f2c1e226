//! The bounded shuffle buffer, with tf.data's `shuffle(buffer_size)` semantics: fill the
//! buffer, then for each new element emit a uniformly chosen buffered one and put the new one
//! in its place; at the end of the input, drain in random order. Pure: no threads, no I/O.

use crate::rng::Rng;

/// The shuffle stage's settings: whether epochs are shuffled (a seeded permutation of the
/// source, or of its streams), the bounded buffer, and what it holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShuffleSettings {
    pub(crate) enabled: bool,
    /// `shuffle_buffer`: slots of the bounded buffer (0: none).
    pub(crate) buffer: usize,
    /// The source is read in order (tar shards): the buffer holds decoded samples. Otherwise it
    /// shuffles sample indices before decoding.
    pub(crate) sequential_source: bool,
    /// Samples in the source (`usize::MAX` where a test builds settings without one).
    pub(crate) source_len: usize,
}

impl Default for ShuffleSettings {
    fn default() -> Self {
        ShuffleSettings {
            enabled: true,
            buffer: 0,
            sequential_source: false,
            source_len: usize::MAX,
        }
    }
}

impl ShuffleSettings {
    /// The buffer's memory over a source of `n` samples of `sample_len` bytes: decoded
    /// samples for a source read in order, else 4 bytes an index, never more indices than the
    /// source has.
    pub(crate) fn bytes(&self, sample_len: u64, n: u64) -> u64 {
        match self.sample_buffer() {
            0 => (self.buffer as u64).min(n) * 4,
            held => (held as u64).saturating_mul(sample_len),
        }
    }

    /// Decoded samples the buffer holds: `buffer` for a source read in order, 0 for the others
    /// (their buffer shuffles indices before decoding).
    ///
    /// A buffer larger than the source never fills, so it behaves as one of `len + 1` slots:
    /// that is what it is sized as (a `shuffle_buffer(usize::MAX)` must not size a channel).
    pub(crate) fn sample_buffer(&self) -> usize {
        if self.sequential_source {
            self.buffer.min(self.source_len.saturating_add(1))
        } else {
            0
        }
    }
}

/// A seeded shuffle buffer holding at most `capacity` elements.
#[derive(Debug)]
pub(crate) struct ShuffleBuffer<T> {
    items: Vec<T>,
    capacity: usize,
    rng: Rng,
}

impl<T> ShuffleBuffer<T> {
    /// A buffer of `capacity` elements (0: pass every element straight through). Room grows
    /// with what is pushed, so a capacity beyond the input (even `usize::MAX`) costs nothing.
    pub(crate) fn new(capacity: usize, rng: Rng) -> Self {
        ShuffleBuffer {
            items: Vec::with_capacity(capacity.min(1024)),
            capacity,
            rng,
        }
    }

    /// Adds an element; returns the element to emit, if the buffer was full.
    pub(crate) fn push(&mut self, item: T) -> Option<T> {
        if self.capacity == 0 {
            return Some(item);
        }
        if self.items.len() < self.capacity {
            self.items.push(item);
            return None;
        }
        let j = self.rng.below(self.items.len() as u64) as usize;
        Some(std::mem::replace(&mut self.items[j], item))
    }

    /// Removes a uniformly chosen element (input exhausted), or `None` when empty.
    pub(crate) fn drain_one(&mut self) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        let j = self.rng.below(self.items.len() as u64) as usize;
        Some(self.items.swap_remove(j))
    }

    /// The buffered elements in slot order and the generator's state: what a buffer fed the
    /// same elements again, in that order, continues from (resumption).
    pub(crate) fn into_parts(self) -> (Vec<T>, Rng) {
        (self.items, self.rng)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use proptest::prelude::*;

    fn run(input: Vec<u32>, cap: usize, seed: u64) -> Vec<u32> {
        let mut b = ShuffleBuffer::new(cap, Rng::for_stage(seed, 0, 0));
        let mut out = Vec::new();
        for x in input {
            out.extend(b.push(x));
            assert!(b.len() <= cap);
        }
        while let Some(x) = b.drain_one() {
            out.push(x);
        }
        out
    }

    proptest! {
        #[test]
        fn outputs_a_permutation_of_its_input(n in 0u32..500, cap in 0usize..64, seed: u64) {
            let input: Vec<u32> = (0..n).collect();
            let mut out = run(input.clone(), cap, seed);
            out.sort_unstable();
            prop_assert_eq!(out, input);
        }
    }

    #[test]
    fn zero_capacity_passes_through_and_seed_is_deterministic() {
        let input: Vec<u32> = (0..100).collect();
        assert_eq!(run(input.clone(), 0, 1), input);
        assert_eq!(run(input.clone(), 10, 1), run(input.clone(), 10, 1));
        assert_ne!(run(input.clone(), 10, 1), run(input.clone(), 10, 2));
        assert_ne!(run(input.clone(), 10, 1), input);
    }

    #[test]
    fn an_element_moves_at_most_a_buffer_ahead() {
        // tf.data semantics: the first output comes from the first `cap` inputs.
        for seed in 0..50 {
            let out = run((0..100).collect(), 10, seed);
            assert!(out[0] < 10);
        }
    }
}
