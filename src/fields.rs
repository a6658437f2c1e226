//! Per-sample fields delivered with the images: captions, metadata, targets beyond one class.
//!
//! A [`Field`] names what each format calls a sample's other data:
//!
//! | source | a field is | values |
//! |---|---|---|
//! | tar shards (WebDataset, img2dataset) | a member's extension: `txt` for `KEY.txt`, `json`, `cls`, any other | text where the bytes are UTF-8, else bytes |
//! | parquet | a column | string: text; binary: bytes; integers and booleans: ints; floats: floats; a list of numbers: ints or floats |
//! | TFRecord (`tf.train.Example`) | a feature | `bytes_list` (one value): text where UTF-8, else bytes; `int64_list`: ints; `float_list`: floats |
//! | a file list with a header line | a column of the header (`path<TAB>label<TAB>caption`) | text |
//!
//! Class folders and objects in object storage carry no fields: asking for one is an error at
//! `build()`.
//!
//! A batch holds each field as one column ([`FieldColumn`]): one buffer of values and one of
//! offsets, Arrow-style, so that reading a caption is a slice of the batch's buffer, not a copy
//! a sample. A value is bounded in bytes ([`Field::limit`], else
//! [`LoaderBuilder::field_limit`](crate::LoaderBuilder::field_limit), 64 KiB by default): a
//! larger one is an error naming the sample and the field, and the limits are counted in
//! [`MemoryBudget::field_bytes`](crate::MemoryBudget::field_bytes).
//!
//! ```no_run
//! # fn main() -> Result<(), imagefeed::Error> {
//! use imagefeed::{Field, Loader, Source};
//! // img2dataset's output: KEY.jpg, KEY.txt and KEY.json in each shard.
//! let loader = Loader::builder(Source::open("laion/")?)
//!     .field("txt")
//!     .field(Field::new("json").optional())
//!     .build()?;
//! for batch in loader.epoch(0) {
//!     let batch = batch?;
//!     let captions = batch.field("txt").expect("asked for");
//!     for i in 0..batch.len() {
//!         let caption: &str = captions.text(i).unwrap_or("");
//!         # let _ = caption;
//!     }
//! }
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use crate::error::Error;

/// The default byte limit of a field's value (64 KiB).
pub const DEFAULT_FIELD_LIMIT: usize = 64 * 1024;

/// The most a field's value may be (256 MiB): a limit over it is refused by `build()`.
pub(crate) const MAX_FIELD_LIMIT: usize = 256 << 20;

/// A per-sample field to deliver with the images; see the module docs for what each source
/// calls a field.
///
/// ```
/// use imagefeed::Field;
/// let caption = Field::new("txt");
/// let meta = Field::new("json").optional().limit(16 * 1024);
/// assert_eq!(meta.name(), "json");
/// assert!(meta.is_optional() && !caption.is_optional());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    name: String,
    optional: bool,
    limit: Option<usize>,
}

impl Field {
    /// A field every sample must have: a sample without it is an error naming the sample and
    /// the field ([`ErrorKind::Field`](crate::ErrorKind::Field)).
    pub fn new(name: impl Into<String>) -> Self {
        Field {
            name: name.into(),
            optional: false,
            limit: None,
        }
    }

    /// A sample without this field is delivered with no value for it (`None`), not an error.
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// The most bytes one value may hold (a number counts 8); over it, the sample is an error
    /// naming it and the field. Default: the loader's
    /// [`field_limit`](crate::LoaderBuilder::field_limit).
    pub fn limit(mut self, bytes: usize) -> Self {
        self.limit = Some(bytes);
        self
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a sample may lack it.
    pub fn is_optional(&self) -> bool {
        self.optional
    }

    /// Its own byte limit, if it has one.
    pub fn byte_limit(&self) -> Option<usize> {
        self.limit
    }
}

impl From<&str> for Field {
    fn from(name: &str) -> Self {
        Field::new(name)
    }
}

impl From<String> for Field {
    fn from(name: String) -> Self {
        Field::new(name)
    }
}

/// What kind of value a field holds for one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldKind {
    /// UTF-8 text.
    Text,
    /// Bytes that are not (known to be) text.
    Bytes,
    /// Integers (`i64`), one or more.
    Ints,
    /// Floating-point numbers (`f32`), one or more.
    Floats,
}

