//! Lists and the files they name: missing, empty or unreadable files, malformed lines named
//! by their line, FIFOs and devices that never hang, lists read a line at a time.

use super::*;

#[test]
fn missing_directory_empty_and_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jpg");
    let e = expect_file_error(&missing, |b| b);
    match e.kind() {
        ErrorKind::Io { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
        _ => panic!("{e:?}"),
    }
    let folder = dir.path().join("x.jpg");
    std::fs::create_dir(&folder).unwrap();
    let e = expect_file_error(&folder, |b| b);
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
    assert!(contains_ci(&e.to_string(), "directory"), "{e}");
    let empty = dir.path().join("empty.jpg");
    std::fs::write(&empty, b"").unwrap();
    let e = expect_file_error(&empty, |b| b);
    assert!(contains_ci(&e.to_string(), "empty"), "{e}");
    // Cut inside the first bytes: said to be truncated, not "unknown binary data".
    for (name, bytes, format) in [
        ("soi.jpg", &b"\xFF\xD8"[..], "JPEG"),
        ("ff.jpg", &b"\xFF"[..], "JPEG"),
        ("cut.png", &b"\x89PNG"[..], "PNG"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = expect_file_error(&p, |b| b);
        let text = e.to_string();
        assert!(
            contains_ci(&text, &format!("truncated {format} file")),
            "{text}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.path().join("locked.jpg");
        std::fs::copy(common::testdata("valid/odd_7x5.jpg"), &locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&locked).is_ok() {
            common::skipped(&format!(
                "the permission-denied check: this process can read a mode-000 file (root: {})",
                common::is_root()
            ));
            assert!(common::load_one(&locked, |b| b).is_ok());
        } else {
            let e = expect_file_error(&locked, |b| b);
            match e.kind() {
                ErrorKind::Io { source, .. } => {
                    assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied)
                }
                _ => panic!("{e:?}"),
            }
        }
    }
}

fn list_error(content: &[u8]) -> (PathBuf, Error, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.txt");
    std::fs::write(&p, content).unwrap();
    let e = common::with_timeout(std::time::Duration::from_secs(10), {
        let p = p.clone();
        move || Source::from_list_file(&p).expect_err("a bad list is an error")
    });
    assert_eq!(e.path(), Some(p.as_path()), "{e}");
    assert!(!e.is_data_error());
    (p, e, dir)
}

fn expect_list_line(content: &[u8], want_line: usize, words: &[&str]) {
    let (p, e, _dir) = list_error(content);
    match e.kind() {
        ErrorKind::List { line, .. } => assert_eq!(*line, want_line, "{e}"),
        _ => panic!("not a List error: {e:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}:{want_line}: ", p.display())),
        "{msg}"
    );
    for w in words {
        assert!(contains_ci(&msg, w), "`{w}` missing: {msg}");
    }
}

/// Lines ended by bare CRs read as one line (its "path" ran over every entry, and the last
/// label was taken); a compressed list, a UTF-16 one, a shard or an image given as the list
/// failed on a "label" of binary bytes. Each now says what it is.
#[test]
fn a_list_with_bare_cr_line_ends_or_of_binary_data_says_so() {
    expect_list_line(b"a.jpg\t1\rb.jpg\t2\r", 1, &["carriage return", "bare CR"]);
    // gzip's header (magic, deflate, no flags), then bytes: enough to be told by its magic.
    let gz = b"\x1f\x8b\x08\0\0\0\0\0\0\x03KT\xc8*HW0\xe4\x02\0".to_vec();
    for (content, words) in [
        (gz, &["gzip-compressed"][..]),
        (
            b"\xff\xfea\0.\0j\0p\0g\0 \x001\0\n\0".to_vec(),
            &["UTF-16", "UTF-8"][..],
        ),
        (
            std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap(),
            &["a JPEG image"][..],
        ),
        (
            {
                let mut b = tar::Builder::new(Vec::new());
                let mut h = tar::Header::new_ustar();
                h.set_size(1);
                b.append_data(&mut h, "a.cls", &b"1"[..]).unwrap();
                b.into_inner().unwrap()
            },
            &["a tar archive"][..],
        ),
    ] {
        let (_p, e, _dir) = list_error(&content);
        assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("is not a file list"), "{msg}");
        for w in words {
            assert!(msg.contains(w), "`{w}` missing: {msg}");
        }
    }
    // A list whose first path starts with the letters of a magic number is still a list.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.txt");
    std::fs::write(&p, "BZh9_photos/a.jpg 1\nPK.jpg 2\n").unwrap();
    assert_eq!(Source::from_list_file(&p).unwrap().len(), 2);
}

