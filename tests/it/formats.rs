//! Parquet, TFRecord and WebP: the fixtures written by `datasets`, TensorFlow and Pillow
//! (testdata/formats/make.py) deliver the file list's pixels and labels in its order, and files
//! written here cover sharding, resuming, the cache and damage.
#![cfg(feature = "parquet")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use imagefeed::{Dtype, ErrorKind, Loader, LoaderState, OnError, Source, SourceKind};

use crate::common::testdata;

/// Every sample's `(u8 pixels at 24×24, label)`, in delivery order, with shuffle off.
fn delivered(source: Source) -> Vec<(Vec<u8>, u32)> {
    let loader = Loader::builder(source)
        .image_size(24)
        .batch_size(4)
        .shuffle(false)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in loader.epoch(0) {
        let b = b.unwrap();
        let px = b.as_u8().unwrap();
        let n = b.labels().len();
        let each = px.len() / n;
        for k in 0..n {
            out.push((px[k * each..(k + 1) * each].to_vec(), b.labels()[k]));
        }
    }
    out
}

#[test]
fn containers_written_by_datasets_and_tensorflow_deliver_the_lists_images_in_order() {
    let list = delivered(Source::open(testdata("formats/files.txt")).unwrap());
    assert_eq!(list.len(), 11);
    for (rel, kind, n) in [
        ("formats/parquet", SourceKind::Parquet, 11),
        ("formats/tfrecord", SourceKind::TfRecord, 11),
        ("formats/gzip", SourceKind::TfRecord, 11),
        (
            "formats/tfrecord/train-00000-of-00002",
            SourceKind::TfRecord,
            6,
        ),
        ("formats/small-groups.parquet", SourceKind::Parquet, 6),
    ] {
        let source = Source::open(testdata(rel)).unwrap();
        assert_eq!(source.kind(), kind, "{rel}");
        assert_eq!(source.len(), n, "{rel}");
        assert_eq!(source.num_classes(), if n == 11 { 3 } else { 2 }, "{rel}");
        let got = delivered(source);
        assert!(
            got == list[..n],
            "{rel}: other pixels or labels than the list's"
        );
    }
    // One row group a row: a stream each.
    let small = Source::open(testdata("formats/small-groups.parquet")).unwrap();
    assert_eq!(
        small.path(5).unwrap(),
        testdata("formats/small-groups.parquet[row 5]")
    );
}

#[test]
fn webp_files_written_by_pillow_decode_as_pillow_does() {
    for (name, tolerance) in [
        ("lossless", 0.0),
        ("lossless_alpha", 0.0),
        ("lossy", 1.5),
        ("lossy_alpha", 1.5),
    ] {
        let webp = testdata(&format!("formats/webp/{name}.webp"));
        let png = testdata(&format!("formats/webp/{name}.png"));
        let got = delivered(Source::from_entries([(webp, 0)]).unwrap());
        let want = delivered(Source::from_entries([(png, 0)]).unwrap());
        let diff: f64 = got[0]
            .0
            .iter()
            .zip(&want[0].0)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).abs())
            .sum::<f64>()
            / got[0].0.len() as f64;
        assert!(
            diff <= tolerance,
            "{name}: mean difference {diff} from Pillow's decoding"
        );
    }
    // A class folder picks WebP files up.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::copy(
        testdata("formats/webp/lossy.webp"),
        dir.path().join("a/x.webp"),
    )
    .unwrap();
    assert_eq!(delivered(Source::open(dir.path()).unwrap()).len(), 1);
}

#[test]
fn a_webp_over_max_pixels_is_refused_from_its_header() {
    let webp = testdata("formats/webp/lossy.webp");
    let e = Loader::builder(Source::from_entries([(webp, 0)]).unwrap())
        .max_pixels(100)
        .build()
        .unwrap()
        .epoch(0)
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("over max_pixels"), "{e}");
}

// ---- TFRecord files written here ----

