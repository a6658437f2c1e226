//! Reading records during an epoch: a forward-only cursor over shards that checks each
//! record's framing and CRCs and hands its image's bytes on.

use std::io::{BufRead, Read};
use std::path::Path;

use super::{
    masked_crc, open_stream, pick, walk, Compression, Fault, Problem, Slice, TfRecordIndex,
};
use crate::error::{DecodeFailure, Error};
use crate::source::fetch::{Fetch, Fetched};

/// The most bytes skipped by reading forward instead of seeking (a compressed shard is always
/// read forward, from its start when the cursor is past the record).
const MAX_SKIP: u64 = 8 << 20;

struct Open {
    shard: u32,
    reader: Box<dyn BufRead + Send>,
    pos: u64,
}

/// A reader over shards that keeps the current shard's stream while the records asked for
/// lie further on in it.
#[derive(Default)]
pub(crate) struct Cursor {
    current: Option<Open>,
}

fn changed(name: &Path, why: String) -> Error {
    Error::io(
        name,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{why}: the shard is not what was indexed (rewritten since it was opened)"),
        ),
    )
}

/// Checks a frame header and returns its payload length. `at` is its offset, for messages.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // the fuzz target's
pub(crate) fn check_frame(head: &[u8; 12], name: impl AsRef<Path>, at: u64) -> Result<u64, Error> {
    if !super::frame_checks(head) {
        return Err(Error::source(
            name.as_ref(),
            format!("the record at byte {at}: its length fails its CRC (damaged framing)"),
        ));
    }
    Ok(u64::from_le_bytes(head[..8].try_into().expect("8 bytes")))
}

/// The image bytes and label of a record's `payload` whose stored CRC is `crc`: the payload's
/// CRC checked, the `Example` read with `keys` (`image_count` image keys, then label keys).
/// The image is moved to the front of `payload`'s buffer, which becomes the result.
pub(crate) fn extract(
    mut payload: Vec<u8>,
    crc: u32,
    keys: &[&str],
    image_count: usize,
    name: &Path,
) -> Result<(Vec<u8>, u32), Error> {
    let fail = |why: String| Error::decode(name, DecodeFailure(why));
    if masked_crc(&payload) != crc {
        return Err(fail(
            "the record's payload fails its CRC32C check (damaged data)".into(),
        ));
    }
    let mut slice = Slice {
        bytes: &payload,
        at: 0,
    };
    let walked = walk(&mut slice, payload.len() as u64, keys).map_err(|e| {
        fail(format!(
            "not a tf.train.Example: {}",
            match e {
                Fault::Bad(why) => why,
                Fault::Io(e) => e.to_string(),
            }
        ))
    })?;
    let sample =
        pick(&walked, &keys[..image_count], &keys[image_count..]).map_err(|p| match p {
            Problem::Record(why) | Problem::Label(why) => fail(why),
        })?;
    let (at, len) = sample.image;
    let (at, len) = (at as usize, len as usize);
    payload.copy_within(at..at + len, 0);
    payload.truncate(len);
    Ok((payload, sample.label.unwrap_or(0)))
}

impl Cursor {
    /// Reads record `i`'s image bytes (its label checked against `label`); `limit` bounds the
    /// record's payload. `name` names the sample in errors.
    pub(crate) fn read(
        &mut self,
        index: &TfRecordIndex,
        i: usize,
        label: u32,
        limit: u64,
        name: &Path,
    ) -> Result<Vec<u8>, Error> {
        if let Some(why) = index.bad.get(&(i as u32)) {
            return Err(Error::decode(name, DecodeFailure(why.clone())));
        }
        let (shard, offset, len) = index.locate(i);
        if len > limit {
            return Err(Error::decode(
                name,
                DecodeFailure(format!(
                    "the record is {len} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)"
                )),
            ));
        }
        let result = self.read_at(index, shard, offset, len, name);
        let (image, got) = match result {
            Ok(payload) => {
                let keys: Vec<&str> = index
                    .image_keys
                    .iter()
                    .chain(&index.label_keys)
                    .map(String::as_str)
                    .collect();
                let (payload, crc) = payload;
                extract(payload, crc, &keys, index.image_keys.len(), name)?
            }
            Err(e) => {
                self.current = None;
                return Err(e);
            }
        };
        if got != label {
            return Err(changed(
                name,
                format!("the record's label is {got}, the index says {label}"),
            ));
        }
        Ok(image)
    }

