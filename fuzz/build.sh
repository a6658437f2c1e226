#!/usr/bin/env bash
# Builds the fuzz targets (decode, list, cache, tar, tfrecord, parquet) as libFuzzer binaries, without cargo-fuzz:
# the same rustc flags `cargo fuzz build` passes (SanitizerCoverage's inline 8-bit counters, PC
# table and compare tracing, `--cfg fuzzing`, AddressSanitizer, debug assertions and overflow
# checks), on the stable toolchain (RUSTC_BOOTSTRAP=1 lets it take `-Zsanitizer`). libFuzzer
# itself comes from the libfuzzer-sys crate (crates.io), which compiles it from source.
#
#   fuzz/build.sh                  # ASan (the default)
#   SANITIZER=none fuzz/build.sh   # coverage only (faster binaries, no memory checks)
#
# The binaries land in fuzz/target/x86_64-unknown-linux-gnu/release/<target>; run one with a
# corpus folder to fuzz, or with files to run them once (see README.md).
#
# libjpeg-turbo's C gets the same coverage and ASan instrumentation only when clang compiles it
# (crates/imagefeed-jpeg/build.rs): clang is required (Debian: apt-get install clang).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz/build.sh: clang is needed to instrument libjpeg-turbo's C (apt-get install clang)" >&2
    exit 1
fi
export CC=clang CXX=clang++ RUSTC_BOOTSTRAP=1
flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0
    --cfg fuzzing
    -Cdebug-assertions
    -Coverflow-checks
    -Cforce-frame-pointers
)
case "${SANITIZER:-address}" in
    address) flags+=(-Zsanitizer=address) ;;
    none) ;;
    *) echo "fuzz/build.sh: SANITIZER is address or none" >&2; exit 1 ;;
esac
export RUSTFLAGS="${flags[*]}"
# --target: the flags then reach the targets' code only, not build scripts or proc macros.
exec cargo build --release --target x86_64-unknown-linux-gnu --bins "$@"
