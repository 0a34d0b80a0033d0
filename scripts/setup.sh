#!/bin/sh
# Installs the Debian 12 packages Tessera needs to build, run and test.
# Run as root (or with sudo available).  Safe to run again.
# Debian's python3 with numpy, astropy and scikit-image computes reference values in
# tests (test_zreduce reads PNG frames with skimage, FITS with astropy); the client tests
# (tests/clients) use astroquery, pyvo, dask, zarr, fitsverify, promtool and STILTS
# (datalinklint, votlint, xsdvalidate with its own copies of the IVOA schemas), and
# sunpy with astropy reproject for the solar references of test_solar; the cluster tests
# a throwaway PostgreSQL and nginx; bench/kernels compares the resampling kernels with
# OpenCV's remap (python3-opencv).
set -eu
PKGS="build-essential autoconf automake pkg-config curl ca-certificates
libmicrohttpd-dev libcfitsio-dev wcslib-dev liberfa-dev libpng-dev libjansson-dev
libcurl4-openssl-dev check clang valgrind libjpeg62-turbo-dev libchealpix-dev libfftw3-dev libsqlite3-dev
python3-numpy python3-astropy python3-skimage
libspng-dev libdeflate-dev libtiff-dev libblosc-dev liblz4-dev libzstd-dev libxml2-dev
libpq-dev postgresql nginx
python3-astroquery python3-pyvo python3-dask python3-zarr python3-fsspec python3-aiohttp
python3-requests python3-tifffile python3-astropy-healpix python3-matplotlib fitsverify prometheus
linux-perf wrk stilts python3-sunpy python3-reproject python3-opencv mandoc"
# The release checks of CI (scripts/release-check.sh: make distcheck, the Debian package
# built, linted, installed and purged); TESSERA_RELEASE_CHECKS=1 elsewhere.
if [ -n "${CI:-}" ] || [ "${TESSERA_RELEASE_CHECKS:-0}" = 1 ]; then
    PKGS="$PKGS debhelper dpkg-dev fakeroot lintian man-db procps"
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
else
    echo "setup: all packages present"
fi

# The web viewer (viewer/) and its browser tests (tests/e2e/): Debian's chromium, Node.js
# and npm when missing, then the npm packages of package-lock.json (aladin-lite,
# openseadragon, uplot, playwright-core) into node_modules/.  TESSERA_NO_VIEWER=1 skips this.
if [ "${TESSERA_NO_VIEWER:-0}" != "1" ]; then
    top=$(cd "$(dirname "$0")/.." && pwd)
    web=""
    command -v node >/dev/null 2>&1 || web="$web nodejs"
    command -v npm >/dev/null 2>&1 || web="$web npm"
    command -v chromium >/dev/null 2>&1 || web="$web chromium"
    if [ -n "$web" ]; then
        echo "setup: installing$web"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $web
    fi
    if [ ! -f "$top/node_modules/.package-lock.json" ] ||
       [ "$top/package-lock.json" -nt "$top/node_modules/.package-lock.json" ]; then
        echo "setup: npm ci (viewer libraries and playwright-core)"
        (cd "$top" && npm ci --no-audit --no-fund --loglevel=error)
    else
        echo "setup: npm packages present"
    fi
fi
