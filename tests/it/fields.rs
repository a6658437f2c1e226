//! Per-sample fields: captions and targets from tar members, parquet columns, TFRecord
//! features and TSV list columns reach every delivered sample as its own — shuffled, sharded,
//! resumed at another world size, through the cache and `OnError::Skip`'s stand-ins — and a
//! missing or oversized value is an error naming the sample and the field.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use imagefeed::{
    ErrorKind, Field, FieldValue, Loader, LoaderBuilder, LoaderState, OnError, Source,
};

use crate::common::testdata;

fn photo(i: usize) -> Vec<u8> {
    std::fs::read(testdata(&format!("photos/photo_{}.jpg", i % 6))).unwrap()
}

/// The caption written for sample `i`.
fn caption(i: usize) -> String {
    format!("a photo, number {i} — ünïcode")
}

fn tar_of(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// `shards` tar shards of `per` samples as img2dataset writes them: `KEY.jpg`, `KEY.txt`,
/// `KEY.json` (and `KEY.cls`), sample `i` with caption `caption(i)`.
fn img2dataset_shards(dir: &Path, shards: usize, per: usize) {
    for s in 0..shards {
        let mut members = Vec::new();
        for k in 0..per {
            let i = s * per + k;
            let key = format!("{s:05}{k:04}");
            members.push((format!("{key}.jpg"), photo(i)));
            members.push((format!("{key}.txt"), caption(i).into_bytes()));
            members.push((
                format!("{key}.json"),
                format!("{{\"key\": \"{key}\", \"i\": {i}}}").into_bytes(),
            ));
            members.push((format!("{key}.cls"), (i % 3).to_string().into_bytes()));
        }
        std::fs::write(dir.join(format!("{s:05}.tar")), tar_of(&members)).unwrap();
    }
}

/// Which sample `i` of `source` is, as written: its number in the caption.
fn number_of(text: &str) -> usize {
    text.split("number ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Every delivered sample's (dataset index, caption) through `make`'s loaders.
fn delivered(loader: &Loader, epoch: u64, state: Option<&LoaderState>) -> Vec<(u64, String)> {
    let batches = match state {
        Some(s) => loader.resume(s),
        None => loader.epoch(epoch),
    };
    let mut out = Vec::new();
    for b in batches {
        let b = b.unwrap();
        let captions = b.field("txt").expect("asked for");
        assert_eq!(captions.len(), b.len());
        for (k, &i) in b.indices().iter().enumerate() {
            out.push((i, captions.text(k).expect("text").to_string()));
        }
    }
    out
}

fn builder(source: &Source) -> LoaderBuilder {
    Loader::builder(source.clone())
        .image_size(16)
        .batch_size(3)
        .seed(5)
        .field("txt")
}

#[test]
fn tar_captions_follow_their_images_shuffled_sharded_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    img2dataset_shards(dir.path(), 3, 7);
    let source = Source::open(dir.path()).unwrap();
    // The caption of each index, from an unshuffled epoch.
    let truth: HashMap<u64, String> =
        delivered(&builder(&source).shuffle(false).build().unwrap(), 0, None)
            .into_iter()
            .collect();
    assert_eq!(truth.len(), 21);
    for (i, text) in &truth {
        // Written in key order, read in shard order: index i is sample i.
        assert_eq!(text, &caption(*i as usize));
        assert_eq!(number_of(text), *i as usize);
    }
    // Shuffled, on 2 ranks, stopped after 2 steps and resumed on 3: every sample once, with
    // its own caption.
    let rank = |r: usize, w: usize| builder(&source).shard(r, w).build().unwrap();
    let mut states = Vec::new();
    let mut seen = Vec::new();
    for r in 0..2 {
        let loader = rank(r, 2);
        let mut batches = loader.epoch(1);
        for _ in 0..2 {
            let b = batches.next().unwrap().unwrap();
            let captions = b.field("txt").unwrap();
            for (k, &i) in b.indices().iter().enumerate() {
                seen.push((i, captions.text(k).unwrap().to_string()));
            }
        }
        states.push(batches.state());
    }
    let state = LoaderState::agree(&states).unwrap();
    for r in 0..3 {
        seen.extend(delivered(&rank(r, 3), 1, Some(&state)));
    }
    let mut indices: Vec<u64> = seen.iter().map(|s| s.0).collect();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), 21, "every sample");
    for (i, text) in &seen {
        assert_eq!(text, &truth[i], "sample {i}");
    }
    // JSON members are fields too, and a member no sample has is missing.
    let loader = builder(&source)
        .field(Field::new("json"))
        .field(Field::new("seg.png").optional())
        .build()
        .unwrap();
    for b in loader.epoch(0) {
        let b = b.unwrap();
        let (json, seg) = (b.field("json").unwrap(), b.field("seg.png").unwrap());
        for (k, &i) in b.indices().iter().enumerate() {
            assert!(json.text(k).unwrap().contains(&format!("\"i\": {i}}}")));
            assert_eq!(seg.get(k), None);
        }
        assert_eq!(b.fields().count(), 3);
    }
}

