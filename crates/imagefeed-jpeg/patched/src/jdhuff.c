/*
 * jdhuff.c
 *
 * This file was part of the Independent JPEG Group's software:
 * Copyright (C) 1991-1997, Thomas G. Lane.
 * Lossless JPEG Modifications:
 * Copyright (C) 1999, Ken Murchison.
 * libjpeg-turbo Modifications:
 * Copyright (C) 2009-2011, 2016, 2018-2019, 2022, D. R. Commander.
 * Copyright (C) 2018, Matthias Räncker.
 * For conditions of distribution and use, see the accompanying README.ijg
 * file.
 *
 * This file contains Huffman entropy decoding routines.
 *
 * Much of the complexity here has to do with supporting input suspension.
 * If the data source module demands suspension, we want to be able to back
 * up to the start of the current MCU.  To do this, we copy state variables
 * into local working storage, and update them back to the permanent
 * storage only upon successful completion of an MCU.
 *
 * NOTE: All referenced figures are from
 * Recommendation ITU-T T.81 (1992) | ISO/IEC 10918-1:1994.
 */

#define JPEG_INTERNALS
#include "jinclude.h"
#include "jpeglib.h"
#include "jdhuff.h"             /* Declarations shared with jd*huff.c */
#include "jpegapicomp.h"
#include "jstdhuff.c"

/* imagefeed: # of bits of input the combined tables are indexed by */
#define FAST_AC_BITS  10

/* imagefeed: decode_mcu_fast_ac() hands its 64-bit bit buffer back in
 * get_buffer, so it is built only where get_buffer has 64 bits; elsewhere the
 * stock decode_mcu_fast() runs.
 */
#if BIT_BUF_SIZE == 64
#define IMAGEFEED_FAST_AC  1
#else
#define IMAGEFEED_FAST_AC  0
#endif


/*
 * Expanded entropy decoder object for Huffman decoding.
 *
 * The savable_state subrecord contains fields that change within an MCU,
 * but must not be updated permanently until we complete the MCU.
 */

typedef struct {
  int last_dc_val[MAX_COMPS_IN_SCAN]; /* last DC coef for each component */
} savable_state;

typedef struct {
  struct jpeg_entropy_decoder pub; /* public fields */

  /* These fields are loaded into local variables at start of each MCU.
   * In case of suspension, we exit WITHOUT updating them.
   */
  bitread_perm_state bitstate;  /* Bit buffer at start of MCU */
  savable_state saved;          /* Other state at start of MCU */

  /* These fields are NOT loaded into local working state. */
  unsigned int restarts_to_go;  /* MCUs left in this restart interval */

  /* Pointers to derived tables (these workspaces have image lifespan) */
  d_derived_tbl *dc_derived_tbls[NUM_HUFF_TBLS];
  d_derived_tbl *ac_derived_tbls[NUM_HUFF_TBLS];

  /* Precalculated info set up by start_pass for use in decode_mcu: */

  /* Pointers to derived tables to be used for each block within an MCU */
  d_derived_tbl *dc_cur_tbls[D_MAX_BLOCKS_IN_MCU];
  d_derived_tbl *ac_cur_tbls[D_MAX_BLOCKS_IN_MCU];
  /* Whether we care about the DC and AC coefficient values for each block */
  boolean dc_needed[D_MAX_BLOCKS_IN_MCU];
  boolean ac_needed[D_MAX_BLOCKS_IN_MCU];

  /* imagefeed: combined tables (see make_fast_ac() and make_fast_dc()), one
   * per AC and DC table, and the ones each block of an MCU uses.  use_fast_ac
   * is FALSE where a test turned the fast paths off (stock_huffman_requested()): then
   * decode_mcu() runs the stock decode_mcu_fast(), and the tables are not
   * built.
   */
  boolean use_fast_ac;
  int fast_ac[NUM_HUFF_TBLS][1 << FAST_AC_BITS];
  int fast_dc[NUM_HUFF_TBLS][1 << FAST_AC_BITS];
  const int *fast_ac_cur[D_MAX_BLOCKS_IN_MCU];
  /* imagefeed: pair tables (see make_pair_ac()), one per AC table, and the one
   * each block of an MCU uses */
  unsigned long long pair_ac[NUM_HUFF_TBLS][1 << FAST_AC_BITS];
  const unsigned long long *pair_ac_cur[D_MAX_BLOCKS_IN_MCU];
  const int *fast_dc_cur[D_MAX_BLOCKS_IN_MCU];
} huff_entropy_decoder;

typedef huff_entropy_decoder *huff_entropy_ptr;


/*
 * imagefeed: a combined AC table, indexed by the next FAST_AC_BITS bits of the
 * input.  An entry decodes a whole AC coefficient at once when its Huffman code
 * and its magnitude bits together fit in FAST_AC_BITS bits: bits 0-3 hold the
 * total length (code + magnitude bits), bits 4-7 are 0 (so the entry itself is
 * the shift that consumes those bits), bits 8-11 the run of zeros before the
 * coefficient, bits 16 and up its value (signed, never 0).  An end-of-block
 * code has value 0, run 0 and its code length.  0 means "not in the table":
 * the stock path decodes it (zero runs (ZRL), longer codes and larger
 * values).
 *
 * Filled like dtbl->lookup in jpeg_make_d_derived_tbl(), which has already
 * checked the table: each code of length l whose symbol has magnitude size s
 * with l + s <= FAST_AC_BITS gets, for each of its 2^s magnitude bit patterns,
 * the 2^(FAST_AC_BITS - l - s) entries that start with code + pattern.  The
 * codes are prefix-free, so no entry is filled twice, and no index passes
 * 2^FAST_AC_BITS.
 */

LOCAL(void)
make_fast_ac(const d_derived_tbl *dtbl, int *fast_ac)
{
  const JHUFF_TBL *htbl = dtbl->pub;
  int l, i, p = 0, ctr, lookbits;
  unsigned int code = 0;

  memset(fast_ac, 0, sizeof(int) * (1 << FAST_AC_BITS));
  for (l = 1; l <= FAST_AC_BITS; l++) {
    for (i = 1; i <= (int)htbl->bits[l]; i++, p++, code++) {
      /* code = the canonical code of huffval[p] (Figure C.2) */
      int sym = htbl->huffval[p], run = sym >> 4, size = sym & 15, v;

      if (sym == 0) {
        lookbits = (int)(code << (FAST_AC_BITS - l));
        for (ctr = 1 << (FAST_AC_BITS - l); ctr > 0; ctr--)
          fast_ac[lookbits++] = l;
      } else if (size != 0 && l + size <= FAST_AC_BITS) {
        for (v = 0; v < (1 << size); v++) {
          /* HUFF_EXTEND(v, size) */
          int value = v < (1 << (size - 1)) ? v - (1 << size) + 1 : v;

          lookbits = (int)(((code << size) | (unsigned int)v) <<
                           (FAST_AC_BITS - l - size));
          for (ctr = 1 << (FAST_AC_BITS - l - size); ctr > 0; ctr--)
            fast_ac[lookbits++] =
              (int)((unsigned int)value << 16) | (run << 8) | (l + size);
        }
      }
    }
    code <<= 1;
  }
}


