#!/usr/bin/env bash
# Build the Harness sandbox image locally, without any container registry.
#
#   debootstrap --variant=minbase bookworm  ->  rootfs tarball  ->  docker import
#
# The image is tagged harness-sandbox:<digest> (and harness-sandbox:latest),
# where <digest> is the first 16 hex digits of sha256 over the build inputs:
# this script, the package list, the Dockerfile and the suite name.
# If that tag already exists the script prints it and exits at once; the
# rootfs tarball is cached in ${HARNESS_CACHE_DIR:-/var/cache/harness} under
# the same digest, so re-importing after `docker rmi` downloads nothing.
#
# All progress goes to stderr; the last line of stdout is the image tag.
#
# Environment:
#   HARNESS_CACHE_DIR      rootfs tarball cache (default /var/cache/harness)
#   HARNESS_DEBIAN_MIRROR  override the Debian mirror (default: from apt sources,
#                          else http://deb.debian.org/debian)
set -euo pipefail

SUITE=bookworm
IMAGE=harness-sandbox
# Keep in sync with the apt-get line in ./Dockerfile (both feed the digest).
PACKAGES="python3 python3-pytest git coreutils procps findutils grep"

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT_PATH="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
DOCKERFILE="$SCRIPT_DIR/Dockerfile"
CACHE_DIR=${HARNESS_CACHE_DIR:-/var/cache/harness}

