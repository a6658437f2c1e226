//! The loader's contract (docs/CONTRACT.md), checked against a model in random scenarios.
//!
//! [`model_run`] is the contract written as a small pure function: from the epoch's global
//! order, the settings, the part of the epoch left and the failing samples, what one rank
//! delivers — every batch's indices, padding flags and recorded position — or that it fails.
//! The property test drives the real loader through random scenarios (sizes 0 to 200, 1 to 8
//! ranks, batches of 1 to 16, `drop_remainder`, each padding, shuffle on and off, shuffle
//! blocks, failures of every density, permanent and transient, skip or fail, stops at any
//! step, chains of resumes across world sizes within an epoch and into the next, over file
//! lists, tar shards, parquet and TFRecord) and checks at every step that:
//! - every rank delivered what the model says (so the union over ranks is exactly once, with
//!   padding copies flagged, which is checked on its own as well);
//! - every rank delivered the same number of batches;
//! - the states of all ranks agree, and record what the model says;
//! - a resume from any rank's state continues as the model says.
//!
//! The runner's seed is printed first; a failure prints it again with the smallest scenario
//! found. `IMAGEFEED_CONTRACT_SEED=<seed>` replays a run, `IMAGEFEED_CONTRACT_CASES=<n>` sets
//! how many scenarios it tries (CI: the default below; a longer run: docs/CONTRACT.md).

use std::collections::{BTreeMap, BTreeSet};

use imagefeed::{Dtype, Loader, LoaderBuilder, LoaderState, OnError, ShardPadding, Source};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::common::testdata;

/// Scenarios tried by `cargo test` (each runs a few dozen epochs of up to 200 tiny images).
const DEFAULT_CASES: u32 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Tar,
    Parquet,
    TfRecord,
    /// A mixture of a list (the first half of the samples) and tar shards (the rest).
    Mix,
}

/// A mixture's settings: the two weights, an epoch size (else the end it says), and whether
/// an exhausted source repeats.
#[derive(Debug, Clone, Copy)]
struct MixSpec {
    weights: (u8, u8),
    epoch_size: Option<usize>,
    ends_last: bool,
    repeat: bool,
}

/// The mixture settings of a scenario that is not a mixture.
const NO_MIX: MixSpec = MixSpec {
    weights: (1, 1),
    epoch_size: None,
    ends_last: false,
    repeat: true,
};

/// One run of some ranks: from a fresh epoch or the previous run's state, each rank stops
/// after `steps` batches (`None`: at the end).
#[derive(Debug, Clone)]
struct Run {
    world: usize,
    steps: Option<usize>,
    /// Which rank's state the next run resumes from (modulo the world size).
    state_of: usize,
}

#[derive(Debug, Clone)]
struct Scenario {
    kind: Kind,
    mix: MixSpec,
    n: usize,
    /// Samples a shard (tar, parquet row group, TFRecord file).
    unit: usize,
    batch: usize,
    drop_remainder: bool,
    padding: ShardPadding,
    shuffle: bool,
    block: Option<usize>,
    skip: bool,
    seed: u64,
    /// Samples that fail in every epoch (undecodable).
    permanent: BTreeSet<u32>,
    /// Samples that fail in epoch 0 only (a transient I/O error).
    transient: BTreeSet<u32>,
    /// Epoch 0's runs, then epoch 1's (each chain's last run goes to the end).
    epochs: Vec<Vec<Run>>,
}

impl Scenario {
    fn fails(&self, epoch: u64, index: u32) -> bool {
        self.permanent.contains(&index) || (epoch == 0 && self.transient.contains(&index))
    }

    /// Whether samples may be dropped legitimately (the rest of a batch, or the rest of a
    /// world's split).
    fn drops(&self) -> bool {
        self.drop_remainder || self.padding == ShardPadding::Drop
    }
}

fn padding_strategy() -> impl Strategy<Value = ShardPadding> {
    prop_oneof![
        Just(ShardPadding::EqualBatches),
        Just(ShardPadding::Repeat),
        Just(ShardPadding::Drop),
    ]
}

