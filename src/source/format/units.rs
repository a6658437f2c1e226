//! What the formats read as streams (tar shards, TFRecord files, parquet row groups) share:
//! the table of their *units* that a source keeps (where each is, its size and modification
//! time, which samples it holds: a few dozen bytes a unit, nothing per sample), and the
//! per-unit sample tables a reader loads when it first reads a unit and drops when newer ones
//! push it out.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::source::storage::Located;

/// One unit: a file (tar shard, TFRecord file) or a part of one (a parquet row group).
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    /// The file it is in.
    pub(crate) file: Arc<Located>,
    /// Its samples are dataset indices `first..first + count`.
    pub(crate) first: u64,
    pub(crate) count: u32,
    /// The format's number for it within its file (a parquet row group's), else 0.
    pub(crate) part: u32,
    /// What opening counted of its samples (kept for a manifest).
    pub(crate) tally: Tally,
}

/// What opening counts of a unit's samples: how many carry a label, the smallest and largest
/// label, and the images' bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) labeled: u32,
    pub(crate) min_label: Option<u32>,
    pub(crate) max_label: Option<u32>,
    pub(crate) image_bytes: u64,
}

/// The units of a source, in the source's order, and what opening found about their samples.
#[derive(Debug)]
pub(crate) struct Units {
    pub(crate) units: Vec<Unit>,
    /// The largest label plus one (1 without labels: every label is 0).
    pub(crate) num_classes: u32,
    /// The mean encoded size of a sample, where opening learned it.
    pub(crate) mean_sample_bytes: Option<u64>,
}

impl Units {
    /// The number of samples.
    pub(crate) fn len(&self) -> u64 {
        self.units
            .last()
            .map_or(0, |u| u.first + u64::from(u.count))
    }

    /// The unit holding sample `i`, and `i`'s place in it.
    pub(crate) fn find(&self, i: u64) -> (usize, u32) {
        let k = self
            .units
            .partition_point(|u| u.first <= i)
            .saturating_sub(1);
        (k, (i - self.units[k].first) as u32)
    }

    /// Each unit's samples, in order: the streams an epoch's order is made of.
    pub(crate) fn streams(&self) -> Vec<Range<u32>> {
        self.units
            .iter()
            .map(|u| u.first as u32..(u.first + u64::from(u.count)) as u32)
            .collect()
    }

    /// A unit's file name, for sample names (`…/shard-000.tar[KEY.jpg]`).
    pub(crate) fn unit_name(&self, k: usize) -> std::borrow::Cow<'_, str> {
        self.units[k].file.path.to_string_lossy()
    }

    /// Heap bytes the table holds.
    pub(crate) fn heap_bytes(&self) -> u64 {
        let files: usize = self
            .units
            .iter()
            .enumerate()
            .filter(|(k, u)| *k == 0 || !Arc::ptr_eq(&u.file, &self.units[k - 1].file))
            .map(|(_, u)| u.file.path.as_os_str().len() + std::mem::size_of::<Located>() + 32)
            .sum();
        (self.units.capacity() * std::mem::size_of::<Unit>() + files) as u64
    }

    /// Feeds `hasher` what identifies the samples: every unit's name and count, and with
    /// `stamps` its file's size and modification time.
    pub(crate) fn fingerprint(&self, hasher: &mut impl std::hash::Hasher, stamps: bool) {
        hasher.write(&self.len().to_le_bytes());
        for u in &self.units {
            hasher.write(u.file.path.as_os_str().as_encoded_bytes());
            hasher.write(&[0]);
            hasher.write(&u.part.to_le_bytes());
            hasher.write(&u.count.to_le_bytes());
            if stamps {
                hasher.write(&u.file.size.to_le_bytes());
                hasher.write(&u.file.mtime.to_le_bytes());
            }
        }
    }
}

/// `path` relative to `base` where it lies below it, else whole.
pub(crate) fn relative(path: &Path, base: &Path) -> String {
    match path.strip_prefix(base) {
        Ok(rel) if !base.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => {
            // URLs are not paths with components to strip: by their text.
            let (p, b) = (path.to_string_lossy(), base.to_string_lossy());
            match p.strip_prefix(&*b) {
                Some(rest) if !b.is_empty() => rest.trim_start_matches('/').to_string(),
                _ => p.into_owned(),
            }
        }
    }
}

/// At most this many files are opened at once.
const OPEN_THREADS: usize = 8;

