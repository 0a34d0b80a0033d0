#!/bin/sh
# The man pages (make check): each lints clean with `mandoc -T lint -W warning`
# (Debian's mandoc; STYLE notes such as long lines are not counted), tesserad.json(5)
# documents every configuration key daemon/config.c accepts (its *_keys[] lists) and
# tessera(1) every command cli/tessera.c dispatches.  Prints a Check-style summary.
# Without mandoc the lint checks are skipped (exit 77) outside CI and fail in CI.
set -u
top=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
checks=0
failures=0
fail() {
    echo "checkman: $*"
    failures=$((failures + 1))
}

if command -v mandoc >/dev/null 2>&1; then
    for page in "$top"/man/tessera.1 "$top"/man/tesserad.8 "$top"/man/tesserad.json.5; do
        checks=$((checks + 1))
        out=$(mandoc -T lint -W warning "$page" 2>&1) || fail "mandoc -T lint: $out"
    done
elif [ "${CI:-}" = "true" ]; then
    checks=$((checks + 1))
    fail "mandoc is not installed (scripts/setup.sh)"
else
    echo "checkman: mandoc not installed: lint skipped (apt-get install mandoc)"
fi

# The keys: each `static const char *const NAME_keys[] = {...};` of load_json, with the
# prefix of its object.  A list of a new object must be added here (it fails until then).
keys=$(awk '
    /static const char \*const [a-z]+_keys\[\] = \{/ { on = 1; body = "" }
    on { body = body $0 }
    on && /\};/ {
        on = 0
        match(body, /const [a-z]+_keys/); list = substr(body, RSTART + 6, RLENGTH - 11)
        sub(/.*= *\{/, "", body); sub(/\}.*/, "", body)
        n = split(body, parts, ",")
        for (i = 1; i <= n; i++) {
            k = parts[i]; gsub(/[ "\t]/, "", k)
            if (k != "" && k != "NULL") print list, k
        }
    }' "$top/daemon/config.c")
checks=$((checks + 1))
[ -n "$keys" ] || fail "found no *_keys[] lists in daemon/config.c"
objects=" cache limits jobs viewer "
echo "$keys" | {
    f=0
    while read -r list key; do
        case $list in
        top) case " $objects datasets " in *" $key "*) continue ;; esac; name=$key ;;
        cache | limits | jobs | viewer) name=$list.$key ;;
        limit) name=limits.$key ;;
        job) name=jobs.$key ;;
        ds) name="datasets[].$key" ;;
        *) echo "checkman: daemon/config.c has a new key list ${list}_keys: name its prefix in scripts/checkman.sh"
           f=$((f + 1)); continue ;;
        esac
        if ! grep -qxF ".It Cm $name" "$top/man/tesserad.json.5"; then
            echo "checkman: tesserad.json(5) does not document the key $name (.It Cm $name)"
            f=$((f + 1))
        fi
    done
    exit $f
}
missing=$?
checks=$((checks + $(echo "$keys" | wc -l)))
failures=$((failures + missing))

cmds=$(sed -nE 's/.*strcmp\(argv\[1\], "([a-z]+)"\) == 0.*/\1/p' "$top/cli/tessera.c")
checks=$((checks + 1))
[ -n "$cmds" ] || fail "found no commands in cli/tessera.c"
for c in $cmds; do
    checks=$((checks + 1))
    grep -qxF ".Ss $c" "$top/man/tessera.1" ||
        fail "tessera(1) does not document the command $c (.Ss $c)"
done

pct=$(( (checks - failures) * 100 / checks ))
echo "$pct%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures -eq 0 ]