fn runs(max: usize) -> impl Strategy<Value = Vec<Run>> {
    proptest::collection::vec(
        (1usize..=8, proptest::option::of(0usize..12), 0usize..8),
        1..=max,
    )
    .prop_map(|v| {
        let last = v.len() - 1;
        v.into_iter()
            .enumerate()
            .map(|(i, (world, steps, state_of))| Run {
                world,
                steps: if i == last { None } else { steps },
                state_of,
            })
            .collect()
    })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let shape = (
        prop_oneof![
            3 => Just(Kind::List),
            2 => Just(Kind::Tar),
            1 => Just(Kind::Parquet),
            1 => Just(Kind::TfRecord),
            2 => Just(Kind::Mix),
        ],
        0usize..=200,
        1usize..=40,
        1usize..=16,
    );
    let settings = (
        any::<bool>(),
        padding_strategy(),
        any::<bool>(),
        prop_oneof![Just(None), (0usize..40).prop_map(Some)],
        prop_oneof![4 => Just(true), 1 => Just(false)],
        any::<u64>(),
    );
    // Failure densities: none, a few, many, all; transient ones in epoch 0.
    let faults = (
        prop_oneof![Just(0.0), Just(0.03), Just(0.3), Just(1.0)],
        prop_oneof![3 => Just(0.0), 1 => Just(0.1)],
        runs(4),
        proptest::option::of(runs(3)),
        (
            (1u8..=4, 1u8..=4),
            proptest::option::of(1usize..=300),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(weights, epoch_size, ends_last, repeat)| MixSpec {
                weights,
                epoch_size,
                ends_last,
                repeat,
            }),
    );
    (shape, settings, faults).prop_flat_map(
        |(
            (kind, n, unit, batch),
            (drop_remainder, padding, shuffle, block, skip, seed),
            (p, q, e0, e1, mix),
        )| {
            // A mixture needs a sample in each of its two sources.
            let kind = if kind == Kind::Mix && n < 2 {
                Kind::List
            } else {
                kind
            };
            let every = move |p: f64| -> BoxedStrategy<BTreeSet<u32>> {
                if p >= 1.0 {
                    Just((0..n as u32).collect()).boxed()
                } else {
                    proptest::collection::btree_set(0u32..(n.max(1) as u32), 0..=n)
                        .prop_map(move |s| {
                            let keep = (s.len() as f64 * p).round() as usize;
                            s.into_iter().take(keep).collect::<BTreeSet<u32>>()
                        })
                        .boxed()
                }
            };
            (every(p), every(q)).prop_map(move |(permanent, transient)| Scenario {
                kind,
                mix,
                n,
                unit,
                batch,
                drop_remainder,
                padding,
                shuffle,
                block,
                skip,
                seed,
                permanent,
                transient,
                epochs: std::iter::once(e0.clone()).chain(e1.clone()).collect(),
            })
        },
    )
}

// ---- the model ----

/// What one rank delivers in one run, by the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Delivery {
    /// Each batch: (index, padding copy) per image, and the position it records.
    batches: Vec<(Vec<(u64, bool)>, u64)>,
    /// The run ends with an error after its batches.
    error: bool,
    /// Samples skipped in the positions the batches cover (the stats' count).
    skipped_in: Vec<u64>,
}