/*
 * imagefeed: the same for a DC table: an entry holds the total length (code +
 * magnitude bits, never 0) in bits 0-3 and the difference (signed, may be 0)
 * in bits 16 and up; 0 means "not in the table".
 */

LOCAL(void)
make_fast_dc(const d_derived_tbl *dtbl, int *fast_dc)
{
  const JHUFF_TBL *htbl = dtbl->pub;
  int l, i, p = 0, ctr, lookbits;
  unsigned int code = 0;

  memset(fast_dc, 0, sizeof(int) * (1 << FAST_AC_BITS));
  for (l = 1; l <= FAST_AC_BITS; l++) {
    for (i = 1; i <= (int)htbl->bits[l]; i++, p++, code++) {
      int size = htbl->huffval[p], v;

      if (size > 15 || l + size > FAST_AC_BITS)
        continue;
      for (v = 0; v < (1 << size); v++) {
        /* HUFF_EXTEND(v, size), and 0 for size 0 */
        int value = size == 0 ? 0 :
                    v < (1 << (size - 1)) ? v - (1 << size) + 1 : v;

        lookbits = (int)(((code << size) | (unsigned int)v) <<
                         (FAST_AC_BITS - l - size));
        for (ctr = 1 << (FAST_AC_BITS - l - size); ctr > 0; ctr--)
          fast_dc[lookbits++] =
            (int)((unsigned int)value << 16) | (l + size);
      }
    }
    code <<= 1;
  }
}


/*
 * imagefeed: a pair table, from a combined AC table: for each FAST_AC_BITS
 * bits of input, what the combined table decodes there and, when the bits
 * left after it hold a whole second entry of the combined table (a
 * coefficient or an end of block), that one too.  An entry holds:
 *   bits 0-3    the bit count of both (bits 4-7 are 0, as in fast_ac)
 *   bits 8-11   the first coefficient's run of zeros
 *   bits 12-16  how far the second coefficient is past the first (1 + its run),
 *               0 if there is none
 *   PAIR_HAS2   a second entry is decoded (a coefficient or an end of block)
 *   bits 20-23  the first's bit count, for a pair (see decode_mcu_fast_ac())
 *   PAIR_EOB_AFTER   the block ends after this entry
 *   bits 32-47  the first coefficient's value
 *   bits 48-63  the second's, or the first's again when there is none (the
 *               second store then rewrites the first)
 * An end of block alone has its bit count and PAIR_EOB_AFTER only: run 0 and
 * value 0, so its two stores write 0 at the next position, where nothing has
 * been written.  That is harmless only where the block was zeroed before the
 * MCU was decoded, so the pair tables are used only in images of one scan,
 * whose blocks are decoded once, into zeroed memory (see use_pairs).  0 where
 * the combined table has 0.
 */
/* imagefeed: why every coefficient store of decode_mcu_fast_ac() is in
 * bounds.  Each store is (*block)[jpeg_natural_order[k]]: jpeg_natural_order[]
 * has DCTSIZE2 + 16 entries, each < DCTSIZE2, so the store is inside the block
 * whenever k <= DCTSIZE2 + 15, and the argument is about k alone.  A loop pass
 * starts with k <= DCTSIZE2 - 1.
 *   - A combined-table entry (fast_ac) adds its run, at most 15 (4 bits):
 *     k <= DCTSIZE2 + 14.
 *   - The stock path adds r = s >> 4 <= 15, or 15 for a ZRL: the same bound.
 *   - A pair entry: the first store is at pos = k + run1 <= DCTSIZE2 + 14.  The
 *     second is at pos + (bits 12-16), which is 1 + run2 <= 16 only when
 *     PAIR_HAS2 is set, and a pair with PAIR_HAS2 is taken only when
 *     pos < DCTSIZE2 - 1: then k <= DCTSIZE2 - 2 + 16.  Without PAIR_HAS2 the
 *     field is 0 (make_pair_ac() sets it only with PAIR_HAS2) and the second
 *     store is at pos again.
 * After a pass k grows by at least 1 and the loop ends at k >= DCTSIZE2, so a
 * pass never starts beyond DCTSIZE2 - 1.  IMAGEFEED_CHECK_ORDER() checks the
 * bound at every store where IMAGEFEED_JPEG_CHECKS is defined (the
 * differential harness builds it so, under AddressSanitizer and
 * UndefinedBehaviorSanitizer: crates/imagefeed-jpeg/diff/).
 */
#ifdef IMAGEFEED_JPEG_CHECKS
#include <stdio.h>
#include <stdlib.h>
#define IMAGEFEED_CHECK_ORDER(k) \
  do { \
    if ((unsigned int)(k) > DCTSIZE2 + 15) { \
      fprintf(stderr, "imagefeed: coefficient index %d out of bounds (%s:%d)\n", \
              (int)(k), __FILE__, __LINE__); \
      abort(); \
    } \
  } while (0)
#else
#define IMAGEFEED_CHECK_ORDER(k)  ((void)0)
#endif

#define PAIR_HAS2       (1ULL << 17)
#define PAIR_EOB_AFTER  (1ULL << 18)

/* the pair table of a scan that does not use pairs: every look-up misses */
static const unsigned long long no_pairs[1 << FAST_AC_BITS];

LOCAL(void)
make_pair_ac(const int *fast_ac, unsigned long long *pair)
{
  int i;

  for (i = 0; i < (1 << FAST_AC_BITS); i++) {
    int s1 = fast_ac[i], s2, len1, len2;
    unsigned long long e, v1, v2;

    if (!s1) {
      pair[i] = 0;
      continue;
    }
    len1 = s1 & 15;
    if (!(s1 >> 8)) {
      pair[i] = PAIR_EOB_AFTER | (unsigned long long)len1;
      continue;
    }
    v1 = (unsigned long long)(unsigned short)(s1 >> 16);
    v2 = v1;
    e = (unsigned long long)(s1 & 0xF0F);
    /* the entry the bits after the first decode to; with the first's bits
     * shifted out, the low len1 bits of the index are unknown (0 here), so it
     * counts only if its own bit count fits in what is known */
    s2 = fast_ac[(i << len1) & ((1 << FAST_AC_BITS) - 1)];
    len2 = s2 & 15;
    if (s2 && len1 + len2 <= FAST_AC_BITS) {
      e += (unsigned long long)len2;
      e |= PAIR_HAS2 | (unsigned long long)len1 << 20;
      if (!(s2 >> 8))
        e |= PAIR_EOB_AFTER;
      else {
        e |= (unsigned long long)(1 + ((s2 >> 8) & 15)) << 12;
        v2 = (unsigned long long)(unsigned short)(s2 >> 16);
      }
    }
    pair[i] = e | (v1 << 32) | (v2 << 48);
  }
}


