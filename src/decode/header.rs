//! Reading what an image is before decoding it: the container format from its magic bytes,
//! and for JPEG the frame size, components, Adobe colour transform and EXIF orientation, all
//! from the markers before the first scan. Nothing here allocates in proportion to the image.

/// The container format, from the file's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Jpeg,
    Png,
    Gif,
    WebP,
    Bmp,
    Tiff,
    Avif,
    Text,
    Unknown,
}

impl Format {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
            Format::Gif => "GIF",
            Format::WebP => "WebP",
            Format::Bmp => "BMP",
            Format::Tiff => "TIFF",
            Format::Avif => "AVIF/HEIF",
            Format::Text => "text (an HTML page or error message?)",
            Format::Unknown => "unknown binary data",
        }
    }
}

pub(crate) fn sniff(b: &[u8]) -> Format {
    if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Format::Jpeg
    } else if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Format::Png
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Format::Gif
    } else if b.len() >= 12 && &b[0..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Format::WebP
    } else if b.starts_with(b"BM") {
        Format::Bmp
    } else if b.starts_with(b"II*\0") || b.starts_with(b"MM\0*") {
        Format::Tiff
    } else if b.len() >= 12 && &b[4..8] == b"ftyp" {
        Format::Avif
    } else if looks_like_text(b) {
        Format::Text
    } else {
        Format::Unknown
    }
}

/// The format whose signature `b` starts but stops short of (a JPEG or PNG file cut within
/// its first bytes: `FF D8`, or `89 50 4E`), if any.
pub(crate) fn cut_in_signature(b: &[u8]) -> Option<Format> {
    const SIGNATURES: [(&[u8], Format); 2] = [
        (&[0xFF, 0xD8, 0xFF], Format::Jpeg),
        (b"\x89PNG\r\n\x1a\n", Format::Png),
    ];
    SIGNATURES
        .iter()
        .find(|(sig, _)| !b.is_empty() && b.len() < sig.len() && sig.starts_with(b))
        .map(|&(_, f)| f)
}

