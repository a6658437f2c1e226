//! The batcher's pure core: collects one batch's `u8` samples, then writes them, normalized,
//! into a batch buffer.

use std::sync::Arc;

use super::BatchFormat;
use super::Normalizer;
use crate::fields::{FieldStore, SampleFields};
use crate::prefetch::{BatchParts, Staged};

/// Pure core of the batching stage: collects one batch's `u8` samples, then writes them,
/// normalized, into a batch buffer — on the loader's normalize pool when it has one and the
/// batcher has fallen behind the decode threads (a cached epoch), so that the output
/// bandwidth (307 kB an image in f32) is not one thread's. While decoding keeps every core
/// busy, the batcher writes alone: waking the pool then only takes cores from the decoders.
///
/// A batcher that *writes through* (host `u8` NHWC batches: a copy, no device slot) copies
/// each sample into the batch buffer as it arrives and hands its buffer back at once, so a
/// batch's samples are not held twice.
pub(crate) struct Batcher {
    format: BatchFormat,
    normalizer: Normalizer,
    pending: Vec<Vec<u8>>,
    /// Writing through: the batch being filled, and its samples so far.
    through: Option<(Option<BatchParts>, usize)>,
    /// The batch's fields: each field's column, and the fields' names.
    fields: Vec<FieldStore>,
    field_names: Arc<[String]>,
    labels: Vec<u32>,
    indices: Vec<u64>,
    sources: Vec<u32>,
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
        write_through: bool,
    ) -> Self {
        Batcher {
            format,
            normalizer,
            pending: Vec::with_capacity(if write_through { 0 } else { format.batch_size }),
            through: write_through.then_some((None, 0)),
            fields: Vec::new(),
            field_names: Arc::from(Vec::new()),
            labels: Vec::with_capacity(format.batch_size),
            indices: Vec::with_capacity(format.batch_size),
            sources: Vec::with_capacity(format.batch_size),
            padded: Vec::with_capacity(format.batch_size),
            pool,
            parallel: true,
        }
    }

    /// Delivers fields of these names with each batch.
    pub(crate) fn with_fields(mut self, names: Vec<String>) -> Self {
        self.fields = vec![FieldStore::default(); names.len()];
        self.field_names = Arc::from(names);
        self
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
        (label, (source, index), padded): (u32, (u32, u64), bool),
        fields: &SampleFields,
        fresh: impl FnOnce() -> BatchParts,
        mut recycle: impl FnMut(Vec<u8>),
    ) -> Option<BatchParts> {
        self.labels.push(label);
        self.indices.push(index);
        self.sources.push(source);
        self.padded.push(padded);
        for (store, value) in self.fields.iter_mut().zip(&fields.0) {
            store.push(value);
        }
        if let Some((current, written)) = &mut self.through {
            let parts = current.get_or_insert_with(fresh);
            self.normalizer.write(&pixels, &mut parts.storage, *written);
            *written += 1;
            recycle(pixels);
            if *written < self.format.batch_size {
                return None;
            }
            *written = 0;
            let mut parts = current.take()?;
            self.take_meta(&mut parts);
            return Some(parts);
        }
        self.pending.push(pixels);
        (self.pending.len() == self.format.batch_size).then(|| self.flush(fresh, recycle))
    }

    /// The partial batch at the end of an epoch, if any.
    pub(crate) fn finish(
        &mut self,
        fresh: impl FnOnce() -> BatchParts,
        recycle: impl FnMut(Vec<u8>),
    ) -> Option<BatchParts> {
        if let Some((current, written)) = &mut self.through {
            *written = 0;
            let mut parts = current.take()?;
            self.take_meta(&mut parts);
            return Some(parts);
        }
        (!self.pending.is_empty()).then(|| self.flush(fresh, recycle))
    }

    /// Moves the batch's labels, indices, padding flags and fields into `parts`.
    fn take_meta(&mut self, parts: &mut BatchParts) {
        parts.labels.clear();
        parts.labels.append(&mut self.labels);
        parts.indices.clear();
        parts.indices.append(&mut self.indices);
        parts.sources.clear();
        parts.sources.append(&mut self.sources);
        parts.padded.clear();
        parts.padded.append(&mut self.padded);
        parts.skipped.clear();
        // The parts' old columns (cleared) become the next batch's.
        parts
            .fields
            .resize_with(self.fields.len(), FieldStore::default);
        std::mem::swap(&mut parts.fields, &mut self.fields);
        for store in &mut self.fields {
            store.clear();
        }
        parts.field_names = self.field_names.clone();
    }

    fn flush(
        &mut self,
        fresh: impl FnOnce() -> BatchParts,
        mut recycle: impl FnMut(Vec<u8>),
    ) -> BatchParts {
        let mut parts = fresh();
        self.take_meta(&mut parts);
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
        parts
    }
}
