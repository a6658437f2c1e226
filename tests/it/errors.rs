//! Errors: every broken file is an error naming it (or a skip that never
//! shifts labels), never a panic or a hang; bad lists name their line; settings that cannot
//! work fail in `build` naming the setting.

use std::path::{Path, PathBuf};

use imagefeed::{
    Device, Dtype, Error, ErrorKind, JpegDecoder, Loader, LoaderBuilder, OnError, Source,
};

use crate::common::{self, id_label, IdCorpus, SplitMix};

/// Loads `path` alone with `OnError::Fail` and checks the error is about that file: `path()`
/// is the file, the message names it and gives a reason, and it is a data error (not a caught
/// panic). Returns the error.
fn expect_file_error(
    path: &Path,
    tweak: impl FnOnce(LoaderBuilder) -> LoaderBuilder + Send + 'static,
) -> Error {
    let e = match common::load_one(path, tweak) {
        Ok(_) => panic!("{} decoded, but it is broken", path.display()),
        Err(e) => e,
    };
    check_names_file(&e, path);
    e
}

fn check_names_file(e: &Error, path: &Path) {
    assert_eq!(e.path(), Some(path), "{e}");
    assert!(e.is_data_error(), "not a data error: {e:?}");
    let msg = e.to_string();
    let shown = path.display().to_string();
    assert!(msg.starts_with(&shown), "{msg}");
    let reason = msg[shown.len()..].trim_start_matches(':').trim();
    assert!(reason.len() >= 5, "no reason given: {msg}");
}

/// Ok (a flip the decoder cannot see), or an error naming the file: never a panic or a hang.
fn decodes_or_names_file(path: &Path, decoder: JpegDecoder) -> bool {
    match common::load_one(path, move |b| b.jpeg_decoder(decoder)) {
        Ok(px) => {
            assert_eq!(px.len(), 160 * 160 * 3);
            true
        }
        Err(e) => {
            check_names_file(&e, path);
            false
        }
    }
}

fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(&needle.to_lowercase())
}

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
fn missing_directory_empty_and_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jpg");
    let e = expect_file_error(&missing, |b| b);
    match e.kind() {
        ErrorKind::Io { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
        _ => panic!("{e:?}"),
    }
    let folder = dir.path().join("x.jpg");
    std::fs::create_dir(&folder).unwrap();
    let e = expect_file_error(&folder, |b| b);
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
    assert!(contains_ci(&e.to_string(), "directory"), "{e}");
    let empty = dir.path().join("empty.jpg");
    std::fs::write(&empty, b"").unwrap();
    let e = expect_file_error(&empty, |b| b);
    assert!(contains_ci(&e.to_string(), "empty"), "{e}");
    // Cut inside the first bytes: said to be truncated, not "unknown binary data".
    for (name, bytes, format) in [
        ("soi.jpg", &b"\xFF\xD8"[..], "JPEG"),
        ("ff.jpg", &b"\xFF"[..], "JPEG"),
        ("cut.png", &b"\x89PNG"[..], "PNG"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = expect_file_error(&p, |b| b);
        let text = e.to_string();
        assert!(
            contains_ci(&text, &format!("truncated {format} file")),
            "{text}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.path().join("locked.jpg");
        std::fs::copy(common::testdata("valid/odd_7x5.jpg"), &locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&locked).is_ok() {
            common::skipped(&format!(
                "the permission-denied check: this process can read a mode-000 file (root: {})",
                common::is_root()
            ));
            assert!(common::load_one(&locked, |b| b).is_ok());
        } else {
            let e = expect_file_error(&locked, |b| b);
            match e.kind() {
                ErrorKind::Io { source, .. } => {
                    assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied)
                }
                _ => panic!("{e:?}"),
            }
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

/// A list mixing the id-coded images of `corpus` with broken files at known positions.
/// Returns the list and, by dataset index, `Some(id)` for a good image or `None` for a broken
/// one, with the broken paths in list order.
fn mixed_list(corpus: &IdCorpus) -> (PathBuf, Vec<Option<usize>>, Vec<PathBuf>) {
    let d = corpus.dir.path();
    let good = std::fs::read(&corpus.paths[0]).unwrap();
    std::fs::write(d.join("empty.jpg"), b"").unwrap();
    std::fs::write(d.join("cut.jpg"), &good[..good.len() / 2]).unwrap();
    std::fs::write(
        d.join("page.jpg"),
        b"<html><body>502 Bad Gateway</body></html>",
    )
    .unwrap();
    std::fs::create_dir(d.join("folder.jpg")).unwrap();
    for name in ["png_named.jpg", "bomb_65000.jpg", "bitflip.jpg"] {
        std::fs::copy(common::testdata(&format!("corrupt/{name}")), d.join(name)).unwrap();
    }
    let broken = [
        "missing.jpg",
        "empty.jpg",
        "cut.jpg",
        "page.jpg",
        "folder.jpg",
        "png_named.jpg",
        "bomb_65000.jpg",
        "bitflip.jpg",
    ];
    let mut list = String::new();
    let mut ids = Vec::new();
    let mut broken_paths = Vec::new();
    let mut next_broken = broken.iter();
    for id in 0..corpus.paths.len() {
        // A broken file before images 0, 5, 10, ...: also first in the list, and twice in a row.
        if id % 5 == 0 || id == 36 {
            if let Some(name) = next_broken.next() {
                list.push_str(&format!("{name}\t{}\n", 90 + ids.len()));
                ids.push(None);
                broken_paths.push(d.join(name));
            }
        }
        list.push_str(&format!("img_{id:04}.jpg\t{}\n", id_label(id)));
        ids.push(Some(id));
    }
    assert!(next_broken.next().is_none(), "every broken file is listed");
    let path = d.join("mixed.txt");
    std::fs::write(&path, list).unwrap();
    (path, ids, broken_paths)
}

#[test]
fn skip_never_shifts_labels() {
    let corpus = IdCorpus::new(40);
    let (list, ids, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    let n = source.len();
    assert_eq!(n, 48);
    for (shuffle, shuffle_buffer, threads, batch_size) in [
        (false, 0, 1, 6),
        (true, 0, 2, 6),
        (true, 5, 3, 7),
        (true, 0, 4, 1),
    ] {
        let what = format!(
            "shuffle {shuffle}, buffer {shuffle_buffer}, {threads} threads, bs {batch_size}"
        );
        for policy in [OnError::Skip { max: 8 }, OnError::SKIP_ALL] {
            let loader = Loader::builder(source.clone())
                .batch_size(batch_size)
                .shuffle(shuffle)
                .shuffle_buffer(shuffle_buffer)
                .decode_threads(threads)
                .on_error(policy)
                .image_size(16)
                .dtype(Dtype::U8)
                .seed(17)
                .build()
                .unwrap();
            let batches = common::with_timeout(std::time::Duration::from_secs(30), {
                let loader_epoch = loader.epoch(1);
                move || common::collect_ok(loader_epoch)
            });
            let mut seen = Vec::new();
            for b in &batches {
                common::assert_pixels_follow_indices_by(b, |i| ids[i].expect("a good sample"));
                for (&i, &label) in b.indices().iter().zip(b.labels()) {
                    assert_eq!(source.label(i as usize), Some(label), "{what}: index {i}");
                    assert_eq!(label, id_label(ids[i as usize].unwrap()), "{what}");
                    seen.push(i);
                }
            }
            seen.sort_unstable();
            let want: Vec<u64> = (0..n as u64)
                .filter(|&i| ids[i as usize].is_some())
                .collect();
            assert_eq!(seen, want, "{what}");
            let stats = loader.stats();
            assert_eq!(stats.images, 40, "{what}");
            assert_eq!(stats.skipped, 8, "{what}");
            assert_eq!(stats.images + stats.skipped, n as u64, "{what}");
            let mut skipped: Vec<PathBuf> = stats
                .skipped_samples
                .iter()
                .map(|(p, _)| p.clone())
                .collect();
            skipped.sort();
            let mut want_skipped = broken.clone();
            want_skipped.sort();
            assert_eq!(skipped, want_skipped, "{what}");
            for (p, reason) in &stats.skipped_samples {
                assert!(reason.contains(&p.display().to_string()), "{reason}");
            }
        }
    }
}

#[test]
fn skip_budget_gives_too_many_failures() {
    let corpus = IdCorpus::new(40);
    let (list, ids, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    for max in [0u64, 3, 7] {
        let loader = Loader::builder(source.clone())
            .batch_size(4)
            .shuffle(false)
            .on_error(OnError::Skip { max })
            .image_size(8)
            .dtype(Dtype::U8)
            .decode_threads(2)
            .build()
            .unwrap();
        let items: Vec<Result<imagefeed::Batch, Error>> =
            common::with_timeout(std::time::Duration::from_secs(30), {
                let epoch = loader.epoch(0);
                move || epoch.collect()
            });
        let (last, ok) = items.split_last().unwrap();
        let e = last.as_ref().expect_err("the epoch ends with an error");
        match e.kind() {
            ErrorKind::TooManyFailures { skipped, last } => {
                assert_eq!(*skipped, max + 1);
                // In file order, failure number max + 1 is the broken file number max + 1.
                assert_eq!(last.path(), Some(broken[max as usize].as_path()), "{e}");
                assert!(last.is_data_error());
            }
            _ => panic!("{e:?}"),
        }
        assert_eq!(e.path(), Some(broken[max as usize].as_path()));
        assert!(!e.is_data_error(), "TooManyFailures must not be skippable");
        assert!(contains_ci(&e.to_string(), "too many"), "{e}");
        assert!(std::error::Error::source(e).is_some());
        // The batches before the error are whole and correct.
        for b in ok {
            let b = b.as_ref().unwrap();
            for (&i, &l) in b.indices().iter().zip(b.labels()) {
                assert_eq!(l, id_label(ids[i as usize].unwrap()));
            }
        }
        let stats = loader.stats();
        assert_eq!(stats.skipped, max + 1);
    }
}

#[test]
fn fail_stops_at_the_first_broken_file_in_order() {
    let corpus = IdCorpus::new(40);
    let (list, _, broken) = mixed_list(&corpus);
    let source = Source::from_list_file(&list).unwrap();
    // The list starts with a broken file: under Fail, in file order, the epoch's first item
    // is that file's error (with three threads racing ahead), and nothing follows it.
    let loader = Loader::builder(source)
        .batch_size(4)
        .shuffle(false)
        .image_size(8)
        .decode_threads(3)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    let e = epoch.next().unwrap().unwrap_err();
    assert_eq!(e.path(), Some(broken[0].as_path()), "{e}");
    assert!(
        epoch.next().is_none(),
        "the epoch goes on after an error under Fail"
    );
}

// ---- file lists ----

fn list_error(content: &[u8]) -> (PathBuf, Error, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.txt");
    std::fs::write(&p, content).unwrap();
    let e = common::with_timeout(std::time::Duration::from_secs(10), {
        let p = p.clone();
        move || Source::from_list_file(&p).expect_err("a bad list is an error")
    });
    assert_eq!(e.path(), Some(p.as_path()), "{e}");
    assert!(!e.is_data_error());
    (p, e, dir)
}

fn expect_list_line(content: &[u8], want_line: usize, words: &[&str]) {
    let (p, e, _dir) = list_error(content);
    match e.kind() {
        ErrorKind::List { line, .. } => assert_eq!(*line, want_line, "{e}"),
        _ => panic!("not a List error: {e:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}:{want_line}: ", p.display())),
        "{msg}"
    );
    for w in words {
        assert!(contains_ci(&msg, w), "`{w}` missing: {msg}");
    }
}

/// Lines ended by bare CRs read as one line (its "path" ran over every entry, and the last
/// label was taken); a compressed list, a UTF-16 one, a shard or an image given as the list
/// failed on a "label" of binary bytes. Each now says what it is.
#[test]
fn a_list_with_bare_cr_line_ends_or_of_binary_data_says_so() {
    expect_list_line(b"a.jpg\t1\rb.jpg\t2\r", 1, &["carriage return", "bare CR"]);
    // gzip's header (magic, deflate, no flags), then bytes: enough to be told by its magic.
    let gz = b"\x1f\x8b\x08\0\0\0\0\0\0\x03KT\xc8*HW0\xe4\x02\0".to_vec();
    for (content, words) in [
        (gz, &["gzip-compressed"][..]),
        (
            b"\xff\xfea\0.\0j\0p\0g\0 \x001\0\n\0".to_vec(),
            &["UTF-16", "UTF-8"][..],
        ),
        (
            std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap(),
            &["a JPEG image"][..],
        ),
        (
            {
                let mut b = tar::Builder::new(Vec::new());
                let mut h = tar::Header::new_ustar();
                h.set_size(1);
                b.append_data(&mut h, "a.cls", &b"1"[..]).unwrap();
                b.into_inner().unwrap()
            },
            &["a tar archive"][..],
        ),
    ] {
        let (_p, e, _dir) = list_error(&content);
        assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("is not a file list"), "{msg}");
        for w in words {
            assert!(msg.contains(w), "`{w}` missing: {msg}");
        }
    }
    // A list whose first path starts with the letters of a magic number is still a list.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.txt");
    std::fs::write(&p, "BZh9_photos/a.jpg 1\nPK.jpg 2\n").unwrap();
    assert_eq!(Source::from_list_file(&p).unwrap().len(), 2);
}

#[test]
fn malformed_list_lines_name_the_line() {
    expect_list_line(
        b"a.jpg 1\nb.jpg 2\nonly_a_path.jpg\n",
        3,
        &["only_a_path.jpg", "label"],
    );
    expect_list_line(b"# c\n\nonly_a_path.jpg\n", 3, &["no label"]);
    expect_list_line(b"a.jpg\tcat\n", 1, &["`cat`", "not an integer"]);
    expect_list_line(b"a.jpg 1\nb.jpg 1.5\n", 2, &["not an integer"]);
    expect_list_line(b"a.jpg 0x10\n", 1, &["not an integer"]);
    expect_list_line(b"a.jpg 1\r\nb.jpg -3\r\n", 2, &["-3", "out of range"]);
    expect_list_line(b"a.jpg 4294967296\n", 1, &["out of range"]);
    expect_list_line(b"a.jpg 99999999999999999999999\n", 1, &["out of range"]);
    expect_list_line(
        b"\xEF\xBB\xBFa.jpg 1\nb.jpg 2\na.jpg 3\n",
        3,
        &["a.jpg", "line 1", "label 1", "label 3"],
    );
    // The largest label is fine, and so is the same path listed twice with one label.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.txt");
    std::fs::write(&p, "a.jpg 4294967295\nb.jpg 0\na.jpg 4294967295\n").unwrap();
    let s = Source::from_list_file(&p).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s.label(0), Some(u32::MAX));
    assert_eq!(s.path(2), s.path(0));
}

#[test]
fn empty_lists_are_errors_not_hangs() {
    for content in [
        &b""[..],
        b"\n\n",
        b"# header only\n",
        b"\xEF\xBB\xBF",
        b"   \r\n\t\n",
    ] {
        let (_, e, _dir) = list_error(content);
        assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
        assert!(contains_ci(&e.to_string(), "no entries"), "{e}");
    }
    let e = Source::from_list_file("/nonexistent/imagefeed/list.txt").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
    assert_eq!(e.path(), Some(Path::new("/nonexistent/imagefeed/list.txt")));
    // Folders with nothing to load.
    let dir = tempfile::tempdir().unwrap();
    let e = Source::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
    std::fs::create_dir(dir.path().join("cls")).unwrap();
    std::fs::write(dir.path().join("cls/readme.txt"), "no images").unwrap();
    let e = Source::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e:?}");
    assert_eq!(e.path(), Some(dir.path()));
    let e = Source::open(dir.path().join("nope")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
}

#[cfg(unix)]
#[test]
fn non_utf8_paths_load() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xE9 \xFF.jpg");
    let path = dir.path().join(name);
    if std::fs::write(&path, common::id_jpeg(9)).is_err() {
        common::skipped("this file system refuses non-UTF-8 names");
        return;
    }
    let list = dir.path().join("list.txt");
    std::fs::write(&list, b"caf\xE9 \xFF.jpg\t4\n").unwrap();
    let source = Source::from_list_file(&list).unwrap();
    assert_eq!(source.path(0), Some(path.clone()));
    let loader = Loader::builder(source)
        .batch_size(1)
        .image_size(8)
        .dtype(Dtype::U8)
        .build()
        .unwrap();
    let b = common::collect_ok(loader.epoch(0)).pop().unwrap();
    assert_eq!(b.labels(), &[4]);
    assert_eq!(common::decode_id(&b.as_u8().unwrap()[..3]), 9);
    // And an error about such a file still carries its exact path.
    std::fs::write(&path, b"").unwrap();
    let e = common::load_one(&path, |b| b).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
}

// ---- settings ----

#[test]
fn max_pixels_refuses_a_small_image() {
    // baseline_420.jpg is 400x300 = 120,000 pixels; rgb.png is 300x200 = 60,000.
    let jpeg = common::testdata("valid/baseline_420.jpg");
    for decoder in [JpegDecoder::Auto, JpegDecoder::Zune] {
        let e = expect_file_error(&jpeg, move |b| b.max_pixels(119_999).jpeg_decoder(decoder));
        assert!(contains_ci(&e.to_string(), "max_pixels"), "{e}");
        assert!(contains_ci(&e.to_string(), "400x300"), "{e}");
        assert!(
            common::load_one(&jpeg, move |b| b.max_pixels(120_000).jpeg_decoder(decoder)).is_ok()
        );
    }
    let png = common::testdata("valid/rgb.png");
    let e = expect_file_error(&png, |b| b.max_pixels(59_999));
    assert!(contains_ci(&e.to_string(), "max_pixels"), "{e}");
    assert!(common::load_one(&png, |b| b.max_pixels(60_000)).is_ok());
    // Under Skip, a refused image is a skip like any broken file.
    let loader =
        Loader::builder(Source::from_entries([(jpeg.clone(), 0), (png.clone(), 1)]).unwrap())
            .max_pixels(100_000)
            .on_error(OnError::SKIP_ALL)
            .build()
            .unwrap();
    let batches = common::collect_ok(loader.epoch(0));
    assert_eq!(common::indices_of(&batches), [1]);
    assert_eq!(loader.stats().skipped_samples[0].0, jpeg);
}

#[test]
fn host_memory_limit_names_what_to_lower() {
    let source = Source::from_entries([("a.jpg", 0)]).unwrap();
    let config_error = |b: LoaderBuilder| -> (&'static str, String) {
        let e = b.build().expect_err("over the memory limit");
        match e.kind() {
            ErrorKind::InvalidConfig { setting, .. } => (*setting, e.to_string()),
            _ => panic!("{e:?}"),
        }
    };
    // The default max_pixels (100 M pixels, ~1.4 GB for one large image) dominates: a
    // max_pixels that fits is named, with its value, and it fits.
    let (setting, msg) =
        config_error(Loader::builder(source.clone()).host_memory_limit(500_000_000));
    assert_eq!(setting, "host_memory_limit");
    let at = msg.find("`max_pixels` ").expect(&msg) + "`max_pixels` ".len();
    let fits: u64 = msg[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(Loader::builder(source.clone())
        .max_pixels(fits)
        .host_memory_limit(500_000_000)
        .build()
        .is_ok());
    // Under what the smallest settings need: the limit must rise, and the message says so.
    let (_, msg) = config_error(Loader::builder(source.clone()).host_memory_limit(50_000_000));
    assert!(msg.contains("raise the limit"), "{msg}");
    // The limit is inclusive.
    let big = Loader::builder(source.clone()).max_pixels(1_000_000);
    let total = big.memory_budget().total();
    config_error(big.clone().host_memory_limit(total - 1));
    assert!(
        big.host_memory_limit(total).build().is_ok(),
        "the limit is inclusive"
    );
    // Huge batches dominate.
    let (_, msg) = config_error(
        Loader::builder(source)
            .max_pixels(1_000_000)
            .batch_size(4096)
            .host_memory_limit(100_000_000),
    );
    assert!(msg.contains("batch_size"), "{msg}");
}

#[test]
fn cuda_device_without_the_feature_or_a_gpu() {
    let source = Source::from_entries([(common::testdata("valid/odd_7x5.jpg"), 0)]).unwrap();
    let built = Loader::builder(source.clone())
        .device(Device::Cuda(0))
        .build();
    // Whether GPU 0 is usable here, asked of the driver apart from the loader.
    let gpu = imagefeed::tools::gpu::info();
    if cfg!(feature = "cuda") {
        match &gpu {
            // A usable GPU: the loader delivers to GPU 0.
            Ok(_) => assert_eq!(built.as_ref().unwrap().device(), Device::Cuda(0)),
            // None (no driver, or no device): a device error naming the device, never a panic.
            Err(why) => {
                let e = built.as_ref().expect_err("no usable GPU here");
                assert!(matches!(e.kind(), ErrorKind::Device(_)), "{e:?} ({why})");
                assert!(e.to_string().contains("CUDA device 0"), "{e}");
            }
        }
    } else {
        assert!(
            matches!(
                gpu.as_ref().map_err(|e| e.kind()),
                Err(ErrorKind::FeatureDisabled { .. })
            ),
            "{gpu:?}"
        );
        let e = built.as_ref().expect_err("no cuda feature in this build");
        assert!(
            matches!(e.kind(), ErrorKind::FeatureDisabled { feature: "cuda" }),
            "{e:?}"
        );
        assert!(e.to_string().contains("--features cuda"), "{e}");
    }
    // The fallback always builds, and delivers to the host unless GPU 0 works.
    let loader = Loader::builder(source)
        .device(Device::Cuda(0))
        .fallback_to_host(true)
        .batch_size(1)
        .build()
        .unwrap();
    let want = if cfg!(feature = "cuda") && gpu.is_ok() {
        Device::Cuda(0)
    } else {
        Device::Host
    };
    assert_eq!(loader.device(), want);
    let batches = common::collect_ok(loader.epoch(0));
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].len(), 1);
}

#[test]
fn invalid_settings_name_the_setting() {
    let source = Source::from_entries([("a.jpg", 0)]).unwrap();
    let cases: Vec<(LoaderBuilder, &str)> = vec![
        (Loader::builder(source.clone()).batch_size(0), "batch_size"),
        (Loader::builder(source.clone()).image_size(0), "image_size"),
        (
            Loader::builder(source.clone()).image_size_hw(160, 0),
            "image_size",
        ),
        (
            Loader::builder(source.clone()).image_size(9000),
            "image_size",
        ),
        (
            Loader::builder(source.clone()).normalize([0.0; 3], [1.0, 0.0, 1.0]),
            "normalize",
        ),
        (
            Loader::builder(source.clone()).normalize([f32::NAN, 0.0, 0.0], [1.0; 3]),
            "normalize",
        ),
        (
            Loader::builder(source.clone()).normalize([0.0; 3], [1.0, f32::INFINITY, 1.0]),
            "normalize",
        ),
        (Loader::builder(source.clone()).prefetch(0), "prefetch"),
        (Loader::builder(source.clone()).max_pixels(0), "max_pixels"),
    ];
    for (builder, want) in cases {
        let e = builder.build().expect_err(want);
        match e.kind() {
            ErrorKind::InvalidConfig { setting, .. } => assert_eq!(*setting, want, "{e}"),
            _ => panic!("{e:?}"),
        }
        assert!(e.to_string().contains(want), "{e}");
        assert!(e.path().is_none() && !e.is_data_error());
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
    if !common::runs_in_child("errors::a_png_with_a_huge_icc_profile_costs_no_memory") {
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

#[test]
fn imagefeed_corpus_replaces_nothing() {
    // `imagefeed corpus DIR` over a folder holding files of the same names used to overwrite
    // them; it now fails before writing anything.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("class_01")).unwrap();
    let mine = d.join("class_01/img_000001.jpg");
    std::fs::write(&mine, b"my photo").unwrap();
    let e = imagefeed_testkit::corpus::generate(d, 4, 0).unwrap_err();
    assert_eq!(e.path(), Some(mine.as_path()), "{e}");
    assert!(e.to_string().contains("exists"), "{e}");
    assert_eq!(std::fs::read(&mine).unwrap(), b"my photo");
    assert!(!d.join("files.txt").exists(), "wrote files.txt anyway");
    assert!(
        !d.join("class_00/img_000000.jpg").exists(),
        "wrote an image anyway"
    );
    // Into a new folder it writes, and a second run into the same folder is refused.
    let fresh = d.join("fresh");
    let summary = imagefeed_testkit::corpus::generate(&fresh, 4, 0).unwrap();
    assert_eq!(summary.images, 4);
    let list = std::fs::read(fresh.join("files.txt")).unwrap();
    assert!(imagefeed_testkit::corpus::generate(&fresh, 4, 1).is_err());
    assert_eq!(std::fs::read(fresh.join("files.txt")).unwrap(), list);
}

/// `DIR/list.txt` listing 8 images of the shared corpus by absolute path; and its text.
fn small_list(dir: &Path) -> (PathBuf, String) {
    let src = common::corpus(64, 7);
    let list = dir.join("list.txt");
    let text: String = std::fs::read_to_string(src.join("files.txt"))
        .unwrap()
        .lines()
        .take(8)
        .map(|l| format!("{}\n", src.join(l).display()))
        .collect();
    std::fs::write(&list, &text).unwrap();
    (list, text)
}

#[test]
fn cli_resume_finishes_its_epoch_and_refuses_what_is_not_a_state() {
    let dir = tempfile::tempdir().unwrap();
    let (list, _) = small_list(dir.path());
    let bench = |extra: &[&str]| {
        std::process::Command::new(crate::common::imagefeed_bin())
            .arg("bench")
            .arg(&list)
            .args(["--batch-size", "2", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    // A state in epoch 5 with --epochs 3: the resumed epoch is finished (it used to run
    // nothing and exit 0).
    let state = dir.path().join("state.txt");
    std::fs::write(
        &state,
        "imagefeed-state-v1 seed=0 epoch=5 position=2 rank=0 world_size=1\n",
    )
    .unwrap();
    let out = bench(&["--resume-from", state.to_str().unwrap(), "--epochs", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0]["epoch"].as_u64(), reports[0]["images"].as_u64()),
        (Some(5), Some(6))
    );
    // A megabyte of anything is not a state: a short error naming the file.
    std::fs::write(&state, vec![b'a'; 1 << 20]).unwrap();
    let out = bench(&["--resume-from", state.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("state.txt") && err.len() < 300,
        "{err:.300}"
    );
}

#[test]
fn cli_outputs_never_replace_an_input() {
    // `--indices-out` or `--state-out` naming the list (or the cache, or the state being
    // resumed) would truncate it: refused before anything runs.
    let dir = tempfile::tempdir().unwrap();
    let (list, text) = small_list(dir.path());
    for flag in ["--indices-out", "--state-out"] {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .current_dir(dir.path())
            .args([
                "bench",
                "list.txt",
                "--batch-size",
                "4",
                "--max-batches",
                "1",
            ])
            .args([flag, "./list.txt"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {err}");
        assert!(err.contains("is also an input"), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&list).unwrap(), text, "{flag}");
    }
}

#[test]
fn cli_outputs_replace_only_what_they_wrote() {
    // Nor a sample of the source, or any other file: an existing output file must be empty or
    // hold what that option writes. (`--state-out img.jpg` replaced a sample with a state
    // line; `--indices-out` naming a shard of the source truncated it.)
    let dir = tempfile::tempdir().unwrap();
    let (list, _) = small_list(dir.path());
    let sample = std::fs::read_to_string(&list).unwrap();
    let sample = PathBuf::from(sample.lines().next().unwrap().split('\t').next().unwrap());
    let image = dir.path().join("photo.jpg");
    std::fs::copy(&sample, &image).unwrap();
    let before = std::fs::read(&image).unwrap();
    let run = |flag: &str, out: &Path| {
        std::process::Command::new(crate::common::imagefeed_bin())
            .args(["bench", list.to_str().unwrap(), "--batch-size", "4"])
            .args(["--max-batches", "1", flag, out.to_str().unwrap()])
            .output()
            .unwrap()
    };
    for flag in ["--indices-out", "--state-out"] {
        let out = run(flag, &image);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {err}");
        assert!(
            err.contains("photo.jpg") && err.contains("does not replace files it did not write"),
            "{flag}: {err}"
        );
        assert_eq!(std::fs::read(&image).unwrap(), before, "{flag}");
    }
    // The sweep's plot too (refused before the sweep runs).
    let out = std::process::Command::new(crate::common::imagefeed_bin())
        .args([
            "bench",
            list.to_str().unwrap(),
            "--sweep",
            "--sweep-images",
            "2",
        ])
        .args(["--sweep-svg", image.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("does not replace files it did not write"),
        "--sweep-svg: {err}"
    );
    assert_eq!(std::fs::read(&image).unwrap(), before, "--sweep-svg");
    // What the options wrote before is replaced: a second run over the same files succeeds.
    let (indices, state) = (dir.path().join("seen.txt"), dir.path().join("state.txt"));
    for _ in 0..2 {
        for (flag, p) in [("--indices-out", &indices), ("--state-out", &state)] {
            let out = run(flag, p);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(&indices).unwrap().lines().count(),
        4
    );
}

#[test]
fn settings_that_cannot_fit_in_this_machine_fail_in_build() {
    // Without a host_memory_limit of the user's, the machine's memory (or the container's
    // cgroup limit) is the limit: `--threads 10000` or 8192x8192 batches fail in build,
    // naming what to lower, instead of in the out-of-memory killer.
    let Some(memory) = imagefeed::tools::memory_limit_bytes() else {
        common::skipped("this system does not report its memory");
        return;
    };
    let source = Source::from_entries([("a.jpg", 0)]).unwrap();
    let huge = Loader::builder(source.clone())
        .image_size(8192)
        .batch_size(1024);
    let need = huge.memory_budget().total();
    if need <= memory {
        common::skipped(&format!(
            "this machine has {memory} bytes, the settings need only {need}"
        ));
        return;
    }
    let e = huge.clone().build().expect_err("over the machine's memory");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidConfig {
                setting: "host_memory_limit",
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("this machine has") && msg.contains("`batch_size` "),
        "{msg}"
    );
    // An explicit limit overrides the machine's.
    assert!(huge.host_memory_limit(u64::MAX).build().is_ok());
    // The default settings fit anywhere with 2 GB.
    if memory >= 2 << 30 {
        assert!(Loader::builder(source).build().is_ok());
    }
}

#[cfg(unix)]
#[test]
fn links_back_up_a_class_folder_tree_do_not_hang() {
    // `cat/up -> ..` and `dog/root -> <source folder>`: the walk followed both forever (each
    // level doubling the work). Links back to a folder being walked are skipped; a link to
    // a folder outside the source counts, once.
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir(d.join(class)).unwrap();
        std::fs::write(d.join(class).join("a.jpg"), &jpg).unwrap();
    }
    std::fs::write(outside.path().join("b.jpg"), &jpg).unwrap();
    std::os::unix::fs::symlink("..", d.join("cat/up")).unwrap();
    std::os::unix::fs::symlink(d, d.join("dog/root")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.join("dog/more")).unwrap();
    let root = d.to_path_buf();
    let source = common::with_timeout(std::time::Duration::from_secs(20), move || {
        Source::from_dir(&root).unwrap()
    });
    let mut entries: Vec<(String, u32)> = (0..source.len())
        .map(|i| {
            let p = source.path(i).unwrap();
            let rel = p.strip_prefix(d).unwrap().to_string_lossy().into_owned();
            (rel, source.label(i).unwrap())
        })
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            ("cat/a.jpg".to_string(), 0),
            ("dog/a.jpg".to_string(), 1),
            ("dog/more/b.jpg".to_string(), 1)
        ]
    );
}

#[cfg(unix)]
#[test]
fn a_folder_reached_twice_through_links_is_an_error_not_two_labels() {
    // `dog/cats -> ../cat` gave cat's images a second label; links reaching one folder many
    // ways (each level linking the next twice) made the walk exponential.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir(d.join(class)).unwrap();
        std::fs::write(d.join(class).join("a.jpg"), &jpg).unwrap();
    }
    std::os::unix::fs::symlink("../cat", d.join("dog/cats")).unwrap();
    let e = Source::from_dir(d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("reached twice") && msg.contains("dog/cats") && msg.contains("cat"),
        "{msg}"
    );
    std::fs::remove_file(d.join("dog/cats")).unwrap();

    // A chain of 40 levels, each holding two links to the next: 2^40 paths, refused at once.
    let mut level = d.join("dog/deep");
    std::fs::create_dir(&level).unwrap();
    for _ in 0..40 {
        let next = level.join("n");
        std::fs::create_dir(&next).unwrap();
        std::os::unix::fs::symlink("n", level.join("l1")).unwrap();
        std::os::unix::fs::symlink("n", level.join("l2")).unwrap();
        level = next;
    }
    std::fs::write(level.join("z.jpg"), &jpg).unwrap();
    let root = d.to_path_buf();
    let e = common::with_timeout(std::time::Duration::from_secs(20), move || {
        Source::from_dir(&root).unwrap_err()
    });
    assert!(e.to_string().contains("reached twice"), "{e}");
}

/// An empty class folder keeps its label (labels are the sorted folder names) and images
/// directly in the source folder have none: both are said, not silently passed over.
#[test]
fn an_empty_class_folder_and_loose_images_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "empty", "zebra"] {
        std::fs::create_dir(d.join(class)).unwrap();
    }
    std::fs::write(d.join("cat/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("zebra/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("loose.jpg"), &jpg).unwrap();
    let s = Source::from_dir(d).unwrap();
    assert_eq!(
        (s.len(), s.label(1)),
        (2, Some(2)),
        "labels follow the sorted folder names"
    );
    let out = std::process::Command::new(crate::common::imagefeed_bin())
        .args(["bench", "--threads", "1", "--json"])
        .arg(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("empty: a class folder with no .jpg")
            && stderr.contains("label 1 has no sample"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 image(s) directly in the source folder"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn a_link_to_an_image_of_another_class_is_an_error_not_a_second_label() {
    // `dog/1.jpg -> ../cat/1.jpg` read cat's image a second time, as a dog.
    let dir = tempfile::tempdir().unwrap();
    let (d, outside) = (dir.path().join("data"), dir.path().join("elsewhere.jpg"));
    let jpg = std::fs::read(common::testdata("photos/photo_0.jpg")).unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir_all(d.join(class)).unwrap();
    }
    std::fs::write(d.join("cat/1.jpg"), &jpg).unwrap();
    std::fs::write(d.join("dog/2.jpg"), &jpg).unwrap();
    std::fs::write(&outside, &jpg).unwrap();
    std::os::unix::fs::symlink("../cat/1.jpg", d.join("dog/1.jpg")).unwrap();
    let e = Source::from_dir(&d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Source { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("dog/1.jpg") && msg.contains("class `cat`") && msg.contains("twice"),
        "{msg}"
    );
    // A link to an image outside the source folder, or to a hidden file in it, is one sample.
    std::fs::remove_file(d.join("dog/1.jpg")).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("dog/1.jpg")).unwrap();
    std::fs::write(d.join("cat/.hidden.jpg"), &jpg).unwrap();
    std::os::unix::fs::symlink(".hidden.jpg", d.join("cat/shown.jpg")).unwrap();
    let s = Source::from_dir(&d).unwrap();
    assert_eq!(s.len(), 4);
}

#[cfg(unix)]
#[test]
fn a_fifo_or_device_as_the_list_is_an_error_not_a_hang() {
    // Reading a FIFO blocks until a writer comes; /dev/zero never ends (and the list was read
    // whole into memory).
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("list.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    let mut lists = vec![PathBuf::from("/dev/zero")];
    if made.is_ok_and(|s| s.success()) {
        lists.push(fifo);
    } else {
        println!("mkfifo unavailable: only /dev/zero checked");
    }
    for list in lists {
        let shown = list.clone();
        let (open, from_list) =
            common::with_timeout(std::time::Duration::from_secs(20), move || {
                (
                    Source::open(&list).map(|_| ()),
                    Source::from_list_file(&list).map(|_| ()),
                )
            });
        for e in [open.unwrap_err(), from_list.unwrap_err()] {
            assert_eq!(e.path(), Some(shown.as_path()), "{e}");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_listed_as_a_sample_neither_hangs_build_nor_the_epoch() {
    // build() reads sampled headers for the memory budget: opening a FIFO there would block
    // until a writer came. The FIFO is skipped by name when the epoch reaches it.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("sample.jpg");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        common::skipped("mkfifo unavailable");
        return;
    }
    let good = common::testdata("photos/photo_0.jpg");
    let source = Source::from_entries([(fifo.clone(), 0), (good, 1)]).unwrap();
    let (images, errors) = common::with_timeout(std::time::Duration::from_secs(20), move || {
        let loader = Loader::builder(source)
            .batch_size(1)
            .on_error(OnError::Skip { max: 1 })
            .build()
            .unwrap();
        let images: usize = loader.epoch(0).map(|b| b.unwrap().len()).sum();
        (images, loader.stats().skipped)
    });
    assert_eq!((images, errors), (1, 1));
}

#[cfg(unix)]
#[test]
fn the_floor_skips_devices_instead_of_reading_them_forever() {
    // `imagefeed floor` read each listed file whole: /dev/zero never ends.
    let good = common::testdata("photos/photo_0.jpg");
    let source = Source::from_entries([(PathBuf::from("/dev/zero"), 0), (good, 1)]).unwrap();
    let report = common::with_timeout(std::time::Duration::from_secs(20), move || {
        imagefeed::tools::floor::decode_floor(&source, 2, true, 160, JpegDecoder::Auto, None)
            .unwrap()
    });
    assert_eq!((report.images, report.failed), (1, 1));
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
        "errors::large_decodes_side_by_side_hold_no_more_than_one_image_at_max_pixels";
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

#[cfg(unix)]
#[test]
fn a_file_list_is_read_a_line_at_a_time_in_bounded_memory() {
    // Reading a list holds one line at a time: building the index of a million entries takes
    // the index plus 24 bytes an entry (duplicate detection), and a list whose first line is
    // 64 MB long is refused holding none of it. (Read whole, with a hash map of every path, the
    // first took the list's bytes plus ~100 bytes an entry on top of the index, and the second
    // its 64 MB.) Measured in a child process, which finds the lists by the parent's PID.
    const NAME: &str = "errors::a_file_list_is_read_a_line_at_a_time_in_bounded_memory";
    const ENTRIES: usize = 1_000_000;
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("imagefeed-it-lists-{pid}"));
    if std::env::var("IMAGEFEED_IT_CHILD").as_deref() != Ok(NAME) {
        let dir = dir_of(std::process::id());
        std::fs::create_dir_all(&dir).unwrap();
        let mut list = String::with_capacity(ENTRIES * 40);
        for i in 0..ENTRIES {
            let class = i % 1000;
            list.push_str(&format!("n{class:08}/n{class:08}_{i}.JPEG\t{class}\n"));
        }
        std::fs::write(dir.join("big.txt"), list).unwrap();
        let mut long = vec![b'x'; 64 << 20];
        long.extend_from_slice(b" 1\nok.jpg 0\n");
        std::fs::write(dir.join("long.txt"), long).unwrap();
        let passed = std::panic::catch_unwind(|| common::runs_in_child(NAME));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!passed.unwrap());
        return;
    }
    let dir = dir_of(std::os::unix::process::parent_id());
    let peak = || imagefeed_testkit::procinfo::peak_rss_bytes().expect("/proc/self/status");
    let before = peak();
    let err = Source::from_list_file(dir.join("long.txt")).expect_err("a 64 MB line");
    let grew = peak().saturating_sub(before);
    println!("64 MB line: peak RSS grew {:.1} MB", grew as f64 / 1e6);
    assert!(
        err.to_string()
            .contains("long.txt:1: the line is 67108866 bytes long"),
        "{err}"
    );
    assert!(
        grew < 8_000_000,
        "peak RSS grew {:.1} MB",
        grew as f64 / 1e6
    );
    let before = peak();
    let source = Source::from_list_file(dir.join("big.txt")).unwrap();
    let grew = peak().saturating_sub(before);
    let index = source.heap_bytes();
    println!(
        "{ENTRIES} entries: peak RSS grew {:.1} MB, the index holds {:.1} MB",
        grew as f64 / 1e6,
        index as f64 / 1e6
    );
    assert_eq!(source.len(), ENTRIES);
    assert_eq!(
        source.label(ENTRIES - 1),
        Some(((ENTRIES - 1) % 1000) as u32)
    );
    assert!(
        grew < index + 24 * ENTRIES as u64 + 16_000_000,
        "peak RSS grew {:.1} MB for a {:.1} MB index",
        grew as f64 / 1e6,
        index as f64 / 1e6
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
        "errors::a_png_with_a_very_long_side_resizes_in_bounded_memory_or_is_refused";
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

#[test]
fn cli_options_that_need_another_are_refused_alone() {
    // Ignoring them would run something else than asked: no state file, a sweep's settings
    // without a sweep.
    for (args, says) in [
        (&["--state-out", "state.txt"][..], "--max-batches"),
        (&["--sweep-images", "10"], "--sweep"),
        (&["--sweep-svg", "plot.svg"], "--sweep"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .current_dir(dir.path())
            .arg("bench")
            .arg(crate::common::testdata("classes"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?}"
        );
    }
}

#[test]
fn cli_options_that_do_not_apply_are_named_in_a_warning() {
    // A script may pass the same options to every run: they still run, and stderr says which
    // option was not used.
    for (args, says) in [
        (
            &["--max-skipped", "5"][..],
            "--max-skipped applies with --on-error skip only; ignored",
        ),
        (
            &["--crop-scale", "0.5", "1"],
            "--crop-scale applies to --transform random-resized-crop only; ignored",
        ),
        (
            &[
                "--transform",
                "random-resized-crop",
                "--cache-max-side",
                "200",
            ],
            "--cache-max-side applies with --cache only",
        ),
    ] {
        let out = std::process::Command::new(crate::common::imagefeed_bin())
            .args(["bench", "--epochs", "1", "--threads", "1"])
            .arg(crate::common::testdata("classes"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.matches(says).count() == 1,
            "{args:?}: once: {err}"
        );
        // Said once, by the command line: the library's own log line is not repeated.
        assert!(!err.contains("has no effect"), "{args:?}: {err}");
    }
}

/// A listed file that is missing or broken names its list line too (a list read in place and
/// one held in memory alike), so it is found in the list at once; a skip goes on as before.
#[test]
fn a_missing_listed_file_names_its_list_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = common::testdata("classes/cat/cat_0.jpg");
    for entries in [10usize, 300] {
        let mut list = String::from("# images\n\n");
        let missing_at = entries - 3;
        let mut want_line = 0;
        for i in 0..entries {
            if i == missing_at {
                list.push_str("gone/missing.jpg\t1\n");
                want_line = list.lines().count();
            } else {
                list.push_str(&format!("{}\t0\n", good.display()));
            }
        }
        // Duplicates are refused: each good entry its own copy of the file.
        let list = list
            .lines()
            .enumerate()
            .map(|(k, l)| {
                if l.starts_with(&*good.to_string_lossy()) {
                    let copy = dir.path().join(format!("{entries}-{k}.jpg"));
                    std::fs::copy(&good, &copy).unwrap();
                    l.replacen(&*good.to_string_lossy(), &copy.to_string_lossy(), 1)
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.path().join(format!("list-{entries}.txt"));
        std::fs::write(&path, list + "\n").unwrap();
        let loader = Loader::builder(Source::open(&path).unwrap())
            .image_size(16)
            .batch_size(4)
            .shuffle(false)
            .build()
            .unwrap();
        let e = loader
            .epoch(0)
            .find_map(Result::err)
            .expect("the missing file fails the epoch");
        assert!(matches!(e.kind(), ErrorKind::Io { .. }), "{e:?}");
        assert_eq!(
            e.path(),
            Some(dir.path().join("gone/missing.jpg").as_path()),
            "{e}"
        );
        let want = format!("(listed at {}:{want_line})", path.display());
        assert!(e.to_string().ends_with(&want), "{e} / {want}");
    }
}

/// The command line's advice can be followed there: a bad file in an epoch gets the hint of
/// `--on-error skip` (a source that cannot be opened does not), and the memory-limit error
/// names flags, with values, not the library's setting names.
#[test]
fn the_command_lines_advice_names_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("a");
    std::fs::create_dir(&class).unwrap();
    std::fs::copy(
        common::testdata("classes/cat/cat_0.jpg"),
        class.join("good.jpg"),
    )
    .unwrap();
    std::fs::write(class.join("bad.jpg"), b"not a jpeg").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::imagefeed_bin())
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let root = dir.path().to_str().unwrap();
    let e = run(&[root, "--batch-size", "1", "--no-shuffle"]);
    assert!(
        e.contains("bad.jpg") && e.contains("hint: --on-error skip"),
        "{e}"
    );
    let e = run(&[dir.path().join("missing").to_str().unwrap()]);
    assert!(!e.contains("--on-error skip"), "{e}");
    let e = run(&[root, "--host-memory-limit", "100M"]);
    assert!(
        e.contains("`--host-memory-limit`") && e.contains("`--batch-size` "),
        "{e}"
    );
    assert!(
        !e.contains("`max_pixels`") && !e.contains("`batch_size`"),
        "{e}"
    );
}
