#!/usr/bin/env bash
# Bring Harness up locally with embedded defaults: SQLite, the local Redis and
# Docker engine, a Celery worker (with beat), the ASGI web server, demo users and
# a demo run waiting for approval, and a local mail catcher. Ctrl-C or `make down`
# (scripts/down.sh, by the pids recorded in var/up.pids) stops what it started. A
# second `make up` keeps what is there (passwords, runs); RESET=1 starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."

export HARNESS_VAR_DIR="${HARNESS_VAR_DIR:-$PWD/var}"
PORT="${PORT:-8000}"
LOGS="$HARNESS_VAR_DIR/log"

PIDS="$HARNESS_VAR_DIR/up.pids"
MAIL_PORT="${MAIL_PORT:-8025}"
MAIL_PAGE_PORT="${MAIL_PAGE_PORT:-8026}"

say() { echo "[up] $*" >&2; }
# Each process started is its own process group, recorded so make down stops it and
# everything under it (the worker's supervising loop and the worker with it).
started() { echo "$1 $2" >>"$PIDS"; }
# Stops with what to do, when something is missing and this script cannot add it.
need() { say "cannot continue: $*"; exit 1; }

# The var directory (database, artifacts, workspaces, logs) is created when missing.
mkdir -p "$LOGS" 2>/dev/null || need "HARNESS_VAR_DIR=$HARNESS_VAR_DIR cannot be created; point it at a directory you can write"
[ -w "$HARNESS_VAR_DIR" ] || need "HARNESS_VAR_DIR=$HARNESS_VAR_DIR is not writable; point it at a directory you can write"
if [ -s "$PIDS" ]; then
    while read -r _name pid; do
        kill -0 "$pid" 2>/dev/null && need "Harness is already up (pid $pid, $_name); stop it first: make down"
    done <"$PIDS"
    rm -f "$PIDS"
fi

# Production settings, not debug pages: a mistyped URL gets the project's 404, never
# Django's URL listing. The secret key is generated once and kept under var/ (0600).
export DEBUG="${DEBUG:-0}"
if [ -z "${SECRET_KEY:-}" ]; then
    if [ ! -s "$HARNESS_VAR_DIR/secret_key" ]; then
        (umask 077 && python3 -c "import secrets; print(secrets.token_urlsafe(50))" >"$HARNESS_VAR_DIR/secret_key")
    fi
    SECRET_KEY="$(cat "$HARNESS_VAR_DIR/secret_key")"
    export SECRET_KEY
fi
# Plain HTTP on 127.0.0.1: Secure-only cookies would never come back; Daphne serves
# the static files itself (no front server here).
export HARNESS_SECURE_COOKIES="${HARNESS_SECURE_COOKIES:-0}"
export HARNESS_SERVE_STATIC="${HARNESS_SERVE_STATIC:-1}"

# Installs only what is missing, and only where it can: as root with apt-get.
can_apt() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
    say "installing $*"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# From the lock, hashes included: every package at the version the tests and the
# images have.
if ! python3 -c "import django, celery, channels, daphne, docker, redis" 2>/dev/null; then
    say "installing the Python packages of requirements.lock"
    python3 -m pip install -q --disable-pip-version-check -r requirements.lock \
        || need "pip could not install requirements.lock; run: python3 -m pip install -r requirements.lock (in a virtualenv if you are not root)"
fi

# Redis: one that already answers (REDIS_URL or the local default) is used as it is.
REDIS_HOST=$(python3 -c "import os, urllib.parse as u; print(u.urlparse(os.environ.get('REDIS_URL', 'redis://127.0.0.1:6379/0')).hostname or '127.0.0.1')")
REDIS_PORT=$(python3 -c "import os, urllib.parse as u; print(u.urlparse(os.environ.get('REDIS_URL', 'redis://127.0.0.1:6379/0')).port or 6379)")
redis_answers() { python3 -c "import redis, sys; redis.Redis(host='$REDIS_HOST', port=$REDIS_PORT, socket_timeout=1).ping()" 2>/dev/null; }
if ! redis_answers; then
    if ! command -v redis-server >/dev/null 2>&1; then
        can_apt && apt_install redis-server redis-tools \
            || need "no Redis answers at $REDIS_HOST:$REDIS_PORT and redis-server is not installed; install it (apt-get install redis-server, brew install redis) or set REDIS_URL to a running Redis"
    fi
    say "starting redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
        --dir "$HARNESS_VAR_DIR" --logfile "$LOGS/redis.log" --pidfile "$HARNESS_VAR_DIR/redis.pid"
    for _ in $(seq 1 50); do redis_answers && break; sleep 0.1; done
    redis_answers || need "redis-server did not start; see $LOGS/redis.log"
    started redis "$(cat "$HARNESS_VAR_DIR/redis.pid")"
fi

# Docker: an engine that already answers (a local daemon, Docker Desktop, DOCKER_HOST)
# is used as it is; only without one is dockerd installed or started.
if ! docker info >/dev/null 2>&1; then
    if ! command -v dockerd >/dev/null 2>&1; then
        can_apt && apt_install docker.io iptables ca-certificates \
            || need "no Docker engine answers and dockerd is not installed; start Docker Desktop, set DOCKER_HOST to an engine, or install docker.io (apt-get install docker.io) as root"
    fi
    [ "$(id -u)" -eq 0 ] || need "no Docker engine answers and starting dockerd needs root; start it (sudo dockerd, or sudo systemctl start docker) or set DOCKER_HOST"
    bash scripts/start_docker.sh
    [ -s /var/run/docker.pid ] && started dockerd "$(cat /var/run/docker.pid)"
