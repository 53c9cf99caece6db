#!/usr/bin/env bash
# Start the local services Harness needs, if they are not running: Redis,
# PostgreSQL (for the test suite's PostgreSQL pass) and the Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[services] $*" >&2; }

if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
    log "starting redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if [ "${HARNESS_NEED_POSTGRES:-1}" = "1" ] && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    log "starting postgresql"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
    for _ in $(seq 1 100); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.1; done
fi

bash scripts/start_docker.sh
