//! Command-line arguments of `bench` and the value types and parsers they use.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use imagefeed::{Device, Dtype, JpegDecoder, ResizeFilter};

#[derive(Parser, Clone)]
pub(crate) struct BenchArgs {
    /// A file list (PATH<TAB>LABEL lines, or a TSV with a `path` header), a folder of class
    /// folders, tar shards, parquet or TFRecord files (a dataset repository's root with a
    /// `data/` folder too), a manifest, a pattern (`shards/train-{000..099}.tar`,
    /// `data/*.parquet`), a name prefix (`data/train-`), or a URL (omitted with --mix).
    #[arg(required_unless_present = "mix", conflicts_with = "mix")]
    pub(crate) source: Option<PathBuf>,
    /// Open this split of the dataset: the folder SOURCE/NAME (or SOURCE/data/NAME), or the
    /// files named `NAME-…` there (`train-00000-of-00004.parquet`).
    #[arg(long, value_name = "NAME")]
    pub(crate) split: Option<String>,
    /// Parquet: the column holding the images (a struct with binary `bytes`, or binary)
    /// [default: image].
    #[arg(long, value_name = "COLUMN")]
    pub(crate) image_column: Option<String>,
    /// Parquet: the integer column holding the labels [default: `label` where there is one,
    /// else every label is 0].
    #[arg(long, value_name = "COLUMN")]
    pub(crate) label_column: Option<String>,
    /// Mix sources in proportions: `--mix 3 web/ --mix 1 curated.txt` (repeatable); they are
    /// numbered from 0 in the order given, and --indices-out writes `SOURCE INDEX` lines.
    #[arg(long, num_args = 2, value_names = ["WEIGHT", "SOURCE"], action = clap::ArgAction::Append)]
    pub(crate) mix: Vec<String>,
    /// With --mix: samples an epoch delivers [default: until the first source has given all
    /// of its samples once, see --mix-end].
    #[arg(long, requires = "mix")]
    pub(crate) epoch_size: Option<usize>,
    /// With --mix and no --epoch-size: an epoch ends when the first or the last source has
    /// given all of its samples once.
    #[arg(long, value_enum, default_value_t = MixEndArg::First, requires = "mix")]
    pub(crate) mix_end: MixEndArg,
    /// With --mix: a source asked for more samples in an epoch than it holds repeats (a new
    /// shuffled pass) or gives no more that epoch.
    #[arg(long, value_enum, default_value_t = ExhaustedArg::Repeat, requires = "mix")]
    pub(crate) exhausted: ExhaustedArg,
    /// With --mix: labels as each source has them, or offset so that every source's classes
    /// have labels of their own.
    #[arg(long, value_enum, default_value_t = MixLabelsArg::PerSource, requires = "mix")]
    pub(crate) mix_labels: MixLabelsArg,
    #[arg(long, default_value_t = 64)]
    pub(crate) batch_size: usize,
    /// Decode threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub(crate) threads: usize,
    /// Samples mixed at once (default: 4096 for tar shards, TFRecord and parquet, whose shards
    /// are shuffled and their samples mixed within blocks of this many; files are permuted
    /// whole). 0 or 1 keeps each shard's samples in order. Holds no samples in memory.
    #[arg(long)]
    pub(crate) shuffle_buffer: Option<usize>,
    /// Ready batches queued ahead of the consumer.
    #[arg(long, default_value_t = 2)]
    pub(crate) prefetch: usize,
    /// Samples hinted to the kernel ahead of the decode threads (their local files, or their
    /// records in a complete cache), so that data not in the page cache is read in the
    /// background (0: off).
    #[arg(long, default_value_t = 64)]
    pub(crate) readahead: usize,
    /// Adapt decode threads and prefetch depth every second while an epoch runs (the summary
    /// reports where each epoch ended).
    #[arg(long)]
    pub(crate) autotune: bool,
    #[arg(long, default_value_t = 1)]
    pub(crate) epochs: u64,
    /// Output height and width.
    #[arg(long, num_args = 2, value_names = ["H", "W"], default_values_t = [160, 160])]
    pub(crate) size: Vec<u32>,
    #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
    pub(crate) dtype: DtypeArg,
    #[arg(long, value_enum, default_value_t = LayoutArg::Nhwc)]
    pub(crate) layout: LayoutArg,
    #[arg(long, value_enum, default_value_t = OnErrorArg::Fail)]
    pub(crate) on_error: OnErrorArg,
    /// With --on-error skip: the most samples an epoch may skip, past which it fails
    /// [default: no limit].
    #[arg(long)]
    pub(crate) max_skipped: Option<u64>,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Keep file order instead of a seeded permutation per epoch.
    #[arg(long)]
    pub(crate) no_shuffle: bool,
    /// JPEG decoder.
    #[arg(long, value_enum, default_value_t = DecoderArg::Auto)]
    pub(crate) decoder: DecoderArg,
    /// Resize filter: antialiased (Pillow's widened triangle) or bilinear (two taps within
    /// 2x, as tf.image.resize).
    #[arg(long, value_enum, default_value_t = FilterArg::Antialiased)]
    pub(crate) filter: FilterArg,
    /// Which box of each image becomes the sample: stretch (the whole image),
    /// shorter-side-center-crop, center-crop (evaluation: the shorter side resized to
    /// min(H, W) / --crop-fraction, then the centre) or random-resized-crop (training: a new
    /// box every epoch, see --crop-scale and --crop-ratio).
    #[arg(long, value_enum, default_value_t = TransformArg::Stretch)]
    pub(crate) transform: TransformArg,
    /// With random-resized-crop only: the range of the box's area, as a fraction of the
    /// image's [default: 0.08 1].
    #[arg(long, num_args = 2, value_names = ["MIN", "MAX"], allow_negative_numbers = true)]
    pub(crate) crop_scale: Option<Vec<f64>>,
    /// With random-resized-crop only: the range of the box's aspect ratio (width / height)
    /// [default: 0.75 1.3333333333333333].
    #[arg(long, num_args = 2, value_names = ["MIN", "MAX"], allow_negative_numbers = true)]
    pub(crate) crop_ratio: Option<Vec<f64>>,
    /// With center-crop only: the fraction of the resized shorter side kept [default: 0.875].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) crop_fraction: Option<f64>,
    /// Probability of mirroring each sample left to right [default: 0.5 with
    /// random-resized-crop, else 0].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) flip: Option<f64>,
    /// With --cache and random-resized-crop only: the longest side of the image the cache
    /// records for each sample, from which each epoch cuts its box [default: twice the
    /// output's longer side].
    #[arg(long)]
    pub(crate) cache_max_side: Option<u32>,
    /// Images over this many pixels are refused (it sizes the memory large decodes share)
    /// [default: 100000000].
    #[arg(long)]
    pub(crate) max_pixels: Option<u64>,
    /// Deliver JPEGs that libjpeg-turbo decodes to the end while warning that their data is
    /// damaged or padded ("Corrupt JPEG data: ..."), as Pillow and tf.data do, logging each;
    /// by default they are errors. Truncated files are errors either way.
    #[arg(long)]
    pub(crate) accept_jpeg_warnings: bool,
    /// Fail before running if the memory budget's worst case exceeds this many bytes (suffixes K, M, G, T:
    /// powers of 1024) [default: the machine's or container's memory].
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) host_memory_limit: Option<u64>,
    /// Cache decoded samples in this file (written by the first epoch, read by later ones)
    /// [default: no cache].
    #[arg(long)]
    pub(crate) cache: Option<PathBuf>,
    /// This process's rank (default: the launcher's: torchrun's RANK, Open MPI's OMPI_COMM_WORLD_RANK, PMI_RANK or Slurm's SLURM_PROCID; else 0).
    #[arg(long)]
    pub(crate) rank: Option<usize>,
    /// Number of ranks sharing each epoch (default: the launcher's: WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS; else 1).
    #[arg(long)]
    pub(crate) world_size: Option<usize>,
    /// How ranks get equal batch counts: equal-batches (every sample once, plus a repeated sample on a short rank only where batch counts would differ), repeat or drop.
    #[arg(long, value_enum, default_value_t = PaddingArg::EqualBatches)]
    pub(crate) shard_padding: PaddingArg,
    /// Write the dataset index of every delivered sample, one a line, in delivery order; a
    /// padding copy (a stand-in for a skipped sample under sharding, or a repeat that evens out
    /// the ranks' shares) is written `INDEX padded`. With --mix, `SOURCE INDEX` (and
    /// `SOURCE INDEX padded`).
    #[arg(long)]
    pub(crate) indices_out: Option<PathBuf>,
    /// Stop after this many batches (of the first epoch run), report that epoch so far (with
    /// `"stopped": true` in --json) and write the loader state to --state-out.
    #[arg(long)]
    pub(crate) max_batches: Option<u64>,
    /// Where --max-batches writes the loader state (one line).
    #[arg(long, requires = "max_batches")]
    pub(crate) state_out: Option<PathBuf>,
    /// Resume from a loader state written by --state-out, by any rank, at any --world-size:
    /// finish that epoch, then run the following epochs up to --epochs in all. Give several
    /// (the states every rank saved) to check that they were saved at the same step.
    #[arg(long, num_args = 1..)]
    pub(crate) resume_from: Vec<PathBuf>,
    /// Deliver this per-sample field with each sample (repeatable): a tar member's extension
    /// (`txt` for KEY.txt), a parquet column, a TFRecord feature, a TSV list's column. With
    /// --json, each epoch reports the fields' sizes.
    #[arg(long = "field", value_name = "NAME")]
    pub(crate) fields: Vec<String>,
    /// The most bytes a field's value may hold; a larger one is an error naming the sample
    /// and the field (suffixes K, M, G: powers of 1024) [default: 64K].
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) field_limit: Option<u64>,
    /// Write one JSON object a delivered sample, in delivery order: {"source": S, "index": I,
    /// "label": L, "fields": {NAME: value}} (text a string, bytes base64, numbers a list;
    /// a missing optional value null). S is the mixture's source number, else 0.
    #[arg(long, requires = "fields")]
    pub(crate) fields_out: Option<PathBuf>,
    /// Deliver batches to this device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// Print one JSON object per epoch on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Run a grid of settings (batch size x threads x prefetch x shuffle buffer x dtype), one
    /// epoch each, and print images/s against peak RSS as a table and an SVG plot. The
    /// options of each sample (size, layout, decoder, filter, transform and its parameters,
    /// flip, JPEG warnings, max pixels, seed) apply to every point; the grid sets the others.
    #[arg(long)]
    pub(crate) sweep: bool,
    /// With --sweep: images per run (the first N of the source).
    #[arg(long, default_value_t = 1000, requires = "sweep")]
    pub(crate) sweep_images: usize,
    /// With --sweep: where to write the SVG plot.
    #[arg(long, default_value = "sweep.svg", requires = "sweep")]
    pub(crate) sweep_svg: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum MixEndArg {
    First,
    Last,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ExhaustedArg {
    Repeat,
    Drop,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum MixLabelsArg {
    PerSource,
    Offset,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DtypeArg {
    F32,
    F16,
    Bf16,
    U8,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LayoutArg {
    Nhwc,
    Nchw,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum OnErrorArg {
    Fail,
    Skip,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum PaddingArg {
    EqualBatches,
    Repeat,
    Drop,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum TransformArg {
    Stretch,
    ShorterSideCenterCrop,
    CenterCrop,
    RandomResizedCrop,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum FilterArg {
    Antialiased,
    Bilinear,
}

impl FilterArg {
    pub(crate) fn get(self) -> ResizeFilter {
        match self {
            FilterArg::Bilinear => ResizeFilter::Bilinear,
            FilterArg::Antialiased => ResizeFilter::Antialiased,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DecoderArg {
    Auto,
    Turbojpeg,
    Zune,
}

impl DecoderArg {
    pub(crate) fn get(self) -> JpegDecoder {
        match self {
            DecoderArg::Auto => JpegDecoder::Auto,
            DecoderArg::Turbojpeg => JpegDecoder::TurboJpeg,
            DecoderArg::Zune => JpegDecoder::Zune,
        }
    }
}

pub(crate) fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" | "host" => Ok(Device::Host),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("unknown device `{s}`: use cpu, cuda or cuda:N")),
    }
}

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&t[..t.len() - 1], 10),
        Some(b'M') => (&t[..t.len() - 1], 20),
        Some(b'G') => (&t[..t.len() - 1], 30),
        Some(b'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{text}` is not a byte count such as 8G, 512M or 1000000"))
}

pub(crate) fn dtype_of(d: DtypeArg) -> Dtype {
    match d {
        DtypeArg::F32 => Dtype::F32,
        DtypeArg::F16 => Dtype::F16,
        DtypeArg::Bf16 => Dtype::Bf16,
        DtypeArg::U8 => Dtype::U8,
    }
}
