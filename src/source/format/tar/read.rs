//! Reading shard members: a forward-only cursor that keeps one stream a shard open and checks
//! each member's tar header and label against the index.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::{cls_label, ShardLocation, TarIndex, BLOCK};
use crate::error::Error;
use crate::source::fetch::{Fetch, Fetched, Positions};

/// Fetched bytes held at once for local tar shards (remote ones use
/// `RemoteOptions::max_bytes_in_flight`).
pub(crate) const TAR_BYTES_IN_FLIGHT: u64 = 64 << 20;

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

impl TarIndex {
    /// The fetch stage's byte bound: the store's for remote shards, else
    /// [`TAR_BYTES_IN_FLIGHT`].
    pub(crate) fn byte_bound(&self) -> u64 {
        #[cfg(feature = "remote")]
        if let Some(s) = &self.store {
            return s.options.max_bytes_in_flight;
        }
        TAR_BYTES_IN_FLIGHT
    }

    /// Reads the claimed samples' members as streams, a run of consecutive members of one
    /// shard through one open file or request (see `source/fetch.rs`).
    pub(crate) fn fetch(&self, f: &Fetch<'_>) {
        let (tar, limit, budget, tx) = (self, f.limit, f.budget, f.tx);
        let cancelled = || f.claims.is_cancelled();
        let mut cursor = ShardCursor::default();
        // Where the current run of consecutive samples of one shard ends (plan position, byte).
        let mut run: Option<(usize, u64)> = None;
        while let Some(seq) = f.claims.claim() {
            let index = f.plan.at(seq);
            let (_, _, len) = tar.locate(index as usize);
            let name = f.index.path(index as usize);
            let bytes = if len > limit {
                Err(Error::decode(
                &name,
                crate::error::DecodeFailure(format!(
                    "member is {len} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)"
                )),
            ))
            } else {
                if !budget.acquire(len, &cancelled) {
                    return;
                }
                let run_end = match run {
                    Some((until, end)) if seq < until => end,
                    _ => {
                        let (until, end) = run_of(f.plan, tar, seq);
                        run = Some((until, end));
                        end
                    }
                };
                let mut out = Vec::new();
                let label = f.index.label(index as usize);
                cursor
                    .read(tar, index as usize, label, run_end, &name, &mut out)
                    .map(|()| out)
            };
            let held = if bytes.is_ok() { len } else { 0 };
            if bytes.is_err() && len <= limit {
                budget.release(len);
            }
            let f = Fetched {
                seq,
                index,
                bytes: Some(bytes),
                held,
            };
            if tx.send(f).is_err() {
                return;
            }
        }
    }
}

/// The run of plan positions from `seq` whose samples follow each other in one shard: returns
/// the position after the run and the byte where the run's last sample ends.
fn run_of(plan: &dyn Positions, tar: &TarIndex, seq: usize) -> (usize, u64) {
    let (shard, _, mut end) = tar.span(plan.at(seq) as usize);
    let mut k = seq + 1;
    let mut previous = plan.at(seq);
    while k < plan.len() && plan.at(k) == previous.wrapping_add(1) {
        previous = plan.at(k);
        let (s, first, last) = tar.span(previous as usize);
        if s != shard || first < end {
            break;
        }
        end = last;
        k += 1;
    }
    (k, end)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
