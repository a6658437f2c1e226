#!/usr/bin/env bash
# Fills the working corpora fuzz/corpus/{decode,list,cache,tar} (gitignored) from the committed
# seeds (seeds/<target>/) and kept findings (regressions/<target>/). Idempotent: it only adds
# files, so a corpus grown by earlier runs is kept. The decode seeds are written by
# make_seeds.py (each one an image of seeds/images/ or testdata/corrupt/ with the target's
# selector byte in front).
set -euo pipefail
cd "$(dirname "$0")"
for t in decode list cache tar; do
    mkdir -p "corpus/$t"
    cp -n "seeds/$t"/* "corpus/$t/"
    if [ -d "regressions/$t" ]; then
        cp -n "regressions/$t"/* "corpus/$t/"
    fi
done
echo "corpus: decode $(ls corpus/decode | wc -l), list $(ls corpus/list | wc -l), cache $(ls corpus/cache | wc -l), tar $(ls corpus/tar | wc -l) files"
