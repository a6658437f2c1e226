//! Helpers shared by the integration tests: paths into `testdata/`, corpora (a realistic one
//! from `imagefeed_testkit::corpus`, and small "id-coded" ones whose pixels say which sample they are),
//! a loader over one file, pixel metrics, a watchdog against hangs, and running a test alone in
//! a child process.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use imagefeed::{Batch, Dtype, Error, LoaderBuilder, Source};

/// The workspace's `imagefeed` binary beside this test binary (`target/<profile>/`), for the
/// tests that check the library's promises through the command line (the command line's own
/// tests are crates/imagefeed-cli/tests). Built once, with `cargo build -p imagefeed-cli`, where
/// it is missing (`cargo test -p imagefeed` builds only the library's targets).
pub(crate) fn imagefeed_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().map_err(|e| format!("the test binary's path: {e}"))?;
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("the test binary is not in target/<profile>/deps/")?;
        let bin = dir.join(format!("imagefeed{}", std::env::consts::EXE_SUFFIX));
        if bin.is_file() {
            return Ok(bin);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "imagefeed-cli"]);
        if profile != "debug" {
            build.args(["--profile", profile]);
        }
        if let Some(target) = dir.parent() {
            build.arg("--target-dir").arg(target);
        }
        let out = build
            .output()
            .map_err(|e| format!("running cargo to build imagefeed-cli: {e}"))?;
        if !out.status.success() || !bin.is_file() {
            return Err(format!(
                "`cargo build -p imagefeed-cli` did not make {}: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(bin)
    });
    match built {
        Ok(bin) => bin.clone(),
        Err(why) => panic!("the command-line tests need the imagefeed binary: {why}"),
    }
}