/// One sample's value of a field, borrowed from its batch.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum FieldValue<'a> {
    /// UTF-8 text.
    Text(&'a str),
    /// Bytes.
    Bytes(&'a [u8]),
    /// Integers.
    Ints(&'a [i64]),
    /// Floating-point numbers.
    Floats(&'a [f32]),
}

impl FieldValue<'_> {
    /// The kind of value.
    pub fn kind(&self) -> FieldKind {
        match self {
            FieldValue::Text(_) => FieldKind::Text,
            FieldValue::Bytes(_) => FieldKind::Bytes,
            FieldValue::Ints(_) => FieldKind::Ints,
            FieldValue::Floats(_) => FieldKind::Floats,
        }
    }
}

/// One sample's value of a field, as a reader found it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum FieldData {
    /// The sample has no such field.
    #[default]
    Missing,
    Text(Vec<u8>),
    Bytes(Vec<u8>),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
}

impl FieldData {
    /// Text where `bytes` are UTF-8, else bytes.
    pub(crate) fn text_or_bytes(bytes: Vec<u8>) -> FieldData {
        if std::str::from_utf8(&bytes).is_ok() {
            FieldData::Text(bytes)
        } else {
            FieldData::Bytes(bytes)
        }
    }

    /// Bytes the value holds (numbers: 8 each, `f32` counted as 8 too, as the limit counts).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            FieldData::Missing => 0,
            FieldData::Text(b) | FieldData::Bytes(b) => b.len(),
            FieldData::Ints(v) => v.len() * 8,
            FieldData::Floats(v) => v.len() * 8,
        }
    }
}

/// The fields a loader delivers, with each one's byte limit resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSpecs {
    fields: Arc<[(Field, usize)]>,
}

impl FieldSpecs {
    pub(crate) fn new(fields: &[Field], default_limit: usize) -> Self {
        FieldSpecs {
            fields: fields
                .iter()
                .map(|f| (f.clone(), f.limit.unwrap_or(default_limit)))
                .collect(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.fields.len()
    }

    /// The fields, in the order asked.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Field> {
        self.fields.iter().map(|(f, _)| f)
    }

    /// The fields with their byte limits, in the order asked.
    pub(crate) fn with_limits(&self) -> impl Iterator<Item = (&Field, usize)> {
        self.fields.iter().map(|(f, l)| (f, *l))
    }

    /// The names, in the order asked.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(f, _)| f.name())
    }

    /// The sum of the fields' limits: the most one sample's fields hold.
    pub(crate) fn bytes_per_sample(&self) -> u64 {
        self.fields.iter().map(|(_, l)| *l as u64).sum()
    }

