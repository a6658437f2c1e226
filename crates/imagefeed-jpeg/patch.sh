#!/usr/bin/env bash
# Writes imagefeed.patch: the diff from libjpeg-turbo 3.1.0 as released (the five files kept in
# stock/) to the patched files in libjpeg-turbo/ that the default build compiles.
# `patch.sh --check` fails if imagefeed.patch is out of date (CI runs it).
set -euo pipefail
cd "$(dirname "$0")"
gen() {
  echo "imagefeed's patch to libjpeg-turbo 3.1.0: stock/ holds the released files, libjpeg-turbo/"
  echo "the patched ones (see README.md). Written by patch.sh; apply with patch -p1 in a 3.1.0 tree."
  echo
  for pair in src/jdhuff.c:jdhuff.c src/jdphuff.c:jdphuff.c src/jdcoefct.c:jdcoefct.c src/jdapistd.c:jdapistd.c \
              simd/x86_64/jsimd.c:jsimd_x86_64.c; do
    f=${pair%%:*}; s=${pair##*:}
    diff -u --label "a/$f" --label "b/$f" "stock/$s" "libjpeg-turbo/$f" || [ $? -eq 1 ]
  done
}
if [ "${1:-}" = "--check" ]; then
  if ! diff -q <(gen) imagefeed.patch >/dev/null; then
    echo "crates/imagefeed-jpeg/imagefeed.patch is out of date: run crates/imagefeed-jpeg/patch.sh" >&2
    exit 1
  fi
  echo "imagefeed.patch is up to date"
else
  gen > imagefeed.patch
fi
