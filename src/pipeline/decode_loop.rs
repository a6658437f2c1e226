//! The decode threads' loop: claim the next plan position from the window (or take the fetch
//! stage's bytes for it), load its sample (a file, fetched bytes or a cache record), decode, resize and orient it into a `u8` buffer,
//! and hand it to the batcher; a panic while loading becomes an error naming the sample.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::fetch::{ByteBudget, Fetched};
use super::handoff::HandoffSender;
use super::{DecodeJob, Epoch, Loaded};
use crate::decode::Decoder;
use crate::decode::Target;
use crate::decode::{base_len, flip_horizontal, Draw, Geometry};
use crate::error::Error;
use crate::stats::add;

/// Where a decode thread gets its work: claims from the window (local files), or fetched
/// bytes from the fetch thread (with the byte budget to release).
pub(super) type FromFetch = Option<(Receiver<Fetched>, Arc<ByteBudget>)>;

/// Decode thread number `thread`: loads samples until the plan is done (waiting while
/// autotune has it inactive).
pub(super) fn decode_loop(
    epoch: &Epoch,
    job: &DecodeJob,
    tx: &HandoffSender,
    from_fetch: FromFetch,
    thread: usize,
) {
    let geom = job.geometry;
    let new_decoder = || {
        let mut decoder = Decoder::new(job.settings.clone());
        decoder.verified = job.verified.clone();
        decoder
    };
    // A decoder (with its grown buffers) from an earlier epoch, so later epochs allocate nothing.
    let mut decoder = job
        .decoders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(new_decoder);
    let mut path = PathBuf::new();
    // A random transform's base image read from or written to the cache.
    let mut base = Vec::new();
    let sample_len = geom.sample_len();
    loop {
        let waited = Instant::now();
        let (seq, index, mut fetched, held) = match &from_fetch {
            None => match epoch.window.claim_as(thread) {
                Some(seq) => (seq, epoch.plan.at(seq), None, 0),
                None => break,
            },
            Some(_) if !epoch.window.wait_active(thread) => break,
            Some((rx, _)) => match rx.recv() {
                Ok(f) => {
                    path = f.name;
                    (f.seq, f.index, f.sample, f.held)
                }
                Err(_) => break, // the fetcher finished or stopped
            },
        };
        add(&epoch.stats.decode_wait_ns, waited.elapsed());
        let mut buf = job
            .samples
            .1
            .try_recv()
            .unwrap_or_else(|_| vec![0u8; sample_len]);
        let busy = Instant::now();
        // The label: a local file's from the index, a fetched sample's from its source, and
        // with neither (an epoch reading a complete cache) the cache record's.
        let mut label = None;
        let mut fields = crate::fields::SampleFields::default();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if from_fetch.is_none() {
                let (l, f) = epoch.source.index.entry_fields_into(
                    index as usize,
                    &mut path,
                    &epoch.fields,
                )?;
                label = Some(l);
                fields = f;
            }
            if job.panic_on_index == Some(u64::from(index)) {
                panic!("injected panic (inject_panic_at_index)");
            }
            let mut load_from = |input, label: &mut Option<u32>| {
                let at = At {
                    path: &path,
                    index,
                    label,
                };
                load(epoch, job, &mut decoder, at, input, &mut buf, &mut base)
            };
            match fetched.take() {
                None if from_fetch.is_none() => load_from(Input::File, &mut label),
                None => load_from(Input::CacheOnly, &mut label),
                Some(Ok(sample)) => {
                    label = Some(sample.label);
                    fields = sample.fields;
                    load_from(Input::Bytes(&sample.bytes), &mut label)
                }
                Some(Err(e)) => Err(e),
            }
        }));
        if let Some((_, budget)) = &from_fetch {
            budget.release(held);
        }
        add(&epoch.stats.decode_busy_ns, busy.elapsed());
        let times = decoder.take_times();
        add(&epoch.stats.read_ns, times.read);
        add(&epoch.stats.decode_ns, times.decode);
        add(&epoch.stats.resize_ns, times.resize);
        let result = match outcome {
            Ok(Ok(())) => Ok(buf),
            Ok(Err(e)) => Err(e),
            Err(payload) => {
                // The decoder's buffers may be mid-update: start afresh.
                decoder = new_decoder();
                Err(Error::worker_panicked(
                    "decode",
                    Some(path.clone()),
                    &*payload,
                ))
            }
        };
        let label = label.unwrap_or(0);
        if !tx.put(Loaded {
            seq,
            index,
            label,
            fields: std::mem::take(&mut fields),
            result,
        }) {
            break; // the batcher stopped: shut down
        }
    }
    job.decoders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(decoder);
}

