//! Sidecar indexes (`NAME.tar.idx`): what indexing a shard finds, written beside it so that
//! opening it in object storage reads a few kilobytes instead of the whole shard.

use std::path::{Path, PathBuf};

use super::index::{index_shard, MAX_MEMBER_NAME_BYTES};
use super::{Found, BLOCK, MAX_CLS_BYTES};
use crate::error::Error;

/// The sidecar index of a shard: `NAME.tar.idx` next to `NAME.tar`.
pub(crate) fn sidecar_name(shard: &str) -> String {
    format!("{shard}.idx")
}

/// The first word of a sidecar index. Version 2 added where each label member lies, version 3
/// each sample's other members (its fields); an older sidecar is ignored (the shard is
/// indexed by reading it), with a warning.
const SIDECAR_MAGIC: &str = "imagefeed-tar-index-v3";

/// A sidecar line's column of other members: `EXT:OFFSET:LENGTH` joined by `/` (no extension
/// holds a `/`), or `-`. Members whose extension holds a tab, `:` or a line break are left
/// out (the shard is then indexed by reading it, see `write_sidecar`).
fn sidecar_others(f: &Found) -> String {
    if f.others.is_empty() {
        return "-".into();
    }
    f.others
        .iter()
        .map(|o| format!("{}:{}:{}", o.ext, o.offset, o.len))
        .collect::<Vec<_>>()
        .join("/")
}

fn parse_others(text: &str) -> Option<Vec<super::Other>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split('/')
        .map(|o| {
            let mut p = o.rsplitn(3, ':');
            let len = p.next()?.parse().ok()?;
            let offset = p.next()?.parse().ok()?;
            let ext = p.next()?;
            (!ext.is_empty()).then(|| super::Other {
                ext: ext.into(),
                offset,
                len,
            })
        })
        .collect()
}

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
pub(super) fn write_sidecar(shard: &Path, found: &[Found]) -> Result<(), Error> {
    use std::io::Write;
    let size = std::fs::metadata(shard)
        .map_err(|e| Error::io(shard, e))?
        .len();
    let name = sidecar_name(&shard.to_string_lossy());
    let path = PathBuf::from(&name);
    let mut text = format!("{SIDECAR_MAGIC} size={size} samples={}\n", found.len());
    for f in found {
        let label = sidecar_label(f);
        let others = sidecar_others(f);
        text.push_str(&format!(
            "{}\t{}\t{label}\t{others}\t{}\n",
            f.offset, f.len, f.member
        ));
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
                (x.offset, x.len, x.label, x.label_at, &x.member, &x.others)
                    == (y.offset, y.len, y.label, y.label_at, &y.member, &y.others)
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
pub(crate) fn parse_sidecar(data: &[u8], size: u64) -> Result<Vec<Found>, String> {
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    let mut words = head.split(' ');
    match words.next() {
        Some(SIDECAR_MAGIC) => {}
        Some(w) if w.starts_with("imagefeed-tar-index-v") => {
            return Err(format!(
                "`{}`, an older format without the places of the label and other members: rewrite the shards with `imagefeed shards`, or delete it",
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
        let mut parts = line.splitn(7, '\t');
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
        let others = parts.next().and_then(parse_others).ok_or_else(bad)?;
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
        for o in &others {
            let other_end = o.offset.checked_add(o.len).ok_or_else(out_of_place)?;
            if o.offset < BLOCK || other_end > size {
                return Err(out_of_place());
            }
            end = end.max(other_end);
        }
        out.push(Found {
            member,
            offset,
            len,
            label,
            label_at,
            others,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_round_trips_and_refuses_what_does_not_fit() {
        let found = vec![
            Found {
                member: "000000001.jpg".into(),
                offset: 512,
                len: 700,
                label: Some(3),
                label_at: Some((2048, 1)),
                others: vec![super::super::Other {
                    ext: "txt".into(),
                    offset: 1536,
                    len: 5,
                }],
            },
            Found {
                member: "000000002.png".into(),
                offset: 3072,
                len: 10,
                label: None,
                label_at: None,
                others: Vec::new(),
            },
        ];
        let mut text = format!("{SIDECAR_MAGIC} size=4096 samples=2\n");
        for f in &found {
            let l = sidecar_label(f);
            let o = sidecar_others(f);
            text.push_str(&format!(
                "{}\t{}\t{l}\t{o}\t{}\n",
                f.offset, f.len, f.member
            ));
        }
        let back = parse_sidecar(text.as_bytes(), 4096).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(
            (back[0].label, back[0].label_at),
            (Some(3), Some((2048, 1)))
        );
        assert_eq!((back[1].offset, back[1].label), (3072, None));
        assert_eq!(back[0].others, found[0].others);
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
}
