# The two commands the README starts with are `make up` and `make test`.
PY ?= python3
PG_URL ?= postgres://postgres@127.0.0.1:5432/harness

.PHONY: up down test test-fast test-busy setup lint typecheck test-sqlite test-postgres test-deploy bench bench-peers bench-check selftest openapi lock

# RESET=1: empty the database and give new demo passwords; otherwise a second `make up`
# keeps what the first made.
up:
	RESET=$(RESET) bash scripts/up.sh

# Stops what `make up` started (the pids it recorded in var/up.pids).
down:
	bash scripts/down.sh

test: setup lint typecheck test-sqlite test-postgres

# What the tests need beyond this checkout: system packages (Docker, Chromium, runsc,
# sshd, docker-compose...), the Python packages of requirements-dev.lock, the services
# and the sandbox image; only what is missing, so it takes seconds once done.
setup:
	bash scripts/setup.sh

# requirements.lock, requirements-dev.lock and bench/requirements.lock again from
# requirements.txt, requirements-dev.txt and bench/requirements.txt (the pins people edit), with hashes, by uv (scripts/lock.sh).
# A lock keeps the versions it has unless a pin moved; UPGRADE=1 moves every package
# no pin holds to its newest release.
lock:
	UPGRADE=$(UPGRADE) bash scripts/lock.sh

# The layers (.importlinter): what each package may import.
lint:
	$(PY) -m ruff check .
	lint-imports
	$(PY) -m ruff format --check .

# Every package, the tests and the benchmarks, strict (mypy.ini; Django and DRF through django-stubs' plugins).
typecheck:
	$(PY) -m mypy core adapters common ledger projects sandbox approvals notifications live pages api runs harness_site site_admin signin monitoring gateway trials tests bench

# The edit-test loop: what needs no Docker, Celery worker, browser, sshd or
# docker-compose, and nothing marked slow, on SQLite, on two workers (each its own
# session: test_settings.py).
# `make test` still runs everything. Bytecode is cached even where the environment
# says not to (PYTHONDONTWRITEBYTECODE): compiling the project and rewriting the tests'
# assertions again on every run is a quarter of this loop's time.
test-fast:
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not docker and not browser and not celery and not sshd and not compose and not deploy and not postgres_only and not slow"

# The suites that depend most on scheduling (Docker, Celery, the browser) with the CPUs
# deliberately busy: two spinning processes beside them (BUSY=N for another count),
# started and always stopped by tests/busy.py, and each bounded in time on its own.
BUSY ?= 2
test-busy: setup
	$(PY) -m tests.busy $(BUSY) $(PY) -m pytest -q -p no:cacheprovider --durations=15 -m "(docker or celery or browser) and not postgres_only and not deploy"

# XDIST workers side by side (each a session of its own: harness_site/test_settings.py),
# a module's tests on one worker (--dist loadscope: a module's fixtures start its
# servers once). XDIST=0 runs them one after another.
XDIST ?= 2
test-sqlite:
	$(PY) -m pytest -q -p no:cacheprovider --durations=30 -n $(XDIST) --dist loadscope -m "not postgres_only and not deploy"

# Behaviour that depends on the database (locking, concurrent consumption, constraints)
# runs again against the local PostgreSQL server, on XDIST workers as test-sqlite
# (pytest-django gives each worker a test database of its own, suffixed _gw0, _gw1...;
# the services a test starts are pointed at its worker's: tests/fixtures_services.py).
test-postgres:
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(XDIST) --dist loadscope -m "postgres or postgres_only"

# The deployment: docker-compose.yml from images built without a registry
# (deploy/images/build.sh), a run through the published port, down and up again.
test-deploy:
	$(PY) -m pytest -q -s -p no:cacheprovider -m deploy tests/test_deploy.py

selftest:
	DEBUG=1 $(PY) manage.py harness_selftest

openapi:
	DEBUG=1 $(PY) manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml

# The peers the benchmarks compare against come from bench/requirements.lock (its pins
# in bench/requirements.txt, hashed like the product's: make lock), never from the
# product's requirements; installed only when missing, for `make bench` and
# `make bench-check` alike.
bench-peers:
	$(PY) -c "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.lock

# Every benchmark; QUICK=1: each briefly (CI), so none rots.
bench: bench-peers
	$(PY) bench/run_all.py $(if $(QUICK),--quick)

# The counts load does not change (instructions by callgrind, requests to the engine),
# measured briefly beside their baseline (bench/baseline.json); fails when one grew past
# its tolerance. UPDATE=1 records this run's values as the new baseline.
bench-check: bench-peers
	$(PY) bench/bench_check.py $(if $(UPDATE),--update)
