#!/usr/bin/env python3
"""Re-encode a file list with film grain, at photographs' entropy density: the synthetic corpora
`imagefeed corpus` writes compress to 0.17-0.24 bytes a pixel, real photographs (ImageNet's, at
quality 90 or so) to about 0.5-0.7, and entropy decoding, which every JPEG decoder shares, grows
with it. For measuring where that decoding weighs as much as in a real dataset.

usage: python3 benches/compare/grainy.py SRC_LIST OUT_DIR [--seed S] [--grain SIGMA]

For each `PATH<TAB>LABEL` line of SRC_LIST (relative paths are relative to its folder), in order:
adds Gaussian noise of SIGMA (default 9) to every pixel's three channels alike, plus a third of
that to each channel on its own (NumPy's default_rng(S), default seed 1), then saves a JPEG at a
quality drawn from 85-95, 4:2:0, progressive with probability 0.1. Writes OUT_DIR/PATH (the same
relative paths) and OUT_DIR/files.txt with the source's labels. With the defaults over the
3,000-image ImageNet-like corpus (`imagefeed corpus DIR --count 3000 --seed 5 --long-side 375
500`) it writes 0.45 bytes a pixel, 57 kB a file. Needs Pillow and NumPy. Refuses to write into
a folder that already holds a files.txt.
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src_list")
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grain", type=float, default=9.0)
    a = ap.parse_args()
    if os.path.exists(os.path.join(a.out_dir, "files.txt")):
        sys.exit(f"{a.out_dir}/files.txt exists: choose an empty folder")
    src_dir = os.path.dirname(os.path.abspath(a.src_list))
    rng = np.random.default_rng(a.seed)
    lines = []
    total_bytes = total_px = 0
    with open(a.src_list, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            try:
                path, label = line.split("\t")
            except ValueError:
                sys.exit(f"{a.src_list}:{n}: expected PATH<TAB>LABEL")
            if os.path.isabs(path):
                sys.exit(f"{a.src_list}:{n}: {path}: an absolute path cannot be re-rooted")
            with Image.open(os.path.join(src_dir, path)) as im:
                px = np.asarray(im.convert("RGB")).astype(np.float32)
            noise = rng.normal(0, a.grain, px.shape[:2])[..., None]
            noise = noise + rng.normal(0, a.grain / 3, px.shape)
            px = np.clip(px + noise, 0, 255).astype(np.uint8)
            quality = int(rng.integers(85, 96))
            progressive = bool(rng.random() < 0.1)
            out = os.path.join(a.out_dir, path)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            Image.fromarray(px).save(out, quality=quality, progressive=progressive, subsampling=2)
            total_bytes += os.path.getsize(out)
            total_px += px.shape[0] * px.shape[1]
            lines.append(f"{path}\t{label}\n")
    with open(os.path.join(a.out_dir, "files.txt"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    if lines:
        print(f"{len(lines)} images, {total_bytes / total_px:.2f} bytes a pixel, "
              f"{total_bytes / len(lines) / 1e3:.0f} kB a file", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
