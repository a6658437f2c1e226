//! Skipping broken files: a skip never shifts a label, a skip budget, and failing at the first
//! broken file in order.

use super::*;

/// A list mixing the id-coded images of `corpus` with broken files at known positions.
/// Returns the list and, by dataset index, `Some(id)` for a good image or `None` for a broken
/// one, with the broken paths in list order.
fn mixed_list(corpus: &IdCorpus) -> (PathBuf, Vec<Option<usize>>, Vec<PathBuf>) {
    let d = corpus.dir.path();
    let good = std::fs::read(&corpus.paths[0]).unwrap();
    std::fs::write(d.join("empty.jpg"), b"").unwrap();
    std::fs::write(d.join("cut.jpg"), &good[..good.len() / 2]).unwrap();
    std::fs::write(
        d.join("page.jpg"),
        b"<html><body>502 Bad Gateway</body></html>",
    )
    .unwrap();
    std::fs::create_dir(d.join("folder.jpg")).unwrap();
    for name in ["png_named.jpg", "bomb_65000.jpg", "bitflip.jpg"] {
        std::fs::copy(common::testdata(&format!("corrupt/{name}")), d.join(name)).unwrap();
    }
    let broken = [
        "missing.jpg",
        "empty.jpg",
        "cut.jpg",
        "page.jpg",
        "folder.jpg",
        "png_named.jpg",
        "bomb_65000.jpg",
        "bitflip.jpg",
    ];
    let mut list = String::new();
    let mut ids = Vec::new();
    let mut broken_paths = Vec::new();
    let mut next_broken = broken.iter();
    for id in 0..corpus.paths.len() {
        // A broken file before images 0, 5, 10, ...: also first in the list, and twice in a row.
        if id % 5 == 0 || id == 36 {
            if let Some(name) = next_broken.next() {
                list.push_str(&format!("{name}\t{}\n", 90 + ids.len()));
                ids.push(None);
                broken_paths.push(d.join(name));
            }
        }
        list.push_str(&format!("img_{id:04}.jpg\t{}\n", id_label(id)));
        ids.push(Some(id));
    }
    assert!(next_broken.next().is_none(), "every broken file is listed");
    let path = d.join("mixed.txt");
    std::fs::write(&path, list).unwrap();
    (path, ids, broken_paths)
}

#[test]
fn skip_never_shifts_labels() {
    let corpus = IdCorpus::new(40);
    let (list, ids, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    let n = source.len();
    assert_eq!(n, 48);
    for (shuffle, shuffle_buffer, threads, batch_size) in [
        (false, 0, 1, 6),
        (true, 0, 2, 6),
        (true, 5, 3, 7),
        (true, 0, 4, 1),
    ] {
        let what = format!(
            "shuffle {shuffle}, buffer {shuffle_buffer}, {threads} threads, bs {batch_size}"
        );
        for policy in [OnError::Skip { max: 8 }, OnError::SKIP_ALL] {
            let loader = Loader::builder(source.clone())
                .batch_size(batch_size)
                .shuffle(shuffle)
                .shuffle_buffer(shuffle_buffer)
                .decode_threads(threads)
                .on_error(policy)
                .image_size(16)
                .dtype(Dtype::U8)
                .seed(17)
                .build()
                .unwrap();
            let batches = common::with_timeout(std::time::Duration::from_secs(30), {
                let loader_epoch = loader.epoch(1);
                move || common::collect_ok(loader_epoch)
            });
            let mut seen = Vec::new();
            for b in &batches {
                common::assert_pixels_follow_indices_by(b, |i| ids[i].expect("a good sample"));
                for (&i, &label) in b.indices().iter().zip(b.labels()) {
                    assert_eq!(source.label(i as usize), Some(label), "{what}: index {i}");
                    assert_eq!(label, id_label(ids[i as usize].unwrap()), "{what}");
                    seen.push(i);
                }
            }
            seen.sort_unstable();
            let want: Vec<u64> = (0..n as u64)
                .filter(|&i| ids[i as usize].is_some())
                .collect();
            assert_eq!(seen, want, "{what}");
            let stats = loader.stats();
            assert_eq!(stats.images, 40, "{what}");
            assert_eq!(stats.skipped, 8, "{what}");
            assert_eq!(stats.images + stats.skipped, n as u64, "{what}");
            let mut skipped: Vec<PathBuf> = stats
                .skipped_samples
                .iter()
                .map(|(p, _)| p.clone())
                .collect();
            skipped.sort();
            let mut want_skipped = broken.clone();
            want_skipped.sort();
            assert_eq!(skipped, want_skipped, "{what}");
            for (p, reason) in &stats.skipped_samples {
                assert!(reason.contains(&p.display().to_string()), "{reason}");
            }
        }
    }
}

#[test]
fn skip_budget_gives_too_many_failures() {
    let corpus = IdCorpus::new(40);
    let (list, ids, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    for max in [0u64, 3, 7] {
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .shuffle(false)
            .on_error(OnError::Skip { max })
            .image_size(8)
            .dtype(Dtype::U8)
            .decode_threads(2)
            .build()
            .unwrap();
        let items: Vec<Result<imagefeed::Batch, Error>> =
            common::with_timeout(std::time::Duration::from_secs(30), {
                let epoch = loader.epoch(0);
                move || epoch.collect()
            });
        let (last, ok) = items.split_last().unwrap();
        let e = last.as_ref().expect_err("the epoch ends with an error");
        match e.kind() {
            ErrorKind::TooManyFailures { skipped, last } => {
                assert_eq!(*skipped, max + 1);
                // In file order, failure number max + 1 is the broken file number max + 1.
                assert_eq!(last.path(), Some(broken[max as usize].as_path()), "{e}");
                assert!(last.is_data_error());
            }
            _ => panic!("{e:?}"),
        }
        assert_eq!(e.path(), Some(broken[max as usize].as_path()));
        assert!(!e.is_data_error(), "TooManyFailures must not be skippable");
        assert!(contains_ci(&e.to_string(), "too many"), "{e}");
        assert!(std::error::Error::source(e).is_some());
        // The batches before the error are whole and correct.
        for b in ok {
            let b = b.as_ref().unwrap();
            for (&i, &l) in b.indices().iter().zip(b.labels()) {
                assert_eq!(l, id_label(ids[i as usize].unwrap()));
            }
        }
        let stats = loader.stats();
        assert_eq!(stats.skipped, max + 1);
    }
}

#[test]
fn fail_stops_at_the_first_broken_file_in_order() {
    let corpus = IdCorpus::new(40);
    let (list, _, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    // The list starts with a broken file: under Fail, in file order, the epoch's first item
    // is that file's error (with three threads racing ahead), and nothing follows it.
    let loader = Loader::builder(source)
        .batch_size(4)
        .shuffle(false)
        .image_size(8)
        .decode_threads(3)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    let e = epoch.next().unwrap().unwrap_err();
    assert_eq!(e.path(), Some(broken[0].as_path()), "{e}");
    assert!(
        epoch.next().is_none(),
        "the epoch goes on after an error under Fail"
    );
}
