# shellcheck shell=sh
# shellcheck disable=SC2154  # $top: set by the script that sources this file
# Shell functions the scripts share: the stale-build-system check and the Check summary
# parser.  Sourced, not run: `. "$top/scripts/lib.sh"` once $top (the source tree) is set.

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
