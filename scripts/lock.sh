#!/usr/bin/env bash
# Regenerate requirements.lock, requirements-dev.lock and bench/requirements.lock
# (`make lock`) from the pins people edit, requirements.txt, requirements-dev.txt and
# bench/requirements.txt (the benchmarks' peers, which `make bench` installs, in CI too). The locks name every package
# that gets installed, each at one version with the SHA-256 of each of its files, so
# pip installs from them with --require-hashes; nothing is left to float.
#
# Resolved for CPython 3.11 on x86_64 Linux, whatever runs this: the host, CI and
# the images are that. "3.11" means 3.11.0 to the markers, so what an older 3.11 needs
# (redis' async-timeout below 3.11.3, for the images' Debian Python 3.11.2) is there.
# The dev lock is resolved under the product's lock as a constraint: the tests run
# the very versions the images ship, and a dev pin that disagrees fails here; the
# benchmarks' peers likewise under the dev lock, so they measure beside what is tested.
#
# uv keeps the versions a lock already holds unless a pin asks for another;
# UPGRADE=1 lets every floating package move to its newest release.
#
# uv comes from PyPI at UV_VERSION into a virtualenv of its own under
# ${XDG_CACHE_HOME:-~/.cache}/harness, never into the Python it is run with.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
UV_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/harness/uv-$UV_VERSION"
UV="$UV_VENV/bin/uv"

if [ ! -x "$UV" ]; then
    echo "[lock] installing uv $UV_VERSION into $UV_VENV" >&2
    rm -rf "$UV_VENV"
    python3 -m venv "$UV_VENV"
    "$UV_VENV/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
fi

upgrade=()
[ "${UPGRADE:-0}" = "1" ] && upgrade=(--upgrade)

# The header uv writes is this command line, with the paths as given here.
compile() {
    "$UV" pip compile -q --generate-hashes --python-version 3.11 \
        --python-platform x86_64-unknown-linux-gnu "${upgrade[@]}" "$@"
}
compile requirements.txt -o requirements.lock
compile requirements-dev.txt -c requirements.lock -o requirements-dev.lock
compile bench/requirements.txt -c requirements-dev.lock -o bench/requirements.lock
echo "[lock] requirements.lock: $(grep -c '^[A-Za-z0-9]' requirements.lock) packages, requirements-dev.lock: $(grep -c '^[A-Za-z0-9]' requirements-dev.lock), bench/requirements.lock: $(grep -c '^[A-Za-z0-9]' bench/requirements.lock)" >&2