/// The contract for rank `rank` of `world`, over `order` (the epoch's global order) without
/// its first `base` positions, from position `start` of the rank's share; `fails` says which
/// samples fail in this epoch.
fn model_run(
    s: &Scenario,
    order: &[u32],
    base: usize,
    rank: usize,
    world: usize,
    start: usize,
    fails: &dyn Fn(u32) -> bool,
) -> Delivery {
    let rest = &order[base.min(order.len())..];
    let len = rest.len();
    let b = s.batch;
    let batches_of = |c: usize| {
        if s.drop_remainder {
            c / b
        } else {
            c.div_ceil(b)
        }
    };
    // The rank's positions: r, r + w, … of the rest, padded or cut to its share.
    let own = (0..len).filter(|p| p % world == rank).count();
    let share = if world == 1 {
        len
    } else {
        match s.padding {
            ShardPadding::Repeat => len.div_ceil(world),
            ShardPadding::Drop => len / world,
            _ => {
                if batches_of(own) < batches_of(len.div_ceil(world)) {
                    len.div_ceil(world)
                } else {
                    own
                }
            }
        }
    };
    let end = len.div_ceil(world) as u64;
    let entries: Vec<(usize, u32, bool)> = (start.min(share)..share)
        .map(|k| (k, rest[(rank + k * world) % len], k >= own))
        .collect();
    // Slots: a sample, or under sharding a stand-in for a failed one (the next sample of the
    // run that loads, else the last one before it); unsharded, a failed sample is skipped.
    // Under `OnError::Fail` the first failure ends the run after the batches before it (each
    // recording the position it would have without the failure).
    let first_failure = entries.iter().position(|e| fails(e.1));
    let mut slots: Vec<(usize, u64, bool)> = Vec::new();
    let mut skipped_at = Vec::new();
    let mut no_stand_in = false;
    for (j, &(k, index, padding)) in entries.iter().enumerate() {
        if !fails(index) || !s.skip {
            slots.push((k, u64::from(index), padding));
            continue;
        }
        skipped_at.push(u64::from(index));
        if world > 1 {
            let next = entries[j + 1..].iter().find(|e| !fails(e.1));
            let before = entries[..j].iter().rev().find(|e| !fails(e.1));
            match next.or(before) {
                Some(stand_in) => slots.push((k, u64::from(stand_in.1), true)),
                None => {
                    no_stand_in = true;
                    break;
                }
            }
        }
    }
    if no_stand_in {
        // No sample of the run loads: nothing can stand in for the skipped ones.
        return Delivery {
            batches: Vec::new(),
            error: true,
            skipped_in: Vec::new(),
        };
    }
    let mut batches: Vec<(Vec<(u64, bool)>, u64)> = slots
        .chunks(b)
        .filter(|c| c.len() == b || !s.drop_remainder)
        .map(|c| {
            let last = c.last().expect("a chunk holds a slot").0;
            (
                c.iter().map(|&(_, i, p)| (i, p)).collect(),
                (last + 1) as u64,
            )
        })
        .collect();
    if let Some(last) = batches.last_mut() {
        last.1 = end;
    }
    match first_failure {
        Some(j) if !s.skip => {
            let k_fail = entries[j].0 as u64;
            // A batch ends at position `last + 1`; the error comes before any that holds the
            // failed position.
            let mut kept = 0;
            let mut covered = start.min(share) as u64;
            for (images, _) in &batches {
                covered += images.len() as u64;
                if covered > k_fail {
                    break;
                }
                kept += 1;
            }
            batches.truncate(kept);
            Delivery {
                batches,
                error: true,
                skipped_in: Vec::new(),
            }
        }
        _ => Delivery {
            skipped_in: skipped_at,
            batches,
            error: false,
        },
    }
}

// ---- the real loader ----

/// The scenario's source, written in a temporary folder (kept alive by the returned guard).
fn open_source(s: &Scenario) -> Result<(Source, tempfile::TempDir), imagefeed::Error> {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let tiny = testdata("valid/odd_7x5.jpg");
    let list = || Source::from_entries((0..s.n).map(|i| (tiny.clone(), i as u32)));
    let source = match s.kind {
        Kind::List => list()?,
        Kind::Tar => captioned_shards(dir.path(), 0..s.n, s.unit)?,
        Kind::Mix => {
            let half = s.n / 2;
            let first = Source::from_entries((0..half).map(|i| (tiny.clone(), i as u32)))?;
            let second = captioned_shards(dir.path(), 0..s.n - half, s.unit)?;
            let m = s.mix;
            let mut mix = imagefeed::Mix::new()
                .source(first, f64::from(m.weights.0))
                .source(second, f64::from(m.weights.1))
                .ends_with(if m.ends_last {
                    imagefeed::MixEnd::Last
                } else {
                    imagefeed::MixEnd::First
                })
                .when_exhausted(if m.repeat {
                    imagefeed::Exhausted::Repeat
                } else {
                    imagefeed::Exhausted::Drop
                });
            if let Some(size) = m.epoch_size {
                mix = mix.epoch_size(size);
            }
            mix.build()?
        }
        Kind::Parquet => {
            let bytes = std::fs::read(&tiny).expect("the tiny JPEG");
            let rows: Vec<crate::formats::pq::Row> = (0..s.n)
                .map(|i| (Some(bytes.clone()), Some(i as i64)))
                .collect();
            let groups: Vec<Vec<crate::formats::pq::Row>> =
                rows.chunks(s.unit).map(|c| c.to_vec()).collect();
            // Row groups split over two files, as the Hub's `data/` folders hold several.
            let half = groups.len().div_ceil(2);
            for (f, part) in groups.chunks(half.max(1)).enumerate() {
                crate::formats::pq::write(
                    &dir.path().join(format!("train-{f:05}-of-00002.parquet")),
                    part,
                    true,
                );
            }
            Source::open(dir.path())?
        }
        Kind::TfRecord => {
            let bytes = std::fs::read(&tiny).expect("the tiny JPEG");
            let files = s.n.div_ceil(s.unit);
            for f in 0..files {
                let payloads: Vec<Vec<u8>> = (f * s.unit..((f + 1) * s.unit).min(s.n))
                    .map(|i| {
                        crate::formats::example(&[
                            ("image/encoded", Ok(&bytes)),
                            ("image/class/label", Err(i as i64)),
                        ])
                    })
                    .collect();
                std::fs::write(
                    dir.path()
                        .join(format!("train-{f:05}-of-{files:05}.tfrecord")),
                    crate::formats::framed(&payloads),
                )
                .expect("a TFRecord file");
            }
            Source::open(dir.path())?
        }
    };
    Ok((source, dir))
}

