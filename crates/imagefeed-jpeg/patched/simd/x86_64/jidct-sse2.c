/*
 * jidct-sse2.c
 *
 * imagefeed: libjpeg-turbo's SSE2 inverse DCTs for x86-64 written with C
 * intrinsics, so that they build with the C compiler alone (upstream's are
 * nasm files: simd/x86_64/jidctint-sse2.asm and jidctred-sse2.asm).  Each
 * function computes what its nasm original computes, step for step and with
 * the same 16-bit wrapping and saturation, so the pixels are bit for bit the
 * same, also for damaged or hostile coefficients (where the SIMD code and
 * the scalar C in src/jidctint.c and src/jidctred.c can differ).  Which step
 * each line matches is named next to it; the constants are the originals'.
 *
 * Copyright of the algorithms and their SIMD form: see libjpeg-turbo's
 * LICENSE.md (the nasm originals are under the zlib licence); this
 * translation is under the same terms.
 */

#define JPEG_INTERNALS
#include "../../src/jinclude.h"
#include "../../src/jpeglib.h"
#include "../../src/jdct.h"

#include <emmintrin.h>

#define CONST_BITS  13
#define PASS1_BITS  2

#define F_0_211  1730
#define F_0_298  2446
#define F_0_390  3196
#define F_0_509  4176
#define F_0_541  4433
#define F_0_601  4926
#define F_0_720  5906
#define F_0_765  6270
#define F_0_850  6967
#define F_0_899  7373
#define F_1_061  8697
#define F_1_175  9633
#define F_1_272  10426
#define F_1_451  11893
#define F_1_501  12299
#define F_1_847  15137
#define F_1_961  16069
#define F_2_053  16819
#define F_2_172  17799
#define F_2_562  20995
#define F_3_072  25172
#define F_3_624  29692

/* Two 16-bit constants (a, b) in every 32-bit element, as the PW_* tables of
 * the nasm files (pmaddwd multiplies the pairs of an unpacked (x, y) vector)
 */
#define PW(a, b) \
  _mm_set1_epi32((int)(((unsigned int)(unsigned short)(b) << 16) | \
                       (unsigned short)(a)))

static INLINE __m128i
load8(const JCOEF *p)
{
  return _mm_loadu_si128((const __m128i *)p);
}

/* The 32-bit value of each 16-bit element of the low (hi = 0) or high half of
 * x, shifted left by `shift`: punpck{l,h}wd with zero below, then psrad by
 * 16 - shift.
 */
static INLINE __m128i
widen_shl(__m128i x, int hi, int shift)
{
  __m128i z = _mm_setzero_si128();
  __m128i w = hi ? _mm_unpackhi_epi16(z, x) : _mm_unpacklo_epi16(z, x);

  return _mm_sra_epi32(w, _mm_cvtsi32_si128(16 - shift));
}

static INLINE __m128i
descale(__m128i x, int n)
{
  return _mm_sra_epi32(_mm_add_epi32(x, _mm_set1_epi32(1 << (n - 1))),
                       _mm_cvtsi32_si128(n));
}

/* A 8x8 transpose of 16-bit elements */
static INLINE void
transpose8x16(__m128i r[8])
{
  __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);

  r[0] = _mm_unpacklo_epi64(b0, b4);
  r[1] = _mm_unpackhi_epi64(b0, b4);
  r[2] = _mm_unpacklo_epi64(b1, b5);
  r[3] = _mm_unpackhi_epi64(b1, b5);
  r[4] = _mm_unpacklo_epi64(b2, b6);
  r[5] = _mm_unpackhi_epi64(b2, b6);
  r[6] = _mm_unpacklo_epi64(b3, b7);
  r[7] = _mm_unpackhi_epi64(b3, b7);
}

/* One pass of jsimd_idct_islow_sse2() over eight vectors of eight 16-bit
 * values (the columns in pass 1, the rows in pass 2): the even part, the odd
 * part and the final output stage, descaled by `n` and packed with signed
 * saturation (packssdw) into out[0..7].
 */
