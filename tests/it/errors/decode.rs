//! Hostile image files: every corrupt, truncated or bit-flipped file is an error naming it or
//! decodes; headers that claim more pixels than the data holds are refused before decoding;
//! warnings, ICC profiles and long sides in bounded memory.

use super::*;

#[test]
fn every_corrupt_testdata_file_is_an_error_naming_it() {
    // What each message must say, besides the path.
    let expected = [
        ("bitflip.jpg", ""),
        ("bomb_65000.jpg", "max_pixels"),
        ("empty.jpg", "empty"),
        ("garbage.jpg", "not a JPEG"),
        ("gif_named.jpg", "GIF"),
        ("html.jpg", "HTML"),
        ("no_eoi.jpg", ""),
        ("png_named.jpg", "PNG"),
        ("truncated_half.jpg", ""),
        ("truncated_header.jpg", ""),
        ("webp_named.jpg", "WebP"),
    ];
    let dir = common::testdata("corrupt");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        expected.map(|(n, _)| n.to_string()),
        "testdata/corrupt changed"
    );
    for (name, word) in expected {
        let path = dir.join(name);
        for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
            let zune = decoder == JpegDecoder::Zune || !cfg!(feature = "turbojpeg");
            if name == "bitflip.jpg" && zune {
                // zune-jpeg does not notice entropy-coded data left over before the EOI (what
                // libjpeg-turbo reports as "extraneous bytes"), so this file decodes to damaged
                // pixels. It must still be a value, not a panic.
                let ok = decodes_or_names_file(&path, decoder);
                println!("Zune: {name} decodes: {ok}");
                continue;
            }
            let e = expect_file_error(&path, move |b| b.jpeg_decoder(decoder));
            println!("{decoder:?}: {e}");
            assert!(matches!(e.kind(), ErrorKind::Decode { .. }), "{e:?}");
            assert!(
                contains_ci(&e.to_string(), word),
                "{decoder:?}: `{word}` missing: {e}"
            );
            // The decoder's message is part of the text and stays in the kind; `source()`
            // holds only what the text does not say, so that no cause prints twice.
            assert!(
                matches!(e.kind(), ErrorKind::Decode { source, .. }
                    if e.to_string().contains(&source.to_string())),
                "{e:?}"
            );
        }
    }
}

#[test]
fn every_truncated_prefix_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "baseline_420.jpg",
        "progressive.jpg",
        "restart.jpg",
        "cmyk.jpg",
    ] {
        let full = std::fs::read(common::testdata(&format!("valid/{name}"))).unwrap();
        let n = full.len();
        // 40 evenly spaced lengths, plus the classic cuts: the EOI marker half or all gone.
        let mut lengths: Vec<usize> = (0..40).map(|k| k * n / 40).collect();
        lengths.extend([n - 1, n - 2]);
        for len in lengths {
            let p = dir.path().join(format!("{len}_{name}"));
            std::fs::write(&p, &full[..len]).unwrap();
            for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
                // A strict decoder rejects every prefix: none of them is a whole image.
                let e = expect_file_error(&p, move |b| b.jpeg_decoder(decoder));
                assert!(matches!(e.kind(), ErrorKind::Decode { .. }), "{e:?}");
            }
        }
    }
}

#[test]
fn bit_flips_decode_or_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix(0x00B1_7F11_9500);
    let (mut ok, mut err) = (0, 0);
    for copy in 0..30 {
        let name = ["baseline_420.jpg", "progressive.jpg", "s444.jpg"][copy % 3];
        let mut bytes = std::fs::read(common::testdata(&format!("valid/{name}"))).unwrap();
        // Half the copies are hit in the headers (the first 700 bytes), half anywhere.
        let span = if copy % 2 == 0 { 700 } else { bytes.len() };
        for _ in 0..1 + rng.below(6) {
            let at = rng.below(span);
            bytes[at] ^= 1 << rng.below(8);
        }
        let p = dir.path().join(format!("flip_{copy:02}_{name}"));
        std::fs::write(&p, &bytes).unwrap();
        for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
            if decodes_or_names_file(&p, decoder) {
                ok += 1;
            } else {
                err += 1;
            }
        }
    }
    println!("bit flips: {ok} decoded, {err} errors naming the file");
    assert!(
        err > 0,
        "no flip was detected: the flips did not reach the decoder"
    );
}