log() { echo "[sandbox-image] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- digest ----
[ -f "$DOCKERFILE" ] || die "missing $DOCKERFILE"
DIGEST=$(
    {
        printf 'build.sh\0';   cat "$SCRIPT_PATH"
        printf '\0packages\0%s' "$PACKAGES"
        printf '\0Dockerfile\0'; cat "$DOCKERFILE"
        printf '\0suite\0%s' "$SUITE"
    } | sha256sum | cut -c1-16
)
TAG="$IMAGE:$DIGEST"

for pkg in $PACKAGES; do
    grep -qw -- "$pkg" "$DOCKERFILE" || log "warning: package '$pkg' not in Dockerfile"
done

# ---------------------------------------------------------------- docker ----
if ! docker info >/dev/null 2>&1; then
    starter="$SCRIPT_DIR/../../scripts/start_docker.sh"
    if [ -x "$starter" ] || [ -f "$starter" ]; then
        log "docker engine not reachable; running scripts/start_docker.sh"
        bash "$starter" >&2
    else
        die "docker engine not reachable (docker info failed)"
    fi
fi

tag_latest() {
    docker tag "$TAG" "$IMAGE:latest"
}

# Fast path: image already built from exactly these inputs.
if docker image inspect "$TAG" >/dev/null 2>&1; then
    tag_latest
    log "cache hit: $TAG"
    echo "$TAG"
    exit 0
fi

mkdir -p "$CACHE_DIR"
# Serialise concurrent builds; re-check the cache once we hold the lock.
exec 9>"$CACHE_DIR/build.lock"
flock 9
if docker image inspect "$TAG" >/dev/null 2>&1; then
    tag_latest
    log "cache hit (built concurrently): $TAG"
    echo "$TAG"
    exit 0
fi

ROOTFS_TAR="$CACHE_DIR/$IMAGE-$SUITE-$DIGEST.tar"
WORK=""

unmount_under() {  # unmount anything debootstrap may have left mounted
    local root=$1 m
    [ -d "$root" ] || return 0
    # reverse order so nested mounts go first
    awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

cleanup() {
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        unmount_under "$WORK/rootfs"
        rm -rf --one-file-system "$WORK"
    fi
    rm -f "$ROOTFS_TAR.tmp.$$"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

debian_mirror() {
    if [ -n "${HARNESS_DEBIAN_MIRROR:-}" ]; then
        echo "$HARNESS_DEBIAN_MIRROR"; return
    fi
    local f m=""
    # one-line format: deb [opts] URI suite components...
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        m=$(awk -v s="$SUITE" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
                if ($(i + 1) == s) { print $i; exit }
            }' "$f")
        [ -n "$m" ] && break
    done
    # deb822 format: stanzas with Types/URIs/Suites
    if [ -z "$m" ]; then
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            m=$(awk -v s="$SUITE" '
                function flush() {
                    if (deb && uri != "" && suites ~ ("(^| )" s "( |$)")) { print uri; found = 1 }
                    deb = 0; uri = ""; suites = ""
                }
                /^[ \t]*#/ { next }
                /^[ \t]*$/ { flush(); if (found) exit; next }
                tolower($1) == "types:"  { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
                tolower($1) == "uris:"   { uri = $2 }
                tolower($1) == "suites:" { suites = ""; for (i = 2; i <= NF; i++) suites = suites " " $i; suites = suites " " }
                tolower($1) == "enabled:" && tolower($2) == "no" { deb = 0; uri = "" }
                END { if (!found) flush() }' "$f" | head -n1)
            [ -n "$m" ] && break
        done
    fi
    echo "${m:-http://deb.debian.org/debian}"
}

build_rootfs_tar() {
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    local mirror rootfs
    mirror=$(debian_mirror)
    WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/harness-sandbox.XXXXXX")
    rootfs="$WORK/rootfs"
    log "debootstrap --variant=minbase $SUITE from $mirror (packages: $PACKAGES)"
    if ! debootstrap --variant=minbase --include="${PACKAGES// /,}" \
            "$SUITE" "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
        tail -n 40 "$WORK/debootstrap.log" >&2
        [ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -n 40 "$rootfs/debootstrap/debootstrap.log" >&2
        die "debootstrap failed"
    fi
    unmount_under "$rootfs"

    log "trimming rootfs"
    local r=${rootfs:?}
    [ "$r" != / ] && [ -d "$r/usr" ] || die "refusing to trim suspicious rootfs '$r'"
    rm -rf "${r:?}"/usr/share/doc/* "${r:?}"/usr/share/man/* "${r:?}"/usr/share/info/* \
           "${r:?}"/usr/share/lintian "${r:?}"/usr/share/linda \
           "${r:?}"/var/lib/apt/lists/* "${r:?}"/var/cache/apt/*.bin \
           "${r:?}"/var/cache/apt/archives/*.deb "${r:?}"/var/cache/debconf/*-old \
           "${r:?}"/var/lib/dpkg/*-old "${r:?}"/var/log/*.log "${r:?}"/var/log/apt/* \
           "${r:?}"/tmp/* "${r:?}"/dev/*   # docker provides /dev at run time
    # locales: keep only C / C.UTF-8
    if [ -d "$rootfs/usr/share/locale" ]; then
        find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' \
             ! -name 'C' ! -name 'C.*' -exec rm -rf {} +
    fi
    if [ -d "$rootfs/usr/lib/locale" ]; then
        find "$rootfs/usr/lib/locale" -mindepth 1 -maxdepth 1 ! -name 'C' ! -name 'C.*' \
             -exec rm -rf {} +
    fi
    # keep the docs/man/locales out if apt is ever run inside the image
    mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/01-harness-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
    mkdir -p "$rootfs/workspace"
    chown 65534:65534 "$rootfs/workspace"
    printf 'deb http://deb.debian.org/debian %s main\n' "$SUITE" >"$rootfs/etc/apt/sources.list"

    log "writing rootfs tarball $ROOTFS_TAR"
    tar -C "$rootfs" --numeric-owner --one-file-system -cf "$ROOTFS_TAR.tmp.$$" .
    mv -f "$ROOTFS_TAR.tmp.$$" "$ROOTFS_TAR"
    unmount_under "$rootfs"
    rm -rf --one-file-system "$WORK"
    WORK=""
}

if [ -s "$ROOTFS_TAR" ]; then
    log "using cached rootfs $ROOTFS_TAR"
else
    build_rootfs_tar
fi

log "docker import -> $TAG"
docker import \
    --change 'USER 65534' \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["sleep","infinity"]' \
    --change "LABEL org.harness.sandbox.digest=$DIGEST org.harness.sandbox.suite=$SUITE" \
    --message "harness sandbox ($SUITE minbase: $PACKAGES)" \
    - "$TAG" <"$ROOTFS_TAR" >/dev/null
tag_latest

# drop stale rootfs tarballs from previous build inputs
find "$CACHE_DIR" -maxdepth 1 -name "$IMAGE-*.tar" ! -name "$(basename "$ROOTFS_TAR")" -delete 2>/dev/null || true

log "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
echo "$TAG"
