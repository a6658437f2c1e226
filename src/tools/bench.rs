//! Entry points for the criterion benches in `benches/`: each stage alone, as the pipeline
//! runs it.

use std::path::Path;

use crate::batch::{BatchStorage, Dtype, Layout, Normalizer};
use crate::decode::{DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::decode::{Draw, Geometry};
use crate::ResizeFilter;

/// A decoder for the criterion benches (`benches/decode.rs`): the loader's per-thread decoder
/// with its buffers.
pub struct BenchDecoder {
    decoder: Decoder,
    gate: LargeGate,
    geom: Geometry,
}

impl BenchDecoder {
    /// A decoder for a `size`×`size` stretch target; `dct`: DCT-scaled decoding; `zune`: the
    /// pure-Rust decoder.
    pub fn new(size: u32, dct: bool, zune: bool) -> Self {
        BenchDecoder {
            decoder: Decoder::new(DecodeSettings {
                max_pixels: 100_000_000,
                apply_exif: true,
                check_extension: false,
                dct_scaling: dct,
                accept_jpeg_warnings: false,
                planes: true,
                jpeg_decoder: if zune {
                    JpegDecoder::Zune
                } else {
                    JpegDecoder::Auto
                },
            }),
            gate: LargeGate::default(),
            geom: Geometry {
                width: size,
                height: size,
                transform: crate::Transform::Stretch,
                flip: 0.0,
                filter: ResizeFilter::default(),
            },
        }
    }

    /// Decodes only; returns the decoded size.
    pub fn decode(&mut self, bytes: &[u8]) -> Option<(u32, u32)> {
        self.decoder
            .decode(bytes, Path::new("bench.jpg"), &self.geom, false, &self.gate)
            .ok()
            .map(|d| (d.width, d.height))
    }

    /// The transform later calls apply (the default is a stretch), with flip probability
    /// `flip`.
    pub fn set_transform(&mut self, transform: crate::Transform, flip: f64) {
        self.geom.transform = transform;
        self.geom.flip = flip;
    }

    /// On (the default, as in a loader): libjpeg-turbo decodes only a cropping transform's
    /// region. Off: the whole frame at the box's DCT scale, the box cut after (what a decoder
    /// without region decoding does): the same pixels, to measure what region decoding saves.
    pub fn set_crop_regions(&mut self, on: bool) {
        self.decoder.crop_regions = on;
    }

    /// Decodes, resizes and orients into `out` (`size * size * 3` bytes).
    pub fn decode_resize(&mut self, bytes: &[u8], out: &mut [u8]) -> bool {
        self.decode_sample(bytes, 0, 0, out)
    }

    /// As [`BenchDecoder::decode_resize`] for the sample with dataset index `index` in epoch
    /// `epoch` (seed 0): the box a random transform draws for it.
    pub fn decode_sample(&mut self, bytes: &[u8], epoch: u64, index: u64, out: &mut [u8]) -> bool {
        let draw = Draw {
            seed: 0,
            epoch,
            index,
        };
        self.decoder
            .decode_resize(
                bytes,
                Path::new("bench.jpg"),
                &self.geom,
                crate::decode::Target::Sample(draw),
                false,
                &self.gate,
                out,
            )
            .is_ok()
    }
}

/// Resizes an RGB8 image into `out` (`size * size * 3` bytes) as the pipeline does, with
/// `filter`, with a fresh resizer (so its filter taps are computed for this call).
pub fn resize(
    rgb: &[u8],
    width: u32,
    height: u32,
    size: u32,
    filter: ResizeFilter,
    out: &mut [u8],
) -> bool {
    BenchResizer::new().resize(rgb, width, height, size, filter, out)
}

/// Mirrors an RGB8 image `width` pixels wide left to right in place, as a flipped sample is.
pub fn flip_horizontal(rgb: &mut [u8], width: usize) {
    crate::decode::flip_horizontal(rgb, width)
}

/// A resizer kept between calls, as a decode thread keeps one: images of a size it has seen
/// reuse their filter taps and scratch.
#[derive(Default)]
pub struct BenchResizer(crate::decode::Resizer);

impl BenchResizer {
    /// A resizer with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`resize`], keeping taps and scratch for the next call.
    pub fn resize(
        &mut self,
        rgb: &[u8],
        width: u32,
        height: u32,
        size: u32,
        filter: ResizeFilter,
        out: &mut [u8],
    ) -> bool {
        let geom = Geometry {
            width: size,
            height: size,
            transform: crate::Transform::Stretch,
            flip: 0.0,
            filter,
        };
        let decoded = crate::image::Decoded {
            pixels: crate::image::Pixels::Rgb(rgb),
            width,
            height,
            orientation: 1,
            crop: None,
            full: (width, height),
        };
        self.0.resize_orient(&decoded, &geom, false, out).is_ok()
    }
}

/// Normalizes `batch` copies of `sample` into a batch buffer of `dtype` and `layout`, on one
/// thread or (`parallel`) on a two-thread pool, as the batcher does. Returns the output bytes.
pub fn normalize_batch(
    sample: &[u8],
    batch: usize,
    dtype: Dtype,
    layout: Layout,
    parallel: Option<&rayon::ThreadPool>,
) -> usize {
    let norm = Normalizer::new([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], layout);
    let mut out = BatchStorage::new(dtype, sample.len() * batch);
    match parallel {
        Some(pool) => {
            let samples: Vec<Vec<u8>> = (0..batch).map(|_| sample.to_vec()).collect();
            pool.install(|| norm.write_all_par(&samples, &mut out));
        }
        None => {
            for k in 0..batch {
                norm.write(sample, &mut out, k);
            }
        }
    }
    out.as_bytes().len()
}

/// The vector kernels the resize and normalize run in this process: `"avx512"`, `"avx2"` or
/// `"portable"` (AVX-512 by default on AMD CPUs only; `IMAGEFEED_AVX512=on|off` overrides).
pub fn simd_kernels() -> &'static str {
    crate::simd::kernels_name()
}

