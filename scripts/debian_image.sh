# Images from a Debian root filesystem, without any container registry. Sourced by
# sandbox/image/build.sh and deploy/images/build.sh, never run on its own:
#
#   debootstrap --variant=minbase bookworm + packages  ->  trim  ->  base tarball
#   (cached by this library, the suite and the packages)  ->  the caller's customise
#   step  ->  rootfs tarball (cached by content)  ->  docker import
#
# An image is tagged <name>:<digest>, the digest being the first 16 hex digits of
# sha256 over its inputs (content_digest). A tag that exists is used at once; the
# rootfs tarball is kept in ${HARNESS_CACHE_DIR:-/var/cache/harness} under the same
# digest, so re-importing after `docker rmi` downloads nothing. The base is kept apart
# because debootstrap is most of a build's time: a change to what the customise step
# adds (a program, a wheel) unpacks the base again instead of downloading Debian.
# Progress goes to stderr.
#
# Environment:
#   HARNESS_CACHE_DIR      rootfs tarball cache (default /var/cache/harness)
#   HARNESS_DEBIAN_MIRROR  override the Debian mirror (default: from apt sources,
#                          else http://deb.debian.org/debian)

# A failing step inside $(debian_image ...) must fail the caller too.
shopt -s inherit_errexit

DEBIAN_SUITE=bookworm
HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-/var/cache/harness}
DEBIAN_IMAGE_LIB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
DEBIAN_IMAGE_LOG_NAME=${DEBIAN_IMAGE_LOG_NAME:-image}

di_log() { echo "[$DEBIAN_IMAGE_LOG_NAME] $*" >&2; }
di_die() { di_log "ERROR: $*"; exit 1; }

# content_digest INPUT...: an existing file counts by its name and content (not its
# path, so every checkout gets the same digest), anything else as a literal string.
# This library and the suite are always inputs.
content_digest() {
    local input
    for input in "$DEBIAN_IMAGE_LIB" "suite=$DEBIAN_SUITE" "$@"; do
        if [ -f "$input" ]; then
            printf 'file\0%s\0' "$(basename "$input")"
            cat "$input"
        else
            printf 'value\0%s' "$input"
        fi
        printf '\0'
    done | sha256sum | cut -c1-16
}

