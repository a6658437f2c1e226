//! Entry points for the fuzz targets in `fuzz/`: the pure cores that take untrusted bytes.

use std::path::{Path, PathBuf};

use crate::batch::{BatchStorage, Dtype, Layout, Normalizer};
use crate::decode::{DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::decode::{Draw, Geometry};
use crate::ResizeFilter;

/// Decodes `bytes` (named `name`, whose extension matters), resizes to `size`×`size`, orients
/// and normalizes to f32 NCHW, with a small `max_pixels`. Odd sizes deliver JPEGs with
/// damaged data (`accept_jpeg_warnings`). Returns whether it decoded. With a cropping
/// transform, a file that decoded is decoded again through the table of files read to their
/// end; the harness panics (a fuzzing finding) if that gives an error or other pixels.
pub fn decode_transform(bytes: &[u8], name: &str, size: u32, zune: bool) -> bool {
    let settings = DecodeSettings {
        max_pixels: 16_000_000,
        apply_exif: true,
        check_extension: true,
        dct_scaling: true,
        accept_jpeg_warnings: size % 2 == 1,
        planes: true,
        jpeg_decoder: if zune {
            JpegDecoder::Zune
        } else {
            JpegDecoder::Auto
        },
    };
    let size = size.clamp(1, 256);
    let geom = Geometry {
        width: size,
        height: size,
        // Every transform, the cropping ones with a box drawn from the input's length.
        transform: match bytes.len() % 4 {
            0 => crate::Transform::Stretch,
            1 => crate::Transform::ShorterSideCenterCrop,
            2 => crate::Transform::center_crop(),
            _ => crate::Transform::random_resized_crop(),
        },
        flip: 0.5,
        filter: if bytes.len().is_multiple_of(3) {
            ResizeFilter::Antialiased
        } else {
            ResizeFilter::Bilinear
        },
    };
    let mut decoder = Decoder::new(settings);
    // A loader's table of files read to their end (strict cropped decodes): the first decode
    // records a clean file, the second then stops below its box and must give the same pixels.
    const INDICES: u64 = 1024;
    decoder.verified = Some(std::sync::Arc::new(crate::decode::VerifiedFiles::new(
        INDICES as usize,
    )));
    let mut out = vec![0u8; geom.sample_len()];
    let gate = LargeGate::default();
    let mut decode = |out: &mut [u8]| {
        decoder
            .decode_resize(
                bytes,
                Path::new(name),
                &geom,
                crate::decode::Target::Sample(Draw {
                    seed: 0,
                    epoch: 0,
                    index: bytes.len() as u64 % INDICES,
                }),
                false,
                &gate,
                out,
            )
            .is_ok()
    };
    let ok = decode(&mut out);
    if ok && geom.transform.crops() {
        let mut again = vec![0u8; out.len()];
        assert!(
            decode(&mut again) && again == out,
            "a second decode of a file that decoded gave an error or other pixels"
        );
    }
    if ok {
        let norm = Normalizer::new([0.5; 3], [0.25; 3], Layout::Nchw);
        let mut batch = BatchStorage::new(Dtype::F32, out.len());
        norm.write(&out, &mut batch, 0);
    }
    ok
}

/// Parses `bytes` as a file list. Returns the number of entries, or `None` for an error.
pub fn parse_list(bytes: &[u8]) -> Option<usize> {
    crate::source::format::list::parse_list(Path::new("fuzz.txt"), PathBuf::from("/data"), bytes)
        .ok()
        .map(|i| i.len())
}

/// Indexes `bytes` as a WebDataset tar shard, as opening a shard does (headers, `.cls` labels,
/// bounds against the shard's size). Returns the number of samples, or `None` for an error.
pub fn index_tar(bytes: &[u8]) -> Option<usize> {
    crate::source::format::tar::index_bytes(bytes).ok()
}

/// Indexes `bytes` as a TFRecord shard, as opening one does (framing, length CRCs, each
/// `tf.train.Example`'s keys and label), then reads every record as an epoch does (payload
/// CRC, image and label). Returns the number of records read, or `None` for a file refused at
/// open. Panics if opening and reading disagree on a record's label.
pub fn index_tfrecord(bytes: &[u8]) -> Option<usize> {
    let records = crate::source::format::tfrecord::index_bytes(bytes).ok()?;
    Some(records.iter().filter(|r| r.is_ok()).count())
}

/// One feature of a `tf.train.Example` as the TFRecord walker finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleFeature {
    /// The list the feature holds: 1 bytes, 2 float, 3 int64; 0 when it holds none.
    pub kind: u8,
    /// How many values the list holds.
    pub count: u64,
    /// The first value of a bytes list.
    pub first_bytes: Option<Vec<u8>>,
    /// The first value of an int64 list.
    pub first_int: Option<i64>,
}

/// Walks `payload` as one `tf.train.Example`, as reading a record does, for the features named
/// `keys`: for each, what it holds, or `None` where the example has no such key. `Err` (the
/// reason) for a payload that is not a well-formed `Example`. The `tfrecord` fuzz target and
/// a test compare this with prost's decoding of the same bytes.
pub fn walk_example(payload: &[u8], keys: &[&str]) -> Result<Vec<Option<ExampleFeature>>, String> {
    use crate::source::format::tfrecord::example::{walk, Fault, Slice};
    let mut w = Slice {
        bytes: payload,
        at: 0,
    };
    let walked = walk(&mut w, payload.len() as u64, keys).map_err(|e| match e {
        Fault::Bad(why) => why,
        Fault::Io(e) => e.to_string(),
    })?;
    let slice = |(at, len): (u64, u64)| payload[at as usize..(at + len) as usize].to_vec();
    Ok(walked
        .values
        .iter()
        .map(|v| {
            v.present.then(|| ExampleFeature {
                kind: v.kind,
                count: v.count,
                first_bytes: v.first_bytes.map(slice),
                first_int: v.first_int,
            })
        })
        .collect())
}

/// Indexes `bytes` as a parquet file in the `datasets` layout, as opening one does (footer,
/// schema, codecs, every label), then reads every row's image as an epoch does. Returns the
/// number of rows read, or `None` for a file refused at open.
#[cfg(feature = "parquet")]
pub fn index_parquet(bytes: &[u8]) -> Option<usize> {
    let rows = crate::source::format::parquet::index_bytes(bytes).ok()?;
    Some(rows.iter().filter(|r| r.is_ok()).count())
}

/// Parses `bytes` as a cache header and reads every record it claims, as the cache reader
/// does. Returns the number of records that decoded.
pub fn read_cache(bytes: &[u8]) -> usize {
    use crate::cache::format::{decode_record, Header, HEADER_LEN};
    let Some(head) = bytes.get(..HEADER_LEN as usize) else {
        let _ = Header::decode(bytes);
        return 0;
    };
    let Ok(header) = Header::decode(head) else {
        return 0;
    };
    let mut good = 0;
    for i in 0..header.count.min(1000) {
        let Some(start) = header
            .record_offset(i)
            .and_then(|s| usize::try_from(s).ok())
        else {
            break;
        };
        let Some(end) = usize::try_from(header.record_len())
            .ok()
            .and_then(|l| start.checked_add(l))
        else {
            break;
        };
        let Some(rec) = bytes.get(start..end) else {
            break;
        };
        if decode_record(rec, i as u32, header.sample_len()).is_ok() {
            good += 1;
        }
    }
    good
}
