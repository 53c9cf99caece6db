#!/usr/bin/env bash
# Start the Docker engine for the Harness sandbox (idempotent).
#
# - exits 0 immediately if `docker info` already works;
# - installs docker.io with apt-get if dockerd is missing;
# - registers gVisor's runsc (if installed) in /etc/docker/daemon.json;
# - starts dockerd directly (no systemd here), logging to
#   /var/log/dockerd-harness.log, and waits up to 60 s for it.
#
# Sandbox containers always run with `--network none`, so bridge networking
# is not required.  dockerd is first started with default flags; if it dies
# (typically iptables/bridge setup failing in a restricted environment) it is
# retried with `--iptables=false --ip6tables=false --bridge=none`, then
# additionally with `--storage-driver=vfs`.  Set HARNESS_DOCKERD_FLAGS to force
# a specific flag set.
set -euo pipefail

LOG=${HARNESS_DOCKERD_LOG:-/var/log/dockerd-harness.log}
TIMEOUT=${HARNESS_DOCKERD_TIMEOUT:-60}

log() { echo "[start_docker] $*" >&2; }

if docker info >/dev/null 2>&1; then
    log "docker engine already running"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    log "ERROR: docker is not running and starting dockerd requires root"
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    log "installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io iptables ca-certificates >/dev/null
fi

# gVisor (policy sandbox.runtime = runsc): register Debian's runsc with the engine
# before it starts, keeping whatever else daemon.json says. The ptrace platform works
# on these machines; --network=none is required (sandboxes have no network anyway),
# or runsc refuses to start in the root network namespace.
register_runsc() {
    local config=${HARNESS_DOCKERD_CONFIG:-/etc/docker/daemon.json}
    if [ ! -x /usr/bin/runsc ]; then
        log "runsc is not installed: policies asking for sandbox.runtime=runsc will be refused (apt-get install runsc)"
        return 0
    fi
    mkdir -p "$(dirname "$config")"
    python3 - "$config" <<'PY'
import json, os, sys
path = sys.argv[1]
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
config.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}
with open(path + ".tmp", "w") as handle:
    json.dump(config, handle, indent=2)
os.replace(path + ".tmp", path)
PY
    log "registered the runsc runtime in $config"
}
register_runsc

# A stale pid file from a dead daemon prevents dockerd from starting.
clear_stale_pid() {
    local f=/var/run/docker.pid
    if [ -f "$f" ] && ! kill -0 "$(cat "$f" 2>/dev/null)" 2>/dev/null; then
        rm -f "$f"
    fi
}
clear_stale_pid

if [ -n "${HARNESS_DOCKERD_FLAGS+x}" ]; then
    FLAG_SETS=("${HARNESS_DOCKERD_FLAGS}")
else
    FLAG_SETS=(
        ""
        "--iptables=false --ip6tables=false --bridge=none"
        "--iptables=false --ip6tables=false --bridge=none --storage-driver=vfs"
    )
fi

deadline=$(( $(date +%s) + TIMEOUT ))
mkdir -p "$(dirname "$LOG")"

for flags in "${FLAG_SETS[@]}"; do
    log "starting dockerd ${flags:-(default flags)}; log: $LOG"
    echo "=== $(date -Is) dockerd ${flags} ===" >>"$LOG"
    # shellcheck disable=SC2086
    setsid nohup dockerd $flags >>"$LOG" 2>&1 </dev/null &
    pid=$!
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if docker info >/dev/null 2>&1; then
            log "docker engine is up (dockerd pid $pid, flags: ${flags:-none})"
            exit 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "dockerd exited with flags '${flags:-none}'"
            break
        fi
        sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
        break   # still running but not ready before the deadline
    fi
    clear_stale_pid
    [ "$(date +%s)" -lt "$deadline" ] || break
done

log "ERROR: docker engine did not become ready within ${TIMEOUT}s. Last lines of $LOG:"
tail -n 40 "$LOG" >&2 || true
exit 1
