#!/bin/sh
# Installs the Debian 12 packages Tessera needs to build, run and test.
# Run as root (or with sudo available).  Safe to run again.
set -eu
PKGS="build-essential autoconf automake pkg-config curl ca-certificates
libmicrohttpd-dev libcfitsio-dev wcslib-dev libpng-dev libjansson-dev
libcurl4-openssl-dev check libjpeg62-turbo-dev libchealpix-dev libfftw3-dev libsqlite3-dev"
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
