//! The batch stage's settings ([`OutputSettings`]) and the shape of its batches
//! ([`BatchFormat`]): plain data, which the device staging (`prefetch/`) reads too.

use super::normalize::{Dtype, Layout};
use crate::error::Error;

/// The batch stage's settings: the batches' shape, dtype and layout, and the normalization.
#[derive(Debug, Clone)]
pub(crate) struct OutputSettings {
    pub(crate) batch_size: usize,
    pub(crate) height: u32,
    pub(crate) width: u32,
    pub(crate) dtype: Dtype,
    pub(crate) layout: Layout,
    pub(crate) mean: [f32; 3],
    pub(crate) std: [f32; 3],
    pub(crate) drop_remainder: bool,
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            batch_size: 64,
            height: 160,
            width: 160,
            dtype: Dtype::F32,
            layout: Layout::Nhwc,
            mean: [0.0; 3],
            std: [1.0; 3],
            drop_remainder: false,
        }
    }
}

/// The most samples one batch may hold: far beyond any per-process training batch, and
/// small enough that the loader's per-sample bookkeeping (channel slots sized by the batch)
/// stays a few tens of megabytes whatever the memory limit.
pub(crate) const MAX_BATCH_SIZE: usize = 1 << 20;

impl OutputSettings {
    /// Checks the settings alone.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.batch_size == 0 {
            return Err(Error::config("batch_size", "must be at least 1"));
        }
        Error::at_most("batch_size", self.batch_size, MAX_BATCH_SIZE)?;
        if self.height == 0 || self.width == 0 || self.height > 8192 || self.width > 8192 {
            return Err(Error::config(
                "image_size",
                "each side must be 1..=8192 pixels",
            ));
        }
        if self.std.iter().any(|s| !s.is_finite() || *s == 0.0)
            || self.mean.iter().any(|m| !m.is_finite())
        {
            return Err(Error::config(
                "normalize",
                "mean must be finite and std finite and non-zero",
            ));
        }
        self.check_normalized_range()?;
        if self
            .batch_elems()
            .checked_mul(self.dtype.size())
            .is_none_or(|b| b > (1 << 40))
        {
            return Err(Error::config("batch_size", "a batch would exceed 1 TiB"));
        }
        Ok(())
    }

    /// Refuses `mean`/`std` whose normalized pixels (`x / 255 - mean) / std` for `x` in 0..=255,
    /// computed as the pipeline does) are not finite, or do not fit the batch's float type: a
    /// `std` of `1e-45` passes "finite and non-zero" but makes every pixel infinite or NaN.
    fn check_normalized_range(&self) -> Result<(), Error> {
        let max = match self.dtype {
            Dtype::U8 => return Ok(()),
            Dtype::F16 => 65504.0,
            _ => f32::MAX,
        };
        for c in 0..3 {
            let scale = 1.0 / (255.0 * self.std[c]);
            let bias = -self.mean[c] / self.std[c];
            let ends = [bias, 255.0f32.mul_add(scale, bias), 255.0 * scale + bias];
            if !scale.is_finite() || ends.iter().any(|v| !v.is_finite() || v.abs() > max) {
                return Err(Error::config(
                    "normalize",
                    format!(
                        "channel {c}: mean {:?} and std {:?} map pixels outside the finite range of {}",
                        self.mean[c],
                        self.std[c],
                        self.dtype.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The shape and type of the batches.
    pub(crate) fn format(&self) -> BatchFormat {
        BatchFormat {
            batch_size: self.batch_size,
            height: self.height as usize,
            width: self.width as usize,
            dtype: self.dtype,
            layout: self.layout,
        }
    }

    /// Bytes of one `u8` sample.
    pub(crate) fn sample_len(&self) -> usize {
        self.height as usize * self.width as usize * 3
    }

    /// Elements of one batch, saturating (an absurd `batch_size` fails the checks instead of
    /// wrapping around to a small number).
    pub(crate) fn batch_elems(&self) -> usize {
        self.batch_size.saturating_mul(self.sample_len())
    }

    /// The memory of one host batch of `u8` images (waiting to be normalized), its labels and
    /// indices.
    pub(crate) fn u8_batch_bytes(&self) -> u64 {
        (self.batch_elems() as u64).saturating_add((self.batch_size as u64).saturating_mul(4 + 8))
    }

    /// The memory of one host batch: its images in the output dtype, its labels and indices.
    pub(crate) fn batch_bytes(&self) -> u64 {
        (self.batch_elems() as u64)
            .saturating_mul(self.dtype.size() as u64)
            .saturating_add((self.batch_size as u64).saturating_mul(4 + 8))
    }
}

/// The shape and type of the batches of a loader.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchFormat {
    pub(crate) batch_size: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) dtype: Dtype,
    pub(crate) layout: Layout,
}