#[test]
fn captions_come_back_from_the_cache_and_with_stand_ins() {
    let dir = tempfile::tempdir().unwrap();
    img2dataset_shards(dir.path(), 2, 6);
    let source = Source::open(dir.path()).unwrap();
    let cache = dir.path().join("c.cache");
    let loader = builder(&source).cache(&cache).build().unwrap();
    for epoch in 0..3 {
        let got = delivered(&loader, epoch, None);
        assert_eq!(got.len(), 12);
        for (i, text) in got {
            assert_eq!(text, caption(i as usize), "epoch {epoch}");
        }
    }
    assert!(loader.stats().from_cache, "the last epoch read the cache");
    // Under sharding a failed sample's place is taken by a copy of another: its caption too.
    for r in 0..2 {
        let loader = builder(&source)
            .shard(r, 2)
            .on_error(OnError::SKIP_ALL)
            .inject_failures(|_, i| (i % 4 == 1).then_some(true))
            .build()
            .unwrap();
        for b in loader.epoch(0) {
            let b = b.unwrap();
            let captions = b.field("txt").unwrap();
            for (k, &i) in b.indices().iter().enumerate() {
                assert_ne!(i % 4, 1, "a failed sample is not delivered");
                assert_eq!(captions.text(k).unwrap(), caption(i as usize));
            }
        }
    }
}

#[test]
fn an_oversized_or_missing_field_names_the_sample_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let members = vec![
        ("a.jpg".to_string(), photo(0)),
        ("a.txt".to_string(), vec![b'x'; 1 << 20]),
        ("b.jpg".to_string(), photo(1)),
        ("b.txt".to_string(), b"short".to_vec()),
        ("c.jpg".to_string(), photo(2)),
    ];
    std::fs::write(dir.path().join("s.tar"), tar_of(&members)).unwrap();
    let source = Source::open(dir.path()).unwrap();
    let first_error = |b: LoaderBuilder| {
        b.shuffle(false)
            .build()
            .unwrap()
            .epoch(0)
            .find_map(Result::err)
            .expect("an error")
    };
    let e = first_error(builder(&source));
    assert!(
        matches!(e.kind(), ErrorKind::Field { field, .. } if field == "txt"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("s.tar[a.jpg]")
            && text.contains("field `txt`: 1048576 bytes, over its limit of 65536"),
        "{text}"
    );
    // A larger limit lets it through; then c has none.
    let e = first_error(builder(&source).field_limit(2 << 20));
    assert!(
        e.to_string().contains("s.tar[c.jpg]: field `txt`: missing"),
        "{e}"
    );
    // Skipped, they are counted; optional, c's is None.
    let loader = Loader::builder(source.clone())
        .image_size(16)
        .shuffle(false)
        .field(Field::new("txt").optional())
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    let b = loader.epoch(0).next().unwrap().unwrap();
    assert_eq!(b.indices(), &[1, 2]);
    assert_eq!(b.field("txt").unwrap().text(0), Some("short"));
    assert_eq!(b.field("txt").unwrap().get(1), None);
    // A field asked twice, a source without fields, a limit of 0.
    let classes = Source::from_dir(testdata("classes")).unwrap();
    for (b, what) in [
        (builder(&source).field("txt"), "asked for twice"),
        (Loader::builder(classes).field("txt"), "has no fields"),
        (builder(&source).field_limit(0), "a limit of 0"),
    ] {
        let e = b.build().expect_err("refused").to_string();
        assert!(e.contains(what), "{e}");
    }
}