#[test]
fn malformed_list_lines_name_the_line() {
    expect_list_line(
        b"a.jpg 1\nb.jpg 2\nonly_a_path.jpg\n",
        3,
        &["only_a_path.jpg", "label"],
    );
    expect_list_line(b"# c\n\nonly_a_path.jpg\n", 3, &["no label"]);
    expect_list_line(b"a.jpg\tcat\n", 1, &["`cat`", "not an integer"]);
    expect_list_line(b"a.jpg 1\nb.jpg 1.5\n", 2, &["not an integer"]);
    expect_list_line(b"a.jpg 0x10\n", 1, &["not an integer"]);
    expect_list_line(b"a.jpg 1\r\nb.jpg -3\r\n", 2, &["-3", "out of range"]);
    expect_list_line(b"a.jpg 4294967296\n", 1, &["out of range"]);
    expect_list_line(b"a.jpg 99999999999999999999999\n", 1, &["out of range"]);
    expect_list_line(
        b"\xEF\xBB\xBFa.jpg 1\nb.jpg 2\na.jpg 3\n",
        3,
        &["a.jpg", "line 1", "label 1", "label 3"],
    );
    // The largest label is fine, and so is the same path listed twice with one label.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.txt");
    std::fs::write(&p, "a.jpg 4294967295\nb.jpg 0\na.jpg 4294967295\n").unwrap();
    let s = Source::from_list_file(&p).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s.label(0), Some(u32::MAX));
    assert_eq!(s.path(2), s.path(0));
}

#[test]
fn empty_lists_are_errors_not_hangs() {
    for content in [
        &b""[..],
        b"\n\n",
        b"# header only\n",
        b"\xEF\xBB\xBF",
        b"   \r\n\t\n",
    ] {
        let (_, e, _dir) = list_error(content);
        assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
        assert!(contains_ci(&e.to_string(), "no entries"), "{e}");
    }
    let e = Source::from_list_file("/nonexistent/imagefeed/list.txt").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
    assert_eq!(e.path(), Some(Path::new("/nonexistent/imagefeed/list.txt")));
    // Folders with nothing to load.
    let dir = tempfile::tempdir().unwrap();
    let e = Source::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
    std::fs::create_dir(dir.path().join("cls")).unwrap();
    std::fs::write(dir.path().join("cls/readme.txt"), "no images").unwrap();
    let e = Source::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
    assert_eq!(e.path(), Some(dir.path()));
    let e = Source::open(dir.path().join("nope")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
}

#[cfg(unix)]
#[test]
fn non_utf8_paths_load() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xE9 \xFF.jpg");
    let path = dir.path().join(name);
    if std::fs::write(&path, common::id_jpeg(9)).is_err() {
        common::skipped("this file system refuses non-UTF-8 names");
        return;
    }
    let list = dir.path().join("list.txt");
    std::fs::write(&list, b"caf\xE9 \xFF.jpg\t4\n").unwrap();
    let source = Source::from_list_file(&list).unwrap();
    assert_eq!(source.path(0), Some(path.clone()));
    let loader = Loader::builder(source)
        .batch_size(1)
        .image_size(8)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let b = common::collect_ok(loader.epoch(0)).pop().unwrap();
    assert_eq!(b.labels(), &[4]);
    assert_eq!(common::decode_id(&b.as_u8().unwrap()[..3]), 9);
    // And an error about such a file still carries its exact path.
    std::fs::write(&path, b"").unwrap();
    let e = common::load_one(&path, |b| b).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
}

