//! GPU staging through cudarc: the slot ring of `mod.rs` with pinned host buffers, device
//! buffers, events, one dedicated stream and a small NVRTC kernel (`kernels/normalize.cu`)
//! that normalizes `u8` batches on the GPU. Its `unsafe` blocks are the driver calls and the
//! pinned memory; every block says why it is sound. (The crate's other `unsafe` is in
//! `transform/`, the SIMD kernels of the resize and normalize behind run-time CPU feature
//! checks, and in `cache/format.rs`, the memory map; libjpeg-turbo's FFI is in the
//! `imagefeed-jpeg` crate.)
//!
//! **Opening device `n`** never panics: cudarc panics on its first driver call when libcuda is
//! absent, so [`CudaStaging::open`] first asks cudarc whether the library can be loaded, then
//! checks the ordinal against the device count, creates the context, reads free and total
//! memory, and fails early (with the free and needed amounts) if the loader's buffers cannot
//! fit. The rest runs under `catch_unwind` as a second line of defence.
//!
//! **Modes.** With `gpu_normalize(true)` (the default) a slot's pinned buffer holds one `u8`
//! batch (4× fewer bytes across PCIe than `f32`) and the kernel writes the output dtype and
//! layout. A `u8` NHWC batch needs no kernel: the copy is the output. Without NVRTC (libnvrtc
//! not found, or the kernel fails to compile or load), or with `gpu_normalize(false)`, the host
//! normalizes into the batch's host buffer, which is copied through the pinned buffer.
//!
//! **Matching the host.** The kernel computes `v * scale[c] + bias[c]` with
//! `scale = 1 / (255 * std)` and `bias = -mean / std`, each operation rounded to nearest
//! (`mul.rn`, `add.rn`: never fused into an FMA), exactly as `Normalizer` does on the host, then
//! rounds to `f16`/`bf16` to nearest even, as the `half` crate does.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr,
    DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use half::{bf16, f16};

use super::{SlotLease, SlotMemory, SlotRing};
use crate::config::BatchFormat;
use crate::config::Config;
use crate::error::{panic_message, Error};
use crate::stats::StatsCell;
use crate::transform::{BatchStorage, Dtype, Layout};

/// Threads per block of the normalize kernel.
const BLOCK: u32 = 256;
/// The kernel loops over pixels, so a bounded grid covers any batch.
const MAX_BLOCKS: u64 = 65_535;

/// The normalize kernel's CUDA C source (`kernels/normalize.cu`), compiled once a process
/// by NVRTC ([`kernel_ptx`]).
const KERNEL_SRC: &str = include_str!("kernels/normalize.cu");

/// The kernel's `Params`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
struct KernelParams {
    pixels: u64,
    plane: u64,
    nchw: u32,
    pad: u32,
    scale: [f32; 3],
    bias: [f32; 3],
}

// SAFETY: `repr(C)` plain numbers with no padding (8 + 8 + 4 + 4 + 12 + 12 = 48 bytes, checked
// by a test), laid out exactly as the kernel's `struct Params`.
unsafe impl DeviceRepr for KernelParams {}

impl KernelParams {
    /// The same `scale` and `bias` as the host's `Normalizer`.
    fn new(cfg: &Config) -> Self {
        KernelParams {
            pixels: 0,
            plane: u64::from(cfg.height) * u64::from(cfg.width),
            nchw: u32::from(cfg.layout == Layout::Nchw),
            pad: 0,
            scale: std::array::from_fn(|c| 1.0 / (255.0 * cfg.std[c])),
            bias: std::array::from_fn(|c| -cfg.mean[c] / cfg.std[c]),
        }
    }
}

fn kernel_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "imagefeed_u8_to_f32",
        Dtype::F16 => "imagefeed_u8_to_f16",
        Dtype::Bf16 => "imagefeed_u8_to_bf16",
        Dtype::U8 => "imagefeed_u8_to_u8",
    }
}

