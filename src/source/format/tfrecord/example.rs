//! `tf.train.Example`'s wire format, read for two features only: the image's bytes and the
//! label. The same reader walks a record in memory (an epoch, which has its whole payload to
//! check its CRC) and a record in a file while indexing, where it reads the small features and
//! seeks over every large `bytes` value (the encoded image), so that opening a dataset reads
//! a few hundred bytes a record instead of the whole dataset.
//!
//! The messages (tensorflow/core/example/{example,feature}.proto):
//!
//! ```text
//! Example  { Features features = 1; }
//! Features { map<string, Feature> feature = 1; }      // entries: key = 1, value = 2
//! Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//! BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//! Int64List { repeated int64 value = 1 [packed]; }
//! ```
//!
//! Decoding follows protobuf's rules as `prost` applies them (a test and the `tfrecord` fuzz
//! target compare the two): unknown fields are skipped (groups too, 100 deep at most), a
//! message met twice is merged, a later map entry with the same key replaces the earlier one,
//! a oneof switched to another field starts over, packed and unpacked numbers are both read,
//! and a known field with the wrong wire type, a length past its message, a bad varint or a
//! key that is not UTF-8 makes the record malformed. Nothing is allocated in proportion to a
//! length field: values are skipped or located, never read, except keys up to
//! [`MAX_KEY_BYTES`].

/// Longest feature key read; a longer key is skipped (it cannot be one looked for).
pub(crate) const MAX_KEY_BYTES: u64 = 1024;

/// Nested groups skipped at most (prost's recursion limit).
const MAX_GROUP_DEPTH: u32 = 100;

/// Why a record could not be walked.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The bytes could not be read (only from a file).
    Io(std::io::Error),
    /// The record is not a well-formed `Example`.
    Bad(String),
}

impl From<std::io::Error> for Fault {
    fn from(e: std::io::Error) -> Self {
        Fault::Io(e)
    }
}

fn bad<T>(why: impl Into<String>) -> Result<T, Fault> {
    Err(Fault::Bad(why.into()))
}

/// Bytes the walker reads: a record's payload in memory, or in a file.
pub(crate) trait Wire {
    /// The next byte; `Bad` at the end of the input.
    fn byte(&mut self) -> Result<u8, Fault>;
    /// The next `n` bytes (`n` at most [`MAX_KEY_BYTES`]) into `out`, cleared first.
    fn take(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), Fault>;
    /// Skips `n` bytes (the caller checked they lie within the record).
    fn skip(&mut self, n: u64) -> Result<(), Fault>;
    /// Bytes consumed since the payload's start.
    fn pos(&self) -> u64;
}

/// A payload in memory.
pub(crate) struct Slice<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl Wire for Slice<'_> {
    fn byte(&mut self) -> Result<u8, Fault> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| Fault::Bad("ends inside a field".into()))?;
        self.at += 1;
        Ok(b)
    }
    fn take(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), Fault> {
        let Some(b) = self.bytes.get(self.at..self.at.saturating_add(n)) else {
            return bad("ends inside a field");
        };
        out.clear();
        out.extend_from_slice(b);
        self.at += n;
        Ok(())
    }
    fn skip(&mut self, n: u64) -> Result<(), Fault> {
        let to = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|&to| to <= self.bytes.len());
        match to {
            Some(to) => {
                self.at = to;
                Ok(())
            }
            None => bad("ends inside a field"),
        }
    }
    fn pos(&self) -> u64 {
        self.at as u64
    }
}

/// What one feature key held: which list kind (1 bytes, 2 float, 3 int64; 0 none), how many
/// values, and where the first bytes value lies or what the first number is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Value {
    pub(crate) present: bool,
    pub(crate) kind: u8,
    pub(crate) count: u64,
    /// The first bytes value: (offset in the payload, length).
    pub(crate) first_bytes: Option<(u64, u64)>,
    pub(crate) first_int: Option<i64>,
    /// Where the value's (last) list message lies: (offset in the payload, length).
    pub(crate) list_at: Option<(u64, u64)>,
}

/// The values of the keys looked for, in the order given, and up to 8 of the keys met (for
/// messages about a missing key).
#[derive(Debug, Default)]
pub(crate) struct Walked {
    pub(crate) values: Vec<Value>,
    pub(crate) seen: Vec<String>,
}

