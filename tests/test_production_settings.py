"""Production settings (DEBUG off): HSTS, Secure and HttpOnly cookies, no "testserver"
host; and the web server as `make up` starts it (scripts/up.sh: DEBUG off, a generated
secret) answers a mistyped URL with the project's own 404, not Django's debug page."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.fixtures_services import ROOT
from tests.fixtures_web import AsgiServer

PROBE = """
import django, json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "harness_site.settings"
django.setup()
from django.conf import settings
from django.test import Client
login = Client().get("/accounts/login/", secure=True, HTTP_HOST="localhost")
print(json.dumps({
    "hsts": login.headers.get("Strict-Transport-Security", ""),
    "cookie": str(login.cookies.get("csrftoken", "")),
    "testserver": Client().get("/accounts/login/").status_code,
    "session_secure": settings.SESSION_COOKIE_SECURE,
    "session_httponly": settings.SESSION_COOKIE_HTTPONLY,
    "allowed_hosts": settings.ALLOWED_HOSTS,
}))
"""


def test_it_sends_hsts_and_secure_httponly_cookies_and_refuses_testserver_in_production() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, env={**env, "DEBUG": "0", "SECRET_KEY": "p" * 40}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["hsts"].startswith("max-age=31536000")
    assert "Secure" in seen["cookie"] and "HttpOnly" in seen["cookie"]
    assert seen["session_secure"] and seen["session_httponly"]
    assert "testserver" not in seen["allowed_hosts"] and seen["testserver"] == 400


@pytest.mark.django_db(transaction=True)
def test_it_shows_the_projects_own_404_when_started_like_make_up(tmp_path_factory: pytest.TempPathFactory) -> None:
    up_sh = (ROOT / "scripts" / "up.sh").read_text()
    assert 'export DEBUG="${DEBUG:-0}"' in up_sh and "secret_key" in up_sh
    # The settings scripts/up.sh exports, with a generated secret.
    server = AsgiServer(
        tmp_path_factory.mktemp("daphne"),
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        HARNESS_SECURE_COOKIES="0",
        HARNESS_SERVE_STATIC="1",
    )
    server.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{server.url}/runs/no-such-page/", timeout=20)
        page = missing.value.read().decode()
        assert missing.value.code == 404 and "There is nothing here" in page
        assert "URLconf" not in page and "Traceback" not in page
        with urllib.request.urlopen(f"{server.url}/static/css/harness.css", timeout=20) as css:
            assert css.status == 200
    finally:
        server.stop()
