//! Several processes of the command line on one machine, as the ranks of one node run: each
//! launcher's variables, one cache path filled together, and a rank killed mid-epoch.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use imagefeed::{Loader, Source};

use crate::common::{corpus, imagefeed_bin};

/// Every launcher variable `Launch::from_env` reads: removed from each child's environment
/// (a test run under srun or mpirun must not leak its own).
const LAUNCH_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
];

fn bench(list: &Path, env: &[(&str, String)], args: &[&str]) -> Command {
    let mut c = Command::new(imagefeed_bin());
    c.arg("bench")
        .arg(list)
        .args([
            "--json",
            "--batch-size",
            "4",
            "--threads",
            "1",
            "--seed",
            "5",
        ])
        .args(args)
        .stdin(Stdio::null());
    for v in LAUNCH_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn read_indices(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// A finished child's JSON epoch reports (stderr shown if it failed).
fn reports(child: Child) -> Vec<serde_json::Value> {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn torchrun(rank: usize, world: usize) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
    ]
}

#[test]
fn each_launchers_variables_make_the_command_line_rank_1_of_2() {
    let list = corpus(64, 7).join("files.txt");
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name);
    let expected = {
        let status = bench(&list, &[], &["--rank", "1", "--world-size", "2"])
            .arg("--indices-out")
            .arg(out("flags.txt"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        read_indices(&out("flags.txt"))
    };
    assert_eq!(expected.len(), 32);
    for (name, vars, says) in [
        (
            "torchrun",
            &[("RANK", "1"), ("WORLD_SIZE", "2")][..],
            "torchrun",
        ),
        (
            "srun",
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "1"),
            ][..],
            "Slurm",
        ),
        (
            "mpirun",
            &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")][..],
            "Open MPI",
        ),
        ("pmi", &[("PMI_RANK", "1"), ("PMI_SIZE", "2")][..], "PMI"),
    ] {
        let env: Vec<(&str, String)> = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let file = out(&format!("{name}.txt"));
        let run = bench(&list, &env, &[])
            .arg("--indices-out")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("rank 1 of 2") && stderr.contains(says),
            "{name}: the rank's origin is not said: {stderr}"
        );
        assert_eq!(read_indices(&file), expected, "{name}");
    }
    // Two launchers that disagree: an error naming both, not a silent rank 0 of 1.
    let env = [
        ("RANK", "0".to_string()),
        ("WORLD_SIZE", "2".to_string()),
        ("PMI_RANK", "1".to_string()),
        ("PMI_SIZE", "2".to_string()),
    ];
    let run = bench(&list, &env, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("RANK=0") && stderr.contains("PMI_RANK=1"),
        "{stderr}"
    );
}

/// Each rank's share of 64 samples split over `world` ranks (batches of 4 come out equal for
/// the worlds tested, so nothing is padded).
fn share(rank: usize, world: usize) -> usize {
    (64 - rank).div_ceil(world)
}

/// Checks that the ranks' indices files hold, epoch after epoch, disjoint shares whose union
/// is the whole source of `n`.
fn disjoint_and_complete(files: &[PathBuf], epochs: usize, n: u64) {
    let world = files.len();
    let all: Vec<Vec<u64>> = files.iter().map(|f| read_indices(f)).collect();
    for (r, a) in all.iter().enumerate() {
        assert_eq!(a.len(), epochs * share(r, world), "rank {r}");
    }
    for e in 0..epochs {
        let mut union = BTreeSet::new();
        for (r, a) in all.iter().enumerate() {
            let per_rank = share(r, world);
            for &i in &a[e * per_rank..(e + 1) * per_rank] {
                assert!(union.insert(i), "epoch {e}: {i} delivered twice");
            }
        }
        assert_eq!(union, (0..n).collect(), "epoch {e}: not complete");
    }
}

/// The cache at `path` is complete: a new loader reads every sample of an epoch from it.
fn assert_complete(list: &Path, path: &Path) {
    assert!(path.is_file(), "{} is not complete", path.display());
    let loader = Loader::builder(Source::from_list_file(list).unwrap())
        .batch_size(4)
        .seed(5)
        .cache(path)
        .build()
        .unwrap();
    assert!(loader.epoch(0).all(|b| b.is_ok()));
    let s = loader.stats();
    assert!(s.from_cache && s.cache_hits == 64, "{s:?}");
}

