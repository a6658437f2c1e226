//! Tar shards in the WebDataset layout: indexing them (local or in object storage), reading
//! their members as sequential streams, and writing them (`imagefeed shards`).
//!
//! A shard is a plain tar file; a sample is a run of consecutive members sharing a key (the
//! member path up to the first `.` of its file name): one image (`KEY.jpg`, `KEY.jpeg`,
//! `KEY.png`) and its label as decimal text (`KEY.cls`). Opening a shard source reads every
//! member header once and records, per sample, the shard, the byte offset and length of the
//! image's data and of its label's (29 bytes a sample). Epochs then read each shard front to
//! back with one stream (one request for object storage), skipping other members, and check
//! each image's tar header and each label member against the index as they go: a shard
//! rewritten since it was indexed (or a stale `.tar.idx` sidecar) is an error naming the
//! sample, never an image served under another label.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{DecodeFailure, Error};
use crate::source::{parse_label, Backing, FileIndex, Source, IMAGE_EXTENSIONS};

/// The largest `.cls` member read (a label is a short decimal number).
const MAX_CLS_BYTES: u64 = 64;
/// [`TarIndex::label_offset`] of a sample without a `.cls` member.
const NO_LABEL_MEMBER: u64 = u64::MAX;
/// At most this many shards are indexed at once.
const INDEX_THREADS: usize = 8;

/// True for a name ending in `.tar` (any case).
pub(crate) fn is_tar_name(name: &str) -> bool {
    // Bytes, not a `str` slice: the cut may fall inside a character (`说明`).
    let b = name.as_bytes();
    b.len() > 4 && b[b.len() - 4..].eq_ignore_ascii_case(b".tar")
}

/// True if `s` is a URL (`scheme://…`) rather than a local path.
pub(crate) fn looks_like_url(s: &str) -> bool {
    match s.split_once("://") {
        Some((scheme, _)) => {
            scheme.len() > 1
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+')
        }
        None => false,
    }
}

/// The `*.tar` files directly in `dir`, sorted.
pub(crate) fn tar_files_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if crate::source::is_hidden(&name) || !is_tar_name(&name.to_string_lossy()) {
            continue;
        }
        if entry.path().is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Where a shard is.
#[derive(Debug)]
pub(crate) enum ShardLocation {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Remote(String),
}

/// One indexed shard.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) location: ShardLocation,
    /// The shard's name in messages (its path or URL).
    pub(crate) name: String,
    pub(crate) size: u64,
    mtime: u128,
    /// Its samples are `first..first + count`.
    pub(crate) first: u32,
    pub(crate) count: u32,
}

/// Where every sample's image lies.
#[derive(Debug)]
pub(crate) struct TarIndex {
    pub(crate) shards: Vec<Shard>,
    shard_of: Vec<u32>,
    offset: Vec<u64>,
    len: Vec<u64>,
    /// The data offset of each sample's `.cls` member, [`NO_LABEL_MEMBER`] for none.
    label_offset: Vec<u64>,
    /// The data length of each sample's `.cls` member (at most [`MAX_CLS_BYTES`]).
    label_len: Vec<u8>,
    #[cfg(feature = "remote")]
    pub(crate) store: Option<std::sync::Arc<crate::remote::Store>>,
}

impl TarIndex {
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.shard_of.capacity() * 4
            + self.offset.capacity() * 8
            + self.len.capacity() * 8
            + self.label_offset.capacity() * 8
            + self.label_len.capacity()
            + self
                .shards
                .iter()
                .map(|s| s.name.len() + std::mem::size_of::<Shard>() + 64)
                .sum::<usize>()) as u64
    }

    /// `(shard, data offset, data length)` of sample `i`'s image.
    pub(crate) fn locate(&self, i: usize) -> (u32, u64, u64) {
        (self.shard_of[i], self.offset[i], self.len[i])
    }

    /// `(data offset, data length)` of sample `i`'s `.cls` member, if it has one.
    fn label_member(&self, i: usize) -> Option<(u64, u64)> {
        let at = self.label_offset[i];
        (at != NO_LABEL_MEMBER).then(|| (at, u64::from(self.label_len[i])))
    }

    /// `(shard, first byte, end)` of the data of sample `i`'s members (image and label),
    /// headers not included.
    pub(crate) fn span(&self, i: usize) -> (u32, u64, u64) {
        let (shard, offset, len) = self.locate(i);
        match self.label_member(i) {
            Some((at, n)) => (shard, offset.min(at), (offset + len).max(at + n)),
            None => (shard, offset, offset + len),
        }
    }

    pub(crate) fn stamp(&self, i: usize) -> (u64, u128) {
        let s = &self.shards[self.shard_of[i] as usize];
        (
            s.size ^ self.offset[i].rotate_left(32) ^ self.len[i],
            s.mtime,
        )
    }

    /// Reads sample `i`'s image bytes with one seek (or ranged request), checking its label
    /// member holds `label`. `name` names it in errors.
    pub(crate) fn read_member(
        &self,
        i: usize,
        label: u32,
        name: &Path,
        limit: u64,
    ) -> Result<Vec<u8>, Error> {
        let (_, _, len) = self.locate(i);
        if len > limit {
            return Err(too_large(name, len, limit));
        }
        let mut cursor = ShardCursor::default();
        let mut out = Vec::new();
        cursor.read(self, i, label, 0, name, &mut out)?;
        Ok(out)
    }
}

fn too_large(name: &Path, len: u64, limit: u64) -> Error {
    Error::decode(
        name,
        DecodeFailure(format!(
            "member is {len} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)"
        )),
    )
}

/// A forward-only reader over shards: keeps the current shard's stream open while the samples
/// asked for lie further on in it.
#[derive(Default)]
pub(crate) struct ShardCursor {
    current: Option<Open>,
    /// The last label member's bytes (kept: a sample's label is read without allocating).
    label_text: Vec<u8>,
}

struct Open {
    shard: u32,
    reader: Box<dyn Read + Send>,
    /// The byte offset in the shard the reader is at.
    pos: u64,
    /// Where the reader's range ends.
    end: u64,
}

/// The most bytes skipped by reading forward instead of starting a new stream (a new request,
/// for object storage).
const MAX_SKIP: u64 = 8 << 20;