/// Walks an `Example` of `len` bytes from `w`, recording the features named in `keys`.
pub(crate) fn walk(w: &mut dyn Wire, len: u64, keys: &[&str]) -> Result<Walked, Fault> {
    let mut out = Walked {
        values: vec![Value::default(); keys.len()],
        seen: Vec::new(),
    };
    let mut key = Vec::new();
    let start = w.pos();
    let end = start + len;
    while w.pos() < end {
        let (field, wt) = tag(w, end)?;
        if field == 1 {
            want(wt, 2, "Example.features")?;
            let sub = sub_end(w, end)?;
            features(w, sub, keys, &mut out, &mut key)?;
        } else {
            skip_field(w, field, wt, end, 0)?;
        }
    }
    Ok(out)
}

fn features(
    w: &mut dyn Wire,
    end: u64,
    keys: &[&str],
    out: &mut Walked,
    key: &mut Vec<u8>,
) -> Result<(), Fault> {
    while w.pos() < end {
        let (field, wt) = tag(w, end)?;
        if field != 1 {
            skip_field(w, field, wt, end, 0)?;
            continue;
        }
        want(wt, 2, "Features.feature")?;
        let entry_end = sub_end(w, end)?;
        key.clear();
        let mut long_key = false;
        let mut value = Value {
            present: true,
            ..Value::default()
        };
        while w.pos() < entry_end {
            let (f, wt) = tag(w, entry_end)?;
            match f {
                1 => {
                    want(wt, 2, "a feature's key")?;
                    let n = length(w, entry_end)?;
                    if n > MAX_KEY_BYTES {
                        // Not one looked for; still text, as protobuf requires (not checked).
                        w.skip(n)?;
                        long_key = true;
                    } else {
                        w.take(n as usize, key)?;
                        long_key = false;
                        if std::str::from_utf8(key).is_err() {
                            return bad("a feature key is not UTF-8");
                        }
                    }
                }
                2 => {
                    want(wt, 2, "a feature's value")?;
                    let sub = sub_end(w, entry_end)?;
                    feature(w, sub, &mut value)?;
                }
                _ => skip_field(w, f, wt, entry_end, 0)?,
            }
        }
        let name = if long_key {
            None
        } else {
            std::str::from_utf8(key).ok()
        };
        if let Some(name) = name {
            if let Some(k) = keys.iter().position(|k| *k == name) {
                out.values[k] = value;
            }
            if out.seen.len() < 8 && !out.seen.iter().any(|s| s == name) {
                out.seen.push(name.to_string());
            }
        }
    }
    Ok(())
}

fn feature(w: &mut dyn Wire, end: u64, value: &mut Value) -> Result<(), Fault> {
    while w.pos() < end {
        let (field, wt) = tag(w, end)?;
        if !(1..=3).contains(&field) {
            skip_field(w, field, wt, end, 0)?;
            continue;
        }
        want(wt, 2, "a feature's list")?;
        let sub = sub_end(w, end)?;
        let list_at = (w.pos(), sub - w.pos());
        let kind = field as u8;
        if value.kind != kind {
            // A oneof set to another field starts over.
            *value = Value {
                present: true,
                kind,
                ..Value::default()
            };
        }
        value.list_at = Some(list_at);
        list(w, sub, value)?;
    }
    Ok(())
}

/// The values of a feature found by `walk` in `payload`, as a field's: a `bytes_list` of one
/// value (text where UTF-8), an `int64_list`, a `float_list`; missing where the record has no
/// such feature or it is empty.
pub(crate) fn field_value(payload: &[u8], v: &Value) -> Result<crate::fields::FieldData, String> {
    use crate::fields::FieldData;
    let (Some((at, len)), true) = (v.list_at, v.present) else {
        return Ok(FieldData::Missing);
    };
    let mut w = Slice {
        bytes: payload,
        at: at as usize,
    };
    let end = at + len;
    let (mut bytes, mut ints, mut floats) = (Vec::new(), Vec::new(), Vec::new());
    let fault = |f: Fault| match f {
        Fault::Bad(why) => why,
        Fault::Io(e) => e.to_string(),
    };
    while w.pos() < end {
        let (field, wt) = tag(&mut w, end).map_err(fault)?;
        if field != 1 {
            skip_field(&mut w, field, wt, end, 0).map_err(fault)?;
            continue;
        }
        match (v.kind, wt) {
            (1, 2) => {
                let n = length(&mut w, end).map_err(fault)? as usize;
                bytes.push(payload[w.at..w.at + n].to_vec());
                w.at += n;
            }
            (2, 5) => {
                let b: [u8; 4] = payload[w.at..w.at + 4]
                    .try_into()
                    .map_err(|_| "a float cut short")?;
                floats.push(f32::from_le_bytes(b));
                w.at += 4;
            }
            (2, 2) => {
                let n = length(&mut w, end).map_err(fault)? as usize;
                for c in payload[w.at..w.at + n].chunks_exact(4) {
                    floats.push(f32::from_le_bytes(c.try_into().expect("4 bytes")));
                }
                w.at += n;
            }
            (3, 0) => ints.push(number(&mut w, end).map_err(fault)? as i64),
            (3, 2) => {
                let n = length(&mut w, end).map_err(fault)?;
                let packed_end = w.pos() + n;
                while w.pos() < packed_end {
                    ints.push(number(&mut w, packed_end).map_err(fault)? as i64);
                }
            }
            (_, wt) => return Err(format!("a list value of wire type {wt}")),
        }
    }
    Ok(match v.kind {
        1 if bytes.is_empty() => FieldData::Missing,
        1 if bytes.len() == 1 => FieldData::text_or_bytes(bytes.pop().unwrap_or_default()),
        1 => {
            return Err(format!(
                "a bytes list of {} values; a field is one",
                bytes.len()
            ))
        }
        2 => FieldData::Floats(floats),
        3 => FieldData::Ints(ints),
        _ => FieldData::Missing,
    })
}

