//! Entry points for the fuzz targets in `fuzz/` (the pure cores that take untrusted bytes) and
//! the criterion benches in `benches/` (each stage alone).
//! Not part of the public API (hidden, no stability promise).

use std::path::{Path, PathBuf};

use crate::decode::{DecodeSettings, Decoder, JpegDecoder, LargeGate};
use crate::transform::{BatchStorage, Draw, Dtype, Geometry, Layout, Normalizer, ResizeFilter};

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
    crate::source::list::parse_list(Path::new("fuzz.txt"), PathBuf::from("/data"), bytes)
        .ok()
        .map(|i| i.len())
}

/// Indexes `bytes` as a WebDataset tar shard, as opening a shard does (headers, `.cls` labels,
/// bounds against the shard's size). Returns the number of samples, or `None` for an error.
pub fn index_tar(bytes: &[u8]) -> Option<usize> {
    crate::source::shards::index_bytes(bytes).ok()
}

/// Indexes `bytes` as a TFRecord shard, as opening one does (framing, length CRCs, each
/// `tf.train.Example`'s keys and label), then reads every record as an epoch does (payload
/// CRC, image and label). Returns the number of records read, or `None` for a file refused at
/// open. Panics if opening and reading disagree on a record's label.
pub fn index_tfrecord(bytes: &[u8]) -> Option<usize> {
    let records = crate::source::tfrecord::index_bytes(bytes).ok()?;
    Some(records.iter().filter(|r| r.is_ok()).count())
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
    crate::transform::flip_horizontal(rgb, width)
}

/// A resizer kept between calls, as a decode thread keeps one: images of a size it has seen
/// reuse their filter taps and scratch.
#[derive(Default)]
pub struct BenchResizer(crate::transform::Resizer);

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
        let decoded = crate::transform::Decoded {
            pixels: crate::transform::Pixels::Rgb(rgb),
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
    crate::transform::simd::kernels_name()
}

/// Pushes `n` items through a shuffle buffer of `capacity` and drains it; returns a checksum.
pub fn shuffle_buffer(n: u32, capacity: usize, seed: u64) -> u64 {
    let mut b =
        crate::shuffle::ShuffleBuffer::new(capacity, crate::rng::Rng::for_stage(seed, 0, 0));
    let mut sum = 0u64;
    for i in 0..n {
        if let Some(x) = b.push(i) {
            sum = sum.wrapping_mul(31).wrapping_add(u64::from(x));
        }
    }
    while let Some(x) = b.drain_one() {
        sum = sum.wrapping_mul(31).wrapping_add(u64::from(x));
    }
    sum
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
