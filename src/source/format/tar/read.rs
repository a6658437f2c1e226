//! The tar reader of an epoch's fetch loop: the tables of the shards it reads (loaded on first
//! use, the ones of its shuffle block kept), and each sample's members read with one
//! positioned read (one ranged request in object storage) and checked against the table.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{cls_label, scan_shard, too_large, Found, TarSet, BLOCK};
use crate::error::Error;
use crate::fields::{FieldData, FieldSpecs};
use crate::source::format::read::{Reader, Sample, Step};
use crate::source::format::units::{tables_for, Tables};
use crate::source::storage::{Located, Place};

/// Members further apart than this (a hard link to an earlier image) are read apart.
const MAX_GAP: u64 = 1 << 20;

/// Reads samples of tar shards in any order (see the module doc of `tar/`).
pub(crate) struct TarReader {
    set: Arc<TarSet>,
    fields: FieldSpecs,
    tables: Tables<Vec<Found>>,
    /// Open local shards, most recently used first.
    files: Vec<(usize, std::fs::File)>,
}

impl TarReader {
    pub(crate) fn new(set: Arc<TarSet>, block: usize, fields: FieldSpecs) -> Self {
        let mean = set.units.len() / (set.units.units.len() as u64).max(1);
        let keep = tables_for(block, mean);
        TarReader {
            set,
            fields,
            tables: Tables::new(keep),
            files: Vec::new(),
        }
    }

    /// Sample `i`'s shard, its table and its place in it.
    fn locate(&mut self, i: u32) -> Result<(usize, Arc<Vec<Found>>, usize), Error> {
        let (k, j) = self.set.units.find(u64::from(i));
        let unit = &self.set.units.units[k];
        let (file, count) = (unit.file.clone(), unit.count);
        let table = self.tables.get(k, || scan_shard(&file, Some(count)))?;
        Ok((k, table, j as usize))
    }

    /// An open local shard `k` (kept for the next samples).
    fn file(&mut self, k: usize, path: &Path) -> Result<&std::fs::File, Error> {
        if let Some(at) = self.files.iter().position(|(u, _)| *u == k) {
            let entry = self.files.remove(at);
            self.files.insert(0, entry);
        } else {
            let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
            self.files.insert(0, (k, f));
            self.files.truncate(8);
        }
        Ok(&self.files[0].1)
    }
}

/// The byte ranges a sample's members are read in (its image, its label, and the members of
/// `wanted` fields): one span from the first member's header to the last member's end where
/// they lie together, else each member from its header.
fn spans(m: &Found, wanted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let members: Vec<(u64, u64)> = std::iter::once((m.offset, m.len))
        .chain(m.label_at)
        .chain(wanted.iter().copied())
        .map(|(at, n)| (at - BLOCK, at + n))
        .collect();
    let lo = members.iter().map(|s| s.0).min().unwrap_or(0);
    let hi = members.iter().map(|s| s.1).max().unwrap_or(0);
    let sum: u64 = members.iter().map(|s| s.1 - s.0).sum();
    if hi - lo <= sum + MAX_GAP {
        vec![(lo, hi)]
    } else {
        members
    }
}

/// Checks the bytes read over `spans` against the table's `m`: the image's and the label
/// member's tar headers, and the label; returns the image's bytes and the label.
fn check(
    m: &Found,
    spans: &[(u64, u64)],
    mut read: Vec<Vec<u8>>,
    name: &Path,
    fields: &FieldSpecs,
) -> Result<Sample, Error> {
    // The bytes of [at, at + len) from whichever span holds them.
    let find = |at: u64, len: u64| -> Option<(usize, usize, usize)> {
        spans.iter().enumerate().find_map(|(s, &(lo, hi))| {
            (at >= lo && at + len <= hi).then(|| (s, (at - lo) as usize, len as usize))
        })
    };
    let changed = |at: u64, why: String| {
        Error::io(
            name,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{why} at byte {}: the shard is not what was indexed (rewritten since, or a stale .tar.idx sidecar: delete it or run `imagefeed index` again)",
                    at.saturating_sub(BLOCK)
                ),
            ),
        )
    };
    let header = |at: u64, len: u64| -> Result<(), Error> {
        let (s, from, _) =
            find(at - BLOCK, BLOCK).ok_or_else(|| changed(at, "no header".into()))?;
        let block: &[u8; BLOCK as usize] = read[s][from..from + BLOCK as usize]
            .try_into()
            .expect("a block");
        check_member_header(block, len).map_err(|why| changed(at, why))
    };
    header(m.offset, m.len)?;
    let mut label = 0;
    if let Some((at, n)) = m.label_at {
        header(at, n)?;
        let (s, from, len) = find(at, n).ok_or_else(|| changed(at, "no label member".into()))?;
        let text = &read[s][from..from + len];
        match (cls_label(text), m.label) {
            (Some(l), Some(want)) if l == want => label = l,
            _ => {
                return Err(changed(
                    at,
                    format!(
                        "the label member holds `{}`, the index says {}",
                        String::from_utf8_lossy(text).trim().escape_debug(),
                        m.label.map_or("none".into(), |l| l.to_string())
                    ),
                ))
            }
        }
    }
    let fields = fields.collect(name, |_, field| {
        let Some((at, n)) = m.member_of(field.name()) else {
            return Ok(FieldData::Missing);
        };
        header(at, n)?;
        let (s, from, len) = find(at, n).ok_or_else(|| changed(at, "no field member".into()))?;
        Ok(FieldData::text_or_bytes(read[s][from..from + len].to_vec()))
    })?;
    let (s, from, len) =
        find(m.offset, m.len).ok_or_else(|| changed(m.offset, "no image".into()))?;
    let mut bytes = std::mem::take(&mut read[s]);
    bytes.copy_within(from..from + len, 0);
    bytes.truncate(len);
    Ok(Sample {
        bytes,
        label,
        fields,
    })
}

