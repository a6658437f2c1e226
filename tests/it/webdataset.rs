//! Tar shards in the WebDataset layout: writing them, reading them as streams,
//! sharding and resuming over them, and hostile archives.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use imagefeed::{
    write_shards, Batch, Dtype, ErrorKind, Loader, LoaderState, OnError, Source, SourceKind,
};

use crate::common::{corpus, subset};

/// The original sample index a shard sample's key encodes (`…[000000042.jpg]`).
fn key_of(source: &Source, i: usize) -> usize {
    let p = source.path(i).unwrap().to_string_lossy().into_owned();
    let member = p.rsplit('[').next().unwrap();
    member.split('.').next().unwrap().parse().unwrap()
}

fn shards_of(n: usize, shard_size: usize) -> (Source, tempfile::TempDir) {
    let full = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    let source = subset(&full, n);
    let dir = tempfile::tempdir().unwrap();
    let written = write_shards(&source, dir.path(), shard_size, Some(3)).unwrap();
    assert_eq!(written.samples as usize, n);
    assert_eq!(written.shards.len(), n.div_ceil(shard_size));
    (source, dir)
}

#[test]
fn shards_round_trip_every_sample_with_its_label_and_pixels() {
    let (files, dir) = shards_of(64, 10);
    let tar = Source::open(dir.path()).unwrap();
    assert_eq!(tar.kind(), SourceKind::TarShards);
    assert_eq!(tar.len(), files.len());
    let mut keys = BTreeSet::new();
    for i in 0..tar.len() {
        let k = key_of(&tar, i);
        assert_eq!(tar.label(i), files.label(k), "sample {i} (key {k})");
        keys.insert(k);
    }
    assert_eq!(keys.len(), 64, "every source sample once");
    // Same pixels as decoding the original files.
    let load = |s: Source| -> Vec<Batch> {
        Loader::builder(s)
            .image_size(32)
            .batch_size(8)
            .shuffle(false)
            .dtype(Dtype::U8)
            .build()
            .unwrap()
            .epoch(0)
            .map(|b| b.unwrap())
            .collect()
    };
    let from_files = load(files.clone());
    let from_tar = load(tar.clone());
    let sample = 32 * 32 * 3;
    let pixels = |batches: &[Batch], i: usize| -> Vec<u8> {
        let b = &batches[i / 8];
        b.as_u8().unwrap()[(i % 8) * sample..(i % 8 + 1) * sample].to_vec()
    };
    for i in 0..tar.len() {
        assert_eq!(from_tar[i / 8].indices()[i % 8], i as u64);
        assert_eq!(
            pixels(&from_tar, i),
            pixels(&from_files, key_of(&tar, i)),
            "sample {i}"
        );
    }
}

#[test]
fn tar_epochs_visit_shards_in_a_seeded_order_and_shuffle_through_the_buffer() {
    let (_, dir) = shards_of(40, 8);
    let tar = Source::open(dir.path()).unwrap();
    let order = |seed: u64, epoch: u64, buffer: usize| -> Vec<u64> {
        Loader::builder(tar.clone())
            .image_size(16)
            .batch_size(4)
            .seed(seed)
            .shuffle_buffer(buffer)
            .build()
            .unwrap()
            .epoch(epoch)
            .flat_map(|b| b.unwrap().indices().to_vec())
            .collect()
    };
    let a = order(1, 0, 0);
    assert_eq!(a.len(), 40);
    assert_eq!(a.iter().copied().collect::<BTreeSet<_>>().len(), 40);
    // Without a buffer, shards are read whole, in member order.
    for chunk in a.chunks(8) {
        assert_eq!(chunk[0] % 8, 0);
        assert!(chunk.windows(2).all(|w| w[1] == w[0] + 1), "{chunk:?}");
    }
    assert_ne!(a, (0..40).collect::<Vec<u64>>(), "shard order is shuffled");
    assert_eq!(a, order(1, 0, 0), "deterministic");
    assert_ne!(a, order(1, 1, 0), "another epoch, another shard order");
    // The shuffle buffer mixes samples across shards.
    let mixed = order(1, 0, 16);
    assert_eq!(mixed.iter().copied().collect::<BTreeSet<_>>().len(), 40);
    assert_ne!(mixed, a);
    assert_eq!(mixed, order(1, 0, 16));
}

