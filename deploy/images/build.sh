#!/usr/bin/env bash
# Build every image docker-compose.yml runs, without any container registry:
#
#   harness-postgres:<digest>  Debian's postgresql (15) + postgres-entrypoint.sh
#   harness-redis:<digest>     Debian's redis-server (7.0)
#   harness-python:<digest>    Debian's python3 (3.11) and git, with requirements.lock
#                              installed in /opt/harness-venv from wheels the host's
#                              pip fetched (the image build itself has no network),
#                              each checked against the lock's hashes
#   harness-app:<image id>     the root Dockerfile on harness-python (PYTHON_IMAGE)
#   harness-sandbox:<digest>   sandbox/image/build.sh
#
# Root filesystems come from scripts/debian_image.sh (debootstrap, cached by content
# under ${HARNESS_CACHE_DIR:-/var/cache/harness}); an image whose inputs did not
# change is not rebuilt. Progress goes to stderr; stdout gets the lines compose
# needs, e.g. for .env:
#
#   HARNESS_APP_IMAGE=harness-app:...     HARNESS_POSTGRES_IMAGE=harness-postgres:...
#   HARNESS_REDIS_IMAGE=harness-redis:... HARNESS_SANDBOX_IMAGE=harness-sandbox:...
#
# Usage: deploy/images/build.sh [--env FILE]   (--env also sets those keys in FILE)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
DEBIAN_IMAGE_LOG_NAME=deploy-images
# shellcheck source=../../scripts/debian_image.sh
. "$REPO/scripts/debian_image.sh"

ENV_FILE=""
case "${1:-}" in
    --env) ENV_FILE=${2:?--env needs a file} ;;
    "") ;;
    *) di_die "usage: $0 [--env FILE]" ;;
esac

PG_ENTRYPOINT="$SCRIPT_DIR/postgres-entrypoint.sh"
REQUIREMENTS="$REPO/requirements.lock"
# Debian bookworm's PostgreSQL; its binaries (initdb, postgres, pg_isready) go first on PATH.
PG_BIN=/usr/lib/postgresql/15/bin
VENV=/opt/harness-venv
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

passwd_id() {  # passwd_id ROOTFS USER -> "uid:gid" from the rootfs's own passwd
    awk -F: -v u="$2" '$1 == u { print $3 ":" $4 }' "$1/etc/passwd"
}