/// Says that the running test skips (part of) what it checks, and why: `SKIPPED: <test>: <why>`
/// on stdout, and appended as a line to the file `IMAGEFEED_SKIP_LOG` names, where it is set
/// (CI counts the lines and prints them in one line at the end of its log).
pub(crate) fn skipped(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("SKIPPED: {test}: {why}");
    println!("{line}");
    if let Some(log) = std::env::var_os("IMAGEFEED_SKIP_LOG") {
        use std::io::Write;
        // One short write with O_APPEND: lines from parallel tests and processes do not mix.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// A path inside `testdata/`.
pub(crate) fn testdata(rel: &str) -> PathBuf {
    // The repository's testdata/, from the library's tests or from the command line's crate.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here
        .ancestors()
        .find(|p| p.join("testdata").is_dir())
        .unwrap_or(here);
    root.join("testdata").join(rel)
}

/// A realistic corpus written by [`imagefeed_testkit::corpus::generate`] (`class_XX/` folders plus
/// `files.txt`), shared read-only by all tests. Generating takes tens of milliseconds an image
/// in a debug build, so it is cached in cargo's per-target temporary folder, keyed on count
/// and seed; a half-written cache is never reused (it is renamed into place when complete).
/// Tests that modify files make their own copies.
pub(crate) fn corpus(count: usize, seed: u64) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let tmp_root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp_root.join(format!("it-corpus-v1-{count}-{seed}"));
    if corpus_is_complete(&dir, count) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let tmp = tempfile::Builder::new()
        .prefix("it-corpus-partial-")
        .tempdir_in(tmp_root)
        .unwrap();
    imagefeed_testkit::corpus::generate(tmp.path(), count, seed).unwrap();
    let tmp = tmp.keep();
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another test process finished the same corpus first.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(corpus_is_complete(&dir, count), "{}", dir.display());
    dir
}

fn corpus_is_complete(dir: &Path, count: usize) -> bool {
    let Ok(list) = std::fs::read_to_string(dir.join("files.txt")) else {
        return false;
    };
    let lines: Vec<&str> = list.lines().collect();
    lines.len() == count
        && lines
            .iter()
            .all(|l| l.split('\t').next().is_some_and(|p| dir.join(p).is_file()))
}

/// The shared realistic corpus as a source (64 images, 10 classes).
pub(crate) fn corpus_source() -> Source {
    Source::from_list_file(corpus(64, 7).join("files.txt")).unwrap()
}

/// The first `n` entries of `source`, as a new source with absolute paths.
pub(crate) fn subset(source: &Source, n: usize) -> Source {
    source.slice(0..n).unwrap()
}

/// The colour that codes sample `id` (0..512) in an id-coded image: three levels 30 apart per
/// channel survive JPEG compression and any resize of a flat image.
pub(crate) fn id_color(id: usize) -> [u8; 3] {
    assert!(id < 512);
    let level = |d: usize| (20 + 30 * d) as u8;
    [level(id % 8), level(id / 8 % 8), level(id / 64)]
}

/// The id coded by a pixel, or panics if the pixel codes none.
pub(crate) fn decode_id(px: &[u8]) -> usize {
    let digit = |v: u8| {
        let d = (f64::from(v) - 20.0) / 30.0;
        let r = d.round();
        assert!(
            (d - r).abs() < 0.4 && (0.0..8.0).contains(&r),
            "pixel {px:?} codes no id"
        );
        r as usize
    };
    digit(px[0]) + 8 * digit(px[1]) + 64 * digit(px[2])
}

/// An id-coded JPEG: a flat image of `id_color(id)`, with a size that varies with the id.
pub(crate) fn id_jpeg(id: usize) -> Vec<u8> {
    let (w, h) = (40 + (id % 7) as u32 * 6, 32 + (id % 3) as u32 * 8);
    let rgb: Vec<u8> = id_color(id)
        .iter()
        .copied()
        .cycle()
        .take(w as usize * h as usize * 3)
        .collect();
    encode_jpeg(&rgb, w, h, 90)
}

/// Encodes RGB8 pixels as a baseline JPEG (the `image` crate's encoder).
pub(crate) fn encode_jpeg(rgb: &[u8], w: u32, h: u32, quality: u8) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality)
        .encode(rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// Encodes RGB8 pixels as a PNG.
pub(crate) fn encode_png(rgb: &[u8], w: u32, h: u32) -> Vec<u8> {
    use image::ImageEncoder;
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// A folder of id-coded JPEGs `img_NNNN.jpg` (sample `i` codes id `i`) and a `list.txt` giving
/// sample `i` the label [`id_label`]`(i)`.
pub(crate) struct IdCorpus {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) paths: Vec<PathBuf>,
}

/// The label of sample `i` of an [`IdCorpus`]: not a function of the position in a batch.
pub(crate) fn id_label(i: usize) -> u32 {
    ((i * 7 + 3) % 11) as u32
}

impl IdCorpus {
    pub(crate) fn new(n: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::with_capacity(n);
        let mut list = String::new();
        for i in 0..n {
            let name = format!("img_{i:04}.jpg");
            let p = dir.path().join(&name);
            std::fs::write(&p, id_jpeg(i)).unwrap();
            list.push_str(&format!("{name}\t{}\n", id_label(i)));
            paths.push(p);
        }
        std::fs::write(dir.path().join("list.txt"), list).unwrap();
        IdCorpus { dir, paths }
    }

    pub(crate) fn list(&self) -> PathBuf {
        self.dir.path().join("list.txt")
    }

    pub(crate) fn source(&self) -> Source {
        Source::from_list_file(self.list()).unwrap()
    }
}

/// Checks that every image of a `u8` NHWC batch shows the id of its dataset index (so pixels,
/// labels and indices were never separated).
pub(crate) fn assert_pixels_follow_indices(batch: &Batch) {
    assert_pixels_follow_indices_by(batch, |i| i);
}

/// As [`assert_pixels_follow_indices`], for sources where dataset index `i` shows id
/// `id_of(i)`.
pub(crate) fn assert_pixels_follow_indices_by(batch: &Batch, id_of: impl Fn(usize) -> usize) {
    let px = batch.as_u8().expect("a u8 batch");
    let [n, h, w, c] = batch.shape();
    let sample = h * w * c;
    for k in 0..n {
        let img = &px[k * sample..(k + 1) * sample];
        let index = batch.indices()[k] as usize;
        let want = id_of(index);
        // A corner and the centre: the whole image is flat.
        for at in [0, (h / 2 * w + w / 2) * 3] {
            assert_eq!(
                decode_id(&img[at..at + 3]),
                want,
                "image {k} of the batch (index {index}) shows another sample"
            );
        }
    }
}

/// A loader over the single file `path`: batch size 1, `u8`, file order, one decode thread;
/// `tweak` adjusts the builder. Returns the one sample's pixels or the epoch's error, after
/// checking that the epoch then ends. Fails the test if the epoch hangs.
pub(crate) fn load_one(
    path: &Path,
    tweak: impl FnOnce(LoaderBuilder) -> LoaderBuilder + Send + 'static,
) -> Result<Vec<u8>, Error> {
    let path = path.to_path_buf();
    with_timeout(Duration::from_secs(20), move || {
        let builder = imagefeed::Loader::builder(Source::from_entries([(path, 0)]).unwrap())
            .batch_size(1)
            .dtype(Dtype::U8)
            .shuffle(false)
            .decode_threads(1);
        let loader = tweak(builder).build().unwrap();
        let mut epoch = loader.epoch(0);
        let first = epoch
            .next()
            .expect("an epoch of one sample yields something");
        assert!(
            epoch.next().is_none(),
            "the epoch goes on after its one sample"
        );
        first.map(|b| b.as_u8().expect("u8").to_vec())
    })
}

/// Runs `f` on its own thread; fails the test if it takes longer than `limit` (a hang) and
/// re-raises its panic.
pub(crate) fn with_timeout<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::Builder::new()
        .name("it-watched".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = h.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: no result after {limit:?}"),
    }
}