/// Reads `len` bytes at `at` of a local file, or says where it ends.
fn pread(file: &std::fs::File, at: u64, len: u64, name: &Path) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(len as usize).map_err(|_| {
        Error::io(
            name,
            std::io::Error::other("cannot allocate the member's bytes"),
        )
    })?;
    buf.resize(len as usize, 0);
    crate::cache::format::read_at(file, &mut buf, at).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::io(
                name,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the shard ends before this member (was it truncated after indexing?)",
                ),
            )
        } else {
            Error::io(name, e)
        }
    })?;
    Ok(buf)
}

impl Reader for TarReader {
    fn reserve(&mut self, i: u32) -> u64 {
        self.locate(i).map_or(0, |(_, t, j)| t[j].len)
    }

    fn other_members(&mut self, i: u32) -> Result<crate::source::format::read::Members, Error> {
        let (k, table, j) = self.locate(i)?;
        let m = &table[j];
        let file: Arc<Located> = self.set.units.units[k].file.clone();
        let name = &file.path;
        let mut out = Vec::with_capacity(m.others.len());
        for o in &m.others {
            let bytes = match &file.place {
                Place::Local(path) => pread(self.file(k, path)?, o.offset, o.len, name)?,
                Place::Memory(bytes) => bytes
                    .get(o.offset as usize..(o.offset + o.len) as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| {
                        Error::io(
                            name,
                            std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                        )
                    })?,
                #[cfg(feature = "remote")]
                Place::Remote { store, key } => store
                    .get_range(key, o.offset, o.offset + o.len)
                    .map_err(|e| Error::remote(name, std::io::Error::other(e.to_string())))?
                    .to_vec(),
            };
            out.push((o.ext.clone(), bytes));
        }
        Ok(out)
    }

    fn read(&mut self, i: u32, name: &mut PathBuf, limit: u64) -> Step {
        let (k, table, j) = match self.locate(i) {
            Ok(x) => x,
            Err(e) => {
                *name = self.set.units.units[self.set.units.find(u64::from(i)).0]
                    .file
                    .path
                    .clone();
                return Step::Done(Err(e));
            }
        };
        let m = &table[j];
        *name = PathBuf::from(format!("{}[{}]", self.set.units.unit_name(k), m.member));
        if m.len > limit {
            return Step::Done(Err(too_large(name, m.len, limit)));
        }
        // The members of the fields asked for, each checked against its limit before it is
        // read (a missing one is found missing by `check`).
        let mut wanted = Vec::new();
        for (field, field_limit) in self.fields.with_limits() {
            if let Some((at, n)) = m.member_of(field.name()) {
                if n > field_limit as u64 {
                    let e = crate::fields::too_large(name, field.name(), n, field_limit);
                    return Step::Done(Err(e));
                }
                wanted.push((at, n));
            }
        }
        let spans = spans(m, &wanted);
        let file: Arc<Located> = self.set.units.units[k].file.clone();
        match &file.place {
            Place::Local(path) => {
                let read = (|| {
                    let f = self.file(k, path)?;
                    spans
                        .iter()
                        .map(|&(lo, hi)| pread(f, lo, hi - lo, name))
                        .collect::<Result<Vec<_>, Error>>()
                })();
                Step::Done(read.and_then(|read| check(m, &spans, read, name, &self.fields)))
            }
            Place::Memory(bytes) => {
                let read = spans
                    .iter()
                    .map(|&(lo, hi)| {
                        bytes
                            .get(lo as usize..hi as usize)
                            .map(<[u8]>::to_vec)
                            .ok_or_else(|| {
                                Error::io(
                                    &*name,
                                    std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                                )
                            })
                    })
                    .collect::<Result<Vec<_>, Error>>();
                Step::Done(read.and_then(|read| check(m, &spans, read, name, &self.fields)))
            }
            #[cfg(feature = "remote")]
            Place::Remote { store, key } => {
                let (store, key, m, name, fields) = (
                    store.clone(),
                    key.clone(),
                    m.clone(),
                    name.clone(),
                    self.fields.clone(),
                );
                Step::Pending(Box::pin(async move {
                    let mut read = Vec::with_capacity(spans.len());
                    for &(lo, hi) in &spans {
                        let bytes = store.get_range_async(&key, lo, hi).await.map_err(|e| {
                            // A store failing is not this sample's fault.
                            Error::remote(&name, std::io::Error::other(e.to_string()))
                        })?;
                        read.push(bytes.to_vec());
                    }
                    check(&m, &spans, read, &name, &fields)
                }))
            }
        }
    }

    #[cfg(feature = "remote")]
    fn store(&self) -> Option<(Arc<crate::source::storage::remote::Store>, usize)> {
        self.set
            .units
            .units
            .iter()
            .find_map(|u| match &u.file.place {
                Place::Remote { store, .. } => Some((store.clone(), store.limits.max_requests)),
                _ => None,
            })
    }
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
