#!/usr/bin/env bash
# Writes imagefeed.patch: the diff from libjpeg-turbo 3.1.0 as released (libjpeg-turbo/, vendored
# unchanged by vendor.sh) to imagefeed's copies of the four files it changes (patched/, compiled
# by the default build). `patch.sh --check` fails if imagefeed.patch is out of date (CI runs it).
set -euo pipefail
cd "$(dirname "$0")"
gen() {
  echo "imagefeed's patch to libjpeg-turbo 3.1.0: libjpeg-turbo/ holds the released files, patched/"
  echo "imagefeed's copies (see README.md). Written by patch.sh; apply with patch -p1 in a 3.1.0 tree."
  echo
  for f in src/jdhuff.c src/jdphuff.c src/jdcoefct.c src/jdapistd.c; do
    diff -u --label "a/$f" --label "b/$f" "libjpeg-turbo/$f" "patched/$f" || [ $? -eq 1 ]
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