#[test]
fn the_ranks_of_a_node_fill_one_cache_in_their_first_epoch_and_read_it_after() {
    let list = corpus(64, 7).join("files.txt");
    for world in [2usize, 3] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("train.cache");
        let files: Vec<PathBuf> = (0..world)
            .map(|r| dir.path().join(format!("r{r}.txt")))
            .collect();
        let start = |epochs: &str, suffix: &str| -> Vec<Child> {
            (0..world)
                .map(|r| {
                    bench(&list, &torchrun(r, world), &["--epochs", epochs])
                        .arg("--cache")
                        .arg(&cache)
                        .arg("--indices-out")
                        .arg(dir.path().join(format!("r{r}{suffix}.txt")))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect()
        };
        // One epoch together completes the cache.
        for child in start("1", "") {
            let r = reports(child);
            assert!(r[0]["wrote_cache"] == true, "{r:?}");
        }
        disjoint_and_complete(&files, 1, 64);
        assert_complete(&list, &cache);
        assert!(!dir.path().join("train.cache.partial").exists());
        // A later run: every rank reads every epoch from it.
        let again: Vec<PathBuf> = (0..world)
            .map(|r| dir.path().join(format!("r{r}b.txt")))
            .collect();
        for (r, child) in start("2", "b").into_iter().enumerate() {
            for e in reports(child) {
                assert!(
                    e["from_cache"] == true && e["cache_hits"] == share(r, world),
                    "{e}"
                );
            }
        }
        disjoint_and_complete(&again, 2, 64);
    }
}

#[test]
fn one_sharded_process_alone_fills_the_cache_over_its_epochs() {
    let list = corpus(64, 7).join("files.txt");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c.cache");
    let child = bench(&list, &torchrun(0, 2), &["--epochs", "20"])
        .arg("--cache")
        .arg(&cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = reports(child);
    // Each epoch reads what earlier epochs wrote: hits grow from none.
    assert_eq!(r[0]["cache_hits"], 0);
    let hits: Vec<u64> = r
        .iter()
        .map(|e| e["cache_hits"].as_u64().unwrap())
        .collect();
    assert!(hits[1] > 0 && hits[1] < 32, "{hits:?}");
    // Twenty seeded random halves cover all 64 samples.
    assert!(
        r.iter().any(|e| e["from_cache"] == true),
        "never completed: {hits:?}"
    );
    assert_complete(&list, &cache);
}

#[test]
fn a_rank_killed_in_the_first_epoch_leaves_the_others_correct_and_the_cache_completes_later() {
    let list = corpus(64, 7).join("files.txt");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c.cache");
    let partial = dir.path().join("c.cache.partial");
    let files: Vec<PathBuf> = (0..2)
        .map(|r| dir.path().join(format!("r{r}.txt")))
        .collect();
    let spawn = |r: usize, out: &Path| {
        bench(&list, &torchrun(r, 2), &["--epochs", "1"])
            .arg("--cache")
            .arg(&cache)
            .arg("--indices-out")
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut victim = spawn(1, &files[1]);
    let survivor = spawn(0, &files[0]);
    let start = Instant::now();
    while !partial.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(partial.exists(), "no process started filling the cache");
    // Out of the creation's lock (held for a moment), then stopped before its 32 samples are
    // done: the kill certainly lands in the first epoch.
    std::thread::sleep(Duration::from_millis(20));
    let pid = victim.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let r = reports(survivor);
    assert_eq!(r[0]["images"], 32);
    assert!(
        !cache.exists(),
        "the cache completed without the stopped rank's share"
    );
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    victim.wait().unwrap();
    // The survivor's share was right: the same as without a cache.
    let plain: Vec<u64> = {
        let l = Loader::builder(Source::from_list_file(&list).unwrap())
            .batch_size(4)
            .seed(5)
            .shard(0, 2)
            .build()
            .unwrap();
        l.epoch(0)
            .flat_map(|b| b.unwrap().indices().to_vec())
            .collect()
    };
    assert_eq!(read_indices(&files[0]), plain);
    // Restarted, the two ranks complete the cache in their first epoch, reading what is there.
    let again: Vec<PathBuf> = (0..2)
        .map(|r| dir.path().join(format!("again{r}.txt")))
        .collect();
    let children: Vec<Child> = (0..2).map(|r| spawn(r, &again[r])).collect();
    let hits: u64 = children
        .into_iter()
        .map(|c| reports(c)[0]["cache_hits"].as_u64().unwrap())
        .sum();
    assert!(
        hits >= 32,
        "the records written before the kill were not read: {hits}"
    );
    disjoint_and_complete(&again, 1, 64);
    assert_complete(&list, &cache);
    // Its samples are the uncached ones, bit for bit.
    let plain = Loader::builder(Source::from_list_file(&list).unwrap())
        .batch_size(4)
        .seed(5)
        .build()
        .unwrap();
    let cached = Loader::builder(Source::from_list_file(&list).unwrap())
        .batch_size(4)
        .seed(5)
        .cache(&cache)
        .build()
        .unwrap();
    for (a, b) in plain.epoch(3).zip(cached.epoch(3)) {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.indices(), b.indices());
        assert!(a.as_bytes() == b.as_bytes(), "pixels differ");
    }
    assert!(cached.stats().from_cache);
}
