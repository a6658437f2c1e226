//! Sharding across ranks and resumable epochs.

use std::collections::BTreeSet;

use imagefeed::{Batch, Loader, LoaderBuilder, LoaderState, OnError, ShardPadding, Source};

use crate::common::{corpus, subset, IdCorpus};

fn loader_for(source: Source, rank: usize, world: usize, bs: usize, seed: u64) -> LoaderBuilder {
    Loader::builder(source)
        .image_size(16)
        .batch_size(bs)
        .decode_threads(2)
        .seed(seed)
        .shard(rank, world)
}

fn indices(batches: &[Batch]) -> Vec<u64> {
    batches.iter().flat_map(|b| b.indices().to_vec()).collect()
}

#[test]
fn eight_ranks_are_disjoint_complete_and_equal_in_batches() {
    let full = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    // 5: fewer samples than ranks (ranks past the end wrapped around `len - rank`).
    for n in [64usize, 61, 57, 9, 5] {
        let source = subset(&full, n);
        for (seed, bs, drop_remainder) in [
            (1u64, 4usize, false),
            (2, 3, false),
            (3, 8, true),
            (4, 7, false),
        ] {
            for epoch in 0..2 {
                let mut all = Vec::new();
                let mut batch_counts = BTreeSet::new();
                for rank in 0..8 {
                    let l = loader_for(source.clone(), rank, 8, bs, seed)
                        .drop_remainder(drop_remainder)
                        .build()
                        .unwrap();
                    let b: Vec<Batch> = l.epoch(epoch).map(|b| b.unwrap()).collect();
                    assert_eq!(b.len(), l.batches_per_epoch(), "n={n} rank={rank}");
                    batch_counts.insert(b.len());
                    for batch in &b {
                        for (k, &i) in batch.indices().iter().enumerate() {
                            assert_eq!(batch.labels()[k], source.label(i as usize).unwrap());
                        }
                    }
                    all.push(indices(&b));
                }
                assert_eq!(
                    batch_counts.len(),
                    1,
                    "n={n} bs={bs}: ranks disagree on batch counts {batch_counts:?}"
                );
                let total: usize = all.iter().map(Vec::len).sum();
                let union: BTreeSet<u64> = all.iter().flatten().copied().collect();
                if !drop_remainder {
                    assert_eq!(union, (0..n as u64).collect(), "n={n}: not complete");
                }
                // Disjoint, except for the few repeats that equal batch counts need.
                let repeats = total - union.len();
                assert!(repeats < 8, "n={n} bs={bs}: {repeats} repeated samples");
                if n % 8 == 0 {
                    assert_eq!(repeats, 0);
                }
            }
        }
    }
}

#[test]
fn shard_padding_modes() {
    let full = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    let source = subset(&full, 61);
    for (padding, per_rank) in [(ShardPadding::Repeat, 8usize), (ShardPadding::Drop, 7)] {
        let mut union = BTreeSet::new();
        for rank in 0..8 {
            let l = loader_for(source.clone(), rank, 8, 4, 9)
                .shard_padding(padding)
                .build()
                .unwrap();
            let idx = indices(&l.epoch(0).map(|b| b.unwrap()).collect::<Vec<_>>());
            assert_eq!(idx.len(), per_rank);
            union.extend(idx);
        }
        let want = if padding == ShardPadding::Repeat {
            61
        } else {
            56
        };
        assert_eq!(union.len(), want);
    }
    assert!(loader_for(source.clone(), 8, 8, 4, 0).build().is_err());
    assert!(loader_for(source, 0, 0, 4, 0).build().is_err());
}

#[test]
fn skips_under_sharding_keep_batch_counts_equal() {
    let ids = IdCorpus::new(40);
    // Break three files; ranks that hold them must still deliver as many images.
    for i in [3usize, 17, 30] {
        std::fs::write(&ids.paths[i], b"garbage").unwrap();
    }
    let mut counts = BTreeSet::new();
    let mut skipped = 0;
    for rank in 0..4 {
        let l = loader_for(ids.source(), rank, 4, 3, 5)
            .on_error(OnError::SKIP_ALL)
            .dtype(imagefeed::Dtype::U8)
            .build()
            .unwrap();
        let b: Vec<Batch> = l.epoch(0).map(|b| b.unwrap()).collect();
        counts.insert((b.len(), b.iter().map(Batch::len).sum::<usize>()));
        let s = l.stats();
        assert_eq!(s.padded, s.skipped);
        skipped += s.skipped;
        for batch in &b {
            crate::common::assert_pixels_follow_indices(batch);
            for (k, &i) in batch.indices().iter().enumerate() {
                assert_eq!(batch.labels()[k], crate::common::id_label(i as usize));
                assert!(![3, 17, 30].contains(&i));
            }
        }
    }
    assert_eq!(skipped, 3);
    assert_eq!(counts.len(), 1, "{counts:?}");
}