    /// Checks settings alone: names and limits.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        for (k, (f, limit)) in self.fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(Error::config("field", "a field's name is empty"));
            }
            if self.fields[..k].iter().any(|(g, _)| g.name == f.name) {
                return Err(Error::config(
                    "field",
                    format!("`{}` is asked for twice", f.name),
                ));
            }
            if *limit == 0 || *limit > MAX_FIELD_LIMIT {
                return Err(Error::config(
                    "field_limit",
                    format!(
                        "`{}`: a limit of {limit} bytes; it must be 1..={MAX_FIELD_LIMIT}",
                        f.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks one sample's values, found by `find` for each field (in order), against the
    /// specs: a missing required field, or a value over its limit, is an error naming the
    /// sample (`name`) and the field.
    pub(crate) fn collect(
        &self,
        name: &Path,
        mut find: impl FnMut(usize, &Field) -> Result<FieldData, Error>,
    ) -> Result<SampleFields, Error> {
        let mut out = Vec::with_capacity(self.fields.len());
        for (k, (field, limit)) in self.fields.iter().enumerate() {
            let value = find(k, field)?;
            check(name, field, *limit, &value)?;
            out.push(value);
        }
        Ok(SampleFields(out))
    }
}

/// Checks one value against its field's settings.
pub(crate) fn check(
    name: &Path,
    field: &Field,
    limit: usize,
    value: &FieldData,
) -> Result<(), Error> {
    if matches!(value, FieldData::Missing) && !field.optional {
        return Err(Error::field(
            name,
            &field.name,
            "missing (a sample without it is an error; Field::optional() delivers none)",
        ));
    }
    let bytes = value.bytes();
    if bytes > limit {
        return Err(too_large(name, &field.name, bytes as u64, limit));
    }
    Ok(())
}

/// The error for a value of `bytes` over the field's `limit`.
pub(crate) fn too_large(name: &Path, field: &str, bytes: u64, limit: usize) -> Error {
    Error::field(
        name,
        field,
        format!(
            "{bytes} bytes, over its limit of {limit} (Field::limit, field_limit, --field-limit)"
        ),
    )
}

/// One sample's values, in the order of the loader's fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SampleFields(pub(crate) Vec<FieldData>);

/// A batch's column of one field: the values of its samples back to back, text and bytes in
/// one buffer, integers and floats in theirs, and each sample's span of its kind's buffer.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldStore {
    /// Each sample's kind: 0 missing, 1 text, 2 bytes, 3 ints, 4 floats.
    tags: Vec<u8>,
    /// Sample `i`'s value is `spans[i].0..spans[i].1` of its kind's buffer.
    spans: Vec<(u32, u32)>,
    bytes: Vec<u8>,
    ints: Vec<i64>,
    floats: Vec<f32>,
}

impl FieldStore {
    pub(crate) fn clear(&mut self) {
        self.tags.clear();
        self.spans.clear();
        self.bytes.clear();
        self.ints.clear();
        self.floats.clear();
    }

    /// Appends one sample's value.
    pub(crate) fn push(&mut self, value: &FieldData) {
        fn append<T: Copy>(buf: &mut Vec<T>, v: &[T]) -> (u32, u32) {
            let start = buf.len() as u32;
            buf.extend_from_slice(v);
            (start, buf.len() as u32)
        }
        let (tag, span) = match value {
            FieldData::Missing => (0, (0, 0)),
            FieldData::Text(b) => (1, append(&mut self.bytes, b)),
            FieldData::Bytes(b) => (2, append(&mut self.bytes, b)),
            FieldData::Ints(v) => (3, append(&mut self.ints, v)),
            FieldData::Floats(v) => (4, append(&mut self.floats, v)),
        };
        self.tags.push(tag);
        self.spans.push(span);
    }

    /// Sample `i`'s value (`None`: missing).
    fn get(&self, i: usize) -> Option<FieldValue<'_>> {
        let tag = *self.tags.get(i)?;
        let (from, to) = self.spans[i];
        let r = from as usize..to as usize;
        Some(match tag {
            1 => FieldValue::Text(std::str::from_utf8(&self.bytes[r]).unwrap_or_default()),
            2 => FieldValue::Bytes(&self.bytes[r]),
            3 => FieldValue::Ints(&self.ints[r]),
            4 => FieldValue::Floats(&self.floats[r]),
            _ => return None,
        })
    }

    /// A copy of sample `i`'s value.
    #[cfg(test)]
    pub(crate) fn data(&self, i: usize) -> FieldData {
        match self.get(i) {
            None => FieldData::Missing,
            Some(FieldValue::Text(t)) => FieldData::Text(t.as_bytes().to_vec()),
            Some(FieldValue::Bytes(b)) => FieldData::Bytes(b.to_vec()),
            Some(FieldValue::Ints(v)) => FieldData::Ints(v.to_vec()),
            Some(FieldValue::Floats(v)) => FieldData::Floats(v.to_vec()),
        }
    }
}

/// A batch's values of one field, in the batch's sample order.
#[derive(Debug, Clone, Copy)]
pub struct FieldColumn<'a> {
    name: &'a str,
    store: &'a FieldStore,
}

