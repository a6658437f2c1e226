//! The batcher's pure core: collects one batch's `u8` samples, then writes them, normalized,
//! into a batch buffer.

use super::BatchFormat;
use super::Normalizer;
use crate::prefetch::{BatchParts, Staged};

/// Pure core of the batching stage: collects one batch's `u8` samples, then writes them,
/// normalized, into a batch buffer — on the loader's normalize pool when it has one and the
/// batcher has fallen behind the decode threads (a cached epoch), so that the output
/// bandwidth (307 kB an image in f32) is not one thread's. While decoding keeps every core
/// busy, the batcher writes alone: waking the pool then only takes cores from the decoders.
pub(crate) struct Batcher {
    format: BatchFormat,
    normalizer: Normalizer,
    pending: Vec<Vec<u8>>,
    labels: Vec<u32>,
    indices: Vec<u64>,
    padded: Vec<bool>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// Whether the next full batch is written on the pool.
    parallel: bool,
}

impl Batcher {
    pub(crate) fn new(
        format: BatchFormat,
        normalizer: Normalizer,
        pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    ) -> Self {
        Batcher {
            format,
            normalizer,
            pending: Vec::with_capacity(format.batch_size),
            labels: Vec::with_capacity(format.batch_size),
            indices: Vec::with_capacity(format.batch_size),
            padded: Vec::with_capacity(format.batch_size),
            pool,
            parallel: true,
        }
    }

    /// Sets whether batches are written on the normalize pool (if the loader has one): yes
    /// when the batcher is the bottleneck, no when decode threads keep the cores busy.
    pub(crate) fn set_parallel(&mut self, parallel: bool) {
        self.parallel = parallel;
    }

    /// Adds a sample (`padded`: a padding copy). When the batch is full, writes it into a
    /// buffer from `fresh`, hands the sample buffers back through `recycle` and returns the
    /// batch.
    pub(crate) fn add(
        &mut self,
        pixels: Vec<u8>,
        (label, index, padded): (u32, u64, bool),
        fresh: impl FnOnce() -> BatchParts,
        recycle: impl FnMut(Vec<u8>),
    ) -> Option<BatchParts> {
        self.pending.push(pixels);
        self.labels.push(label);
        self.indices.push(index);
        self.padded.push(padded);
        (self.pending.len() == self.format.batch_size).then(|| self.flush(fresh, recycle))
    }

    /// The partial batch at the end of an epoch, if any.
    pub(crate) fn finish(
        &mut self,
        fresh: impl FnOnce() -> BatchParts,
        recycle: impl FnMut(Vec<u8>),
    ) -> Option<BatchParts> {
        (!self.pending.is_empty()).then(|| self.flush(fresh, recycle))
    }

    fn flush(
        &mut self,
        fresh: impl FnOnce() -> BatchParts,
        mut recycle: impl FnMut(Vec<u8>),
    ) -> BatchParts {
        let mut parts = fresh();
        parts.labels.clear();
        parts.labels.extend_from_slice(&self.labels);
        parts.indices.clear();
        parts.indices.extend_from_slice(&self.indices);
        parts.padded.clear();
        parts.padded.extend_from_slice(&self.padded);
        parts.skipped.clear();
        let norm = &self.normalizer;
        let samples = &self.pending;
        // A device that normalizes takes the u8 samples, copied into its (pinned) buffer.
        let device_u8 = parts.staged.as_mut().and_then(Staged::u8_buffer);
        let on_device = device_u8.is_some();
        if let Some(buf) = device_u8 {
            let len = self.format.height * self.format.width * 3;
            for (px, dst) in samples.iter().zip(buf.chunks_exact_mut(len)) {
                dst.copy_from_slice(px);
            }
        }
        match &self.pool {
            _ if on_device => {}
            // A u8 NHWC batch is a plain copy: one thread does it at memory speed.
            Some(pool) if self.parallel && samples.len() > 1 && !norm.is_copy(&parts.storage) => {
                pool.install(|| norm.write_all_par(samples, &mut parts.storage))
            }
            _ => {
                for (slot, px) in samples.iter().enumerate() {
                    norm.write(px, &mut parts.storage, slot);
                }
            }
        }
        for px in self.pending.drain(..) {
            recycle(px);
        }
        self.labels.clear();
        self.indices.clear();
        self.padded.clear();
        parts
    }
}
