//! File lists: one `PATH<TAB>LABEL` (or `PATH LABEL`) line a sample, read a line at a time
//! (the pure core of [`Source::from_list_file`](crate::Source::from_list_file)), and the one
//! rule for labels, which tar shards' `.cls` members follow too.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::{os_to_bytes, FileIndex};

/// Parses a list file's bytes (pure core of [`Source::from_list_file`](crate::Source::from_list_file)).
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn parse_list(list: &Path, base: PathBuf, data: &[u8]) -> Result<FileIndex, Error> {
    parse_list_from(list, base, data, data.len() as u64)
}

/// The longest list line kept in memory: a path at [`MAX_PATH_BYTES`], its label and room for
/// spacing. A longer line is refused (or, a comment, skipped) without being held.
const MAX_LINE_BYTES: usize = 16 << 10;

/// What a file starting with `head` holds, if it is plainly not a text list.
fn binary_kind(head: &[u8]) -> Option<String> {
    const KINDS: [(&[u8], &str); 5] = [
        (b"\xff\xfe", "UTF-16 text: save it as UTF-8"),
        (b"\xfe\xff", "UTF-16 text: save it as UTF-8"),
        (b"PK\x03\x04", "a zip archive: unpack it"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"\x89PNG", "a PNG image"),
    ];
    if let Some((_, kind)) = KINDS.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some(kind.to_string());
    }
    if let Some((kind, tool)) = compression_of(head) {
        return Some(format!("{kind}-compressed data: decompress it (`{tool}`)"));
    }
    // `BZh9` then the block magic (a list's first path may well start with "BZh").
    if head.len() >= 10 && head.starts_with(b"BZh") && &head[4..10] == b"1AY&SY" {
        return Some("bzip2-compressed data: decompress it (`bunzip2`)".into());
    }
    (head.get(257..262) == Some(b"ustar"))
        .then(|| "a tar archive: open it as tar shards (name it .tar)".into())
}

/// One entry of a list: its path bytes, its label, and its line's number and byte offset.
pub(crate) struct Entry<'a> {
    pub(crate) path: &'a [u8],
    pub(crate) label: u32,
    pub(crate) line: u64,
    pub(crate) offset: u64,
    /// The whole line, trimmed (a TSV list's columns are read from it).
    pub(crate) text: &'a [u8],
}

/// A TSV list's header line: its columns' names. A list whose first line names its columns
/// separated by tabs, one of them `path` (`path<TAB>label<TAB>caption`), is read as TSV: every
/// line has one value a column, separated by single tabs; `label` (optional: labels are 0
/// without it) is the label, and the other columns are fields ([`Field`](crate::Field)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) names: Vec<String>,
    pub(crate) path: usize,
    pub(crate) label: Option<usize>,
}

impl Header {
    /// The header `line` is, if it is one: tab-separated names, one of them `path` (any
    /// case), and not a `PATH<TAB>LABEL` entry.
    fn of(line: &[u8]) -> Option<Header> {
        let text = std::str::from_utf8(line).ok()?;
        let names: Vec<String> = text.split('\t').map(|n| n.trim().to_string()).collect();
        let find = |want: &str| names.iter().position(|n| n.eq_ignore_ascii_case(want));
        let path = find("path")?;
        if names.len() == 2 && split_line(line).is_some_and(|(_, l)| parse_label(l).is_ok()) {
            return None; // `path<TAB>3`: a file named `path`
        }
        if names.iter().any(String::is_empty) {
            return None;
        }
        Some(Header {
            label: find("label"),
            path,
            names,
        })
    }

    /// The column named `name`, if any.
    pub(crate) fn column(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Column `k` of a TSV line.
    pub(crate) fn value<'a>(&self, line: &'a [u8], k: usize) -> Option<&'a [u8]> {
        line.split(|&b| b == b'\t').nth(k)
    }

    /// Checks a TSV line (number `at`): one value a column, a path, a label where the header
    /// has one.
    fn check<'a>(&self, list: &Path, at: usize, line: &'a [u8]) -> Result<(&'a [u8], u32), Error> {
        let values = line.split(|&b| b == b'\t').count();
        if values != self.names.len() {
            return Err(Error::list(
                list,
                at,
                format!(
                    "{values} tab-separated values, where the header names {} columns ({})",
                    self.names.len(),
                    self.names.join(", ")
                ),
            ));
        }
        let path = trim(self.value(line, self.path).unwrap_or_default());
        if path.is_empty() {
            return Err(Error::list(list, at, "no path"));
        }
        let label = match self.label {
            Some(k) => parse_label(trim(self.value(line, k).unwrap_or_default()))
                .map_err(|reason| Error::list(list, at, reason))?,
            None => 0,
        };
        if path.contains(&0) {
            return Err(Error::list(list, at, "the path contains a NUL byte"));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(Error::list(
                list,
                at,
                format!(
                    "the path is {} bytes long, over the {MAX_PATH_BYTES}-byte limit of paths",
                    path.len()
                ),
            ));
        }
        Ok((path, label))
    }
}

