//! The steady memory budget holds: over several epochs at default settings, the
//! process's peak RSS above what it was before the loader existed stays within
//! `MemoryBudget::steady()`, and later epochs peak where the first did. A binary of its own, so
//! that nothing else runs in the process while it measures (Linux only: it reads
//! `/proc/self/status`).
//!
//! It sets glibc's malloc as the README's "The allocator" tells a training binary to (and as the
//! `imagefeed` command does): the library leaves the allocator alone.

#![allow(clippy::unwrap_used)]

use imagefeed::{Loader, Source};
use imagefeed_testkit::procinfo;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_allocator() {
    // SAFETY: mallopt only sets parameters of glibc's malloc, under its own lock.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

#[test]
fn peak_rss_stays_within_the_steady_budget_and_flat_over_epochs() {
    tune_allocator();
    let dir = tempfile::tempdir().unwrap();
    let corpus = imagefeed_testkit::corpus::generate(dir.path(), 300, 3).unwrap();
    let source = Source::from_list_file(&corpus.list).unwrap();
    let Some(before) = procinfo::rss_bytes() else {
        println!("skipped: this system has no /proc/self/status");
        return;
    };
    let loader = Loader::builder(source).build().unwrap();
    let budget = loader.memory_budget();
    assert!(budget.steady() < budget.worst_case());
    assert_eq!(budget.total(), budget.worst_case());
    let mut peaks = Vec::new();
    for epoch in 0..4 {
        if !procinfo::reset_peak_rss() {
            println!("skipped: the peak RSS cannot be reset here");
            return;
        }
        for batch in loader.epoch(epoch) {
            let batch = batch.unwrap();
            // Odd epochs: a slow training step, so that the prefetch queue fills and every
            // batch the budget counts is in use.
            if epoch % 2 == 1 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            std::hint::black_box(batch.as_bytes().iter().step_by(4096).count());
        }
        let peak = procinfo::peak_rss_bytes().unwrap();
        let above = peak.saturating_sub(before);
        println!(
            "epoch {epoch}: peak RSS {:.1} MB, {:.1} MB above the {:.1} MB before the loader; steady budget {:.1} MB",
            peak as f64 / 1e6,
            above as f64 / 1e6,
            before as f64 / 1e6,
            budget.steady() as f64 / 1e6
        );
        assert!(
            above <= budget.steady(),
            "epoch {epoch}: {above} bytes above the baseline, over the steady budget: {budget}"
        );
        peaks.push(peak);
    }
    let first = peaks[0] as f64;
    for (epoch, &p) in peaks.iter().enumerate() {
        assert!(
            p as f64 <= 1.2 * first,
            "epoch {epoch} peaked at {p} bytes, over 1.2x the first epoch's {first}"
        );
    }
}
