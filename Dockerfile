# The Harness application image: the web server (Daphne), Celery workers and the
# beat all run from it; docker-compose.yml picks the command. The agent's code
# never runs here: it runs in the sandbox image (sandbox/image/). Without a
# registry, deploy/images/build.sh builds this file on a local Debian base whose
# virtualenv already holds requirements.lock, so nothing here needs the network.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# git: workspaces can be prepared from a git source (sandbox/workspace/run_workspace.py). A base
# that has it already (deploy/images/build.sh's, built with no network) skips apt.
RUN if ! command -v git >/dev/null; then \
        apt-get update \
     && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git \
     && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin harness \
 && install -d -o harness /var/lib/harness-beat

WORKDIR /app
# The lock's hashes make pip check every file it installs (--require-hashes).
COPY requirements.lock .
RUN pip install -r requirements.lock
COPY . .

# Processes that need no privilege run as this user (the web server included);
# compose runs only the run worker, which prepares workspaces for the sandbox's uid
# and holds the Docker engine, as root (see docs/deploy.md).
USER harness
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "harness_site.asgi:application"]
