/*
 * imagefeed_hooks.c
 *
 * The switch that turns the patched fast paths off, for tests and benchmarks
 * that compare them with the stock code of the same build.  Bits: 1 = the
 * stock Huffman decoders (jdhuff.c, jdphuff.c), 2 = one 4x4 IDCT block at a
 * time (simd/x86_64/jsimd.c), 4 = no PDEP in refinement scans (jdphuff.c),
 * 8 = every scan of a cropped multi-scan decode to its end (jdcoefct.c).
 * Read when a scan starts; 0 (every fast path on) unless the Rust crate's
 * `testing::disable_fast_paths` set it.  No environment variable is read.
 */

static int disabled_paths = 0;

int imagefeed_jpeg_disabled_paths(void)
{
#if defined(__GNUC__) || defined(__clang__)
  return __atomic_load_n(&disabled_paths, __ATOMIC_RELAXED);
#else
  return *(volatile int *)&disabled_paths;
#endif
}

void imagefeed_jpeg_set_disabled_paths(int bits)
{
#if defined(__GNUC__) || defined(__clang__)
  __atomic_store_n(&disabled_paths, bits, __ATOMIC_RELAXED);
#else
  *(volatile int *)&disabled_paths = bits;
#endif
}

/*
 * The output rows a cropping decompression on this thread will read (the
 * cropping region's y + height, in scaled rows), or 0 for every row: a
 * multi-scan file's scans stop below them (jdcoefct.c,
 * imagefeed_rest_of_scan_skipped()).  Set by the Rust wrapper around one
 * tj3Decompress8() call and cleared after it; one value a thread, so decode
 * threads do not see each other's.
 */
#if defined(__GNUC__) || defined(__clang__)
static __thread unsigned int row_limit = 0;
#elif defined(_MSC_VER)
static __declspec(thread) unsigned int row_limit = 0;
#else
static _Thread_local unsigned int row_limit = 0;
#endif

unsigned int imagefeed_jpeg_row_limit(void)
{
  return row_limit;
}

void imagefeed_jpeg_set_row_limit(unsigned int rows)
{
  row_limit = rows;
}

/*
 * Whether a cropped decompression on this thread reads the entropy-coded data
 * to the end of the image after its last row (jdapistd.c,
 * imagefeed_read_rest()), so that damage anywhere is reported; 0, the
 * default, stops below the crop.  Set by the Rust wrapper around one
 * tj3Decompress8() call and cleared after it.
 */
#if defined(__GNUC__) || defined(__clang__)
static __thread int read_to_end = 0;
#elif defined(_MSC_VER)
static __declspec(thread) int read_to_end = 0;
#else
static _Thread_local int read_to_end = 0;
#endif

int imagefeed_jpeg_read_to_end(void)
{
  return read_to_end;
}

void imagefeed_jpeg_set_read_to_end(int on)
{
  read_to_end = on;
}