/// Runs `each(k)` for `0..n` on up to [`OPEN_THREADS`] threads, in order of `k` in the
/// result; the first error stops the others. Logs progress every few seconds.
pub(crate) fn in_parallel<T: Send>(
    n: usize,
    origin: &Path,
    each: impl Fn(usize) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    type Slot<T> = Mutex<Option<Result<T, Error>>>;
    let results: Vec<Slot<T>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let said = Mutex::new(started);
    std::thread::scope(|scope| {
        for _ in 0..OPEN_THREADS.min(n) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    break;
                }
                let r = each(k);
                let failed = r.is_err();
                *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if failed {
                    next.store(n, Ordering::Relaxed);
                }
                let mut last = said.lock().unwrap_or_else(|e| e.into_inner());
                if last.elapsed() > std::time::Duration::from_secs(3) {
                    *last = std::time::Instant::now();
                    log::info!(
                        "{}: opened {finished} of {n} files ({:.0} s)",
                        origin.display(),
                        started.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    let mut out = Vec::with_capacity(n);
    for slot in results {
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(r) => out.push(r?),
            None => break, // not reached: an earlier one failed and returned above
        }
    }
    Ok(out)
}

/// The folder all `files` are in, or none.
pub(crate) fn common_parent(files: &[PathBuf]) -> PathBuf {
    let parent = |p: &PathBuf| p.parent().map(Path::to_path_buf).unwrap_or_default();
    match files.first() {
        Some(first) if files.iter().all(|p| parent(p) == parent(first)) => parent(first),
        _ => PathBuf::new(),
    }
}

/// The sample tables of the units a reader reads now: loaded on first use, the least recently
/// used dropped once more than `capacity` are held. A table that could not be loaded is
/// remembered as its error, so that the unit's other samples fail the same way at once
/// (a store that stopped answering is asked once, not once a sample).
pub(crate) struct Tables<T> {
    held: VecDeque<(usize, Result<Arc<T>, Error>)>,
    capacity: usize,
}

impl<T> Tables<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Tables {
            held: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Unit `k`'s table, loaded with `load` if it is not held.
    pub(crate) fn get(
        &mut self,
        k: usize,
        load: impl FnOnce() -> Result<T, Error>,
    ) -> Result<Arc<T>, Error> {
        let entry = match self.held.iter().position(|(u, _)| *u == k) {
            Some(at) => self.held.remove(at).expect("a held table"),
            None => (k, load().map(Arc::new)),
        };
        let result = match &entry.1 {
            Ok(table) => Ok(table.clone()),
            Err(e) => Err(e.again()),
        };
        self.held.push_front(entry);
        self.held.truncate(self.capacity);
        result
    }
}

/// Tables a reader keeps: the units a shuffle block spans (at most `block` samples, laid end
/// to end over units of about `mean` samples, so `block / mean + 2` of them), at least 4.
pub(crate) fn tables_for(block: usize, mean_unit: u64) -> usize {
    (block as u64 / mean_unit.max(1) + 2).clamp(4, 4096) as usize
}

impl Units {
    /// The units numbered `keep` (in increasing order), their samples numbered again from 0.
    pub(crate) fn subset(&self, keep: &[usize]) -> Units {
        let mut first = 0;
        let units = keep
            .iter()
            .map(|&k| {
                let mut u = self.units[k].clone();
                u.first = first;
                first += u64::from(u.count);
                u
            })
            .collect();
        Units {
            units,
            num_classes: self.num_classes,
            mean_sample_bytes: self.mean_sample_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_keep_the_recently_used_and_load_once() {
        let mut t: Tables<usize> = Tables::new(2);
        let mut loads = 0;
        for k in [0, 1, 0, 2, 0, 1] {
            let v = t
                .get(k, || {
                    loads += 1;
                    Ok(k * 10)
                })
                .unwrap();
            assert_eq!(*v, k * 10);
        }
        // 0, 1 loaded; 0 again held; 2 pushes 1 out; 0 held; 1 loaded again.
        assert_eq!(loads, 4);
    }

    #[test]
    fn names_are_relative_to_the_base() {
        assert_eq!(
            relative(Path::new("/data/sh/a.tar"), Path::new("/data/sh")),
            "a.tar"
        );
        assert_eq!(
            relative(Path::new("s3://b/p/a.tar"), Path::new("s3://b/p")),
            "a.tar"
        );
        assert_eq!(relative(Path::new("/x/a.tar"), Path::new("")), "/x/a.tar");
    }
}
