#!/usr/bin/env bash
# The differential check on aarch64, from an x86-64 machine: build.rs builds the library for
# aarch64-unknown-linux-gnu (patched and stock, libjpeg-turbo's Neon code in both) with the
# cross compiler, cross/harness.c is linked with each, and both run under qemu-user over the
# same inputs (testdata's JPEGs and seeded damaged copies, written by examples/diffcheck.rs);
# every line must match.
#
#   crates/imagefeed-jpeg/cross/aarch64.sh [COPIES [FILE...]]
#
# COPIES damaged copies of each file (default 20); FILE... defaults to every JPEG in testdata/.
# Needs Debian's gcc-aarch64-linux-gnu and qemu-user (`--install` installs them with apt-get).
# No aarch64 Rust standard library is needed: the build script runs on the host, as cargo would
# run it for a cross build, and only the C is built for aarch64.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" = "--install" ]; then
  shift
  need=()
  command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
  if [ ${#need[@]} -gt 0 ]; then
    echo "aarch64.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
copies=${1:-20}
[ $# -gt 0 ] && shift
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(find "$root/testdata" -name '*.jpg' | sort)
fi
cc=aarch64-linux-gnu-gcc
for tool in "$cc" aarch64-linux-gnu-ar qemu-aarch64; do
  command -v "$tool" >/dev/null 2>&1 || { echo "aarch64.sh: $tool is missing (run with --install)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target_dir="$root/target/jpeg-aarch64"

# The host's build of the build script (and of diffcheck, which writes the inputs).
script=$(CARGO_TARGET_DIR="$target_dir" cargo build --quiet --release --manifest-path "$here/Cargo.toml" \
  --example diffcheck --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "build-script-build" \
            and m["package_id"].find("imagefeed-jpeg") >= 0:
        print(m["filenames"][0])
' | head -1)
[ -x "$script" ] || { echo "aarch64.sh: no build script found ($script)" >&2; exit 1; }
mkdir -p "$work/in"
"$target_dir/release/examples/diffcheck" --write-copies "$work/in" "$copies" "${files[@]}"

for v in patched stock; do
  out="$work/$v"
  mkdir -p "$out"
  feature=()
  [ "$v" = stock ] && feature=(CARGO_FEATURE_STOCK_LIBJPEG_TURBO=1)
  echo "aarch64.sh: building the $v library for aarch64 with $cc" >&2
  env "${feature[@]}" CARGO_MANIFEST_DIR="$here" OUT_DIR="$out" \
    TARGET=aarch64-unknown-linux-gnu HOST=x86_64-unknown-linux-gnu \
    OPT_LEVEL=3 DEBUG=false PROFILE=release NUM_JOBS="$(nproc)" \
    CARGO_CFG_TARGET_ARCH=aarch64 CARGO_CFG_TARGET_OS=linux CARGO_CFG_TARGET_ENV=gnu \
    CARGO_CFG_TARGET_POINTER_WIDTH=64 CARGO_CFG_TARGET_ENDIAN=little CARGO_CFG_TARGET_FAMILY=unix \
    CARGO_CFG_TARGET_VENDOR=unknown CARGO_CFG_TARGET_FEATURE=neon CARGO_ENCODED_RUSTFLAGS= \
    CC_aarch64_unknown_linux_gnu="$cc" AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
    "$script" > "$out/build.txt"
  grep '^cargo:warning' "$out/build.txt" >&2 || true
  grep -q 'imagefeed_jpeg_simd="yes"' "$out/build.txt" \
    || { echo "aarch64.sh: the $v build has no SIMD code" >&2; exit 1; }
  "$cc" -O2 -Wall -I"$here/libjpeg-turbo/src" -I"$out/include" "$here/cross/harness.c" \
    "$out/libimagefeedjpeg.a" -lm -o "$out/harness"
  echo "aarch64.sh: decoding $(ls "$work/in" | wc -l) inputs under qemu-aarch64 ($v)" >&2
  (cd "$work/in" && ls | sort | xargs qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/harness") > "$work/$v.txt"
done
total=$(wc -l < "$work/patched.txt")
differ=$(diff "$work/patched.txt" "$work/stock.txt" | grep -c '^<' || true)
if [ "$total" -eq 0 ] || [ "$(wc -l < "$work/stock.txt")" -ne "$total" ]; then
  echo "aarch64.sh: the two runs decoded different numbers of inputs" >&2
  exit 1
fi
echo "aarch64.sh: $total inputs (${#files[@]} files, $copies damaged copies each), each decoded at 4 scales to RGB, a crop and planes, on aarch64 (qemu), patched against stock"
echo "aarch64: $((total - differ)) passed, $differ failed"
if [ "$differ" -ne 0 ]; then
  diff "$work/patched.txt" "$work/stock.txt" | head -20 >&2
  exit 1
fi
