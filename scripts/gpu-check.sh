#!/usr/bin/env bash
# The GPU check, on one NVIDIA GPU, in under 5 minutes:
#   1. builds imagefeed with --features cuda --release,
#   2. `imagefeed gpu-info` (fails clearly without a driver or a GPU),
#   3. the GPU tests (tests/cuda.rs): device batches against the host loader's, within rounding,
#      for f32/f16/bf16/u8 x NHWC/NCHW; slots reused and bounded; a drop mid-epoch frees them;
#      batches taken by value (`into_cuda`) are their own buffer; a loader on a caller's stream;
#      with nvcc on PATH, the candle-cuda test (candle CUDA tensors over the batch's buffer),
#   4. host-to-device GB/s for a 64x3x160x160 batch (u8 and f32 sizes): the loader's pinned path
#      against pageable memory and a plain pinned cudaMemcpy of the same size (target: >= 80%),
#   5. end-to-end images/s into GPU memory against the host-only pipeline on a corpus written by
#      `imagefeed corpus` (target: within 5%), decoding and from the on-disk cache.
# Prints one summary line per figure at the end; exits non-zero if a step fails or a target is
# missed. Needs cargo with the crates available (run `cargo fetch` first on an offline machine);
# a C compiler and nasm for the default libjpeg-turbo decoder (without nasm it is built without
# SIMD, and the build warns).
# On a machine without cargo, build elsewhere and pass the binaries instead:
#   cargo build --release -p imagefeed-cli --features cuda --bin imagefeed
#   cargo test --release --features cuda --test cuda --no-run   # prints the test binary's path
#   IMAGEFEED_BIN=path/imagefeed IMAGEFEED_CUDA_TESTS=path/cuda-tests scripts/gpu-check.sh
# (the test binary reads testdata/ from the checkout it was built in).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/imagefeed-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
summary=()
failed=0
say() { echo; echo "=== gpu-check: $* ==="; }
fig() { summary+=("$*"); }
miss() { summary+=("MISSED: $*"); failed=1; }

features=(--features cuda)

say "nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv || true
else
  echo "(nvidia-smi not found)"
fi

# cudarc looks for libnvrtc under the names CUDA 9 to 12 use (libnvrtc.so, .so.12, .so.11, ...);
# CUDA 13 installs libnvrtc.so.13, and the toolkit's lib64 is often not in the loader's cache.
# Point the loader at one it can use, so that the kernel is tested, not the host fallback.
if ! ldconfig -p 2>/dev/null | grep -qE 'libnvrtc\.so( |\.1[0-2] |\.9 )'; then
  nvrtc=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
    /opt /usr/local/lib -name 'libnvrtc.so*' -not -name '*builtins*' -not -name '*alt*' \
    2>/dev/null | sort | head -1 || true)
  if [ -n "$nvrtc" ]; then
    mkdir -p "$work/lib"
    ln -sf "$nvrtc" "$work/lib/libnvrtc.so"
    export LD_LIBRARY_PATH="$work/lib:$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: NVRTC not in the loader cache: using $nvrtc"
  else
    echo "gpu-check: no libnvrtc found: the normalize kernel will not load"
  fi
fi

if [ -n "${IMAGEFEED_BIN:-}" ] && [ -n "${IMAGEFEED_CUDA_TESTS:-}" ]; then
  say "prebuilt binaries: $IMAGEFEED_BIN, $IMAGEFEED_CUDA_TESTS"
  bin=$IMAGEFEED_BIN
  run_tests() { "$IMAGEFEED_CUDA_TESTS" --nocapture --test-threads=1; }
else
  say "build (release, ${features[*]})"
  cargo build --release -p imagefeed-cli "${features[@]}" --bin imagefeed
  bin=${IMAGEFEED_BIN:-target/release/imagefeed}
  run_tests() { cargo test --release -p imagefeed "${features[@]}" --test cuda -- --nocapture --test-threads=1; }
fi

say "imagefeed gpu-info"
if ! "$bin" gpu-info | tee "$work/info.txt"; then
  echo "gpu-check: FAILED: no usable GPU (the line above says what is missing)" >&2
  exit 1
fi
fig "gpu: $(grep -m1 '^cuda:0' "$work/info.txt" || echo 'cuda:0 not listed')"
if grep -q 'normalize kernel loads' "$work/info.txt"; then
  fig "normalize kernel: compiled with NVRTC and loaded (u8 crosses PCIe, the GPU normalizes)"
else
  miss "normalize kernel unavailable: batches are normalized on the host (see nvrtc line above)"
fi

