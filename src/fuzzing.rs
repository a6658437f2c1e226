//! Entry points for the fuzz targets in `fuzz/`: the pure cores that take untrusted bytes.
//! Not part of the public API (hidden, no stability promise).

use std::path::{Path, PathBuf};

use crate::decode::{DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::transform::{BatchStorage, Dtype, Geometry, Layout, Normalizer, ResizeMode};

/// Decodes `bytes` (named `name`, whose extension matters), resizes to `size`×`size`, orients
/// and normalizes to f32 NCHW, with a small `max_pixels`. Returns whether it decoded.
pub fn decode_transform(bytes: &[u8], name: &str, size: u32, zune: bool) -> bool {
    let settings = DecodeSettings {
        max_pixels: 16_000_000,
        apply_exif: true,
        check_extension: true,
        dct_scaling: true,
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
        mode: if bytes.len() % 2 == 0 {
            ResizeMode::Stretch
        } else {
            ResizeMode::ShorterSideCenterCrop
        },
    };
    let mut decoder = Decoder::new(settings);
    let mut out = vec![0u8; geom.sample_len()];
    let gate = LargeGate::default();
    let ok = decoder
        .decode_resize(bytes, Path::new(name), &geom, false, &gate, &mut out)
        .is_ok();
    if ok {
        let norm = Normalizer::new([0.5; 3], [0.25; 3], Layout::Nchw);
        let mut batch = BatchStorage::new(Dtype::F32, out.len());
        norm.write(&out, &mut batch, 0);
    }
    ok
}

/// Parses `bytes` as a file list. Returns the number of entries, or `None` for an error.
pub fn parse_list(bytes: &[u8]) -> Option<usize> {
    crate::source::parse_list(Path::new("fuzz.txt"), PathBuf::from("/data"), bytes)
        .ok()
        .map(|i| i.len())
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