impl ShardCursor {
    /// Reads sample `i`'s image bytes into `out` (cleared first), and checks on the way that
    /// its label member (if the index has one) holds `label`. `run_end` is where the run of
    /// samples being read ends in this shard: a new stream covers up to it.
    pub(crate) fn read(
        &mut self,
        index: &TarIndex,
        i: usize,
        label: u32,
        run_end: u64,
        name: &Path,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let (shard, offset, len) = index.locate(i);
        // The sample's members in shard order: the image (`true`) and its label.
        let mut members = [(offset, len, true), (0, 0, false)];
        let count = match index.label_member(i) {
            Some((at, n)) => {
                members[1] = (at, n, false);
                if at < offset {
                    members.swap(0, 1);
                }
                2
            }
            None => 1,
        };
        let members = &members[..count];
        let (_, first, last) = index.span(i);
        let changed = |at: u64, why: String| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{why} at byte {}: the shard is not what was indexed (rewritten since, or a stale .tar.idx sidecar: delete it or run `imagefeed shards` again)",
                    at.saturating_sub(BLOCK)
                ),
            )
        };
        if first < BLOCK {
            return Err(Error::io(
                name,
                changed(first, "no room for a tar header".into()),
            ));
        }
        // The members are read with one stream, unless they lie far apart (an image that is a
        // hard link to an earlier member): then each gets its own.
        let together = last - first <= MAX_SKIP;
        let text = &mut self.label_text;
        for &(offset, len, is_image) in members {
            let reusable = self.current.as_ref().is_some_and(|o| {
                o.shard == shard
                    && o.pos + BLOCK <= offset
                    && offset - o.pos <= MAX_SKIP
                    && offset + len <= o.end
            });
            if !reusable {
                self.current = None;
                // From the member's header on: it is checked against the index before the
                // data.
                let end = if together { last } else { offset + len };
                self.current = Some(open(index, shard, offset - BLOCK, run_end.max(end), name)?);
            }
            let Some(stream) = self.current.as_mut() else {
                return Err(Error::io(name, std::io::Error::other("no open shard")));
            };
            let into = if is_image { &mut *out } else { &mut *text };
            let result =
                read_next(stream, offset, len, into, changed).and_then(|()| {
                    match cls_label(text) {
                        _ if is_image => Ok(()),
                        Some(l) if l == label => Ok(()),
                        _ => Err(changed(
                            offset,
                            format!(
                                "the label member holds `{}`, the index says {label}",
                                String::from_utf8_lossy(text).trim().escape_debug()
                            ),
                        )),
                    }
                });
            if let Err(e) = result {
                self.current = None;
                // A stream from object storage that breaks is the store failing, not this
                // sample.
                let remote = !matches!(
                    index.shards[shard as usize].location,
                    ShardLocation::Local(_)
                );
                let data = matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
                );
                if remote && !data {
                    return Err(Error::remote(name, e));
                }
                return Err(Error::io(name, e));
            }
        }
        Ok(())
    }
}

/// Reads, from `stream`, the member whose `len` bytes of data start at `offset`: skips to its
/// header, checks it against `len`, and reads the data into `into` (cleared first). `changed`
/// makes the error for a shard that is not what was indexed.
fn read_next(
    stream: &mut Open,
    offset: u64,
    len: u64,
    into: &mut Vec<u8>,
    changed: impl Fn(u64, String) -> std::io::Error,
) -> std::io::Result<()> {
    let gap = offset - stream.pos;
    if gap < BLOCK {
        return Err(changed(
            offset,
            format!("members overlap: {gap} bytes between the previous member and this one"),
        ));
    }
    let skip = gap - BLOCK;
    let skipped = std::io::copy(&mut (&mut stream.reader).take(skip), &mut std::io::sink())?;
    stream.pos += skipped;
    let mut header = [0u8; BLOCK as usize];
    let mut got = 0;
    while got < header.len() {
        match stream.reader.read(&mut header[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.pos += got as u64;
    if skipped < skip || (got as u64) < BLOCK {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the shard ends before this member (was it truncated after indexing?)",
        ));
    }
    check_member_header(&header, len).map_err(|why| changed(offset, why))?;
    into.clear();
    into.try_reserve_exact(len as usize)
        .map_err(|_| std::io::Error::other("cannot allocate the member's bytes"))?;
    let got = (&mut stream.reader).take(len).read_to_end(into)?;
    stream.pos += got as u64;
    if (got as u64) < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the shard ends {got} bytes into this {len}-byte member"),
        ));
    }
    Ok(())
}

/// The label a `.cls` member's data holds: a list's label (`parse_label`) with white space
/// around it allowed (`echo 3 > a.cls` writes `3\n`).
fn cls_label(data: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(data).ok()?.trim();
    parse_label(text.as_bytes()).ok()
}

/// A tar block: headers are one block, data is padded to whole blocks.
const BLOCK: u64 = 512;

/// Checks that `block` is a tar header (valid checksum) of a regular file of `len` bytes: the
/// header the index says precedes the member.
fn check_member_header(block: &[u8; BLOCK as usize], len: u64) -> Result<(), String> {
    let octal = |field: &[u8]| -> Option<u64> {
        let text = std::str::from_utf8(field).ok()?;
        let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
        if text.is_empty() {
            return Some(0);
        }
        u64::from_str_radix(text, 8).ok()
    };
    let stored = octal(&block[148..156]).ok_or("no tar header (unreadable checksum)")?;
    let sum: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(b)
            }
        })
        .sum();
    if stored != sum {
        return Err("no tar header (checksum mismatch)".into());
    }
    if !matches!(block[156], b'0' | 0 | b'7') {
        return Err(format!(
            "the tar header is not a regular file's (type `{}`)",
            block[156].escape_ascii()
        ));
    }
    let size = if block[124] & 0x80 != 0 {
        // GNU base-256: big-endian in the remaining bytes.
        block[125..136].iter().fold(0u64, |n, &b| {
            n.saturating_mul(256).saturating_add(u64::from(b))
        })
    } else {
        octal(&block[124..136]).ok_or("the tar header's size is unreadable")?
    };
    if size != len {
        return Err(format!(
            "the tar header gives {size} bytes, the index {len}"
        ));
    }
    Ok(())
}

fn open(index: &TarIndex, shard: u32, start: u64, end: u64, name: &Path) -> Result<Open, Error> {
    let s = &index.shards[shard as usize];
    let reader: Box<dyn Read + Send> = match &s.location {
        ShardLocation::Local(path) => {
            let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
            f.seek(SeekFrom::Start(start))
                .map_err(|e| Error::io(path, e))?;
            Box::new(std::io::BufReader::with_capacity(256 << 10, f))
        }
        #[cfg(feature = "remote")]
        ShardLocation::Remote(key) => {
            let Some(store) = &index.store else {
                return Err(Error::io(
                    name,
                    std::io::Error::other("no store for a remote shard"),
                ));
            };
            Box::new(store.range_reader(key, start, end.min(s.size).max(start + 1))?)
        }
    };
    let _ = name;
    Ok(Open {
        shard,
        reader,
        pos: start,
        end,
    })
}

/// Longest member name accepted (Linux's PATH_MAX): a longer GNU long-name or PAX path would
/// be held in every error and index entry that names the member.
const MAX_MEMBER_NAME_BYTES: usize = 4096;

/// Largest extension header read (GNU long name or link, PAX records): real ones are a few
/// hundred bytes. They are read into memory, so a hostile shard's 1 GB "long name" is refused
/// by its size, before any of it is read.
const MAX_EXTENSION_BYTES: u64 = 64 * 1024;

/// What the extension headers before a member said about it.
#[derive(Default)]
struct Pending {
    /// The name from a GNU long-name header (which wins, as in GNU tar and the `tar` crate).
    long_name: Option<Vec<u8>>,
    /// The name and size from a PAX header.
    pax_path: Option<Vec<u8>>,
    pax_size: Option<u64>,
    /// A link's target from a GNU long-link header or a PAX `linkpath` (hard links to
    /// images are read as that image).
    long_link: Option<Vec<u8>>,
    pax_linkpath: Option<Vec<u8>>,
    /// Whether any extension header is waiting for its member.
    any: bool,
}