/* imagefeed: the stock decoder where a test or benchmark asked for it
 * (imagefeed_jpeg_disabled_paths(), patched/imagefeed_hooks.c): the fast paths
 * are on unless a program turns them off through the Rust crate's
 * `testing::disable_fast_paths`, never through the environment.
 */

EXTERN(int) imagefeed_jpeg_disabled_paths(void);

LOCAL(boolean)
stock_huffman_requested(void)
{
  return (imagefeed_jpeg_disabled_paths() & 1) != 0;
}


/*
 * Initialize for a Huffman-compressed scan.
 */

METHODDEF(void)
start_pass_huff_decoder(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int ci, blkn, dctbl, actbl;
  d_derived_tbl **pdtbl;
  jpeg_component_info *compptr;

  /* Check that the scan parameters Ss, Se, Ah/Al are OK for sequential JPEG.
   * This ought to be an error condition, but we make it a warning because
   * there are some baseline files out there with all zeroes in these bytes.
   */
  if (cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 ||
      cinfo->Ah != 0 || cinfo->Al != 0)
    WARNMS(cinfo, JWRN_NOT_SEQUENTIAL);

  for (ci = 0; ci < cinfo->comps_in_scan; ci++) {
    compptr = cinfo->cur_comp_info[ci];
    dctbl = compptr->dc_tbl_no;
    actbl = compptr->ac_tbl_no;
    /* Compute derived values for Huffman tables */
    /* We may do this more than once for a table, but it's not expensive */
    pdtbl = (d_derived_tbl **)(entropy->dc_derived_tbls) + dctbl;
    jpeg_make_d_derived_tbl(cinfo, TRUE, dctbl, pdtbl);
    pdtbl = (d_derived_tbl **)(entropy->ac_derived_tbls) + actbl;
    jpeg_make_d_derived_tbl(cinfo, FALSE, actbl, pdtbl);
    /* Initialize DC predictions to 0 */
    entropy->saved.last_dc_val[ci] = 0;
  }

  /* Precalculate decoding info for each block in an MCU of this scan */
  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    ci = cinfo->MCU_membership[blkn];
    compptr = cinfo->cur_comp_info[ci];
    /* Precalculate which table to use for each block */
    entropy->dc_cur_tbls[blkn] = entropy->dc_derived_tbls[compptr->dc_tbl_no];
    entropy->ac_cur_tbls[blkn] = entropy->ac_derived_tbls[compptr->ac_tbl_no];
    /* Decide whether we really care about the coefficient values */
    if (compptr->component_needed) {
      entropy->dc_needed[blkn] = TRUE;
      /* we don't need the ACs if producing a 1/8th-size image */
      entropy->ac_needed[blkn] = (compptr->_DCT_scaled_size > 1);
    } else {
      entropy->dc_needed[blkn] = entropy->ac_needed[blkn] = FALSE;
    }
  }

  /* imagefeed: the combined tables of this scan's Huffman tables */
  entropy->use_fast_ac = IMAGEFEED_FAST_AC && !stock_huffman_requested();
  if (entropy->use_fast_ac) {
    int built = 0;
    /* Pairs store 0 after a block's last coefficient (see make_pair_ac()):
     * only where each block is decoded once, into zeroed memory.  In an image
     * of one scan that holds (the single-pass coefficient controller zeroes
     * every MCU; a full-image buffer starts zeroed, and a second scan is an
     * error); with more scans, a malformed file could decode a component
     * twice into the same blocks.
     */
    boolean use_pairs = !cinfo->inputctl->has_multiple_scans;

    for (ci = 0; ci < cinfo->comps_in_scan; ci++) {
      actbl = cinfo->cur_comp_info[ci]->ac_tbl_no;
      dctbl = cinfo->cur_comp_info[ci]->dc_tbl_no;
      /* each table once, when components share it */
      if (!(built & (1 << actbl))) {
        make_fast_ac(entropy->ac_derived_tbls[actbl], entropy->fast_ac[actbl]);
        if (use_pairs)
          make_pair_ac(entropy->fast_ac[actbl], entropy->pair_ac[actbl]);
      }
      if (!(built & (16 << dctbl)))
        make_fast_dc(entropy->dc_derived_tbls[dctbl], entropy->fast_dc[dctbl]);
      built |= (1 << actbl) | (16 << dctbl);
    }
    for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
      compptr = cinfo->cur_comp_info[cinfo->MCU_membership[blkn]];
      entropy->fast_ac_cur[blkn] = entropy->fast_ac[compptr->ac_tbl_no];
      entropy->pair_ac_cur[blkn] =
        use_pairs ? entropy->pair_ac[compptr->ac_tbl_no] : no_pairs;
      entropy->fast_dc_cur[blkn] = entropy->fast_dc[compptr->dc_tbl_no];
    }
  }

  /* Initialize bitread state variables */
  entropy->bitstate.bits_left = 0;
  entropy->bitstate.get_buffer = 0; /* unnecessary, but keeps Purify quiet */
  entropy->pub.insufficient_data = FALSE;

  /* Initialize restart counter */
  entropy->restarts_to_go = cinfo->restart_interval;
}


/*
 * Compute the derived values for a Huffman table.
 * This routine also performs some validation checks on the table.
 *
 * Note this is also used by jdphuff.c and jdlhuff.c.
 */

