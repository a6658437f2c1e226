//! Trains a small convolutional network with burn's `Learner` on batches from imagefeed: two
//! 3×3 convolutions with ReLU and max-pooling, then a linear layer, on 32×32 images of the
//! 10-class corpus that `imagefeed corpus` writes (or any dataset `Source::open` reads: a list,
//! class folders, tar shards, parquet, TFRecord), with random-resized-crop for training and the
//! centre crop for a held-out fifth (`Source::split`: a share of every class, or whole shards;
//! the Learner's validation split). Prints loss and held-out accuracy per epoch, with chance
//! for the dataset's number of classes. The ndarray backend, on the CPU.
//!
//! `cargo run --release -p imagefeed-burn --example train [DATASET] [--epochs N] [--smoke]`
//! (default: a 1,000-image corpus generated into a temporary folder; `--smoke`: one epoch of
//! two training batches and one held-out batch, as CI runs it). A cold build takes about 12
//! minutes on 2 cores (burn and its backend).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray};
use burn::data::dataloader::DataLoader;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::AdamConfig;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition, MetricId, NumericEntry};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{
    ClassificationOutput, InferenceStep, Interrupter, Learner, SupervisedTraining, TrainOutput,
    TrainStep,
};
use imagefeed::{Layout, Loader, Source, Transform};
use imagefeed_burn::{ImageBatch, ImagefeedDataLoader};

const SIZE: u32 = 32;
const BATCH: usize = 32;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: MaxPool2d,
    relu: Relu,
    linear: Linear<B>,
}

impl<B: Backend> Net<B> {
    fn new(classes: usize, device: &B::Device) -> Self {
        let conv = |c_in, c_out| {
            Conv2dConfig::new([c_in, c_out], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init(device)
        };
        Net {
            conv1: conv(3, 16),
            conv2: conv(16, 32),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            relu: Relu::new(),
            linear: LinearConfig::new(32 * 8 * 8, classes).init(device),
        }
    }

    /// Logits of NCHW images.
    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.pool.forward(self.relu.forward(self.conv1.forward(x)));
        let x = self.pool.forward(self.relu.forward(self.conv2.forward(x)));
        self.linear.forward(x.flatten(1, 3))
    }

    fn classify(&self, batch: ImageBatch<B>) -> ClassificationOutput<B> {
        let output = self.forward(batch.images);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, output, batch.targets)
    }
}

