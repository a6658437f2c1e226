//! Settings that cannot work fail in `build`, naming the setting and what to lower.

use super::*;

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