/// Where a sample's encoded bytes are.
pub(super) enum Input<'a> {
    /// In the local file at the sample's path.
    File,
    /// Fetched.
    Bytes(&'a [u8]),
    /// Not fetched: the epoch reads a complete cache (read the bytes if the record fails and
    /// the cache is rebuilt).
    CacheOnly,
}

/// Loads one sample into `buf`: decoded, or with a cache, from what the cache records (read
/// from a complete cache by `Cache::lookup`, or decoded and recorded in a cache being
/// written). A record holds what every epoch shares: the sample before its flip, or for a
/// random transform the base image each epoch cuts its own box from (into `base`).
pub(super) fn load(
    epoch: &Epoch,
    job: &DecodeJob,
    decoder: &mut Decoder,
    mut at: At<'_>,
    input: Input<'_>,
    buf: &mut [u8],
    base: &mut Vec<u8>,
) -> Result<(), Error> {
    let geom = job.geometry;
    let draw = Draw {
        seed: job.seed,
        epoch: epoch.number,
        index: u64::from(at.index),
    };
    let Some(cache) = &job.cache else {
        let sample = Target::Sample(draw);
        return decode(epoch, job, decoder, &mut at, input, (&geom, sample), buf);
    };
    let path = at.path;
    let cached = |target: Target, geom: &Geometry, record: &mut [u8]| {
        let index = at.index;
        if let Some(found) = cache.lookup(
            &epoch.cache_mode,
            index,
            at.label,
            path,
            record,
            &epoch.stats,
        ) {
            return found;
        }
        let result = decode(epoch, job, decoder, &mut at, input, (geom, target), record);
        epoch
            .cache_mode
            .record(index, at.label.unwrap_or(0), record, &result);
        result
    };
    match job.base_side {
        Some(side) => {
            base.resize(base_len(side), 0);
            cached(Target::Base { side }, &geom, base)?;
            decoder.sample_from_base(base, side, &geom, draw, path, buf)
        }
        None => {
            let unflipped = Geometry { flip: 0.0, ..geom };
            cached(Target::Sample(draw), &unflipped, buf)?;
            if draw.flip(geom.flip) {
                flip_horizontal(buf, geom.width as usize);
            }
            Ok(())
        }
    }
}

/// A sample being loaded: its name in messages, its dataset index, and its label where the
/// source gave it (`None`: a cache record or a read of its own fills it in).
pub(super) struct At<'a> {
    pub(super) path: &'a std::path::Path,
    pub(super) index: u32,
    pub(super) label: &'a mut Option<u32>,
}

/// Decodes one sample's bytes (from `input`) into `out`, as `geom` and `target` say.
fn decode(
    epoch: &Epoch,
    job: &DecodeJob,
    decoder: &mut Decoder,
    at: &mut At<'_>,
    input: Input<'_>,
    (geom, target): (&Geometry, Target),
    out: &mut [u8],
) -> Result<(), Error> {
    let (path, index) = (at.path, at.index);
    if let Some(hook) = &job.failures {
        match (hook.0)(epoch.number, u64::from(index)) {
            Some(true) => {
                return Err(Error::decode(
                    path,
                    crate::error::DecodeFailure("injected: undecodable bytes".into()),
                ))
            }
            Some(false) => {
                return Err(Error::io(
                    path,
                    std::io::Error::other("injected: a transient I/O error"),
                ))
            }
            None => {}
        }
    }
    match input {
        Input::File => decoder.load_file(path, geom, target, &job.gate, out),
        Input::Bytes(bytes) => decoder.load_bytes(bytes, path, geom, target, &job.gate, out),
        Input::CacheOnly => {
            let (sample, _) = epoch
                .source
                .read_sample(index as usize, epoch.max_file_bytes)?;
            *at.label = Some(sample.label);
            decoder.load_bytes(&sample.bytes, path, geom, target, &job.gate, out)
        }
    }
}
