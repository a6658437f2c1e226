//! The on-disk cache: bit-identical batches, staleness, corruption, crash safety,
//! partial epochs, free space, and skipped samples replayed from the cache (processes sharing
//! one cache, through the command line: crates/imagefeed-cli/tests/cli/cache.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use imagefeed::{
    Batch, CachePolicy, Dtype, ErrorKind, LoaderBuilder, OnError, ResizeFilter, Source,
};

use crate::cache_common::{builder, private_copy, run_epoch, same_batches, source};

#[test]
fn cached_batches_are_bit_identical_to_uncached() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("train.cache");
    for dtype in [Dtype::F32, Dtype::U8] {
        let _ = std::fs::remove_file(&cache);
        let plain = builder(source(40)).dtype(dtype).build().unwrap();
        let cached = builder(source(40))
            .dtype(dtype)
            .cache(&cache)
            .build()
            .unwrap();
        let first = run_epoch(&cached, 0);
        let s = cached.stats();
        assert!(s.wrote_cache && !s.from_cache, "{s:?}");
        same_batches(&first, &run_epoch(&plain, 0));
        assert!(cache.exists(), "no complete cache after a full epoch");
        for epoch in 1..3 {
            let again = run_epoch(&cached, epoch);
            let s = cached.stats();
            assert!(s.from_cache && s.cache_hits == 40, "{s:?}");
            same_batches(&again, &run_epoch(&plain, epoch));
        }
        // A new loader (a later run) reads the same file.
        let later = builder(source(40))
            .dtype(dtype)
            .cache(&cache)
            .build()
            .unwrap();
        let again = run_epoch(&later, 5);
        assert!(later.stats().from_cache);
        same_batches(&again, &run_epoch(&plain, 5));
        assert_eq!(
            later.cache_size_on_disk(),
            Some(std::fs::metadata(&cache).unwrap().len())
        );
    }
}

fn wrote(
    list: &Path,
    cache: &Path,
    tweak: impl FnOnce(LoaderBuilder) -> LoaderBuilder,
) -> (bool, bool) {
    let loader = tweak(builder(Source::from_list_file(list).unwrap()).cache(cache))
        .build()
        .unwrap();
    run_epoch(&loader, 0);
    let s = loader.stats();
    (s.wrote_cache, s.from_cache)
}

#[test]
fn stale_caches_are_rebuilt() {
    let (dir, list) = private_copy(12);
    let cache = dir.path().join("c.cache");
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    assert_eq!(wrote(&list, &cache, |b| b), (false, true));
    // Another output size: stale.
    assert_eq!(wrote(&list, &cache, |b| b.image_size(96)), (true, false));
    assert_eq!(wrote(&list, &cache, |b| b.image_size(96)), (false, true));
    // Touch a source file (new modification time): stale.
    let f = std::fs::File::options()
        .write(true)
        .open(dir.path().join("img_3.jpg"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    assert_eq!(wrote(&list, &cache, |b| b.image_size(96)), (true, false));
    // Another resize mode or EXIF setting: stale.
    assert_eq!(
        wrote(&list, &cache, |b| b
            .image_size(96)
            .apply_exif_orientation(false)),
        (true, false)
    );
    // Another resize filter: stale (the samples differ).
    assert_eq!(
        wrote(&list, &cache, |b| b
            .image_size(96)
            .apply_exif_orientation(false)
            .resize_filter(ResizeFilter::Bilinear)),
        (true, false)
    );
    assert_eq!(
        wrote(&list, &cache, |b| b
            .image_size(96)
            .apply_exif_orientation(false)),
        (true, false)
    );
    // A changed label: stale.
    let text = std::fs::read_to_string(&list)
        .unwrap()
        .replacen("\t", "\t1", 1);
    std::fs::write(&list, text).unwrap();
    assert_eq!(
        wrote(&list, &cache, |b| b
            .image_size(96)
            .apply_exif_orientation(false)),
        (true, false)
    );
}

#[test]
fn a_cache_from_older_resize_code_is_rebuilt() {
    // Caches record the version of the resize code; one whose samples an older resizer made
    // (version byte 0, as before it was recorded) is stale, not silently mixed in.
    let (dir, list) = private_copy(8);
    let cache = dir.path().join("c.cache");
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    let mut bytes = std::fs::read(&cache).unwrap();
    assert_ne!(bytes[35], 0, "the resampler version is recorded at byte 35");
    bytes[35] = 0;
    // Re-seal the header so only the version differs: its checksum, and the footer's copy.
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..76]).to_le_bytes();
    bytes[76..84].copy_from_slice(&sum);
    let n = bytes.len();
    bytes[n - 8..].copy_from_slice(&sum);
    std::fs::write(&cache, &bytes).unwrap();
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    assert_eq!(wrote(&list, &cache, |b| b), (false, true));
}

