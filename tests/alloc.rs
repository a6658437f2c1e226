//! Heap allocations on the hot path: in steady state the loader allocates nothing per
//! image or per batch on the Rust heap. A counting global allocator counts allocations during
//! whole epochs of two sizes; the difference divided by the extra images is the per-image
//! cost. (libjpeg-turbo's own C allocations are not seen by a Rust allocator.)

#![allow(clippy::unwrap_used)]

use imagefeed::ResizeFilter;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_per_epoch(n: usize, dir: &std::path::Path, cache: bool) -> u64 {
    let full = imagefeed::Source::from_list_file(dir.join("files.txt")).unwrap();
    // The same files in both sizes: the first n, each listed as often as needed.
    let source = imagefeed::Source::from_entries(
        (0..n).map(|i| (full.path(i % 64).unwrap(), full.label(i % 64).unwrap())),
    )
    .unwrap();
    let mut b = imagefeed::Loader::builder(source)
        .batch_size(16)
        .decode_threads(2)
        .seed(1);
    if cache {
        b = b.cache(dir.join(format!("alloc-{n}.cache")));
    }
    let loader = b.build().unwrap();
    // Warm up: buffers grow to their steady size (and the cache is written).
    for batch in loader.epoch(0) {
        batch.unwrap();
    }
    // Races between the threads add a few allocations to some epochs (a buffer made because
    // the pool was momentarily empty): the fewest of three epochs is the steady cost.
    (1..=3)
        .map(|epoch| {
            let before = ALLOCS.load(Relaxed);
            let mut images = 0;
            for batch in loader.epoch(epoch) {
                images += batch.unwrap().len();
            }
            assert_eq!(images, n);
            ALLOCS.load(Relaxed) - before
        })
        .min()
        .unwrap()
}

/// Allocations of one resize to 160x160 by a fresh resizer, which builds the filter taps of
/// both axes (a few vectors each) and its intermediate image: the most of either filter, for
/// a source within 2x of the output (two-tap bilinear) and one beyond (the widened filter).
/// A decode thread's resizer keeps the taps of its last few sizes, so it pays this only when
/// an image's size is new to it.
fn resizer_allocations() -> u64 {
    let mut most = 0;
    for (w, h) in [(450, 300), (250, 188)] {
        for filter in [ResizeFilter::Bilinear, ResizeFilter::Antialiased] {
            let rgb = vec![0u8; w * h * 3];
            let mut out = vec![0u8; 160 * 160 * 3];
            imagefeed::tools::bench::resize(&rgb, w as u32, h as u32, 160, filter, &mut out);
            let before = ALLOCS.load(Relaxed);
            imagefeed::tools::bench::resize(&rgb, w as u32, h as u32, 160, filter, &mut out);
            most = most.max(ALLOCS.load(Relaxed) - before);
        }
    }
    most
}

#[test]
fn no_heap_allocation_per_image_in_steady_state() {
    // One test, so that no other test allocates while this one counts.
    where_allocations_happen();
    let dir = tempfile::tempdir().unwrap();
    imagefeed_testkit::corpus::generate(dir.path(), 64, 3).unwrap();
    let resizer = resizer_allocations() as f64;
    for cache in [false, true] {
        let small = allocations_per_epoch(96, dir.path(), cache);
        let large = allocations_per_epoch(352, dir.path(), cache);
        let per_image = large.saturating_sub(small) as f64 / 256.0;
        println!(
            "cache={cache}: {small} allocations for 96 images, {large} for 352: {per_image:.3} per extra image (the resizer alone makes {resizer})"
        );
        // Per-epoch costs (threads, channels, the permutation) are the same for both sizes.
        // In steady state neither a warm cache nor decoding allocates per image or per batch:
        // the resizers' taps caches are warm after epoch 0 (their least recently used taps
        // are rebuilt in place), and every other buffer is reused.
        let allowed = 0.05;
        assert!(
            per_image <= allowed,
            "{per_image} allocations per image (cache={cache})"
        );
    }
}

fn where_allocations_happen() {
    let photo = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/photos/photo_0.jpg"
    ))
    .unwrap();
    let mut d = imagefeed::tools::bench::BenchDecoder::new(160, true, false);
    let mut out = vec![0u8; 160 * 160 * 3];
    d.decode(&photo).unwrap();
    d.decode_resize(&photo, &mut out);
    let a = ALLOCS.load(Relaxed);
    for _ in 0..10 {
        d.decode(&photo).unwrap();
    }
    let b = ALLOCS.load(Relaxed);
    for _ in 0..10 {
        d.decode_resize(&photo, &mut out);
    }
    let c = ALLOCS.load(Relaxed);
    let rgb = vec![0u8; 450 * 300 * 3];
    imagefeed::tools::bench::resize(&rgb, 450, 300, 160, ResizeFilter::default(), &mut out);
    let e = ALLOCS.load(Relaxed);
    println!(
        "decode: {} per image; decode+resize: {} per image; one resize (fresh resizer): {}",
        (b - a) / 10,
        (c - b) / 10,
        e - c
    );
    // libjpeg-turbo decoding into a reused buffer makes no Rust heap allocation, and neither
    // does resizing an image of a size the resizer has seen (its taps are kept).
    assert_eq!(b - a, 0);
    assert_eq!(c - b, 0, "decode+resize of a repeated size allocated");
}