fn list(w: &mut dyn Wire, end: u64, value: &mut Value) -> Result<(), Fault> {
    while w.pos() < end {
        let (field, wt) = tag(w, end)?;
        if field != 1 {
            skip_field(w, field, wt, end, 0)?;
            continue;
        }
        match (value.kind, wt) {
            (1, 2) => {
                let n = length(w, end)?;
                if value.count == 0 {
                    value.first_bytes = Some((w.pos(), n));
                }
                value.count += 1;
                w.skip(n)?;
            }
            (2, 5) => {
                if end.saturating_sub(w.pos()) < 4 {
                    return bad("a length runs past its message");
                }
                w.skip(4)?;
                value.count += 1;
            }
            (2, 2) => {
                let n = length(w, end)?;
                if n % 4 != 0 {
                    return bad("packed floats of a length not a multiple of 4");
                }
                w.skip(n)?;
                value.count += n / 4;
            }
            (3, 0) => {
                let v = number(w, end)? as i64;
                if value.count == 0 {
                    value.first_int = Some(v);
                }
                value.count += 1;
            }
            (3, 2) => {
                let n = length(w, end)?;
                let packed_end = w.pos() + n;
                while w.pos() < packed_end {
                    let v = number(w, packed_end)? as i64;
                    if value.count == 0 {
                        value.first_int = Some(v);
                    }
                    value.count += 1;
                }
                if w.pos() != packed_end {
                    return bad("a packed number runs past its list");
                }
            }
            (_, wt) => return bad(format!("a list value of wire type {wt}")),
        }
    }
    Ok(())
}

/// Reads a field's tag, (field number, wire type), which must end by `end`.
fn tag(w: &mut dyn Wire, end: u64) -> Result<(u64, u8), Fault> {
    let t = varint(w)?;
    if w.pos() > end {
        return bad("a tag runs past its message");
    }
    if t > u64::from(u32::MAX) {
        return bad("a tag over 32 bits");
    }
    let (field, wt) = (t >> 3, (t & 7) as u8);
    if field == 0 {
        return bad("a field numbered 0");
    }
    Ok((field, wt))
}

fn want(wt: u8, expected: u8, what: &str) -> Result<(), Fault> {
    if wt == expected {
        Ok(())
    } else {
        bad(format!("{what} has wire type {wt}, not {expected}"))
    }
}

/// Reads a length and returns where the message it starts ends, within `end`.
fn sub_end(w: &mut dyn Wire, end: u64) -> Result<u64, Fault> {
    let n = length(w, end)?;
    Ok(w.pos() + n)
}

/// Reads a length-delimited field's length; the length and the bytes it counts must end by
/// `end`.
fn length(w: &mut dyn Wire, end: u64) -> Result<u64, Fault> {
    let n = varint(w)?;
    if w.pos() > end || n > end - w.pos() {
        return bad("a length runs past its message");
    }
    Ok(n)
}

/// Reads a varint value, which must end by `end`.
fn number(w: &mut dyn Wire, end: u64) -> Result<u64, Fault> {
    let v = varint(w)?;
    if w.pos() > end {
        return bad("a number runs past its message");
    }
    Ok(v)
}

pub(crate) fn varint(w: &mut dyn Wire) -> Result<u64, Fault> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = w.byte()?;
        if i == 9 && b > 1 {
            return bad("a varint over 64 bits");
        }
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    bad("a varint over 10 bytes")
}

