#!/usr/bin/env bash
# Sets up the seed corpora and runs the fuzz targets one after another, each for SECONDS
# (default 600), with one job and one worker, at nice 19. AddressSanitizer is on (the cargo
# fuzz default); SANITIZER=none turns it off.
#
#   fuzz/run.sh            # decode, list, cache, tar: 600 s each
#   fuzz/run.sh 60 list    # only `list`, 60 s
#
# Logs: fuzz/logs/<target>.log (libFuzzer's output) and fuzz/logs/<target>.build (cargo's).
# Crashes land in fuzz/artifacts/<target>/. Needs cargo-fuzz (`cargo install cargo-fuzz`);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take the nightly-only sanitizer flags.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(decode list cache tar)
sanitizer=${SANITIZER:-address}
export RUSTC_BOOTSTRAP=1
# libjpeg-turbo's C gets libFuzzer's coverage (and ASan) only when clang compiles it
# (crates/imagefeed-jpeg/build.rs); with another compiler the fuzzer is blind inside it.
if [ -z "${CC:-}" ] && command -v clang >/dev/null 2>&1; then
    export CC=clang
fi
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

./setup_corpus.sh
mkdir -p logs
status=0
for t in "${targets[@]}"; do
    echo "== $t: building ($sanitizer)"
    nice -n 19 cargo fuzz build -s "$sanitizer" "$t" > "logs/$t.build" 2>&1 || { tail -20 "logs/$t.build"; exit 1; }
    echo "== $t: fuzzing for $secs s"
    # -jobs=1 -workers=1: libFuzzer runs one child and writes its output to fuzz-0.log.
    rm -f fuzz-0.log
    rc=0
    nice -n 19 cargo fuzz run -s "$sanitizer" "$t" -- \
        -jobs=1 -workers=1 -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        >> "logs/$t.build" 2>&1 || rc=$?
    mv -f fuzz-0.log "logs/$t.log" 2>/dev/null || true
    grep -E "INITED|DONE" "logs/$t.log" || true
    if [ "$rc" -ne 0 ] || grep -qE "SUMMARY: |panicked at" "logs/$t.log"; then
        echo "== $t: FOUND SOMETHING (exit $rc), see logs/$t.log and artifacts/$t/"
        status=1
    fi
done
exit $status
