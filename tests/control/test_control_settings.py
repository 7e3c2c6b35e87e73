"""Settings read from the environment, checked in fresh interpreters so that each sees only
the variables the test gives it."""

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]

CONTROL_ENV_VARS = {
    "DJANGO_SECRET_KEY",
    "DJANGO_DEBUG",
    "DJANGO_ALLOWED_HOSTS",
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "DATABASE_URL",
    "REDIS_URL",
    "FJORD_BOOTSTRAP",
    "FJORD_METRICS_URL",
}


def control_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONTROL_ENV_VARS}
    env["DJANGO_SETTINGS_MODULE"] = "control.settings"
    return {**env, **values}


def load_settings(**values: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import json, django\n"
        "from django.conf import settings\n"
        "django.setup()\n"
        "print(json.dumps({'debug': settings.DEBUG, 'hosts': settings.ALLOWED_HOSTS,"
        " 'db': settings.DATABASES['default'], 'broker_url': settings.CELERY_BROKER_URL,"
        " 'layer': settings.CHANNEL_LAYERS['default']['BACKEND'],"
        " 'bootstrap': settings.FJORD_BOOTSTRAP, 'metrics': settings.FJORD_METRICS_URL},"
        " default=str))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=control_env(**values),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_local_defaults():
    result = load_settings()

    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["debug"] is True
    assert loaded["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert loaded["db"]["NAME"] == str(REPO / "var" / "control.sqlite3")
    assert loaded["broker_url"] == "filesystem://"
    assert loaded["layer"] == "channels.layers.InMemoryChannelLayer"
    assert loaded["bootstrap"] == "127.0.0.1:9092"
    assert loaded["metrics"] == "http://127.0.0.1:9308/metrics"


def test_production_settings_come_from_the_environment():
    result = load_settings(
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="a-real-secret",
        DJANGO_ALLOWED_HOSTS="fjord.example.com, console.example.com",
        DATABASE_URL="postgres://fjord:pw@db.example.com:5432/fjord",
        REDIS_URL="redis://cache.example.com:6379/0",
        FJORD_BOOTSTRAP="kafka-1:9092,kafka-2:9092",
    )

    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["debug"] is False
    assert loaded["hosts"] == ["fjord.example.com", "console.example.com"]
    assert loaded["db"]["ENGINE"] == "django.db.backends.postgresql"
    assert (loaded["db"]["HOST"], loaded["db"]["NAME"]) == ("db.example.com", "fjord")
    assert loaded["broker_url"] == "redis://cache.example.com:6379/0"
    assert loaded["layer"] == "channels_redis.core.RedisChannelLayer"
    assert loaded["bootstrap"] == "kafka-1:9092,kafka-2:9092"


def test_production_refuses_to_start_without_a_secret_key():
    result = load_settings(DJANGO_DEBUG="0")

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


@pytest.fixture
def postgres_database():
    """A throwaway database on the local PostgreSQL, dropped afterwards; yields its URL."""
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        pytest.skip("nothing answers on 127.0.0.1:5432 (make test starts a throwaway PostgreSQL)")
    errors = []
    for user in ("postgres", "root"):
        try:
            admin = psycopg.connect(
                host="127.0.0.1", port=5432, user=user, dbname="postgres", autocommit=True
            )
        except psycopg.OperationalError as exc:
            errors.append(f"{user}: {exc}")
            continue
        name = f"fjord_test_{uuid.uuid4().hex[:12]}"
        with admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                yield f"postgres://{user}@127.0.0.1:5432/{name}"
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    pytest.fail("PostgreSQL on 127.0.0.1:5432 accepts neither user: " + "; ".join(errors))


def test_migrate_runs_on_postgresql_from_database_url(postgres_database):
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=REPO,
        env=control_env(DATABASE_URL=postgres_database),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(postgres_database) as conn:
        applied = conn.execute(
            "SELECT count(*) FROM django_migrations WHERE app IN ('auth', 'sessions')"
        ).fetchone()[0]
    assert applied > 0
