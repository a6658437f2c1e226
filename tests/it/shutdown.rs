//! Shutdown and robustness: dropping an epoch stops and joins its threads quickly,
//! loaders do not leak threads or memory, a worker panic is an error naming the sample, and
//! files that change during an epoch give clean errors or skips.
//!
//! Thread counts and RSS belong to the whole process, so the tests that measure them run alone
//! in a child process ([`common::runs_in_child`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use imagefeed::{Dtype, Error, ErrorKind, Loader, OnError, Source};
use imagefeed_testkit::procinfo;

use crate::common::{self, id_label, IdCorpus};

/// The realistic corpus listed five times over (320 samples, labels unchanged): an epoch
/// takes seconds, far longer than a drop may.
fn long_source() -> Source {
    let base = common::corpus_source();
    Source::from_entries((0..5 * base.len()).map(|i| {
        (
            base.path(i % base.len()).unwrap(),
            base.label(i % base.len()).unwrap(),
        )
    }))
    .unwrap()
}

/// Waits up to five seconds for the thread count to come back to `baseline` (a joined thread
/// may still be counted for a moment after `join` returns, and a dropped rayon pool's threads
/// exit on their own, later on a loaded machine) and returns the last count.
fn threads_settle(baseline: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = procinfo::thread_count().unwrap();
        if now <= baseline || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits up to a second for the threads of an epoch (`imagefeed-decode-N`, `imagefeed-batch`)
/// to be gone; returns the names of those still there.
fn epoch_threads_gone() -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left: Vec<String> = common::thread_names()
            .into_iter()
            .filter(|n| n.starts_with("imagefeed-decod") || n.starts_with("imagefeed-batch"))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Drops an epoch, checks it was quick and that its threads are gone; returns how long it took.
fn timed_drop(epoch: imagefeed::Batches, scenario: &str) -> Duration {
    let started = Instant::now();
    drop(epoch);
    let took = started.elapsed();
    println!(
        "drop {scenario}: {took:?} ({} threads left)",
        procinfo::thread_count().unwrap()
    );
    // 100 ms is the goal; debug builds on a shared machine get some slack.
    assert!(
        took < Duration::from_millis(500),
        "drop {scenario} took {took:?}"
    );
    let left = epoch_threads_gone();
    assert!(left.is_empty(), "{scenario}: epoch threads left: {left:?}");
    took
}

#[test]
fn dropping_an_epoch_is_fast_and_joins_its_threads() {
    if !common::runs_in_child("shutdown::dropping_an_epoch_is_fast_and_joins_its_threads") {
        return;
    }
    let source = long_source();
    let baseline = procinfo::thread_count().expect("/proc/self/status");
    let loader = Loader::builder(source)
        .batch_size(8)
        .decode_threads(3)
        .prefetch(2)
        .seed(1)
        .build()
        .unwrap();
    // Building starts no thread.
    assert_eq!(procinfo::thread_count().unwrap(), baseline);
    let mut worst = Duration::ZERO;
    for scenario in [
        "after one batch",
        "before any batch",
        "holding a batch",
        "after three batches",
    ] {
        let mut epoch = loader.epoch(0);
        let mut held = Vec::new();
        match scenario {
            "after one batch" => drop(epoch.next().unwrap().unwrap()),
            "holding a batch" => held.push(epoch.next().unwrap().unwrap()),
            "after three batches" => {
                for _ in 0..3 {
                    epoch.next().unwrap().unwrap();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            _ => {}
        }
        let running = procinfo::thread_count().unwrap();
        assert!(
            running >= baseline + 4,
            "{scenario}: 3 decode threads and the batcher should be running ({running} vs {baseline})"
        );
        worst = worst.max(timed_drop(epoch, scenario));
        if let Some(b) = held.pop() {
            // A batch outlives its epoch and stays readable.
            assert_eq!(b.len(), 8);
            assert_eq!(b.as_f32().unwrap().len(), 8 * 160 * 160 * 3);
        }
        let stats = loader.stats();
        assert!(
            stats.images < 320,
            "{scenario}: the epoch ran to its end: {stats:?}"
        );
    }
    drop(loader);
    // Threads the loader itself owns (if any) go with it.
    assert_eq!(
        threads_settle(baseline),
        baseline,
        "{:?}",
        common::thread_names()
    );

    // Tiny images decode in well under a millisecond: after a pause the prefetch queue is full,
    // the batcher is blocked sending to it and the decoders wait on the reorder window. The
    // drop must unblock all three.
    let tiny = IdCorpus::new(20);
    let many = Source::from_entries((0..600).map(|i| (tiny.paths[i % 20].clone(), 0))).unwrap();
    let loader = Loader::builder(many)
        .batch_size(4)
        .decode_threads(3)
        .prefetch(2)
        .image_size(16)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    epoch.next().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    worst = worst.max(timed_drop(epoch, "with a full prefetch queue"));
    assert!(loader.stats().images < 600);
    println!("slowest drop: {worst:?}");
    // The same loader then runs a whole epoch.
    let mut seen = common::indices_of(&common::collect_ok(loader.epoch(1)));
    seen.sort_unstable();
    assert_eq!(seen, (0..600).collect::<Vec<u64>>());
    drop(loader);
    assert_eq!(
        threads_settle(baseline),
        baseline,
        "{:?}",
        common::thread_names()
    );
}

#[test]
fn a_thousand_loaders_leak_no_threads_or_memory() {
    if !common::runs_in_child("shutdown::a_thousand_loaders_leak_no_threads_or_memory") {
        return;
    }
    let source = Source::from_dir(common::testdata("classes")).unwrap();
    let cycle = |i: u64| {
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .image_size(32)
            .dtype(Dtype::U8)
            .decode_threads(2)
            .seed(i)
            .build()
            .unwrap();
        if i.is_multiple_of(10) {
            let mut epoch = loader.epoch(i);
            if i.is_multiple_of(20) {
                let b = epoch.next().unwrap().unwrap();
                assert_eq!(b.len(), 4);
            }
        }
    };
    let baseline_threads = procinfo::thread_count().expect("/proc/self/status");
    // Warm up allocator arenas and lazily initialized state before the RSS baseline.
    for i in 0..50 {
        cycle(i);
    }
    let baseline_rss = procinfo::rss_bytes().unwrap();
    let started = Instant::now();
    for i in 0..1000 {
        cycle(i);
    }
    let threads = threads_settle(baseline_threads);
    let rss = procinfo::rss_bytes().unwrap();
    let grew = rss as i64 - baseline_rss as i64;
    println!(
        "1000 loaders (100 epochs started, 50 with a batch taken) in {:?}: RSS {:.1} -> {:.1} MB ({:+.1} MB), threads {baseline_threads} -> {threads}",
        started.elapsed(),
        baseline_rss as f64 / 1e6,
        rss as f64 / 1e6,
        grew as f64 / 1e6
    );
    assert_eq!(
        threads, baseline_threads,
        "threads leaked (or exited that this test did not start)"
    );
    assert!(grew < 20_000_000, "RSS grew by {:.1} MB", grew as f64 / 1e6);
}

/// Runs an epoch to its end (under a watchdog) and returns everything it yielded.
fn drain(epoch: imagefeed::Batches) -> Vec<Result<imagefeed::Batch, Error>> {
    common::with_timeout(Duration::from_secs(30), move || epoch.collect())
}

#[test]
fn worker_panic_is_an_error_naming_the_sample() {
    let corpus = IdCorpus::new(30);
    let source = corpus.source();
    for (k, threads, policy) in [
        (0u64, 1, OnError::Fail),
        (17, 3, OnError::Fail),
        (29, 2, OnError::Fail),
        (17, 3, OnError::SKIP_ALL),
        (5, 1, OnError::Skip { max: 100 }),
    ] {
        let what = format!("panic at {k}, {threads} threads, {policy:?}");
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .image_size(8)
            .dtype(Dtype::U8)
            .decode_threads(threads)
            .on_error(policy)
            .inject_panic_at_index(k)
            .build()
            .unwrap();
        for epoch in 0..2 {
            let items = drain(loader.epoch(epoch));
            let (last, before) = items.split_last().expect("the epoch yields something");
            let e = last.as_ref().expect_err(&what);
            match e.kind() {
                ErrorKind::WorkerPanicked {
                    stage,
                    path,
                    message,
                } => {
                    assert_eq!(*stage, "decode", "{what}");
                    assert_eq!(
                        path.as_deref(),
                        Some(corpus.paths[k as usize].as_path()),
                        "{what}"
                    );
                    assert!(message.contains("injected panic"), "{what}: {message}");
                }
                _ => panic!("{what}: {e:?}"),
            }
            assert_eq!(e.path(), Some(corpus.paths[k as usize].as_path()), "{what}");
            assert!(
                !e.is_data_error(),
                "{what}: a panic is not a skippable data error"
            );
            assert!(e.to_string().contains("panicked"), "{what}: {e}");
            // Everything before the error is good, and the panicking sample was not delivered.
            for b in before {
                let b = b.as_ref().unwrap();
                common::assert_pixels_follow_indices(b);
                assert!(!b.indices().contains(&k), "{what}");
            }
            assert_eq!(
                loader.stats().skipped,
                0,
                "{what}: a panic was counted as a skip"
            );
        }
    }
}

#[test]
fn slow_consumer_completes_the_epoch() {
    let source = common::subset(&common::corpus_source(), 40);
    let loader = Loader::builder(source)
        .batch_size(4)
        .decode_threads(2)
        .prefetch(1)
        .shuffle_buffer(6)
        .dtype(Dtype::U8)
        .seed(8)
        .build()
        .unwrap();
    let seen = common::with_timeout(Duration::from_secs(60), {
        let epoch = loader.epoch(0);
        move || {
            let mut seen = Vec::new();
            for b in epoch {
                let b = b.unwrap();
                seen.extend_from_slice(b.indices());
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        }
    });
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..40).collect::<Vec<u64>>());
    // Same batches as a fast consumer gets: timing never changes the order.
    let fast = common::indices_of(&common::collect_ok(loader.epoch(0)));
    assert_eq!(seen, fast);
    let stats = loader.stats();
    assert_eq!((stats.images, stats.batches), (40, 10));
}

/// How a file is damaged while its epoch runs.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Truncate,
}

/// Starts an epoch over 80 id-coded images in file order, takes its first batch, damages
/// sample 70 (far past what the reorder window lets the decoders read ahead), and returns the
/// rest of the epoch.
fn damage_during_epoch(
    damage: Damage,
    policy: OnError,
) -> (
    IdCorpus,
    PathBuf,
    Vec<Result<imagefeed::Batch, Error>>,
    imagefeed::Stats,
) {
    let corpus = IdCorpus::new(80);
    let loader = Loader::builder(corpus.source())
        .batch_size(2)
        .shuffle(false)
        .prefetch(1)
        .decode_threads(1)
        .image_size(8)
        .dtype(Dtype::U8)
        .on_error(policy)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    let first = epoch.next().unwrap().unwrap();
    assert_eq!(first.indices(), &[0, 1]);
    let victim = corpus.paths[70].clone();
    match damage {
        Damage::Delete => std::fs::remove_file(&victim).unwrap(),
        Damage::Truncate => {
            let len = std::fs::metadata(&victim).unwrap().len();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&victim)
                .unwrap();
            f.set_len(len / 2).unwrap();
        }
    }
    let mut rest = drain(epoch);
    rest.insert(0, Ok(first));
    let stats = loader.stats();
    (corpus, victim, rest, stats)
}

