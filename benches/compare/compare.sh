#!/usr/bin/env bash
# Side-by-side comparison on one corpus, in one run: imagefeed (cold and cached), the decode
# floor (libjpeg-turbo decode only, full size and DCT-scaled; with the libjpeg-turbo imagefeed
# builds, and again with its stock Huffman decoder) and, when TensorFlow is installed
# (`pip install tensorflow-cpu`), the tf.data pipeline from the TensorFlow guide.
#
# usage: benches/compare/compare.sh [LIST] [THREADS]
#   LIST: a files.txt (default: a 5,000-image corpus written by `imagefeed corpus` to
#   $TMPDIR/imagefeed-compare); THREADS: decode threads (default 2). ROUNDS=N in the environment:
#   how many times the cold runs alternate (default 3; medians are compared). DISK_ROUNDS=N:
#   also time first epochs on files not in the page cache (each run after `echo 3 >
#   /proc/sys/vm/drop_caches`, which needs root): imagefeed, imagefeed with `--readahead 0`
#   and tf.data, N rounds (default 0: skipped). CACHED_EPOCHS=N: epochs of the cached runs
#   (default 6: the first writes the cache, the other 5 read it; their medians are compared, as
#   one cached epoch of 5,000 images lasts about a tenth of a second here).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${2:-2}
cargo build --release --quiet
bin=target/release/imagefeed
list=${1:-}
if [ -z "$list" ]; then
  dir=${TMPDIR:-/tmp}/imagefeed-compare
  [ -f "$dir/files.txt" ] || "$bin" corpus "$dir" --count 5000 --seed 0
  list=$dir/files.txt
fi
out=$(mktemp -d)
cache=$out/imagefeed.cache
echo "corpus: $list ($(wc -l < "$list") images), $threads threads" >&2

