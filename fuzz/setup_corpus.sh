#!/usr/bin/env bash
# Sets up the seed corpora in fuzz/corpus/{decode,list,cache} (gitignored). Idempotent: it
# only adds files, so a corpus grown by earlier runs is kept.
set -euo pipefail
cd "$(dirname "$0")"
root=..
mkdir -p corpus/decode corpus/list corpus/cache corpus/tar

# decode: the first byte selects name / decoder / size (see fuzz_targets/decode.rs):
#   60 = x.jpg, auto (libjpeg-turbo), 61x61    63 = x.jpg, zune-jpeg, 61x61
#   61 = x.png, auto, 61x61                    62 = x (no extension), auto, 61x61
seed() { # seed SELECTOR FILE
    local sel=$1 file=$2
    local out="corpus/decode/$(basename "$(dirname "$file")")_$(basename "$file").$sel"
    { printf "\\$(printf '%03o' "$sel")"; cat "$file"; } > "$out"
}
for f in "$root"/testdata/valid/*.jpg "$root"/testdata/photos/*.jpg; do
    seed 60 "$f"; seed 63 "$f"
done
for f in "$root"/testdata/valid/*.png seeds/decode/*.png; do
    seed 61 "$f"; seed 62 "$f"
done
for f in "$root"/testdata/corrupt/*; do
    seed 60 "$f"; seed 63 "$f"; seed 62 "$f"
done

# (seeds/decode: small indexed PNGs at bit depths 1-8, interlaced, with tRNS, and one whose
# pixel (5, 3) has an index past its palette.)

# list: small hand-written lists (BOM, CRLF, duplicates, bad labels, non-UTF-8, empty).
cp seeds/list/* corpus/list/

# cache: real cache files written by `imagefeed bench --cache` (see README.md).
cp seeds/cache/* corpus/cache/

# tar: small hand-written shards (labeled, unlabeled, PAX long names, GNU, extra members).
cp seeds/tar/* corpus/tar/

echo "corpus: tar $(ls corpus/tar | wc -l), decode $(ls corpus/decode | wc -l), list $(ls corpus/list | wc -l), cache $(ls corpus/cache | wc -l) files"