impl Pending {
    /// Reads one extension header `entry` (of type `kind`, member number `n`) into `self`.
    fn read<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        n: usize,
    ) -> Result<(), String> {
        if kind.is_pax_global_extensions() {
            // Global records say nothing about which samples there are: skipped unread.
            return Ok(());
        }
        let what = if kind.is_gnu_longname() {
            "GNU long-name"
        } else if kind.is_gnu_longlink() {
            "GNU long-link"
        } else {
            "PAX"
        };
        let size = entry.size();
        if size > MAX_EXTENSION_BYTES {
            return Err(format!(
                "member {n} is a {what} header of {size} bytes, over the {MAX_EXTENSION_BYTES}-byte limit"
            ));
        }
        let mut data = Vec::with_capacity(size as usize);
        entry
            .take(size)
            .read_to_end(&mut data)
            .map_err(|e| format!("member {n}, a {what} header: {e}"))?;
        let twice = if kind.is_gnu_longname() {
            self.long_name.is_some()
        } else if kind.is_gnu_longlink() {
            self.long_link.is_some()
        } else {
            self.pax_path.is_some() || self.pax_size.is_some() || self.pax_linkpath.is_some()
        };
        if twice {
            return Err(format!(
                "member {n}: two {what} headers describe one member"
            ));
        }
        self.any = true;
        if kind.is_gnu_longname() || kind.is_gnu_longlink() {
            while data.last() == Some(&0) {
                data.pop();
            }
            if kind.is_gnu_longname() {
                self.long_name = Some(data);
            } else {
                self.long_link = Some(data);
            }
            return Ok(());
        }
        for record in tar::PaxExtensions::new(&data) {
            let record = record.map_err(|e| format!("member {n}, a PAX header: {e}"))?;
            match record.key_bytes() {
                b"path" => self.pax_path = Some(record.value_bytes().to_vec()),
                b"linkpath" => self.pax_linkpath = Some(record.value_bytes().to_vec()),
                b"size" => {
                    let size = record
                        .value()
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .ok_or_else(|| format!("member {n}: PAX size is not a number"))?;
                    self.pax_size = Some(size);
                }
                _ => {}
            }
        }
        Ok(())
    }
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

/// A reader that keeps the first bytes read through it: a shard that fails to index is told
/// apart as a compressed file by its magic number, instead of by the tar reader's complaint
/// about a header checksum made of compressed bytes.
struct Head<R> {
    inner: R,
    head: [u8; 6],
    len: usize,
}

impl<R> Head<R> {
    fn new(inner: R) -> Self {
        Head {
            inner,
            head: [0; 6],
            len: 0,
        }
    }

    /// `e`, or, for a shard that starts like a compressed file, an error that says so.
    fn explain(&self, e: Error, name: &str) -> Error {
        match compression_of(&self.head[..self.len]) {
            Some((kind, tool)) => Error::source(
                name,
                format!(
                    "a {kind}-compressed file, not a tar archive: decompress it (`{tool}`); \
                     shards are read as plain tar, a member at a time"
                ),
            ),
            None => e,
        }
    }
}