/// Skips one field of wire type `wt` (its tag read), within `end`.
fn skip_field(w: &mut dyn Wire, field: u64, wt: u8, end: u64, depth: u32) -> Result<(), Fault> {
    let room = end.saturating_sub(w.pos());
    match wt {
        0 => {
            number(w, end)?;
        }
        1 | 5 => {
            let n = if wt == 1 { 8 } else { 4 };
            if room < n {
                return bad("a field runs past its message");
            }
            w.skip(n)?;
        }
        2 => {
            let n = length(w, end)?;
            w.skip(n)?;
        }
        3 => {
            if depth >= MAX_GROUP_DEPTH {
                return bad("groups nested over 100 deep");
            }
            loop {
                if w.pos() >= end {
                    return bad("a group without its end");
                }
                let (f, t) = tag(w, end)?;
                if t == 4 {
                    if f != field {
                        return bad("a group ended by another field's end");
                    }
                    break;
                }
                skip_field(w, f, t, end, depth + 1)?;
            }
        }
        4 => return bad("a group end without its start"),
        _ => return bad(format!("wire type {wt}")),
    }
    if w.pos() > end {
        return bad("a field runs past its message");
    }
    Ok(())
}

/// The image and label an `Example` holds, by the keys asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// The image's bytes: (offset in the payload, length).
    pub(crate) image: (u64, u64),
    /// The label; `None` when the record has no label key.
    pub(crate) label: Option<u32>,
}

/// What a record lacks or holds wrongly, beyond its wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The structure is malformed, an image key holds no single bytes value, or the image key
    /// is missing: the record is a bad sample.
    Record(String),
    /// The label is not one integer in `0..=u32::MAX`: the dataset's labels are wrong.
    Label(String),
}