/// Protobuf's varint (also tests/it/prost_example.rs's).
pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited protobuf field.
pub(crate) fn field(out: &mut Vec<u8>, n: u64, body: &[u8]) {
    varint(out, n << 3 | 2);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// A serialized `tf.train.Example` of `(key, bytes or int64)` features.
pub(crate) fn example(features: &[(&str, Result<&[u8], i64>)]) -> Vec<u8> {
    let mut map = Vec::new();
    for (key, value) in features {
        let (kind, mut list) = (if value.is_ok() { 1 } else { 3 }, Vec::new());
        match value {
            Ok(b) => field(&mut list, 1, b),
            Err(n) => {
                varint(&mut list, 1 << 3);
                varint(&mut list, *n as u64);
            }
        }
        let mut feature = Vec::new();
        field(&mut feature, kind, &list);
        let mut entry = Vec::new();
        field(&mut entry, 1, key.as_bytes());
        field(&mut entry, 2, &feature);
        field(&mut map, 1, &entry);
    }
    let mut ex = Vec::new();
    field(&mut ex, 1, &map);
    ex
}

fn masked(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// TFRecord framing of `payloads`.
pub(crate) fn framed(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in payloads {
        let len = (p.len() as u64).to_le_bytes();
        out.extend_from_slice(&len);
        out.extend_from_slice(&masked(&len).to_le_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(&masked(p).to_le_bytes());
    }
    out
}

fn photo(i: usize) -> Vec<u8> {
    std::fs::read(testdata(&format!("photos/photo_{}.jpg", i % 6))).unwrap()
}

/// `shards` TFRecord files of `per` records each; record `i` holds photo `i % 6` and label
/// `i % 5`.
fn tfrecords(dir: &Path, shards: usize, per: usize) -> Vec<PathBuf> {
    (0..shards)
        .map(|s| {
            let payloads: Vec<Vec<u8>> = (0..per)
                .map(|k| {
                    let i = s * per + k;
                    example(&[
                        ("image/encoded", Ok(&photo(i))),
                        ("image/class/label", Err((i % 5) as i64)),
                    ])
                })
                .collect();
            let p = dir.join(format!("train-{s:05}-of-{shards:05}"));
            std::fs::write(&p, framed(&payloads)).unwrap();
            p
        })
        .collect()
}

fn indices(loader: &Loader, epoch: u64) -> Vec<u64> {
    loader
        .epoch(epoch)
        .flat_map(|b| b.unwrap().indices().to_vec())
        .collect()
}

#[test]
fn tfrecord_labels_reach_the_batch_sharded_and_cached() {
    let dir = tempfile::tempdir().unwrap();
    tfrecords(dir.path(), 3, 4);
    let source = Source::open(dir.path()).unwrap();
    assert_eq!((source.kind(), source.len()), (SourceKind::TfRecord, 12));
    let name = source.path(5).unwrap();
    assert!(
        name.to_string_lossy()
            .contains("train-00001-of-00003[record 1 at byte "),
        "{name:?}"
    );
    let cache = dir.path().join("c.cache");
    let mut seen = Vec::new();
    for rank in 0..2 {
        let loader = Loader::builder(source.clone())
            .image_size(16)
            .batch_size(2)
            .seed(3)
            .shuffle_buffer(4)
            .shard(rank, 2)
            .cache(&cache)
            .build()
            .unwrap();
        for epoch in 0..2 {
            for b in loader.epoch(epoch) {
                let b = b.unwrap();
                for (k, &i) in b.indices().iter().enumerate() {
                    assert_eq!(b.labels()[k] as u64, i % 5, "sample {i}");
                    if epoch == 0 {
                        seen.push(i);
                    }
                }
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..12).collect::<Vec<u64>>(),
        "each sample on one rank"
    );
}

#[test]
fn tfrecord_resumes_at_another_world_size() {
    let dir = tempfile::tempdir().unwrap();
    tfrecords(dir.path(), 4, 3);
    let source = Arc::new(Source::open(dir.path()).unwrap());
    let make = |rank: usize, world: usize| {
        Loader::builder((*source).clone())
            .image_size(16)
            .batch_size(1)
            .seed(5)
            .shard(rank, world)
            .build()
            .unwrap()
    };
    // Two ranks deliver 2 batches each, then 3 ranks deliver the rest.
    let mut got = Vec::new();
    let mut state = None;
    for rank in 0..2 {
        let loader = make(rank, 2);
        let mut it = loader.epoch(1);
        for _ in 0..2 {
            got.extend_from_slice(it.next().unwrap().unwrap().indices());
        }
        state = Some(it.state().to_string());
    }
    let state: LoaderState = state.unwrap().parse().unwrap();
    for rank in 0..3 {
        got.extend(
            make(rank, 3)
                .resume(&state)
                .flat_map(|b| b.unwrap().indices().to_vec()),
        );
    }
    // 8 left over 3 ranks: one repeated so that every rank delivers 3 batches.
    assert_eq!(got.len(), 4 + 9);
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, (0..12).collect::<Vec<u64>>());
}

#[test]
fn a_bad_tfrecord_payload_is_a_skippable_error_naming_the_shard_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let files = tfrecords(dir.path(), 1, 4);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    // A bit of record 2's image flipped: its payload CRC fails, its framing is intact.
    let second = {
        let len0 = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let at1 = len0 + 16;
        let len1 = u64::from_le_bytes(bytes[at1..at1 + 8].try_into().unwrap()) as usize;
        at1 + len1 + 16
    };
    bytes[second + 12 + 500] ^= 4;
    std::fs::write(&files[0], &bytes).unwrap();
    let source = Source::open(&files[0]).unwrap();
    let loader = |on_error| {
        Loader::builder(source.clone())
            .image_size(16)
            .batch_size(1)
            .shuffle(false)
            .on_error(on_error)
            .build()
            .unwrap()
    };
    let e = loader(OnError::Fail)
        .epoch(0)
        .find_map(|b| b.err())
        .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("train-00000-of-00001[record 2 at byte ")
            && text.contains(&format!("byte {second}]"))
            && text.contains("CRC32C"),
        "{text}"
    );
    assert!(e.is_data_error());
    assert_eq!(indices(&loader(OnError::SKIP_ALL), 0), vec![0, 1, 3]);
}

fn open_err(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tfrecord");
    std::fs::write(&p, bytes).unwrap();
    let e = Source::open(&p).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("x.tfrecord"), "{text}");
    text
}

