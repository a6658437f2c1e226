//! The pipeline end to end: every sample exactly once per epoch, labels that follow
//! their sample, orders, determinism across thread counts, dtypes, layouts, normalization,
//! geometry, and the sources.

use std::path::{Path, PathBuf};

use half::{bf16, f16};
use imagefeed::{Batch, Dtype, Layout, Loader, OnError, ResizeMode, Source};
use proptest::prelude::*;

use crate::common::{self, id_label, IdCorpus};

/// Runs one epoch of an id-coded corpus and checks what the pipeline promises: each sample
/// exactly once (or, with `drop_remainder`, `n / bs` full batches of distinct samples), labels
/// and pixels that belong to the index, and the batch count the loader announces.
fn check_exactly_once(
    corpus: &IdCorpus,
    batch_size: usize,
    shuffle_buffer: usize,
    drop_remainder: bool,
    seed: u64,
) {
    let n = corpus.paths.len();
    let source = corpus.source();
    let loader = Loader::builder(source.clone())
        .batch_size(batch_size)
        .shuffle_buffer(shuffle_buffer)
        .drop_remainder(drop_remainder)
        .seed(seed)
        .image_size(16)
        .dtype(Dtype::U8)
        .decode_threads(2)
        .build()
        .unwrap();
    let what = format!("bs {batch_size}, shuffle_buffer {shuffle_buffer}, drop_remainder {drop_remainder}, seed {seed}");
    let batches = common::collect_ok(loader.epoch(3));
    for b in &batches {
        assert_eq!(b.labels().len(), b.len(), "{what}");
        assert_eq!(b.indices().len(), b.len(), "{what}");
        assert_eq!(b.shape(), [b.len(), 16, 16, 3], "{what}");
        for (&i, &label) in b.indices().iter().zip(b.labels()) {
            assert_eq!(source.label(i as usize), Some(label), "{what}: index {i}");
            assert_eq!(label, id_label(i as usize), "{what}: index {i}");
        }
        common::assert_pixels_follow_indices(b);
    }
    let mut seen = common::indices_of(&batches);
    seen.sort_unstable();
    if drop_remainder {
        assert_eq!(batches.len(), n / batch_size, "{what}");
        assert!(batches.iter().all(|b| b.len() == batch_size), "{what}");
        let before = seen.len();
        seen.dedup();
        assert_eq!(seen.len(), before, "{what}: a sample came twice");
        assert!(seen.iter().all(|&i| (i as usize) < n), "{what}");
    } else {
        assert_eq!(seen, (0..n as u64).collect::<Vec<_>>(), "{what}");
        assert_eq!(batches.len(), n.div_ceil(batch_size), "{what}");
        let (last, full) = batches.split_last().unwrap();
        assert!(full.iter().all(|b| b.len() == batch_size), "{what}");
        assert_eq!(last.len(), n - full.len() * batch_size, "{what}");
    }
    assert_eq!(batches.len(), loader.batches_per_epoch(), "{what}");
    let stats = loader.stats();
    assert_eq!(stats.images as usize, seen.len(), "{what}");
    assert_eq!(stats.batches as usize, batches.len(), "{what}");
    assert_eq!(stats.skipped, 0, "{what}");
}

#[test]
fn every_sample_exactly_once() {
    // 61 is prime: no batch size below divides it.
    let corpus = IdCorpus::new(61);
    for batch_size in [1, 7, 16, 61, 100] {
        for shuffle_buffer in [0, 10] {
            for drop_remainder in [false, true] {
                check_exactly_once(&corpus, batch_size, shuffle_buffer, drop_remainder, 11);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 8,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(2),
        ..ProptestConfig::default()
    })]
    #[test]
    fn exactly_once_for_any_batching(
        batch_size in 1usize..30,
        shuffle_buffer in 0usize..40,
        drop_remainder: bool,
        seed: u64,
    ) {
        let corpus = IdCorpus::new(29);
        check_exactly_once(&corpus, batch_size, shuffle_buffer, drop_remainder, seed);
    }
}

