//! The API a training framework's adapter builds on: batches taken by value, typed accessors
//! with errors, the iterator's size hint, and a state that refuses another plan.

use imagefeed::{Dtype, Loader, LoaderState, OwnedImages, ShardPadding, Source};

use crate::common::{corpus_source, subset};

#[test]
fn a_batch_taken_by_value_holds_what_its_accessors_show() {
    let source = subset(&corpus_source(), 10);
    for dtype in [Dtype::F32, Dtype::U8] {
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .image_size(24)
            .dtype(dtype)
            .build()
            .unwrap();
        let borrowed: Vec<_> = loader.epoch(3).map(|b| b.unwrap()).collect();
        let owned: Vec<_> = loader
            .epoch(3)
            .map(|b| b.unwrap().into_owned().unwrap())
            .collect();
        assert_eq!(borrowed.len(), 3);
        for (b, o) in borrowed.iter().zip(&owned) {
            assert_eq!(o.shape, b.shape());
            assert_eq!(o.labels, b.labels());
            assert_eq!(o.indices, b.indices());
            match (&o.images, dtype) {
                (OwnedImages::F32(v), Dtype::F32) => assert_eq!(v, b.as_f32().unwrap()),
                (OwnedImages::U8(v), Dtype::U8) => assert_eq!(v, b.as_u8().unwrap()),
                _ => panic!("wrong dtype"),
            }
        }
        // The last batch holds 2 images: the owned buffer is cut to them.
        assert_eq!(owned[2].shape[0], 2);
    }
}

#[test]
fn typed_accessors_name_the_dtype_the_batch_has() {
    let loader = Loader::builder(subset(&corpus_source(), 2))
        .image_size(8)
        .dtype(Dtype::F16)
        .build()
        .unwrap();
    let batch = loader.epoch(0).next().unwrap().unwrap();
    assert!(batch.as_f16().is_ok());
    let e = batch.as_f32().unwrap_err().to_string();
    assert!(e.contains("f16") && e.contains("as_f16()"), "{e}");
}

#[test]
fn the_size_hint_bounds_the_batches_left() {
    let loader = Loader::builder(subset(&corpus_source(), 10))
        .batch_size(4)
        .image_size(8)
        .build()
        .unwrap();
    let mut batches = loader.epoch(0);
    assert_eq!(batches.size_hint(), (0, Some(4)));
    batches.next().unwrap().unwrap();
    assert_eq!(batches.size_hint(), (0, Some(3)));
    assert_eq!(batches.by_ref().count(), 2);
    assert_eq!(batches.size_hint(), (0, Some(0)));
}

/// A state records fingerprints of the source and of the settings that order the epoch: a
/// loader over another source, or with another order (unshuffled) or padding, refuses it by name.
#[test]
fn a_state_from_another_source_or_plan_is_refused_by_name() {
    let source = subset(&corpus_source(), 12);
    let build = |s: Source, shuffled: bool, padding: ShardPadding| {
        Loader::builder(s)
            .batch_size(2)
            .image_size(8)
            .shuffle(shuffled)
            .shard_padding(padding)
            .seed(3)
            .build()
            .unwrap()
    };
    let loader = build(source.clone(), true, ShardPadding::EqualBatches);
    let mut batches = loader.epoch(1);
    batches.next().unwrap().unwrap();
    let state = batches.state();
    drop(batches);
    assert_ne!((state.source, state.settings), (0, 0));
    // Through its line, as a checkpoint keeps it.
    let line = state.to_string();
    let parsed: LoaderState = line.parse().unwrap();
    assert_eq!(parsed, state);
    assert_eq!(loader.resume(&parsed).count(), 5);
    let refused = |l: &Loader| l.resume(&parsed).next().unwrap().unwrap_err().to_string();
    let e = refused(&build(
        subset(&corpus_source(), 11),
        true,
        ShardPadding::EqualBatches,
    ));
    assert!(e.contains("another source"), "{e}");
    let e = refused(&build(source.clone(), false, ShardPadding::EqualBatches));
    assert!(e.contains("other settings that order the epoch"), "{e}");
    let e = refused(&build(source.clone(), true, ShardPadding::Drop));
    assert!(e.contains("other settings"), "{e}");
    // A line without fingerprints (or with the command line's former `plan=`) is taken as is.
    let old = "imagefeed-state-v1 seed=3 epoch=1 position=2 rank=0 world_size=1 plan=00ff";
    let old: LoaderState = old.parse().unwrap();
    assert_eq!((old.source, old.settings), (0, 0));
    assert_eq!(loader.resume(&old).count(), 5);
    assert!(format!("{line} extra=1").parse::<LoaderState>().is_err());
}

