#!/usr/bin/env bash
# Vendors libjpeg-turbo into libjpeg-turbo/: only the files build.rs compiles, the headers and
# templates they include, the licences and upstream's README, byte for byte as released, and
# writes their SHA-256 checksums to libjpeg-turbo.sha256.
#
#   crates/imagefeed-jpeg/vendor.sh SOURCE       SOURCE: an unpacked release, or its .tar.gz
#   crates/imagefeed-jpeg/vendor.sh --crates-io  the 3.1.0 release's files from crates.io (below)
#   crates/imagefeed-jpeg/vendor.sh --check      every vendored file against the manifest (CI)
#
# The release: https://github.com/libjpeg-turbo/libjpeg-turbo/releases/tag/3.1.0 (source
# tarball libjpeg-turbo-3.1.0.tar.gz, or `git archive 3.1.0` of the repository: the same files).
# Where only crates.io can be reached, `--crates-io` takes them from the turbojpeg-sys 1.2.0
# crate, which carries the 3.1.0 release's tree unchanged (its files have the checksums below,
# which were checked against the 3.1.0 tag), fetched and verified by cargo itself.
#
# imagefeed's own C is not here: it is in patched/ (see README.md), and patch.sh writes the diff.
# After a new release: change VERSION, check FILES against the new CMakeLists.txt and build.rs,
# run this script, then the steps under "Updating libjpeg-turbo" in README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VERSION=3.1.0
# crates.io's copy of the release for --crates-io: crate and version.
CRATE=turbojpeg-sys
CRATE_VERSION=1.2.0
dest="$here/libjpeg-turbo"
manifest="$here/libjpeg-turbo.sha256"

# Paths inside the release: build.rs's sources (8-, 12- and 16-bit sets, TurboJPEG, the x86-64
# SIMD dispatcher and nasm files with their includes for the stock build, the aarch64 Neon code)
# and everything they include.
FILES=(
  LICENSE.md README.ijg README.md
  simd/jsimd.h
  simd/arm/align.h simd/arm/jccolor-neon.c simd/arm/jcgray-neon.c simd/arm/jcgryext-neon.c
  simd/arm/jchuff.h simd/arm/jcphuff-neon.c simd/arm/jcsample-neon.c simd/arm/jdcolext-neon.c
  simd/arm/jdcolor-neon.c simd/arm/jdmerge-neon.c simd/arm/jdmrgext-neon.c
  simd/arm/jdsample-neon.c simd/arm/jfdctfst-neon.c simd/arm/jfdctint-neon.c
  simd/arm/jidctfst-neon.c simd/arm/jidctint-neon.c simd/arm/jidctred-neon.c
  simd/arm/jquanti-neon.c simd/arm/neon-compat.h.in
  simd/arm/aarch64/jccolext-neon.c simd/arm/aarch64/jchuff-neon.c simd/arm/aarch64/jsimd.c
  simd/arm/aarch64/jsimd_neon.S
  simd/nasm/jcolsamp.inc simd/nasm/jdct.inc simd/nasm/jsimdcfg.inc simd/nasm/jsimdext.inc
  simd/x86_64/jccolext-avx2.asm simd/x86_64/jccolext-sse2.asm simd/x86_64/jccolor-avx2.asm
  simd/x86_64/jccolor-sse2.asm simd/x86_64/jcgray-avx2.asm simd/x86_64/jcgray-sse2.asm
  simd/x86_64/jcgryext-avx2.asm simd/x86_64/jcgryext-sse2.asm simd/x86_64/jchuff-sse2.asm
  simd/x86_64/jcphuff-sse2.asm simd/x86_64/jcsample-avx2.asm simd/x86_64/jcsample-sse2.asm
  simd/x86_64/jdcolext-avx2.asm simd/x86_64/jdcolext-sse2.asm simd/x86_64/jdcolor-avx2.asm
  simd/x86_64/jdcolor-sse2.asm simd/x86_64/jdmerge-avx2.asm simd/x86_64/jdmerge-sse2.asm
  simd/x86_64/jdmrgext-avx2.asm simd/x86_64/jdmrgext-sse2.asm simd/x86_64/jdsample-avx2.asm
  simd/x86_64/jdsample-sse2.asm simd/x86_64/jfdctflt-sse.asm simd/x86_64/jfdctfst-sse2.asm
  simd/x86_64/jfdctint-avx2.asm simd/x86_64/jfdctint-sse2.asm simd/x86_64/jidctflt-sse2.asm
  simd/x86_64/jidctfst-sse2.asm simd/x86_64/jidctint-avx2.asm simd/x86_64/jidctint-sse2.asm
  simd/x86_64/jidctred-sse2.asm simd/x86_64/jquantf-sse2.asm simd/x86_64/jquanti-avx2.asm
  simd/x86_64/jquanti-sse2.asm simd/x86_64/jsimd.c simd/x86_64/jsimdcpu.asm
  src/cderror.h src/cdjpeg.h src/cmyk.h src/jaricom.c src/jcapimin.c src/jcapistd.c src/jcarith.c
  src/jccoefct.c src/jccolext.c src/jccolor.c src/jcdctmgr.c src/jcdiffct.c src/jchuff.c
  src/jchuff.h src/jcicc.c src/jcinit.c src/jclhuff.c src/jclossls.c src/jcmainct.c
  src/jcmarker.c src/jcmaster.c src/jcmaster.h src/jcomapi.c src/jconfig.h.in src/jconfigint.h.in
  src/jcparam.c src/jcphuff.c src/jcprepct.c src/jcsample.c src/jctrans.c src/jdapimin.c
  src/jdapistd.c src/jdarith.c src/jdatadst-tj.c src/jdatadst.c src/jdatasrc-tj.c src/jdatasrc.c
  src/jdcoefct.c src/jdcoefct.h src/jdcol565.c src/jdcolext.c src/jdcolor.c src/jdct.h
  src/jddctmgr.c src/jddiffct.c src/jdhuff.c src/jdhuff.h src/jdicc.c src/jdinput.c src/jdlhuff.c
  src/jdlossls.c src/jdmainct.c src/jdmainct.h src/jdmarker.c src/jdmaster.c src/jdmaster.h
  src/jdmerge.c src/jdmerge.h src/jdmrg565.c src/jdmrgext.c src/jdphuff.c src/jdpostct.c
  src/jdsample.c src/jdsample.h src/jdtrans.c src/jerror.c src/jerror.h src/jfdctflt.c
  src/jfdctfst.c src/jfdctint.c src/jidctflt.c src/jidctfst.c src/jidctint.c src/jidctred.c
  src/jinclude.h src/jlossls.h src/jmemmgr.c src/jmemnobs.c src/jmemsys.h src/jmorecfg.h
  src/jpeg_nbits.c src/jpeg_nbits.h src/jpegapicomp.h src/jpegint.h src/jpeglib.h src/jquant1.c
  src/jquant2.c src/jsamplecomp.h src/jsimd.h src/jsimddct.h src/jstdhuff.c src/jutils.c
  src/jversion.h.in src/rdbmp.c src/rdppm.c src/tjutil.h src/transupp.c src/transupp.h
  src/turbojpeg-mp.c src/turbojpeg.c src/turbojpeg.h src/wrbmp.c src/wrppm.c
)

