//! Tests of file lists: parsing, errors naming the line, and the in-place index.

use super::lines::{MAX_LINE_BYTES, MAX_PATH_BYTES};
use super::*;

fn parse(s: &[u8]) -> Result<FileIndex, Error> {
    parse_list(Path::new("list.txt"), PathBuf::from("/data"), s)
}

#[test]
fn parses_tab_and_space_forms_comments_blank_lines() {
    let idx = parse(b"# header\na.jpg\t3\n\n  b c.jpg 4  \r\n/abs/d.png\t0\n").unwrap();
    assert_eq!(idx.len(), 3);
    assert_eq!(idx.raw_path(0), b"a.jpg");
    assert_eq!(idx.label(0), 3);
    assert_eq!(idx.raw_path(1), b"b c.jpg");
    assert_eq!(idx.label(1), 4);
    assert_eq!(idx.path(0), PathBuf::from("/data/a.jpg"));
    assert_eq!(idx.path(2), PathBuf::from("/abs/d.png"));
    // A third column is an error at its line, not a path `a.jpg<TAB>3` that fails to
    // open later; a tab inside a file name is still a path.
    let err = parse(b"a.jpg\t3\nb.jpg\t3\nc.jpg\t1\t7\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("list.txt:3: more than two tab-separated fields"),
        "{msg}"
    );
    let idx = parse(b"odd\tname.jpg\t2\n").unwrap();
    assert_eq!(
        (idx.raw_path(0), idx.label(0)),
        (b"odd\tname.jpg".to_vec(), 2)
    );
}

#[test]
fn bom_and_crlf() {
    let idx = parse(b"\xEF\xBB\xBFa.jpg 1\r\nb.jpg 2\r\n").unwrap();
    assert_eq!(idx.raw_path(0), b"a.jpg");
    assert_eq!(idx.label(1), 2);
}

#[test]
fn malformed_lines_name_the_line() {
    let err = parse(b"a.jpg 1\nonly_a_path.jpg\n").unwrap_err();
    assert_eq!(err.to_string().split(':').nth(1), Some("2"));
    assert!(err.to_string().contains("no label"), "{err}");
    let err = parse(b"a.jpg x\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("list.txt:1: label `x` is not an integer"),
        "{err}"
    );
    // A third field is named as such, whatever it holds; a header gets a hint.
    let err = parse(b"a.jpg\t0\t1\nb.jpg\t0\textra\n").unwrap_err();
    assert!(
        err.to_string().starts_with("list.txt:1: more than two"),
        "{err}"
    );
    let err = parse(b"a.jpg\t0\nb.jpg\t0\textra\n").unwrap_err();
    assert!(
        err.to_string().starts_with("list.txt:2: more than two"),
        "{err}"
    );
    let err = parse(b"filename\tlabel\na.jpg\t0\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("label `label` is not an integer; a header line names")
            && err.to_string().contains("starts with `#`"),
        "{err}"
    );
    let err = parse(b"a.jpg -1\n").unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = parse(b"a.jpg 99999999999\n").unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = parse(b"a.jpg 1.5\n").unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
}

#[test]
fn long_lines_and_binary_lists_give_short_errors() {
    // A 5 MB path: refused by its line's length, named by line, and the message stays
    // short.
    let mut list = b"a.jpg 1\n".to_vec();
    list.extend(std::iter::repeat_n(b'p', 5_000_000));
    list.extend_from_slice(b" 2\n");
    let msg = parse(&list).unwrap_err().to_string();
    assert!(
        msg.starts_with("list.txt:2: the line is 5000002 bytes long, over the 16384-byte limit"),
        "{msg:.300}"
    );
    assert!(msg.len() < 400, "{} bytes of message", msg.len());
    // A path over the limit on a line under it: the path's own message.
    let mut list = vec![b'q'; MAX_PATH_BYTES + 1];
    list.extend_from_slice(b" 0\n");
    let msg = parse(&list).unwrap_err().to_string();
    assert!(
        msg.starts_with("list.txt:1: the path is 4097 bytes long, over the 4096-byte limit"),
        "{msg:.300}"
    );
    // A path at the limit is fine, and so is a line at its limit.
    let mut list = vec![b'q'; MAX_PATH_BYTES];
    list.extend_from_slice(b" 0\n");
    assert_eq!(parse(&list).unwrap().raw_path(0).len(), MAX_PATH_BYTES);
    let mut list = vec![b'q'; MAX_PATH_BYTES];
    list.resize(MAX_LINE_BYTES - 2, b' ');
    list.extend_from_slice(b" 7\nb.jpg 1\n");
    let idx = parse(&list).unwrap();
    assert_eq!((idx.len(), idx.label(0), idx.label(1)), (2, 7, 1));
    let mut list = vec![b'q'; MAX_PATH_BYTES];
    list.resize(MAX_LINE_BYTES - 1, b' ');
    list.extend_from_slice(b" 7\n");
    assert!(parse(&list).is_err());
    // Binary data given as a list: an error about line 1, not a screenful of bytes.
    let binary: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let msg = parse(&binary).unwrap_err().to_string();
    assert!(msg.starts_with("list.txt:"), "{msg:.300}");
    assert!(msg.len() < 700, "{} bytes of message", msg.len());
    // Long labels and lines without a label are cut too.
    let mut list = b"a.jpg ".to_vec();
    list.extend(std::iter::repeat_n(b'x', 10_000));
    let msg = parse(&list).unwrap_err().to_string();
    assert!(
        msg.contains("is not an integer") && msg.contains("10000 bytes in all"),
        "{msg:.300}"
    );
    assert_eq!(shown("é".repeat(100).as_bytes()), "é".repeat(100));
}

