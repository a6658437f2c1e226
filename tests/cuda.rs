//! The `cuda` feature. Runs everywhere the feature is built: without a driver or a GPU
//! the GPU tests print why and return, and the no-GPU tests check that `build()` fails with a
//! clear `ErrorKind::Device` (never a panic) and that `fallback_to_host(true)` delivers host
//! batches. On a GPU machine (`scripts/gpu-check.sh`) they check that device batches match the
//! host loader's batches within rounding for every dtype and layout, that slots are reused and
//! bounded, and that dropping an epoch midway frees every slot.
#![cfg(feature = "cuda")]
// A failed `unwrap` in a test is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use half::{bf16, f16};
use imagefeed::{Batch, Device, Dtype, ErrorKind, Layout, Loader, LoaderBuilder, Source};

/// `Some(why)` when there is no usable GPU here.
fn no_gpu() -> Option<String> {
    match imagefeed::tools::gpu::info() {
        Ok(info) => {
            println!("{info}");
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

/// Says that the running test skips (part of) what it checks, and why: `SKIPPED: <test>: <why>`
/// on stdout, and appended as a line to the file `IMAGEFEED_SKIP_LOG` names, where it is set
/// (CI counts the lines and prints them in one line at the end of its log).
fn skipped(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("SKIPPED: {test}: {why}");
    println!("{line}");
    if let Some(log) = std::env::var_os("IMAGEFEED_SKIP_LOG") {
        use std::io::Write;
        // One short write with O_APPEND: lines from parallel tests and processes do not mix.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

macro_rules! need_gpu {
    () => {
        if let Some(why) = no_gpu() {
            skipped(&format!("no usable GPU ({why})"));
            return;
        }
    };
}

fn classes() -> Source {
    Source::from_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/classes")).unwrap()
}

/// `n` entries cycling through the test images.
fn repeated(n: usize) -> Source {
    let base = classes();
    Source::from_entries((0..n).map(|i| {
        (
            base.path(i % base.len()).unwrap(),
            base.label(i % base.len()).unwrap(),
        )
    }))
    .unwrap()
}

fn builder(source: Source, device: Device) -> LoaderBuilder {
    Loader::builder(source)
        .batch_size(5)
        .image_size(64)
        .decode_threads(2)
        .seed(3)
        .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        .device(device)
}

#[test]
fn an_unusable_gpu_is_a_device_error_and_the_fallback_is_the_host() {
    // Without a GPU ask for device 0; with one, for a device that does not exist.
    let ordinal = if no_gpu().is_some() { 0 } else { 1000 };
    let e = builder(classes(), Device::Cuda(ordinal))
        .build()
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Device(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("CUDA device {ordinal}")), "{msg}");
    if ordinal == 0 {
        assert!(msg.contains("libcuda") || msg.contains("GPU"), "{msg}");
    } else {
        assert!(msg.contains("does not exist"), "{msg}");
    }
    let loader = builder(classes(), Device::Cuda(ordinal))
        .fallback_to_host(true)
        .build()
        .unwrap();
    assert_eq!(loader.device(), Device::Host);
    let mut n = 0;
    for b in loader.epoch(0) {
        let b = b.unwrap();
        assert!(b.cuda().is_none());
        assert!(b.as_f32().is_ok());
        n += b.len();
    }
    assert_eq!(n, loader.len());
}

/// Whether `got` equals `want` up to one unit in the last place of `dtype`.
fn within_rounding(dtype: Dtype, got: f32, want: f32) -> bool {
    if got.to_bits() == want.to_bits() || (got == 0.0 && want == 0.0) {
        return true;
    }
    let (a, b) = match dtype {
        Dtype::F32 => (got.to_bits(), want.to_bits()),
        Dtype::F16 => (
            u32::from(f16::from_f32(got).to_bits()),
            u32::from(f16::from_f32(want).to_bits()),
        ),
        Dtype::Bf16 => (
            u32::from(bf16::from_f32(got).to_bits()),
            u32::from(bf16::from_f32(want).to_bits()),
        ),
        _ => return false,
    };
    // Same sign: neighbouring values differ by one in their bits.
    got.is_sign_negative() == want.is_sign_negative() && a.abs_diff(b) <= 1
}

fn host_and_gpu(tweak: impl Fn(LoaderBuilder) -> LoaderBuilder) -> (Loader, Loader) {
    let host = tweak(builder(classes(), Device::Host)).build().unwrap();
    let gpu = tweak(builder(classes(), Device::Cuda(0))).build().unwrap();
    assert_eq!(gpu.device(), Device::Cuda(0));
    (host, gpu)
}

fn compare(host: &Loader, gpu: &Loader, what: &str) {
    let want: Vec<Batch> = host.epoch(0).map(Result::unwrap).collect();
    let mut got = 0;
    let mut exact = 0usize;
    let mut total = 0usize;
    for (b, h) in gpu.epoch(0).zip(&want) {
        let b = b.unwrap();
        let dev = b.cuda().expect("a device batch");
        assert_eq!(dev.shape(), h.shape(), "{what}");
        assert_eq!(dev.dtype(), h.dtype(), "{what}");
        assert_eq!(b.labels(), h.labels(), "{what}");
        assert_eq!(b.indices(), h.indices(), "{what}");
        dev.synchronize().unwrap();
        let g = imagefeed::tools::gpu::images_f32(&b).unwrap();
        let w = imagefeed::tools::gpu::images_f32(h).unwrap();
        assert_eq!(g.len(), w.len(), "{what}");
        for (i, (&x, &y)) in g.iter().zip(&w).enumerate() {
            assert!(
                within_rounding(h.dtype(), x, y),
                "{what}: element {i} is {x} on the GPU, {y} on the host"
            );
        }
        exact += g.iter().zip(&w).filter(|(x, y)| x == y).count();
        total += g.len();
        got += 1;
    }
    assert_eq!(got, want.len(), "{what}");
    println!("{what}: {got} batches, {exact} of {total} values bit-identical to the host's");
}

#[test]
fn gpu_batches_match_the_host_batches() {
    need_gpu!();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::U8] {
        for layout in [Layout::Nhwc, Layout::Nchw] {
            let (host, gpu) = host_and_gpu(|b| b.dtype(dtype).layout(layout));
            compare(&host, &gpu, &format!("{dtype:?} {layout:?}"));
        }
    }
}

#[test]
fn gpu_batches_normalized_on_the_host_match_too() {
    need_gpu!();
    for dtype in [Dtype::F32, Dtype::Bf16] {
        let (host, gpu) =
            host_and_gpu(|b| b.dtype(dtype).layout(Layout::Nchw).gpu_normalize(false));
        compare(
            &host,
            &gpu,
            &format!("{dtype:?} NCHW, gpu_normalize(false)"),
        );
    }
}

#[test]
fn gpu_batches_are_device_only_and_wait_on_a_consumer_stream() {
    need_gpu!();
    let loader = builder(classes(), Device::Cuda(0)).build().unwrap();
    for b in loader.epoch(0) {
        let b = b.unwrap();
        let dev = b.cuda().unwrap();
        let stream = dev.context().new_stream().unwrap();
        dev.wait_on(&stream).unwrap();
        let view = dev.as_f32().unwrap();
        let back = stream.clone_dtoh(&view).unwrap();
        dev.release_after(&stream).unwrap();
        assert_eq!(back.len(), dev.len());
        assert_ne!(dev.device_ptr(), 0);
        assert_eq!(dev.num_bytes(), dev.len() * 4);
        if !b.is_on_host() {
            assert!(b.as_f32().is_err() && b.as_bytes().is_empty());
        }
        assert!(back.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn gpu_slots_are_reused_bounded_and_freed_by_a_drop() {
    need_gpu!();
    let loader = builder(repeated(320), Device::Cuda(0))
        .batch_size(4)
        .build()
        .unwrap();
    let (capacity, ..) = loader.device_slots();
    assert_eq!(capacity, 4);
    let mut n = 0;
    for b in loader.epoch(0) {
        let b = b.unwrap();
        imagefeed::tools::gpu::wait_ready(&b).unwrap();
        std::thread::sleep(Duration::from_millis(1)); // a slow consumer
        assert!(loader.device_slots().1 <= capacity);
        n += 1;
    }
    assert_eq!(n, 80);
    let (_, created, free) = loader.device_slots();
    assert_eq!(free, created);
    let s = loader.stats();
    assert!(s.h2d_bytes > 0 && s.h2d_gb_per_sec() > 0.0, "{s:?}");
    println!(
        "80 batches through {created} slots; copies measured at {:.1} GB/s",
        s.h2d_gb_per_sec()
    );
    for hold in [0, 1, capacity - 1] {
        let mut epoch = loader.epoch(1);
        let held: Vec<Batch> = (0..hold).map(|_| epoch.next().unwrap().unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        drop(epoch);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let (_, created, free) = loader.device_slots();
        assert_eq!(free + held.len(), created, "holding {hold}");
        drop(held);
        let (_, created, free) = loader.device_slots();
        assert_eq!(free, created, "holding {hold}");
    }
    assert_eq!(loader.epoch(2).count(), 80);
}

#[test]
fn gpu_memory_limit_is_a_hard_cap() {
    need_gpu!();
    let e = builder(classes(), Device::Cuda(0))
        .gpu_memory_limit(1000)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("gpu_memory_limit"), "{e}");
    let loader = builder(classes(), Device::Cuda(0))
        .gpu_memory_limit(1 << 30)
        .build()
        .unwrap();
    let (capacity, created, free) = loader.device_slots();
    assert_eq!(
        (created, free),
        (capacity, capacity),
        "a capped loader allocates up front"
    );
    assert_eq!(loader.epoch(0).count(), loader.batches_per_epoch());
}

/// A taken batch's values as `f32`, read back to the host.
fn owned_f32(images: &imagefeed::OwnedCudaImages) -> Vec<f32> {
    use imagefeed::OwnedCudaImages as I;
    match images {
        I::F32(s) => s.stream().clone_dtoh(s).unwrap(),
        I::F16(s) => s
            .stream()
            .clone_dtoh(s)
            .unwrap()
            .into_iter()
            .map(f32::from)
            .collect(),
        I::Bf16(s) => s
            .stream()
            .clone_dtoh(s)
            .unwrap()
            .into_iter()
            .map(f32::from)
            .collect(),
        I::U8(s) => s
            .stream()
            .clone_dtoh(s)
            .unwrap()
            .into_iter()
            .map(f32::from)
            .collect(),
        _ => unreachable!("every dtype is listed"),
    }
}

fn owned_ptr(images: &imagefeed::OwnedCudaImages) -> u64 {
    use imagefeed::cudarc::driver::DevicePtr;
    use imagefeed::OwnedCudaImages as I;
    match images {
        I::F32(s) => s.device_ptr(s.stream()).0,
        I::F16(s) => s.device_ptr(s.stream()).0,
        I::Bf16(s) => s.device_ptr(s.stream()).0,
        I::U8(s) => s.device_ptr(s.stream()).0,
        _ => unreachable!("every dtype is listed"),
    }
}

#[test]
fn gpu_batches_taken_by_value_are_their_device_buffer_and_outlive_the_loader() {
    need_gpu!();
    let stream = imagefeed::cudarc::driver::CudaContext::new(0)
        .unwrap()
        .new_stream()
        .unwrap();
    let source = || repeated(60);
    for (dtype, layout, gpu_normalize) in [
        (Dtype::F32, Layout::Nchw, true),
        (Dtype::F16, Layout::Nhwc, true),
        (Dtype::Bf16, Layout::Nchw, false),
        (Dtype::U8, Layout::Nhwc, true), // no kernel: the copied buffer is the batch
    ] {
        let what = format!("{dtype:?} {layout:?} gpu_normalize({gpu_normalize})");
        let tweak = |b: LoaderBuilder| b.dtype(dtype).layout(layout).gpu_normalize(gpu_normalize);
        let host = tweak(builder(source(), Device::Host)).build().unwrap();
        let gpu = tweak(builder(source(), Device::Cuda(0))).build().unwrap();
        let (slots, ..) = gpu.device_slots();
        // Every batch of the epoch is taken and held: more than the ring has slots.
        let mut kept = Vec::new();
        for b in gpu.epoch(0) {
            let b = b.unwrap();
            let ptr = b.cuda().unwrap().device_ptr();
            let owned = b.into_cuda(&stream).unwrap();
            assert_eq!(owned_ptr(&owned.images), ptr, "{what}: taken, not copied");
            kept.push(owned);
        }
        assert!(
            kept.len() > slots,
            "{what}: {} batches, {slots} slots",
            kept.len()
        );
        let (_, created, free) = gpu.device_slots();
        assert_eq!(free, created, "{what}: every slot is back in the ring");
        // Each batch's buffer is its own: the loader wrote every later batch elsewhere.
        drop(gpu);
        let want: Vec<Batch> = host.epoch(0).map(Result::unwrap).collect();
        assert_eq!(kept.len(), want.len(), "{what}");
        for (k, (got, h)) in kept.iter().zip(&want).enumerate() {
            assert_eq!(got.shape, h.shape(), "{what}");
            assert_eq!(got.labels, h.labels(), "{what}");
            assert_eq!(got.indices, h.indices(), "{what}");
            let g = owned_f32(&got.images);
            let w = imagefeed::tools::gpu::images_f32(h).unwrap();
            assert_eq!(g.len(), w.len(), "{what}");
            for (i, (&x, &y)) in g.iter().zip(&w).enumerate() {
                assert!(
                    within_rounding(dtype, x, y),
                    "{what}: batch {k} element {i} is {x} taken from the GPU, {y} on the host"
                );
            }
        }
        println!("{what}: {} batches taken through {slots} slots", kept.len());
    }
}

#[test]
fn a_loader_on_the_consumers_stream_delivers_the_same_batches() {
    need_gpu!();
    let stream = imagefeed::cudarc::driver::CudaContext::new(0)
        .unwrap()
        .new_stream()
        .unwrap();
    let (host, gpu) = host_and_gpu(|b| b.cuda_stream(stream.clone()));
    for b in gpu.epoch(0) {
        let b = b.unwrap();
        assert!(std::sync::Arc::ptr_eq(b.cuda().unwrap().stream(), &stream));
    }
    compare(&host, &gpu, "on the consumer's stream");
}