GLOBAL(void)
jpeg_make_d_derived_tbl(j_decompress_ptr cinfo, boolean isDC, int tblno,
                        d_derived_tbl **pdtbl)
{
  JHUFF_TBL *htbl;
  d_derived_tbl *dtbl;
  int p, i, l, si, numsymbols;
  int lookbits, ctr;
  char huffsize[257];
  unsigned int huffcode[257];
  unsigned int code;

  /* Note that huffsize[] and huffcode[] are filled in code-length order,
   * paralleling the order of the symbols themselves in htbl->huffval[].
   */

  /* Find the input Huffman table */
  if (tblno < 0 || tblno >= NUM_HUFF_TBLS)
    ERREXIT1(cinfo, JERR_NO_HUFF_TABLE, tblno);
  htbl =
    isDC ? cinfo->dc_huff_tbl_ptrs[tblno] : cinfo->ac_huff_tbl_ptrs[tblno];
  if (htbl == NULL)
    ERREXIT1(cinfo, JERR_NO_HUFF_TABLE, tblno);

  /* Allocate a workspace if we haven't already done so. */
  if (*pdtbl == NULL)
    *pdtbl = (d_derived_tbl *)
      (*cinfo->mem->alloc_small) ((j_common_ptr)cinfo, JPOOL_IMAGE,
                                  sizeof(d_derived_tbl));
  dtbl = *pdtbl;
  dtbl->pub = htbl;             /* fill in back link */

  /* Figure C.1: make table of Huffman code length for each symbol */

  p = 0;
  for (l = 1; l <= 16; l++) {
    i = (int)htbl->bits[l];
    if (i < 0 || p + i > 256)   /* protect against table overrun */
      ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    while (i--)
      huffsize[p++] = (char)l;
  }
  huffsize[p] = 0;
  numsymbols = p;

  /* Figure C.2: generate the codes themselves */
  /* We also validate that the counts represent a legal Huffman code tree. */

  code = 0;
  si = huffsize[0];
  p = 0;
  while (huffsize[p]) {
    while (((int)huffsize[p]) == si) {
      huffcode[p++] = code;
      code++;
    }
    /* code is now 1 more than the last code used for codelength si; but
     * it must still fit in si bits, since no code is allowed to be all ones.
     */
    if (((JLONG)code) >= (((JLONG)1) << si))
      ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    code <<= 1;
    si++;
  }

  /* Figure F.15: generate decoding tables for bit-sequential decoding */

  p = 0;
  for (l = 1; l <= 16; l++) {
    if (htbl->bits[l]) {
      /* valoffset[l] = huffval[] index of 1st symbol of code length l,
       * minus the minimum code of length l
       */
      dtbl->valoffset[l] = (JLONG)p - (JLONG)huffcode[p];
      p += htbl->bits[l];
      dtbl->maxcode[l] = huffcode[p - 1]; /* maximum code of length l */
    } else {
      dtbl->maxcode[l] = -1;    /* -1 if no codes of this length */
    }
  }
  dtbl->valoffset[17] = 0;
  dtbl->maxcode[17] = 0xFFFFFL; /* ensures jpeg_huff_decode terminates */

  /* Compute lookahead tables to speed up decoding.
   * First we set all the table entries to 0, indicating "too long";
   * then we iterate through the Huffman codes that are short enough and
   * fill in all the entries that correspond to bit sequences starting
   * with that code.
   */

  for (i = 0; i < (1 << HUFF_LOOKAHEAD); i++)
    dtbl->lookup[i] = (HUFF_LOOKAHEAD + 1) << HUFF_LOOKAHEAD;

  p = 0;
  for (l = 1; l <= HUFF_LOOKAHEAD; l++) {
    for (i = 1; i <= (int)htbl->bits[l]; i++, p++) {
      /* l = current code's length, p = its index in huffcode[] & huffval[]. */
      /* Generate left-justified code followed by all possible bit sequences */
      lookbits = huffcode[p] << (HUFF_LOOKAHEAD - l);
      for (ctr = 1 << (HUFF_LOOKAHEAD - l); ctr > 0; ctr--) {
        dtbl->lookup[lookbits] = (l << HUFF_LOOKAHEAD) | htbl->huffval[p];
        lookbits++;
      }
    }
  }

  /* Validate symbols as being reasonable.
   * For AC tables, we make no check, but accept all byte values 0..255.
   * For DC tables, we require the symbols to be in range 0..15 in lossy mode
   * and 0..16 in lossless mode.  (Tighter bounds could be applied depending on
   * the data depth and mode, but this is sufficient to ensure safe decoding.)
   */
  if (isDC) {
    for (i = 0; i < numsymbols; i++) {
      int sym = htbl->huffval[i];
      if (sym < 0 || sym > (cinfo->master->lossless ? 16 : 15))
        ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    }
  }
}


/*
 * Out-of-line code for bit fetching (shared with jdphuff.c and jdlhuff.c).
 * See jdhuff.h for info about usage.
 * Note: current values of get_buffer and bits_left are passed as parameters,
 * but are returned in the corresponding fields of the state struct.
 *
 * On most machines MIN_GET_BITS should be 25 to allow the full 32-bit width
 * of get_buffer to be used.  (On machines with wider words, an even larger
 * buffer could be used.)  However, on some machines 32-bit shifts are
 * quite slow and take time proportional to the number of places shifted.
 * (This is true with most PC compilers, for instance.)  In this case it may
 * be a win to set MIN_GET_BITS to the minimum value of 15.  This reduces the
 * average shift distance at the cost of more calls to jpeg_fill_bit_buffer.
 */

#ifdef SLOW_SHIFT_32
#define MIN_GET_BITS  15        /* minimum allowable value */
#else
#define MIN_GET_BITS  (BIT_BUF_SIZE - 7)
#endif


GLOBAL(boolean)
jpeg_fill_bit_buffer(bitread_working_state *state,
                     register bit_buf_type get_buffer, register int bits_left,
                     int nbits)
