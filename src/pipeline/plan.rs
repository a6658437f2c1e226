//! An epoch's plan: the seeded order in which its sample indices are visited, this rank's
//! share of it (sharding and its padding), and the shuffle buffer's replay for a resumed
//! epoch.

use crate::config::{Config, ShardPadding};
use crate::error::Error;
use crate::rng::{self, Rng};
use crate::shuffle::ShuffleBuffer;
use crate::source::{Backing, Source};

/// The order in which one rank visits the source in an epoch: a seeded permutation of the
/// whole source (or file order), of which rank `r` of `w` takes positions `r, r + w, r + 2w, …`
/// (as PyTorch's `DistributedSampler`), padded or cut per [`ShardPadding`] so that every rank
/// delivers the same number of batches.
///
/// Tar shards are read as streams, so their order is the shards in a seeded order (or in
/// order), each shard's samples in member order; rank `r` then takes a contiguous block of that
/// order (the same number of samples as the strided split), so that it reads about `1/w` of
/// the shards, front to back.
pub(crate) fn plan(cfg: &Config, source: &Source, epoch: u64) -> Vec<u32> {
    let len = source.len();
    let n = len as u32;
    let shuffled = |n: u32| {
        rng::permutation(
            n,
            &mut Rng::for_stage(cfg.seed, epoch, rng::STAGE_PERMUTATION),
        )
    };
    let (order, contiguous): (Vec<u32>, bool) = match &source.backing {
        Backing::Tar(tar) => {
            let shards: Vec<u32> = if cfg.shuffle {
                shuffled(tar.shards.len() as u32)
            } else {
                (0..tar.shards.len() as u32).collect()
            };
            let mut order = Vec::with_capacity(len);
            for k in shards {
                let s = &tar.shards[k as usize];
                order.extend(s.first..s.first + s.count);
            }
            (order, true)
        }
        _ if cfg.shuffle => (shuffled(n), false),
        _ => ((0..n).collect(), false),
    };
    let (rank, world) = (cfg.rank, cfg.world_size);
    let share = if world <= 1 || len == 0 {
        order
    } else {
        let count = share_len(cfg, len);
        let (start, step) = if contiguous {
            (rank * (len / world) + rank.min(len % world), 1)
        } else {
            (rank, world)
        };
        (0..count)
            .map(|k| order[(start + k * step) % len])
            .collect()
    };
    if contiguous || cfg.shuffle_buffer == 0 {
        return share;
    }
    // Random-access sources: the shuffle buffer reorders indices before decoding (tf.data's
    // `shuffle` before `map`), so it holds no sample.
    let mut buffer = ShuffleBuffer::new(
        cfg.shuffle_buffer,
        Rng::for_stage(cfg.seed, epoch, rng::STAGE_SHUFFLE_BUFFER),
    );
    let mut out = Vec::with_capacity(share.len());
    for i in share {
        out.extend(buffer.push(i));
    }
    while let Some(i) = buffer.drain_one() {
        out.push(i);
    }
    out
}

/// How many samples one rank's plan holds (see [`plan`]).
pub(super) fn share_len(cfg: &Config, len: usize) -> usize {
    let (rank, world) = (cfg.rank, cfg.world_size);
    // This rank's disjoint share: positions rank, rank + world, ... below len (none for a rank
    // past the end of a source smaller than the world).
    let own = len.saturating_sub(rank).div_ceil(world);
    match cfg.shard_padding {
        ShardPadding::Repeat => len.div_ceil(world),
        ShardPadding::Drop => len / world,
        ShardPadding::EqualBatches => {
            let batches = |c: usize| {
                if cfg.drop_remainder {
                    c / cfg.batch_size
                } else {
                    c.div_ceil(cfg.batch_size)
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
        cfg.sample_shuffle_buffer(),
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

/// The length of [`plan`] without building it.
pub(crate) fn plan_len(cfg: &Config, len: usize) -> usize {
    if cfg.world_size <= 1 || len == 0 {
        len
    } else {
        share_len(cfg, len)
    }
}
