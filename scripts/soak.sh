#!/usr/bin/env bash
# Soak run: a corpus with 2% broken files, 20 epochs with --on-error skip. Prints the
# peak RSS and skipped count of every epoch: after the buffer pools have filled (first half) the
# peak must not grow, and the skipped count must not change.
#
# usage: scripts/soak.sh [IMAGES] [EPOCHS] [BENCH OPTIONS...]   (defaults: 2000 images, 20 epochs)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
epochs=${2:-20}
shift $(( $# < 2 ? $# : 2 ))
cargo build --release --quiet
bin=target/release/imagefeed
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" corpus "$dir" --count "$n" --seed 7 >&2
# Break 2% of the files, cycling through the kinds of damage a real dataset has.
broken=$(( n / 50 ))
i=0
for f in $(awk -F'\t' '{print $1}' "$dir/files.txt" | awk 'NR % 50 == 25' | head -n "$broken"); do
  p=$dir/$f
  case $(( i % 7 )) in
    0) head -c $(( $(stat -c %s "$p") / 2 )) "$p" > "$p.tmp" && mv "$p.tmp" "$p" ;;   # truncated
    1) : > "$p" ;;                                                                      # zero length
    2) head -c 4096 /dev/urandom > "$p" ;;                                              # garbage
    3) printf '<html><body>404 Not Found</body></html>\n' > "$p" ;;                     # error page
    4) cp testdata/corrupt/png_named.jpg "$p" ;;                                        # PNG named .jpg
    5) rm -f "$p" ;;                                                                    # missing
    6) python3 -c "import sys;b=bytearray(open(sys.argv[1],'rb').read());b[len(b)//2:len(b)//2+64]=bytes(64);open(sys.argv[1],'wb').write(b)" "$p" ;;  # zeroed burst
  esac
  i=$(( i + 1 ))
done
echo "soak: $n images, $broken broken, $epochs epochs, --on-error skip" >&2
"$bin" bench "$dir/files.txt" --on-error skip --epochs "$epochs" --json "$@" 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
for r in rows:
    print("epoch %2d: %d images, %d skipped, %.0f images/s, peak RSS %.1f MB" % (r["epoch"], r["images"], r["skipped"], r["images_per_sec"], r["peak_rss_bytes"] / 1e6))
peaks = [r["peak_rss_bytes"] for r in rows]
skips = {r["skipped"] for r in rows}
print("peak RSS: first epoch %.1f MB, max %.1f MB, last %.1f MB; skipped per epoch: %s" % (peaks[0] / 1e6, max(peaks) / 1e6, peaks[-1] / 1e6, sorted(skips)))
# Buffer pools fill up during the first epochs; after that the peak must not grow: the second
# half of the run may not exceed the first half by more than 5%.
half = max(1, len(peaks) // 2)
first, second = max(peaks[:half]), max(peaks[half:] or peaks)
print("peak RSS: first half max %.1f MB, second half max %.1f MB" % (first / 1e6, second / 1e6))
ok = len(skips) == 1 and second <= first * 1.05
print("soak: OK" if ok else "soak: FAILED (RSS grew or skipped count changed)")
sys.exit(0 if ok else 1)
'
