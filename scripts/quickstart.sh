#!/bin/sh
# Sets up (Debian packages), builds, and starts tesserad on the bundled demo data at
# http://127.0.0.1:8080/ in the background.  Stop it with: kill "$(cat build/tesserad.pid)"
# Pass --foreground to keep it in this terminal instead.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
"$top/scripts/build.sh"
listen="${TESSERA_LISTEN:-127.0.0.1:8080}"
# The build tree's tesserad serves the source tree's demo data, viewer and npm libraries
# (its compiled-in defaults are the installed paths) and keeps the jobs in build/jobs.
TESSERA_VIEWER_DIR="$top/viewer" TESSERA_NODE_MODULES="$top/node_modules"
export TESSERA_VIEWER_DIR TESSERA_NODE_MODULES
if [ "${1:-}" = "--foreground" ]; then
    exec "$top/build/tesserad" --listen "$listen" --demo-dir "$top/data/demo" \
        --jobs-dir "$top/build/jobs"
fi

if [ -f "$top/build/tesserad.pid" ] && kill -0 "$(cat "$top/build/tesserad.pid")" 2>/dev/null; then
    echo "quickstart: tesserad already running (pid $(cat "$top/build/tesserad.pid"))"
    exit 0
fi
nohup "$top/build/tesserad" --listen "$listen" --demo-dir "$top/data/demo" \
    --jobs-dir "$top/build/jobs" >"$top/build/tesserad.log" 2>&1 &
echo $! >"$top/build/tesserad.pid"
i=0
until curl -fsS "http://$listen/healthz" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$(cat "$top/build/tesserad.pid")" 2>/dev/null; then
        echo "quickstart: tesserad did not start; see build/tesserad.log:"
        cat "$top/build/tesserad.log"
        exit 1
    fi
    sleep 0.1
done
echo "quickstart: tesserad is serving the demo datasets at http://$listen/"
echo "quickstart: pid $(cat "$top/build/tesserad.pid"), log build/tesserad.log; stop with: kill \$(cat build/tesserad.pid)"