/// The bytes of `jpeg` with the frame header's height and width set to `w`×`h`.
fn with_frame_size(jpeg: &[u8], w: u16, h: u16) -> Vec<u8> {
    let mut v = jpeg.to_vec();
    let sof = (2..v.len() - 8)
        .find(|&i| v[i] == 0xFF && matches!(v[i + 1], 0xC0..=0xC2))
        .expect("a frame header");
    v[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    v[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    v
}

/// A frame header claiming ten times the sides of the data behind it: libjpeg-turbo says the
/// data ends early; zune-jpeg filled the rest with zero bits and delivered it.
#[test]
fn a_header_claiming_more_pixels_than_its_data_is_an_error_with_either_decoder() {
    let dir = tempfile::tempdir().unwrap();
    let orig = std::fs::read(common::testdata("valid/baseline_420.jpg")).unwrap(); // 400x300
    let p = dir.path().join("claims_4000x3000.jpg");
    std::fs::write(&p, with_frame_size(&orig, 4000, 3000)).unwrap();
    // Both refuse it from its length, with either `accept_jpeg_warnings` (libjpeg-turbo said
    // "premature end of data segment", a warning that setting lets through, mostly grey). A
    // progressive file too: for a 1.2 KB file claiming 9000x9000, libjpeg-turbo kept every
    // coefficient of the frame (peak RSS 251 MB, 0.24 s) before saying the same.
    let prog = std::fs::read(common::testdata("valid/progressive.jpg")).unwrap();
    let q = dir.path().join("progressive_claims_9000x9000.jpg");
    std::fs::write(&q, with_frame_size(&prog, 9000, 9000)).unwrap();
    for (file, size) in [(&p, "4000x3000"), (&q, "9000x9000")] {
        for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
            for accept in [false, true] {
                let e = expect_file_error(file, move |b| {
                    b.jpeg_decoder(decoder).accept_jpeg_warnings(accept)
                })
                .to_string();
                println!("{decoder:?}, accept_jpeg_warnings({accept}): {e}");
                assert!(e.contains(&format!("cannot hold the {size} pixels")), "{e}");
                assert!(e.contains("truncated"), "{e}");
            }
        }
    }
    // The bounds never refuse a real file, however well it compresses: black 2048x2048
    // progressive and baseline JPEGs (about 49 KB for 65,536 blocks) decode with either decoder.
    // (Encoded with libjpeg-turbo, so only with its feature.)
    #[cfg(feature = "turbojpeg")]
    for progressive in [true, false] {
        let black = vec![0u8; 2048 * 2048 * 3];
        let mut c = imagefeed_jpeg::Compressor::new().unwrap();
        c.set_progressive(progressive).unwrap();
        c.set_optimize(true).unwrap();
        let image = imagefeed_jpeg::Image {
            pixels: &black[..],
            width: 2048,
            pitch: 2048 * 3,
            height: 2048,
            format: imagefeed_jpeg::PixelFormat::RGB,
        };
        let jpeg = c.compress_to_vec(image).unwrap();
        println!(
            "black 2048x2048, progressive {progressive}: {} bytes",
            jpeg.len()
        );
        let path = dir.path().join(format!("black_{progressive}.jpg"));
        std::fs::write(&path, &jpeg).unwrap();
        for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
            let px = common::load_one(&path, move |b| b.jpeg_decoder(decoder))
                .unwrap_or_else(|e| panic!("{decoder:?}: {e}"));
            assert!(
                px.iter().all(|&v| v <= 1),
                "{decoder:?}: a black image stays black"
            );
        }
    }
    // Frame types zune-jpeg does not decode are named as such (it said "Number of
    // components cannot be zero").
    for (sof, what) in [
        (0xC3u8, "lossless"),
        (0xC5, "hierarchical"),
        (0xC9, "arithmetic-coded"),
    ] {
        let mut v = orig.clone();
        let at = (2..v.len() - 1)
            .find(|&i| v[i] == 0xFF && v[i + 1] == 0xC0)
            .unwrap();
        v[at + 1] = sof;
        let p = dir.path().join(format!("sof_{sof:x}.jpg"));
        std::fs::write(&p, v).unwrap();
        let e = expect_file_error(&p, |b| b.jpeg_decoder(JpegDecoder::Zune)).to_string();
        assert!(e.contains(&format!("does not decode {what} JPEGs")), "{e}");
        expect_file_error(&p, |b| b);
    }
}

