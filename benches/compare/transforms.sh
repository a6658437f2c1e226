#!/usr/bin/env bash
# Training transforms side by side on one corpus, in one run: imagefeed's
# random-resized-crop + flip (crop decoding), imagefeed's whole-image resize (`--transform
# stretch`), torchvision's RandomResizedCrop(160) + RandomHorizontalFlip in a DataLoader
# (torch_pipeline.py, THREADS workers) and, when it runs, DALI's CPU pipeline with
# fn.decoders.image_random_crop + fn.resize + fn.crop_mirror_normalize (dali_pipeline.py,
# THREADS threads). Every tool writes f32 160x160 in NCHW (torchvision's and DALI's layout),
# batches of 64.
#
# usage: benches/compare/transforms.sh [LIST] [THREADS]
#   LIST: a files.txt (default: a 5,000-image corpus written by `imagefeed corpus` to
#   $TMPDIR/imagefeed-compare); THREADS: decode threads, DataLoader workers and DALI threads
#   (default 2). ROUNDS=N in the environment: how many times the four runs alternate (default 3;
#   medians are compared). EPOCHS=N: epochs a process (default 2). IMAGEFEED=PATH: an imagefeed
#   binary to measure instead of building target/release/imagefeed.
#   Needs `pip install torch torchvision` and `pip install nvidia-dali-cuda120` (no GPU needed);
#   a tool that is not installed, or whose first run fails, is left out with its error printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${2:-2}
if [ -n "${IMAGEFEED:-}" ]; then
  bin=$IMAGEFEED
else
  cargo build --release --quiet -p imagefeed-cli
  bin=target/release/imagefeed
fi
list=${1:-}
if [ -z "$list" ]; then
  dir=${TMPDIR:-/tmp}/imagefeed-compare
  [ -f "$dir/files.txt" ] || "$bin" corpus "$dir" --count 5000 --seed 0
  list=$dir/files.txt
fi
out=$(mktemp -d)
rounds=${ROUNDS:-3}
epochs=${EPOCHS:-2}
echo "corpus: $list ($(wc -l < "$list") images), $threads threads, $epochs epochs a process" >&2

have_torch=0 have_dali=0
python3 -c "import torch, torchvision" 2>/dev/null && have_torch=1
python3 -c "import nvidia.dali" 2>/dev/null && have_dali=1
[ "$have_torch" = 1 ] || echo "== torchvision left out: not installed (pip install torch torchvision)" >&2
[ "$have_dali" = 1 ] || echo "== DALI left out: not installed (pip install nvidia-dali-cuda120)" >&2
python3 - > "$out/versions.txt" <<'PY'
import importlib.metadata as m
for p in ("torch", "torchvision", "nvidia-dali-cuda120", "numpy"):
    try:
        print(f"{p} {m.version(p)}")
    except m.PackageNotFoundError:
        pass
PY

# Untimed warm-up: one decode pass over the corpus, so no tool pays for reading it from disk.
echo "== warm-up: one untimed decode pass over the corpus" >&2
"$bin" floor "$list" --threads "$threads" --psnr-images 0 > /dev/null

