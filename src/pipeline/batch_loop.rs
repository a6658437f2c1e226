//! The batcher thread's loop: takes samples from the hand-off in plan order, applies the error
//! policy, passes them through the shuffle buffer and writes them into batches (`Sink`), which
//! go to the prefetch queue.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::handoff::HandoffReceiver;
use super::{BatchJob, Epoch};
use crate::batch::BatchFormat;
use crate::batch::Normalizer;
use crate::batch::{Batch, Batcher};
use crate::error::{Error, ErrorKind, OnError};
use crate::prefetch::BatchParts;
use crate::rng::{self, Rng};
use crate::shuffle::ShuffleBuffer;
use crate::stats::add;

pub(super) struct Sink<'a> {
    epoch: &'a Epoch,
    job: &'a BatchJob,
    batcher: Batcher,
    format: BatchFormat,
    pool: (Sender<BatchParts>, Receiver<BatchParts>),
    out: &'a Sender<Result<Batch, Error>>,
    /// Plan position (counting resumed ones) after the last sample written.
    position: u64,
}

impl Sink<'_> {
    /// Adds a sample to the current batch; sends the batch when full. `false`: the consumer
    /// is gone.
    fn emit(&mut self, pixels: Vec<u8>, index: u32) -> bool {
        match self.write(pixels, index) {
            Some(parts) => self.send(parts),
            None => true,
        }
    }

    /// A batch buffer from the pool, or a new one; for a device, with a slot of its ring
    /// (waiting for one).
    fn fresh_parts(
        epoch: &Epoch,
        job: &BatchJob,
        format: BatchFormat,
        pool: &Receiver<BatchParts>,
    ) -> BatchParts {
        let cancelled = || epoch.window.is_cancelled();
        job.staging
            .fresh_parts(format, pool, &cancelled, &epoch.stats)
    }

    fn write(&mut self, pixels: Vec<u8>, index: u32) -> Option<BatchParts> {
        let label = self.epoch.source.index.label(index as usize);
        self.timed(|batcher, fresh, recycle| {
            batcher.add(pixels, label, u64::from(index), fresh, recycle)
        })
    }

    /// Runs one batcher step (adding a sample, or flushing the last batch) with a source of
    /// fresh batch buffers and a pool for spent sample buffers, and counts its time as batch
    /// writing.
    fn timed(
        &mut self,
        step: impl FnOnce(
            &mut Batcher,
            &mut dyn FnMut() -> BatchParts,
            &mut dyn FnMut(Vec<u8>),
        ) -> Option<BatchParts>,
    ) -> Option<BatchParts> {
        let (format, pool_rx, samples) = (self.format, &self.pool.1, &self.job.samples.0);
        let (epoch, job) = (self.epoch, self.job);
        let started = Instant::now();
        // A full batch's time waiting for a buffer (or a device slot) is not writing time.
        let mut waited = std::time::Duration::ZERO;
        let full = step(
            &mut self.batcher,
            &mut || {
                let asked = Instant::now();
                let parts = Self::fresh_parts(epoch, job, format, pool_rx);
                waited = asked.elapsed();
                parts
            },
            &mut |px| {
                let _ = samples.try_send(px);
            },
        );
        add(
            &epoch.stats.batch_write_ns,
            started.elapsed().saturating_sub(waited),
        );
        full
    }

    /// Writes a copy of a sample in place of a skipped one (sharded epochs keep their size).
    fn pad(&mut self, pixels: &[u8], index: u32) -> bool {
        self.epoch
            .stats
            .padded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut copy = self.job.samples.1.try_recv().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(pixels);
        self.emit(copy, index)
    }

    /// Sends a full batch (queueing its copy to a device first). `false`: stop, the consumer
    /// is gone or has been sent an error.
    fn send(&mut self, parts: BatchParts) -> bool {
        let parts = match self.job.staging.submit(parts, &self.epoch.stats) {
            Ok(parts) => parts,
            Err(e) => {
                let _ = self.out.send(Err(e));
                return false;
            }
        };
        let batch = Batch::new(
            parts,
            self.format,
            self.epoch.number,
            self.position,
            self.pool.0.clone(),
        );
        let waited = Instant::now();
        // Autotune may allow fewer ready batches than the queue holds. (Without it the
        // queue's own bound applies: `send` blocks.)
        let window = &self.epoch.window;
        while self.job.autotune && self.out.len() >= window.prefetch.load(Ordering::Relaxed) {
            if window.is_cancelled() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ok = self.out.send(Ok(batch)).is_ok();
        add(&self.epoch.stats.batcher_wait_ns, waited.elapsed());
        ok
    }

    fn finish(&mut self) -> bool {
        if self.job.output.drop_remainder {
            return true;
        }
        match self.timed(|batcher, fresh, recycle| batcher.finish(fresh, recycle)) {
            Some(parts) => self.send(parts),
            None => true,
        }
    }
}

pub(super) fn remember(slot: &mut Option<(Vec<u8>, u32)>, pixels: &[u8], index: u32) {
    let (buf, i) = slot.get_or_insert_with(|| (Vec::with_capacity(pixels.len()), 0));
    buf.clear();
    buf.extend_from_slice(pixels);
    *i = index;
}

