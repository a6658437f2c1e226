/*
 * jdsample-sse2.c
 *
 * imagefeed: "fancy" (triangle) chroma upsampling for 4:2:0 and 4:2:2 with
 * SSE2 intrinsics, built by the C compiler (upstream's is nasm:
 * simd/x86_64/jdsample-sse2.asm and jdsample-avx2.asm).  It computes exactly
 * libjpeg-turbo's C code (src/jdsample.c, h2v2_fancy_upsample() and
 * h2v1_fancy_upsample(); integer arithmetic on bytes, so every form of it
 * gives the same samples): sixteen input columns a step in 16-bit lanes, the
 * first and last columns and the columns left over one at a time as the C
 * code does them.  libjpeg-turbo calls these only for rows of more than two
 * columns.
 */

#define JPEG_INTERNALS
#include "../../src/jinclude.h"
#include "../../src/jpeglib.h"

#include <emmintrin.h>

static INLINE __m128i
load16(const JSAMPLE *p)
{
  return _mm_loadu_si128((const __m128i *)p);
}

/* The low (h = 0) or high eight bytes of x as 16-bit lanes */
static INLINE __m128i
widen(__m128i x, int h)
{
  return h ? _mm_unpackhi_epi8(x, _mm_setzero_si128())
           : _mm_unpacklo_epi8(x, _mm_setzero_si128());
}

/* One output row of h2v2_fancy_upsample(): in0 the nearest input row, in1 the
 * next nearest, w > 2 input columns
 */
static void
h2v2_row(const JSAMPLE *in0, const JSAMPLE *in1, JSAMPLE *out, JDIMENSION w)
{
  const __m128i three = _mm_set1_epi16(3);
  const __m128i eight = _mm_set1_epi16(8), seven = _mm_set1_epi16(7);
  int thiscolsum, lastcolsum, nextcolsum;
  JDIMENSION i;

  /* First column */
  thiscolsum = in0[0] * 3 + in1[0];
  nextcolsum = in0[1] * 3 + in1[1];
  out[0] = (JSAMPLE)((thiscolsum * 4 + 8) >> 4);
  out[1] = (JSAMPLE)((thiscolsum * 3 + nextcolsum + 7) >> 4);

  /* Columns 1 .. w - 2, sixteen at a time while i + 16 columns (and the one
   * after, read for the next column sums) are in the row
   */
  for (i = 1; i + 16 <= w - 1; i += 16) {
    __m128i p0 = load16(in0 + i - 1), c0 = load16(in0 + i), n0 = load16(in0 + i + 1);
    __m128i p1 = load16(in1 + i - 1), c1 = load16(in1 + i), n1 = load16(in1 + i + 1);
    __m128i even[2], odd[2], e, o;
    int h;

    for (h = 0; h < 2; h++) {
      __m128i last = _mm_add_epi16(_mm_mullo_epi16(widen(p0, h), three),
                                   widen(p1, h));
      __m128i cur = _mm_add_epi16(_mm_mullo_epi16(widen(c0, h), three),
                                  widen(c1, h));
      __m128i next = _mm_add_epi16(_mm_mullo_epi16(widen(n0, h), three),
                                   widen(n1, h));
      __m128i cur3 = _mm_mullo_epi16(cur, three);

      even[h] = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(cur3, last), eight), 4);
      odd[h] = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(cur3, next), seven), 4);
    }
    e = _mm_packus_epi16(even[0], even[1]);
    o = _mm_packus_epi16(odd[0], odd[1]);
    _mm_storeu_si128((__m128i *)(out + 2 * i), _mm_unpacklo_epi8(e, o));
    _mm_storeu_si128((__m128i *)(out + 2 * i + 16), _mm_unpackhi_epi8(e, o));
  }

  /* The columns left, as the C code's loop */
  lastcolsum = in0[i - 1] * 3 + in1[i - 1];
  thiscolsum = in0[i] * 3 + in1[i];
  for (; i < w - 1; i++) {
    nextcolsum = in0[i + 1] * 3 + in1[i + 1];
    out[2 * i] = (JSAMPLE)((thiscolsum * 3 + lastcolsum + 8) >> 4);
    out[2 * i + 1] = (JSAMPLE)((thiscolsum * 3 + nextcolsum + 7) >> 4);
    lastcolsum = thiscolsum;
    thiscolsum = nextcolsum;
  }

  /* Last column */
  out[2 * i] = (JSAMPLE)((thiscolsum * 3 + lastcolsum + 8) >> 4);
  out[2 * i + 1] = (JSAMPLE)((thiscolsum * 4 + 7) >> 4);
}