/// A 4x4 RGB8 PNG whose IHDR (with a valid CRC) claims `w`×`h` pixels: its data holds 16.
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut png = common::encode_png(&[9; 4 * 4 * 3], 4, 4);
    set_png_size(&mut png, w, h);
    png
}

/// Rewrites the width and height in `png`'s IHDR, and its CRC.
fn set_png_size(png: &mut [u8], w: u32, h: u32) {
    png[16..20].copy_from_slice(&w.to_be_bytes());
    png[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = common::crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn headers_claiming_65000x65000_are_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for name in ["odd_7x5.jpg", "progressive.jpg", "gray.jpg"] {
        let orig = std::fs::read(common::testdata(&format!("valid/{name}"))).unwrap();
        let p = dir.path().join(format!("bomb_{name}"));
        std::fs::write(&p, with_frame_size(&orig, 65000, 65000)).unwrap();
        files.push(p);
    }
    // A PNG whose IHDR (with a valid CRC) claims 65000x65000.
    let mut png = png_claiming(65000, 65000);
    let p = dir.path().join("bomb.png");
    std::fs::write(&p, &png).unwrap();
    files.push(p);
    // PNG's largest sizes: (2^31 - 1) on both sides, and a single row that wide.
    let mut claims: Vec<(u32, u32)> = Vec::new();
    for (w, h) in [(i32::MAX as u32, i32::MAX as u32), (i32::MAX as u32, 1)] {
        set_png_size(&mut png, w, h);
        let p = dir.path().join(format!("bomb_{w}x{h}.png"));
        std::fs::write(&p, &png).unwrap();
        files.push(p);
        claims.push((w, h));
    }
    for p in files {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let size = match claims
            .iter()
            .find(|(w, h)| name == format!("bomb_{w}x{h}.png"))
        {
            Some((w, h)) => format!("{w}x{h}"),
            None => "65000x65000".to_string(),
        };
        for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
            let started = std::time::Instant::now();
            let e = expect_file_error(&p, move |b| b.jpeg_decoder(decoder));
            assert!(contains_ci(&e.to_string(), "max_pixels"), "{e}");
            assert!(contains_ci(&e.to_string(), &size), "{e}");
            // Refused from the header: no 12.7 GB buffer, no long decode.
            assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
        }
    }
}

#[test]
fn other_formats_named_jpg() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, data: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        p
    };
    let rgb: Vec<u8> = (0..32 * 24 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let png_bytes = common::encode_png(&rgb, 32, 24);
    let html = write(
        "page.jpg",
        b"<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>Access denied</body></html>\n",
    );
    let png = write("png.jpg", &png_bytes);
    let gif = write("anim.jpg", b"GIF89a\x20\x00\x18\x00\xf0\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x00\x00\x00\x00\x00,\x00\x00\x00\x00\x20\x00\x18\x00\x00\x02\x02D\x01\x00;");
    let webp = write("pic.jpeg", b"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x000\x01\x00\x9d\x01\x2a\x01\x00\x01\x00\x02\x004%\xa4\x00\x03p\x00\xfe\xfb\x94\x00\x00");
    let jpeg_as_png = write("photo.png", &common::id_jpeg(5));
    for (p, word) in [
        (&html, "HTML"),
        (&png, "PNG"),
        (&gif, "GIF"),
        (&webp, "WebP"),
        (&jpeg_as_png, "JPEG"),
    ] {
        let e = expect_file_error(p, |b| b);
        assert!(contains_ci(&e.to_string(), word), "{e}");
    }
    // check_extension(false) decodes what a supported file holds, whatever its name...
    let real_png = write("real.png", &png_bytes);
    let want = common::load_one(&real_png, |b| b.image_size_hw(24, 32)).unwrap();
    assert_eq!(want, rgb, "a same-size PNG is its pixels");
    let got = common::load_one(&png, |b| b.check_extension(false).image_size_hw(24, 32)).unwrap();
    assert_eq!(got, want);
    let px = common::load_one(&jpeg_as_png, |b| b.check_extension(false).image_size(8)).unwrap();
    assert_eq!(common::decode_id(&px[..3]), 5);
    // (WebP too: a 1x1 lossy image.)
    common::load_one(&webp, |b| b.check_extension(false).image_size(8)).unwrap();
    // ...but unsupported formats stay errors.
    for (p, word) in [(&html, "HTML"), (&gif, "GIF")] {
        let e = expect_file_error(p, |b| b.check_extension(false));
        assert!(contains_ci(&e.to_string(), word), "{e}");
        assert!(
            contains_ci(&e.to_string(), "not a supported image format"),
            "{e}"
        );
    }
}