impl<R: Read> Read for Head<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let keep = (self.head.len() - self.len).min(n);
        self.head[self.len..self.len + keep].copy_from_slice(&buf[..keep]);
        self.len += keep;
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Head<R> {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// One sample found while indexing a shard.
#[derive(Debug)]
struct Found {
    member: String,
    offset: u64,
    len: u64,
    label: Option<u32>,
    /// Where its `.cls` member's data lies (offset, length).
    label_at: Option<(u64, u64)>,
}

/// Samples of one shard, in member order.
fn index_shard<R: Read>(
    entries: tar::Entries<'_, R>,
    shard_name: &str,
    shard_size: u64,
) -> Result<Vec<Found>, Error> {
    let damaged = |what: String| Error::source(shard_name, what);
    let mut out: Vec<Found> = Vec::new();
    // The sample being assembled: its key, image (member, offset, length) and label (`.cls`
    // member, value).
    let mut key: Option<String> = None;
    let mut image: Option<(String, u64, u64)> = None;
    let mut label: Option<(String, u32, u64, u64)> = None;
    // Image members by name, for hard links to them: made at the first hard link.
    let mut linkable: Option<HashMap<String, (u64, u64)>> = None;
    let flush = |key: &mut Option<String>,
                 image: &mut Option<(String, u64, u64)>,
                 label: &mut Option<(String, u32, u64, u64)>,
                 out: &mut Vec<Found>|
     -> Result<(), Error> {
        match (image.take(), label.take()) {
            (Some((member, offset, len)), label) => out.push(Found {
                member,
                offset,
                len,
                label: label.as_ref().map(|l| l.1),
                label_at: label.map(|l| (l.2, l.3)),
            }),
            (None, Some((cls, ..))) => {
                // A label whose image is not beside it: WebDataset groups a sample's members
                // by consecutive key, so it would be dropped and its image left unlabeled.
                return Err(damaged(format!(
                    "`{cls}` has no image beside it: a sample's members must be adjacent in \
                     the shard, as WebDataset reads them (`tar cf x.tar *.jpg *.cls` puts every \
                     image before every label; `imagefeed shards` writes samples in order)"
                )));
            }
            (None, None) => {}
        }
        *key = None;
        Ok(())
    };
    // Raw entries: the `tar` crate would read GNU long names and PAX headers whole, however
    // large, before handing over the member they describe. They are read here, size-checked.
    let mut pending = Pending::default();
    // Where the header after the last member read starts: the reader stops there at an
    // end-of-archive (zero) block, or at the end of the file.
    let (mut next_header, mut members) = (0u64, 0usize);
    for (n, entry) in entries.raw(true).enumerate() {
        let mut entry = entry
            .map_err(|e| damaged(format!("not a valid tar archive (after {n} members): {e}")))?;
        members = n + 1;
        next_header = entry
            .raw_file_position()
            .saturating_add(entry.size())
            .div_ceil(BLOCK)
            .saturating_mul(BLOCK);
        let header = entry.header();
        let kind = header.entry_type();
        let recognized = header.as_gnu().is_some() || header.as_ustar().is_some();
        if recognized
            && (kind.is_gnu_longname()
                || kind.is_gnu_longlink()
                || kind.is_pax_local_extensions()
                || kind.is_pax_global_extensions())
        {
            pending.read(&mut entry, kind, n + 1).map_err(damaged)?;
            continue;
        }
        let ext = std::mem::take(&mut pending);
        if let Some(size) = ext.pax_size.filter(|&s| s != entry.size()) {
            // GNU tar would skip `size` bytes and this reader the header's, whatever the
            // member's type: refuse rather than pick one (two parsers disagreeing on where the
            // next header is is how hostile archives hide members).
            return Err(damaged(format!(
                "member {}: its PAX size ({size}) disagrees with its header's ({})",
                n + 1,
                entry.size()
            )));
        }
        if kind.is_gnu_sparse() && header.as_gnu().is_some_and(|g| g.is_extended()) {
            // Its sparse map continues in extra blocks after the header, which raw entries do
            // not skip: refuse it by name rather than misread what follows.
            return Err(damaged(format!(
                "member {} (`{}`) is a GNU sparse file with an extended sparse map; shards hold plain files",
                n + 1,
                crate::source::shown(&header.path_bytes())
            )));
        }
        let hard_link = kind == tar::EntryType::Link;
        let symlink = kind == tar::EntryType::Symlink;
        if !kind.is_file() && !hard_link && !symlink {
            continue;
        }
        let link_target = match ext.long_link.or(ext.pax_linkpath) {
            Some(target) => Some(target),
            None if hard_link || symlink => header.link_name_bytes().map(|t| t.into_owned()),
            None => None,
        };
        let name = match ext.long_name.or(ext.pax_path) {
            Some(name) => std::borrow::Cow::Owned(name),
            None => entry.path_bytes(),
        };
        if name.len() > MAX_MEMBER_NAME_BYTES {
            let start: String = String::from_utf8_lossy(&name[..120])
                .chars()
                .take(120)
                .collect();
            return Err(damaged(format!(
                "member {}'s name is {} bytes long, over the {MAX_MEMBER_NAME_BYTES}-byte limit (`{start}...`)",
                n + 1,
                name.len()
            )));
        }
        let member = String::from_utf8_lossy(&name).into_owned();
        let (member_key, ext) = split_member(&member);
        let is_image = IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(ext));
        let is_cls = ext.eq_ignore_ascii_case("cls");
        if !kind.is_file() && !is_image && !is_cls {
            continue; // a link to something that is not part of a sample
        }
        let (offset, len) = if symlink {
            return Err(damaged(format!(
                "`{member}` is a symbolic link; a shard holds its samples' files (pack with \
                 `tar --dereference`)"
            )));
        } else if hard_link {
            let target =
                String::from_utf8_lossy(link_target.as_deref().unwrap_or_default()).into_owned();
            if is_cls {
                return Err(damaged(format!(
                    "`{member}` is a hard link to `{target}`; a label must be stored in its \
                     member (pack with `tar --hard-dereference`)"
                )));
            }
            let map = linkable.get_or_insert_with(|| {
                out.iter()
                    .map(|f| (f.member.clone(), (f.offset, f.len)))
                    .chain(image.iter().map(|(m, o, l)| (m.clone(), (*o, *l))))
                    .collect()
            });
            *map.get(&target).ok_or_else(|| {
                damaged(format!(
                    "`{member}` is a hard link to `{target}`, which is not an earlier image \
                     member of this shard"
                ))
            })?
        } else {
            let len = entry.size();
            let offset = entry.raw_file_position();
            if offset.checked_add(len).is_none_or(|end| end > shard_size) {
                return Err(damaged(format!(
                    "truncated: member `{member}` needs bytes {offset}..{} but the shard has {shard_size}",
                    offset.saturating_add(len)
                )));
            }
            (offset, len)
        };
        if key.as_deref() != Some(member_key) {
            flush(&mut key, &mut image, &mut label, &mut out)?;
            key = Some(member_key.to_string());
        }
        if is_image {
            if let Some((first, ..)) = &image {
                return Err(damaged(format!(
                    "sample `{member_key}` has two images, `{first}` and `{member}`"
                )));
            }
            if let Some(map) = &mut linkable {
                map.insert(member.clone(), (offset, len));
            }
            image = Some((member, offset, len));
        } else if is_cls {
            if let Some((first, ..)) = &label {
                return Err(damaged(format!(
                    "sample `{member_key}` has two labels, `{first}` and `{member}`"
                )));
            }
            if len > MAX_CLS_BYTES {
                return Err(damaged(format!(
                    "`{member}` is {len} bytes; a label is a decimal number"
                )));
            }
            let mut text = String::new();
            (&mut entry)
                .take(MAX_CLS_BYTES)
                .read_to_string(&mut text)
                .map_err(|e| damaged(format!("`{member}`: {e}")))?;
            // The rule the reader checks labels by (`cls_label`).
            let parsed = cls_label(text.as_bytes()).ok_or_else(|| {
                damaged(format!(
                    "`{member}` holds `{}`, not a label (a non-negative integer below 2^32)",
                    text.trim().escape_debug()
                ))
            })?;
            label = Some((member, parsed, offset, len));
        }
    }
    if pending.any {
        return Err(damaged(
            "the archive ends after an extension header, without the member it describes".into(),
        ));
    }
    // A shard cut at a member's end (or in its padding) reads as a shorter, valid-looking
    // archive: only the missing end-of-archive block tells. Copies and downloads cut short
    // at a block or page boundary are common, and would silently lose the rest of the shard.
    if next_header.saturating_add(BLOCK) > shard_size {
        return Err(damaged(if members == 0 {
            format!("truncated: {shard_size} bytes, not even one tar header")
        } else {
            format!(
                "truncated: the file ends at byte {shard_size}, but its {members} member(s) and                  their padding run to byte {next_header}, where the next member or the                  end-of-archive block must follow (a copy or download cut short?)"
            )
        }));
    }
    flush(&mut key, &mut image, &mut label, &mut out)?;
    // A key met again further on is a second sample under the same name, perhaps with another
    // label (a file list refuses a path listed twice with two labels): refuse it by name.
    let mut keys: Vec<(&str, usize)> = out
        .iter()
        .enumerate()
        .map(|(i, f)| (split_member(&f.member).0, i))
        .collect();
    keys.sort_unstable();
    if let Some(w) = keys.windows(2).find(|w| w[0].0 == w[1].0) {
        let (first, again) = (&out[w[0].1], &out[w[1].1]);
        return Err(damaged(format!(
            "sample `{}` appears twice, as `{}` (byte {}) and again as `{}` (byte {}):              each key names one sample",
            w[0].0, first.member, first.offset, again.member, again.offset
        )));
    }
    Ok(out)
}

/// Indexes an in-memory shard (the `index_tar` fuzz target): the number of samples.
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<usize, Error> {
    let mut archive = tar::Archive::new(std::io::Cursor::new(bytes));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| Error::io("fuzz.tar", e))?;
    index_shard(entries, "fuzz.tar", bytes.len() as u64).map(|f| f.len())
}

/// `("dir/KEY", "ext")` for `dir/KEY.ext`: the key is the path up to the first `.` of the
/// file name (WebDataset's rule), the extension the rest.
fn split_member(member: &str) -> (&str, &str) {
    let name_start = member.rfind('/').map_or(0, |i| i + 1);
    match member[name_start..].find('.') {
        Some(dot) => (&member[..name_start + dot], &member[name_start + dot + 1..]),
        None => (member, ""),
    }
}

