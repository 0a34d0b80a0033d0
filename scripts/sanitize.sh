#!/bin/sh
# The test suite under the sanitizers, and (a part of it) under valgrind memcheck.
#   scripts/sanitize.sh asan               build build-asan (--enable-sanitizers: ASan+UBSan)
#                                          and run make check there; any ASan report, leak
#                                          or UBSan report fails the test program
#   scripts/sanitize.sh valgrind [TEST...] run test programs of ./build (built by
#                                          scripts/test.sh) under valgrind --leak-check=full;
#                                          default: a fast subset (all: every check program),
#                                          TESSERA_VALGRIND_JOBS (default: the number of cores)
#                                          programs at a time, each with its own log
#                                          (OUT/valgrind/NAME.raw); the wall-clock bounds of the
#                                          tests are scaled (tests/testutil.h, tt_time_scale)
# Summaries for scripts/test.sh go to build/tests/asan/*.log and build/tests/valgrind/*.log
# as Check lines "N%: Checks: N, Failures: F, Errors: E"; a program that Check saw pass but
# that failed anyway (a leak report at exit, a sanitizer abort) counts one more error.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
mode=${1:-asan}
[ $# -gt 0 ] && shift
VALGRIND_SUBSET="tests/engine/test_buf tests/daemon/test_params tests/daemon/test_tilecache
tests/daemon/test_diskcache tests/engine/test_pool tests/engine/test_skywcs tests/engine/test_healpix"

case "$mode" in
asan)
    cd "$top"
    tess_autoreconf 2>/dev/null
    bdir=${TESSERA_ASAN_BUILD:-$top/build-asan}
    out=${TESSERA_SUMMARY_DIR:-$top/build/tests}/asan
    mkdir -p "$bdir" "$out"
    cd "$bdir"
    # -DRP_NO_AVX2: this build runs the resampling kernels' plain paths (the CPUs
    # without AVX2), which no other run takes on a machine that has it; make check
    # runs the AVX-512/AVX2 paths and valgrind (no AVX-512) the AVX2 ones.
    if tess_configure_stale; then
        "$top/configure" --enable-sanitizers CPPFLAGS=-DRP_NO_AVX2 >configure.out 2>&1 ||
            { echo "0%: Checks: 1, Failures: 0, Errors: 1" >"$out/build.log"; exit 1; }
    fi
    make -j"$(nproc)" >make.out 2>&1 ||
        { tail -n 30 make.out; echo "0%: Checks: 1, Failures: 0, Errors: 1" >"$out/build.log"; exit 1; }
    rm -f "$out/build.log"
    # halt_on_error: a UBSan report ends the program (and so fails the test).
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$top/tests/lsan.supp} \
    CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4} \
        make -j"$(nproc)" check >make-check.out 2>&1
    status=0
    for trs in tests/engine/*.trs tests/daemon/*.trs tests/cli/*.trs; do
        [ -f "$trs" ] || continue
        log=${trs%.trs}.log
        rc=0
        grep -q ':test-result: PASS' "$trs" || rc=1
        tess_summarise "$mode" "$(basename "$trs" .trs)" "$log" "$rc" "$out"
        [ "$rc" -eq 0 ] || status=1
    done
    exit $status
    ;;
valgrind)
    command -v valgrind >/dev/null 2>&1 || { echo "valgrind not found (scripts/setup.sh)"; exit 1; }
    cd "${TESSERA_VALGRIND_BUILD:-$top/build}" || exit 1
    out=${TESSERA_SUMMARY_DIR:-$top/build/tests}/valgrind
    mkdir -p "$out"
    tests=${*:-$VALGRIND_SUBSET}
    if [ "$tests" = all ]; then
        # The slowest first (minutes each under valgrind, measured on 2 cores), so that
        # the lanes end together; programs not named here come after them.
        slow="test_tiles test_cli test_http test_reproject test_faults test_hostile test_exact
              test_healpix test_jobs test_stackjobs test_zreduce test_fitsimg test_mosaic"
        tests=$(ls tests/engine/test_* tests/daemon/test_* tests/cli/test_* 2>/dev/null | grep -vE '\.(o|log|trs)$' |
                awk -v slow="$slow" 'BEGIN { n = split(slow, s, /[ \n]+/)
                                             for (i = 1; i <= n; i++) rank[s[i]] = i }
                     { k = $0; sub(/.*\//, "", k); print (k in rank ? rank[k] : 1000), $0 }' |
                sort -s -k1,1n | cut -d' ' -f2)
    fi
    # shellcheck disable=SC2086
    make -j"$(nproc)" $tests >/dev/null 2>&1
    jobs=${TESSERA_VALGRIND_JOBS:-$(nproc)}
    [ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
    # One program after another in each of `jobs` lanes (xargs -P), each through
    # "sanitize.sh valgrind-one"; xargs exits non-zero when one of them failed.
    # shellcheck disable=SC2086
    printf '%s\n' $tests |
        TESSERA_SUMMARY_DIR="$out" xargs -P "$jobs" -n 1 "$top/scripts/sanitize.sh" valgrind-one ||
        exit 1
    exit 0
    ;;
valgrind-one)
    # valgrind-one TEST: one program (in the current directory, the build) under valgrind;
    # its output in $TESSERA_SUMMARY_DIR/NAME.raw, its summary in NAME.log.
    t=$1 out=$TESSERA_SUMMARY_DIR
    mode=valgrind
    name=$(basename "$t")
    start=$(date +%s)
    # TESSERA_VALGRIND=1: the tests scale their time bounds (also detected with
    # RUNNING_ON_VALGRIND where valgrind.h was found at configure time).
    TESSERA_VALGRIND=1 CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-30} \
        valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite \
        --error-exitcode=99 --suppressions="$top/tests/valgrind.supp" \
        "./$t" >"$out/$name.raw" 2>&1
    rc=$?
    tess_summarise "$mode" "$name" "$out/$name.raw" "$rc" "$out" | sed "s/\$/ ($(($(date +%s) - start)) s)/"
    [ "$rc" -eq 0 ] || { tail -n 40 "$out/$name.raw"; exit 1; }
    exit 0
    ;;
*)
    echo "usage: scripts/sanitize.sh asan | valgrind [TEST...|all]" >&2
    exit 2
    ;;
esac