/// Mean absolute difference per channel value.
pub(crate) fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let sum: u64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| u64::from(x.abs_diff(y)))
        .sum();
    sum as f64 / a.len() as f64
}

/// Peak signal-to-noise ratio in dB (infinite for identical inputs).
pub(crate) fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let se: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    let mse = se / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

/// A PNG's pixels as RGB8: (width, height, pixels).
pub(crate) fn read_png_rgb(path: &Path) -> (u32, u32, Vec<u8>) {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    (img.width(), img.height(), img.into_raw())
}

/// CRC-32 (ISO-HDLC), as PNG chunks use it.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A small seeded generator (SplitMix64) for bit flips and cut points.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Consumes an epoch; returns its batches, panicking on an error.
pub(crate) fn collect_ok(epoch: imagefeed::Batches) -> Vec<Batch> {
    epoch.map(|b| b.unwrap()).collect()
}

/// The dataset indices of a sequence of batches, in delivery order.
pub(crate) fn indices_of(batches: &[Batch]) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| b.indices().iter().copied())
        .collect()
}

/// True if this process runs as root (file permissions do not stop it from reading).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The names of this process's threads (`/proc/self/task/*/comm`: at most 15 bytes each, so
/// `imagefeed-decode-3` reads `imagefeed-decod`).
pub(crate) fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .collect()
}

/// Thread counts and RSS are per process, and other tests run in parallel threads of this one.
/// A test that measures them calls this first: in the parent it re-runs the test `name` (its
/// full path, e.g. `shutdown::x`) alone in a child process of this binary, checks that the
/// child ran exactly that test and passed, and returns `false`; in the child it returns `true`
/// and the test does its work.
pub(crate) fn runs_in_child(name: &str) -> bool {
    const VAR: &str = "IMAGEFEED_IT_CHILD";
    if std::env::var(VAR).as_deref() == Ok(name) {
        return true;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    println!("--- child `{name}` stdout ---\n{out}--- stderr ---\n{err}");
    let status = status.unwrap_or_else(|| panic!("child `{name}` hung (killed after 60 s)"));
    assert!(status.success(), "child `{name}` failed: {status}");
    assert!(
        out.contains("test result: ok. 1 passed"),
        "the child ran no test named `{name}`"
    );
    false
}

/// `jpeg` without its marker segments of kind `marker` (0xDB: DQT, 0xC4: DHT) before the
/// first scan.
pub(crate) fn without_segments(jpeg: &[u8], marker: u8) -> Vec<u8> {
    let mut out = jpeg[..2].to_vec();
    let mut i = 2;
    while i + 4 <= jpeg.len() && jpeg[i] == 0xFF {
        let kind = jpeg[i + 1];
        if kind == 0xDA {
            break;
        }
        let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        if kind != marker {
            out.extend_from_slice(&jpeg[i..i + 2 + len]);
        }
        i += 2 + len;
    }
    out.extend_from_slice(&jpeg[i..]);
    out
}
