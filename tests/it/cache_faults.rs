//! The cache under faults: transient read errors are never kept, a commit that fails is tried
//! again without failing an epoch, a damaged record is caught before the commit, two loaders
//! that differ cannot share a file silently — and a randomized run of several processes,
//! killed at random points, with injected read errors, failing commits and late starters,
//! after which the cache is bit-identical to uncached batches.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use imagefeed::{Batch, Dtype, Loader, LoaderBuilder, OnError, Source};

use crate::common::{corpus, SplitMix};

/// A private copy of the first `n` files of the shared corpus and a list naming them.
fn private_copy(n: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = corpus(64, 7);
    let list = Source::from_list_file(src.join("files.txt")).unwrap();
    let mut lines = String::new();
    for i in 0..n {
        let from = list.path(i).unwrap();
        let to = dir.path().join(format!("img{i:03}.jpg"));
        std::fs::copy(&from, &to).unwrap();
        lines.push_str(&format!("{}\t{}\n", to.display(), list.label(i).unwrap()));
    }
    let path = dir.path().join("list.txt");
    std::fs::write(&path, lines).unwrap();
    (dir, path)
}

fn builder(list: &Path) -> LoaderBuilder {
    Loader::builder(Source::from_list_file(list).unwrap())
        .batch_size(8)
        .image_size(32)
        .dtype(Dtype::U8)
        .decode_threads(2)
        .seed(3)
}

/// Each delivered sample's index and pixels, in order (skipped samples missing).
fn samples(loader: &Loader, epoch: u64) -> Result<Vec<(u64, Vec<u8>)>, imagefeed::Error> {
    let mut out = Vec::new();
    for batch in loader.epoch(epoch) {
        let batch: Batch = batch?;
        let px = batch.as_u8().unwrap();
        let each = px.len() / batch.len();
        for (k, &i) in batch.indices().iter().enumerate() {
            out.push((i, px[k * each..(k + 1) * each].to_vec()));
        }
    }
    Ok(out)
}

#[test]
fn a_transient_read_error_is_never_kept_and_the_next_epoch_completes_the_cache() {
    let (dir, list) = private_copy(24);
    let cache = dir.path().join("c.cache");
    let plain = builder(&list).build().unwrap();
    // Sample 5 cannot be read in epoch 0 (an I/O error: a permission, EMFILE, ESTALE); sample
    // 9's bytes cannot be decoded, in every epoch.
    let loader = builder(&list)
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .inject_failures(|epoch, index| match (epoch, index) {
            (0, 5) => Some(false),
            (_, 9) => Some(true),
            _ => None,
        })
        .build()
        .unwrap();
    let first = samples(&loader, 0).unwrap();
    assert_eq!(loader.stats().skipped, 2);
    assert!(
        !cache.exists(),
        "a cache missing a sample that was not read must not complete"
    );
    let second = samples(&loader, 1).unwrap();
    assert_eq!(
        loader.stats().skipped,
        1,
        "sample 5 is read again in epoch 1"
    );
    assert!(second.iter().any(|(i, _)| *i == 5));
    assert!(
        cache.exists(),
        "epoch 1 read sample 5 and completed the cache"
    );
    // From the complete cache: sample 5's pixels as an uncached loader decodes them, and the
    // undecodable sample 9 skipped by the recorded reason.
    let third = samples(&loader, 2).unwrap();
    assert!(loader.stats().from_cache);
    let want: Vec<_> = samples(&plain, 2)
        .unwrap()
        .into_iter()
        .filter(|(i, _)| *i != 9)
        .collect();
    assert_eq!(third, want);
    assert!(loader.stats().skipped_samples[0]
        .1
        .contains("injected: undecodable"));
    assert_eq!(first.len(), 22);

    // The same with a real I/O error: a file missing while the cache fills, then back.
    let (dir, list) = private_copy(24);
    let cache = dir.path().join("c.cache");
    let gone = dir.path().join("img005.jpg");
    let kept = dir.path().join("img005.keep");
    std::fs::rename(&gone, &kept).unwrap();
    let loader = builder(&list)
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    samples(&loader, 0).unwrap();
    assert_eq!(loader.stats().skipped, 1);
    std::fs::rename(&kept, &gone).unwrap();
    samples(&loader, 1).unwrap();
    assert_eq!(
        loader.stats().skipped,
        0,
        "the missing file was not remembered"
    );
    assert!(cache.exists());
    let plain = builder(&list).build().unwrap();
    assert_eq!(samples(&loader, 2).unwrap(), samples(&plain, 2).unwrap());
}

#[test]
fn a_commit_that_fails_is_tried_again_and_fails_no_epoch() {
    let (dir, list) = private_copy(16);
    let cache = dir.path().join("c.cache");
    let loader = builder(&list)
        .cache(&cache)
        .fail_cache_commits(2)
        .build()
        .unwrap();
    // Epoch 0 fills every record; its commit fails: the epoch still delivers every sample.
    assert_eq!(samples(&loader, 0).unwrap().len(), 16);
    assert!(!cache.exists());
    // Epoch 1's start tries again and fails again (the second injected failure); it reads the
    // records already written.
    assert_eq!(samples(&loader, 1).unwrap().len(), 16);
    assert!(loader.stats().cache_hits == 16, "{:?}", loader.stats());
    // Its end commits.
    assert!(cache.exists(), "the commit was not tried again");
    assert!(!dir.path().join("c.cache.partial").exists());
    samples(&loader, 2).unwrap();
    assert!(loader.stats().from_cache);
}

