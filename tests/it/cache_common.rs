//! Helpers of the cache's tests, shared with the command line's (crates/imagefeed-cli/tests).

use std::path::PathBuf;

use imagefeed::{Batch, Loader, LoaderBuilder, Source};

use crate::common::{corpus, subset};

pub(crate) fn source(n: usize) -> Source {
    subset(
        &Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap(),
        n,
    )
}

pub(crate) fn builder(source: Source) -> LoaderBuilder {
    Loader::builder(source)
        .batch_size(8)
        .decode_threads(2)
        .seed(3)
}

pub(crate) fn run_epoch(loader: &Loader, epoch: u64) -> Vec<Batch> {
    loader.epoch(epoch).map(|b| b.unwrap()).collect()
}

pub(crate) fn same_batches(a: &[Batch], b: &[Batch]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.indices(), y.indices());
        assert_eq!(x.labels(), y.labels());
        assert!(x.as_bytes() == y.as_bytes(), "pixels differ");
    }
}

/// Copies the first `n` corpus images into a fresh folder with a list, so tests may modify them.
pub(crate) fn private_copy(n: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = source(n);
    let mut list = String::new();
    for i in 0..n {
        let name = format!("img_{i}.jpg");
        std::fs::copy(src.path(i).unwrap(), dir.path().join(&name)).unwrap();
        list.push_str(&format!("{name}\t{}\n", src.label(i).unwrap()));
    }
    let list_path = dir.path().join("list.txt");
    std::fs::write(&list_path, list).unwrap();
    (dir, list_path)
}
