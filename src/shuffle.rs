//! The shuffle stage: each epoch's *global order*, a seeded permutation of the source's sample
//! indices that is computed position by position, so that no per-sample array is held and the
//! sample at any position of any epoch is known without visiting the ones before it (which is
//! what makes a resume exact at any position and any world size). Pure: no threads, no I/O.
//!
//! - **Sources read at random** (files, objects): the order is a keyed pseudo-random
//!   permutation of `0..n` ([`Permutation`], a Feistel network with cycle walking), a new one
//!   each epoch. Unshuffled, the source's order, or with a shuffle block that order mixed
//!   within consecutive blocks.
//! - **Sources read as streams** (tar shards, TFRecord files, parquet row groups; their
//!   *units*): the units in a seeded order, their samples laid end to end; that stream cut
//!   into one contiguous part per rank of the world size the epoch was laid out for; and each
//!   part's samples permuted within consecutive blocks of `block` samples (Mosaic Streaming's
//!   block shuffles do the same). A rank of that world size reads its own part of the units,
//!   a block at a time, and every rank sees a mix of the units in its block.
//!
//! The global order interleaves the ranks' parts (position `q` is rank `q mod w₀`'s), so that
//! ranks taking positions `r, r + w, r + 2w, …` of it — the one rule every source is split by
//! (`pipeline/plan.rs`) — get their own parts back, while after `p` steps the positions
//! delivered are always the first `p × w` of the order, at any world size.

use std::ops::Range;

use crate::source::mix::MixSet;

pub(crate) use crate::source::format::read::DEFAULT_BLOCK;

/// The shuffle stage's settings: whether epochs are shuffled, the mixing block, and whether
/// the source is read as streams.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShuffleSettings {
    pub(crate) enabled: bool,
    /// `shuffle_buffer`: samples mixed at once (`None`: the default for the source).
    pub(crate) buffer: Option<usize>,
    /// The source is read as streams (tar shards, TFRecord, parquet).
    pub(crate) streamed: bool,
    /// The block of a shuffled stream source when `buffer` is `None` (the source's own:
    /// [`DEFAULT_BLOCK`], or fewer for parquet, whose reader holds whole row groups).
    pub(crate) default_block: usize,
}

impl Default for ShuffleSettings {
    fn default() -> Self {
        ShuffleSettings {
            enabled: true,
            buffer: None,
            streamed: false,
            default_block: DEFAULT_BLOCK,
        }
    }
}

impl ShuffleSettings {
    /// The block samples are mixed within: for a shuffled random-access source the whole
    /// source (0 here: one permutation), else the setting, or [`DEFAULT_BLOCK`] for a shuffled
    /// stream source. 1: no mixing within the order.
    pub(crate) fn block(&self) -> usize {
        match (self.streamed, self.enabled, self.buffer) {
            (false, true, _) => 0,
            (true, true, None) => self.default_block.max(1),
            (_, _, Some(b)) => b.max(1),
            (_, false, None) => 1,
        }
    }

    /// What the order says about itself, for the settings fingerprint and the log.
    pub(crate) fn describe(&self) -> String {
        format!(
            "order-v2 shuffle={} block={} streamed={}",
            self.enabled,
            self.block(),
            self.streamed
        )
    }
}

/// Rounds of the Feistel network: with a keyed 64-bit mixer as the round function, four are
/// enough for a pseudo-random permutation (Luby and Rackoff); six leave a margin for the
/// smallest domains, where each half is only a few bits.
const ROUNDS: usize = 6;

/// A keyed pseudo-random permutation of `0..n`, computed per position in O(1) memory: a
/// balanced Feistel network over the smallest even number of bits that covers `n`, with cycle
/// walking (a value at or past `n` is encrypted again until it falls below `n`; since the
/// network permutes the whole domain, which holds at most 4 `n` values, that takes under four
/// rounds on average).
#[derive(Debug, Clone)]
pub(crate) struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    pub(crate) fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut keys = [0u64; ROUNDS];
        let mut state = key;
        for k in &mut keys {
            state = mix(state.wrapping_add(0x9E37_79B9_7F4A_7C15));
            *k = state;
        }
        Permutation { n, half_bits, keys }
    }

    /// The value at position `i` (`i < n`).
    pub(crate) fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        if self.n <= 1 {
            return i;
        }
        let mut x = i;
        loop {
            x = self.encrypt(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let mask = (1u64 << h) - 1;
        let (mut left, mut right) = (x >> h, x & mask);
        for &k in &self.keys {
            let f = mix(right ^ k) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << h) | right
    }
}