check() {
  cd "$dest"
  # Every file listed has its checksum, and nothing else is vendored.
  grep -v '^#' "$manifest" | sha256sum --check --strict --quiet -
  local listed on_disk
  listed=$(grep -v '^#' "$manifest" | sed 's/^[0-9a-f]*  //' | sort)
  on_disk=$(find . -type f | sed 's#^\./##' | sort)
  if [ "$listed" != "$on_disk" ]; then
    echo "vendor.sh: libjpeg-turbo/ holds other files than libjpeg-turbo.sha256 lists:" >&2
    diff <(echo "$listed") <(echo "$on_disk") >&2 || true
    exit 1
  fi
  echo "vendor.sh: the $(echo "$listed" | wc -l) vendored files of libjpeg-turbo $VERSION match libjpeg-turbo.sha256"
}

# The release tree inside $1 (a folder or a .tar.gz): the folder that holds CMakeLists.txt and src/.
release_tree() {
  local src=$1
  if [ -f "$src" ]; then
    local tmp
    tmp=$(mktemp -d)
    tar -xzf "$src" -C "$tmp"
    src=$tmp
  fi
  if [ ! -f "$src/src/jdhuff.c" ]; then
    local inner
    inner=$(find "$src" -maxdepth 2 -path '*/src/jdhuff.c' | head -1)
    [ -n "$inner" ] || { echo "vendor.sh: no libjpeg-turbo tree in $1" >&2; exit 1; }
    src=$(dirname "$(dirname "$inner")")
  fi
  if ! grep -q "^set(VERSION $VERSION)" "$src/CMakeLists.txt"; then
    echo "vendor.sh: $1 is not libjpeg-turbo $VERSION (its CMakeLists.txt says $(grep -m1 '^set(VERSION' "$src/CMakeLists.txt"))" >&2
    exit 1
  fi
  echo "$src"
}

# crates.io's copy: a throw-away package depending on the crate, fetched by cargo (which checks
# the download against the registry's checksum), unpacked from cargo's cache.
from_crates_io() {
  local tmp home crate
  tmp=$(mktemp -d)
  home=${CARGO_HOME:-$HOME/.cargo}
  mkdir -p "$tmp/p/src"
  printf '[package]\nname = "fetch-ljt"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = { version = "=%s", default-features = false }\n' \
    "$CRATE" "$CRATE_VERSION" > "$tmp/p/Cargo.toml"
  : > "$tmp/p/src/lib.rs"
  (cd "$tmp/p" && cargo fetch --quiet) >&2
  crate=$(find "$home/registry/cache" -name "$CRATE-$CRATE_VERSION.crate" | head -1)
  [ -n "$crate" ] || { echo "vendor.sh: cargo fetched no $CRATE-$CRATE_VERSION.crate" >&2; exit 1; }
  mkdir "$tmp/x"
  tar -xzf "$crate" -C "$tmp/x"
  echo "$tmp/x/$CRATE-$CRATE_VERSION/libjpeg-turbo"
}

case "${1:-}" in
  --check) check; exit 0 ;;
  --crates-io) src=$(release_tree "$(from_crates_io)") ;;
  "" | -*) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  *) src=$(release_tree "$1") ;;
esac

rm -rf "$dest"
for f in "${FILES[@]}"; do
  install -D -m 644 "$src/$f" "$dest/$f"
done
{
  echo "# libjpeg-turbo $VERSION as released: the files crates/imagefeed-jpeg vendors (vendor.sh)."
  (cd "$dest" && find . -type f | sed 's#^\./##' | sort | xargs sha256sum)
} > "$manifest"
echo "vendor.sh: vendored ${#FILES[@]} files of libjpeg-turbo $VERSION from $src"
check
