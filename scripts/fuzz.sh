#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined)
# in build-fuzz and runs each for SECONDS (default 25) from its seed corpus.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 300 fuzz_header
# A finding stops that target: the input is saved as build-fuzz/artifacts/TARGET-crash-*
# (or -leak-, -timeout-, -oom-); rerun it with build-fuzz/tests/fuzz/TARGET FILE.
# For scripts/test.sh each target writes a Check-style summary line into
# $TESSERA_FUZZ_LOGDIR (default build/tests/fuzz/TARGET.log): 1 check, failed on a finding.
# Exit status: 0 when no target found anything.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$top/scripts/lib.sh"
secs=${1:-25}
[ $# -gt 0 ] && shift
targets=${*:-"fuzz_params fuzz_iiif fuzz_hips fuzz_header fuzz_jobs fuzz_config fuzz_dataset fuzz_tiff
         fuzz_soda fuzz_datalink"}
bdir=${TESSERA_FUZZ_BUILD:-$top/build-fuzz}
logdir=${TESSERA_FUZZ_LOGDIR:-$top/build/tests/fuzz}
cc=${CC_FUZZ:-clang}
mkdir -p "$logdir"

fail_all() {
    tess_fail_all fuzz "$logdir" "$targets" "$1"
}

command -v "$cc" >/dev/null 2>&1 || fail_all "$cc not found (scripts/setup.sh installs clang)"
cd "$top"
tess_autoreconf 2>/dev/null || fail_all "autoreconf failed"
mkdir -p "$bdir"
cd "$bdir"
if tess_configure_stale; then
    CC="$cc" "$top/configure" --enable-fuzzing >configure.out 2>&1 ||
        fail_all "configure --enable-fuzzing failed (see $bdir/configure.out)"
fi
progs=""
for t in $targets; do progs="$progs tests/fuzz/$t"; done
# shellcheck disable=SC2086
make -j"$(nproc)" $progs >make.out 2>&1 || fail_all "build failed (see $bdir/make.out)"

# The targets that open the demo catalog (fuzz_jobs) read the source tree's demo data, as
# make check's programs do, not the installed paths compiled into the build.
TESSERA_DEMO_DIR="$top/data/demo"
export TESSERA_DEMO_DIR
status=0
for t in $targets; do
    mkdir -p "corpus/$t" artifacts
    rm -f artifacts/"$t"-*
    log="$logdir/$t.log"
    # -timeout: one input may take at most 10 s; -rss_limit_mb: 2 GB.
    timeout $((secs + 120)) "./tests/fuzz/$t" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$t-" \
        "corpus/$t" "$top/tests/fuzz/corpus/$t" >"$bdir/$t.out" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$bdir/$t.out" | head -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$bdir/$t.out" | head -n 1)
    {
        echo "fuzz: $t: ${runs:-0} runs in ${secs} s (${rate:-0} exec/s), exit $rc"
        if [ "$rc" -eq 0 ]; then
            echo "100%: Checks: 1, Failures: 0, Errors: 0"
        else
            grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$bdir/$t.out" | head -n 20
            ls artifacts/"$t"-* 2>/dev/null
            echo "0%: Checks: 1, Failures: 1, Errors: 0"
        fi
    } >"$log"
    head -n 1 "$log"
    [ "$rc" -eq 0 ] || { status=1; sed -n '2,$p' "$log"; }
done
exit $status