/// The kernel's PTX, compiled once per process (NVRTC takes a fraction of a second).
fn kernel_ptx() -> Result<String, String> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        if !library_present(&NVRTC_NAMES) {
            return Err(
                "NVRTC (libnvrtc.so, from the CUDA toolkit or the nvidia-cuda-nvrtc wheel) was \
                 not found by the dynamic loader"
                    .to_string(),
            );
        }
        catch_unwind(|| cudarc::nvrtc::compile_ptx(KERNEL_SRC).map(|p| p.to_src()))
            .map_err(|p| format!("NVRTC panicked: {}", panic_message(&*p)))?
            .map_err(|e| format!("the normalize kernel did not compile: {e}"))
    })
    .clone()
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The message for a machine without libcuda.
fn no_driver(ordinal: usize) -> Error {
    Error::device(format!(
        "CUDA device {ordinal}: the NVIDIA driver library was not found (looked for libcuda.so \
         and libcuda.so.1 through the dynamic loader: LD_LIBRARY_PATH, then the ldconfig cache); \
         install the NVIDIA driver, use Device::Host, or allow fallback_to_host(true)"
    ))
}

/// The names libcuda goes by.
const CUDA_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];
/// The names libnvrtc goes by, newest first (cudarc looks for the version it was built for).
const NVRTC_NAMES: [&str; 6] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
    "libnvrtc.so.11.0",
];

/// Whether a library can be loaded under one of `names` (already loaded, as when cudarc links
/// it, counts).
fn library_present(names: &[&str]) -> bool {
    names.iter().any(|name| {
        // SAFETY: loads libcuda or libnvrtc and unloads it again, as cudarc's own check does;
        // their initializers only set up the library.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

/// Whether libcuda can be loaded; cudarc panics on its first call if it cannot (when it loads
/// it at run time).
pub(crate) fn driver_present() -> bool {
    library_present(&CUDA_NAMES)
}

fn drv(what: &str, ordinal: usize) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::device(format!("CUDA device {ordinal}: {what}: {e}"))
}

/// Runs `f` (driver calls) and turns a cudarc panic into a device error.
fn guarded<T>(ordinal: usize, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::device(format!(
            "CUDA device {ordinal}: cudarc panicked: {}",
            panic_message(&*p)
        )))
    })
}

/// Checks the driver and the ordinal, then creates the context.
fn context(ordinal: usize) -> Result<Arc<CudaContext>, Error> {
    if !driver_present() {
        return Err(no_driver(ordinal));
    }
    guarded(ordinal, || {
        let count =
            CudaContext::device_count().map_err(drv("the driver found no usable GPU", ordinal))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::device(format!(
                "CUDA device {ordinal} does not exist: the driver reports {count} device(s)"
            )));
        }
        CudaContext::new(ordinal).map_err(drv("cannot create a context", ordinal))
    })
}

/// How a loader's batches reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `u8` NHWC: the copied `u8` batch is the output; no kernel.
    Direct,
    /// The `u8` batch is copied and the kernel writes the output.
    Kernel,
    /// The host normalized the batch; its bytes are copied through the pinned buffer.
    HostNormalized,
}

/// Bytes of one slot's buffers.
#[derive(Debug, Clone, Copy)]
struct SlotSizes {
    /// The pinned host buffer and the device buffer it is copied into.
    staged: usize,
    /// The kernel's output buffer (0 without a kernel).
    output: usize,
}

impl SlotSizes {
    fn device(&self) -> u64 {
        (self.staged + self.output) as u64
    }
}

/// The GPU staging of one loader: context, stream, kernel and slot ring.
pub(crate) struct CudaStaging {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernel: Option<CudaFunction>,
    mode: Mode,
    format: BatchFormat,
    params: KernelParams,
    sizes: SlotSizes,
    ring: Arc<SlotRing<CudaSlot>>,
}

impl std::fmt::Debug for CudaStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStaging")
            .field("ordinal", &self.ordinal)
            .field("mode", &self.mode)
            .field("sizes", &self.sizes)
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

impl CudaStaging {
    /// Opens device `ordinal` for a loader with these settings.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) naming what was looked for and what
    /// was missing (driver library, device, memory); `InvalidConfig` for a
    /// `gpu_memory_limit` below what the slots need.
    pub(crate) fn open(cfg: &Config, ordinal: usize) -> Result<Self, Error> {
        let ctx = context(ordinal)?;
        guarded(ordinal, || Self::open_in(cfg, ordinal, ctx))
    }

