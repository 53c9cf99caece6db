#!/usr/bin/env bash
# Bring Harness up locally with embedded defaults: SQLite, the local Redis and
# Docker engine, a Celery worker (with beat), the ASGI web server, demo users and
# a demo run waiting for approval. Ctrl-C stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."

export HARNESS_VAR_DIR="${HARNESS_VAR_DIR:-$PWD/var}"
PORT="${PORT:-8000}"
LOGS="$HARNESS_VAR_DIR/log"
mkdir -p "$LOGS"
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

say() { echo "[up] $*" >&2; }

if ! python3 -c "import django, celery, channels, docker" 2>/dev/null; then
    say "installing Python packages"
    python3 -m pip install -q --disable-pip-version-check -r requirements.txt
fi
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
    say "installing docker.io, debootstrap and redis-server"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap redis-server >/dev/null
fi
HARNESS_NEED_POSTGRES=0 bash scripts/services.sh
say "sandbox image (built once, then cached by content)"
bash sandbox/image/build.sh >"$LOGS/image.log" 2>&1 || { tail -20 "$LOGS/image.log"; exit 1; }

python3 manage.py migrate -v0
python3 manage.py create_demo_users

# The whole process group: the supervising loop and the worker and server under it.
cleanup() { trap - EXIT INT TERM; say "stopping"; kill 0 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# One run at a time per core by default (WORKER_CONCURRENCY overrides): a run's checks
# use the CPU inside its sandbox, so more runs than cores only queue for it.
# Supervised like a deployment would: a worker that exits (e.g. on an unrecoverable
# broker error while Redis restarts) is started again; runs continue from the database.
(
    while true; do
        python3 -m celery -A harness_site worker -B -s "$HARNESS_VAR_DIR/beat-schedule" -Q "${HARNESS_QUEUE:-harness}" \
            -c "${WORKER_CONCURRENCY:-$(nproc)}" -l info >>"$LOGS/worker.log" 2>&1 || true
        echo "[up] worker exited; restarting"
        sleep 1
    done
) >>"$LOGS/worker.log" 2>&1 &
python3 -m daphne -b 127.0.0.1 -p "$PORT" harness_site.asgi:application >"$LOGS/web.log" 2>&1 &

for _ in $(seq 1 100); do
    curl -fs -o /dev/null "http://127.0.0.1:$PORT/accounts/login/" && break
    sleep 0.2
done

run_id=$(python3 manage.py create_demo_run)
for _ in $(seq 1 150); do
    status=$(python3 manage.py shell -c "from runs.models import Run; print(Run.objects.get(pk='$run_id').status)" 2>/dev/null | tail -1)
    [ "$status" != "running" ] && break
    sleep 0.4
done

cat <<INFO

  Harness is up: http://127.0.0.1:$PORT/
  Demo run $run_id is ${status:-running}.
  Sign in as reviewer / operator / admin (passwords printed above by create_demo_users).
  Logs: $LOGS   Stop: Ctrl-C

INFO
if [ "${HARNESS_UP_DETACH:-0}" = "1" ]; then
    trap - EXIT INT TERM
    exit 0
fi
wait
