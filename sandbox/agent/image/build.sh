#!/usr/bin/env bash
# Build the agent image (sandbox/agent: the container an outside agent CLI runs in,
# issue 41) locally, without any container registry, from a debootstrap root
# filesystem (scripts/debian_image.sh, shared with sandbox/image/build.sh).
#
# Contents: Debian bookworm minbase with python3-minimal (PID 1's reaper and the egress
# relay, the sandbox image's own programs from sandbox/image/harness) and libstdc++6;
# the host's Node.js (bookworm's is too old for the CLIs: /usr/bin/node, NodeSource
# v20, copied as it is, its SHA-256 and version in the digest); the agent CLIs'
# node_modules from sandbox/agent/clis (installed on the host by `npm ci` from its lock,
# copied to /opt/agent-clis, root's and read-only; `claude`, `codex` and `gemini` on
# PATH in /usr/local/bin); a non-root user `agent` (uid 1000) whose HOME,
# /home/agent, is a small tmpfs at run time; no CA certificates (the container has no
# network but the run's gateway, in plain HTTP through the relay).
#
# The image is tagged harness-agent:<digest> (and harness-agent:latest), <digest>
# being the first 16 hex digits of SHA-256 over: this script, scripts/debian_image.sh,
# the suite, the package list, Node's SHA-256 and version, sandbox/agent/clis' package.json
# and package-lock.json, npm's record of the installed tree
# (node_modules/.package-lock.json) and the tree's listing (every path, its type, size
# and link target: npm ci checked each package against the lock's integrity hash, so
# the contents are not read again on every build), and the programs copied from
# sandbox/image/harness. If that tag exists the script prints it and exits at once;
# the rootfs tarball is cached in ${HARNESS_CACHE_DIR:-/var/cache/harness} under the
# same digest, so after a `docker rmi` it is re-imported without debootstrap.
#
# All progress goes to stderr; the last line of stdout is the image tag.
#
# Environment:
#   HARNESS_AGENT_IMAGE_NAME  the image's name (default harness-agent)
#   HARNESS_AGENT_NODE        the Node.js binary to copy (default /usr/bin/node)
#   HARNESS_AGENT_CLIS        the directory holding the CLIs' package.json, lock and
#                             node_modules (default sandbox/agent/clis of this checkout)
#   HARNESS_CACHE_DIR, HARNESS_DEBIAN_MIRROR: see scripts/debian_image.sh
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../../.." && pwd)
DEBIAN_IMAGE_LOG_NAME=agent-image
# shellcheck source=../../../scripts/debian_image.sh
. "$REPO/scripts/debian_image.sh"

IMAGE=${HARNESS_AGENT_IMAGE_NAME:-harness-agent}
PACKAGES="python3-minimal libstdc++6"
NODE=${HARNESS_AGENT_NODE:-/usr/bin/node}
CLIS=${HARNESS_AGENT_CLIS:-$REPO/sandbox/agent/clis}
COMMANDS="claude codex gemini"
# The sandbox image's programs (sandbox/container/spec.py PROGRAMS): PID 1's reaper
# and the egress relay, the same files, not copies.
PROGRAMS_TREE="$REPO/sandbox/image/harness"
PROGRAMS="reaper.py relay.py"
# sandbox/agent/container.py's AGENT_USER and HOME.
AGENT_UID=1000
AGENT_HOME=/home/agent

[ -x "$NODE" ] || di_die "no Node.js at $NODE (HARNESS_AGENT_NODE)"
NODE_VERSION=$("$NODE" --version)
case "$NODE_VERSION" in
    v2[0-9].*|v[3-9][0-9].*) ;;
    *) di_die "$NODE is Node.js $NODE_VERSION; the CLIs need 20 or later" ;;
esac
[ -f "$CLIS/package-lock.json" ] && [ -f "$CLIS/node_modules/.package-lock.json" ] \
    || di_die "the agent CLIs are not installed in $CLIS: run (cd $CLIS && npm ci)"
for command in $COMMANDS; do
    [ -x "$CLIS/node_modules/.bin/$command" ] || di_die "no $command in $CLIS/node_modules/.bin: run (cd $CLIS && npm ci)"
done
[ "$CLIS/package-lock.json" -nt "$CLIS/node_modules/.package-lock.json" ] \
    && di_die "$CLIS/package-lock.json is newer than its node_modules: run (cd $CLIS && npm ci)"

NODE_INPUT="node=$(sha256sum <"$NODE" | cut -c1-64) $NODE_VERSION"
TREE_INPUT="tree=$(cd "$CLIS/node_modules" && find . -printf '%P %y %s %l\n' | LC_ALL=C sort | sha256sum | cut -c1-64)"
PROGRAM_INPUTS=$(cd "$PROGRAMS_TREE" && sha256sum -- $PROGRAMS)
DIGEST=$(content_digest "$SCRIPT_DIR/build.sh" "packages=$PACKAGES" "$NODE_INPUT" \
    "$CLIS/package.json" "$CLIS/package-lock.json" "$CLIS/node_modules/.package-lock.json" "$TREE_INPUT" \
    "programs=$PROGRAM_INPUTS")

agent_rootfs() {
    local root=$1 program command
    install -m 755 -o 0 -g 0 "$NODE" "$root/usr/bin/node"
    mkdir -p "$root/opt/agent-clis"
    install -m 644 -o 0 -g 0 "$CLIS/package.json" "$CLIS/package-lock.json" "$root/opt/agent-clis/"
    # -a keeps npm's links (.bin, and the hard link of Claude Code's native binary)
    cp -a "$CLIS/node_modules" "$root/opt/agent-clis/node_modules"
    chown -R -h 0:0 "$root/opt/agent-clis"
    chmod -R go-w,a+rX "$root/opt/agent-clis"
    for command in $COMMANDS; do
        ln -s "/opt/agent-clis/node_modules/.bin/$command" "$root/usr/local/bin/$command"
    done
    mkdir -p "$root/opt/harness"
    for program in $PROGRAMS; do
        install -m 644 -o 0 -g 0 "$PROGRAMS_TREE/$program" "$root/opt/harness/$program"
    done
    # the run's workspace is mounted here read-only; HOME is a tmpfs of the agent's
    mkdir -p "$root/workspace" "$root$AGENT_HOME"
    echo "agent:x:$AGENT_UID:$AGENT_UID:Harness agent:$AGENT_HOME:/usr/sbin/nologin" >>"$root/etc/passwd"
    echo "agent:x:$AGENT_UID:" >>"$root/etc/group"
    # what the image promises, tried in it before it is kept
    chroot "$root" /usr/bin/node -e 'process.exit(0)' || di_die "Node.js does not run in the image's root"
    chroot "$root" /usr/bin/python3 -c 'import socket, struct, threading' || di_die "the relay's Python modules are missing"
}

ensure_docker
# Fast path without the lock: image already built from exactly these inputs.
if ! image_exists "$IMAGE:$DIGEST"; then
    lock_image_cache
fi
TAG=$(debian_image "$IMAGE" "$DIGEST" "$PACKAGES" agent_rootfs \
    --change 'USER 65534' \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'CMD ["python3","/opt/harness/reaper.py"]')
docker tag "$TAG" "$IMAGE:latest"
echo "$TAG"
