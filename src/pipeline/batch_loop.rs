//! The batcher thread's loop: takes samples from the hand-off in plan order, applies the error
//! policy and writes them into batches (`Sink`), which go to the prefetch queue.
//!
//! ## Slots, padding and positions
//!
//! Each plan position gives the epoch's batches one *slot* — its sample, or under sharding a
//! stand-in for a sample that failed — except that a failed sample of an unsharded loader
//! gives none (it is skipped). A stand-in is a copy of the next sample of this run that loads,
//! or, when none follows, of the last one before it, flagged in [`Batch::padded`] like the
//! plan's own padding repeats. Because every position of a sharded rank is one slot, its
//! batches cover `batch_size` positions each, and the positions of all ranks stay equal step
//! by step, failures or not (`pipeline/plan.rs` relies on it).
//!
//! A batch records the position after its last slot; the run's last batch records the end of
//! the epoch ([`super::plan::end_position`]) and carries the skips after its last slot. Where
//! every position is a slot (sharded, or under [`OnError::Fail`]) the positions left say
//! whether a batch is the last. An unsharded loader that skips cannot know that before the
//! samples after it are loaded, so it holds a full batch until the next slot arrives (or,
//! with `drop_remainder`, until the next batch fills) or the plan ends: one batch buffer more
//! in the second case, which the memory budget counts.
//!
//! [`Batch::padded`]: crate::Batch::padded

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
use crate::fields::SampleFields;
use crate::prefetch::BatchParts;
use crate::stats::add;

/// A skipped sample: its path and the reason.
type Skip = (PathBuf, String);

pub(super) struct Sink<'a> {
    epoch: &'a Epoch,
    job: &'a BatchJob,
    batcher: Batcher,
    format: BatchFormat,
    pool: (Sender<BatchParts>, Receiver<BatchParts>),
    out: &'a Sender<Result<Batch, Error>>,
    /// A full batch not sent yet, and the position it records.
    held: Option<(BatchParts, u64)>,
    /// Skips since the last slot (they go with the batch of the next slot).
    skips: Vec<Skip>,
    /// Skips of the batch being filled.
    batch_skips: Vec<Skip>,
}