#[cfg(unix)]
#[test]
fn a_fifo_or_device_as_the_list_is_an_error_not_a_hang() {
    // Reading a FIFO blocks until a writer comes; /dev/zero never ends (and the list was read
    // whole into memory).
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("list.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    let mut lists = vec![PathBuf::from("/dev/zero")];
    if made.is_ok_and(|s| s.success()) {
        lists.push(fifo);
    } else {
        println!("mkfifo unavailable: only /dev/zero checked");
    }
    for list in lists {
        let shown = list.clone();
        let (open, from_list) =
            common::with_timeout(std::time::Duration::from_secs(20), move || {
                (
                    Source::open(&list).map(|_| ()),
                    Source::from_list_file(&list).map(|_| ()),
                )
            });
        for e in [open.unwrap_err(), from_list.unwrap_err()] {
            assert_eq!(e.path(), Some(shown.as_path()), "{e}");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_listed_as_a_sample_neither_hangs_build_nor_the_epoch() {
    // build() reads sampled headers for the memory budget: opening a FIFO there would block
    // until a writer came. The FIFO is skipped by name when the epoch reaches it.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("sample.jpg");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        common::skipped("mkfifo unavailable");
        return;
    }
    let good = common::testdata("photos/photo_0.jpg");
    let source = Source::from_entries([(fifo.clone(), 0), (good, 1)]).unwrap();
    let (images, errors) = common::with_timeout(std::time::Duration::from_secs(20), move || {
        let loader = Loader::builder(source)
            .batch_size(1)
            .on_error(OnError::Skip { max: 1 })
            .build()
            .unwrap();
        let images: usize = loader.epoch(0).map(|b| b.unwrap().len()).sum();
        (images, loader.stats().skipped)
    });
    assert_eq!((images, errors), (1, 1));
}

#[cfg(unix)]
#[test]
fn a_file_list_is_read_a_line_at_a_time_in_bounded_memory() {
    // Reading a list holds one line at a time: building the index of a million entries takes
    // the index plus 24 bytes an entry (duplicate detection), and a list whose first line is
    // 64 MB long is refused holding none of it. (Read whole, with a hash map of every path, the
    // first took the list's bytes plus ~100 bytes an entry on top of the index, and the second
    // its 64 MB.) Measured in a child process, which finds the lists by the parent's PID.
    const NAME: &str = "errors::lists::a_file_list_is_read_a_line_at_a_time_in_bounded_memory";
    const ENTRIES: usize = 1_000_000;
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("imagefeed-it-lists-{pid}"));
    if std::env::var("IMAGEFEED_IT_CHILD").as_deref() != Ok(NAME) {
        let dir = dir_of(std::process::id());
        std::fs::create_dir_all(&dir).unwrap();
        let mut list = String::with_capacity(ENTRIES * 40);
        for i in 0..ENTRIES {
            let class = i % 1000;
            list.push_str(&format!("n{class:08}/n{class:08}_{i}.JPEG\t{class}\n"));
        }
        std::fs::write(dir.join("big.txt"), list).unwrap();
        let mut long = vec![b'x'; 64 << 20];
        long.extend_from_slice(b" 1\nok.jpg 0\n");
        std::fs::write(dir.join("long.txt"), long).unwrap();
        let passed = std::panic::catch_unwind(|| common::runs_in_child(NAME));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!passed.unwrap());
        return;
    }
    let dir = dir_of(std::os::unix::process::parent_id());
    let peak = || imagefeed_testkit::procinfo::peak_rss_bytes().expect("/proc/self/status");
    let before = peak();
    let err = Source::from_list_file(dir.join("long.txt")).expect_err("a 64 MB line");
    let grew = peak().saturating_sub(before);
    println!("64 MB line: peak RSS grew {:.1} MB", grew as f64 / 1e6);
    assert!(
        err.to_string()
            .contains("long.txt:1: the line is 67108866 bytes long"),
        "{err}"
    );
    assert!(
        grew < 8_000_000,
        "peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
    let before = peak();
    let source = Source::from_list_file(dir.join("big.txt")).unwrap();
    let grew = peak().saturating_sub(before);
    let index = source.heap_bytes();
    println!(
        "{ENTRIES} entries: peak RSS grew {:.1} MB, the index holds {:.1} MB",
        grew as f64 / 1e6,
        index as f64 / 1e6
    );
    assert_eq!(source.len(), ENTRIES);
    assert_eq!(
        source.label(ENTRIES - 1),
        Some(((ENTRIES - 1) % 1000) as u32)
    );
    assert!(
        grew < index + 24 * ENTRIES as u64 + 16_000_000,
        "peak RSS grew {:.1} MB for a {:.1} MB index",
        grew as f64 / 1e6,
        index as f64 / 1e6
    );
}

/// A listed file that is missing or broken names its list line too (a list read in place and
/// one held in memory alike), so it is found in the list at once; a skip goes on as before.
#[test]
fn a_missing_listed_file_names_its_list_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = common::testdata("classes/cat/cat_0.jpg");
    for entries in [10usize, 300] {
        let mut list = String::from("# images\n\n");
        let missing_at = entries - 3;
        let mut want_line = 0;
        for i in 0..entries {
            if i == missing_at {
                list.push_str("gone/missing.jpg\t1\n");
                want_line = list.lines().count();
            } else {
                list.push_str(&format!("{}\t0\n", good.display()));
            }
        }
        // Duplicates are refused: each good entry its own copy of the file.
        let list = list
            .lines()
            .enumerate()
            .map(|(k, l)| {
                if l.starts_with(&*good.to_string_lossy()) {
                    let copy = dir.path().join(format!("{entries}-{k}.jpg"));
                    std::fs::copy(&good, &copy).unwrap();
                    l.replacen(&*good.to_string_lossy(), &copy.to_string_lossy(), 1)
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.path().join(format!("list-{entries}.txt"));
        std::fs::write(&path, list + "\n").unwrap();
        let loader = Loader::builder(Source::open(&path).unwrap())
            .image_size(16)
            .batch_size(4)
            .shuffle(false)
            .build()
            .unwrap();
        let e = loader
            .epoch(0)
            .find_map(Result::err)
            .expect("the missing file fails the epoch");
        assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
        assert_eq!(
            e.path(),
            Some(dir.path().join("gone/missing.jpg").as_path()),
            "{e}"
        );
        let want = format!("(listed at {}:{want_line})", path.display());
        assert!(e.to_string().ends_with(&want), "{e} / {want}");
    }
}
