//! Whether libcuda and libnvrtc load, opening a device's context, and the errors of driver calls (a
//! panic in cudarc becomes an error naming the device).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::error::{panic_message, Error};

/// The message for a machine without libcuda.
pub(super) fn no_driver(ordinal: usize) -> Error {
    Error::device(format!(
        "CUDA device {ordinal}: the NVIDIA driver library was not found (looked for libcuda.so \
         and libcuda.so.1 through the dynamic loader: LD_LIBRARY_PATH, then the ldconfig cache); \
         install the NVIDIA driver, use Device::Host, or allow fallback_to_host(true)"
    ))
}

/// The names libcuda goes by.
pub(super) const CUDA_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];
/// The names libnvrtc goes by, newest first (cudarc looks for the version it was built for).
pub(super) const NVRTC_NAMES: [&str; 6] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
    "libnvrtc.so.11.0",
];

/// Whether a library can be loaded under one of `names` (already loaded, as when cudarc links
/// it, counts).
pub(super) fn library_present(names: &[&str]) -> bool {
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

pub(super) fn drv(
    what: &str,
    ordinal: usize,
) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::device(format!("CUDA device {ordinal}: {what}: {e}"))
}

/// Runs `f` (driver calls) and turns a cudarc panic into a device error.
pub(super) fn guarded<T>(ordinal: usize, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::device(format!(
            "CUDA device {ordinal}: cudarc panicked: {}",
            panic_message(&*p)
        )))
    })
}

/// Checks the driver and the ordinal, then creates the context.
pub(super) fn context(ordinal: usize) -> Result<Arc<CudaContext>, Error> {
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