static INLINE void
islow_pass(const __m128i in[8], __m128i out[8], int n)
{
  int h;
  /* Even part: in2/in6 rotated, in0 +- in4 in 16 bits (paddw/psubw) */
  __m128i z23lo = _mm_unpacklo_epi16(in[2], in[6]);
  __m128i z23hi = _mm_unpackhi_epi16(in[2], in[6]);
  __m128i s04 = _mm_add_epi16(in[0], in[4]);
  __m128i d04 = _mm_sub_epi16(in[0], in[4]);
  /* Odd part: z3 = in3 + in7, z4 = in1 + in5 (paddw) */
  __m128i z3 = _mm_add_epi16(in[3], in[7]);
  __m128i z4 = _mm_add_epi16(in[1], in[5]);
  __m128i z34lo = _mm_unpacklo_epi16(z3, z4);
  __m128i z34hi = _mm_unpackhi_epi16(z3, z4);
  __m128i i71lo = _mm_unpacklo_epi16(in[7], in[1]);
  __m128i i71hi = _mm_unpackhi_epi16(in[7], in[1]);
  __m128i i53lo = _mm_unpacklo_epi16(in[5], in[3]);
  __m128i i53hi = _mm_unpackhi_epi16(in[5], in[3]);
  __m128i lo[8], hi[8];

  for (h = 0; h < 2; h++) {
    __m128i z23 = h ? z23hi : z23lo, z34 = h ? z34hi : z34lo;
    __m128i i71 = h ? i71hi : i71lo, i53 = h ? i53hi : i53lo;
    __m128i tmp3 = _mm_madd_epi16(z23, PW(F_0_541 + F_0_765, F_0_541));
    __m128i tmp2 = _mm_madd_epi16(z23, PW(F_0_541, F_0_541 - F_1_847));
    __m128i tmp0 = widen_shl(s04, h, CONST_BITS);
    __m128i tmp1 = widen_shl(d04, h, CONST_BITS);
    __m128i tmp10 = _mm_add_epi32(tmp0, tmp3);
    __m128i tmp13 = _mm_sub_epi32(tmp0, tmp3);
    __m128i tmp11 = _mm_add_epi32(tmp1, tmp2);
    __m128i tmp12 = _mm_sub_epi32(tmp1, tmp2);
    __m128i z3m = _mm_madd_epi16(z34, PW(F_1_175 - F_1_961, F_1_175));
    __m128i z4m = _mm_madd_epi16(z34, PW(F_1_175, F_1_175 - F_0_390));
    __m128i o0 = _mm_add_epi32(_mm_madd_epi16(i71, PW(F_0_298 - F_0_899,
                                                      -F_0_899)), z3m);
    __m128i o3 = _mm_add_epi32(_mm_madd_epi16(i71, PW(-F_0_899,
                                                      F_1_501 - F_0_899)), z4m);
    __m128i o1 = _mm_add_epi32(_mm_madd_epi16(i53, PW(F_2_053 - F_2_562,
                                                      -F_2_562)), z4m);
    __m128i o2 = _mm_add_epi32(_mm_madd_epi16(i53, PW(-F_2_562,
                                                      F_3_072 - F_2_562)), z3m);
    __m128i *d = h ? hi : lo;

    d[0] = descale(_mm_add_epi32(tmp10, o3), n);
    d[7] = descale(_mm_sub_epi32(tmp10, o3), n);
    d[1] = descale(_mm_add_epi32(tmp11, o2), n);
    d[6] = descale(_mm_sub_epi32(tmp11, o2), n);
    d[2] = descale(_mm_add_epi32(tmp12, o1), n);
    d[5] = descale(_mm_sub_epi32(tmp12, o1), n);
    d[3] = descale(_mm_add_epi32(tmp13, o0), n);
    d[4] = descale(_mm_sub_epi32(tmp13, o0), n);
  }
  for (h = 0; h < 8; h++)
    out[h] = _mm_packs_epi32(lo[h], hi[h]);
}

