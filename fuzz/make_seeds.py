#!/usr/bin/env python3
"""Writes the `decode` target's seed corpus, fuzz/seeds/decode/, from small images.

    python3 fuzz/make_seeds.py            # seeds/images/ + testdata/corrupt/ -> seeds/decode/
    python3 fuzz/make_seeds.py --images   # first rewrites seeds/images/ (needs jpegtran)

seeds/images/ holds small images of every kind the decoder takes: JPEG crops of testdata/valid/
(baseline 4:2:0, 4:2:2, 4:4:4, grey, CMYK, YCCK, ICC, EXIF orientations, non-interleaved, progressive with
successive approximation, restart intervals, arithmetic coding, a DC table of 255, a 7x5 and a
1x1 file, a wide strip), damaged copies of them (a bit flipped in the scan, cut short, no EOI
marker, a restart marker broken), one photograph at full size, and PNGs of every colour type and
bit depth (written here with zlib) beside the indexed ones. Every seed is one of them with the
target's selector byte in front (see fuzz_targets/decode.rs), padded so that its length picks the
transform (`len % 4`) and the filter (`len % 3`) that `imagefeed::fuzzing::decode_transform`
takes from it: each image runs every transform, each with both decoders, strict and accepting
JPEG warnings, under several output sizes. A JPEG is padded with a comment segment after SOI
(the pixels do not change); anything else with zeros at its end.

Inputs a fuzzing campaign added (`-merge=1`, named by their SHA-1) are kept. Deterministic: the
same inputs give the same files. `--images` used libjpeg-turbo-progs 2.1.5's
jpegtran (Debian 12).
"""
import os
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMAGES = os.path.join(HERE, "seeds", "images")
OUT = os.path.join(HERE, "seeds", "decode")
VALID = os.path.join(ROOT, "testdata", "valid")

TRANSFORMS = ["stretch", "shorter", "center", "rrc"]  # len % 4 in decode_transform
NAMES = ["x.jpg", "x.png", "x"]  # sel % 3


def selector(name, zune, size):
    """The selector byte for file name `name`, decoder and output size (decode.rs)."""
    k = (size - 1) // 5
    assert 1 + 5 * k == size and 0 <= k <= 42, size
    sel = 6 * k + 3 * int(zune) + NAMES.index(name)
    assert sel <= 255
    return sel


def strict_size(size_class):
    """Output sizes: 6/11, 46/51, 156/161; the even one is strict, the odd one accepts."""
    return [(6, 11), (46, 51), (156, 161)][size_class % 3]


def padded(data, transform, filter_residue):
    """`data` made `transform` (0..3) and `filter_residue` (0..2) long modulo 4 and 3."""
    want = next(r for r in range(12) if r % 4 == transform and r % 3 == filter_residue)
    if data[:2] == b"\xff\xd8":
        # A comment segment: 4 bytes of marker and length, then `n` bytes.
        n = (want - len(data) - 4) % 12
        com = b"\xff\xfe" + struct.pack(">H", n + 2) + b"p" * n
        out = data[:2] + com + data[2:]
    else:
        out = data + b"\0" * ((want - len(data)) % 12)
    assert len(out) % 12 == want
    return out