#[test]
fn eight_ranks_over_tar_shards_are_disjoint_complete_and_equal_in_batches() {
    for (n, shard_size) in [(64usize, 10usize), (61, 7), (19, 4)] {
        let (_, dir) = shards_of(n, shard_size);
        let tar = Source::open(dir.path()).unwrap();
        for (seed, bs) in [(1u64, 4usize), (2, 3)] {
            for epoch in 0..2 {
                let mut all = Vec::new();
                let mut counts = BTreeSet::new();
                for rank in 0..8 {
                    let l = Loader::builder(tar.clone())
                        .image_size(16)
                        .batch_size(bs)
                        .seed(seed)
                        .shuffle_buffer(5)
                        .shard(rank, 8)
                        .build()
                        .unwrap();
                    let b: Vec<Batch> = l.epoch(epoch).map(|b| b.unwrap()).collect();
                    assert_eq!(b.len(), l.batches_per_epoch());
                    counts.insert(b.len());
                    all.push(
                        b.iter()
                            .flat_map(|b| b.indices().to_vec())
                            .collect::<Vec<_>>(),
                    );
                }
                assert_eq!(counts.len(), 1, "n={n}: batch counts {counts:?}");
                let union: BTreeSet<u64> = all.iter().flatten().copied().collect();
                assert_eq!(union, (0..n as u64).collect(), "n={n}: not complete");
                let total: usize = all.iter().map(Vec::len).sum();
                assert!(total - union.len() < 8, "n={n}: too many repeats");
            }
        }
    }
}

/// The indices of epoch `epoch` delivered by a loader from `make` stopped after `cut`
/// batches, then by a fresh one resumed from its state (saved as text and parsed back).
fn cut_and_resume(make: &dyn Fn() -> Loader, epoch: u64, cut: usize) -> Vec<u64> {
    let loader = make();
    let mut it = loader.epoch(epoch);
    let mut got = Vec::new();
    for _ in 0..cut {
        got.extend_from_slice(it.next().unwrap().unwrap().indices());
    }
    let state: LoaderState = it.state().to_string().parse().unwrap();
    drop(it);
    got.extend(
        make()
            .resume(&state)
            .flat_map(|b| b.unwrap().indices().to_vec()),
    );
    got
}

#[test]
fn tar_resume_delivers_exactly_the_rest() {
    let (_, dir) = shards_of(64, 9);
    let tar = Source::open(dir.path()).unwrap();
    for buffer in [0usize, 6] {
        let make = || {
            Loader::builder(tar.clone())
                .image_size(16)
                .batch_size(1)
                .seed(4)
                .shuffle_buffer(buffer)
                .build()
                .unwrap()
        };
        let reference: Vec<u64> = make()
            .epoch(2)
            .flat_map(|b| b.unwrap().indices().to_vec())
            .collect();
        // Cuts while the buffer fills, in the middle, and while it drains at the end.
        for cut in [1usize, 5, 37, 59, 63] {
            let got = cut_and_resume(&make, 2, cut);
            assert_eq!(got, reference, "buffer {buffer}, cut after {cut}");
        }
    }
}

#[test]
fn tar_resume_with_a_buffer_and_skipped_samples_is_exact() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("{i:03}")).collect();
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let data = if i % 7 == 3 {
            b"broken".to_vec()
        } else {
            jpg.clone()
        };
        members.push((format!("{n}.jpg"), data));
        members.push((format!("{n}.cls"), (i % 5).to_string().into_bytes()));
    }
    for (k, chunk) in members.chunks(20).enumerate() {
        let m: Vec<(&str, &[u8])> = chunk
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        write(dir.path(), &format!("s{k}.tar"), &tar_of(&m));
    }
    let tar = Source::open(dir.path()).unwrap();
    let make = || {
        Loader::builder(tar.clone())
            .image_size(16)
            .batch_size(2)
            .seed(9)
            .shuffle_buffer(5)
            .on_error(OnError::SKIP_ALL)
            .build()
            .unwrap()
    };
    let reference: Vec<u64> = make()
        .epoch(0)
        .flat_map(|b| b.unwrap().indices().to_vec())
        .collect();
    assert_eq!(reference.len(), 30 - 4);
    for cut in [1usize, 4, 8, 12] {
        let got = cut_and_resume(&make, 0, cut);
        assert_eq!(got, reference, "cut after {cut} batches");
    }
}

#[test]
fn tar_source_with_a_cache_replays_from_the_cache() {
    let (_, dir) = shards_of(20, 6);
    let tar = Source::open(dir.path()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let l = Loader::builder(tar)
        .image_size(16)
        .batch_size(4)
        .dtype(Dtype::U8)
        .cache(cache.path().join("c.bin"))
        .build()
        .unwrap();
    let first: Vec<Batch> = l.epoch(0).map(|b| b.unwrap()).collect();
    let second: Vec<Batch> = l.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!(l.stats().cache_hits, 20);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.indices(), b.indices());
        assert_eq!(a.as_u8().unwrap(), b.as_u8().unwrap());
    }
}

