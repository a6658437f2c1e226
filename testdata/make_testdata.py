#!/usr/bin/env python3
"""Regenerate imagefeed's testdata/ folder (photos/, valid/, corrupt/, reference/).

Usage:
    apt-get download lomiri-wallpapers-16.04          # Debian bookworm: 20.04.0-2
    python3 testdata/make_testdata.py lomiri-wallpapers-16.04_20.04.0-2_all.deb
    # or, with the package already unpacked by `dpkg -x PKG.deb DIR`:
    python3 testdata/make_testdata.py DIR

Optional second argument: the output folder (default: the folder holding this script).

Needs: python3 with Pillow (with LittleCMS, i.e. PIL.ImageCms) and numpy; libjpeg-turbo-progs
(cjpeg, djpeg, jpegtran); imagemagick (convert; /usr/bin/convert is preferred when it exists); exiftool;
cwebp; dpkg (only when a .deb is given).

Why not gnome-backgrounds: Debian's gnome-backgrounds 43.1-1 contains no photographs at all (only
rendered / vector art: adwaita, blobs, drool, dune, field, grid, licorice, oceans, pixels,
symbolic, truchet, vnc, wood), so the photographs come from Debian's lomiri-wallpapers-16.04
(source package lomiri-wallpapers), whose debian/copyright gives a licence per file. See README.md.

Every step is deterministic for a given set of tool versions; the script ends with a verification
pass (it raises if any check fails) and prints its results.
"""
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image, ImageCms, ImageOps

PKG_DIR = "usr/share/backgrounds"
# (output name, file inside lomiri-wallpapers-16.04, long side in px of the re-encoded photo)
PHOTOS = [
    ("photo_0", "aitzgorri_by_Aitzol_Berasategi.jpg", 900),      # landscape 900x599
    ("photo_1", "life_by_Aitzol_Berasategi.jpg", 800),           # landscape 800x533
    ("photo_2", "friends_by_Aitzol_Berasategi.jpg", 720),        # portrait  479x720
    ("photo_3", "Wine_by_Jakkub_Mede.jpg", 853),                 # portrait  569x853
    ("photo_4", "Picture_1A_by_freespace.jpg", 640),             # landscape 640x504
    ("photo_5", "seeding_by_Clements_Engelhardt.jpg", 768),      # landscape 768x432
]

CONVERT = "/usr/bin/convert" if os.path.exists("/usr/bin/convert") else "convert"

# Pillow's exif_transpose applies, for EXIF orientation N, the transpose op OPS[N] to the stored
# pixels.  To make a file whose *displayed* image is U we store INVERSE[N](U).
OPS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
INVERSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def spec_display(stored, n):
    """EXIF 2.3 orientation semantics written independently of Pillow (numpy, array[y, x]):
    returns the displayed image for stored pixels `stored` with Orientation n."""
    a = stored
    if n == 1:
        return a
    if n == 2:  # row 0 = top, col 0 = right side  -> mirror horizontally
        return a[:, ::-1]
    if n == 3:  # row 0 = bottom, col 0 = right    -> rotate 180
        return a[::-1, ::-1]
    if n == 4:  # row 0 = bottom, col 0 = left     -> mirror vertically
        return a[::-1, :]
    if n == 5:  # row 0 = left, col 0 = top        -> transpose
        return a.transpose(1, 0, 2)
    if n == 6:  # row 0 = right, col 0 = top       -> rotate 90 deg clockwise
        return np.rot90(a, k=-1)
    if n == 7:  # row 0 = right, col 0 = bottom    -> transverse
        return a[::-1, ::-1].transpose(1, 0, 2)
    if n == 8:  # row 0 = left, col 0 = bottom     -> rotate 90 deg counter-clockwise
        return np.rot90(a, k=1)
    raise ValueError(n)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def cjpeg(img, out, *args):
    """Encode a Pillow RGB / L image with libjpeg-turbo's cjpeg."""
    suffix = ".pgm" if img.mode == "L" else ".ppm"
    with tempfile.NamedTemporaryFile(suffix=suffix) as t:
        img.save(t.name)
        run(["cjpeg", *args, "-outfile", out, t.name])


def exiftool(path, *args):
    run(["exiftool", "-q", "-q", "-overwrite_original", *args, path])


