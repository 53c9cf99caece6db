#!/usr/bin/env bash
# Stop what `make up` started, by the pids it recorded in var/up.pids (each the
# leader of its own process group: the worker's supervising loop goes with its
# worker), and nothing else: a Redis or Docker engine that was already running stays.
# What is stored (database, passwords, runs, mail) stays for the next `make up`.
set -uo pipefail
cd "$(dirname "$0")/.."
HARNESS_VAR_DIR="${HARNESS_VAR_DIR:-$PWD/var}"
PIDS="$HARNESS_VAR_DIR/up.pids"
say() { echo "[down] $*" >&2; }

[ -s "$PIDS" ] || { say "nothing recorded in $PIDS: nothing to stop"; exit 0; }
# The last started first: the web server and worker before the services they use.
tac "$PIDS" | while read -r name pid; do
    if kill -0 "$pid" 2>/dev/null; then
        # A process group where there is one (what up.sh started with setsid), else the process.
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
        fi
        say "stopped $name (pid $pid)"
    fi
done
rm -f "$PIDS"