    fn open_in(cfg: &Config, ordinal: usize, ctx: Arc<CudaContext>) -> Result<Self, Error> {
        let format = cfg.batch_format();
        let u8_batch = cfg.batch_elems();
        let out_batch = u8_batch * cfg.dtype.size();
        let direct = cfg.dtype == Dtype::U8 && cfg.layout == Layout::Nhwc;
        let mut kernel = None;
        let mode = if direct {
            Mode::Direct
        } else if !cfg.gpu_normalize {
            Mode::HostNormalized
        } else {
            match load_kernel(&ctx, cfg.dtype) {
                Ok(f) => {
                    kernel = Some(f);
                    Mode::Kernel
                }
                Err(why) => {
                    log::warn!(
                        "CUDA device {ordinal}: {why}; normalizing on the host and copying {} \
                         batches ({}x the bytes of u8)",
                        cfg.dtype.name(),
                        cfg.dtype.size()
                    );
                    Mode::HostNormalized
                }
            }
        };
        let sizes = match mode {
            Mode::Direct => SlotSizes {
                staged: u8_batch,
                output: 0,
            },
            Mode::Kernel => SlotSizes {
                staged: u8_batch,
                output: out_batch,
            },
            Mode::HostNormalized => SlotSizes {
                staged: out_batch,
                output: 0,
            },
        };
        let slots = cfg.device_slots();
        let need = sizes.device() * slots as u64;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        if let Some(limit) = cfg.gpu_memory_limit {
            if need > limit {
                return Err(Error::config(
                    "gpu_memory_limit",
                    format!(
                        "the loader's device buffers need {:.1} MB ({slots} slots × {:.1} MB) but \
                         the limit is {:.1} MB; lower batch_size or prefetch, or use a smaller \
                         dtype",
                        mb(need),
                        mb(sizes.device()),
                        mb(limit)
                    ),
                ));
            }
        }
        let (free, total) = ctx
            .mem_get_info()
            .map_err(drv("cannot read free memory", ordinal))?;
        if need > free as u64 {
            return Err(Error::device(format!(
                "CUDA device {ordinal} ({name}): the loader's device buffers need {:.1} MB \
                 ({slots} slots × {:.1} MB) but only {:.1} MB of {:.1} MB are free; another \
                 process is probably holding the GPU's memory (see nvidia-smi), else lower \
                 batch_size or prefetch",
                mb(need),
                mb(sizes.device()),
                mb(free as u64),
                mb(total as u64)
            )));
        }
        let stream = ctx
            .new_stream()
            .map_err(drv("cannot create a stream", ordinal))?;
        let staging = CudaStaging {
            ordinal,
            ctx,
            stream,
            kernel,
            mode,
            format,
            params: KernelParams::new(cfg),
            sizes,
            ring: SlotRing::new(slots),
        };
        if cfg.gpu_memory_limit.is_some() {
            // A hard cap: allocate every slot now, so that nothing grows later.
            staging.ring.fill(|| staging.make_slot())?;
        }
        log::info!(
            "CUDA device {ordinal} ({name}): {slots} slots of {:.1} MB pinned + {:.1} MB device, \
             mode {:?}, {:.1} MB of {:.1} MB free",
            mb(sizes.staged as u64),
            mb(sizes.device()),
            mode,
            mb(free as u64),
            mb(total as u64)
        );
        Ok(staging)
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub(crate) fn ring(&self) -> &SlotRing<CudaSlot> {
        &self.ring
    }

    /// Whether the host normalizes into the batch's host storage (then copied).
    pub(crate) fn normalizes_on_host(&self) -> bool {
        self.mode == Mode::HostNormalized
    }

    fn make_slot(&self) -> Result<CudaSlot, Error> {
        guarded(self.ordinal, || {
            let n = self.ordinal;
            let staged = self.sizes.staged;
            // SAFETY: the buffer is uninitialized; it is zeroed below before any reference to
            // its bytes exists, and `u8` has no invalid values.
            let mut pinned = unsafe { self.ctx.alloc_pinned::<u8>(staged) }
                .map_err(drv("cannot allocate pinned host memory", n))?;
            let host = pinned
                .as_mut_ptr()
                .map_err(drv("cannot map pinned host memory", n))?;
            // SAFETY: `host` points to `staged` writable bytes owned by `pinned`, which no copy
            // uses yet. Writing (not reading) is what write-combined memory is for.
            unsafe { std::ptr::write_bytes(host, 0, staged) };
            let alloc = |len: usize| {
                self.stream
                    .alloc_zeros::<u8>(len)
                    .map_err(drv("cannot allocate device memory", n))
            };
            let input = alloc(staged)?;
            let output = match self.mode {
                Mode::Kernel => Some(alloc(self.sizes.output)?),
                Mode::Direct | Mode::HostNormalized => None,
            };
            let event = |flags| {
                self.ctx
                    .new_event(Some(flags))
                    .map_err(drv("cannot create an event", n))
            };
            use sys::CUevent_flags::{
                CU_EVENT_BLOCKING_SYNC as CPU_WAITS, CU_EVENT_DEFAULT as TIMED,
                CU_EVENT_DISABLE_TIMING as GPU_ONLY,
            };
            let data_ptr = {
                let data = output.as_ref().unwrap_or(&input);
                let (p, _record) = data.device_ptr(&self.stream);
                p
            };
            Ok(CudaSlot {
                host,
                host_len: staged,
                _pinned: pinned,
                input,
                output,
                data_ptr,
                stream: self.stream.clone(),
                null_stream: self.ctx.default_stream(),
                // The CPU waits on `copied` (fence 1) and `ready` (`synchronize`): blocking
                // events yield the core to the decode threads instead of spinning. Both keep
                // timing, for the copy's time.
                start: event(TIMED)?,
                copied: event(CPU_WAITS)?,
                ready: event(CPU_WAITS)?,
                released: event(GPU_ONLY)?,
                release_recorded: AtomicBool::new(false),
                timing_pending: 0,
                images: 0,
                u8_staged: self.mode != Mode::HostNormalized,
            })
        })
    }

    /// A slot for the next batch (lazily created), after fence 1; adds the previous copy's
    /// time to the stats.
    pub(crate) fn acquire(
        &self,
        cancelled: &dyn Fn() -> bool,
        stats: &StatsCell,
    ) -> Result<Option<SlotLease<CudaSlot>>, Error> {
        let Some(mut slot) = self.ring.acquire(|| self.make_slot(), cancelled)? else {
            return Ok(None);
        };
        if slot.timing_pending > 0 {
            // Fence 1 has passed, so both events are complete: this does not block.
            if let Ok(ms) = slot.start.elapsed_ms(&slot.copied) {
                stats
                    .h2d_bytes
                    .fetch_add(slot.timing_pending as u64, Ordering::Relaxed);
                stats
                    .h2d_ns
                    .fetch_add((f64::from(ms) * 1e6) as u64, Ordering::Relaxed);
            }
            slot.timing_pending = 0;
        }
        Ok(Some(slot))
    }

    /// Queues the copy of the slot's first `images` images (and the kernel) on the loader's
    /// stream, and records the slot's events.
    pub(crate) fn submit(
        &self,
        slot: &mut SlotLease<CudaSlot>,
        storage: &BatchStorage,
        images: usize,
        _stats: &StatsCell,
    ) -> Result<(), Error> {
        let n = self.ordinal;
        let f = &self.format;
        let pixels = images * f.height * f.width;
        let bytes = match self.mode {
            Mode::Direct | Mode::Kernel => pixels * 3,
            Mode::HostNormalized => pixels * 3 * f.dtype.size(),
        };
        // cudarc panics on a length mismatch: check every length first.
        if bytes > slot.host_len || bytes > slot.input.len() {
            return Err(Error::device(format!(
                "CUDA device {n}: a batch of {bytes} bytes does not fit its {} byte slot",
                slot.host_len
            )));
        }
        let slot = &mut **slot;
        if self.mode == Mode::HostNormalized {
            let src = storage.as_bytes().get(..bytes).ok_or_else(|| {
                Error::device(format!(
                    "CUDA device {n}: the host batch holds fewer than {bytes} bytes"
                ))
            })?;
            // One host copy into pinned memory (write-only), then an asynchronous DMA.
            slot.host_u8_all()[..bytes].copy_from_slice(src);
        }
        guarded(n, || {
            let s = &self.stream;
            // Fence 2, device side: the consumer's last use of this slot is done.
            s.wait(&slot.released)
                .map_err(drv("cannot wait for the consumer", n))?;
            slot.start
                .record(s)
                .map_err(drv("cannot record an event", n))?;
            // SAFETY: `host` points to `host_len >= bytes` initialized bytes owned by the slot's
            // pinned allocation. No CPU code reads them (write-combined memory); the DMA engine
            // reads them until `copied` completes, and the CPU writes them again only after
            // waiting on `copied` (fence 1), so nothing writes while this slice is in use.
            let src = unsafe { std::slice::from_raw_parts(slot.host, bytes) };
            let mut dst = slot.input.slice_mut(..bytes);
            s.memcpy_htod(src, &mut dst)
                .map_err(drv("cannot queue the host-to-device copy", n))?;
            slot.copied
                .record(s)
                .map_err(drv("cannot record an event", n))?;
            if let (Some(kernel), Some(out)) = (&self.kernel, slot.output.as_mut()) {
                let params = KernelParams {
                    pixels: pixels as u64,
                    ..self.params
                };
                let blocks = (pixels as u64)
                    .div_ceil(u64::from(BLOCK))
                    .clamp(1, MAX_BLOCKS);
                let launch = LaunchConfig {
                    grid_dim: (blocks as u32, 1, 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut args = s.launch_builder(kernel);
                args.arg(&slot.input).arg(out).arg(&params);
                // SAFETY: the arguments match the kernel's (const u8*, T*, Params) with `T` the
                // loader's dtype; `input` holds at least `3 * pixels` bytes (checked above) and
                // `out` `3 * pixels` elements of the dtype (it is one full batch); the kernel
                // touches indices below `3 * pixels` only.
                unsafe { args.launch(launch) }
                    .map_err(drv("cannot launch the normalize kernel", n))?;
            }
            slot.ready
                .record(s)
                .map_err(drv("cannot record an event", n))
        })?;
        slot.release_recorded.store(false, Ordering::Relaxed);
        slot.timing_pending = bytes;
        slot.images = images;
        Ok(())
    }
}

fn load_kernel(ctx: &Arc<CudaContext>, dtype: Dtype) -> Result<CudaFunction, String> {
    let ptx = kernel_ptx()?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(|e| format!("the driver cannot load the normalize kernel: {e}"))?;
    module
        .load_function(kernel_name(dtype))
        .map_err(|e| format!("the normalize kernel has no {}: {e}", kernel_name(dtype)))
}

/// One slot: a pinned host buffer, the device buffer it is copied into, the kernel's output
/// buffer, and the events of the two fences.
pub(crate) struct CudaSlot {
    /// `_pinned`'s memory: write-combined, so the CPU writes it and never reads it.
    host: *mut u8,
    host_len: usize,
    _pinned: PinnedHostSlice<u8>,
    input: CudaSlice<u8>,
    output: Option<CudaSlice<u8>>,
    /// The device address of the batch's data (`output`, else `input`).
    data_ptr: u64,
    stream: Arc<CudaStream>,
    null_stream: Arc<CudaStream>,
    /// Timing events around the copy; `copied` is fence 1.
    start: CudaEvent,
    copied: CudaEvent,
    /// The batch is in device memory (copy and kernel done).
    ready: CudaEvent,
    /// Fence 2 on the device: where the consumer's work on the batch ends.
    released: CudaEvent,
    release_recorded: AtomicBool,
    /// Bytes of a copy whose time has not been read yet.
    timing_pending: usize,
    images: usize,
    /// Whether the batcher writes `u8` samples into `host` (else the host normalizes).
    u8_staged: bool,
}

// SAFETY: `host` is the address of `_pinned`'s allocation, owned by this struct alone and freed
// only when it drops; every other field is Send + Sync (cudarc types) or plain data. Through
// `&self` the slot only hands out device handles and reads nothing through `host`; writes
// through `host` need `&mut self`, so they are exclusive.
unsafe impl Send for CudaSlot {}
// SAFETY: as above: shared references never touch the memory behind `host`.
unsafe impl Sync for CudaSlot {}

impl std::fmt::Debug for CudaSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSlot")
            .field("host_len", &self.host_len)
            .field("images", &self.images)
            .finish_non_exhaustive()
    }
}

impl SlotMemory for CudaSlot {
    fn wait_copied(&mut self) -> Result<(), Error> {
        let n = self.stream.context().ordinal();
        self.copied
            .synchronize()
            .map_err(drv("the host-to-device copy failed", n))
    }