/* Load up the bit buffer to a depth of at least nbits */
{
  /* Copy heavily used state fields into locals (hopefully registers) */
  register const JOCTET *next_input_byte = state->next_input_byte;
  register size_t bytes_in_buffer = state->bytes_in_buffer;
  j_decompress_ptr cinfo = state->cinfo;

  /* Attempt to load at least MIN_GET_BITS bits into get_buffer. */
  /* (It is assumed that no request will be for more than that many bits.) */
  /* We fail to do so only if we hit a marker or are forced to suspend. */

  if (cinfo->unread_marker == 0) {      /* cannot advance past a marker */
    while (bits_left < MIN_GET_BITS) {
      register int c;

      /* Attempt to read a byte */
      if (bytes_in_buffer == 0) {
        if (!(*cinfo->src->fill_input_buffer) (cinfo))
          return FALSE;
        next_input_byte = cinfo->src->next_input_byte;
        bytes_in_buffer = cinfo->src->bytes_in_buffer;
      }
      bytes_in_buffer--;
      c = *next_input_byte++;

      /* If it's 0xFF, check and discard stuffed zero byte */
      if (c == 0xFF) {
        /* Loop here to discard any padding FF's on terminating marker,
         * so that we can save a valid unread_marker value.  NOTE: we will
         * accept multiple FF's followed by a 0 as meaning a single FF data
         * byte.  This data pattern is not valid according to the standard.
         */
        do {
          if (bytes_in_buffer == 0) {
            if (!(*cinfo->src->fill_input_buffer) (cinfo))
              return FALSE;
            next_input_byte = cinfo->src->next_input_byte;
            bytes_in_buffer = cinfo->src->bytes_in_buffer;
          }
          bytes_in_buffer--;
          c = *next_input_byte++;
        } while (c == 0xFF);

        if (c == 0) {
          /* Found FF/00, which represents an FF data byte */
          c = 0xFF;
        } else {
          /* Oops, it's actually a marker indicating end of compressed data.
           * Save the marker code for later use.
           * Fine point: it might appear that we should save the marker into
           * bitread working state, not straight into permanent state.  But
           * once we have hit a marker, we cannot need to suspend within the
           * current MCU, because we will read no more bytes from the data
           * source.  So it is OK to update permanent state right away.
           */
          cinfo->unread_marker = c;
          /* See if we need to insert some fake zero bits. */
          goto no_more_bytes;
        }
      }

      /* OK, load c into get_buffer */
      get_buffer = (get_buffer << 8) | c;
      bits_left += 8;
    } /* end while */
  } else {
no_more_bytes:
    /* We get here if we've read the marker that terminates the compressed
     * data segment.  There should be enough bits in the buffer register
     * to satisfy the request; if so, no problem.
     */
    if (nbits > bits_left) {
      /* Uh-oh.  Report corrupted data to user and stuff zeroes into
       * the data stream, so that we can produce some kind of image.
       * We use a nonvolatile flag to ensure that only one warning message
       * appears per data segment.
       */
      if (!cinfo->entropy->insufficient_data) {
        WARNMS(cinfo, JWRN_HIT_MARKER);
        cinfo->entropy->insufficient_data = TRUE;
      }
      /* Fill the buffer with zero bits */
      get_buffer <<= MIN_GET_BITS - bits_left;
      bits_left = MIN_GET_BITS;
    }
  }

  /* Unload the local registers */
  state->next_input_byte = next_input_byte;
  state->bytes_in_buffer = bytes_in_buffer;
  state->get_buffer = get_buffer;
  state->bits_left = bits_left;

  return TRUE;
}


/* Macro version of the above, which performs much better but does not
   handle markers.  We have to hand off any blocks with markers to the
   slower routines. */

#define GET_BYTE { \
  register int c0, c1; \
  c0 = *buffer++; \
  c1 = *buffer; \
  /* Pre-execute most common case */ \
  get_buffer = (get_buffer << 8) | c0; \
  bits_left += 8; \
  if (c0 == 0xFF) { \
    /* Pre-execute case of FF/00, which represents an FF data byte */ \
    buffer++; \
    if (c1 != 0) { \
      /* Oops, it's actually a marker indicating end of compressed data. */ \
      cinfo->unread_marker = c1; \
      /* Back out pre-execution and fill the buffer with zero bits */ \
      buffer -= 2; \
      get_buffer &= ~0xFF; \
    } \
  } \
}

#if SIZEOF_SIZE_T == 8 || defined(_WIN64) || (defined(__x86_64__) && defined(__ILP32__))

/* Pre-fetch 48 bytes, because the holding register is 64-bit */
#define FILL_BIT_BUFFER_FAST \
  if (bits_left <= 16) { \
    GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE \
  }

#else

/* Pre-fetch 16 bytes, because the holding register is 32-bit */
#define FILL_BIT_BUFFER_FAST \
  if (bits_left <= 16) { \
    GET_BYTE GET_BYTE \
  }

#endif


/*
 * Out-of-line code for Huffman code decoding.
 * See jdhuff.h for info about usage.
 */

GLOBAL(int)
jpeg_huff_decode(bitread_working_state *state,
                 register bit_buf_type get_buffer, register int bits_left,
                 d_derived_tbl *htbl, int min_bits)
{
  register int l = min_bits;
  register JLONG code;

  /* HUFF_DECODE has determined that the code is at least min_bits */
  /* bits long, so fetch that many bits in one swoop. */

  CHECK_BIT_BUFFER(*state, l, return -1);
  code = GET_BITS(l);

  /* Collect the rest of the Huffman code one bit at a time. */
  /* This is per Figure F.16. */

  while (code > htbl->maxcode[l]) {
    code <<= 1;
    CHECK_BIT_BUFFER(*state, 1, return -1);
    code |= GET_BITS(1);
    l++;
  }

  /* Unload the local registers */
  state->get_buffer = get_buffer;
  state->bits_left = bits_left;

  /* With garbage input we may reach the sentinel value l = 17. */

  if (l > 16) {
    WARNMS(state->cinfo, JWRN_HUFF_BAD_CODE);
    return 0;                   /* fake a zero as the safest result */
  }

  return htbl->pub->huffval[(int)(code + htbl->valoffset[l])];
}


/*
 * Figure F.12: extend sign bit.
 * On some machines, a shift and add will be faster than a table lookup.
 */

#define AVOID_TABLES
#ifdef AVOID_TABLES

#define NEG_1  ((unsigned int)-1)
#define HUFF_EXTEND(x, s) \
  ((x) + ((((x) - (1 << ((s) - 1))) >> 31) & (((NEG_1) << (s)) + 1)))

#else

#define HUFF_EXTEND(x, s) \
  ((x) < extend_test[s] ? (x) + extend_offset[s] : (x))

static const int extend_test[16] = {   /* entry n is 2**(n-1) */
  0, 0x0001, 0x0002, 0x0004, 0x0008, 0x0010, 0x0020, 0x0040, 0x0080,
  0x0100, 0x0200, 0x0400, 0x0800, 0x1000, 0x2000, 0x4000
};

static const int extend_offset[16] = { /* entry n is (-1 << n) + 1 */
  0, ((-1) << 1) + 1, ((-1) << 2) + 1, ((-1) << 3) + 1, ((-1) << 4) + 1,
  ((-1) << 5) + 1, ((-1) << 6) + 1, ((-1) << 7) + 1, ((-1) << 8) + 1,
  ((-1) << 9) + 1, ((-1) << 10) + 1, ((-1) << 11) + 1, ((-1) << 12) + 1,
  ((-1) << 13) + 1, ((-1) << 14) + 1, ((-1) << 15) + 1
};

#endif /* AVOID_TABLES */


/*
 * Check for a restart marker & resynchronize decoder.
 * Returns FALSE if must suspend.
 */