/* jsimd_idct_islow_sse2() (simd/x86_64/jidctint-sse2.asm) */
GLOBAL(void)
imagefeed_idct_islow_sse2(void *dct_table, JCOEFPTR coef_block,
                          JSAMPARRAY output_buf, JDIMENSION output_col)
{
  const JCOEF *q = (const JCOEF *)dct_table;
  __m128i in[8], rows[8], bytes[4];
  int i;

  /* The zero column test: rows 1-7 all zero (a DC-only block).  Pass 1 then
   * gives each column its dequantized DC shifted left by PASS1_BITS in 16 bits
   * (psllw, which wraps where the full pass would saturate).
   */
  {
    __m128i any = _mm_setzero_si128();

    for (i = 1; i < 8; i++)
      any = _mm_or_si128(any, load8(coef_block + 8 * i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(any, _mm_setzero_si128())) ==
        0xFFFF) {
      __m128i dc = _mm_slli_epi16(_mm_mullo_epi16(load8(coef_block),
                                                  load8(q)), PASS1_BITS);
      __m128i l = _mm_unpacklo_epi16(dc, dc), h = _mm_unpackhi_epi16(dc, dc);

      /* After the transpose, vector c holds column c's value eight times */
      in[0] = _mm_shuffle_epi32(l, 0x00);
      in[1] = _mm_shuffle_epi32(l, 0x55);
      in[2] = _mm_shuffle_epi32(l, 0xAA);
      in[3] = _mm_shuffle_epi32(l, 0xFF);
      in[4] = _mm_shuffle_epi32(h, 0x00);
      in[5] = _mm_shuffle_epi32(h, 0x55);
      in[6] = _mm_shuffle_epi32(h, 0xAA);
      in[7] = _mm_shuffle_epi32(h, 0xFF);
      goto pass2;
    }
  }

  /* Pass 1: process columns (dequantized with pmullw, 16 bits) */
  for (i = 0; i < 8; i++)
    in[i] = _mm_mullo_epi16(load8(coef_block + 8 * i), load8(q + 8 * i));
  islow_pass(in, rows, CONST_BITS - PASS1_BITS);
  transpose8x16(rows);
  for (i = 0; i < 8; i++)
    in[i] = rows[i];

pass2:
  /* Pass 2: process rows, then saturate to bytes (packsswb) and re-centre
   * (paddb CENTERJSAMPLE)
   */
  islow_pass(in, rows, CONST_BITS + PASS1_BITS + 3);
  transpose8x16(rows);
  for (i = 0; i < 4; i++)
    bytes[i] = _mm_add_epi8(_mm_packs_epi16(rows[2 * i], rows[2 * i + 1]),
                            _mm_set1_epi8((char)CENTERJSAMPLE));
  for (i = 0; i < 4; i++) {
    _mm_storel_epi64((__m128i *)(output_buf[2 * i] + output_col), bytes[i]);
    _mm_storel_epi64((__m128i *)(output_buf[2 * i + 1] + output_col),
                     _mm_srli_si128(bytes[i], 8));
  }
}

static INLINE void
store4(JSAMPLE *p, __m128i v)
{
  int x = _mm_cvtsi128_si32(v);

  memcpy(p, &x, 4);
}

/* jsimd_idct_4x4_sse2() (simd/x86_64/jidctred-sse2.asm); src/jdcoefct.c's
 * idct_4x4_pair_avx2() is the same computation on two blocks
 */