/// SplitMix64's finalizer: a bijective 64-bit mixer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A key for one (seed, epoch, purpose, number) tuple.
fn key(seed: u64, epoch: u64, purpose: u64, number: u64) -> u64 {
    let a = mix(seed ^ 0x6A09_E667_F3BC_C908);
    let b = mix(a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let c = mix(b ^ purpose.wrapping_mul(0xAEF1_7502_108E_F2D9));
    mix(c ^ number.wrapping_mul(0x9FB2_1C65_1E98_DF25))
}

const PURPOSE_WHOLE: u64 = 1;
const PURPOSE_UNITS: u64 = 2;
const PURPOSE_BLOCK: u64 = 3;
const PURPOSE_MIX: u64 = 4;

/// A seed for part `n` of something seeded by `seed` (a mixture's sources and blocks).
pub(crate) fn mix_seed(seed: u64, n: u64) -> u64 {
    key(seed, n, PURPOSE_MIX, 0)
}

/// `0..len` mixed within consecutive blocks, each block with its own key: blocks of `block`
/// positions (the last one shorter), or those that start at `starts`; `block <= 1` without
/// `starts`: unchanged.
#[derive(Debug, Clone, Copy)]
struct Blocks<'a> {
    len: u64,
    block: u64,
    starts: Option<&'a [u64]>,
    seed: u64,
    epoch: u64,
    /// Tells the parts of one epoch apart (the rank a stream part belongs to).
    part: u64,
}

impl Blocks<'_> {
    fn at(&self, k: u64) -> u64 {
        let (j, start, end) = match self.starts {
            Some(starts) => {
                let j = starts.partition_point(|&s| s <= k) - 1;
                (
                    j as u64,
                    starts[j],
                    starts.get(j + 1).copied().unwrap_or(self.len),
                )
            }
            None if self.block <= 1 => return k,
            None => {
                let j = k / self.block;
                let start = j * self.block;
                (j, start, (start + self.block).min(self.len))
            }
        };
        let number = self.part.wrapping_mul(0x1_0000_0001).wrapping_add(j);
        start
            + Permutation::new(
                end - start,
                key(self.seed, self.epoch, PURPOSE_BLOCK, number),
            )
            .at(k - start)
    }
}

/// Where the blocks of part `r` start (offsets within the part): whole units, consecutive
/// ones until they hold at least `block` samples, so that a reader holds the tables of one
/// block's units at a time. `None` for `block <= 1` (no mixing).
fn unit_blocks(starts: &[u64], n: u64, parts: u64, r: u64, block: u64) -> Option<Vec<u64>> {
    if block <= 1 {
        return None;
    }
    let (lo, hi) = (part_start(n, parts, r), part_start(n, parts, r + 1));
    let mut out = vec![0];
    // `starts` after the unit holding `lo` are the ends of the units in the part, in order:
    // each closes a block once it holds `block` samples.
    let first = starts.partition_point(|&s| s <= lo);
    for &end in &starts[first..] {
        if end >= hi {
            break;
        }
        let begun = *out.last().expect("a block start");
        if end - lo - begun >= block {
            out.push(end - lo);
        }
    }
    Some(out)
}

/// One epoch's global order: position `q` (`q < len()`) to a dataset index.
#[derive(Debug, Clone)]
pub(crate) struct Order {
    n: u64,
    seed: u64,
    epoch: u64,
    block: u64,
    layout: Layout,
}

#[derive(Debug, Clone)]
enum Layout {
    /// Random access: one permutation of the whole source (shuffled), or the source's order
    /// mixed within blocks.
    Random { whole: Option<Permutation> },
    /// Streams: `units` in visiting order, `starts` their first positions in the stream laid
    /// end to end (and the stream's length last), cut in `parts` parts, each mixed within the
    /// blocks of whole units that start at `blocks[part]`.
    Streams {
        units: Vec<Range<u32>>,
        starts: Vec<u64>,
        parts: u64,
        blocks: Vec<Option<Vec<u64>>>,
    },
    /// A mixture of sources (`source/mix.rs`; its order is [`MixOrder`]).
    Mix(Box<MixOrder>),
}