#[test]
fn a_jpeg_without_its_tables_never_borrows_the_previous_images() {
    // libjpeg keeps tables between images on one decompressor (for abbreviated streams):
    // a file with no quantization tables decoded after others must still be an error, and one
    // with no Huffman tables (motion-JPEG style: the standard tables apply) must come out the
    // same whatever was decoded before it on that thread.
    let dir = tempfile::tempdir().unwrap();
    let photo = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    let other = std::fs::read(common::testdata("photos/photo_3.jpg")).unwrap();
    let no_dqt = common::without_segments(&photo, 0xDB);
    let no_dht = common::without_segments(&other, 0xC4);
    assert!(no_dqt.len() < photo.len() && no_dht.len() < other.len());
    let files = [
        ("a.jpg", &photo),
        ("b.jpg", &other),
        ("c.jpg", &photo),
        ("no_dqt.jpg", &no_dqt),
        ("no_dht.jpg", &no_dht),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let run = |names: &[&str]| {
        let entries: Vec<(PathBuf, u32)> = names.iter().map(|n| (dir.path().join(n), 0)).collect();
        let loader = Loader::builder(Source::from_entries(entries).unwrap())
            .batch_size(1)
            .dtype(Dtype::U8)
            .shuffle(false)
            .decode_threads(1)
            .on_error(OnError::SKIP_ALL)
            .build()
            .unwrap();
        let batches = common::collect_ok(loader.epoch(0));
        let pixels: Vec<(u64, Vec<u8>)> = batches
            .iter()
            .map(|b| (b.indices()[0], b.as_u8().unwrap().to_vec()))
            .collect();
        (pixels, loader.stats().skipped_samples)
    };
    let (pixels, skipped) = run(&["a.jpg", "b.jpg", "c.jpg", "no_dqt.jpg", "no_dht.jpg"]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].0, dir.path().join("no_dqt.jpg"));
    assert!(
        contains_ci(&skipped[0].1, "quantization table"),
        "{}",
        skipped[0].1
    );
    let after_others = &pixels
        .iter()
        .find(|(i, _)| *i == 4)
        .expect("no_dht.jpg decoded")
        .1;
    let (alone, skipped) = run(&["no_dht.jpg"]);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert!(
        alone[0].1 == *after_others,
        "no_dht.jpg decodes differently after other images"
    );
}

/// A zlib stream that inflates to `1 + 258 * refs` zero bytes: one fixed-Huffman block of a
/// literal 0 and `refs` back-references of length 258 at distance 1 (13 bits each).
fn zlib_zeros(refs: usize) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let (mut acc, mut n) = (0u64, 0u32);
    // `count` bits of `value`, least significant first; Huffman codes go most significant
    // bit first, so they are reversed before.
    let mut put = |out: &mut Vec<u8>, value: u32, count: u32| {
        acc |= u64::from(value) << n;
        n += count;
        while n >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            n -= 8;
        }
    };
    let code = |c: u32, count: u32| c.reverse_bits() >> (32 - count);
    put(&mut out, 0b011, 3); // final block, fixed Huffman codes
    put(&mut out, code(0x30, 8), 8); // literal 0
    for _ in 0..refs {
        put(&mut out, code(0xC5, 8), 8); // length 258 (symbol 285)
        put(&mut out, 0, 5); // distance 1 (code 0)
    }
    put(&mut out, 0, 7); // end of block (symbol 256)
    put(&mut out, 0, 7); // flush the last partial byte
    let len = 1 + 258 * refs;
    let adler = (((len % 65_521) as u32) << 16) | 1;
    out.extend_from_slice(&adler.to_be_bytes());
    out
}

