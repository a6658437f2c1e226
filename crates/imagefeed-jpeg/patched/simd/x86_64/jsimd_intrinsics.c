/*
 * jsimd_intrinsics.c
 *
 * imagefeed: libjpeg-turbo's SIMD dispatcher for x86-64 (the functions
 * src/jsimd.h and src/jsimddct.h declare) over the routines in jidct-sse2.c,
 * which are C intrinsics built by the C compiler, so that no nasm is needed.
 * It takes the place of simd/x86_64/jsimd.c and its nasm files in the default
 * build, and offers only what the decoder's paths in imagefeed use: the
 * inverse DCTs at the scales 1/1 (islow), 1/2 (4x4, also two blocks at a time
 * with AVX2 in src/jdcoefct.c) and 1/4 (2x2); at 1/8 libjpeg-turbo's 1x1 IDCT
 * is scalar C in every build; and YCbCr -> RGB colour conversion with AVX2
 * (jdcolor-avx2.c) and 4:2:0 and 4:2:2 chroma upsampling with SSE2
 * (jdsample-sse2.c), for decodes to RGB such as crops.  Every other
 * jsimd_can_*() says no, so the rest and the encoder run libjpeg-turbo's C,
 * whose output is the SIMD code's (libjpeg-turbo's own tests expect the same
 * results from both for these algorithms).  The stubs below them are never
 * called.
 *
 * As upstream's dispatcher, the CPU is asked once a thread, and
 * JSIMD_FORCESSE2=1 (no AVX2) and JSIMD_FORCENONE=1 (no SIMD) are read from
 * the environment.
 */

#define JPEG_INTERNALS
#include "../../src/jinclude.h"
#include "../../src/jpeglib.h"
#include "../../src/jsimd.h"
#include "../../src/jdct.h"
#include "../../src/jsimddct.h"
#include "../jsimd.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

EXTERN(void) imagefeed_idct_islow_sse2(void *dct_table, JCOEFPTR coef_block,
                                       JSAMPARRAY output_buf,
                                       JDIMENSION output_col);
EXTERN(void) imagefeed_idct_4x4_sse2(void *dct_table, JCOEFPTR coef_block,
                                     JSAMPARRAY output_buf,
                                     JDIMENSION output_col);
EXTERN(void) imagefeed_idct_2x2_sse2(void *dct_table, JCOEFPTR coef_block,
                                     JSAMPARRAY output_buf,
                                     JDIMENSION output_col);
EXTERN(int) imagefeed_jpeg_disabled_paths(void);

static THREAD_LOCAL unsigned int simd_support = ~0U;

/* jsimdcpu.asm's jpeg_simd_cpu_support(): SSE2 always (x86-64), AVX2 where
 * the CPU has it (CPUID 7: EBX bit 5) and the OS saves the YMM registers
 * (CPUID 1: ECX bits 27, OSXSAVE, and 28, AVX; XGETBV: XCR0 bits 1 and 2).
 */
static unsigned int
cpu_support(void)
{
  unsigned int a, b, c, d, flags = JSIMD_SSE2;

  if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1U << 27)) &&
      (c & (1U << 28))) {
    unsigned int xcr0_lo, xcr0_hi;

    __asm__("xgetbv" : "=a" (xcr0_lo), "=d" (xcr0_hi) : "c" (0));
    if ((xcr0_lo & 6) == 6 && __get_cpuid_max(0, NULL) >= 7) {
      __cpuid_count(7, 0, a, b, c, d);
      if (b & (1U << 5))
        flags |= JSIMD_AVX2;
    }
  }
  return flags;
}

static int
env_is_1(const char *name)
{
  const char *v = getenv(name);

  return v != NULL && !strcmp(v, "1");
}

LOCAL(void)
init_simd(void)
{
  if (simd_support != ~0U)
    return;
  simd_support = cpu_support();
  if (env_is_1("JSIMD_FORCESSE2"))
    simd_support &= JSIMD_SSE2;
  if (env_is_1("JSIMD_FORCENONE"))
    simd_support = 0;
}

/* The routines are written for these types and this block size only, as
 * upstream's jsimd_can_idct_*() check.
 */
LOCAL(int)
idct_types_fit(void)
{
  return DCTSIZE == 8 && sizeof(JCOEF) == 2 && BITS_IN_JSAMPLE == 8 &&
         sizeof(JDIMENSION) == 4 && sizeof(ISLOW_MULT_TYPE) == 2;
}