/* h2v2_fancy_upsample()'s loop over the row group */
GLOBAL(void)
imagefeed_h2v2_fancy_upsample_sse2(j_decompress_ptr cinfo,
                                   jpeg_component_info *compptr,
                                   JSAMPARRAY input_data,
                                   JSAMPARRAY *output_data_ptr)
{
  JSAMPARRAY output_data = *output_data_ptr;
  int inrow = 0, outrow = 0;

  while (outrow < cinfo->max_v_samp_factor) {
    /* The nearest input row, then the row above (v = 0) or below (v = 1) */
    h2v2_row(input_data[inrow], input_data[inrow - 1], output_data[outrow++],
             compptr->downsampled_width);
    h2v2_row(input_data[inrow], input_data[inrow + 1], output_data[outrow++],
             compptr->downsampled_width);
    inrow++;
  }
}

/* One row of h2v1_fancy_upsample(), w > 2 input columns */
static void
h2v1_row(const JSAMPLE *in, JSAMPLE *out, JDIMENSION w)
{
  const __m128i three = _mm_set1_epi16(3);
  const __m128i one = _mm_set1_epi16(1), two = _mm_set1_epi16(2);
  JDIMENSION i;

  /* First column */
  out[0] = in[0];
  out[1] = (JSAMPLE)((in[0] * 3 + in[1] + 2) >> 2);

  for (i = 1; i + 16 <= w - 1; i += 16) {
    __m128i p = load16(in + i - 1), c = load16(in + i), n = load16(in + i + 1);
    __m128i even[2], odd[2], e, o;
    int h;

    for (h = 0; h < 2; h++) {
      __m128i cur3 = _mm_mullo_epi16(widen(c, h), three);

      even[h] = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(cur3, widen(p, h)),
                                             one), 2);
      odd[h] = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(cur3, widen(n, h)),
                                            two), 2);
    }
    e = _mm_packus_epi16(even[0], even[1]);
    o = _mm_packus_epi16(odd[0], odd[1]);
    _mm_storeu_si128((__m128i *)(out + 2 * i), _mm_unpacklo_epi8(e, o));
    _mm_storeu_si128((__m128i *)(out + 2 * i + 16), _mm_unpackhi_epi8(e, o));
  }
  for (; i < w - 1; i++) {
    int invalue = in[i] * 3;

    out[2 * i] = (JSAMPLE)((invalue + in[i - 1] + 1) >> 2);
    out[2 * i + 1] = (JSAMPLE)((invalue + in[i + 1] + 2) >> 2);
  }

  /* Last column */
  out[2 * i] = (JSAMPLE)((in[i] * 3 + in[i - 1] + 1) >> 2);
  out[2 * i + 1] = in[i];
}

/* h2v1_fancy_upsample()'s loop over the row group */
GLOBAL(void)
imagefeed_h2v1_fancy_upsample_sse2(j_decompress_ptr cinfo,
                                   jpeg_component_info *compptr,
                                   JSAMPARRAY input_data,
                                   JSAMPARRAY *output_data_ptr)
{
  JSAMPARRAY output_data = *output_data_ptr;
  int inrow;

  for (inrow = 0; inrow < cinfo->max_v_samp_factor; inrow++)
    h2v1_row(input_data[inrow], output_data[inrow], compptr->downsampled_width);
}