LOCAL(boolean)
process_restart(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int ci;

  /* Throw away any unused bits remaining in bit buffer; */
  /* include any full bytes in next_marker's count of discarded bytes */
  cinfo->marker->discarded_bytes += entropy->bitstate.bits_left / 8;
  entropy->bitstate.bits_left = 0;

  /* Advance past the RSTn marker */
  if (!(*cinfo->marker->read_restart_marker) (cinfo))
    return FALSE;

  /* Re-initialize DC predictions to 0 */
  for (ci = 0; ci < cinfo->comps_in_scan; ci++)
    entropy->saved.last_dc_val[ci] = 0;

  /* Reset restart counter */
  entropy->restarts_to_go = cinfo->restart_interval;

  /* Reset out-of-data flag, unless read_restart_marker left us smack up
   * against a marker.  In that case we will end up treating the next data
   * segment as empty, and we can avoid producing bogus output pixels by
   * leaving the flag set.
   */
  if (cinfo->unread_marker == 0)
    entropy->pub.insufficient_data = FALSE;

  return TRUE;
}


#if defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
__attribute__((no_sanitize("signed-integer-overflow"),
               no_sanitize("unsigned-integer-overflow")))
#endif
#endif
LOCAL(boolean)
decode_mcu_slow(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  BITREAD_STATE_VARS;
  int blkn;
  savable_state state;
  /* Outer loop handles each block in the MCU */

  /* Load up working state */
  BITREAD_LOAD_STATE(cinfo, entropy->bitstate);
  state = entropy->saved;

  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
    d_derived_tbl *dctbl = entropy->dc_cur_tbls[blkn];
    d_derived_tbl *actbl = entropy->ac_cur_tbls[blkn];
    register int s, k, r;

    /* Decode a single block's worth of coefficients */

    /* Section F.2.2.1: decode the DC coefficient difference */
    HUFF_DECODE(s, br_state, dctbl, return FALSE, label1);
    if (s) {
      CHECK_BIT_BUFFER(br_state, s, return FALSE);
      r = GET_BITS(s);
      s = HUFF_EXTEND(r, s);
    }

    if (entropy->dc_needed[blkn]) {
      /* Convert DC difference to actual value, update last_dc_val */
      int ci = cinfo->MCU_membership[blkn];
      /* Certain malformed JPEG images produce repeated DC coefficient
       * differences of 2047 or -2047, which causes state.last_dc_val[ci] to
       * grow until it overflows or underflows a 32-bit signed integer.  This
       * behavior is, to the best of our understanding, innocuous, and it is
       * unclear how to work around it without potentially affecting
       * performance.  Thus, we (hopefully temporarily) suppress UBSan integer
       * overflow errors for this function and decode_mcu_fast().
       */
      s += state.last_dc_val[ci];
      state.last_dc_val[ci] = s;
      if (block) {
        /* Output the DC coefficient (assumes jpeg_natural_order[0] = 0) */
        (*block)[0] = (JCOEF)s;
      }
    }

    if (entropy->ac_needed[blkn] && block) {

      /* Section F.2.2.2: decode the AC coefficients */
      /* Since zeroes are skipped, output area must be cleared beforehand */
      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE(s, br_state, actbl, return FALSE, label2);

        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          CHECK_BIT_BUFFER(br_state, s, return FALSE);
          r = GET_BITS(s);
          s = HUFF_EXTEND(r, s);
          /* Output coefficient in natural (dezigzagged) order.
           * Note: the extra entries in jpeg_natural_order[] will save us
           * if k >= DCTSIZE2, which could happen if the data is corrupted.
           */
          (*block)[jpeg_natural_order[k]] = (JCOEF)s;
        } else {
          if (r != 15)
            break;
          k += 15;
        }
      }

    } else {

      /* Section F.2.2.2: decode the AC coefficients */
      /* In this path we just discard the values */
      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE(s, br_state, actbl, return FALSE, label3);

        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          CHECK_BIT_BUFFER(br_state, s, return FALSE);
          DROP_BITS(s);
        } else {
          if (r != 15)
            break;
          k += 15;
        }
      }
    }
  }

  /* Completed MCU, so update state */
  BITREAD_SAVE_STATE(cinfo, entropy->bitstate);
  entropy->saved = state;
  return TRUE;
}


#if defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
__attribute__((no_sanitize("signed-integer-overflow"),
               no_sanitize("unsigned-integer-overflow")))
#endif
#endif
LOCAL(boolean)
decode_mcu_fast(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  BITREAD_STATE_VARS;
  JOCTET *buffer;
  int blkn;
  savable_state state;
  /* Outer loop handles each block in the MCU */

  /* Load up working state */
  BITREAD_LOAD_STATE(cinfo, entropy->bitstate);
  buffer = (JOCTET *)br_state.next_input_byte;
  state = entropy->saved;

  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
    d_derived_tbl *dctbl = entropy->dc_cur_tbls[blkn];
    d_derived_tbl *actbl = entropy->ac_cur_tbls[blkn];
    register int s, k, r, l;

    HUFF_DECODE_FAST(s, l, dctbl);
    if (s) {
      FILL_BIT_BUFFER_FAST
      r = GET_BITS(s);
      s = HUFF_EXTEND(r, s);
    }

    if (entropy->dc_needed[blkn]) {
      int ci = cinfo->MCU_membership[blkn];
      /* Refer to the comment in decode_mcu_slow() regarding the supression of
       * a UBSan integer overflow error in this line of code.
       */
      s += state.last_dc_val[ci];
      state.last_dc_val[ci] = s;
      if (block)
        (*block)[0] = (JCOEF)s;
    }

    if (entropy->ac_needed[blkn] && block) {

      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE_FAST(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          FILL_BIT_BUFFER_FAST
          r = GET_BITS(s);
          s = HUFF_EXTEND(r, s);
          (*block)[jpeg_natural_order[k]] = (JCOEF)s;
        } else {
          if (r != 15) break;
          k += 15;
        }
      }

    } else {

      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE_FAST(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          FILL_BIT_BUFFER_FAST
          DROP_BITS(s);
        } else {
          if (r != 15) break;
          k += 15;
        }
      }
    }
  }

  if (cinfo->unread_marker != 0) {
    cinfo->unread_marker = 0;
    return FALSE;
  }

  br_state.bytes_in_buffer -= (buffer - br_state.next_input_byte);
  br_state.next_input_byte = buffer;
  BITREAD_SAVE_STATE(cinfo, entropy->bitstate);
  entropy->saved = state;
  return TRUE;
}


#if IMAGEFEED_FAST_AC

/* imagefeed: the bit buffer of decode_mcu_fast_ac(), left-aligned: the next
 * bit of the input is bit 63 of acc, nbits bits are valid, and the bits below
 * them are 0.  Looking up the next code takes the top bits of acc, and
 * consuming n bits is one shift of acc, so from one code to the next the
 * dependency chain is a shift, a load and a shift.  With the stock
 * right-aligned get_buffer, finding the next code needs bits_left, which
 * waits on the previous code's length: a longer chain, and the one the
 * Huffman decoder's speed is bound by.  The stock state is converted on entry
 * and handed back on exit (get_buffer may hold stale bits above bits_left;
 * acc never holds any below nbits).
 */
