#!/bin/sh
# The layering check (in the spirit of curl's checksrc), run by make check:
#   - the engine includes no daemon or CLI header, the daemon no CLI header, the CLI no
#     daemon header;
#   - each third-party library's headers stand only in the files that own it;
#   - no source file cites an issue number;
#   - each header's include guard is named after its path.
# Prints one line per violation and a Check-style summary ("100%: Checks: N, Failures: F,
# Errors: 0") that scripts/test.sh counts; exits 1 on any violation.
set -u
top=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top" || exit 2
checks=0
failures=0

# rule NAME FILES-MATCHING-REGEX ALLOWED-FILES...: the files of the product (engine, daemon,
# cli) that include a header matching the regex must all be among the allowed ones.
rule() {
    name=$1 regex=$2
    shift 2
    checks=$((checks + 1))
    bad=""
    for f in $(git ls-files 'engine/*.[ch]' 'daemon/*.[ch]' 'cli/*.[ch]' 2>/dev/null ||
               find engine daemon cli -name '*.[ch]'); do
        grep -qE "^[[:space:]]*#[[:space:]]*include[[:space:]]*$regex" "$f" || continue
        ok=0
        for a in "$@"; do
            case "$f" in $a) ok=1 ;; esac
        done
        [ $ok -eq 1 ] || bad="$bad $f"
    done
    if [ -n "$bad" ]; then
        echo "checklayers: $name:$bad"
        failures=$((failures + 1))
    fi
}

rule "engine includes a daemon or CLI header" '"(daemon|cli)/' 'daemon/*' 'cli/*'
rule "daemon includes a CLI header" '"cli/' 'engine/*' 'cli/*'
rule "CLI includes a daemon header" '"daemon/' 'engine/*' 'daemon/*'
# below NAME DIR ALLOWED...: the files under DIR include project headers only from DIR
# itself and the ALLOWED folders (the layers below it).
below() {
    name=$1 dir=$2
    shift 2
    checks=$((checks + 1))
    bad=""
    for f in $(find "$dir" -name '*.[ch]'); do
        for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z]*\/[a-z]*\)\/.*/\1/p;
                              s/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(daemon\)\/[a-z_]*\.h".*/\1/p' "$f"); do
            ok=0
            case "$inc" in "$dir"|"$dir"/*) ok=1 ;; esac
            for a in "$@"; do
                case "$inc" in $a) ok=1 ;; esac
            done
            [ $ok -eq 1 ] || bad="$bad $f($inc)"
        done
    done
    if [ -n "$bad" ]; then
        echo "checklayers: $name:$bad"
        failures=$((failures + 1))
    fi
}

# The engine's order, bottom up: base, fits, sky, image, then hips, mosaic, cube.
below "engine/base includes a layer above it" engine/base
below "engine/fits includes a layer above it" engine/fits engine/base
below "engine/sky includes a layer above it" engine/sky engine/base engine/fits
below "engine/image includes a layer above it" engine/image engine/base engine/fits engine/sky
below "engine/hips includes a layer above it" engine/hips engine/base engine/fits engine/sky engine/image
below "engine/mosaic includes a layer above it" engine/mosaic engine/base engine/fits engine/sky engine/image
below "engine/cube includes a layer above it" engine/cube engine/base engine/fits engine/sky engine/image
# The daemon's folders: caches and job types never use a handler.
below "daemon/cache includes a handler or a job type" daemon/cache 'engine/*' daemon
below "daemon/jobs includes a handler" daemon/jobs 'engine/*' daemon daemon/cache daemon/collection
below "daemon/collection includes a handler or a job type" daemon/collection 'engine/*' daemon

rule "cfitsio outside its module" '<(fitsio|longnam|fitsio2)\.h>' \
    'engine/fits/*'
rule "wcslib outside its module" '<wcs(lib/|\.h|hdr|fix|trig|math|util)' 'engine/sky/skywcs.c'
# http.c is the HTTP front end only: what it serves (the job runner included) comes
# composed by daemon/app.c, and the routes that need jobs are handlers of daemon/api.
checks=$((checks + 1))
if grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"daemon/jobs/' daemon/http.c daemon/http.h; then
    echo "checklayers: daemon/http.c or http.h includes a job runner header (daemon/jobs/)"
    failures=$((failures + 1))
fi
rule "libmicrohttpd outside daemon/http.c" '<microhttpd\.h>' 'daemon/http.c'
rule "SQLite outside the job store and the collection index" '<sqlite3\.h>' \
    'daemon/jobs/jobstore_sqlite.c' 'daemon/collection/colindex_sqlite.c'
rule "libpq outside the job store and the collection index" '<libpq-fe\.h>' \
    'daemon/jobs/jobstore_pg.c' 'daemon/collection/colindex_pg.c'
rule "libxml2 outside the IVOA XML writer" '<libxml/' 'daemon/api/vo_xml.c'
rule "chealpix outside engine/hips" '<chealpix\.h>' 'engine/hips/*'
rule "fftw3 outside engine/cube" '<fftw3\.h>' 'engine/cube/*'
rule "libcurl outside the CLI's job client" '<curl/' 'cli/cmd_jobs.c'
rule "libpng outside the image codecs" '<png\.h>' 'engine/image/encode.c' 'engine/image/stack.c' \
    'engine/image/pngframe.c'
rule "libjpeg outside the image codecs" '<jpeglib\.h>' 'engine/image/encode.c'
rule "libtiff outside its module" '<tiffio\.h>' 'engine/image/tiffframe.c'
rule "libblosc outside the Zarr chunk codecs" '<blosc\.h>' 'engine/image/zchunk.c'

# Each header's include guard is named after its path: engine/sky/kernels.h guards with
# TESSERA_ENGINE_SKY_KERNELS_H, so a moved or copied header cannot collide with another.
checks=$((checks + 1))
bad=""
for f in $(git ls-files 'engine/*.h' 'daemon/*.h' 'cli/*.h' 'tests/*.h' 'bench/*.h' 2>/dev/null ||
           find engine daemon cli tests bench -name '*.h'); do
    want=TESSERA_$(printf '%s' "$f" | tr 'a-z/.' 'A-Z__')
    grep -qx "#ifndef $want" "$f" && grep -qx "#define $want" "$f" || bad="$bad $f"
done
if [ -n "$bad" ]; then
    echo "checklayers: include guards not named after their files (TESSERA_PATH_H):$bad"
    failures=$((failures + 1))
fi

checks=$((checks + 1))
cites=$(grep -nE '[Ii]ssues? #?[0-9]+' $(find engine daemon cli tests bench scripts .ci \
    -type f \( -name '*.[ch]' -o -name '*.inc' -o -name '*.sh' -o -name '*.mjs' \
    -o -name '*.lua' -o -path 'bench/*' -o -path 'scripts/*' -o -path '.ci/*' \) \
    ! -path 'bench/data/*' ! -path 'tests/data/*' ! -path 'tests/fuzz/corpus/*' 2>/dev/null) \
    Makefile.am configure.ac 2>/dev/null | grep -v '^scripts/checklayers.sh:')
if [ -n "$cites" ]; then
    echo "checklayers: code cites issue numbers (the reason belongs in the comment):"
    echo "$cites"
    failures=$((failures + 1))
fi

pct=$(( (checks - failures) * 100 / checks ))
echo "$pct%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures -eq 0 ]
