#!/usr/bin/env bash
# Fuzzes the targets one after another, each for SECONDS (default 600), with one job, at
# nice 19, over the working corpora (setup_corpus.sh; they keep what each run finds).
# AddressSanitizer is on; SANITIZER=none turns it off (build.sh).
#
#   fuzz/run.sh            # decode, list, cache, tar: 600 s each
#   fuzz/run.sh 60 list    # only `list`, 60 s
#
# Logs: fuzz/logs/<target>.log (libFuzzer's output) and fuzz/logs/build.log (cargo's).
# Findings land in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(decode list cache tar)
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

./setup_corpus.sh
mkdir -p logs
echo "== building (${SANITIZER:-address})"
nice -n 19 ./build.sh >logs/build.log 2>&1 || { tail -20 logs/build.log; exit 1; }
status=0
for t in "${targets[@]}"; do
    echo "== $t: fuzzing for $secs s"
    mkdir -p "artifacts/$t"
    rc=0
    nice -n 19 "target/x86_64-unknown-linux-gnu/release/$t" -max_total_time="$secs" \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
        "corpus/$t" >"logs/$t.log" 2>&1 || rc=$?
    grep -E "INITED|DONE" "logs/$t.log" || true
    if [ "$rc" -ne 0 ] || grep -qE "SUMMARY: |panicked at" "logs/$t.log"; then
        echo "== $t: FOUND SOMETHING (exit $rc), see logs/$t.log and artifacts/$t/"
        status=1
    fi
done
exit $status