#[test]
fn a_damaged_record_is_caught_before_the_commit_and_written_again() {
    let (dir, list) = private_copy(16);
    let cache = dir.path().join("c.cache");
    let partial = dir.path().join("c.cache.partial");
    let plain = builder(&list).build().unwrap();
    // Fill every record but stop before the commit can succeed.
    let loader = builder(&list)
        .cache(&cache)
        .fail_cache_commits(1)
        .build()
        .unwrap();
    samples(&loader, 0).unwrap();
    assert!(!cache.exists() && partial.exists());
    drop(loader);
    // Damage one byte of the last record's pixels in the file being filled (a disk error,
    // another program), leaving its presence byte set.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&partial)
            .unwrap();
        let at = f.metadata().unwrap().len() - 100;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
    }
    // The next loader finds every record present, checks them all before committing, finds
    // the damaged one and decodes it again instead of committing it.
    let loader = builder(&list).cache(&cache).build().unwrap();
    let got = samples(&loader, 1).unwrap();
    assert_eq!(got, samples(&plain, 1).unwrap());
    assert!(cache.exists(), "the rewritten record completed the cache");
    let from_cache = samples(&loader, 2).unwrap();
    assert!(loader.stats().from_cache);
    assert_eq!(from_cache, samples(&plain, 2).unwrap());
}

#[test]
fn two_loaders_that_differ_on_one_cache_path_is_an_error_naming_both() {
    let (dir, list) = private_copy(16);
    let cache = dir.path().join("c.cache");
    // The first fills (and keeps filling: a transient error keeps its cache from completing).
    let first = builder(&list)
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .inject_failures(|_, i| (i == 3).then_some(false))
        .build()
        .unwrap();
    samples(&first, 0).unwrap();
    // Another size is another cache: while the first still fills, it is refused by name.
    let other = builder(&list).image_size(24).cache(&cache).build().unwrap();
    let err = other.epoch(0).next().unwrap().unwrap_err().to_string();
    assert!(
        err.contains("another process") && err.contains("32x32") && err.contains("24x24"),
        "{err}"
    );
    // Once the first is gone, its file is a leftover: replaced.
    drop(first);
    assert_eq!(samples(&other, 0).unwrap().len(), 16);
    assert!(cache.exists());
}

// ---- several processes, at random ----

/// The environment variable that makes this test binary a cache writer (see [`writer`]).
const WRITER: &str = "IMAGEFEED_CACHE_WRITER";

