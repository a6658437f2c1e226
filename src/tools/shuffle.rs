//! How well an epoch's order mixes a source (`imagefeed shuffle-quality`): the loader's order
//! against a full permutation and against a WebDataset-style shuffle buffer, on two labelings
//! of the source's own layout — labels spread at random (pre-shuffled shards, as
//! `imagefeed shards` writes them) and labels sorted by sample index (class-sorted shards,
//! the adversarial case: each shard holds one class or a few).
//!
//! Orders are computed, never loaded: only the source's layout (its units) matters.
//!
//! Figures, for each order and labeling:
//! - **label distance**: the mean, over the epoch's batches, of the total variation distance
//!   between a batch's label histogram and the source's (0: every batch is the source in
//!   small; a full permutation's figure is what sampling alone leaves);
//! - **classes a batch**: distinct labels in a batch, averaged;
//! - **position correlation**: the correlation of a sample's position in the epoch with its
//!   index in the source (0 for a permutation that forgets the source's order, 1 unshuffled);
//! - **epoch displacement**: how far apart a sample lands in two epochs, as a share of the
//!   epoch (a third for independent permutations, 0 for the same order).

use crate::pipeline::global_order;
use crate::shuffle::{Order, Permutation, ShuffleSettings};
use crate::Loader;

/// The figures of one order on one labeling.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Quality {
    /// The order: `imagefeed`, `full permutation` or `buffer N`.
    pub order: String,
    /// The labeling: `pre-shuffled` or `class-sorted`.
    pub labels: &'static str,
    /// Mean total variation distance of a batch's labels from the source's.
    pub label_distance: f64,
    /// Mean distinct labels a batch.
    pub classes_per_batch: f64,
    /// |Pearson correlation| of position with source index.
    pub position_correlation: f64,
    /// Mean |position in epoch 0 − position in epoch 1| / samples.
    pub epoch_displacement: f64,
    /// The memory the order holds while it mixes: for the loader's, the sample tables of the
    /// shards of one block (no sample); for a buffer, its samples' encoded bytes; 0 for a
    /// permutation of a source read at random.
    pub memory_bytes: u64,
}

/// Measures the order of `loader`'s epochs 0 and 1 (as one rank of world size 1), a full
/// permutation, and a shuffle buffer of `buffer` samples over shards visited in a random order
/// (where the source is read as shards; 0: none), on `classes` labels spread at random and
/// sorted, with batches of `batch`.
pub fn measure(loader: &Loader, classes: u32, batch: usize, buffer: usize) -> Vec<Quality> {
    let cfg = loader.config();
    let source = loader.source();
    let n = source.len();
    let batch = batch.max(1);
    let classes = classes.max(1);
    let ours = [0, 1].map(|e| materialize(&global_order(cfg, source, e, 1)));
    let full = [0, 1].map(|e| {
        let order = Order::random(n, &ShuffleSettings::default(), cfg.seed ^ 0x5eed, e);
        materialize(&order)
    });
    let block_bytes = source.backing.reader_bytes(cfg.shuffle.block());
    let mut orders = vec![
        ("imagefeed".to_string(), ours, block_bytes),
        ("full permutation".into(), full, 0),
    ];
    if let (Some(streams), true) = (source.backing.streams(), buffer > 0) {
        let buffered = [0, 1].map(|e| buffer_order(&streams, buffer, cfg.seed, e));
        let bytes = (buffer as u64).saturating_mul(source.mean_sample_bytes().unwrap_or(0));
        orders.push((format!("buffer {buffer}"), buffered, bytes));
    }
    let spread =
        |i: u32| (Permutation::new(n as u64, 0x1abe1).at(u64::from(i)) % u64::from(classes)) as u32;
    let sorted = |i: u32| ((u64::from(i) * u64::from(classes)) / n.max(1) as u64) as u32;
    let mut out = Vec::new();
    for (labels, label_of) in [
        ("pre-shuffled", &spread as &dyn Fn(u32) -> u32),
        ("class-sorted", &sorted),
    ] {
        let labels_of: Vec<u32> = (0..n as u32).map(label_of).collect();
        for (name, [e0, e1], memory_bytes) in &orders {
            let (distance, per_batch) = label_mix(e0, &labels_of, classes, batch);
            out.push(Quality {
                order: name.clone(),
                labels,
                label_distance: distance,
                classes_per_batch: per_batch,
                position_correlation: correlation(e0),
                epoch_displacement: displacement(e0, e1),
                memory_bytes: *memory_bytes,
            });
        }
    }
    out
}

fn materialize(order: &Order) -> Vec<u32> {
    (0..order.len()).map(|q| order.at(q)).collect()
}

