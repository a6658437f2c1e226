//! Helpers behind the `imagefeed` binary's `gpu-info`, `bench --device cuda` and `gpu-check`
//! commands, and the GPU tests. Not part of the stable API. Every function exists with and
//! without the `cuda` feature; without it they report
//! [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled) (or do nothing).

use std::time::Duration;

use crate::batch::Batch;
use crate::error::Error;

/// What the loader sees of the GPUs: the driver, each device with its free and total memory,
/// whether pinned allocation works, and whether NVRTC compiles the normalize kernel.
///
/// # Errors
/// `FeatureDisabled` without the `cuda` feature; `Device` without a driver or a GPU.
pub fn info() -> Result<String, Error> {
    #[cfg(feature = "cuda")]
    {
        crate::prefetch::cuda::info()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(Error::feature_disabled("cuda"))
    }
}

/// Blocks until a device batch is in GPU memory and returns how long that took (zero for a
/// host batch).
///
/// # Errors
/// `Device` if the batch's copy or normalization failed.
pub fn wait_ready(batch: &Batch) -> Result<Duration, Error> {
    #[cfg(feature = "cuda")]
    if let Some(gpu) = batch.cuda() {
        let t = std::time::Instant::now();
        gpu.synchronize()?;
        return Ok(t.elapsed());
    }
    let _ = batch;
    Ok(Duration::ZERO)
}

/// The images of a batch as `f32` values, from GPU memory for a device batch (copied back
/// into a `Vec`), else from host memory. Every dtype converts to `f32` exactly.
///
/// # Errors
/// `Device` if the copy back fails.
pub fn images_f32(batch: &Batch) -> Result<Vec<f32>, Error> {
    #[cfg(feature = "cuda")]
    if let Some(gpu) = batch.cuda() {
        return crate::prefetch::cuda::download_f32(&gpu);
    }
    Ok(match batch.images() {
        crate::Images::F32(v) => v.to_vec(),
        crate::Images::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
        crate::Images::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
        crate::Images::U8(v) => v.iter().map(|&x| f32::from(x)).collect(),
    })
}

/// Host-to-device copy bandwidth for one copy size, in GB/s (10^9 bytes a second).
#[derive(Debug, Clone, Copy)]
pub struct CopyBandwidth {
    /// The size of each copy.
    pub bytes: usize,
    /// The loader's path: write-combined pinned memory, asynchronous copies on a dedicated
    /// stream.
    pub loader_pinned: f64,
    /// The reference: ordinary pinned memory and a plain synchronous copy (`cuMemcpyHtoD`).
    pub plain_pinned: f64,
    /// Pageable memory (a `Vec`).
    pub pageable: f64,
}

/// Measures host-to-device bandwidth for `bytes`-sized copies on device `ordinal` (about
/// 2 GB copied per path).
///
/// # Errors
/// `FeatureDisabled` without the `cuda` feature; `Device` without a driver or a GPU.
pub fn copy_bandwidth(ordinal: usize, bytes: usize) -> Result<CopyBandwidth, Error> {
    #[cfg(feature = "cuda")]
    {
        let b = crate::prefetch::cuda::copy_bandwidth(ordinal, bytes)?;
        Ok(CopyBandwidth {
            bytes: b.bytes,
            loader_pinned: b.loader_pinned,
            plain_pinned: b.plain_pinned,
            pageable: b.pageable,
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (ordinal, bytes);
        Err(Error::feature_disabled("cuda"))
    }
}