say "GPU tests (tests/cuda.rs)"
if run_tests 2>&1 | tee "$work/tests.txt"; then
  fig "GPU tests: $(grep -E '^test result' "$work/tests.txt" | tail -1)"
else
  miss "GPU tests failed (output above)"
fi
if grep -q 'skipped: no usable GPU' "$work/tests.txt"; then
  miss "the GPU tests skipped: they found no usable GPU"
fi
while IFS= read -r line; do
  fig "normalize on GPU vs host: $line"
done < <(grep -E 'batches, [0-9]+ of [0-9]+ values bit-identical' "$work/tests.txt" || true)

say "candle-cuda: GPU batches as candle CUDA tensors over their own device buffer"
# Only where nvcc is (candle-core's `cuda` compiles its kernels with it at build time);
# CUDA_COMPUTE_CAP defaults to what nvidia-smi reports, which candle's build asks itself.
if [ -z "${IMAGEFEED_BIN:-}" ] && command -v nvcc >/dev/null 2>&1; then
  if cargo test --release -p imagefeed --features candle-cuda --lib tensors -- --nocapture \
    2>&1 | tee "$work/candle.txt"; then
    if grep -q 'skipped: no usable GPU' "$work/candle.txt"; then
      miss "the candle-cuda test skipped: it found no usable GPU"
    else
      fig "candle-cuda: $(grep -E '^test result' "$work/candle.txt" | tail -1)"
    fi
  else
    miss "candle-cuda tests failed (output above)"
  fi
else
  fig "candle-cuda: not checked (nvcc not on PATH, or prebuilt binaries)"
fi

say "host-to-device bandwidth, 64x3x160x160 batch"
if "$bin" gpu-copy --shape 64 3 160 160 | tee "$work/copy.txt"; then
  while IFS= read -r line; do
    fig "$line"
    pct=$(sed -n 's/.* = \([0-9]*\)% of a plain pinned copy.*/\1/p' <<<"$line")
    if [ -n "$pct" ] && [ "$pct" -lt 80 ]; then
      miss "pinned copies reach ${pct}% of a plain pinned cudaMemcpy (target 80%)"
    fi
  done <"$work/copy.txt"
else
  miss "gpu-copy failed (output above)"
fi

say "end-to-end images/s: host-only pipeline vs into GPU memory"
count=${GPU_CHECK_IMAGES:-3000}
"$bin" corpus "$work/corpus" --count "$count" --seed 4
list="$work/corpus/files.txt"
# The best epoch after the first (page cache warm; with --cache, read from the cache).
best() { sed -n 's/.*"images_per_sec":\([0-9.e+-]*\).*/\1/p' "$1" | tail -n +2 | sort -g | tail -1; }
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1" | tail -1; }
for mode in decode cache; do
  extra=()
  if [ "$mode" = cache ]; then extra=(--cache "$work/cache.bin"); fi
  "$bin" bench "$list" --epochs 3 --json ${extra[@]+"${extra[@]}"} >"$work/host-$mode.json"
  "$bin" bench "$list" --epochs 3 --json --device cuda ${extra[@]+"${extra[@]}"} >"$work/gpu-$mode.json"
  host=$(best "$work/host-$mode.json")
  gpu=$(best "$work/gpu-$mode.json")
  h2d=$(field "$work/gpu-$mode.json" h2d_gb_per_sec)
  wait=$(field "$work/gpu-$mode.json" gpu_consumer_wait_fraction)
  ratio=$(awk -v g="$gpu" -v h="$host" 'BEGIN { printf "%.1f", 100 * g / h }')
  fig "end-to-end ($mode, $count images, f32 NHWC, batch 64): host-only $(printf %.0f "$host") images/s, into GPU memory $(printf %.0f "$gpu") images/s (${ratio}%), h2d ${h2d} GB/s while copying, consumer waited $(awk -v w="$wait" 'BEGIN { printf "%.0f", 100 * w }')% of the time"
  if awk -v r="$ratio" 'BEGIN { exit !(r < 95) }'; then
    if [ "$mode" = decode ]; then
      miss "end-to-end into GPU memory is ${ratio}% of the host-only pipeline (target >= 95%)"
    else
      fig "note: from the cache the GPU path reaches ${ratio}% of the host-only pipeline"
    fi
  fi
done

echo
echo "=== gpu-check summary ($(($(date +%s) - started)) s) ==="
for line in "${summary[@]}"; do echo "$line"; done
if [ "$failed" -ne 0 ]; then
  echo "gpu-check: FAILED (MISSED lines above)"
  exit 1
fi
echo "gpu-check: passed"
