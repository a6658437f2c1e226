//! Diagnostics: the driver and devices (`imagefeed gpu-info`), pinned copy bandwidth, and reading a
//! device batch back to the host.

use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, CudaStream, DevicePtr, PinnedHostSlice};

use super::batch::CudaBatch;
use super::driver::{context, driver_present, drv, guarded, no_driver};
use super::kernel::{kernel_ptx, load_kernel};
use crate::batch::normalize::Dtype;
use crate::error::Error;

/// What `imagefeed gpu-info` prints: the driver, every device, and whether pinned memory and
/// the normalize kernel work.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn info() -> Result<String, Error> {
    use std::fmt::Write as _;
    if !driver_present() {
        return Err(no_driver(0));
    }
    guarded(0, || {
        let mut out = String::new();
        let mut version = 0i32;
        // SAFETY: the library is present (checked above); the call writes one int.
        let r = unsafe { sys::cuDriverGetVersion(&mut version) };
        match r.result() {
            Ok(()) => writeln!(
                out,
                "driver: libcuda found, CUDA driver API {}.{}",
                version / 1000,
                (version % 1000) / 10
            ),
            Err(e) => writeln!(out, "driver: libcuda found, version unknown ({e})"),
        }
        .ok();
        let count = CudaContext::device_count().map_err(drv("no usable GPU", 0))?;
        writeln!(out, "devices: {count}").ok();
        let nvrtc = match kernel_ptx() {
            Ok(_) => "NVRTC found, normalize kernel compiles".to_string(),
            Err(why) => format!("{why}: batches will be normalized on the host"),
        };
        writeln!(out, "nvrtc: {nvrtc}").ok();
        for i in 0..count.max(0) as usize {
            let ctx = match CudaContext::new(i) {
                Ok(c) => c,
                Err(e) => {
                    writeln!(out, "cuda:{i}: cannot create a context: {e}").ok();
                    continue;
                }
            };
            let name = ctx.name().unwrap_or_else(|e| format!("name unknown ({e})"));
            let cc = ctx
                .compute_capability()
                .map(|(a, b)| format!("{a}.{b}"))
                .unwrap_or_else(|_| "?".into());
            let mem = match ctx.mem_get_info() {
                Ok((free, total)) => format!(
                    "{:.1} GB free of {:.1} GB",
                    free as f64 / 1e9,
                    total as f64 / 1e9
                ),
                Err(e) => format!("memory unknown ({e})"),
            };
            const PROBE: usize = 64 << 20;
            // SAFETY: the probe buffer is never read or written; it is freed at once.
            let pinned = match unsafe { ctx.alloc_pinned::<u8>(PROBE) } {
                Ok(_) => "works (64 MB)".to_string(),
                Err(e) => format!("FAILED: {e}"),
            };
            let kernel = match load_kernel(&ctx, Dtype::F32) {
                Ok(_) => "loads".to_string(),
                Err(e) => format!("unavailable ({e})"),
            };
            writeln!(
                out,
                "cuda:{i}: {name}, compute capability {cc}, {mem}, pinned allocation {pinned}, \
                 normalize kernel {kernel}"
            )
            .ok();
        }
        Ok(out)
    })
}

/// Host-to-device copy bandwidth for one size, in GB/s (1e9 bytes a second).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) struct CopyBandwidth {
    pub(crate) bytes: usize,
    /// The loader's path: write-combined pinned memory, asynchronous copies on a dedicated
    /// stream.
    pub(crate) loader_pinned: f64,
    /// Ordinary pinned memory, plain synchronous `cuMemcpyHtoD` (the reference).
    pub(crate) plain_pinned: f64,
    /// Pageable memory (a `Vec`), asynchronous copy call (staged by the driver).
    pub(crate) pageable: f64,
}

