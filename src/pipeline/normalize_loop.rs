//! The normalize thread (`imagefeed-normalize`) of a host loader whose dtype is not `u8`.
//!
//! Batches wait in the prefetch queue as `u8`, a quarter of an `f32` batch's bytes. This thread
//! takes the next one, normalizes it into a batch of the output dtype, and waits to hand it
//! over: the consumer finds its next batch ready (normalized one batch ahead, as a GPU loader
//! normalizes on the device), while only that batch and the consumer's own exist in the output
//! dtype. On a 160×160 batch of 64, the queue then holds 4.9 MB a batch instead of 19.7 MB.
//!
//! When more `u8` batches wait than the one being normalized, the thread has fallen behind
//! (the decoders are reading a cache) and writes on the loader's normalize pool.

use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::Epoch;
use crate::batch::{Batch, BatchFormat, BatchStorage, Normalizer};
use crate::error::Error;
use crate::prefetch::BatchParts;
use crate::stats::add;

/// What the normalize thread needs: the output format, the arithmetic, and where its output
/// buffers come from and return to.
pub(crate) struct NormalizeJob {
    pub(crate) format: BatchFormat,
    pub(crate) normalizer: Normalizer,
    /// Output batch buffers, returned by `Batch::drop`.
    pub(crate) pool: (Sender<BatchParts>, Receiver<BatchParts>),
    pub(crate) normalize_pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// Normalizes each `u8` batch from `rx` and sends it on `out` (a rendezvous channel: the batch
/// waits here until the consumer asks for it). Errors pass through in order. Returns when `rx`
/// closes (the batcher is done) or the consumer is gone.
pub(super) fn normalize_loop(
    epoch: &Epoch,
    job: &NormalizeJob,
    rx: &Receiver<Result<Batch, Error>>,
    out: &Sender<Result<Batch, Error>>,
) {
    let sample_len = job.format.height * job.format.width * 3;
    for received in rx {
        let mut u8_batch = match received {
            Ok(batch) => batch,
            Err(e) => {
                let _ = out.send(Err(e));
                return;
            }
        };
        let started = Instant::now();
        let mut parts = job.pool.1.try_recv().unwrap_or_else(|_| {
            BatchParts::new(job.format.dtype, job.format.batch_size, sample_len)
        });
        let (epoch_number, position) = (u8_batch.epoch(), u8_batch.position());
        let from = u8_batch.parts_mut();
        let n = from.labels.len();
        std::mem::swap(&mut parts.labels, &mut from.labels);
        std::mem::swap(&mut parts.indices, &mut from.indices);
        std::mem::swap(&mut parts.sources, &mut from.sources);
        std::mem::swap(&mut parts.padded, &mut from.padded);
        std::mem::swap(&mut parts.skipped, &mut from.skipped);
        std::mem::swap(&mut parts.fields, &mut from.fields);
        parts.field_names = from.field_names.clone();
        if let BatchStorage::U8(pixels) = &from.storage {
            write(
                job,
                (pixels, sample_len, n),
                &mut parts.storage,
                !rx.is_empty(),
            );
        } else {
            debug_assert!(false, "the normalize thread receives u8 batches");
        }
        // Back to the batcher's pool.
        drop(u8_batch);
        add(&epoch.stats.batch_write_ns, started.elapsed());
        let batch = Batch::new(
            parts,
            job.format,
            epoch_number,
            position,
            job.pool.0.clone(),
        );
        if out.send(Ok(batch)).is_err() {
            return;
        }
    }
}

/// Writes the `count` samples of `len` bytes in `pixels` into `storage`, on the normalize pool
/// when `behind` and there is one.
fn write(
    job: &NormalizeJob,
    (pixels, len, count): (&[u8], usize, usize),
    storage: &mut BatchStorage,
    behind: bool,
) {
    match &job.normalize_pool {
        Some(pool) if behind && count > 1 => {
            pool.install(|| job.normalizer.write_batch_par(pixels, len, count, storage))
        }
        _ => {
            for (slot, px) in pixels.chunks_exact(len).take(count).enumerate() {
                job.normalizer.write(px, storage, slot);
            }
        }
    }
}