#[test]
fn damaged_tfrecord_framing_and_labels_fail_at_open_by_name() {
    let good = |label: i64| {
        example(&[
            ("image/encoded", Ok(b"\xff\xd8\xff")),
            ("image/class/label", Err(label)),
        ])
    };
    let file = framed(&[good(1), good(2)]);
    // Cut inside the second record.
    let e = open_err(&file[..file.len() - 3]);
    assert!(
        e.contains("truncated") && e.contains("record 1 at byte"),
        "{e}"
    );
    // A length CRC that fails.
    let mut bad = file.clone();
    bad[9] ^= 1;
    assert!(open_err(&bad).contains("record 0 at byte 0: its length fails its CRC"));
    // A length claiming 2^60 bytes: refused by the file's size, nothing allocated.
    let huge = (1u64 << 60).to_le_bytes();
    let mut frame = huge.to_vec();
    frame.extend_from_slice(&masked(&huge).to_le_bytes());
    frame.extend_from_slice(&[0; 8]);
    assert!(open_err(&frame).contains("holds 1152921504606846976 bytes"));
    // Labels out of range.
    assert!(open_err(&framed(&[good(1), good(-1)])).contains("record 1 at byte"));
    assert!(open_err(&framed(&[good(1 << 32)])).contains("4294967296"));
    // No record with the image.
    let e = open_err(&framed(&[example(&[("jpeg", Ok(b"x"))])]));
    assert!(
        e.contains("no `image/encoded` or `image` feature") && e.contains("jpeg"),
        "{e}"
    );
}