ensure_docker() {
    docker info >/dev/null 2>&1 && return 0
    local starter
    starter="$(dirname "$DEBIAN_IMAGE_LIB")/start_docker.sh"
    di_log "docker engine not reachable; running scripts/start_docker.sh"
    bash "$starter" >&2
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Holds the cache lock on fd 9 for the rest of the calling process: builds of
# different images share the Debian mirror and the disk, so they go one at a time.
lock_image_cache() {
    mkdir -p "$HARNESS_CACHE_DIR"
    exec 9>"$HARNESS_CACHE_DIR/build.lock"
    flock 9
}

_di_work=""
_di_tmp_tar=""

_di_unmount_under() {  # anything debootstrap may have left mounted, nested ones first
    local root=$1 m
    [ -d "$root" ] || return 0
    awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

_di_cleanup() {
    if [ -n "$_di_work" ] && [ -d "$_di_work" ]; then
        _di_unmount_under "$_di_work/rootfs"
        rm -rf --one-file-system "$_di_work"
    fi
    [ -z "$_di_tmp_tar" ] || rm -f "$_di_tmp_tar"
    _di_work=""
    _di_tmp_tar=""
}

debian_mirror() {
    if [ -n "${HARNESS_DEBIAN_MIRROR:-}" ]; then
        echo "$HARNESS_DEBIAN_MIRROR"; return
    fi
    local f m=""
    # one-line format: deb [opts] URI suite components...
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        m=$(awk -v s="$DEBIAN_SUITE" '
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
            m=$(awk -v s="$DEBIAN_SUITE" '
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

_di_trim() {
    local r=${1:?}
    [ "$r" != / ] && [ -d "$r/usr" ] || di_die "refusing to trim suspicious rootfs '$r'"
    rm -rf "${r:?}"/usr/share/doc/* "${r:?}"/usr/share/man/* "${r:?}"/usr/share/info/* \
           "${r:?}"/usr/share/lintian "${r:?}"/usr/share/linda \
           "${r:?}"/var/lib/apt/lists/* "${r:?}"/var/cache/apt/*.bin \
           "${r:?}"/var/cache/apt/archives/*.deb "${r:?}"/var/cache/debconf/*-old \
           "${r:?}"/var/lib/dpkg/*-old "${r:?}"/var/log/*.log "${r:?}"/var/log/apt/* \
           "${r:?}"/tmp/* "${r:?}"/dev/*   # docker provides /dev at run time
    # locales: keep only C / C.UTF-8
    if [ -d "$r/usr/share/locale" ]; then
        find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' \
             ! -name 'C' ! -name 'C.*' -exec rm -rf {} +
    fi
    if [ -d "$r/usr/lib/locale" ]; then
        find "$r/usr/lib/locale" -mindepth 1 -maxdepth 1 ! -name 'C' ! -name 'C.*' \
             -exec rm -rf {} +
    fi
    # keep the docs/man/locales out if apt is ever run inside the image
    mkdir -p "$r/etc/dpkg/dpkg.cfg.d"
    cat >"$r/etc/dpkg/dpkg.cfg.d/01-harness-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
    printf 'deb http://deb.debian.org/debian %s main\n' "$DEBIAN_SUITE" >"$r/etc/apt/sources.list"
}

# _di_base_rootfs ROOTFS PACKAGES: the trimmed debootstrap of PACKAGES in ROOTFS,
# unpacked from its cached tarball, made (and cached) first when there is none.
_di_base_rootfs() {
    local rootfs=$1 packages=$2 mirror base
    base="$HARNESS_CACHE_DIR/base-$DEBIAN_SUITE-$(content_digest "packages=$packages").tar"
    if [ -s "$base" ]; then
        di_log "unpacking cached base $base"
        mkdir -p "$rootfs"
        tar -C "$rootfs" --numeric-owner -xpf "$base"
        return 0
    fi
    [ "$(id -u)" -eq 0 ] || di_die "debootstrap needs root"
    if ! command -v debootstrap >/dev/null 2>&1; then
        di_log "installing debootstrap with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    mirror=$(debian_mirror)
    di_log "debootstrap --variant=minbase $DEBIAN_SUITE from $mirror (packages: $packages)"
    if ! debootstrap --variant=minbase --include="${packages// /,}" \
            "$DEBIAN_SUITE" "$rootfs" "$mirror" >"$_di_work/debootstrap.log" 2>&1; then
        tail -n 40 "$_di_work/debootstrap.log" >&2
        [ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -n 40 "$rootfs/debootstrap/debootstrap.log" >&2
        di_die "debootstrap failed"
    fi
    _di_unmount_under "$rootfs"
    di_log "trimming rootfs"
    _di_trim "$rootfs"
    di_log "writing base tarball $base"
    _di_tmp_tar="$base.tmp.$$"
    tar -C "$rootfs" --numeric-owner --one-file-system -cf "$_di_tmp_tar" .
    mv -f "$_di_tmp_tar" "$base"
    _di_tmp_tar=""
}

# _di_build_rootfs_tar TAR PACKAGES CUSTOMISE: the base rootfs, CUSTOMISE (a function
# name, or "") run with the rootfs directory as $1, written to TAR.
_di_build_rootfs_tar() {
    local tar=$1 packages=$2 customise=$3 rootfs
    _di_work=$(mktemp -d "${TMPDIR:-/var/tmp}/harness-rootfs.XXXXXX")
    rootfs="$_di_work/rootfs"
    _di_base_rootfs "$rootfs" "$packages"
    [ -z "$customise" ] || "$customise" "$rootfs"
    di_log "writing rootfs tarball $tar"
    _di_tmp_tar="$tar.tmp.$$"
    tar -C "$rootfs" --numeric-owner --one-file-system -cf "$_di_tmp_tar" .
    mv -f "$_di_tmp_tar" "$tar"
    _di_cleanup
}

# debian_image NAME DIGEST PACKAGES CUSTOMISE [docker import options...]
# Makes NAME:DIGEST exist (from the cached tarball when there is one) and prints it.
# Callers hold lock_image_cache when other builds may run at the same time.
debian_image() {
    local name=$1 digest=$2 packages=$3 customise=$4
    shift 4
    local tag="$name:$digest" tar="$HARNESS_CACHE_DIR/$name-$DEBIAN_SUITE-$digest.tar"
    if image_exists "$tag"; then
        di_log "cache hit: $tag"
        echo "$tag"
        return 0
    fi
    mkdir -p "$HARNESS_CACHE_DIR"
    trap _di_cleanup EXIT
    trap 'exit 130' INT TERM
    if [ -s "$tar" ]; then
        di_log "using cached rootfs $tar"
    else
        _di_build_rootfs_tar "$tar" "$packages" "$customise"
    fi
    di_log "docker import -> $tag"
    docker import "$@" \
        --change "LABEL org.harness.image.digest=$digest org.harness.image.suite=$DEBIAN_SUITE" \
        --message "$name ($DEBIAN_SUITE minbase: $packages)" \
        - "$tag" <"$tar" >/dev/null
    # drop stale rootfs tarballs of this image from previous build inputs
    find "$HARNESS_CACHE_DIR" -maxdepth 1 -name "$name-$DEBIAN_SUITE-*.tar" ! -name "$(basename "$tar")" -delete 2>/dev/null || true
    di_log "built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
    echo "$tag"
}
