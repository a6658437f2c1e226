//! Manifests: one file listing a dataset's shards, which opening reads instead of every shard;
//! written by `imagefeed shards`, `imagefeed index` and `Source::write_manifest`, and checked
//! against the files (a manifest that disagrees is an error naming the shard).

use std::path::Path;

use imagefeed::{write_shards, Loader, OnError, Source, SourceKind};

use crate::common::{imagefeed_bin, testdata};

/// Every delivered (index, label) of epoch 0, in order.
fn delivered(source: &Source) -> Vec<(u64, u32)> {
    let loader = Loader::builder(source.clone())
        .image_size(8)
        .batch_size(7)
        .seed(5)
        .build()
        .unwrap();
    loader
        .epoch(0)
        .flat_map(|b| {
            let b = b.unwrap();
            b.indices()
                .iter()
                .copied()
                .zip(b.labels().iter().copied())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn shards(dir: &Path) -> Source {
    let classes = Source::from_dir(testdata("classes")).unwrap();
    write_shards(&classes, dir, 3, Some(2)).unwrap();
    Source::open(dir).unwrap()
}

#[test]
fn a_manifest_opens_the_dataset_it_lists_with_the_same_samples() {
    let dir = tempfile::tempdir().unwrap();
    let opened = shards(dir.path());
    let manifest = dir.path().join("imagefeed-manifest.tsv");
    assert!(manifest.is_file(), "write_shards writes a manifest");
    // The same samples opened through the manifest, or from the shards (no manifest).
    let from_shards = Source::from_tar_shards(
        (0..opened.len().div_ceil(3)).map(|k| dir.path().join(format!("shard-{k:06}.tar"))),
    )
    .unwrap();
    assert_eq!(opened.len(), from_shards.len());
    assert_eq!(opened.num_classes(), from_shards.num_classes());
    assert_eq!(delivered(&opened), delivered(&from_shards));
    // The manifest named itself opens too, and writing it again gives the same text.
    let named = Source::open(&manifest).unwrap();
    assert_eq!(named.len(), opened.len());
    let text = std::fs::read_to_string(&manifest).unwrap();
    opened.write_manifest(dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
}

#[test]
fn a_manifest_that_disagrees_with_the_files_is_an_error_naming_the_shard() {
    // A shard whose size is not the manifest's: refused when opened.
    let dir = tempfile::tempdir().unwrap();
    shards(dir.path());
    let shard = dir.path().join("shard-000001.tar");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes.extend_from_slice(&[0; 1024]);
    std::fs::write(&shard, &bytes).unwrap();
    let e = Source::open(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("shard-000001.tar") && e.contains("manifest"),
        "{e}"
    );
    // A manifest that miscounts a shard's samples: that shard's samples fail by name when it
    // is read, and no sample is delivered under another index or label.
    let dir = tempfile::tempdir().unwrap();
    let good = shards(dir.path());
    let manifest = dir.path().join("imagefeed-manifest.tsv");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut fields: Vec<String> = lines[1].split('\t').map(String::from).collect();
    fields[4] = "2".into(); // three samples, the manifest says two
    fields[5] = "2".into();
    lines[1] = fields.join("\t");
    lines[0] = lines[0].replace(
        &format!("samples={}", good.len()),
        &format!("samples={}", good.len() - 1),
    );
    std::fs::write(&manifest, lines.join("\n") + "\n").unwrap();
    let wrong = Source::open(dir.path()).unwrap();
    assert_eq!(wrong.len(), good.len() - 1);
    let loader = Loader::builder(wrong)
        .image_size(8)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::Fail)
        .build()
        .unwrap();
    let e = loader
        .epoch(0)
        .find_map(Result::err)
        .expect("the miscounted shard fails")
        .to_string();
    assert!(
        e.contains("shard-000000.tar") && e.contains("3 samples"),
        "{e}"
    );
}

#[test]
fn index_writes_manifests_for_tar_tfrecord_and_parquet_datasets() {
    for (rel, kind) in [
        ("formats/tfrecord", SourceKind::TfRecord),
        ("formats/parquet", SourceKind::Parquet),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(testdata(rel)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
        let before = Source::open(dir.path()).unwrap();
        let out = std::process::Command::new(imagefeed_bin())
            .arg("index")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{rel}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(dir.path().join("imagefeed-manifest.tsv")).unwrap();
        let after = Source::open(dir.path()).unwrap();
        assert_eq!(after.kind(), kind, "{rel}: {text}");
        assert_eq!(after.len(), before.len(), "{rel}");
        assert_eq!(after.num_classes(), before.num_classes(), "{rel}");
        assert_eq!(delivered(&after), delivered(&before), "{rel}");
    }
    // Of tar shards without one: the same; over a manifest of other files: refused.
    let dir = tempfile::tempdir().unwrap();
    shards(dir.path());
    let manifest = dir.path().join("imagefeed-manifest.tsv");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::remove_file(&manifest).unwrap();
    let index = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(imagefeed_bin())
            .arg("index")
            .args(args)
            .output()
            .unwrap()
    };
    assert!(index(&[dir.path().as_os_str()]).status.success());
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
    let one = dir.path().join("shard-000001.tar");
    let refused = index(&[one.as_os_str()]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("manifest of other files"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
}
