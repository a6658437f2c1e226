//! The adapter against imagefeed itself, on the repository's `testdata/` (11 images, 3
//! classes), with the ndarray backend.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::NdArray;
use burn::data::dataloader::DataLoader;
use imagefeed::{Dtype, Layout, Loader, LoaderBuilder, Source};
use imagefeed_burn::{Error, ImageBatch, ImagefeedDataLoader};

type B = NdArray;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn settings(source: Source) -> LoaderBuilder {
    Loader::builder(source)
        .image_size(24)
        .batch_size(4)
        .layout(Layout::Nchw)
        .normalize([0.5; 3], [0.25; 3])
        .decode_threads(2)
        .seed(3)
}

fn classes() -> ImagefeedDataLoader<B> {
    let source = Source::from_dir(testdata("classes")).unwrap();
    ImagefeedDataLoader::new(source, settings, &NdArrayDevice::Cpu).unwrap()
}

/// Every batch of `epoch` straight from imagefeed: (shape, `as_f32` images, labels).
fn reference(loader: &Loader, epoch: u64) -> Vec<([usize; 4], Vec<f32>, Vec<u32>)> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.unwrap();
            (b.shape(), b.as_f32().unwrap().to_vec(), b.labels().to_vec())
        })
        .collect()
}

fn as_parts(batch: &ImageBatch<B>) -> ([usize; 4], Vec<f32>, Vec<u32>) {
    let images = batch.images.to_data().to_vec::<f32>().unwrap();
    let labels = batch
        .targets
        .to_data()
        .convert::<u32>()
        .to_vec::<u32>()
        .unwrap();
    (batch.images.dims(), images, labels)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn tensors_equal_as_f32_bit_for_bit_epoch_after_epoch() {
    let dl = classes();
    for epoch in 0..3 {
        assert_eq!(dl.next_epoch(), epoch);
        let got: Vec<_> = dl.iter().map(|b| as_parts(&b)).collect();
        let want = reference(dl.loader().unwrap(), epoch);
        assert_eq!(got.len(), want.len());
        assert_eq!(got.len(), 3, "11 images in batches of 4");
        for ((gs, gi, gl), (ws, wi, wl)) in got.iter().zip(&want) {
            assert_eq!(gs, ws);
            assert_eq!(bits(gi), bits(wi), "epoch {epoch}: images differ");
            assert_eq!(gl, wl, "epoch {epoch}: labels differ");
        }
    }
    assert!(dl.take_error().is_none());
}

#[test]
fn other_dtypes_convert_to_the_backends_float() {
    for dtype in [Dtype::U8, Dtype::F16, Dtype::Bf16] {
        let source = Source::from_dir(testdata("classes")).unwrap();
        let make = move |s: Source| Loader::builder(s).image_size(16).batch_size(8).dtype(dtype);
        let dl = ImagefeedDataLoader::<B>::new(source, make, &NdArrayDevice::Cpu).unwrap();
        let loader = dl.loader().unwrap();
        let want: Vec<Vec<f32>> = loader
            .epoch(0)
            .map(|b| {
                let b = b.unwrap();
                match b.images() {
                    imagefeed::Images::U8(v) => v.iter().map(|&x| f32::from(x)).collect(),
                    imagefeed::Images::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
                    imagefeed::Images::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        let got: Vec<Vec<f32>> = dl
            .iter()
            .map(|b| {
                assert_eq!(
                    b.images.dims()[1..],
                    [16, 16, 3],
                    "NHWC is imagefeed's default"
                );
                b.images.to_data().to_vec::<f32>().unwrap()
            })
            .collect();
        assert_eq!(got, want, "{dtype:?}");
    }
}

#[test]
fn progress_counts_images_of_samples_per_epoch() {
    let dl = classes();
    assert_eq!(dl.num_items(), 11);
    let mut it = dl.iter();
    let p = it.progress();
    assert_eq!((p.items_processed, p.items_total), (0, 11));
    let mut seen = Vec::new();
    while let Some(b) = it.next() {
        let p = it.progress();
        seen.push(p.items_processed);
        assert_eq!(p.items_total, 11);
        assert_eq!(
            b.targets.dims()[0],
            4.min(11 - (p.items_processed - b.targets.dims()[0]))
        );
    }
    assert_eq!(seen, [4, 8, 11]);
    assert!(it.next().is_none(), "an ended epoch stays ended");
}

#[test]
fn slice_is_a_loader_over_that_range_with_the_same_settings() {
    let dl = classes();
    let source = dl.loader().unwrap().source();
    let part = dl.slice(2, 9);
    assert_eq!(part.num_items(), 7);
    // The same settings: NCHW, 24 px.
    let batches: Vec<_> = part.iter().collect();
    assert_eq!(
        batches
            .iter()
            .map(|b| b.images.dims()[0])
            .collect::<Vec<_>>(),
        [4, 3]
    );
    assert_eq!(batches[0].images.dims()[1..], [3, 24, 24]);
    // Exactly the labels of samples 2..9, in some order.
    let mut got: Vec<u32> = batches.iter().flat_map(|b| as_parts(b).2).collect();
    let mut want: Vec<u32> = (2..9).map(|i| source.label(i).unwrap()).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    // And the images are those a loader built on that range by hand delivers.
    let by_hand = settings(
        Source::from_entries((2..9).map(|i| (source.path(i).unwrap(), source.label(i).unwrap())))
            .unwrap(),
    )
    .build()
    .unwrap();
    let want: Vec<_> = reference(&by_hand, 0);
    let got: Vec<_> = batches.iter().map(as_parts).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, bits(&g.1), &g.2), (w.0, bits(&w.1), &w.2));
    }
    // A range past the end is clamped; an empty one yields nothing, without a panic.
    assert_eq!(dl.slice(8, 100).num_items(), 3);
    let empty = dl.slice(5, 5);
    assert_eq!(empty.num_items(), 0);
    assert_eq!(empty.iter().count(), 0);
}

#[test]
fn slice_of_tar_shards_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let source = Source::from_dir(testdata("classes")).unwrap();
    imagefeed::write_shards(&source, dir.path(), 4, None).unwrap();
    let shards = Source::open(dir.path()).unwrap();
    let dl = ImagefeedDataLoader::<B>::new(shards, settings, &NdArrayDevice::Cpu).unwrap();
    assert_eq!(dl.iter().map(|b| b.targets.dims()[0]).sum::<usize>(), 11);
    let part = dl.slice(0, 4);
    assert_eq!(part.num_items(), 0);
    assert_eq!(part.iter().count(), 0);
}

