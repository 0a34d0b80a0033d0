#!/bin/sh
# The release checks (CI: scripts/test.sh runs them; elsewhere TESSERA_RELEASE_CHECKS=1
# scripts/test.sh, or this script alone):
#   distcheck  make distcheck in build/: the tarball is configured with -Werror, built,
#              tested (the whole make check) and installed out of tree.
#   package    the Debian package built from that tarball (dpkg-buildpackage -us -uc -b,
#              tests skipped with DEB_BUILD_OPTIONS=nocheck: they ran before), lintian
#              without errors, installed with apt-get, then, with the checkout and the
#              unpacked source moved away, tesserad started as the tessera user from
#              /usr/sbin/tesserad --config /etc/tessera/tesserad.json: the viewer, its
#              libraries, the demo datasets, a cutout, a job (tessera submit) and
#              `man tesserad` work; apt-get purge leaves no file, directory or user.
# Usage: scripts/release-check.sh [distcheck] [package]  (default both).  Each writes
# build/tests/release/NAME.log ending in a Check-style summary that scripts/test.sh
# counts ("NAME:F: what failed" lines for the failures) and prints its time.  The
# package check needs root (or sudo) and installs, then purges, the package tessera;
# it stops when one is installed already.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
out="$top/build/tests/release"
mkdir -p "$out"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
[ $# -gt 0 ] || set -- distcheck package

# Check-style bookkeeping of one part: ok NAME / bad NAME MESSAGE, then summary.
checks=0 failures=0 part="" log=""
begin() {
    part=$1 log=$2 checks=0 failures=0
    : >"$log"
}
ok() {
    checks=$((checks + 1))
    echo "$part: ok: $1" >>"$log"
}
bad() {
    checks=$((checks + 1))
    failures=$((failures + 1))
    echo "$part:F: $1: $2" >>"$log"
}
check() {   # check NAME COMMAND...: ok when COMMAND succeeds
    name=$1
    shift
    if "$@" >>"$log.cmd" 2>&1; then ok "$name"; else bad "$name" "failed: $*"; fi
}
summary() {   # summary SECONDS
    pct=100
    [ "$checks" -gt 0 ] && pct=$(( (checks - failures) * 100 / checks ))
    echo "$part: $1 s" >>"$log"
    echo "$pct%: Checks: $checks, Failures: $failures, Errors: 0" >>"$log"
    grep -E ":F:" "$log" || true
    echo "release: $part: $pct%: Checks: $checks, Failures: $failures, Errors: 0 ($1 s)"
}

run_distcheck() {
    begin distcheck "$out/distcheck.log"
    start=$(date +%s)
    "$top/scripts/build.sh" >/dev/null || { bad build "scripts/build.sh failed"; summary 0; return; }
    if (cd "$top/build" && make distcheck) >"$out/distcheck.out" 2>&1; then
        ok "make distcheck"
    else
        bad "make distcheck" "failed (build/tests/release/distcheck.out):
$(grep -E '^(FAIL|ERROR)|Error|error:|dist:|installcheck:' "$out/distcheck.out" | head -n 20)"
    fi
    check "tarball" test -f "$top/build/tessera-$(version).tar.gz"
    summary $(( $(date +%s) - start ))
}

version() {
    sed -nE 's/^AC_INIT\(\[tessera\], \[([^]]+)\].*/\1/p' "$top/configure.ac"
}

# ---- package -----------------------------------------------------------------------
port=""
srvpid=""
fetch() {   # fetch PATH FILE: GET http://127.0.0.1:$port/PATH into FILE
    curl -fsS -o "$2" "http://127.0.0.1:$port$1"
}
run_package() {
    # The logs are kept outside the checkout while it is moved away, copied at the end.
    pout=$(mktemp -d /tmp/tessera-package-logs.XXXXXX)
    begin package "$pout/package.log"
    start=$(date +%s)
    ver=$(version)
    tarball="$top/build/tessera-$ver.tar.gz"
    if dpkg-query -W -f='${Status}' tessera 2>/dev/null | grep -q installed; then
        bad "not installed before" "the package tessera is installed already: purge it first"
        summary 0
        return
    fi
    if [ ! -f "$tarball" ]; then
        "$top/scripts/build.sh" >/dev/null && (cd "$top/build" && make dist) >"$log.cmd" 2>&1
    fi
    check "tarball" test -f "$tarball"
    work=$(mktemp -d /tmp/tessera-package.XXXXXX)
    chmod 755 "$work"
    tar -C "$work" -xzf "$tarball"
    t0=$(date +%s)
    if (cd "$work/tessera-$ver" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" DEB_BUILD_PROFILES=nocheck \
            dpkg-buildpackage -us -uc -b) >"$pout/dpkg-buildpackage.out" 2>&1; then
        ok "dpkg-buildpackage -us -uc -b"
    else
        bad "dpkg-buildpackage -us -uc -b" "$(tail -n 20 "$pout/dpkg-buildpackage.out")"
    fi
    echo "package: dpkg-buildpackage $(( $(date +%s) - t0 )) s" >>"$log"
    deb=$(ls "$work"/tessera_"$ver"_*.deb 2>/dev/null | head -n 1)
    check "the .deb" test -n "$deb"
    if [ -z "$deb" ]; then
        rm -rf "$work"
        summary $(( $(date +%s) - start ))
        return
    fi
    t0=$(date +%s)
    lintian --tag-display-limit 0 "$deb" >"$pout/lintian.out" 2>&1
    if grep -q '^E: ' "$pout/lintian.out"; then
        bad "lintian: no errors" "$(grep '^E: ' "$pout/lintian.out")"
    else
        ok "lintian: no errors"
    fi
    echo "package: lintian $(( $(date +%s) - t0 )) s, $(grep -c '^W: ' "$pout/lintian.out") warnings" >>"$log"
    cp "$deb" "$pout/"
    deb="$pout/$(basename "$deb")"
    chmod 644 "$deb"
    rm -rf "$work"

    if DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$deb" >"$pout/apt-install.out" 2>&1; then
        ok "apt-get install ./$(basename "$deb")"
    else
        bad "apt-get install" "$(tail -n 20 "$pout/apt-install.out")"
        summary $(( $(date +%s) - start ))
        return
    fi
    installed_checks
    # Everything below runs with the checkout moved away: nothing may come from it.
    moved="$top.moved-$$"
    cd /
    if mv "$top" "$moved"; then
        trap 'mv "$moved" "$top"' EXIT INT TERM
        served_checks
        mv "$moved" "$top"
        trap - EXIT INT TERM
    else
        bad "move the checkout away" "cannot rename $top"
    fi
    cd "$top" || return
    purge_checks
    summary $(( $(date +%s) - start ))
}

installed_checks() {
    check "/usr/sbin/tesserad" test -x /usr/sbin/tesserad
    check "/usr/bin/tessera" test -x /usr/bin/tessera
    check "conffile /etc/tessera/tesserad.json" grep -qx /etc/tessera/tesserad.json \
        /var/lib/dpkg/info/tessera.conffiles
    check "system user tessera" sh -c 'uid=$(id -u tessera) && [ "$uid" -lt 1000 ]'
    check "/var/lib/tessera owned by tessera" sh -c \
        '[ "$(stat -c %U /var/lib/tessera)" = tessera ]'
    check "tesserad --version names /usr/share/tessera" sh -c \
        '/usr/sbin/tesserad --version | grep -qx "viewer: /usr/share/tessera/viewer"'
    check "tessera --version" sh -c '/usr/bin/tessera --version | grep -q "^tessera "'
    for u in tesserad.service tessera-worker@.service; do
        check "unit $u installed" test -f "/lib/systemd/system/$u"
    done
    if command -v systemd-analyze >/dev/null 2>&1; then
        check "systemd-analyze verify tesserad.service" \
            systemd-analyze verify /lib/systemd/system/tesserad.service
        # A template is verified through an instance of it.
        wdir=$(mktemp -d)
        cp /lib/systemd/system/tessera-worker@.service "$wdir/tessera-worker@1.service"
        check "systemd-analyze verify tessera-worker@1.service" \
            systemd-analyze verify "$wdir/tessera-worker@1.service"
        rm -rf "$wdir"
    else
        echo "package: systemd-analyze not installed: units not verified" >>"$log"
    fi
    # Slim container images tell dpkg not to install man pages at all.
    excl=$(grep -ls '^path-exclude[= ]*/usr/share/man' /etc/dpkg/dpkg.cfg.d/* 2>/dev/null)
    [ -z "$excl" ] || echo "package: man pages are not installed: dpkg excludes /usr/share/man in $excl" >>"$log"
    check "man tesserad" sh -c 'MANPAGER=cat man tesserad 2>/dev/null | grep -q "tesserad.json"'
    check "man tesserad.json" sh -c 'MANPAGER=cat man 5 tesserad.json 2>/dev/null | grep -q "max_output_pixels"'
    check "man tessera" sh -c 'MANPAGER=cat man 1 tessera 2>/dev/null | grep -q "reproject"'
}

served_checks() {
    check "the checkout is gone" test ! -e "$top"
    tmp=$(mktemp -d /tmp/tessera-served.XXXXXX)
    chmod 755 "$tmp"
    # The packaged configuration as it is, on a free port (port 0; the server prints it).
    $SUDO setpriv --reuid=tessera --regid=tessera --init-groups \
        /usr/sbin/tesserad --config /etc/tessera/tesserad.json \
        --listen 127.0.0.1:0 2>"$tmp/tesserad.log" &
    srvpid=$!
    i=0
    port=""
    while [ $i -lt 300 ] && [ -z "$port" ] && kill -0 "$srvpid" 2>/dev/null; do
        port=$(sed -nE 's|.*serving [0-9]+ datasets? (and [0-9]+ collections? )?on http://127\.0\.0\.1:([0-9]+)/.*|\2|p' "$tmp/tesserad.log")
        sleep 0.1
        i=$((i + 1))
    done
    if [ -z "$port" ]; then
        bad "tesserad started as tessera" "$(cat "$tmp/tesserad.log")"
        kill "$srvpid" 2>/dev/null
        rm -rf "$tmp"
        return
    fi
    ok "tesserad started as tessera on port $port"
    check "serves 6 demo datasets" grep -q "serving 6 datasets" "$tmp/tesserad.log"
    check "runs as tessera" pgrep -x -u tessera tesserad
    check "GET /healthz" sh -c "curl -fsS http://127.0.0.1:$port/healthz | grep -q '\"ok\"'"
    check "GET / (the viewer)" sh -c "curl -fsS http://127.0.0.1:$port/ | grep -q '/vendor/openseadragon/openseadragon.min.js'"
    for f in /viewer/app.js /vendor/aladin-lite/aladin.js /vendor/openseadragon/openseadragon.min.js \
        /vendor/openseadragon/images/home_rest.png /vendor/uplot/uPlot.iife.min.js /vendor/uplot/uPlot.min.css; do
        check "GET $f" fetch "$f" "$tmp/file"
    done
    check "GET /vendor/ of a file not installed is 404" sh -c \
        "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/vendor/uplot/uPlot.esm.js)\" = 404 ]"
    if fetch /api/v1/datasets "$tmp/datasets.json"; then
        names=$(python3 -c 'import json,sys; print(" ".join(sorted(d["name"] for d in json.load(open(sys.argv[1])))))' "$tmp/datasets.json")
        if [ "$names" = "allsky_rosat gc_2mass_k gc_msx_e horsehead l1448_13co m13" ]; then
            ok "the demo datasets"
        else
            bad "the demo datasets" "got: $names"
        fi
    else
        bad "the demo datasets" "GET /api/v1/datasets failed"
    fi
    if fetch "/api/v1/cutout?dataset=gc_2mass_k&ra=0&dec=0&coordsys=galactic&fov=0.8&width=200&height=100&projection=CAR&format=png" "$tmp/cutout.png"; then
        size=$(python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(24); print("%d %d" % struct.unpack(">II", b[16:24]) if b[:8]==b"\x89PNG\r\n\x1a\n" else "not a PNG")' "$tmp/cutout.png")
        if [ "$size" = "200 100" ]; then ok "a cutout (PNG 200x100)"; else bad "a cutout" "got $size"; fi
    else
        bad "a cutout" "GET /api/v1/cutout failed"
    fi
    check "HiPS properties" sh -c "curl -fsS http://127.0.0.1:$port/hips/horsehead/properties | grep -q '^hips_order'"
    # A job through the installed command line; its product is a FITS file in /var/lib.
    printf '%s\n' '{"type": "reduce", "dataset": "m13", "op": "mean", "axis": "z", "output": {"name": "m13_mean"}}' >"$tmp/job.json"
    if /usr/bin/tessera submit --server "http://127.0.0.1:$port" -o "$tmp/m13_mean.fits" \
            "$tmp/job.json" >"$tmp/submit.out" 2>&1; then
        ok "tessera submit (a reduce job)"
    else
        bad "tessera submit (a reduce job)" "$(cat "$tmp/submit.out")"
    fi
    check "the job's product is FITS" sh -c "head -c 30 '$tmp/m13_mean.fits' | grep -q '^SIMPLE  =  *T'"
    check "the product is under /var/lib/tessera/jobs" sh -c \
        "$SUDO find /var/lib/tessera/jobs/results -name '*.fits' | grep -q ."
    check "the product is a dataset" sh -c "curl -fsS http://127.0.0.1:$port/api/v1/datasets/m13_mean >/dev/null"
    $SUDO kill -TERM "$srvpid" 2>/dev/null
    wait "$srvpid"
    rc=$?
    if [ "$rc" -eq 0 ]; then ok "SIGTERM: exit 0"; else bad "SIGTERM" "exit status $rc"; fi
    cp "$tmp/tesserad.log" "$pout/package-tesserad.txt" 2>/dev/null
    rm -rf "$tmp"
}

purge_checks() {
    if DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq tessera >"$pout/apt-purge.out" 2>&1; then
        ok "apt-get purge tessera"
    else
        bad "apt-get purge tessera" "$(tail -n 20 "$pout/apt-purge.out")"
    fi
    check "dpkg knows no tessera" sh -c '! dpkg-query -W -f="\${Status}" tessera 2>/dev/null | grep -q .'
    left=""
    for p in /usr/sbin/tesserad /usr/bin/tessera /etc/tessera /usr/share/tessera \
        /usr/share/doc/tessera /var/lib/tessera /var/cache/tessera /var/log/tessera \
        /lib/systemd/system/tesserad.service /lib/systemd/system/tessera-worker@.service \
        /usr/share/man/man8/tesserad.8.gz /usr/share/man/man5/tesserad.json.5.gz \
        /usr/share/man/man1/tessera.1.gz /etc/systemd/system/multi-user.target.wants/tesserad.service \
        /var/lib/systemd/deb-systemd-helper-enabled/tesserad.service.dsh-also; do
        [ -e "$p" ] && left="$left $p"
    done
    if [ -z "$left" ]; then ok "purge leaves no file"; else bad "purge leaves no file" "left:$left"; fi
    check "purge removes the user tessera" sh -c '! getent passwd tessera'
    check "purge removes the group tessera" sh -c '! getent group tessera'
}

for what in "$@"; do
    case $what in
    distcheck) run_distcheck ;;
    package)
        run_package
        cp "$pout"/* "$out/"
        rm -rf "$pout" ;;
    *) echo "usage: scripts/release-check.sh [distcheck] [package]" >&2; exit 2 ;;
    esac
done
failed=0
for what in "$@"; do
    tess_check_counts "$(tess_check_line "$out/$what.log")"
    [ "${f:-1}" -eq 0 ] && [ "${e:-1}" -eq 0 ] || failed=1
done
exit $failed