/// `png` with a chunk of `kind` holding `data` inserted after IHDR.
fn with_png_chunk(png: &[u8], kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let ihdr_end = 8 + 8 + 13 + 4;
    let mut out = png[..ihdr_end].to_vec();
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let mut body = kind.to_vec();
    body.extend_from_slice(data);
    out.extend_from_slice(&body);
    out.extend_from_slice(&common::crc32(&body).to_be_bytes());
    out.extend_from_slice(&png[ihdr_end..]);
    out
}

#[test]
fn a_png_with_a_huge_icc_profile_costs_no_memory() {
    // A 1.7 MB file whose ICC profile inflates to 256 MiB: the png crate inflated it whole while
    // reading the header (peak RSS +256 MB and more). Bounded, the profile is dropped and the
    // image decodes.
    if !common::runs_in_child("errors::decode::a_png_with_a_huge_icc_profile_costs_no_memory") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rgb: Vec<u8> = (0..48 * 32 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let png = common::encode_png(&rgb, 48, 32);
    let mut iccp = b"profile\0\0".to_vec();
    iccp.extend_from_slice(&zlib_zeros(1_040_000));
    let bomb = with_png_chunk(&png, b"iCCP", &iccp);
    let path = dir.path().join("icc_bomb.png");
    std::fs::write(&path, &bomb).unwrap();
    let plain = dir.path().join("plain.png");
    std::fs::write(&plain, &png).unwrap();
    let before = imagefeed_testkit::procinfo::peak_rss_bytes().expect("/proc/self/status");
    let decoded = common::load_one(&path, |b| b).expect("the image decodes without its profile");
    let grew = imagefeed_testkit::procinfo::peak_rss_bytes()
        .unwrap()
        .saturating_sub(before);
    println!(
        "{} byte file: peak RSS grew {:.1} MB",
        bomb.len(),
        grew as f64 / 1e6
    );
    assert_eq!(decoded, common::load_one(&plain, |b| b).unwrap());
    assert!(
        grew < 64_000_000,
        "peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
}

#[test]
fn a_png_header_claiming_more_pixels_than_its_file_can_hold_is_refused_before_decoding() {
    // A 120-byte PNG claiming 9000x9000 RGB (81 megapixels, under max_pixels): the decoder
    // allocated its 243 MB before finding the data missing (peak RSS 244 MB). Deflate inflates at
    // most 1032 times, so the file needs 235 KB at least: refused from its length.
    let dir = tempfile::tempdir().unwrap();
    let png = png_claiming(9000, 9000);
    let p = dir.path().join("claims_9000x9000.png");
    std::fs::write(&p, &png).unwrap();
    let started = std::time::Instant::now();
    let e = expect_file_error(&p, |b| b).to_string();
    println!("{e} ({:?})", started.elapsed());
    assert!(e.contains("cannot hold the 9000x9000 pixels"), "{e}");
    assert!(e.contains("truncated"), "{e}");
    // The bound never refuses a real file, however well it compresses: a black 3000x3000
    // PNG (27 MB of pixels in 137 KB) decodes.
    let black = dir.path().join("black.png");
    let file = common::encode_png(&vec![0; 3000 * 3000 * 3], 3000, 3000);
    println!("black 3000x3000: {} bytes", file.len());
    std::fs::write(&black, &file).unwrap();
    let px = common::load_one(&black, |b| b).expect("a black PNG decodes");
    assert!(px.iter().all(|&v| v == 0));
}

#[cfg(all(unix, feature = "turbojpeg"))]
#[test]
fn large_decodes_side_by_side_hold_no_more_than_one_image_at_max_pixels() {
    // Large decodes (progressive JPEGs keep every coefficient: 6 bytes a pixel at 4:4:4) run
    // side by side only while together they fit in what one image at `max_pixels` holds. Two
    // 16-megapixel progressive files with `max_pixels` at 18 M must take turns: peak RSS grows
    // by one image's ~96 MB, not two. The parent writes the files (encoding them costs more
    // memory than decoding), the child, which finds them by the parent's PID, measures.
    const NAME: &str =
        "errors::decode::large_decodes_side_by_side_hold_no_more_than_one_image_at_max_pixels";
    let (w, h) = (4000usize, 4000usize);
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("imagefeed-it-large-{pid}"));
    let child = std::env::var("IMAGEFEED_IT_CHILD").as_deref() == Ok(NAME);
    if !child {
        let dir = dir_of(std::process::id());
        std::fs::create_dir_all(&dir).unwrap();
        let rgb: Vec<u8> = (0..w * h * 3)
            .map(|i| ((i / 3) % 200 + (i % 3) * 20) as u8)
            .collect();
        let mut c = imagefeed_jpeg::Compressor::new().unwrap();
        c.set_progressive(true).unwrap();
        c.set_subsamp(imagefeed_jpeg::Subsamp::None).unwrap();
        c.set_quality(50).unwrap();
        let image = imagefeed_jpeg::Image {
            pixels: &rgb[..],
            width: w,
            pitch: w * 3,
            height: h,
            format: imagefeed_jpeg::PixelFormat::RGB,
        };
        let jpeg = c.compress_to_vec(image).unwrap();
        for i in 0..2 {
            std::fs::write(dir.join(format!("big{i}.jpg")), &jpeg).unwrap();
        }
        let passed = std::panic::catch_unwind(|| common::runs_in_child(NAME));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!passed.unwrap());
        return;
    }
    let dir = dir_of(std::os::unix::process::parent_id());
    // Among 62 small photos, so that the loader's sample of typical images (32 headers, evenly
    // spaced: the even positions here) finds small ones and gives each thread a small share;
    // the two large files, at odd positions, are over it and go through the gate.
    let small = common::testdata("photos/photo_0.jpg");
    let paths: Vec<PathBuf> = (0..64)
        .map(|i| match i {
            1 => dir.join("big0.jpg"),
            3 => dir.join("big1.jpg"),
            _ => small.clone(),
        })
        .collect();
    let source = Source::from_entries(paths.iter().map(|p| (p, 0))).unwrap();
    let loader = Loader::builder(source)
        .decode_threads(2)
        .batch_size(2)
        // 18 M: room for one of these files (~97 MB estimated) in 108 MB, not for two.
        .max_pixels((w * h * 9 / 8) as u64)
        .build()
        .unwrap();
    let before = imagefeed_testkit::procinfo::peak_rss_bytes().expect("/proc/self/status");
    let images: usize = loader.epoch(0).map(|b| b.unwrap().len()).sum();
    let grew = imagefeed_testkit::procinfo::peak_rss_bytes()
        .unwrap()
        .saturating_sub(before);
    println!(
        "two progressive 16 MP files: peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
    assert_eq!(images, 64);
    assert!(
        grew < 150_000_000,
        "peak RSS grew {:.1} MB: both decodes were in memory at once",
        grew as f64 / 1e6
    );
}

/// libjpeg-turbo finishes an image after a warning and reports the first one. A warning about
/// metadata it ignores is not an error; damaged or padded image data is an error naming the
/// file unless `accept_jpeg_warnings(true)`, also when it comes after a metadata warning; a
/// truncated file is an error either way.
#[cfg(feature = "turbojpeg")]
#[test]
fn jpeg_warnings_about_metadata_pass_and_damaged_data_is_named_unless_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::testdata("valid/baseline_420.jpg");
    let orig = std::fs::read(&base).unwrap();
    let clean = common::load_one(&base, |b| b).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // JFIF version 2.01 (libjpeg-turbo knows 1.x only).
    assert_eq!(&orig[6..11], b"JFIF\0");
    let mut jfif2 = orig.clone();
    jfif2[11] = 2;
    // An ICC segment numbered 0 of 1 (libjpeg-turbo: "bad ICC marker").
    let icc: Vec<u8> = [&b"ICC_PROFILE\0"[..], &[0, 1], &[0; 20]].concat();
    let mut bad_icc = orig[..2].to_vec();
    bad_icc.extend_from_slice(&[0xFF, 0xE2, 0, (icc.len() + 2) as u8]);
    bad_icc.extend_from_slice(&icc);
    bad_icc.extend_from_slice(&orig[2..]);
    // 100 zero bytes before the end marker, as some cameras write.
    let pad = |j: &[u8]| [&j[..j.len() - 2], &[0; 100], &[0xFF, 0xD9]].concat();
    assert_eq!(&orig[orig.len() - 2..], [0xFF, 0xD9]);
    for (name, bytes) in [("jfif_2.jpg", &jfif2), ("bad_icc.jpg", &bad_icc)] {
        let p = write(name, bytes);
        assert_eq!(common::load_one(&p, |b| b).unwrap(), clean, "{name}");
    }
    for (name, bytes) in [
        ("padded.jpg", pad(&orig)),
        ("jfif_2_padded.jpg", pad(&jfif2)),
    ] {
        let p = write(name, &bytes);
        let e = expect_file_error(&p, |b| b);
        let msg = e.to_string();
        assert!(msg.contains("extraneous bytes before marker 0xd9"), "{msg}");
        assert!(msg.contains("accept_jpeg_warnings"), "{msg}");
        let px = common::load_one(&p, |b| b.accept_jpeg_warnings(true)).unwrap();
        assert_eq!(px, clean, "{name}");
    }
    let cut = write("cut.jpg", &orig[..orig.len() * 3 / 4]);
    for accept in [false, true] {
        let e = expect_file_error(&cut, move |b| b.accept_jpeg_warnings(accept));
        assert!(
            contains_ci(&e.to_string(), "premature end of JPEG file"),
            "{e}"
        );
    }
}

