#!/usr/bin/env bash
# Build the Harness sandbox image locally, without any container registry, from a
# debootstrap root filesystem (scripts/debian_image.sh).
#
# The image is tagged harness-sandbox:<digest> (and harness-sandbox:latest), where
# <digest> is the first 16 hex digits of sha256 over the build inputs: this script,
# scripts/debian_image.sh, the package list, the Dockerfile, the suite name, the MCP
# SDK's wheels (names and SHA-256), the files under ./harness-mcp and the programs
# every container runs (./harness: PID 1's reaper, the checks' wrapper, the egress relay).
# If that tag already exists the script prints it and exits at once; the rootfs
# tarball is cached in ${HARNESS_CACHE_DIR:-/var/cache/harness} under the same
# digest, so re-importing after `docker rmi` downloads nothing.
#
# The image carries the official MCP SDK for servers run in the sandbox over stdio
# (docs/design.md, Outside tools): the wheels of `mcp` at the worker's own version
# (requirements.txt), and of what it needs at the versions of requirements.lock,
# downloaded once with pip, which checks them against the lock's hashes, into
# ${HARNESS_CACHE_DIR}/mcp-wheels/<version>-<digest of that part of the lock> and
# unpacked into /opt/harness-mcp/site, with ./harness-mcp (its Python wrapper and the
# workspace search server) beside them.
#
# All progress goes to stderr; the last line of stdout is the image tag.
#
# Environment:
#   HARNESS_SANDBOX_IMAGE_NAME  the image's name (default harness-sandbox): another
#                               name tries out changes to the image on a shared
#                               engine without moving harness-sandbox:latest
#   HARNESS_CACHE_DIR, HARNESS_DEBIAN_MIRROR: see scripts/debian_image.sh
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEBIAN_IMAGE_LOG_NAME=sandbox-image
# shellcheck source=../../scripts/debian_image.sh
. "$SCRIPT_DIR/../../scripts/debian_image.sh"

IMAGE=${HARNESS_SANDBOX_IMAGE_NAME:-harness-sandbox}
# Keep in sync with the apt-get line in ./Dockerfile (both feed the digest).
PACKAGES="python3 python3-pytest git coreutils procps findutils grep"
DOCKERFILE="$SCRIPT_DIR/Dockerfile"
MCP_TREE="$SCRIPT_DIR/harness-mcp"
# Copied to /opt/harness (sandbox/container/spec.py PROGRAMS); the README stays here.
PROGRAMS_TREE="$SCRIPT_DIR/harness"
PROGRAMS="reaper.py relay.py check.sh"
MCP_VERSION=$(sed -n 's/^mcp==\([^ #]*\).*/\1/p' "$SCRIPT_DIR/../../requirements.txt")
LOCK="$SCRIPT_DIR/../../requirements.lock"
# bookworm's python3: the interpreter the wheels must fit.
MCP_PYTHON=3.11

[ -f "$DOCKERFILE" ] || di_die "missing $DOCKERFILE"
for pkg in $PACKAGES; do
    grep -qw -- "$pkg" "$DOCKERFILE" || di_log "warning: package '$pkg' not in Dockerfile"
done
[ -n "$MCP_VERSION" ] || di_die "no mcp==<version> in requirements.txt"
grep -qx "ARG MCP_VERSION=$MCP_VERSION" "$DOCKERFILE" || di_die "Dockerfile's ARG MCP_VERSION is not requirements.txt's mcp==$MCP_VERSION"

# mcp_wheels: the directory holding the SDK's wheels for the image, downloaded on the
# first build (PyPI, binary wheels only: nothing is compiled) and kept; the directory
# appears whole or not at all. The SDK's part of the product's lock, so the image's SDK
# runs on the versions the worker's does, and a change there downloads them again.
mcp_wheels() {
    local part dir tmp
    part=$(python3 "$SCRIPT_DIR/../../scripts/locked.py" part "$LOCK" mcp) || di_die "no mcp in $LOCK"
    grep -q "^mcp==$MCP_VERSION " <<<"$part" || di_die "requirements.lock's mcp is not requirements.txt's mcp==$MCP_VERSION: run make lock"
    dir="$HARNESS_CACHE_DIR/mcp-wheels/$MCP_VERSION-$(printf '%s\n' "$part" | sha256sum | cut -c1-16)"
    if ! compgen -G "$dir/mcp-*.whl" >/dev/null; then
        di_log "downloading the wheels of mcp==$MCP_VERSION and what it needs (requirements.lock) for CPython $MCP_PYTHON"
        mkdir -p "$(dirname "$dir")"
        tmp=$(mktemp -d "$dir.tmp.XXXXXX")
        printf '%s\n' "$part" >"$tmp.lock"
        python3 -m pip download -q --disable-pip-version-check --no-cache-dir -d "$tmp" \
            --only-binary=:all: --python-version "$MCP_PYTHON" --platform "manylinux2014_$(uname -m)" \
            --require-hashes -r "$tmp.lock" >&2 || { rm -rf "$tmp" "$tmp.lock"; di_die "pip download mcp==$MCP_VERSION failed"; }
        rm -f "$tmp.lock"
        mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"  # another build got there first
    fi
    echo "$dir"
}
MCP_WHEELS=$(mcp_wheels)
# Digest inputs by name and content, wherever the checkout or the cache is.
MCP_INPUTS=$(cd "$MCP_WHEELS" && sha256sum -- *.whl; cd "$MCP_TREE" && find . -name __pycache__ -prune -o -type f -print0 | sort -z | xargs -0 sha256sum --)
PROGRAM_INPUTS=$(cd "$PROGRAMS_TREE" && sha256sum -- $PROGRAMS)
DIGEST=$(content_digest "$SCRIPT_DIR/build.sh" "packages=$PACKAGES" "$DOCKERFILE" "mcp=$MCP_INPUTS" "programs=$PROGRAM_INPUTS")

sandbox_rootfs() {
    # the workspace every run container mounts its run's workspace on
    mkdir -p "$1/workspace"
    chown 65534:65534 "$1/workspace"
    # PID 1, root's and read-only like the rest of the image
    local program
    mkdir -p "$1/opt/harness"
    for program in $PROGRAMS; do
        install -m 644 -o 0 -g 0 "$PROGRAMS_TREE/$program" "$1/opt/harness/$program"
    done
    # a wheel's files are its installed form: unpacked, the SDK is importable from site
    local wheel
    mkdir -p "$1/opt/harness-mcp/site"
    cp -R "$MCP_TREE/." "$1/opt/harness-mcp/"
    find "$1/opt/harness-mcp" -name __pycache__ -prune -exec rm -rf {} +
    for wheel in "$MCP_WHEELS"/*.whl; do
        python3 -m zipfile -e "$wheel" "$1/opt/harness-mcp/site"
    done
    chown -R 0:0 "$1/opt/harness-mcp"
    chmod -R u=rwX,go=rX "$1/opt/harness-mcp"
    chmod 755 "$1"/opt/harness-mcp/bin/*
    # compiled now: the root is read-only at run time, and each conversation starts
    # its server afresh
    chroot "$1" /usr/bin/python3 -m compileall -q /opt/harness-mcp >/dev/null
}

ensure_docker
# Fast path without the lock: image already built from exactly these inputs.
if ! image_exists "$IMAGE:$DIGEST"; then
    lock_image_cache
fi
TAG=$(debian_image "$IMAGE" "$DIGEST" "$PACKAGES" sandbox_rootfs \
    --change 'USER 65534' \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["sleep","infinity"]')
docker tag "$TAG" "$IMAGE:latest"
echo "$TAG"