#[test]
fn labels_match_the_source_on_a_real_corpus() {
    let dir = common::corpus(64, 7);
    let source = common::corpus_source();
    // The generator writes class `i % 10` into folder `class_{i % 10:02}` and `files.txt`.
    for i in 0..source.len() {
        let p = source.path(i).unwrap();
        let class = p.parent().unwrap().file_name().unwrap().to_str().unwrap();
        assert_eq!(class, format!("class_{:02}", source.label(i).unwrap()));
        assert!(p.starts_with(&dir));
    }
    let loader = Loader::builder(source.clone())
        .batch_size(10)
        .shuffle_buffer(8)
        .dtype(Dtype::U8)
        .image_size(32)
        .seed(5)
        .build()
        .unwrap();
    let batches = common::collect_ok(loader.epoch(0));
    let mut seen = common::indices_of(&batches);
    for b in &batches {
        for (&i, &label) in b.indices().iter().zip(b.labels()) {
            assert_eq!(source.label(i as usize), Some(label), "index {i}");
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..64).collect::<Vec<u64>>());
}

#[test]
fn shuffle_off_keeps_file_order() {
    let corpus = IdCorpus::new(23);
    for shuffle_buffer in [0, 5] {
        let loader = Loader::builder(corpus.source())
            .batch_size(5)
            .shuffle(false)
            .shuffle_buffer(shuffle_buffer)
            .image_size(16)
            .dtype(Dtype::U8)
            .decode_threads(3)
            .build()
            .unwrap();
        let batches = common::collect_ok(loader.epoch(4));
        batches
            .iter()
            .for_each(common::assert_pixels_follow_indices);
        let order = common::indices_of(&batches);
        if shuffle_buffer == 0 {
            assert_eq!(order, (0..23).collect::<Vec<u64>>());
        } else {
            // The buffer still shuffles, but only locally: the first output is among the
            // first `shuffle_buffer` inputs.
            assert!(order[0] < 5, "{order:?}");
            assert_ne!(order, (0..23).collect::<Vec<u64>>());
        }
    }
}

/// The delivery order of one epoch.
fn order(loader: &Loader, epoch: u64) -> Vec<u64> {
    common::indices_of(&common::collect_ok(loader.epoch(epoch)))
}

#[test]
fn epochs_differ_and_replay() {
    let corpus = IdCorpus::new(40);
    let build = |seed: u64, shuffle_buffer: usize| {
        Loader::builder(corpus.source())
            .batch_size(8)
            .seed(seed)
            .shuffle_buffer(shuffle_buffer)
            .image_size(8)
            .dtype(Dtype::U8)
            .build()
            .unwrap()
    };
    for shuffle_buffer in [0, 6] {
        let a = build(1, shuffle_buffer);
        let e0 = order(&a, 0);
        let e1 = order(&a, 1);
        assert_ne!(e0, e1, "epochs 0 and 1 gave the same order");
        assert_ne!(e0, (0..40).collect::<Vec<u64>>(), "epoch 0 is not shuffled");
        // The same epoch again, on this loader and on a new one with the same seed.
        assert_eq!(order(&a, 0), e0);
        assert_eq!(order(&build(1, shuffle_buffer), 1), e1);
        // Another seed, another order.
        assert_ne!(order(&build(2, shuffle_buffer), 0), e0);
    }
}

/// Everything a batch holds, for bit-for-bit comparisons.
fn fingerprint(batches: &[Batch]) -> Vec<(Vec<u8>, Vec<u32>, Vec<u64>)> {
    batches
        .iter()
        .map(|b| {
            (
                b.as_bytes().to_vec(),
                b.labels().to_vec(),
                b.indices().to_vec(),
            )
        })
        .collect()
}

#[test]
fn same_seed_bit_identical_at_any_thread_count() {
    // Real JPEGs of different sizes, so decode threads finish out of order.
    let source = common::subset(&common::corpus_source(), 32);
    for shuffle_buffer in [0, 12] {
        let run = |threads: usize| {
            let loader = Loader::builder(source.clone())
                .batch_size(9)
                .seed(1234)
                .shuffle_buffer(shuffle_buffer)
                .decode_threads(threads)
                .image_size(112)
                .dtype(Dtype::U8)
                .build()
                .unwrap();
            fingerprint(&common::collect_ok(loader.epoch(2)))
        };
        let one = run(1);
        assert_eq!(one.len(), 4);
        for threads in [2, 4] {
            let other = run(threads);
            assert!(
                one == other,
                "shuffle_buffer {shuffle_buffer}: {threads} threads gave other batches than 1"
            );
        }
    }
}