/// Walks one epoch's order over `n` samples and returns a checksum: read at random
/// (`shard == 0`), or as streams of `shard` samples mixed within blocks of `block`.
pub fn epoch_order(n: u32, shard: u32, block: usize, seed: u64) -> u64 {
    let settings = crate::shuffle::ShuffleSettings {
        enabled: true,
        buffer: Some(block),
        streamed: shard > 0,
        ..Default::default()
    };
    let order = if shard == 0 {
        crate::shuffle::Order::random(n as usize, &settings, seed, 0)
    } else {
        let streams: Vec<std::ops::Range<u32>> = (0..n.div_ceil(shard))
            .map(|s| s * shard..((s + 1) * shard).min(n))
            .collect();
        crate::shuffle::Order::streams(&streams, 1, &settings, seed, 0)
    };
    (0..order.len()).fold(0u64, |sum, q| {
        sum.wrapping_mul(31).wrapping_add(u64::from(order.at(q)))
    })
}

/// Batches of 64 of the test photographs (`testdata/photos`, 160×160, `dtype`), epoch after
/// epoch: the conversion benches take one batch at a time, outside the measured time.
pub struct BatchFeed {
    loader: crate::Loader,
    epoch: u64,
    batches: crate::Batches,
}

impl BatchFeed {
    /// A loader over 256 entries cycling through the six test photographs.
    ///
    /// # Errors
    /// The loader's, if the photographs cannot be listed or the loader built.
    pub fn photos(dtype: Dtype) -> Result<Self, crate::Error> {
        Self::photos_on(dtype, crate::Device::Host)
    }

    /// As [`BatchFeed::photos`], delivering batches to `device`.
    ///
    /// # Errors
    /// The loader's: a device that cannot be used among them.
    pub fn photos_on(dtype: Dtype, device: crate::Device) -> Result<Self, crate::Error> {
        let photos = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/photos");
        let entries = (0..256u32).map(|i| (photos.join(format!("photo_{}.jpg", i % 6)), i % 6));
        let loader = crate::Loader::builder(crate::Source::from_entries(entries)?)
            .batch_size(64)
            .dtype(dtype)
            .device(device)
            .build()?;
        let batches = loader.epoch(0);
        Ok(BatchFeed {
            loader,
            epoch: 0,
            batches,
        })
    }

    /// The next batch, starting the next epoch where one ends.
    ///
    /// # Errors
    /// The loader's, or a source that yields no batch in a whole epoch.
    pub fn next_batch(&mut self) -> Result<crate::Batch, crate::Error> {
        for _ in 0..2 {
            if let Some(batch) = self.batches.next() {
                return batch;
            }
            self.epoch += 1;
            self.batches = self.loader.epoch(self.epoch);
        }
        Err(crate::Error::config(
            "source",
            "an epoch of the feed yielded no batch",
        ))
    }
}