#[test]
fn truncated_or_incomplete_cache_is_not_used() {
    let (dir, list) = private_copy(10);
    let cache = dir.path().join("c.cache");
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    let len = std::fs::metadata(&cache).unwrap().len();
    // Truncated by a few bytes (footer gone) and by half.
    for cut in [len - 5, len / 2, 100] {
        std::fs::File::options()
            .write(true)
            .open(&cache)
            .unwrap()
            .set_len(cut)
            .unwrap();
        assert_eq!(wrote(&list, &cache, |b| b), (true, false), "cut at {cut}");
        assert_eq!(std::fs::metadata(&cache).unwrap().len(), len);
    }
    // An empty file (nothing to lose) is replaced.
    std::fs::write(&cache, b"").unwrap();
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    assert_eq!(std::fs::metadata(&cache).unwrap().len(), len);
}

/// `build` refuses `cache` with an error naming the setting and the path, and leaves
/// everything as it was.
fn refused(list: &Path, cache: &Path, says: &str) {
    let before = std::fs::read_dir(cache.parent().unwrap()).unwrap().count();
    let e = builder(Source::from_list_file(list).unwrap())
        .cache(cache)
        .build()
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidConfig { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("cache") && msg.contains(says), "{msg}");
    assert_eq!(
        std::fs::read_dir(cache.parent().unwrap()).unwrap().count(),
        before,
        "files appeared next to {}",
        cache.display()
    );
}

#[test]
fn a_cache_truncated_between_epochs_is_noticed_not_a_crash() {
    // The complete cache is mapped once and read by every later epoch: truncated by another
    // program, the next read of a lost page would fault (SIGBUS). Each epoch checks first.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("train.cache");
    let loader = builder(source(16)).cache(&cache).build().unwrap();
    let first = run_epoch(&loader, 0);
    run_epoch(&loader, 1);
    assert!(loader.stats().from_cache);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&cache)
        .unwrap();
    f.set_len(8192).unwrap();
    drop(f);
    // Read from the source again (and the cache rewritten), same batches as the first epoch's
    // order would give for this epoch.
    let again = run_epoch(&loader, 0);
    assert!(!loader.stats().from_cache, "{:?}", loader.stats());
    same_batches(&first, &again);
    run_epoch(&loader, 2);
    assert!(std::fs::metadata(&cache).unwrap().len() > 8192, "rebuilt");
}