    fn on_release(&mut self) {
        if !self.release_recorded.swap(true, Ordering::Relaxed) {
            // The consumer named no stream: its work on the batch is on the legacy default
            // stream or already finished; mark the end of that stream's queued work.
            if let Err(e) = self.released.record(&self.null_stream) {
                log::warn!("cannot record a batch's release on the default stream: {e}");
            }
        }
    }
}

impl CudaSlot {
    /// The whole pinned buffer. Write-combined memory: write it, never read it.
    fn host_u8_all(&mut self) -> &mut [u8] {
        // SAFETY: `host` points to `host_len` initialized (zeroed at creation) bytes owned by
        // `_pinned`, which lives as long as `self`; `&mut self` makes this the only reference.
        // The ring hands out a slot only after fence 1 (`copied`), so no copy reads the buffer
        // while it is written.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.host_len) }
    }

    /// Where the batcher writes `u8` samples, when the GPU normalizes them.
    pub(crate) fn host_u8(&mut self) -> Option<&mut [u8]> {
        if self.u8_staged {
            Some(self.host_u8_all())
        } else {
            None
        }
    }

    fn data(&self) -> &CudaSlice<u8> {
        self.output.as_ref().unwrap_or(&self.input)
    }
}

/// A batch in GPU memory, borrowed from a [`Batch`](crate::Batch) with
/// [`Batch::cuda`](crate::Batch::cuda). The device memory stays valid, and is not reused, until
/// the `Batch` is dropped.
///
/// The data is ready once [`ready_event`](Self::ready_event) completes: make your stream wait on
/// it ([`wait_on`](Self::wait_on)) or block the CPU ([`synchronize`](Self::synchronize)).
/// Reading it through cudarc views ([`as_f32`](Self::as_f32), …) on any stream of the same
/// context waits automatically (cudarc's event tracking).
///
/// **Releasing.** The loader overwrites the slot after the `Batch` is dropped, behind a GPU-side
/// fence: by default the end of the work queued on the context's legacy default stream when the
/// batch is dropped. If you read the raw pointer on another stream, call
/// [`release_after`](Self::release_after) with that stream after queueing the last read.
///
/// **Wrapping it** (no copy, valid while the `Batch` lives):
///
/// - tch: `Tensor::from_blob(batch.device_ptr() as *const u8, &shape, &strides, kind,
///   Device::Cuda(n))` with the contiguous strides of [`shape`](Self::shape), on the legacy
///   default stream (or call `release_after` with torch's current stream).
/// - candle takes ownership of device memory: copy the view into a new slice on your stream
///   (`stream.clone_dtod(&view)`, microseconds on the device) and wrap that.
/// - any other framework: [`device_ptr`](Self::device_ptr), [`shape`](Self::shape),
///   [`dtype`](Self::dtype), and the event or stream to wait on.
///
/// ```
/// # #[cfg(feature = "cuda")]
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Device, Loader, Source};
/// let loader = match Loader::builder(Source::from_dir("testdata/classes")?)
///     .batch_size(4)
///     .device(Device::Cuda(0))
///     .build()
/// {
///     Ok(loader) => loader,
///     Err(e) => { eprintln!("no GPU here: {e}"); return Ok(()); }
/// };
/// for batch in loader.epoch(0) {
///     let batch = batch?;
///     let gpu = batch.cuda().expect("a CUDA loader delivers device batches");
///     let images = gpu.as_f32().expect("f32 is the default dtype"); // a cudarc view
///     gpu.synchronize()?; // or gpu.wait_on(&my_stream)?
///     assert_eq!(images.len(), batch.len() * 160 * 160 * 3);
/// }
/// # Ok(()) }
/// # #[cfg(not(feature = "cuda"))] fn main() {}
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug, Clone, Copy)]
pub struct CudaBatch<'a> {
    slot: &'a CudaSlot,
    shape: [usize; 4],
    dtype: Dtype,
    layout: Layout,
}

