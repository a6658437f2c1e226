//! Class folders reached through links, and devices among the files: errors, never a hang or
//! a second label.

use super::*;

#[cfg(unix)]
#[test]
fn links_back_up_a_class_folder_tree_do_not_hang() {
    // `cat/up -> ..` and `dog/root -> <source folder>`: the walk followed both forever (each
    // level doubling the work). Links back to a folder being walked are skipped; a link to
    // a folder outside the source counts, once.
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir(d.join(class)).unwrap();
        std::fs::write(d.join(class).join("a.jpg"), &jpg).unwrap();
    }
    std::fs::write(outside.path().join("b.jpg"), &jpg).unwrap();
    std::os::unix::fs::symlink("..", d.join("cat/up")).unwrap();
    std::os::unix::fs::symlink(d, d.join("dog/root")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.join("dog/more")).unwrap();
    let root = d.to_path_buf();
    let source = common::with_timeout(std::time::Duration::from_secs(20), move || {
        Source::from_dir(&root).unwrap()
    });
    let mut entries: Vec<(String, u32)> = (0..source.len())
        .map(|i| {
            let p = source.path(i).unwrap();
            let rel = p.strip_prefix(d).unwrap().to_string_lossy().into_owned();
            (rel, source.label(i).unwrap())
        })
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            ("cat/a.jpg".to_string(), 0),
            ("dog/a.jpg".to_string(), 1),
            ("dog/more/b.jpg".to_string(), 1)
        ]
    );
}

#[cfg(unix)]
#[test]
fn a_folder_reached_twice_through_links_is_an_error_not_two_labels() {
    // `dog/cats -> ../cat` gave cat's images a second label; links reaching one folder many
    // ways (each level linking the next twice) made the walk exponential.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir(d.join(class)).unwrap();
        std::fs::write(d.join(class).join("a.jpg"), &jpg).unwrap();
    }
    std::os::unix::fs::symlink("../cat", d.join("dog/cats")).unwrap();
    let e = Source::from_dir(d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("reached twice") && msg.contains("dog/cats") && msg.contains("cat"),
        "{msg}"
    );
    std::fs::remove_file(d.join("dog/cats")).unwrap();

    // A chain of 40 levels, each holding two links to the next: 2^40 paths, refused at once.
    let mut level = d.join("dog/deep");
    std::fs::create_dir(&level).unwrap();
    for _ in 0..40 {
        let next = level.join("n");
        std::fs::create_dir(&next).unwrap();
        std::os::unix::fs::symlink("n", level.join("l1")).unwrap();
        std::os::unix::fs::symlink("n", level.join("l2")).unwrap();
        level = next;
    }
    std::fs::write(level.join("z.jpg"), &jpg).unwrap();
    let root = d.to_path_buf();
    let e = common::with_timeout(std::time::Duration::from_secs(20), move || {
        Source::from_dir(&root).unwrap_err()
    });
    assert!(e.to_string().contains("reached twice"), "{e}");
}

#[cfg(unix)]
#[test]
fn a_link_to_an_image_of_another_class_is_an_error_not_a_second_label() {
    // `dog/1.jpg -> ../cat/1.jpg` read cat's image a second time, as a dog.
    let dir = tempfile::tempdir().unwrap();
    let (d, outside) = (dir.path().join("data"), dir.path().join("elsewhere.jpg"));
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir_all(d.join(class)).unwrap();
    }
    std::fs::write(d.join("cat/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("dog/2.jpg"), &jpg).unwrap();
    std::fs::write(&outside, &jpg).unwrap();
    std::os::unix::fs::symlink("../cat/1.jpg", d.join("dog/1.jpg")).unwrap();
    let e = Source::from_dir(&d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("dog/1.jpg") && msg.contains("class `cat`") && msg.contains("twice"),
        "{msg}"
    );
    // A link to an image outside the source folder, or to a hidden file in it, is one sample.
    std::fs::remove_file(d.join("dog/1.jpg")).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("dog/1.jpg")).unwrap();
    std::fs::write(d.join("cat/.hidden.jpg"), &jpg).unwrap();
    std::os::unix::fs::symlink(".hidden.jpg", d.join("cat/shown.jpg")).unwrap();
    let s = Source::from_dir(&d).unwrap();
    assert_eq!(s.len(), 4);
}

#[cfg(unix)]
#[test]
fn the_floor_skips_devices_instead_of_reading_them_forever() {
    // `imagefeed floor` read each listed file whole: /dev/zero never ends.
    let good = common::testdata("photos/photo_0.jpg");
    let source = Source::from_entries([(PathBuf::from("/dev/zero"), 0), (good, 1)]).unwrap();
    let report = common::with_timeout(std::time::Duration::from_secs(20), move || {
        imagefeed::tools::floor::decode_floor(&source, 2, true, 160, JpegDecoder::Auto, None)
            .unwrap()
    });
    assert_eq!((report.images, report.failed), (1, 1));
}
