/*
 * harness.c: the differential check's decodes in C, for a target where this
 * crate's Rust cannot be built (cross/aarch64.sh links it with the library
 * build.rs builds for aarch64, patched and stock, and compares the output).
 *
 *   harness FILE...
 *
 * Each file is decoded at the scales 1/1, 1/2, 1/4 and 1/8 to RGB, through a
 * cropping region (the middle half, its left edge on an iMCU column) and to
 * planes; one line a file: its name, a digest of every result (the error
 * text, or the pixels) and the results' length.  Planes are digested without
 * their MCU padding (libjpeg-turbo leaves it uninitialized).  Exits 2 if a
 * file cannot be read, else 0.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turbojpeg.h"

typedef unsigned long long u64;

/* FNV-1a, 64 bits, over everything a file's decodes give */
static u64 fnv(u64 h, const void *p, size_t n)
{
  const unsigned char *b = p;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

struct digest {
  u64 h;
  size_t len;
};

static void add(struct digest *d, const void *p, size_t n)
{
  d->h = fnv(d->h, p, n);
  d->len += n;
}

static void add_status(struct digest *d, tjhandle tj, int rc)
{
  char s[16];

  snprintf(s, sizeof(s), "rc %d:", rc);
  add(d, s, strlen(s));
  if (rc != 0) {
    const char *e = tj3GetErrorStr(tj);

    add(d, e, strlen(e));
  }
}

static void decode_all(const unsigned char *jpeg, size_t size,
                       struct digest *d)
{
  static const int denoms[4] = { 1, 2, 4, 8 };
  int k;

  for (k = 0; k < 4; k++) {
    tjhandle tj = tj3Init(TJINIT_DECOMPRESS);
    tjscalingfactor f = { 1, denoms[k] };
    int w, h, sub, cs, lossless, rc;
    unsigned char *rgb;

    if (tj == NULL)
      return;
    tj3Set(tj, TJPARAM_SCANLIMIT, 500);
    tj3Set(tj, TJPARAM_MAXPIXELS, 25000000);
    rc = tj3DecompressHeader(tj, jpeg, size);
    add_status(d, tj, rc);
    if (rc != 0) {
      tj3Destroy(tj);
      continue;
    }
    lossless = tj3Get(tj, TJPARAM_LOSSLESS);
    if (lossless == 1 && denoms[k] != 1) {
      tj3Destroy(tj);
      continue;
    }
    if (tj3SetScalingFactor(tj, f) != 0) {
      add_status(d, tj, -1);
      tj3Destroy(tj);
      continue;
    }
    w = TJSCALED(tj3Get(tj, TJPARAM_JPEGWIDTH), f);
    h = TJSCALED(tj3Get(tj, TJPARAM_JPEGHEIGHT), f);
    sub = tj3Get(tj, TJPARAM_SUBSAMP);
    cs = tj3Get(tj, TJPARAM_COLORSPACE);
    if (w <= 0 || h <= 0 || (size_t)w * h > 25000000) {
      tj3Destroy(tj);
      continue;
    }

    /* Whole image to RGB */
    rgb = calloc((size_t)w * h, 3);
    if (rgb == NULL)
      exit(3);
    rc = tj3Decompress8(tj, jpeg, size, rgb, w * 3, TJPF_RGB);
    add_status(d, tj, rc);
    add(d, rgb, (size_t)w * h * 3);

    /* A cropping region: the middle half, its left edge on an iMCU column */
    if (sub >= 0 && sub != TJSAMP_UNKNOWN && lossless != 1) {
      int mcu = TJSCALED(tjMCUWidth[sub], f);
      tjregion r;

      if (mcu < 1)
        mcu = 1;
      r.x = (w / 4) / mcu * mcu;
      r.y = h / 4;
      r.w = w / 2 > 0 ? w / 2 : 1;
      r.h = h / 2 > 0 ? h / 2 : 1;
      if (r.x + r.w > w)
        r.w = w - r.x;
      if (tj3SetCroppingRegion(tj, r) == 0) {
        memset(rgb, 0, (size_t)r.w * r.h * 3);
        rc = tj3Decompress8(tj, jpeg, size, rgb, r.w * 3, TJPF_RGB);
        add_status(d, tj, rc);
        add(d, rgb, (size_t)r.w * r.h * 3);
        tj3SetCroppingRegion(tj, TJUNCROPPED);
      } else {
        add_status(d, tj, -1);
      }
    }
    free(rgb);

    /* Planes (YCbCr and grey only), without the MCU padding */
    if ((cs == TJCS_YCbCr || cs == TJCS_GRAY) && sub != TJSAMP_UNKNOWN &&
        lossless != 1) {
      int n = sub == TJSAMP_GRAY ? 1 : 3, i;
      size_t len = tj3YUVBufSize(w, 1, h, sub);
      unsigned char *yuv = len ? calloc(len, 1) : NULL;

      if (yuv != NULL) {
        size_t off = 0;

        rc = tj3DecompressToYUV8(tj, jpeg, size, yuv, 1);
        add_status(d, tj, rc);
        for (i = 0; i < n; i++) {
          int pw = tj3YUVPlaneWidth(i, w, sub), ph = tj3YUVPlaneHeight(i, h, sub);
          int sx = tjMCUWidth[sub] / 8, sy = tjMCUHeight[sub] / 8;
          int cw = i == 0 ? w : (w + sx - 1) / sx;
          int ch = i == 0 ? h : (h + sy - 1) / sy;
          int row;

          for (row = 0; row < ch; row++)
            add(d, yuv + off + (size_t)row * pw, (size_t)cw);
          off += (size_t)pw * ph;
        }
        free(yuv);
      }
    }
    tj3Destroy(tj);
  }
}

int main(int argc, char **argv)
{
  int i;

  for (i = 1; i < argc; i++) {
    FILE *fp = fopen(argv[i], "rb");
    unsigned char *buf;
    long size;
    struct digest d = { 0xcbf29ce484222325ULL, 0 };

    if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (size = ftell(fp)) < 0 ||
        fseek(fp, 0, SEEK_SET) != 0) {
      fprintf(stderr, "harness: cannot read %s\n", argv[i]);
      return 2;
    }
    buf = malloc(size > 0 ? (size_t)size : 1);
    if (buf == NULL || fread(buf, 1, (size_t)size, fp) != (size_t)size) {
      fprintf(stderr, "harness: cannot read %s\n", argv[i]);
      return 2;
    }
    fclose(fp);
    decode_all(buf, (size_t)size, &d);
    printf("%s %016llx %zu\n", strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1
                                                      : argv[i], d.h, d.len);
    free(buf);
  }
  return 0;
}