/// Tar shards of the samples `range` (index = label), `unit` a shard, each sample with a
/// `KEY.txt` caption naming its index: the fields the contract checks.
fn captioned_shards(
    dir: &std::path::Path,
    range: std::ops::Range<usize>,
    unit: usize,
) -> Result<Source, imagefeed::Error> {
    let tiny = std::fs::read(testdata("valid/odd_7x5.jpg")).expect("the tiny JPEG");
    let indices: Vec<usize> = range.collect();
    for (k, chunk) in indices.chunks(unit.max(1)).enumerate() {
        let mut b = tar::Builder::new(Vec::new());
        for &i in chunk {
            for (ext, data) in [
                ("jpg", tiny.clone()),
                ("cls", i.to_string().into_bytes()),
                ("txt", caption(i as u64).into_bytes()),
            ] {
                let mut h = tar::Header::new_ustar();
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                h.set_entry_type(tar::EntryType::Regular);
                b.append_data(&mut h, format!("{i:09}.{ext}"), &data[..])
                    .expect("a member");
            }
        }
        std::fs::write(
            dir.join(format!("shard-{k:06}.tar")),
            b.into_inner().expect("a tar"),
        )
        .expect("a shard");
    }
    Source::open(dir)
}

/// The caption of a captioned shard's sample `i`.
fn caption(i: u64) -> String {
    format!("sample {i} says so")
}

fn builder(s: &Scenario, source: &Source, rank: usize, world: usize) -> LoaderBuilder {
    let sc = s.clone();
    let mut b = Loader::builder(source.clone())
        .image_size(4)
        .dtype(Dtype::U8)
        .batch_size(s.batch)
        .drop_remainder(s.drop_remainder)
        .shard(rank, world)
        .shard_padding(s.padding)
        .shuffle(s.shuffle)
        .seed(s.seed)
        .decode_threads(2)
        .on_error(if s.skip {
            OnError::SKIP_ALL
        } else {
            OnError::Fail
        })
        .inject_failures(move |epoch, index| {
            let index = index as u32;
            if sc.permanent.contains(&index) {
                Some(true)
            } else if epoch == 0 && sc.transient.contains(&index) {
                Some(false)
            } else {
                None
            }
        });
    if let Some(block) = s.block {
        b = b.shuffle_buffer(block);
    }
    if s.kind == Kind::Tar {
        b = b.field("txt");
    }
    b
}