impl Order {
    /// The order of `epoch` over a source of `n` samples read at random.
    pub(crate) fn random(n: usize, settings: &ShuffleSettings, seed: u64, epoch: u64) -> Self {
        let n = n as u64;
        let block = settings.block();
        let whole = (block == 0).then(|| Permutation::new(n, key(seed, epoch, PURPOSE_WHOLE, 0)));
        Order {
            n,
            seed,
            epoch,
            block: block as u64,
            layout: Layout::Random { whole },
        }
    }

    /// The order of `epoch` over a source read as `streams` (each a range of consecutive
    /// dataset indices, in the source's order), laid out for `parts` ranks.
    pub(crate) fn streams(
        streams: &[Range<u32>],
        parts: usize,
        settings: &ShuffleSettings,
        seed: u64,
        epoch: u64,
    ) -> Self {
        let mut units: Vec<Range<u32>> =
            streams.iter().filter(|r| !r.is_empty()).cloned().collect();
        if settings.enabled {
            let p = Permutation::new(units.len() as u64, key(seed, epoch, PURPOSE_UNITS, 0));
            units = (0..units.len() as u64)
                .map(|i| units[p.at(i) as usize].clone())
                .collect();
        }
        let mut starts = Vec::with_capacity(units.len() + 1);
        let mut at = 0u64;
        for u in &units {
            starts.push(at);
            at += u64::from(u.end - u.start);
        }
        starts.push(at);
        let block = settings.block().max(1) as u64;
        let parts = parts.max(1) as u64;
        let blocks = (0..parts)
            .map(|r| unit_blocks(&starts, at, parts, r, block))
            .collect();
        Order {
            n: at,
            seed,
            epoch,
            block,
            layout: Layout::Streams {
                units,
                starts,
                parts,
                blocks,
            },
        }
    }

    /// The order of `epoch` over a mixture.
    pub(crate) fn mix(set: &MixSet, settings: &ShuffleSettings, seed: u64, epoch: u64) -> Self {
        let order = MixOrder::new(set, settings, seed, epoch);
        Order {
            n: order.len(),
            seed,
            epoch,
            block: 0,
            layout: Layout::Mix(Box::new(order)),
        }
    }

    /// Positions in the order (the source's samples).
    pub(crate) fn len(&self) -> usize {
        self.n as usize
    }

    /// Heap bytes the order holds (its unit table: nothing per sample).
    pub(crate) fn heap_bytes(&self) -> u64 {
        match &self.layout {
            Layout::Random { .. } => 0,
            Layout::Mix(_) => 0,
            Layout::Streams {
                units,
                starts,
                blocks,
                ..
            } => {
                let b: usize = blocks.iter().flatten().map(Vec::capacity).sum();
                (units.capacity() * 8 + starts.capacity() * 8 + b * 8) as u64
            }
        }
    }

    /// The dataset index at position `q`.
    pub(crate) fn at(&self, q: usize) -> u32 {
        let q = q as u64;
        debug_assert!(q < self.n);
        match &self.layout {
            Layout::Random { whole: Some(p) } => p.at(q) as u32,
            Layout::Mix(m) => m.at(q) as u32,
            Layout::Random { whole: None } => self.blocks(self.n, 0, None).at(q) as u32,
            Layout::Streams {
                units,
                starts,
                parts,
                blocks,
            } => {
                let (r, k) = (q % parts, q / parts);
                let (start, end) = (
                    part_start(self.n, *parts, r),
                    part_start(self.n, *parts, r + 1),
                );
                let aligned = blocks[r as usize].as_deref();
                let x = start + self.blocks(end - start, r, aligned).at(k);
                let u = starts.partition_point(|&s| s <= x) - 1;
                units[u].start + (x - starts[u]) as u32
            }
        }
    }

    fn blocks<'a>(&self, len: u64, part: u64, starts: Option<&'a [u64]>) -> Blocks<'a> {
        Blocks {
            len,
            block: self.block,
            starts,
            seed: self.seed,
            epoch: self.epoch,
            part,
        }
    }
}