#[test]
fn write_shards_never_overwrites() {
    let (source, dir) = shards_of(12, 5);
    let before = std::fs::read(dir.path().join("shard-000000.tar")).unwrap();
    let e = write_shards(&source, dir.path(), 5, None).unwrap_err();
    assert!(e.to_string().contains("already holds shards"), "{e}");
    assert_eq!(
        std::fs::read(dir.path().join("shard-000000.tar")).unwrap(),
        before
    );
    assert!(write_shards(&source, dir.path().join("sub"), 0, None).is_err());
    // A folder holding only a sidecar index of an earlier run is refused too.
    let leftover = tempfile::tempdir().unwrap();
    std::fs::write(leftover.path().join("shard-000000.tar.idx"), b"x").unwrap();
    let e = write_shards(&source, leftover.path(), 5, None).unwrap_err();
    assert!(e.to_string().contains("already holds shards"), "{e}");
    assert_eq!(
        std::fs::read(leftover.path().join("shard-000000.tar.idx")).unwrap(),
        b"x"
    );
}

#[test]
fn write_shards_names_a_missing_sample_and_keeps_no_partial_shard() {
    let dir = tempfile::tempdir().unwrap();
    let good = crate::common::testdata("photos/photo_0.jpg");
    let source =
        Source::from_entries([(good.clone(), 0), (dir.path().join("gone.jpg"), 1)]).unwrap();
    let out = dir.path().join("out");
    let e = write_shards(&source, &out, 10, None).unwrap_err();
    assert!(e.to_string().contains("gone.jpg"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert!(left.is_empty(), "no partial shard left: {left:?}");
}

/// A tar of `(name, bytes)` members.
fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

/// A shard cut anywhere before its end-of-archive block is an error naming it: cut at a
/// member's end or in its padding it read as a shorter, valid archive, and the samples after
/// the cut were lost without a word (a copy cut short at a block or page boundary).
#[test]
fn a_shard_cut_at_a_member_boundary_is_truncated_not_shorter() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let good = tar_of(&[
        ("a.jpg", &jpg),
        ("a.cls", b"3"),
        ("b.jpg", &jpg),
        ("b.cls", b"4\n"),
    ]);
    // `tar::Builder` ends the archive with two zero blocks; losing the second loses nothing.
    let complete = good.len() - 512;
    let dir = tempfile::tempdir().unwrap();
    let mut cuts: Vec<usize> = (0..=good.len()).step_by(512).collect();
    cuts.extend((1..good.len()).step_by(509));
    for len in cuts {
        let p = write(dir.path(), "s.tar", &good[..len]);
        match Source::from_tar_shards([&p]) {
            Ok(s) => {
                assert!(
                    len >= complete,
                    "cut at {len} of {} read as {} samples",
                    good.len(),
                    s.len()
                );
                assert_eq!((s.len(), s.label(1)), (2, Some(4)));
            }
            Err(e) => {
                assert!(len < complete, "cut at {len}: {e}");
                assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
                assert!(e.to_string().contains("s.tar"), "{e}");
            }
        }
    }
    // A gzip-compressed shard named .tar, and a folder of only compressed ones, say so.
    let mut gz = b"\x1f\x8b\x08\0\0\0\0\0\0\x03".to_vec();
    gz.extend((0..2000u32).map(|i| (i * 7919 % 251) as u8));
    let p = write(dir.path(), "s.tar", &gz);
    let e = Source::from_tar_shards([&p]).unwrap_err().to_string();
    assert!(
        e.contains("s.tar") && e.contains("gzip-compressed") && e.contains("gunzip"),
        "{e}"
    );
    let only_gz = dir.path().join("gz");
    std::fs::create_dir(&only_gz).unwrap();
    write(&only_gz, "shard-0.tar.gz", &gz);
    let e = Source::open(&only_gz).unwrap_err().to_string();
    assert!(
        e.contains("compressed tar files") && e.contains("shard-0.tar.gz"),
        "{e}"
    );
    // At a member boundary the message says so.
    let a_end = 512 + jpg.len().div_ceil(512) * 512 + 1024; // a.jpg and a.cls, headers and data
    let p = write(dir.path(), "s.tar", &good[..a_end]);
    let e = Source::from_tar_shards([&p]).unwrap_err().to_string();
    assert!(
        e.contains("truncated") && e.contains("end-of-archive"),
        "{e}"
    );
}

#[test]
fn hostile_shards_get_errors_naming_the_shard() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = tar_of(&[
        ("a.jpg", &jpg),
        ("a.cls", b"3"),
        ("b.jpg", &jpg),
        ("b.cls", b"4\n"),
    ]);
    // Truncated: cut inside the second image.
    let cut = write(d, "cut.tar", &good[..good.len() / 2 + 700]);
    let e = Source::from_tar_shards([&cut]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    assert!(
        e.to_string().contains("cut.tar") && e.to_string().contains("truncated"),
        "{e}"
    );
    // A label that is not a number.
    let bad_cls = write(d, "cls.tar", &tar_of(&[("a.jpg", &jpg), ("a.cls", b"cat")]));
    let e = Source::from_tar_shards([&bad_cls]).unwrap_err();
    assert!(
        e.to_string().contains("a.cls") && e.to_string().contains("`cat`"),
        "{e}"
    );
    // A sample without a label among labeled ones.
    let unlabeled = write(
        d,
        "mixed.tar",
        &tar_of(&[("a.jpg", &jpg), ("a.cls", b"1"), ("b.jpg", &jpg)]),
    );
    let e = Source::from_tar_shards([&unlabeled]).unwrap_err();
    assert!(
        e.to_string().contains("b.jpg") && e.to_string().contains("no .cls"),
        "{e}"
    );
    // Not a tar at all, and an archive without images.
    let junk = write(d, "junk.tar", &[0x42u8; 3000]);
    let e = Source::from_tar_shards([&junk]).unwrap_err();
    assert!(e.to_string().contains("junk.tar"), "{e}");
    let empty = write(d, "empty.tar", &tar_of(&[("x.json", b"{}")]));
    let e = Source::from_tar_shards([&empty]).unwrap_err();
    assert!(e.to_string().contains("no image member"), "{e}");
    // Two images under one key.
    let twice = write(d, "twice.tar", &tar_of(&[("a.jpg", &jpg), ("a.png", &jpg)]));
    assert!(Source::from_tar_shards([&twice])
        .unwrap_err()
        .to_string()
        .contains("two images"));
    // A GNU long name of 10,000 bytes: refused with a short message (a 100 MB name made a
    // 100 MB error); 300 bytes is fine.
    let long = format!("{}.jpg", "k".repeat(9_996));
    let named = write(d, "long.tar", &tar_of(&[("a.jpg", &jpg), (&long, &jpg)]));
    let msg = Source::from_tar_shards([&named]).unwrap_err().to_string();
    assert!(
        msg.contains("long.tar") && msg.contains("name is 10000 bytes long"),
        "{msg:.300}"
    );
    assert!(msg.len() < 500, "{} bytes of message", msg.len());
    let fine = format!("{}.jpg", "k".repeat(296));
    let named = write(d, "fine.tar", &tar_of(&[("a.jpg", &jpg), (&fine, &jpg)]));
    assert_eq!(Source::from_tar_shards([&named]).unwrap().len(), 2);
    // Unlabeled shards are an unlabeled dataset: label 0.
    let plain = write(d, "plain.tar", &tar_of(&[("a.jpg", &jpg), ("b.jpg", &jpg)]));
    let s = Source::from_tar_shards([&plain]).unwrap();
    assert_eq!((s.len(), s.label(1)), (2, Some(0)));
}

#[test]
fn labels_apart_from_their_images_or_given_twice_are_errors_and_hard_links_are_read() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // `tar cf x.tar *.jpg *.cls`: every image, then every label. Grouped by consecutive key,
    // the labels would have no image and the images no label (every label 0).
    let apart = write(
        d,
        "apart.tar",
        &tar_of(&[
            ("a.jpg", &jpg),
            ("b.jpg", &jpg),
            ("a.cls", b"1"),
            ("b.cls", b"2"),
        ]),
    );
    let e = Source::from_tar_shards([&apart]).unwrap_err().to_string();
    assert!(
        e.contains("apart.tar") && e.contains("`a.cls` has no image beside it"),
        "{e}"
    );
    // Two labels for one sample: neither is picked silently.
    let twice = write(
        d,
        "twice.tar",
        &tar_of(&[("a.jpg", &jpg), ("a.cls", b"1"), ("a.cls", b"2")]),
    );
    let e = Source::from_tar_shards([&twice]).unwrap_err().to_string();
    assert!(e.contains("sample `a` has two labels"), "{e}");
    // One key twice, apart: two samples of one name, here with two labels (it read as two).
    let again = write(
        d,
        "again.tar",
        &tar_of(&[
            ("a.jpg", &jpg),
            ("a.cls", b"1"),
            ("b.jpg", &jpg),
            ("b.cls", b"1"),
            ("a.jpeg", &jpg),
            ("a.cls", b"2"),
        ]),
    );
    let e = Source::from_tar_shards([&again]).unwrap_err().to_string();
    assert!(
        e.contains("again.tar")
            && e.contains("sample `a` appears twice, as `a.jpg`")
            && e.contains("`a.jpeg`"),
        "{e}"
    );
    // A hard link to an earlier image (GNU tar writes one for a second name of a file) is
    // that image; a symbolic link, or a hard link to nothing before it, is an error naming it.
    let link = |name: &str, target: &str, kind: tar::EntryType| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        h.set_link_name(target).unwrap();
        (h, name.to_string())
    };
    let shard = |extra: (tar::Header, String)| {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in [("a.jpg", &jpg[..]), ("a.cls", b"5")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, data).unwrap();
        }
        let (mut h, name) = extra;
        b.append_data(&mut h, name, &[][..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        b.append_data(&mut h, "b.cls", &b"6"[..]).unwrap();
        b.into_inner().unwrap()
    };
    let hard = write(
        d,
        "hard.tar",
        &shard(link("b.jpg", "a.jpg", tar::EntryType::Link)),
    );
    let s = Source::from_tar_shards([&hard]).unwrap();
    assert_eq!((s.len(), s.label(0), s.label(1)), (2, Some(5), Some(6)));
    let loader = Loader::builder(s)
        .batch_size(2)
        .decode_threads(1)
        .dtype(Dtype::U8)
        .shuffle(false)
        .build()
        .unwrap();
    let batch: Batch = loader.epoch(0).next().unwrap().unwrap();
    let px = batch.as_u8().unwrap();
    assert_eq!(
        px[..px.len() / 2],
        px[px.len() / 2..],
        "the link reads a.jpg"
    );
    let sym = write(
        d,
        "sym.tar",
        &shard(link("b.jpg", "a.jpg", tar::EntryType::Symlink)),
    );
    let e = Source::from_tar_shards([&sym]).unwrap_err().to_string();
    assert!(e.contains("`b.jpg` is a symbolic link"), "{e}");
    let dangling = write(
        d,
        "dangling.tar",
        &shard(link("b.jpg", "z.jpg", tar::EntryType::Link)),
    );
    let e = Source::from_tar_shards([&dangling])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`b.jpg` is a hard link to `z.jpg`, which is not an earlier image"),
        "{e}"
    );
}