/// Readahead hints files to the kernel and nothing else: any depth (off, one file, the
/// default, deeper than the epoch) gives the same batches, missing and damaged files still
/// fail where they did, and a depth past the cap is refused.
#[test]
fn readahead_changes_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = common::corpus(64, 0);
    let mut entries: Vec<(PathBuf, u32)> = std::fs::read_to_string(corpus.join("files.txt"))
        .unwrap()
        .lines()
        .take(30)
        .map(|l| {
            let (path, label) = l.split_once('\t').unwrap();
            (corpus.join(path), label.parse().unwrap())
        })
        .collect();
    let damaged = dir.path().join("damaged.jpg");
    std::fs::write(&damaged, b"\xff\xd8\xff\xe0 not a jpeg").unwrap();
    entries.push((damaged, 3));
    entries.push((dir.path().join("missing.jpg"), 4));
    entries.push((dir.path().to_path_buf(), 5));
    let source = Source::from_entries(entries).unwrap();
    let run = |readahead: usize| {
        let loader = Loader::builder(source.clone())
            .batch_size(7)
            .seed(5)
            .decode_threads(2)
            .readahead(readahead)
            .image_size(32)
            .dtype(Dtype::U8)
            .on_error(OnError::Skip { max: 10 })
            .build()
            .unwrap();
        let batches = common::collect_ok(loader.epoch(1));
        let stats = loader.stats();
        (fingerprint(&batches), stats.skipped)
    };
    let (off, skipped) = run(0);
    assert_eq!(
        skipped, 3,
        "the damaged file, the missing one and the folder"
    );
    assert_eq!(off.iter().map(|b| b.1.len()).sum::<usize>(), 30);
    for readahead in [1, 64, 1000] {
        assert!(
            run(readahead) == (off.clone(), 3),
            "readahead {readahead} changed the output"
        );
    }
    let err = Loader::builder(source)
        .readahead(1 << 17)
        .build()
        .expect_err("a readahead past the cap is refused");
    assert!(err.to_string().contains("readahead"), "{err}");
}

/// The records of a complete cache are hinted the same way (`madvise(WILLNEED)`), and that
/// changes nothing either: epochs that read the cache give the same batches at any depth, all
/// from the cache.
#[test]
fn readahead_over_a_cache_changes_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let source = common::subset(&common::corpus_source(), 40);
    let run = |readahead: usize| {
        let loader = Loader::builder(source.clone())
            .batch_size(7)
            .seed(3)
            .image_size(32)
            .dtype(Dtype::U8)
            .cache(dir.path().join("samples.cache"))
            .readahead(readahead)
            .build()
            .unwrap();
        let first = fingerprint(&common::collect_ok(loader.epoch(0)));
        let first_hits = loader.stats().cache_hits;
        let second = fingerprint(&common::collect_ok(loader.epoch(1)));
        (first, first_hits, second, loader.stats().cache_hits)
    };
    // The first run writes the cache in its epoch 0 and reads it in epoch 1.
    let (written, hits, read, read_hits) = run(0);
    assert_eq!((hits, read_hits), (0, 40));
    for readahead in [0, 1, 64] {
        let (first, hits, second, second_hits) = run(readahead);
        assert_eq!((hits, second_hits), (40, 40), "readahead {readahead}");
        assert!(
            first == written && second == read,
            "readahead {readahead} changed the output"
        );
    }
}

