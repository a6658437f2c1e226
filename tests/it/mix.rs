//! Mixtures: proportions, sampling without replacement until a source runs out, what an epoch
//! is, labels and sources, checked on the epochs' orders (random mixtures, many epochs) and
//! through real loaders (sharded, resumed at another world size, with fields).

use std::collections::BTreeMap;

use imagefeed::{Exhausted, Loader, LoaderState, Mix, MixEnd, MixLabels, Source, SourceKind};
use proptest::prelude::*;

use crate::common::testdata;

/// A source of `n` samples (the same tiny JPEG), label `i % classes`.
fn tiny(n: usize, classes: u32) -> Source {
    let jpg = testdata("valid/odd_7x5.jpg");
    Source::from_entries((0..n).map(|i| (jpg.clone(), i as u32 % classes))).unwrap()
}

/// Each epoch's draws of a mixture over sources of `lens`, per source: the sources' own
/// indices in the order drawn.
fn draws(source: &Source, lens: &[usize], epochs: u64) -> Vec<Vec<Vec<u64>>> {
    let loader = Loader::builder(source.clone()).seed(3).build().unwrap();
    let offsets: Vec<u64> = lens
        .iter()
        .scan(0u64, |at, &n| {
            let o = *at;
            *at += n as u64;
            Some(o)
        })
        .collect();
    (0..epochs)
        .map(|e| {
            let mut per = vec![Vec::new(); lens.len()];
            for i in loader.global_order(e, 1) {
                let i = u64::from(i);
                let s = offsets.partition_point(|&o| o <= i) - 1;
                per[s].push(i - offsets[s]);
            }
            per
        })
        .collect()
}

#[test]
fn a_three_to_one_mixture_of_8000_keeps_its_proportions_and_repeats_nothing_early() {
    let mixed = Mix::new()
        .source(tiny(5000, 10), 3.0)
        .source(tiny(3000, 10), 1.0)
        .epoch_size(8000)
        .build()
        .unwrap();
    assert_eq!(mixed.kind(), SourceKind::Mixture);
    assert_eq!((mixed.len(), mixed.epoch_len()), (8000, 8000));
    let d = draws(&mixed, &[5000, 3000], 3);
    for epoch in &d {
        assert_eq!((epoch[0].len(), epoch[1].len()), (6000, 2000));
    }
    // Every window of 1,000 positions is near 3:1 (the blocks keep the proportions locally).
    let loader = Loader::builder(mixed.clone()).seed(3).build().unwrap();
    let order = loader.global_order(0, 1);
    for w in order.chunks(1000) {
        let first = w.iter().filter(|&&i| i < 5000).count();
        assert!(
            (700..=800).contains(&first),
            "{first} of 1000 from the first source"
        );
    }
    // Each source's stream over the epochs: a permutation of its samples, then another.
    for (s, len) in [(0, 5000usize), (1, 3000)] {
        let stream: Vec<u64> = d.iter().flat_map(|e| e[s].clone()).collect();
        for pass in stream.chunks(len) {
            let mut sorted = pass.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), pass.len(), "source {s} repeats within a pass");
        }
        // Passes are shuffled anew.
        if stream.len() >= 2 * len {
            assert_ne!(stream[..len], stream[len..2 * len]);
        }
    }
}

