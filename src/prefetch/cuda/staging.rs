//! The staging of one loader: the slot ring's slots (pinned host buffer, device buffers, events),
//! the copy and the kernel queued on the loader's stream.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};

use super::driver::{context, drv, guarded};
use super::kernel::{load_kernel, KernelParams, BLOCK, MAX_BLOCKS};
use super::mb;
use crate::batch::format::BatchFormat;
use crate::batch::format::OutputSettings;
use crate::batch::normalize::{BatchStorage, Dtype, Layout};
use crate::error::Error;
use crate::prefetch::DeviceSettings;
use crate::prefetch::{SlotLease, SlotMemory, SlotRing};
use crate::stats::StatsCell;

/// How a loader's batches reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `u8` NHWC: the copied `u8` batch is the output; no kernel.
    Direct,
    /// The `u8` batch is copied and the kernel writes the output.
    Kernel,
    /// The host normalized the batch; its bytes are copied through the pinned buffer.
    HostNormalized,
}

/// Bytes of one slot's buffers.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotSizes {
    /// The pinned host buffer and the device buffer it is copied into.
    pub(super) staged: usize,
    /// The kernel's output buffer (0 without a kernel).
    pub(super) output: usize,
}

impl SlotSizes {
    pub(super) fn device(&self) -> u64 {
        (self.staged + self.output) as u64
    }
}

/// The GPU staging of one loader: context, stream, kernel and slot ring.
pub(crate) struct CudaStaging {
    pub(super) ordinal: usize,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) kernel: Option<CudaFunction>,
    pub(super) mode: Mode,
    pub(super) format: BatchFormat,
    pub(super) params: KernelParams,
    pub(super) sizes: SlotSizes,
    pub(super) ring: Arc<SlotRing<CudaSlot>>,
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
    pub(crate) fn open(
        device: &DeviceSettings,
        output: &OutputSettings,
        slots: usize,
        ordinal: usize,
    ) -> Result<Self, Error> {
        let ctx = context(ordinal)?;
        guarded(ordinal, || {
            Self::open_in(device, output, slots, ordinal, ctx)
        })
    }

    pub(super) fn open_in(
        device: &DeviceSettings,
        output: &OutputSettings,
        slots: usize,
        ordinal: usize,
        ctx: Arc<CudaContext>,
    ) -> Result<Self, Error> {
        let format = output.format();
        let u8_batch = output.batch_elems();
        let out_batch = u8_batch * output.dtype.size();
        let direct = output.dtype == Dtype::U8 && output.layout == Layout::Nhwc;
        let mut kernel = None;
        let mode = if direct {
            Mode::Direct
        } else if !device.gpu_normalize {
            Mode::HostNormalized
        } else {
            match load_kernel(&ctx, output.dtype) {
                Ok(f) => {
                    kernel = Some(f);
                    Mode::Kernel
                }
                Err(why) => {
                    log::warn!(
                        "CUDA device {ordinal}: {why}; normalizing on the host and copying {} \
                         batches ({}x the bytes of u8)",
                        output.dtype.name(),
                        output.dtype.size()
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
        let need = sizes.device() * slots as u64;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        if let Some(limit) = device.gpu_memory_limit {
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
        let stream = match &device.cuda_stream {
            Some(s) if s.context().ordinal() != ordinal || s.context().cu_ctx() != ctx.cu_ctx() => {
                return Err(Error::config(
                    "cuda_stream",
                    format!(
                        "the stream is on CUDA device {} (in {}) but the loader's device is CUDA \
                         device {ordinal} (its primary context): name a stream of the loader's \
                         device, made in its primary context (as cudarc and candle make them)",
                        s.context().ordinal(),
                        if s.context().ordinal() == ordinal {
                            "another context"
                        } else {
                            "that device's context"
                        }
                    ),
                ))
            }
            Some(s) => s.clone(),
            None => ctx
                .new_stream()
                .map_err(drv("cannot create a stream", ordinal))?,
        };
        let staging = CudaStaging {
            ordinal,
            ctx,
            stream,
            kernel,
            mode,
            format,
            params: KernelParams::new(output),
            sizes,
            ring: SlotRing::new(slots),
        };
        if device.gpu_memory_limit.is_some() {
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

    #[cfg(any(test, feature = "__testing"))]
    pub(crate) fn ring(&self) -> &SlotRing<CudaSlot> {
        &self.ring
    }

    /// Whether the host normalizes into the batch's host storage (then copied).
    pub(crate) fn normalizes_on_host(&self) -> bool {
        self.mode == Mode::HostNormalized
    }

    pub(super) fn make_slot(&self) -> Result<CudaSlot, Error> {
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

/// One slot: a pinned host buffer, the device buffer it is copied into, the kernel's output
/// buffer, and the events of the two fences.
pub(crate) struct CudaSlot {
    /// `_pinned`'s memory: write-combined, so the CPU writes it and never reads it.
    pub(super) host: *mut u8,
    pub(super) host_len: usize,
    pub(super) _pinned: PinnedHostSlice<u8>,
    pub(super) input: CudaSlice<u8>,
    pub(super) output: Option<CudaSlice<u8>>,
    /// The device address of the batch's data (`output`, else `input`).
    pub(super) data_ptr: u64,
    pub(super) stream: Arc<CudaStream>,
    pub(super) null_stream: Arc<CudaStream>,
    /// Timing events around the copy; `copied` is fence 1.
    pub(super) start: CudaEvent,
    pub(super) copied: CudaEvent,
    /// The batch is in device memory (copy and kernel done).
    pub(super) ready: CudaEvent,
    /// Fence 2 on the device: where the consumer's work on the batch ends.
    pub(super) released: CudaEvent,
    pub(super) release_recorded: AtomicBool,
    /// Bytes of a copy whose time has not been read yet.
    pub(super) timing_pending: usize,
    pub(super) images: usize,
    /// Whether the batcher writes `u8` samples into `host` (else the host normalizes).
    pub(super) u8_staged: bool,
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
    pub(super) fn host_u8_all(&mut self) -> &mut [u8] {
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

    pub(super) fn data(&self) -> &CudaSlice<u8> {
        self.output.as_ref().unwrap_or(&self.input)
    }

    /// Takes the batch's device buffer (`output`, else `input`) and puts a new one of the same
    /// size, zeroed and allocated on the loader's stream, in its place: the next batch in this
    /// slot is written there, ordered after the allocation by the stream.
    pub(super) fn take_data(&mut self) -> Result<CudaSlice<u8>, Error> {
        let n = self.stream.context().ordinal();
        let fresh = self
            .stream
            .alloc_zeros::<u8>(self.data().len())
            .map_err(drv("cannot allocate device memory", n))?;
        let data_ptr = fresh.device_ptr(&self.stream).0;
        let taken = match self.output.as_mut() {
            Some(output) => std::mem::replace(output, fresh),
            None => std::mem::replace(&mut self.input, fresh),
        };
        self.data_ptr = data_ptr;
        Ok(taken)
    }
}
