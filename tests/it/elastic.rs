//! Resuming an epoch at another world size: a job preempted on `w0` GPUs restarts on `w1`,
//! from the state one rank saved, and together the ranks deliver every sample exactly once.

use std::collections::BTreeMap;

use imagefeed::{write_shards, Batch, Loader, LoaderBuilder, LoaderState, Source};

use crate::common::{corpus, subset};

fn builder(source: &Source, rank: usize, world: usize) -> LoaderBuilder {
    Loader::builder(source.clone())
        .image_size(16)
        .batch_size(4)
        .decode_threads(2)
        .seed(21)
        .shard(rank, world)
}

/// What `world` ranks deliver when each stops after `batches` batches of `epoch` (all of
/// them with `None`), or of the rest of a resumed state: the indices each delivered, each
/// rank's batch count, and rank 0's state at the stop.
fn run_ranks(
    source: &Source,
    world: usize,
    tune: &dyn Fn(LoaderBuilder) -> LoaderBuilder,
    from: Option<&LoaderState>,
    batches: Option<usize>,
) -> (Vec<u64>, Vec<usize>, Vec<LoaderState>) {
    let (mut delivered, mut counts, mut states) = (Vec::new(), Vec::new(), Vec::new());
    for rank in 0..world {
        let loader = tune(builder(source, rank, world)).build().unwrap();
        let mut it = match from {
            Some(state) => loader.resume(state),
            None => loader.epoch(2),
        };
        let mut n = 0;
        while batches != Some(n) {
            let Some(batch) = it.next() else { break };
            let batch: Batch = batch.unwrap();
            delivered.extend_from_slice(batch.indices());
            n += 1;
        }
        counts.push(n);
        // The state goes through its one-line form, as a checkpoint would keep it.
        states.push(it.state().to_string().parse().unwrap());
    }
    (delivered, counts, states)
}