impl Sink<'_> {
    /// Writes one slot: the sample at run position `k` (`padded`: a padding copy). `false`:
    /// the consumer is gone.
    fn slot(
        &mut self,
        pixels: Vec<u8>,
        (index, label): (u32, u32),
        fields: &SampleFields,
        padded: bool,
        k: usize,
    ) -> bool {
        // Without `drop_remainder` a held batch is not the epoch's last once a slot follows.
        if !self.job.output.drop_remainder {
            if let Some((parts, position)) = self.held.take() {
                if !self.send(parts, position) {
                    return false;
                }
            }
        }
        self.batch_skips.append(&mut self.skips);
        // A mixture's index: its source's number and its index there.
        let source_index = self.epoch.source.split_index(u64::from(index));
        let full = self.timed(|batcher, fresh, recycle| {
            batcher.add(
                pixels,
                (label, source_index, padded),
                fields,
                fresh,
                recycle,
            )
        });
        let Some(mut parts) = full else {
            return true;
        };
        parts.skipped = std::mem::take(&mut self.batch_skips);
        let position = (self.job.offset + k + 1) as u64;
        if self.job.exact_slots {
            // Every position left is a slot: whether another batch follows is known now.
            let left = self.epoch.plan.len() - (k + 1);
            let last = if self.job.output.drop_remainder {
                left < self.format.batch_size
            } else {
                left == 0
            };
            if last {
                // Held until the plan ends: it carries the skips of the positions after it.
                self.held = Some((parts, self.job.end_position));
                return true;
            }
            return self.send(parts, position);
        }
        // With `drop_remainder`, a held batch is not the last once another fills.
        if let Some((held, at)) = self.held.take() {
            if !self.send(held, at) {
                return false;
            }
        }
        self.held = Some((parts, position));
        true
    }

    /// Writes a copy of `pixels` (sample `id`: index and label; its `fields`) as the slot of
    /// run position `k`.
    fn copy(&mut self, pixels: &[u8], id: (u32, u32), fields: &SampleFields, k: usize) -> bool {
        let mut copy = self.job.samples.1.try_recv().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(pixels);
        self.slot(copy, id, fields, true, k)
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

    /// Sends a batch recording `position` (queueing its copy to a device first). `false`:
    /// stop, the consumer is gone or has been sent an error.
    fn send(&mut self, parts: BatchParts, position: u64) -> bool {
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
            position,
            self.pool.0.clone(),
        );
        let waited = Instant::now();
        // Autotune may allow fewer ready batches than the queue holds. (Without it the
        // queue's own bound applies: `send` blocks.)
        let window = &self.epoch.window;
        // Deferring the normalization, the normalize thread's batch is one of them.
        let ready = |prefetch: usize| (prefetch - usize::from(self.job.deferred)).max(1);
        while self.job.autotune && self.out.len() >= ready(window.prefetch.load(Ordering::Relaxed))
        {
            if window.is_cancelled() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ok = self.out.send(Ok(batch)).is_ok();
        add(&self.epoch.stats.batcher_wait_ns, waited.elapsed());
        ok
    }

    /// The end of the run: the partial batch (unless dropped) and the held one go out, the
    /// last of them recording the epoch's end and carrying the skips after its last slot.
    fn finish(&mut self) -> bool {
        let end = self.job.end_position;
        let partial = if self.job.output.drop_remainder {
            // The dropped samples' skips still belong to the epoch's last batch.
            let mut dropped = self.timed(|batcher, fresh, recycle| batcher.finish(fresh, recycle));
            if let Some(parts) = dropped.take() {
                let _ = self.pool.0.try_send(parts);
            }
            self.skips.splice(0..0, self.batch_skips.drain(..));
            None
        } else {
            self.timed(|batcher, fresh, recycle| batcher.finish(fresh, recycle))
        };
        let mut trailing = std::mem::take(&mut self.skips);
        match (self.held.take(), partial) {
            (held, Some(mut parts)) => {
                if let Some((h, position)) = held {
                    if !self.send(h, position) {
                        return false;
                    }
                }
                parts.skipped = std::mem::take(&mut self.batch_skips);
                parts.skipped.append(&mut trailing);
                self.send(parts, end)
            }
            (Some((mut h, _)), None) => {
                h.skipped.append(&mut trailing);
                self.send(h, end)
            }
            (None, None) => {
                // No batch is left to carry them: the run is over, so they count now.
                for (path, reason) in trailing {
                    self.epoch.stats.record_skip(path, reason);
                }
                true
            }
        }
    }

    /// Sends the held batch (not the epoch's last), then the error; the skips the batcher saw
    /// since count now, since the epoch ends here.
    fn fail(&mut self, e: Error) {
        for (path, reason) in self.batch_skips.drain(..).chain(self.skips.drain(..)) {
            self.epoch.stats.record_skip(path, reason);
        }
        if let Some((parts, position)) = self.held.take() {
            if !self.send(parts, position) {
                return;
            }
        }
        let _ = self.out.send(Err(e));
    }
}

pub(super) fn batch_loop(
    epoch: &Epoch,
    job: &BatchJob,
    rx: &HandoffReceiver,
    out: &Sender<Result<Batch, Error>>,
) {
    let format = job.batch_format();
    let mut sink = Sink {
        epoch,
        job,
        batcher: Batcher::new(
            format,
            Normalizer::new(job.output.mean, job.output.std, format.layout),
            job.normalize_pool.clone(),
            job.writes_through(),
        )
        .with_fields(epoch.fields.names().map(str::to_string).collect()),
        format,
        // Room for every batch in circulation (queue, consumer, batcher), so a returned batch
        // is never freed and a new one never allocated in steady state.
        pool: job.batch_pool.clone(),
        out,
        held: None,
        skips: Vec::new(),
        batch_skips: Vec::new(),
    };
    let result = catch_unwind(AssertUnwindSafe(|| {
        batch_loop_inner(epoch, job, rx, &mut sink)
    }))
    .unwrap_or_else(|p| Err(Error::worker_panicked("batch", None, &*p)));
    if let Err(e) = result {
        epoch.window.cancel();
        sink.fail(e);
    }
    epoch.window.cancel();
}