#[test]
fn a_folder_of_both_shards_and_class_folders_is_an_error_naming_both() {
    // The archive the class folders were extracted from, left beside them: read as shards,
    // the class folders were dropped and every label was 0.
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for class in ["cat", "dog"] {
        std::fs::create_dir(d.join(class)).unwrap();
        std::fs::write(d.join(class).join("a.jpg"), &jpg).unwrap();
    }
    write(
        d,
        "data.tar",
        &tar_of(&[("cat/a.jpg", &jpg), ("dog/a.jpg", &jpg)]),
    );
    let e = Source::open(d).unwrap_err().to_string();
    assert!(
        e.contains("holds both tar shards (data.tar)") && e.contains("class folders"),
        "{e}"
    );
    // Shards beside a folder without images (logs, say) are shards.
    std::fs::remove_dir_all(d.join("cat")).unwrap();
    std::fs::remove_dir_all(d.join("dog")).unwrap();
    std::fs::create_dir(d.join("logs")).unwrap();
    std::fs::write(d.join("logs").join("run.txt"), b"x").unwrap();
    assert_eq!(Source::open(d).unwrap().kind(), SourceKind::TarShards);
}

#[test]
fn a_corrupt_member_is_a_sample_error_naming_shard_and_member() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shard = write(
        dir.path(),
        "s.tar",
        &tar_of(&[
            ("a.jpg", &jpg),
            ("a.cls", b"0"),
            ("b.jpg", b"not a jpeg"),
            ("b.cls", b"1"),
            ("c.jpg", &jpg),
            ("c.cls", b"2"),
        ]),
    );
    let source = Source::from_tar_shards([&shard]).unwrap();
    let fail = Loader::builder(source.clone())
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .build()
        .unwrap();
    let errors: Vec<_> = fail.epoch(0).filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].to_string().contains("s.tar[b.jpg]"),
        "{}",
        errors[0]
    );
    let skip = Loader::builder(source)
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    let labels: Vec<u32> = skip
        .epoch(0)
        .flat_map(|b| b.unwrap().labels().to_vec())
        .collect();
    assert_eq!(labels, vec![0, 2]);
    assert_eq!(skip.stats().skipped, 1);
}

