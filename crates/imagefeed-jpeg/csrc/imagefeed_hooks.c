/*
 * imagefeed_hooks.c
 *
 * The switch that turns the patched fast paths off, for tests and benchmarks
 * that compare them with the stock code of the same build.  Bits: 1 = the
 * stock Huffman decoders (jdhuff.c, jdphuff.c), 2 = one 4x4 IDCT block at a
 * time (simd/x86_64/jsimd.c), 4 = no PDEP in refinement scans (jdphuff.c).
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