/// What the batcher knows of the run's samples so far: under sharding, the positions waiting
/// for a stand-in and the last sample that loaded.
struct Stand {
    owed: Vec<usize>,
    /// Its pixels, index and label, and fields.
    last_good: Option<(Vec<u8>, (u32, u32), SampleFields)>,
}

pub(super) fn batch_loop_inner(
    epoch: &Epoch,
    job: &BatchJob,
    rx: &HandoffReceiver,
    sink: &mut Sink<'_>,
) -> Result<(), Error> {
    // Sharded epochs keep every rank's positions in step: a failed sample's position is filled
    // by a stand-in (see the module doc).
    let keep_size = job.sharded;
    let mut stand = Stand {
        owed: Vec::new(),
        last_good: None,
    };
    let total = epoch.plan.len();
    let mut burst = Vec::with_capacity(epoch.window.size);
    let mut next = 0usize;
    let mut skipped = 0u64;
    let mut last_error = None;
    while next < total {
        if !rx.take(&mut burst) {
            return Ok(()); // cancelled: the decoders are gone
        }
        // More ready than a burst or two: the decode threads are ahead (reading a cache, or
        // waiting for a slow consumer) and have cores to spare for the normalize pool.
        sink.batcher.set_parallel(burst.len() > 2 * rx.burst());
        // Released one by one as they are processed, as the window's memory bound assumes.
        for msg in burst.drain(..) {
            let k = msg.seq;
            next += 1;
            epoch.window.release(next);
            match msg.result {
                Ok(pixels) => {
                    let id = (msg.index, msg.label);
                    if keep_size {
                        for owed in std::mem::take(&mut stand.owed) {
                            if !sink.copy(&pixels, id, &msg.fields, owed) {
                                return Ok(());
                            }
                        }
                        remember(&mut stand.last_good, &pixels, id, &msg.fields);
                    }
                    if !sink.slot(pixels, id, &msg.fields, epoch.plan.is_padding(k), k) {
                        return Ok(());
                    }
                }
                Err(e) => match job.on_error {
                    OnError::Skip { max } if e.is_data_error() => {
                        skipped += 1;
                        let path = e.path().map(PathBuf::from).unwrap_or_default();
                        log::warn!("skipping sample {}: {e}", msg.index);
                        sink.skips.push((path, e.to_string()));
                        if skipped > max {
                            return Err(Error::new(ErrorKind::TooManyFailures {
                                skipped,
                                last: e,
                            }));
                        }
                        if keep_size {
                            // Its stand-in is the next sample that loads (or, if none does,
                            // the last one that did).
                            stand.owed.push(k);
                        }
                        last_error = Some(e);
                    }
                    _ => return Err(epoch.source.with_list_line(e, msg.index)),
                },
            }
        }
    }
    if !stand.owed.is_empty() {
        // No sample loads after these: copies of the last one that did.
        let Some((px, id, fields)) = stand.last_good.take() else {
            let last = last_error.unwrap_or_else(|| Error::config("shard", "no sample"));
            return Err(Error::new(ErrorKind::TooManyFailures {
                skipped,
                last: Error::config(
                    "shard",
                    format!(
                        "no sample of this rank's share of the epoch loaded, so none can stand in for the {} skipped ones to keep the ranks' batch counts equal (last: {last})",
                        stand.owed.len()
                    ),
                ),
            }));
        };
        for owed in std::mem::take(&mut stand.owed) {
            if !sink.copy(&px, id, &fields, owed) {
                return Ok(());
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

fn remember(
    slot: &mut Option<(Vec<u8>, (u32, u32), SampleFields)>,
    pixels: &[u8],
    id: (u32, u32),
    fields: &SampleFields,
) {
    let (buf, i, f) = slot.get_or_insert_with(|| {
        (
            Vec::with_capacity(pixels.len()),
            (0, 0),
            SampleFields::default(),
        )
    });
    buf.clear();
    buf.extend_from_slice(pixels);
    *i = id;
    f.clone_from(fields);
}
