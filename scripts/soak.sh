#!/usr/bin/env bash
# Soak run (issue 6): a corpus with 2% broken files, 20 epochs with --on-error skip. Prints the
# peak RSS and skipped count of every epoch: RSS must not grow, skipped must not change.
#
# usage: scripts/soak.sh [IMAGES] [EPOCHS]     (defaults: 2000 images, 20 epochs)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
epochs=${2:-20}
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
"$bin" bench "$dir/files.txt" --on-error skip --epochs "$epochs" --json 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
for r in rows:
    print(f"epoch {r[\"epoch\"]:2}: {r[\"images\"]} images, {r[\"skipped\"]} skipped, {r[\"images_per_sec\"]:.0f} images/s, peak RSS {r[\"peak_rss_bytes\"]/1e6:.1f} MB")
peaks = [r["peak_rss_bytes"] for r in rows]
skips = {r["skipped"] for r in rows}
print(f"peak RSS: first epoch {peaks[0]/1e6:.1f} MB, max {max(peaks)/1e6:.1f} MB, last {peaks[-1]/1e6:.1f} MB; skipped per epoch: {sorted(skips)}")
ok = len(skips) == 1 and max(peaks[1:] or peaks) <= peaks[0] * 1.10 + 10e6
print("soak: OK" if ok else "soak: FAILED (RSS grew or skipped count changed)")
sys.exit(0 if ok else 1)
'