#[test]
fn dtypes_and_layouts_agree_with_u8() {
    let source = common::subset(&common::corpus_source(), 12);
    let run = |dtype: Dtype, layout: Layout| {
        let loader = Loader::builder(source.clone())
            .batch_size(5)
            .seed(99)
            .image_size_hw(24, 40)
            .dtype(dtype)
            .layout(layout)
            .build()
            .unwrap();
        common::collect_ok(loader.epoch(0))
    };
    let reference = run(Dtype::U8, Layout::Nhwc);
    let f32s = run(Dtype::F32, Layout::Nhwc);
    let f16s = run(Dtype::F16, Layout::Nhwc);
    let bf16s = run(Dtype::Bf16, Layout::Nhwc);
    let nchw = run(Dtype::F32, Layout::Nchw);
    let nchw_u8 = run(Dtype::U8, Layout::Nchw);
    for (k, r) in reference.iter().enumerate() {
        let u8s = r.as_u8().unwrap();
        let n = r.len();
        assert_eq!(r.shape(), [n, 24, 40, 3]);
        assert_eq!(r.dtype(), Dtype::U8);
        assert_eq!(r.as_bytes(), u8s);
        for other in [&f32s[k], &f16s[k], &bf16s[k], &nchw[k], &nchw_u8[k]] {
            assert_eq!(other.indices(), r.indices());
            assert_eq!(other.labels(), r.labels());
        }
        let f = f32s[k].as_f32().unwrap();
        assert_eq!(f32s[k].as_bytes().len(), u8s.len() * 4);
        assert!(f32s[k].as_u8().is_err() && f32s[k].as_f16().is_err());
        for (i, &v) in u8s.iter().enumerate() {
            // v / 255, to within rounding (computed as v * (1 / 255) it may differ in the last
            // bit).
            let want = f32::from(v) / 255.0;
            assert!(
                (f[i] - want).abs() <= 1e-6,
                "f32 element {i}: {} vs {want}",
                f[i]
            );
        }
        let h = f16s[k].as_f16().unwrap();
        assert_eq!(f16s[k].dtype(), Dtype::F16);
        let b = bf16s[k].as_bf16().unwrap();
        for (i, &x) in f.iter().enumerate() {
            // The half-precision values are the f32 values, rounded.
            assert_eq!(h[i], f16::from_f32(x), "f16 element {i}");
            assert_eq!(b[i], bf16::from_f32(x), "bf16 element {i}");
        }
        // NCHW is the transpose of NHWC.
        assert_eq!(nchw[k].shape(), [n, 3, 24, 40]);
        assert_eq!(nchw[k].layout(), Layout::Nchw);
        let c = nchw[k].as_f32().unwrap();
        let cu = nchw_u8[k].as_u8().unwrap();
        for img in 0..n {
            for y in 0..24 {
                for x in 0..40 {
                    for ch in 0..3 {
                        let hwc = ((img * 24 + y) * 40 + x) * 3 + ch;
                        let chw = ((img * 3 + ch) * 24 + y) * 40 + x;
                        assert_eq!(c[chw], f[hwc]);
                        assert_eq!(cu[chw], u8s[hwc]);
                    }
                }
            }
        }
    }
}

#[test]
fn normalize_is_applied_per_channel() {
    let source = common::subset(&common::corpus_source(), 6);
    let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
    let run = |dtype: Dtype, layout: Layout| {
        let loader = Loader::builder(source.clone())
            .batch_size(6)
            .shuffle(false)
            .image_size(20)
            .normalize(mean, std)
            .dtype(dtype)
            .layout(layout)
            .build()
            .unwrap();
        common::collect_ok(loader.epoch(0)).pop().unwrap()
    };
    let raw = run(Dtype::U8, Layout::Nhwc);
    // u8 batches are the raw pixels whatever the normalization.
    let plain = Loader::builder(source.clone())
        .batch_size(6)
        .shuffle(false)
        .image_size(20)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    assert_eq!(
        common::collect_ok(plain.epoch(0))[0].as_u8().unwrap(),
        raw.as_u8().unwrap(),
        "normalize changed u8 output"
    );
    let u8s = raw.as_u8().unwrap();
    let nhwc = run(Dtype::F32, Layout::Nhwc);
    let f = nhwc.as_f32().unwrap();
    for (i, &v) in u8s.iter().enumerate() {
        let ch = i % 3;
        let want = (f32::from(v) / 255.0 - mean[ch]) / std[ch];
        assert!(
            (f[i] - want).abs() < 1e-5,
            "element {i}: {} vs {want}",
            f[i]
        );
    }
    let nchw = run(Dtype::Bf16, Layout::Nchw);
    let b = nchw.as_bf16().unwrap();
    let plane = 20 * 20;
    for (i, &x) in f.iter().enumerate() {
        let (img, rest) = (i / (plane * 3), i % (plane * 3));
        let (p, ch) = (rest / 3, rest % 3);
        assert_eq!(
            b[(img * 3 + ch) * plane + p],
            bf16::from_f32(x),
            "element {i}"
        );
    }
}