GLOBAL(int)
jsimd_can_idct_islow(void)
{
  init_simd();
  return idct_types_fit() && (simd_support & JSIMD_SSE2) != 0;
}

GLOBAL(int)
jsimd_can_idct_4x4(void)
{
  init_simd();
  return idct_types_fit() && (simd_support & JSIMD_SSE2) != 0;
}

GLOBAL(int)
jsimd_can_idct_2x2(void)
{
  init_simd();
  return idct_types_fit() && (simd_support & JSIMD_SSE2) != 0;
}

GLOBAL(void)
jsimd_idct_islow(j_decompress_ptr cinfo, jpeg_component_info *compptr,
                 JCOEFPTR coef_block, JSAMPARRAY output_buf,
                 JDIMENSION output_col)
{
  (void)cinfo;
  imagefeed_idct_islow_sse2(compptr->dct_table, coef_block, output_buf,
                            output_col);
}

GLOBAL(void)
jsimd_idct_4x4(j_decompress_ptr cinfo, jpeg_component_info *compptr,
               JCOEFPTR coef_block, JSAMPARRAY output_buf,
               JDIMENSION output_col)
{
  (void)cinfo;
  imagefeed_idct_4x4_sse2(compptr->dct_table, coef_block, output_buf,
                          output_col);
}

GLOBAL(void)
jsimd_idct_2x2(j_decompress_ptr cinfo, jpeg_component_info *compptr,
               JCOEFPTR coef_block, JSAMPARRAY output_buf,
               JDIMENSION output_col)
{
  (void)cinfo;
  imagefeed_idct_2x2_sse2(compptr->dct_table, coef_block, output_buf,
                          output_col);
}

EXTERN(void) imagefeed_ycc_rgb_convert_avx2(j_decompress_ptr cinfo,
                                            JSAMPIMAGE input_buf,
                                            JDIMENSION input_row,
                                            JSAMPARRAY output_buf,
                                            int num_rows);

/* YCbCr -> RGB (every RGB output format) with AVX2 (jdcolor-avx2.c); without
 * it, libjpeg-turbo's C conversion
 */
GLOBAL(int)
jsimd_can_ycc_rgb(void)
{
  init_simd();
  return BITS_IN_JSAMPLE == 8 && (simd_support & JSIMD_AVX2) != 0;
}

GLOBAL(void)
jsimd_ycc_rgb_convert(j_decompress_ptr cinfo, JSAMPIMAGE input_buf,
                      JDIMENSION input_row, JSAMPARRAY output_buf,
                      int num_rows)
{
  imagefeed_ycc_rgb_convert_avx2(cinfo, input_buf, input_row, output_buf,
                                 num_rows);
}

EXTERN(void) imagefeed_h2v2_fancy_upsample_sse2(j_decompress_ptr cinfo,
                                                jpeg_component_info *compptr,
                                                JSAMPARRAY input_data,
                                                JSAMPARRAY *output_data_ptr);
EXTERN(void) imagefeed_h2v1_fancy_upsample_sse2(j_decompress_ptr cinfo,
                                                jpeg_component_info *compptr,
                                                JSAMPARRAY input_data,
                                                JSAMPARRAY *output_data_ptr);

/* Fancy upsampling of 4:2:0 and 4:2:2 chroma (jdsample-sse2.c) */
GLOBAL(int)
jsimd_can_h2v2_fancy_upsample(void)
{
  init_simd();
  return BITS_IN_JSAMPLE == 8 && (simd_support & JSIMD_SSE2) != 0;
}

GLOBAL(int)
jsimd_can_h2v1_fancy_upsample(void)
{
  init_simd();
  return BITS_IN_JSAMPLE == 8 && (simd_support & JSIMD_SSE2) != 0;
}

GLOBAL(void)
jsimd_h2v2_fancy_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr,
                          JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  imagefeed_h2v2_fancy_upsample_sse2(cinfo, compptr, input_data,
                                     output_data_ptr);
}

GLOBAL(void)
jsimd_h2v1_fancy_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr,
                          JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  imagefeed_h2v1_fancy_upsample_sse2(cinfo, compptr, input_data,
                                     output_data_ptr);
}

/* Whether src/jdcoefct.c may run two jsimd_idct_4x4() calls as one AVX2 pass
 * (its idct_4x4_pair_avx2(), bit for bit the two calls): where
 * jsimd_can_idct_4x4() holds and AVX2 is in use (JSIMD_FORCESSE2=1 turns it
 * off), unless a test turned it off (imagefeed_jpeg_disabled_paths(), bit 2).
 */