#[test]
fn shards_command_writes_what_bench_reads() {
    let out = tempfile::tempdir().unwrap();
    let bin = crate::common::imagefeed_bin();
    let list = corpus(64, 7).join("files.txt");
    let shards = out.path().join("shards");
    let st = std::process::Command::new(&bin)
        .args([
            "shards",
            list.to_str().unwrap(),
            shards.to_str().unwrap(),
            "--shard-size",
            "20",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let names: BTreeSet<String> = std::fs::read_dir(&shards)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = (0..4)
        .flat_map(|k| [format!("shard-{k:06}.tar"), format!("shard-{k:06}.tar.idx")])
        .chain(["imagefeed-manifest.tsv".to_string()])
        .collect();
    assert_eq!(
        names, expected,
        "four shards, each with its sidecar index, and their manifest"
    );
    let indices = out.path().join("indices.txt");
    let o = std::process::Command::new(&bin)
        .args([
            "bench",
            shards.to_str().unwrap(),
            "--batch-size",
            "8",
            "--size",
            "32",
            "32",
        ])
        .args(["--indices-out", indices.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seen: BTreeSet<u64> = std::fs::read_to_string(&indices)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(seen, (0..64).collect());
    // Running it again into the same folder is refused; the shards stay.
    let again = std::process::Command::new(&bin)
        .args(["shards", list.to_str().unwrap(), shards.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds shards"));
}

/// A loader over `source` delivering one 16×16 sample a batch, in source order.
fn one_by_one(source: &Source, on_error: OnError) -> Loader {
    Loader::builder(source.clone())
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(on_error)
        .build()
        .unwrap()
}

#[test]
fn a_shard_rewritten_after_opening_is_an_error_not_a_wrong_label() {
    // Two photos of different sizes, so that reordering moves every member's offset while the
    // shard keeps its size: what a stale `.tar.idx` sidecar or a shard rewritten under a
    // running loader looks like.
    let a = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let b = std::fs::read(crate::common::testdata("photos/photo_1.jpg")).unwrap();
    assert_ne!(a.len(), b.len());
    let dir = tempfile::tempdir().unwrap();
    let first = tar_of(&[
        ("a.jpg", &a),
        ("a.cls", b"0"),
        ("b.jpg", &b),
        ("b.cls", b"1"),
    ]);
    let shard = write(dir.path(), "s.tar", &first);
    let source = Source::from_tar_shards([&shard]).unwrap();
    let loader = |source: &Source, on_error| one_by_one(source, on_error);
    // Intact, every sample reads.
    assert_eq!(
        loader(&source, OnError::Fail)
            .epoch(0)
            .filter(|b| b.is_ok())
            .count(),
        2
    );
    let swapped = tar_of(&[
        ("b.jpg", &b),
        ("b.cls", b"1"),
        ("a.jpg", &a),
        ("a.cls", b"0"),
    ]);
    assert_eq!(swapped.len(), first.len());
    std::fs::write(&shard, &swapped).unwrap();
    let results: Vec<_> = loader(&source, OnError::SKIP_ALL).epoch(0).collect();
    assert!(
        results
            .iter()
            .all(|b| b.is_ok() && b.as_ref().unwrap().is_empty()),
        "no sample of the changed shard may be delivered under its old label"
    );
    let errors: Vec<_> = loader(&source, OnError::Fail)
        .epoch(0)
        .filter_map(Result::err)
        .collect();
    assert_eq!(errors.len(), 1);
    let message = errors[0].to_string();
    assert!(
        message.contains("s.tar") && message.contains("not what was indexed"),
        "{message}"
    );
}

#[test]
fn a_shard_relabeled_at_the_same_size_after_opening_is_an_error_not_an_old_label() {
    // Only a label member changes ("0" becomes "5"): every image member's header, size and
    // place stay as indexed, which is what a relabeled shard re-uploaded beside its old
    // `.tar.idx` sidecar looks like. The label is checked as the stream passes it, whether it
    // comes before or after its image.
    let a = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let b = std::fs::read(crate::common::testdata("photos/photo_1.jpg")).unwrap();
    for label_first in [false, true] {
        let sample = |key: &str, image: &'static [u8], label: &'static [u8]| {
            let (img, cls) = ((format!("{key}.jpg"), image), (format!("{key}.cls"), label));
            if label_first {
                [cls, img]
            } else {
                [img, cls]
            }
        };
        let (a, b): (&'static [u8], &'static [u8]) = (a.clone().leak(), b.clone().leak());
        let members = |first_label: &'static [u8]| -> Vec<u8> {
            let all: Vec<(String, &[u8])> = sample("a", a, first_label)
                .into_iter()
                .chain(sample("b", b, b"1"))
                .collect();
            let refs: Vec<(&str, &[u8])> = all.iter().map(|(n, d)| (n.as_str(), *d)).collect();
            tar_of(&refs)
        };
        let dir = tempfile::tempdir().unwrap();
        let shard = write(dir.path(), "s.tar", &members(b"0"));
        let source = Source::from_tar_shards([&shard]).unwrap();
        assert_eq!((source.label(0), source.label(1)), (Some(0), Some(1)));
        let loader = |on_error| one_by_one(&source, on_error);
        let labels = |l: &Loader| -> Vec<u32> {
            l.epoch(0)
                .filter_map(Result::ok)
                .flat_map(|b| b.labels().to_vec())
                .collect()
        };
        assert_eq!(labels(&loader(OnError::Fail)), [0, 1]);
        let relabeled = members(b"5");
        assert_eq!(
            relabeled.len(),
            std::fs::metadata(&shard).unwrap().len() as usize
        );
        std::fs::write(&shard, &relabeled).unwrap();
        // The shard changed since the source was opened: none of its samples is delivered,
        // under the old label or the new one.
        assert_eq!(
            labels(&loader(OnError::SKIP_ALL)),
            Vec::<u32>::new(),
            "label first: {label_first}"
        );
        let err = loader(OnError::Fail)
            .epoch(0)
            .find_map(Result::err)
            .expect("an error");
        let message = err.to_string();
        assert!(
            message.contains("s.tar")
                && message.contains("changed since the source was opened")
                && err.is_data_error(),
            "{message}"
        );
        // Reading one sample alone (to write shards from shards) checks it too.
        let out = tempfile::tempdir().unwrap();
        let e = imagefeed::write_shards(&source, out.path(), 4, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.tar") && e.contains("changed since"), "{e}");
    }
}

#[test]
fn long_member_names_are_read_and_their_headers_bounded() {
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let regular = |h: &mut tar::Header, size: usize| {
        h.set_size(size as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
    };
    // The photo as a plain member `a.jpg`.
    let append_jpg = |b: &mut tar::Builder<Vec<u8>>| {
        let mut h = tar::Header::new_ustar();
        regular(&mut h, jpg.len());
        b.append_data(&mut h, "a.jpg", &jpg[..]).unwrap();
    };
    // Long names written the two usual ways, each with a label: a GNU long-name header (GNU
    // tar, the `tar` crate) and a PAX `path` record (POSIX pax, Python's tarfile), whose
    // member header holds a truncated name.
    let gnu = format!("{}/000001", "g".repeat(150));
    let pax = format!("{}/000002", "p".repeat(200));
    let mut b = tar::Builder::new(Vec::new());
    for (ext, data) in [("jpg", &jpg[..]), ("cls", &b"4"[..])] {
        let mut h = tar::Header::new_gnu();
        regular(&mut h, data.len());
        b.append_data(&mut h, format!("{gnu}.{ext}"), data).unwrap();
    }
    for (ext, data) in [("jpg", &jpg[..]), ("cls", &b"5"[..])] {
        let name = format!("{pax}.{ext}");
        b.append_pax_extensions([("path", name.as_bytes())])
            .unwrap();
        let mut h = tar::Header::new_ustar();
        regular(&mut h, data.len());
        h.set_path(format!("truncated.{ext}")).unwrap();
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    let shard = write(d, "names.tar", &b.into_inner().unwrap());
    let s = Source::from_tar_shards([&shard]).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!((s.label(0), s.label(1)), (Some(4), Some(5)));
    let p0 = s.path(0).unwrap().to_string_lossy().into_owned();
    let p1 = s.path(1).unwrap().to_string_lossy().into_owned();
    assert!(p0.ends_with(&format!("{gnu}.jpg]")), "{p0}");
    assert!(p1.ends_with(&format!("{pax}.jpg]")), "{p1}");
    // Both samples are read from the offsets indexed.
    let images: usize = Loader::builder(s)
        .image_size(16)
        .batch_size(2)
        .shuffle(false)
        .build()
        .unwrap()
        .epoch(0)
        .map(|b| b.unwrap().len())
        .sum();
    assert_eq!(images, 2);

    // A GNU long-name header of 1 MB is refused by its size, before it is read (the `tar`
    // crate read such headers whole, so a 1 GB one took 1 GB of memory).
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    regular(&mut h, jpg.len());
    b.append_data(&mut h, format!("{}.jpg", "k".repeat(999_996)), &jpg[..])
        .unwrap();
    let huge = write(d, "huge.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&huge]).unwrap_err().to_string();
    assert!(
        msg.contains("huge.tar")
            && msg.contains("GNU long-name header of 1000001 bytes, over the 65536-byte limit"),
        "{msg:.300}"
    );
    assert!(msg.len() < 500, "{} bytes of message", msg.len());

    // A PAX size that disagrees with the member's header: refused, not guessed.
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("size", &b"99"[..])]).unwrap();
    append_jpg(&mut b);
    let sized = write(d, "sized.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&sized]).unwrap_err().to_string();
    assert!(
        msg.contains("sized.tar") && msg.contains("PAX size (99)"),
        "{msg}"
    );
    // The same before a member that is not a file: where the next header starts is in doubt.
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("size", &b"1024"[..])]).unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_path("dir/").unwrap();
    h.set_size(0);
    h.set_mode(0o755);
    h.set_entry_type(tar::EntryType::Directory);
    h.set_cksum();
    b.append(&h, &[][..]).unwrap();
    append_jpg(&mut b);
    let sized_dir = write(d, "sized-dir.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&sized_dir])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("PAX size (1024)"), "{msg}");

    // An archive that ends after an extension header, and two long names for one member.
    let mut b = tar::Builder::new(Vec::new());
    append_jpg(&mut b);
    b.append_pax_extensions([("path", &b"b.jpg"[..])]).unwrap();
    let cut = write(d, "cut.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&cut]).unwrap_err().to_string();
    assert!(
        msg.contains("cut.tar") && msg.contains("ends after an extension header"),
        "{msg}"
    );
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("path", &b"b.jpg"[..])]).unwrap();
    b.append_pax_extensions([("path", &b"c.jpg"[..])]).unwrap();
    append_jpg(&mut b);
    let twice = write(d, "twice-named.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&twice]).unwrap_err().to_string();
    assert!(msg.contains("two PAX headers"), "{msg}");

    // A GNU sparse member whose map continues past its header (`tar --sparse`, many holes):
    // its extra blocks would be misread as the next header, so it is refused by name.
    let mut b = tar::Builder::new(Vec::new());
    append_jpg(&mut b);
    let mut h = tar::Header::new_gnu();
    h.set_path("holes.bin").unwrap();
    h.set_size(512);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.as_gnu_mut().unwrap().isextended[0] = 1;
    h.set_cksum();
    b.append(&h, &[0u8; 512][..]).unwrap();
    let sparse = write(d, "sparse.tar", &b.into_inner().unwrap());
    let msg = Source::from_tar_shards([&sparse]).unwrap_err().to_string();
    assert!(
        msg.contains("sparse.tar") && msg.contains("`holes.bin`") && msg.contains("GNU sparse"),
        "{msg}"
    );
}

#[test]
fn img2dataset_output_opens_as_its_tar_shards() {
    // img2dataset writes, per shard, 00000.tar with the samples and 00000.parquet and
    // 00000_stats.json with their metadata: the parquet files hold no image.
    let jpg = std::fs::read(crate::common::testdata("photos/photo_0.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for shard in ["00000", "00001"] {
        write(
            d,
            &format!("{shard}.tar"),
            &tar_of(&[
                (&format!("{shard}0001.jpg"), &jpg),
                (&format!("{shard}0001.txt"), b"a cat"),
                (&format!("{shard}0001.json"), b"{}"),
            ]),
        );
        write(d, &format!("{shard}.parquet"), b"PAR1 metadata PAR1");
        write(d, &format!("{shard}_stats.json"), b"{}");
    }
    let source = Source::open(d).unwrap();
    assert_eq!(source.len(), 2);
    assert_eq!(source.kind(), SourceKind::TarShards);
    // A parquet file without its tar is a dataset of its own beside the shards.
    write(d, "other.parquet", b"PAR1");
    let e = Source::open(d).unwrap_err().to_string();
    assert!(
        e.contains("holds both parquet files") && e.contains("tar shards"),
        "{e}"
    );
}

#[test]
fn a_shard_sources_budget_counts_its_shards_not_its_samples() {
    // The same 8 shards holding 8 or 64 samples: the index (a unit table) is the same size;
    // the open shards' sample tables grow with the samples a block spans.
    let (_, few) = shards_of(8, 1);
    let (_, many) = shards_of(64, 8);
    let budget = |dir: &tempfile::TempDir, block: usize| {
        Loader::builder(Source::open(dir.path()).unwrap())
            .shuffle_buffer(block)
            .memory_budget()
    };
    let (a, b) = (budget(&few, 4096), budget(&many, 4096));
    assert_eq!(a.index_bytes, b.index_bytes);
    assert_eq!(a.shuffle_buffer_bytes, b.shuffle_buffer_bytes);
    assert!(a.open_shard_bytes > 0 && a.open_shard_bytes < b.open_shard_bytes);
    // A block of one shard opens one shard's table.
    assert!(budget(&many, 8).open_shard_bytes < b.open_shard_bytes);
    // A file list holds no shard.
    let list = Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap();
    assert_eq!(Loader::builder(list).memory_budget().open_shard_bytes, 0);
}