have_tf=0
python3 -c "import tensorflow" 2>/dev/null && have_tf=1
# Cold epochs are noisy on a shared 2-core machine: alternate imagefeed, the floor and tf.data
# ROUNDS times (default 3) and compare medians. The order rotates each round (each tool runs
# first, second and third once in three rounds), so a slow spell of the machine does not
# always fall on the same tool.
rounds=${ROUNDS:-3}
# Untimed warm-up: one decode pass over the corpus, so no tool pays for reading it from disk
# (the first timed run after the files were written or evicted read up to 40% slower here).
echo "== warm-up: one untimed decode pass over the corpus" >&2
"$bin" floor "$list" --threads "$threads" --psnr-images 0 > /dev/null
# Two cold epochs a process (both decode every file): the first is the headline figure; the
# second is measured like the floor's DCT-scaled pass, which runs second in its process, after
# the full-size pass (in one series of runs here, a process's first epoch ran at a median
# 0.937 of its later ones).
run_imagefeed() {
  "$bin" bench "$list" --batch-size 64 --threads "$threads" --shuffle-buffer 1000 --epochs 2 --json >> "$out/cold.json"
}
run_floor() {
  local psnr=0
  [ "$1" = 1 ] && psnr=500
  "$bin" floor "$list" --threads "$threads" --psnr-images "$psnr" --json >> "$out/floor.json"
}
# The floor again with libjpeg-turbo's stock Huffman decoders and IDCT (`floor --stock-paths`;
# see crates/imagefeed-jpeg/README.md): what the pipeline would be measured against with an
# unpatched libjpeg-turbo.
run_stockfloor() {
  "$bin" floor "$list" --threads "$threads" --psnr-images 0 --json --stock-paths >> "$out/stockfloor.json"
}
run_tf() {
  if [ "$have_tf" = 1 ]; then
    python3 benches/compare/tf_pipeline.py "$list" >> "$out/tf.json"
  fi
}
# rotate N PREFIX WHAT TOOL...: N rounds of `run_PREFIXTOOL ROUND` for each tool, the order
# rotating by one each round.
rotate() {
  local n=$1 prefix=$2 what=$3
  shift 3
  local tools=("$@") r k order
  for r in $(seq 1 "$n"); do
    k=$(( (r - 1) % ${#tools[@]} ))
    order="${tools[*]:k} ${tools[*]:0:k}"
    echo "== $what, round $r/$n (${order% }):" >&2
    for tool in $order; do
      "run_$prefix$tool" "$r"
    done
  done
}
rotate "$rounds" "" "imagefeed cold epoch (batch 64, shuffle buffer 1000, f32 160x160), decode floor (imagefeed's libjpeg-turbo, then stock), tf.data cold" imagefeed floor stockfloor tf
# First epochs on files not in the page cache: what a dataset larger than RAM meets every epoch.
disk_rounds=${DISK_ROUNDS:-0}
if [ "$disk_rounds" -gt 0 ] && ! [ -w /proc/sys/vm/drop_caches ]; then
  echo "== files not in the page cache: skipped (writing /proc/sys/vm/drop_caches needs root)" >&2
  disk_rounds=0
fi
evict() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run_disk_imagefeed() {
  evict
  "$bin" bench "$list" --batch-size 64 --threads "$threads" --shuffle-buffer 1000 --epochs 1 --json >> "$out/disk.json"
}
run_disk_noreadahead() {
  evict
  "$bin" bench "$list" --batch-size 64 --threads "$threads" --shuffle-buffer 1000 --epochs 1 --readahead 0 --json >> "$out/disk_noreadahead.json"
}
run_disk_tf() {
  if [ "$have_tf" = 1 ]; then
    evict
    python3 benches/compare/tf_pipeline.py "$list" >> "$out/disk_tf.json"
  fi
}
rotate "$disk_rounds" disk_ "files not in the page cache: first epochs after dropping the page cache" imagefeed noreadahead tf
# The timed runs that follow start from a warm page cache again.
[ "$disk_rounds" -gt 0 ] && "$bin" floor "$list" --threads "$threads" --psnr-images 0 > /dev/null
cached_epochs=${CACHED_EPOCHS:-6}
echo "== imagefeed: cold epoch writing the cache, then $((cached_epochs - 1)) cached epochs" >&2
"$bin" bench "$list" --batch-size 64 --threads "$threads" --shuffle-buffer 1000 --epochs "$cached_epochs" --cache "$cache" --json > "$out/cached.json"
if [ "$have_tf" = 1 ]; then
  echo "== tf.data (TensorFlow guide pipeline) with .cache(file), $cached_epochs epochs" >&2
  python3 benches/compare/tf_pipeline.py "$list" --epochs "$cached_epochs" --cache "$out/tf.cache" > "$out/tf_cached.json"
else
  echo "== tf.data skipped: TensorFlow is not installed (pip install tensorflow-cpu)" >&2
fi

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
cold_all, cached, floor = rows("cold.json"), rows("cached.json"), rows("floor.json")
cold = [r for r in cold_all if r["epoch"] == 0]
cold2 = [r for r in cold_all if r["epoch"] == 1]
tf, tfc = rows("tf.json"), rows("tf_cached.json")
import statistics
def med(rows, key): return statistics.median(r[key] for r in rows)
def runs(rows, key): return ", ".join(f"{r[key]:.0f}" for r in rows)
fl_rows = {s: [r for r in floor if r.get("scaled") is s] for s in (False, True)}
q = [r for r in floor if "mean_psnr_db" in r]
def mb(b): return b / 1e6
ic = {"images_per_sec": med(cold, "images_per_sec"), "peak_rss_bytes": max(r["peak_rss_bytes"] for r in cold)}
fl = {s: {"images_per_sec": med(fl_rows[s], "images_per_sec")} for s in (False, True)}
print(f"imagefeed cold epoch      {ic['images_per_sec']:8.0f} images/s (median of {runs(cold, 'images_per_sec')})  peak RSS {mb(ic['peak_rss_bytes']):7.1f} MB (highest)")
for r in cached[1:]:
    print(f"imagefeed cached epoch {r['epoch']}  {r['images_per_sec']:8.0f} images/s  peak RSS {mb(r['peak_rss_bytes']):7.1f} MB (anonymous {mb(r['peak_anon_rss_bytes']):.1f} MB), cache {mb(r['cache_bytes'] or 0):.0f} MB")
if len(cached) > 1:
    print(f"imagefeed cached epochs   {med(cached[1:], 'images_per_sec'):8.0f} images/s (median of {runs(cached[1:], 'images_per_sec')})")
print(f"decode floor, full size   {fl[False]['images_per_sec']:8.0f} images/s (median of {runs(fl_rows[False], 'images_per_sec')})")
print(f"decode floor, DCT-scaled  {fl[True]['images_per_sec']:8.0f} images/s (median of {runs(fl_rows[True], 'images_per_sec')})")
stock = [r for r in rows("stockfloor.json") if r.get("scaled") is True]
if stock:
    print(f"decode floor, DCT-scaled, stock libjpeg-turbo Huffman decoder {med(stock, 'images_per_sec'):8.0f} images/s (median of {runs(stock, 'images_per_sec')})")
if q:
    print(f"DCT scaling quality: mean PSNR {q[0]['mean_scaled_psnr_db']:.1f} dB over the images it changes, lowest {q[0]['min_psnr_db']:.1f} dB")
    print(f"resize filters: bilinear against antialiased, mean PSNR {q[0]['bilinear_vs_antialiased_mean_psnr_db']:.1f} dB over the {q[0]['bilinear_vs_antialiased_differing_images']} images whose output differs")
# The memory-copy bound of a cached epoch: one thread copying the same f32 output bytes
# (batches of 64 x 160 x 160 x 3), from a source the size of the cache.
try:
    import numpy as np, time
    src = np.ones((64, 160, 160, 3), dtype=np.float32)
    dst = np.empty_like(src)
    reps, best = 40, []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            np.copyto(dst, src)
        best.append(64 * reps / (time.perf_counter() - t0))
    best.sort()
    copy = best[1]
    if len(cached) > 1:
        cm, cb = med(cached[1:], "images_per_sec"), max(r["images_per_sec"] for r in cached[1:])
        print(f"memcpy bound (numpy, 1 thread, f32) {copy:8.0f} images/s; imagefeed cached / memcpy: {cm / copy:.2f} (median cached epoch; {cb / copy:.2f} the fastest)")
except ImportError:
    print("memcpy bound skipped: numpy is not installed")
print(f"ratio imagefeed cold / DCT-scaled floor: {ic['images_per_sec'] / fl[True]['images_per_sec']:.2f} (medians); per round: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(cold, fl_rows[True])))
if stock:
    print(f"ratio imagefeed cold / stock DCT-scaled floor: {ic['images_per_sec'] / med(stock, 'images_per_sec'):.2f} (medians); per round: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(cold, stock)))
if cold2:
    i2 = med(cold2, "images_per_sec")
    print(f"imagefeed 2nd cold epoch  {i2:8.0f} images/s (median of {runs(cold2, 'images_per_sec')}; the same process's second epoch, decoding every file again, as the floor's DCT-scaled pass is its process's second)")
    print(f"ratio imagefeed 2nd cold epoch / DCT-scaled floor: {i2 / fl[True]['images_per_sec']:.2f} (medians); per round: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(cold2, fl_rows[True])))
if tf:
    t = {"images_per_sec": med(tf, "images_per_sec"), "peak_rss_bytes": max(r["peak_rss_bytes"] for r in tf)}
    print(f"tf.data cold epoch        {t['images_per_sec']:8.0f} images/s (median of {runs(tf, 'images_per_sec')})  peak RSS {mb(t['peak_rss_bytes']):7.1f} MB (highest)")
    print(f"ratio imagefeed / tf.data cold: {ic['images_per_sec'] / t['images_per_sec']:.2f}x speed (medians; per round: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(cold, tf)) + f"), {ic['peak_rss_bytes'] / t['peak_rss_bytes']:.2f}x peak RSS")
disk, disk0, disk_tf = rows("disk.json"), rows("disk_noreadahead.json"), rows("disk_tf.json")
if disk:
    d = med(disk, "images_per_sec")
    print(f"files not in the page cache: imagefeed {d:.0f} images/s (median of {runs(disk, 'images_per_sec')})")
    if disk0:
        d0 = med(disk0, "images_per_sec")
        print(f"files not in the page cache: imagefeed --readahead 0 {d0:.0f} images/s (median of {runs(disk0, 'images_per_sec')}); readahead gains {d / d0:.2f}x")
    if disk_tf:
        dt = med(disk_tf, "images_per_sec")
        print(f"files not in the page cache: tf.data {dt:.0f} images/s (median of {runs(disk_tf, 'images_per_sec')}); ratio imagefeed / tf.data {d / dt:.2f}x (medians; per round: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(disk, disk_tf)) + ")")
if tfc:
    for r in tfc:
        print(f"tf.data .cache() epoch {r['epoch']}  {r['images_per_sec']:8.0f} images/s  peak RSS {mb(r['peak_rss_bytes']):7.1f} MB")
    if len(tfc) > 1 and len(cached) > 1:
        tm = med(tfc[1:], "images_per_sec")
        print(f"tf.data .cache() epochs   {tm:8.0f} images/s (median of {runs(tfc[1:], 'images_per_sec')})")
        print(f"ratio imagefeed / tf.data cached epoch: {med(cached[1:], 'images_per_sec') / tm:.2f}x (medians of the cached epochs; per epoch: " + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(cached[1:], tfc[1:])) + ")")
PY
rm -rf "$out"