GLOBAL(int)
jsimd_imagefeed_can_idct_4x4_pair(void)
{
  if ((imagefeed_jpeg_disabled_paths() & 2) || !jsimd_can_idct_4x4())
    return 0;
  return (simd_support & JSIMD_AVX2) != 0;
}

/* What the default build does not offer (see the top of this file) */

GLOBAL(int)
jsimd_can_rgb_ycc(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_rgb_gray(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_ycc_rgb565(void)
{
  return 0;
}

GLOBAL(int)
jsimd_c_can_null_convert(void)
{
  return 0;
}

GLOBAL(void)
jsimd_rgb_ycc_convert(j_compress_ptr cinfo, JSAMPARRAY input_buf, JSAMPIMAGE output_buf, JDIMENSION output_row, int num_rows)
{
  (void)cinfo;
  (void)input_buf;
  (void)output_buf;
  (void)output_row;
  (void)num_rows;
}

GLOBAL(void)
jsimd_rgb_gray_convert(j_compress_ptr cinfo, JSAMPARRAY input_buf, JSAMPIMAGE output_buf, JDIMENSION output_row, int num_rows)
{
  (void)cinfo;
  (void)input_buf;
  (void)output_buf;
  (void)output_row;
  (void)num_rows;
}

GLOBAL(void)
jsimd_ycc_rgb565_convert(j_decompress_ptr cinfo, JSAMPIMAGE input_buf, JDIMENSION input_row, JSAMPARRAY output_buf, int num_rows)
{
  (void)cinfo;
  (void)input_buf;
  (void)input_row;
  (void)output_buf;
  (void)num_rows;
}

GLOBAL(void)
jsimd_c_null_convert(j_compress_ptr cinfo, JSAMPARRAY input_buf, JSAMPIMAGE output_buf, JDIMENSION output_row, int num_rows)
{
  (void)cinfo;
  (void)input_buf;
  (void)output_buf;
  (void)output_row;
  (void)num_rows;
}

GLOBAL(int)
jsimd_can_h2v2_downsample(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_h2v1_downsample(void)
{
  return 0;
}

GLOBAL(void)
jsimd_h2v2_downsample(j_compress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY output_data)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data;
}

GLOBAL(int)
jsimd_can_h2v2_smooth_downsample(void)
{
  return 0;
}

GLOBAL(void)
jsimd_h2v2_smooth_downsample(j_compress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY output_data)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data;
}

GLOBAL(void)
jsimd_h2v1_downsample(j_compress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY output_data)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data;
}

GLOBAL(int)
jsimd_can_h2v2_upsample(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_h2v1_upsample(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_int_upsample(void)
{
  return 0;
}

GLOBAL(void)
jsimd_h2v2_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data_ptr;
}

GLOBAL(void)
jsimd_h2v1_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data_ptr;
}

GLOBAL(void)
jsimd_int_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data_ptr;
}

GLOBAL(int)
jsimd_can_h1v2_fancy_upsample(void)
{
  return 0;
}

GLOBAL(void)
jsimd_h1v2_fancy_upsample(j_decompress_ptr cinfo, jpeg_component_info *compptr, JSAMPARRAY input_data, JSAMPARRAY *output_data_ptr)
{
  (void)cinfo;
  (void)compptr;
  (void)input_data;
  (void)output_data_ptr;
}

