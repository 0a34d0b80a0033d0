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
#   scripts/faults.sh [PROGRAM...]         e.g. scripts/faults.sh test_fault_fits
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

progs=${*:-"test_fault_jobs test_crash_jobs test_fault_caches test_fault_fits"}
mkdir -p "$out"
fail_all() {
    tess_fail_all faults "$out" "$progs" "$1"
}
cd "$top" || exit 1
tess_autoreconf 2>/dev/null || fail_all "autoreconf failed"
mkdir -p "$bdir"
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
    xargs -P "$jobs" -n 1 "$top/scripts/faults.sh" one || exit 1
exit 0
