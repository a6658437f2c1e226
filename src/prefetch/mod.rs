//! The last stage: where finished batches are staged for the consumer.
//!
//! [`Staging::Host`] hands batches over in ordinary host memory through the prefetch queue.
//! With the `cuda` feature, [`Device::Cuda`] stages them in pinned host memory and copies them
//! to the GPU asynchronously (see `cuda.rs`); without it, asking for a GPU is
//! [`ErrorKind::FeatureDisabled`](crate::ErrorKind::FeatureDisabled), or a logged fallback to
//! the host with `fallback_to_host(true)`.

use crate::builder::{Config, Device};
use crate::error::Error;

/// How batches reach the consumer.
#[derive(Debug, Clone)]
pub(crate) enum Staging {
    Host,
}

impl Staging {
    pub(crate) fn open(cfg: &Config) -> Result<Staging, Error> {
        match cfg.device {
            Device::Host => Ok(Staging::Host),
            Device::Cuda(n) => match open_cuda(n) {
                Ok(s) => Ok(s),
                Err(e) if cfg.fallback_to_host => {
                    log::warn!("CUDA device {n} unavailable ({e}); staging batches in host memory");
                    Ok(Staging::Host)
                }
                Err(e) => Err(e),
            },
        }
    }

    /// The device batches are delivered to.
    pub(crate) fn device(&self) -> Device {
        match self {
            Staging::Host => Device::Host,
        }
    }
}

fn open_cuda(_ordinal: usize) -> Result<Staging, Error> {
    Err(Error::feature_disabled("cuda"))
}