/// Whether `units` look sorted by class for a shuffle that mixes blocks of `block` samples
/// into batches of `batch`: `Some(why)` when each unit holds a small share of the labels and
/// a block spans too few units for a batch to see half the labels a full shuffle would give it
/// (the labels' ranges per unit, from opening or a manifest, say so without reading a sample).
pub(crate) fn sorted_by_class(
    units: &crate::source::format::units::Units,
    block: usize,
    batch: usize,
) -> Option<String> {
    let classes = u64::from(units.num_classes);
    let spans: Vec<(usize, u64)> = units
        .units
        .iter()
        .enumerate()
        .filter_map(|(k, u)| Some((k, u64::from(u.tally.max_label? - u.tally.min_label?) + 1)))
        .collect();
    if classes < 4 || spans.is_empty() {
        return None;
    }
    let mean_span = spans.iter().map(|s| s.1).sum::<u64>() as f64 / spans.len() as f64;
    if mean_span * 4.0 > classes as f64 {
        return None; // each unit holds a fair share of the labels
    }
    let mean_unit = units.len() as f64 / units.units.len().max(1) as f64;
    let spanned = (block.max(1) as f64 / mean_unit.max(1.0)).ceil().max(1.0);
    let reachable = (spanned * mean_span).min(classes as f64);
    // Distinct labels in a batch drawn at random from evenly spread labels.
    let c = classes as f64;
    let full = c * (1.0 - (1.0 - 1.0 / c).powf(batch as f64));
    if reachable * 2.0 >= full {
        return None;
    }
    let (k, _) = spans[0];
    let u = &units.units[k];
    Some(format!(
        "the shards look sorted by class ({} holds labels {}..={} of 0..{}; a shard holds {mean_span:.0} labels on average): the shuffle mixes blocks of {block} samples, about {spanned:.0} shards, so a batch of {batch} sees at most about {reachable:.0} labels where a full shuffle gives {full:.0}; write shuffled shards (`imagefeed shards SOURCE OUT`), or mix more shards at once with shuffle_buffer(n) (their sample tables, about 100 B a sample, no sample); `imagefeed shuffle-quality` measures it",
        units.unit_name(k),
        u.tally.min_label.unwrap_or(0),
        u.tally.max_label.unwrap_or(0),
        classes,
    ))
}

/// The first position of part `r` of a stream of `n` samples cut in `parts` parts: sizes
/// `n / parts`, the first `n % parts` one larger (so part `r` has exactly as many samples as
/// there are positions `q < n` with `q mod parts == r`).
pub(crate) fn part_start(n: u64, parts: u64, r: u64) -> u64 {
    r * (n / parts) + r.min(n % parts)
}

/// Positions of a mixture's epoch mixed at once: each block holds every source's share (its
/// cumulative count floored), in a seeded order, each source's draws in their order.
pub(crate) const MIX_BLOCK: u64 = 64;

/// Epoch `epoch`'s order over a mixture: position to mixture index (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct MixOrder {
    parts: Vec<PartOrder>,
    /// The draws of each source in one epoch, and their sum.
    draws: Vec<u64>,
    len: u64,
    /// Blocks of about `MIX_BLOCK` positions; the seed and epoch that key their orders.
    blocks: u64,
    key: u64,
}

/// One source's stream in an epoch: its index offset and length, the epoch's first draw, and
/// the orders of the passes the epoch's draws fall in.
#[derive(Debug, Clone)]
struct PartOrder {
    offset: u64,
    len: u64,
    first_draw: u64,
    /// (pass, its order), in pass order.
    passes: Vec<(u64, Order)>,
}