GLOBAL(void)
imagefeed_idct_4x4_sse2(void *dct_table, JCOEFPTR ca, JSAMPARRAY outa,
                        JDIMENSION cola)
{
  const __m128i pw_f256_f089 = PW(F_2_562, F_0_899);
  const __m128i pw_f106_mf217 = PW(F_1_061, -F_2_172);
  const __m128i pw_mf060_mf050 = PW(-F_0_601, -F_0_509);
  const __m128i pw_f145_mf021 = PW(F_1_451, -F_0_211);
  const __m128i pw_f184_mf076 = PW(F_1_847, -F_0_765);
  const __m128i zero = _mm_setzero_si128();
  const JCOEF *qa16 = (const JCOEF *)dct_table;
  __m128i in1 = load8(ca + 8), in2 = load8(ca + 16);
  __m128i in3 = load8(ca + 24), in5 = load8(ca + 40);
  __m128i in6 = load8(ca + 48), in7 = load8(ca + 56);
  __m128i z0 = _mm_mullo_epi16(load8(ca), load8(qa16));
  __m128i col01, col23, col45, col67;
  __m128i ac = _mm_or_si128(_mm_or_si128(_mm_or_si128(in1, in2),
                                         _mm_or_si128(in3, in5)),
                            _mm_or_si128(in6, in7));

  if (_mm_movemask_epi8(_mm_cmpeq_epi8(ac, zero)) == 0xFFFF) {
    /* The shortcut: rows 1, 2, 3, 5, 6, 7 all 0 */
    __m128i s = _mm_slli_epi16(z0, PASS1_BITS);
    __m128i lo = _mm_unpacklo_epi16(s, s), hi = _mm_unpackhi_epi16(s, s);

    col01 = _mm_shuffle_epi32(lo, 0x50);
    col23 = _mm_shuffle_epi32(lo, 0xFA);
    col45 = _mm_shuffle_epi32(hi, 0x50);
    col67 = _mm_shuffle_epi32(hi, 0xFA);
  } else {
    /* Pass 1: process columns.  Odd part */
    __m128i x0 = _mm_mullo_epi16(in1, load8(qa16 + 8));
    __m128i x1 = _mm_mullo_epi16(in3, load8(qa16 + 24));
    __m128i x2 = _mm_mullo_epi16(in5, load8(qa16 + 40));
    __m128i x3 = _mm_mullo_epi16(in7, load8(qa16 + 56));
    __m128i x4 = _mm_unpacklo_epi16(x0, x1);
    __m128i x5 = _mm_unpackhi_epi16(x0, x1);
    __m128i x6 = _mm_unpacklo_epi16(x2, x3);
    __m128i x7 = _mm_unpackhi_epi16(x2, x3);
    __m128i tmp2L = _mm_add_epi32(_mm_madd_epi16(x6, pw_mf060_mf050),
                                  _mm_madd_epi16(x4, pw_f256_f089));
    __m128i tmp2H = _mm_add_epi32(_mm_madd_epi16(x7, pw_mf060_mf050),
                                  _mm_madd_epi16(x5, pw_f256_f089));
    __m128i tmp0L = _mm_add_epi32(_mm_madd_epi16(x6, pw_f145_mf021),
                                  _mm_madd_epi16(x4, pw_f106_mf217));
    __m128i tmp0H = _mm_add_epi32(_mm_madd_epi16(x7, pw_f145_mf021),
                                  _mm_madd_epi16(x5, pw_f106_mf217));
    /* Even part */
    __m128i z2 = _mm_mullo_epi16(in2, load8(qa16 + 16));
    __m128i z3 = _mm_mullo_epi16(in6, load8(qa16 + 48));
    __m128i t0L = _mm_srai_epi32(_mm_unpacklo_epi16(zero, z0),
                                 16 - CONST_BITS - 1);
    __m128i t0H = _mm_srai_epi32(_mm_unpackhi_epi16(zero, z0),
                                 16 - CONST_BITS - 1);
    __m128i t2L = _mm_madd_epi16(_mm_unpacklo_epi16(z2, z3), pw_f184_mf076);
    __m128i t2H = _mm_madd_epi16(_mm_unpackhi_epi16(z2, z3), pw_f184_mf076);
    __m128i tmp10L = _mm_add_epi32(t0L, t2L);
    __m128i tmp10H = _mm_add_epi32(t0H, t2H);
    __m128i tmp12L = _mm_sub_epi32(t0L, t2L);
    __m128i tmp12H = _mm_sub_epi32(t0H, t2H);
    __m128i data0, data1, data2, data3, y1, y2, y6, y7;
    const int p1 = CONST_BITS - PASS1_BITS + 1;

    /* Final output stage */
    data0 = _mm_packs_epi32(descale(_mm_add_epi32(tmp10L, tmp2L), p1),
                            descale(_mm_add_epi32(tmp10H, tmp2H), p1));
    data3 = _mm_packs_epi32(descale(_mm_sub_epi32(tmp10L, tmp2L), p1),
                            descale(_mm_sub_epi32(tmp10H, tmp2H), p1));
    data1 = _mm_packs_epi32(descale(_mm_add_epi32(tmp12L, tmp0L), p1),
                            descale(_mm_add_epi32(tmp12H, tmp0H), p1));
    data2 = _mm_packs_epi32(descale(_mm_sub_epi32(tmp12L, tmp0L), p1),
                            descale(_mm_sub_epi32(tmp12H, tmp0H), p1));
    /* Transpose */
    y1 = _mm_unpacklo_epi16(data0, data1);
    y6 = _mm_unpackhi_epi16(data0, data1);
    y2 = _mm_unpacklo_epi16(data2, data3);
    y7 = _mm_unpackhi_epi16(data2, data3);
    col01 = _mm_unpacklo_epi32(y1, y2);
    col23 = _mm_unpackhi_epi32(y1, y2);
    col45 = _mm_unpacklo_epi32(y6, y7);
    col67 = _mm_unpackhi_epi32(y6, y7);
  }
  {
    /* Pass 2: process rows */
    __m128i t0 = _mm_srai_epi32(_mm_unpacklo_epi16(zero, col01),
                                16 - CONST_BITS - 1);
    __m128i o1 = _mm_unpackhi_epi16(col01, col23);
    __m128i o2 = _mm_unpackhi_epi16(col45, col67);
    __m128i tmp2 = _mm_add_epi32(_mm_madd_epi16(o2, pw_mf060_mf050),
                                 _mm_madd_epi16(o1, pw_f256_f089));
    __m128i tmp0 = _mm_add_epi32(_mm_madd_epi16(o2, pw_f145_mf021),
                                 _mm_madd_epi16(o1, pw_f106_mf217));
    __m128i t2 = _mm_madd_epi16(_mm_unpacklo_epi16(col23, col67),
                                pw_f184_mf076);
    __m128i tmp10 = _mm_add_epi32(t0, t2), tmp12 = _mm_sub_epi32(t0, t2);
    __m128i p02, p13, a, b, r01, r23, px;
    const int p2 = CONST_BITS + PASS1_BITS + 3 + 1;

    p02 = _mm_packs_epi32(descale(_mm_add_epi32(tmp10, tmp2), p2),
                          descale(_mm_sub_epi32(tmp12, tmp0), p2));
    p13 = _mm_packs_epi32(descale(_mm_add_epi32(tmp12, tmp0), p2),
                          descale(_mm_sub_epi32(tmp10, tmp2), p2));
    a = _mm_unpacklo_epi16(p02, p13);
    b = _mm_unpackhi_epi16(p02, p13);
    r01 = _mm_unpacklo_epi32(a, b);
    r23 = _mm_unpackhi_epi32(a, b);
    px = _mm_add_epi8(_mm_packs_epi16(r01, r23),
                      _mm_set1_epi8((char)CENTERJSAMPLE));
    /* Four bytes a row, as the nasm code's movd stores */
    store4(outa[0] + cola, px);
    store4(outa[1] + cola, _mm_srli_si128(px, 4));
    store4(outa[2] + cola, _mm_srli_si128(px, 8));
    store4(outa[3] + cola, _mm_srli_si128(px, 12));
  }
}

