//! Training and evaluation transforms through the loader: random-resized-crop and flip are a
//! function of (seed, epoch, dataset index) alone (threads, resumption, ranks, caches), the
//! crop path refuses hostile files by name, and every transform yields images of every kind.

use std::collections::HashMap;

use imagefeed::{Dtype, Loader, LoaderBuilder, OnError, Source, Transform};

use crate::common::{corpus_source, subset, testdata};

/// Each delivered sample's `u8` pixels by dataset index.
fn samples(
    batches: impl Iterator<Item = Result<imagefeed::Batch, imagefeed::Error>>,
) -> HashMap<u64, Vec<u8>> {
    let mut out = HashMap::new();
    for b in batches {
        let b = b.unwrap();
        let px = b.as_u8().unwrap();
        let n = px.len() / b.len();
        for (i, &index) in b.indices().iter().enumerate() {
            out.insert(index, px[i * n..(i + 1) * n].to_vec());
        }
    }
    out
}

/// Every file of a testdata/ folder, label 0.
fn files_in(dir: &str) -> Source {
    let mut files: Vec<_> = std::fs::read_dir(testdata(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    Source::from_entries(files.into_iter().map(|p| (p, 0u32))).unwrap()
}

fn train(source: Source) -> LoaderBuilder {
    Loader::builder(source)
        .transform(Transform::random_resized_crop())
        .dtype(Dtype::U8)
        .image_size(48)
        .batch_size(8)
        .seed(11)
}

#[test]
fn random_crops_are_the_same_at_any_thread_count_and_new_each_epoch() {
    let source = subset(&corpus_source(), 24);
    let run = |threads: usize, epoch: u64| {
        let loader = train(source.clone())
            .decode_threads(threads)
            .build()
            .unwrap();
        samples(loader.epoch(epoch))
    };
    let one = run(1, 0);
    assert_eq!(one.len(), 24);
    assert_eq!(one, run(2, 0), "2 threads");
    assert_eq!(one, run(4, 0), "4 threads");
    let next = run(2, 1);
    let same = one.iter().filter(|(i, px)| next[*i] == **px).count();
    assert!(
        same <= 1,
        "{same} of 24 samples repeat their crop in the next epoch"
    );
}

#[test]
fn resuming_and_sharding_draw_the_same_crops() {
    let source = subset(&corpus_source(), 24);
    let whole = samples(train(source.clone()).build().unwrap().epoch(2));
    // Resumed after two batches of epoch 2.
    let loader = train(source.clone()).build().unwrap();
    let mut first = loader.epoch(2);
    let mut seen = samples(first.by_ref().take(2));
    let state = first.state();
    drop(first);
    seen.extend(samples(loader.resume(&state)));
    assert_eq!(seen, whole);
    // Each rank of two draws, for each of its samples, the crop of the unsharded run.
    for rank in 0..2 {
        let part = samples(
            train(source.clone())
                .shard(rank, 2)
                .build()
                .unwrap()
                .epoch(2),
        );
        assert!(part.len() >= 12);
        for (i, px) in &part {
            assert_eq!(&whole[i], px, "rank {rank}, sample {i}");
        }
    }
}

#[test]
fn flips_follow_the_probability() {
    let source = subset(&corpus_source(), 16);
    let run = |p: f64| {
        samples(
            Loader::builder(source.clone())
                .dtype(Dtype::U8)
                .image_size(32)
                .flip_horizontal(p)
                .build()
                .unwrap()
                .epoch(0),
        )
    };
    let (plain, all) = (run(0.0), run(1.0));
    for (i, px) in &plain {
        let mut mirrored = px.clone();
        for row in mirrored.chunks_exact_mut(32 * 3) {
            let flipped: Vec<u8> = row.chunks_exact(3).rev().flatten().copied().collect();
            row.copy_from_slice(&flipped);
        }
        assert_eq!(all[i], mirrored, "sample {i}");
    }
    // With the default 0.5, some samples are mirrored and some are not.
    let half = run(0.5);
    let flipped = plain.iter().filter(|(i, px)| half[*i] != **px).count();
    assert!((2..=14).contains(&flipped), "{flipped} of 16 flipped");
}

/// A cached epoch is cut from the recorded base image: another crop than the epoch before,
/// the same bits for the same (seed, epoch) in another run, whether the cache was being
/// written or read.
#[test]
fn cached_epochs_stay_random_and_reproducible() {
    let source = subset(&corpus_source(), 16);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("train.cache");
    let loader = || train(source.clone()).cache(&cache).build().unwrap();
    let first = loader();
    let e0 = samples(first.epoch(0)); // writes the cache
    assert!(first.cache_size_on_disk().is_some());
    let e1 = samples(first.epoch(1)); // reads it
    let same = e0.iter().filter(|(i, px)| e1[*i] == **px).count();
    assert!(
        same <= 1,
        "{same} of 16 cached samples repeat the previous epoch's crop"
    );
    let again = loader();
    assert_eq!(samples(again.epoch(1)), e1);
    assert_eq!(samples(again.epoch(0)), e0);
    // A cache of fitted samples is not reused for random crops, nor the reverse.
    let plain = Loader::builder(source.clone())
        .dtype(Dtype::U8)
        .image_size(48)
        .cache(&cache)
        .build()
        .unwrap();
    let fitted = samples(plain.epoch(0));
    assert_ne!(fitted, e0);
}

/// Every file kind in testdata/valid/ goes through every transform.
#[test]
fn every_file_kind_takes_every_transform() {
    let source = files_in("valid");
    for t in [
        Transform::Stretch,
        Transform::ShorterSideCenterCrop,
        Transform::center_crop(),
        Transform::random_resized_crop(),
        Transform::RandomResizedCrop {
            scale: (0.01, 0.02),
            ratio: (0.2, 5.0),
        },
    ] {
        let loader = Loader::builder(source.clone())
            .transform(t)
            .image_size_hw(40, 56)
            .build()
            .unwrap();
        let n: usize = loader.epoch(0).map(|b| b.unwrap().len()).sum();
        assert_eq!(n, source.len(), "{t:?}");
    }
}

/// Damaged files fail through the crop path as through the whole decode: an error naming the
/// file, in every epoch and with every box (a truncated file whose box lies above the cut, and
/// a bit error the decoder notices only at the end of the data, included).
#[test]
fn hostile_files_fail_by_name_through_the_crop_path() {
    let dir = tempfile::tempdir().unwrap();
    // A photo cut to 60%: boxes in its top part decode before the cut.
    let photo = std::fs::read(testdata("photos/photo_0.jpg")).unwrap();
    let cut = dir.path().join("cut.jpg");
    std::fs::write(&cut, &photo[..photo.len() * 6 / 10]).unwrap();
    for epoch in 0..6 {
        let loader = train(Source::from_entries([(cut.clone(), 0)]).unwrap())
            .transform(Transform::RandomResizedCrop {
                scale: (0.01, 0.02),
                ratio: (1.0, 1.0),
            })
            .build()
            .unwrap();
        let e = loader.epoch(epoch).next().unwrap().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("cut.jpg") && msg.contains("truncated"),
            "{msg}"
        );
    }
    // Every file of testdata/corrupt fails with every box, in every epoch, as in a whole
    // decode: bitflip.jpg's damage (which a decoder notices only at the end of its data) too,
    // because a cropped decode reads the data to its end unless accept_jpeg_warnings.
    let corrupt = files_in("corrupt");
    for t in [
        Transform::random_resized_crop(),
        Transform::RandomResizedCrop {
            scale: (0.01, 0.02),
            ratio: (1.0, 1.0),
        },
        Transform::center_crop(),
        Transform::Stretch,
    ] {
        let loader = train(corrupt.clone())
            .transform(t)
            .batch_size(1)
            .on_error(OnError::SKIP_ALL)
            .build()
            .unwrap();
        for epoch in 0..4 {
            let mut batches = loader.epoch(epoch);
            let delivered: usize = batches.by_ref().map(|b| b.unwrap().len()).sum();
            let stats = batches.stats();
            assert_eq!(
                delivered, 0,
                "{t:?} epoch {epoch}: a corrupt file delivered"
            );
            assert_eq!(stats.skipped, corrupt.len() as u64, "{t:?} epoch {epoch}");
            for (path, why) in &stats.skipped_samples {
                assert!(
                    path.to_string_lossy().contains("corrupt/"),
                    "{path:?}: {why}"
                );
            }
        }
    }
    let loader = train(corrupt.clone()).build().unwrap();
    let e = loader
        .epoch(0)
        .find_map(|b| b.err())
        .expect("a corrupt file fails");
    assert!(e.to_string().contains("corrupt/"), "{e}");
    // With accept_jpeg_warnings, damaged data is delivered (and a crop stops below its box).
    let bitflip = Source::from_entries([(testdata("corrupt/bitflip.jpg"), 0)]).unwrap();
    for epoch in 0..3 {
        let loader = train(bitflip.clone())
            .accept_jpeg_warnings(true)
            .build()
            .unwrap();
        let n: usize = loader.epoch(epoch).map(|b| b.unwrap().len()).sum();
        assert_eq!(n, 1);
    }
}

#[test]
fn bad_parameters_are_refused_by_build() {
    let source = subset(&corpus_source(), 4);
    for (t, flip, what) in [
        (
            Transform::RandomResizedCrop {
                scale: (0.5, 0.1),
                ratio: (0.75, 1.33),
            },
            0.5,
            "scale",
        ),
        (
            Transform::RandomResizedCrop {
                scale: (0.1, 1.0),
                ratio: (0.0, 1.33),
            },
            0.5,
            "ratio",
        ),
        (
            Transform::CenterCrop { crop_fraction: 1.5 },
            0.0,
            "fraction",
        ),
        (Transform::Stretch, 1.5, "probability"),
        (Transform::Stretch, f64::NAN, "probability"),
    ] {
        let e = Loader::builder(source.clone())
            .transform(t)
            .flip_horizontal(flip)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
}

/// A strict cropped decode reads a file's data to its end once; a later epoch over the same
/// bytes stops below its box (the same pixels as a decode that reads to the end), and bytes
/// replaced between epochs are read to their end again: a damaged replacement fails by name.
#[test]
fn files_read_to_their_end_once_are_checked_again_when_their_bytes_change() {
    let source = subset(&corpus_source(), 24);
    let epochs = |loader: &Loader, e: u64| samples(loader.epoch(e));
    let warm = train(source.clone()).build().unwrap();
    for e in 0..2 {
        epochs(&warm, e);
    }
    let fresh = train(source.clone()).build().unwrap();
    assert!(
        epochs(&warm, 2) == epochs(&fresh, 2),
        "a file read to its end in earlier epochs decodes to other pixels"
    );
    // The digests are in the budget: 4 bytes a sample, for strict cropping transforms only
    // (and only with the patched libjpeg-turbo: the others decode a strict crop's whole frame).
    let n = if imagefeed::decoder_info().patched {
        source.len() as u64
    } else {
        0
    };
    let index = |b: LoaderBuilder| b.build().unwrap().memory_budget().index_bytes;
    let strict = index(train(source.clone()));
    assert_eq!(
        strict - index(train(source.clone()).accept_jpeg_warnings(true)),
        4 * n
    );
    assert_eq!(
        strict - index(train(source.clone()).transform(Transform::Stretch)),
        4 * n
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("replaced.jpg");
    std::fs::copy(testdata("valid/baseline_420.jpg"), &file).unwrap();
    let loader = train(Source::from_entries([(file.clone(), 0)]).unwrap())
        .transform(Transform::RandomResizedCrop {
            scale: (0.01, 0.02),
            ratio: (1.0, 1.0),
        })
        .batch_size(1)
        .build()
        .unwrap();
    for e in 0..3 {
        assert_eq!(epochs(&loader, e).len(), 1, "epoch {e}");
    }
    // bitflip.jpg's damage shows only at the end of its data: boxes above it stop before it.
    std::fs::copy(testdata("corrupt/bitflip.jpg"), &file).unwrap();
    for e in 3..9 {
        let err = loader
            .epoch(e)
            .find_map(|b| b.err())
            .unwrap_or_else(|| panic!("epoch {e}: the damaged replacement was delivered"));
        assert!(err.to_string().contains("replaced.jpg"), "{err}");
    }
}

#[test]
fn the_command_line_runs_each_transform_and_warns_of_parameters_of_another() {
    let bench = |args: &[&str]| {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .args(["bench", "--threads", "1", "--json", "--epochs", "1"])
            .arg(testdata("classes"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, name) in [
        (&["--transform", "stretch"][..], "stretch"),
        (
            &["--transform", "shorter-side-center-crop"],
            "shorter-side-center-crop",
        ),
        (
            &["--transform", "center-crop", "--crop-fraction", "0.9"],
            "center-crop",
        ),
        (
            &[
                "--transform",
                "random-resized-crop",
                "--crop-scale",
                "0.25",
                "1",
                "--crop-ratio",
                "0.5",
                "2",
                "--flip",
                "1",
            ],
            "random-resized-crop",
        ),
    ] {
        let (ok, stdout, stderr) = bench(args);
        assert!(ok, "{args:?}: {stderr}");
        assert!(
            stdout.contains(&format!("\"transform\":\"{name}\"")),
            "{args:?}: {stdout}"
        );
    }
    // The values reach the loader: its own checks name them.
    for (args, says) in [
        (
            &[
                "--transform",
                "random-resized-crop",
                "--crop-scale",
                "0.5",
                "0.1",
            ][..],
            "random-resized-crop scale (0.5, 0.1)",
        ),
        (
            &[
                "--transform",
                "random-resized-crop",
                "--crop-ratio",
                "-1",
                "2",
            ],
            "random-resized-crop ratio (-1, 2)",
        ),
        (
            &["--transform", "center-crop", "--crop-fraction", "1.5"],
            "center-crop fraction 1.5",
        ),
        (&["--flip", "-0.5"], "probability -0.5"),
    ] {
        let (ok, _, stderr) = bench(args);
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
    }
    // A parameter of another transform runs, with a warning naming it.
    for (args, says) in [
        (
            &[
                "--transform",
                "random-resized-crop",
                "--crop-fraction",
                "0.9",
            ][..],
            "--crop-fraction applies to --transform center-crop only; ignored",
        ),
        (
            &["--transform", "center-crop", "--crop-ratio", "1", "2"],
            "--crop-ratio applies to --transform random-resized-crop only; ignored",
        ),
    ] {
        let (ok, _, stderr) = bench(args);
        assert!(ok && stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn the_fuzz_targets_decode_path_takes_every_test_file_with_every_transform() {
    // `fuzzing::decode_transform` (the `decode` fuzz target) picks the transform from the
    // input's length, and for a cropping one decodes a clean file a second time through the
    // table of files read to their end, asserting the same pixels. Trailing zeros after each
    // file select the four transforms; odd sizes accept JPEG warnings, even ones are strict.
    let mut decoded = 0;
    for dir in ["valid", "corrupt", "photos"] {
        let mut files: Vec<_> = std::fs::read_dir(testdata(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            for pad in 0..4 {
                let mut padded = bytes.clone();
                padded.resize(bytes.len() + pad, 0);
                for size in [7, 48, 160] {
                    for zune in [false, true] {
                        eprintln!("{name} {pad} {size} {zune}");
                        let ok =
                            imagefeed::tools::fuzz::decode_transform(&padded, name, size, zune);
                        decoded += usize::from(ok);
                    }
                }
            }
        }
    }
    assert!(decoded > 500, "{decoded} decodes succeeded");
}
