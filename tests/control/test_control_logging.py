"""The control plane's log masks credentials: a database URL in a message or in a traceback
reaches stderr (daphne's, the worker's, the journal) without its password."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "control-db-pa55word"
URL = f"postgresql://fjord:{PASSWORD}@127.0.0.1:1/fjord"

LOG_THROUGH_DJANGO = """
import logging, os
import django
django.setup()
url = os.environ["DATABASE_URL"]
logging.getLogger("django.request").error("cannot reach %s", url)
try:
    raise ConnectionError(f"no answer from {url}")
except ConnectionError:
    logging.getLogger("api").exception("broker call failed")
"""


def test_a_database_url_is_logged_without_its_password():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "control.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": URL,
    }
    done = subprocess.run(
        [sys.executable, "-c", LOG_THROUGH_DJANGO],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    masked = "postgresql://fjord:****@127.0.0.1:1/fjord"
    assert f"cannot reach {masked}" in done.stderr
    assert f"ConnectionError: no answer from {masked}" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