/// In a child process started by [`several_writers_killed_at_random_leave_a_cache_bit_identical_to_uncached_batches`]:
/// a loader over the list, sharded as told, that runs its epochs with the faults it is given
/// and prints one line an epoch (`epoch E images N skipped S`), or an error line. In the
/// parent (no variable): nothing.
#[test]
fn writer() {
    let Ok(args) = std::env::var(WRITER) else {
        return;
    };
    // list cache rank world epochs failing_commits transient(comma-separated, epoch 0 only)
    let words: Vec<&str> = args.split(' ').collect();
    let list = PathBuf::from(words[0]);
    let cache = PathBuf::from(words[1]);
    let num = |k: usize| -> u64 { words[k].parse().unwrap() };
    let (rank, world, epochs, commits) = (num(2) as usize, num(3) as usize, num(4), num(5));
    let transient: BTreeSet<u64> = words
        .get(6)
        .filter(|w| !w.is_empty())
        .map(|w| w.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or_default();
    let loader = builder(&list)
        .cache(&cache)
        .shard(rank, world)
        .on_error(OnError::SKIP_ALL)
        .fail_cache_commits(commits)
        .inject_failures(move |epoch, i| (epoch == 0 && transient.contains(&i)).then_some(false))
        .build()
        .unwrap();
    for epoch in 0..epochs {
        match samples(&loader, epoch) {
            Ok(s) => println!(
                "epoch {epoch} images {} skipped {}",
                s.len(),
                loader.stats().skipped
            ),
            Err(e) => println!("error in epoch {epoch}: {e}"),
        }
    }
}

fn start_writer(list: &Path, cache: &Path, args: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "cache_faults::writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            WRITER,
            format!("{} {} {args}", list.display(), cache.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn several_writers_killed_at_random_leave_a_cache_bit_identical_to_uncached_batches() {
    let rounds: u64 = std::env::var("IMAGEFEED_CACHE_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    println!("cache faults: seed {seed}, {rounds} rounds");
    let mut rng = SplitMix(seed);
    for round in 0..rounds {
        let (dir, list) = private_copy(40);
        let cache = dir.path().join("c.cache");
        let partial = dir.path().join("c.cache.partial");
        let writers = 2 + rng.next_u64() as usize % 3;
        let world = if rng.next_u64().is_multiple_of(2) {
            writers
        } else {
            1
        };
        let mut children = Vec::new();
        let mut killed = Vec::new();
        for w in 0..writers {
            let transient: Vec<String> = (0..40)
                .filter(|_| rng.next_u64().is_multiple_of(10))
                .map(|i| i.to_string())
                .collect();
            let commits = rng.next_u64() % 2;
            let args = format!(
                "{} {world} {} {commits} {}",
                w % world,
                2 + rng.next_u64() % 2,
                transient.join(",")
            );
            children.push((start_writer(&list, &cache, &args), args));
            killed.push(rng.next_u64().is_multiple_of(3));
        }
        // Kill some at random points; start a late one when the cache completes (racing the
        // commit) or after a moment.
        let started = Instant::now();
        let kill_at: Vec<Duration> = (0..writers)
            .map(|_| Duration::from_millis(rng.next_u64() % 400))
            .collect();
        let mut late: Option<Child> = None;
        let mut partial_after_commit = false;
        let mut complete_seen = false;
        loop {
            let mut running = 0;
            for (k, (child, _)) in children.iter_mut().enumerate() {
                if child.try_wait().unwrap().is_none() {
                    running += 1;
                    if killed[k] && started.elapsed() >= kill_at[k] {
                        let _ = child.kill();
                    }
                }
            }
            // Once the cache is complete, no process starts another file.
            if cache.exists() {
                complete_seen = true;
            }
            if complete_seen && partial.exists() {
                partial_after_commit = true;
            }
            if late.is_none()
                && (complete_seen || running == 0 || started.elapsed() > Duration::from_millis(300))
            {
                late = Some(start_writer(&list, &cache, "0 1 2 0 "));
            }
            if running == 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "round {round}: writers still running after 120 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut outputs = Vec::new();
        for (k, (child, args)) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            outputs.push((killed[k], args, out));
        }
        let late_out = late.unwrap().wait_with_output().unwrap();
        outputs.push((false, "late 0 1 2 0".into(), late_out));
        for (was_killed, args, out) in &outputs {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                !text.contains("error in epoch"),
                "round {round} (seed {seed}), writer `{args}`: an epoch failed:\n{text}"
            );
            if !was_killed {
                assert!(
                    out.status.success(),
                    "round {round} (seed {seed}), writer `{args}` failed:\n{text}"
                );
            }
        }
        assert!(
            !partial_after_commit,
            "round {round} (seed {seed}): a process created {} after the cache was complete",
            partial.display()
        );
        // Whatever happened, a clean loader completes the cache within two epochs, and the
        // complete cache delivers what an uncached loader does, bit for bit: no transient
        // error was kept.
        let plain = builder(&list).build().unwrap();
        let loader = builder(&list).cache(&cache).build().unwrap();
        for epoch in 0..3 {
            let got = samples(&loader, epoch).unwrap();
            assert_eq!(
                got,
                samples(&plain, epoch).unwrap(),
                "round {round} (seed {seed}), epoch {epoch}: the cache differs from uncached batches"
            );
        }
        assert!(
            loader.stats().from_cache,
            "round {round} (seed {seed}): no complete cache after two clean epochs"
        );
        let leftovers: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("c.cache.") && n != "c.cache.lock")
            .collect();
        assert!(
            leftovers.is_empty(),
            "round {round} (seed {seed}): left behind: {leftovers:?}"
        );
    }
}

#[test]
fn a_damaged_record_read_while_filling_is_marked_absent_before_it_is_written_again() {
    let (dir, list) = private_copy(16);
    let cache = dir.path().join("c.cache");
    let partial = dir.path().join("c.cache.partial");
    // Fill every record but sample 5's (a transient error keeps it absent).
    let loader = builder(&list)
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .inject_failures(|_, i| (i == 5).then_some(false))
        .build()
        .unwrap();
    samples(&loader, 0).unwrap();
    drop(loader);
    let presence_of = |i: u64| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&partial).unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, 4096 + i).unwrap();
        b[0]
    };
    assert_eq!((presence_of(2), presence_of(5)), (1, 0));
    // Damage record 2 (its last byte: records follow the header page and the presence map).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&partial)
            .unwrap();
        let record = 24 + 32 * 32 * 3;
        let at = 4096 + 4096 + 3 * record - 1;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
    }
    // An epoch that reads it while filling finds it damaged and marks it absent first; its
    // new read fails (transiently), so it stays absent instead of present and damaged.
    let loader = builder(&list)
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .inject_failures(|_, i| (i == 2 || i == 5).then_some(false))
        .build()
        .unwrap();
    samples(&loader, 1).unwrap();
    assert_eq!(presence_of(2), 0, "a damaged record stayed present");
    drop(loader);
    // A clean epoch writes both and completes the cache, bit-identical to uncached batches.
    let loader = builder(&list).cache(&cache).build().unwrap();
    let plain = builder(&list).build().unwrap();
    assert_eq!(samples(&loader, 2).unwrap(), samples(&plain, 2).unwrap());
    assert!(cache.exists());
}