#[test]
fn a_tfrecord_without_the_image_key_is_a_bad_sample_and_unlabelled_files_get_label_zero() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tfrecord");
    let img = photo(0);
    std::fs::write(
        &p,
        framed(&[
            example(&[("image", Ok(&img))]),
            example(&[("other", Ok(b"x"))]),
            example(&[("image", Ok(&img))]),
        ]),
    )
    .unwrap();
    let source = Source::open(&p).unwrap();
    assert_eq!(source.num_classes(), 1);
    let l = Loader::builder(source)
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::Skip { max: 1 })
        .build()
        .unwrap();
    assert_eq!(indices(&l, 0), vec![0, 2]);
    let (path, why) = &l.stats().skipped_samples[0];
    assert!(
        path.to_string_lossy()
            .contains("x.tfrecord[record 1 at byte "),
        "{path:?}"
    );
    assert!(
        why.contains("no `image/encoded` or `image` feature"),
        "{why}"
    );
    // A key set by the caller is required.
    let e = Source::from_tfrecords_with([&p], imagefeed::TfRecordOptions::default().label_key("y"))
        .unwrap_err();
    assert!(
        e.to_string().contains("no record has the label key `y`"),
        "{e}"
    );
}

// ---- parquet files written here ----

pub(crate) mod pq {
    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    /// A row: the image bytes (`None`: null) and the label (`None`: null).
    pub(crate) type Row = (Option<Vec<u8>>, Option<i64>);

    /// Writes `groups` of rows in the `datasets` layout (`label` omitted if `labels` is false).
    pub(crate) fn write(path: &std::path::Path, groups: &[Vec<Row>], labels: bool) {
        let schema = if labels {
            "message schema { optional group image { optional binary bytes; optional binary path (STRING); } optional int64 label; }"
        } else {
            "message schema { optional group image { optional binary bytes; optional binary path (STRING); } }"
        };
        let schema = Arc::new(parse_message_type(schema).unwrap());
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(parquet::basic::Compression::SNAPPY)
                .build(),
        );
        let file = std::fs::File::create(path).unwrap();
        let mut w = SerializedFileWriter::new(file, schema, props).unwrap();
        for rows in groups {
            let mut g = w.next_row_group().unwrap();
            let mut column = 0;
            while let Some(mut c) = g.next_column().unwrap() {
                match column {
                    0 | 1 => {
                        let defs: Vec<i16> = rows
                            .iter()
                            .map(|r| if r.0.is_some() { 2 } else { 0 })
                            .collect();
                        let values: Vec<ByteArray> = rows
                            .iter()
                            .filter_map(|r| r.0.as_ref())
                            .map(|b| {
                                if column == 0 {
                                    ByteArray::from(b.clone())
                                } else {
                                    ByteArray::from("x.jpg")
                                }
                            })
                            .collect();
                        c.typed::<ByteArrayType>()
                            .write_batch(&values, Some(&defs), None)
                            .unwrap();
                    }
                    _ => {
                        let defs: Vec<i16> =
                            rows.iter().map(|r| i16::from(r.1.is_some())).collect();
                        let values: Vec<i64> = rows.iter().filter_map(|r| r.1).collect();
                        c.typed::<Int64Type>()
                            .write_batch(&values, Some(&defs), None)
                            .unwrap();
                    }
                }
                c.close().unwrap();
                column += 1;
            }
            g.close().unwrap();
        }
        w.close().unwrap();
    }
}

fn rows(n: usize, from: usize) -> Vec<pq::Row> {
    (from..from + n)
        .map(|i| (Some(photo(i)), Some((i % 5) as i64)))
        .collect()
}

