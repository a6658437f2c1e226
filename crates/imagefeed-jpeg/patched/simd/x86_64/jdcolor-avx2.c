/*
 * jdcolor-avx2.c
 *
 * imagefeed: YCbCr -> RGB colour conversion for x86-64 with AVX2 intrinsics,
 * built by the C compiler (upstream's is nasm: simd/x86_64/jdcolext-avx2.asm).
 * It computes exactly libjpeg-turbo's C conversion (src/jdcolor.c,
 * build_ycc_rgb_table() and ycc_rgb_convert()), which is also what its SIMD
 * code gives:
 *   R = Y + ((FIX(1.40200) * Cr' + ONE_HALF) >> 16)
 *   G = Y + ((-FIX(0.34414) * Cb' + ONE_HALF - FIX(0.71414) * Cr') >> 16)
 *   B = Y + ((FIX(1.77200) * Cb' + ONE_HALF) >> 16)
 * with Cb' = Cb - 128, Cr' = Cr - 128, arithmetic shifts, each clamped to
 * 0..255 (the C code's range_limit), in 32-bit lanes (the products stay below
 * 2^24).  Sixteen pixels a step for RGB output (3 bytes, R G B); every other
 * output format, and the last pixels of a row, take the same formula one pixel
 * at a time.
 */

#define JPEG_INTERNALS
#include "../../src/jinclude.h"
#include "../../src/jpeglib.h"

#include <immintrin.h>

#define SCALEBITS  16
#define ONE_HALF   ((JLONG)1 << (SCALEBITS - 1))
#define FIX(x)     ((JLONG)((x) * (1L << SCALEBITS) + 0.5))

static INLINE JSAMPLE
clamp255(int v)
{
  return (JSAMPLE)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pixel, the C code's arithmetic */
static INLINE void
ycc_rgb_pixel(int y, int cb, int cr, JSAMPLE *r, JSAMPLE *g, JSAMPLE *b)
{
  JLONG x_cb = cb - CENTERJSAMPLE, x_cr = cr - CENTERJSAMPLE;

  *r = clamp255(y + (int)((FIX(1.40200) * x_cr + ONE_HALF) >> SCALEBITS));
  *g = clamp255(y + (int)(((-FIX(0.34414)) * x_cb + ONE_HALF +
                           (-FIX(0.71414)) * x_cr) >> SCALEBITS));
  *b = clamp255(y + (int)((FIX(1.77200) * x_cb + ONE_HALF) >> SCALEBITS));
}

static const signed char shuffle_r[3][16] = {
  { 0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128, -128, 5 },
  { -128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128, 10, -128 },
  { -128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15, -128, -128 }
};
static const signed char shuffle_g[3][16] = {
  { -128, 0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128, -128 },
  { 5, -128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128, 10 },
  { -128, -128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15, -128 }
};
static const signed char shuffle_b[3][16] = {
  { -128, -128, 0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128 },
  { -128, 5, -128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128 },
  { 10, -128, -128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15 }
};

/* Eight pixels' R, G and B as 32-bit lanes */
__attribute__((target("avx2"))) static INLINE void
ycc_rgb8(const JSAMPLE *y, const JSAMPLE *cb, const JSAMPLE *cr, __m256i *r,
         __m256i *g, __m256i *b)
{
  const __m256i center = _mm256_set1_epi32(CENTERJSAMPLE);
  const __m256i half = _mm256_set1_epi32((int)ONE_HALF);
  __m256i vy = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)y));
  __m256i vcb = _mm256_sub_epi32(
    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb)), center);
  __m256i vcr = _mm256_sub_epi32(
    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cr)), center);

  *r = _mm256_add_epi32(vy, _mm256_srai_epi32(_mm256_add_epi32(
         _mm256_mullo_epi32(vcr, _mm256_set1_epi32((int)FIX(1.40200))), half),
         SCALEBITS));
  *g = _mm256_add_epi32(vy, _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(
         _mm256_mullo_epi32(vcb, _mm256_set1_epi32((int)-FIX(0.34414))), half),
         _mm256_mullo_epi32(vcr, _mm256_set1_epi32((int)-FIX(0.71414)))),
         SCALEBITS));
  *b = _mm256_add_epi32(vy, _mm256_srai_epi32(_mm256_add_epi32(
         _mm256_mullo_epi32(vcb, _mm256_set1_epi32((int)FIX(1.77200))), half),
         SCALEBITS));
}

