#!/bin/sh
# The client tests: tests/clients/test_*.py (Python unittest, Debian's python3) drive a
# tesserad started by tests/clients/harness.py with the field's real clients.  Run by make
# check in the build tree; prints a Check-style summary ("100%: Checks: N, Failures: F,
# Errors: E") for scripts/test.sh.  TESSERA_CLIENT_TESTS="test_x test_y" runs fewer.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${TESSERA_SRCDIR:=$(cd "$here/../.." && pwd)}"
export TESSERA_SRCDIR
TESSERA_BUILDDIR=${TESSERA_BUILDDIR:-$(pwd)}
export TESSERA_BUILDDIR
mods=${TESSERA_CLIENT_TESTS:-$(cd "$here" && ls test_*.py 2>/dev/null | sed 's/\.py$//')}
if [ -z "$mods" ]; then
    echo "100%: Checks: 0, Failures: 0, Errors: 0"
    exit 0
fi
# Debian's python3, where the packages of scripts/setup.sh are installed (a python3 of
# pyenv or a virtualenv earlier in PATH lacks them); TESSERA_PYTHON overrides.
py=${TESSERA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
# shellcheck disable=SC2086
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" timeout 1200 "$py" - $mods <<'PY'
import sys, unittest
suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:])
res = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
n = res.testsRun
f, e = len(res.failures), len(res.errors)
pct = 100 if n == 0 else (100 * (n - f - e)) // n
print(f"{pct}%: Checks: {n}, Failures: {f}, Errors: {e}")
sys.exit(0 if f + e == 0 else 1)
PY