#[test]
fn parquet_row_groups_shard_resume_and_cache_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    pq::write(
        &dir.path().join("a.parquet"),
        &[rows(3, 0), rows(3, 3)],
        true,
    );
    pq::write(&dir.path().join("b.parquet"), &[rows(4, 6)], true);
    let source = Source::open(dir.path()).unwrap();
    assert_eq!((source.kind(), source.len()), (SourceKind::Parquet, 10));
    let cache = dir.path().join("c.cache");
    let make = |rank: usize, world: usize| {
        Loader::builder(source.clone())
            .image_size(16)
            .batch_size(1)
            .seed(8)
            .shard(rank, world)
            .cache(&cache)
            .build()
            .unwrap()
    };
    for epoch in 0..2 {
        let mut all = Vec::new();
        for rank in 0..2 {
            for b in make(rank, 2).epoch(epoch) {
                let b = b.unwrap();
                assert_eq!(u64::from(b.labels()[0]), b.indices()[0] % 5);
                all.push(b.indices()[0]);
            }
        }
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<u64>>(), "epoch {epoch}");
    }
    // Resumed on 3 ranks after 2 batches on 2.
    let mut got = Vec::new();
    let mut state = String::new();
    for rank in 0..2 {
        let l = make(rank, 2);
        let mut it = l.epoch(3);
        for _ in 0..2 {
            got.extend_from_slice(it.next().unwrap().unwrap().indices());
        }
        state = it.state().to_string();
    }
    let state: LoaderState = state.parse().unwrap();
    for rank in 0..3 {
        got.extend(
            make(rank, 3)
                .resume(&state)
                .flat_map(|b| b.unwrap().indices().to_vec()),
        );
    }
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, (0..10).collect::<Vec<u64>>());
}

#[test]
fn bad_parquet_files_are_errors_naming_the_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.parquet");
    let open = |groups: &[Vec<pq::Row>], labels: bool| {
        pq::write(&p, groups, labels);
        Source::open(&p)
    };
    // Labels out of range, or null.
    let mut r = rows(3, 0);
    r[2].1 = Some(-1);
    let e = open(&[r], true).unwrap_err().to_string();
    assert!(
        e.contains("x.parquet") && e.contains("row 2") && e.contains("-1"),
        "{e}"
    );
    let mut r = rows(3, 0);
    r[1].1 = Some(1 << 33);
    assert!(open(&[r], true).unwrap_err().to_string().contains("row 1"));
    let mut r = rows(3, 0);
    r[0].1 = None;
    assert!(open(&[r], true)
        .unwrap_err()
        .to_string()
        .contains("row 0: the label (`label`) is null"));
    // A null image: a bad sample, skippable.
    let mut r = rows(3, 0);
    r[1].0 = None;
    let source = open(&[r], true).unwrap();
    let l = Loader::builder(source)
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    assert_eq!(indices(&l, 0), vec![0, 2]);
    let (path, why) = &l.stats().skipped_samples[0];
    assert!(
        path.ends_with("x.parquet[row 1]") && why.contains("null"),
        "{path:?}: {why}"
    );
    // Unlabelled: label 0. A label column named but missing, and a missing image column.
    let source = open(&[rows(2, 0)], false).unwrap();
    assert_eq!(source.num_classes(), 1);
    let e = Source::from_parquet_with([&p], imagefeed::ParquetOptions::default().label_column("y"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no column `y`") && e.contains("image.bytes"),
        "{e}"
    );
    let e = Source::from_parquet_with(
        [&p],
        imagefeed::ParquetOptions::default().image_column("img"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no column `img`"), "{e}");
    // A label column of another type.
    let e = Source::from_parquet_with(
        [&p],
        imagefeed::ParquetOptions::default().label_column("image"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("no column `image`") || e.contains("not an integer"),
        "{e}"
    );
    // Truncated, and not parquet at all.
    open(&[rows(3, 0)], true).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2, 3] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = Source::open(&p).unwrap_err().to_string();
        assert!(
            e.contains("x.parquet") && e.contains("not a readable parquet file"),
            "{e}"
        );
    }
}

#[test]
fn a_folder_of_two_sets_or_two_kinds_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "train-00000-of-00001.parquet",
        "test-00000-of-00001.parquet",
    ] {
        pq::write(&dir.path().join(name), &[rows(1, 0)], true);
    }
    let e = Source::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("more than one set"), "{e}");
    std::fs::remove_file(dir.path().join("test-00000-of-00001.parquet")).unwrap();
    tfrecords(dir.path(), 1, 1);
    let e = Source::open(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("parquet files") && e.contains("TFRecord files"),
        "{e}"
    );
}