/// Writes one shuffle-buffer output (a sample, or a failed sample's placeholder: nothing) and
/// remembers it for sharded padding. `false`: the consumer is gone.
pub(super) fn emit_output(
    sink: &mut Sink<'_>,
    out: Option<(Vec<u8>, u32)>,
    keep_size: bool,
    last_good: &mut Option<(Vec<u8>, u32)>,
) -> bool {
    let Some((px, idx)) = out else {
        return true;
    };
    if keep_size {
        remember(last_good, &px, idx);
    }
    sink.emit(px, idx)
}

pub(super) fn batch_loop(
    epoch: &Epoch,
    job: &BatchJob,
    rx: &HandoffReceiver,
    out: &Sender<Result<Batch, Error>>,
) {
    let stop = |e: Error| {
        epoch.window.cancel();
        let _ = out.send(Err(e));
    };
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| batch_loop_inner(epoch, job, rx, out)))
        .unwrap_or_else(|p| Err(Error::worker_panicked("batch", None, &*p)))
    {
        stop(e);
    }
    epoch.window.cancel();
}

pub(super) fn batch_loop_inner(
    epoch: &Epoch,
    job: &BatchJob,
    rx: &HandoffReceiver,
    out: &Sender<Result<Batch, Error>>,
) -> Result<(), Error> {
    let format = job.output.format();
    let mut sink = Sink {
        epoch,
        job,
        batcher: Batcher::new(
            format,
            Normalizer::new(job.output.mean, job.output.std, job.output.layout),
            job.normalize_pool.clone(),
        ),
        format,
        // Room for every batch in circulation (queue, consumer, batcher), so a returned batch
        // is never freed and a new one never allocated in steady state.
        pool: job.batch_pool.clone(),
        out,
        position: job.offset as u64,
    };
    // Sharded epochs must keep every rank's batch count equal, so a skipped sample is replaced
    // by a copy of the next (or, at the end, the last) good one; labels stay with their images.
    let keep_size = job.sharded;
    let mut owed_padding = 0u64;
    let mut last_good: Option<(Vec<u8>, u32)> = None;
    let total = epoch.plan.len();
    let mut burst = Vec::with_capacity(epoch.window.size);
    let mut next = 0usize;
    // Samples, or placeholders for failed ones: the buffer's choices then depend on the plan
    // alone, so a resumed epoch can replay them (`replay_buffer`).
    let buffered = job.shuffle.sample_buffer() > 0;
    let rng = job
        .buffer_rng
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| Rng::for_stage(job.seed, epoch.number, rng::STAGE_SHUFFLE_BUFFER));
    let mut shuffle: ShuffleBuffer<Option<(Vec<u8>, u32)>> =
        ShuffleBuffer::new(job.shuffle.sample_buffer(), rng);
    // Buffer outputs so far, placeholders included (the resumable position when buffered).
    let mut outputs = job.offset as u64;
    let mut skipped = 0u64;
    while next < total {
        if !rx.take(&mut burst) {
            return Ok(()); // cancelled: the decoders are gone
        }
        // More ready than a burst or two: the decode threads are ahead (reading a cache, or
        // waiting for a slow consumer) and have cores to spare for the normalize pool.
        sink.batcher.set_parallel(burst.len() > 2 * rx.burst());
        // Released one by one as they are processed, as the window's memory bound assumes.
        for msg in burst.drain(..) {
            next += 1;
            epoch.window.release(next);
            match msg.result {
                Ok(pixels) => {
                    if keep_size {
                        while owed_padding > 0 {
                            owed_padding -= 1;
                            if !sink.pad(&pixels, msg.index) {
                                return Ok(());
                            }
                        }
                    }
                    if let Some(out) = shuffle.push(Some((pixels, msg.index))) {
                        outputs += 1;
                        sink.position = if buffered {
                            outputs
                        } else {
                            (job.offset + next) as u64
                        };
                        if !emit_output(&mut sink, out, keep_size, &mut last_good) {
                            return Ok(());
                        }
                    }
                }
                Err(e) => match job.on_error {
                    OnError::Skip { max } if e.is_data_error() => {
                        skipped += 1;
                        let path = e.path().map(PathBuf::from).unwrap_or_default();
                        log::warn!("skipping sample {}: {e}", msg.index);
                        epoch.stats.record_skip(path, e.to_string());
                        owed_padding += 1;
                        if buffered {
                            if let Some(out) = shuffle.push(None) {
                                outputs += 1;
                                sink.position = outputs;
                                if !emit_output(&mut sink, out, keep_size, &mut last_good) {
                                    return Ok(());
                                }
                            }
                        }
                        if skipped > max {
                            return Err(Error::new(ErrorKind::TooManyFailures {
                                skipped,
                                last: e,
                            }));
                        }
                    }
                    _ => return Err(e),
                },
            }
        }
    }
    sink.position = (job.offset + total) as u64;
    while let Some(out) = shuffle.drain_one() {
        outputs += 1;
        if buffered {
            sink.position = outputs;
        }
        if !emit_output(&mut sink, out, keep_size, &mut last_good) {
            return Ok(());
        }
    }
    if keep_size && owed_padding > 0 {
        if let Some((px, idx)) = last_good.take() {
            for _ in 0..owed_padding {
                if !sink.pad(&px, idx) {
                    return Ok(());
                }
            }
        }
    }
    if !sink.finish() {
        return Ok(());
    }
    if let Some(cache) = &job.cache {
        cache.end_epoch(&epoch.cache_mode)?;
    }
    Ok(())
}