    /// Reads the frame at `offset` of `shard`: its payload (`len` bytes, as indexed) and its
    /// stored payload CRC.
    fn read_at(
        &mut self,
        index: &TfRecordIndex,
        shard: u32,
        offset: u64,
        len: u64,
        name: &Path,
    ) -> Result<(Vec<u8>, u32), Error> {
        let s = &index.shards[shard as usize];
        let reusable = self.current.as_ref().is_some_and(|o| {
            o.shard == shard
                && o.pos <= offset
                && (offset - o.pos <= MAX_SKIP || s.compression != Compression::None)
        });
        if !reusable {
            self.current = None;
            // A plain shard is read from the record on; a compressed one is inflated from its
            // start.
            let start = if s.compression == Compression::None {
                offset
            } else {
                0
            };
            let file = s.file.open(start, s.file.size)?;
            self.current = Some(Open {
                shard,
                reader: open_stream(file, s.compression),
                pos: start,
            });
        }
        let Some(o) = self.current.as_mut() else {
            return Err(Error::io(name, std::io::Error::other("no open shard")));
        };
        let eof = |what: &str| {
            Error::io(
                name,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the shard ends inside {what} (truncated since it was opened?)"),
                ),
            )
        };
        let skip = offset - o.pos;
        let skipped = std::io::copy(&mut (&mut o.reader).take(skip), &mut std::io::sink())
            .map_err(|e| Error::io(name, e))?;
        o.pos += skipped;
        if skipped < skip {
            return Err(eof("the records before this one"));
        }
        let mut head = [0u8; 12];
        read_full(&mut o.reader, &mut head).map_err(|e| Error::io(name, e))?;
        o.pos += 12;
        let stored = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if !super::frame_checks(&head) || stored != len {
            return Err(changed(
                name,
                format!(
                    "its frame holds a length of {stored} (CRC {}), the index {len}",
                    if super::frame_checks(&head) {
                        "checks"
                    } else {
                        "fails"
                    }
                ),
            ));
        }
        let mut payload = Vec::new();
        payload
            .try_reserve_exact(len as usize)
            .map_err(|_| Error::io(name, std::io::Error::other("cannot allocate the record")))?;
        let got = (&mut o.reader)
            .take(len)
            .read_to_end(&mut payload)
            .map_err(|e| Error::io(name, e))?;
        o.pos += got as u64;
        if (got as u64) < len {
            return Err(eof("this record"));
        }
        let mut crc = [0u8; 4];
        read_full(&mut o.reader, &mut crc).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => eof("this record's CRC"),
            _ => Error::io(name, e),
        })?;
        o.pos += 4;
        Ok((payload, u32::from_le_bytes(crc)))
    }
}

fn read_full(r: &mut dyn BufRead, buf: &mut [u8]) -> std::io::Result<()> {
    r.read_exact(buf)
}

impl TfRecordIndex {
    /// Record `i`'s image bytes by itself (one seek, or inflating a compressed shard up to it).
    pub(crate) fn read_one(
        &self,
        i: usize,
        label: u32,
        name: &Path,
        limit: u64,
    ) -> Result<Vec<u8>, Error> {
        Cursor::default().read(self, i, label, limit, name)
    }

    /// Reads the claimed records as streams, a run of one shard's records through one open
    /// file (see `source/fetch.rs`).
    pub(crate) fn fetch(&self, f: &Fetch<'_>) {
        let cancelled = || f.claims.is_cancelled();
        let mut cursor = Cursor::default();
        let mut name = std::path::PathBuf::new();
        while let Some(seq) = f.claims.claim() {
            let index = f.plan.at(seq);
            let (_, _, len) = self.locate(index as usize);
            f.index.path_into(index as usize, &mut name);
            let held = len.min(f.limit);
            if !f.budget.acquire(held, &cancelled) {
                return;
            }
            let label = f.index.label(index as usize);
            let bytes = cursor.read(self, index as usize, label, f.limit, &name);
            // The image is a part of the record: hold what was read until it is decoded.
            let held = match &bytes {
                Ok(_) => held,
                Err(_) => {
                    f.budget.release(held);
                    0
                }
            };
            let sent = Fetched {
                seq,
                index,
                bytes: Some(bytes),
                held,
            };
            if f.tx.send(sent).is_err() {
                return;
            }
        }
    }
}