typedef unsigned long long lbuf_t;

/* GET_BYTE for acc: the same bytes consumed, and zero bits at a marker */
#define LBUF_GET_BYTE { \
  register int c0, c1; \
  c0 = *buffer++; \
  c1 = *buffer; \
  /* Pre-execute most common case */ \
  acc |= (lbuf_t)c0 << (56 - nbits); \
  if (c0 == 0xFF) { \
    /* Pre-execute case of FF/00, which represents an FF data byte */ \
    buffer++; \
    if (c1 != 0) { \
      /* A marker: back out, and give zero bits instead */ \
      cinfo->unread_marker = c1; \
      buffer -= 2; \
      acc &= ~((lbuf_t)0xFF << (56 - nbits)); \
    } \
  } \
  nbits += 8; \
}

/* FILL_BIT_BUFFER_FAST for acc: six more bytes when 16 bits or fewer are
 * left, read as one word when none of them is 0xFF (the case GET_BYTE
 * pre-executes).  The word read takes 8 bytes: the fast path runs only with
 * BUFSIZE bytes a block left in the buffer.
 */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LBUF_FILL \
  if (nbits <= 16) { \
    lbuf_t w_; \
    memcpy(&w_, buffer, 8); \
    if (!((~w_ - 0x010101010101ULL) & w_ & 0x808080808080ULL)) { \
      acc |= (__builtin_bswap64(w_) >> 16) << (16 - nbits); \
      buffer += 6; \
      nbits += 48; \
    } else { \
      LBUF_GET_BYTE LBUF_GET_BYTE LBUF_GET_BYTE \
      LBUF_GET_BYTE LBUF_GET_BYTE LBUF_GET_BYTE \
    } \
  }
#else
#define LBUF_FILL \
  if (nbits <= 16) { \
    LBUF_GET_BYTE LBUF_GET_BYTE LBUF_GET_BYTE \
    LBUF_GET_BYTE LBUF_GET_BYTE LBUF_GET_BYTE \
  }
#endif

/* PEEK_BITS, DROP_BITS and GET_BITS for acc (1 <= n <= 32 to peek) */
#define LBUF_PEEK(n)  ((int)(acc >> (64 - (n))))
#define LBUF_DROP(n)  { acc <<= (n);  nbits -= (n); }
#define LBUF_GET_BITS(r, n)  { r = LBUF_PEEK(n);  LBUF_DROP(n); }

/* HUFF_DECODE_FAST (jdhuff.h) for acc.  After LBUF_FILL at least 17 bits are
 * in acc, as many as the longest code jpeg_huff_decode() reads.
 */
#define LBUF_HUFF_DECODE(s, nb, htbl) \
  LBUF_FILL; \
  s = htbl->lookup[LBUF_PEEK(HUFF_LOOKAHEAD)]; \
  nb = s >> HUFF_LOOKAHEAD; \
  if (nb <= HUFF_LOOKAHEAD) { \
    LBUF_DROP(nb); \
    s &= (1 << HUFF_LOOKAHEAD) - 1; \
  } else { \
    /* Equivalent of jpeg_huff_decode() */ \
    s = LBUF_PEEK(nb); \
    LBUF_DROP(nb); \
    while (s > htbl->maxcode[nb]) { \
      s = (s << 1) | (int)(acc >> 63); \
      LBUF_DROP(1); \
      nb++; \
    } \
    if (nb > 16) \
      s = 0; \
    else \
      s = htbl->pub->huffval[(int)(s + htbl->valoffset[nb]) & 0xFF]; \
  }

/* imagefeed: decode_mcu_fast() with the combined and pair tables
 * (make_fast_ac(), make_pair_ac(), make_fast_dc()) and the left-aligned bit
 * buffer above: the same bits read, the same coefficients written, and the
 * buffer refilled where the stock loop refills it (so that it stops at the
 * same marker, in the same MCU, and leaves the same bits unread).
 */

#if defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
__attribute__((no_sanitize("signed-integer-overflow"),
               no_sanitize("unsigned-integer-overflow")))
