#!/usr/bin/env bash
# The differential check of imagefeed's libjpeg-turbo patch: builds examples/diffcheck.rs twice,
# with the patched and with the stock library, both under AddressSanitizer and
# UndefinedBehaviorSanitizer and with the patch's bounds checks on (IMAGEFEED_JPEG_CHECKS), runs
# both over the same JPEGs and seeded damaged copies of them, and compares every line.
#
#   crates/imagefeed-jpeg/diff.sh [COPIES [FILE...]]
#
# COPIES damaged copies of each file (default 60); FILE... defaults to every JPEG in testdata/.
# Exits 1 on any difference or sanitizer report. Needs gcc or clang with the sanitizer runtimes
# (Debian: gcc's libasan and libubsan come with it), and nasm for the stock build's SIMD code
# (libjpeg-turbo's own; the patched build's is C intrinsics).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
copies=${1:-60}
[ $# -gt 0 ] && shift
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(find "$root/testdata" -name '*.jpg' | sort)
fi
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# The Rust program is linked without the sanitizer runtimes' start-up order (rustc links with
# -nodefaultlibs): link them by name and preload ASan's so that it starts first.
cc=${CC:-cc}
asan_so=$("$cc" -print-file-name=libasan.so)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for v in patched stock; do
  feat=()
  [ "$v" = stock ] && feat=(--features stock-libjpeg-turbo)
  echo "diff.sh: building the $v library under ASan+UBSan" >&2
  CFLAGS="$san -DIMAGEFEED_JPEG_CHECKS" \
  RUSTFLAGS="-C link-arg=-lasan -C link-arg=-lubsan" \
  CARGO_TARGET_DIR="$root/target/jpeg-diff-$v" \
    cargo build --quiet --release --manifest-path "$here/Cargo.toml" --example diffcheck "${feat[@]}"
  echo "diff.sh: decoding ${#files[@]} files and $copies damaged copies of each ($v)" >&2
  LD_PRELOAD="$asan_so" ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$root/target/jpeg-diff-$v/release/examples/diffcheck" "$copies" "${files[@]}" \
    > "$out/$v.txt" 2> "$out/$v.err" || { cat "$out/$v.err" >&2; echo "diff.sh: the $v run failed" >&2; exit 1; }
  if grep -q "runtime error\|Sanitizer" "$out/$v.err"; then
    cat "$out/$v.err" >&2
    echo "diff.sh: a sanitizer reported an error in the $v build" >&2
    exit 1
  fi
done
total=$(wc -l < "$out/patched.txt")
differ=$(diff <(cut -d' ' -f1-4 "$out/patched.txt") <(cut -d' ' -f1-4 "$out/stock.txt") | grep -c '^<' || true)
if [ "$total" -eq 0 ] || [ "$(wc -l < "$out/stock.txt")" -ne "$total" ]; then
  echo "diff.sh: the two runs decoded different numbers of files" >&2
  exit 1
fi
echo "diff.sh: $total inputs (${#files[@]} files, $copies damaged copies each), each decoded at 4 scales to RGB, planes and a crop"
echo "diffcheck: $((total - differ)) passed, $differ failed"
grep "^diffcheck: cropped decodes" "$out/patched.err" || true
if [ "$differ" -ne 0 ]; then
  diff <(cut -d' ' -f1-4 "$out/patched.txt") <(cut -d' ' -f1-4 "$out/stock.txt") | head -20 >&2
  exit 1
fi