def decode_seeds():
    # Files named by libFuzzer (40 hex digits: merged in from a campaign) are kept; the rest
    # are this script's and are written again.
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if not (len(name) == 40 and all(c in "0123456789abcdef" for c in name)):
            os.remove(os.path.join(OUT, name))
    count = 0
    total = 0

    def write(base, data, name, zune, size, transform, filt):
        nonlocal count, total
        body = padded(data, transform, filt)
        mode = "strict" if size % 2 == 0 else "accept"
        dec = "zune" if zune else "auto"
        fname = f"{base}.{name.replace('.', '_')}.{TRANSFORMS[transform]}.{dec}.{mode}.{size}"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(bytes([selector(name, zune, size)]) + body)
        count += 1
        total += len(body) + 1

    jpegs = sorted(f for f in os.listdir(IMAGES) if f.endswith(".jpg"))
    pngs = sorted(f for f in os.listdir(IMAGES) if f.endswith(".png"))
    for i, f in enumerate(jpegs):
        data = open(os.path.join(IMAGES, f), "rb").read()
        base = f[:-4]
        big = len(data) > 16_000
        for t in range(4):
            strict, accept = strict_size(i + t)
            filt = (i + t) % 3
            write(base, data, "x.jpg", False, strict, t, filt)
            if not big or t != 0:
                write(base, data, "x.jpg", False, accept, t, (filt + 1) % 3)
            if not big:
                write(base, data, "x.jpg", True, strict if t % 2 == 0 else accept, t, (filt + 2) % 3)
        if not big:
            # No extension: the decoder is chosen by sniffing.
            write(base, data, "x", False, strict_size(i)[0], 3, i % 3)
    for i, f in enumerate(pngs):
        data = open(os.path.join(IMAGES, f), "rb").read()
        base = f[:-4]
        for t in range(4):
            strict, accept = strict_size(i + t)
            write(base, data, "x.png", False, strict if t % 2 else accept, t, (i + t) % 3)
        write(base, data, "x", False, strict_size(i)[1], 2, i % 3)
        # A PNG named .jpg: the extension check refuses it.
        write(base, data, "x.jpg", False, 6, 0, 0)
    corrupt = os.path.join(ROOT, "testdata", "corrupt")
    for i, f in enumerate(sorted(os.listdir(corrupt))):
        data = open(os.path.join(corrupt, f), "rb").read()
        base = "corrupt_" + os.path.splitext(f)[0]
        small = len(data) <= 4_000
        for t in range(4) if small else (1, 3):
            strict, accept = strict_size(i + t)
            write(base, data, "x.jpg", False, strict, t, (i + t) % 3)
            if small:
                write(base, data, "x.jpg", False, accept, t, (i + t + 1) % 3)
        if small or len(data) <= 16_000:
            write(base, data, "x.jpg", True, 6, 0, i % 3)
            write(base, data, "x", False, 46, 2, i % 3)
    print(f"seeds/decode: {count} seeds, {total} bytes")


def run(*cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, check=True, capture_output=True).stdout


def jpegtran(src, *args):
    return run("jpegtran", "-copy", "all", *args, os.path.join(VALID, src))


def scan_start(data):
    """The offset of the first scan's entropy-coded data."""
    i = 2
    while i < len(data):
        assert data[i] == 0xFF, i
        marker = data[i + 1]
        seg = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if marker == 0xDA:
            return i + 2 + seg
        i += 2 + seg
    raise ValueError("no scan")