postgres_rootfs() {
    local r=$1 owner
    owner=$(passwd_id "$r" postgres)
    [ -n "$owner" ] || di_die "the postgresql package created no postgres user"
    # The package's own cluster: the entry point creates one in PGDATA instead.
    rm -rf "${r:?}"/etc/postgresql/* "${r:?}"/var/lib/postgresql/*
    install -d -o "${owner%:*}" -g "${owner#*:}" -m 700 "$r/var/lib/postgresql/data"
    install -d -o "${owner%:*}" -g "${owner#*:}" -m 2775 "$r/run/postgresql"
    install -m 755 "$PG_ENTRYPOINT" "$r/usr/local/bin/harness-postgres-entrypoint"
}

redis_rootfs() {
    local r=$1 owner
    owner=$(passwd_id "$r" redis)
    [ -n "$owner" ] || di_die "the redis-server package created no redis user"
    install -d -o "${owner%:*}" -g "${owner#*:}" -m 750 "$r/data"
}

host_pip_wheel() {  # host_pip_wheel DIR ARGS...: the host's pip, without its per-index noise
    local dir=$1
    shift
    python3 -m pip wheel -q --disable-pip-version-check -w "$dir" "$@" 2>&1 |
        { grep -v '^WARNING: Location .* is ignored' || true; } >&2
}

# The wheels of requirements.lock, fetched once per lock by the host's pip (its
# indexes, proxies and certificates), which checks each against the lock's hashes;
# prints the directory. Every package there has a wheel on PyPI: a wheel built here
# from a source archive would not match the lock, and the image's pip would refuse it.
wheelhouse() {
    local dir="$HARNESS_CACHE_DIR/wheels-$(content_digest "$REQUIREMENTS")"
    if [ ! -f "$dir/requirements.lock" ]; then
        python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
            di_die "the host's python3 must be 3.11 (Debian bookworm's) to fetch wheels for the image"
        di_log "fetching wheels for requirements.lock into $dir"
        find "$HARNESS_CACHE_DIR" -maxdepth 1 -name 'wheels-*' -exec rm -rf {} +
        rm -rf "$dir.tmp"
        host_pip_wheel "$dir.tmp" --only-binary=:all: -r "$REQUIREMENTS"
        cp "$REQUIREMENTS" "$dir.tmp/requirements.lock"
        mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
}

# python_image BASE: BASE with requirements.lock installed in a virtualenv, installed
# in a container without network from the wheelhouse, committed as one layer. The
# image's pip checks each wheel against the lock's hashes too. The lock was resolved
# for Python 3.11.0's markers, so what the image's 3.11.2 needs beyond the host's
# 3.11 (e.g. python_full_version < "3.11.3") is in it.
python_image() {
    local base=$1 tag wheels cid
    tag="harness-python:$(content_digest "base=$base" "$(declare -f python_image)" "$REQUIREMENTS")"
    if image_exists "$tag"; then
        di_log "cache hit: $tag"
        echo "$tag"
        return 0
    fi
    wheels=$(wheelhouse)
    di_log "installing requirements.lock into $tag"
    cid=$(docker create --network none --user root -v "$wheels:/wheels:ro" "$base" \
        sh -c "python3 -m venv $VENV && $VENV/bin/pip install -q --no-index --no-cache-dir --disable-pip-version-check --require-hashes --find-links /wheels -r /wheels/requirements.lock")
    if ! docker start -a "$cid" >&2; then
        docker rm -f "$cid" >/dev/null
        di_die "installing requirements.lock failed"
    fi
    docker commit \
        --change "ENV PATH=$VENV/bin:$BASE_PATH" \
        --change "ENV VIRTUAL_ENV=$VENV" \
        --change 'CMD ["python3"]' \
        "$cid" "$tag" >/dev/null
    docker rm "$cid" >/dev/null
    echo "$tag"
}

ensure_docker
lock_image_cache

# Each image's digest covers its packages, its customise step, the files that step
# installs and its import options (and scripts/debian_image.sh).
PG_PACKAGES="postgresql"
PG_OPTIONS=(
    --change 'USER postgres'
    --change "ENV PATH=$PG_BIN:$BASE_PATH"
    --change 'ENV PGDATA=/var/lib/postgresql/data'
    --change 'ENTRYPOINT ["/usr/local/bin/harness-postgres-entrypoint"]'
    --change 'CMD ["postgres"]'
    --change 'EXPOSE 5432'
)
POSTGRES=$(debian_image harness-postgres \
    "$(content_digest "packages=$PG_PACKAGES" "$(declare -f postgres_rootfs)" "$PG_ENTRYPOINT" "${PG_OPTIONS[@]}")" \
    "$PG_PACKAGES" postgres_rootfs "${PG_OPTIONS[@]}")

REDIS_PACKAGES="redis-server"
REDIS_OPTIONS=(
    --change 'USER redis'
    --change 'WORKDIR /data'
    --change "ENV PATH=$BASE_PATH"
    --change 'CMD ["redis-server", "--protected-mode", "no"]'
    --change 'EXPOSE 6379'
)
REDIS=$(debian_image harness-redis \
    "$(content_digest "packages=$REDIS_PACKAGES" "$(declare -f redis_rootfs)" "${REDIS_OPTIONS[@]}")" \
    "$REDIS_PACKAGES" redis_rootfs "${REDIS_OPTIONS[@]}")

# What the registry's python:3.11-slim-bookworm gives the root Dockerfile, plus git.
PY_PACKAGES="python3 python3-venv git ca-certificates"
PY_OPTIONS=(--change "ENV PATH=$BASE_PATH")
PY_BASE=$(debian_image harness-python-base \
    "$(content_digest "packages=$PY_PACKAGES" "${PY_OPTIONS[@]}")" \
    "$PY_PACKAGES" "" "${PY_OPTIONS[@]}")
PYTHON=$(python_image "$PY_BASE")

di_log "docker build (root Dockerfile, PYTHON_IMAGE=$PYTHON, no network)"
# The legacy builder uses the local base image as it is; the id names the result.
app_id=$(DOCKER_BUILDKIT=0 docker build -q --network none --build-arg "PYTHON_IMAGE=$PYTHON" "$REPO" 2>/dev/null) ||
    { DOCKER_BUILDKIT=0 docker build --network none --build-arg "PYTHON_IMAGE=$PYTHON" "$REPO" >&2; di_die "docker build failed"; }
APP="harness-app:$(echo "${app_id#sha256:}" | cut -c1-16)"
docker tag "$app_id" "$APP"
di_log "built $APP"

# The sandbox script takes the lock itself: release ours first.
flock -u 9
SANDBOX=$(bash "$REPO/sandbox/image/build.sh" | tail -n1)

set_env() {  # set_env FILE KEY VALUE: replace the key's line, or append it
    if grep -q "^$2=" "$1" 2>/dev/null; then
        sed -i "s|^$2=.*|$2=$3|" "$1"
    else
        printf '%s=%s\n' "$2" "$3" >>"$1"
    fi
}

for pair in "HARNESS_APP_IMAGE=$APP" "HARNESS_POSTGRES_IMAGE=$POSTGRES" \
            "HARNESS_REDIS_IMAGE=$REDIS" "HARNESS_SANDBOX_IMAGE=$SANDBOX"; do
    echo "$pair"
    [ -z "$ENV_FILE" ] || set_env "$ENV_FILE" "${pair%%=*}" "${pair#*=}"
done
