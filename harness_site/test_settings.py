"""Settings for the test suite: the normal environment-driven settings with
development defaults, so a bare ``pytest`` needs no exported variables. Each test
session gets its own Celery queue and its own directory for workspaces, artifacts
and the outbox, shared with the worker and web processes the tests start."""

import atexit
import os
import shutil
import tempfile


def _remove_own_directory(maker: int, path: str) -> None:
    if os.getpid() == maker:
        shutil.rmtree(path, ignore_errors=True)


PER_SESSION = ("HARNESS_QUEUE", "HARNESS_SANDBOX_SCOPE", "HARNESS_CACHE_PREFIX", "HARNESS_CHANNEL_PREFIX", "HARNESS_VAR_DIR")
# A pytest-xdist worker is a session of its own: what it inherited from the
# controller (which loaded these settings too) would be shared by all workers.
# The worker's own processes inherit the worker's.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if os.environ.get("HARNESS_TEST_WORKER", "") != WORKER:
    for name in PER_SESSION:
        os.environ.pop(name, None)
    os.environ["HARNESS_TEST_WORKER"] = WORKER

os.environ.setdefault("DEBUG", "1")
# Every run the suite makes, in this process or any it starts, is checked at each
# checkpoint against the fold of its log (runs.persistence.store.check_stored).
os.environ.setdefault("HARNESS_VERIFY_FOLD", "1")
os.environ.setdefault("HARNESS_QUEUE", f"harness-test-{os.getpid()}")
os.environ.setdefault("HARNESS_SANDBOX_SCOPE", os.environ["HARNESS_QUEUE"])
os.environ.setdefault("HARNESS_CACHE_PREFIX", os.environ["HARNESS_QUEUE"])
# Live broadcasts too: on a shared Redis another session's "lists changed" reached this
# session's sockets (and failed a test waiting for its own run's change).
os.environ.setdefault("HARNESS_CHANNEL_PREFIX", os.environ["HARNESS_QUEUE"])
if "HARNESS_VAR_DIR" not in os.environ:
    os.environ["HARNESS_VAR_DIR"] = tempfile.mkdtemp(prefix=f"{os.environ['HARNESS_QUEUE']}-")
    # Removed by the process that made it, when it exits: the processes it starts
    # inherit the directory and end first (their fixtures stop them); a forked child
    # runs the same exit handlers, and the pid keeps it from removing its parent's.
    atexit.register(_remove_own_directory, os.getpid(), os.environ["HARNESS_VAR_DIR"])
# No pool of pre-started containers unless a test makes one (tests/test_container_pool.py)
# or the environment asks (the sandbox's tests run against pooled containers with 2).
os.environ.setdefault("HARNESS_SANDBOX_POOL_SIZE", "0")

from django.contrib.auth.hashers import PBKDF2PasswordHasher  # noqa: E402

from harness_site.settings import *  # noqa: E402,F403
from harness_site.settings import ALLOWED_HOSTS, CSRF_TRUSTED_ORIGINS, DATABASES, VAR_DIR  # noqa: E402


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 with one round: every persona a test creates cost a quarter
    of a second of CPU at the default rounds. The hash keeps the production
    hasher's name and states its rounds, so the web and worker processes the tests
    start (on the production settings) verify these passwords as they are."""

    iterations = 1


PASSWORD_HASHERS = ["harness_site.test_settings.OneRoundPBKDF2PasswordHasher"]

# Django's test client calls itself "testserver"; production settings do not allow it.
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]
# The in-process socket tests (channels' WebsocketCommunicator) send an Origin but no
# Host header, so only a trusted origin admits them (harness_site.sockets).
CSRF_TRUSTED_ORIGINS = [*CSRF_TRUSTED_ORIGINS, "http://testserver", "http://127.0.0.1"]

# Worker processes started by the tests must open the same test database, so the
# SQLite test database is a file, not memory.
if DATABASES["default"]["ENGINE"] == "common.sqlite_backend":
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