#[test]
fn the_cache_never_replaces_what_is_not_a_cache() {
    // Writing a cache renames PATH.partial over PATH. `--cache` pointed at a file the user
    // keeps (or at /dev/zero, as root) used to replace it.
    let (dir, list) = private_copy(6);
    let d = dir.path();
    let kept = d.join("notes.txt");
    std::fs::write(&kept, b"not a cache at all").unwrap();
    refused(&list, &kept, "not an imagefeed cache");
    assert_eq!(std::fs::read(&kept).unwrap(), b"not a cache at all");
    // Someone's file at PATH.partial.
    let partial = d.join("c.cache.partial");
    std::fs::write(&partial, b"mine").unwrap();
    refused(&list, &d.join("c.cache"), "c.cache.partial");
    assert_eq!(std::fs::read(&partial).unwrap(), b"mine");
    // One that starts with zeros, as disk images and preallocated files do (it was taken for
    // a writer stopped before its header, and replaced).
    let image = [vec![0u8; 32 << 10], b"CD001 data".to_vec()].concat();
    std::fs::write(&partial, &image).unwrap();
    refused(&list, &d.join("c.cache"), "c.cache.partial");
    assert_eq!(std::fs::read(&partial).unwrap(), image);
    std::fs::remove_file(&partial).unwrap();
    // A directory (nothing may appear beside it, such as `DIR.partial`).
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    refused(&list, &sub, "is a directory");
    // A FIFO: refused at once, not opened (which would block).
    #[cfg(unix)]
    {
        let fifo = d.join("fifo");
        let made = Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            refused(&list, &fifo, "FIFO");
        } else {
            println!("mkfifo unavailable: FIFO case not checked");
        }
    }
    // A link to where the cache should go, even before it exists: the cache is written at
    // the target and the link stays a link.
    #[cfg(unix)]
    {
        let target = d.join("real.cache");
        let link = d.join("link.cache");
        std::os::unix::fs::symlink("real.cache", &link).unwrap();
        assert_eq!(wrote(&list, &link, |b| b), (true, false));
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::metadata(&target).unwrap().len() > 6 * 76_800);
        assert_eq!(wrote(&list, &link, |b| b), (false, true));
    }
}

#[test]
fn flipped_byte_in_a_record_is_an_error_naming_the_record() {
    let (dir, list) = private_copy(10);
    let cache = dir.path().join("c.cache");
    assert_eq!(wrote(&list, &cache, |b| b), (true, false));
    let mut bytes = std::fs::read(&cache).unwrap();
    // Record 4's pixels start after the header page, the presence map's page and four records:
    // at 4096 + 4096 + 4 * (24 + 76800) + 24.
    let at = 4096 + 4096 + 4 * (24 + 76_800) + 24 + 1000;
    bytes[at] ^= 0x55;
    std::fs::write(&cache, &bytes).unwrap();
    let loader = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .build()
        .unwrap();
    // Even under Skip: a corrupt cache is not a bad sample.
    let loader_skip = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    for l in [&loader, &loader_skip] {
        let err = l
            .epoch(0)
            .find_map(Result::err)
            .expect("the corrupt record must fail");
        assert!(
            matches!(err.kind(), ErrorKind::CorruptCache { .. }),
            "{err}"
        );
        assert_eq!(err.path(), Some(cache.as_path()));
        let msg = err.to_string();
        assert!(
            msg.contains("record 4") && msg.contains("checksum"),
            "{msg}"
        );
        assert!(msg.contains("img_4.jpg"), "{msg}");
    }
    // Policy Rebuild: the epoch completes with correct pixels, and the cache is rebuilt.
    let plain = builder(Source::from_list_file(&list).unwrap())
        .build()
        .unwrap();
    let rebuild = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .cache_policy(CachePolicy::Rebuild)
        .build()
        .unwrap();
    same_batches(&run_epoch(&rebuild, 0), &run_epoch(&plain, 0));
    run_epoch(&rebuild, 1);
    assert!(rebuild.stats().wrote_cache);
    let after = run_epoch(&rebuild, 2);
    assert!(rebuild.stats().from_cache);
    same_batches(&after, &run_epoch(&plain, 2));
}

#[test]
fn partial_first_epoch_never_counts_as_complete() {
    let (dir, list) = private_copy(24);
    let cache = dir.path().join("c.cache");
    let loader = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    epoch.next().unwrap().unwrap();
    drop(epoch);
    assert!(
        !cache.exists(),
        "a partial epoch left a complete-looking cache"
    );
    // The next epoch starts the cache again and completes it.
    run_epoch(&loader, 1);
    assert!(loader.stats().wrote_cache);
    assert!(cache.exists());
    run_epoch(&loader, 2);
    assert!(loader.stats().from_cache);
}