/// WebDataset's shuffle: the shards in a seeded random order, their samples in turn through a
/// buffer of `size` samples from which a random one leaves as each new one enters.
fn buffer_order(streams: &[std::ops::Range<u32>], size: usize, seed: u64, epoch: u64) -> Vec<u32> {
    let units = Permutation::new(streams.len() as u64, seed ^ epoch.wrapping_mul(0x9e37));
    let mut rng = crate::rng::Rng::for_stage(seed, epoch, 0xb0ff);
    let mut held: Vec<u32> = Vec::with_capacity(size);
    let mut out = Vec::new();
    for u in 0..streams.len() as u64 {
        for i in streams[units.at(u) as usize].clone() {
            if held.len() < size {
                held.push(i);
                continue;
            }
            let k = rng.below(size as u64) as usize;
            out.push(std::mem::replace(&mut held[k], i));
        }
    }
    while !held.is_empty() {
        let k = rng.below(held.len() as u64) as usize;
        out.push(held.swap_remove(k));
    }
    out
}

/// Mean total variation distance of each batch's label histogram from the whole's, and mean
/// distinct labels a batch.
fn label_mix(order: &[u32], labels: &[u32], classes: u32, batch: usize) -> (f64, f64) {
    let mut whole = vec![0f64; classes as usize];
    for &l in labels {
        whole[l as usize] += 1.0;
    }
    let n = labels.len().max(1) as f64;
    let mut counts = vec![0u32; classes as usize];
    let (mut distance, mut distinct, mut batches) = (0.0, 0.0, 0usize);
    for chunk in order.chunks_exact(batch) {
        let mut seen = Vec::with_capacity(batch);
        for &i in chunk {
            let l = labels[i as usize] as usize;
            if counts[l] == 0 {
                seen.push(l);
            }
            counts[l] += 1;
        }
        // TV = ½ Σ |p - q|: over the labels seen, and the mass of the labels not seen.
        let b = batch as f64;
        let mut tv = 0.0;
        let mut mass_seen = 0.0;
        for &l in &seen {
            let q = whole[l] / n;
            tv += (f64::from(counts[l]) / b - q).abs();
            mass_seen += q;
            counts[l] = 0;
        }
        tv += 1.0 - mass_seen;
        distance += tv / 2.0;
        distinct += seen.len() as f64;
        batches += 1;
    }
    let b = batches.max(1) as f64;
    (distance / b, distinct / b)
}

/// |Pearson correlation| of position with index (both permutations of 0..n).
fn correlation(order: &[u32]) -> f64 {
    let n = order.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean = (n - 1.0) / 2.0;
    let var = (n * n - 1.0) / 12.0;
    let cov: f64 = order
        .iter()
        .enumerate()
        .map(|(q, &i)| (q as f64 - mean) * (f64::from(i) - mean))
        .sum::<f64>()
        / n;
    (cov / var).abs()
}

/// Mean |position in `a` − position in `b`| over the samples, as a share of the epoch.
fn displacement(a: &[u32], b: &[u32]) -> f64 {
    let n = a.len();
    if n == 0 {
        return 0.0;
    }
    let mut at = vec![0u32; n];
    for (q, &i) in a.iter().enumerate() {
        at[i as usize] = q as u32;
    }
    let total: f64 = b
        .iter()
        .enumerate()
        .map(|(q, &i)| (f64::from(at[i as usize]) - q as f64).abs())
        .sum();
    total / n as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_of_known_orders() {
        let n = 10_000u32;
        let identity: Vec<u32> = (0..n).collect();
        let reversed: Vec<u32> = (0..n).rev().collect();
        assert!((correlation(&identity) - 1.0).abs() < 1e-9);
        assert!((correlation(&reversed) - 1.0).abs() < 1e-9);
        assert_eq!(displacement(&identity, &identity), 0.0);
        // Reversal moves sample i by |n - 1 - 2i|: n/2 on average.
        assert!((displacement(&identity, &reversed) - 0.5).abs() < 1e-3);
        // Sorted labels, unshuffled: one class a batch, as far from the mix as can be.
        let labels: Vec<u32> = (0..n).map(|i| i * 10 / n).collect();
        let (tv, distinct) = label_mix(&identity, &labels, 10, 100);
        assert!((tv - 0.9).abs() < 1e-9 && (distinct - 1.0).abs() < 1e-9);
        // A random permutation: near 0 correlation and a third of the epoch apart.
        let p = Permutation::new(u64::from(n), 7);
        let q = Permutation::new(u64::from(n), 8);
        let a: Vec<u32> = (0..u64::from(n)).map(|i| p.at(i) as u32).collect();
        let b: Vec<u32> = (0..u64::from(n)).map(|i| q.at(i) as u32).collect();
        assert!(correlation(&a) < 0.05, "{}", correlation(&a));
        assert!((displacement(&a, &b) - 1.0 / 3.0).abs() < 0.02);
        let (tv, distinct) = label_mix(&a, &labels, 10, 100);
        assert!(tv < 0.2 && distinct > 9.0, "{tv} {distinct}");
    }

    #[test]
    fn a_buffer_order_is_a_permutation() {
        let streams: Vec<_> = (0..7u32).map(|k| k * 100..(k + 1) * 100).collect();
        let mut o = buffer_order(&streams, 50, 1, 0);
        o.sort_unstable();
        assert_eq!(o, (0..700).collect::<Vec<u32>>());
    }
}
