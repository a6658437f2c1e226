//! GPU staging through cudarc: the slot ring of `prefetch` with pinned host buffers, device
//! buffers, events, one dedicated stream and a small NVRTC kernel (`prefetch/kernels/normalize.cu`)
//! that normalizes `u8` batches on the GPU: `driver` (libraries, context, errors), `kernel` (its
//! parameters, NVRTC), `staging` (slots, copies, launches), `batch` (the public `CudaBatch`) and
//! `diag` (`gpu-info`, copy bandwidth, reading a batch back). Its `unsafe` is the library probe
//! (`driver`), the kernel's parameter layout (`kernel`), the pinned memory, the kernel launch and
//! the slots' `Send`/`Sync` (`staging`), the typed view of a batch's device memory (`batch`) and
//! raw driver calls (`diag`); every block says why it is sound. The crate's other `unsafe` is in
//! `transform/` (the AVX2 and AVX-512 kernels of the resize, the colour conversion and the
//! normalize, each called after a run-time CPU feature check, and the `cpuid` probe) and in
//! `cache/format.rs` (the memory map and the release of its pages). `decode/` has none:
//! libjpeg-turbo's FFI is in the `imagefeed-jpeg` crate.
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

mod batch;
mod diag;
mod driver;
mod kernel;
mod staging;
#[cfg(test)]
// A failed `unwrap` in a test is a failed test, with its location.
#[allow(clippy::unwrap_used)]
mod tests;

pub(crate) use batch::take_images;
pub use batch::{CudaBatch, OwnedCudaBatch, OwnedCudaImages};
#[cfg(feature = "unstable-tools")]
pub(crate) use diag::{copy_bandwidth, download_f32, info};
pub(crate) use staging::{CudaSlot, CudaStaging};

/// Megabytes, for messages.
fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}