/// A list read through a tiny buffer, so lines and the skipped rest of a long one cross
/// buffer boundaries.
fn parse_slowly(s: &[u8]) -> Result<FileIndex, Error> {
    let reader = std::io::BufReader::with_capacity(7, s);
    parse_list_from(Path::new("list.txt"), PathBuf::from("/data"), reader, 0)
}

#[test]
fn lists_are_read_a_line_at_a_time() {
    let mut list = b"\xEF\xBB\xBFa.jpg\t0\r\n".to_vec();
    // A long comment is skipped, however long.
    list.extend_from_slice(b"  # ");
    list.extend(std::iter::repeat_n(b'c', 100_000));
    list.extend_from_slice(b"\nsub dir/b c.jpg 12\n\n#x\nlast.png 3");
    for idx in [parse(&list).unwrap(), parse_slowly(&list).unwrap()] {
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.raw_path(0), b"a.jpg");
        assert_eq!(
            (idx.raw_path(1), idx.label(1)),
            (b"sub dir/b c.jpg".to_vec(), 12)
        );
        assert_eq!((idx.raw_path(2), idx.label(2)), (b"last.png".to_vec(), 3));
    }
    // A long line's length is counted to its end, and the next line is not read.
    let mut list = b"a.jpg 0\n".to_vec();
    list.extend(std::iter::repeat_n(b'z', 50_000));
    list.extend_from_slice(b" 1\nthis line is bad\n");
    let msg = parse_slowly(&list).unwrap_err().to_string();
    assert!(
        msg.starts_with("list.txt:2: the line is 50002 bytes long"),
        "{msg:.200}"
    );
    // The byte-order mark is only skipped at the start of the list.
    let idx = parse(b"a.jpg 0\n\xEF\xBB\xBFb.jpg 1\n").unwrap();
    assert_eq!(idx.raw_path(1), b"\xEF\xBB\xBFb.jpg");
}

#[test]
fn empty_list_is_an_error() {
    assert!(parse(b"").is_err());
    assert!(parse(b"# only a comment\n\n").is_err());
}