fn once_each(delivered: &[u64], n: usize, what: &str) {
    let mut seen = BTreeMap::new();
    for &i in delivered {
        *seen.entry(i).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
    assert!(twice.is_empty(), "{what}: delivered twice: {twice:?}");
    assert_eq!(seen.len(), n, "{what}: {} of {n} delivered", seen.len());
}

#[test]
fn a_state_resumes_at_any_world_size_delivering_each_sample_once() {
    let source = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    let plain = |b: LoaderBuilder| b;
    let buffered = |b: LoaderBuilder| b.shuffle_buffer(16);
    let tunings: [(&str, &dyn Fn(LoaderBuilder) -> LoaderBuilder); 2] =
        [("permutation", &plain), ("index shuffle buffer", &buffered)];
    for (name, tune) in tunings {
        for (w0, stop, w1) in [(2, 3, 4), (2, 3, 1), (4, 2, 3), (3, 1, 2), (1, 5, 4)] {
            let what = format!("{name}: {w0} ranks stop after {stop} batches, {w1} go on");
            let (mut delivered, _, states) = run_ranks(&source, w0, tune, None, Some(stop));
            assert_eq!(delivered.len(), w0 * stop * 4, "{what}");
            // Any rank's state will do: every rank was at the same step.
            let state = LoaderState::agree(&states).unwrap();
            for from in [&states[0], &states[w0 - 1]] {
                let (rest, counts, _) = run_ranks(&source, w1, tune, Some(from), None);
                assert!(
                    counts.iter().all(|&c| c == counts[0]),
                    "{what}: unequal batch counts {counts:?}"
                );
                let mut all = delivered.clone();
                all.extend(rest);
                once_each(&all, 64, &what);
            }
            // And once more, at a third world size, from the resumed ranks' own states.
            let (first, _, resumed_states) = run_ranks(&source, w1, tune, Some(&state), Some(1));
            let w2 = w1 % 4 + 1;
            let (rest, _, _) = run_ranks(&source, w2, tune, Some(&resumed_states[0]), None);
            delivered.extend(first);
            delivered.extend(rest);
            once_each(&delivered, 64, &format!("{what}, then {w2}"));
        }
    }
}

#[test]
fn resuming_at_the_same_world_size_lets_any_rank_continue_its_own_share() {
    let source = subset(
        &Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap(),
        50,
    );
    let (first, _, states) = run_ranks(&source, 3, &|b| b, None, Some(2));
    // Rank 2's state, given to every rank of the same world.
    let (rest, _, _) = run_ranks(&source, 3, &|b| b, Some(&states[2]), None);
    let (whole, _, _) = run_ranks(&source, 3, &|b| b, None, None);
    let mut both = first;
    both.extend(rest);
    both.sort_unstable();
    let mut whole = whole;
    whole.sort_unstable();
    assert_eq!(both, whole);
}

#[test]
fn tar_shards_resume_at_any_world_size_with_the_shuffle_as_often_as_asked() {
    let list = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_shards(&list, dir.path(), 10, Some(1)).unwrap();
    let shards = Source::open(dir.path()).unwrap();
    // The default order (shards shuffled, samples mixed within blocks), and a small block.
    let default = |b: LoaderBuilder| b;
    let block = |b: LoaderBuilder| b.shuffle_buffer(8);
    let tunings: [(&str, &dyn Fn(LoaderBuilder) -> LoaderBuilder); 2] =
        [("default order", &default), ("blocks of 8", &block)];
    for (name, tune) in tunings {
        // 2 ranks, then 3, then 2 again, then 1 for the rest: four world sizes in one epoch.
        let (mut delivered, _, states) = run_ranks(&shards, 2, tune, None, Some(3));
        let (first, counts, resumed) = run_ranks(&shards, 3, tune, Some(&states[1]), Some(1));
        assert!(counts.iter().all(|&c| c == 1), "{name}: {counts:?}");
        delivered.extend(first);
        let (second, counts, again) = run_ranks(&shards, 2, tune, Some(&resumed[2]), Some(1));
        assert!(counts.iter().all(|&c| c == 1), "{name}: {counts:?}");
        delivered.extend(second);
        let (rest, _, _) = run_ranks(&shards, 1, tune, Some(&again[0]), None);
        delivered.extend(rest);
        once_each(
            &delivered,
            64,
            &format!("tar shards, {name}: 2, 3, 2 then 1 rank"),
        );
    }
}

#[test]
fn states_of_ranks_at_different_steps_do_not_agree() {
    let source = subset(
        &Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap(),
        40,
    );
    let (_, _, at_two) = run_ranks(&source, 2, &|b| b, None, Some(2));
    let (_, _, at_three) = run_ranks(&source, 2, &|b| b, None, Some(3));
    let err = LoaderState::agree(&[at_two[0], at_three[1]]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("different positions") && msg.contains("rank 0") && msg.contains("rank 1"),
        "{msg}"
    );
    let err = LoaderState::agree(&[at_two[0], at_two[0]]).unwrap_err();
    assert!(err.to_string().contains("both rank 0"), "{err}");
    assert!(LoaderState::agree(&[]).is_err());
    assert_eq!(LoaderState::agree(&at_two).unwrap(), at_two[0]);
}

#[test]
fn a_resumed_state_keeps_its_split_in_its_one_line() {
    let state: LoaderState = "imagefeed-state-v1 seed=1 epoch=2 position=8 rank=0 world_size=4 \
                              source=00000000000000ab settings=00000000000000cd base=96 order=2"
        .parse()
        .unwrap();
    assert_eq!((state.base, state.order_world_size), (96, 2));
    let line = state.to_string();
    assert!(!line.contains('\n') && line.len() < 200, "{line}");
    assert_eq!(line.parse::<LoaderState>().unwrap(), state);
    // A line written before the split existed reads as none.
    let old: LoaderState = "imagefeed-state-v1 seed=1 epoch=2 position=8 rank=0 world_size=4"
        .parse()
        .unwrap();
    assert_eq!((old.base, old.prior_world_size), (0, 0));
}