# Each round draws other crops: imagefeed's seed is the round number (torchvision and DALI draw
# from their own generators).
# imagefeed's default fails a JPEG whose data is damaged (and a cropped decode reads each file's
# data to its end to see it); torchvision, Pillow and DALI deliver such images (testdata/corrupt/
# bitflip.jpg: all three decode it, checked 2026-12-05). `rrc` and `stretch` run
# with --accept-jpeg-warnings, the same semantics (a crop then stops below its box); `strict`
# is random-resized-crop with imagefeed's defaults.
run_rrc() {
  "$bin" bench "$list" --threads "$threads" --transform random-resized-crop --layout nchw \
    --accept-jpeg-warnings --seed "$1" --epochs "$epochs" --json >> "$out/rrc.json"
}
run_strict() {
  "$bin" bench "$list" --threads "$threads" --transform random-resized-crop --layout nchw \
    --seed "$1" --epochs "$epochs" --json >> "$out/strict.json"
}
run_stretch() {
  "$bin" bench "$list" --threads "$threads" --transform stretch --layout nchw \
    --accept-jpeg-warnings --seed "$1" --epochs "$epochs" --json >> "$out/stretch.json"
}
# A Python tool that fails is left out of the later rounds, its error shown once.
run_torch() {
  [ "$have_torch" = 1 ] || return 0
  if ! python3 benches/compare/torch_pipeline.py "$list" --workers "$threads" \
      --transform random-resized-crop --epochs "$epochs" >> "$out/torch.json" 2> "$out/torch.err"; then
    echo "== torchvision failed, left out:" >&2; tail -5 "$out/torch.err" >&2; have_torch=0
  fi
}
run_dali() {
  [ "$have_dali" = 1 ] || return 0
  if ! python3 benches/compare/dali_pipeline.py "$list" --threads "$threads" \
      --transform random-resized-crop --epochs "$epochs" >> "$out/dali.json" 2> "$out/dali.err"; then
    echo "== DALI failed, left out:" >&2; tail -5 "$out/dali.err" >&2; have_dali=0
  fi
}
# rotate N WHAT TOOL...: N rounds of `run_TOOL ROUND` for each tool, the order rotating by one
# each round, so a slow spell of the shared machine does not always fall on the same tool.
rotate() {
  local n=$1 what=$2
  shift 2
  local tools=("$@") r k order
  for r in $(seq 1 "$n"); do
    k=$(( (r - 1) % ${#tools[@]} ))
    order="${tools[*]:k} ${tools[*]:0:k}"
    echo "== $what, round $r/$n (${order% }):" >&2
    for tool in $order; do
      "run_$tool" "$r"
    done
  done
}
rotate "$rounds" "imagefeed random-resized-crop, imagefeed stretch, torchvision RRC, DALI CPU image_random_crop, imagefeed random-resized-crop strict" rrc stretch torch dali strict

python3 - "$out" "$epochs" <<'PY'
import json, os, statistics, sys
out, epochs = sys.argv[1], int(sys.argv[2])
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
print(open(os.path.join(out, "versions.txt")).read().strip().replace("\n", ", "))
# The headline is each process's last epoch: the DataLoader's workers have started, and DALI,
# which runs two batches ahead across epoch boundaries, has both gained and paid for that.
last = epochs - 1
names = {"rrc": "imagefeed random-resized-crop + flip", "stretch": "imagefeed stretch (whole image)",
         "torch": "torchvision RRC + flip, DataLoader", "dali": "DALI CPU image_random_crop",
         "strict": "imagefeed RRC + flip, strict (default)"}
med, rss = {}, {}
for key, name in names.items():
    all_rows = rows(key + ".json")
    for e in sorted({r["epoch"] for r in all_rows}):
        ep = [r for r in all_rows if r["epoch"] == e]
        m = statistics.median(r["images_per_sec"] for r in ep)
        peak = statistics.median(r["peak_rss_bytes"] for r in ep)
        print(f"{name:38s} epoch {e}  {m:7.0f} images/s (median of "
              + ", ".join(f"{r['images_per_sec']:.0f}" for r in ep)
              + f")  peak RSS {peak / 1e6:6.0f} MB (median of "
              + ", ".join(f"{r['peak_rss_bytes'] / 1e6:.0f}" for r in ep) + ")")
        if e == last:
            med[key], rss[key] = ep, peak
for mine in ("rrc", "strict"):
    if mine not in med:
        continue
    r = med[mine]
    for key, target in (("stretch", 1.0), ("torch", 2.0), ("dali", 3.0)):
        if key not in med:
            print(f"ratio {names[mine]} / {names[key]}: no figures")
            continue
        o = med[key]
        ratio = statistics.median(x["images_per_sec"] for x in r) / statistics.median(x["images_per_sec"] for x in o)
        print(f"ratio {names[mine]} / {names[key]}: {ratio:.2f}x (target >= {target:.1f}; "
              f"medians of epoch {last}; per round: "
              + ", ".join(f"{a['images_per_sec'] / b['images_per_sec']:.2f}" for a, b in zip(r, o))
              + f"); peak RSS {rss[mine] / rss[key]:.2f}x")
PY
rm -rf "$out"
