//! An epoch's plan: which positions of the epoch's global order (`crate::shuffle::Order`, the
//! same on every rank) this rank delivers, in which order, and which of them are padding.
//!
//! ## One rule for every source
//!
//! What is left of an epoch is always a suffix of its global order: the order without its
//! first `base` positions (0 for a fresh epoch). Rank `r` of `w` takes positions
//! `r, r + w, r + 2w, …` of that rest (as PyTorch's `DistributedSampler`), padded or cut per
//! [`ShardPadding`] so that every rank delivers the same number of batches. Ranks step
//! together (a training step takes one batch on every rank), and each of a rank's positions is
//! one sample of its batches (a skipped sample is replaced in place under sharding), so after
//! `p` positions a rank the positions delivered are exactly the first `min(p × w, rest)` of the
//! rest, whatever the rank, the padding or the failures. A state saved at any step therefore
//! resumes at any world size: the new ranks split the suffix that starts `p × w` further on,
//! by the same rule, however often the world size changes within an epoch.
//!
//! A source read as streams (tar shards, TFRecord, parquet) lays its order out for the world
//! size its epoch started with (`Split::order_world`): each of those ranks reads its own part
//! of the shards. After a resume at another world size the new ranks take the rest of that
//! same order, reading from every part, until the epoch ends; the next epoch is laid out for
//! them.
//!
//! ## The end of an epoch
//!
//! A rank's last batch records the position [`end_position`], `⌈rest / w⌉`: at least every
//! rank's share, so the states of all ranks agree after the last step as after any other, and
//! a resume from it delivers nothing on any rank at any world size.

use crate::config::Config;
use crate::error::Error;
use crate::rank::ShardPadding;
use crate::shuffle::Order;
use crate::source::Source;

/// The part of an epoch's global order still to deliver: the order without its first `base`
/// positions, laid out for `order_world` ranks (0: this loader's world size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Split {
    pub(crate) base: u64,
    pub(crate) order_world: usize,
}

/// The epoch's global order, laid out for `world` ranks where the source is read as streams.
pub(crate) fn global_order(cfg: &Config, source: &Source, epoch: u64, world: usize) -> Order {
    if let crate::source::Backing::Mix(m) = &source.backing {
        return Order::mix(m, &cfg.shuffle, cfg.seed, epoch);
    }
    match source.backing.streams() {
        Some(streams) => Order::streams(&streams, world, &cfg.shuffle, cfg.seed, epoch),
        None => Order::random(source.len(), &cfg.shuffle, cfg.seed, epoch),
    }
}

/// One rank's plan for (the rest of) an epoch: its positions of the global order's rest, from
/// `start` on.
#[derive(Debug)]
pub(crate) struct Plan {
    order: Order,
    /// Positions of the order delivered before this split.
    base: usize,
    /// Positions of the order left after `base`.
    rest: usize,
    rank: usize,
    world: usize,
    /// This rank's positions in the whole split (padding included).
    share: usize,
    /// Of those, the ones that are this rank's own samples; the others repeat samples from the
    /// start of the rest (padding).
    own: usize,
    /// Positions of the share consumed before this run.
    start: usize,
}

impl Plan {
    /// The plan of this loader's rank for `split` of `epoch`, from its start.
    pub(crate) fn new(cfg: &Config, source: &Source, epoch: u64, split: Split) -> Plan {
        let world = cfg.shard.world_size.max(1);
        let order_world = if split.order_world == 0 {
            world
        } else {
            split.order_world
        };
        let order = global_order(cfg, source, epoch, order_world);
        let n = order.len();
        let base = usize::try_from(split.base).unwrap_or(usize::MAX).min(n);
        let rest = n - base;
        let rank = cfg.shard.rank;
        let (share, own) = if world <= 1 {
            (rest, rest)
        } else {
            (
                share_len(cfg, rest),
                rest.saturating_sub(rank).div_ceil(world),
            )
        };
        Plan {
            order,
            base,
            rest,
            rank,
            world,
            share,
            own,
            start: 0,
        }
    }

    /// The same plan without its first `start` positions (a resumed run). A position past the
    /// share but not past [`end_position`] is the end of the epoch: nothing is left.
    pub(crate) fn starting_at(mut self, start: usize) -> Result<Plan, Error> {
        let end = self.rest.div_ceil(self.world);
        if start > self.share.max(end) {
            return Err(Error::config(
                "resume",
                format!(
                    "position {start} is past the epoch's {} samples on this rank",
                    self.share
                ),
            ));
        }
        self.start = start.min(self.share);
        Ok(self)
    }

    /// Positions this run delivers (padding included).
    pub(crate) fn len(&self) -> usize {
        self.share - self.start
    }

    /// The dataset index at position `k` of this run.
    pub(crate) fn at(&self, k: usize) -> u32 {
        let p = self.start + k;
        debug_assert!(p < self.share);
        self.order
            .at(self.base + (self.rank + p * self.world) % self.rest)
    }

    /// Whether position `k` of this run repeats another rank's sample to pad this rank's
    /// share (never a skipped sample's stand-in: the batcher marks those).
    pub(crate) fn is_padding(&self, k: usize) -> bool {
        self.start + k >= self.own
    }

    /// Positions of the share consumed before this run.
    pub(crate) fn offset(&self) -> usize {
        self.start
    }

    /// Heap bytes the plan holds (the order's unit table).
    #[allow(dead_code)]
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.order.heap_bytes()
    }
}

/// The number of positions `split` still has of an epoch over a source of `len` samples.
pub(crate) fn split_len(source: &Source, split: Split) -> usize {
    let n = source.epoch_len();
    n - usize::try_from(split.base).unwrap_or(usize::MAX).min(n)
}

/// The position every rank's state records after its last batch of `split`: `⌈rest / w⌉`,
/// at least each rank's share.
pub(crate) fn end_position(cfg: &Config, rest: usize) -> u64 {
    rest.div_ceil(cfg.shard.world_size.max(1)) as u64
}

/// How many samples one rank's share of `len` positions holds (see the module doc).
pub(super) fn share_len(cfg: &Config, len: usize) -> usize {
    let (rank, world) = (cfg.shard.rank, cfg.shard.world_size);
    // This rank's disjoint share: positions rank, rank + world, ... below len (none for a rank
    // past the end of a source smaller than the world).
    let own = len.saturating_sub(rank).div_ceil(world);
    match cfg.shard.padding {
        ShardPadding::Repeat => len.div_ceil(world),
        ShardPadding::Drop => len / world,
        ShardPadding::EqualBatches => {
            let batches = |c: usize| {
                if cfg.output.drop_remainder {
                    c / cfg.output.batch_size
                } else {
                    c.div_ceil(cfg.output.batch_size)
                }
            };
            let most = len.div_ceil(world);
            if batches(own) < batches(most) {
                most
            } else {
                own
            }
        }
    }
}

/// The split that a state saved at `position` of shares over `world` ranks (within `split`)
/// leaves for ranks of any world size: the first `position × world` positions of the rest are
/// delivered.
pub(crate) fn resplit(source: &Source, split: Split, world: usize, position: u64) -> Split {
    let rest = split_len(source, split) as u64;
    let done = position.saturating_mul(world as u64).min(rest);
    Split {
        base: split.base.saturating_add(done),
        order_world: if split.order_world == 0 {
            world
        } else {
            split.order_world
        },
    }
}

/// The length of a rank's plan for a whole epoch of `len` samples, without building it.
pub(crate) fn plan_len(cfg: &Config, len: usize) -> usize {
    if cfg.shard.world_size <= 1 || len == 0 {
        len
    } else {
        share_len(cfg, len)
    }
}
