//! The cache through the command line: processes that share one cache path, a writer killed
//! mid-epoch, and a stale cache reported once a run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use imagefeed::Source;

use crate::cache_common::{builder, private_copy, run_epoch, same_batches};

fn bench_cmd(list: &Path, cache: &Path) -> Command {
    let mut c = Command::new(crate::imagefeed_bin());
    c.args([
        "bench",
        list.to_str().unwrap(),
        "--json",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--cache",
    ])
    .arg(cache)
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    c
}

#[test]
fn a_killed_writer_keeps_its_records_and_a_later_run_completes_the_cache_bit_identically() {
    let (dir, list) = private_copy(64);
    let cache = dir.path().join("c.cache");
    let partial = dir.path().join("c.cache.partial");
    let mut child = bench_cmd(&list, &cache)
        .args(["--epochs", "50"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    // Stopped as soon as its first record is written (out of the creation's lock by then), and
    // certainly stopped (state T) before the file is looked at.
    let start = Instant::now();
    while presence(&partial).is_none_or(|(_, n)| n == 0) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the writer wrote no record in 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    signal("-STOP");
    let stat = format!("/proc/{pid}/stat");
    while !std::fs::read_to_string(&stat)
        .unwrap()
        .rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('T'))
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (count, written) = presence(&partial).unwrap();
    assert_eq!(count, 64);
    assert!(
        !cache.exists() && written < count,
        "the cache was complete before the kill: {written} of {count} records"
    );
    signal("-KILL");
    child.wait().unwrap();
    assert!(!cache.exists(), "a killed writer left a complete cache");
    assert_eq!(
        presence(&partial),
        Some((count, written)),
        "the killed writer's records were not kept"
    );
    // A later run reads the killed writer's records, decodes and writes the rest, and commits
    // the cache: what it delivers, filling and then from the complete cache, is what an
    // uncached loader delivers, bit for bit.
    let plain = builder(Source::from_list_file(&list).unwrap())
        .build()
        .unwrap();
    let loader = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .build()
        .unwrap();
    same_batches(&run_epoch(&loader, 0), &run_epoch(&plain, 0));
    let s = loader.stats();
    assert!(s.wrote_cache && !s.from_cache, "{s:?}");
    assert!(
        s.cache_hits >= written,
        "the killed writer's {written} records were not read: {s:?}"
    );
    assert!(cache.exists(), "the later run did not complete the cache");
    same_batches(&run_epoch(&loader, 1), &run_epoch(&plain, 1));
    assert!(loader.stats().from_cache);
}

#[test]
fn two_processes_share_one_cache_path() {
    let (dir, list) = private_copy(64);
    let cache = dir.path().join("c.cache");
    let children: Vec<_> = (0..2)
        .map(|_| {
            bench_cmd(&list, &cache)
                .args(["--epochs", "3"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let epochs: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(epochs.len(), 3);
        for e in &epochs {
            assert_eq!(e["images"], 64, "{e}");
        }
    }
    let plain = builder(Source::from_list_file(&list).unwrap())
        .build()
        .unwrap();
    let loader = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .build()
        .unwrap();
    same_batches(&run_epoch(&loader, 0), &run_epoch(&plain, 0));
    assert!(
        loader.stats().from_cache,
        "the two writers left no valid cache"
    );
}

#[test]
fn a_stale_cache_is_reported_once_a_run_not_once_an_epoch() {
    let (dir, list) = private_copy(8);
    let cache = dir.path().join("c.cache");
    let wrote = bench_cmd(&list, &cache).stdout(Stdio::null()).status();
    assert!(wrote.unwrap().success());
    // Change one file's bytes and time: the next run finds the cache stale.
    let first = dir.path().join("img_0.jpg");
    let bytes = std::fs::read(&first).unwrap();
    std::fs::write(&first, [&bytes[..], &[0u8; 16][..]].concat()).unwrap();
    let out = bench_cmd(&list, &cache)
        .args(["--epochs", "3"])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("will be rebuilt").count(),
        1,
        "the stale cache is reported once:\n{stderr}"
    );
}

/// The records of a cache file that is filling: the count its header claims, and how many its
/// presence map marks written (`src/cache/format.rs`: count at byte 44, a byte a record after
/// the 4096-byte header). `None` while the file is missing or shorter than that.
fn presence(path: &Path) -> Option<(u64, u64)> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096 + 4096)
        .read_to_end(&mut head)
        .ok()?;
    let count = u64::from_le_bytes(head.get(44..52)?.try_into().ok()?);
    let map = head.get(4096..4096 + usize::try_from(count).ok()?)?;
    Some((count, map.iter().filter(|&&b| b != 0).count() as u64))
}