/// Picks the image (the first of `image_keys` present) and label (the first of `label_keys`
/// present) out of `walked`, whose values are those of `image_keys` then `label_keys`.
pub(crate) fn pick(
    walked: &Walked,
    image_keys: &[&str],
    label_keys: &[&str],
) -> Result<Sample, Problem> {
    let (images, labels) = walked.values.split_at(image_keys.len());
    let kind_name = |k: u8| match k {
        1 => "a bytes list",
        2 => "a float list",
        3 => "an int64 list",
        _ => "an empty feature",
    };
    let Some((ik, iv)) = image_keys.iter().zip(images).find(|(_, v)| v.present) else {
        return Err(Problem::Record(format!(
            "no `{}` feature (its keys: {})",
            image_keys.join("` or `"),
            if walked.seen.is_empty() {
                "none".to_string()
            } else {
                walked.seen.join(", ")
            }
        )));
    };
    let image = match (iv.kind, iv.count, iv.first_bytes) {
        (1, 1, Some(at)) => at,
        (1, n, _) => {
            return Err(Problem::Record(format!(
                "`{ik}` holds {n} values, not one image"
            )))
        }
        (k, ..) => {
            return Err(Problem::Record(format!(
                "`{ik}` is {}, not the image's bytes",
                kind_name(k)
            )))
        }
    };
    let label = match label_keys.iter().zip(labels).find(|(_, v)| v.present) {
        None => None,
        Some((lk, lv)) => match (lv.kind, lv.count, lv.first_int) {
            (3, 1, Some(v)) => Some(u32::try_from(v).map_err(|_| {
                Problem::Label(format!(
                    "`{lk}` is {v}, not a label (a non-negative integer below 2^32)"
                ))
            })?),
            (3, n, _) => {
                return Err(Problem::Label(format!(
                    "`{lk}` holds {n} values, not one label"
                )))
            }
            (k, ..) => {
                return Err(Problem::Label(format!(
                    "`{lk}` is {}, not an integer label",
                    kind_name(k)
                )))
            }
        },
    };
    Ok(Sample { image, label })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn put_len(out: &mut Vec<u8>, field: u64, body: &[u8]) {
        put_varint(out, field << 3 | 2);
        put_varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    /// An `Example` with a bytes feature and an int64 feature.
    pub(crate) fn example(features: &[(&str, Result<&[u8], i64>)]) -> Vec<u8> {
        let mut map = Vec::new();
        for (key, value) in features {
            let mut list = Vec::new();
            let field = match value {
                Ok(bytes) => {
                    put_len(&mut list, 1, bytes);
                    1
                }
                Err(n) => {
                    put_varint(&mut list, 1 << 3);
                    put_varint(&mut list, *n as u64);
                    3
                }
            };
            let mut feature = Vec::new();
            put_len(&mut feature, field, &list);
            let mut entry = Vec::new();
            put_len(&mut entry, 1, key.as_bytes());
            put_len(&mut entry, 2, &feature);
            put_len(&mut map, 1, &entry);
        }
        let mut ex = Vec::new();
        put_len(&mut ex, 1, &map);
        ex
    }

    fn parse(bytes: &[u8]) -> Result<Sample, String> {
        let keys = ["image/encoded", "image", "image/class/label", "label"];
        let mut w = Slice { bytes, at: 0 };
        let walked = walk(&mut w, bytes.len() as u64, &keys).map_err(|e| format!("{e:?}"))?;
        pick(&walked, &keys[..2], &keys[2..]).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn finds_the_image_and_label_in_any_order() {
        let ex = example(&[
            ("image/format", Ok(b"JPEG")),
            ("image/class/label", Err(7)),
            ("image/encoded", Ok(b"\xff\xd8\xffxyz")),
        ]);
        let s = parse(&ex).unwrap();
        assert_eq!(s.label, Some(7));
        let (at, len) = s.image;
        assert_eq!(&ex[at as usize..(at + len) as usize], b"\xff\xd8\xffxyz");
        // TFDS's keys, when the ImageNet script's are absent.
        let s = parse(&example(&[("label", Err(3)), ("image", Ok(b"ab"))])).unwrap();
        assert_eq!((s.label, s.image.1), (Some(3), 2));
        // Unlabelled.
        assert_eq!(
            parse(&example(&[("image", Ok(b"ab"))])).unwrap().label,
            None
        );
    }

    #[test]
    fn problems_are_named() {
        let e = parse(&example(&[("image/format", Ok(b"JPEG"))])).unwrap_err();
        assert!(
            e.contains("no `image/encoded` or `image` feature") && e.contains("image/format"),
            "{e}"
        );
        let e = parse(&example(&[("image", Ok(b"ab")), ("label", Err(-1))])).unwrap_err();
        assert!(e.contains("Label") && e.contains("-1"), "{e}");
        let e = parse(&example(&[("image", Ok(b"ab")), ("label", Err(1 << 33))])).unwrap_err();
        assert!(e.contains("8589934592"), "{e}");
        let e = parse(&example(&[("image", Err(4))])).unwrap_err();
        assert!(e.contains("int64 list, not the image"), "{e}");
        let mut cut = example(&[("image", Ok(b"abcdef"))]);
        cut.truncate(cut.len() - 2);
        assert!(parse(&cut).unwrap_err().contains("Bad"));
        // A length field claiming 2^60 bytes is refused by the record's length, not read.
        let mut huge = vec![0x0A];
        put_varint(&mut huge, 1 << 60);
        assert!(parse(&huge).unwrap_err().contains("past its message"));
    }

    /// An `Example` of one feature, `key`, whose message is `feature`.
    fn example_of(key: &str, feature: &[u8]) -> Vec<u8> {
        let mut entry = Vec::new();
        put_len(&mut entry, 1, key.as_bytes());
        put_len(&mut entry, 2, feature);
        let mut map = Vec::new();
        put_len(&mut map, 1, &entry);
        let mut ex = Vec::new();
        put_len(&mut ex, 1, &map);
        ex
    }

    #[test]
    fn a_value_that_runs_out_of_its_list_into_the_next_bytes_is_refused() {
        // A BytesList one byte long, holding only a value's tag; the value's length is the
        // next byte of the Feature, outside the list.
        let mut feature = Vec::new();
        put_len(&mut feature, 1, &[0x0A]);
        feature.extend_from_slice(&[0x03, b'a', b'b', b'c']);
        let e = parse(&example_of("image", &feature)).unwrap_err();
        assert!(e.contains("past its message"), "{e}");
        // The same for an int64 and a field skipped.
        for list in [&[0x08][..], &[0x10][..]] {
            let mut feature = Vec::new();
            put_len(&mut feature, 3, list);
            feature.extend_from_slice(&[0x85, 0x01]);
            let e = parse(&example_of("label", &feature)).unwrap_err();
            assert!(e.contains("past its message"), "{e}");
        }
    }

    #[test]
    fn every_one_byte_change_of_an_example_is_an_answer_not_a_panic() {
        let ex = example(&[
            ("image/format", Ok(b"JPEG")),
            ("image/class/label", Err(300)),
            ("image/encoded", Ok(b"\xff\xd8\xffxyz")),
        ]);
        for at in 0..ex.len() {
            for b in 0..=255u8 {
                let mut changed = ex.clone();
                changed[at] = b;
                let _ = parse(&changed);
                changed.remove(at);
                let _ = parse(&changed);
            }
        }
    }
}