/// A 300×100 JPEG of three vertical bands: red (x < 90), green, blue (x >= 210).
fn bands_jpeg(dir: &Path) -> PathBuf {
    let (w, h) = (300u32, 100u32);
    let mut rgb = Vec::with_capacity((w * h * 3) as usize);
    for _y in 0..h {
        for x in 0..w {
            rgb.extend_from_slice(match x {
                0..90 => &[220, 20, 20],
                90..210 => &[20, 220, 20],
                _ => &[20, 20, 220],
            });
        }
    }
    let p = dir.join("bands.jpg");
    std::fs::write(&p, common::encode_jpeg(&rgb, w, h, 95)).unwrap();
    p
}

fn dominant(px: &[u8]) -> usize {
    (0..3).max_by_key(|&c| px[c]).unwrap()
}

#[test]
fn resize_modes_and_non_square_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let p = bands_jpeg(dir.path());
    // Stretch keeps all three bands; the centre crop keeps only the green middle square.
    let stretched = common::load_one(&p, |b| b.image_size(64)).unwrap();
    let cropped = common::load_one(&p, |b| {
        b.image_size(64)
            .transform(ResizeMode::ShorterSideCenterCrop.into())
    })
    .unwrap();
    for y in [0, 31, 63] {
        let at = |x: usize| (y * 64 + x) * 3;
        assert_eq!(dominant(&stretched[at(2)..]), 0, "stretch, row {y}");
        assert_eq!(dominant(&stretched[at(32)..]), 1, "stretch, row {y}");
        assert_eq!(dominant(&stretched[at(61)..]), 2, "stretch, row {y}");
        for x in [0, 32, 63] {
            assert_eq!(dominant(&cropped[at(x)..]), 1, "crop, ({x}, {y})");
        }
    }
    // Non-square outputs, both layouts, both modes.
    for mode in [ResizeMode::Stretch, ResizeMode::ShorterSideCenterCrop] {
        let loader = Loader::builder(Source::from_entries([(p.clone(), 0)]).unwrap())
            .image_size_hw(30, 70)
            .transform(mode.into())
            .layout(Layout::Nchw)
            .build()
            .unwrap();
        let b = common::collect_ok(loader.epoch(0)).pop().unwrap();
        assert_eq!(b.shape(), [1, 3, 30, 70]);
        assert_eq!(b.as_f32().unwrap().len(), 3 * 30 * 70);
        let px =
            common::load_one(&p, move |b| b.image_size_hw(30, 70).transform(mode.into())).unwrap();
        assert_eq!(px.len(), 30 * 70 * 3);
        let at = |x: usize| (15 * 70 + x) * 3;
        // A 70:30 crop of a 300x100 image is 233x100: it still reaches the red and blue bands.
        assert_eq!(dominant(&px[at(0)..]), 0, "{mode:?}");
        assert_eq!(dominant(&px[at(35)..]), 1, "{mode:?}");
        assert_eq!(dominant(&px[at(69)..]), 2, "{mode:?}");
    }
}

#[test]
fn from_dir_sorted_classes() {
    let dir = common::testdata("classes");
    for source in [Source::from_dir(&dir).unwrap(), Source::open(&dir).unwrap()] {
        assert_eq!(
            source.class_names().unwrap(),
            &["cat".to_string(), "dog".into(), "fish".into()]
        );
        assert_eq!(source.len(), 11);
        assert_eq!(source.num_classes(), 3);
        let mut names = Vec::new();
        for i in 0..source.len() {
            let p = source.path(i).unwrap();
            let class = p.parent().unwrap().file_name().unwrap().to_str().unwrap();
            let label = source.label(i).unwrap() as usize;
            assert_eq!(source.class_names().unwrap()[label], class);
            names.push(p.file_name().unwrap().to_str().unwrap().to_string());
        }
        assert_eq!(
            names,
            [
                "cat_0.jpg",
                "cat_1.jpg",
                "cat_2.jpg",
                "dog_0.jpg",
                "dog_1.jpg",
                "dog_2.jpg",
                "dog_rotated.jpg",
                "fish_0.jpg",
                "fish_1.jpg",
                "fish_2.jpg",
                "fish_gray.png"
            ]
        );
        assert!(source.path(11).is_none() && source.label(11).is_none());
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .image_size(32)
            .build()
            .unwrap();
        let batches = common::collect_ok(loader.epoch(0));
        let mut seen = common::indices_of(&batches);
        seen.sort_unstable();
        assert_eq!(seen, (0..11).collect::<Vec<u64>>());
        for b in &batches {
            for (&i, &l) in b.indices().iter().zip(b.labels()) {
                assert_eq!(source.label(i as usize), Some(l));
            }
        }
    }
}