/// A parquet file the fuzz target found, whose page header lacks its data-page part: the
/// `parquet` crate panics reading it. It must be an error naming the file (at open, or for
/// its rows as skippable samples), never a panic out of the loader.
#[test]
fn a_parquet_file_the_parquet_crate_panics_on_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("damaged.parquet");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/regressions/parquet/page-header-without-data-page.parquet"),
        &file,
    )
    .unwrap();
    let errors: Vec<String> = match Source::from_parquet([&file]) {
        Err(e) => vec![e.to_string()],
        Ok(source) => {
            let loader = Loader::builder(source)
                .image_size(16)
                .batch_size(2)
                .on_error(OnError::SKIP_ALL)
                .build()
                .unwrap();
            let batches: Vec<_> = loader.epoch(0).collect();
            assert!(batches.iter().all(|b| b.is_ok()));
            let skipped = loader.stats().skipped_samples;
            assert!(!skipped.is_empty(), "no row was refused");
            skipped
                .iter()
                .map(|(path, why)| format!("{}: {why}", path.display()))
                .collect()
        }
    };
    for e in &errors {
        assert!(e.contains("damaged.parquet"), "{e}");
        assert!(e.contains("parquet"), "{e}");
    }
}

/// `datasets` writes a `ClassLabel`'s names into the parquet file's metadata: they are the
/// source's class names.
#[test]
fn a_class_labels_names_come_from_the_parquet_metadata() {
    let source = Source::open(testdata("formats/parquet")).unwrap();
    let names = source.class_names().expect("the ClassLabel's names");
    assert_eq!(names.len() as u32, source.num_classes());
    assert_eq!(names, ["cat", "dog", "fish"]);
}

/// A parquet image given by path (`bytes` null, `path` set, as `datasets` writes images it
/// keeps as files) is read from that path, relative to the parquet file's folder; a path that
/// does not exist is an error naming the row and the path.
#[test]
fn a_parquet_image_given_by_path_is_read_from_it() {
    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("img")).unwrap();
    let jpeg = std::fs::read(testdata("classes/cat/cat_0.jpg")).unwrap();
    std::fs::write(dir.path().join("img/a.jpg"), &jpeg).unwrap();
    // Rows: bytes inline; by path; by a path that is missing.
    let rows: [(Option<&[u8]>, &str); 3] = [
        (Some(&jpeg), "inline.jpg"),
        (None, "img/a.jpg"),
        (None, "img/gone.jpg"),
    ];
    let schema = "message schema { optional group image { optional binary bytes; optional binary path (STRING); } optional int64 label; }";
    let file = std::fs::File::create(dir.path().join("d.parquet")).unwrap();
    let mut w = SerializedFileWriter::new(
        file,
        Arc::new(parse_message_type(schema).unwrap()),
        Arc::new(WriterProperties::builder().build()),
    )
    .unwrap();
    let mut g = w.next_row_group().unwrap();
    let mut column = 0;
    while let Some(mut c) = g.next_column().unwrap() {
        match column {
            0 => {
                let defs: Vec<i16> = rows
                    .iter()
                    .map(|r| if r.0.is_some() { 2 } else { 1 })
                    .collect();
                let values: Vec<ByteArray> = rows
                    .iter()
                    .filter_map(|r| r.0)
                    .map(|b| ByteArray::from(b.to_vec()))
                    .collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&values, Some(&defs), None)
                    .unwrap();
            }
            1 => {
                let values: Vec<ByteArray> = rows.iter().map(|r| ByteArray::from(r.1)).collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&values, Some(&[2, 2, 2]), None)
                    .unwrap();
            }
            _ => {
                c.typed::<Int64Type>()
                    .write_batch(&[0, 1, 2], Some(&[1, 1, 1]), None)
                    .unwrap();
            }
        }
        c.close().unwrap();
        column += 1;
    }
    g.close().unwrap();
    w.close().unwrap();

    let loader = Loader::builder(Source::open(dir.path().join("d.parquet")).unwrap())
        .image_size(16)
        .batch_size(1)
        .shuffle(false)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    let mut seen = Vec::new();
    let mut pixels = Vec::new();
    for b in loader.epoch(0) {
        let b = b.unwrap();
        seen.push(b.indices()[0]);
        pixels.push(b.as_f32().unwrap().to_vec());
    }
    assert_eq!(seen, [0, 1]);
    assert_eq!(pixels[0], pixels[1], "the same JPEG, inline and by path");
    let (path, why) = &loader.stats().skipped_samples[0];
    assert!(path.ends_with("d.parquet[row 2]"), "{path:?}");
    assert!(
        why.contains("img/gone.jpg") && why.contains("No such file"),
        "{why}"
    );
}

