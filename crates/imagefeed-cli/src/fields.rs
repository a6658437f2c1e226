//! The command line's view of per-sample fields: their sizes in an epoch's report, and
//! `--fields-out`'s JSON lines.

use std::io::Write;

use base64::Engine as _;
use imagefeed::{Batch, FieldValue};

/// Each field's values, missing values, bytes and largest value over an epoch.
pub(crate) struct Sizes {
    names: Vec<String>,
    /// (values, missing, bytes, largest) a field.
    counts: Vec<(u64, u64, u64, u64)>,
}

/// A value's bytes (numbers: 8 each, as the loader's limits count them).
fn bytes_of(v: &FieldValue<'_>) -> u64 {
    match v {
        FieldValue::Text(t) => t.len() as u64,
        FieldValue::Bytes(b) => b.len() as u64,
        FieldValue::Ints(v) => v.len() as u64 * 8,
        FieldValue::Floats(v) => v.len() as u64 * 8,
        _ => 0,
    }
}

impl Sizes {
    pub(crate) fn new(names: &[String]) -> Self {
        Sizes {
            names: names.to_vec(),
            counts: vec![(0, 0, 0, 0); names.len()],
        }
    }

    pub(crate) fn add(&mut self, batch: &Batch) {
        for (name, c) in self.names.iter().zip(&mut self.counts) {
            let Some(column) = batch.field(name) else {
                continue;
            };
            for i in 0..column.len() {
                match column.get(i) {
                    Some(v) => {
                        let n = bytes_of(&v);
                        c.0 += 1;
                        c.2 += n;
                        c.3 = c.3.max(n);
                    }
                    None => c.1 += 1,
                }
            }
        }
    }

    /// `{NAME: {"values": n, "missing": m, "bytes": b, "mean_bytes": x, "max_bytes": y}}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (name, &(values, missing, bytes, max)) in self.names.iter().zip(&self.counts) {
            out.insert(
                name.clone(),
                serde_json::json!({
                    "values": values,
                    "missing": missing,
                    "bytes": bytes,
                    "mean_bytes": if values > 0 { bytes as f64 / values as f64 } else { 0.0 },
                    "max_bytes": max,
                }),
            );
        }
        serde_json::Value::Object(out)
    }
}

/// A field's value as JSON: text a string, bytes base64, numbers a list.
fn value_json(v: Option<FieldValue<'_>>) -> serde_json::Value {
    match v {
        None => serde_json::Value::Null,
        Some(FieldValue::Text(t)) => t.into(),
        Some(FieldValue::Bytes(b)) => base64::engine::general_purpose::STANDARD.encode(b).into(),
        Some(FieldValue::Ints(v)) => v.into(),
        Some(FieldValue::Floats(v)) => v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>().into(),
        Some(_) => serde_json::Value::Null,
    }
}

/// One JSON line a sample of `batch`: `{"source": S, "index": I, "label": L, "fields": {…}}`.
pub(crate) fn write_lines(out: &mut impl Write, batch: &Batch) -> std::io::Result<()> {
    let columns: Vec<_> = batch.fields().collect();
    for (k, (&index, &label)) in batch.indices().iter().zip(batch.labels()).enumerate() {
        let mut fields = serde_json::Map::new();
        for c in &columns {
            fields.insert(c.name().to_string(), value_json(c.get(k)));
        }
        let source = batch.sources().get(k).copied().unwrap_or(0);
        // In this key order (a JSON object's own is unordered).
        writeln!(
            out,
            "{{\"source\":{source},\"index\":{index},\"label\":{label},\"fields\":{}}}",
            serde_json::Value::Object(fields)
        )?;
    }
    Ok(())
}
