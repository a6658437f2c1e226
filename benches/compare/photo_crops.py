#!/usr/bin/env python3
"""Cut a corpus of ImageNet-sized JPEGs out of high-resolution photographs.

usage: python3 benches/compare/photo_crops.py OUT_DIR PHOTO [PHOTO ...] [--count N] [--seed S] [--large]

`imagefeed corpus` rescales crops of six small embedded photos; this script instead keeps the
texture of real camera photos at the size they are cut. For each of N images (default 5,000)
it picks one of the PHOTOs (files Pillow reads, at least 1,000 px on each side), a long side of
500 px (half the images) or 333-800 px, and an aspect ratio of 4:3, 3:2 or 1:1 (30% turned to
portrait); cuts a random region 1.5-4x that size out of the photo (less where the photo is
smaller); shrinks it (Pillow, Lanczos); and saves it as a JPEG at quality 75-95, 4:2:0 (10% at
4:4:4), 10% progressive. Writes OUT_DIR/NNNNN.jpg and OUT_DIR/files.txt (label: the photo's
position among the arguments) and prints the mean size and bits per pixel. With --large the
long side is instead 640 px (40% of the images), 1,024 px (40%) or up to 3,000 px (20%, as
much of that as the photo holds), cut from a region 1-2x that size: COCO- and Open Images-sized
pictures with some camera-sized ones, which decode at DCT scales 1/4 and 1/8. The same arguments
and seed give the same files. Needs Pillow (`pip install pillow`). Refuses to write into a
folder that already holds a files.txt.

The "photo crops" corpus of docs/PERFORMANCE.md used the 22 photographs of Debian's mate-backgrounds
(1.26.0-1: backgrounds/mate/nature/*.jpg) and plasma-workspace-wallpapers (5.27.5-2: the
2560x1600 images of BytheWater, ColdRipple, DarkestHour, EveningGlow, FallenLeaf, Grey, Kite,
OneStandsOut, Path and summer_1am), the wallpapers first:

    apt-get download mate-backgrounds plasma-workspace-wallpapers
    for d in *.deb; do dpkg -x "$d" bg; done
    w=bg/usr/share/wallpapers
    python3 benches/compare/photo_crops.py /tmp/real \\
      $w/{BytheWater,ColdRipple,DarkestHour,EveningGlow,FallenLeaf,Grey,Kite,OneStandsOut,Path,summer_1am}/contents/images/2560x1600.jpg \\
      bg/usr/share/backgrounds/mate/nature/*.jpg
"""

import argparse
import os
import random
import sys

from PIL import Image

ASPECTS = [4 / 3, 3 / 2, 1.0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("photos", nargs="+")
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--large", action="store_true", help="640-3,000 px long sides (see above)")
    args = ap.parse_args()
    out_list = os.path.join(args.out_dir, "files.txt")
    if os.path.exists(out_list):
        print(f"{out_list} exists: choose another folder", file=sys.stderr)
        return 2
    photos = []
    for p in args.photos:
        im = Image.open(p).convert("RGB")
        if min(im.size) < 1000:
            print(f"{p}: {im.size[0]}x{im.size[1]}, under 1,000 px on a side: skipped", file=sys.stderr)
            continue
        photos.append(im)
    if not photos:
        print("no photo of at least 1,000 px on each side", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    rng = random.Random(args.seed)
    total_bytes = 0
    total_px = 0
    with open(out_list, "w", encoding="utf-8") as out:
        for i in range(args.count):
            label = rng.randrange(len(photos))
            photo = photos[label]
            # (Draws in the same order as before --large existed: the same seed gives the same
            # ImageNet-sized corpus.)
            if args.large:
                u = rng.random()
                long = 640 if u < 0.4 else 1024 if u < 0.8 else 3000
                grow = (1.0, 2.0)
            else:
                long = 500 if rng.random() < 0.5 else rng.randint(333, 800)
                grow = (1.5, 4.0)
            aspect = rng.choice(ASPECTS)
            portrait = rng.random() < 0.3
            if args.large:
                # No longer than the photo holds at this aspect and orientation.
                pw, ph = photo.size
                fit = min(ph, pw * aspect) if portrait else min(pw, ph * aspect)
                long = min(long, int(fit))
            w, h = long, max(16, round(long / aspect))
            if portrait:
                w, h = h, w
            # The cut is 1.5-4x the output (1-2x with --large), within the photo.
            k = min(rng.uniform(*grow), photo.size[0] / w, photo.size[1] / h)
            cw, ch = round(w * k), round(h * k)
            x = rng.randint(0, photo.size[0] - cw)
            y = rng.randint(0, photo.size[1] - ch)
            im = photo.resize((w, h), Image.LANCZOS, box=(x, y, x + cw, y + ch))
            sub = 0 if rng.random() < 0.1 else 2  # 4:4:4 or 4:2:0
            name = f"{i:05d}.jpg"
            path = os.path.join(args.out_dir, name)
            im.save(
                path,
                quality=rng.randint(75, 95),
                subsampling=sub,
                progressive=rng.random() < 0.1,
            )
            total_bytes += os.path.getsize(path)
            total_px += w * h
            out.write(f"{name}\t{label}\n")
    n = args.count
    print(
        f"wrote {n} images from {len(photos)} photos and {out_list}: "
        f"{total_px / n / 1e6:.3f} MP and {total_bytes / n / 1e3:.1f} kB on average, "
        f"{8 * total_bytes / max(total_px, 1):.2f} bits a pixel"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