#[test]
fn from_dir_ignores_hidden_and_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = common::id_jpeg(1);
    for (rel, data) in [
        ("b/one.jpg", &jpeg[..]),
        ("b/nested/two.JPEG", &jpeg),
        ("b/.hidden.jpg", &jpeg),
        ("b/notes.txt", b"not an image"),
        ("a/zero.jpeg", &jpeg),
        (".git/x.jpg", &jpeg),
    ] {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    let source = Source::from_dir(dir.path()).unwrap();
    assert_eq!(
        source.class_names().unwrap(),
        &["a".to_string(), "b".into()]
    );
    let entries: Vec<(PathBuf, u32)> = (0..source.len())
        .map(|i| {
            let p = source.path(i).unwrap();
            (
                p.strip_prefix(dir.path()).unwrap().to_path_buf(),
                source.label(i).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (PathBuf::from("a/zero.jpeg"), 0),
            (PathBuf::from("b/nested/two.JPEG"), 1),
            (PathBuf::from("b/one.jpg"), 1),
        ]
    );
}

#[test]
fn list_file_relative_paths_crlf_bom_comments_spaces() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub dir");
    std::fs::create_dir_all(&sub).unwrap();
    for (i, name) in ["my photo 0.jpg", "b.jpg", "c d.jpg"].iter().enumerate() {
        std::fs::write(sub.join(name), common::id_jpeg(i)).unwrap();
    }
    let abs = dir.path().join("absolute.jpg");
    std::fs::write(&abs, common::id_jpeg(3)).unwrap();
    let mut list = b"\xEF\xBB\xBF# comment line\r\n".to_vec();
    list.extend_from_slice(b"sub dir/my photo 0.jpg\t5\r\n");
    list.extend_from_slice(b"\r\n   \r\n");
    list.extend_from_slice(b"  sub dir/b.jpg   6  \r\n");
    list.extend_from_slice(b"# sub dir/ignored.jpg 9\n");
    list.extend_from_slice(b"sub dir/c d.jpg 007\n");
    list.extend_from_slice(format!("{}\t+8", abs.display()).as_bytes()); // no final newline
    let list_path = dir.path().join("train.txt");
    std::fs::write(&list_path, &list).unwrap();
    for source in [
        Source::from_list_file(&list_path).unwrap(),
        Source::open(&list_path).unwrap(),
    ] {
        assert_eq!(source.len(), 4);
        assert!(source.class_names().is_none());
        assert_eq!(source.path(0).unwrap(), sub.join("my photo 0.jpg"));
        assert_eq!(source.path(1).unwrap(), sub.join("b.jpg"));
        assert_eq!(source.path(2).unwrap(), sub.join("c d.jpg"));
        assert_eq!(source.path(3).unwrap(), abs);
        let labels: Vec<u32> = (0..4).map(|i| source.label(i).unwrap()).collect();
        assert_eq!(labels, [5, 6, 7, 8]);
        assert_eq!(source.num_classes(), 9);
        let loader = Loader::builder(source)
            .batch_size(4)
            .shuffle(false)
            .image_size(8)
            .dtype(Dtype::U8)
            .build()
            .unwrap();
        let batches = common::collect_ok(loader.epoch(0));
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].labels(), &[5, 6, 7, 8]);
        common::assert_pixels_follow_indices(&batches[0]);
    }
}