/// What one real rank delivered, in the model's terms, with its state after each batch.
fn real_run(
    loader: &Loader,
    from: Option<&LoaderState>,
    epoch: u64,
    steps: Option<usize>,
    mix_offset: u64,
) -> (Delivery, Vec<LoaderState>, imagefeed::Stats) {
    let mut it = match from {
        Some(state) => loader.resume(state),
        None => loader.epoch(epoch),
    };
    let mut d = Delivery {
        batches: Vec::new(),
        error: false,
        skipped_in: Vec::new(),
    };
    let mut states = vec![it.state()];
    while steps != Some(d.batches.len()) {
        match it.next() {
            None => {
                // The epoch is over: the state says so, batch or not.
                states.push(it.state());
                break;
            }
            Some(Err(_)) => {
                d.error = true;
                break;
            }
            Some(Ok(batch)) => {
                // Labels are the indices the sources were written with; a caption names its
                // sample (a stand-in's, its own).
                for (&i, &l) in batch.indices().iter().zip(batch.labels()) {
                    assert_eq!(u64::from(l), i, "the label of sample {i}");
                }
                if let Some(captions) = batch.field("txt") {
                    for (k, &i) in batch.indices().iter().enumerate() {
                        assert_eq!(captions.text(k), Some(&*caption(i)), "sample {i}'s caption");
                    }
                }
                // A mixture's index: the source's offset (its first source's samples, half
                // of them) and the index in it.
                let mixed = batch
                    .indices()
                    .iter()
                    .zip(batch.sources())
                    .map(|(&i, &src)| i + u64::from(src) * mix_offset);
                d.batches.push((
                    mixed.zip(batch.padded().iter().copied()).collect(),
                    batch.position(),
                ));
                // Through its one-line form, as a checkpoint keeps it.
                states.push(it.state().to_string().parse().expect("a state line parses"));
            }
        }
    }
    let stats = it.stats();
    (d, states, stats)
}

