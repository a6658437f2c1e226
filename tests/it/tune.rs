//! Autotune while an epoch runs: the loader moves decode threads and prefetch depth
//! towards where the time goes, reports it in the stats, and delivers the same batches.

use std::time::Duration;

use imagefeed::{Loader, Source};

use crate::common::corpus;

fn indices(loader: &Loader, pause: Duration) -> Vec<u64> {
    let mut out = Vec::new();
    for batch in loader.epoch(0) {
        out.extend_from_slice(batch.unwrap().indices());
        std::thread::sleep(pause);
    }
    out
}

#[test]
fn autotune_gives_back_threads_and_queue_to_a_slow_training_step_within_the_epoch() {
    let source = Source::open(corpus(96, 11).join("files.txt")).unwrap();
    let build = |autotune| {
        Loader::builder(source.clone())
            .image_size(32)
            .batch_size(1)
            .decode_threads(2)
            .prefetch(2)
            .autotune(autotune)
            .seed(5)
            .build()
            .unwrap()
    };
    let tuned = build(true);
    // A training step of 40 ms a batch (about 4 s in all, so at least two retunes, one
    // enough to go from 2 threads and 2 batches to 1 and 1): the decoders idle, the consumer
    // never waits.
    let got = indices(&tuned, Duration::from_millis(40));
    let stats = tuned.stats();
    assert_eq!(
        (stats.decode_threads, stats.prefetch),
        (1, 1),
        "one epoch of a slow consumer ends with one thread and one queued batch: {stats:?}"
    );
    // Same batches as without autotune: the order never depends on the thread count.
    assert_eq!(got, indices(&build(false), Duration::ZERO));
}

#[test]
fn autotune_adds_a_thread_for_a_starved_consumer_within_the_epoch() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        println!("skipped: autotune adds threads only up to the cores, and this machine has 1");
        return;
    }
    // The same photo many times over: one decode thread cannot keep up with a consumer that
    // does nothing.
    let photo = crate::common::testdata("photos/photo_0.jpg");
    let source = Source::from_entries((0..3000).map(|i| (photo.clone(), i % 3))).unwrap();
    let loader = Loader::builder(source)
        .batch_size(16)
        .decode_threads(1)
        .autotune(true)
        .build()
        .unwrap();
    let mut threads = Vec::new();
    let mut batches = loader.epoch(0);
    while let Some(batch) = batches.next() {
        batch.unwrap();
        threads.push(batches.stats().decode_threads);
        if threads.last() == Some(&2) {
            break;
        }
    }
    assert_eq!(
        threads.last(),
        Some(&2),
        "a starved consumer gets a second decode thread within the epoch (threads seen: {:?})",
        threads.iter().collect::<std::collections::BTreeSet<_>>()
    );
}