#[test]
fn resume_after_37_batches_delivers_exactly_the_rest() {
    let full = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    for (world, rank) in [(1usize, 0usize), (2, 1)] {
        let make = || {
            loader_for(full.clone(), rank, world, 1, 11)
                .build()
                .unwrap()
        };
        let reference: Vec<u64> = indices(&make().epoch(3).map(|b| b.unwrap()).collect::<Vec<_>>());
        let cut = 37.min(reference.len() - 1);
        let loader = make();
        let mut it = loader.epoch(3);
        let mut first = Vec::new();
        for _ in 0..cut {
            first.extend_from_slice(it.next().unwrap().unwrap().indices());
        }
        let saved = it.state().to_string();
        drop(it);
        // A new process would parse the saved line and build the same loader.
        let state: LoaderState = saved.parse().unwrap();
        assert_eq!(state.epoch, 3);
        let rest: Vec<u64> = indices(
            &make()
                .resume(&state)
                .map(|b| b.unwrap())
                .collect::<Vec<_>>(),
        );
        let mut both = first.clone();
        both.extend_from_slice(&rest);
        assert_eq!(both, reference, "world {world}: resumed epoch differs");
    }
    // A state from another seed is refused.
    let other = loader_for(full.clone(), 0, 1, 1, 12).build().unwrap();
    let state = LoaderState {
        seed: 11,
        epoch: 0,
        position: 3,
        rank: 0,
        world_size: 1,
        ..LoaderState::default()
    };
    let err = other.resume(&state).next().unwrap().unwrap_err();
    assert!(err.to_string().contains("seed"), "{err}");
    assert!("nonsense".parse::<LoaderState>().is_err());
}

#[test]
fn bench_indices_out_and_resume_from_the_command_line() {
    let list = corpus(64, 7).join("files.txt");
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .arg(&list)
            .args([
                "--batch-size",
                "1",
                "--size",
                "16",
                "16",
                "--seed",
                "4",
                "--json",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let read = |name: &str| -> Vec<u64> {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    run(&["--epochs", "2", "--indices-out", &p("all.txt")]);
    let stopped = run(&[
        "--epochs",
        "2",
        "--max-batches",
        "37",
        "--state-out",
        &p("state.txt"),
        "--indices-out",
        &p("a.txt"),
    ]);
    run(&[
        "--epochs",
        "2",
        "--resume-from",
        &p("state.txt"),
        "--indices-out",
        &p("b.txt"),
    ]);
    // The epoch stopped is reported, as far as it went.
    let report: serde_json::Value = serde_json::from_str(stopped.trim()).unwrap();
    assert_eq!(report["stopped"], true);
    assert_eq!(report["images"], 37);
    assert!(report["open_seconds"].as_f64().unwrap() >= 0.0);
    let all = read("all.txt");
    assert_eq!(all.len(), 128);
    let mut joined = read("a.txt");
    assert_eq!(joined.len(), 37);
    joined.extend(read("b.txt"));
    assert_eq!(joined, all);
    // The state records what fixes the plan: resuming with another shuffle buffer, without
    // shuffling, or over another list would continue a different plan (repeats and gaps).
    let sub = dir.path().join("sub.txt");
    let text = std::fs::read_to_string(&list).unwrap();
    let dir_of_list = list.parent().unwrap();
    let lines: String = text
        .lines()
        .take(40)
        .map(|l| format!("{}\n", dir_of_list.join(l).display()))
        .collect();
    std::fs::write(&sub, lines).unwrap();
    for other in [
        &["--no-shuffle", "--shuffle-buffer", "10"][..],
        &["--no-shuffle"][..],
        &["--shard-padding", "repeat"][..],
    ] {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .arg(&list)
            .args(["--batch-size", "1", "--size", "16", "16", "--seed", "4"])
            .args(["--resume-from", &p("state.txt")])
            .args(other)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("the state was saved with other settings that order the epoch"),
            "{other:?}: {err}"
        );
    }
    let out = std::process::Command::new(crate::common::imagefeed_bin())
        .arg("bench")
        .arg(&sub)
        .args(["--batch-size", "1", "--size", "16", "16", "--seed", "4"])
        .args(["--resume-from", &p("state.txt")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("saved by a run over another source"),
        "another list: {err}"
    );
    // Ranks from the command line: disjoint and complete.
    let mut union = Vec::new();
    for rank in 0..8 {
        let name = format!("r{rank}.txt");
        run(&[
            "--rank",
            &rank.to_string(),
            "--world-size",
            "8",
            "--indices-out",
            &p(&name),
        ]);
        union.extend(read(&name));
    }
    union.sort_unstable();
    assert_eq!(union, (0..64).collect::<Vec<u64>>());
}

#[test]
fn an_unshuffled_list_mixed_within_blocks_holds_no_sample_and_resumes() {
    let full = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    let make = || {
        Loader::builder(full.clone())
            .image_size(16)
            .batch_size(1)
            .shuffle(false)
            .shuffle_buffer(8)
            .seed(3)
            .build()
            .unwrap()
    };
    assert_eq!(
        make().memory_budget().shuffle_buffer_bytes,
        0,
        "the order is computed: nothing is held"
    );
    let reference = indices(&make().epoch(1).map(|b| b.unwrap()).collect::<Vec<_>>());
    let mut sorted = reference.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..64).collect::<Vec<u64>>());
    assert_ne!(reference, sorted, "the blocks are mixed");
    for (pos, &i) in reference.iter().enumerate() {
        assert_eq!(
            i as usize / 8,
            pos / 8,
            "index {i} at {pos}: outside its block"
        );
    }
    // Its order is computed per position, so the epoch resumes exactly.
    let loader = make();
    let mut it = loader.epoch(1);
    let mut got = Vec::new();
    for _ in 0..37 {
        got.extend_from_slice(it.next().unwrap().unwrap().indices());
    }
    let state: LoaderState = it.state().to_string().parse().unwrap();
    drop(it);
    got.extend(indices(
        &make()
            .resume(&state)
            .map(|b| b.unwrap())
            .collect::<Vec<_>>(),
    ));
    assert_eq!(got, reference);
}
