//! An epoch's plan: the seeded order in which its sample indices are visited (the epoch's
//! *global order*, the same on every rank), the part of it still to deliver after an elastic
//! resume (a [`Split`]), this rank's share of that (sharding and its padding), and the shuffle
//! buffer's replay for a resumed epoch.
//!
//! ## Resuming at another world size
//!
//! Ranks consume their shares in lockstep (a training step takes one batch on every rank), so
//! a state saved by any rank at a step boundary says what every rank has delivered:
//! - random-access sources split the global order strided (rank `r` takes positions
//!   `r, r + w, …`), so after `p` positions a rank, the first `p × w` positions of the order
//!   are delivered: the rest is a suffix of the order, `base` positions in;
//! - tar shards split it in contiguous blocks (rank `r` reads about `1/w` of the shards front
//!   to back), so the rest is each block without its first `p` positions: a `prior` split.
//!
//! A new world size splits that rest again with the same rule. Strided splits fold into a
//! new `base` however often the world size changes; for tar shards a second change of world
//! size within one epoch would need a chain of splits, and is refused by name. So is a change
//! of world size for tar shards with a sample shuffle buffer (the samples held in every rank's
//! buffer are not in the state).

use crate::config::Config;
use crate::error::Error;
use crate::rng::{self, Rng};
use crate::shard::ShardPadding;
use crate::shuffle::ShuffleBuffer;
use crate::source::Source;

/// The part of an epoch's global order still to deliver: the order without its first `base`
/// positions, and without the first `prior.1` positions of each of the `prior.0` contiguous
/// blocks the rest was split in (tar shards resumed at another world size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Split {
    pub(crate) base: u64,
    pub(crate) prior: Option<(usize, u64)>,
}

/// Whether `source`'s epochs are split in contiguous blocks (sources read as streams: tar
/// shards) rather than strided.
pub(crate) fn contiguous(source: &Source) -> bool {
    source.backing.streams().is_some()
}

/// The start of rank `rank`'s contiguous block of `len` positions split over `world` ranks.
fn block_start(len: usize, world: usize, rank: usize) -> usize {
    rank * (len / world) + rank.min(len % world)
}

/// The epoch's global order: a seeded permutation of the whole source (or file order) and,
/// with an index shuffle buffer, its pass through it; for tar shards, the shards in a seeded
/// order (or in order), each shard's samples in member order.
fn global_order(cfg: &Config, source: &Source, epoch: u64) -> Vec<u32> {
    let len = source.len();
    let shuffled = |n: u32| {
        rng::permutation(
            n,
            &mut Rng::for_stage(cfg.seed, epoch, rng::STAGE_PERMUTATION),
        )
    };
    if let Some(streams) = source.backing.streams() {
        let visit: Vec<u32> = if cfg.shuffle.enabled {
            shuffled(streams.len() as u32)
        } else {
            (0..streams.len() as u32).collect()
        };
        let mut order = Vec::with_capacity(len);
        for k in visit {
            order.extend(streams[k as usize].clone());
        }
        return order;
    }
    let order = if cfg.shuffle.enabled {
        shuffled(len as u32)
    } else {
        (0..len as u32).collect()
    };
    if cfg.shuffle.buffer == 0 {
        return order;
    }
    // Random-access sources: the shuffle buffer reorders indices before decoding (tf.data's
    // `shuffle` before `map`), so it holds no sample. It runs over the global order, before
    // the ranks take their shares, so that the shares still split one order (and a state
    // resumes at any world size).
    let mut buffer = ShuffleBuffer::new(
        cfg.shuffle.buffer,
        Rng::for_stage(cfg.seed, epoch, rng::STAGE_SHUFFLE_BUFFER),
    );
    let mut out = Vec::with_capacity(order.len());
    for i in order {
        out.extend(buffer.push(i));
    }
    while let Some(i) = buffer.drain_one() {
        out.push(i);
    }
    out
}

/// The positions of an order of `len` that `split` still has, as ranges.
fn remaining(len: usize, split: Split, contiguous: bool) -> Vec<std::ops::Range<usize>> {
    let base = usize::try_from(split.base).unwrap_or(usize::MAX).min(len);
    let n = len - base;
    match split.prior {
        None => std::iter::once(base..len).collect(),
        Some((world, position)) if world > 0 => {
            let p = usize::try_from(position).unwrap_or(usize::MAX);
            if contiguous {
                (0..world)
                    .map(|r| {
                        let (start, end) = (block_start(n, world, r), block_start(n, world, r + 1));
                        base + start.saturating_add(p).min(end)..base + end
                    })
                    .filter(|r| !r.is_empty())
                    .collect()
            } else {
                std::iter::once(base + p.saturating_mul(world).min(n)..len).collect()
            }
        }
        Some(_) => std::iter::once(base..len).collect(),
    }
}

/// The number of positions `split` still has of an epoch over a source of `len` samples.
pub(crate) fn split_len(source: &Source, split: Split) -> usize {
    remaining(source.len(), split, contiguous(source))
        .iter()
        .map(|r| r.len())
        .sum()
}