#[test]
fn a_tsv_list_carries_its_columns_as_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("path\tlabel\tcaption\tsource\n");
    for i in 0..8 {
        let name = format!("p{i}.jpg");
        std::fs::write(dir.path().join(&name), photo(i)).unwrap();
        text.push_str(&format!(
            "{name}\t{}\t{}\t{}\n",
            i % 2,
            caption(i),
            if i == 3 { "" } else { "web" }
        ));
    }
    let list = dir.path().join("train.tsv");
    std::fs::write(&list, text).unwrap();
    let source = Source::open(&list).unwrap();
    assert_eq!(source.len(), 8);
    let loader = Loader::builder(source.clone())
        .image_size(16)
        .batch_size(3)
        .fields(["caption", "source"])
        .shard(1, 2)
        .build()
        .unwrap();
    let mut n = 0;
    for b in loader.epoch(0) {
        let b = b.unwrap();
        for (k, &i) in b.indices().iter().enumerate() {
            assert_eq!(b.labels()[k] as u64, i % 2);
            assert_eq!(
                b.field("caption").unwrap().text(k),
                Some(&*caption(i as usize))
            );
            let want = if i == 3 { "" } else { "web" };
            assert_eq!(
                b.field("source").unwrap().get(k),
                Some(FieldValue::Text(want))
            );
            n += 1;
        }
    }
    assert_eq!(n, 4);
    let e = Loader::builder(source)
        .field("nope")
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("has no column `nope`") && e.contains("path, label, caption, source"),
        "{e}"
    );
    // A plain list has no fields.
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, "p0.jpg\t0\n").unwrap();
    let e = Loader::builder(Source::open(&plain).unwrap())
        .field("caption")
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("has no fields"), "{e}");
}

/// TFRecord: a text feature, a float list and an int64 list.
#[test]
fn tfrecord_features_are_fields() {
    use crate::formats::{field as pb, framed, varint};
    let dir = tempfile::tempdir().unwrap();
    let mut payloads = Vec::new();
    for i in 0..6usize {
        // features: image/encoded (bytes), caption (bytes), emb (floats), tags (int64s)
        let mut map = Vec::new();
        let mut entry = |key: &str, kind: u64, list: Vec<u8>| {
            let mut feature = Vec::new();
            pb(&mut feature, kind, &list);
            let mut e = Vec::new();
            pb(&mut e, 1, key.as_bytes());
            pb(&mut e, 2, &feature);
            pb(&mut map, 1, &e);
        };
        let bytes_list = |b: &[u8]| {
            let mut l = Vec::new();
            pb(&mut l, 1, b);
            l
        };
        entry("image/encoded", 1, bytes_list(&photo(i)));
        entry("caption", 1, bytes_list(caption(i).as_bytes()));
        let mut floats = Vec::new();
        for v in [i as f32, 0.5] {
            floats.extend_from_slice(&v.to_le_bytes());
        }
        let mut fl = Vec::new();
        pb(&mut fl, 1, &floats);
        entry("emb", 2, fl);
        let mut packed = Vec::new();
        for t in [i as u64, 7] {
            varint(&mut packed, t);
        }
        let mut il = Vec::new();
        pb(&mut il, 1, &packed);
        entry("tags", 3, il);
        let mut ex = Vec::new();
        pb(&mut ex, 1, &map);
        payloads.push(ex);
    }
    std::fs::write(dir.path().join("train.tfrecord"), framed(&payloads)).unwrap();
    let source = Source::open(dir.path()).unwrap();
    let loader = Loader::builder(source)
        .image_size(16)
        .batch_size(6)
        .fields(["caption", "emb", "tags"])
        .build()
        .unwrap();
    let b = loader.epoch(0).next().unwrap().unwrap();
    let (emb, [n, w]) = b.field("emb").unwrap().float_matrix().expect("rows of 2");
    assert_eq!((n, w), (6, 2));
    for (k, &i) in b.indices().iter().enumerate() {
        assert_eq!(
            b.field("caption").unwrap().text(k),
            Some(&*caption(i as usize))
        );
        assert_eq!(&emb[k * 2..k * 2 + 2], &[i as f32, 0.5]);
        assert_eq!(b.field("tags").unwrap().ints(k), Some(&[i as i64, 7][..]));
    }
    let owned = b.into_owned().unwrap();
    assert_eq!(owned.fields.len(), 3);
    assert_eq!(owned.fields[0].name, "caption");
}

