# shellcheck shell=sh
# shellcheck disable=SC2154  # $top: set by the script that sources this file
# Shell functions the scripts share: the stale-build-system check and the Check summary
# parser and the summary of a program run outside automake.  Sourced, not run: `. "$top/scripts/lib.sh"` once $top (the source tree) is set.

# tess_autoreconf: runs autoreconf -fi in $top (its standard output discarded) when
# configure is missing or older than configure.ac, or Makefile.in older than
# Makefile.am.  Returns autoreconf's status, 0 when nothing was stale.
tess_autoreconf() {
    if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ] ||
        [ "$top/Makefile.am" -nt "$top/Makefile.in" ]; then
        (cd "$top" && autoreconf -fi >/dev/null)
    fi
}

# tess_configure_stale: true when the build directory (the current one) needs
# $top/configure run: it has no Makefile, or configure is newer than its Makefile.
tess_configure_stale() {
    [ ! -f Makefile ] || [ "$top/configure" -nt Makefile ]
}

# tess_check_line LOG: prints the last Check summary line of LOG,
# "P%: Checks: N, Failures: F, Errors: E"; nothing when it has none (or LOG is missing).
tess_check_line() {
    grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$1" 2>/dev/null |
        tail -n 1
}

# tess_check_counts LINE: sets n, f and e to the checks, failures and errors of the Check
# summary line LINE (each empty when LINE does not say it).
# shellcheck disable=SC2034
tess_check_counts() {
    n=$(echo "$1" | sed -nE 's/.*Checks: ([0-9]+).*/\1/p')
    f=$(echo "$1" | sed -nE 's/.*Failures: ([0-9]+).*/\1/p')
    e=$(echo "$1" | sed -nE 's/.*Errors: ([0-9]+).*/\1/p')
}

# tess_summarise MODE NAME LOG RC OUTDIR: writes OUTDIR/NAME.log for scripts/test.sh: the
# sanitizer reports found in LOG (20 lines at most), Check's lines for the failed checks
# (file:line:F: or :E:, 10 at most; test.sh prints them) and LOG's Check line, with one error
# more when RC != 0 but Check counted no failure (a leak report at exit, a sanitizer
# abort, a crash); prints "MODE: NAME: <the line>".
tess_summarise() {
    mode=$1 name=$2 log=$3 rc=$4 out=$5
    tess_check_counts "$(tess_check_line "$log")"
    n=${n:-0} f=${f:-0} e=${e:-0}
    if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then
        n=$((n + 1))
        e=$((e + 1))
    fi
    pct=100
    [ "$n" -gt 0 ] && pct=$(( (n - f - e) * 100 / n ))
    {
        grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:|definitely lost|Invalid (read|write)|uninitialised|SUMMARY:' "$log" | head -n 20
        grep -E '^[^ ]+:[0-9]+:[EF]:' "$log" | head -n 10
        echo "$pct%: Checks: $n, Failures: $f, Errors: $e"
    } >"$out/$name.log"
    echo "$mode: $name: $pct%: Checks: $n, Failures: $f, Errors: $e"
}

# tess_fail_all MODE LOGDIR "NAMES" MESSAGE: what a script that cannot build its programs
# leaves for scripts/test.sh: LOGDIR/NAME.log for each of NAMES, saying MESSAGE, with one
# error; prints "MODE: MESSAGE" on stderr and exits 1.
tess_fail_all() {
    for t in $3; do
        { echo "$1: $4"; echo "0%: Checks: 1, Failures: 0, Errors: 1"; } >"$2/$t.log"
    done
    echo "$1: $4" >&2
    exit 1
}