impl<'a> FieldColumn<'a> {
    pub(crate) fn new(name: &'a str, store: &'a FieldStore) -> Self {
        FieldColumn { name, store }
    }

    /// The field's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The number of samples (the batch's).
    pub fn len(&self) -> usize {
        self.store.tags.len()
    }

    /// True for a column of no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sample `i`'s value; `None` where the sample has none (an optional field) or `i` is past
    /// the batch.
    pub fn get(&self, i: usize) -> Option<FieldValue<'a>> {
        self.store.get(i)
    }

    /// Sample `i`'s value as text: `None` if it is missing or not text.
    pub fn text(&self, i: usize) -> Option<&'a str> {
        match self.get(i)? {
            FieldValue::Text(t) => Some(t),
            _ => None,
        }
    }

    /// Sample `i`'s value as bytes (text's UTF-8 bytes too): `None` if it is missing or
    /// numbers.
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        match self.get(i)? {
            FieldValue::Text(t) => Some(t.as_bytes()),
            FieldValue::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// Sample `i`'s integers: `None` if missing or not integers.
    pub fn ints(&self, i: usize) -> Option<&'a [i64]> {
        match self.get(i)? {
            FieldValue::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// Sample `i`'s floats: `None` if missing or not floats.
    pub fn floats(&self, i: usize) -> Option<&'a [f32]> {
        match self.get(i)? {
            FieldValue::Floats(v) => Some(v),
            _ => None,
        }
    }

    /// Every sample's floats as one `[samples, width]` matrix, without a copy: where every
    /// sample has `width` floats. `None` otherwise (a missing value, another kind, or rows of
    /// different lengths).
    pub fn float_matrix(&self) -> Option<(&'a [f32], [usize; 2])> {
        let n = self.len();
        if n == 0 || self.store.tags.iter().any(|&t| t != 4) {
            return None;
        }
        let all = &self.store.floats[..];
        let width = all.len() / n;
        (width * n == all.len() && (0..n).all(|i| self.floats(i).map(<[f32]>::len) == Some(width)))
            .then_some((all, [n, width]))
    }

    /// Every sample's integers as one `[samples, width]` matrix, without a copy: where every
    /// sample has `width` integers. `None` otherwise.
    pub fn int_matrix(&self) -> Option<(&'a [i64], [usize; 2])> {
        let n = self.len();
        if n == 0 || self.store.tags.iter().any(|&t| t != 3) {
            return None;
        }
        let all = &self.store.ints[..];
        let width = all.len() / n;
        (width * n == all.len() && (0..n).all(|i| self.ints(i).map(<[i64]>::len) == Some(width)))
            .then_some((all, [n, width]))
    }

    /// The column's text and bytes, back to back (Arrow's values buffer).
    pub fn value_bytes(&self) -> &'a [u8] {
        &self.store.bytes
    }

    /// The column as a target of training, row-major with its shape; see [`Target`]. The one
    /// conversion candle, burn and tch tensors of a field are made from
    /// (`Batch::field_to_candle` with the `candle` feature,
    /// imagefeed-burn's `field_tensor`, or `tch::Tensor::from_slice` of these values).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), imagefeed::Error> {
    /// use imagefeed::{Loader, Source, Target, TargetValues};
    /// // Records with an int64 list feature `labels` (a multi-label dataset).
    /// let loader = Loader::builder(Source::open("train.tfrecord")?).field("labels").build()?;
    /// for batch in loader.epoch(0) {
    ///     let batch = batch?;
    ///     let labels = batch.field("labels").expect("asked for");
    ///     let (values, [n, classes]) = labels.target(Target::MultiHot { classes: 80 })?;
    ///     let TargetValues::F32(multi_hot) = values else { unreachable!() };
    ///     assert_eq!(multi_hot.len(), n * classes);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// Text values count as their numbers, separated by white space or commas and optionally
    /// in brackets (a `.cls` member `3 7`, a TSV column `1,5`, a JSON array `[0.5, 2.0]`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the field for a
    /// sample without a value, bytes or text that is not numbers, an integer outside
    /// `0..classes` for a multi-hot target, or rows of different lengths for [`Target::Dense`].
    pub fn target(&self, target: Target) -> Result<(TargetValues, [usize; 2]), Error> {
        let bad = |why: String| Error::config("field", format!("`{}`: {why}", self.name));
        let n = self.len();
        let mut rows: Vec<Row<'_>> = Vec::with_capacity(n);
        for i in 0..n {
            rows.push(match self.get(i) {
                None => return Err(bad(format!("sample {i} of the batch has no value"))),
                Some(FieldValue::Ints(x)) => Row::Ints(Cow::Borrowed(x)),
                Some(FieldValue::Floats(x)) => Row::Floats(Cow::Borrowed(x)),
                Some(FieldValue::Text(t)) => Row::parse(t).ok_or_else(|| {
                    bad(format!(
                        "sample {i}'s text {:?} is not a list of numbers",
                        t.chars().take(60).collect::<String>()
                    ))
                })?,
                Some(FieldValue::Bytes(_)) => {
                    return Err(bad(format!("sample {i}'s value is bytes, not numbers")))
                }
            });
        }
        let floats = rows.iter().any(|v| matches!(v, Row::Floats(_)));
        let (width, pad) = match target {
            Target::MultiHot { classes } => {
                let mut out = vec![0f32; n * classes];
                for (i, v) in rows.iter().enumerate() {
                    let Row::Ints(labels) = v else {
                        return Err(bad(format!(
                            "sample {i}'s value is floats, not class labels"
                        )));
                    };
                    for &l in labels.iter() {
                        let k = usize::try_from(l)
                            .ok()
                            .filter(|&k| k < classes)
                            .ok_or_else(|| {
                                bad(format!("sample {i} holds label {l}, outside 0..{classes}"))
                            })?;
                        out[i * classes + k] = 1.0;
                    }
                }
                return Ok((TargetValues::F32(out), [n, classes]));
            }
            Target::Dense => {
                let width = rows.first().map_or(0, Row::len);
                if rows.iter().any(|v| v.len() != width) {
                    return Err(bad(
                        "rows of different lengths (Target::Padded pads them)".into()
                    ));
                }
                (width, 0.0)
            }
            Target::Padded { pad } => (rows.iter().map(Row::len).max().unwrap_or(0), pad),
        };
        if floats {
            let mut out = vec![pad as f32; n * width];
            for (i, v) in rows.iter().enumerate() {
                let row = &mut out[i * width..];
                match v {
                    Row::Floats(x) => row[..x.len()].copy_from_slice(x),
                    Row::Ints(x) => {
                        for (o, &e) in row.iter_mut().zip(x.iter()) {
                            *o = e as f32;
                        }
                    }
                }
            }
            Ok((TargetValues::F32(out), [n, width]))
        } else {
            let mut out = vec![pad as i64; n * width];
            for (i, v) in rows.iter().enumerate() {
                if let Row::Ints(x) = v {
                    out[i * width..i * width + x.len()].copy_from_slice(x);
                }
            }
            Ok((TargetValues::I64(out), [n, width]))
        }
    }
}

