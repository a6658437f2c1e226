//! The command line's options and outputs: resume and its state file, outputs that never
//! replace an input, options that need another or do not apply, and advice that names the
//! command line's own flags.

use std::path::{Path, PathBuf};

use imagefeed::Source;

use crate::common;
use crate::imagefeed_bin;

/// `DIR/list.txt` listing 8 images of the shared corpus by absolute path; and its text.
fn small_list(dir: &Path) -> (PathBuf, String) {
    let src = common::corpus(64, 7);
    let list = dir.join("list.txt");
    let text: String = std::fs::read_to_string(src.join("files.txt"))
        .unwrap()
        .lines()
        .take(8)
        .map(|l| format!("{}\n", src.join(l).display()))
        .collect();
    std::fs::write(&list, &text).unwrap();
    (list, text)
}

#[test]
fn cli_resume_finishes_its_epoch_and_refuses_what_is_not_a_state() {
    let dir = tempfile::tempdir().unwrap();
    let (list, _) = small_list(dir.path());
    let bench = |extra: &[&str]| {
        std::process::Command::new(imagefeed_bin())
            .arg("bench")
            .arg(&list)
            .args(["--batch-size", "2", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    // A state in epoch 5 with --epochs 3: the resumed epoch is finished (it used to run
    // nothing and exit 0).
    let state = dir.path().join("state.txt");
    std::fs::write(
        &state,
        "imagefeed-state-v1 seed=0 epoch=5 position=2 rank=0 world_size=1\n",
    )
    .unwrap();
    let out = bench(&["--resume-from", state.to_str().unwrap(), "--epochs", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0]["epoch"].as_u64(), reports[0]["images"].as_u64()),
        (Some(5), Some(6))
    );
    // A megabyte of anything is not a state: a short error naming the file.
    std::fs::write(&state, vec![b'a'; 1 << 20]).unwrap();
    let out = bench(&["--resume-from", state.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("state.txt") && err.len() < 300,
        "{err:.300}"
    );
}

#[test]
fn cli_outputs_never_replace_an_input() {
    // `--indices-out` or `--state-out` naming the list (or the cache, or the state being
    // resumed) would truncate it: refused before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let (list, text) = small_list(dir.path());
    for flag in ["--indices-out", "--state-out"] {
        let out = std::process::Command::new(imagefeed_bin())
            .current_dir(dir.path())
            .args([
                "bench",
                "list.txt",
                "--batch-size",
                "4",
                "--max-batches",
                "1",
            ])
            .args([flag, "./list.txt"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {err}");
        assert!(err.contains("is also an input"), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&list).unwrap(), text, "{flag}");
    }
}

#[test]
fn cli_outputs_replace_only_what_they_wrote() {
    // Nor a sample of the source, or any other file: an existing output file must be empty or
    // hold what that option writes. (`--state-out img.jpg` replaced a sample with a state
    // line; `--indices-out` naming a shard of the source truncated it.)
    let dir = tempfile::tempdir().unwrap();
    let (list, _) = small_list(dir.path());
    let sample = std::fs::read_to_string(&list).unwrap();
    let sample = PathBuf::from(sample.lines().next().unwrap().split('\t').next().unwrap());
    let image = dir.path().join("photo.jpg");
    std::fs::copy(&sample, &image).unwrap();
    let before = std::fs::read(&image).unwrap();
    let run = |flag: &str, out: &Path| {
        std::process::Command::new(imagefeed_bin())
            .args(["bench", list.to_str().unwrap(), "--batch-size", "4"])
            .args(["--max-batches", "1", flag, out.to_str().unwrap()])
            .output()
            .unwrap()
    };
    for flag in ["--indices-out", "--state-out"] {
        let out = run(flag, &image);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {err}");
        assert!(
            err.contains("photo.jpg") && err.contains("does not replace files it did not write"),
            "{flag}: {err}"
        );
        assert_eq!(std::fs::read(&image).unwrap(), before, "{flag}");
    }
    // The sweep's plot too (refused before the sweep runs).
    let out = std::process::Command::new(imagefeed_bin())
        .args([
            "bench",
            list.to_str().unwrap(),
            "--sweep",
            "--sweep-images",
            "2",
        ])
        .args(["--sweep-svg", image.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("does not replace files it did not write"),
        "--sweep-svg: {err}"
    );
    assert_eq!(std::fs::read(&image).unwrap(), before, "--sweep-svg");
    // What the options wrote before is replaced: a second run over the same files succeeds.
    let (indices, state) = (dir.path().join("seen.txt"), dir.path().join("state.txt"));
    for _ in 0..2 {
        for (flag, p) in [("--indices-out", &indices), ("--state-out", &state)] {
            let out = run(flag, p);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(&indices).unwrap().lines().count(),
        4
    );
}

/// An empty class folder keeps its label (labels are the sorted folder names) and images
/// directly in the source folder have none: both are said, not silently passed over.
#[test]
fn an_empty_class_folder_and_loose_images_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "empty", "zebra"] {
        std::fs::create_dir(d.join(class)).unwrap();
    }
    std::fs::write(d.join("cat/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("zebra/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("loose.jpg"), &jpg).unwrap();
    let s = Source::from_dir(d).unwrap();
    assert_eq!(
        (s.len(), s.label(1)),
        (2, Some(2)),
        "labels follow the sorted folder names"
    );
    let out = std::process::Command::new(imagefeed_bin())
        .args(["bench", "--threads", "1", "--json"])
        .arg(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("empty: a class folder with no .jpg")
            && stderr.contains("label 1 has no sample"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 image(s) directly in the source folder"),
        "{stderr}"
    );
}

#[test]
fn cli_options_that_need_another_are_refused_alone() {
    // Ignoring them would run something else than asked: no state file, a sweep's settings
    // without a sweep.
    for (args, says) in [
        (&["--state-out", "state.txt"][..], "--max-batches"),
        (&["--sweep-images", "10"], "--sweep"),
        (&["--sweep-svg", "plot.svg"], "--sweep"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(imagefeed_bin())
            .current_dir(dir.path())
            .arg("bench")
            .arg(common::testdata("classes"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?}"
        );
    }
}

#[test]
fn cli_options_that_do_not_apply_are_named_in_a_warning() {
    // A script may pass the same options to every run: they still run, and stderr says which
    // option was not used.
    for (args, says) in [
        (
            &["--max-skipped", "5"][..],
            "--max-skipped applies with --on-error skip only; ignored",
        ),
        (
            &["--crop-scale", "0.5", "1"],
            "--crop-scale applies to --transform random-resized-crop only; ignored",
        ),
        (
            &[
                "--transform",
                "random-resized-crop",
                "--cache-max-side",
                "200",
            ],
            "--cache-max-side applies with --cache only",
        ),
    ] {
        let out = std::process::Command::new(imagefeed_bin())
            .args(["bench", "--epochs", "1", "--threads", "1"])
            .arg(common::testdata("classes"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.matches(says).count() == 1,
            "{args:?}: once: {err}"
        );
        // Said once, by the command line: the library's own log line is not repeated.
        assert!(!err.contains("has no effect"), "{args:?}: {err}");
    }
}

/// The command line's advice can be followed there: a bad file in an epoch gets the hint of
/// `--on-error skip` (a source that cannot be opened does not), and the memory-limit error
/// names flags, with values, not the library's setting names.
#[test]
fn the_command_lines_advice_names_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("a");
    std::fs::create_dir(&class).unwrap();
    std::fs::copy(
        common::testdata("classes/cat/cat_0.jpg"),
        class.join("good.jpg"),
    )
    .unwrap();
    std::fs::write(class.join("bad.jpg"), b"not a jpeg").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(imagefeed_bin())
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let root = dir.path().to_str().unwrap();
    let e = run(&[root, "--batch-size", "1", "--no-shuffle"]);
    assert!(
        e.contains("bad.jpg") && e.contains("hint: --on-error skip"),
        "{e}"
    );
    let e = run(&[dir.path().join("missing").to_str().unwrap()]);
    assert!(!e.contains("--on-error skip"), "{e}");
    let e = run(&[root, "--host-memory-limit", "100M"]);
    assert!(
        e.contains("`--host-memory-limit`") && e.contains("`--batch-size` "),
        "{e}"
    );
    assert!(
        !e.contains("`max_pixels`") && !e.contains("`batch_size`"),
        "{e}"
    );
}
