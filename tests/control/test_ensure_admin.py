"""The first admin's password: from FJORD_ADMIN_PASSWORD, or generated into a file only the
installation's user can read; only development mode shows it (`make run`'s terminal), since a
deployment's output ends up in logs other people read."""

import io
import stat

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db

CHOSEN = "chosen-by-the-operator-7Hq2"


@pytest.fixture
def deployment(settings, tmp_path, monkeypatch):
    settings.DEBUG = False
    settings.VAR_DIR = tmp_path
    monkeypatch.delenv("FJORD_ADMIN_PASSWORD", raising=False)
    return tmp_path


def ensure_admin() -> str:
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    return out.getvalue()


def test_the_password_comes_from_fjord_admin_password(deployment, monkeypatch):
    monkeypatch.setenv("FJORD_ADMIN_PASSWORD", CHOSEN)

    output = ensure_admin()

    assert authenticate(username="admin", password=CHOSEN) is not None
    assert CHOSEN not in output
    assert "FJORD_ADMIN_PASSWORD" in output
    assert list(deployment.iterdir()) == []


def test_a_generated_password_is_written_for_the_owner_only_never_printed(deployment):
    # Left by an earlier installation with a looser mode: the password must not land in it so.
    path = deployment / "first-admin-password"
    path.write_text("stale")
    path.chmod(0o644)

    output = ensure_admin()

    password = path.read_text().strip()
    assert authenticate(username="admin", password=password) is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert password not in output
    assert f"password in {path}" in output


def test_development_shows_the_password_on_the_terminal(deployment, settings):
    settings.DEBUG = True

    output = ensure_admin()

    username, password = output.strip().removeprefix("first admin login: ").split(" / ")
    assert authenticate(username=username, password=password) is not None
    assert list(deployment.iterdir()) == []


def test_an_existing_admin_keeps_its_password(deployment, monkeypatch):
    get_user_model().objects.create_superuser("root", password=CHOSEN)
    monkeypatch.setenv("FJORD_ADMIN_PASSWORD", "another-one-5Tz8")

    output = ensure_admin()

    assert authenticate(username="root", password=CHOSEN) is not None
    assert get_user_model().objects.filter(is_superuser=True).count() == 1
    assert "first admin login: root (password as set before" in output