impl MixOrder {
    pub(crate) fn new(set: &MixSet, settings: &ShuffleSettings, seed: u64, epoch: u64) -> Self {
        let parts = set
            .parts
            .iter()
            .zip(&set.draws)
            .enumerate()
            .map(|(s, (p, &n))| {
                let first_draw = epoch.saturating_mul(n);
                let b = &p.source.backing;
                let own = ShuffleSettings {
                    streamed: b.units().is_some(),
                    default_block: b.default_block(),
                    ..*settings
                };
                let part_seed = mix_seed(seed, s as u64);
                let len = p.len.max(1);
                let last = first_draw + n.max(1) - 1;
                let passes = (first_draw / len..=last / len)
                    .map(|pass| {
                        let order = match b.streams() {
                            Some(streams) => Order::streams(&streams, 1, &own, part_seed, pass),
                            None => Order::random(p.len as usize, &own, part_seed, pass),
                        };
                        (pass, order)
                    })
                    .collect();
                PartOrder {
                    offset: p.offset,
                    len: p.len,
                    first_draw,
                    passes,
                }
            })
            .collect();
        MixOrder {
            parts,
            draws: set.draws.clone(),
            len: set.epoch_len,
            blocks: set.epoch_len.div_ceil(MIX_BLOCK).max(1),
            key: mix_seed(seed ^ 0x6d69_7865, epoch),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Source `s`'s draws before block `b`.
    fn before(&self, s: usize, b: u64) -> u64 {
        if b >= self.blocks {
            return self.draws[s];
        }
        // floor(b × n_s / blocks): each block an even share, rounded down.
        ((u128::from(b) * u128::from(self.draws[s])) / u128::from(self.blocks)) as u64
    }

    /// Positions before block `b`.
    fn start(&self, b: u64) -> u64 {
        (0..self.parts.len()).map(|s| self.before(s, b)).sum()
    }

    /// The mixture index at position `q`.
    pub(crate) fn at(&self, q: u64) -> u64 {
        // The block holding q: the last whose start is at or before it.
        let (mut lo, mut hi) = (0u64, self.blocks);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.start(mid) <= q {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let b = lo;
        let start = self.start(b);
        let size = self.start(b + 1) - start;
        let perm = Permutation::new(size, self.key.wrapping_add(b));
        // The slots of block b are each source's share in turn; a position's slot says its
        // source, and its draw is the next of that source's in position order (so a source's
        // draws, and the passes over its samples, follow one another in the epoch's order).
        let source_of = |slot: u64| {
            let mut from = 0;
            for s in 0..self.parts.len() {
                from += self.before(s, b + 1) - self.before(s, b);
                if slot < from {
                    return s;
                }
            }
            self.parts.len() - 1
        };
        let o = q - start;
        let s = source_of(perm.at(o));
        let rank = (0..o).filter(|&p| source_of(perm.at(p)) == s).count() as u64;
        {
            let part = &self.parts[s];
            let d0 = self.before(s, b);
            {
                let draw = part.first_draw + d0 + rank;
                let len = part.len.max(1);
                let (pass, at) = (draw / len, draw % len);
                let order = part.passes.iter().find(|(p, _)| *p == pass).map(|(_, o)| o);
                part.offset + order.map_or(at, |o| u64::from(o.at(at as usize)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shards` units of `size` samples, unit `k` holding labels `labels(k)`, over `classes`.
    fn units_of(
        shards: u32,
        size: u32,
        classes: u32,
        labels: impl Fn(u32) -> (u32, u32),
    ) -> crate::source::format::units::Units {
        use crate::source::format::units::{Tally, Unit, Units};
        use crate::source::storage::{Located, Place};
        let units = (0..shards)
            .map(|k| {
                let (lo, hi) = labels(k);
                Unit {
                    file: std::sync::Arc::new(Located {
                        place: Place::Memory(std::sync::Arc::from(&[][..])),
                        path: format!("shard-{k}.tar").into(),
                        size: 0,
                        mtime: 0,
                    }),
                    first: u64::from(k * size),
                    count: size,
                    part: 0,
                    tally: Tally {
                        labeled: size,
                        min_label: Some(lo),
                        max_label: Some(hi),
                        image_bytes: 0,
                    },
                }
            })
            .collect();
        Units {
            units,
            num_classes: classes,
            mean_sample_bytes: None,
        }
    }

    #[test]
    fn shards_sorted_by_class_are_told_when_a_block_spans_too_few() {
        // ImageNet written in class order: 1,281 shards of 1,000, about one class each.
        let sorted = units_of(1281, 1000, 1000, |k| {
            (k * 1000 / 1281, (k * 1000 / 1281) + 1)
        });
        let why = sorted_by_class(&sorted, DEFAULT_BLOCK, 256).expect("sorted shards are told");
        assert!(
            why.contains("shard-0.tar holds labels 0..=1 of 0..1000"),
            "{why}"
        );
        // Blocks of 400 shards reach 800 labels: enough.
        assert!(sorted_by_class(&sorted, 400_000, 256).is_none());
        // Shards holding every label (shuffled when written) are fine at any block.
        let mixed = units_of(1281, 1000, 1000, |_| (0, 999));
        assert!(sorted_by_class(&mixed, 1, 256).is_none());
        // Few labels: a block of a few shards holds them all.
        let few = units_of(100, 1000, 10, |k| (k / 10, k / 10));
        assert!(sorted_by_class(&few, DEFAULT_BLOCK, 256).is_none());
        assert!(sorted_by_class(&few, 1000, 256).is_some());
    }

    use proptest::prelude::*;

    fn is_permutation(v: &mut [u64], n: u64) -> bool {
        v.sort_unstable();
        v.iter().copied().eq(0..n)
    }

    proptest! {
        #[test]
        fn a_permutation_permutes(n in 0u64..3000, key: u64) {
            let p = Permutation::new(n, key);
            let mut v: Vec<u64> = (0..n).map(|i| p.at(i)).collect();
            prop_assert!(is_permutation(&mut v, n));
        }

        #[test]
        fn every_order_is_a_permutation_of_the_source(
            sizes in proptest::collection::vec(0u32..40, 0..30),
            parts in 1usize..9,
            enabled: bool,
            buffer in proptest::option::of(0usize..100),
            seed: u64,
        ) {
            let mut streams = Vec::new();
            let mut at = 0u32;
            for s in sizes {
                streams.push(at..at + s);
                at += s;
            }
            let n = u64::from(at);
            for streamed in [false, true] {
                let settings = ShuffleSettings { enabled, buffer, streamed, ..Default::default() };
                let order = if streamed {
                    Order::streams(&streams, parts, &settings, seed, 3)
                } else {
                    Order::random(at as usize, &settings, seed, 3)
                };
                prop_assert_eq!(order.len() as u64, n);
                let mut v: Vec<u64> = (0..order.len()).map(|q| u64::from(order.at(q))).collect();
                prop_assert!(is_permutation(&mut v, n));
            }
        }
    }

    #[test]
    fn orders_depend_on_seed_and_epoch_and_not_otherwise() {
        let s = ShuffleSettings::default();
        let at = |o: &Order| (0..o.len()).map(|q| o.at(q)).collect::<Vec<_>>();
        let a = at(&Order::random(1000, &s, 1, 0));
        assert_eq!(a, at(&Order::random(1000, &s, 1, 0)));
        assert_ne!(a, at(&Order::random(1000, &s, 1, 1)));
        assert_ne!(a, at(&Order::random(1000, &s, 2, 0)));
        assert_ne!(a, (0..1000).collect::<Vec<u32>>());
        let off = ShuffleSettings {
            enabled: false,
            ..s
        };
        assert_eq!(
            at(&Order::random(10, &off, 1, 0)),
            (0..10).collect::<Vec<u32>>()
        );
    }

    #[test]
    fn a_stream_part_keeps_to_its_own_units_and_mixes_them_within_blocks() {
        // 8 shards of 100, 2 parts: each rank's positions come from 4 shards only.
        let streams: Vec<Range<u32>> = (0..8).map(|s| s * 100..(s + 1) * 100).collect();
        let s = ShuffleSettings {
            enabled: true,
            buffer: Some(400),
            streamed: true,
            ..Default::default()
        };
        let order = Order::streams(&streams, 2, &s, 7, 0);
        for r in 0..2 {
            let mine: Vec<u32> = (r..800).step_by(2).map(|q| order.at(q)).collect();
            let shards: std::collections::BTreeSet<u32> = mine.iter().map(|i| i / 100).collect();
            assert_eq!(shards.len(), 4, "rank {r}: {shards:?}");
            // The first 100 positions mix all four shards of the block, not one.
            let first: std::collections::BTreeSet<u32> =
                mine[..100].iter().map(|i| i / 100).collect();
            assert_eq!(first.len(), 4, "rank {r}: {first:?}");
        }
        // Blocks are whole shards, as many as reach the block's size: with blocks of 250,
        // three shards then one.
        let s250 = ShuffleSettings {
            buffer: Some(250),
            ..s
        };
        let order = Order::streams(&streams, 2, &s250, 7, 0);
        for r in 0..2 {
            let shards = |from: usize, to: usize| -> std::collections::BTreeSet<u32> {
                (from..to).map(|k| order.at(r + 2 * k) / 100).collect()
            };
            let (first, second) = (shards(0, 300), shards(300, 400));
            assert_eq!((first.len(), second.len()), (3, 1), "rank {r}");
            assert!(first.is_disjoint(&second));
        }
        // Without shuffling: the parts are the shards in order, each in member order.
        let off = ShuffleSettings {
            enabled: false,
            buffer: None,
            streamed: true,
            ..Default::default()
        };
        let order = Order::streams(&streams, 2, &off, 7, 0);
        let rank1: Vec<u32> = (1..800).step_by(2).map(|q| order.at(q)).collect();
        assert_eq!(rank1, (400..800).collect::<Vec<u32>>());
    }
}