/// One sample's numbers for [`FieldColumn::target`]: a list field's values as they are, or a
/// text value's numbers.
enum Row<'a> {
    Ints(Cow<'a, [i64]>),
    Floats(Cow<'a, [f32]>),
}

impl Row<'_> {
    fn len(&self) -> usize {
        match self {
            Row::Ints(x) => x.len(),
            Row::Floats(x) => x.len(),
        }
    }

    /// Numbers written as text, as a `.cls` member, a TSV column or a JSON array holds them:
    /// separated by white space or commas, optionally in brackets (`3`, `1 5 7`, `[0.5, 2]`).
    /// Integers if every one is, else floats; `None` for anything else.
    fn parse(text: &str) -> Option<Row<'static>> {
        let t = text.trim();
        let t = t
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(t);
        let words = t
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty());
        if let Some(ints) = words
            .clone()
            .map(|w| w.parse::<i64>().ok())
            .collect::<Option<Vec<_>>>()
        {
            return Some(Row::Ints(Cow::Owned(ints)));
        }
        words
            .map(|w| w.parse::<f32>().ok().filter(|f| f.is_finite()))
            .collect::<Option<Vec<_>>>()
            .map(|f| Row::Floats(Cow::Owned(f)))
    }
}

/// How a field of numbers becomes a training target ([`FieldColumn::target`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Target {
    /// Every row as it is: rows of one length (a float vector, a fixed number of labels).
    Dense,
    /// Rows padded with `pad` to the longest row of the batch (a list of labels of any length;
    /// integers stay integers, floats `f32`).
    Padded {
        /// The value of the padding.
        pad: f64,
    },
    /// Class labels as a `[n, classes]` multi-hot `f32` matrix (1 where a sample has the
    /// label).
    MultiHot {
        /// The number of classes.
        classes: usize,
    },
}