#[test]
fn file_deleted_or_truncated_during_an_epoch() {
    for damage in [Damage::Delete, Damage::Truncate] {
        // Fail: samples 0..70 arrive, then the error naming the damaged file ends the epoch.
        let (_corpus, victim, items, _) = damage_during_epoch(damage, OnError::Fail);
        let (last, before) = items.split_last().unwrap();
        let e = last.as_ref().expect_err("the damaged file is an error");
        assert_eq!(e.path(), Some(victim.as_path()), "{damage:?}: {e}");
        assert!(e.is_data_error(), "{damage:?}: {e:?}");
        assert!(
            e.to_string().starts_with(&victim.display().to_string()),
            "{e}"
        );
        match (damage, e.kind()) {
            (Damage::Delete, ErrorKind::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
            }
            (Damage::Truncate, ErrorKind::Decode { .. }) => {}
            _ => panic!("{damage:?}: {e:?}"),
        }
        let delivered: Vec<u64> = before
            .iter()
            .flat_map(|b| b.as_ref().unwrap().indices().to_vec())
            .collect();
        assert_eq!(delivered, (0..70).collect::<Vec<u64>>(), "{damage:?}");

        // Skip: every other sample arrives, with its own label; the damaged one is listed.
        let (_corpus, victim, items, stats) = damage_during_epoch(damage, OnError::Skip { max: 1 });
        let mut delivered = Vec::new();
        for b in &items {
            let b = b.as_ref().unwrap();
            common::assert_pixels_follow_indices(b);
            for (&i, &l) in b.indices().iter().zip(b.labels()) {
                assert_eq!(l, id_label(i as usize));
                delivered.push(i);
            }
        }
        let want: Vec<u64> = (0..80).filter(|&i| i != 70).collect();
        assert_eq!(delivered, want, "{damage:?}");
        assert_eq!(stats.skipped, 1);
        assert_eq!(stats.skipped_samples.len(), 1);
        assert_eq!(stats.skipped_samples[0].0, victim, "{damage:?}");
        assert_eq!(stats.images + stats.skipped, 80);
    }
}