#[test]
fn skipped_samples_are_replayed_from_the_cache() {
    let (dir, list) = private_copy(16);
    std::fs::write(dir.path().join("img_5.jpg"), b"<html>404</html>").unwrap();
    let jpeg = std::fs::read(dir.path().join("img_9.jpg")).unwrap();
    std::fs::write(dir.path().join("img_9.jpg"), &jpeg[..jpeg.len() / 2]).unwrap();
    let cache = dir.path().join("c.cache");
    let loader = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .on_error(OnError::SKIP_ALL)
        .build()
        .unwrap();
    let mut skipped_paths = Vec::new();
    for epoch in 0..3 {
        let n: usize = run_epoch(&loader, epoch).iter().map(Batch::len).sum();
        let s = loader.stats();
        assert_eq!((n, s.skipped), (14, 2), "epoch {epoch}: {s:?}");
        assert_eq!(s.from_cache, epoch > 0);
        let mut paths: Vec<PathBuf> = s.skipped_samples.iter().map(|(p, _)| p.clone()).collect();
        paths.sort();
        if epoch == 0 {
            skipped_paths = paths;
            assert!(
                skipped_paths[0].ends_with("img_5.jpg") && skipped_paths[1].ends_with("img_9.jpg")
            );
        } else {
            assert_eq!(paths, skipped_paths);
        }
    }
    // With Fail, the recorded failure is an error naming the file, also from the cache.
    let fail = builder(Source::from_list_file(&list).unwrap())
        .cache(&cache)
        .build()
        .unwrap();
    let err = fail.epoch(0).find_map(Result::err).unwrap();
    assert!(fail.stats().from_cache);
    assert!(err.is_data_error());
    assert!(
        err.path().unwrap().ends_with("img_5.jpg") || err.path().unwrap().ends_with("img_9.jpg"),
        "{err}"
    );
}

#[test]
fn not_enough_space_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = builder(source(10))
        .cache(dir.path().join("c.cache"))
        .simulate_cache_free_space(100_000)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::InvalidConfig {
                setting: "cache",
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("needs") && msg.contains("GB free") && msg.contains("c.cache"),
        "{msg}"
    );
    // Enough space: builds.
    assert!(builder(source(10))
        .cache(dir.path().join("c.cache"))
        .simulate_cache_free_space(10_000_000)
        .build()
        .is_ok());
}

#[test]
fn a_cache_in_a_missing_folder_is_an_error_naming_the_folder() {
    let (dir, list) = private_copy(4);
    let err = |cache: &Path| {
        builder(Source::from_list_file(&list).unwrap())
            .cache(cache)
            .build()
            .unwrap_err()
    };
    let missing = dir.path().join("no-such-folder");
    let e = err(&missing.join("c.cache"));
    assert!(matches!(e.kind(), ErrorKind::InvalidConfig { .. }), "{e}");
    assert!(e.to_string().contains("no-such-folder") && e.to_string().contains("does not exist"));
    // Through a link: the message names the link too.
    #[cfg(unix)]
    {
        let link = dir.path().join("link.cache");
        std::os::unix::fs::symlink(missing.join("c.cache"), &link).unwrap();
        let e = err(&link).to_string();
        assert!(
            e.contains("link.cache") && e.contains("no-such-folder"),
            "{e}"
        );
    }
    assert!(!missing.exists(), "the loader creates no folder");
}

#[test]
fn an_empty_cache_path_or_one_naming_a_folder_is_an_error() {
    // `cache("")` wrote `.partial` and `.lock` into the current folder and ran.
    let (dir, list) = private_copy(2);
    let err = |cache: &Path| {
        builder(Source::from_list_file(&list).unwrap())
            .cache(cache)
            .build()
            .unwrap_err()
    };
    let e = err(Path::new(""));
    assert!(matches!(e.kind(), ErrorKind::InvalidConfig { .. }), "{e}");
    assert!(e.to_string().contains("empty"), "{e}");
    // A path ending in a separator names a folder (here one that does not exist yet).
    let slash = format!("{}/", dir.path().join("new-cache").display());
    let e = err(Path::new(&slash)).to_string();
    assert!(
        e.contains("names a folder") && e.contains("new-cache"),
        "{e}"
    );
    assert!(!dir.path().join("new-cache").exists());
}
