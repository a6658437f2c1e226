//! The normalize kernel: its parameters (laid out as the CUDA struct), its source, compiled by
//! NVRTC once a process, and loading it into a context.

use std::panic::catch_unwind;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, DeviceRepr};

use super::driver::{library_present, NVRTC_NAMES};
use crate::batch::format::OutputSettings;
use crate::batch::normalize::{Dtype, Layout};
use crate::error::panic_message;

/// Threads per block of the normalize kernel.
pub(super) const BLOCK: u32 = 256;
/// The kernel loops over pixels, so a bounded grid covers any batch.
pub(super) const MAX_BLOCKS: u64 = 65_535;

/// The normalize kernel's CUDA C source (`kernels/normalize.cu`), compiled once a process
/// by NVRTC ([`kernel_ptx`]).
pub(super) const KERNEL_SRC: &str = include_str!("../kernels/normalize.cu");

/// The kernel's `Params`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct KernelParams {
    pub(super) pixels: u64,
    pub(super) plane: u64,
    pub(super) nchw: u32,
    pub(super) pad: u32,
    pub(super) scale: [f32; 3],
    pub(super) bias: [f32; 3],
}

// SAFETY: `repr(C)` plain numbers with no padding (8 + 8 + 4 + 4 + 12 + 12 = 48 bytes, checked
// by a test), laid out exactly as the kernel's `struct Params`.
unsafe impl DeviceRepr for KernelParams {}

impl KernelParams {
    /// The same `scale` and `bias` as the host's `Normalizer`.
    pub(super) fn new(output: &OutputSettings) -> Self {
        KernelParams {
            pixels: 0,
            plane: u64::from(output.height) * u64::from(output.width),
            nchw: u32::from(output.layout == Layout::Nchw),
            pad: 0,
            scale: std::array::from_fn(|c| 1.0 / (255.0 * output.std[c])),
            bias: std::array::from_fn(|c| -output.mean[c] / output.std[c]),
        }
    }
}

pub(super) fn kernel_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "imagefeed_u8_to_f32",
        Dtype::F16 => "imagefeed_u8_to_f16",
        Dtype::Bf16 => "imagefeed_u8_to_bf16",
        Dtype::U8 => "imagefeed_u8_to_u8",
    }
}

/// The kernel's PTX, compiled once per process (NVRTC takes a fraction of a second).
pub(super) fn kernel_ptx() -> Result<String, String> {
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

pub(super) fn load_kernel(ctx: &Arc<CudaContext>, dtype: Dtype) -> Result<CudaFunction, String> {
    let ptx = kernel_ptx()?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(|e| format!("the driver cannot load the normalize kernel: {e}"))?;
    module
        .load_function(kernel_name(dtype))
        .map_err(|e| format!("the normalize kernel has no {}: {e}", kernel_name(dtype)))
}
