//! The decode threads' loop: claim the next plan position from the window (or take the fetch
//! stage's bytes for it), load its sample (a file, fetched bytes or a cache record), decode, resize and orient it into a `u8` buffer,
//! and hand it to the batcher; a panic while loading becomes an error naming the sample.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::handoff::HandoffSender;
use super::{EpochShared, Loaded};
use crate::decode::Decoder;
use crate::decode::Target;
use crate::error::Error;
use crate::source::fetch::{ByteBudget, Fetched};
use crate::stats::add;
use crate::transform::{base_len, flip_horizontal, Draw, Geometry};

/// Where a decode thread gets its work: claims from the window (local files), or fetched
/// bytes from the fetch thread (with the byte budget to release).
pub(super) type FromFetch = Option<(Receiver<Fetched>, Arc<ByteBudget>)>;

/// Decode thread number `thread`: loads samples until the plan is done (waiting while
/// autotune has it inactive).
pub(super) fn decode_loop(
    shared: &EpochShared,
    tx: &HandoffSender,
    from_fetch: FromFetch,
    thread: usize,
) {
    let cfg = &shared.cfg;
    let geom = cfg.geometry();
    let new_decoder = || {
        let mut decoder = Decoder::new(cfg.decode.clone());
        decoder.verified = shared.verified.clone();
        decoder
    };
    // A decoder (with its grown buffers) from an earlier epoch, so later epochs allocate nothing.
    let mut decoder = shared
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
            None => match shared.window.claim_as(thread) {
                Some(seq) => (seq, shared.plan[seq], None, 0),
                None => break,
            },
            Some(_) if !shared.window.wait_active(thread) => break,
            Some((rx, _)) => match rx.recv() {
                Ok(f) => (f.seq, f.index, f.bytes, f.held),
                Err(_) => break, // the fetcher finished or stopped
            },
        };
        add(&shared.stats.decode_wait_ns, waited.elapsed());
        let mut buf = shared
            .samples
            .1
            .try_recv()
            .unwrap_or_else(|_| vec![0u8; sample_len]);
        let busy = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            shared.source.index.path_into(index as usize, &mut path);
            if shared.cfg.panic_on_index == Some(u64::from(index)) {
                panic!("injected panic (inject_panic_at_index)");
            }
            let mut load_from = |input| {
                load(
                    shared,
                    &mut decoder,
                    &path,
                    index,
                    input,
                    &mut buf,
                    &mut base,
                )
            };
            match fetched.take() {
                None if from_fetch.is_none() => load_from(Input::File),
                None => load_from(Input::CacheOnly),
                Some(Ok(bytes)) => load_from(Input::Bytes(&bytes)),
                Some(Err(e)) => Err(e),
            }
        }));
        if let Some((_, budget)) = &from_fetch {
            budget.release(held);
        }
        add(&shared.stats.decode_busy_ns, busy.elapsed());
        let times = decoder.take_times();
        add(&shared.stats.read_ns, times.read);
        add(&shared.stats.decode_ns, times.decode);
        add(&shared.stats.resize_ns, times.resize);
        let result = match outcome {
            Ok(Ok(())) => Ok(buf),
            Ok(Err(e)) => Err(e),
            Err(payload) => {
                // The decoder's buffers may be mid-update: start afresh.
                decoder = new_decoder();
                Err(Error::worker_panicked(
                    "decode",
                    Some(shared.source.index.path(index as usize)),
                    &*payload,
                ))
            }
        };
        if !tx.put(Loaded { seq, index, result }) {
            break; // the batcher stopped: shut down
        }
    }
    shared
        .decoders
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
    shared: &EpochShared,
    decoder: &mut Decoder,
    path: &std::path::Path,
    index: u32,
    input: Input<'_>,
    buf: &mut [u8],
    base: &mut Vec<u8>,
) -> Result<(), Error> {
    let cfg = &shared.cfg;
    let geom = cfg.geometry();
    let draw = Draw {
        seed: cfg.seed,
        epoch: shared.epoch,
        index: u64::from(index),
    };
    let Some(cache) = &shared.cache else {
        return decode(
            shared,
            decoder,
            path,
            index,
            input,
            &geom,
            Target::Sample(draw),
            buf,
        );
    };
    let label = shared.source.index.label(index as usize);
    let cached = |target: Target, geom: &Geometry, record: &mut [u8]| {
        if let Some(found) = cache.lookup(
            &shared.cache_mode,
            index,
            label,
            path,
            record,
            &shared.stats,
        ) {
            return found;
        }
        let result = decode(shared, decoder, path, index, input, geom, target, record);
        shared.cache_mode.record(index, label, record, &result);
        result
    };
    match cfg.cache_base_side() {
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

/// Decodes one sample's bytes (from `input`) into `out`, as `target` says.
#[allow(clippy::too_many_arguments)]
fn decode(
    shared: &EpochShared,
    decoder: &mut Decoder,
    path: &std::path::Path,
    index: u32,
    input: Input<'_>,
    geom: &Geometry,
    target: Target,
    out: &mut [u8],
) -> Result<(), Error> {
    match input {
        Input::File => decoder.load_file(path, geom, target, &shared.gate, out),
        Input::Bytes(bytes) => decoder.load_bytes(bytes, path, geom, target, &shared.gate, out),
        Input::CacheOnly => shared
            .source
            .read_sample(index as usize, shared.cfg.decode.clone().max_file_bytes())
            .and_then(|bytes| decoder.load_bytes(&bytes, path, geom, target, &shared.gate, out)),
    }
}
