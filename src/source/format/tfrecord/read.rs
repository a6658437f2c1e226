//! The TFRecord reader of an epoch's fetch loop: the tables of the files it reads (walked on
//! first use, the ones of its shuffle block kept; a compressed file inflated into a temporary
//! file), and each record read with one positioned read (one ranged request in object
//! storage), its framing and CRCs checked, its `Example` read for the image and the label.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{masked_crc, pick, walk, Fault, Found, Problem, Slice, TfRecordSet};
use crate::error::{DecodeFailure, Error};
use crate::fields::{FieldSpecs, SampleFields};
use crate::source::format::read::{Reader, Sample, Step};
use crate::source::format::units::{tables_for, Tables};
use crate::source::storage::Place;

/// A file's records, and for a compressed file its inflated bytes.
pub(crate) struct Table {
    pub(crate) records: Vec<Found>,
    pub(crate) inflated: Option<std::fs::File>,
}

/// Reads records of TFRecord files in any order (see the module doc of `tfrecord/`).
pub(crate) struct TfRecordReader {
    set: Arc<TfRecordSet>,
    fields: FieldSpecs,
    tables: Tables<Table>,
    /// Open local files, most recently used first.
    files: Vec<(usize, std::fs::File)>,
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
    fields: &FieldSpecs,
) -> Result<(Vec<u8>, u32, SampleFields), Error> {
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
    // The fields' keys are the last ones.
    let first_field = keys.len() - fields.len();
    let sample = pick(
        &walked,
        &keys[..image_count],
        &keys[image_count..first_field],
    )
    .map_err(|p| match p {
        Problem::Record(why) | Problem::Label(why) => fail(why),
    })?;
    let found = fields.collect(name, |k, field| {
        super::example::field_value(&payload, &walked.values[first_field + k])
            .map_err(|why| Error::field(name, field.name(), why))
    })?;
    let (at, len) = sample.image;
    let (at, len) = (at as usize, len as usize);
    payload.copy_within(at..at + len, 0);
    payload.truncate(len);
    Ok((payload, sample.label.unwrap_or(0), found))
}

impl TfRecordReader {
    pub(crate) fn new(set: Arc<TfRecordSet>, block: usize, fields: FieldSpecs) -> Self {
        let mean = set.units.len() / (set.units.units.len() as u64).max(1);
        TfRecordReader {
            fields,
            tables: Tables::new(tables_for(block, mean)),
            set,
            files: Vec::new(),
        }
    }

    /// Record `i`'s file, that file's table and `i`'s place in it.
    fn locate(&mut self, i: u32) -> Result<(usize, Arc<Table>, usize), Error> {
        let (k, j) = self.set.units.find(u64::from(i));
        let set = self.set.clone();
        let table = self.tables.get(k, || set.table(k))?;
        Ok((k, table, j as usize))
    }

    /// An open local file `k` (kept for the next records).
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

/// Checks a frame read whole (`12 + len + 4` bytes at its offset) against the table's record
/// and reads its `Example`: the image's bytes and the label.
fn frame(
    set: &TfRecordSet,
    record: &Found,
    mut bytes: Vec<u8>,
    name: &Path,
    fields: &FieldSpecs,
) -> Result<Sample, Error> {
    let len = record.len as usize;
    let head: [u8; 12] = bytes[..12].try_into().expect("a frame header");
    let stored = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    if !super::frame_checks(&head) || stored != record.len {
        return Err(changed(
            name,
            format!(
                "its frame holds a length of {stored} (CRC {}), the index {}",
                if super::frame_checks(&head) {
                    "checks"
                } else {
                    "fails"
                },
                record.len
            ),
        ));
    }
    let crc = u32::from_le_bytes(bytes[12 + len..16 + len].try_into().expect("4 bytes"));
    bytes.truncate(12 + len);
    bytes.drain(..12);
    let keys: Vec<&str> = set
        .image_keys
        .iter()
        .chain(&set.label_keys)
        .map(String::as_str)
        .chain(fields.names())
        .collect();
    let (image, label, fields) = extract(bytes, crc, &keys, set.image_keys.len(), name, fields)?;
    let want = record.label.unwrap_or(0);
    if label != want {
        return Err(changed(
            name,
            format!("the record's label is {label}, the index says {want}"),
        ));
    }
    Ok(Sample {
        bytes: image,
        label,
        fields,
    })
}

/// `len` bytes at `at` of a local file, or where it ends.
fn pread(file: &std::fs::File, at: u64, len: u64, name: &Path) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(len as usize)
        .map_err(|_| Error::io(name, std::io::Error::other("cannot allocate the record")))?;
    buf.resize(len as usize, 0);
    crate::cache::format::read_at(file, &mut buf, at).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::io(
                name,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the shard ends inside this record (truncated since it was opened?)",
                ),
            )
        } else {
            Error::io(name, e)
        }
    })?;
    Ok(buf)
}

impl Reader for TfRecordReader {
    fn reserve(&mut self, i: u32) -> u64 {
        self.locate(i).map_or(0, |(_, t, j)| t.records[j].len)
    }

    fn read(&mut self, i: u32, name: &mut PathBuf, limit: u64) -> Step {
        let (k, table, j) = match self.locate(i) {
            Ok(x) => x,
            Err(e) => {
                let (k, _) = self.set.units.find(u64::from(i));
                *name = self.set.units.units[k].file.path.clone();
                return Step::Done(Err(e));
            }
        };
        let record = table.records[j].clone();
        *name = PathBuf::from(format!(
            "{}[record {j} at byte {}]",
            self.set.units.unit_name(k),
            record.offset
        ));
        if let Some(why) = &record.bad {
            return Step::Done(Err(Error::decode(&*name, DecodeFailure(why.clone()))));
        }
        if record.len > limit {
            return Step::Done(Err(Error::decode(
                &*name,
                DecodeFailure(format!(
                    "the record is {} bytes, over the {limit}-byte limit (max_pixels x 4 + 16 MiB, at most 256 MiB)",
                    record.len
                )),
            )));
        }
        let whole = 16 + record.len;
        if let Some(inflated) = &table.inflated {
            let read = pread(inflated, record.offset, whole, name);
            return Step::Done(read.and_then(|b| frame(&self.set, &record, b, name, &self.fields)));
        }
        let file = self.set.units.units[k].file.clone();
        match &file.place {
            Place::Local(path) => {
                let read = self
                    .file(k, path)
                    .and_then(|f| pread(f, record.offset, whole, name));
                Step::Done(read.and_then(|b| frame(&self.set, &record, b, name, &self.fields)))
            }
            Place::Memory(bytes) => {
                let read = bytes
                    .get(record.offset as usize..(record.offset + whole) as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| changed(name, "the record runs past the file's end".into()));
                Step::Done(read.and_then(|b| frame(&self.set, &record, b, name, &self.fields)))
            }
            #[cfg(feature = "remote")]
            Place::Remote { store, key } => {
                let (store, key, name, set, fields) = (
                    store.clone(),
                    key.clone(),
                    name.clone(),
                    self.set.clone(),
                    self.fields.clone(),
                );
                Step::Pending(Box::pin(async move {
                    let bytes = store
                        .get_range_async(&key, record.offset, record.offset + whole)
                        .await?;
                    frame(&set, &record, bytes.to_vec(), &name, &fields)
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
