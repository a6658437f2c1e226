//! Fields from parquet columns: a column named as the field, of strings (text), binary
//! (bytes), integers or booleans (ints), floats (floats), or a list of numbers; read a row
//! group at a time beside its images.

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::ColumnReader;
use parquet::file::reader::RowGroupReader;
use parquet::schema::types::SchemaDescriptor;

use crate::fields::FieldData;

/// How a column's values become a field's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Bytes,
    Ints,
    Floats,
}

/// A field's column in one file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaf {
    leaf: usize,
    kind: Kind,
    /// A list a row (one level of repetition).
    list: bool,
    max_def: i16,
}

/// The column of field `name` in `schema`: a top-level column of that name (or a list of
/// numbers under it); `Err` says why there is none.
pub(crate) fn resolve(schema: &SchemaDescriptor, name: &str) -> Result<Leaf, String> {
    let mut found = None;
    for k in 0..schema.num_columns() {
        let c = schema.column(k);
        let parts = c.path().parts();
        if parts[0] != name {
            continue;
        }
        if found.is_some() {
            return Err(format!(
                "column `{name}` is a struct of several columns; a field is one column"
            ));
        }
        found = Some(k);
    }
    let Some(k) = found else {
        let names: Vec<String> = (0..schema.num_columns().min(16))
            .map(|k| schema.column(k).path().parts()[0].clone())
            .collect();
        return Err(format!(
            "no column `{name}` (its columns: {})",
            names.join(", ")
        ));
    };
    let c = schema.column(k);
    let list = match c.max_rep_level() {
        0 if c.path().parts().len() == 1 => false,
        1 => true,
        _ => {
            return Err(format!(
            "column `{name}` ({}) is nested; a field is a column of values or of lists of numbers",
            c.path().string()
        ))
        }
    };
    let text = matches!(
        c.converted_type(),
        ConvertedType::UTF8 | ConvertedType::JSON
    ) || matches!(
        c.logical_type_ref(),
        Some(LogicalType::String | LogicalType::Json | LogicalType::Enum)
    );
    let kind = match c.physical_type() {
        Physical::BYTE_ARRAY if text => Kind::Text,
        Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY => Kind::Bytes,
        Physical::BOOLEAN | Physical::INT32 | Physical::INT64 => Kind::Ints,
        Physical::FLOAT | Physical::DOUBLE => Kind::Floats,
        Physical::INT96 => {
            return Err(format!(
                "column `{name}` holds INT96 timestamps, which no field delivers"
            ))
        }
    };
    if list && matches!(kind, Kind::Text | Kind::Bytes) {
        return Err(format!(
            "column `{name}` is a list of strings or binary; a field is a value, or a list of numbers"
        ));
    }
    Ok(Leaf {
        leaf: k,
        kind,
        list,
        max_def: c.max_def_level(),
    })
}

/// The `path` string of a struct image column `image` (the `datasets` Image's
/// `struct<bytes, path>`): where a row whose `bytes` are null has its image.
pub(crate) fn image_path_leaf(schema: &SchemaDescriptor, image: &str) -> Option<Leaf> {
    (0..schema.num_columns()).find_map(|k| {
        let c = schema.column(k);
        let p = c.path().parts();
        (p.len() == 2
            && p[0] == image
            && p[1] == "path"
            && c.physical_type() == Physical::BYTE_ARRAY
            && c.max_rep_level() == 0)
            .then(|| Leaf {
                leaf: k,
                kind: Kind::Text,
                list: false,
                max_def: c.max_def_level(),
            })
    })
}