/// `Source::split`: a seeded split that keeps every class in both parts of class folders
/// (sorted by class), and splits tar shards by whole shards; the parts are disjoint, cover the
/// source, read back with the right labels, and are the same for the same seed.
#[test]
fn split_holds_out_every_class_or_whole_shards_the_same_way_each_time() {
    use std::collections::BTreeSet;
    let all = Source::from_dir(crate::common::testdata("classes")).unwrap();
    let paths = |s: &Source| -> BTreeSet<std::path::PathBuf> {
        (0..s.len()).map(|i| s.path(i).unwrap()).collect()
    };
    for seed in 0..20 {
        let (train, held) = all.split(0.25, seed).unwrap();
        let (t, h) = (paths(&train), paths(&held));
        assert!(t.is_disjoint(&h));
        assert_eq!(&t | &h, paths(&all));
        for part in [&train, &held] {
            let classes: BTreeSet<u32> = (0..part.len()).filter_map(|i| part.label(i)).collect();
            assert_eq!(classes.len(), 3, "seed {seed}: every class in each part");
            assert_eq!(part.class_names(), all.class_names());
        }
        for i in 0..held.len() {
            let p = held.path(i).unwrap();
            let j = (0..all.len())
                .find(|&j| all.path(j).as_ref() == Some(&p))
                .unwrap();
            assert_eq!(held.label(i), all.label(j));
        }
        let again = all.split(0.25, seed).unwrap();
        assert_eq!(paths(&again.1), h);
    }
    assert_ne!(
        paths(&all.split(0.5, 1).unwrap().1),
        paths(&all.split(0.5, 2).unwrap().1)
    );
    assert!(all.split(0.0, 0).is_err() && all.split(1.0, 0).is_err());
    assert!(all.split(f64::NAN, 0).is_err());

    // Tar shards: by whole shards, read back with their labels.
    let dir = tempfile::tempdir().unwrap();
    imagefeed::write_shards(&all, dir.path(), 2, None).unwrap();
    let shards = Source::open(dir.path()).unwrap();
    let (train, held) = shards.split(0.3, 5).unwrap();
    assert_eq!(train.len() + held.len(), shards.len());
    assert!(held.len() >= 2 && held.len() <= 4, "{}", held.len());
    let (t, h) = (paths(&train), paths(&held));
    assert!(t.is_disjoint(&h));
    assert_eq!(&t | &h, paths(&shards));
    for part in [&train, &held] {
        let loader = Loader::builder(part.clone())
            .image_size(16)
            .batch_size(3)
            .build()
            .unwrap();
        let mut seen = BTreeSet::new();
        for b in loader.epoch(0) {
            let b = b.unwrap();
            for (&i, &l) in b.indices().iter().zip(b.labels()) {
                assert_eq!(Some(l), part.label(i as usize));
                assert!(seen.insert(i));
            }
        }
        assert_eq!(seen.len(), part.len());
    }
    let one = tempfile::tempdir().unwrap();
    imagefeed::write_shards(&all, one.path(), 100, None).unwrap();
    let e = Source::open(one.path()).unwrap().split(0.5, 0).unwrap_err();
    assert!(e.to_string().contains("one shard"), "{e}");
}