/// Indexes shards in parallel (`index_one(k)` indexes shard `k`) and assembles the source.
fn assemble(
    mut shards: Vec<Shard>,
    base: PathBuf,
    origin: PathBuf,
    index_one: impl Fn(usize) -> Result<Vec<Found>, Error> + Sync,
    #[cfg(feature = "remote")] store: Option<std::sync::Arc<crate::remote::Store>>,
) -> Result<Source, Error> {
    if shards.is_empty() {
        return Err(Error::source(origin, "no tar shards"));
    }
    type Slot = Mutex<Option<Result<Vec<Found>, Error>>>;
    let results: Vec<Slot> = shards.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..INDEX_THREADS.min(shards.len()) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= results.len() {
                    break;
                }
                let r = index_one(k);
                let failed = r.is_err();
                *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                if failed {
                    next.store(results.len(), Ordering::Relaxed);
                }
            });
        }
    });
    let mut file_index = FileIndex::with_origin(origin.clone(), base.clone());
    let (mut shard_of, mut offset, mut len) = (Vec::new(), Vec::new(), Vec::new());
    let (mut label_offset, mut label_len) = (Vec::new(), Vec::new());
    let mut labels: Vec<Option<u32>> = Vec::new();
    let mut names: Vec<(usize, String)> = Vec::new();
    for (k, slot) in results.into_iter().enumerate() {
        let found = match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(r) => r?,
            None => continue, // not reached: an earlier shard failed and returned above
        };
        let first = shard_of.len();
        let rel_shard = relative_name(&shards[k].name, &base);
        for f in found {
            let mut name = rel_shard.clone();
            name.push('[');
            name.push_str(&f.member);
            name.push(']');
            file_index.push(name.as_bytes(), 0);
            shard_of.push(k as u32);
            offset.push(f.offset);
            len.push(f.len);
            let (at, n) = f.label_at.unwrap_or((NO_LABEL_MEMBER, 0));
            label_offset.push(at);
            // (At most MAX_CLS_BYTES: indexing and sidecars refuse longer label members.)
            label_len.push(n.min(MAX_CLS_BYTES) as u8);
            if f.label.is_none() {
                names.push((shard_of.len() - 1, f.member.clone()));
            }
            labels.push(f.label);
        }
        if shard_of.len() > u32::MAX as usize {
            return Err(Error::source(origin, "more than 2^32-1 samples"));
        }
        shards[k].first = first as u32;
        shards[k].count = (shard_of.len() - first) as u32;
    }
    if shard_of.is_empty() {
        return Err(Error::source(
            origin,
            "the shards hold no image member (KEY.jpg, KEY.jpeg or KEY.png)",
        ));
    }
    let labeled = labels.iter().filter(|l| l.is_some()).count();
    if labeled == 0 {
        log::warn!(
            "{}: no sample has a KEY.cls member: every label is 0",
            origin.display()
        );
    } else if labeled < labels.len() {
        let (i, member) = &names[0];
        return Err(Error::source(
            &shards[shard_of[*i] as usize].name,
            format!(
                "`{member}` has no .cls label, while {labeled} of {} samples have one",
                labels.len()
            ),
        ));
    }
    let mut index = FileIndex::with_origin(origin, base);
    for (i, l) in labels.iter().enumerate() {
        index.push(file_index.raw_path(i), l.unwrap_or(0));
    }
    index.shrink();
    shard_of.shrink_to_fit();
    offset.shrink_to_fit();
    len.shrink_to_fit();
    label_offset.shrink_to_fit();
    label_len.shrink_to_fit();
    let tar = TarIndex {
        shards,
        shard_of,
        offset,
        len,
        label_offset,
        label_len,
        #[cfg(feature = "remote")]
        store,
    };
    Ok(Source {
        index,
        backing: Backing::Tar(std::sync::Arc::new(tar)),
    })
}

fn relative_name(name: &str, base: &Path) -> String {
    let b = base.to_string_lossy();
    if b.is_empty() {
        return name.to_string();
    }
    name.strip_prefix(&*b)
        .map(|r| r.trim_start_matches('/').to_string())
        .unwrap_or_else(|| name.to_string())
}

/// Indexes local shards.
pub(crate) fn index_local(paths: &[PathBuf]) -> Result<Source, Error> {
    let mut shards = Vec::with_capacity(paths.len());
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if !meta.is_file() {
            return Err(Error::io(
                p,
                std::io::Error::other("is not a regular file (expected a .tar shard)"),
            ));
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        shards.push(Shard {
            location: ShardLocation::Local(p.clone()),
            name: p.to_string_lossy().into_owned(),
            size: meta.len(),
            mtime,
            first: 0,
            count: 0,
        });
    }
    let parent = |p: &PathBuf| p.parent().map(Path::to_path_buf).unwrap_or_default();
    let base = match paths.first() {
        Some(first) if paths.iter().all(|p| parent(p) == parent(first)) => parent(first),
        _ => PathBuf::new(),
    };
    let origin = if paths.len() == 1 {
        paths[0].clone()
    } else {
        base.clone()
    };
    let sizes: Vec<u64> = shards.iter().map(|s| s.size).collect();
    assemble(
        shards,
        base,
        origin,
        |k| {
            let p = &paths[k];
            let f = std::fs::File::open(p).map_err(|e| Error::io(p, e))?;
            let mut archive = tar::Archive::new(std::io::BufReader::new(Head::new(f)));
            let entries = archive.entries_with_seek().map_err(|e| Error::io(p, e))?;
            let name = p.to_string_lossy();
            index_shard(entries, &name, sizes[k])
                .map_err(|e| archive.into_inner().get_ref().explain(e, &name))
        },
        #[cfg(feature = "remote")]
        None,
    )
}