fi

say "sandbox image (built once, then cached by content)"
if ! docker image inspect "${HARNESS_SANDBOX_IMAGE:-harness-sandbox:latest}" >/dev/null 2>&1 && ! command -v debootstrap >/dev/null 2>&1; then
    can_apt && apt_install debootstrap \
        || need "the sandbox image is not built and debootstrap is not installed; install it as root (apt-get install debootstrap) or load the image harness-sandbox:latest"
fi
bash sandbox/image/build.sh >"$LOGS/image.log" 2>&1 || { tail -20 "$LOGS/image.log"; exit 1; }

python3 manage.py migrate -v0
if [ "${RESET:-0}" = "1" ]; then
    say "RESET=1: emptying the database (runs, requests, users) and giving new demo passwords"
    python3 manage.py flush --noinput
    python3 manage.py migrate -v0
fi
# A second make up keeps the passwords it gave (var/demo_passwords, 0600).
python3 manage.py create_demo_users --keep "$HARNESS_VAR_DIR/demo_passwords" $([ "${RESET:-0}" = "1" ] && echo --reset)

cleanup() { trap - EXIT INT TERM; say "stopping"; bash scripts/down.sh || true; }
trap cleanup EXIT INT TERM

# Mail goes to a local catcher (unless a relay is configured): nothing leaves the machine.
if [ -z "${HARNESS_SMTP_HOST:-}" ]; then
    # Only the catcher's part of the dev lock (aiosmtpd and what it needs), with its hashes.
    if ! python3 -c "import aiosmtpd" 2>/dev/null; then
        python3 scripts/locked.py part requirements-dev.lock aiosmtpd >"$HARNESS_VAR_DIR/mail-catcher.lock"
        python3 -m pip install -q --disable-pip-version-check -r "$HARNESS_VAR_DIR/mail-catcher.lock"
    fi
    setsid python3 scripts/mail_catcher.py --smtp-port "$MAIL_PORT" --http-port "$MAIL_PAGE_PORT" --dir "$HARNESS_VAR_DIR/mail" >"$LOGS/mail.log" 2>&1 &
    started mail-catcher $!
    export HARNESS_MAIL=1 HARNESS_SMTP_HOST=127.0.0.1 HARNESS_SMTP_PORT="$MAIL_PORT" HARNESS_SMTP_SECURITY=none
    export HARNESS_MAIL_CATCHER_URL="http://127.0.0.1:$MAIL_PAGE_PORT/" HARNESS_PUBLIC_URL="http://127.0.0.1:$PORT"
fi

# One run at a time per core by default (WORKER_CONCURRENCY overrides): a run's checks
# use the CPU inside its sandbox, so more runs than cores only queue for it.
# Supervised like a deployment would: a worker that exits (e.g. on an unrecoverable
# broker error while Redis restarts) is started again; runs continue from the database.
export LOGS
setsid bash -c '
    while true; do
        python3 -m celery -A harness_site worker -B -s "$HARNESS_VAR_DIR/beat-schedule" -Q "${HARNESS_QUEUE:-harness}" \
            -c "${WORKER_CONCURRENCY:-$(nproc)}" -l info >>"$LOGS/worker.log" 2>&1 || true
        echo "[up] worker exited; restarting"
        sleep 1
    done' >>"$LOGS/worker.log" 2>&1 &
started worker $!
setsid python3 -m daphne -b 127.0.0.1 -p "$PORT" harness_site.asgi:application >"$LOGS/web.log" 2>&1 &
started web $!

for _ in $(seq 1 100); do
    curl -fs -o /dev/null "http://127.0.0.1:$PORT/accounts/login/" && break
    sleep 0.2
done

# Once: a second make up shows the runs of the first, it starts no more.
run_id=$(python3 manage.py create_demo_run --once)
# The second project's own run: its member sees it, the demo project's do not.
python3 manage.py create_demo_run --once --user payments >/dev/null
for _ in $(seq 1 150); do
    status=$(python3 manage.py shell -c "from runs.models import Run; print(Run.objects.get(pk='$run_id').status)" 2>/dev/null | tail -1)
    [ "$status" != "running" ] && break
    sleep 0.4
done

cat <<INFO

  Harness is up: http://127.0.0.1:$PORT/
  Demo run $run_id is ${status:-running}.
  Sign in as reviewer / operator (project demo), payments / treasurer (project
  payments) or admin (every project); passwords printed above by create_demo_users
  (kept in $HARNESS_VAR_DIR/demo_passwords).
  Mail sent: ${HARNESS_MAIL_CATCHER_URL:-your relay}
  Logs: $LOGS   Stop: Ctrl-C or make down   Start afresh: make up RESET=1

INFO
if [ "${HARNESS_UP_DETACH:-0}" = "1" ]; then
    trap - EXIT INT TERM
    exit 0
fi
wait