impl<'a> CudaBatch<'a> {
    pub(crate) fn new(slot: &'a CudaSlot, format: &BatchFormat) -> Self {
        let n = slot.images;
        let shape = match format.layout {
            Layout::Nhwc => [n, format.height, format.width, 3],
            Layout::Nchw => [n, 3, format.height, format.width],
        };
        CudaBatch {
            slot,
            shape,
            dtype: format.dtype,
            layout: format.layout,
        }
    }

    /// The shape: `[n, height, width, 3]` for NHWC, `[n, 3, height, width]` for NCHW.
    /// The data is contiguous (row-major) in this shape.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for a batch without images (never delivered by a loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size of the data in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len() * self.dtype.size()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.slot.stream.context().ordinal()
    }

    /// The raw device address of the first element (a `CUdeviceptr`), aligned to at least 256
    /// bytes, valid until the `Batch` is dropped. Wait on [`ready_event`](Self::ready_event)
    /// before reading it.
    pub fn device_ptr(&self) -> u64 {
        self.slot.data_ptr
    }

    /// The data's bytes as a cudarc view.
    pub fn bytes(&self) -> CudaView<'a, u8> {
        self.slot.data().slice(..self.num_bytes())
    }

    fn typed<T>(&self, dtype: Dtype) -> Option<CudaView<'a, T>> {
        if self.dtype != dtype {
            return None;
        }
        // SAFETY: the buffer holds `len()` values of `dtype` (written by the kernel, or copied
        // from the host's values), `T` is that dtype's Rust type (every bit pattern valid), and
        // device allocations are aligned to at least 256 bytes. cudarc returns `None` if the
        // buffer were too small.
        unsafe { self.slot.data().transmute::<T>(self.len()) }
    }

    /// The images as `f32`, if that is the dtype.
    pub fn as_f32(&self) -> Option<CudaView<'a, f32>> {
        self.typed(Dtype::F32)
    }

    /// The images as `f16`, if that is the dtype.
    pub fn as_f16(&self) -> Option<CudaView<'a, f16>> {
        self.typed(Dtype::F16)
    }

    /// The images as `bf16`, if that is the dtype.
    pub fn as_bf16(&self) -> Option<CudaView<'a, bf16>> {
        self.typed(Dtype::Bf16)
    }

    /// The images as `u8`, if that is the dtype.
    pub fn as_u8(&self) -> Option<CudaView<'a, u8>> {
        self.typed(Dtype::U8)
    }

    /// The event recorded when the batch is in device memory (copy and normalization done).
    pub fn ready_event(&self) -> &'a CudaEvent {
        &self.slot.ready
    }

    /// The loader's stream, on which the copy and normalization run.
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        &self.slot.stream
    }

    /// The context (the device's primary context).
    pub fn context(&self) -> &'a Arc<CudaContext> {
        self.slot.stream.context()
    }

    /// Makes `stream` wait (on the GPU) until the batch is in device memory.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) from the driver.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<(), Error> {
        stream
            .wait(&self.slot.ready)
            .map_err(drv("cannot wait for a batch", self.ordinal()))
    }

    /// Blocks the calling thread until the batch is in device memory.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) if the copy or the kernel failed.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.slot.ready.synchronize().map_err(drv(
            "a batch's copy or normalization failed",
            self.ordinal(),
        ))
    }

    /// Marks the end of this batch's use on `stream`: once the `Batch` is dropped, the loader
    /// reuses its device memory only after `stream` has reached this point. Call it after
    /// queueing the last work that reads the batch, if that work is not on the legacy default
    /// stream; the last call wins.
    ///
    /// # Errors
    /// [`ErrorKind::Device`](crate::ErrorKind::Device) if `stream` belongs to another context.
    pub fn release_after(&self, stream: &CudaStream) -> Result<(), Error> {
        self.slot
            .released
            .record(stream)
            .map_err(drv("cannot record a release", self.ordinal()))?;
        self.slot.release_recorded.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// What `imagefeed gpu-info` prints: the driver, every device, and whether pinned memory and
/// the normalize kernel work.
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

#[cfg(test)]
// A failed `unwrap` in a test is a failed test, with its location.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kernel_params_match_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<KernelParams>(), 48);
        assert_eq!(std::mem::align_of::<KernelParams>(), 8);
    }

    #[test]
    fn kernel_constants_match_the_host_normalizer() {
        let cfg = Config {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            ..Config::default()
        };
        let p = KernelParams::new(&cfg);
        let host = crate::transform::Normalizer::new(cfg.mean, cfg.std, cfg.layout);
        let mut out = BatchStorage::new(Dtype::F32, 3);
        for v in 0..=255u8 {
            host.write(&[v, v, v], &mut out, 0);
            let BatchStorage::F32(h) = &out else {
                unreachable!()
            };
            for (c, want) in h.iter().enumerate() {
                // What the kernel computes: one rounded multiply, one rounded add.
                let gpu = f32::from(v) * p.scale[c] + p.bias[c];
                assert_eq!(gpu.to_bits(), want.to_bits(), "v={v} c={c}");
            }
        }
    }

    /// The kernel's `convert<ToF32>` loop, line for line, over all threads of a grid.
    fn kernel_f32(src: &[u8], dst: &mut [f32], p: &KernelParams) {
        for i in 0..p.pixels {
            let s = &src[(3 * i) as usize..];
            let cv = |v: u8, c: usize| f32::from(v) * p.scale[c] + p.bias[c];
            let (r, g, b) = (cv(s[0], 0), cv(s[1], 1), cv(s[2], 2));
            if p.nchw != 0 {
                let img = i / p.plane;
                let at = (img * 3 * p.plane + (i - img * p.plane)) as usize;
                dst[at] = r;
                dst[at + p.plane as usize] = g;
                dst[at + 2 * p.plane as usize] = b;
            } else {
                let at = (3 * i) as usize;
                dst[at..at + 3].copy_from_slice(&[r, g, b]);
            }
        }
    }

    #[test]
    fn kernel_indexing_matches_the_host_layouts() {
        for layout in [Layout::Nhwc, Layout::Nchw] {
            let cfg = Config {
                height: 3,
                width: 5,
                layout,
                mean: [0.1, 0.2, 0.3],
                std: [0.5, 0.25, 2.0],
                ..Config::default()
            };
            let sample = 3 * 5 * 3;
            let images = 4;
            let src: Vec<u8> = (0..images * sample).map(|i| (i * 37 % 251) as u8).collect();
            let host = crate::transform::Normalizer::new(cfg.mean, cfg.std, layout);
            let mut want = BatchStorage::new(Dtype::F32, images * sample);
            for (k, px) in src.chunks_exact(sample).enumerate() {
                host.write(px, &mut want, k);
            }
            let p = KernelParams {
                pixels: (images * 15) as u64,
                ..KernelParams::new(&cfg)
            };
            let mut got = vec![0f32; images * sample];
            kernel_f32(&src, &mut got, &p);
            let BatchStorage::F32(want) = want else {
                unreachable!()
            };
            assert_eq!(got, want, "{layout:?}");
        }
    }

    /// The kernel's `ToBf16`, line for line.
    fn kernel_bf16(f: f32) -> u16 {
        let mut u = f.to_bits();
        if (u & 0x7fff_ffff) > 0x7f80_0000 {
            return ((u >> 16) | 0x40) as u16;
        }
        u = u.wrapping_add(0x7fff + ((u >> 16) & 1));
        (u >> 16) as u16
    }

    #[test]
    fn kernel_bf16_rounding_matches_the_half_crate() {
        let mut x = 0x1234_5678u32;
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::INFINITY,
        ];
        let values = specials.into_iter().chain((0..200_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f32::from_bits(x)
        }));
        for f in values {
            let want = bf16::from_f32(f);
            let got = kernel_bf16(f);
            if f.is_nan() {
                assert!(bf16::from_bits(got).is_nan(), "{f}");
            } else {
                assert_eq!(got, want.to_bits(), "{f} ({:#x})", f.to_bits());
            }
        }
    }

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        if driver_present() {
            return; // covered by tests/cuda.rs on a GPU machine
        }
        let e = context(0).unwrap_err();
        assert!(e.to_string().contains("libcuda"), "{e}");
        assert!(info().is_err());
    }
}
