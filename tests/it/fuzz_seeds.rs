//! The fuzz targets' committed inputs (`fuzz/seeds/<target>/`, and `fuzz/regressions/<target>/`
//! where a finding was kept) through the same entry points the targets call, so that a seed or
//! a past finding that panics fails `cargo test`, and the seeds stay inputs this build reads.

use std::path::{Path, PathBuf};

/// The files of `fuzz/<folder>/<target>/` for each of `folders`, sorted, with their bytes.
fn inputs(folders: &[&str], target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files: Vec<PathBuf> = folders
        .iter()
        .map(|d| fuzz.join(d).join(target))
        .filter(|d| d.is_dir())
        .flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

#[test]
fn every_decode_seed_runs_through_the_fuzz_targets_harness() {
    // fuzz/fuzz_targets/decode.rs: the first byte selects the name, the decoder and the size.
    const NAMES: [&str; 3] = ["x.jpg", "x.png", "x"];
    let seeds = inputs(&["seeds", "regressions"], "decode");
    assert!(seeds.len() > 100, "{} decode seeds", seeds.len());
    // Seeds made from images (make_seeds.py), and inputs a campaign found (named by their SHA-1).
    let made = |p: &Path| {
        let name = p.file_name().unwrap().to_str().unwrap();
        !(name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let (mut images, mut decoded) = (0, 0);
    for (path, data) in &seeds {
        let Some((&sel, bytes)) = data.split_first() else {
            continue;
        };
        let name = NAMES[usize::from(sel % 3)];
        let zune = (sel / 3) % 2 == 1;
        let size = 1 + 5 * u32::from(sel / 6);
        eprintln!("{}", path.display());
        let ok = imagefeed::tools::fuzz::decode_transform(bytes, name, size, zune);
        if made(path) {
            images += 1;
            decoded += usize::from(ok);
        }
    }
    // Most seeds made from images are valid ones; the damaged ones and the corrupt test files
    // fail.
    assert!(
        images > 100 && decoded * 2 > images,
        "{decoded} of the {images} seeds made from images decoded"
    );
}

#[test]
fn the_list_tar_and_cache_seeds_are_inputs_this_build_reads() {
    let lists = inputs(&["seeds"], "list");
    let parsed = lists
        .iter()
        .filter(|(_, b)| imagefeed::tools::fuzz::parse_list(b).is_some())
        .count();
    assert!(parsed >= 3, "{parsed} of {} lists parsed", lists.len());
    for (path, bytes) in inputs(&["seeds"], "tar") {
        let n = imagefeed::tools::fuzz::index_tar(&bytes);
        assert!(n.is_some_and(|n| n > 0), "{}: {n:?}", path.display());
    }
    // A cache seed of an older format version never gets past the header: the cache target
    // would fuzz the version check alone.
    for (path, bytes) in inputs(&["seeds"], "cache") {
        let records = imagefeed::tools::fuzz::read_cache(&bytes);
        assert!(records > 0, "{}: no record read", path.display());
    }
}

#[test]
fn the_tfrecord_and_parquet_seeds_and_findings_are_answers_not_panics() {
    for (path, bytes) in inputs(&["seeds"], "tfrecord") {
        let n = imagefeed::tools::fuzz::index_tfrecord(&bytes);
        assert!(n.is_some_and(|n| n > 0), "{}: {n:?}", path.display());
    }
    // A record whose bytes value's length lies past its list, between two good ones: the bad
    // record is a bad sample, and the shard's other records stay.
    let found = inputs(&["regressions"], "tfrecord");
    assert!(!found.is_empty());
    for (path, bytes) in found {
        let n = imagefeed::tools::fuzz::index_tfrecord(&bytes);
        assert_eq!(n, Some(2), "{}", path.display());
    }
    #[cfg(feature = "parquet")]
    for (path, bytes) in inputs(&["seeds", "regressions"], "parquet") {
        eprintln!("{}", path.display());
        let _ = imagefeed::tools::fuzz::index_parquet(&bytes);
    }
}
