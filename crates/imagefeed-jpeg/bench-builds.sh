#!/usr/bin/env bash
# Two builds of the `imagefeed` command line side by side: ROUNDS alternating rounds (A then B,
# then B then A, ...) of one cold epoch each (`imagefeed bench LIST --epochs 1 ARGS...`, every
# file read once, as the first epoch of a training run), on each LIST; prints every round's
# images/s and, per list, the medians and B's median over A's.
#
#   crates/imagefeed-jpeg/bench-builds.sh BIN_A BIN_B ROUNDS LIST... [-- ARGS...]
#
# For example the default build (no nasm) against a build with libjpeg-turbo's nasm SIMD code:
#   NASM=/nonexistent CARGO_TARGET_DIR=/tmp/t-intrin cargo build --release -p imagefeed-cli
#   crates/imagefeed-jpeg/bench-builds.sh /tmp/imagefeed-nasm /tmp/t-intrin/release/imagefeed 5 \
#     /tmp/inet/files.txt /tmp/c5k/files.txt
set -euo pipefail
a=$1 b=$2 rounds=$3
shift 3
lists=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do lists+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")
run() { # BIN LIST -> images/s of the epoch
  "$1" bench "$2" --epochs 1 --json "${extra[@]}" 2>/dev/null \
    | python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); e=d["epochs"][0] if "epochs" in d else d; print(round(e["images_per_s"] if "images_per_s" in e else e["images_per_sec"], 1))'
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
echo "bench-builds.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores; A=$a B=$b; ${extra[*]:-default options}"
for list in "${lists[@]}"; do
  ra=() rb=()
  for ((i = 0; i < rounds; i++)); do
    if ((i % 2 == 0)); then
      x=$(run "$a" "$list"); y=$(run "$b" "$list")
    else
      y=$(run "$b" "$list"); x=$(run "$a" "$list")
    fi
    ra+=("$x"); rb+=("$y")
    echo "  $list round $((i + 1)): A $x, B $y images/s"
  done
  ma=$(printf '%s\n' "${ra[@]}" | median)
  mb=$(printf '%s\n' "${rb[@]}" | median)
  echo "$list: A median $ma, B median $mb images/s, B/A $(python3 -c "print(f'{$mb / $ma:.3f}')")"
done
