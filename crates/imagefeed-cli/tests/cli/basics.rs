//! The `imagefeed` binary as a user runs it. The library's integration tests (tests/it at the
//! repository root) run it too, for resume, shards, the cache and outputs that never replace
//! inputs; these check what the command line itself adds.

use std::path::PathBuf;
use std::process::Command;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn imagefeed(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_imagefeed"))
        .args(args)
        .output()
        .expect("run imagefeed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bench_json_names_the_decoder() {
    let classes = testdata("classes");
    let (ok, stdout, stderr) = imagefeed(&[
        "bench",
        classes.to_str().unwrap(),
        "--batch-size",
        "4",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).expect(last);
    let decoder = v["decoder"].as_str().expect("a decoder field");
    assert_eq!(decoder, imagefeed::decoder_info().to_string());
    if cfg!(feature = "turbojpeg") {
        assert!(decoder.starts_with("libjpeg-turbo 3.1.0"), "{decoder}");
    }
}

#[test]
fn floor_with_the_stock_paths_decodes_the_same_files() {
    let classes = testdata("classes");
    let run = |stock: bool| {
        let mut args = vec![
            "floor",
            classes.to_str().unwrap(),
            "--threads",
            "1",
            "--psnr-images",
            "0",
            "--json",
        ];
        if stock {
            args.push("--stock-paths");
        }
        imagefeed(&args)
    };
    let (ok, fast, stderr) = run(false);
    assert!(ok, "{stderr}");
    let (ok, stock, stderr) = run(true);
    if !imagefeed::decoder_info().patched {
        assert!(!ok && stderr.contains("--stock-paths"), "{stderr}");
        return;
    }
    assert!(ok, "{stderr}");
    let images = |out: &str| -> Vec<u64> {
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["images"].as_u64())
            .collect()
    };
    assert!(!images(&fast).is_empty(), "{fast}");
    assert_eq!(images(&fast), images(&stock), "{fast}\n{stock}");
}

#[test]
fn unknown_subcommands_fail_with_usage() {
    let (ok, _, stderr) = imagefeed(&["no-such-command"]);
    assert!(!ok);
    assert!(stderr.contains("Usage"), "{stderr}");
}