#[test]
fn without_an_epoch_size_an_epoch_ends_with_the_first_or_last_source() {
    let (a, b) = (tiny(30, 3), tiny(10, 2));
    let first = Mix::new()
        .source(a.clone(), 1.0)
        .source(b.clone(), 1.0)
        .build()
        .unwrap();
    // Half from each: b runs out after 20 positions.
    assert_eq!(first.epoch_len(), 20);
    let d = draws(&first, &[30, 10], 1);
    assert_eq!((d[0][0].len(), d[0][1].len()), (10, 10));
    let last = Mix::new()
        .source(a.clone(), 1.0)
        .source(b.clone(), 1.0)
        .ends_with(MixEnd::Last)
        .build()
        .unwrap();
    assert_eq!(last.epoch_len(), 60);
    let d = draws(&last, &[30, 10], 1);
    assert_eq!(
        (d[0][0].len(), d[0][1].len()),
        (30, 30),
        "b repeats 3 times"
    );
    let dropped = Mix::new()
        .source(a, 1.0)
        .source(b, 1.0)
        .ends_with(MixEnd::Last)
        .when_exhausted(Exhausted::Drop)
        .build()
        .unwrap();
    assert_eq!(dropped.epoch_len(), 40, "b gives its 10 and stops");
    // Refused: no source, a weight of 0, a mixture in a mixture, an empty epoch.
    for (m, what) in [
        (Mix::new(), "at least one source"),
        (
            Mix::new().source(tiny(3, 1), 0.0),
            "must be finite and above 0",
        ),
        (
            Mix::new().source(tiny(3, 1), f64::NAN),
            "must be finite and above 0",
        ),
        (Mix::new().source(first.clone(), 1.0), "is a mixture"),
        (
            Mix::new().source(tiny(3, 1), 1.0).epoch_size(0),
            "holds no sample",
        ),
    ] {
        let e = m.build().expect_err(what).to_string();
        assert!(e.contains(what), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any weights, sizes and epoch sizes: each epoch draws each source's share (largest
    /// remainders), its draws continue its stream without a repeat inside a pass, and the
    /// orders are the same whatever the world size asks (a mixture has one layout).
    #[test]
    fn every_mixture_draws_its_shares_without_early_repeats(
        lens in proptest::collection::vec(1usize..60, 1..4),
        weights in proptest::collection::vec(1u32..9, 3),
        epoch_size in proptest::option::of(1usize..200),
        drop in any::<bool>(),
    ) {
        let mut mix = Mix::new();
        for (s, &n) in lens.iter().enumerate() {
            mix = mix.source(tiny(n, 1), f64::from(weights[s]));
        }
        if let Some(e) = epoch_size {
            mix = mix.epoch_size(e);
        }
        if drop {
            mix = mix.when_exhausted(Exhausted::Drop);
        }
        let mixed = mix.build().unwrap();
        let total: u32 = weights[..lens.len()].iter().sum();
        let d = draws(&mixed, &lens, 4);
        let want_epoch = epoch_size.unwrap_or_else(|| {
            lens.iter()
                .enumerate()
                .map(|(s, &n)| (n as f64 * f64::from(total) / f64::from(weights[s])).floor() as usize)
                .min()
                .unwrap()
        });
        for epoch in &d {
            let mut sum = 0;
            for (s, got) in epoch.iter().enumerate() {
                let ideal = want_epoch as f64 * f64::from(weights[s]) / f64::from(total);
                let mut want = [ideal.floor() as usize, ideal.ceil() as usize];
                if drop {
                    want = want.map(|w| w.min(lens[s]));
                }
                prop_assert!(want.contains(&got.len()), "source {} drew {} of ideal {}", s, got.len(), ideal);
                sum += got.len();
            }
            prop_assert_eq!(sum, mixed.epoch_len());
        }
        for (s, &len) in lens.iter().enumerate() {
            let stream: Vec<u64> = d.iter().flat_map(|e| e[s].clone()).collect();
            if drop {
                // At most its samples an epoch; each epoch continues where the last stopped.
                for e in &d {
                    prop_assert!(e[s].len() <= len);
                }
            }
            for pass in stream.chunks(len) {
                let mut sorted = pass.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(sorted.len(), pass.len());
                prop_assert!(sorted.iter().all(|&i| (i as usize) < len));
            }
        }
        let loader = Loader::builder(mixed).seed(3).build().unwrap();
        prop_assert_eq!(loader.global_order(1, 1), loader.global_order(1, 3));
    }
}

/// Every delivered sample's (source, index, label) through a loader's epoch.
fn delivered(batches: imagefeed::Batches) -> Vec<(u32, u64, u32)> {
    let mut out = Vec::new();
    for b in batches {
        let b = b.unwrap();
        for k in 0..b.len() {
            out.push((b.sources()[k], b.indices()[k], b.labels()[k]));
        }
    }
    out
}

#[test]
fn a_mixture_stopped_on_two_ranks_resumes_on_three_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // A tar source and a list: sources of two kinds in one mixture.
    imagefeed::write_shards(&tiny(40, 4), dir.path(), 10, None).unwrap();
    let shards = Source::open(dir.path()).unwrap();
    let mixed = Mix::new()
        .source(shards, 3.0)
        .source(tiny(25, 5), 1.0)
        .epoch_size(96)
        .labels(MixLabels::Offset)
        .build()
        .unwrap();
    assert_eq!(mixed.num_classes(), 9);
    let make = |rank: usize, world: usize| {
        Loader::builder(mixed.clone())
            .image_size(8)
            .batch_size(4)
            .seed(11)
            .shard(rank, world)
            .build()
            .unwrap()
    };
    let whole = delivered(make(0, 1).epoch(2));
    assert_eq!(whole.len(), 96);
    let count = |v: &[(u32, u64, u32)]| {
        let mut m: BTreeMap<(u32, u64), usize> = BTreeMap::new();
        for &(s, i, _) in v {
            *m.entry((s, i)).or_default() += 1;
        }
        m
    };
    assert_eq!(whole.iter().filter(|x| x.0 == 0).count(), 72);
    // Labels: the list's come after the shards' 4 classes.
    for &(s, i, l) in &whole {
        let want = if s == 0 {
            (i % 4) as u32
        } else {
            4 + (i % 5) as u32
        };
        assert_eq!(l, want, "source {s} sample {i}");
    }
    let mut got = Vec::new();
    let mut states = Vec::new();
    for r in 0..2 {
        let loader = make(r, 2);
        let mut it = loader.epoch(2);
        for _ in 0..5 {
            let b = it.next().unwrap().unwrap();
            for k in 0..b.len() {
                got.push((b.sources()[k], b.indices()[k], b.labels()[k]));
            }
        }
        states.push(it.state());
    }
    let state = LoaderState::agree(&states).unwrap();
    for r in 0..3 {
        got.extend(delivered(make(r, 3).resume(&state)));
    }
    assert_eq!(count(&got), count(&whole), "the rest exactly once");
}

/// The command line: `--mix W SOURCE` twice, `--epoch-size`, `--indices-out` as `SOURCE INDEX`
/// lines, stopped on 2 ranks and resumed on 3.
#[test]
fn the_command_line_mixes_stops_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let jpg = testdata("valid/odd_7x5.jpg");
    let list = dir.path().join("a.txt");
    let lines: String = (0..30).map(|_| format!("{}\t0\n", jpg.display())).collect();
    std::fs::write(&list, lines).unwrap();
    let shards = dir.path().join("shards");
    imagefeed::write_shards(&tiny(20, 2), &shards, 5, None).unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .args(["--mix", "3", list.to_str().unwrap()])
            .args(["--mix", "1", shards.to_str().unwrap()])
            .args([
                "--epoch-size",
                "80",
                "--batch-size",
                "4",
                "--size",
                "8",
                "8",
                "--seed",
                "2",
            ])
            .args(["--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let read = |name: &str| -> Vec<(u32, u64)> {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .lines()
            .map(|l| {
                let mut w = l.split(' ');
                (
                    w.next().unwrap().parse().unwrap(),
                    w.next().unwrap().parse().unwrap(),
                )
            })
            .collect()
    };
    run(&["--indices-out", &p("all.txt")]);
    let all = read("all.txt");
    assert_eq!(all.len(), 80);
    assert_eq!(all.iter().filter(|x| x.0 == 0).count(), 60);
    assert!(all
        .iter()
        .all(|&(s, i)| (s == 0 && i < 30) || (s == 1 && i < 20)));
    for r in 0..2 {
        run(&[
            "--rank",
            &r.to_string(),
            "--world-size",
            "2",
            "--max-batches",
            "3",
            "--state-out",
            &p(&format!("s{r}.txt")),
            "--indices-out",
            &p(&format!("a{r}.txt")),
        ]);
    }
    let mut got: Vec<(u32, u64)> = (0..2).flat_map(|r| read(&format!("a{r}.txt"))).collect();
    for r in 0..3 {
        run(&[
            "--rank",
            &r.to_string(),
            "--world-size",
            "3",
            "--resume-from",
            &p("s0.txt"),
            &p("s1.txt"),
            "--indices-out",
            &p(&format!("b{r}.txt")),
        ]);
        got.extend(read(&format!("b{r}.txt")));
    }
    let mut want = all.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "the rest of the epoch exactly once");
}