/// Reads a list's entries one at a time, holding one line, and checks each line by the list
/// rules (see [`Source::from_list_file`](crate::Source::from_list_file)): the one reader of
/// list lines, for parsing a list, counting it, and reading one entry of it again.
pub(crate) struct Lines<'l, R> {
    reader: R,
    list: &'l Path,
    buf: Vec<u8>,
    /// The number of the last line read, and the offset of the next one.
    line: u64,
    offset: u64,
    /// A TSV list's header, and whether the first line is still to be looked at for one.
    header: Option<std::sync::Arc<Header>>,
    looking_for_header: bool,
}

impl<'l, R: std::io::BufRead> Lines<'l, R> {
    /// Lines of `list` from `reader`, which is at line `line + 1`, byte `offset` (0, 0: the
    /// file's start, where a file that is plainly not a text list is refused by what it is).
    pub(crate) fn new(
        list: &'l Path,
        mut reader: R,
        line: u64,
        offset: u64,
    ) -> Result<Self, Error> {
        if offset == 0 {
            // A file that is not a text list at all (a shard, an image, a compressed list)
            // fails on its first "line" with a label made of binary bytes: say what it is.
            if let Some(kind) = binary_kind(reader.fill_buf().map_err(|e| Error::io(list, e))?) {
                return Err(Error::source(
                    list,
                    format!("is not a file list of `PATH<TAB>LABEL` lines: it holds {kind}"),
                ));
            }
        }
        Ok(Lines {
            reader,
            list,
            buf: Vec::with_capacity(256),
            line,
            offset,
            header: None,
            looking_for_header: offset == 0,
        })
    }

    /// Reads lines of a TSV list with this header (lines read from past its start).
    pub(crate) fn with_header(mut self, header: Option<std::sync::Arc<Header>>) -> Self {
        if header.is_some() {
            self.header = header;
            self.looking_for_header = false;
        }
        self
    }

    /// The list's header, once the first line has been read (a TSV list's).
    pub(crate) fn header(&self) -> Option<&std::sync::Arc<Header>> {
        self.header.as_ref()
    }

    /// The next entry, `None` after the last.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry<'_>>, Error> {
        use std::io::{BufRead as _, Read as _};
        let list = self.list;
        loop {
            self.buf.clear();
            let read = (&mut self.reader)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::io(list, e))?;
            if read == 0 {
                return Ok(None);
            }
            let start = self.offset;
            self.offset += read as u64;
            self.line += 1;
            let line_no = self.line;
            if self.buf.len() > MAX_LINE_BYTES && self.buf.last() != Some(&b'\n') {
                let rest = skip_line(&mut self.reader).map_err(|e| Error::io(list, e))?;
                self.offset += rest + 1;
                let total = self.buf.len() as u64 + rest;
                if trim(&self.buf).first() == Some(&b'#') {
                    continue; // a long comment
                }
                let shown_start: String = String::from_utf8_lossy(&self.buf[..480])
                    .chars()
                    .take(120)
                    .collect();
                return Err(Error::list(
                    list,
                    line_no as usize,
                    format!(
                        "the line is {total} bytes long, over the {MAX_LINE_BYTES}-byte limit of list lines (paths are at most {MAX_PATH_BYTES} bytes): `{shown_start}...`"
                    ),
                ));
            }
            let mut raw: &[u8] = &self.buf;
            if start == 0 {
                raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
            }
            let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let line = trim(raw);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            if std::mem::take(&mut self.looking_for_header) {
                if let Some(h) = Header::of(line) {
                    self.header = Some(std::sync::Arc::new(h));
                    continue;
                }
            }
            // A TSV line keeps its tabs at either end (an empty first or last value).
            let line = if self.header.is_some() { raw } else { line };
            let (path, label) = match &self.header {
                Some(h) => h.check(list, line_no as usize, line)?,
                None => check_line(list, line_no as usize, line)?,
            };
            // The path and line again, borrowed from the buffer past this loop.
            let base = self.buf.as_ptr() as usize;
            let (at, len) = (path.as_ptr() as usize - base, path.len());
            let (line_at, line_len) = (line.as_ptr() as usize - base, line.len());
            return Ok(Some(Entry {
                path: &self.buf[at..at + len],
                label,
                line: line_no,
                offset: start,
                text: &self.buf[line_at..line_at + line_len],
            }));
        }
    }
}