#[test]
fn duplicates_same_label_kept_conflicting_label_rejected() {
    let idx = parse(b"a.jpg 1\na.jpg 1\n").unwrap();
    assert_eq!(idx.len(), 2);
    let err = parse(b"a.jpg 1\nb.jpg 0\na.jpg 2\n").unwrap_err();
    assert!(err.to_string().contains("list.txt:3:"), "{err}");
    assert!(err.to_string().contains("line 1"), "{err}");
    // Several conflicts: the first in the file is reported, against the path's first
    // listing (not a later duplicate of it).
    let list = b"z.jpg 5\na.jpg 1\nz.jpg 5\nq.jpg 0\na.jpg 1\nz.jpg 6\na.jpg 9\n";
    let err = parse(list).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "list.txt:6: `z.jpg` is listed again with label 6, but line 1 gives it label 5"
        ),
        "{err}"
    );
    // Spellings of one path that differ only by `.` components or doubled slashes are
    // the same path: two labels for it are a conflict too.
    let err = parse(b"img0.jpg 1\n./img0.jpg 2\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("list.txt:2: `./img0.jpg` is listed again"),
        "{err}"
    );
    assert!(parse(b"d//a.jpg 1\nd/./a.jpg 1\n../d/a.jpg 2\n").is_ok());
    let err = parse(b"a.jpg 1\nsub/../a.jpg 2\n").unwrap_err().to_string();
    assert!(err.contains("listed again"), "{err}");
    // A list named by a bare file name lives in the current folder: its relative paths
    // and their absolute spellings are one path too.
    let cwd = std::env::current_dir().unwrap();
    let text = format!("a.jpg 1\n{}/a.jpg 2\n", cwd.display());
    let err = parse_list(Path::new("list.txt"), PathBuf::new(), text.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("listed again"), "{err}");
    let k = |anchor: &[u8], p: &[u8]| {
        let mut out = Vec::new();
        list_key(anchor, p, &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(k(b"/data", b"./d//./a.jpg"), "/data/d/a.jpg");
    assert_eq!(k(b"/data", b"sub/../a.jpg"), "/data/a.jpg");
    assert_eq!(k(b"/data", b"/data/a.jpg"), "/data/a.jpg");
    assert_eq!(k(b"/data", b"/x/./y/"), "/x/y");
    assert_eq!(k(b"/data", b"../../../a.jpg"), "/a.jpg");
    assert_eq!(k(b"rel", b"../../a.jpg"), "../a.jpg");
    assert_eq!(k(b"", b"a.jpg"), "a.jpg");
    // Many listings of one path stay cheap, and all count.
    let many = b"p.jpg 3\n".repeat(100_000);
    let idx = parse(&many).unwrap();
    assert_eq!(idx.len(), 100_000);
}

#[cfg(unix)]
#[test]
fn non_utf8_paths_survive() {
    let idx = parse(b"caf\xE9.jpg 0\n").unwrap();
    assert_eq!(idx.raw_path(0), b"caf\xE9.jpg");
}

#[test]
fn index_is_compact() {
    let mut list = Vec::new();
    for i in 0..10_000 {
        list.extend_from_slice(
            format!("train/n01440764/n01440764_{i:05}.JPEG\t{}\n", i % 1000).as_bytes(),
        );
    }
    let idx = parse(&list).unwrap();
    // 35-byte paths + 12 bytes of offset and label.
    assert!(idx.heap_bytes() <= 10_000 * 48, "{}", idx.heap_bytes());
}

proptest::proptest! {
    /// The compact index of a list file reads back each entry as parsing the list in
    /// memory gives it, and refuses what parsing refuses, with the same message.
    #[test]
    fn a_list_scanned_from_its_file_reads_back_what_parsing_gives(
        lines in proptest::collection::vec(
            (0usize..40, 0u32..4, 0u8..12),
            0..200,
        ),
        bom: bool,
        crlf: bool,
    ) {
        let mut text = Vec::new();
        if bom {
            text.extend_from_slice(b"\xEF\xBB\xBF");
        }
        let end: &[u8] = if crlf { b"\r\n" } else { b"\n" };
        for (path, label, kind) in &lines {
            match kind {
                0 => text.extend_from_slice(b"# a comment"),
                1 => {}
                // Duplicates, usually with the same label (a path listed twice).
                2 => text.extend_from_slice(format!("./p{}.jpg\t{label}", path % 5).as_bytes()),
                3 => text.extend_from_slice(format!("sub dir/q {path}.jpg {label}").as_bytes()),
                4 if *path == 7 => text.extend_from_slice(b"a.jpg x"),
                _ => text.extend_from_slice(format!("p{path}.jpg\t{}", path % 3).as_bytes()),
            }
            text.extend_from_slice(end);
        }
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, &text).unwrap();
        let parsed = parse_list(&list, dir.path().to_path_buf(), &text);
        let scanned = scan_list(&list, dir.path().to_path_buf());
        match (parsed, scanned) {
            (Ok(a), Ok(b)) => {
                proptest::prop_assert_eq!(a.len(), b.len());
                proptest::prop_assert_eq!(a.num_classes(), b.num_classes());
                let (mut pa, mut pb) = (PathBuf::new(), PathBuf::new());
                for i in 0..a.len() {
                    let la = a.entry_into(i, &mut pa).unwrap();
                    let lb = b.entry_into(i, &mut pb).unwrap();
                    proptest::prop_assert_eq!((&pa, la), (&pb, lb), "entry {}", i);
                }
            }
            (Err(a), Err(b)) => proptest::prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => proptest::prop_assert!(false, "parsed {:?}, scanned {:?}", a.map(|i| i.len()), b.map(|i| i.len())),
        }
    }
}
