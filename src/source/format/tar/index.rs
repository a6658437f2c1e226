//! Indexing shards: every member header read once (seeking over the data), samples grouped by
//! key, in parallel over the shards.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{cls_label, split_member, Found, Shard, ShardLocation, TarIndex, BLOCK};
use super::{MAX_CLS_BYTES, NO_LABEL_MEMBER};
use crate::error::Error;
use crate::source::format::list::compression_of;
use crate::source::format::dir::IMAGE_EXTENSIONS;
use crate::source::{Backing, FileIndex, Source};

/// At most this many shards are indexed at once.
const INDEX_THREADS: usize = 8;

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

/// Samples of one shard, in member order.
pub(crate) fn index_shard<R: Read>(
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
                crate::source::format::list::shown(&header.path_bytes())
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
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn index_bytes(bytes: &[u8]) -> Result<usize, Error> {
    let mut archive = tar::Archive::new(std::io::Cursor::new(bytes));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| Error::io("fuzz.tar", e))?;
    index_shard(entries, "fuzz.tar", bytes.len() as u64).map(|f| f.len())
}

/// Indexes shards in parallel (`index_one(k)` indexes shard `k`) and assembles the source.
pub(crate) fn assemble(
    mut shards: Vec<Shard>,
    base: PathBuf,
    origin: PathBuf,
    index_one: impl Fn(usize) -> Result<Vec<Found>, Error> + Sync,
    #[cfg(feature = "remote")] store: Option<std::sync::Arc<crate::source::storage::remote::Store>>,
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