/// Checks one trimmed, non-comment list line (number `at`); returns its path and label.
fn check_line<'a>(list: &Path, at: usize, line: &'a [u8]) -> Result<(&'a [u8], u32), Error> {
    if line.contains(&b'\r') {
        // Lines ended by a bare CR (classic Mac OS, some exporters) read as one line whose
        // "path" runs over many entries, and whose last label would be taken.
        return Err(Error::list(
            list,
            at,
            "a carriage return (CR) inside the line: the list's lines seem to end in bare \
             CRs; end them in LF (or CRLF)",
        ));
    }
    let (path, label) = split_line(line).ok_or_else(|| {
        Error::list(
            list,
            at,
            format!(
                "expected `PATH<TAB>LABEL` or `PATH LABEL`, found `{}` (no label)",
                shown(line)
            ),
        )
    })?;
    let label = parse_label(label).map_err(|reason| {
        // `a.jpg<TAB>3<TAB>extra`: three fields, whatever the third holds.
        let reason = if line.iter().filter(|&&b| b == b'\t').count() >= 2 {
            format!(
                "more than two tab-separated fields (`{}`): expected `PATH<TAB>LABEL`",
                shown(line)
            )
        } else {
            reason
        };
        let hint = if at == 1 {
            "; a header line names its columns with one of them `path` (a TSV list: \
             `path<TAB>label<TAB>caption`), or starts with `#` (a comment)"
        } else {
            ""
        };
        Error::list(list, at, format!("{reason}{hint}"))
    })?;
    // `a.jpg<TAB>3<TAB>7`: a list with more columns than PATH and LABEL, whose path would
    // otherwise be `a.jpg<TAB>3` and fail to open far from here.
    if let Some(tab) = path.iter().rposition(|&b| b == b'\t') {
        let field = trim(&path[tab + 1..]);
        if !field.is_empty() && parse_label(field).is_ok() {
            return Err(Error::list(
                list,
                at,
                format!(
                    "more than two tab-separated fields (`{}`): expected `PATH<TAB>LABEL`",
                    shown(line)
                ),
            ));
        }
    }
    if path.contains(&0) {
        return Err(Error::list(list, at, "the path contains a NUL byte"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(Error::list(
            list,
            at,
            format!(
                "the path is {} bytes long, over the {MAX_PATH_BYTES}-byte limit of paths (`{}`)",
                path.len(),
                shown(path)
            ),
        ));
    }
    Ok((path, label))
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

/// Skips the rest of a line; returns how many bytes it held (not counting its newline).
fn skip_line(reader: &mut impl std::io::BufRead) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped);
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(i + 1);
            return Ok(skipped + i as u64);
        }
        let n = buf.len();
        reader.consume(n);
        skipped += n as u64;
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

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// Splits a trimmed line into (path, label field) at its last run of whitespace.
fn split_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let cut = line.iter().rposition(|b| b.is_ascii_whitespace())?;
    let label = &line[cut + 1..];
    let path = trim(&line[..cut]);
    if path.is_empty() || label.is_empty() {
        return None;
    }
    Some((path, label))
}

/// Linux's PATH_MAX: no longer path can be opened.
const MAX_PATH_BYTES: usize = 4096;

/// Bytes from a list line (or a tar member name) as text for an error message: lossily decoded and cut to about 120
/// characters (a binary file or a megabyte-long line would otherwise flood the terminal).
pub(crate) fn shown(bytes: &[u8]) -> String {
    const KEEP: usize = 120;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(KEEP * 4)]);
    // Control characters escaped: a message never drives the terminal it is printed on.
    let escape = |t: &str| -> String {
        t.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    if bytes.len() <= KEEP * 4 && text.chars().count() <= KEEP {
        return escape(&text);
    }
    let cut: String = text.chars().take(KEEP).collect();
    format!("{}... ({} bytes in all)", escape(&cut), bytes.len())
}

/// A label: a decimal number from 0 to `u32::MAX`, leading zeros and a `+` allowed; the error
/// quotes the field. The one rule for list lines and tar shards' `.cls` members.
pub(crate) fn parse_label(field: &[u8]) -> Result<u32, String> {
    let text = shown(field);
    let digits = field.strip_prefix(b"+").unwrap_or(field);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        if field.first() == Some(&b'-')
            && field[1..].iter().all(u8::is_ascii_digit)
            && field.len() > 1
        {
            return Err(format!(
                "label `{text}` is out of range: labels must be 0 or more"
            ));
        }
        return Err(format!("label `{text}` is not an integer"));
    }
    // Leading zeros are fine; anything beyond u32 is out of range.
    let mut v: u64 = 0;
    for &d in digits {
        v = v * 10 + u64::from(d - b'0');
        if v > u64::from(u32::MAX) {
            return Err(format!(
                "label `{text}` is out of range (at most {})",
                u32::MAX
            ));
        }
    }
    Ok(v as u32)
}

/// The compression (name, tool that undoes it) of a file starting with `head`, told by its
/// magic number: gzip, xz, zstd, lz4.
pub(crate) fn compression_of(head: &[u8]) -> Option<(&'static str, &'static str)> {
    [
        (&b"\x1f\x8b"[..], "gzip", "gunzip"),
        (b"\xfd7zXZ\x00", "xz", "unxz"),
        (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
        (b"\x04\x22\x4d\x18", "lz4", "unlz4"),
    ]
    .into_iter()
    .find(|(magic, ..)| head.starts_with(magic))
    .map(|(_, kind, tool)| (kind, tool))
}

#[cfg(test)]
mod tests;
