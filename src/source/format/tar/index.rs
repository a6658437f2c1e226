//! Indexing shards: every member header read once (seeking over the data), samples grouped by
//! key, in parallel over the shards.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{cls_label, split_member, Found, TarSet, BLOCK, MAX_CLS_BYTES};
use crate::error::Error;
use crate::source::format::dir::IMAGE_EXTENSIONS;
use crate::source::format::list::compression_of;
use crate::source::format::read::Opened;
use crate::source::format::units::{Tally, Unit, Units};
use crate::source::index::FileIndex;
use crate::source::storage::{Located, Place};

/// Longest member name accepted (Linux's PATH_MAX): a longer GNU long-name or PAX path would
/// be held in every error and index entry that names the member.
pub(super) const MAX_MEMBER_NAME_BYTES: usize = 4096;

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

/// A reader that keeps the first bytes read through it: a shard that fails to index is told
/// apart as a compressed file by its magic number, instead of by the tar reader's complaint
/// about a header checksum made of compressed bytes.
pub(crate) struct Head<R> {
    inner: R,
    head: [u8; 6],
    len: usize,
}

impl<R> Head<R> {
    pub(crate) fn new(inner: R) -> Self {
        Head {
            inner,
            head: [0; 6],
            len: 0,
        }
    }

    /// `e`, or, for a shard that starts like a compressed file, an error that says so.
    pub(crate) fn explain(&self, e: Error, name: &str) -> Error {
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

/// The sample being assembled from a run of consecutive members sharing a key.
#[derive(Default)]
struct Assembly {
    key: Option<String>,
    /// Its image member: name, offset and length.
    image: Option<(String, u64, u64)>,
    /// Its `.cls` member: name, label, offset and length.
    label: Option<(String, u32, u64, u64)>,
    others: Vec<super::Other>,
}

impl Assembly {
    /// Ends the sample being assembled (if any) into `out`.
    fn flush(&mut self, out: &mut Vec<Found>, shard: &str) -> Result<(), Error> {
        let others = std::mem::take(&mut self.others);
        self.key = None;
        match (self.image.take(), self.label.take()) {
            (Some((member, offset, len)), label) => out.push(Found {
                member,
                offset,
                len,
                label: label.as_ref().map(|l| l.1),
                label_at: label.map(|l| (l.2, l.3)),
                others,
            }),
            // A label whose image is not beside it: WebDataset groups a sample's members by
            // consecutive key, so it would be dropped and its image left unlabeled.
            (None, Some((cls, ..))) => {
                return Err(Error::source(
                    shard,
                    format!(
                        "`{cls}` has no image beside it: a sample's members must be adjacent in \
                         the shard, as WebDataset reads them (`tar cf x.tar *.jpg *.cls` puts \
                         every image before every label; `imagefeed shards` writes samples in \
                         order)"
                    ),
                ))
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Takes a member of key `key` (ending the sample before it if the key changes).
    fn member(&mut self, key: &str, out: &mut Vec<Found>, shard: &str) -> Result<(), Error> {
        if self.key.as_deref() != Some(key) {
            self.flush(out, shard)?;
            self.key = Some(key.to_string());
        }
        Ok(())
    }
}

/// A member's header, read with the extension headers before it: its name, its type and a
/// link's target. `None` for a member that is not a file or link.
struct Header {
    name: Vec<u8>,
    hard_link: bool,
    symlink: bool,
    is_file: bool,
    link_target: Option<Vec<u8>>,
}

/// Reads member `n`'s header (`entry`) with the extension headers `ext` before it, refusing
/// what two tar readers would read two ways.
fn header_of<R: Read>(
    entry: &tar::Entry<'_, R>,
    ext: Pending,
    n: usize,
    damaged: &impl Fn(String) -> Error,
) -> Result<Option<Header>, Error> {
    let header = entry.header();
    let kind = header.entry_type();
    if let Some(size) = ext.pax_size.filter(|&s| s != entry.size()) {
        // GNU tar would skip `size` bytes and this reader the header's, whatever the member's
        // type: refuse rather than pick one (two parsers disagreeing on where the next header
        // is is how hostile archives hide members).
        return Err(damaged(format!(
            "member {n}: its PAX size ({size}) disagrees with its header's ({})",
            entry.size()
        )));
    }
    if kind.is_gnu_sparse() && header.as_gnu().is_some_and(|g| g.is_extended()) {
        // Its sparse map continues in extra blocks after the header, which raw entries do not
        // skip: refuse it by name rather than misread what follows.
        return Err(damaged(format!(
            "member {n} (`{}`) is a GNU sparse file with an extended sparse map; shards hold plain files",
            crate::source::format::list::shown(&header.path_bytes())
        )));
    }
    let hard_link = kind == tar::EntryType::Link;
    let symlink = kind == tar::EntryType::Symlink;
    if !kind.is_file() && !hard_link && !symlink {
        return Ok(None);
    }
    let link_target = match ext.long_link.or(ext.pax_linkpath) {
        Some(target) => Some(target),
        None if hard_link || symlink => header.link_name_bytes().map(|t| t.into_owned()),
        None => None,
    };
    let name = match ext.long_name.or(ext.pax_path) {
        Some(name) => name,
        None => entry.path_bytes().into_owned(),
    };
    if name.len() > MAX_MEMBER_NAME_BYTES {
        let start: String = String::from_utf8_lossy(&name[..120])
            .chars()
            .take(120)
            .collect();
        return Err(damaged(format!(
            "member {n}'s name is {} bytes long, over the {MAX_MEMBER_NAME_BYTES}-byte limit (`{start}...`)",
            name.len()
        )));
    }
    Ok(Some(Header {
        name,
        hard_link,
        symlink,
        is_file: kind.is_file(),
        link_target,
    }))
}

/// A `.cls` member's label, read and checked.
fn read_label<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    member: &str,
    len: u64,
    damaged: &impl Fn(String) -> Error,
) -> Result<u32, Error> {
    if len > MAX_CLS_BYTES {
        return Err(damaged(format!(
            "`{member}` is {len} bytes; a label is a decimal number"
        )));
    }
    let mut text = String::new();
    entry
        .take(MAX_CLS_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| damaged(format!("`{member}`: {e}")))?;
    // The rule the reader checks labels by (`cls_label`).
    cls_label(text.as_bytes()).ok_or_else(|| {
        damaged(format!(
            "`{member}` holds `{}`, not a label (a non-negative integer below 2^32)",
            text.trim().escape_debug()
        ))
    })
}

/// Samples of one shard, in member order.
pub(crate) fn index_shard<R: Read>(
    entries: tar::Entries<'_, R>,
    shard_name: &str,
    shard_size: u64,
) -> Result<Vec<Found>, Error> {
    let damaged = |what: String| Error::source(shard_name, what);
    let mut out: Vec<Found> = Vec::new();
    let mut sample = Assembly::default();
    // Image members by name, for hard links to them: made at the first hard link.
    let mut linkable: Option<HashMap<String, (u64, u64)>> = None;
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
        let Some(h) = header_of(&entry, ext, n + 1, &damaged)? else {
            continue;
        };
        let member = String::from_utf8_lossy(&h.name).into_owned();
        let (member_key, ext) = split_member(&member);
        let is_image = IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(ext));
        let is_cls = ext.eq_ignore_ascii_case("cls");
        if !h.is_file && !is_image && !is_cls {
            continue; // a link to something that is not part of a sample
        }
        let (offset, len) = if h.symlink {
            return Err(damaged(format!(
                "`{member}` is a symbolic link; a shard holds its samples' files (pack with \
                 `tar --dereference`)"
            )));
        } else if h.hard_link {
            let target =
                String::from_utf8_lossy(h.link_target.as_deref().unwrap_or_default()).into_owned();
            if is_cls {
                return Err(damaged(format!(
                    "`{member}` is a hard link to `{target}`; a label must be stored in its \
                     member (pack with `tar --hard-dereference`)"
                )));
            }
            let map = linkable.get_or_insert_with(|| {
                out.iter()
                    .map(|f| (f.member.clone(), (f.offset, f.len)))
                    .chain(sample.image.iter().map(|(m, o, l)| (m.clone(), (*o, *l))))
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
        sample.member(member_key, &mut out, shard_name)?;
        if is_image {
            if let Some((first, ..)) = &sample.image {
                return Err(damaged(format!(
                    "sample `{member_key}` has two images, `{first}` and `{member}`"
                )));
            }
            if let Some(map) = &mut linkable {
                map.insert(member.clone(), (offset, len));
            }
            sample.image = Some((member, offset, len));
        } else if is_cls {
            if let Some((first, ..)) = &sample.label {
                return Err(damaged(format!(
                    "sample `{member_key}` has two labels, `{first}` and `{member}`"
                )));
            }
            let parsed = read_label(&mut entry, &member, len, &damaged)?;
            sample.label = Some((member, parsed, offset, len));
        } else if h.is_file && !sample.others.iter().any(|o| &*o.ext == ext) {
            // Another member of the sample: a field's value, read only if asked for.
            let ext = ext.into();
            sample.others.push(super::Other { ext, offset, len });
        }
    }
    if pending.any {
        return Err(damaged(
            "the archive ends after an extension header, without the member it describes".into(),
        ));
    }
    check_end(next_header, members, shard_size, &damaged)?;
    sample.flush(&mut out, shard_name)?;
    check_keys_once(&out, &damaged)?;
    Ok(out)
}

/// A shard cut at a member's end (or in its padding) reads as a shorter, valid-looking archive:
/// only the missing end-of-archive block tells. Copies and downloads cut short at a block or
/// page boundary are common, and would silently lose the rest of the shard.
fn check_end(
    next_header: u64,
    members: usize,
    shard_size: u64,
    damaged: &impl Fn(String) -> Error,
) -> Result<(), Error> {
    if next_header.saturating_add(BLOCK) <= shard_size {
        return Ok(());
    }
    Err(damaged(if members == 0 {
        format!("truncated: {shard_size} bytes, not even one tar header")
    } else {
        format!(
            "truncated: the file ends at byte {shard_size}, but its {members} member(s) and \
             their padding run to byte {next_header}, where the next member or the \
             end-of-archive block must follow (a copy or download cut short?)"
        )
    }))
}

/// A key met again further on is a second sample under the same name, perhaps with another
/// label (a file list refuses a path listed twice with two labels): refused by name.
fn check_keys_once(out: &[Found], damaged: &impl Fn(String) -> Error) -> Result<(), Error> {
    let mut keys: Vec<(&str, usize)> = out
        .iter()
        .enumerate()
        .map(|(i, f)| (split_member(&f.member).0, i))
        .collect();
    keys.sort_unstable();
    if let Some(w) = keys.windows(2).find(|w| w[0].0 == w[1].0) {
        let (first, again) = (&out[w[0].1], &out[w[1].1]);
        return Err(damaged(format!(
            "sample `{}` appears twice, as `{}` (byte {}) and again as `{}` (byte {}): \
             each key names one sample",
            w[0].0, first.member, first.offset, again.member, again.offset
        )));
    }
    Ok(())
}

/// Indexes an in-memory shard (the `index_tar` fuzz target): the number of samples.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<usize, Error> {
    let mut archive = tar::Archive::new(std::io::Cursor::new(bytes));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| Error::io("fuzz.tar", e))?;
    index_shard(entries, "fuzz.tar", bytes.len() as u64).map(|f| f.len())
}

/// The table of one shard: every sample's members, read from its headers (seeking over the
/// data of a local file), or for a shard in object storage from its `.tar.idx` sidecar when
/// one matches the shard (else the shard streamed once). `count`, where known, is checked.
pub(crate) fn scan_shard(file: &Located, count: Option<u32>) -> Result<Vec<Found>, Error> {
    let name = file.path.to_string_lossy();
    let found = match &file.place {
        Place::Local(path) => {
            file.check_unchanged()?;
            let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
            let mut archive = tar::Archive::new(std::io::BufReader::new(Head::new(f)));
            let entries = archive
                .entries_with_seek()
                .map_err(|e| Error::io(path, e))?;
            index_shard(entries, &name, file.size)
                .map_err(|e| archive.into_inner().get_ref().explain(e, &name))?
        }
        Place::Memory(bytes) => {
            let mut archive = tar::Archive::new(std::io::Cursor::new(&bytes[..]));
            let entries = archive
                .entries_with_seek()
                .map_err(|e| Error::io(&file.path, e))?;
            index_shard(entries, &name, file.size)?
        }
        #[cfg(feature = "remote")]
        Place::Remote { store, key } => {
            // A sidecar index written by `imagefeed shards` or `imagefeed index`: a few
            // kilobytes instead of the whole shard. One that does not match is ignored.
            let idx = super::sidecar_name(key);
            match store
                .get(&idx, 64 << 20)
                .map_err(|e| e.to_string())
                .and_then(|d| super::parse_sidecar(&d, file.size))
            {
                Ok(found) => found,
                Err(why) => {
                    if !why.contains("NotFound") && !why.contains("not found") {
                        log::warn!(
                            "{}: ignoring the index ({why}); reading the shard to index it",
                            store.url_of(&idx)
                        );
                    }
                    if file.size == 0 {
                        return Err(Error::source(&*name, "empty object: not a tar shard"));
                    }
                    let reader = store.range_reader(key, 0, file.size)?;
                    let mut archive = tar::Archive::new(std::io::BufReader::new(Head::new(reader)));
                    let entries = archive.entries().map_err(|e| Error::io(&*name, e))?;
                    index_shard(entries, &name, file.size)
                        .map_err(|e| archive.into_inner().get_ref().explain(e, &name))?
                }
            }
        }
    };
    if let Some(count) = count.filter(|&c| c as usize != found.len()) {
        return Err(Error::source(
            &*name,
            format!(
                "holds {} samples, where {count} were counted when the source was opened (or listed in its manifest): the shard changed; open the source again (or run `imagefeed index` again)",
                found.len()
            ),
        ));
    }
    Ok(found)
}

/// What opening learns of a shard: its sample count, how many carry a label, the largest
/// label, and its images' bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counted {
    pub(crate) count: u32,
    pub(crate) labeled: u32,
    pub(crate) min_label: Option<u32>,
    pub(crate) max_label: Option<u32>,
    pub(crate) bytes: u64,
    /// The first member without a label, where others have one (for the message).
    pub(crate) unlabeled: Option<String>,
}

impl Counted {
    /// What a manifest records of a shard.
    pub(crate) fn from_manifest(count: u32, tally: Tally) -> Counted {
        Counted {
            count,
            labeled: tally.labeled,
            min_label: tally.min_label,
            max_label: tally.max_label,
            bytes: tally.image_bytes,
            unlabeled: None,
        }
    }

    pub(crate) fn of(found: &[Found]) -> Counted {
        Counted {
            count: found.len() as u32,
            labeled: found.iter().filter(|f| f.label.is_some()).count() as u32,
            min_label: found.iter().filter_map(|f| f.label).min(),
            max_label: found.iter().filter_map(|f| f.label).max(),
            bytes: found.iter().map(|f| f.len).sum(),
            unlabeled: found
                .iter()
                .find(|f| f.label.is_none())
                .map(|f| f.member.clone()),
        }
    }
}

/// Opens tar shards: each shard's sample count from `counted` (a manifest's), or read from
/// its headers (in parallel, with progress in the log); the labels checked to be on every
/// sample or none. Keeps a few dozen bytes a shard, nothing per sample.
pub(crate) fn open_shards(
    files: Vec<Arc<Located>>,
    origin: PathBuf,
    base: PathBuf,
    counted: Option<Vec<Counted>>,
    max_bytes_in_flight: u64,
) -> Result<Opened<TarSet>, Error> {
    if files.is_empty() {
        return Err(Error::source(origin, "no tar shards"));
    }
    let counted = match counted {
        Some(c) => c,
        None => {
            let started = std::time::Instant::now();
            let counted = super::super::units::in_parallel(files.len(), &origin, |k| {
                scan_shard(&files[k], None).map(|found| Counted::of(&found))
            })?;
            let took = started.elapsed();
            if took > std::time::Duration::from_secs(2) || files.len() >= 1000 {
                log::warn!(
                    "{}: opening read the headers of {} shards ({:.1} s); `imagefeed index {}` writes a manifest beside them that opens in one read",
                    origin.display(),
                    files.len(),
                    took.as_secs_f64(),
                    origin.display()
                );
            }
            counted
        }
    };
    let mut units = Vec::with_capacity(files.len());
    let mut first = 0u64;
    let (mut labeled, mut max_label, mut bytes) = (0u64, None::<u32>, 0u64);
    let mut unlabeled_shard = None;
    for (file, c) in files.into_iter().zip(&counted) {
        if c.labeled < c.count {
            let member = c.unlabeled.clone().unwrap_or_default();
            unlabeled_shard.get_or_insert((file.path.clone(), c.count - c.labeled, member));
        }
        labeled += u64::from(c.labeled);
        max_label = max_label.max(c.max_label);
        bytes = bytes.saturating_add(c.bytes);
        units.push(Unit {
            file,
            first,
            count: c.count,
            part: 0,
            tally: Tally {
                labeled: c.labeled,
                min_label: c.min_label,
                max_label: c.max_label,
                image_bytes: c.bytes,
            },
        });
        first += u64::from(c.count);
    }
    if first == 0 {
        return Err(Error::source(
            origin,
            "the shards hold no image member (KEY.jpg, KEY.jpeg, KEY.png or KEY.webp)",
        ));
    }
    if first > u64::from(u32::MAX) {
        return Err(Error::source(origin, "more than 2^32-1 samples"));
    }
    if labeled == 0 {
        log::warn!(
            "{}: no sample has a KEY.cls member: every label is 0",
            origin.display()
        );
    } else if let Some((shard, missing, member)) = unlabeled_shard {
        return Err(Error::source(
            shard,
            format!(
                "`{member}` has no .cls label ({missing} of the shard's samples have none), while {labeled} of {first} samples have one"
            ),
        ));
    }
    let units = Units {
        units,
        num_classes: max_label.map_or(1, |m| m.saturating_add(1)),
        mean_sample_bytes: Some(bytes / first),
    };
    Ok(Opened {
        index: FileIndex::with_origin(origin, base),
        set: TarSet {
            units,
            max_bytes_in_flight,
        },
    })
}

/// Opens local shards.
pub(crate) fn index_local(paths: &[PathBuf]) -> Result<Opened<TarSet>, Error> {
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        files.push(Arc::new(Located::local(p, "a .tar shard")?));
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
    open_shards(files, origin, base, None, super::TAR_BYTES_IN_FLIGHT)
}
