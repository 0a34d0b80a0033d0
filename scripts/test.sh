#!/bin/sh
# Builds Tessera and runs the whole test suite (make check); ends with "N passed, N failed".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh" || { echo "0 passed, 1 failed"; exit 1; }
cd "$top/build"
make -j"$(nproc)" check >make-check.out 2>&1
status=$?
passed=0
failed=0
for log in tests/unit/*.log tests/http/*.log; do
    [ -f "$log" ] || continue
    case "$log" in *test-suite.log) continue ;; esac
    # Check's summary line: "100%: Checks: N, Failures: F, Errors: E"
    line=$(grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "test: $log ended without a summary (crashed?)"
        tail -n 20 "$log"
        failed=$((failed + 1))
        continue
    fi
    n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
    f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
    e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
    passed=$((passed + n - f - e))
    failed=$((failed + f + e))
    echo "test: $(basename "$log" .log): $line"
    grep -E ':[EF]:' "$log" || true
    grep -E '^golden ' "$log" || true
done
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    cat make-check.out
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