/// Parquet: a string column, a list of floats and a list of ints (multi-label).
#[cfg(feature = "parquet")]
#[test]
fn parquet_columns_are_fields() {
    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, FloatType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("train-00000-of-00001.parquet");
    let schema = "message schema {
        optional group image { optional binary bytes; optional binary path (STRING); }
        optional int64 label;
        optional binary text (STRING);
        optional group labels (LIST) { repeated group list { optional int64 element; } }
        optional group emb (LIST) { repeated group list { optional float element; } }
    }";
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let props = Arc::new(WriterProperties::builder().build());
    let mut w =
        SerializedFileWriter::new(std::fs::File::create(&path).unwrap(), schema, props).unwrap();
    let n = 5usize;
    let mut g = w.next_row_group().unwrap();
    let mut column = 0;
    while let Some(mut c) = g.next_column().unwrap() {
        match column {
            0 => {
                let v: Vec<ByteArray> = (0..n).map(|i| ByteArray::from(photo(i))).collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&v, Some(&[2; 5]), None)
                    .unwrap();
            }
            1 => {
                let v: Vec<ByteArray> = (0..n).map(|_| ByteArray::from("x.jpg")).collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&v, Some(&[2; 5]), None)
                    .unwrap();
            }
            2 => {
                let v: Vec<i64> = (0..n as i64).map(|i| i % 2).collect();
                c.typed::<Int64Type>()
                    .write_batch(&v, Some(&[1; 5]), None)
                    .unwrap();
            }
            3 => {
                // Row 4 has no text (null).
                let v: Vec<ByteArray> = (0..4)
                    .map(|i| ByteArray::from(caption(i).as_str()))
                    .collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&v, Some(&[1, 1, 1, 1, 0]), None)
                    .unwrap();
            }
            4 => {
                // labels: row i holds [i, i + 1] (row 2: empty list).
                let (mut v, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
                for i in 0..n as i64 {
                    if i == 2 {
                        defs.push(1);
                        reps.push(0);
                        continue;
                    }
                    v.extend([i, i + 1]);
                    defs.extend([3, 3]);
                    reps.extend([0, 1]);
                }
                c.typed::<Int64Type>()
                    .write_batch(&v, Some(&defs), Some(&reps))
                    .unwrap();
            }
            _ => {
                let v: Vec<f32> = (0..n).flat_map(|i| [i as f32, -1.0, 2.5]).collect();
                let defs = vec![3i16; 3 * n];
                let reps: Vec<i16> = (0..n).flat_map(|_| [0, 1, 1]).collect();
                c.typed::<FloatType>()
                    .write_batch(&v, Some(&defs), Some(&reps))
                    .unwrap();
            }
        }
        c.close().unwrap();
        column += 1;
    }
    g.close().unwrap();
    w.close().unwrap();
    let source = Source::open(dir.path()).unwrap();
    let loader = Loader::builder(source.clone())
        .image_size(16)
        .batch_size(5)
        .shuffle(false)
        .field(Field::new("text").optional())
        .fields(["labels", "emb"])
        .build()
        .unwrap();
    let b = loader.epoch(0).next().unwrap().unwrap();
    let text = b.field("text").unwrap();
    for i in 0..4 {
        assert_eq!(text.text(i), Some(&*caption(i)));
    }
    assert_eq!(text.get(4), None);
    let labels = b.field("labels").unwrap();
    assert_eq!(labels.ints(0), Some(&[0, 1][..]));
    assert_eq!(labels.ints(2), Some(&[][..]));
    assert_eq!(labels.ints(4), Some(&[4, 5][..]));
    let (emb, shape) = b.field("emb").unwrap().float_matrix().unwrap();
    assert_eq!(shape, [5, 3]);
    assert_eq!(&emb[3..6], &[1.0, -1.0, 2.5]);
    // A column that is not there is named, with the file's columns.
    let e = Loader::builder(source)
        .field("caption")
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("no column `caption`") && e.contains("text"),
        "{e}"
    );
}

