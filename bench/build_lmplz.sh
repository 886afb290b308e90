#!/bin/bash
# Build KenLM's `lmplz` from its source, the anchor for the Kneser-Ney benches (bench/ngram.py, bench/kn_large.py).
# The source is the kenlm 0.3.0 source distribution on PyPI, which carries the whole KenLM tree; it needs
# cmake, a C++ compiler and Boost (program_options, system, thread), zlib, bz2 and lzma headers: on Debian
#   apt-get install cmake libboost-program-options-dev libboost-system-dev libboost-thread-dev \
#                   zlib1g-dev libbz2-dev liblzma-dev
# Prints the path of lmplz. Usage: bash bench/build_lmplz.sh [FOLDER]   (default ~/.cache/ctxlm/kenlm)
set -euo pipefail
folder=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxlm/kenlm}
lmplz=$folder/build/bin/lmplz
if [ -x "$lmplz" ]; then echo "$lmplz"; exit 0; fi
if [ ! -e /usr/include/boost/program_options.hpp ]; then
  echo "build_lmplz.sh: Boost headers missing; install them first (see the comment at the top of this file)" >&2
  exit 1
fi
mkdir -p "$folder"
python -m pip download --quiet --no-deps --no-binary kenlm kenlm==0.3.0 -d "$folder" >&2
tar xzf "$folder/kenlm-0.3.0.tar.gz" -C "$folder"
cmake -S "$folder/kenlm-0.3.0" -B "$folder/build" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$folder/build" --target lmplz -j "${JOBS:-1}" >&2
echo "$lmplz"
