//! The device slot ring through the whole pipeline, on the CPU: a loader with the
//! hidden `simulate_device_staging(true)` runs every batch through the ring of `prefetch + 2`
//! slots that a GPU loader uses, with host memory standing in for the GPU (`prefetch/host.rs`).
//! The batcher writes `u8` samples into the slot, the "copy" normalizes them into the batch,
//! and dropping the batch returns the slot. The GPU itself is covered by `tests/cuda.rs`.

use std::time::{Duration, Instant};

use imagefeed::{Batch, Dtype, Layout, Loader, LoaderBuilder, Source};

use crate::common::{self, IdCorpus};

fn builder(source: Source, simulated: bool) -> LoaderBuilder {
    Loader::builder(source)
        .batch_size(5)
        .decode_threads(2)
        .prefetch(2)
        .seed(11)
        .simulate_device_staging(simulated)
}

fn collect(loader: &Loader, epoch: u64) -> Vec<(Vec<u8>, Vec<u32>, Vec<u64>)> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b: Batch = b.unwrap();
            assert!(b.is_on_host());
            (
                b.as_bytes().to_vec(),
                b.labels().to_vec(),
                b.indices().to_vec(),
            )
        })
        .collect()
}

#[test]
fn simulated_device_delivers_the_host_batches() {
    let source = common::subset(&common::corpus_source(), 23);
    for (dtype, layout) in [
        (Dtype::F32, Layout::Nhwc),
        (Dtype::F16, Layout::Nchw),
        (Dtype::Bf16, Layout::Nhwc),
        (Dtype::U8, Layout::Nchw),
    ] {
        let make = |sim| {
            builder(source.clone(), sim)
                .image_size(48)
                .dtype(dtype)
                .layout(layout)
                .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
                .build()
                .unwrap()
        };
        let (host, sim) = (make(false), make(true));
        assert_eq!(host.device_slots(), (0, 0, 0));
        let want = collect(&host, 0);
        let got = collect(&sim, 0);
        assert_eq!(got.len(), 5, "{dtype:?} {layout:?}");
        assert!(
            got == want,
            "{dtype:?} {layout:?}: simulated batches differ"
        );
        let (capacity, created, free) = sim.device_slots();
        assert_eq!(capacity, 4);
        assert!((1..=capacity).contains(&created), "{created}");
        assert_eq!(free, created, "every slot is back after the epoch");
        assert_eq!(sim.stats().h2d_bytes, 23 * 48 * 48 * 3);
    }
}

#[test]
fn slots_are_reused_and_bounded_by_a_slow_consumer() {
    let ids = IdCorpus::new(30);
    let source = Source::from_entries((0..300).map(|i| (ids.paths[i % 30].clone(), 0))).unwrap();
    let loader = builder(source, true)
        .image_size(16)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let (capacity, ..) = loader.device_slots();
    let mut batches = 0;
    for b in loader.epoch(0) {
        let b = b.unwrap();
        common::assert_pixels_follow_indices_by(&b, |i| i % 30);
        // A slow consumer: the pipeline runs ahead, but only into the slots there are.
        std::thread::sleep(Duration::from_millis(1));
        let (_, created, _) = loader.device_slots();
        assert!(created <= capacity, "{created} slots of {capacity}");
        batches += 1;
    }
    assert_eq!(batches, 60);
    let (_, created, free) = loader.device_slots();
    assert!(created <= capacity);
    assert_eq!(free, created);
}

#[test]
fn the_consumer_may_hold_all_but_one_slot() {
    let ids = IdCorpus::new(20);
    let loader = builder(ids.source(), true)
        .image_size(16)
        .dtype(Dtype::U8)
        .batch_size(2)
        .build()
        .unwrap();
    let (capacity, ..) = loader.device_slots();
    common::with_timeout(Duration::from_secs(60), move || {
        let mut epoch = loader.epoch(0);
        // Hold N - 1 batches and ask for one more: it arrives.
        let held: Vec<Batch> = (0..capacity)
            .map(|_| epoch.next().unwrap().unwrap())
            .collect();
        assert_eq!(held.len(), capacity);
        drop(held);
        assert_eq!(epoch.count(), 10 - capacity);
    });
}

#[test]
fn dropping_mid_epoch_frees_every_slot() {
    let ids = IdCorpus::new(30);
    let source = Source::from_entries((0..600).map(|i| (ids.paths[i % 30].clone(), 0))).unwrap();
    let loader = builder(source, true)
        .image_size(16)
        .dtype(Dtype::F32)
        .build()
        .unwrap();
    let (capacity, ..) = loader.device_slots();
    for hold in [0, 1, capacity - 1] {
        let mut epoch = loader.epoch(0);
        let held: Vec<Batch> = (0..hold).map(|_| epoch.next().unwrap().unwrap()).collect();
        // Let the batcher fill the queue and wait for a slot.
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        drop(epoch);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "holding {hold}: the drop took {:?}",
            t.elapsed()
        );
        let (_, created, free) = loader.device_slots();
        assert_eq!(free + held.len(), created, "holding {hold}");
        drop(held);
        let (_, created, free) = loader.device_slots();
        assert_eq!(free, created, "holding {hold}: a slot was not returned");
    }
    // The loader still runs whole epochs.
    assert_eq!(loader.epoch(1).count(), 120);
}

#[test]
fn bench_on_an_unusable_gpu_fails_with_a_clear_message() {
    let run = |args: &[&str]| {
        std::process::Command::new(crate::common::imagefeed_bin())
            .args(args)
            .output()
            .unwrap()
    };
    let info = run(&["gpu-info"]);
    if info.status.success() {
        common::skipped(&format!(
            "a GPU is usable here (tests/cuda.rs covers it): {}",
            String::from_utf8_lossy(&info.stdout).trim()
        ));
        return;
    }
    let info = String::from_utf8_lossy(&info.stderr).into_owned();
    assert!(info.contains("no usable GPU"), "{info}");
    // The binary beside the tests has the features of the workspace's last build of
    // crates/imagefeed-cli, not always this test's: `cargo test --features cuda` at the root
    // builds it without `cuda`. Its gpu-info says which it has; the test checks the binary's
    // message for its own build, and says so when that is not the build this test was made for.
    let binary_has_cuda = !info.contains("--features cuda");
    if binary_has_cuda != cfg!(feature = "cuda") {
        let with = |on: bool| if on { "with" } else { "without" };
        let features = if cfg!(feature = "cuda") {
            " --features cuda"
        } else {
            ""
        };
        common::skipped(&format!(
            "the message of a command line built {} the cuda feature: {} was built {} it \
             (`cargo build -p imagefeed-cli{features}` first)",
            with(cfg!(feature = "cuda")),
            crate::common::imagefeed_bin().display(),
            with(binary_has_cuda),
        ));
    }
    let classes = common::testdata("classes");
    let out = run(&["bench", classes.to_str().unwrap(), "--device", "cuda"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    if binary_has_cuda {
        assert!(stderr.contains("CUDA device 0"), "{stderr}");
    } else {
        assert!(stderr.contains("--features cuda"), "{stderr}");
    }
}
