#!/bin/sh
# Configures (once) and builds Tessera out of tree in ./build.  Extra arguments go to configure.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
cd "$top"
tess_autoreconf
mkdir -p build
cd build
if tess_configure_stale || [ $# -gt 0 ]; then
    ../configure --enable-werror "$@" >/dev/null
fi
make -j"$(nproc)" >/dev/null
echo "build: ok ($top/build/tesserad)"
