//! Reading a file list a line at a time: each line checked (`PATH<TAB>LABEL`, `PATH LABEL`,
//! or a TSV's columns under a header), comments and blank lines skipped, every error naming
//! the line. Nothing here keeps an index: `list/mod.rs` builds one from these lines.

use std::path::Path;

use crate::error::Error;

/// The longest list line kept in memory: a path at [`MAX_PATH_BYTES`], its label and room for
/// spacing. A longer line is refused (or, a comment, skipped) without being held.
pub(super) const MAX_LINE_BYTES: usize = 16 << 10;

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
        check_path(list, at, path)?;
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
    check_path(list, at, path)?;
    Ok((path, label))
}

/// A listed path holds no NUL byte and is at most [`MAX_PATH_BYTES`] long.
fn check_path(list: &Path, at: usize, path: &[u8]) -> Result<(), Error> {
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
    Ok(())
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
pub(super) const MAX_PATH_BYTES: usize = 4096;

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