def djpeg_report(path):
    """Decode with djpeg (to a throw-away file); returns (exit code, stderr text)."""
    with tempfile.NamedTemporaryFile(suffix=".ppm") as t:
        p = subprocess.run(["djpeg", "-outfile", t.name, path], capture_output=True)
    return p.returncode, p.stderr.decode("utf-8", "replace").strip()


def segments(data):
    """Walk the marker segments of a JPEG up to the first SOS.
    Returns (list of (marker, offset_of_FF, total_length), offset where entropy data starts)."""
    assert data[:2] == b"\xff\xd8"
    segs, i = [], 2
    while True:
        assert data[i] == 0xFF, hex(i)
        while data[i + 1] == 0xFF:  # fill bytes
            i += 1
        m = data[i + 1]
        ln = int.from_bytes(data[i + 2:i + 4], "big")
        segs.append((m, i, ln + 2))
        i += 2 + ln
        if m == 0xDA:
            return segs, i


# dqt_dc255.jpg's flat squares: white, black and six saturated colours
DQT_SQUARES = [(255, 255, 255), (0, 0, 0), (230, 30, 30), (30, 200, 40), (20, 40, 220),
               (250, 220, 30), (200, 40, 200), (40, 210, 210)]


def dc_quant_255(data):
    """`data` with the DC entry (the first value) of every quantization table set to 255."""
    b = bytearray(data)
    for mk, off, ln in segments(b)[0]:
        if mk == 0xDB:
            i = off + 4
            while i < off + ln:
                if b[i] >> 4 == 0:  # 8-bit values
                    b[i + 1] = 255
                    i += 65
                else:  # 16-bit values
                    b[i + 1:i + 3] = (255).to_bytes(2, "big")
                    i += 129
    return bytes(b)


def mad(a, b):
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).mean())