/* Sixteen 32-bit lanes (two vectors of eight) as sixteen bytes, clamped to
 * 0..255 (packssdw, then packuswb; the values fit in 16 bits)
 */
__attribute__((target("avx2"))) static INLINE __m128i
to_bytes(__m256i lo, __m256i hi)
{
  __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
  __m128i a = _mm256_castsi256_si128(w), c = _mm256_extracti128_si256(w, 1);

  return _mm_packus_epi16(a, c);
}

__attribute__((target("avx2"))) static void
ycc_rgb_row_avx2(const JSAMPLE *y, const JSAMPLE *cb, const JSAMPLE *cr,
                 JSAMPLE *out, JDIMENSION width)
{
  JDIMENSION col = 0;

  for (; col + 16 <= width; col += 16) {
    __m256i r0, g0, b0, r1, g1, b1;
    __m128i r, g, b;
    int k;

    ycc_rgb8(y + col, cb + col, cr + col, &r0, &g0, &b0);
    ycc_rgb8(y + col + 8, cb + col + 8, cr + col + 8, &r1, &g1, &b1);
    r = to_bytes(r0, r1);
    g = to_bytes(g0, g1);
    b = to_bytes(b0, b1);
    for (k = 0; k < 3; k++) {
      __m128i v = _mm_or_si128(
        _mm_or_si128(_mm_shuffle_epi8(r, _mm_loadu_si128((const __m128i *)shuffle_r[k])),
                     _mm_shuffle_epi8(g, _mm_loadu_si128((const __m128i *)shuffle_g[k]))),
        _mm_shuffle_epi8(b, _mm_loadu_si128((const __m128i *)shuffle_b[k])));

      _mm_storeu_si128((__m128i *)(out + 3 * col + 16 * k), v);
    }
  }
  for (; col < width; col++)
    ycc_rgb_pixel(y[col], cb[col], cr[col], &out[3 * col], &out[3 * col + 1],
                  &out[3 * col + 2]);
}

/* jsimd_ycc_rgb_convert() for the AVX2 dispatcher: ycc_rgb_convert()'s loop */
GLOBAL(void)
imagefeed_ycc_rgb_convert_avx2(j_decompress_ptr cinfo, JSAMPIMAGE input_buf,
                               JDIMENSION input_row, JSAMPARRAY output_buf,
                               int num_rows)
{
  JDIMENSION width = cinfo->output_width, col;
  int cs = cinfo->out_color_space;
  int ri = rgb_red[cs], gi = rgb_green[cs], bi = rgb_blue[cs];
  int size = rgb_pixelsize[cs];
  int alpha = size == 4 ? 6 - ri - gi - bi : -1;

  while (--num_rows >= 0) {
    const JSAMPLE *y = input_buf[0][input_row];
    const JSAMPLE *cb = input_buf[1][input_row];
    const JSAMPLE *cr = input_buf[2][input_row];
    JSAMPLE *out = *output_buf++;

    input_row++;
    if (ri == 0 && gi == 1 && bi == 2 && size == 3) {
      ycc_rgb_row_avx2(y, cb, cr, out, width);
      continue;
    }
    for (col = 0; col < width; col++, out += size) {
      ycc_rgb_pixel(y[col], cb[col], cr[col], &out[ri], &out[gi], &out[bi]);
      /* The unused byte of a 4-byte format, as the C code sets it */
      if (alpha >= 0)
        out[alpha] = MAXJSAMPLE;
    }
  }
}