/// Measures [`CopyBandwidth`] for `bytes`-sized copies on device `ordinal`.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn copy_bandwidth(ordinal: usize, bytes: usize) -> Result<CopyBandwidth, Error> {
    let ctx = context(ordinal)?;
    guarded(ordinal, || {
        let n = ordinal;
        let stream = ctx.new_stream().map_err(drv("cannot create a stream", n))?;
        let mut dev = stream
            .alloc_zeros::<u8>(bytes)
            .map_err(drv("cannot allocate device memory", n))?;
        let zeroed = |flags: u32| -> Result<PinnedHostSlice<u8>, Error> {
            // SAFETY: zeroed right below, before any reference to the bytes exists.
            let mut p = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, flags) }
                .map_err(drv("cannot allocate pinned host memory", n))?;
            let ptr = p.as_mut_ptr().map_err(drv("cannot map pinned memory", n))?;
            // SAFETY: `ptr` points to `bytes` writable bytes owned by `p`, unused by any copy.
            unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
            Ok(p)
        };
        let wc = zeroed(sys::CU_MEMHOSTALLOC_WRITECOMBINED)?;
        let plain = zeroed(0)?;
        let pageable = vec![1u8; bytes];
        // About 2 GB per measurement, at least 20 copies.
        let iters = (2_000_000_000 / bytes.max(1)).clamp(20, 2000);
        let gbps = |t: Duration| (bytes * iters) as f64 / t.as_secs_f64() / 1e9;
        let wc_src = wc.as_slice().map_err(drv("cannot map pinned memory", n))?;
        let plain_src = plain
            .as_slice()
            .map_err(drv("cannot map pinned memory", n))?;
        let sync = |s: &CudaStream| s.synchronize().map_err(drv("copy failed", n));
        let timed = |f: &mut dyn FnMut() -> Result<(), Error>| -> Result<Duration, Error> {
            f()?; // warm up
            sync(&stream)?;
            let t = Instant::now();
            for _ in 0..iters {
                f()?;
            }
            sync(&stream)?;
            Ok(t.elapsed())
        };
        let loader_pinned = gbps(timed(&mut || {
            stream
                .memcpy_htod(wc_src, &mut dev)
                .map_err(drv("copy failed", n))
        })?);
        let pageable_gbps = gbps(timed(&mut || {
            stream
                .memcpy_htod(&pageable[..], &mut dev)
                .map_err(drv("copy failed", n))
        })?);
        let dptr = {
            let (p, _record) = dev.device_ptr(&stream);
            p
        };
        let plain_pinned = gbps(timed(&mut || {
            // SAFETY: `dptr` is `dev`'s address with `bytes` bytes, alive for this closure;
            // the stream was synchronized, so no queued work uses `dev`; the source is `bytes`
            // initialized bytes of pinned memory.
            unsafe { cudarc::driver::result::memcpy_htod_sync(dptr, plain_src) }
                .map_err(drv("copy failed", n))
        })?);
        Ok(CopyBandwidth {
            bytes,
            loader_pinned,
            plain_pinned,
            pageable: pageable_gbps,
        })
    })
}

/// The device data of a batch converted to `f32` (exactly: every dtype converts losslessly),
/// copied back into a normal `Vec` on the loader's stream.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn download_f32(batch: &CudaBatch<'_>) -> Result<Vec<f32>, Error> {
    let n = batch.ordinal();
    let s = batch.stream();
    let err = drv("cannot copy a batch back", n);
    Ok(match batch.dtype() {
        Dtype::F32 => s
            .clone_dtoh(&batch.as_f32().expect("dtype checked"))
            .map_err(err)?,
        Dtype::F16 => s
            .clone_dtoh(&batch.as_f16().expect("dtype checked"))
            .map_err(err)?
            .into_iter()
            .map(f32::from)
            .collect(),
        Dtype::Bf16 => s
            .clone_dtoh(&batch.as_bf16().expect("dtype checked"))
            .map_err(err)?
            .into_iter()
            .map(f32::from)
            .collect(),
        Dtype::U8 => s
            .clone_dtoh(&batch.as_u8().expect("dtype checked"))
            .map_err(err)?
            .into_iter()
            .map(f32::from)
            .collect(),
    })
}