/// A target's values ([`FieldColumn::target`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TargetValues {
    /// `f32` values (floats, multi-hot).
    F32(Vec<f32>),
    /// `i64` values (integers).
    I64(Vec<i64>),
}

/// A batch's values of one field taken by value ([`Batch::into_owned`](crate::Batch::into_owned)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OwnedField {
    /// The field's name.
    pub name: String,
    /// Each sample's value (`None`: missing).
    pub values: Vec<Option<OwnedFieldValue>>,
}

/// One sample's value of a field, by value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OwnedFieldValue {
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// Integers.
    Ints(Vec<i64>),
    /// Floating-point numbers.
    Floats(Vec<f32>),
}

impl From<FieldValue<'_>> for OwnedFieldValue {
    fn from(v: FieldValue<'_>) -> Self {
        match v {
            FieldValue::Text(t) => OwnedFieldValue::Text(t.to_string()),
            FieldValue::Bytes(b) => OwnedFieldValue::Bytes(b.to_vec()),
            FieldValue::Ints(v) => OwnedFieldValue::Ints(v.to_vec()),
            FieldValue::Floats(v) => OwnedFieldValue::Floats(v.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_gives_back_every_value_of_every_kind() {
        let values = [
            FieldData::Text(b"a cat".to_vec()),
            FieldData::Missing,
            FieldData::Bytes(vec![0xff, 0]),
            FieldData::Ints(vec![1, 2, 3]),
            FieldData::Text(Vec::new()),
            FieldData::Floats(vec![0.5]),
            FieldData::Missing,
            FieldData::Ints(vec![]),
            FieldData::Text("é".as_bytes().to_vec()),
        ];
        let mut store = FieldStore::default();
        for v in &values {
            store.push(v);
        }
        for (i, v) in values.iter().enumerate() {
            assert_eq!(&store.data(i), v, "sample {i}");
        }
        let col = FieldColumn::new("f", &store);
        assert_eq!(col.text(0), Some("a cat"));
        assert_eq!(col.get(1), None);
        assert_eq!(col.bytes(2), Some(&[0xff, 0][..]));
        assert_eq!(col.ints(3), Some(&[1, 2, 3][..]));
        assert_eq!(col.text(8), Some("é"));
        assert_eq!(col.float_matrix(), None);
        store.clear();
        assert!(FieldColumn::new("f", &store).is_empty());
    }

    #[test]
    fn targets_pad_and_multi_hot() {
        let mut store = FieldStore::default();
        store.push(&FieldData::Ints(vec![1, 3]));
        store.push(&FieldData::Ints(vec![2]));
        let col = FieldColumn::new("labels", &store);
        assert_eq!(
            col.target(Target::MultiHot { classes: 4 }).unwrap(),
            (
                TargetValues::F32(vec![0., 1., 0., 1., 0., 0., 1., 0.]),
                [2, 4]
            )
        );
        assert_eq!(
            col.target(Target::Padded { pad: -1.0 }).unwrap(),
            (TargetValues::I64(vec![1, 3, 2, -1]), [2, 2])
        );
        let e = col.target(Target::Dense).unwrap_err().to_string();
        assert!(e.contains("`labels`: rows of different lengths"), "{e}");
        let e = col
            .target(Target::MultiHot { classes: 3 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("sample 0 holds label 3, outside 0..3"), "{e}");
        let mut text = FieldStore::default();
        text.push(&FieldData::Text(b"a".to_vec()));
        let e = FieldColumn::new("t", &text)
            .target(Target::Dense)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("sample 0's text \"a\" is not a list of numbers"),
            "{e}"
        );
        // Numbers written as text: a `.cls` member, a TSV column, a JSON array.
        let mut text = FieldStore::default();
        for t in ["3", " 1 5\n", "[0, 2]", "4,1"] {
            text.push(&FieldData::Text(t.as_bytes().to_vec()));
        }
        assert_eq!(
            FieldColumn::new("t", &text)
                .target(Target::MultiHot { classes: 6 })
                .unwrap()
                .0,
            TargetValues::F32(vec![
                0., 0., 0., 1., 0., 0., //
                0., 1., 0., 0., 0., 1., //
                1., 0., 1., 0., 0., 0., //
                0., 1., 0., 0., 1., 0.,
            ])
        );
        let mut text = FieldStore::default();
        text.push(&FieldData::Text(b"[0.5, 2]".to_vec()));
        text.push(&FieldData::Ints(vec![7]));
        assert_eq!(
            FieldColumn::new("t", &text)
                .target(Target::Padded { pad: 0.0 })
                .unwrap(),
            (TargetValues::F32(vec![0.5, 2.0, 7.0, 0.0]), [2, 2])
        );
        let mut text = FieldStore::default();
        text.push(&FieldData::Text(b"1 nan".to_vec()));
        assert!(FieldColumn::new("t", &text).target(Target::Dense).is_err());
        let mut floats = FieldStore::default();
        floats.push(&FieldData::Floats(vec![0.5, 1.5]));
        floats.push(&FieldData::Floats(vec![2.0, 3.0]));
        assert_eq!(
            FieldColumn::new("f", &floats)
                .target(Target::Dense)
                .unwrap(),
            (TargetValues::F32(vec![0.5, 1.5, 2.0, 3.0]), [2, 2])
        );
    }

    #[test]
    fn equal_rows_of_floats_are_a_matrix() {
        let mut store = FieldStore::default();
        for i in 0..3 {
            store.push(&FieldData::Floats(vec![i as f32, 1.0]));
        }
        let col = FieldColumn::new("emb", &store);
        assert_eq!(
            col.float_matrix(),
            Some((&[0.0, 1.0, 1.0, 1.0, 2.0, 1.0][..], [3, 2]))
        );
        store.push(&FieldData::Floats(vec![1.0]));
        assert_eq!(FieldColumn::new("emb", &store).float_matrix(), None);
    }

    #[test]
    fn missing_and_oversized_values_name_the_sample_and_field() {
        let specs = FieldSpecs::new(&[Field::new("txt"), Field::new("json").optional()], 4);
        let name = Path::new("s.tar[k.jpg]");
        let ok = specs.collect(name, |_, f| {
            Ok(if f.name() == "txt" {
                FieldData::Text(b"abc".to_vec())
            } else {
                FieldData::Missing
            })
        });
        assert!(ok.is_ok());
        let e = specs
            .collect(name, |_, _| Ok(FieldData::Missing))
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.tar[k.jpg]: field `txt`: missing"), "{e}");
        let e = specs
            .collect(name, |_, _| Ok(FieldData::Text(b"abcde".to_vec())))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("field `txt`: 5 bytes, over its limit of 4"),
            "{e}"
        );
    }
}