GLOBAL(int)
jsimd_can_h2v2_merged_upsample(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_h2v1_merged_upsample(void)
{
  return 0;
}

GLOBAL(void)
jsimd_h2v2_merged_upsample(j_decompress_ptr cinfo, JSAMPIMAGE input_buf, JDIMENSION in_row_group_ctr, JSAMPARRAY output_buf)
{
  (void)cinfo;
  (void)input_buf;
  (void)in_row_group_ctr;
  (void)output_buf;
}

GLOBAL(void)
jsimd_h2v1_merged_upsample(j_decompress_ptr cinfo, JSAMPIMAGE input_buf, JDIMENSION in_row_group_ctr, JSAMPARRAY output_buf)
{
  (void)cinfo;
  (void)input_buf;
  (void)in_row_group_ctr;
  (void)output_buf;
}

GLOBAL(int)
jsimd_can_huff_encode_one_block(void)
{
  return 0;
}

GLOBAL(JOCTET *)
jsimd_huff_encode_one_block(void *state, JOCTET *buffer, JCOEFPTR block, int last_dc_val, c_derived_tbl *dctbl, c_derived_tbl *actbl)
{
  (void)state;
  (void)block;
  (void)last_dc_val;
  (void)dctbl;
  (void)actbl;
  return buffer;
}

GLOBAL(int)
jsimd_can_encode_mcu_AC_first_prepare(void)
{
  return 0;
}

GLOBAL(void)
jsimd_encode_mcu_AC_first_prepare(const JCOEF *block, const int *jpeg_natural_order_start, int Sl, int Al, UJCOEF *values, size_t *zerobits)
{
  (void)block;
  (void)jpeg_natural_order_start;
  (void)Sl;
  (void)Al;
  (void)values;
  (void)zerobits;
}

GLOBAL(int)
jsimd_can_encode_mcu_AC_refine_prepare(void)
{
  return 0;
}

GLOBAL(int)
jsimd_encode_mcu_AC_refine_prepare(const JCOEF *block, const int *jpeg_natural_order_start, int Sl, int Al, UJCOEF *absvalues, size_t *bits)
{
  (void)block;
  (void)jpeg_natural_order_start;
  (void)Sl;
  (void)Al;
  (void)absvalues;
  (void)bits;
  return 0;
}

GLOBAL(int)
jsimd_can_convsamp(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_convsamp_float(void)
{
  return 0;
}

GLOBAL(void)
jsimd_convsamp(JSAMPARRAY sample_data, JDIMENSION start_col, DCTELEM *workspace)
{
  (void)sample_data;
  (void)start_col;
  (void)workspace;
}

GLOBAL(void)
jsimd_convsamp_float(JSAMPARRAY sample_data, JDIMENSION start_col, FAST_FLOAT *workspace)
{
  (void)sample_data;
  (void)start_col;
  (void)workspace;
}

GLOBAL(int)
jsimd_can_fdct_islow(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_fdct_ifast(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_fdct_float(void)
{
  return 0;
}

GLOBAL(void)
jsimd_fdct_islow(DCTELEM *data)
{
  (void)data;
}

GLOBAL(void)
jsimd_fdct_ifast(DCTELEM *data)
{
  (void)data;
}

GLOBAL(void)
jsimd_fdct_float(FAST_FLOAT *data)
{
  (void)data;
}

GLOBAL(int)
jsimd_can_quantize(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_quantize_float(void)
{
  return 0;
}

GLOBAL(void)
jsimd_quantize(JCOEFPTR coef_block, DCTELEM *divisors, DCTELEM *workspace)
{
  (void)coef_block;
  (void)divisors;
  (void)workspace;
}

GLOBAL(void)
jsimd_quantize_float(JCOEFPTR coef_block, FAST_FLOAT *divisors, FAST_FLOAT *workspace)
{
  (void)coef_block;
  (void)divisors;
  (void)workspace;
}

GLOBAL(int)
jsimd_can_idct_6x6(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_idct_12x12(void)
{
  return 0;
}

GLOBAL(void)
jsimd_idct_6x6(j_decompress_ptr cinfo, jpeg_component_info *compptr, JCOEFPTR coef_block, JSAMPARRAY output_buf, JDIMENSION output_col)
{
  (void)cinfo;
  (void)compptr;
  (void)coef_block;
  (void)output_buf;
  (void)output_col;
}

GLOBAL(void)
jsimd_idct_12x12(j_decompress_ptr cinfo, jpeg_component_info *compptr, JCOEFPTR coef_block, JSAMPARRAY output_buf, JDIMENSION output_col)
{
  (void)cinfo;
  (void)compptr;
  (void)coef_block;
  (void)output_buf;
  (void)output_col;
}

GLOBAL(int)
jsimd_can_idct_ifast(void)
{
  return 0;
}

GLOBAL(int)
jsimd_can_idct_float(void)
{
  return 0;
}

GLOBAL(void)
jsimd_idct_ifast(j_decompress_ptr cinfo, jpeg_component_info *compptr, JCOEFPTR coef_block, JSAMPARRAY output_buf, JDIMENSION output_col)
{
  (void)cinfo;
  (void)compptr;
  (void)coef_block;
  (void)output_buf;
  (void)output_col;
}

GLOBAL(void)
jsimd_idct_float(j_decompress_ptr cinfo, jpeg_component_info *compptr, JCOEFPTR coef_block, JSAMPARRAY output_buf, JDIMENSION output_col)
{
  (void)cinfo;
  (void)compptr;
  (void)coef_block;
  (void)output_buf;
  (void)output_col;
}
