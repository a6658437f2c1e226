#!/usr/bin/env bash
# imagefeed's cold epoch against the decode floor and, when torch and torchvision are installed,
# against PyTorch's DataLoader, at several thread counts, on one machine and in one run.
#
#   benches/compare/scaling.sh LIST [THREADS...]      (default: 2 and the machine's core count)
#
# Each thread count N runs on cores 0..N-1 (taskset, where it exists), so that 2 threads on a
# 16-core machine is a 2-core measurement. Rounds (ROUNDS, default 2) alternate the tools; the
# table gives medians. IMAGEFEED selects the binary (default: target/release/imagefeed); TORCH=0
# leaves PyTorch out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=${1:?usage: scaling.sh LIST [THREADS...]}
shift
threads=("$@")
if [ ${#threads[@]} -eq 0 ]; then threads=(2 "$(nproc)"); fi
bin=${IMAGEFEED:-target/release/imagefeed}
rounds=${ROUNDS:-2}
have_torch=0
if [ "${TORCH:-1}" = 0 ]; then
  echo "scaling: TORCH=0: skipping the PyTorch DataLoader"
elif python3 -c 'import torch, torchvision' 2>/dev/null; then
  have_torch=1
else
  echo "scaling: torch/torchvision not importable: skipping the PyTorch DataLoader"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pin() { # pin N cmd...: run on cores 0..N-1
  local n=$1; shift
  if command -v taskset >/dev/null && [ "$n" -le "$(nproc)" ]; then
    taskset -c "0-$((n - 1))" "$@"
  else
    "$@"
  fi
}
rate() { sed -n 's/.*"images_per_sec": *\([0-9.e+-]*\).*/\1/p'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
"$bin" bench "$list" --threads 2 --json >/dev/null # warm the page cache
for r in $(seq "$rounds"); do
  for n in "${threads[@]}"; do
    pin "$n" "$bin" bench "$list" --threads "$n" --json | tee -a "$out/log" | rate >>"$out/if-$n"
    pin "$n" "$bin" floor "$list" --threads "$n" --psnr-images 0 --json | tee -a "$out/log" \
      | grep '"scaled":true' | rate >>"$out/floor-$n"
    if [ $have_torch = 1 ]; then
      # The second epoch: the first includes starting the worker processes.
      pin "$n" python3 "$here/torch_pipeline.py" "$list" --epochs 2 --workers "$n" \
        | tee -a "$out/log" | tail -1 | rate >>"$out/torch-$n" || echo "scaling: torch run failed"
    fi
  done
done
echo
printf '%-8s %14s %14s %10s %14s %12s\n' threads imagefeed floor "of floor" "torch DL" "vs torch"
for n in "${threads[@]}"; do
  i=$(median <"$out/if-$n"); f=$(median <"$out/floor-$n")
  t=$( [ -s "$out/torch-$n" ] && median <"$out/torch-$n" || echo "")
  printf '%-8s %14s %14s %10s %14s %12s\n' "$n" "$i" "$f" "$(awk -v a="$i" -v b="$f" 'BEGIN { printf "%.2f", a / b }')" \
    "${t:--}" "$( [ -n "$t" ] && awk -v a="$i" -v b="$t" 'BEGIN { printf "%.2fx", a / b }' || echo -)"
done
cp "$out/log" "${SCALING_LOG:-/dev/null}" 2>/dev/null || true
