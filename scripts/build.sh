#!/bin/sh
# Configures (once) and builds Tessera out of tree in ./build.  Extra arguments go to configure.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi >/dev/null
fi
mkdir -p build
cd build
if [ ! -f Makefile ] || [ ../configure -nt Makefile ] || [ $# -gt 0 ]; then
    ../configure --enable-werror "$@" >/dev/null
fi
make -j"$(nproc)" >/dev/null
echo "build: ok ($top/build/tesserad)"