def png(width, height, colour, depth, rows, extra=b""):
    """A PNG; `rows` gives each row's raw bytes (filter type 0 is added)."""

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    raw = b"".join(b"\0" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def png_images():
    """Non-indexed PNGs, 37x23: every colour type at 8 and 16 bits, grey at 1, 2 and 4."""
    w, h = 37, 23
    out = {}
    samples = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples a pixel
    for colour, depths in ((0, (1, 2, 4, 8, 16)), (2, (8, 16)), (4, (8, 16)), (6, (8, 16))):
        for depth in depths:
            rows = []
            for y in range(h):
                bits = []
                for x in range(w):
                    for s in range(samples[colour]):
                        v = (x * 7 + y * 13 + s * 61) % (1 << depth)
                        bits.append(v)
                if depth < 8:
                    acc, n, row = 0, 0, bytearray()
                    for v in bits:
                        acc = (acc << depth) | v
                        n += depth
                        if n == 8:
                            row.append(acc)
                            acc, n = 0, 0
                    if n:
                        row.append(acc << (8 - n))
                    rows.append(bytes(row))
                elif depth == 8:
                    rows.append(bytes(bits))
                else:
                    rows.append(b"".join(struct.pack(">H", v * 257 % 65536) for v in bits))
            extra = b""
            if colour in (0, 2) and depth in (8, 16):
                # tRNS: one colour is transparent (dropped with the alpha anyway).
                body = struct.pack(">H", 5) * (1 if colour == 0 else 3)
                extra = (struct.pack(">I", len(body)) + b"tRNS" + body
                         + struct.pack(">I", zlib.crc32(b"tRNS" + body) & 0xFFFFFFFF))
            name = {0: "grey", 2: "rgb", 4: "grey_alpha", 6: "rgba"}[colour]
            out[f"png_{name}_{depth}bit.png"] = png(w, h, colour, depth, rows, extra)
    return out


def images():
    """Rewrites the JPEGs and the non-indexed PNGs of seeds/images/."""
    crop = ("-crop", "136x92+0+0")
    jpegs = {
        "baseline_420": jpegtran("baseline_420.jpg", *crop),
        "s422": jpegtran("s422.jpg", *crop),
        "s444": jpegtran("s444.jpg", *crop),
        "grey": jpegtran("gray.jpg", *crop),
        "cmyk": jpegtran("cmyk.jpg", "-crop", "64x48+0+0"),
        "ycck": jpegtran("ycck.jpg", "-crop", "64x48+0+0"),
        "icc": jpegtran("icc.jpg", *crop),
        "exif_orient_6": jpegtran("orient_6.jpg", *crop),
        "exif_orient_3": jpegtran("orient_3.jpg", *crop),
        "dqt_dc255": jpegtran("dqt_dc255.jpg", *crop),
        "wide_strip": jpegtran("wide_1200x40.jpg", "-crop", "480x40+0+0"),
        "progressive_420": jpegtran("baseline_420.jpg", *crop, "-progressive"),
        "progressive_444_restart": jpegtran("s444.jpg", *crop, "-progressive", "-restart", "1"),
        "progressive_grey": jpegtran("gray.jpg", *crop, "-progressive"),
        "restart_420": jpegtran("baseline_420.jpg", *crop, "-restart", "1"),
        "restart_422_every_2_mcus": jpegtran("s422.jpg", *crop, "-restart", "2B"),
        "arithmetic_420": jpegtran("baseline_420.jpg", *crop, "-arithmetic"),
        "arithmetic_progressive_444": jpegtran("s444.jpg", *crop, "-arithmetic", "-progressive"),
        "progressive_photo_crop": jpegtran(os.path.join("..", "photos", "photo_0.jpg"),
                                           "-crop", "400x296+0+0", "-progressive"),
    }
    for f in ("odd_7x5.jpg", "tiny_1x1.jpg", "noninterleaved.jpg"):
        jpegs[f[:-4]] = open(os.path.join(VALID, f), "rb").read()
    jpegs["photo_5"] = open(os.path.join(ROOT, "testdata", "photos", "photo_5.jpg"), "rb").read()
    # Damaged copies: the strict checks (a cropped decode still reads to the end) meet them.
    base = jpegs["baseline_420"]
    start = scan_start(base)
    mid = (start + len(base)) // 2
    jpegs["damaged_bitflip_420"] = base[:mid] + bytes([base[mid] ^ 0x10]) + base[mid + 1:]
    jpegs["damaged_cut_420"] = base[: start + (len(base) - start) * 7 // 10]
    jpegs["damaged_no_eoi_420"] = base[:-2]
    late = start + (len(base) - start) * 9 // 10
    jpegs["damaged_bitflip_late_420"] = base[:late] + bytes([base[late] ^ 0x01]) + base[late + 1:]
    prog = jpegs["progressive_420"]
    jpegs["damaged_cut_progressive_420"] = prog[: len(prog) * 6 // 10]
    rst = bytearray(jpegs["restart_420"])
    at = rst.find(b"\xff\xd1", scan_start(bytes(rst)))
    rst[at + 1] = 0xD5  # RST1 becomes RST5: a restart marker out of sequence
    jpegs["damaged_restart_marker_420"] = bytes(rst)
    for name in os.listdir(IMAGES):
        if name.endswith(".jpg") or (name.startswith("png_") and name.endswith(".png")):
            os.remove(os.path.join(IMAGES, name))
    for name, data in jpegs.items():
        with open(os.path.join(IMAGES, name + ".jpg"), "wb") as f:
            f.write(data)
    for name, data in png_images().items():
        with open(os.path.join(IMAGES, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    if "--images" in sys.argv[1:]:
        images()
    decode_seeds()
