//! File lists: one `PATH<TAB>LABEL` (or `PATH LABEL`) line a sample, read a line at a time
//! (the pure core of [`Source::from_list_file`](crate::Source::from_list_file)), and the one
//! rule for labels, which tar shards' `.cls` members follow too.

pub(crate) mod lines;

pub(crate) use lines::{compression_of, parse_label, shown, Lines};

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::index::{os_to_bytes, FileIndex};

/// Parses a list file's bytes (pure core of [`Source::from_list_file`](crate::Source::from_list_file)).
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn parse_list(list: &Path, base: PathBuf, data: &[u8]) -> Result<FileIndex, Error> {
    parse_list_from(list, base, data, data.len() as u64)
}

/// The folder a list's relative paths are keyed under for the duplicate check: its own,
/// made absolute (a list named by a bare file name: the current folder).
fn anchor_of(base: &Path) -> Vec<u8> {
    let folder = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let anchor = std::fs::canonicalize(folder).unwrap_or_else(|_| base.to_path_buf());
    os_to_bytes(anchor.as_os_str())
}

/// Parses a file list read line by line from `reader`, holding one line at a time, so the
/// memory it takes is the index it builds plus 24 bytes an entry while it runs (for duplicate
/// detection), whatever the list's size or content. `size_hint`: the list's length in bytes,
/// if known (an upper bound of the index's path bytes, reserved up front).
pub(crate) fn parse_list_from(
    list: &Path,
    base: PathBuf,
    reader: impl std::io::BufRead,
    size_hint: u64,
) -> Result<FileIndex, Error> {
    let mut index = FileIndex::with_origin(list.to_path_buf(), base);
    // Reserved, not touched: pages are only used as paths are written.
    index.reserve_path_bytes(usize::try_from(size_hint).unwrap_or(0));
    // Per entry, its path's hash and its line: duplicates are found by sorting these after
    // the last line (24 bytes an entry, freed when parsing ends).
    let mut keyed: Vec<(u64, u32)> = Vec::new();
    let mut lines: Vec<u64> = Vec::new();
    // Paths are compared as absolute paths under the list's folder (see `list_key`).
    let anchor = anchor_of(&index.base);
    let mut key = Vec::new();
    let mut reader = Lines::new(list, reader, 0, 0)?;
    while let Some(entry) = reader.next_entry()? {
        if index.len() >= u32::MAX as usize {
            return Err(Error::list(
                list,
                entry.line as usize,
                "more than 2^32-1 entries",
            ));
        }
        list_key(&anchor, entry.path, &mut key);
        keyed.push((xxhash_rust::xxh3::xxh3_64(&key), index.len() as u32));
        lines.push(entry.line);
        index.push(entry.path, entry.label);
    }
    if index.len() == 0 {
        return Err(Error::source(list, "the list has no entries"));
    }
    let duplicates = check_duplicates(list, &index, &anchor, keyed, &lines)?;
    if duplicates > 0 {
        log::warn!(
            "{}: {duplicates} path(s) listed more than once; each listing is a sample",
            list.display()
        );
    }
    index.shrink();
    Ok(index)
}

/// Opens a local list file as a compact index (see `source/index.rs`): the list is read
/// three times (counted and checked, then its paths hashed into two Bloom filters to find the
/// ones that may be listed twice, then those compared), holding a quarter byte a sample and,
/// while it opens, 2.5 bytes a sample of filters. The same rules and errors as
/// [`parse_list_from`].
pub(crate) fn scan_list(list: &Path, base: PathBuf) -> Result<FileIndex, Error> {
    use std::io::BufReader;

    use crate::source::index::{At, ListIndex};

    let file = std::fs::File::open(list).map_err(|e| Error::io(list, e))?;
    let read = |pos| BufReader::with_capacity(64 << 10, At { file: &file, pos });
    // Counted and checked; where every 64th entry starts.
    let (mut n, mut max_label) = (0u64, 0u32);
    let mut checkpoints = Vec::new();
    let mut lines = Lines::new(list, read(0), 0, 0)?;
    while let Some(e) = lines.next_entry()? {
        if n % 64 == 0 {
            // Reading resumes at the entry's own line: the one before it is `line - 1`
            // (comments and blank lines between entries count too).
            checkpoints.push((e.offset, e.line - 1));
        }
        if n >= u64::from(u32::MAX) {
            return Err(Error::list(
                list,
                e.line as usize,
                "more than 2^32-1 entries",
            ));
        }
        n += 1;
        max_label = max_label.max(e.label);
    }
    let header = lines.header().cloned();
    if n == 0 {
        return Err(Error::source(list, "the list has no entries"));
    }
    // Paths listed twice: first those that may be (a second filter holds the paths met when
    // the first already had them), then those compared exactly.
    let anchor = anchor_of(&base);
    let bits = (n * 10).max(64);
    let (mut once, mut twice) = (Bloom::new(bits), Bloom::new(bits));
    let mut key = Vec::new();
    let mut lines = Lines::new(list, read(0), 0, 0)?;
    let mut any = false;
    while let Some(e) = lines.next_entry()? {
        list_key(&anchor, e.path, &mut key);
        let h = xxhash_rust::xxh3::xxh3_64(&key);
        if once.insert(h) {
            twice.insert(h);
            any = true;
        }
    }
    drop(once);
    // Each path that may be listed twice, by its first listing (label and line): one entry a
    // distinct path, so a list that names a few files many times stays small.
    let mut duplicates = 0u64;
    if any {
        let mut first: std::collections::HashMap<u64, Vec<(Vec<u8>, u32, u64)>> =
            std::collections::HashMap::new();
        let mut lines = Lines::new(list, read(0), 0, 0)?;
        while let Some(e) = lines.next_entry()? {
            list_key(&anchor, e.path, &mut key);
            let h = xxhash_rust::xxh3::xxh3_64(&key);
            if !twice.contains(h) {
                continue;
            }
            let seen = first.entry(h).or_default();
            match seen.iter().find(|(k, ..)| *k == key) {
                None => seen.push((key.clone(), e.label, e.line)),
                Some((_, label, _)) if *label == e.label => duplicates += 1,
                Some((_, label, line)) => {
                    return Err(Error::list(
                        list,
                        e.line as usize,
                        format!(
                            "`{}` is listed again with label {}, but line {line} gives it label {label}",
                            shown(e.path),
                            e.label
                        ),
                    ))
                }
            }
        }
    }
    if duplicates > 0 {
        log::warn!(
            "{}: {duplicates} path(s) listed more than once; each listing is a sample",
            list.display()
        );
    }
    let mut index = ListIndex::new(file, checkpoints, n as usize, max_label.saturating_add(1));
    index.header = header;
    Ok(FileIndex::of_list(list.to_path_buf(), base, index))
}