/// Runs a scenario against the model; `Err` says how they differ.
fn check(s: &Scenario) -> Result<(), TestCaseError> {
    if s.n == 0 {
        // An empty source is refused when opened, by name.
        let e = Source::from_entries(Vec::<(&str, u32)>::new());
        prop_assert!(e.is_err());
        return Ok(());
    }
    let (source, _dir) =
        open_source(s).map_err(|e| TestCaseError::fail(format!("opening failed: {e}")))?;
    prop_assert_eq!(source.len(), s.n);
    // The positions of an epoch (a mixture's are its draws).
    let epoch_len = source.epoch_len();
    for (epoch, runs) in s.epochs.iter().enumerate() {
        let epoch = epoch as u64;
        let fails = |i: u32| s.fails(epoch, i);
        // The model's view of where the epoch is: the order's layout, base, and per-rank start.
        let mut at: Option<(LoaderState, usize)> = None; // (a state to resume from, its world)
        let mut base = 0usize;
        let order_world = runs[0].world;
        let mut start = 0usize;
        let mut delivered: BTreeMap<u64, usize> = BTreeMap::new();
        let mut epoch_counts: BTreeMap<u64, usize> = BTreeMap::new();
        let mut any_error = false;
        for (r, run) in runs.iter().enumerate() {
            let world = run.world;
            let loaders: Vec<Loader> = match (0..world)
                .map(|rank| builder(s, &source, rank, world).build())
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(l) => l,
                Err(e) => {
                    // Drop with fewer samples than ranks is refused at build.
                    let rest = epoch_len - base;
                    prop_assert!(
                        s.padding == ShardPadding::Drop && world > 1 && epoch_len < world,
                        "run {}: build failed: {} (rest {})",
                        r,
                        e,
                        rest
                    );
                    return Ok(());
                }
            };
            if let Some((state, saved_world)) = &at {
                if *saved_world != world {
                    let rest = epoch_len - base;
                    base += (state.position as usize)
                        .saturating_mul(*saved_world)
                        .min(rest);
                    start = 0;
                }
            }
            let order = loaders[0].global_order(epoch, order_world);
            // What the epoch holds: each index as often as its order does (once, but for a
            // mixture's repeated source).
            if r == 0 {
                epoch_counts.clear();
                for &i in &order {
                    *epoch_counts.entry(u64::from(i)).or_default() += 1;
                }
            }
            let mut counts = Vec::new();
            let mut states_by_step: Vec<Vec<LoaderState>> = Vec::new();
            for (rank, loader) in loaders.iter().enumerate() {
                let want = model_run(s, &order, base, rank, world, start, &fails);
                let (got, states, stats) = real_run(
                    loader,
                    at.as_ref().map(|a| &a.0),
                    epoch,
                    run.steps,
                    (s.n / 2) as u64,
                );
                let cut = run
                    .steps
                    .map_or(want.batches.len(), |k| k.min(want.batches.len()));
                let want_batches = &want.batches[..cut];
                prop_assert_eq!(
                    &got.batches[..],
                    want_batches,
                    "epoch {} run {} (world {}) rank {}: batches differ from the model",
                    epoch,
                    r,
                    world,
                    rank
                );
                let want_error = want.error && run.steps.is_none_or(|k| k > want.batches.len());
                prop_assert_eq!(
                    got.error,
                    want_error,
                    "epoch {} run {} rank {}: error",
                    epoch,
                    r,
                    rank
                );
                any_error |= got.error;
                if !got.error {
                    let padded = got
                        .batches
                        .iter()
                        .flat_map(|b| &b.0)
                        .filter(|x| x.1)
                        .count() as u64;
                    prop_assert_eq!(stats.padded, padded, "padding counted when delivered");
                    let to_end = match run.steps {
                        None => true,
                        Some(k) => k >= want.batches.len() && !want.batches.is_empty(),
                    };
                    if to_end {
                        prop_assert_eq!(
                            stats.skipped,
                            want.skipped_in.len() as u64,
                            "epoch {} run {} rank {}: skips counted ({:?} against {:?})",
                            epoch,
                            r,
                            rank,
                            stats
                                .skipped_samples
                                .iter()
                                .map(|s| s.0.display().to_string())
                                .collect::<Vec<_>>(),
                            want.skipped_in
                        );
                    }
                }
                for (images, _) in &got.batches {
                    for &(i, padded) in images {
                        if !padded {
                            *delivered.entry(i).or_default() += 1;
                        }
                    }
                }
                counts.push(got.batches.len());
                states_by_step.push(states);
            }
            if any_error {
                return Ok(());
            }
            prop_assert!(
                counts.iter().all(|&c| c == counts[0]),
                "epoch {} run {}: unequal batch counts {:?}",
                epoch,
                r,
                counts
            );
            // Every step's states agree, and record the model's base and world.
            for step in 0..=counts[0] {
                let states: Vec<LoaderState> = states_by_step.iter().map(|v| v[step]).collect();
                let agreed = LoaderState::agree(&states);
                prop_assert!(
                    agreed.is_ok(),
                    "epoch {} run {} step {}: {:?}",
                    epoch,
                    r,
                    step,
                    agreed.err().map(|e| e.to_string())
                );
            }
            let last: Vec<LoaderState> = states_by_step
                .iter()
                .map(|v| *v.last().expect("a state"))
                .collect();
            let from = last[run.state_of % world];
            prop_assert_eq!(from.base as usize, base, "the state's base");
            let saved_order_world = if from.order_world_size == 0 {
                from.world_size
            } else {
                from.order_world_size
            };
            prop_assert_eq!(saved_order_world, order_world, "the state's order layout");
            start = from.position as usize;
            at = Some((from, world));
        }
        // The epoch, over all its runs: each sample that loads exactly as often as the
        // epoch's order holds it (unless the settings drop some), and none that fails.
        let twice: Vec<_> = delivered
            .iter()
            .filter(|(i, &c)| c > epoch_counts.get(i).copied().unwrap_or(0))
            .collect();
        prop_assert!(
            twice.is_empty(),
            "epoch {}: delivered twice: {:?}",
            epoch,
            twice
        );
        for &i in delivered.keys() {
            prop_assert!(
                !fails(i as u32),
                "epoch {}: failed sample {} delivered",
                epoch,
                i
            );
        }
        if !s.drops() {
            let want: BTreeMap<u64, usize> = epoch_counts
                .iter()
                .filter(|(&i, _)| !fails(i as u32))
                .map(|(&i, &c)| (i, c))
                .collect();
            prop_assert_eq!(
                &delivered,
                &want,
                "epoch {}: not every sample delivered",
                epoch
            );
        }
        // A resume from the state after the epoch's end delivers nothing, at any world size.
        if let Some((state, _)) = &at {
            for world in [1, 3] {
                if s.padding == ShardPadding::Drop && epoch_len < world {
                    continue; // refused at build, as checked above
                }
                let l = builder(s, &source, 0, world)
                    .build()
                    .map_err(|e| TestCaseError::fail(format!("a loader over the rest: {e}")))?;
                let n = l.resume(state).count();
                prop_assert_eq!(n, 0, "a resume from the epoch's end on {} ranks", world);
            }
        }
    }
    Ok(())
}

