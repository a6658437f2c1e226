#!/usr/bin/env bash
# CI's fuzzing step (.ci/run): builds the six targets with AddressSanitizer and libjpeg-turbo's
# C instrumented (build.sh), then runs each from its committed seeds (seeds/<target>/, plus
# regressions/<target>/ where it exists) for a bounded time: `decode` DECODE_SECONDS (default
# 60), the others SECONDS_EACH each (default 25). Anything found (a crash, a panic, a leak, a
# timeout, an out-of-memory) fails the step, which prints the input as base64 and the commands
# that rerun it. New corpus entries go to fuzz/target/ci/ and are not kept.
#
#   fuzz/ci.sh                      # as CI runs it
#   SECONDS_EACH=10 fuzz/ci.sh list # one target, 10 s
set -euo pipefail
cd "$(dirname "$0")"
decode_secs=${DECODE_SECONDS:-60}
other_secs=${SECONDS_EACH:-25}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(decode list cache tar tfrecord parquet)
bin=target/x86_64-unknown-linux-gnu/release
work=target/ci
rm -rf "$work"
mkdir -p "$work"

start=$SECONDS
if ! ./build.sh >"$work/build.log" 2>&1; then
    tail -40 "$work/build.log"
    echo "fuzz: the fuzz targets did not build (log above)" >&2
    exit 1
fi
echo "fuzz: built the targets in $((SECONDS - start)) s (AddressSanitizer, libjpeg-turbo instrumented)"

status=0
for t in "${targets[@]}"; do
    secs=$other_secs
    [ "$t" = decode ] && secs=$decode_secs
    corpus="$work/corpus/$t" artifacts="$work/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    seeds=("seeds/$t")
    [ -d "regressions/$t" ] && seeds+=("regressions/$t")
    rc=0
    t0=$SECONDS
    # The first folder takes what the run finds; the seed folders are only read. lsan.supp
    # says why glibc's per-thread destructor list is no leak.
    LSAN_OPTIONS="suppressions=$PWD/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
    "$bin/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$work/$t.log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    # libFuzzer's coverage: `#N<TAB>INITED cov: C ft: F corp: ...` after the seeds, DONE at the end.
    figures() { grep -E "^#[0-9]+[[:space:]]+$1" "$work/$t.log" | tail -1 | sed -E 's/.*(cov: [0-9]+ ft: [0-9]+).*/\1/'; }
    echo "fuzz: $t: $((SECONDS - t0)) s, ${execs:-?} executions; after the seeds $(figures INITED), at the end $(figures DONE)"
    shopt -s nullglob
    found=("$artifacts"/*)
    shopt -u nullglob
    if [ "$rc" -ne 0 ] || [ ${#found[@]} -gt 0 ]; then
        status=1
        echo "fuzz: $t FAILED (exit $rc). What it reported:"
        grep -m 6 -E -A 3 "panicked at|ERROR: |SUMMARY: |WARNING: .*(leak|timeout)" "$work/$t.log" || true
        echo "fuzz: $t: the end of its log:"
        tail -30 "$work/$t.log"
        for f in "${found[@]}"; do
            echo
            echo "fuzz: $t: $(basename "$f"), $(wc -c <"$f") bytes. To rerun it, paste these lines"
            echo "into a shell at the repository root (between the ---- lines):"
            echo "----"
            echo "base64 -d > /tmp/$(basename "$f") <<'INPUT'"
            base64 -w 76 "$f"
            echo "INPUT"
            echo "fuzz/build.sh && fuzz/$bin/$t /tmp/$(basename "$f")"
            echo "----"
        done
    fi
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start)) s"
exit $status
