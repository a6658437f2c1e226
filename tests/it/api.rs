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