/// The layouts users have open from the library and the command line: a dataset repository's
/// root (its files in `data/`, a split each), a split by name, a name prefix, brace ranges and
/// wildcards as WebDataset users write them, and other parquet columns.
#[test]
fn repository_roots_splits_prefixes_and_patterns_open() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("data")).unwrap();
    std::fs::write(repo.join("README.md"), "# a dataset card\n").unwrap();
    pq::write(
        &repo.join("data/train-00000-of-00002.parquet"),
        &[rows(3, 0)],
        true,
    );
    pq::write(
        &repo.join("data/train-00001-of-00002.parquet"),
        &[rows(2, 3)],
        true,
    );
    pq::write(
        &repo.join("data/test-00000-of-00001.parquet"),
        &[rows(4, 5)],
        true,
    );
    // Two splits side by side: an error that says how to open one.
    let e = Source::open(&repo).unwrap_err().to_string();
    assert!(
        e.contains("more than one set") && e.contains("--split") && e.contains("open_split"),
        "{e}"
    );
    assert_eq!(Source::open_split(&repo, "train").unwrap().len(), 5);
    assert_eq!(Source::open_split(&repo, "test").unwrap().len(), 4);
    assert!(Source::open_split(&repo, "validation")
        .unwrap_err()
        .to_string()
        .contains("no split `validation`"));
    assert_eq!(Source::open(repo.join("data/train-")).unwrap().len(), 5);
    assert_eq!(
        Source::open(repo.join("data/test-*.parquet"))
            .unwrap()
            .len(),
        4
    );
    // A repository root of one split opens through data/.
    std::fs::remove_file(repo.join("data/test-00000-of-00001.parquet")).unwrap();
    assert_eq!(Source::open(&repo).unwrap().len(), 5);

    // Tar shards by brace range, wildcard and prefix.
    let shards = dir.path().join("shards");
    let all = Source::from_dir(testdata("classes")).unwrap();
    imagefeed::write_shards(&all, &shards, 3, None).unwrap();
    let range = Source::open(shards.join("shard-{000000..000001}.tar")).unwrap();
    assert_eq!((range.kind(), range.len()), (SourceKind::TarShards, 6));
    assert_eq!(Source::open(shards.join("*.tar")).unwrap().len(), all.len());
    assert_eq!(
        Source::open(shards.join("shard-")).unwrap().len(),
        all.len()
    );
    // A missing name is an error, never the files that start like it.
    let e = Source::open(shards.join("shard-00000")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e}");
    let e = Source::open(shards.join("shard-{000000..000009}.tar"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shard-000004.tar") && e.contains("not there"),
        "{e}"
    );
    let e = Source::open(shards.join("nothing-")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e}");

    // The command line: --split, and parquet columns named by option.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .args(args)
            .args(["--batch-size", "2", "--size", "16", "16", "--json"])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let repo_arg = repo.to_str().unwrap();
    let (ok, stdout, stderr) = run(&[repo_arg, "--split", "train"]);
    assert!(ok && stdout.contains("\"images\":5"), "{stdout}{stderr}");
    let (ok, _, stderr) = run(&[repo_arg, "--label-column", "fine_label"]);
    assert!(!ok && stderr.contains("no column `fine_label`"), "{stderr}");
    let (ok, _, stderr) = run(&[repo_arg, "--image-column", "img"]);
    assert!(!ok && stderr.contains("no column `img`"), "{stderr}");
}