#[test]
fn to_device_shares_the_loader_and_its_epoch_counter() {
    let dl = classes();
    let _ = dl.iter().count(); // epoch 0
    let moved = dl.to_device(&NdArrayDevice::Cpu);
    assert_eq!(moved.num_items(), 11);
    let got: Vec<_> = moved
        .iter()
        .map(|b| {
            assert_eq!(b.images.device(), NdArrayDevice::Cpu);
            assert_eq!(b.targets.device(), NdArrayDevice::Cpu);
            as_parts(&b)
        })
        .collect();
    // The moved loader ran epoch 1, and the original goes on with epoch 2.
    let want = reference(dl.loader().unwrap(), 1);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, bits(&g.1), &g.2), (w.0, bits(&w.1), &w.2));
    }
    assert_eq!(dl.next_epoch(), 2);
    dl.set_next_epoch(1);
    let again: Vec<_> = moved.iter().map(|b| as_parts(&b)).collect();
    assert_eq!(again, got, "epoch 1 again");
}

#[test]
fn a_corrupt_file_ends_the_epoch_and_the_error_is_kept() {
    let mut entries: Vec<(PathBuf, u32)> = (0..3)
        .map(|i| (testdata(&format!("classes/cat/cat_{i}.jpg")), 0))
        .collect();
    entries.push((testdata("corrupt/garbage.jpg"), 1));
    let source = Source::from_entries(entries).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let dl = ImagefeedDataLoader::<B>::new(
        source,
        |s| {
            Loader::builder(s)
                .image_size(16)
                .batch_size(2)
                .shuffle(false)
        },
        &NdArrayDevice::Cpu,
    )
    .unwrap()
    .on_error(move |e| {
        assert!(e.to_string().contains("garbage.jpg"), "{e}");
        seen.fetch_add(1, Ordering::Relaxed);
    });
    let delivered = dl.iter().count();
    assert!(
        delivered < 2,
        "the batch holding the corrupt file is not delivered"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    let e = dl.take_error().expect("the error is kept");
    match &e {
        Error::Imagefeed(inner) => {
            assert!(inner.path().unwrap().ends_with("garbage.jpg"));
        }
        other => panic!("{other:?}"),
    }
    assert!(dl.take_error().is_none(), "taken");
    // The next epoch runs (and fails the same way).
    let _ = dl.iter().count();
    assert!(dl.take_error().is_some());
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// A multi-label list (a TSV column of label lists) as a multi-hot float tensor and as padded
/// ints, row for row with the batch's samples.
#[test]
fn a_field_of_label_lists_is_a_multi_hot_or_padded_tensor() {
    use imagefeed::Target;
    use imagefeed_burn::{field_tensor, FieldTensor};
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "cat/cat_0.jpg",
        "dog/dog_0.jpg",
        "fish/fish_0.jpg",
        "cat/cat_1.jpg",
    ];
    let labels = ["0 2", "1", "", "[3, 0, 1]"];
    let mut list = String::from("path\tlabel\tlabels\n");
    for (k, (f, l)) in files.iter().zip(labels).enumerate() {
        list.push_str(&format!(
            "{}\t{k}\t{l}\n",
            testdata("classes").join(f).display()
        ));
    }
    std::fs::write(dir.path().join("list.tsv"), list).unwrap();
    let loader = Loader::builder(Source::open(dir.path().join("list.tsv")).unwrap())
        .image_size(16)
        .batch_size(4)
        .field("labels")
        .build()
        .unwrap();
    let device = NdArrayDevice::Cpu;
    let mut seen = 0;
    for batch in loader.epoch(0) {
        let batch = batch.unwrap();
        let FieldTensor::Float(hot) =
            field_tensor::<B>(&batch, "labels", Target::MultiHot { classes: 4 }, &device).unwrap()
        else {
            panic!("a multi-hot target is floats")
        };
        assert_eq!(hot.dims(), [batch.len(), 4]);
        let hot = hot.to_data().to_vec::<f32>().unwrap();
        let FieldTensor::Int(padded) =
            field_tensor::<B>(&batch, "labels", Target::Padded { pad: -1.0 }, &device).unwrap()
        else {
            panic!("integer lists stay integers")
        };
        assert_eq!(padded.dims(), [batch.len(), 3]);
        let padded = padded.to_data().convert::<i64>().to_vec::<i64>().unwrap();
        for (row, &sample) in batch.labels().iter().enumerate() {
            let want: Vec<i64> = labels[sample as usize]
                .trim_matches(|c| c == '[' || c == ']')
                .split([' ', ','])
                .filter(|w| !w.is_empty())
                .map(|w| w.parse().unwrap())
                .collect();
            for c in 0..4 {
                let on = want.contains(&(c as i64));
                assert_eq!(
                    hot[row * 4 + c],
                    if on { 1.0 } else { 0.0 },
                    "sample {sample}"
                );
            }
            let mut row_want = want.clone();
            row_want.resize(3, -1);
            assert_eq!(
                &padded[row * 3..row * 3 + 3],
                &row_want[..],
                "sample {sample}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 4);
    let batch = loader.epoch(1).next().unwrap().unwrap();
    let e = field_tensor::<B>(&batch, "caption", Target::Dense, &device).unwrap_err();
    assert!(
        e.to_string()
            .contains("`caption` is not one of the loader's fields"),
        "{e}"
    );
}