#[test]
fn a_png_with_a_very_long_side_resizes_in_bounded_memory_or_is_refused() {
    // The filter taps of a resize grow with the source's length (about 20 bytes a source
    // pixel): a 100,000,000x1 PNG (0.8 MB of file, within max_pixels) took 2-3 GB of them and
    // its decode 1.6 GB of rows. Now an axis over 65,536 pixels is first averaged down by
    // whole boxes, and a PNG whose decode would not fit the budget's large-decode share is
    // refused from its header. The child measures; the parent writes the files.
    const NAME: &str =
        "errors::decode::a_png_with_a_very_long_side_resizes_in_bounded_memory_or_is_refused";
    let w = 20_000_000usize;
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("imagefeed-it-wide-{pid}"));
    let child = std::env::var("IMAGEFEED_IT_CHILD").as_deref() == Ok(NAME);
    if !child {
        let dir = dir_of(std::process::id());
        std::fs::create_dir_all(&dir).unwrap();
        let flat: Vec<u8> = [10u8, 120, 240].repeat(w);
        std::fs::write(dir.join("flat.png"), common::encode_png(&flat, w as u32, 1)).unwrap();
        drop(flat);
        // A 100,000,000x1 RGBA16 header (its data never read): rows of 800 MB.
        let mut png = common::encode_png(&[9; 4 * 4 * 3], 4, 4);
        png[24..26].copy_from_slice(&[16, 6]);
        set_png_size(&mut png, 100_000_000, 1);
        // With an 800 KB private chunk, enough bytes for deflate to hold its 800 MB of rows.
        let png = with_png_chunk(&png, b"prVt", &vec![0; 800_000]);
        std::fs::write(dir.join("wide16.png"), &png).unwrap();
        let passed = std::panic::catch_unwind(|| common::runs_in_child(NAME));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!passed.unwrap());
        return;
    }
    let dir = dir_of(std::os::unix::process::parent_id());
    let before = imagefeed_testkit::procinfo::peak_rss_bytes().expect("/proc/self/status");
    let px = common::load_one(&dir.join("flat.png"), |b| b).unwrap();
    let grew = imagefeed_testkit::procinfo::peak_rss_bytes()
        .unwrap()
        .saturating_sub(before);
    println!(
        "a 20,000,000x1 PNG: peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
    assert!(
        px.chunks_exact(3).all(|p| p == [10, 120, 240]),
        "a flat image stays flat"
    );
    // The decoded image (60 MB) and the png crate's two rows (120 MB); the taps were 400 MB.
    assert!(
        grew < 260_000_000,
        "peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
    let wide16 = dir.join("wide16.png");
    let e = expect_file_error(&wide16, |b| b);
    assert!(
        e.to_string()
            .contains("PNG of 100000000x1 needs about 2700 MB to decode"),
        "{e}"
    );
}