/* jsimd_idct_2x2_sse2() (simd/x86_64/jidctred-sse2.asm) */
GLOBAL(void)
imagefeed_idct_2x2_sse2(void *dct_table, JCOEFPTR coef_block,
                        JSAMPARRAY output_buf, JDIMENSION output_col)
{
  const JCOEF *q = (const JCOEF *)dct_table;
  const __m128i pw_f362_mf127 = PW(F_3_624, -F_1_272);
  const __m128i pw_f085_mf072 = PW(F_0_850, -F_0_720);
  const __m128i hi16 = _mm_slli_epi32(_mm_set1_epi32(-1), 16);
  const int p1 = CONST_BITS - PASS1_BITS + 2;
  const int p2 = CONST_BITS + PASS1_BITS + 3 + 2;
  __m128i x0, x1, x2, x3, x4, x5, x6, x7;
  unsigned int w0, w1;

  /* Pass 1: process columns.  Odd part */
  x0 = _mm_mullo_epi16(load8(coef_block + 8), load8(q + 8));
  x1 = _mm_mullo_epi16(load8(coef_block + 24), load8(q + 24));
  x2 = _mm_mullo_epi16(load8(coef_block + 40), load8(q + 40));
  x3 = _mm_mullo_epi16(load8(coef_block + 56), load8(q + 56));
  x4 = _mm_madd_epi16(_mm_unpacklo_epi16(x0, x1), pw_f362_mf127);
  x5 = _mm_madd_epi16(_mm_unpacklo_epi16(x2, x3), pw_f085_mf072);
  x0 = _mm_or_si128(_mm_srli_epi32(x0, 16), _mm_and_si128(x1, hi16));
  x2 = _mm_or_si128(_mm_srli_epi32(x2, 16), _mm_and_si128(x3, hi16));
  x0 = _mm_madd_epi16(x0, pw_f362_mf127);
  x2 = _mm_madd_epi16(x2, pw_f085_mf072);
  x4 = _mm_add_epi32(x4, x5);           /* tmp0[col0 col1 **** col3] */
  x0 = _mm_add_epi32(x0, x2);           /* tmp0[col1 col3 col5 col7] */
  /* Even part */
  x6 = _mm_mullo_epi16(load8(coef_block), load8(q));
  x1 = _mm_and_si128(x6, hi16);
  x6 = _mm_srai_epi32(_mm_slli_epi32(x6, 16), 16 - CONST_BITS - 2);
  x1 = _mm_srai_epi32(x1, 16 - CONST_BITS - 2);
  /* Final output stage */
  x3 = _mm_sub_epi32(x6, x4);           /* data1[col0 ...] */
  x6 = _mm_add_epi32(x6, x4);           /* data0[col0 ...] */
  x5 = _mm_sub_epi32(x1, x0);           /* data1[col1 col3 col5 col7] */
  x1 = _mm_add_epi32(x1, x0);           /* data0[col1 col3 col5 col7] */
  x6 = _mm_unpacklo_epi32(x6, x3);      /* (A0 B0 ** **) */
  x7 = _mm_unpackhi_epi64(x1, x5);      /* (A5 A7 B5 B7) */
  x1 = _mm_unpacklo_epi64(x1, x5);      /* (A1 A3 B1 B3) */
  x6 = descale(x6, p1);
  x1 = descale(x1, p1);
  x7 = descale(x7, p1);

  /* Pass 2: process rows.  Odd part */
  x1 = _mm_packs_epi32(x1, x1);
  x7 = _mm_packs_epi32(x7, x7);
  x1 = _mm_add_epi32(_mm_madd_epi16(x1, pw_f362_mf127),
                     _mm_madd_epi16(x7, pw_f085_mf072));  /* tmp0 */
  /* Even part */
  x6 = _mm_slli_epi32(x6, CONST_BITS + 2);                /* tmp10 */
  /* Final output stage */
  x4 = _mm_sub_epi32(x6, x1);
  x6 = _mm_add_epi32(x6, x1);
  x6 = _mm_unpacklo_epi32(x6, x4);      /* (C0 D0 C1 D1) */
  x6 = descale(x6, p2);
  x6 = _mm_packs_epi32(x6, x6);
  x6 = _mm_packs_epi16(x6, x6);
  x6 = _mm_add_epi8(x6, _mm_set1_epi8((char)CENTERJSAMPLE));
  w0 = (unsigned int)_mm_extract_epi16(x6, 0);
  w1 = (unsigned int)_mm_extract_epi16(x6, 1);
  output_buf[0][output_col] = (JSAMPLE)(w0 & 0xFF);
  output_buf[0][output_col + 1] = (JSAMPLE)(w0 >> 8);
  output_buf[1][output_col] = (JSAMPLE)(w1 & 0xFF);
  output_buf[1][output_col + 1] = (JSAMPLE)(w1 >> 8);
}