/// `imagefeed bench --field txt --fields-out`: one JSON line a delivered sample, with its
/// caption; `--json` reports the field's sizes; `--field-limit` names the sample over it.
#[test]
fn the_command_line_writes_each_samples_fields() {
    let dir = tempfile::tempdir().unwrap();
    img2dataset_shards(dir.path(), 2, 5);
    let out_file = dir.path().join("fields.jsonl");
    let bench = |extra: &[&str]| {
        std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .arg(dir.path())
            .args([
                "--size",
                "8",
                "8",
                "--batch-size",
                "4",
                "--json",
                "--field",
                "txt",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&[
        "--field",
        "json",
        "--fields-out",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["fields"]["txt"]["values"], 10);
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(text.lines().count(), 10);
    for line in text.lines() {
        assert!(line.starts_with("{\"source\":0,"), "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let i = v["index"].as_u64().unwrap() as usize;
        assert_eq!(v["fields"]["txt"], caption(i));
        assert_eq!(v["label"], (i % 3) as u64);
    }
    let out = bench(&["--field-limit", "10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("field `txt`") && err.contains("over its limit of 10"),
        "{err}"
    );
}

/// Re-sharding keeps what a sample had: a tar source's other members, another source's fields
/// asked for, and the class names, which opening the shards reads back.
#[test]
fn shards_keep_members_fields_and_class_names() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("from");
    std::fs::create_dir(&from).unwrap();
    img2dataset_shards(&from, 2, 4);
    let out = dir.path().join("out");
    imagefeed::write_shards(&Source::open(&from).unwrap(), &out, 3, Some(9)).unwrap();
    let resharded = Source::open(&out).unwrap();
    let loader = builder(&resharded).field("json").build().unwrap();
    for b in loader.epoch(0) {
        let b = b.unwrap();
        for (k, &i) in b.indices().iter().enumerate() {
            let text = b.field("txt").unwrap().text(k).unwrap();
            let n = number_of(text);
            assert_eq!(b.labels()[k] as usize, n % 3, "sample {i}");
            assert!(b
                .field("json")
                .unwrap()
                .text(k)
                .unwrap()
                .contains(&format!("\"i\": {n}}}")));
        }
    }
    // Class folders: their names come back; a TSV list's column becomes a member.
    let classes = dir.path().join("classes");
    imagefeed::write_shards(
        &Source::from_dir(testdata("classes")).unwrap(),
        &classes,
        2,
        None,
    )
    .unwrap();
    let back = Source::open(&classes).unwrap();
    assert_eq!(
        back.class_names(),
        Source::from_dir(testdata("classes")).unwrap().class_names()
    );
    let tsv_dir = dir.path().join("tsv");
    std::fs::create_dir(&tsv_dir).unwrap();
    let mut text = String::from("path\tlabel\tcaption\n");
    for i in 0..3 {
        std::fs::write(tsv_dir.join(format!("{i}.jpg")), photo(i)).unwrap();
        text.push_str(&format!("{i}.jpg\t{i}\t{}\n", caption(i)));
    }
    std::fs::write(tsv_dir.join("list.tsv"), text).unwrap();
    let tsv = Source::open(tsv_dir.join("list.tsv")).unwrap();
    let tsv_out = dir.path().join("tsv-out");
    imagefeed::write_shards_with(&tsv, &tsv_out, 2, None, &[Field::new("caption")]).unwrap();
    let loader = Loader::builder(Source::open(&tsv_out).unwrap())
        .image_size(16)
        .field("caption")
        .build()
        .unwrap();
    let mut n = 0;
    for b in loader.epoch(0) {
        let b = b.unwrap();
        for (k, &i) in b.indices().iter().enumerate() {
            assert_eq!(
                b.field("caption").unwrap().text(k),
                Some(&*caption(i as usize))
            );
            n += 1;
        }
    }
    assert_eq!(n, 3);
}