impl<B: AutodiffBackend> TrainStep for Net<B> {
    type Input = ImageBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ImageBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Net<B> {
    type Input = ImageBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ImageBatch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

/// Prints one line per epoch: the training loss and the held-out loss and accuracy, each the
/// mean over the epoch's images (burn's own renderers print every iteration, or need a
/// terminal).
#[derive(Default)]
struct EpochLines {
    names: HashMap<MetricId, String>,
    /// (split, metric) -> (sum of value × images, images), for the current epoch.
    sums: HashMap<(&'static str, String), (f64, usize)>,
    epoch: Option<usize>,
    held_out_images: usize,
    /// The dataset's number of classes (chance is one in that many).
    classes: usize,
}

impl EpochLines {
    fn add(&mut self, split: &'static str, state: MetricState) {
        let MetricState::Numeric(entry, value) = state else {
            return;
        };
        let Some(name) = self.names.get(&entry.metric_id) else {
            return;
        };
        let (value, count) = match value {
            NumericEntry::Value(v) => (v, 1),
            NumericEntry::Aggregated {
                aggregated_value,
                count,
            } => (aggregated_value, count),
        };
        let sum = self.sums.entry((split, name.clone())).or_default();
        sum.0 += value * count as f64;
        sum.1 += count;
    }

    fn mean(&self, split: &'static str, name: &str) -> f64 {
        let (sum, n) = self
            .sums
            .get(&(split, name.to_string()))
            .copied()
            .unwrap_or_default();
        sum / n.max(1) as f64
    }

    /// Prints the epoch that has ended, if any.
    fn flush(&mut self) {
        if let Some(epoch) = self.epoch.take() {
            println!(
                "epoch {epoch}: training loss {:.3}, held-out loss {:.3}, held-out accuracy {:.1}% ({} images; chance {:.0}%)",
                self.mean("train", "Loss"),
                self.mean("valid", "Loss"),
                self.mean("valid", "Accuracy"),
                self.held_out_images,
                100.0 / self.classes.max(1) as f64
            );
        }
        self.sums.clear();
    }

    fn at_epoch(&mut self, item: &TrainingProgress) {
        let epoch = item.global_progress.items_processed;
        if self.epoch != Some(epoch) {
            self.flush();
            self.epoch = Some(epoch);
        }
    }
}

impl MetricsRendererTraining for EpochLines {
    fn update_train(&mut self, state: MetricState) {
        self.add("train", state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.add("valid", state);
    }

    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        self.at_epoch(&item);
    }

    fn render_valid(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        if let Some(p) = &item.progress {
            self.held_out_images = p.items_processed;
        }
    }

    fn on_train_end(
        &mut self,
        _: Option<burn::train::LearnerSummary>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        self.flush();
        Ok(())
    }
}

impl MetricsRendererEvaluation for EpochLines {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
    fn render_test(&mut self, _: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for EpochLines {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}

type Train = Autodiff<NdArray>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let epochs: usize = match args.iter().position(|a| a == "--epochs") {
        Some(i) => args.get(i + 1).ok_or("--epochs needs a number")?.parse()?,
        None if smoke => 1,
        None => 8,
    };
    let tmp = tempfile::tempdir()?;
    let list = match args
        .iter()
        .find(|a| !a.starts_with("--") && a.parse::<u64>().is_err())
    {
        Some(p) => p.into(),
        None => {
            imagefeed_testkit::corpus::generate(tmp.path(), if smoke { 100 } else { 1000 }, 1)?.list
        }
    };
    // A fifth held out: a share of every class (a list or class folders), or whole shards.
    let all = Source::open(&list)?;
    let classes = all.num_classes() as usize;
    let (mut train_part, mut held_out_part) = all.split(0.2, 7)?;
    if smoke {
        // About two training batches and one held-out batch (whole shards, for shards).
        let small = |s: Source, n: usize| -> Result<Source, imagefeed::Error> {
            if s.len() <= n {
                return Ok(s);
            }
            Ok(s.split(n as f64 / s.len() as f64, 7)?.1)
        };
        train_part = small(train_part, 2 * BATCH)?;
        held_out_part = small(held_out_part, BATCH)?;
    }
    let common = |source: Source| {
        Loader::builder(source)
            .image_size(SIZE)
            .batch_size(BATCH)
            .layout(Layout::Nchw)
            .normalize([0.5; 3], [0.25; 3])
            .seed(7)
    };
    // A loader error ends its epoch (burn's iterators yield no `Result`): the hook stops the
    // training, and main returns the error.
    let interrupter = Interrupter::new();
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let on_error = |interrupter: Interrupter, failed: Arc<Mutex<Option<String>>>| {
        move |e: &imagefeed_burn::Error| {
            interrupter.stop(Some("the data loader failed"));
            if let Ok(mut slot) = failed.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }
    };
    let device = NdArrayDevice::Cpu;
    let train = ImagefeedDataLoader::<Train>::new(
        train_part,
        move |s| common(s).transform(Transform::random_resized_crop()),
        &device,
    )?
    .on_error(on_error(interrupter.clone(), failed.clone()));
    let held_out = ImagefeedDataLoader::<NdArray>::new(
        held_out_part,
        move |s| common(s).transform(Transform::center_crop()).shuffle(false),
        &device,
    )?
    .on_error(on_error(interrupter.clone(), failed.clone()));
    let (train, held_out): (Arc<dyn DataLoader<_, _>>, Arc<dyn DataLoader<_, _>>) =
        (Arc::new(train), Arc::new(held_out));

    <Train as Backend>::seed(&device, 7);
    let artifacts = tempfile::tempdir()?;
    let training = SupervisedTraining::new(artifacts.path(), train, held_out)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .renderer(EpochLines {
            classes,
            ..EpochLines::default()
        })
        .with_application_logger(None)
        .with_interrupter(interrupter)
        .num_epochs(epochs);
    let learner = Learner::new(
        Net::<Train>::new(classes, &device),
        AdamConfig::new().init(),
        2e-3,
    );
    let _trained = training.launch(learner);
    let error = failed.lock().ok().and_then(|mut slot| slot.take());
    match error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