#[test]
fn the_loader_keeps_its_contract_in_random_scenarios() {
    let seed: u64 = match std::env::var("IMAGEFEED_CONTRACT_SEED") {
        Ok(v) => v.parse().expect("IMAGEFEED_CONTRACT_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    let cases = std::env::var("IMAGEFEED_CONTRACT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    println!("contract: seed {seed}, {cases} scenarios (replay: IMAGEFEED_CONTRACT_SEED={seed})");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 200,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let started = std::time::Instant::now();
    let result = runner.run(&scenario(), |s| check(&s));
    if let Err(e) = result {
        panic!(
            "the contract does not hold (replay: IMAGEFEED_CONTRACT_SEED={seed} cargo test -p imagefeed --test it contract): {e}"
        );
    }
    println!(
        "contract: {cases} scenarios held in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The scenarios the issue tracker reported, through the library: a checkpoint at an epoch's
/// last step (10 samples, batches of 2, 3 ranks), and a skipped sample under sharding.
#[test]
fn a_checkpoint_at_the_last_step_and_a_skip_under_sharding_resume_exactly() {
    let last_step = Scenario {
        kind: Kind::List,
        mix: NO_MIX,
        n: 10,
        unit: 1,
        batch: 2,
        drop_remainder: false,
        padding: ShardPadding::EqualBatches,
        shuffle: true,
        block: None,
        skip: true,
        seed: 0,
        permanent: BTreeSet::new(),
        transient: BTreeSet::new(),
        epochs: vec![vec![
            Run {
                world: 3,
                steps: Some(2),
                state_of: 1,
            },
            Run {
                world: 2,
                steps: None,
                state_of: 0,
            },
        ]],
    };
    check(&last_step).unwrap();
    let skip = Scenario {
        n: 40,
        shuffle: false,
        permanent: [3].into(),
        epochs: vec![vec![
            Run {
                world: 2,
                steps: Some(1),
                state_of: 1,
            },
            Run {
                world: 1,
                steps: None,
                state_of: 0,
            },
        ]],
        ..last_step
    };
    check(&skip).unwrap();
}

/// With the library's defaults, a source read as streams is shuffled across and within its
/// shards, as the command line's defaults shuffle it: over class-sorted shards (each shard one
/// class), the first batch already mixes several, and no shard is read in its stored order.
#[test]
fn the_default_order_mixes_the_samples_of_every_kind_of_shard() {
    for kind in [Kind::Tar, Kind::Parquet, Kind::TfRecord] {
        let s = Scenario {
            kind,
            mix: NO_MIX,
            n: 400,
            unit: 50,
            batch: 64,
            drop_remainder: false,
            padding: ShardPadding::EqualBatches,
            shuffle: true,
            block: None,
            skip: true,
            seed: 7,
            permanent: BTreeSet::new(),
            transient: BTreeSet::new(),
            epochs: Vec::new(),
        };
        let (source, dir) = open_source(&s).unwrap();
        let loader = Loader::builder(source.clone())
            .seed(7)
            .image_size(4)
            .build()
            .unwrap();
        let mut order = Vec::new();
        let mut first_batch_shards = BTreeSet::new();
        for (k, batch) in loader.epoch(0).enumerate() {
            let batch = batch.unwrap();
            if k == 0 {
                first_batch_shards.extend(batch.indices().iter().map(|i| i / 50));
            }
            order.extend_from_slice(batch.indices());
        }
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..400).collect::<Vec<u64>>(),
            "{kind:?}: every sample once"
        );
        assert!(
            first_batch_shards.len() >= 4,
            "{kind:?}: the first batch holds {} shards' samples",
            first_batch_shards.len()
        );
        // Within each shard, the samples come in another order than stored.
        for shard in 0..8u64 {
            let mine: Vec<u64> = order.iter().copied().filter(|i| i / 50 == shard).collect();
            assert!(
                mine.windows(2).any(|w| w[0] > w[1]),
                "{kind:?}: shard {shard} read in its stored order"
            );
        }
        // The command line's defaults give the same order.
        let out = dir.path().join("indices.txt");
        let status = std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .arg(dir.path())
            .args(["--seed", "7", "--epochs", "1", "--size", "4", "4", "--json"])
            .arg("--indices-out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{kind:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let cli: Vec<u64> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(cli, order, "{kind:?}: the command line's default order");
        drop(source);
    }
}
