#!/usr/bin/env bash
# Everything the test suite needs on a Debian machine, set up only where it is missing,
# so a second run takes seconds. `make test` runs it first (and .ci/run before that):
#
# - the system packages the tests use beyond Python: the Docker engine, debootstrap
#   (the sandbox image's root filesystem), Chromium (the browser tests), docker-compose
#   (the deployment tests), gVisor's runsc (the sandbox under both runtimes), OpenSSH's
#   server (the ssh:// remote tests), Redis, Prometheus (the metrics tests scrape
#   the web server and a worker with a real one), and valgrind (the instruction
#   counts of make bench-check);
# - the Python packages of requirements-dev.lock (requirements-dev.txt's pins, which
#   include requirements.txt's, and everything they need, with hashes; make lock),
#   installed only when one of the locked versions is not;
# - the OpenID provider the sign-in tests start (tests/oidc: `npm ci` from its
#   package-lock.json, only when its node_modules is missing or older than the lock);
# - the agent CLIs the presets drive (sandbox/agent/clis: `npm ci` from its package-lock.json,
#   only when its node_modules is missing or older than the lock);
# - the services: Redis, PostgreSQL and the Docker engine (scripts/services.sh);
# - the sandbox image (sandbox/image/build.sh, cached by content);
# - the agent image (sandbox/agent/image/build.sh, cached by content), once the agent
#   CLIs are installed in sandbox/agent/clis/node_modules.
#
# Installing needs root and apt-get; without them, it names what to install and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[setup] $*" >&2; }
# A command that runs (bash's `command -v` also names a file it could not run).
have() { local path; path=$(command -v "$1") && [ -x "$path" ]; }

# Seen once here in the middle of a test run: /dev/null replaced by an empty regular
# file owned by nobody, after which git (GIT_CONFIG_GLOBAL=/dev/null) refused to start.
# The tests now fail the test during which that happens (tests/conftest.py).
if [ ! -c /dev/null ] && [ "$(id -u)" -eq 0 ]; then
    log "/dev/null is not the null device: making it again"
    rm -f /dev/null && mknod -m 666 /dev/null c 1 3
fi

missing=()
have dockerd || missing+=(docker.io iptables ca-certificates)
have debootstrap || missing+=(debootstrap)
[ -x /usr/bin/chromium ] || missing+=(chromium)
have docker-compose || missing+=(docker-compose)
[ -x /usr/bin/runsc ] || missing+=(runsc)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
have ssh-keygen || missing+=(openssh-client)
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)
have prometheus || missing+=(prometheus)
have valgrind || missing+=(valgrind)
have npm || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        log "cannot continue: missing ${missing[*]}; install them as root (apt-get install ${missing[*]}) and run this again"
        exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# pip takes many seconds even when there is nothing to do; reading the installed
# versions takes a fraction of one. The lock has every package, hashes included, so
# pip installs exactly those files (--require-hashes, implied by the hashes).
if ! python3 scripts/locked.py check requirements-dev.lock; then
    log "installing requirements-dev.lock"
    python3 -m pip install -q --disable-pip-version-check -r requirements-dev.lock
fi

if [ ! -d tests/oidc/node_modules/oidc-provider ] || [ tests/oidc/package-lock.json -nt tests/oidc/node_modules/.package-lock.json ]; then
    log "installing the test OpenID provider (tests/oidc)"
    (cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error)
fi

if [ ! -x sandbox/agent/clis/node_modules/.bin/claude ] || [ ! -x sandbox/agent/clis/node_modules/.bin/codex ] || [ ! -x sandbox/agent/clis/node_modules/.bin/gemini ] \
    || [ sandbox/agent/clis/package-lock.json -nt sandbox/agent/clis/node_modules/.package-lock.json ]; then
    log "installing the agent CLIs (sandbox/agent/clis)"
    (cd sandbox/agent/clis && npm ci --no-audit --no-fund --loglevel=error)
fi

bash scripts/services.sh
log "sandbox image: $(bash sandbox/image/build.sh)"
if [ -f sandbox/agent/clis/node_modules/.package-lock.json ]; then
    log "agent image: $(bash sandbox/agent/image/build.sh)"
fi
