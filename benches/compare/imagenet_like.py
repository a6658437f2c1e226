#!/usr/bin/env python3
"""Re-encode a file list as an ImageNet-like corpus: baseline JPEGs mostly at ImageNet's
common sizes, for measuring imagefeed where decoding is cheap and per-image costs weigh more.

usage: python3 benches/compare/imagenet_like.py SRC_LIST OUT_DIR [--count N] [--seed S]

SRC_LIST is a `PATH<TAB>LABEL` list (relative paths are relative to its folder), for example
the files.txt that `imagefeed corpus` writes. For each of its first N images (default 2,500):
with probability 0.40 it is resized to 500x375, 0.15 to 375x500, 0.15 to 500x333, 0.05 to
333x500 (Pillow, bicubic), otherwise kept at its size; then saved as a baseline JPEG, quality
90 (Pillow's default 4:2:0 subsampling). Writes OUT_DIR/NNNN.jpg and OUT_DIR/files.txt with
the source's labels. Needs Pillow (`pip install pillow`). Refuses to write into a folder that
already holds a files.txt.
"""

import argparse
import os
import random
import sys

from PIL import Image

SIZES = [(0.40, (500, 375)), (0.15, (375, 500)), (0.15, (500, 333)), (0.05, (333, 500))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src_list")
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out_list = os.path.join(args.out_dir, "files.txt")
    if os.path.exists(out_list):
        print(f"{out_list} exists: choose another folder", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.dirname(os.path.abspath(args.src_list))
    rng = random.Random(args.seed)
    written = 0
    with open(args.src_list, encoding="utf-8") as src, open(out_list, "w", encoding="utf-8") as out:
        for n, line in enumerate(src, 1):
            if written == args.count:
                break
            line = line.rstrip("\r\n")
            if not line:
                continue
            path, sep, label = line.rpartition("\t")
            if not sep:
                print(f"{args.src_list}:{n}: expected PATH<TAB>LABEL", file=sys.stderr)
                return 1
            im = Image.open(os.path.join(base, path)).convert("RGB")
            r, size = rng.random(), None
            for p, s in SIZES:
                if r < p:
                    size = s
                    break
                r -= p
            if size:
                im = im.resize(size, Image.BICUBIC)
            name = f"{written:04d}.jpg"
            im.save(os.path.join(args.out_dir, name), quality=90)
            out.write(f"{name}\t{label}\n")
            written += 1
    print(f"wrote {written} images and {out_list}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
