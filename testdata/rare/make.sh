#!/usr/bin/env bash
# Writes the rare JPEG kinds in this folder with libjpeg-turbo 3.1.0's own cjpeg, built from the
# release's sources (its full tree: crates/imagefeed-jpeg/vendor.sh names where to get it; the
# crate vendors only the library, not the sample programs):
#
#   testdata/rare/make.sh /path/to/libjpeg-turbo-3.1.0      # needs cmake and a C compiler
#
# The input is ../photos/photo_0.jpg decoded at 1/8 scale by the same release's djpeg (113x75,
# PPM). Deterministic: the same release gives the same bytes (checked by rerunning).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${1:?usage: make.sh /path/to/libjpeg-turbo-3.1.0}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cmake -S "$src" -B "$build" -DWITH_SIMD=0 -DENABLE_SHARED=0 -DCMAKE_BUILD_TYPE=Release >"$build/log" 2>&1 \
  || { cat "$build/log" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target cjpeg-static djpeg-static >>"$build/log" 2>&1 \
  || { cat "$build/log" >&2; exit 1; }
cjpeg="$build/cjpeg-static"
"$build/djpeg-static" -scale 1/8 -ppm -outfile "$build/in.ppm" "$here/../photos/photo_0.jpg"
make() { local out=$1; shift; "$cjpeg" "$@" -outfile "$here/$out" "$build/in.ppm"; }
make arithmetic.jpg -quality 90 -arithmetic
make arithmetic_progressive.jpg -quality 90 -arithmetic -progressive
make precision12.jpg -quality 90 -precision 12
make s411.jpg -quality 90 -sample 4x1
make s440.jpg -quality 90 -sample 1x2
make lossless.jpg -lossless 1
make lossless12.jpg -precision 12 -lossless 1
make lossless16.jpg -precision 16 -lossless 1
"$cjpeg" -version 2>&1 | head -1
ls -l "$here"/*.jpg
