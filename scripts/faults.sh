#!/bin/sh
# Fault injection (docs/testing.md): builds build-faults (configure --enable-fault-injection:
# ASan+UBSan, and the programs of tests/faults, in which allocations and file I/O fail on
# demand) and runs the programs, TESSERA_FAULTS_JOBS (default: the number of cores) at a
# time:
#   test_fault_fits    FITS reading under allocation and I/O faults
#   test_fault_caches  the tile cache, the disk cache and the plane store under faults
#   test_fault_jobs    the job store under faults, then reopened and resumed
#   test_crash_jobs    the job store stopped before and after every commit (and with a
#                      power loss that drops what was not synced), then resumed
# and then, one at a time, the scenarios: a tesserad of ./build (TESSERA_SCENARIO_BUILD)
# driven by real clients through a bad day, each a test of tests/clients named here:
#   scenario_database_stalled  the jobs database held still (SIGSTOP) under a server:
#                      test_cluster's test_database_stalled
#   scenario_soda_storm  six 256-vertex SODA polygons at once while slices are timed:
#                      test_vo_hostile's test_polygon_storm_leaves_other_requests_fast
# A scenario skipped (PostgreSQL or a Python package missing) counts as an error.
#   scripts/faults.sh [PROGRAM|SCENARIO...]  e.g. scripts/faults.sh test_fault_fits
# Each fault loop runs at most TESSERA_FAULT_CAP runs (default 300, the job store's 60;
# 0 = every fault point; TESSERA_FAULT_SEED picks which points when capped).  A program's
# output is in build-faults/tests/faults/NAME.out; for scripts/test.sh a Check-style
# summary goes to build/tests/faults/NAME.log ("N%: Checks: N, Failures: F, Errors: E"; a program that
# ended badly after Check saw it pass, a leak report at exit or a crash, counts one error
# more).  Exit status: 0 when every program passed.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
bdir=${TESSERA_FAULTS_BUILD:-$top/build-faults}
out=${TESSERA_SUMMARY_DIR:-$top/build/tests}/faults

# The test of tests/clients a scenario runs (unittest's name), or "" for a program.
scenario_test() {
    case $1 in
    scenario_database_stalled) echo test_cluster.TestCluster.test_database_stalled ;;
    scenario_soda_storm)
        echo test_vo_hostile.TestVoHostile.test_polygon_storm_leaves_other_requests_fast ;;
    scenario_*) echo unknown ;;
    *) echo "" ;;
    esac
}

if [ "${1:-}" = scenario ]; then
    # scenario NAME: runs one scenario (in the build directory, the current one).
    name=$2
    test=$(scenario_test "$name")
    sbuild=${TESSERA_SCENARIO_BUILD:-$top/build}
    start=$(date +%s)
    mkdir -p tests/faults
    if [ "$test" = unknown ]; then
        echo "no scenario named $name" >"tests/faults/$name.out"
        rc=1
    elif [ ! -x "$sbuild/tesserad" ]; then
        echo "no tesserad in $sbuild: run scripts/build.sh first" >"tests/faults/$name.out"
        rc=1
    else
        (cd "$sbuild" && TESSERA_BUILDDIR="$sbuild" TESSERA_CLIENT_TESTS="$test" \
            "$top/tests/clients/run.sh") >"tests/faults/$name.out" 2>&1
        rc=$?
        # A scenario that did not run proved nothing.
        if grep -q '\.\.\. skipped' "tests/faults/$name.out"; then
            rc=1
        fi
    fi
    tess_summarise faults "$name" "tests/faults/$name.out" "$rc" "$out" |
        sed "s/\$/ ($(($(date +%s) - start)) s)/"
    { grep -E '^(FAIL|ERROR):|skipped' "tests/faults/$name.out"; cat "$out/$name.log"; } \
        >"$out/$name.log.new" && mv "$out/$name.log.new" "$out/$name.log"
    [ "$rc" -eq 0 ] || { tail -n 15 "tests/faults/$name.out"; exit 1; }
    exit 0
fi

if [ "${1:-}" = one ]; then
    # one NAME: runs one program (in the build directory, the current one).
    name=$2
    start=$(date +%s)
    # halt_on_error: a UBSan report ends the program (and so fails the test).
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$top/tests/lsan.supp} \
    CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-2} \
        "./tests/faults/$name" >"tests/faults/$name.out" 2>&1
    rc=$?
    tess_summarise faults "$name" "tests/faults/$name.out" "$rc" "$out" |
        sed "s/\$/ ($(($(date +%s) - start)) s)/"
    # The summary also keeps each loop's line and Check's failure lines.
    { grep -E '^(faults|crash): |:[EF]:' "tests/faults/$name.out"; cat "$out/$name.log"; } \
        >"$out/$name.log.new" && mv "$out/$name.log.new" "$out/$name.log"
    grep -E '^(faults|crash): ' "tests/faults/$name.out"
    [ "$rc" -eq 0 ] || { grep -E ':[EF]:' "tests/faults/$name.out" | head -n 5; exit 1; }
    exit 0
fi

names=${*:-"test_fault_jobs test_crash_jobs test_fault_caches test_fault_fits scenario_database_stalled scenario_soda_storm"}
progs="" scenarios=""
for p in $names; do
    if [ -n "$(scenario_test "$p")" ]; then scenarios="$scenarios $p"; else progs="$progs $p"; fi
done
mkdir -p "$out"
fail_all() {
    tess_fail_all faults "$out" "$names" "$1"
}
mkdir -p "$bdir"
status=0
if [ -n "$progs" ]; then
    cd "$top" || exit 1
    tess_autoreconf 2>/dev/null || fail_all "autoreconf failed"
    cd "$bdir" || exit 1
    if tess_configure_stale; then
        "$top/configure" --enable-fault-injection >configure.out 2>&1 ||
            fail_all "configure --enable-fault-injection failed (see $bdir/configure.out)"
    fi
    targets=""
    for p in $progs; do targets="$targets tests/faults/$p"; done
    # shellcheck disable=SC2086
    make -j"$(nproc)" $targets >make.out 2>&1 || { tail -n 30 make.out; fail_all "build failed (see $bdir/make.out)"; }
    jobs=${TESSERA_FAULTS_JOBS:-$(nproc)}
    [ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
    # shellcheck disable=SC2086
    printf '%s\n' $progs |
        TESSERA_SUMMARY_DIR="${TESSERA_SUMMARY_DIR:-$top/build/tests}" \
        xargs -P "$jobs" -n 1 "$top/scripts/faults.sh" one || status=1
fi
# The scenarios time their requests: one at a time, after the programs, not beside them.
cd "$bdir" || exit 1
for p in $scenarios; do
    TESSERA_SUMMARY_DIR="${TESSERA_SUMMARY_DIR:-$top/build/tests}" \
        "$top/scripts/faults.sh" scenario "$p" || status=1
done
exit $status
