//! `imagefeed gpu-info` and `imagefeed gpu-copy`.

use crate::{mb, AnyError};

/// `imagefeed gpu-info`.
pub(crate) fn gpu_info() -> Result<(), AnyError> {
    match imagefeed::tools::gpu::info() {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(e) => Err(format!("no usable GPU: {e}").into()),
    }
}

/// `imagefeed gpu-copy`: one line per copy size.
pub(crate) fn gpu_copy(device: usize, shape: &[usize]) -> Result<(), AnyError> {
    let elems: usize = shape.iter().product();
    for (name, bytes) in [("u8", elems), ("f32", elems * 4)] {
        let b = imagefeed::tools::gpu::copy_bandwidth(device, bytes)?;
        println!(
            "h2d {name} batch {shape:?} ({:.1} MB): loader pinned {:.1} GB/s = {:.0}% of a plain pinned copy ({:.1} GB/s); pageable {:.1} GB/s",
            mb(bytes as u64),
            b.loader_pinned,
            100.0 * b.loader_pinned / b.plain_pinned,
            b.plain_pinned,
            b.pageable
        );
    }
    Ok(())
}
