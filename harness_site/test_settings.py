"""Settings for the test suite: the normal environment-driven settings with
development defaults, so a bare ``pytest`` needs no exported variables. Each test
session gets its own Celery queue and its own directory for workspaces, artifacts
and the outbox, shared with the worker and web processes the tests start."""

import os
import tempfile

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("HARNESS_QUEUE", f"harness-test-{os.getpid()}")
os.environ.setdefault("HARNESS_SANDBOX_SCOPE", os.environ["HARNESS_QUEUE"])
os.environ.setdefault("HARNESS_CACHE_PREFIX", os.environ["HARNESS_QUEUE"])
# Live broadcasts too: on a shared Redis another session's "lists changed" reached this
# session's sockets (and failed a test waiting for its own run's change).
os.environ.setdefault("HARNESS_CHANNEL_PREFIX", os.environ["HARNESS_QUEUE"])
os.environ.setdefault("HARNESS_VAR_DIR", tempfile.mkdtemp(prefix=f"{os.environ['HARNESS_QUEUE']}-"))

from harness_site.settings import *  # noqa: E402,F403
from harness_site.settings import ALLOWED_HOSTS, DATABASES, VAR_DIR  # noqa: E402

# Django's test client calls itself "testserver"; production settings do not allow it.
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]

# Worker processes started by the tests must open the same test database, so the
# SQLite test database is a file, not memory.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
