#!/usr/bin/env bash
# Build the Harness sandbox image locally, without any container registry, from a
# debootstrap root filesystem (scripts/debian_image.sh).
#
# The image is tagged harness-sandbox:<digest> (and harness-sandbox:latest), where
# <digest> is the first 16 hex digits of sha256 over the build inputs: this script,
# scripts/debian_image.sh, the package list, the Dockerfile and the suite name.
# If that tag already exists the script prints it and exits at once; the rootfs
# tarball is cached in ${HARNESS_CACHE_DIR:-/var/cache/harness} under the same
# digest, so re-importing after `docker rmi` downloads nothing.
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

[ -f "$DOCKERFILE" ] || di_die "missing $DOCKERFILE"
for pkg in $PACKAGES; do
    grep -qw -- "$pkg" "$DOCKERFILE" || di_log "warning: package '$pkg' not in Dockerfile"
done
DIGEST=$(content_digest "$SCRIPT_DIR/build.sh" "packages=$PACKAGES" "$DOCKERFILE")

sandbox_rootfs() {  # the workspace every run container mounts its run's workspace on
    mkdir -p "$1/workspace"
    chown 65534:65534 "$1/workspace"
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
