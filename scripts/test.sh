#!/bin/sh
# Builds Tessera and runs the whole test suite (make check); ends with "N passed, N failed".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
"$top/scripts/build.sh" || { echo "0 passed, 1 failed"; exit 1; }
cd "$top/build"
make -j"$(nproc)" check >make-check.out 2>&1
status=$?
# Hardening (CI, or TESSERA_HARDENING=1): a short run of each fuzz target, the suite under
# ASan+UBSan, the whole suite under valgrind memcheck (every check program, two at a
# time on 2 cores; TESSERA_VALGRIND_TESTS="tests/engine/test_buf ..." names fewer, and an
# empty value the fast subset), and the fault-injection and crash programs of
# tests/faults (scripts/faults.sh, docs/testing.md).  Their Check-style summaries land in
# tests/fuzz, tests/asan, tests/valgrind and tests/faults and are counted below
# (valgrind's own output of each program: tests/valgrind/NAME.raw).  Adds about 40 min on
# 2 cores (valgrind all: ~21, faults: ~4).
rm -rf tests/fuzz tests/asan tests/valgrind tests/faults
if [ -n "${CI:-}" ] || [ "${TESSERA_HARDENING:-0}" = 1 ]; then
    "$top/scripts/fuzz.sh" "${TESSERA_FUZZ_SECONDS:-20}" >fuzz.out 2>&1
    "$top/scripts/sanitize.sh" asan >asan.out 2>&1
    # shellcheck disable=SC2086
    "$top/scripts/sanitize.sh" valgrind ${TESSERA_VALGRIND_TESTS-all} >valgrind.out 2>&1
    "$top/scripts/faults.sh" >faults.out 2>&1
fi
# Release checks (CI, or TESSERA_RELEASE_CHECKS=1): make distcheck (the tarball built,
# tested and installed out of tree) and the Debian package built from it, linted,
# installed, run with the checkout moved away and purged (scripts/release-check.sh; needs
# root or sudo).  Their summaries land in tests/release.  Adds about 21 min on 2 cores
# shared with other work (measured: distcheck 946 s, as it runs the whole make check
# again; the package 291 s, of which dpkg-buildpackage 217 s and lintian 17 s).
rm -rf tests/release
if [ -n "${CI:-}" ] || [ "${TESSERA_RELEASE_CHECKS:-0}" = 1 ]; then
    "$top/scripts/release-check.sh" >release.out 2>&1
fi
passed=0
failed=0
# Browser tests of the viewer (tests/e2e/run.mjs: headless Chromium via playwright-core,
# screenshots in build/tests/e2e/screenshots); their Check-style summary is in
# tests/e2e/e2e.log.  They need node, chromium and `npm ci` (scripts/setup.sh); in CI
# (CI=true) missing them is a failure, elsewhere the tests are skipped with a note.
rm -f tests/e2e/e2e.log
if command -v node >/dev/null 2>&1 && command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1 &&
   [ -d "$top/node_modules/playwright-core" ]; then
    TESSERAD="$top/build/tesserad" E2E_OUT="$top/build/tests/e2e" \
        timeout 900 node "$top/tests/e2e/run.mjs" >e2e.out 2>&1
    if [ ! -f tests/e2e/e2e.log ]; then
        echo "test: the browser tests did not start:"
        tail -n 20 e2e.out
        failed=$((failed + 1))
    fi
    grep -E '^e2e: .*SKIPPED' e2e.out || true
elif [ "${CI:-}" = "true" ]; then
    echo "test: the browser tests cannot run (need node, chromium and npm ci: scripts/setup.sh)"
    failed=$((failed + 1))
else
    echo "test: browser tests skipped (need node, chromium and npm ci: scripts/setup.sh)"
fi
for log in tests/engine/*.log tests/daemon/*.log tests/cli/*.log scripts/*.log tests/clients/*.log tests/e2e/*.log tests/fuzz/*.log tests/asan/*.log \
    tests/valgrind/*.log tests/faults/*.log tests/release/*.log; do
    [ -f "$log" ] || continue
    case "$log" in *test-suite.log) continue ;; esac
    # Check's summary line: "100%: Checks: N, Failures: F, Errors: E"
    line=$(tess_check_line "$log")
    if [ -z "$line" ]; then
        echo "test: $log ended without a summary (crashed?)"
        tail -n 20 "$log"
        failed=$((failed + 1))
        continue
    fi
    tess_check_counts "$line"
    passed=$((passed + n - f - e))
    failed=$((failed + f + e))
    case "$log" in
    tests/fuzz/* | tests/asan/* | tests/valgrind/* | tests/faults/* | tests/release/*)
        name=$(basename "$(dirname "$log")")/$(basename "$log" .log) ;;
    *) name=$(basename "$log" .log) ;;
    esac
    echo "test: $name: $line"
    grep -E ':[EF]:' "$log" || true
    grep -E '^golden ' "$log" || true
done
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    cat make-check.out
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