#[test]
fn list_file_relative_to_its_own_folder() {
    // The list lives in one folder and is read from another working directory's point of view:
    // relative paths resolve against the list's folder, not the process's.
    let corpus = IdCorpus::new(3);
    let nested = corpus.dir.path().join("lists");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(
        nested.join("l.txt"),
        "../img_0002.jpg 1\n../img_0000.jpg 0\n",
    )
    .unwrap();
    let source = Source::from_list_file(nested.join("l.txt")).unwrap();
    let loader = Loader::builder(source)
        .batch_size(2)
        .shuffle(false)
        .image_size(8)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let b = common::collect_ok(loader.epoch(0)).pop().unwrap();
    assert_eq!(b.labels(), &[1, 0]);
    let px = b.as_u8().unwrap();
    assert_eq!(common::decode_id(&px[..3]), 2);
    assert_eq!(common::decode_id(&px[8 * 8 * 3..]), 0);
}

#[test]
fn from_entries() {
    let corpus = IdCorpus::new(5);
    let entries: Vec<(PathBuf, u32)> = corpus
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), 100 + i as u32))
        .collect();
    let source = Source::from_entries(entries.clone()).unwrap();
    assert_eq!(source.len(), 5);
    for (i, (p, l)) in entries.iter().enumerate() {
        assert_eq!(source.path(i).as_ref(), Some(p));
        assert_eq!(source.label(i), Some(*l));
    }
    let loader = Loader::builder(source)
        .batch_size(2)
        .image_size(8)
        .dtype(Dtype::U8)
        .seed(3)
        .build()
        .unwrap();
    assert_eq!(loader.len(), 5);
    let batches = common::collect_ok(loader.epoch(0));
    for b in &batches {
        common::assert_pixels_follow_indices(b);
        for (&i, &l) in b.indices().iter().zip(b.labels()) {
            assert_eq!(l, 100 + i as u32);
        }
    }
    let mut seen = common::indices_of(&batches);
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3, 4]);
    let empty: Vec<(PathBuf, u32)> = Vec::new();
    let e = Source::from_entries(empty).unwrap_err();
    assert!(
        matches!(e.kind(), imagefeed::ErrorKind::Source { .. }),
        "{e:?}"
    );
}

#[test]
fn two_epochs_of_one_loader_can_run_interleaved() {
    let corpus = IdCorpus::new(25);
    let loader = Loader::builder(corpus.source())
        .batch_size(4)
        .image_size(8)
        .dtype(Dtype::U8)
        .seed(6)
        .build()
        .unwrap();
    let (mut a, mut b) = (loader.epoch(0), loader.epoch(1));
    let (mut order_a, mut order_b) = (Vec::new(), Vec::new());
    loop {
        let (x, y) = (a.next(), b.next());
        if x.is_none() && y.is_none() {
            break;
        }
        for (item, order) in [(x, &mut order_a), (y, &mut order_b)] {
            if let Some(batch) = item {
                let batch = batch.unwrap();
                common::assert_pixels_follow_indices(&batch);
                order.extend_from_slice(batch.indices());
            }
        }
    }
    // Each is its epoch, exactly as when run alone.
    assert_eq!(order_a, order(&loader, 0));
    assert_eq!(order_b, order(&loader, 1));
    order_a.sort_unstable();
    assert_eq!(order_a, (0..25).collect::<Vec<u64>>());
}

#[test]
fn stats_split_the_decode_threads_time_by_step() {
    let loader = Loader::builder(common::corpus_source())
        .batch_size(16)
        .decode_threads(2)
        .build()
        .unwrap();
    let images: usize = common::collect_ok(loader.epoch(0))
        .iter()
        .map(Batch::len)
        .sum();
    let s = loader.stats();
    assert_eq!(s.images as usize, images);
    for (step, d) in [
        ("read", s.read),
        ("decode", s.decode),
        ("resize", s.resize),
        ("batch write", s.batch_write),
    ] {
        assert!(!d.is_zero(), "{step} time not measured: {s:?}");
    }
    // The steps are parts of the decode threads' busy time.
    let steps = s.read + s.decode + s.resize;
    assert!(
        steps <= s.decode_busy,
        "read + decode + resize {steps:?} > busy {:?}",
        s.decode_busy
    );
    assert!(
        steps.as_secs_f64() >= 0.5 * s.decode_busy.as_secs_f64(),
        "{s:?}"
    );
}