/// Opens a source in object storage (see [`Source::from_url_with`]).
#[cfg(feature = "remote")]
pub(crate) fn open_remote(
    url: &str,
    options: crate::source::RemoteOptions,
) -> Result<Source, Error> {
    use std::sync::Arc;

    use crate::remote::Store;
    use crate::source::{join_key, ObjectIndex};

    let (store, key) = Store::connect(url, options)?;
    let store = Arc::new(store);
    let shard = |key: String, size: u64, mtime: i64| Shard {
        name: store.url_of(&key),
        location: ShardLocation::Remote(key),
        size,
        mtime: mtime as u128,
        first: 0,
        count: 0,
    };
    let remote_shards = |shards: Vec<Shard>, base: String, sidecars: Vec<bool>| {
        let sizes: Vec<(String, u64, String)> = shards
            .iter()
            .map(|s| match &s.location {
                ShardLocation::Remote(k) => (k.clone(), s.size, s.name.clone()),
                ShardLocation::Local(_) => (String::new(), 0, s.name.clone()),
            })
            .collect();
        let st = store.clone();
        assemble(
            shards,
            PathBuf::from(store.url_of(&base)),
            PathBuf::from(url),
            move |k| {
                let (key, size, name) = &sizes[k];
                if *size == 0 {
                    return Err(Error::source(name, "empty object: not a tar shard"));
                }
                // A sidecar index written by `imagefeed shards`: a few kilobytes instead of
                // the whole shard. One that does not match the shard is ignored.
                if sidecars[k] {
                    let idx = sidecar_name(key);
                    match st
                        .get(&idx, 64 << 20)
                        .map_err(|e| e.to_string())
                        .and_then(|d| parse_sidecar(&d, *size))
                    {
                        Ok(found) => return Ok(found),
                        Err(why) => log::warn!(
                            "{}: ignoring the index ({why}); reading the shard to index it",
                            st.url_of(&idx)
                        ),
                    }
                }
                let reader = st.range_reader(key, 0, *size)?;
                let mut archive = tar::Archive::new(std::io::BufReader::new(Head::new(reader)));
                let entries = archive.entries().map_err(|e| Error::io(name, e))?;
                index_shard(entries, name, *size)
                    .map_err(|e| archive.into_inner().get_ref().explain(e, name))
            },
            Some(store.clone()),
        )
    };
    if is_tar_name(&key) {
        let (size, mtime) = store.head(&key)?;
        let sidecar = store.head(&sidecar_name(&key)).is_ok();
        return remote_shards(
            vec![shard(key.clone(), size, mtime)],
            parent_key(&key),
            vec![sidecar],
        );
    }
    if key.to_ascii_lowercase().ends_with(".txt") {
        let parent = parent_key(&key);
        let (list, base) = (Path::new(url), PathBuf::from(store.url_of(&parent)));
        // Streamed and parsed a line at a time, as a local list is.
        let (size, _) = store.head(&key)?;
        let index = if size == 0 {
            crate::source::parse_list(list, base, &[])?
        } else {
            let reader = store.range_reader(&key, 0, size)?;
            let reader = std::io::BufReader::with_capacity(64 << 10, reader);
            crate::source::parse_list_from(list, base, reader, size)?
        };
        let stamps = vec![(0, 0); index.len()];
        return Ok(Source {
            index,
            backing: Backing::Objects(Arc::new(ObjectIndex {
                store: store.clone(),
                prefix: parent,
                stamps,
            })),
        });
    }
    let listed = store.list(&key)?;
    let tars: Vec<_> = listed.iter().filter(|o| is_tar_name(&o.key)).collect();
    // Shards beside class "folders" of images, as for a local folder: reading either would
    // drop the other's samples or labels without a word.
    let class_image = listed.iter().find(|o| {
        o.key.contains('/')
            && crate::source::has_image_extension(Path::new(&o.key))
            && !o.key.split('/').any(|c| c.starts_with('.'))
    });
    if let (Some(tar), Some(image)) = (tars.first(), class_image) {
        return Err(Error::source(
            url,
            format!(
                "holds both tar shards ({}{}) and class folders of images ({}): move one kind to \
                 another prefix",
                tar.key,
                if tars.len() > 1 { ", ..." } else { "" },
                image.key
            ),
        ));
    }
    if !tars.is_empty() {
        let keys: std::collections::HashSet<&str> = listed.iter().map(|o| o.key.as_str()).collect();
        let sidecars = tars
            .iter()
            .map(|o| keys.contains(sidecar_name(&o.key).as_str()))
            .collect();
        let shards = tars
            .into_iter()
            .map(|o| shard(join_key(&key, &o.key), o.size, o.mtime))
            .collect();
        return remote_shards(shards, key.clone(), sidecars);
    }
    // Images: class "folders" (first key component) when there are any.
    let images: Vec<_> = listed
        .iter()
        .filter(|o| crate::source::has_image_extension(Path::new(&o.key)))
        .filter(|o| !o.key.split('/').any(|c| c.starts_with('.')))
        .collect();
    if images.is_empty() {
        return Err(Error::source(
            url,
            format!(
                "no .tar, .jpg, .jpeg or .png object under this prefix ({} objects listed)",
                listed.len()
            ),
        ));
    }
    let in_classes = images.iter().filter(|o| o.key.contains('/')).count();
    let mut classes: Vec<&str> = images
        .iter()
        .filter_map(|o| o.key.split_once('/').map(|(c, _)| c))
        .collect();
    classes.sort_unstable();
    classes.dedup();
    let mut index = FileIndex::with_origin(PathBuf::from(url), PathBuf::from(store.url_of(&key)));
    let mut stamps = Vec::with_capacity(images.len());
    if in_classes > 0 {
        if in_classes < images.len() {
            log::warn!(
                "{url}: {} image(s) directly under the prefix are ignored: the others are in class folders",
                images.len() - in_classes
            );
        }
        for o in images.iter().filter(|o| o.key.contains('/')) {
            let class = o.key.split('/').next().unwrap_or_default();
            let label = classes.binary_search(&class).unwrap_or(0) as u32;
            index.push(o.key.as_bytes(), label);
            stamps.push((o.size, o.mtime));
        }
        index.class_names = Some(classes.iter().map(|c| c.to_string()).collect());
    } else {
        for o in &images {
            index.push(o.key.as_bytes(), 0);
            stamps.push((o.size, o.mtime));
        }
    }
    crate::source::check_count(&index)?;
    index.shrink();
    Ok(Source {
        index,
        backing: Backing::Objects(Arc::new(ObjectIndex {
            store,
            prefix: key,
            stamps,
        })),
    })
}