#endif
#endif
LOCAL(boolean)
decode_mcu_fast_ac(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  BITREAD_STATE_VARS;
  JOCTET *buffer;
  int blkn;
  savable_state state;
  lbuf_t acc;
  int nbits;
  /* Outer loop handles each block in the MCU */

  /* Load up working state */
  BITREAD_LOAD_STATE(cinfo, entropy->bitstate);
  buffer = (JOCTET *)br_state.next_input_byte;
  state = entropy->saved;
  nbits = bits_left;
  acc = nbits > 0 ? (lbuf_t)get_buffer << (64 - nbits) : 0;

  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
    d_derived_tbl *dctbl = entropy->dc_cur_tbls[blkn];
    d_derived_tbl *actbl = entropy->ac_cur_tbls[blkn];
    const int *fast_ac = entropy->fast_ac_cur[blkn];
    const unsigned long long *pair_ac = entropy->pair_ac_cur[blkn];
    register int s, k, r, l;

    LBUF_FILL
    s = entropy->fast_dc_cur[blkn][LBUF_PEEK(FAST_AC_BITS)];
    if (s) {
      LBUF_DROP(s & 15);
      s >>= 16;
    } else {
      LBUF_HUFF_DECODE(s, l, dctbl);
      if (s) {
        LBUF_FILL
        LBUF_GET_BITS(r, s);
        s = HUFF_EXTEND(r, s);
      }
    }

    if (entropy->dc_needed[blkn]) {
      int ci = cinfo->MCU_membership[blkn];
      /* Refer to the comment in decode_mcu_slow() regarding the supression of
       * a UBSan integer overflow error in this line of code.
       */
      s += state.last_dc_val[ci];
      state.last_dc_val[ci] = s;
      if (block)
        (*block)[0] = (JCOEF)s;
    }

    if (entropy->ac_needed[blkn] && block) {

      for (k = 1; k < DCTSIZE2; k++) {
        /* One look-up for one or two coefficients (or a coefficient and the
         * end of block) when their codes and magnitude bits fit in
         * FAST_AC_BITS bits (at least 17 bits are in acc after LBUF_FILL):
         * the same runs, values and bit counts as the combined table below.
         * Bits 4-7 of an entry are 0, so e & 63 is its bit count (and a
         * 64-bit shift by it needs no mask).  Both stores run for every
         * entry, so there is no branch on what it holds: with one
         * coefficient the second store rewrites the first, and an end of
         * block alone writes 0 where the block holds 0 (see use_pairs).
         */
        unsigned long long e;

        LBUF_FILL
        e = pair_ac[LBUF_PEEK(FAST_AC_BITS)];
        if (e) {
          int pos = k + (int)((e >> 8) & 15);

          /* A second entry is decoded only where the loop would go on to it
           * (the first coefficient before the last position); else the
           * combined table below decodes the first alone.
           */
          if (!((unsigned int)(e >> 17) & (unsigned int)(pos >= DCTSIZE2 - 1) & 1)) {
            /* the bits left between the two, when the stock loop would
             * refill the buffer before the second */
            int mid = nbits - (int)((e >> 20) & 15);

            acc <<= e & 63;
            nbits -= (int)(e & 15);
            IMAGEFEED_CHECK_ORDER(pos);
            (*block)[jpeg_natural_order[pos]] = (JCOEF)(e >> 32);
            k = pos + (int)((e >> 12) & 31);
            IMAGEFEED_CHECK_ORDER(k);
            (*block)[jpeg_natural_order[k]] = (JCOEF)(e >> 48);
            if (mid <= 16) {
              LBUF_FILL
            }
            if (e & PAIR_EOB_AFTER) break;
            continue;
          }
        }
        s = fast_ac[LBUF_PEEK(FAST_AC_BITS)];
        if (s) {
          acc <<= s & 63;
          nbits -= s & 15;
          if (!(s >> 8)) break;         /* end of block */
          k += (s >> 8) & 15;
          IMAGEFEED_CHECK_ORDER(k);
          (*block)[jpeg_natural_order[k]] = (JCOEF)(s >> 16);
          continue;
        }
        LBUF_HUFF_DECODE(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          LBUF_FILL
          LBUF_GET_BITS(r, s);
          s = HUFF_EXTEND(r, s);
          IMAGEFEED_CHECK_ORDER(k);
          (*block)[jpeg_natural_order[k]] = (JCOEF)s;
        } else {
          if (r != 15) break;
          k += 15;
        }
      }

    } else {

      for (k = 1; k < DCTSIZE2; k++) {
        /* as above, discarding the values */
        unsigned long long e;

        LBUF_FILL
        e = pair_ac[LBUF_PEEK(FAST_AC_BITS)];
        if (e) {
          int pos = k + (int)((e >> 8) & 15);

          if (!((unsigned int)(e >> 17) & (unsigned int)(pos >= DCTSIZE2 - 1) & 1)) {
            int mid = nbits - (int)((e >> 20) & 15);

            acc <<= e & 63;
            nbits -= (int)(e & 15);
            k = pos + (int)((e >> 12) & 31);
            if (mid <= 16) {
              LBUF_FILL
            }
            if (e & PAIR_EOB_AFTER) break;
            continue;
          }
        }
        s = fast_ac[LBUF_PEEK(FAST_AC_BITS)];
        if (s) {
          acc <<= s & 63;
          nbits -= s & 15;
          if (!(s >> 8)) break;
          k += (s >> 8) & 15;
          continue;
        }
        LBUF_HUFF_DECODE(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          LBUF_FILL
          LBUF_DROP(s);
        } else {
          if (r != 15) break;
          k += 15;
        }
      }
    }
  }

  if (cinfo->unread_marker != 0) {
    cinfo->unread_marker = 0;
    return FALSE;
  }

  /* Hand the bit buffer back right-aligned */
  get_buffer = nbits > 0 ? (bit_buf_type)(acc >> (64 - nbits)) : 0;
  bits_left = nbits;
  br_state.bytes_in_buffer -= (buffer - br_state.next_input_byte);
  br_state.next_input_byte = buffer;
  BITREAD_SAVE_STATE(cinfo, entropy->bitstate);
  entropy->saved = state;
  return TRUE;
}

#endif /* IMAGEFEED_FAST_AC */


/*
 * Decode and return one MCU's worth of Huffman-compressed coefficients.
 * The coefficients are reordered from zigzag order into natural array order,
 * but are not dequantized.
 *
 * The i'th block of the MCU is stored into the block pointed to by
 * MCU_data[i].  WE ASSUME THIS AREA HAS BEEN ZEROED BY THE CALLER.
 * (Wholesale zeroing is usually a little faster than retail...)
 *
 * Returns FALSE if data source requested suspension.  In that case no
 * changes have been made to permanent state.  (Exception: some output
 * coefficients may already have been assigned.  This is harmless for
 * this module, since we'll just re-assign them on the next call.)
 */

#define BUFSIZE  (DCTSIZE2 * 8)

METHODDEF(boolean)
decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int usefast = 1;

  /* Process restart marker if needed; may have to suspend */
  if (cinfo->restart_interval) {
    if (entropy->restarts_to_go == 0)
      if (!process_restart(cinfo))
        return FALSE;
    usefast = 0;
  }

  if (cinfo->src->bytes_in_buffer < BUFSIZE * (size_t)cinfo->blocks_in_MCU ||
      cinfo->unread_marker != 0)
    usefast = 0;

  /* If we've run out of data, just leave the MCU set to zeroes.
   * This way, we return uniform gray for the remainder of the segment.
   */
  if (!entropy->pub.insufficient_data) {

    if (usefast) {
      /* imagefeed: with the combined tables unless the stock decoder was asked for */
#if IMAGEFEED_FAST_AC
      if (!(entropy->use_fast_ac ? decode_mcu_fast_ac(cinfo, MCU_data) :
                                   decode_mcu_fast(cinfo, MCU_data)))
#else
      if (!decode_mcu_fast(cinfo, MCU_data))
#endif
        goto use_slow;
    } else {
use_slow:
      if (!decode_mcu_slow(cinfo, MCU_data)) return FALSE;
    }

  }

  /* Account for restart interval (no-op if not using restarts) */
  if (cinfo->restart_interval)
    entropy->restarts_to_go--;

  return TRUE;
}


/*
 * Module initialization routine for Huffman entropy decoding.
 */

GLOBAL(void)
jinit_huff_decoder(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy;
  int i;

  /* Motion JPEG frames typically do not include the Huffman tables if they
     are the default tables.  Thus, if the tables are not set by the time
     the Huffman decoder is initialized (usually within the body of
     jpeg_start_decompress()), we set them to default values. */
  std_huff_tables((j_common_ptr)cinfo);

  entropy = (huff_entropy_ptr)
    (*cinfo->mem->alloc_small) ((j_common_ptr)cinfo, JPOOL_IMAGE,
                                sizeof(huff_entropy_decoder));
  cinfo->entropy = (struct jpeg_entropy_decoder *)entropy;
  entropy->pub.start_pass = start_pass_huff_decoder;
  entropy->pub.decode_mcu = decode_mcu;

  /* Mark tables unallocated */
  for (i = 0; i < NUM_HUFF_TBLS; i++) {
    entropy->dc_derived_tbls[i] = entropy->ac_derived_tbls[i] = NULL;
  }
}