/// A Bloom filter of 64-bit hashes: `insert` says whether the hash was (probably) in it
/// already. Seven probes, 10 bits a key: about 1% false positives.
struct Bloom {
    words: Vec<u64>,
    bits: u64,
}

impl Bloom {
    fn new(bits: u64) -> Self {
        let words = bits.div_ceil(64) as usize;
        Bloom {
            words: vec![0; words],
            bits: words as u64 * 64,
        }
    }

    fn probes(&self, h: u64) -> impl Iterator<Item = u64> + '_ {
        // Double hashing from the two halves (Kirsch and Mitzenmacher).
        let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
        (0..7u64).map(move |k| a.wrapping_add(k.wrapping_mul(b)) % self.bits)
    }

    fn insert(&mut self, h: u64) -> bool {
        let mut present = true;
        let mut probes = [0u64; 7];
        for (p, bit) in probes.iter_mut().zip(self.probes(h)) {
            *p = bit;
        }
        for bit in probes {
            let (w, m) = ((bit / 64) as usize, 1u64 << (bit % 64));
            present &= self.words[w] & m != 0;
            self.words[w] |= m;
        }
        present
    }

    fn contains(&self, h: u64) -> bool {
        self.probes(h)
            .all(|bit| self.words[(bit / 64) as usize] & (1u64 << (bit % 64)) != 0)
    }
}

/// The key under which the duplicate check compares a listed path: joined to `anchor` (the
/// list's folder, made absolute) unless absolute, with `.` components, repeated slashes and
/// `..` (with what it cancels) removed, so `a.jpg`, `./a.jpg`, `sub/../a.jpg` and the file's
/// absolute path are one path. (Through a symbolic link `sub/..` need not lead back; two
/// such spellings of different files would then be taken for one, and two labels for them
/// refused. Symbolic and hard links to one file under two names are not looked for: that
/// would take a `stat` of every listed file.)
fn list_key(anchor: &[u8], path: &[u8], out: &mut Vec<u8>) {
    let absolute = path.starts_with(b"/");
    let mut parts: Vec<&[u8]> = Vec::new();
    let joined = [if absolute { &b""[..] } else { anchor }, b"/", path];
    let rooted = joined[0].starts_with(b"/") || absolute;
    for part in joined.iter().flat_map(|p| p.split(|&b| b == b'/')) {
        match part {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|p| *p != b"..") => {
                parts.pop();
            }
            b".." if rooted => {}
            p => parts.push(p),
        }
    }
    out.clear();
    if rooted {
        out.push(b'/');
    }
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(p);
    }
}

/// Finds paths listed more than once (`keyed`: each entry's path hash and number; `lines`:
/// each entry's line). The same path with the same label is a duplicate (counted); with
/// another label it is an error naming the first such line in the file and the path's first
/// listing.
fn check_duplicates(
    list: &Path,
    index: &FileIndex,
    anchor: &[u8],
    mut keyed: Vec<(u64, u32)>,
    lines: &[u64],
) -> Result<u64, Error> {
    keyed.sort_unstable();
    let mut duplicates = 0u64;
    // (later entry, its path's first entry) of the earliest conflict.
    let mut conflict: Option<(u32, u32)> = None;
    let mut group: Vec<u32> = Vec::new();
    for same_hash in keyed.chunk_by(|a, b| a.0 == b.0) {
        if same_hash.len() < 2 {
            continue;
        }
        // By path, then entry: each path's first listing leads its run.
        group.clear();
        group.extend(same_hash.iter().map(|k| k.1));
        let key = |i: u32| {
            let mut k = Vec::new();
            list_key(anchor, &index.raw_path_of(i as usize), &mut k);
            k
        };
        group.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)).then(a.cmp(&b)));
        for run in group.chunk_by(|&a, &b| key(a) == key(b)) {
            let first = run[0];
            for &later in &run[1..] {
                if index.label(later as usize) == index.label(first as usize) {
                    duplicates += 1;
                } else if conflict.is_none_or(|(c, _)| later < c) {
                    conflict = Some((later, first));
                }
            }
        }
    }
    match conflict {
        None => Ok(duplicates),
        Some((later, first)) => Err(Error::list(
            list,
            lines[later as usize] as usize,
            format!(
                "`{}` is listed again with label {}, but line {} gives it label {}",
                shown(&index.raw_path_of(later as usize)),
                index.label(later as usize),
                lines[first as usize],
                index.label(first as usize)
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