#[cfg(feature = "remote")]
fn parent_key(key: &str) -> String {
    key.rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

/// What [`write_shards`] wrote.
#[derive(Debug, Clone)]
pub struct ShardsWritten {
    /// The shard files, in order.
    pub shards: Vec<PathBuf>,
    /// Samples written.
    pub samples: u64,
    /// Image bytes written (without tar headers and labels).
    pub bytes: u64,
}

/// Writes `source` as tar shards in the WebDataset layout into `out_dir` (created if
/// missing): `shard-000000.tar`, `shard-000001.tar`, … of `shard_size` samples each. Sample
/// `i` of the source (in a seeded random order when `shuffle_seed` is given, which a shuffle
/// buffer of a few shards then mixes well; in source order otherwise) becomes the members
/// `KKKKKKKKK.jpg` (the original bytes, with the original extension) and `KKKKKKKKK.cls` (its
/// label), where `KKKKKKKKK` is `i`, zero-padded: a key always leads back to the source's
/// sample.
///
/// Each shard is written to `NAME.partial` and renamed when complete, so a shard file is
/// never half-written. Existing shards are never overwritten: `out_dir` must not hold any
/// `shard-*.tar` file.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{write_shards, Source};
/// let source = Source::from_dir("testdata/classes")?;
/// let out = tempfile::tempdir().unwrap();
/// let written = write_shards(&source, out.path(), 4, Some(0))?;
/// assert_eq!(written.samples as usize, source.len());
/// let shards = Source::open(out.path())?;
/// assert_eq!(shards.len(), source.len());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a `shard_size` of 0,
/// [`ErrorKind::Source`](crate::ErrorKind::Source) if `out_dir` already holds shards, and the
/// error naming the sample or shard file when a sample cannot be read or a shard written (the
/// shard being written is removed; the complete ones stay).
pub fn write_shards(
    source: &Source,
    out_dir: impl AsRef<Path>,
    shard_size: usize,
    shuffle_seed: Option<u64>,
) -> Result<ShardsWritten, Error> {
    let out_dir = out_dir.as_ref();
    if shard_size == 0 {
        return Err(Error::config("shard_size", "must be at least 1"));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    for entry in std::fs::read_dir(out_dir).map_err(|e| Error::io(out_dir, e))? {
        let entry = entry.map_err(|e| Error::io(out_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = is_tar_name(&name)
            || [".tar.partial", ".tar.idx", ".tar.idx.partial"]
                .iter()
                .any(|suffix| name.ends_with(suffix));
        if name.starts_with("shard-") && ours {
            return Err(Error::source(
                out_dir,
                format!("already holds shards (`{name}`); choose an empty folder"),
            ));
        }
    }
    let n = source.len();
    let order: Vec<u32> = match shuffle_seed {
        Some(seed) => crate::rng::permutation(
            n as u32,
            &mut crate::rng::Rng::for_stage(seed, 0, crate::rng::STAGE_PERMUTATION),
        ),
        None => (0..n as u32).collect(),
    };
    let limit = 256u64 << 20;
    let mut written = ShardsWritten {
        shards: Vec::new(),
        samples: 0,
        bytes: 0,
    };
    for (k, chunk) in order.chunks(shard_size).enumerate() {
        let final_path = out_dir.join(format!("shard-{k:06}.tar"));
        let partial = out_dir.join(format!("shard-{k:06}.tar.partial"));
        let result = (|| -> Result<(u64, Vec<Found>), Error> {
            let file = std::fs::File::create(&partial).map_err(|e| Error::io(&partial, e))?;
            let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
            let mut bytes = 0u64;
            // Where each image's data lands: one 512-byte ustar header, then the data padded
            // to 512 bytes (names are short: no extension headers).
            let mut at = 0u64;
            let mut found = Vec::with_capacity(chunk.len());
            let block = |n: u64| n.div_ceil(512) * 512;
            for &i in chunk {
                let i = i as usize;
                let data = source.read_sample(i, limit)?;
                let ext = sample_extension(source, i, &data);
                let key = format!("{i:09}");
                let member = format!("{key}.{ext}");
                append(&mut builder, &member, &data, &partial)?;
                let label = source.index.label(i);
                let text = label.to_string();
                let image_at = at + 512;
                at += 512 + block(data.len() as u64);
                found.push(Found {
                    member,
                    offset: image_at,
                    len: data.len() as u64,
                    label: Some(label),
                    label_at: Some((at + 512, text.len() as u64)),
                });
                append(
                    &mut builder,
                    &format!("{key}.cls"),
                    text.as_bytes(),
                    &partial,
                )?;
                at += 512 + block(text.len() as u64);
                bytes += data.len() as u64;
            }
            let inner = builder.into_inner().map_err(|e| Error::io(&partial, e))?;
            let file = inner
                .into_inner()
                .map_err(|e| Error::io(&partial, e.into_error()))?;
            file.sync_all().map_err(|e| Error::io(&partial, e))?;
            Ok((bytes, found))
        })();
        match result {
            Ok((bytes, found)) => {
                std::fs::rename(&partial, &final_path).map_err(|e| Error::io(&final_path, e))?;
                write_sidecar(&final_path, &found)?;
                written.samples += chunk.len() as u64;
                written.bytes += bytes;
                written.shards.push(final_path);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        }
    }
    Ok(written)
}

/// The sidecar index of a shard: `NAME.tar.idx` next to `NAME.tar`.
fn sidecar_name(shard: &str) -> String {
    format!("{shard}.idx")
}

/// The first word of a sidecar index. Version 2 added where each label member lies; a
/// version 1 sidecar is ignored (the shard is indexed by reading it), with a warning.
const SIDECAR_MAGIC: &str = "imagefeed-tar-index-v2";

/// A sidecar line's label columns: `LABEL\tOFFSET\tLENGTH` of the `.cls` member, or
/// `-\t-\t-`.
fn sidecar_label(f: &Found) -> String {
    match (f.label, f.label_at) {
        (Some(l), Some((at, n))) => format!("{l}\t{at}\t{n}"),
        _ => "-\t-\t-".to_string(),
    }
}

/// Writes `SHARD.idx`: what indexing `shard` would find, so that opening it in object
/// storage reads a few kilobytes instead of the whole shard. Written only if it matches what
/// indexing the shard finds (checked now, seeking over the data).
fn write_sidecar(shard: &Path, found: &[Found]) -> Result<(), Error> {
    use std::io::Write;
    let size = std::fs::metadata(shard)
        .map_err(|e| Error::io(shard, e))?
        .len();
    let name = sidecar_name(&shard.to_string_lossy());
    let path = PathBuf::from(&name);
    let mut text = format!("{SIDECAR_MAGIC} size={size} samples={}\n", found.len());
    for f in found {
        let label = sidecar_label(f);
        text.push_str(&format!("{}\t{}\t{label}\t{}\n", f.offset, f.len, f.member));
    }
    // Write it only if it says what indexing the shard finds (and parses back).
    let f = std::fs::File::open(shard).map_err(|e| Error::io(shard, e))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(f));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| Error::io(shard, e))?;
    // (A shard that does not index back gets no sidecar; opening it will say what is wrong.)
    let indexed = index_shard(entries, &shard.to_string_lossy(), size).unwrap_or_default();
    let same = |a: &[Found], b: &[Found]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                (x.offset, x.len, x.label, x.label_at, &x.member)
                    == (y.offset, y.len, y.label, y.label_at, &y.member)
            })
    };
    let parsed = parse_sidecar(text.as_bytes(), size).unwrap_or_default();
    if !same(&indexed, found) || !same(&parsed, found) {
        log::warn!(
            "{}: not writing a sidecar index that would not match",
            shard.display()
        );
        return Ok(());
    }
    let partial = PathBuf::from(format!("{name}.partial"));
    let written = std::fs::File::create(&partial).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    written
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            Error::io(&path, e)
        })
}

/// Parses a sidecar index for a shard of `size` bytes.
fn parse_sidecar(data: &[u8], size: u64) -> Result<Vec<Found>, String> {
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    let mut words = head.split(' ');
    match words.next() {
        Some(SIDECAR_MAGIC) => {}
        Some(w) if w.starts_with("imagefeed-tar-index-v") => {
            return Err(format!(
                "`{}`, an older format without the label members' places: run `imagefeed shards` again to rewrite it",
                w.escape_debug()
            ))
        }
        _ => return Err("not an imagefeed tar index".into()),
    }
    let field = |w: Option<&str>, key: &str| -> Result<u64, String> {
        w.and_then(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad header field {key}"))
    };
    let indexed_size = field(words.next(), "size=")?;
    let samples = field(words.next(), "samples=")?;
    if indexed_size != size {
        return Err(format!(
            "made for a {indexed_size}-byte shard, the shard has {size} bytes"
        ));
    }
    let mut out = Vec::new();
    let mut end = 0u64;
    for (n, line) in lines.enumerate() {
        let bad = || format!("line {}: malformed", n + 2);
        let mut parts = line.splitn(6, '\t');
        let mut number =
            || -> Result<u64, String> { parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad) };
        let (offset, len) = (number()?, number()?);
        let (label, label_at) = match (parts.next(), parts.next(), parts.next()) {
            (Some("-"), Some("-"), Some("-")) => (None, None),
            (Some(l), Some(at), Some(n)) => {
                let l = l.parse::<u32>().map_err(|_| bad())?;
                let at = at.parse::<u64>().map_err(|_| bad())?;
                let n = n.parse::<u64>().map_err(|_| bad())?;
                (Some(l), Some((at, n)))
            }
            _ => return Err(bad()),
        };
        let member = parts.next().ok_or_else(bad)?;
        if member.len() > MAX_MEMBER_NAME_BYTES {
            return Err(format!(
                "line {}: a member name of {} bytes (at most {MAX_MEMBER_NAME_BYTES})",
                n + 2,
                member.len()
            ));
        }
        let member = member.to_string();
        // Samples lie in order, each member after a header, within the shard.
        let out_of_place = || format!("line {}: member `{member}` out of place", n + 2);
        let image_end = offset.checked_add(len).ok_or_else(out_of_place)?;
        if offset < end + BLOCK || image_end > size {
            return Err(out_of_place());
        }
        if let Some((at, bytes)) = label_at {
            let label_end = at.checked_add(bytes).ok_or_else(out_of_place)?;
            let apart = at >= image_end + BLOCK || label_end + BLOCK <= offset;
            if bytes > MAX_CLS_BYTES || at < end + BLOCK || !apart || label_end > size {
                return Err(format!(
                    "line {}: the label member of `{member}` is out of place",
                    n + 2
                ));
            }
            end = image_end.max(label_end);
        } else {
            end = image_end;
        }
        out.push(Found {
            member,
            offset,
            len,
            label,
            label_at,
        });
    }
    if out.len() as u64 != samples {
        return Err(format!(
            "{} samples listed, the header says {samples}",
            out.len()
        ));
    }
    Ok(out)
}