def rgb_to_cmyk_gcr(img):
    """RGB -> CMYK with full grey-component replacement (so K is really used).  Pillow's own
    CMYK->RGB conversion, R = (255-C)(255-K)/255, inverts it up to rounding."""
    a = np.asarray(img.convert("RGB"), dtype=np.float64) / 255.0
    k = 1.0 - a.max(axis=2)
    d = np.where(k < 1.0, 1.0 - k, 1.0)
    cmy = (1.0 - a - k[..., None]) / d[..., None]
    cmyk = np.concatenate([cmy, k[..., None]], axis=2)
    return Image.fromarray(np.clip(np.rint(cmyk * 255), 0, 255).astype(np.uint8), "CMYK")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
    tmp = tempfile.mkdtemp(prefix="imagefeed-testdata-")
    try:
        if os.path.isfile(src):  # a .deb
            run(["dpkg", "-x", src, os.path.join(tmp, "pkg")])
            src = os.path.join(tmp, "pkg")
        bg = os.path.join(src, PKG_DIR)
        if not os.path.isdir(bg):
            bg = src  # allow pointing straight at the backgrounds folder
        build(bg, out, tmp)
        verify(out, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(bg, out, tmp):
    P = lambda *p: os.path.join(out, *p)
    for d in ("photos", "valid", "corrupt", "reference"):
        os.makedirs(P(d), exist_ok=True)

    # ---------------------------------------------------------------- photos/
    # m[i] = the resized master (RGB, lossless, in memory); photos/photo_i.jpg is its baseline
    # 4:2:0 q85 encoding.  All valid/ and corrupt/ files are cut from these masters.
    m, full = [], []
    for name, fname, long_side in PHOTOS:
        im = Image.open(os.path.join(bg, fname))
        im = ImageOps.exif_transpose(im).convert("RGB")  # (the originals carry no EXIF)
        full.append(im)
        w, h = im.size
        s = long_side / max(w, h)
        mi = im.resize((round(w * s), round(h * s)), Image.Resampling.LANCZOS)
        m.append(mi)
        cjpeg(mi, P("photos", name + ".jpg"), "-quality", "85", "-sample", "2x2")

    V = lambda n: P("valid", n)
    C = lambda n: P("corrupt", n)

    # ---------------------------------------------------------------- valid/
    base = m[0].crop((250, 100, 650, 400))                     # 400x300, photo_0
    cjpeg(base, V("baseline_420.jpg"), "-quality", "85", "-sample", "2x2")
    cjpeg(base, V("s422.jpg"), "-quality", "85", "-sample", "2x1")
    cjpeg(base, V("s444.jpg"), "-quality", "85", "-sample", "1x1")
    cjpeg(base, V("restart.jpg"), "-quality", "85", "-sample", "2x2", "-restart", "1")
    # baseline_420.jpg's coefficients (lossless transcode), one scan per colour component.
    scans = os.path.join(tmp, "noninterleaved.scans")
    with open(scans, "w") as f:
        f.write("0;\n1;\n2;\n")
    run(["jpegtran", "-scans", scans, "-outfile", V("noninterleaved.jpg"), V("baseline_420.jpg")])
    # The same coefficients, progressive: successive approximation over three refinement
    # levels, with a band split in the last (1-20, 21-63), and DC refined twice.
    scans = os.path.join(tmp, "progressive_sa.scans")
    with open(scans, "w") as f:
        f.write("0,1,2: 0-0, 0, 2;\n0: 1-5, 0, 3;\n0: 6-63, 0, 3;\n1: 1-63, 0, 2;\n"
                "2: 1-63, 0, 2;\n0: 1-63, 3, 2;\n0: 1-63, 2, 1;\n1: 1-63, 2, 1;\n"
                "2: 1-63, 2, 1;\n0,1,2: 0-0, 2, 1;\n0,1,2: 0-0, 1, 0;\n0: 1-20, 1, 0;\n"
                "0: 21-63, 1, 0;\n1: 1-63, 1, 0;\n2: 1-63, 1, 0;\n")
    run(["jpegtran", "-scans", scans, "-outfile", V("progressive_sa.jpg"), V("baseline_420.jpg")])

    prog = m[3].resize((320, 480), Image.Resampling.LANCZOS)    # photo_3, portrait
    cjpeg(prog, V("progressive.jpg"), "-quality", "85", "-progressive")
    # s444.jpg's coefficients, progressive (jpegtran's default script) with a restart marker
    # after every row of blocks in every scan.
    run(["jpegtran", "-progressive", "-restart", "1", "-outfile", V("progressive_restart.jpg"),
         V("s444.jpg")])
    # The 400x300 crop with eight flat colour squares (64x64, on the 16-px MCU grid, so their
    # blocks have no AC terms), q85 4:2:0, then the DC entry of both quantization tables set to
    # 255: a legal JPEG (8-bit tables hold 1-255) whose dequantized DC values overflow 16 bits,
    # in blocks with AC terms and without (libjpeg-turbo's SIMD 4x4 IDCT takes a shortcut for
    # the latter, which wraps such values where its full path saturates them).
    flat = base.copy()
    for k, colour in enumerate(DQT_SQUARES):
        x, y = 16 + (k % 4) * 96, 16 + (k // 4) * 144
        flat.paste(colour, (x, y, x + 64, y + 64))
    cjpeg(flat, os.path.join(tmp, "squares.jpg"), "-quality", "85", "-sample", "2x2")
    open(V("dqt_dc255.jpg"), "wb").write(dc_quant_255(open(os.path.join(tmp, "squares.jpg"), "rb").read()))

    gray = m[1].crop((200, 150, 560, 390)).convert("L")         # 360x240, photo_1
    cjpeg(gray, V("gray.jpg"), "-quality", "85")

    cm = m[4].resize((320, 252), Image.Resampling.LANCZOS)      # photo_4 (colourful brushes)
    cmyk = rgb_to_cmyk_gcr(cm)
    cmyk.save(V("cmyk.jpg"), quality=90)                        # Pillow -> libjpeg JCS_CMYK + Adobe APP14 (transform 0)
    tif = os.path.join(tmp, "cmyk.tif")
    cmyk.save(tif)
    # ImageMagick writes CMYK input as Adobe YCCK (APP14 transform=2).
    run([CONVERT, tif, "-strip", "-quality", "90", V("ycck.jpg")])

    icc_img = m[1].crop((0, 0, 400, 300))                       # photo_1
    srgb = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    # LittleCMS stamps the creation time into the header (bytes 24..35); pin it for reproducibility.
    assert srgb[36:40] == b"acsp" and not any(srgb[84:100])  # no profile-ID MD5 to fix up
    srgb[24:36] = b"".join(v.to_bytes(2, "big") for v in (2024, 1, 1, 0, 0, 0))
    srgb = bytes(srgb)
    icc_img.save(V("icc.jpg"), quality=85, icc_profile=srgb)

    ex = m[5].crop((0, 0, 480, 320))                            # photo_5
    cjpeg(ex, V("exif.jpg"), "-quality", "85")
    thumb = os.path.join(tmp, "thumb.jpg")
    cjpeg(ex.resize((160, 107), Image.Resampling.LANCZOS), thumb, "-quality", "75")
    comment = ("imagefeed test EXIF padding: this UserComment makes the APP1 segment large. " * 260)[:20000]
    exiftool(V("exif.jpg"),
             "-Make=imagefeed-testdata", "-Model=Synthetic EXIF",
             "-Software=make_testdata.py", "-Artist=Clemens Engelhardt",
             "-Copyright=CC0-1.0 (lomiri-wallpapers-16.04 seeding_by_Clements_Engelhardt.jpg)",
             "-ImageDescription=Dandelions (crop); EXIF with thumbnail for imagefeed tests",
             "-DateTimeOriginal=2018:06:01 19:30:00", "-CreateDate=2018:06:01 19:30:00",
             "-ExposureTime=1/250", "-FNumber=5.6", "-ISO=100", "-FocalLength=35",
             "-GPSLatitude=43.0", "-GPSLatitudeRef=N", "-GPSLongitude=2.0", "-GPSLongitudeRef=W",
             "-UserComment=" + comment, "-ThumbnailImage<=" + thumb)

    cjpeg(m[4].crop((270, 250, 271, 251)), V("tiny_1x1.jpg"), "-quality", "85")
    cjpeg(m[4].resize((7, 5), Image.Resampling.LANCZOS), V("odd_7x5.jpg"), "-quality", "85")
    w5 = full[5].resize((1200, 675), Image.Resampling.LANCZOS).crop((0, 250, 1200, 290))
    cjpeg(w5, V("wide_1200x40.jpg"), "-quality", "85")

    m[5].crop((400, 100, 700, 300)).save(V("rgb.png"))          # 300x200 RGB
    rgba = m[4].crop((0, 0, 256, 200)).convert("RGBA")          # 256x200 RGBA
    yy, xx = np.mgrid[0:200, 0:256]
    alpha = np.clip(255 - np.hypot(xx - 128, yy - 100) * 2.2, 0, 255).astype(np.uint8)
    alpha[:40, :40] = 0                                         # a fully transparent corner
    rgba.putalpha(Image.fromarray(alpha, "L"))
    rgba.save(V("rgba.png"))
    m[2].crop((100, 120, 300, 420)).convert("L").save(V("gray.png"))  # 200x300 L

    # EXIF orientation set.  U = 240x160 upright crop of photo_2 (a dog in a window; not symmetric).
    U = m[2].crop((120, 160, 360, 320))
    U.save(V("orient_upright.png"))
    for n in range(1, 9):
        stored = U if n == 1 else U.transpose(INVERSE[n])
        f = V(f"orient_{n}.jpg")
        cjpeg(stored, f, "-quality", "95", "-sample", "1x1")
        exiftool(f, "-n", f"-Orientation={n}")

    # ---------------------------------------------------------------- corrupt/
    valid = open(V("baseline_420.jpg"), "rb").read()
    open(C("empty.jpg"), "wb").close()
    open(C("truncated_half.jpg"), "wb").write(valid[: len(valid) // 2])
    open(C("truncated_header.jpg"), "wb").write(valid[:200])
    garbage = random.Random(0x1AA6EFEED).randbytes(4096)
    assert garbage[:2] != b"\xff\xd8"
    open(C("garbage.jpg"), "wb").write(garbage)
    open(C("html.jpg"), "w", newline="\n").write(
        "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body>\n"
        "<center><h1>404 Not Found</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n")

    m[0].resize((200, 133), Image.Resampling.LANCZOS).save(C("png_named.jpg"), format="PNG")
    wp = os.path.join(tmp, "w.png")
    m[1].resize((240, 160), Image.Resampling.LANCZOS).save(wp)
    run(["cwebp", "-quiet", "-q", "80", wp, "-o", C("webp_named.jpg")])
    (m[4].resize((160, 126), Image.Resampling.LANCZOS)
         .quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
         .save(C("gif_named.jpg"), format="GIF"))

    # bomb: a real 64x48 baseline JPEG whose SOF0 claims 65000x65000.
    small = os.path.join(tmp, "small.jpg")
    cjpeg(m[0].crop((300, 350, 364, 398)), small, "-quality", "85")
    b = bytearray(open(small, "rb").read())
    segs, _ = segments(b)
    sof = [o for (mk, o, _) in segs if mk == 0xC0]
    assert len(sof) == 1
    b[sof[0] + 5:sof[0] + 9] = (65000).to_bytes(2, "big") + (65000).to_bytes(2, "big")
    open(C("bomb_65000.jpg"), "wb").write(bytes(b))

    # bitflip: invert a 64-byte burst in the middle of the entropy-coded data of baseline_420.jpg.
    # Any resulting 0xFF is turned into 0xFE so the marker structure stays intact (pure data damage).
    _, scan = segments(valid)
    eoi = len(valid) - 2
    assert valid[eoi:] == b"\xff\xd9"
    b = bytearray(valid)
    start = scan + (eoi - scan) * 45 // 100
    for i in range(start, start + 64):
        v = b[i] ^ 0xFF
        b[i] = 0xFE if v == 0xFF else v
    open(C("bitflip.jpg"), "wb").write(bytes(b))

    # no_eoi: keep the headers and the first 70% of the entropy-coded data; drop the rest and FFD9.
    cut = scan + (eoi - scan) * 70 // 100
    while valid[cut - 1] == 0xFF:  # never end on half of a stuffed FF00 pair
        cut -= 1
    open(C("no_eoi.jpg"), "wb").write(valid[:cut])

    # ---------------------------------------------------------------- reference/
    for src in (P("photos", "photo_0.jpg"), V("progressive.jpg"), V("gray.jpg"), V("cmyk.jpg"),
                V("s444.jpg"), V("orient_6.jpg")):
        make_reference(src, P("reference", os.path.splitext(os.path.basename(src))[0] + "_160.png"))


def make_reference(src, dst):
    """The golden reference: exactly this, with Pillow."""
    with Image.open(src) as im:
        im = ImageOps.exif_transpose(im)
        im = im.convert("RGB")
        im = im.resize((160, 160), Image.BILINEAR)  # antialiased bilinear, stretch (no crop)
        im.save(dst)


def verify(out, tmp):
    P = lambda *p: os.path.join(out, *p)
    V = lambda n: P("valid", n)
    C = lambda n: P("corrupt", n)
    ok = []

    def check(cond, msg):
        if not cond:
            raise AssertionError(msg)
        ok.append(msg)

    def exif(path, *tags):
        r = run(["exiftool", "-s", "-s", "-s", "-n", *[f"-{t}" for t in tags], path])
        return r.stdout.decode().split("\n")[: len(tags)]

    # photos
    for name, _, long_side in PHOTOS:
        f = P("photos", name + ".jpg")
        im = Image.open(f)
        segs, _ = segments(open(f, "rb").read())
        check(im.format == "JPEG" and im.mode == "RGB" and max(im.size) == long_side
              and any(mk == 0xC0 for mk, _, _ in segs) and im.layer[0][1:3] == (2, 2)
              and im.layer[1][1:3] == (1, 1) and djpeg_report(f) == (0, ""),
              f"{name}.jpg {im.size} baseline SOF0 4:2:0, djpeg clean")
    check(any(Image.open(P("photos", n + ".jpg")).size[1] > Image.open(P("photos", n + ".jpg")).size[0]
              for n, _, _ in PHOTOS), "at least one portrait photo")

    def samp(f):
        return [(l[1], l[2]) for l in Image.open(f).layer]

    check(samp(V("baseline_420.jpg")) == [(2, 2), (1, 1), (1, 1)], "baseline_420 sampling 2x2,1x1,1x1")
    check(samp(V("s422.jpg")) == [(2, 1), (1, 1), (1, 1)], "s422 sampling 2x1,1x1,1x1")
    check(samp(V("s444.jpg")) == [(1, 1), (1, 1), (1, 1)], "s444 sampling 1x1,1x1,1x1")
    check(exif(V("progressive.jpg"), "EncodingProcess")[0] == "2", "progressive.jpg is SOF2 (progressive DCT)")
    g = Image.open(V("gray.jpg"))
    check(g.mode == "L" and len(g.layer) == 1, "gray.jpg has 1 component")
    for f, want in (("cmyk.jpg", "0"), ("ycck.jpg", "2")):
        comps, xform = exif(V(f), "ColorComponents", "ColorTransform")
        check(comps == "4" and xform == want, f"{f}: 4 components, Adobe ColorTransform={xform}")
        idf = run(["identify", "-format", "%[colorspace]", V(f)]).stdout.decode()
        check(idf == "CMYK", f"{f}: identify says {idf}")
    src_rgb = Image.open(V("cmyk.jpg")).convert("RGB")
    check(mad(Image.open(V("ycck.jpg")).convert("RGB"), src_rgb) < 4,
          f"ycck.jpg decodes like cmyk.jpg (MAD {mad(Image.open(V('ycck.jpg')).convert('RGB'), src_rgb):.2f})")
    rst = open(V("restart.jpg"), "rb").read()
    segs, scan = segments(rst)
    dri = [o for mk, o, _ in segs if mk == 0xDD]
    ri = int.from_bytes(rst[dri[0] + 4:dri[0] + 6], "big") if dri else 0
    n_rst = sum(1 for i in range(scan, len(rst) - 1) if rst[i] == 0xFF and 0xD0 <= rst[i + 1] <= 0xD7)
    check(dri and ri == 25 and n_rst == 18, f"restart.jpg: DRI interval {ri} MCUs (one MCU row), {n_rst} RSTn markers")
    ni = open(V("noninterleaved.jpg"), "rb").read()
    sof = [mk for mk, _, _ in segments(ni)[0] if 0xC0 <= mk <= 0xCF and mk not in (0xC4, 0xC8, 0xCC)]
    sos = [ni[i + 4] for i in range(len(ni) - 4) if ni[i] == 0xFF and ni[i + 1] == 0xDA]
    same = run(["djpeg", "-ppm", V("noninterleaved.jpg")]).stdout == run(["djpeg", "-ppm", V("baseline_420.jpg")]).stdout
    check(sof == [0xC0] and sos == [1, 1, 1] and same,
          f"noninterleaved.jpg: SOF0, scans of {sos} components, djpeg output identical to baseline_420.jpg: {same}")
    for prog, base, n_scans in (("progressive_sa.jpg", "baseline_420.jpg", 15),
                                ("progressive_restart.jpg", "s444.jpg", 10)):
        pj = open(V(prog), "rb").read()
        sof = [mk for mk, _, _ in segments(pj)[0] if 0xC0 <= mk <= 0xCF and mk not in (0xC4, 0xC8, 0xCC)]
        sos = pj.count(b"\xff\xda")
        n_rst = sum(pj.count(bytes([0xFF, 0xD0 + i])) for i in range(8))
        same = run(["djpeg", "-ppm", V(prog)]).stdout == run(["djpeg", "-ppm", V(base)]).stdout
        check(sof == [0xC2] and sos == n_scans and (n_rst > 0) == (prog == "progressive_restart.jpg") and same,
              f"{prog}: SOF2, {sos} scans, {n_rst} RSTn markers, djpeg output identical to {base}: {same}")
    dq = open(V("dqt_dc255.jpg"), "rb").read()
    tables = [(dq[o + 4:o + ln], mk) for mk, o, ln in segments(dq)[0] if mk == 0xDB]
    dc = [t[1] for t, _ in tables]
    y = np.asarray(Image.open(V("dqt_dc255.jpg")).convert("L"))
    check(dc == [255, 255] and all(t[0] >> 4 == 0 for t, _ in tables) and y.min() == 0 and y.max() == 255,
          f"dqt_dc255.jpg: two 8-bit quantization tables with DC entry {dc}, decodes to 0..255 "
          f"(Pillow: {y.min()}..{y.max()})")
    icc = Image.open(V("icc.jpg")).info.get("icc_profile")
    check(icc and ImageCms.getProfileDescription(ImageCms.ImageCmsProfile(io.BytesIO(icc))).strip() == "sRGB built-in",
          f"icc.jpg carries a {len(icc)}-byte sRGB ICC profile (APP2 ICC_PROFILE)")
    e = open(V("exif.jpg"), "rb").read()
    app1 = [ln for mk, _, ln in segments(e)[0] if mk == 0xE1]
    tl = exif(V("exif.jpg"), "ThumbnailLength")[0]
    check(app1 and app1[0] > 20000 and int(tl) > 1000,
          f"exif.jpg: APP1 Exif segment {app1[0]} bytes, embedded thumbnail {tl} bytes")
    for f, size in (("tiny_1x1.jpg", (1, 1)), ("odd_7x5.jpg", (7, 5)), ("wide_1200x40.jpg", (1200, 40))):
        check(Image.open(V(f)).size == size and djpeg_report(V(f)) == (0, ""), f"{f} is {size}, djpeg clean")
    for f, mode in (("rgb.png", "RGB"), ("rgba.png", "RGBA"), ("gray.png", "L")):
        check(Image.open(V(f)).mode == mode, f"{f} mode {mode}")
    for f in sorted(os.listdir(P("valid"))):
        if f.endswith(".jpg"):
            check(djpeg_report(V(f)) == (0, ""), f"djpeg decodes valid/{f} without warnings")

    # orientation
    U = Image.open(V("orient_upright.png")).convert("RGB")
    Ua = np.asarray(U)
    for n in range(1, 9):
        f = V(f"orient_{n}.jpg")
        tag = exif(f, "Orientation")[0]
        t = ImageOps.exif_transpose(Image.open(f)).convert("RGB")
        d_pil = mad(t, U) if t.size == (240, 160) else 999
        stored = np.asarray(Image.open(f).convert("RGB"))
        d_spec = mad(spec_display(stored, n), Ua) if spec_display(stored, n).shape == Ua.shape else 999
        im_out = run([CONVERT, f, "-auto-orient", "ppm:-"]).stdout
        im_img = Image.open(io.BytesIO(im_out)).convert("RGB")
        d_im = mad(im_img, U) if im_img.size == (240, 160) else 999
        check(tag == str(n) and t.size == (240, 160) and d_pil < 3 and d_spec < 3 and d_im < 3,
              f"orient_{n}.jpg: Orientation={tag}, stored {Image.open(f).size}, exif_transpose -> {t.size}, "
              f"MAD vs upright: Pillow {d_pil:.2f}, EXIF-spec numpy {d_spec:.2f}, ImageMagick -auto-orient {d_im:.2f}")

    # corrupt
    for f in sorted(os.listdir(P("corrupt"))):
        if f == "bomb_65000.jpg":
            continue
        rc, err = djpeg_report(C(f))
        check(rc != 0 or err, f"djpeg corrupt/{f}: rc={rc} {err.splitlines()[-1] if err else ''!r}")
    rc, err = djpeg_report(C("bitflip.jpg"))
    check("Corrupt JPEG data" in err, "bitflip.jpg: libjpeg reports corrupt data")
    check(Image.open(C("png_named.jpg")).format == "PNG", "png_named.jpg is a PNG")
    check(Image.open(C("webp_named.jpg")).format == "WEBP", "webp_named.jpg is a WebP")
    check(Image.open(C("gif_named.jpg")).format == "GIF", "gif_named.jpg is a GIF")
    wh = exif(C("bomb_65000.jpg"), "ImageWidth", "ImageHeight")
    try:
        Image.open(C("bomb_65000.jpg"))
        bomb = "opened"
    except Image.DecompressionBombError as ex:
        bomb = "DecompressionBombError"
    check(wh == ["65000", "65000"] and bomb == "DecompressionBombError" and os.path.getsize(C("bomb_65000.jpg")) < 4096,
          f"bomb_65000.jpg: SOF0 says {wh[0]}x{wh[1]}, {os.path.getsize(C('bomb_65000.jpg'))} bytes, Pillow raises {bomb}")
    ne = open(C("no_eoi.jpg"), "rb").read()
    check(not ne.endswith(b"\xff\xd9"), "no_eoi.jpg has no EOI")

    # references
    for r in sorted(os.listdir(P("reference"))):
        if r.endswith(".png"):
            im = Image.open(P("reference", r))
            check(im.size == (160, 160) and im.mode == "RGB", f"reference/{r} 160x160 RGB")

    print("\n".join("ok  " + s for s in ok))


if __name__ == "__main__":
    main()