/// The order in which one rank visits the source in an epoch: the part `split` still has of
/// the epoch's global order, of which rank `r` of `w` takes positions `r, r + w, r + 2w, …`
/// (as PyTorch's `DistributedSampler`), padded or cut per [`ShardPadding`] so that every rank
/// delivers the same number of batches.
///
/// Tar shards are read as streams: rank `r` takes a contiguous block of the order (the same
/// number of samples as the strided split), so that it reads about `1/w` of the shards, front
/// to back.
pub(crate) fn plan(cfg: &Config, source: &Source, epoch: u64, split: Split) -> Vec<u32> {
    let order = global_order(cfg, source, epoch);
    let contiguous = contiguous(source);
    let ranges = remaining(order.len(), split, contiguous);
    let (rank, world) = (cfg.shard.rank, cfg.shard.world_size);
    if world <= 1 && ranges.len() == 1 && ranges[0] == (0..order.len()) {
        return order;
    }
    // Position `k` of the rest, through the ranges' running starts (a few ranges at most),
    // so that the rest is never copied out of the order.
    let starts: Vec<usize> = ranges
        .iter()
        .scan(0, |at, r| {
            let start = *at;
            *at += r.len();
            Some(start)
        })
        .collect();
    let len: usize = ranges.iter().map(|r| r.len()).sum();
    let at = |k: usize| {
        let j = starts.partition_point(|&s| s <= k) - 1;
        order[ranges[j].start + (k - starts[j])]
    };
    if len == 0 {
        return Vec::new();
    }
    if world <= 1 {
        return (0..len).map(at).collect();
    }
    let count = share_len(cfg, len);
    let (start, step) = if contiguous {
        (block_start(len, world, rank), 1)
    } else {
        (rank, world)
    };
    (0..count).map(|k| at((start + k * step) % len)).collect()
}

/// How many samples one rank's share of `len` positions holds (see [`plan`]).
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

/// The split a state saved at `position` of rank shares over `world` ranks (within `split`)
/// leaves for ranks of another world size. `Err` says why it cannot.
pub(crate) fn resplit(
    cfg: &Config,
    source: &Source,
    split: Split,
    world: usize,
    position: u64,
) -> Result<Split, String> {
    if !contiguous(source) {
        // Strided: the rest is always a suffix of the order.
        let done = match split.prior {
            None => 0,
            Some((w, p)) => (w as u64).saturating_mul(p),
        };
        return Ok(Split {
            base: split
                .base
                .saturating_add(done)
                .saturating_add(position.saturating_mul(world as u64)),
            prior: None,
        });
    }
    if cfg.shuffle.sample_buffer() > 0 {
        return Err(format!(
            "a tar shard source with a shuffle buffer ({} samples) resumes at the world size that saved the state ({world}) only: the samples each rank's buffer held are not in the state; resume on {world} ranks, or use shuffle_buffer(0)",
            cfg.shuffle.sample_buffer()
        ));
    }
    match split.prior {
        None => Ok(Split {
            base: split.base,
            prior: Some((world, position)),
        }),
        // One block: the rest is a suffix again.
        Some((1, p)) => Ok(Split {
            base: split.base.saturating_add(p),
            prior: Some((world, position)),
        }),
        Some((w, _)) => Err(format!(
            "this epoch of tar shards was already resumed from {w} ranks onto {world}: it resumes at another world size once; finish it on {world} ranks (the next epoch starts on any number)"
        )),
    }
}

/// With a sample shuffle buffer: its state after `emitted` outputs over `plan` (each plan
/// sample pushed once, failed ones as placeholders, so this does not depend on which failed):
/// the plan samples pushed, the samples held (slot order) and the generator.
pub(super) fn replay_buffer(
    cfg: &Config,
    plan: &[u32],
    epoch: u64,
    emitted: usize,
) -> Result<(usize, Vec<u32>, Rng), Error> {
    let mut buffer = ShuffleBuffer::new(
        cfg.shuffle.sample_buffer(),
        Rng::for_stage(cfg.seed, epoch, rng::STAGE_SHUFFLE_BUFFER),
    );
    let (mut out, mut pushed) = (0usize, 0usize);
    while out < emitted {
        if pushed < plan.len() {
            out += usize::from(buffer.push(plan[pushed]).is_some());
            pushed += 1;
        } else if buffer.drain_one().is_some() {
            out += 1;
        } else {
            return Err(Error::config(
                "resume",
                format!(
                    "position {emitted} is past the epoch's {} samples",
                    plan.len()
                ),
            ));
        }
    }
    let (held, rng) = buffer.into_parts();
    Ok((pushed, held, rng))
}

/// The length of [`plan`] for a whole epoch, without building it.
pub(crate) fn plan_len(cfg: &Config, len: usize) -> usize {
    if cfg.shard.world_size <= 1 || len == 0 {
        len
    } else {
        share_len(cfg, len)
    }
}