fn append<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    name: &str,
    data: &[u8],
    shard: &Path,
) -> Result<(), Error> {
    let mut header = tar::Header::new_ustar();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    builder
        .append_data(&mut header, name, data)
        .map_err(|e| Error::io(shard, e))
}

/// The extension a sample's image member gets: the source file's (lower-cased) if it is an
/// image extension, else from the bytes' signature.
fn sample_extension(source: &Source, i: usize, data: &[u8]) -> &'static str {
    let raw = String::from_utf8_lossy(source.index.raw_path(i)).to_ascii_lowercase();
    for &ext in IMAGE_EXTENSIONS {
        if raw.ends_with(&format!(".{ext}")) {
            return ext;
        }
    }
    if data.starts_with(b"\x89PNG") {
        "png"
    } else {
        "jpg"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_names_are_told_by_their_bytes() {
        assert!(is_tar_name("a.TAR") && is_tar_name("数据.tar"));
        // Cutting `len - 4` bytes inside a character panicked on names like these.
        for name in ["说明", "猫咪", "x说", ".tar", "tar"] {
            assert!(!is_tar_name(name), "{name}");
        }
    }

    #[test]
    fn member_keys_follow_webdataset() {
        assert_eq!(split_member("a/b/000012.jpg"), ("a/b/000012", "jpg"));
        assert_eq!(split_member("x.seg.png"), ("x", "seg.png"));
        assert_eq!(split_member("dir.v2/k.cls"), ("dir.v2/k", "cls"));
        assert_eq!(split_member("noext"), ("noext", ""));
    }

    #[test]
    fn member_headers_are_checked_for_checksum_type_and_size() {
        let header = |size: u64, kind: tar::EntryType, gnu: bool| {
            let mut h = if gnu {
                tar::Header::new_gnu()
            } else {
                tar::Header::new_ustar()
            };
            h.set_path("k.jpg").unwrap();
            h.set_size(size);
            h.set_entry_type(kind);
            h.set_cksum();
            let mut block = [0u8; BLOCK as usize];
            block.copy_from_slice(h.as_bytes());
            block
        };
        for gnu in [false, true] {
            let ok = header(1234, tar::EntryType::Regular, gnu);
            assert_eq!(check_member_header(&ok, 1234), Ok(()));
            assert!(check_member_header(&ok, 1233).unwrap_err().contains("1234"));
            let mut flipped = ok;
            flipped[3] ^= 1;
            assert!(check_member_header(&flipped, 1234)
                .unwrap_err()
                .contains("checksum"));
            let dir = header(0, tar::EntryType::Directory, gnu);
            assert!(check_member_header(&dir, 0)
                .unwrap_err()
                .contains("regular"));
        }
        // Sizes past the octal field's 8 GiB are stored in base 256 (GNU).
        let mut big = tar::Header::new_gnu();
        big.set_size(20 << 30);
        big.set_cksum();
        let mut block = [0u8; BLOCK as usize];
        block.copy_from_slice(big.as_bytes());
        assert_eq!(check_member_header(&block, 20 << 30), Ok(()));
        assert!(check_member_header(&[0u8; BLOCK as usize], 0).is_err());
    }

    #[test]
    fn sidecar_round_trips_and_refuses_what_does_not_fit() {
        let found = vec![
            Found {
                member: "000000001.jpg".into(),
                offset: 512,
                len: 700,
                label: Some(3),
                label_at: Some((2048, 1)),
            },
            Found {
                member: "000000002.png".into(),
                offset: 3072,
                len: 10,
                label: None,
                label_at: None,
            },
        ];
        let mut text = format!("{SIDECAR_MAGIC} size=4096 samples=2\n");
        for f in &found {
            let l = sidecar_label(f);
            text.push_str(&format!("{}\t{}\t{l}\t{}\n", f.offset, f.len, f.member));
        }
        let back = parse_sidecar(text.as_bytes(), 4096).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(
            (back[0].label, back[0].label_at),
            (Some(3), Some((2048, 1)))
        );
        assert_eq!((back[1].offset, back[1].label), (3072, None));
        let old = text.replace(SIDECAR_MAGIC, "imagefeed-tar-index-v1");
        assert!(parse_sidecar(old.as_bytes(), 4096)
            .unwrap_err()
            .contains("older format"));
        for (what, from, to) in [
            ("label overlaps the image", "\t2048\t1\t", "\t1000\t1\t"),
            (
                "label overlaps the next sample",
                "\t2048\t1\t",
                "\t2600\t1\t",
            ),
            ("label too long", "\t2048\t1\t", "\t2048\t65\t"),
            ("label past the end", "\t2048\t1\t", "\t4095\t2\t"),
            ("label without place", "\t3\t2048\t1\t", "\t3\t-\t-\t"),
        ] {
            assert!(
                parse_sidecar(text.replace(from, to).as_bytes(), 4096).is_err(),
                "{what}"
            );
        }
        assert!(
            parse_sidecar(text.as_bytes(), 4095).is_err(),
            "another shard size"
        );
        assert!(
            parse_sidecar(text.replace("3072", "900").as_bytes(), 4096).is_err(),
            "overlap"
        );
        assert!(parse_sidecar(text.replace("samples=2", "samples=3").as_bytes(), 4096).is_err());
        assert!(parse_sidecar(b"junk", 4096).is_err());
        assert!(parse_sidecar(text.replace("\t3\t", "\tx\t").as_bytes(), 4096).is_err());
        let long = "n".repeat(MAX_MEMBER_NAME_BYTES + 1);
        let e = match parse_sidecar(text.replace("000000001", &long).as_bytes(), 4096) {
            Err(e) => e,
            Ok(_) => panic!("a {}-byte member name was accepted", long.len()),
        };
        assert!(e.len() < 100 && e.contains("of 4101 bytes"), "{e:.200}"); // with ".jpg"
    }

    #[test]
    fn urls_and_tar_names() {
        assert!(looks_like_url("s3://b/p"));
        assert!(looks_like_url("https://h/x"));
        assert!(!looks_like_url("data/train.txt"));
        assert!(!looks_like_url("/x://y"));
        assert!(is_tar_name("a/shard-0.TAR"));
        assert!(!is_tar_name(".tar"));
        assert!(!is_tar_name("x.tar.gz"));
    }
}