fn looks_like_text(b: &[u8]) -> bool {
    let head = &b[..b.len().min(512)];
    if head.is_empty()
        || head
            .iter()
            .any(|&c| (c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r')) || c == 0x7F)
    {
        return false;
    }
    // A prefix of UTF-8 text may end in the middle of a character.
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

/// What the markers before the first scan say about a JPEG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegInfo {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) components: u8,
    pub(crate) progressive: bool,
    pub(crate) arithmetic: bool,
    pub(crate) lossless: bool,
    /// Hierarchical (differential) frames: SOF5–7 and SOF13–15.
    pub(crate) hierarchical: bool,
    /// EXIF orientation 1..=8 (1 when absent or invalid).
    pub(crate) orientation: u8,
    /// The offset of the first scan's header (just after its SOS marker).
    pub(crate) scan_offset: usize,
    /// Components in the first scan: fewer than `components` in a sequential frame means its
    /// components are in separate scans (non-interleaved).
    pub(crate) first_scan_components: u8,
}

/// Parses the JPEG markers up to the first SOS.
pub(crate) fn jpeg_info(b: &[u8]) -> Result<JpegInfo, String> {
    if !b.starts_with(&[0xFF, 0xD8]) {
        return Err("not a JPEG (no SOI marker)".into());
    }
    let mut pos = 2usize;
    let mut info: Option<JpegInfo> = None;
    let mut orientation = 1u8;
    loop {
        // Find the next marker: 0xFF, possibly repeated (fill bytes), then a code.
        while pos < b.len() && b[pos] != 0xFF {
            pos += 1; // tolerate garbage between segments, as libjpeg does (with a warning)
        }
        while pos < b.len() && b[pos] == 0xFF {
            pos += 1;
        }
        let Some(&code) = b.get(pos) else {
            return Err("truncated before the first scan (no SOS marker)".into());
        };
        pos += 1;
        match code {
            0xD8 | 0x01 | 0xD0..=0xD7 => continue, // standalone markers
            0xD9 => return Err("end of image before any scan".into()),
            _ => {}
        }
        let len = match b.get(pos..pos + 2) {
            Some(l) => usize::from(u16::from_be_bytes([l[0], l[1]])),
            None => return Err("truncated in a marker segment".into()),
        };
        if len < 2 {
            return Err(format!("marker 0x{code:02X} has an invalid length {len}"));
        }
        let Some(seg) = b.get(pos + 2..pos + len) else {
            return Err(format!("truncated in marker 0x{code:02X}"));
        };
        match code {
            0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                if seg.len() < 6 {
                    return Err("SOF marker too short".into());
                }
                let height = u32::from(u16::from_be_bytes([seg[1], seg[2]]));
                let width = u32::from(u16::from_be_bytes([seg[3], seg[4]]));
                let components = seg[5];
                if width == 0 || height == 0 {
                    return Err(format!(
                        "frame size {width}x{height}: a zero size (or a DNL marker) is not supported"
                    ));
                }
                if !matches!(components, 1 | 3 | 4) {
                    return Err(format!("{components} colour components are not supported"));
                }
                if info.is_some() {
                    return Err("more than one frame header (SOF)".into());
                }
                info = Some(JpegInfo {
                    width,
                    height,
                    components,
                    progressive: matches!(code, 0xC2 | 0xC6 | 0xCA | 0xCE),
                    arithmetic: code >= 0xC9,
                    lossless: matches!(code, 0xC3 | 0xC7 | 0xCB | 0xCF),
                    hierarchical: matches!(code, 0xC5..=0xC7 | 0xCD..=0xCF),
                    orientation: 1,
                    scan_offset: 0,
                    first_scan_components: 0,
                });
            }
            0xDA => {
                let mut i =
                    info.ok_or_else(|| String::from("scan before the frame header (SOF)"))?;
                i.orientation = orientation;
                i.scan_offset = pos;
                // An empty scan header is left to the decoders to report.
                i.first_scan_components = seg.first().copied().unwrap_or(i.components);
                return Ok(i);
            }
            0xE1 if seg.starts_with(b"Exif\0\0") => {
                orientation = exif_orientation(&seg[6..]).unwrap_or(1);
            }
            _ => {}
        }
        pos += len;
    }
}

/// A copy of the JPEG `b` without its marker segments whose codes are in `codes` (before the
/// first scan). Where the segments stop parsing (fill bytes, garbage, a bad length) the rest is
/// copied as it is. Used by the libjpeg-turbo path only (the pure-Rust decoder does not fail on
/// metadata warnings).
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
pub(crate) fn without_segments(b: &[u8], codes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut pos = 2.min(b.len());
    out.extend_from_slice(&b[..pos]);
    while let Some(&[0xFF, code, l0, l1]) = b.get(pos..pos + 4) {
        let end = pos + 2 + usize::from(u16::from_be_bytes([l0, l1]));
        if !(0xC0..=0xFE).contains(&code) || code == 0xDA || end < pos + 4 || end > b.len() {
            break;
        }
        if !codes.contains(&code) {
            out.extend_from_slice(&b[pos..end]);
        }
        pos = end;
    }
    out.extend_from_slice(&b[pos..]);
    out
}

/// True if an EOI marker (FF D9) follows the first scan of a JPEG whose scan header starts
/// at `scan_offset`. In entropy-coded data a 0xFF is always followed by 0x00 (stuffing), a
/// restart marker or another marker, so a file cut anywhere after its headers has none.
///
/// Searched from the end, where a whole file's EOI is (or before a little trailing data): a
/// forward search read every byte of every cropped decode's file, 2.4% of a
/// random-resized-crop epoch's time on ImageNet-sized photos.
pub(crate) fn has_eoi_after(b: &[u8], scan_offset: usize) -> bool {
    b.get(scan_offset..)
        .is_some_and(|rest| rest.windows(2).rev().any(|w| w == [0xFF, 0xD9]))
}

/// The orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block, if valid.
pub(crate) fn exif_orientation(tiff: &[u8]) -> Option<u8> {
    let big = match tiff.get(0..4)? {
        b"MM\0*" => true,
        b"II*\0" => false,
        _ => return None,
    };
    let u16_at = |p: usize| -> Option<u16> {
        let s = tiff.get(p..p.checked_add(2)?)?;
        Some(if big {
            u16::from_be_bytes([s[0], s[1]])
        } else {
            u16::from_le_bytes([s[0], s[1]])
        })
    };
    let u32_at = |p: usize| -> Option<u32> {
        let s = tiff.get(p..p.checked_add(4)?)?;
        let a = [s[0], s[1], s[2], s[3]];
        Some(if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    };
    let ifd = u32_at(4)? as usize;
    let count = usize::from(u16_at(ifd)?);
    for k in 0..count.min(1000) {
        let e = ifd.checked_add(2 + 12 * k)?;
        if u16_at(e)? == 0x0112 {
            // Type SHORT (3), count 1: the value sits in the first two bytes of the field.
            if u16_at(e + 2)? != 3 {
                return None;
            }
            let v = u16_at(e + 8)?;
            return (1..=8).contains(&v).then_some(v as u8);
        }
    }
    None
}

/// The EXIF orientation of a PNG's `eXIf` chunk, if any.
pub(crate) fn png_exif_orientation(b: &[u8]) -> Option<u8> {
    let mut pos = 8usize;
    while pos + 8 <= b.len() {
        let len = u32::from_be_bytes(b[pos..pos + 4].try_into().ok()?) as usize;
        let kind = &b[pos + 4..pos + 8];
        let data = b.get(pos + 8..pos.checked_add(8)?.checked_add(len)?)?;
        match kind {
            b"eXIf" => return exif_orientation(data),
            b"IDAT" | b"IEND" => return None, // eXIf must precede IDAT
            _ => {}
        }
        pos = pos.checked_add(12)?.checked_add(len)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sof(w: u16, h: u16, comps: u8, code: u8) -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(&[0xFF, code, 0, 8 + 3 * comps, 8]);
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&w.to_be_bytes());
        v.push(comps);
        for c in 0..comps {
            v.extend_from_slice(&[c + 1, 0x11, 0]);
        }
        v.extend_from_slice(&[0xFF, 0xDA, 0, 2]);
        v
    }

    #[test]
    fn reads_size_from_sof() {
        let i = jpeg_info(&sof(640, 480, 3, 0xC0)).unwrap();
        assert_eq!(
            (i.width, i.height, i.components, i.progressive),
            (640, 480, 3, false)
        );
        let i = jpeg_info(&sof(65000, 65000, 3, 0xC2)).unwrap();
        assert_eq!((i.width, i.height, i.progressive), (65000, 65000, true));
        // The first scan's component count, from its header (an empty one: the frame's).
        assert_eq!(i.first_scan_components, 3);
        let mut one = sof(640, 480, 3, 0xC0);
        one.truncate(one.len() - 2);
        one.extend_from_slice(&[0, 8, 1, 2, 0x00, 0, 63, 0]);
        assert_eq!(jpeg_info(&one).unwrap().first_scan_components, 1);
    }

    #[test]
    fn without_segments_drops_the_listed_segments_before_the_scan() {
        let full = sof(10, 10, 3, 0xC0);
        let app = |code: u8, body: &[u8]| {
            let mut v = vec![0xFF, code, 0, body.len() as u8 + 2];
            v.extend_from_slice(body);
            v
        };
        // SOI, APP0, APP2, APP1, then the frame header and the scan (with an APP2-like byte
        // pair in its data, which stays).
        let mut j = full[..2].to_vec();
        j.extend(app(0xE0, b"JFIF\0\x02\x01"));
        j.extend(app(0xE2, b"ICC_PROFILE\0"));
        j.extend(app(0xE1, b"Exif\0\0"));
        j.extend_from_slice(&full[2..]);
        j.extend_from_slice(&[0x12, 0xFF, 0xE2, 0x34, 0xFF, 0xD9]);
        let mut want = full[..2].to_vec();
        want.extend(app(0xE1, b"Exif\0\0"));
        want.extend_from_slice(&full[2..]);
        want.extend_from_slice(&[0x12, 0xFF, 0xE2, 0x34, 0xFF, 0xD9]);
        assert_eq!(without_segments(&j, &[0xE0, 0xE2]), want);
        assert_eq!(without_segments(&j, &[]), j);
        // Cut anywhere, or with a length running past the end: no panic, nothing added.
        for n in 0..j.len() {
            assert!(without_segments(&j[..n], &[0xE0, 0xE2]).len() <= n);
        }
        let mut bad = j.clone();
        bad[5] = 0xF0;
        assert_eq!(without_segments(&bad, &[0xE0]), bad);
    }

    #[test]
    fn every_prefix_is_an_error_or_ok_never_a_panic() {
        let full = sof(10, 10, 3, 0xC0);
        for n in 0..full.len() {
            let _ = jpeg_info(&full[..n]);
            let _ = sniff(&full[..n]);
        }
        assert!(jpeg_info(&full[..full.len() - 4]).is_err());
    }

    #[test]
    fn eoi_is_found_only_after_the_scan() {
        let mut full = sof(10, 10, 3, 0xC0);
        let i = jpeg_info(&full).unwrap();
        assert_eq!(&full[i.scan_offset - 2..i.scan_offset], &[0xFF, 0xDA]);
        full.extend_from_slice(&[0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD9]);
        assert!(has_eoi_after(&full, i.scan_offset));
        for cut in 1..=2 {
            assert!(!has_eoi_after(&full[..full.len() - cut], i.scan_offset));
        }
        // An EOI before the scan (an embedded thumbnail's) does not count.
        let mut thumb = vec![0xFF, 0xD8, 0xFF, 0xE1, 0, 4, 0xFF, 0xD9];
        thumb.extend_from_slice(&sof(10, 10, 3, 0xC0)[2..]);
        let i = jpeg_info(&thumb).unwrap();
        assert!(!has_eoi_after(&thumb, i.scan_offset));
    }

    #[test]
    fn exif_orientation_both_byte_orders() {
        // II, IFD at 8, one entry: 0x0112 SHORT 1 value 6.
        let le = [
            b'I', b'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0,
            0,
        ];
        assert_eq!(exif_orientation(&le), Some(6));
        let be = [
            b'M', b'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 3, 0, 0, 0, 0, 0,
            0,
        ];
        assert_eq!(exif_orientation(&be), Some(3));
        assert_eq!(exif_orientation(&le[..15]), None);
        let mut bad = le;
        bad[18] = 9;
        assert_eq!(exif_orientation(&bad), None);
    }

    #[test]
    fn sniffs_formats() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nxxxx"), Format::Png);
        assert_eq!(sniff(b"GIF89a...."), Format::Gif);
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Format::WebP);
        assert_eq!(sniff(b"<!DOCTYPE html><html>404</html>"), Format::Text);
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Format::Jpeg);
        assert_eq!(sniff(&[0x00, 0x01, 0x02, 0xF0, 0x00]), Format::Unknown);
    }

    #[test]
    fn files_cut_inside_a_signature_are_told_apart() {
        assert_eq!(cut_in_signature(&[0xFF]), Some(Format::Jpeg));
        assert_eq!(cut_in_signature(&[0xFF, 0xD8]), Some(Format::Jpeg));
        assert_eq!(cut_in_signature(b"\x89PNG\r\n"), Some(Format::Png));
        // A whole signature, another start, or nothing at all is not a cut signature.
        for b in [
            &[0xFF, 0xD8, 0xFF][..],
            &[0xFF, 0xD8, 0xFF, 0xE0],
            b"\x89PNG\r\n\x1a\n",
            &[0xFF, 0x00],
            &[0xD8],
            b"",
        ] {
            assert_eq!(cut_in_signature(b), None, "{b:?}");
        }
    }
}