/// Reads `rows` rows of a field's column from row group `group`.
pub(crate) fn read(
    group: &dyn RowGroupReader,
    leaf: &Leaf,
    rows: usize,
) -> Result<Vec<FieldData>, parquet::errors::ParquetError> {
    let mut col = group.get_column_reader(leaf.leaf)?;
    let mut defs = Vec::new();
    let mut reps = Vec::new();
    macro_rules! read_all {
        ($r:expr, $t:ty) => {{
            let mut values: Vec<$t> = Vec::new();
            let (got, _, _) = if leaf.list {
                // Repetition levels only for a list column.
                $r.read_records(rows, Some(&mut defs), Some(&mut reps), &mut values)?
            } else {
                $r.read_records(rows, Some(&mut defs), None, &mut values)?
            };
            if got < rows {
                return Err(parquet::errors::ParquetError::General(format!(
                    "the column ends after {got} of {rows} rows"
                )));
            }
            values
        }};
    }
    let (ints, floats, bytes): (Vec<i64>, Vec<f32>, Vec<Vec<u8>>) = match &mut col {
        ColumnReader::BoolColumnReader(r) => {
            let v = read_all!(r, bool);
            (v.into_iter().map(i64::from).collect(), vec![], vec![])
        }
        ColumnReader::Int32ColumnReader(r) => {
            let v = read_all!(r, i32);
            (v.into_iter().map(i64::from).collect(), vec![], vec![])
        }
        ColumnReader::Int64ColumnReader(r) => (read_all!(r, i64), vec![], vec![]),
        ColumnReader::FloatColumnReader(r) => (vec![], read_all!(r, f32), vec![]),
        ColumnReader::DoubleColumnReader(r) => {
            let v = read_all!(r, f64);
            (vec![], v.into_iter().map(|x| x as f32).collect(), vec![])
        }
        ColumnReader::ByteArrayColumnReader(r) => {
            let v = read_all!(r, parquet::data_type::ByteArray);
            (
                vec![],
                vec![],
                v.into_iter().map(|b| b.data().to_vec()).collect(),
            )
        }
        ColumnReader::FixedLenByteArrayColumnReader(r) => {
            let v = read_all!(r, parquet::data_type::FixedLenByteArray);
            (
                vec![],
                vec![],
                v.into_iter().map(|b| b.data().to_vec()).collect(),
            )
        }
        ColumnReader::Int96ColumnReader(_) => {
            return Err(parquet::errors::ParquetError::General(
                "an INT96 column".into(),
            ))
        }
    };
    let mut out = Vec::with_capacity(rows);
    let present = |d: i16| leaf.max_def == 0 || d == leaf.max_def;
    if !leaf.list {
        let (mut ints, mut floats, mut bytes) =
            (ints.into_iter(), floats.into_iter(), bytes.into_iter());
        for r in 0..rows {
            if !present(defs.get(r).copied().unwrap_or(leaf.max_def)) {
                out.push(FieldData::Missing);
                continue;
            }
            out.push(match leaf.kind {
                Kind::Ints => FieldData::Ints(ints.next().into_iter().collect()),
                Kind::Floats => FieldData::Floats(floats.next().into_iter().collect()),
                Kind::Text => FieldData::text_or_bytes(bytes.next().unwrap_or_default()),
                Kind::Bytes => FieldData::Bytes(bytes.next().unwrap_or_default()),
            });
        }
        return Ok(out);
    }
    // A list a row: a row starts at each repetition level 0; an element is present at the
    // full definition level; a row whose first level is 0 is a null list (missing).
    let (mut at_int, mut at_float) = (0usize, 0usize);
    let mut row: Option<(bool, Vec<i64>, Vec<f32>)> = None;
    let finish = |row: Option<(bool, Vec<i64>, Vec<f32>)>, out: &mut Vec<FieldData>| {
        if let Some((null, i, f)) = row {
            out.push(match (null, leaf.kind) {
                (true, _) => FieldData::Missing,
                (false, Kind::Floats) => FieldData::Floats(f),
                (false, _) => FieldData::Ints(i),
            });
        }
    };
    for (k, &d) in defs.iter().enumerate() {
        if reps.get(k).copied().unwrap_or(0) == 0 {
            finish(row.take(), &mut out);
            row = Some((d == 0 && leaf.max_def > 0, Vec::new(), Vec::new()));
        }
        if present(d) {
            if let Some((_, i, f)) = row.as_mut() {
                match leaf.kind {
                    Kind::Floats => {
                        f.push(floats.get(at_float).copied().unwrap_or_default());
                        at_float += 1;
                    }
                    _ => {
                        i.push(ints.get(at_int).copied().unwrap_or_default());
                        at_int += 1;
                    }
                }
            }
        }
    }
    finish(row.take(), &mut out);
    if out.len() != rows {
        return Err(parquet::errors::ParquetError::General(format!(
            "the list column holds {} rows where the group has {rows}",
            out.len()
        )));
    }
    Ok(out)
}