#[test]
fn batches_outlive_their_loader() {
    let corpus = IdCorpus::new(12);
    let loader = Loader::builder(corpus.source())
        .batch_size(5)
        .image_size(8)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let epoch = loader.epoch(0);
    drop(loader);
    let batches = common::with_timeout(Duration::from_secs(20), move || common::collect_ok(epoch));
    let mut seen = common::indices_of(&batches);
    seen.sort_unstable();
    assert_eq!(seen, (0..12).collect::<Vec<u64>>());
}

/// Waits up to a second for the number of readahead threads to be `n`; returns the last count.
fn readahead_threads(n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let now = common::thread_names()
            .iter()
            .filter(|name| name.starts_with("imagefeed-read"))
            .count();
        if now == n || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The readahead thread belongs to the loader: one across its epochs, a second one only while
/// two epochs run at once (joined with that epoch), none once the loader is dropped; and two
/// epochs at once deliver what each delivers alone.
#[test]
fn the_readahead_thread_is_the_loaders_and_ends_with_it() {
    if !common::runs_in_child("shutdown::the_readahead_thread_is_the_loaders_and_ends_with_it") {
        return;
    }
    if !cfg!(target_os = "linux") {
        common::skipped("readahead runs on Linux only");
        return;
    }
    let corpus = IdCorpus::new(300);
    let loader = Loader::builder(corpus.source())
        .batch_size(10)
        .image_size(8)
        .dtype(Dtype::U8)
        .decode_threads(2)
        .readahead(8)
        .build()
        .unwrap();
    let alone: Vec<Vec<u64>> = (0..4)
        .map(|e| common::indices_of(&common::collect_ok(loader.epoch(e))))
        .collect();
    assert_eq!(readahead_threads(1), 1, "{:?}", common::thread_names());
    let loader = std::sync::Arc::new(loader);
    let l = loader.clone();
    let together = common::with_timeout(Duration::from_secs(30), move || {
        let mut first = l.epoch(2);
        let head = first.next().unwrap().unwrap();
        // The loader's thread runs epoch 2's hints: epoch 3 gets its own.
        let second = common::collect_ok(l.epoch(3));
        let mut first_all = vec![head];
        first_all.extend(first.map(|b| b.unwrap()));
        (common::indices_of(&first_all), common::indices_of(&second))
    });
    assert_eq!(together, (alone[2].clone(), alone[3].clone()));
    assert_eq!(readahead_threads(1), 1, "{:?}", common::thread_names());
    drop(loader);
    assert_eq!(readahead_threads(0), 0, "{:?}", common::thread_names());
}
