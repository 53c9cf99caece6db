"""Settings for the test suite: the normal environment-driven settings with
development defaults, so a bare ``pytest`` needs no exported variables."""

import os

os.environ.setdefault("DEBUG", "1")

from harness_site.settings import *  # noqa: E402,F403
